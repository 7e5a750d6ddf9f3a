"""Vendors: the vendor page (its datasets, weekly quality, annotators) and the vendors' index."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from auditor.audit import plans
from auditor.audit.store import latest_runs
from auditor.db import (
    Alert,
    Annotator,
    AuditRun,
    AuditStatus,
    Dataset,
    QualityChange,
    QualityWindow,
    VendorPrice,
    VendorReport,
)
from auditor.jsonable import finite
from auditor.web.readmodels.annotators import confusion_view
from auditor.web.readmodels.common import (
    QUALITY_METRICS,
    _epoch_ms,
    _group_key,
    _pooled,
    _quality_chart,
    _recent,
)
from auditor.web.tables import Column, table_state
from auditor.web.timerange import TimeRange, time_range

ANNOTATOR_COLUMNS = (
    Column("annotator", "annotator"),
    Column("agreement", "agreement, latest week", numeric=True,
           title="agreement with the other annotators' consensus in the annotator's newest week, with its 95% interval"),
    Column("gold", "gold accuracy, latest week", numeric=True, title="accuracy on gold items in its newest week with gold"),
    Column("change", "detected change", first="desc", title="the newest change the detector found"),
    Column("items", "items (latest audit)", numeric=True, first="desc",
           title="items where at least one other annotator labelled too"),
    Column("audit_agreement", "agreement with the others (latest audit)", numeric=True),
    Column("lower", "lower bound (95%)", numeric=True, first="desc",
           title="the Hoeffding 95% lower bound on the annotator's accuracy in the latest audit: the ranking "
                 "(a few lucky items do not put an annotator on top)"),
)

_ANNOTATOR_KEYS = {
    "annotator": lambda a: a["annotator"],
    "agreement": lambda a: a["agreement"].value if a["agreement"] else None,
    "gold": lambda a: a["gold"].value if a["gold"] else None,
    "change": lambda a: _epoch_ms(a["change"].detected_at) if a["change"] else None,
    "items": lambda a: (a["audit"] or {}).get("n_items"),
    "audit_agreement": lambda a: (a["audit"] or {}).get("agreement"),
    "lower": lambda a: (a["audit"] or {}).get("lower_confidence"),
}


def vendor_page(db: Session, workspace_id: int, vendor: str, *, dataset_ids=None, args=None,
                with_price: bool = True, period: TimeRange | None = None) -> dict:
    """``dataset_ids``: only these datasets (a vendor user sees the datasets it is granted).
    ``args``: the query string (``dataset_id`` picks the dataset shown in detail; the annotator
    table's sort, filter and page). ``with_price``: the vendor's price per label and its expert
    equivalence per unit cost on each dataset (for those who may read prices). ``period``: the
    weeks charted, the changes and alerts listed and the audits charted (the latest figures
    stay the latest)."""
    args = {} if args is None else args
    period = period or time_range({}, default="all")
    price = plans.price_rows(db, workspace_id, [vendor]).get(vendor) if with_price else None
    by_dataset = _vendor_reports(db, workspace_id, vendor, dataset_ids)
    # The vendor's weekly quality: its whole series on each dataset (the charts) and its changes.
    series = _vendor_series(db, workspace_id, vendor, dataset_ids, period)
    for ds in db.scalars(select(Dataset).where(Dataset.id.in_(list(set(series) - set(by_dataset)) or [-1]))):
        by_dataset[ds.id] = {"dataset": ds, "reports": []}
    changes = _vendor_changes(db, list(by_dataset), vendor, period)

    # One dataset in detail (the first by name unless the query names another): its charts and
    # its annotator table, sorted, filtered and paged; worst first by default.
    entries = sorted(by_dataset.values(), key=lambda e: e["dataset"].name)
    wanted = args.get("dataset_id")
    selected = next((e for e in entries if str(e["dataset"].id) == wanted), entries[0] if entries else None)
    sel_id = selected["dataset"].id if selected is not None else -1
    # Its annotators' newest window of each metric and newest change (on that dataset only: the
    # other datasets' rows show the vendor's own figures).
    keys = (select(Dataset.id.label("dataset_id"), _group_key(db, Annotator.external_id).label("group_name"))
            .join(Annotator, Annotator.workspace_id == Dataset.workspace_id)
            .where(Dataset.id == sel_id, Annotator.vendor == vendor))
    latest = _recent(db, keys, "annotator")
    # Only the latest report's per-annotator bounds are read (not every run's).
    latest_id = selected["reports"][-1][0].id if selected is not None and selected["reports"] else -1
    bounds = db.scalar(select(VendorReport.annotators).where(VendorReport.id == latest_id)) or []
    # Datasets with windows but no report yet: their number of annotators with a window.
    unreported = [e["dataset"].id for e in entries if not e["reports"] and e is not selected]
    counted = _annotators_with_windows(db, workspace_id, vendor, unreported)

    charts = []
    for entry in entries:
        _vendor_entry(entry, price, series.get(entry["dataset"].id, []), changes, counted)
        charts.append(entry)
        if entry is selected:
            _selected_entry(entry, series.get(entry["dataset"].id, []), changes, latest, bounds, period)
            entry["sees"] = _sees(db, entry["dataset"].id, vendor)
    table = table_state("annotators-1", ANNOTATOR_COLUMNS, default_sort="lower", default_direction="desc",
                        per_page=50, args=args, filters={"changed": ("1",)}, query_label="annotator id contains")
    if selected is not None:
        selected["confusion"] = confusion_view(db, selected["dataset"], vendor=vendor)
        people = selected["annotators"]
        if table.q:
            people = [a for a in people if table.q.lower() in a["annotator"].lower()]
        if table.filters.get("changed"):
            people = [a for a in people if a["change"] is not None]
        table.page_rows(table.sort_rows(people, _ANNOTATOR_KEYS, tiebreak=lambda a: a["annotator"]))
        selected["table"] = table
    alert_stmt = select(Alert).where(Alert.workspace_id == workspace_id, Alert.subject == vendor,
                                     *period.where(Alert.created_at))
    if dataset_ids is not None:
        alert_stmt = alert_stmt.where(Alert.dataset_id.in_(list(dataset_ids) or [-1]))
    alerts = list(db.scalars(alert_stmt.order_by(Alert.created_at.desc()).limit(50)))
    return {"vendor": vendor, "datasets": charts, "selected": selected, "table": table, "alerts": alerts,
            "with_price": with_price, "price": price, "period": period}


def _vendor_reports(db: Session, workspace_id: int, vendor: str, dataset_ids) -> dict[int, dict]:
    """The vendor's succeeded reports by dataset, oldest first (without the per-annotator
    lists, read for the latest report only)."""
    stmt = (select(VendorReport, AuditRun, Dataset).options(defer(VendorReport.annotators), defer(VendorReport.details))
            .join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
            .join(Dataset, AuditRun.dataset_id == Dataset.id)
            .where(Dataset.workspace_id == workspace_id, VendorReport.vendor == vendor,
                   AuditRun.status == AuditStatus.SUCCEEDED)
            .order_by(Dataset.name, AuditRun.data_version, AuditRun.id))
    if dataset_ids is not None:
        stmt = stmt.where(Dataset.id.in_(list(dataset_ids) or [-1]))
    by_dataset: dict[int, dict] = {}
    for rep, run, ds in db.execute(stmt).all():
        entry = by_dataset.setdefault(ds.id, {"dataset": ds, "reports": []})
        entry["reports"].append((rep, run))
    return by_dataset


def _vendor_series(db: Session, workspace_id: int, vendor: str, dataset_ids,
                   period: TimeRange) -> dict[int, list[QualityWindow]]:
    """The vendor's quality windows in the period, by dataset."""
    q = QualityWindow
    wstmt = (select(q).join(Dataset, q.dataset_id == Dataset.id)
             .where(Dataset.workspace_id == workspace_id, q.grouping == "vendor", q.group_name == vendor,
                    *period.where(q.window_start))
             .order_by(q.dataset_id, q.window_key, q.metric))
    if dataset_ids is not None:
        wstmt = wstmt.where(Dataset.id.in_(list(dataset_ids) or [-1]))
    series: dict[int, list[QualityWindow]] = defaultdict(list)
    for r in db.scalars(wstmt):
        series[r.dataset_id].append(r)
    return series


