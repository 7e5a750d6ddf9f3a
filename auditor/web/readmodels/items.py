"""Read models of the item pages: a dataset's items (filtered by disagreement, a release's
error against the plurality, or gold against the plurality) and one item in full.

Every read is bounded: the items list pages by item id (keyset), and a filter that reads
an item's labels looks at no more than :data:`SCAN_ITEMS` items per page (the page then
says where it stopped and goes on from there); one item's page reads its labels, history
and predictions by key, each list capped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from auditor.db import (
    Annotation,
    AnnotationHistory,
    Annotator,
    Dataset,
    ImportBatch,
    Item,
    Model,
    Prediction,
    Release,
)
from auditor.web.tables import Column, table_state

__all__ = ["ITEM_FILTERS", "item_page", "items_page", "plurality", "predicted_label"]

ITEM_COLUMNS = (Column("item", "item"), Column("labels", "labels", sortable=False),
                Column("n", "labels given", sortable=False, numeric=True),
                Column("plurality", "plurality", sortable=False), Column("gold", "gold", sortable=False),
                Column("prediction", "prediction", sortable=False))
#: The filters that read an item's labels: what each keeps.
ITEM_FILTERS = {"disagreement": "the annotators disagree (more than one label given)",
                "model_error": "the release's label is not the plurality",
                "gold_mismatch": "gold is not the plurality"}
#: Items a filtered page looks at, at most (in id order, from where the last page stopped).
SCAN_ITEMS = 5_000
_CHUNK = 500
#: The most labels, superseded labels and releases one item's page lists.
ITEM_LABELS = 500
ITEM_HISTORY = 200
ITEM_RELEASES = 200


def plurality(counts: list[int] | None, n_classes: int) -> list[int]:
    """The most frequent label codes of an item (all of them on a tie; none without labels)."""
    counts = list(counts or [])[:n_classes]
    top = max(counts, default=0)
    return [i for i, n in enumerate(counts) if n == top and n > 0]


def predicted_label(p: Prediction | None) -> int | None:
    if p is None:
        return None
    if p.label is not None:
        return p.label
    probs = p.probabilities or []
    return max(range(len(probs)), key=lambda i: probs[i]) if probs else None


def _aware(when: datetime | None) -> datetime:
    """A time to sort by (SQLite gives naive UTC; none sorts last, newest first)."""
    if when is None:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _name(labels: list[str], code: int | None) -> str | None:
    return labels[code] if code is not None and 0 <= code < len(labels) else None


def dataset_releases(db: Session, ds: Dataset, limit: int = ITEM_RELEASES) -> list[tuple[int, str]]:
    """(release id, "model version") of each release with predictions on the dataset, newest
    first: read from the uploads of predictions (one row per upload, not per item)."""
    ids = select(ImportBatch.release_id).where(ImportBatch.dataset_id == ds.id, ImportBatch.release_id.is_not(None)
                                               ).distinct().subquery()
    rows = db.execute(select(Release.id, Model.name, Release.version).join(Model, Release.model_id == Model.id)
                      .where(Release.id.in_(select(ids.c.release_id)))
                      .order_by(Release.released_at.desc().nulls_last(), Release.id.desc()).limit(limit)).all()
    return [(rid, f"{name} {version}") for rid, name, version in rows]


@dataclass
class _Scan:
    """Where a filtered page stopped: the last item id looked at, and whether items remain."""

    last: str | None = None
    more: bool = False
    scanned: int = 0


def _keep(show: str | None, it: Item, n_classes: int, predicted: int | None) -> bool:
    top = plurality(it.label_counts, n_classes)
    if show == "disagreement":
        return sum(1 for n in (it.label_counts or [])[:n_classes] if n) > 1
    if show == "gold_mismatch":
        return it.gold_label is not None and bool(top) and it.gold_label not in top
    if show == "model_error":
        return predicted is not None and bool(top) and predicted not in top
    return True


def _predictions(db: Session, release_id: int | None, item_ids: list[int]) -> dict[int, Prediction]:
    """The release's predictions of these items, by the prediction key (release, item)."""
    if release_id is None or not item_ids:
        return {}
    return {p.item_id: p for p in db.scalars(select(Prediction).where(Prediction.release_id == release_id,
                                                                       Prediction.item_id.in_(item_ids)))}


