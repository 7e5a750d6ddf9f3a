"""Annotators: a dataset's leaderboard, an annotator's page, confusion matrices and disagreements."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from auditor.audit.store import latest_runs
from auditor.db import (
    Annotation,
    Annotator,
    Dataset,
    Item,
    QualityChange,
    QualityWindow,
    VendorReport,
)
from auditor.jsonable import finite
from auditor.stats.confusion import confusion_matrix
from auditor.web.readmodels.common import _pooled, _quality_chart, _weeks
from auditor.web.tables import Column, table_state
from auditor.web.timerange import TimeRange, time_range

LEADERBOARD_COLUMNS = (
    Column("rank", "rank", sortable=False, numeric=True),
    Column("annotator", "annotator"), Column("vendor", "vendor"),
    Column("lower", "lower bound (95%)", numeric=True, first="desc",
           title="Hoeffding 95% lower bound on the annotator's accuracy (Theorem 3): the ranking"),
    Column("agreement", "agreement with the others", numeric=True, first="desc",
           title="agreement with the plurality of the other annotators on its items (the point estimate)"),
    Column("items", "items", numeric=True, first="desc", title="items where at least one other annotator labelled"),
)

_LEADER_KEYS = {"annotator": lambda a: a["annotator"], "vendor": lambda a: a["vendor"] or "",
                "lower": lambda a: a["lower"], "agreement": lambda a: a["agreement"], "items": lambda a: a["n_items"]}


def leaderboard_page(db: Session, ds: Dataset, args=None) -> dict:
    """Every annotator on the dataset in its latest audit, all vendors together, ranked by the
    lower bound on its accuracy (not the point estimate: twenty lucky items do not top the
    list); filtered by vendor and annotator id, paged. Reads the latest audit's reports only."""
    run = latest_runs(db, [ds.id]).get(ds.id)
    people = []
    if run is not None:
        for vendor, records in db.execute(select(VendorReport.vendor, VendorReport.annotators)
                                          .where(VendorReport.audit_run_id == run.id)):
            people += [(vendor, r) for r in records or []]
        people += [(None, r) for r in (run.summary or {}).get("annotators_without_vendor") or []]
    rows = [{"annotator": r.get("annotator"), "vendor": vendor, "lower": r.get("lower_confidence"),
             "agreement": r.get("agreement"), "n_items": r.get("n_items")} for vendor, r in people]
    vendors = sorted({r["vendor"] for r in rows if r["vendor"]})
    table = table_state("leaderboard", LEADERBOARD_COLUMNS, default_sort="lower", default_direction="desc",
                        per_page=50, args=args, filters={"vendor": tuple(vendors)}, query_label="annotator id contains")
    ranked = table.sort_rows(rows, _LEADER_KEYS, tiebreak=lambda a: (str(a["vendor"] or ""), str(a["annotator"])))
    # The rank is by the lower bound whatever the order shown.
    for i, r in enumerate(sorted(rows, key=lambda a: -(a["lower"] if a["lower"] is not None else -1.0))):
        r["rank"] = i + 1 if r["lower"] is not None else None
    if table.q:
        ranked = [r for r in ranked if table.q.lower() in str(r["annotator"]).lower()]
    if "vendor" in table.filters:
        ranked = [r for r in ranked if r["vendor"] == table.filters["vendor"]]
    table.page_rows(ranked)
    return {"dataset": ds, "run": run, "table": table, "vendors": vendors}


def annotator_page(db: Session, ds: Dataset, person: Annotator, *, period: TimeRange | None = None) -> dict:
    """One annotator on one dataset: its weekly series, its accuracy on gold, the changes found,
    its bound in the latest audit, the items it labelled, its latest disagreements and its
    confusion matrix against gold. ``period``: the weeks, changes and disagreements shown."""
    period = period or time_range({}, default="all")
    q, c = QualityWindow, QualityChange
    windows = list(db.scalars(select(q).where(q.dataset_id == ds.id, q.grouping == "annotator",
                                              q.group_name == person.external_id, *period.where(q.window_start))
                              .order_by(q.window_key, q.metric)))
    changes = list(db.scalars(select(c).where(c.dataset_id == ds.id, c.grouping == "annotator",
                                              c.group_name == person.external_id, *period.where(c.detected_at))
                              .order_by(c.detected_at.desc(), c.id.desc()).limit(200)))
    n_items = db.scalar(select(func.count()).select_from(Annotation)
                        .where(Annotation.dataset_id == ds.id, Annotation.annotator_id == person.id))
    weeks = _weeks(windows)
    gold, gold_items = _pooled(windows, "gold_accuracy")
    agreement, agreement_items = _pooled(windows, "agreement")
    # Its line in the latest audit's report of its vendor (the Theorem 3 bound on its accuracy).
    run = latest_runs(db, [ds.id]).get(ds.id)
    report = db.scalar(select(VendorReport.annotators).where(
        VendorReport.audit_run_id == (run.id if run is not None else -1),
        VendorReport.vendor == (person.vendor or "")))
    audit = next((a for a in report or [] if a.get("annotator") == person.external_id), None)
    if audit is None and run is not None and not person.vendor:
        audit = next((a for a in (run.summary or {}).get("annotators_without_vendor") or []
                      if a.get("annotator") == person.external_id), None)
    return {"dataset": ds, "annotator": person, "n_items": n_items, "weeks": weeks, "changes": changes,
            "n_labels": sum(w["n_labels"] for w in weeks),
            "chart": _quality_chart(windows, changes, batch=ds.quality_window == "batch"),
            "gold_pooled": gold, "gold_items": gold_items, "agreement_pooled": agreement,
            "agreement_items": agreement_items, "audit": audit, "run": run,
            "disagreements": disagreements(db, ds, person, period=period), "recent_labels": RECENT_LABELS,
            "period": period, "confusion": confusion_view(db, ds, annotator_ids=[person.id])}