def _vendor_changes(db: Session, ids: list[int], vendor: str, period: TimeRange) -> dict[int, list[QualityChange]]:
    """The vendor's quality changes detected in the period, by dataset, newest first."""
    changes: dict[int, list[QualityChange]] = defaultdict(list)
    for ch in db.scalars(select(QualityChange).where(QualityChange.dataset_id.in_(ids or [-1]),
                                                     QualityChange.grouping == "vendor",
                                                     QualityChange.group_name == vendor,
                                                     *period.where(QualityChange.detected_at))
                         .order_by(QualityChange.detected_at.desc(), QualityChange.id.desc())):
        changes[ch.dataset_id].append(ch)
    return changes


def _annotators_with_windows(db: Session, workspace_id: int, vendor: str, dataset_ids: list[int]) -> dict[int, int]:
    """How many of the vendor's annotators have a quality window, on each of these datasets."""
    if not dataset_ids:
        return {}
    qw = QualityWindow
    return dict(db.execute(
        select(qw.dataset_id, func.count(func.distinct(qw.group_name)))
        .where(qw.dataset_id.in_(dataset_ids), qw.grouping == "annotator",
               qw.group_name.in_(select(Annotator.external_id).where(Annotator.workspace_id == workspace_id,
                                                                     Annotator.vendor == vendor)))
        .group_by(qw.dataset_id)).all())


