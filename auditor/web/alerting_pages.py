"""The pages of alerts that reach people (their views join the ``ui`` blueprint): an alert's own
page with its lifecycle (acknowledge, reopen, assign, snooze, comment) and thread; the admins'
alert routing page (channels, rules, thresholds); and a dataset's imports (accepted batches
and rejected attempts with their first errors).

The forms post with their CSRF token and go through the same steps and checks as the API
(:mod:`auditor.web.api.alerting`); a bad field is a 400 that names it.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime

from flask import abort, flash, g, redirect, render_template, request, url_for
from jsonschema import Draft202012Validator
from sqlalchemy import select

from auditor.actions import alerts as alert_actions
from auditor.actions.alerts import STEPPERS
from auditor.alerting import lifecycle
from auditor.alerting import settings as ws_settings
from auditor.alerting.routing import ALERT_KINDS
from auditor.db import (
    Alert,
    AlertChannel,
    AlertRule,
    AlertSeverity,
    ChannelKind,
    Dataset,
    ImportAttempt,
    ImportBatch,
    Role,
    User,
    WebhookDelivery,
)
from auditor.web.api import alerting as api
from auditor.web.api.serializers import BODIES
from auditor.web.db import get_session, in_workspace
from auditor.web.errors import ApiError
from auditor.web.tables import Column, like_pattern, table_state
from auditor.web.ui import MAX_ID, bp, dataset_or_404, local_path, login_required

__all__: list[str] = []

#: Who takes the lifecycle steps (as in the API).
DELIVERIES_SHOWN = 20


@contextmanager
def _as_page_error():
    """An API error of a shared check, answered as a page's error (the message names the field)."""
    try:
        yield
    except ApiError as exc:
        get_session().rollback()
        abort(exc.status, description=exc.message)