#: Gold items a confusion matrix reads at most (the first by item id); a page says when there are more.
CONFUSION_GOLD_ITEMS = 20_000


def confusion_view(db: Session, ds: Dataset, *, annotator_ids: list[int] | None = None,
                   vendor: str | None = None) -> dict | None:
    """The confusion matrix against gold of some annotators' labels (``annotator_ids``) or a
    vendor's (``vendor``) on the dataset's gold items (at most :data:`CONFUSION_GOLD_ITEMS`,
    the first by item id): one grouped statement of at most K² rows, each gold item's labels read
    by the annotation key (item first). None when no such label is on a gold item."""
    golden = select(Item.id, Item.gold_label).where(Item.dataset_id == ds.id, Item.gold_label.is_not(None))
    # In the order of the (dataset, item id) index: the scan stops at the cap.
    gold = golden.order_by(Item.external_id).limit(CONFUSION_GOLD_ITEMS).subquery()
    stmt = (select(gold.c.gold_label, Annotation.label, func.count())
            .join(Annotation, (Annotation.item_id == gold.c.id) & (Annotation.dataset_id == ds.id)))
    if annotator_ids is not None:
        stmt = stmt.where(Annotation.annotator_id.in_(annotator_ids or [-1]))
    if vendor is not None:
        stmt = stmt.join(Annotator, Annotator.id == Annotation.annotator_id).where(Annotator.vendor == vendor)
    labels = list(ds.labels)
    cells = [(t, p, n) for t, p, n in db.execute(stmt.group_by(gold.c.gold_label, Annotation.label))
             if 0 <= t < len(labels) and 0 <= p < len(labels)]
    # (Asked whether or not there are cells: the same statements for every page.)
    capped = db.scalar(golden.with_only_columns(Item.id).order_by(Item.external_id)
                       .offset(CONFUSION_GOLD_ITEMS).limit(1)) is not None
    if not cells:
        return None
    t, p, n = zip(*cells, strict=True)
    m = confusion_matrix(t, p, n, n_classes=len(labels))
    return {"labels": labels, "counts": m.counts.tolist(), "n": m.n, "accuracy": m.accuracy,
            "recall": [finite(x) for x in m.recall],
            "precision": [finite(x) for x in m.precision],
            "capped": capped, "max_items": CONFUSION_GOLD_ITEMS}


#: The annotator's most recent labels looked at for disagreements, and how many are listed.
RECENT_LABELS = 500
LISTED_DISAGREEMENTS = 25


def disagreements(db: Session, ds: Dataset, person: Annotator, *, period: TimeRange | None = None) -> list[dict]:
    """Of the annotator's most recent labels (by when they were labelled, or uploaded when the
    upload gave no time; within ``period``), those that differ from every plurality label of
    the *other* annotators on the item (ties counted as agreement), newest first. One index
    range (dataset, annotator, time), however many labels the annotator has."""
    when = func.coalesce(Annotation.annotated_at, Annotation.created_at)
    rows = db.execute(
        select(Annotation.label, when, Item.external_id, Item.label_counts, Item.gold_label)
        .join(Item, Item.id == Annotation.item_id)
        .where(Annotation.dataset_id == ds.id, Annotation.annotator_id == person.id,
               *(period.where(when) if period is not None else ()))
        .order_by(when.desc(), Annotation.item_id.desc()).limit(RECENT_LABELS)).all()
    labels = list(ds.labels)
    out = []
    for label, when, item, counts, gold in rows:
        others = list(counts or [0] * len(labels))[: len(labels)]
        if label < len(others):
            others[label] -= 1
        top = max(others, default=0)
        if top <= 0 or others[label] == top:
            continue  # no other label on the item, or its label is (one of) the others' plurality
        out.append({"item": item, "label": labels[label] if label < len(labels) else label, "at": when,
                    "others": {labels[i]: n for i, n in enumerate(others) if n},
                    "consensus": [labels[i] for i, n in enumerate(others) if n == top],
                    "gold": labels[gold] if gold is not None and gold < len(labels) else None})
        if len(out) == LISTED_DISAGREEMENTS:
            break
    return out



# --- alerts ---------------------------------------------------------------------------------------
