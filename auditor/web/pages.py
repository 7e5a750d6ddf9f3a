"""The dashboards' pages beyond the first ones (their views join the ``ui`` blueprint): alerts
(with acknowledging), audit runs, releases and their comparison, vendors, items, and the API docs."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import abort, flash, g, redirect, render_template, request, url_for
from sqlalchemy import select

from auditor.db import Alert, AuditRun, Dataset, Model, Release, Role
from auditor.web import dashboards
from auditor.web.cache import cached
from auditor.web.db import get_session
from auditor.web.security import load_principal
from auditor.web.ui import _MAX_ID, _dataset, bp, local_path, login_required

__all__: list[str] = []

#: Who may acknowledge an alert (as in the API).
_ACKNOWLEDGERS = frozenset({Role.ADMIN, Role.ANALYST})


def _int_arg(name: str) -> int | None:
    value = request.args.get(name, type=int)
    return value if value is not None and 0 <= value <= _MAX_ID else None


@bp.get("/alerts")
@login_required()
@cached
def alerts():
    data = dashboards.alerts_page(get_session(), g.principal.workspace_id, request.args)
    return render_template("alerts.html", can_acknowledge=g.principal.role in _ACKNOWLEDGERS, **data)


@bp.post("/alerts/<int:alert_id>/acknowledge")
@login_required()
def acknowledge_alert(alert_id: int):
    """Mark an alert as seen (the CSRF token is checked before this runs); again changes nothing."""
    if g.principal.role not in _ACKNOWLEDGERS:
        abort(403)
    db = get_session()
    alert = db.scalar(select(Alert).where(Alert.id == alert_id, Alert.workspace_id == g.principal.workspace_id)
                      .with_for_update()) if alert_id <= _MAX_ID else None
    if alert is None:
        abort(404)
    if alert.acknowledged_at is None:
        alert.acknowledged_at = datetime.now(UTC)
        alert.acknowledged_by_id = g.principal.user_id
        db.commit()
        flash(f"Alert {alert.id} acknowledged.")
    return redirect(local_path(request.form.get("next", "")) or url_for("ui.alerts"))


@bp.get("/audit-runs/<int:run_id>")
@login_required()
@cached
def audit_run(run_id: int):
    db = get_session()
    run = db.get(AuditRun, run_id) if run_id <= _MAX_ID else None
    ds = db.get(Dataset, run.dataset_id) if run is not None else None
    if ds is None or ds.workspace_id != g.principal.workspace_id:
        abort(404)
    return render_template("audit_run.html", **dashboards.audit_run_page(db, run, ds))


def _release(release_id: int | None) -> tuple[Release, Model]:
    db = get_session()
    row = db.execute(select(Release, Model).join(Model, Release.model_id == Model.id)
                     .where(Release.id == release_id, Model.workspace_id == g.principal.workspace_id)
                     ).first() if release_id is not None and 0 <= release_id <= _MAX_ID else None
    if row is None:
        abort(404)
    return row[0], row[1]


@bp.get("/releases/<int:release_id>")
@login_required()
@cached
def release(release_id: int):
    rel, model = _release(release_id)
    data = dashboards.release_page(get_session(), rel, model, _int_arg("dataset_id"), g.principal.workspace_id,
                                   request.args)
    return render_template("release.html", **data)


@bp.get("/compare")
@login_required()
@cached
def compare():
    """Two releases side by side (``a`` and ``b``); without them, a form to pick them."""
    db = get_session()
    choices = db.execute(select(Release, Model).join(Model, Release.model_id == Model.id)
                         .where(Model.workspace_id == g.principal.workspace_id)
                         .order_by(Model.name, Release.released_at.desc().nulls_last(), Release.id.desc())
                         .limit(500)).all()
    if "a" not in request.args or "b" not in request.args:
        return render_template("compare.html", choices=choices, pair=None, sides=[])
    first, second = _release(_int_arg("a")), _release(_int_arg("b"))
    data = dashboards.compare_page(db, g.principal.workspace_id, first, second, _int_arg("dataset_id"))
    return render_template("compare.html", choices=choices, **data)


@bp.get("/vendors")
@login_required()
@cached
def vendors():
    return render_template("vendors.html", **dashboards.vendors_index(get_session(), g.principal.workspace_id,
                                                                      request.args))


@bp.get("/datasets/<int:dataset_id>/items")
@login_required()
@cached
def items(dataset_id: int):
    return render_template("items.html", **dashboards.items_page(get_session(), _dataset(dataset_id), request.args))


@bp.get("/api/v1/docs")
def api_docs():
    """The API's reference, rendered in the browser from its OpenAPI document (Swagger UI, served
    from this site; no login needed, as for the document itself)."""
    load_principal(allow_session=True)  # the navigation, for a logged-in reader
    return render_template("api_docs.html")
