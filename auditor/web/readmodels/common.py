"""Shared by the read models: quality windows and charts, certification and curve views, the
conventions of cross-entropy and L's interval."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session, aliased

from auditor.db import (
    AuditRun,
    Certification,
    PowerCurveRecord,
    QualityChange,
    QualityWindow,
)
from auditor.stats.hoeffding import hoeffding_interval

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


def curve_view(curve: PowerCurveRecord | None) -> dict | None:
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
    low, high = hoeffding_interval(value, n, confidence=confidence)
    return float(low), float(high)


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


def _power_chart(human: PowerCurveRecord, marked: list[tuple[str, PowerCurveRecord]], best: Mapping[str, dict]) -> dict:
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


def _pooled(windows: list[QualityWindow], metric: str) -> tuple[float | None, float]:
    """A metric's mean over all the windows' units (each window's mean weighted by its items)."""
    rows = [w for w in windows if w.metric == metric and w.value is not None and w.n_items]
    n = sum(w.n_items for w in rows)
    return (sum(w.value * w.n_items for w in rows) / n if n else None), n
