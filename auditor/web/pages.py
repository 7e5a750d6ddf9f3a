"""The dashboards' pages beyond the first ones (their views join the ``ui`` blueprint): alerts
(their lifecycle is in :mod:`auditor.web.alerting_pages`), audit runs, releases and their comparison,
vendors (with their prices and the workspace's currency), items and one item, a dataset's leaderboard,
and the API docs."""

from __future__ import annotations

import math

from flask import abort, flash, g, redirect, render_template, request, url_for
from jsonschema import Draft202012Validator
from sqlalchemy import select

from auditor.actions import prices
from auditor.actions.plans import request_plan
from auditor.actions.prices import PRICE_SETTERS
from auditor.db import AuditRun, Dataset, Item, Model, Release, Role
from auditor.web import dashboards, item_pages, timerange
from auditor.web.api.serializers import BODIES
from auditor.web.cache import cached
from auditor.web.db import get_session
from auditor.web.security import load_principal
from auditor.web.ui import MAX_ID, bp, dataset_arg, dataset_or_404, local_path, login_required

__all__: list[str] = []

#: Who may acknowledge an alert (as in the API).
_ACKNOWLEDGERS = frozenset({Role.ADMIN, Role.ANALYST})


def _int_arg(name: str) -> int | None:
    value = request.args.get(name, type=int)
    return value if value is not None and 0 <= value <= MAX_ID else None


@bp.get("/alerts")
@login_required()
@cached
def alerts():
    data = dashboards.alerts_page(get_session(), g.principal.workspace_id, request.args, user_id=g.principal.user_id,
                                  period=timerange.page_range("all"))
    return render_template("alerts.html", can_acknowledge=g.principal.role in _ACKNOWLEDGERS, **data)


@bp.get("/audit-runs/<int:run_id>")
@login_required()
@cached
def audit_run(run_id: int):
    db = get_session()
    run = db.get(AuditRun, run_id) if run_id <= MAX_ID else None
    ds = db.get(Dataset, run.dataset_id) if run is not None else None
    if ds is None or ds.workspace_id != g.principal.workspace_id:
        abort(404)
    return render_template("audit_run.html", **dashboards.audit_run_page(db, run, ds))


def _release(release_id: int | None) -> tuple[Release, Model]:
    db = get_session()
    row = db.execute(select(Release, Model).join(Model, Release.model_id == Model.id)
                     .where(Release.id == release_id, Model.workspace_id == g.principal.workspace_id)
                     ).first() if release_id is not None and 0 <= release_id <= MAX_ID else None
    if row is None:
        abort(404)
    return row[0], row[1]


@bp.get("/releases/<int:release_id>")
@login_required()
@cached
def release(release_id: int):
    rel, model = _release(release_id)
    data = dashboards.release_page(get_session(), rel, model, dataset_arg(), g.principal.workspace_id,
                                   request.args)
    return render_template("release.html", **data)


def _compared_ids() -> list[int | None] | None:
    """The releases to compare, in order: ``a`` and ``b`` (the first two), then each ``r``
    (at most :data:`~auditor.web.dashboards.COMPARE_MAX` in all); None when fewer than two
    are named. A value that is not a release id is a 404."""
    raw = [request.args[k] for k in ("a", "b") if request.args.get(k)] + \
        [v for v in request.args.getlist("r")[: dashboards.COMPARE_MAX] if v]
    if len(raw) < 2:
        return None
    ids = []
    for value in raw[: dashboards.COMPARE_MAX]:
        n = int(value) if value.isdigit() and len(value) <= 10 else None
        ids.append(n if n is not None and n <= MAX_ID else None)
    return list(dict.fromkeys(ids))


@bp.post("/releases/<int:release_id>/plan")
@login_required()
def ask_release_plan(release_id: int):
    """The plan panel's form: ask a worker for the release's plan (the CSRF token is checked first)."""
    rel, _ = _release(release_id)
    dataset_id = request.form.get("dataset_id", type=int)
    if dataset_id is None or not 0 <= dataset_id <= MAX_ID:
        abort(400, description="dataset_id: name the dataset whose plan to compute.")
    ds = dataset_or_404(dataset_id)
    request_plan(get_session(), rel.id, ds.id)
    flash("A worker is computing the plan; reload in a minute.")
    return redirect(url_for("ui.release", release_id=rel.id, dataset_id=ds.id, _anchor="plan"))


@bp.get("/compare")
@login_required()
@cached
def compare():
    """Releases side by side (``a`` and ``b``, and more as ``r``); without two, a form to pick them."""
    db = get_session()
    choices = db.execute(select(Release, Model).join(Model, Release.model_id == Model.id)
                         .where(Model.workspace_id == g.principal.workspace_id)
                         .order_by(Model.name, Release.released_at.desc().nulls_last(), Release.id.desc())
                         .limit(500)).all()
    ids = _compared_ids()
    if ids is None:
        return render_template("compare.html", choices=choices, pair=None, chosen=[], sides=[],
                               max_releases=dashboards.COMPARE_MAX)
    chosen = [_release(i) for i in ids]
    if len(chosen) < 2:
        abort(400, description="r: name at least two different releases to compare.")
    data = dashboards.compare_page(db, g.principal.workspace_id, chosen, dataset_arg())
    return render_template("compare.html", choices=choices, max_releases=dashboards.COMPARE_MAX, **data)