def items_page(db: Session, ds: Dataset, args=None) -> dict:
    """The dataset's items, one page at a time by item id (keyset: ``after``/``before`` an id, so
    any page costs one index range), filtered by an id prefix, to gold items, and by ``show``
    (:data:`ITEM_FILTERS`; ``release_id`` names the release whose errors are shown)."""
    args = args if args is not None else {}
    releases = dataset_releases(db, ds)
    table = table_state("items", ITEM_COLUMNS, default_sort="item", per_page=50, args=args,
                        filters={"gold": ("1",), "show": tuple(ITEM_FILTERS),
                                 "release_id": tuple(str(r) for r, _ in releases)},
                        query_label="item id starts with")
    table.volatile = ("after", "before")
    show = table.filters.get("show")
    release_id = int(table.filters["release_id"]) if "release_id" in table.filters else None
    if show == "model_error" and release_id is None and releases:
        release_id = releases[0][0]
    after, before = (args.get("after") or "")[:512], (args.get("before") or "")[:512]
    stmt = select(Item).where(Item.dataset_id == ds.id)
    if table.q:
        escaped = table.q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        stmt = stmt.where(Item.external_id.like(escaped + "%", escape="\\"))
    if table.filters.get("gold") or show == "gold_mismatch":
        stmt = stmt.where(Item.gold_label.is_not(None))
    labels = list(ds.labels)
    out: dict[str, Any] = {"dataset": ds, "table": table, "releases": releases, "release_id": release_id,
                           "show": show, "filters": ITEM_FILTERS, "scanned": None}
    if show is None:
        rows, next_after, previous_before = _keyset_page(db, stmt, table, after, before)
        predicted = _predictions(db, release_id, [it.id for it in rows])
    else:
        rows, scan, predicted = _filtered_page(db, stmt, table, after, show, release_id, len(labels))
        next_after, previous_before = (scan.last if scan.more else None), None
        out["scanned"] = scan
    table.rows = [_item_row(it, labels, predicted.get(it.id)) for it in rows]
    table.has_next = next_after is not None
    out.update(next_after=next_after, previous_before=previous_before, from_start=bool(after or before))
    return out


def _item_row(it: Item, labels: list[str], prediction: Prediction | None) -> dict:
    counts = list(it.label_counts or [0] * len(labels))[: len(labels)]
    top = plurality(counts, len(labels))
    predicted = predicted_label(prediction)
    return {"item": it.external_id, "counts": {labels[i]: n for i, n in enumerate(counts) if n},
            "n": sum(counts), "plurality": [labels[i] for i in top], "gold": _name(labels, it.gold_label),
            "gold_off": it.gold_label is not None and bool(top) and it.gold_label not in top,
            "prediction": _name(labels, predicted), "model_off": predicted is not None and bool(top) and predicted not in top}


def _keyset_page(db: Session, stmt, table, after: str, before: str):
    descending = table.direction == "desc"
    going_back = bool(before) and not after
    if after:
        stmt = stmt.where(Item.external_id < after if descending else Item.external_id > after)
    elif before:
        stmt = stmt.where(Item.external_id > before if descending else Item.external_id < before)
    backwards = descending != going_back
    stmt = stmt.order_by(Item.external_id.desc() if backwards else Item.external_id.asc()).limit(table.per_page + 1)
    rows = list(db.scalars(stmt))
    more = len(rows) > table.per_page
    rows = rows[: table.per_page]
    if going_back:
        rows.reverse()
    first, last = (rows[0].external_id, rows[-1].external_id) if rows else (None, None)
    # Forward (from the start or after an id): more rows mean a next page; having come "after" one, a previous.
    # Backward (before an id): the id we came from is on the next page; more rows mean a previous one.
    has_next = bool(rows) if going_back else more
    has_previous = more if going_back else bool(after)
    return rows, (last if has_next else None), (first if has_previous else None)