def _vendor_entry(entry: dict, price, windows: list[QualityWindow], changes: Mapping[int, list],
                  counted: Mapping[int, int]) -> None:
    """One dataset's row of the vendor page: its latest report, cost, pooled gold accuracy and
    newest weeks."""
    ds_id = entry["dataset"].id
    reps = entry["reports"]
    entry["latest"] = reps[-1][0] if reps else None
    entry["latest_run"] = reps[-1][1] if reps else None
    entry["cost"] = _with_price({}, price, entry["latest"])
    entry["changes"] = changes.get(ds_id, [])
    entry["gold_pooled"], entry["gold_items"] = _pooled(windows, "gold_accuracy")
    newest = {m: max((w for w in windows if w.metric == m), key=lambda w: w.window_key, default=None)
              for m in QUALITY_METRICS}
    entry["week"], entry["gold_week"] = newest["agreement"], newest["gold_accuracy"]
    entry["n_annotators"] = entry["latest"].n_annotators if reps else counted.get(ds_id, 0)


def _sees(db: Session, dataset_id: int, vendor: str) -> dict[str, dict]:
    """What the change detector can see of this vendor on the dataset, per metric: its weekly
    volume and the smallest drop it finds within 4 weeks with 90% probability (None: no drop,
    however large, is found so; the page says that instead of nothing)."""
    from auditor.audit.quality import sensitivity

    return {r["metric"]: _seen(r) for r in sensitivity(db, dataset_id)["vendor"] if str(r["group"]) == vendor}


def _seen(row: dict) -> dict:
    """A sensitivity row with None where no drop is found in time (NaN in the statistics)."""
    return {**row, "min_drop": finite(row["min_drop"]), "min_drop_accuracy": finite(row["min_drop_accuracy"])}


