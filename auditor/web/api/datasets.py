"""Datasets, their items and their import batches."""

from __future__ import annotations

from sqlalchemy import func, select

from auditor import ingest
from auditor.db import (
    Dataset,
    ImportAttempt,
    ImportBatch,
    Item,
    Role,
)
from auditor.ingest import IngestError
from auditor.web.api import serializers as s
from auditor.web.api.common import ADMIN, READ_OR_VENDOR, B, commit, get_dataset, workspace_rows
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.errors import ApiError
from auditor.web.readmodels import feeds
from auditor.web.security import READERS

__all__: list[str] = []  # the operations register themselves with the route table


# --- datasets and items -----------------------------------------------------------------------


@endpoint("GET", "/datasets", summary="List datasets", tag="datasets", roles=READ_OR_VENDOR, listing=True,
          query=[Param("name", "string", "Only datasets whose name contains this text.", max_length=200)],
          response=s.page_of("Dataset"))
def list_datasets(principal, db, name):
    """Datasets of the workspace (a vendor sees the datasets it is granted)."""
    stmt = workspace_rows(principal, Dataset, Dataset.name)
    if name:
        stmt = stmt.where(Dataset.name.contains(name, autoescape=True))
    if principal.role == Role.VENDOR:
        stmt = stmt.where(Dataset.id.in_(principal.grants or [-1]))
    return Listing(stmt, s.dataset, ["id", "name", "description", "labels", "data_version", "created_at"],
                   "datasets")


@endpoint("POST", "/datasets", summary="Create a dataset", tag="datasets", roles=ADMIN,
          body=B["DatasetCreate"], body_name="DatasetCreate", response=s.ref("Dataset"), status=201)
def create_dataset(principal, db, body):
    """A dataset with its ordered label set."""
    exists = db.scalar(select(Dataset.id).where(Dataset.workspace_id == principal.workspace_id,
                                                Dataset.name == body["name"].strip()))
    if exists is not None:
        raise ApiError(409, f"A dataset named {body['name']!r} already exists (id {exists}).", field="name")
    try:
        ds = ingest.create_dataset(db, body["name"], body["labels"], workspace=principal.workspace_slug,
                                   description=body.get("description", ""),
                                   quality_window=body.get("quality_window", "week"))
    except IngestError as exc:
        raise ApiError(400, str(exc), field="labels") from None
    commit(db, f"A dataset named {body['name']!r}")
    return s.dataset(ds)


@endpoint("GET", "/datasets/<int:dataset_id>", summary="Read a dataset", tag="datasets", roles=READ_OR_VENDOR,
          response=s.ref("Dataset"))
def read_dataset(principal, db, dataset_id):
    """One dataset."""
    return s.dataset(get_dataset(principal, db, dataset_id))


@endpoint("GET", "/datasets/<int:dataset_id>/feeds", summary="List live feeds", tag="datasets", roles=READERS,
          response=s.ref("FeedList"), cache=True)
def list_feeds(principal, db, dataset_id):
    """The dataset's Label Studio and MLflow connectors with their state: when each last
    received an event, synced or wrote verdicts back, and its last error."""
    return {"items": [s.feed(f) for f in feeds(db, get_dataset(principal, db, dataset_id).id)]}


@endpoint("GET", "/datasets/<int:dataset_id>/items", summary="List items", tag="datasets", roles=READERS,
          listing=True, response=s.page_of("Item"),
          query=[Param("external_id", "string", "Only the item with this external id."),
                 Param("has_gold", "boolean", "Only items with (true) or without (false) a gold label."),
                 Param("min_labels", "integer", "Only items with at least this many labels.", minimum=0,
                       maximum=1_000_000)])
def list_items(principal, db, dataset_id, external_id, has_gold, min_labels):
    """Items of a dataset with their current label counts and gold labels."""
    ds = get_dataset(principal, db, dataset_id)
    stmt = select(Item).where(Item.dataset_id == ds.id).order_by(Item.id)
    if external_id is not None:
        stmt = stmt.where(Item.external_id == external_id)
    if has_gold is not None:
        stmt = stmt.where(Item.gold_label.is_not(None) if has_gold else Item.gold_label.is_(None))
    labels = list(ds.labels)
    rows = None
    if min_labels:
        # label_counts is an array (PostgreSQL) or JSON (SQLite): filter in Python, per page.
        rows = [i for i in db.scalars(stmt) if sum(i.label_counts or []) >= min_labels]
    return Listing(rows if rows is not None else stmt, lambda i: s.item(i, labels),
                   ["id", "external_id", "gold_label", "gold_source", "label_counts", "n_labels"],
                   f"items-{ds.id}")