def _filtered_page(db: Session, stmt, table, after: str, show: str, release_id: int | None, n_classes: int):
    """Items kept by ``show``, forward from ``after``, looking at :data:`SCAN_ITEMS` items at most."""
    descending = table.direction == "desc"
    order = Item.external_id.desc() if descending else Item.external_id.asc()
    kept: list[Item] = []
    predicted: dict[int, Prediction] = {}
    scan = _Scan(last=after or None)
    while scan.scanned < SCAN_ITEMS and len(kept) < table.per_page:
        page = stmt
        if scan.last:
            page = page.where(Item.external_id < scan.last if descending else Item.external_id > scan.last)
        chunk = list(db.scalars(page.order_by(order).limit(min(_CHUNK, SCAN_ITEMS - scan.scanned))))
        if not chunk:
            scan.more = False
            return kept, scan, predicted
        found = _predictions(db, release_id, [it.id for it in chunk])
        for it in chunk:
            scan.scanned += 1
            scan.last = it.external_id
            if _keep(show, it, n_classes, predicted_label(found.get(it.id))):
                kept.append(it)
                if it.id in found:
                    predicted[it.id] = found[it.id]
                if len(kept) == table.per_page:
                    break
    # Whether anything is left after the last item looked at.
    rest = stmt.where(Item.external_id < scan.last if descending else Item.external_id > scan.last) if scan.last \
        else stmt
    scan.more = db.scalar(rest.with_only_columns(Item.id).limit(1)) is not None
    return kept, scan, predicted


def item_page(db: Session, ds: Dataset, it: Item) -> dict:
    """One item: its labels by annotator and vendor, gold, the plurality (consensus), each
    release's prediction and probabilities, and its history (labels replaced, when)."""
    labels = list(ds.labels)
    current = db.execute(select(Annotation, Annotator).join(Annotator, Annotator.id == Annotation.annotator_id)
                         .where(Annotation.item_id == it.id, Annotation.dataset_id == ds.id)
                         .order_by(Annotator.vendor.nulls_last(), Annotator.external_id).limit(ITEM_LABELS)).all()
    by_vendor: dict[str, dict[str, int]] = {}
    for a, person in current:
        vendor = by_vendor.setdefault(person.vendor or "", {})
        name = _name(labels, a.label) or str(a.label)
        vendor[name] = vendor.get(name, 0) + 1
    counts = list(it.label_counts or [0] * len(labels))[: len(labels)]
    top = plurality(counts, len(labels))
    history = db.execute(select(AnnotationHistory, Annotator.external_id, Annotator.vendor)
                         .join(Annotator, Annotator.id == AnnotationHistory.annotator_id)
                         .where(AnnotationHistory.dataset_id == ds.id, AnnotationHistory.item_id == it.id)
                         .order_by(AnnotationHistory.created_at.desc(), AnnotationHistory.id.desc())
                         .limit(ITEM_HISTORY)).all()
    releases = dataset_releases(db, ds)
    preds = {p.release_id: p for p in db.scalars(select(Prediction).where(
        tuple_(Prediction.release_id, Prediction.item_id).in_([(r, it.id) for r, _ in releases] or [(-1, -1)])))}
    predictions = []
    for rid, name in releases:
        p = preds.get(rid)
        if p is None:
            continue
        code = predicted_label(p)
        probs = list(p.probabilities or [])
        predictions.append({"release_id": rid, "release": name, "label": _name(labels, code),
                            "probability": probs[code] if code is not None and code < len(probs) else None,
                            "probabilities": {labels[i]: x for i, x in enumerate(probs[: len(labels)])},
                            "agrees": code in top if top else None,
                            "right": None if it.gold_label is None or code is None else code == it.gold_label})
    events = [{"at": a.annotated_at or a.created_at, "annotator": person.external_id, "vendor": person.vendor,
               "label": _name(labels, a.label), "what": "labelled", "version": a.data_version} for a, person in current]
    events += [{"at": h.annotated_at or h.created_at, "annotator": ext, "vendor": vendor,
                "label": _name(labels, h.label), "what": f"replaced in data version {h.superseded_version}"
                if h.change == "relabel" else f"{h.change} in data version {h.superseded_version}",
                "version": h.data_version} for h, ext, vendor in history]
    events.sort(key=lambda e: _aware(e["at"]), reverse=True)
    n_labels = db.scalar(select(func.count()).select_from(Annotation)
                         .where(Annotation.item_id == it.id, Annotation.dataset_id == ds.id))
    return {"dataset": ds, "item": it, "labels": labels, "current": current, "n_labels": n_labels,
            "listed_labels": ITEM_LABELS, "by_vendor": by_vendor,
            "counts": {labels[i]: n for i, n in enumerate(counts) if n}, "plurality": [labels[i] for i in top],
            "gold": _name(labels, it.gold_label), "gold_source": it.gold_source, "predictions": predictions,
            "events": events[: ITEM_LABELS + ITEM_HISTORY], "history_capped": len(history) >= ITEM_HISTORY}