def _check(body_name: str, body: dict) -> None:
    """The API's schema of ``body_name`` on a form's fields (one set of rules): a 400 naming the field."""
    errors = sorted(Draft202012Validator(BODIES[body_name]).iter_errors(body),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        where = ".".join(str(p) for p in errors[0].absolute_path) or "form"
        abort(400, description=f"{where}: {errors[0].message[:200]}")


def _admin() -> None:
    if g.principal.role != Role.ADMIN:
        abort(403)


def _owned(model, object_id: int):
    """The workspace's ``model`` object, or a 404."""
    obj = in_workspace(get_session(), model, object_id, g.principal.workspace_id) if object_id <= MAX_ID else None
    if obj is None:
        abort(404)
    return obj


def _back(default: str):
    return redirect(local_path(request.form.get("next", "")) or default)


# --- an alert and its lifecycle -------------------------------------------------------------------


def _alert(alert_id: int, *, lock: bool = False) -> Alert:
    stmt = select(Alert).where(Alert.id == alert_id, Alert.workspace_id == g.principal.workspace_id)
    a = get_session().scalar(stmt.with_for_update() if lock else stmt) if alert_id <= MAX_ID else None
    if a is None:
        abort(404)
    return a


@bp.get("/alerts/<int:alert_id>")
@login_required()
def alert(alert_id: int):
    """An alert, where it stands, and its thread (never cached: it changes with every step)."""
    db = get_session()
    a = _alert(alert_id)
    users = list(db.scalars(select(User).where(User.workspace_id == g.principal.workspace_id,
                                               User.is_active.is_(True)).order_by(User.email).limit(500)))
    return render_template("alert.html", a=a, view=api.detail(db, a), users=users, now=datetime.now(UTC),
                           can_step=g.principal.role in STEPPERS)


def _step(alert_id: int, fn, *args, done: str):
    if g.principal.role not in STEPPERS:
        abort(403)
    db = get_session()
    a = _alert(alert_id, lock=True)
    try:
        changed = fn(db, a, *args, actor=api.actor(g.principal))
    except lifecycle.LifecycleError as exc:
        abort(exc.status, description=f"{exc.field}: {exc}")
    if changed:
        flash(f"Alert {a.id} {done}.")
    return _back(url_for("ui.alerts"))


@bp.post("/alerts/<int:alert_id>/acknowledge")
@login_required()
def acknowledge_alert(alert_id: int):
    """Mark an alert as seen (the CSRF token is checked before this runs); again changes nothing."""
    return _step(alert_id, alert_actions.acknowledge, done="acknowledged")


@bp.post("/alerts/<int:alert_id>/reopen")
@login_required()
def reopen_alert(alert_id: int):
    return _step(alert_id, alert_actions.reopen, done="reopened")


@bp.post("/alerts/<int:alert_id>/assign")
@login_required()
def assign_alert(alert_id: int):
    raw = request.form.get("user_id", "").strip()
    if raw and not raw.isdigit():
        abort(400, description=f"user_id: choose a user of the workspace; got {raw[:40]!r}.")
    user_id = int(raw) if raw else None
    if user_id is not None and user_id > MAX_ID:
        abort(400, description="user_id: no such user.")
    return _step(alert_id, alert_actions.assign, user_id, done="assigned" if user_id else "unassigned")


@bp.post("/alerts/<int:alert_id>/snooze")
@login_required()
def snooze_alert(alert_id: int):
    """``until``: a date (snoozed until its midnight, UTC) or a time; empty (or ``wake``): wake it now."""
    raw = "" if "wake" in request.form else request.form.get("until", "").strip()
    with _as_page_error():
        until = api.parse_time(raw[:40], "until") if raw else None
    return _step(alert_id, alert_actions.snooze, until, done="snoozed" if until else "woken")


@bp.post("/alerts/<int:alert_id>/comments")
@login_required()
def comment_alert(alert_id: int):
    return _step(alert_id, alert_actions.comment, request.form.get("body", ""), done="commented on")


# --- the admins' alert routing ----------------------------------------------------------------------


@bp.get("/alerting")
@login_required()
def alerting():
    """Channels, rules and thresholds of the workspace (admins only; never cached)."""
    _admin()
    db = get_session()
    w = g.principal.workspace_id
    channels = list(db.scalars(select(AlertChannel).where(AlertChannel.workspace_id == w).order_by(AlertChannel.id)))
    rules = list(db.scalars(select(AlertRule).where(AlertRule.workspace_id == w).order_by(AlertRule.id)))
    datasets = db.execute(select(Dataset.id, Dataset.name).where(Dataset.workspace_id == w)
                          .order_by(Dataset.name).limit(500)).all()
    deliveries = db.execute(select(WebhookDelivery, AlertChannel.name)
                            .join(AlertChannel, AlertChannel.id == WebhookDelivery.channel_id)
                            .where(AlertChannel.workspace_id == w)
                            .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
                            .limit(DELIVERIES_SHOWN)).all()
    editing = request.args.get("edit", type=int)
    editing = next((r for r in rules if r.id == editing), None)
    return render_template("alerting.html", channels=channels, rules=rules, datasets=datasets,
                           dataset_names=dict(datasets), deliveries=deliveries, editing=editing,
                           kinds=ALERT_KINDS, severities=[s.value for s in AlertSeverity],
                           channel_kinds=[k.value for k in ChannelKind], url_hint=api.url_hint,
                           settings=ws_settings.effective(db, w, api.worker_defaults()))


def _channel_form() -> dict:
    form = request.form
    body: dict = {"kind": form.get("kind", ""), "name": form.get("name", "").strip()}
    if body["kind"] == ChannelKind.EMAIL.value:
        body["recipients"] = [r.strip() for r in form.get("recipients", "").replace(";", ",").replace("\n", ",")
                              .split(",") if r.strip()]
    else:
        body["url"] = form.get("url", "").strip()
    return body


def _added(add, body: dict, what: str):
    """Create a channel or rule through the API's ``add`` (errors shown on the page), then back to the page."""
    with _as_page_error():
        obj = add(g.principal, get_session(), body)
    flash(f"{what} {obj.name} added.")
    return redirect(url_for("ui.alerting"))


@bp.post("/alerting/channels")
@login_required()
def add_channel():
    _admin()
    body = _channel_form()
    _check("AlertChannelCreate", body)
    return _added(api.add_channel, body, "Channel")


@bp.post("/alerting/channels/<int:channel_id>/<any(activate, deactivate, delete, test):action>")
@login_required()
def channel_action(channel_id: int, action: str):
    _admin()
    db = get_session()
    c = _owned(AlertChannel, channel_id)
    name = c.name
    if action == "delete":
        api.delete_answer(db, c, api.channel)
    elif action == "test":
        api.send_test(g.principal, db, c)
    else:
        api.set_channel_active(g.principal, db, c.id, action == "activate")
    flash({"delete": f"Channel {name} deleted.", "test": f"A test message to {name} is on its way.",
           "activate": f"Channel {name} active.", "deactivate": f"Channel {name} inactive."}[action])
    return redirect(url_for("ui.alerting"))


def _ints(name: str) -> list[int]:
    out = []
    for raw in request.form.getlist(name)[:200]:
        if not raw.isdigit() or int(raw) > MAX_ID:
            abort(400, description=f"{name}: not an id; got {raw[:40]!r}.")
        out.append(int(raw))
    return out


def _rule_form() -> dict:
    form = request.form
    body = {"name": form.get("name", "").strip(), "kinds": form.getlist("kinds")[:10],
            "severities": form.getlist("severities")[:10], "dataset_ids": _ints("dataset_ids"),
            "channel_ids": _ints("channel_ids"), "active": form.get("active") == "on"}
    _check("AlertRuleSet", {k: sorted(set(v)) if isinstance(v, list) else v for k, v in body.items()})
    return body


@bp.post("/alerting/rules")
@login_required()
def add_rule():
    _admin()
    return _added(api.add_rule, _rule_form(), "Rule")


@bp.post("/alerting/rules/<int:rule_id>")
@login_required()
def edit_rule(rule_id: int):
    _admin()
    db = get_session()
    r = _owned(AlertRule, rule_id)
    if request.form.get("action") == "delete":
        api.delete_answer(db, r, api.rule)
        flash(f"Rule {r.name} deleted.")
        return redirect(url_for("ui.alerting"))
    body = _rule_form()
    with _as_page_error():
        api.fill_rule(g.principal, db, r, body)
        db.commit()
    flash(f"Rule {r.name} saved.")
    return redirect(url_for("ui.alerting"))


@bp.post("/alerting/settings")
@login_required()
def save_settings():
    """Each setting's field: a value, or empty for the deployment's default."""
    _admin()
    values = {}
    for s in ws_settings.SETTINGS:
        raw = request.form.get(s.name, "").strip()[:40]
        values[s.name] = raw or None
    db = get_session()
    try:
        changed = ws_settings.store(db, g.principal.workspace_id, values, actor=g.principal.email,
                                    actor_id=g.principal.user_id)
    except ValueError as exc:
        db.rollback()
        abort(400, description=str(exc))
    db.commit()
    flash("Thresholds saved: " + (", ".join(changed) if changed else "nothing changed") + ".")
    return redirect(url_for("ui.alerting"))


# --- a dataset's imports -------------------------------------------------------------------------------

BATCH_COLUMNS = (
    Column("when", "when", first="desc"), Column("who", "who"), Column("kind", "kind"),
    Column("format", "format", sortable=False), Column("source", "source", sortable=False),
    Column("rows", "rows", numeric=True, first="desc"), Column("version", "data version", numeric=True, first="desc"),
    Column("outcome", "outcome", sortable=False),
)
ATTEMPT_COLUMNS = (
    Column("when", "when", first="desc"), Column("who", "who"), Column("kind", "kind"),
    Column("format", "format", sortable=False), Column("source", "source", sortable=False),
    Column("bad", "bad rows", numeric=True, first="desc"), Column("errors", "first errors", sortable=False),
)


def imports_page(db, ds: Dataset, args) -> dict:
    """The dataset's accepted batches and rejected attempts, each table sorted and paged in SQL."""
    kinds = ("annotations", "gold", "predictions")
    batches = table_state("batches", BATCH_COLUMNS, default_sort="when", default_direction="desc", per_page=25,
                          prefix="b_", args=args, query_label="who or source contains", filters={"kind": kinds})
    stmt = select(ImportBatch).where(ImportBatch.dataset_id == ds.id)
    if "kind" in batches.filters:
        stmt = stmt.where(ImportBatch.kind == batches.filters["kind"])
    if batches.q:
        pattern = like_pattern(batches.q)
        stmt = stmt.where(ImportBatch.submitted_by.ilike(pattern, escape="\\")
                          | ImportBatch.source_name.ilike(pattern, escape="\\"))
    stmt = batches.sql_order(stmt, {"when": ImportBatch.created_at, "who": ImportBatch.submitted_by,
                                    "kind": ImportBatch.kind, "rows": ImportBatch.row_count,
                                    "version": ImportBatch.data_version}, ImportBatch.id)
    batches.fetch(db, stmt, scalars=True)
    attempts = table_state("attempts", ATTEMPT_COLUMNS, default_sort="when", default_direction="desc", per_page=25,
                           prefix="r_", args=args, query_label="who or source contains")
    stmt = select(ImportAttempt).where(ImportAttempt.dataset_id == ds.id)
    if attempts.q:
        pattern = like_pattern(attempts.q)
        stmt = stmt.where(ImportAttempt.submitted_by.ilike(pattern, escape="\\")
                          | ImportAttempt.source_name.ilike(pattern, escape="\\"))
    stmt = attempts.sql_order(stmt, {"when": ImportAttempt.created_at, "who": ImportAttempt.submitted_by,
                                     "kind": ImportAttempt.kind, "bad": ImportAttempt.bad_rows}, ImportAttempt.id)
    attempts.fetch(db, stmt, scalars=True)
    return {"ds": ds, "batches": batches, "attempts": attempts, "kinds": kinds}


@bp.get("/datasets/<int:dataset_id>/imports")
@login_required()
def imports(dataset_id: int):
    """Every batch of the dataset (who, when, rows, outcome) and its rejected attempts (never cached:
    a rejected attempt changes nothing else a cached page would notice)."""
    return render_template("imports.html", **imports_page(get_session(), dataset_or_404(dataset_id), request.args))