@endpoint("POST", "/datasets/<int:dataset_id>/items", summary="Create items", tag="datasets", roles=ADMIN,
          body=B["ItemsCreate"], body_name="ItemsCreate", status=201,
          response={"type": "object", "required": ["created", "existing"],
                    "properties": {"created": {"type": "integer"}, "existing": {"type": "integer"}}})
def create_items(principal, db, dataset_id, body):
    """Register items by external id before they are labeled (existing ids are left as they are)."""
    ds = get_dataset(principal, db, dataset_id)
    wanted = list(dict.fromkeys(i["external_id"] for i in body["items"]))
    existing = set()
    for start in range(0, len(wanted), 5000):
        chunk = wanted[start:start + 5000]
        existing.update(db.scalars(select(Item.external_id).where(Item.dataset_id == ds.id,
                                                                  Item.external_id.in_(chunk))))
    new = [w for w in wanted if w not in existing]
    zeros = [0] * len(ds.labels)
    db.add_all([Item(dataset_id=ds.id, external_id=w, label_counts=list(zeros)) for w in new])
    if new:
        ds.updated_at = func.now()  # the dataset changed (its cached pages must go)
    commit(db, "An item with one of these external ids")
    return {"created": len(new), "existing": len(existing)}


@endpoint("GET", "/datasets/<int:dataset_id>/items/<int:item_id>", summary="Read an item", tag="datasets",
          roles=READERS, response=s.ref("Item"))
def read_item(principal, db, dataset_id, item_id):
    """One item."""
    ds = get_dataset(principal, db, dataset_id)
    it = db.get(Item, item_id)
    if it is None or it.dataset_id != ds.id:
        raise ApiError(404, f"No item with id {item_id} in dataset {dataset_id}.", field="item_id")
    return s.item(it, list(ds.labels))


_KIND = Param("kind", "string", "Only those of this kind.", enum=("annotations", "gold", "predictions"))


def _uploads(principal, db, dataset_id: int, model, kind: str | None, serialize, columns: list[str], name: str):
    """A dataset's uploads of ``model`` (batches or rejected attempts), newest first; a vendor's own only."""
    ds = get_dataset(principal, db, dataset_id)
    stmt = select(model).where(model.dataset_id == ds.id).order_by(model.id.desc())
    if kind:
        stmt = stmt.where(model.kind == kind)
    if principal.role == Role.VENDOR:
        stmt = stmt.where(model.submitted_by_id == principal.user_id)
    return Listing(stmt, serialize, columns, f"{name}-{ds.id}")


@endpoint("GET", "/datasets/<int:dataset_id>/batches", summary="List import batches", tag="ingestion",
          roles=READ_OR_VENDOR, listing=True, response=s.page_of("Batch"), query=[_KIND])
def list_batches(principal, db, dataset_id, kind):
    """Accepted uploads, newest first (a vendor sees only its own submissions)."""
    return _uploads(principal, db, dataset_id, ImportBatch, kind, s.batch,
                    ["id", "kind", "format", "source_name", "release_id", "submitted_by", "row_count", "data_version",
                     "created_at"], "batches")


@endpoint("GET", "/datasets/<int:dataset_id>/import-attempts", summary="List rejected imports", tag="ingestion",
          roles=READ_OR_VENDOR, listing=True, response=s.page_of("ImportAttempt"), query=[_KIND])
def list_import_attempts(principal, db, dataset_id, kind):
    """Rejected uploads, newest first (the dataset's latest 200): who, when, format, and the first
    errors (a vendor sees only its own attempts). Nothing of their rows is kept."""
    return _uploads(principal, db, dataset_id, ImportAttempt, kind, s.import_attempt,
                    ["id", "kind", "format", "source_name", "submitted_by", "status_code", "bad_rows", "message",
                     "errors", "created_at"], "import-attempts")