def _selected_entry(entry: dict, windows: list[QualityWindow], changes: Mapping[int, list], latest: tuple,
                    bounds: list, period: TimeRange) -> None:
    """The dataset shown in detail: its quality chart, its annotators (newest windows, change,
    audit bounds) and the charts of its audits in the period."""
    ds_id = entry["dataset"].id
    latest_windows, latest_changes = latest
    entry["quality_chart"] = _quality_chart(windows, changes.get(ds_id, []),
                                            batch=entry["dataset"].quality_window == "batch")
    audit = {a.get("annotator"): a for a in bounds}
    people = sorted({name for (d, name, _m) in latest_windows if d == ds_id} | set(audit))
    entry["annotators"] = [
        {"annotator": name, "agreement": (latest_windows.get((ds_id, name, "agreement")) or [None])[0],
         "gold": (latest_windows.get((ds_id, name, "gold_accuracy")) or [None])[0],
         "change": latest_changes.get((ds_id, name)), "audit": audit.get(name)} for name in people]
    if not entry["reports"]:
        entry["n_annotators"] = len(people)
    entry["chart"] = None
    reps = [(rep, run) for rep, run in entry["reports"] if period.contains(run.finished_at or run.created_at)]
    if reps:
        entry["chart"] = {
            "x_label": "data version", "y_label": "upper bound on raters' accuracy",
            "series": [{"name": "U_t", "points": [[run.data_version, rep.u_t] for rep, run in reps]},
                       {"name": "U_e", "points": [[run.data_version, rep.u_e] for rep, run in reps],
                        "style": "dashed"}]}
    if any(rep.expert_equivalence is not None for rep, _ in reps):
        entry["eq_chart"] = {
            "x_label": "data version", "y_label": "expert equivalence of k vendor raters", "y_digits": 2,
            "series": [{"name": "expert equivalence",
                        "points": [[run.data_version, rep.expert_equivalence] for rep, run in reps]}]}


VENDOR_COLUMNS = (
    Column("vendor", "vendor"), Column("change", "detected change", first="desc"), Column("dataset", "dataset"),
    Column("annotators", "annotators", numeric=True, first="desc"),
    Column("agreement", "agreement, latest week", numeric=True),
    Column("gold", "gold accuracy, latest week", numeric=True),
    Column("delta", "vs. previous week", numeric=True),
    Column("sees", "sees drops of", numeric=True,
           title="the smallest drop in accuracy the change detector finds within 4 weeks with 90% probability "
                 "at the vendor's current weekly volume (agreement with the other vendors)"),
    Column("u_t", "U<sub>t</sub>", numeric=True), Column("alpha", "agreement (α)", numeric=True),
    Column("expert", "expert equivalence", numeric=True),
    Column("price", "price per label", numeric=True, title="what the vendor charges per label (set below)"),
    Column("per_cost", "experts per unit cost", numeric=True, first="desc",
           title="expert raters one unit of money spent on this vendor's labels is worth: expert equivalence "
                 "of its raters on an item ÷ (its labels per item × its price per label)"),
)

_VENDOR_KEYS = {
    "vendor": lambda v: v["vendor"], "dataset": lambda v: v["dataset"], "annotators": lambda v: v["n_annotators"],
    "agreement": lambda v: v["week"].value if v["week"] else None,
    "gold": lambda v: v["gold"].value if v["gold"] else None, "delta": lambda v: v["delta"],
    "sees": lambda v: v["sees"]["min_drop_accuracy"] if v.get("sees") else None,
    "u_t": lambda v: v["u_t"], "alpha": lambda v: v["agreement"], "expert": lambda v: v["expert_equivalence"],
    "price": lambda v: v["price_per_label"], "per_cost": lambda v: v["experts_per_unit_cost"],
    "change": lambda v: _epoch_ms(v["change"].detected_at) if v["change"] else None,
}


def _vendor_sensitivity(db: Session, dataset_ids: set[int]) -> dict[tuple[int, str], dict]:
    """(dataset, vendor) → what its agreement monitor can see (volume and smallest drop found
    within 4 weeks with 90% probability), from each dataset's stored monitor."""
    from auditor.audit.quality import sensitivity

    out = {}
    for ds_id in sorted(dataset_ids):
        for r in sensitivity(db, ds_id, ("vendor",))["vendor"]:
            if r["metric"] == "agreement":
                out[(ds_id, str(r["group"]))] = _seen(r)
    return out


