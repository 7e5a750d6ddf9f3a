"""Read models of the dashboards: one function per page, plain dicts for the templates and charts.

Conventions every page follows (and states where it shows them):

- **Cross-entropy** is shown in bits per label, lower is better: BEST's floor (which the
  statistics compute in nats) and the survey power curve's values (which the scorer keeps
  as the mean log2-probability of the held-out label, higher is better) alike, so the
  BEST tile and the curve's asymptote read on one scale.
- **L's interval** is the two-sided 95% Hoeffding interval over the items L rests on (the
  inequality behind the paper's S).
- **Bounded reads**: lists are paged (:mod:`auditor.web.tables`), histories capped
  (:data:`HISTORY_RUNS`), and no statement is issued per row.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import Select, case, func, or_, select, tuple_
from sqlalchemy.orm import Session, aliased, defer

from auditor.alerting.lifecycle import is_snoozed
from auditor.alerting.routing import ALERT_KINDS
from auditor.audit import plans
from auditor.audit.store import latest_runs
from auditor.db import (
    Agreement,
    Alert,
    AlertSeverity,
    Annotation,
    Annotator,
    AuditRun,
    AuditStatus,
    BestScore,
    Certification,
    Dataset,
    ImportBatch,
    Item,
    Model,
    PowerCurve,
    QualityChange,
    QualityWindow,
    Release,
    User,
    VendorPrice,
    VendorReport,
)
from auditor.db.models import LabelStudioConnector, MlflowConnector
from auditor.stats.annotators import hoeffding_lower
from auditor.stats.confusion import confusion_matrix
from auditor.web.tables import COUNT_CAP, Column, like_pattern, table_state
from auditor.web.timerange import TimeRange, time_range

__all__ = [
    "HISTORY_RUNS",
    "alerts_page",
    "annotator_page",
    "audit_run_page",
    "audit_runs",
    "compare_items",
    "compare_page",
    "confusion_view",
    "dataset_page",
    "feeds",
    "leaderboard_page",
    "model_page",
    "overview",
    "release_page",
    "vendor_page",
    "vendors_index",
    "what_changed",
]

#: The release page's history: at most this many audits, newest first.
HISTORY_RUNS = 200


def _upper(run: AuditRun | None) -> dict:
    upper = ((run.summary or {}).get("upper") or {}) if run else {}
    return {"u_t": upper.get("u_t"), "u_e": upper.get("u_e")}


# --- quality over time: weekly windows and the detector's changes -----------------------------

QUALITY_METRICS = ("agreement", "gold_accuracy")
_SERIES_NAMES = {"agreement": "agreement with the others' consensus", "gold_accuracy": "accuracy on gold items"}
# Keys per ``IN (...)``: bounded parameters per statement.
_KEYS_PER_QUERY = 1000


def _epoch_ms(when: datetime) -> int:
    """Milliseconds since 1970 for the charts (SQLite returns naive datetimes: they are UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _group_key(db: Session, column):
    """``column`` as compared with ``group_name`` of the quality tables. Annotator ids have
    the C collation on PostgreSQL, ``group_name`` the database's: compared in that one, the
    lookups below stay on the tables' (dataset, grouping, group, metric, week) index."""
    return column.collate("default") if db.get_bind().dialect.name == "postgresql" else column


def _recent(db: Session, keys: Select, grouping: str, *, depth: int = 1
            ) -> tuple[dict[tuple, list[QualityWindow]], dict[tuple, QualityChange]]:
    """The newest ``depth`` weekly windows of each metric, and the newest change, of each
    (dataset, group) that ``keys`` lists (its columns ``dataset_id`` and ``group_name``).

    Windows are keyed (dataset id, group, metric), newest first; changes (dataset id, group).
    Bounded whatever the length of the history: per key, one index lookup per metric and
    window and one for the newest change (each giving a row's id), then the rows read by
    primary key, in three statements."""
    k = keys.subquery()
    w, c = aliased(QualityWindow), aliased(QualityChange)
    cols = [k.c.dataset_id, k.c.group_name]
    for metric in QUALITY_METRICS:
        cols += [select(w.id).where(w.dataset_id == k.c.dataset_id, w.grouping == grouping,
                                    w.group_name == k.c.group_name, w.metric == metric)
                 .order_by(w.window_key.desc()).limit(1).offset(i).scalar_subquery() for i in range(depth)]
    cols.append(select(c.id).where(c.dataset_id == k.c.dataset_id, c.grouping == grouping,
                                   c.group_name == k.c.group_name)
                .order_by(c.detected_at.desc(), c.id.desc()).limit(1).scalar_subquery())
    window_ids: list[int] = []
    change_ids: list[int] = []
    for _dataset_id, _name, *found in db.execute(select(*cols)):
        window_ids += [i for i in found[:-1] if i is not None]
        if found[-1] is not None:
            change_ids.append(found[-1])
    # The same statements whether or not there is anything to read (one each up to _KEYS_PER_QUERY keys).
    q = QualityWindow
    windows: dict[tuple, list[QualityWindow]] = defaultdict(list)
    for at in range(0, max(len(window_ids), 1), _KEYS_PER_QUERY):
        for row in db.scalars(select(q).where(q.id.in_(window_ids[at:at + _KEYS_PER_QUERY] or [-1]))):
            windows[(row.dataset_id, row.group_name, row.metric)].append(row)
    for rows in windows.values():
        rows.sort(key=lambda r: r.window_key, reverse=True)
    changes: dict[tuple, QualityChange] = {}
    for at in range(0, max(len(change_ids), 1), _KEYS_PER_QUERY):
        for ch in db.scalars(select(QualityChange).where(QualityChange.id.in_(change_ids[at:at + _KEYS_PER_QUERY]
                                                                              or [-1]))):
            changes[(ch.dataset_id, ch.group_name)] = ch
    return windows, changes


def _quality_chart(windows: list[QualityWindow], changes: list[QualityChange], *, batch: bool = False
                   ) -> dict | None:
    """Weekly agreement (and gold accuracy where there is gold) over time with 95% bands;
    each change found marked where it started. ``batch``: one window per import (the
    dataset's ``quality_window``), placed at the time of the upload."""
    series = []
    for metric in QUALITY_METRICS:
        rows = sorted((r for r in windows if r.metric == metric), key=lambda r: r.window_key)
        if rows:
            series.append({"name": _SERIES_NAMES[metric], "metric": metric,
                           "points": [[_epoch_ms(r.window_start), r.value] for r in rows],
                           "band": [[_epoch_ms(r.window_start), r.low, r.high] for r in rows]})
    if not series:
        return None
    vlines = [{"x": _epoch_ms(ch.start), "kind": ch.direction,
               "label": f"{ch.direction} from {ch.start:%Y-%m-%d}"
                        + (" (gold accuracy)" if ch.metric == "gold_accuracy" else ""),
               "note": f"{ch.before:.3f} → {ch.after:.3f}"} for ch in changes]
    if batch:
        return {"x_type": "time", "x_label": "import (time of upload, UTC)", "y_label": "agreement / gold accuracy",
                "series": series, "vlines": vlines}
    return {"x_type": "time", "x_unit_days": 7, "x_label": "week (from Monday, UTC)",
            "y_label": "agreement / gold accuracy", "series": series, "vlines": vlines}


def _weeks(windows: list[QualityWindow]) -> list[dict]:
    """One row per week, newest first: each metric's window, and the labels counted."""
    weeks: dict[int, dict] = {}
    for r in windows:
        week = weeks.setdefault(r.window_key, {"start": r.window_start, "window": r.window_key, "n_labels": r.n_labels,
                                           **dict.fromkeys(QUALITY_METRICS)})
        week[r.metric] = r
    return sorted(weeks.values(), key=lambda w: w["window"], reverse=True)



# --- conventions: cross-entropy in bits (lower is better), L's interval, the badge's S -----------

CE_METRIC = "cross entropy (soft labels)"
CE_NOTE = ("Cross-entropy is in bits per label and lower is better everywhere on these pages: BEST's floor "
           "(computed in nats) and the power curve's values (kept by the scorer as the mean log2-probability of "
           "the held-out label) are converted to it, so the curve falls towards the BEST floor as raters are added.")
L_INTERVAL_NOTE = ("L's 95% interval is the two-sided Hoeffding interval over the items L rests on, the "
                   "inequality behind the paper's S.")
_NATS_TO_BITS = 1.0 / math.log(2.0)
# Which BEST metric a power curve's scorer reads against: the curve's limit as raters are added.
_BEST_OF_SCORER = {"agreement": "accuracy", "cross_entropy": CE_METRIC}
_METRIC_LABELS = {"accuracy": "accuracy", "balanced accuracy": "balanced accuracy", "f1 (macro)": "F1 (macro)",
                  CE_METRIC: "cross-entropy (soft labels)"}


def _finite(x) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def best_rows(scores) -> list[dict]:
    """BEST scores in the pages' convention: cross-entropy in bits, a floor (lower is better);
    the others ceilings."""
    out = []
    for b in scores:
        ce = b.metric == CE_METRIC
        scale = _NATS_TO_BITS if ce else 1.0
        value = None if b.value is None else b.value * scale
        out.append({"metric": b.metric, "label": _METRIC_LABELS.get(b.metric, b.metric), "value": value,
                    "std_error": None if b.std_error is None else b.std_error * scale,
                    "unit": "bits per label" if ce else "", "bound": "floor" if ce else "ceiling",
                    "nats": b.value if ce else None, "n_items": b.n_items})
    return out


def _sign(scorer: str) -> int:
    """Cross-entropy curves are shown as cross-entropy (the negated mean log2-probability)."""
    return -1 if scorer == "cross_entropy" else 1


def scorer_label(scorer: str, combiner: str | None = None) -> str:
    if scorer == "cross_entropy":
        return "cross-entropy (bits per label, lower is better)"
    what = "agreement with a held-out rater" if scorer == "agreement" else scorer.replace("_", " ")
    return what + (f" ({combiner})" if combiner else "")


def curve_view(curve: PowerCurve | None) -> dict | None:
    """A release's classifier score and survey equivalence in the pages' convention."""
    if curve is None:
        return None
    sign = _sign(curve.scorer)
    score = None if curve.classifier_score is None else sign * curve.classifier_score
    ends = [None if x is None else sign * x for x in (curve.classifier_low, curve.classifier_high)]
    low, high = (min(ends), max(ends)) if None not in ends else (None, None)
    return {"combiner": curve.combiner, "scorer": curve.scorer, "label": scorer_label(curve.scorer),
            "score": score, "score_low": low, "score_high": high, "curve": curve,
            "equivalence": curve.equivalence, "equivalence_low": curve.equivalence_low,
            "equivalence_high": curve.equivalence_high, "note": curve.equivalence_note}


def best_gap(view: dict | None, best: Mapping[str, dict]) -> dict | None:
    """How far a release's score is from BEST on the same scale: the ceiling (accuracy) minus
    its score, or its cross-entropy minus the floor; positive is room left."""
    if view is None or view["score"] is None:
        return None
    b = best.get(_BEST_OF_SCORER.get(view["scorer"], ""))
    if b is None or b["value"] is None:
        return None
    gap = view["score"] - b["value"] if b["bound"] == "floor" else b["value"] - view["score"]
    return {"metric": b["label"], "best": b["value"], "score": view["score"], "gap": gap, "bound": b["bound"],
            "unit": b["unit"], "scorer": view["scorer"]}


def l_interval(value: float | None, n: int | None, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Two-sided Hoeffding interval for a mean of [0, 1] values over ``n`` items."""
    if value is None or not n:
        return None, None
    side = 1.0 - (1.0 - confidence) / 2.0
    low = float(hoeffding_lower(value, n, confidence=side))
    high = 1.0 - float(hoeffding_lower(1.0 - value, n, confidence=side))
    return low, high


def badge_score(cert: Certification) -> float | None:
    """The S the badge's verdict read: its method's, with the bound it certified with."""
    col = "e" if (cert.certified_with or "U_t").endswith("e") else "t"
    return getattr(cert, f"s_{cert.method or 'oms'}_{col}", None)


def _paper_method(cert: Certification) -> str:
    method = ((cert.details or {}).get("paper_method") or cert.method or "oms")
    return method if method in ("oms", "hms") else "oms"


def cert_view(cert: Certification | None, since: dict | None = None) -> dict | None:
    """What a verdict rests on: L with its interval, U, the badge's S against its threshold,
    the paper's S, and since when the release is certified."""
    if cert is None:
        return None
    col = "e" if (cert.certified_with or "U_t").endswith("e") else "t"
    low, high = l_interval(cert.l, cert.n_items_lower)
    paper = _paper_method(cert)
    details = cert.details or {}
    return {"cert": cert, "l": cert.l, "l_low": low, "l_high": high, "n_items_lower": cert.n_items_lower,
            "n_items_upper": cert.n_items_upper, "u_t": cert.u_t, "u_e": cert.u_e, "u": getattr(cert, f"u_{col}"),
            "bound": f"U_{col}", "margin": None if cert.l is None else cert.l - getattr(cert, f"u_{col}"),
            "s": badge_score(cert), "method": cert.method or "oms", "threshold": details.get("threshold"),
            "s_paper": getattr(cert, f"s_{paper}_{col}", None), "paper_method": paper,
            "s_anytime_t": cert.s_anytime_t, "s_anytime_e": cert.s_anytime_e, "s_oms_t": cert.s_oms_t,
            "s_oms_e": cert.s_oms_e, "s_hms_t": cert.s_hms_t, "s_hms_e": cert.s_hms_e,
            "certified": bool(cert.certified), "verdict": cert.verdict, "run_id": cert.audit_run_id,
            "data_version": cert.data_version, "since": since}


def certified_since(db: Session, latest: Iterable[tuple[Certification, int]]) -> dict[tuple[int, int], dict]:
    """For each (latest certification of a release, its dataset) that is certified: the first
    audit of its current unbroken run of certified verdicts (its id, when it finished and
    its data version), keyed by (release, dataset). The certification stores that run
    (written with the audit), so this is one lookup of those runs, however long the history."""
    wanted = {(c.release_id, ds): c.certified_since_run_id for c, ds in latest
              if c.certified and c.certified_since_run_id is not None}
    if not wanted:
        return {}
    runs = {run: (at, v) for run, at, v in db.execute(
        select(AuditRun.id, AuditRun.finished_at, AuditRun.data_version).where(AuditRun.id.in_(set(wanted.values()))))}
    return {pair: {"run_id": run, "at": runs[run][0], "data_version": runs[run][1]}
            for pair, run in wanted.items() if run in runs}


def _power_chart(human: PowerCurve, marked: list[tuple[str, PowerCurve]], best: Mapping[str, dict]) -> dict:
    """The humans' power curve with its band, each release marked at its survey equivalence (its
    score with the score's interval and the equivalence's), and BEST's limit as a reference line."""
    sign = _sign(human.scorer)
    pts = [p for p in human.points or [] if "k" in p and p.get("mean") is not None]

    def band(p):
        lo, hi = p.get("ci_low"), p.get("ci_high")
        if lo is None or hi is None:
            return [p["k"], None, None]
        return [p["k"], min(sign * lo, sign * hi), max(sign * lo, sign * hi)]

    chart: dict[str, Any] = {
        "title": f"{scorer_label(human.scorer)} of {human.combiner} over k raters",
        "x_label": "number of human raters k", "y_label": scorer_label(human.scorer, human.combiner),
        "marker_x_word": "k ≈", "scorer": human.scorer, "combiner": human.combiner,
        "series": [{"name": "humans: power curve c_k", "points": [[p["k"], sign * p["mean"]] for p in pts],
                    "band": [band(p) for p in pts]}],
        "markers": [], "hlines": []}
    for name, c in marked:
        v = curve_view(c)
        if v is None or v["score"] is None:
            continue
        chart["markers"].append({"x": c.equivalence, "y": v["score"], "label": name, "note": c.equivalence_note,
                                 "x_low": c.equivalence_low, "x_high": c.equivalence_high,
                                 "y_low": v["score_low"], "y_high": v["score_high"]})
    b = best.get(_BEST_OF_SCORER.get(human.scorer, ""))
    if b is not None and b["value"] is not None:
        chart["hlines"].append({"y": b["value"], "kind": "best",
                                "label": f"BEST {b['label']} {b['bound']} {b['value']:.3f}"})
    return chart


def _timeline_chart(rows: list[dict], *, label_of=lambda r: r["release"].version) -> dict:
    """L (with its interval) against U_t and U_e per release; certified releases filled."""
    xs = range(len(rows))
    return {
        "x_label": "release", "y_label": "accuracy bounds", "x_ticks": [label_of(r) for r in rows],
        "series": [
            {"name": "L (model lower bound)", "points": [[x, r["view"]["l"]] for x, r in zip(xs, rows, strict=True)],
             "band": [[x, r["view"]["l_low"], r["view"]["l_high"]] for x, r in zip(xs, rows, strict=True)]},
            {"name": "U_t (human upper bound, rigorous)",
             "points": [[x, r["view"]["u_t"]] for x, r in zip(xs, rows, strict=True)], "style": "dashed"},
            {"name": "U_e (human upper bound, empirical)",
             "points": [[x, r["view"]["u_e"]] for x, r in zip(xs, rows, strict=True)], "style": "dotted"},
        ],
        "badges": [{"x": x, "y": r["view"]["l"], "certified": r["view"]["certified"]}
                   for x, r in zip(xs, rows, strict=True)],
    }


# --- overview ------------------------------------------------------------------------------------

#: Latest releases listed on the overview (one per model, most recently released models first).
OVERVIEW_MODELS = 50


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


def _latest_release_rows(db: Session, workspace_id: int, run_ids: list[int]) -> list[dict]:
    """Each model's newest release (and the one before, to compare with), its certification in
    its dataset's latest audit and since when it is certified: four statements, whatever the history."""
    ranked = (select(Release.id, Release.model_id, func.row_number().over(
        partition_by=Release.model_id, order_by=(Release.released_at.desc().nulls_last(), Release.id.desc())).label("rn"))
        .join(Model, Release.model_id == Model.id).where(Model.workspace_id == workspace_id).subquery())
    pairs = db.execute(select(Release, Model, ranked.c.rn).join(Model, Release.model_id == Model.id)
                       .join(ranked, ranked.c.id == Release.id).where(ranked.c.rn <= 2)
                       .order_by(Model.name, ranked.c.rn).limit(2 * OVERVIEW_MODELS)).all()
    newest = [(rel, mod) for rel, mod, rn in pairs if rn == 1]
    previous = {mod.id: rel for rel, mod, rn in pairs if rn == 2}
    certs: dict[int, tuple[Certification, int]] = {}
    for cert, dataset_id in db.execute(
            select(Certification, AuditRun.dataset_id).join(AuditRun, Certification.audit_run_id == AuditRun.id)
            .where(Certification.release_id.in_([r.id for r, _ in newest] or [-1]), AuditRun.id.in_(run_ids or [-1]))
            .order_by(AuditRun.id.desc())):
        certs.setdefault(cert.release_id, (cert, dataset_id))
    since = certified_since(db, certs.values())
    steps = next_steps(db, [(rid, ds) for rid, (c, ds) in certs.items() if not c.certified])
    rows = []
    for rel, mod in newest:
        cert, dataset_id = certs.get(rel.id, (None, None))
        rows.append({"model": mod, "release": rel, "cert": cert, "dataset_id": dataset_id,
                     "view": cert_view(cert, since.get((rel.id, dataset_id))), "previous": previous.get(mod.id),
                     "next_step": steps.get((rel.id, dataset_id))})
    return rows


def next_steps(db: Session, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    """The next labeling step of each (release, dataset) from its *stored* audit plan (computed by
    a worker; never asked for here), in one statement; nothing where no plan was made yet."""
    from auditor.db import models

    plan_table = getattr(models, "ReleasePlan", None)
    if plan_table is None:
        return {}
    out = {}
    for row in db.scalars(select(plan_table).where(tuple_(plan_table.release_id, plan_table.dataset_id)
                                                   .in_(pairs or [(-1, -1)]), plan_table.status == "succeeded")):
        plan = row.plan or {}
        if plan.get("certified_now"):
            continue
        out[(row.release_id, row.dataset_id)] = {"certifiable": plan.get("certifiable", True),
                                                 "recommended": plan.get("recommended"),
                                                 "probability": plan.get("probability"),
                                                 "audit_run_id": row.audit_run_id}
    return out


def overview(db: Session, workspace_id: int, *, now: datetime | None = None, period: TimeRange | None = None) -> dict:
    """The workspace at a glance; "what changed", "who changed" and the recent alerts follow
    ``period`` (the page's time range; the last 7 days when not given)."""
    now = now or datetime.now(UTC)
    period = period or time_range({}, default="7d", now=now)
    datasets = list(db.scalars(select(Dataset).where(Dataset.workspace_id == workspace_id).order_by(Dataset.name)))
    ids = [d.id for d in datasets]
    latest = latest_runs(db, ids)
    n_items = dict(db.execute(select(Item.dataset_id, func.count()).where(Item.dataset_id.in_(ids or [-1]))
                              .group_by(Item.dataset_id)).all())
    pending = dict(db.execute(select(AuditRun.dataset_id, func.count()).where(
        AuditRun.dataset_id.in_(ids or [-1]), AuditRun.status.in_([AuditStatus.QUEUED, AuditStatus.RUNNING]))
        .group_by(AuditRun.dataset_id)).all())
    ds_rows = [{"id": d.id, "name": d.name, "labels": list(d.labels), "data_version": d.data_version,
                "n_items": n_items.get(d.id, 0), "run": latest.get(d.id), **_upper(latest.get(d.id)),
                "stale": latest.get(d.id) is None or latest[d.id].data_version < d.data_version,
                "pending": pending.get(d.id, 0)} for d in datasets]

    run_ids = [r.id for r in latest.values()]
    names = {d.id: d.name for d in datasets}
    vendors = _vendor_rows(db, run_ids, names)
    releases = _latest_release_rows(db, workspace_id, run_ids)

    # Who changed: the newest changes the detectors found (by when an audit found them, within the
    # range: news since then), vendors and annotators alike.
    quality_changes = [{"change": ch, "dataset": name} for ch, name in db.execute(
        select(QualityChange, Dataset.name).join(Dataset, QualityChange.dataset_id == Dataset.id)
        .where(Dataset.workspace_id == workspace_id, *period.where(QualityChange.created_at))
        .order_by(QualityChange.detected_at.desc(), QualityChange.id.desc()).limit(10))]

    alerts = list(db.scalars(select(Alert).where(Alert.workspace_id == workspace_id, *period.where(Alert.created_at))
                             .order_by(Alert.created_at.desc(), Alert.id.desc()).limit(10)))
    n_open = db.scalar(select(func.count()).select_from(
        select(Alert.id).where(Alert.workspace_id == workspace_id, Alert.acknowledged_at.is_(None))
        .limit(1001).subquery()))
    return {"datasets": ds_rows, "vendors": vendors, "releases": releases, "alerts": alerts, "n_open_alerts": n_open,
            "quality_changes": quality_changes, "changes": what_changed(db, workspace_id, period), "period": period}


def what_changed(db: Session, workspace_id: int, period: TimeRange) -> dict:
    """Uploads (per dataset and kind), audits (per state), new releases and alerts raised within
    ``period``: grouped counts, bounded whatever the range."""
    batches = db.execute(select(Dataset.name, ImportBatch.kind, func.count(), func.sum(ImportBatch.row_count))
                         .join(Dataset, ImportBatch.dataset_id == Dataset.id)
                         .where(Dataset.workspace_id == workspace_id, *period.where(ImportBatch.created_at))
                         .group_by(Dataset.name, ImportBatch.kind).order_by(Dataset.name).limit(200)).all()
    runs = db.execute(select(AuditRun.status, func.count()).join(Dataset, AuditRun.dataset_id == Dataset.id)
                      .where(Dataset.workspace_id == workspace_id, *period.where(AuditRun.created_at))
                      .group_by(AuditRun.status)).all()
    new_releases = db.execute(select(Model.name, Release.version, Release.id, Model.id)
                              .join(Model, Release.model_id == Model.id)
                              .where(Model.workspace_id == workspace_id, *period.where(Release.created_at))
                              .order_by(Release.created_at.desc()).limit(20)).all()
    n_alerts = db.scalar(select(func.count()).select_from(
        select(Alert.id).where(Alert.workspace_id == workspace_id, *period.where(Alert.created_at))
        .limit(COUNT_CAP + 1).subquery()))
    return {"batches": [{"dataset": n, "kind": str(k), "n": c, "rows": int(r or 0)} for n, k, c, r in batches],
            "runs": {str(s): c for s, c in runs}, "n_runs": sum(c for _, c in runs), "releases": new_releases,
            "n_alerts": n_alerts, "n_uploads": sum(c for *_, c, _r in batches)}


# --- dataset -------------------------------------------------------------------------------------


def assumptions_view(report: Mapping[str, Any] | None) -> dict | None:
    """The paper's Table 2 on the gold items, as the audit stored it (``summary["assumptions"]``):
    each assumption's two sides and whether it holds, and the true accuracies beside the bounds."""
    if not report:
        return None

    def t3(name: str, c: Mapping[str, Any]) -> dict:
        return {"name": name, "p_correct": c.get("p_correct_given_aggregate_wrong"),
                "p_agree": c.get("p_agree_given_aggregate_wrong"), "p_wrong": c.get("p_wrong_given_aggregate_wrong"),
                "holds": c.get("holds"), "holds_conservative": c.get("holds_conservative"),
                "true_accuracy": c.get("true_accuracy"), "lower_bound": c.get("lower_bound"),
                "bound_holds": c.get("bound_holds"), "n_items": c.get("n_items")}

    t1 = report.get("theorem1") or {}
    return {"n_gold_items": report.get("n_gold_items"),
            "theorem1": {"conditional": t1.get("conditional"), "marginal": t1.get("marginal"), "holds": t1.get("holds")},
            "average_accuracy": report.get("average_annotator_accuracy"), "u_t": report.get("u_t"),
            "u_e": report.get("u_e"), "upper_holds": report.get("upper_bound_holds"),
            "upper_e_holds": (None if report.get("u_e") is None or report.get("average_annotator_accuracy") is None
                              else report["average_annotator_accuracy"] <= report["u_e"] + 1e-12),
            "annotators": t3("single annotators vs. the others' plurality", report.get("annotators_theorem3") or {}),
            "models": [t3(name, c) for name, c in sorted((report.get("models") or {}).items())]}


#: The most connectors of each kind a dataset's page lists (a dataset has a handful).
MAX_FEEDS = 50


def _source(url: str) -> str:
    """A connector's server as shown: without user info, query or fragment (credentials
    never live in these URLs, but a page shows none even if one was typed in)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def feeds(db: Session, dataset_id: int) -> list[dict]:
    """The dataset's live feeds, Label Studio projects (annotations in) and MLflow registered
    models (predictions in, verdicts back), with each one's state: ``error`` with the last
    error, ``disabled``, ``ok``, or ``waiting`` (nothing has happened yet)."""
    out = []
    for c in db.scalars(select(LabelStudioConnector).where(LabelStudioConnector.dataset_id == dataset_id)
                        .order_by(LabelStudioConnector.id).limit(MAX_FEEDS)):
        state = ("disabled" if not c.enabled else "error" if c.last_sync_error
                 else "ok" if c.last_event_at or c.last_sync_at else "waiting")
        out.append({"kind": "labelstudio", "id": c.id, "source": _source(c.url), "subject": f"project {c.project_id}",
                    "direction": "annotations in", "state": state, "error": c.last_sync_error,
                    "last_event_at": c.last_event_at, "last_sync_at": c.last_sync_at,
                    "last_written_at": None, "last_written_run_id": None, "created_at": c.created_at})
    for c in db.scalars(select(MlflowConnector).where(MlflowConnector.dataset_id == dataset_id)
                        .order_by(MlflowConnector.id).limit(MAX_FEEDS)):
        state = "error" if c.last_error else "ok" if c.last_written_at else "waiting"
        out.append({"kind": "mlflow", "id": c.id, "source": _source(c.tracking_uri),
                    "subject": f"registered model {c.registered_model} → model {c.model_name}",
                    "direction": "predictions in, verdicts back", "state": state, "error": c.last_error,
                    "last_event_at": None, "last_sync_at": None, "last_written_at": c.last_written_at,
                    "last_written_run_id": c.last_written_run_id, "created_at": c.created_at})
    return out


def dataset_page(db: Session, ds: Dataset) -> dict:
    run = latest_runs(db, [ds.id]).get(ds.id)
    # The newest failed audit, when no audit has succeeded since: the page says why it failed.
    failed = db.scalars(select(AuditRun).where(AuditRun.dataset_id == ds.id, AuditRun.status == AuditStatus.FAILED,
                                               AuditRun.id > (run.id if run is not None else 0))
                        .order_by(AuditRun.id.desc()).limit(1)).first()
    n_items, n_gold = db.execute(select(func.count(), func.count(Item.gold_label)).where(Item.dataset_id == ds.id)).one()
    out: dict = {"dataset": ds, "run": run, **_upper(run), "agreements": [], "best": [], "curve": None, "charts": [],
                 "releases": [], "vendors": [], "failed_run": failed, "n_items": n_items, "n_gold": n_gold,
                 "assumptions": None, "assumption_notes": [], "ce_note": CE_NOTE, "feeds": feeds(db, ds.id)}
    if run is None:
        return out
    summary = run.summary or {}
    out["assumptions"] = assumptions_view(summary.get("assumptions"))
    out["assumption_notes"] = [n for n in summary.get("notes") or [] if n.startswith("assumption checks")]
    out["agreements"] = list(db.scalars(select(Agreement).where(Agreement.audit_run_id == run.id,
                                                                Agreement.vendor.is_(None))
                                        .order_by(Agreement.coefficient)))
    out["best"] = best_rows(db.scalars(select(BestScore).where(BestScore.audit_run_id == run.id)
                                       .order_by(BestScore.metric)))
    best = {b["metric"]: b for b in out["best"]}
    curves = list(db.scalars(select(PowerCurve).where(PowerCurve.audit_run_id == run.id).order_by(PowerCurve.id)))
    base = next((c for c in curves if c.release_id is None and c.vendor is None), None)
    rel_curves = [c for c in curves if c.release_id is not None]
    rel_names = {r.id: (m.name, r.version, m.id) for r, m in db.execute(
        select(Release, Model).join(Model, Release.model_id == Model.id)
        .where(Release.id.in_([c.release_id for c in rel_curves] or [-1])))}
    out["releases"] = [{"model": rel_names.get(c.release_id, ("?", "?", None))[0],
                        "version": rel_names.get(c.release_id, ("?", "?", None))[1],
                        "model_id": rel_names.get(c.release_id, ("?", "?", None))[2], "release_id": c.release_id,
                        "curve": c, "view": curve_view(c), "gap": best_gap(curve_view(c), best)} for c in rel_curves]
    charts = []
    # One chart per (combiner, scorer): the humans' curve with its band, and each release's
    # classifier score placed at its survey equivalence.
    pairs = list(dict.fromkeys((c.combiner, c.scorer) for c in ([base] if base else []) + rel_curves))
    for combiner, scorer in pairs:
        human = base if base is not None and (base.combiner, base.scorer) == (combiner, scorer) else next(
            c for c in rel_curves if (c.combiner, c.scorer) == (combiner, scorer))
        marked = [(f"{r['model']} {r['version']}", r["curve"]) for r in out["releases"]
                  if (r["curve"].combiner, r["curve"].scorer) == (combiner, scorer)]
        charts.append(_power_chart(human, marked, best))
    out["curve"] = base
    out["charts"] = charts
    reports = list(db.scalars(select(VendorReport).options(defer(VendorReport.annotators))
                              .where(VendorReport.audit_run_id == run.id).order_by(VendorReport.vendor)))
    keys = select(VendorReport.vendor.label("group_name"), AuditRun.dataset_id.label("dataset_id")).join(
        AuditRun, VendorReport.audit_run_id == AuditRun.id).where(VendorReport.audit_run_id == run.id)
    windows, found = _recent(db, keys, "vendor")
    out["vendors"] = [{"report": v, "vendor": v.vendor, "n_annotators": v.n_annotators, "n_items": v.n_items,
                       "n_annotations": v.n_annotations, "u_t": v.u_t, "u_e": v.u_e, "agreement": v.agreement,
                       "expert_equivalence": v.expert_equivalence,
                       "week": (windows.get((ds.id, v.vendor, "agreement")) or [None])[0],
                       "gold": (windows.get((ds.id, v.vendor, "gold_accuracy")) or [None])[0],
                       "change": found.get((ds.id, v.vendor))} for v in reports]
    return out


# --- models and releases ------------------------------------------------------------------------

RELEASE_COLUMNS = (
    Column("release", "release"), Column("released", "released", first="desc"),
    Column("l", "L (95%)", numeric=True), Column("u_t", "U<sub>t</sub>", numeric=True),
    Column("s", "S (badge)", numeric=True, title="the S the badge's verdict read, against its threshold"),
    Column("s_paper", "S (paper)", numeric=True, title="the paper's Theorem 7 (one look at a fixed number of items)"),
    Column("verdict", "verdict"), Column("since", "certified since", first="desc"),
    Column("equivalence", "survey equivalence", sortable=False), Column("run", "run", numeric=True, first="desc"),
)

_RELEASE_KEYS = {
    "release": lambda r: r["i"], "released": lambda r: r["release"].released_at,
    "l": lambda r: r["view"]["l"], "u_t": lambda r: r["view"]["u_t"], "s": lambda r: r["view"]["s"],
    "s_paper": lambda r: r["view"]["s_paper"], "verdict": lambda r: (not r["view"]["certified"], r["view"]["verdict"]),
    "since": lambda r: (r["view"]["since"] or {}).get("run_id"), "run": lambda r: r["view"]["run_id"],
}


def _release_datasets(db: Session, release_ids: Select | list[int], workspace_id: int) -> list:
    """Datasets (id, name) on which any of these releases has a certification."""
    return db.execute(select(Dataset.id, Dataset.name).join(AuditRun, AuditRun.dataset_id == Dataset.id)
                      .join(Certification, Certification.audit_run_id == AuditRun.id)
                      .where(Certification.release_id.in_(release_ids), Dataset.workspace_id == workspace_id)
                      .distinct().order_by(Dataset.name)).all()


def _latest_certs(db: Session, release_ids: Select | list[int], dataset_id: int) -> dict[int, Certification]:
    """Each release's certification in the newest audit of the dataset that certified it."""
    ranked = (select(Certification.id, func.row_number().over(
        partition_by=Certification.release_id, order_by=Certification.audit_run_id.desc()).label("rn"))
        .join(AuditRun, Certification.audit_run_id == AuditRun.id)
        .where(AuditRun.dataset_id == dataset_id, Certification.release_id.in_(release_ids)).subquery())
    return {c.release_id: c for c in db.scalars(select(Certification).join(ranked, ranked.c.id == Certification.id)
                                                .where(ranked.c.rn == 1))}


def model_page(db: Session, model: Model, dataset_id: int | None, workspace_id: int, args=None) -> dict:
    releases = list(db.scalars(select(Release).where(Release.model_id == model.id)
                               .order_by(Release.released_at.asc().nulls_last(), Release.id)))
    datasets = _release_datasets(db, select(Release.id).where(Release.model_id == model.id), workspace_id)
    table = table_state("timeline", RELEASE_COLUMNS, default_sort="release", default_direction="desc",
                        per_page=25, args=args)
    out: dict = {"model": model, "datasets": datasets, "dataset_id": None, "rows": [], "chart": None,
                 "releases": releases, "table": table, "l_note": L_INTERVAL_NOTE}
    if not datasets:
        return out
    ds_id = dataset_id if dataset_id in {d.id for d in datasets} else datasets[0].id
    out["dataset_id"] = ds_id
    certs = _latest_certs(db, select(Release.id).where(Release.model_id == model.id), ds_id)
    curves: dict[tuple[int, int], list[PowerCurve]] = defaultdict(list)
    for c in db.scalars(select(PowerCurve).where(PowerCurve.audit_run_id.in_({c.audit_run_id for c in certs.values()} or {-1}),
                                                 PowerCurve.release_id.in_(list(certs) or [-1]))
                        .order_by(PowerCurve.id)):
        curves[(c.release_id, c.audit_run_id)].append(c)
    since = certified_since(db, [(c, ds_id) for c in certs.values()])
    rows = []
    for i, r in enumerate(releases):
        c = certs.get(r.id)
        if c is None:
            continue
        rows.append({"i": i, "release": r, "cert": c, "view": cert_view(c, since.get((r.id, ds_id))),
                     "curves": [curve_view(x) for x in curves.get((r.id, c.audit_run_id), [])]})
    out["rows"] = rows
    out["previous"] = {after["release"].id: before["release"] for before, after in pairwise(rows)}
    if rows:
        out["chart"] = _timeline_chart(rows)
    table.page_rows(table.sort_rows(rows, _RELEASE_KEYS, tiebreak=lambda r: r["i"]))
    return out


def release_page(db: Session, release: Release, model: Model, dataset_id: int | None, workspace_id: int,
                 args=None) -> dict:
    """One release on one dataset: its verdict and what it rests on, since when it is certified,
    its survey equivalence and distance to BEST, and its history over the last audits."""
    datasets = _release_datasets(db, [release.id], workspace_id)
    table = table_state("history", (Column("run", "run", numeric=True, first="desc"),), default_sort="run",
                        default_direction="desc", per_page=25, args=args)
    out: dict = {"release": release, "model": model, "datasets": datasets, "dataset_id": None, "view": None,
                 "table": table, "curves": [], "best": [], "charts": [], "power_charts": [], "gaps": [],
                 "others": [], "l_note": L_INTERVAL_NOTE, "ce_note": CE_NOTE, "history_runs": HISTORY_RUNS}
    # Other releases to compare with: the model's, newest first (bounded).
    out["others"] = list(db.scalars(select(Release).where(Release.model_id == model.id, Release.id != release.id)
                                    .order_by(Release.released_at.desc().nulls_last(), Release.id.desc()).limit(100)))
    if not datasets:
        return out
    ds_id = dataset_id if dataset_id in {d.id for d in datasets} else datasets[0].id
    out["dataset_id"] = ds_id
    history = db.execute(select(Certification, AuditRun).join(AuditRun, Certification.audit_run_id == AuditRun.id)
                         .where(Certification.release_id == release.id, AuditRun.dataset_id == ds_id)
                         .order_by(AuditRun.id.desc()).limit(HISTORY_RUNS)).all()
    latest, run = history[0]
    since = certified_since(db, [(latest, ds_id)])
    out["view"] = cert_view(latest, since.get((release.id, ds_id)))
    out["run"] = run
    out["best"] = best_rows(db.scalars(select(BestScore).where(BestScore.audit_run_id == run.id)
                                       .order_by(BestScore.metric)))
    best = {b["metric"]: b for b in out["best"]}
    curves = list(db.scalars(select(PowerCurve).where(PowerCurve.audit_run_id == run.id).order_by(PowerCurve.id)))
    mine = [c for c in curves if c.release_id == release.id]
    out["curves"] = [curve_view(c) for c in mine]
    out["gaps"] = [g for g in (best_gap(v, best) for v in out["curves"]) if g is not None]
    base = next((c for c in curves if c.release_id is None and c.vendor is None), None)
    for c in mine:
        human = base if base is not None and (base.combiner, base.scorer) == (c.combiner, c.scorer) else c
        out["power_charts"].append(_power_chart(human, [(f"{model.name} {release.version}", c)], best))
    # History, oldest first on the charts: the bounds (L with its interval) and the S values over the audits.
    rows = [{"view": cert_view(c), "run": r} for c, r in history]
    dated = [x for x in reversed(rows) if x["run"].finished_at is not None]
    if dated:
        xs = [_epoch_ms(x["run"].finished_at) for x in dated]
        v = [x["view"] for x in dated]
        out["charts"].append({
            "x_type": "time", "x_label": "audit (finished, UTC)", "y_label": "accuracy bounds",
            "series": [{"name": "L (model lower bound)", "points": [[x, y["l"]] for x, y in zip(xs, v, strict=True)],
                        "band": [[x, y["l_low"], y["l_high"]] for x, y in zip(xs, v, strict=True)]},
                       {"name": "U_t", "points": [[x, y["u_t"]] for x, y in zip(xs, v, strict=True)], "style": "dashed"},
                       {"name": "U_e", "points": [[x, y["u_e"]] for x, y in zip(xs, v, strict=True)], "style": "dotted"}],
            "badges": [{"x": x, "y": y["l"], "certified": y["certified"]} for x, y in zip(xs, v, strict=True)],
            "title": "L with its 95% interval against U_t and U_e, audit by audit"})
        threshold, bound, paper = out["view"]["threshold"], out["view"]["bound"], out["view"]["paper_method"]
        col = bound[-1]
        s_chart = {
            "x_type": "time", "x_label": "audit (finished, UTC)", "y_label": "confidence S", "y_digits": 4,
            "series": [{"name": f"S ({y_name})", "points": [[x, y[key]] for x, y in zip(xs, v, strict=True)]}
                       for key, y_name in ((f"s_anytime_{col}", f"anytime, {bound}"),
                                           (f"s_{paper}_{col}", f"paper {paper.upper()}, {bound}"))],
            "hlines": ([{"y": threshold, "kind": "threshold", "label": f"threshold {threshold}"}]
                       if threshold is not None else []),
            "title": "S, the confidence that the release beats the average annotator, audit by audit"}
        out["charts"].append(s_chart)
    table.page_rows(rows)
    return out


#: Releases one comparison puts side by side, at most.
COMPARE_MAX = 6
#: Items whose predictions a comparison reads for its per-item differences (in item id order),
#: and how many differing items it lists.
COMPARE_SCAN_ITEMS = 5_000
COMPARE_LISTED_ITEMS = 50
#: The figures a comparison shows: (key, label, how to read it off a side); the difference of
#: each is the later release's value minus the first's.
_COMPARE_FIGURES = (
    ("l", "L", lambda s: (s["view"] or {}).get("l")),
    ("u_t", "U_t", lambda s: (s["view"] or {}).get("u_t")),
    ("u_e", "U_e", lambda s: (s["view"] or {}).get("u_e")),
    ("margin", "L − U_t", lambda s: (s["view"] or {}).get("margin")),
    ("s_anytime", "S anytime", lambda s: (s["view"] or {}).get("s_anytime_t")),
    ("s_paper", "S paper (OMS)", lambda s: (s["view"] or {}).get("s_oms_t")),
    ("s_badge", "S (badge)", lambda s: (s["view"] or {}).get("s")),
    ("n_items", "items behind L", lambda s: (s["view"] or {}).get("n_items_lower")),
)


def _difference(a, b) -> float | None:
    return b - a if isinstance(a, int | float) and isinstance(b, int | float) else None


def compare_page(db: Session, workspace_id: int, chosen: list[tuple[Release, Model]], dataset_id: int | None) -> dict:
    """Releases side by side (two or more, the first the reference) on a dataset all were audited
    on: L with its interval and the items behind it, U, S (the badge's and the paper's), since
    when certified, each scorer's score, survey equivalence and gap to BEST, the difference of
    every figure from the first release, a warning when they rest on different items, and the
    items whose predicted labels differ."""
    ids = [rel.id for rel, _ in chosen]
    by_release: dict[int, set[int]] = defaultdict(set)
    names = {}
    for ds_id, name, rid in db.execute(
            select(Dataset.id, Dataset.name, Certification.release_id).join(AuditRun, AuditRun.dataset_id == Dataset.id)
            .join(Certification, Certification.audit_run_id == AuditRun.id)
            .where(Certification.release_id.in_(ids), Dataset.workspace_id == workspace_id).distinct()):
        by_release[rid].add(ds_id)
        names[ds_id] = name
    common = sorted(set.intersection(*(by_release[i] for i in ids)), key=lambda d: names[d])
    out: dict = {"pair": chosen, "chosen": chosen, "datasets": [(d, names[d]) for d in common], "dataset_id": None,
                 "sides": [], "chart": None, "power_charts": [], "l_note": L_INTERVAL_NOTE, "ce_note": CE_NOTE,
                 "figures": [], "warnings": [], "item_diffs": None}
    if not common:
        return out
    ds_id = dataset_id if dataset_id in common else common[0]
    out["dataset_id"] = ds_id
    certs = _latest_certs(db, ids, ds_id)
    since = certified_since(db, [(c, ds_id) for c in certs.values()])
    run_ids = sorted({c.audit_run_id for c in certs.values()})
    curves = list(db.scalars(select(PowerCurve).where(PowerCurve.audit_run_id.in_(run_ids or [-1]))
                             .order_by(PowerCurve.id)))
    bests: dict[int, dict] = defaultdict(dict)
    for b in db.scalars(select(BestScore).where(BestScore.audit_run_id.in_(run_ids or [-1])).order_by(BestScore.metric)):
        bests[b.audit_run_id][b.metric] = best_rows([b])[0]
    for rel, mod in chosen:
        c = certs.get(rel.id)
        views = [curve_view(x) for x in curves if c is not None and x.release_id == rel.id
                 and x.audit_run_id == c.audit_run_id]
        best = bests.get(c.audit_run_id, {}) if c is not None else {}
        out["sides"].append({"release": rel, "model": mod, "view": cert_view(c, since.get((rel.id, ds_id))),
                             "curves": {v["scorer"]: v for v in views},
                             "gaps": {v["scorer"]: best_gap(v, best) for v in views}})
    out["scorers"] = sorted({k for s in out["sides"] for k in s["curves"]})
    out["figures"] = _compare_figures(out["sides"], out["scorers"])
    out["warnings"] = _compare_warnings(out["sides"])
    rows = [{"release": s["release"], "view": s["view"]} for s in out["sides"] if s["view"] is not None]
    if rows:
        out["chart"] = _timeline_chart(rows, label_of=lambda r: f"{r['release'].version}")
        out["chart"]["x_label"] = "release"
    newest = max(run_ids) if run_ids else None
    best = bests.get(newest, {})
    base = next((c for c in curves if c.audit_run_id == newest and c.release_id is None and c.vendor is None), None)
    for scorer in out["scorers"]:
        marked = [(f"{s['model'].name} {s['release'].version}", s["curves"][scorer].get("curve"))
                  for s in out["sides"] if scorer in s["curves"]]
        human = base if base is not None and base.scorer == scorer else marked[-1][1]
        out["power_charts"].append(_power_chart(human, marked, best))
    out["item_diffs"] = compare_items(db, db.get(Dataset, ds_id), ids)
    return out


def _compare_figures(sides: list[dict], scorers: list[str]) -> list[dict]:
    """Every figure of every side and its difference from the first side's."""
    readers = list(_COMPARE_FIGURES)
    for scorer in scorers:
        readers += [
            (f"score-{scorer}", scorer_label(scorer), lambda s, k=scorer: (s["curves"].get(k) or {}).get("score")),
            (f"equivalence-{scorer}", f"survey equivalence ({scorer.replace('_', ' ')})",
             lambda s, k=scorer: (s["curves"].get(k) or {}).get("equivalence")),
            (f"gap-{scorer}", f"gap to BEST ({scorer.replace('_', ' ')})",
             lambda s, k=scorer: (s["gaps"].get(k) or {}).get("gap")),
        ]
    out = []
    for key, label, read in readers:
        values = [read(s) for s in sides]
        out.append({"key": key, "label": label, "values": values,
                    "differences": [_difference(values[0], v) for v in values[1:]]})
    return out


def _compare_warnings(sides: list[dict]) -> list[str]:
    """What makes the differences hard to read: releases scored on different numbers of items,
    or in audits of different data versions."""
    out = []
    named = [(f"{s['model'].name} {s['release'].version}", s["view"]) for s in sides]
    counts = {name: v["n_items_lower"] for name, v in named if v is not None and v["n_items_lower"] is not None}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name}: {n:,}" for name, n in counts.items())
        out.append(f"These releases were scored on different items ({listed}): each difference mixes the change of "
                   "model with the change of items. Compare them on the same items (predictions for every "
                   "release on the same items) before reading a difference as the model's.")
    versions = {name: v["data_version"] for name, v in named if v is not None}
    if len(set(versions.values())) > 1:
        listed = ", ".join(f"{name}: {n}" for name, n in versions.items())
        out.append(f"Their latest verdicts come from audits of different data versions ({listed}).")
    missing = [name for name, v in named if v is None]
    if missing:
        out.append("Not audited on this dataset: " + ", ".join(missing) + ".")
    return out


def compare_items(db: Session, ds: Dataset | None, release_ids: list[int]) -> dict | None:
    """Items the releases label differently: the first :data:`COMPARE_SCAN_ITEMS` items (by id)
    that the first release predicted, each looked up for the others by the prediction key;
    at most :data:`COMPARE_LISTED_ITEMS` listed, with the plurality and gold beside them."""
    from auditor.db import Prediction
    from auditor.web.item_pages import plurality, predicted_label

    if ds is None or len(release_ids) < 2:
        return None
    first = list(db.execute(select(Prediction, Item).join(Item, Item.id == Prediction.item_id)
                            .where(Prediction.release_id == release_ids[0], Prediction.dataset_id == ds.id)
                            .order_by(Prediction.item_id).limit(COMPARE_SCAN_ITEMS)))
    item_ids = [p.item_id for p, _ in first]
    others: dict[tuple[int, int], Prediction] = {}
    for at in range(0, len(item_ids), _KEYS_PER_QUERY):
        chunk = item_ids[at:at + _KEYS_PER_QUERY]
        for p in db.scalars(select(Prediction).where(Prediction.release_id.in_(release_ids[1:]),
                                                     Prediction.item_id.in_(chunk))):
            others[(p.release_id, p.item_id)] = p
    labels = list(ds.labels)
    name = lambda code: labels[code] if code is not None and 0 <= code < len(labels) else None  # noqa: E731
    rows, n_differ, n_common = [], 0, 0
    for p, it in first:
        codes = [predicted_label(p)] + [predicted_label(others.get((r, p.item_id))) for r in release_ids[1:]]
        if any(c is None for c in codes):
            continue
        n_common += 1
        if len(set(codes)) == 1:
            continue
        n_differ += 1
        if len(rows) < COMPARE_LISTED_ITEMS:
            rows.append({"item": it.external_id, "labels": [name(c) for c in codes],
                         "plurality": [labels[i] for i in plurality(it.label_counts, len(labels))],
                         "gold": name(it.gold_label)})
    return {"rows": rows, "n_differ": n_differ, "n_common": n_common, "scanned": len(first),
            "capped": len(first) >= COMPARE_SCAN_ITEMS, "listed": COMPARE_LISTED_ITEMS, "dataset_id": ds.id}


# --- vendors and annotators ----------------------------------------------------------------------

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


def _pooled(windows: list[QualityWindow], metric: str) -> tuple[float | None, float]:
    """A metric's mean over all the windows' units (each window's mean weighted by its items)."""
    rows = [w for w in windows if w.metric == metric and w.value is not None and w.n_items]
    n = sum(w.n_items for w in rows)
    return (sum(w.value * w.n_items for w in rows) / n if n else None), n


def _sees(db: Session, dataset_id: int, vendor: str) -> dict[str, dict]:
    """What the change detector can see of this vendor on the dataset, per metric: its weekly
    volume and the smallest drop it finds within 4 weeks with 90% probability."""
    from auditor.audit.quality import sensitivity

    return {r["metric"]: r for r in sensitivity(db, dataset_id)["vendor"] if str(r["group"]) == vendor
            and r["min_drop"] == r["min_drop"]}


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
    # The per-annotator lists are read for the latest report only (below), not for every run.
    stmt = (select(VendorReport, AuditRun, Dataset).options(defer(VendorReport.annotators), defer(VendorReport.details))
            .join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
            .join(Dataset, AuditRun.dataset_id == Dataset.id)
            .where(Dataset.workspace_id == workspace_id, VendorReport.vendor == vendor,
                   AuditRun.status == AuditStatus.SUCCEEDED)
            .order_by(Dataset.name, AuditRun.data_version, AuditRun.id))
    if dataset_ids is not None:
        stmt = stmt.where(Dataset.id.in_(list(dataset_ids) or [-1]))
    rows = db.execute(stmt).all()
    by_dataset: dict[int, dict] = {}
    for rep, run, ds in rows:
        entry = by_dataset.setdefault(ds.id, {"dataset": ds, "reports": []})
        entry["reports"].append((rep, run))

    # The vendor's weekly quality: its whole series on each dataset (the charts) and its changes.
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
    for ds in db.scalars(select(Dataset).where(Dataset.id.in_(list(set(series) - set(by_dataset)) or [-1]))):
        by_dataset[ds.id] = {"dataset": ds, "reports": []}
    ids = list(by_dataset)
    changes: dict[int, list[QualityChange]] = defaultdict(list)
    for ch in db.scalars(select(QualityChange).where(QualityChange.dataset_id.in_(ids or [-1]),
                                                     QualityChange.grouping == "vendor",
                                                     QualityChange.group_name == vendor,
                                                     *period.where(QualityChange.detected_at))
                         .order_by(QualityChange.detected_at.desc(), QualityChange.id.desc())):
        changes[ch.dataset_id].append(ch)

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
    latest_windows, latest_changes = _recent(db, keys, "annotator")
    # Only the latest report's per-annotator bounds are read (not every run's).
    latest_id = selected["reports"][-1][0].id if selected is not None and selected["reports"] else -1
    bounds = db.scalar(select(VendorReport.annotators).where(VendorReport.id == latest_id)) or []
    # Datasets with windows but no report yet: their number of annotators with a window.
    unreported = [e["dataset"].id for e in entries if not e["reports"] and e is not selected]
    qw = QualityWindow
    counted = dict(db.execute(
        select(qw.dataset_id, func.count(func.distinct(qw.group_name)))
        .where(qw.dataset_id.in_(unreported), qw.grouping == "annotator",
               qw.group_name.in_(select(Annotator.external_id).where(Annotator.workspace_id == workspace_id,
                                                                     Annotator.vendor == vendor)))
        .group_by(qw.dataset_id)).all()) if unreported else {}

    charts = []
    for entry in entries:
        ds_id = entry["dataset"].id
        reps = entry["reports"]
        entry["latest"] = reps[-1][0] if reps else None
        entry["latest_run"] = reps[-1][1] if reps else None
        entry["cost"] = _with_price({}, price, entry["latest"])
        windows = series.get(ds_id, [])
        entry["changes"] = changes.get(ds_id, [])
        entry["gold_pooled"], entry["gold_items"] = _pooled(windows, "gold_accuracy")
        newest = {m: max((w for w in windows if w.metric == m), key=lambda w: w.window_key, default=None)
                  for m in QUALITY_METRICS}
        entry["week"], entry["gold_week"] = newest["agreement"], newest["gold_accuracy"]
        entry["n_annotators"] = entry["latest"].n_annotators if reps else counted.get(ds_id, 0)
        charts.append(entry)
        if entry is not selected:
            continue
        entry["quality_chart"] = _quality_chart(windows, changes.get(ds_id, []),
                                                batch=entry["dataset"].quality_window == "batch")
        entry["sees"] = _sees(db, ds_id, vendor)
        audit = {a.get("annotator"): a for a in bounds}
        people = sorted({name for (d, name, _m) in latest_windows if d == ds_id} | set(audit))
        entry["annotators"] = [
            {"annotator": name, "agreement": (latest_windows.get((ds_id, name, "agreement")) or [None])[0],
             "gold": (latest_windows.get((ds_id, name, "gold_accuracy")) or [None])[0],
             "change": latest_changes.get((ds_id, name)), "audit": audit.get(name)} for name in people]
        if not reps:
            entry["n_annotators"] = len(people)
        entry["chart"] = None
        reps = [(rep, run) for rep, run in reps if period.contains(run.finished_at or run.created_at)]
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


VENDOR_COLUMNS = (
    Column("vendor", "vendor"), Column("change", "detected change", first="desc"), Column("dataset", "dataset"),
    Column("annotators", "annotators", numeric=True, first="desc"),
    Column("agreement", "agreement, latest week", numeric=True),
    Column("gold", "gold accuracy, latest week", numeric=True),
    Column("delta", "vs. previous week", numeric=True),
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
    "u_t": lambda v: v["u_t"], "alpha": lambda v: v["agreement"], "expert": lambda v: v["expert_equivalence"],
    "price": lambda v: v["price_per_label"], "per_cost": lambda v: v["experts_per_unit_cost"],
    "change": lambda v: _epoch_ms(v["change"].detected_at) if v["change"] else None,
}


def vendors_index(db: Session, workspace_id: int, args=None) -> dict:
    """Every vendor on every dataset's latest audit, weakest agreement first by default."""
    datasets = db.execute(select(Dataset.id, Dataset.name).where(Dataset.workspace_id == workspace_id)).all()
    names = dict(datasets)
    latest = latest_runs(db, list(names))
    rows = _vendor_rows(db, [r.id for r in latest.values()], names)
    # Each vendor's price beside its quality figures, and what its expert equivalence costs.
    prices = plans.price_rows(db, workspace_id, {v["vendor"] for v in rows})
    for v in rows:
        _with_price(v, prices.get(v["vendor"]), v["report"])
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
            "recall": [None if math.isnan(x) else float(x) for x in m.recall],
            "precision": [None if math.isnan(x) else float(x) for x in m.precision],
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

ALERT_COLUMNS = (
    Column("created", "raised", first="desc"), Column("severity", "severity", first="desc"),
    Column("kind", "kind"), Column("subject", "subject"), Column("message", "message", sortable=False),
    Column("dataset", "dataset"), Column("run", "run", numeric=True, first="desc"),
    Column("assignee", "assignee"), Column("acknowledged", "status", first="desc"),
)
_SEVERITY_RANK = {AlertSeverity.INFO.value: 0, AlertSeverity.WARNING.value: 1, AlertSeverity.CRITICAL.value: 2}
ALERT_STATUSES = ("open", "snoozed", "acknowledged", "all")


def alerts_page(db: Session, workspace_id: int, args=None, *, user_id: int | None = None,
                period: TimeRange | None = None) -> dict:
    """The workspace's alerts, filtered (open / snoozed / acknowledged / all, severity, kind, dataset,
    assignee, text, raised within ``period``) and paged in SQL; newest first by default, open ones only
    (not acknowledged, not snoozed)."""
    period = period or time_range({}, default="all")
    datasets = db.execute(select(Dataset.id, Dataset.name).where(Dataset.workspace_id == workspace_id)
                          .order_by(Dataset.name)).all()
    table = table_state("alerts", ALERT_COLUMNS, default_sort="created", default_direction="desc", per_page=50,
                        args=args, query_label="text contains",
                        filters={"status": ALERT_STATUSES,
                                 "severity": tuple(s.value for s in AlertSeverity), "kind": ALERT_KINDS,
                                 "dataset_id": tuple(str(d.id) for d in datasets),
                                 "assigned": ("me", "nobody")})
    status = table.filters.get("status", "open")
    assignee, acker = aliased(User), aliased(User)
    stmt = (select(Alert, Dataset.name, assignee.email, acker.email)
            .outerjoin(Dataset, Alert.dataset_id == Dataset.id)
            .outerjoin(assignee, assignee.id == Alert.assigned_to_id)
            .outerjoin(acker, acker.id == Alert.acknowledged_by_id)
            .where(Alert.workspace_id == workspace_id, *period.where(Alert.created_at)))
    now = datetime.now(UTC)
    awake = or_(Alert.snoozed_until.is_(None), Alert.snoozed_until <= now)
    if status == "open":
        stmt = stmt.where(Alert.acknowledged_at.is_(None), awake)
    elif status == "snoozed":
        stmt = stmt.where(Alert.acknowledged_at.is_(None), Alert.snoozed_until > now)
    elif status == "acknowledged":
        stmt = stmt.where(Alert.acknowledged_at.is_not(None))
    if "severity" in table.filters:
        stmt = stmt.where(Alert.severity == AlertSeverity(table.filters["severity"]))
    if "kind" in table.filters:
        stmt = stmt.where(Alert.kind == table.filters["kind"])
    if "dataset_id" in table.filters:
        stmt = stmt.where(Alert.dataset_id == int(table.filters["dataset_id"]))
    if table.filters.get("assigned") == "me":
        stmt = stmt.where(Alert.assigned_to_id == user_id)
    elif table.filters.get("assigned") == "nobody":
        stmt = stmt.where(Alert.assigned_to_id.is_(None))
    if table.q:
        pattern = like_pattern(table.q)
        stmt = stmt.where(or_(Alert.message.ilike(pattern, escape="\\"), Alert.subject.ilike(pattern, escape="\\")))
    severity = case({s: r for s, r in _SEVERITY_RANK.items()}, value=Alert.severity, else_=0)
    stmt = table.sql_order(stmt, {"created": Alert.created_at, "severity": severity, "kind": Alert.kind,
                                  "subject": Alert.subject, "dataset": Dataset.name, "run": Alert.audit_run_id,
                                  "assignee": assignee.email, "acknowledged": Alert.acknowledged_at}, Alert.id)
    table.fetch(db, stmt)
    return {"table": table, "datasets": datasets, "status": status, "statuses": ALERT_STATUSES, "kinds": ALERT_KINDS,
            "severities": [s.value for s in AlertSeverity], "snoozed": lambda a: is_snoozed(a, now),
            "period": period}


# --- audit runs -----------------------------------------------------------------------------------

RUN_COLUMNS = (
    Column("run", "run", numeric=True, first="desc"), Column("dataset", "dataset"),
    Column("version", "data version", numeric=True, first="desc"), Column("status", "status"),
    Column("queued", "queued", first="desc"), Column("waited", "waited (s)", sortable=False, numeric=True),
    Column("ran", "ran (s)", sortable=False, numeric=True), Column("error", "error", sortable=False),
)


def audit_runs(db: Session, workspace_id: int, args=None, *, period: TimeRange | None = None) -> dict:
    """The workspace's audit runs, newest first, filtered by dataset, state and when they were
    queued (``period``), paged in SQL."""
    period = period or time_range({}, default="all")
    datasets = db.execute(select(Dataset.id, Dataset.name).where(Dataset.workspace_id == workspace_id)
                          .order_by(Dataset.name)).all()
    table = table_state("runs", RUN_COLUMNS, default_sort="run", default_direction="desc", per_page=50, args=args,
                        filters={"status": tuple(s.value for s in AuditStatus),
                                 "dataset_id": tuple(str(d.id) for d in datasets)})
    stmt = (select(AuditRun, Dataset.name).options(defer(AuditRun.summary), defer(AuditRun.parameters))
            .join(Dataset, AuditRun.dataset_id == Dataset.id)
            .where(Dataset.workspace_id == workspace_id, *period.where(AuditRun.created_at)))
    if "status" in table.filters:
        stmt = stmt.where(AuditRun.status == AuditStatus(table.filters["status"]))
    if "dataset_id" in table.filters:
        stmt = stmt.where(AuditRun.dataset_id == int(table.filters["dataset_id"]))
    stmt = table.sql_order(stmt, {"run": AuditRun.id, "dataset": Dataset.name, "version": AuditRun.data_version,
                                  "status": AuditRun.status, "queued": AuditRun.created_at}, AuditRun.id)
    table.fetch(db, stmt)
    return {"table": table, "runs": table.rows, "datasets": datasets, "statuses": [s.value for s in AuditStatus],
            "period": period}


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    return (later - earlier).total_seconds() if later is not None and earlier is not None else None


_TIMING_WORDS = {"claim": "claim the run", "snapshot": "read the data", "compute": "compute the statistics",
                 "write": "write the results"}


def audit_run_page(db: Session, run: AuditRun, ds: Dataset) -> dict:
    """One audit: its data version, timings and notes, and every result it wrote (bounded lists)."""
    summary = run.summary or {}
    timings = [{"step": _TIMING_WORDS.get(k, k.replace("_", " ")), "seconds": v}
               for k, v in (summary.get("timings") or {}).items() if isinstance(v, int | float)]
    certs = db.execute(select(Certification, Release, Model).join(Release, Certification.release_id == Release.id)
                       .join(Model, Release.model_id == Model.id).where(Certification.audit_run_id == run.id)
                       .order_by(Model.name, Release.released_at.asc().nulls_last(), Release.id).limit(500)).all()
    curves = list(db.scalars(select(PowerCurve).options(defer(PowerCurve.points))
                             .where(PowerCurve.audit_run_id == run.id).order_by(PowerCurve.id).limit(500)))
    release_names = {r.id: f"{m.name} {r.version}" for _, r, m in certs}
    previous = db.scalar(select(func.max(AuditRun.id)).where(AuditRun.dataset_id == run.dataset_id,
                                                            AuditRun.id < run.id))
    following = db.scalar(select(func.min(AuditRun.id)).where(AuditRun.dataset_id == run.dataset_id,
                                                             AuditRun.id > run.id))
    counts = {k: summary.get(k) for k in ("n_items", "n_labeled_items", "n_annotations", "n_annotators", "n_releases")}
    return {
        "run": run, "dataset": ds, "summary": summary, "counts": counts, "timings": timings,
        "waited": _seconds(run.started_at, run.created_at), "ran": _seconds(run.finished_at, run.started_at),
        "notes": summary.get("notes") or [], "parameters": run.parameters or {}, "upper": summary.get("upper") or {},
        "certifications": [{"cert": c, "release": r, "model": m, "view": cert_view(c)} for c, r, m in certs],
        "best": best_rows(db.scalars(select(BestScore).where(BestScore.audit_run_id == run.id)
                                     .order_by(BestScore.metric))),
        "agreements": list(db.scalars(select(Agreement).where(Agreement.audit_run_id == run.id)
                                      .order_by(Agreement.vendor.nulls_first(), Agreement.coefficient).limit(500))),
        "vendors": list(db.scalars(select(VendorReport).options(defer(VendorReport.annotators),
                                                                defer(VendorReport.details))
                                   .where(VendorReport.audit_run_id == run.id).order_by(VendorReport.vendor)
                                   .limit(500))),
        "curves": [{"curve": c, "release": release_names.get(c.release_id) if c.release_id else None,
                    "view": curve_view(c) if c.release_id else None} for c in curves],
        "alerts": list(db.scalars(select(Alert).where(Alert.audit_run_id == run.id)
                                  .order_by(Alert.created_at.desc(), Alert.id.desc()).limit(50))),
        "quality_changes": list(db.scalars(select(QualityChange).where(QualityChange.audit_run_id == run.id)
                                           .order_by(QualityChange.detected_at.desc(), QualityChange.id.desc())
                                           .limit(50))),
        "assumptions": assumptions_view(summary.get("assumptions")),
        "previous_id": previous, "next_id": following, "ce_note": CE_NOTE, "l_note": L_INTERVAL_NOTE,
    }
