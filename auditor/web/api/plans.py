"""Audit plans: what to label next to settle a release, the relabel list, vendor prices and
the vendors' expert equivalence per unit cost."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import defer

from auditor.actions import prices
from auditor.actions.plans import request_plan
from auditor.actions.prices import PRICE_SETTERS
from auditor.audit import plans
from auditor.db import (
    AuditRun,
    Certification,
    Dataset,
    Item,
    ReleasePlan,
    VendorPrice,
    VendorReport,
)
from auditor.jsonable import finite
from auditor.web.api.common import B, get_dataset, get_release, workspace_rows
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.api.serializers import BODIES, SCHEMAS, page_of, ref
from auditor.web.errors import ApiError
from auditor.web.security import READERS

__all__: list[str] = []  # the operations register themselves with the route table

_NUM_OR_NULL = {"type": ["number", "null"]}
SCHEMAS.update({
    "ReleasePlan": {"type": "object", "required": ["release_id", "dataset_id", "status"], "properties": {
        "release_id": {"type": "integer"}, "dataset_id": {"type": "integer"},
        "status": {"type": "string", "enum": ["pending", "succeeded", "failed"]},
        "current": {"type": "boolean", "description": "Computed from the dataset's latest audit."},
        "audit_run_id": {"type": ["integer", "null"]}, "data_version": {"type": ["integer", "null"]},
        "requested_at": {"type": ["string", "null"], "format": "date-time"},
        "finished_at": {"type": ["string", "null"], "format": "date-time"},
        "error": {"type": ["string", "null"]},
        "plan": {"description": "auditor.stats.plan_certification's result (designs, recommended, certifiable, "
                                "margins, notes); null until computed."}}},
    "RelabelItem": {"type": "object", "required": ["rank", "item_id", "external_id"], "properties": {
        "rank": {"type": "integer"}, "item_id": {"type": "integer"}, "external_id": {"type": "string"},
        "labels": {"type": "integer"}, "expected_gain": _NUM_OR_NULL}},
    "VendorPrice": {"type": "object", "required": ["vendor", "price_per_label", "currency"], "properties": {
        "vendor": {"type": "string"}, "price_per_label": {"type": "number"}, "currency": {"type": "string"},
        "updated_at": {"type": ["string", "null"], "format": "date-time"}}},
    "VendorCost": {"type": "object", "required": ["vendor"], "properties": {
        "vendor": {"type": "string"}, "audit_run_id": {"type": "integer"},
        "u_t": _NUM_OR_NULL, "agreement": _NUM_OR_NULL, "expert_equivalence": _NUM_OR_NULL,
        "labels_per_item": _NUM_OR_NULL, "price_per_label": _NUM_OR_NULL, "currency": {"type": ["string", "null"]},
        "cost_per_item": _NUM_OR_NULL,
        "experts_per_unit_cost": {"type": ["number", "null"], "description": "Expert raters one unit of money "
                                  "spent on this vendor's labels is worth: expert equivalence of its raters per "
                                  "item ÷ (labels per item × price per label)."}}},
})
BODIES["VendorPriceSet"] = {"type": "object", "required": ["vendor", "price_per_label"], "additionalProperties": False,
                            "properties": {"vendor": {"type": "string", "minLength": 1, "maxLength": 200,
                                                      "pattern": r"\S"},
                                           "price_per_label": {"type": "number", "minimum": 0, "maximum": 1e9},
                                           "currency": {"type": "string", "minLength": 1, "maxLength": 8,
                                                        "pattern": r"^[A-Za-z]+$"}}}

_DATASET = Param("dataset_id", "integer", "The dataset (needed when the release has predictions on several).")


def _t(value):
    return None if value is None else value.isoformat()


def _release_dataset(principal, db, release_id: int, dataset_id: int | None) -> tuple[int, int]:
    release = get_release(principal, db, release_id)
    if dataset_id is not None:
        return release.id, get_dataset(principal, db, dataset_id).id
    found = db.scalars(select(AuditRun.dataset_id).join(Certification, Certification.audit_run_id == AuditRun.id)
                       .where(Certification.release_id == release.id).distinct().limit(2)).all()
    if not found:
        raise ApiError(404, "This release has not been audited on any dataset yet: there is no plan.",
                       field="release_id")
    if len(found) > 1:
        raise ApiError(400, "This release has predictions on several datasets: name one with dataset_id.",
                       field="dataset_id")
    return release.id, found[0]


def plan_view(row: ReleasePlan | None, release_id: int, dataset_id: int, current: bool) -> dict:
    if row is None:
        return {"release_id": release_id, "dataset_id": dataset_id, "status": plans.PENDING, "current": False,
                "audit_run_id": None, "data_version": None, "requested_at": None, "finished_at": None,
                "error": None, "plan": None}
    return {"release_id": release_id, "dataset_id": dataset_id, "status": row.status, "current": current,
            "audit_run_id": row.audit_run_id, "data_version": row.data_version,
            "requested_at": _t(row.requested_at), "finished_at": _t(row.finished_at), "error": row.error,
            "plan": row.plan}


def stored_plan(db, release_id: int, dataset_id: int) -> dict:
    """The stored plan as the API shows it (read only: a GET writes nothing and asks no worker)."""
    row, audit = plans.current(db, release_id, dataset_id)
    return plan_view(row, release_id, dataset_id, plans.is_current(row, audit))


def ask_plan(db, release_id: int, dataset_id: int) -> dict:
    """Ask a worker for the plan when it is missing or older than the latest audit (one row
    write and one message; no computing here); the plan as it stands."""
    request_plan(db, release_id, dataset_id)
    return stored_plan(db, release_id, dataset_id)


_PLAN_DOC = """What to label next, and how much, to settle the release's verdict: for a grid of designs
    (new items × labels per item, more labels on existing items, per vendor when prices are
    set) the probability that the verdict certifies it and the cost; the cheapest design
    reaching 80%; or "cannot be certified at any budget". Computed by a worker after each
    audit (and when asked with POST): ``current`` is false while the stored plan is older
    than the latest audit (``status`` ``pending`` while one is on its way); poll again."""


@endpoint("GET", "/releases/<int:release_id>/plan", summary="Read a release's audit plan", tag="plans",
          roles=READERS, query=[_DATASET], response=ref("ReleasePlan"), description=_PLAN_DOC)
def read_release_plan(principal, db, release_id, dataset_id):
    rid, did = _release_dataset(principal, db, release_id, dataset_id)
    return stored_plan(db, rid, did)


@endpoint("POST", "/releases/<int:release_id>/plan", summary="Ask for a release's audit plan", tag="plans",
          roles=READERS, query=[_DATASET], response=ref("ReleasePlan"), status=202)
def request_release_plan(principal, db, release_id, dataset_id):
    """Ask a worker for the release's plan from the latest audit, unless the stored one is
    current or one is on its way; answers the plan as it stands (poll ``GET`` for the new one)."""
    rid, did = _release_dataset(principal, db, release_id, dataset_id)
    return ask_plan(db, rid, did)


@endpoint("GET", "/releases/<int:release_id>/relabel-list", summary="List the items to relabel first",
          tag="plans", roles=READERS, listing=True, query=[_DATASET], response=page_of("RelabelItem"))
def list_relabel_items(principal, db, release_id, dataset_id):
    """The release's labelled items ranked by how much one more label is expected to tighten the
    margin L − U (the top of the list, from the stored plan): ``format=csv`` is the file to
    send to a vendor. Under the anytime verdict labels reaching an item after it entered the
    audit do not change that verdict (see the plan's notes)."""
    rid, did = _release_dataset(principal, db, release_id, dataset_id)
    row = db.scalars(select(ReleasePlan).where(ReleasePlan.release_id == rid, ReleasePlan.dataset_id == did)).first()
    if row is None or not row.relabel:
        raise ApiError(404, f"No plan of this release has been computed yet: POST /api/v1/releases/{rid}/plan "
                            "asks a worker for one.", field="release_id")
    ids = [int(r[0]) for r in row.relabel]
    ext = dict(db.execute(select(Item.id, Item.external_id).where(Item.dataset_id == did, Item.id.in_(ids))).all())
    rows = [{"rank": i + 1, "item_id": int(r[0]), "external_id": ext.get(int(r[0]), ""), "labels": int(r[2]),
             "expected_gain": finite(r[1])} for i, r in enumerate(row.relabel)]
    return Listing(rows, lambda x: x, ["rank", "item_id", "external_id", "labels", "expected_gain"],
                   f"relabel-release-{rid}-dataset-{did}")


# --- vendor prices ---------------------------------------------------------------------------


def _price(p: VendorPrice) -> dict:
    return {"vendor": p.vendor, "price_per_label": p.price_per_label, "currency": p.currency,
            "updated_at": _t(p.updated_at)}


@endpoint("GET", "/vendor-prices", summary="List vendor prices", tag="plans", roles=READERS, listing=True,
          response=page_of("VendorPrice"))
def list_vendor_prices(principal, db):
    """Each vendor's price per label in this workspace (what plans cost their designs with)."""
    stmt = workspace_rows(principal, VendorPrice, VendorPrice.vendor)
    return Listing(stmt, _price, ["vendor", "price_per_label", "currency", "updated_at"], "vendor-prices")


@endpoint("POST", "/vendor-prices", summary="Set a vendor's price per label", tag="plans", roles=PRICE_SETTERS,
          body=B["VendorPriceSet"], body_name="VendorPriceSet", response=ref("VendorPrice"))
def set_vendor_price(principal, db, body):
    """The price per label of a vendor (a vendor is the name on its annotators); replaces its old price.
    The workspace's stored plans are dropped: the next read asks for plans at the new prices."""
    row = prices.set_vendor_price(db, principal.workspace_id, body["vendor"], body["price_per_label"], body.get("currency"))
    return _price(row)


@endpoint("DELETE", "/vendor-prices", summary="Remove a vendor's price", tag="plans", roles=PRICE_SETTERS,
          query=[Param("vendor", "string", "The vendor.", required=True, max_length=200)],
          response={"type": "object", "required": ["deleted"], "properties": {"deleted": {"type": "boolean"}}})
def delete_vendor_price(principal, db, vendor):
    """Plans stop costing this vendor's labels."""
    if not prices.clear_vendor_price(db, principal.workspace_id, vendor):
        raise ApiError(404, "No price is set for this vendor.", field="vendor")
    return {"deleted": True}


def vendor_costs(db, dataset: Dataset) -> list[dict]:
    """Per vendor of the latest audit: quality figures, price, and expert equivalence per unit cost."""
    audit = plans.latest_audit(db, dataset.id)
    if audit is None:
        return []
    prices = plans.price_rows(db, dataset.workspace_id)
    out = []
    for r in db.scalars(select(VendorReport).options(defer(VendorReport.annotators), defer(VendorReport.details))
                        .where(VendorReport.audit_run_id == audit.id).order_by(VendorReport.vendor)):
        price = prices.get(r.vendor)
        cost = plans.vendor_cost(r.n_items, r.n_annotations, r.expert_equivalence,
                                 None if price is None else price.price_per_label)
        out.append({"vendor": r.vendor, "audit_run_id": audit.id, "u_t": finite(r.u_t), "agreement": finite(r.agreement),
                    "expert_equivalence": finite(r.expert_equivalence), "labels_per_item": cost["labels_per_item"],
                    "price_per_label": None if price is None else price.price_per_label,
                    "currency": None if price is None else price.currency, "cost_per_item": cost["cost_per_item"],
                    "experts_per_unit_cost": cost["experts_per_unit_cost"]})
    return out


@endpoint("GET", "/datasets/<int:dataset_id>/vendor-costs", summary="Compare vendors per unit cost", tag="plans",
          roles=READERS, listing=True, response=page_of("VendorCost"))
def list_vendor_costs(principal, db, dataset_id):
    """Each vendor of the latest audit beside its price: how many expert raters its raters on an item
    are worth (expert equivalence), what they cost per item, and the ratio — expert raters per unit
    of money. Vendors without a price, or without expert labels to compare with, have nulls."""
    ds = get_dataset(principal, db, dataset_id)
    return Listing(vendor_costs(db, ds), lambda x: x,
                   ["vendor", "audit_run_id", "u_t", "agreement", "expert_equivalence", "labels_per_item",
                    "price_per_label", "currency", "cost_per_item", "experts_per_unit_cost"],
                   f"vendor-costs-{ds.id}")