def vendors_index(db: Session, workspace_id: int, args=None) -> dict:
    """Every vendor on every dataset's latest audit, weakest agreement first by default."""
    datasets = db.execute(select(Dataset.id, Dataset.name).where(Dataset.workspace_id == workspace_id)).all()
    names = dict(datasets)
    latest = latest_runs(db, list(names))
    rows = _vendor_rows(db, [r.id for r in latest.values()], names)
    # Each vendor's price beside its quality figures, and what its expert equivalence costs.
    prices = plans.price_rows(db, workspace_id, {v["vendor"] for v in rows})
    seen = _vendor_sensitivity(db, {v["dataset_id"] for v in rows})
    for v in rows:
        _with_price(v, prices.get(v["vendor"]), v["report"])
        v["sees"] = seen.get((v["dataset_id"], v["vendor"]))
    table = table_state("vendors", VENDOR_COLUMNS, default_sort="agreement", per_page=50, args=args,
                        query_label="vendor or dataset contains")
    if table.q:
        rows = [v for v in rows if table.q.lower() in v["vendor"].lower() or table.q.lower() in v["dataset"].lower()]
    vendor_names = sorted({v["vendor"] for v in rows})
    table.page_rows(table.sort_rows(rows, _VENDOR_KEYS, tiebreak=lambda v: (v["vendor"], v["dataset"])))
    listed = list(db.scalars(select(VendorPrice).where(VendorPrice.workspace_id == workspace_id)
                             .order_by(VendorPrice.vendor).limit(LISTED_PRICES + 1)))
    return {"table": table, "prices": listed[:LISTED_PRICES], "more_prices": len(listed) > LISTED_PRICES,
            "vendor_names": vendor_names}


#: Prices listed on the vendors page (the API lists them all, paged).
LISTED_PRICES = 200


def _with_price(out: dict, price: VendorPrice | None, report: VendorReport | None) -> dict:
    """``out`` with the vendor's price and, from its ``report`` in an audit, its expert
    equivalence per unit cost (:func:`auditor.audit.plans.vendor_cost`, as the API's vendor costs)."""
    out["price_per_label"] = None if price is None else price.price_per_label
    out["currency"] = None if price is None else price.currency
    out.update(plans.vendor_cost(None if report is None else report.n_items,
                                 None if report is None else report.n_annotations,
                                 None if report is None else report.expert_equivalence, out["price_per_label"]))
    return out


def _vendor_rows(db: Session, run_ids: list[int], names: Mapping[int, str]) -> list[dict]:
    """Each vendor's report in each dataset's latest audit, with its newest two weekly windows
    of agreement, its newest gold accuracy and its newest change (bounded: see _recent)."""
    keys = (select(AuditRun.dataset_id.label("dataset_id"), VendorReport.vendor.label("group_name"))
            .join(AuditRun, VendorReport.audit_run_id == AuditRun.id).where(AuditRun.id.in_(run_ids or [-1])))
    windows, found = _recent(db, keys, "vendor", depth=2)
    vendors = []
    for v, run in db.execute(select(VendorReport, AuditRun).options(defer(VendorReport.annotators),
                                                                     defer(VendorReport.details))
                             .join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
                             .where(AuditRun.id.in_(run_ids or [-1])).order_by(VendorReport.vendor)):
        weekly = windows.get((run.dataset_id, v.vendor, "agreement"), [])
        latest_week, before = [*weekly, None, None][:2]
        delta = (latest_week.value - before.value if latest_week is not None and before is not None
                 and latest_week.value is not None and before.value is not None else None)
        gold = (windows.get((run.dataset_id, v.vendor, "gold_accuracy")) or [None])[0]
        vendors.append({"vendor": v.vendor, "dataset": names[run.dataset_id], "dataset_id": run.dataset_id,
                        "u_t": v.u_t, "u_e": v.u_e, "agreement": v.agreement,
                        "expert_equivalence": v.expert_equivalence, "n_annotators": v.n_annotators,
                        "n_items": v.n_items, "n_annotations": v.n_annotations, "run_id": run.id, "report": v,
                        "week": latest_week, "previous_week": before, "delta": delta, "gold": gold,
                        "change": found.get((run.dataset_id, v.vendor))})
    return vendors