@bp.get("/vendors")
@login_required()
@cached
def vendors():
    return render_template("vendors.html", can_price=g.principal.role in PRICE_SETTERS,
                           **dashboards.vendors_index(get_session(), g.principal.workspace_id, request.args))


# What the price form may hold: the API's body of POST /vendor-prices (one set of rules).
_PRICE_BODY = Draft202012Validator(BODIES["VendorPriceSet"])
_PRICE_FIELDS = {
    "vendor": "give the vendor's name (at most 200 characters)",
    "price_per_label": "must be a number from 0 to 1,000,000,000",
    "currency": "must be a currency code of at most 8 letters, such as USD or EUR",
}


def _price_form() -> tuple[str, str, float | None, str | None]:
    """(action, vendor, price, currency) from the form, or a 400 naming the field."""
    form = request.form
    action = form.get("action", "set")
    if action not in ("set", "clear"):
        abort(400, description="action: must be 'set' or 'clear'.")
    vendor = form.get("vendor", "").strip()
    body: dict = {"vendor": vendor}
    price = currency = None
    if action == "set":
        raw = form.get("price_per_label", "").strip()
        try:
            price = float(raw)
        except ValueError:
            price = None
        if price is None or not math.isfinite(price):
            abort(400, description=f"price_per_label: {_PRICE_FIELDS['price_per_label']}; got {raw[:40]!r}.")
        body["price_per_label"] = price
        currency = form.get("currency", "").strip() or None
        if currency is not None:
            body["currency"] = currency
    # (clearing names the vendor only)
    errors = sorted((e for e in _PRICE_BODY.iter_errors(body) if action == "set" or e.validator != "required"),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        name = str(errors[0].absolute_path[0]) if errors[0].absolute_path else "vendor"
        got = body.get(name)
        abort(400, description=f"{name}: {_PRICE_FIELDS.get(name, errors[0].message)}; got {str(got)[:40]!r}.")
    return action, vendor, price, currency


@bp.post("/vendor-prices")
@login_required()
def set_vendor_price():
    """Set (``action=set``: ``vendor``, ``price_per_label``, ``currency``) or clear
    (``action=clear``) a vendor's price per label, as ``POST``/``DELETE /api/v1/vendor-prices``
    do (the CSRF token is checked before this runs). The stored plans are dropped: their
    costs are stale."""
    if g.principal.role not in PRICE_SETTERS:
        abort(403)
    action, vendor, price, currency = _price_form()
    db = get_session()
    if action == "clear":
        if not prices.clear_vendor_price(db, g.principal.workspace_id, vendor):
            abort(404, description=f"No price is set for the vendor {vendor!r}.")
        flash(f"The price of {vendor} was cleared.")
    else:
        row = prices.set_vendor_price(db, g.principal.workspace_id, vendor, price, currency)
        flash(f"{vendor} charges {row.price_per_label:.10g} {row.currency} per label.")
    return redirect(local_path(request.form.get("next", "")) or url_for("ui.vendors"))


@bp.post("/workspace-currency")
@login_required()
def set_workspace_currency():
    """The currency the workspace's costs are shown in (admins; the CSRF token is checked before
    this runs). New prices without a currency of their own are in it too."""
    from auditor.db import Workspace
    from auditor.web.currency import valid_currency

    if g.principal.role != Role.ADMIN:
        abort(403)
    raw = request.form.get("currency", "")
    code = valid_currency(raw)
    if code is None:
        abort(400, description=f"currency: must be a currency code of 3 to 8 letters, such as USD or EUR; "
                               f"got {raw[:40]!r}.")
    db = get_session()
    db.get(Workspace, g.principal.workspace_id).currency = code
    db.commit()
    flash(f"Costs are now shown in {code}.")
    return redirect(local_path(request.form.get("next", "")) or url_for("ui.vendors"))


@bp.get("/datasets/<int:dataset_id>/items")
@login_required()
@cached
def items(dataset_id: int):
    return render_template("items.html", **item_pages.items_page(get_session(), dataset_or_404(dataset_id), request.args))


#: An item id in a URL longer than this names no item (ids are stored up to this length).
_MAX_ITEM_ID = 512


@bp.get("/datasets/<int:dataset_id>/items/<path:external_id>")
@login_required()
@cached
def item(dataset_id: int, external_id: str):
    """One item: its labels by annotator and vendor, gold, the plurality, each release's prediction."""
    db = get_session()
    ds = dataset_or_404(dataset_id)
    found = db.scalar(select(Item).where(Item.dataset_id == ds.id, Item.external_id == external_id)
                      ) if len(external_id) <= _MAX_ITEM_ID else None
    if found is None:
        abort(404)
    return render_template("item.html", **item_pages.item_page(db, ds, found))


@bp.get("/datasets/<int:dataset_id>/leaderboard")
@login_required()
@cached
def leaderboard(dataset_id: int):
    """Every annotator of every vendor on a dataset, ranked by the lower bound on its accuracy."""
    return render_template("leaderboard.html", **dashboards.leaderboard_page(get_session(), dataset_or_404(dataset_id),
                                                                              request.args))


@bp.get("/api/v1/docs")
def api_docs():
    """The API's reference, rendered in the browser from its OpenAPI document (Swagger UI, served
    from this site; no login needed, as for the document itself)."""
    load_principal(allow_session=True)  # the navigation, for a logged-in reader
    return render_template("api_docs.html")
