"""From a snapshot to result rows: which statistics an audit runs, and their row shapes.

Every number comes from :mod:`auditor.stats`; this module only chooses the inputs and
turns the results into plain dictionaries named like the result tables' columns (so
they travel through a Celery message and into one ``finish_audit`` write unchanged).

The work is split in parts that can run in separate tasks: :func:`dataset_part`
(bounds, vendors, agreement, BEST, power curve, assumption checks) and one
:func:`release_part` per release (L, confidence scores, verdict, survey
equivalence), whose input :func:`release_payload` is compact and JSON-ready.

Each release's certification records two verdicts: the paper's (Theorem 7, OMS with
the configured bound: valid for one look at a fixed sample, what reproduces its
tables) and the anytime one (valid however often the audit re-checks it: one betting
e-process per bound, ``anytime``; the earlier pair of sequences, ``anytime-fan``, is
recorded beside it for comparison). The badge and the ``certification_changed`` alert
use ``AuditOptions.method`` (``anytime`` by default). The anytime verdict needs state across audits, kept per dataset × release
in the certification row's ``details["anytime"]`` and carried to the next audit
through :class:`~auditor.audit.inputs.PreviousResults` (:func:`anytime_update`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from auditor.audit.inputs import AuditSnapshot, PreviousResults, ReleaseSnapshot
from auditor.jsonable import finite
from auditor.stats import (
    Annotations,
    AnytimeState,
    LabelCounts,
    StatsInputError,
    agreement_report,
    annotator_lower_bounds,
    best_performance,
    check_assumptions,
    confidence,
    item_values,
    lower_bound,
    row_histogram,
    tally_counts,
    upper_bounds,
)
from auditor.stats.equivalence import expert_equivalence, power_curve, survey_equivalence

__all__ = [
    "AuditOptions",
    "alerts_for",
    "anytime_update",
    "dataset_part",
    "merge_parts",
    "release_arrays",
    "release_inline",
    "release_part",
    "release_payload",
    "upper_summary",
]

BOUND_COLUMNS = {"theoretical": "t", "empirical": "e"}
_METHOD_NAMES = {"anytime": "anytime", "anytime-fan": "anytime (pair of sequences)", "oms": "paper's OMS",
                 "hms": "paper's HMS"}
ANYTIME_METHODS = ("anytime", "anytime-fan")
# (combiner, scorer) pairs of the survey-equivalence analysis: majority vote scored by
# agreement for every release; ABC scored by cross-entropy where the release gave
# probabilities (the paper's two running examples).
# With more than two classes "majority" is undefined and plurality takes its place.
HARD_PAIR = ("majority", "agreement")
SOFT_PAIR = ("abc", "cross_entropy")


def _hard_pair(n_labels: int) -> tuple[str, str]:
    return ("majority" if n_labels == 2 else "plurality", HARD_PAIR[1])


#: Pairwise Cohen's kappa keeps annotator × annotator matrices (about 32 MB each at 2,000).
PAIRWISE_MAX_ANNOTATORS = 2000


@dataclass(frozen=True)
class AuditOptions:
    """What an audit computes; recorded in the run's ``parameters``."""

    n_bootstrap: int = 500
    pairwise_max_annotations: int | None = None
    pairwise_bootstrap: int = 0
    seed: int = 0
    threshold: float = 0.95
    bound: str = "theoretical"
    # The badge's verdict: "anytime" (valid at every audit; "anytime-fan" its earlier, weaker
    # form) or the paper's "oms" / "hms".
    method: str = "anytime"
    tau: float = 0.0
    confidence: float = 0.95
    # Yearly false-alarm rate of the quality monitors (all groups of a dataset together).
    quality_alpha: float = 0.05

    def to_dict(self) -> dict[str, Any]:
        """Every option by its field name (generated from the fields: none is left out)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_settings(cls, w) -> AuditOptions:
        """Options from :class:`~auditor.config.WorkerSettings`."""
        return cls(n_bootstrap=w.n_bootstrap, pairwise_max_annotations=w.pairwise_max_annotations,
                   pairwise_bootstrap=w.pairwise_bootstrap, seed=w.seed,
                   threshold=w.certify_threshold, bound=w.certify_bound, method=w.certify_method,
                   quality_alpha=w.quality_alpha)


def _rng(options: AuditOptions, *key: int) -> np.random.Generator:
    # One independent, reproducible stream per part, whatever order the parts run in.
    return np.random.default_rng([options.seed, *key])


def _annotations(snap: AuditSnapshot) -> Annotations | None:
    """The snapshot's annotations as a stats table, over the items that have labels."""
    if snap.n_annotations == 0:
        return None
    used, item_codes = np.unique(snap.ann_item, return_inverse=True)
    return Annotations(
        item=item_codes.astype(np.int64), annotator=snap.ann_annotator.copy(), label=snap.ann_label.copy(),
        items=tuple(snap.item_ids[used].tolist()), annotators=snap.annotator_names, labels=snap.labels,
    )


def _curve_points(curve) -> list[dict[str, Any]]:
    """The curve's points; where the mean is a Monte Carlo estimate (exact sums out of reach),
    with its standard error ``mc_error``."""
    points = [{"k": int(k), "mean": finite(m), "ci_low": finite(lo), "ci_high": finite(hi), "n_items": int(n)}
              for k, m, lo, hi, n in zip(curve.k, curve.mean, curve.ci_low, curve.ci_high, curve.n_items,
                                         strict=True)]
    for point, err in zip(points, curve.mc_error, strict=True):
        if err > 0:
            point["mc_error"] = finite(err)
    return points


def _monte_carlo_note(curve, what: str) -> list[str]:
    if curve.method != "monte_carlo":
        return []
    return [f"{what} ({curve.combiner}, {curve.scorer}): its exact sums are out of reach (many labels per item "
            f"over many classes), so they were drawn by Monte Carlo; each point's mc_error is its standard "
            f"error (at most {float(np.max(curve.mc_error)):.2g})"]


def _fmt_raters(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _equivalence_value(v) -> tuple[float | None, str | None]:
    if isinstance(v, str):
        return None, v
    return finite(v), None


def _curve_row(curve, *, options: AuditOptions, seed_key: tuple[int, ...], release_id=None, vendor=None,
               reference="all") -> dict[str, Any]:
    return {
        "release_id": release_id, "vendor": vendor, "reference": reference, "combiner": curve.combiner,
        "scorer": curve.scorer, "max_k": curve.k_max, "n_bootstrap": options.n_bootstrap,
        "seed": options.seed * 1_000_003 + sum(seed_key), "points": _curve_points(curve), "method": curve.method,
    }


# ----------------------------------------------------------------------- dataset part


def upper_summary(snap: AuditSnapshot, ub=None) -> dict[str, Any]:
    """U_t and U_e of all the dataset's labels and the item counts behind them (what a release part needs)."""
    if ub is None and (snap.counts.sum(axis=1) > 0).any():
        ub = upper_bounds(snap.counts)
    return {"u_t": None if ub is None else finite(ub.theoretical), "u_e": None if ub is None else finite(ub.empirical),
            "n_t": 0 if ub is None else ub.n_items, "n_e": 0 if ub is None else ub.n_items_empirical}


def dataset_part(snap: AuditSnapshot, options: AuditOptions) -> dict[str, Any]:
    """Bounds overall and per vendor, annotators, agreement, BEST, power curve, assumptions."""
    notes: list[str] = []
    out: dict[str, Any] = {"vendor_reports": [], "best_scores": [], "agreements": [], "power_curves": []}
    labeled = snap.counts.sum(axis=1) > 0
    ub = upper_bounds(snap.counts) if labeled.any() else None
    summary: dict[str, Any] = {
        "n_items": int(snap.counts.shape[0]), "n_labeled_items": int(labeled.sum()),
        "n_annotations": snap.n_annotations, "n_annotators": len(snap.annotator_names),
        "n_releases": len(snap.releases), "labels": list(snap.labels),
        "upper": None if ub is None else {
            "u_t": finite(ub.theoretical), "u_e": finite(ub.empirical), "n_items": ub.n_items,
            "n_items_empirical": ub.n_items_empirical},
    }
    out["upper"] = upper_summary(snap, ub)
    ann = _annotations(snap)
    if ann is None:
        out["summary"], out["notes"] = summary, ["no annotations yet"]
        return out
    counts = LabelCounts(snap.counts[labeled], snap.labels, tuple(snap.item_ids[labeled].tolist()))

    # Per annotator (Theorem 3) and per vendor (Theorem 1 on the vendor's own labels).
    bounds = annotator_lower_bounds(ann, confidence=options.confidence)
    records = bounds.to_records()
    vendors: dict[str, list[int]] = {}
    for a, v in enumerate(snap.annotator_vendors):
        if v:
            vendors.setdefault(v, []).append(a)
    summary["annotators_without_vendor"] = [records[a] for a, v in enumerate(snap.annotator_vendors) if not v]
    experts = [a for a, t in enumerate(snap.annotator_tiers) if t == "expert"]
    expert_counts = _pool_counts(snap, experts) if experts else None
    # Pairwise Cohen's kappa once over everyone: a pair's kappa depends only on the two
    # annotators' shared items, so each vendor's mean is read off the same matrix.
    with_pairs = _pairwise_fits(ann, options, notes)
    overall, pairwise = _agreement_rows(ann if with_pairs else ann.counts(), options, vendor=None, key=(3,))
    for k, (vendor, members) in enumerate(sorted(vendors.items())):
        # The vendor's own per-item counts carry everything its bounds and coefficients need.
        pool = _pool_counts(snap, members)
        pool = pool[pool.sum(axis=1) > 0]
        vub = upper_bounds(pool)
        rep, _ = _agreement_rows(pool, options, vendor=vendor, key=(1, k))
        rep += _vendor_pairwise(pairwise, members, vendor=vendor, n_items=pool.shape[0])
        alpha = next((r["value"] for r in rep if r["coefficient"] == "krippendorff_alpha"), None)
        out["agreements"] += rep
        details: dict[str, Any] = {"n_items_empirical": vub.n_items_empirical}
        expert_eq: dict[str, Any] = {}
        crowd = [a for a in members if snap.annotator_tiers[a] != "expert"]
        if expert_counts is not None and crowd:
            expert_eq, details["expert_equivalence"] = _expert_equivalence(
                snap, crowd, expert_counts, options, key=(2, k), notes=notes, vendor=vendor)
        out["vendor_reports"].append({
            "vendor": vendor, "n_annotators": len(members), "n_items": int(pool.shape[0]),
            "n_annotations": int(pool.sum()), "u_t": finite(vub.theoretical), "u_e": finite(vub.empirical),
            "agreement": alpha, "expert_equivalence": None, **expert_eq,
            "annotators": [records[a] for a in members], "details": details,
        })

    out["agreements"] += overall

    out["best_scores"] += _best_rows(counts, options, notes)
    out["power_curves"] += _power_curve_rows(snap, counts, options, notes)

    if (snap.gold >= 0).any():
        summary["assumptions"] = _assumptions(snap, ann, notes)
    out["summary"], out["notes"] = summary, notes
    return out


def _pairwise_fits(ann, options: AuditOptions, notes: list[str]) -> bool:
    """Whether pairwise Cohen's kappa is computed on these annotations (a note says why not)."""
    limit = options.pairwise_max_annotations
    if limit is not None and len(ann) > limit:
        notes.append(f"pairwise Cohen's kappa left out: {len(ann)} annotations > "
                     f"{options.pairwise_max_annotations} (AUDITOR_AUDIT_PAIRWISE_MAX_ANNOTATIONS)")
        return False
    if ann.n_annotators > PAIRWISE_MAX_ANNOTATORS:
        # Its results are annotators × annotators matrices: 100,000 annotators would need 75 GiB each.
        notes.append(f"pairwise Cohen's kappa left out: {ann.n_annotators} annotators > {PAIRWISE_MAX_ANNOTATORS} "
                     "(its annotator × annotator matrices would not fit in memory)")
        return False
    return True


def _best_rows(counts: LabelCounts, options: AuditOptions, notes: list[str]) -> list[dict[str, Any]]:
    """BEST's score of each metric on the labelled items (its warnings become notes)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        best = best_performance(counts.counts, rng=_rng(options, 4))
    rows = [{
        "metric": metric, "value": float(value), "std_error": finite(best.standard_errors.get(metric)),
        "n_items": best.n_items, "alpha": [finite(a) for a in np.asarray(best.alpha, dtype=float)],
    } for metric, value in best.scores.items()]
    notes += [f"BEST: {w.message}" for w in caught]
    return rows


def _power_curve_rows(snap: AuditSnapshot, counts: LabelCounts, options: AuditOptions,
                      notes: list[str]) -> list[dict[str, Any]]:
    """The dataset's power curve (none, with a note, when no item has two labels or it is refused)."""
    if not (counts.counts.sum(axis=1) >= 2).any():
        notes.append("power curve: no item has two labels")
        return []
    combiner, scorer = _hard_pair(len(snap.labels))
    try:
        curve = power_curve(counts, combiner=combiner, scorer=scorer, n_bootstrap=options.n_bootstrap,
                            confidence=options.confidence, rng=_rng(options, 5))
    except StatsInputError as exc:  # e.g. too costly to compute exactly: the rest of the audit stands
        notes.append(f"power curve not computed: {exc}")
        return []
    notes += _monte_carlo_note(curve, "power curve")
    return [_curve_row(curve, options=options, seed_key=(5,))]


def _pool_counts(snap: AuditSnapshot, members: list[int]) -> np.ndarray:
    keep = np.isin(snap.ann_annotator, members)
    return tally_counts(snap.ann_item[keep], snap.ann_label[keep], snap.counts.shape[0], len(snap.labels))


def _expert_equivalence(snap, crowd, expert_counts, options, *, key, notes, vendor):
    """The vendor's expert equivalence: its headline columns (value, method, Monte Carlo
    error) and the per-k details, or ``({}, None)``."""
    pool = _pool_counts(snap, crowd)
    both = (pool.sum(axis=1) > 0) & (expert_counts.sum(axis=1) > 0)
    if not both.any():
        return {}, None
    names = tuple(snap.item_ids[both].tolist())
    try:
        eq = expert_equivalence(
            LabelCounts(pool[both], snap.labels, names), LabelCounts(expert_counts[both], snap.labels, names),
            combiner=_hard_pair(len(snap.labels))[0], scorer=HARD_PAIR[1], n_bootstrap=options.n_bootstrap,
            confidence=options.confidence, rng=_rng(options, *key))
    except StatsInputError as exc:
        notes.append(f"expert equivalence of {vendor}: {exc}")
        return {}, None
    values = eq.value
    detail = [{"k": k, "value": v, "ci_low": lo, "ci_high": hi}
              for k, (v, lo, hi) in enumerate(zip(eq.value, eq.ci_low, eq.ci_high, strict=True))]
    detail = [{key_: (finite(x) if not isinstance(x, str) and key_ != "k" else x) for key_, x in d.items()}
              for d in detail]
    drawn = [c for c in (eq.pool_curve, eq.expert_curve) if c.method == "monte_carlo"]
    if drawn:
        # Its exact sums out of reach: the curves were drawn, and each value carries its error
        # (None: the draws leave the crossing undetermined).
        for d, err in zip(detail, eq.mc_error, strict=True):
            if err > 0:
                d["mc_error"] = finite(err)
        worst = max(eq.mc_error, default=0.0)
        notes.append(f"expert equivalence of {vendor}: its exact sums are out of reach (many labels per item over "
                     f"many classes), so its curves were drawn by Monte Carlo; each value's mc_error is its "
                     f"standard error ({'some undetermined' if not np.isfinite(worst) else f'at most {worst:.2g}'})")
    # The vendor's headline: how many experts its full pool of k raters per item equals.
    headline = values[-1] if values else None
    if headline is None or isinstance(headline, str) or finite(headline) is None:
        return {}, detail
    return {"expert_equivalence": finite(headline), "expert_equivalence_method": "monte_carlo" if drawn else "exact",
            "expert_equivalence_mc_error": finite(eq.mc_error[-1]) if drawn else None}, detail


def _vendor_pairwise(pw, members: list[int], *, vendor: str, n_items: int) -> list[dict[str, Any]]:
    """The overlap-weighted mean pairwise kappa over the pairs within one vendor's pool."""
    if pw is None:
        return []
    idx = np.asarray(members)
    kappa, overlap = pw.kappa[np.ix_(idx, idx)], pw.overlap[np.ix_(idx, idx)]
    a, b = np.triu_indices(idx.size, k=1)
    ok = np.isfinite(kappa[a, b]) & (overlap[a, b] >= pw.min_overlap)
    if not ok.any():
        return []
    w = overlap[a, b][ok].astype(float)
    value = float((w * kappa[a, b][ok]).sum() / w.sum())
    return [{"vendor": vendor, "coefficient": "cohen_kappa_pairwise_mean", "value": value,
             "ci_low": None, "ci_high": None, "n_items": n_items}]


def _agreement_rows(data, options: AuditOptions, *, vendor, key) -> tuple[list[dict[str, Any]], Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rep = agreement_report(data, n_bootstrap=options.n_bootstrap, n_bootstrap_pairwise=options.pairwise_bootstrap,
                        confidence=options.confidence, rng=_rng(options, *key))
    rows = []
    for coef in (rep.krippendorff_alpha, rep.fleiss_kappa):
        rows.append({"vendor": vendor, "coefficient": coef.coefficient, "value": finite(coef.value),
                     "ci_low": finite(coef.ci_low), "ci_high": finite(coef.ci_high), "n_items": coef.n_items})
    if rep.pairwise is not None and rep.pairwise.n_pairs:
        pw = rep.pairwise
        rows.append({"vendor": vendor, "coefficient": "cohen_kappa_pairwise_mean", "value": finite(pw.mean_weighted),
                     "ci_low": finite(pw.weighted_ci_low), "ci_high": finite(pw.weighted_ci_high),
                     "n_items": pw.n_items})
    return rows, rep.pairwise


def _assumptions(snap: AuditSnapshot, ann: Annotations, notes: list[str]) -> dict[str, Any] | None:
    used = np.unique(snap.ann_item)
    gold = snap.gold[used]
    preds = {}
    for rel in snap.releases:
        full = np.full(snap.counts.shape[0], -1, dtype=np.int64)
        full[rel.item_index] = rel.labels
        if (full[used] >= 0).all():
            preds[f"{rel.model} {rel.version}"] = full[used]
    try:
        return check_assumptions(ann, gold, predictions=preds).to_dict()
    except StatsInputError as exc:
        notes.append(f"assumption checks: {exc}")
        return None


# ----------------------------------------------------------------------- release part


# ----------------------------------------------------------------------- anytime state


def _is_sorted(ids: np.ndarray) -> bool:
    return ids.shape[0] < 2 or bool((ids[1:] > ids[:-1]).all())


def _in_ranges(ids: np.ndarray, ranges, is_sorted: bool | None = None) -> np.ndarray:
    """Which of ``ids`` lie in one of the inclusive id ``ranges`` ([[first, last], ...])."""
    mask = np.zeros(ids.shape[0], dtype=bool)
    if not ranges:
        return mask
    r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    if _is_sorted(ids) if is_sorted is None else is_sorted:
        # sorted ids (a snapshot's are): each range is one slice
        lo = np.searchsorted(ids, r[:, 0], side="left")
        hi = np.searchsorted(ids, r[:, 1], side="right")
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            mask[a:b] = True
        return mask
    r = r[np.argsort(r[:, 0], kind="stable")]
    pos = np.searchsorted(r[:, 0], ids, side="right") - 1
    ok = pos >= 0
    mask[ok] = ids[ok] <= r[pos[ok], 1]
    return mask


def _to_ranges(ids: np.ndarray, mask: np.ndarray) -> list[list[int]]:
    """The runs of ``mask`` over the (sorted) ``ids`` as inclusive id ranges: a few
    ranges when items enter roughly in id order, whatever their number."""
    if not mask.any():
        return []
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1
    return [[int(ids[a]), int(ids[b])] for a, b in zip(starts, ends, strict=True)]


def _merged_ranges(ids: np.ndarray, ranges, new_pos: np.ndarray) -> list[list[int]]:
    """``ranges`` plus the items at positions ``new_pos`` of the sorted ``ids``, merged
    where they touch (no item of the snapshot between them): O(ranges + new items)."""
    spans = []
    if ranges:
        r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        lo = np.searchsorted(ids, r[:, 0], side="left")
        hi = np.searchsorted(ids, r[:, 1], side="right") - 1
        spans += [(a, b) for a, b in zip(lo.tolist(), hi.tolist(), strict=True) if a <= b]
    if new_pos.size:
        cut = np.flatnonzero(np.diff(new_pos) > 1)
        starts = np.concatenate([[0], cut + 1])
        ends = np.concatenate([cut, [new_pos.size - 1]])
        spans += list(zip(new_pos[starts].tolist(), new_pos[ends].tolist(), strict=True))
    spans.sort()
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [[int(ids[a]), int(ids[b])] for a, b in merged]


def anytime_update(snap: AuditSnapshot, release: ReleaseSnapshot, previous: Mapping[str, Any] | None = None,
                   *, tau: float = 0.0) -> dict[str, Any]:
    """The release's anytime state after this snapshot: the last one plus the items that arrived.

    **Arrival.** An item enters a release's streams at the first audit that sees it
    labelled (the U_e stream: with two labels; the L stream: labelled and predicted by
    the release), with the counts and prediction it has then; items entering at the
    same audit enter in item-id (creation) order. Labels added later do not change what
    an item contributed: the past of the e-processes stays fixed, which the anytime
    guarantee needs (:class:`~auditor.stats.AnytimeState`). When an item enters depends
    on when it was labelled and audited, not on its labels, so each entering item's
    values have the population means given the past.

    The state (JSON, :meth:`~auditor.stats.AnytimeState.to_dict`) is the running state of
    the streams and, per stream, the ranges of item ids that have entered: ``bt`` / ``be``
    (betting, items labelled and predicted; with two labels for ``be``) and ``t``, ``e``,
    ``l`` (the fan pair's). ``previous`` defaults to the state stored with the release's
    certification in the last succeeded audit. ``tau`` is the margin the betting streams
    test.

    **Restart.** A state stored before the betting streams existed (version 1), or for
    another ``tau``, has its betting streams restarted here: every item the snapshot has
    labelled and predicted enters them now, in id order, with its current labels (when
    it enters still does not depend on its labels, so the guarantee holds for the new
    streams; the earlier verdicts were the fan pair's). The fan pair continues.
    """
    if previous is None:
        previous = (snap.previous.certifications.get(release.release_id) or {}).get("anytime")
    state = AnytimeState.from_dict(previous, tau=tau) if previous else AnytimeState(tau=tau)
    entered = dict(previous.get("entered", {})) if previous else {}
    if previous and AnytimeState.restarts_betting(previous, tau):
        entered.pop("bt", None)
        entered.pop("be", None)
    ids, counts = snap.item_ids.astype(np.int64), snap.counts
    k = counts.sum(axis=1)
    pred = np.full(counts.shape[0], -1, dtype=np.int64)
    pred[release.item_index] = release.labels
    predicted = pred >= 0
    labelled = k >= 1
    eligible = {"t": labelled, "e": k >= 2, "l": labelled & predicted}
    eligible.update(bt=eligible["l"], be=eligible["e"] & predicted)
    is_sorted = _is_sorted(ids)
    before, new = {}, {}
    for s in eligible:
        # the betting stream of U_t takes the items of L's stream: once both have entered the
        # same items (every audit after the first with betting), one scan of the snapshot serves both
        same = s == "bt" and entered.get("bt") == entered.get("l")
        before[s] = before["l"] if same else _in_ranges(ids, entered.get(s), is_sorted)
        new[s] = new["l"] if same else eligible[s] & ~before[s]
    if new["l"].any():
        v = item_values(counts[new["l"]], pred[new["l"]])
        state.lower.update(v.agreement)
    for s, stream in (("t", state.upper_t), ("e", state.upper_e)):
        if new[s].any():
            v = item_values(counts[new[s]])
            stream.update(v.x_t if s == "t" else v.x_e)
    for s, stream in (("bt", state.bet_t), ("be", state.bet_e)):
        if new[s].any():
            v = item_values(counts[new[s]], pred[new[s]])
            stream.update(v.agreement, v.x_t if s == "bt" else v.x_e)
    out = state.to_dict()
    out["entered"] = {
        s: (list(entered.get(s, [])) if not new[s].any()
            else _merged_ranges(ids, entered.get(s), np.flatnonzero(new[s])) if is_sorted
            else _to_ranges(ids, before[s] | new[s]))
        for s in eligible}
    out["new_items"] = {s: int(new[s].sum()) for s in eligible}
    return out


def _anytime_scores(state: Mapping[str, Any] | None, tau: float, method: str = "anytime") -> dict[str, Any]:
    """S of an anytime verdict (``method``) with U_t and U_e from a state (None where a
    stream is empty)."""
    out: dict[str, Any] = {}
    st = AnytimeState.from_dict(state, tau=tau) if state else AnytimeState(tau=tau)
    for bound, col in BOUND_COLUMNS.items():
        if method == "anytime":
            empty = st.betting(bound).n == 0
        else:
            empty = (st.upper_t if bound == "theoretical" else st.upper_e).n == 0 or st.lower.n == 0
        if empty:
            out[col] = None
            continue
        c = st.confidence(bound, method=method, tau=tau)
        out[col] = {"score": finite(c.score), "evalue": finite(c.evalue), "n_upper": c.n_upper, "n_lower": c.n_lower,
                    **({"wealth": finite(c.wealth)} if method == "anytime" else {})}
    return out


def release_payload(snap: AuditSnapshot, release: ReleaseSnapshot, *, tau: float = 0.0) -> dict[str, Any]:
    """A release's inputs as JSON-ready lists: its items' counts and its predictions.

    Hard predictions are sent as the distinct (count vector, label) rows with their
    multiplicities: every statistic of the release depends on nothing else, except
    the anytime verdict, whose updated state (:func:`anytime_update`, small) is
    computed here from the snapshot in arrival order and sent along.
    """
    counts = snap.counts[release.item_index]
    ok = release.labels >= 0
    base = {"release_id": release.release_id, "model": release.model, "version": release.version,
            "labels": list(snap.labels), "n_predictions": int(release.item_index.shape[0]),
            "anytime": anytime_update(snap, release, tau=tau)}
    if release.probabilities is not None:
        return {**base, "counts": counts.tolist(), "probabilities": release.probabilities.tolist(),
                "multiplicity": None, "hard": release.labels.tolist()}
    rows, mult, _ = row_histogram(np.column_stack([counts[ok], release.labels[ok]]))
    return {**base, "counts": rows[:, :-1].tolist(), "hard": rows[:, -1].tolist(),
            "multiplicity": mult.tolist(), "probabilities": None}


def release_part(payload: Mapping[str, Any], upper: Mapping[str, Any], options: AuditOptions) -> dict[str, Any]:
    """:func:`release_arrays` on a :func:`release_payload` (as a Celery message carries it)."""
    L = len(payload["labels"])
    counts = np.asarray(payload["counts"], dtype=np.int64).reshape(-1, L)
    hard = np.asarray(payload["hard"], dtype=np.int64)
    probs = None if payload["probabilities"] is None else np.asarray(payload["probabilities"], dtype=float)
    if payload["multiplicity"] is not None:
        mult = np.asarray(payload["multiplicity"], dtype=np.int64)
        counts, hard = np.repeat(counts, mult, axis=0), np.repeat(hard, mult)
    info = {k: payload[k] for k in ("release_id", "model", "version", "labels", "n_predictions")}
    return release_arrays(info, counts, hard, probs, upper, options, anytime=payload.get("anytime"))


def release_arrays(info: Mapping[str, Any], counts: np.ndarray, hard: np.ndarray, probs: np.ndarray | None,
                   upper: Mapping[str, Any], options: AuditOptions, *,
                   anytime: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """L, the confidence scores with U_t and U_e, both verdicts, and the survey equivalence.

    ``counts`` (n, L) are the human label counts of the release's items, ``hard`` its
    labels, ``probs`` its probabilities (or None); ``upper`` the dataset's bounds;
    ``anytime`` the release's updated anytime state (:func:`anytime_update`; None
    leaves the anytime verdict undefined).
    """
    rid = int(info["release_id"])
    labeled = counts.sum(axis=1) > 0
    notes: list[str] = []
    if not labeled.any() or upper.get("u_t") is None:
        return {"certifications": [], "power_curves": [],
                "notes": [f"release {rid}: none of its items has a human label yet"]}
    lb = lower_bound(counts[labeled], hard[labeled])
    scores = _paper_scores(lb, upper, options)
    col = BOUND_COLUMNS[options.bound]
    # The anytime columns hold the configured anytime method's verdict (the betting one unless
    # the badge is set to the fan pair); both are in the details.
    anytime_method = options.method if options.method in ANYTIME_METHODS else "anytime"
    for m in ANYTIME_METHODS:
        m_scores = _anytime_scores(anytime, options.tau, m)
        for c_, v in m_scores.items():
            scores[f"{'theoretical' if c_ == 't' else 'empirical'}/{m}"] = v or {"score": None}
        if m == anytime_method:
            any_scores = m_scores
    paper_method = options.method if options.method in ("hms", "oms") else "oms"
    paper = scores[f"{options.bound}/{paper_method}"]["score"]
    anytime_s = None if any_scores[col] is None else any_scores[col]["score"]
    chosen = anytime_s if options.method in ANYTIME_METHODS else paper
    certified = chosen is not None and chosen >= options.threshold
    verdict = "undefined" if chosen is None else ("certified" if certified else "not certified")
    state = None if anytime is None else {k: v for k, v in anytime.items() if k != "new_items"}
    cert = {
        "release_id": rid, "n_items_upper": upper["n_t"], "n_items_lower": lb.n_items,
        "u_t": upper["u_t"], "u_e": upper["u_e"], "l": lb.value, "tau": options.tau,
        "s_hms_t": scores["theoretical/hms"]["score"], "s_oms_t": scores["theoretical/oms"]["score"],
        "s_hms_e": scores["empirical/hms"]["score"], "s_oms_e": scores["empirical/oms"]["score"],
        "s_anytime_t": None if any_scores["t"] is None else any_scores["t"]["score"],
        "s_anytime_e": None if any_scores["e"] is None else any_scores["e"]["score"],
        "certified_paper": None if paper is None else bool(paper >= options.threshold),
        "certified_anytime": None if anytime_s is None else bool(anytime_s >= options.threshold),
        "method": options.method,
        "certified": bool(certified), "certified_with": "U_" + col, "verdict": verdict,
        "details": {"confidence": scores, "method": options.method, "paper_method": paper_method,
                    "threshold": options.threshold,
                    "aggregation": lb.aggregation, "n_predictions": info["n_predictions"],
                    "model": info["model"], "version": info["version"], "anytime": state,
                    "anytime_new_items": None if anytime is None else anytime.get("new_items")},
    }
    curves = _equivalence_rows(rid, tuple(info["labels"]), counts[labeled], hard[labeled],
                               None if probs is None else probs[labeled], options, notes)
    return {"certifications": [cert], "power_curves": curves, "notes": notes}


def _equivalence_rows(rid: int, labels: tuple, counts: np.ndarray, hard: np.ndarray, probs: np.ndarray | None,
                      options: AuditOptions, notes: list[str]) -> list[dict[str, Any]]:
    """The release's survey equivalence, hard labels and (with probabilities) soft, on its
    labelled items (``counts``, ``hard`` and ``probs`` already restricted to them)."""
    curves: list[dict[str, Any]] = []
    lc = LabelCounts(counts, labels, tuple(range(counts.shape[0])))
    if (lc.counts.sum(axis=1) >= 2).any():
        pairs = [(_hard_pair(len(labels)), hard, 6)]
        if probs is not None:
            pairs.append((SOFT_PAIR, probs, 7))
        for (combiner, scorer), pred, key in pairs:
            try:
                eq = survey_equivalence(lc, pred, combiner=combiner, scorer=scorer, n_bootstrap=options.n_bootstrap,
                                        confidence=options.confidence, rng=_rng(options, key, rid))
            except StatsInputError as exc:  # e.g. too costly to compute exactly: the certification stands
                notes.append(f"release {rid}: survey equivalence ({combiner}, {scorer}) not computed: {exc}")
                continue
            notes += _monte_carlo_note(eq.curve, f"release {rid}: survey equivalence")
            if eq.mc_error > 0:
                error = (f"a Monte Carlo standard error of {eq.mc_error:.2g} raters" if np.isfinite(eq.mc_error)
                         else "no determined Monte Carlo error: within the points' errors the crossing "
                              "could leave the curve")
                notes.append(f"release {rid}: survey equivalence ({combiner}, {scorer}) {_fmt_raters(eq.value)} "
                             f"read off that drawn curve has {error}")
            row = _curve_row(eq.curve, options=options, seed_key=(key, rid), release_id=rid)
            value, note = _equivalence_value(eq.value)
            low, low_note = _equivalence_value(eq.ci_low)
            high, high_note = _equivalence_value(eq.ci_high)
            row.update({
                "classifier_score": finite(eq.classifier_score.value),
                "classifier_low": finite(eq.classifier_score.ci_low),
                "classifier_high": finite(eq.classifier_score.ci_high),
                "equivalence": value, "equivalence_low": low, "equivalence_high": high,
                "equivalence_note": note, "equivalence_low_note": low_note, "equivalence_high_note": high_note,
                # Read off a drawn curve: its Monte Carlo error (None: undetermined, see the note).
                "equivalence_mc_error": finite(eq.mc_error) if eq.curve.method == "monte_carlo" else None,
            })
            curves.append(row)
    else:
        notes.append(f"release {rid}: survey equivalence needs items with two labels")
    return curves


def _paper_scores(lb, upper: Mapping[str, Any], options: AuditOptions) -> dict[str, Any]:
    """The paper's confidence scores (HMS and OMS) against U_t and U_e, keyed ``bound/method``."""
    scores: dict[str, Any] = {}
    for bound, col in BOUND_COLUMNS.items():
        u, n_u = upper[f"u_{col}"], upper[f"n_{col}"]
        for method in ("hms", "oms"):
            if u is None:
                scores[f"{bound}/{method}"] = {"score": None, "t_u": None, "t_l": None}
                continue
            c = confidence(lb.value, u, n_u, n_lower=lb.n_items, tau=options.tau, method=method)
            scores[f"{bound}/{method}"] = {"score": finite(c.score), "t_u": finite(c.t_u), "t_l": finite(c.t_l),
                                           **({"clamped": True} if c.clamped else {})}
    return scores


def release_inline(snap: AuditSnapshot, release: ReleaseSnapshot, upper: Mapping[str, Any],
                   options: AuditOptions) -> dict[str, Any]:
    """:func:`release_arrays` straight from the snapshot (no message in between)."""
    info = {"release_id": release.release_id, "model": release.model, "version": release.version,
            "labels": list(snap.labels), "n_predictions": int(release.item_index.shape[0])}
    ok = release.labels >= 0
    probs = None if release.probabilities is None else release.probabilities[ok]
    return release_arrays(info, snap.counts[release.item_index][ok], release.labels[ok], probs, upper, options,
                          anytime=anytime_update(snap, release, tau=options.tau))


# ----------------------------------------------------------------------- assembly


def merge_parts(dataset: Mapping[str, Any], releases: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The result rows of the whole audit, and its summary."""
    results = {key: list(dataset.get(key, [])) for key in
               ("vendor_reports", "best_scores", "agreements", "power_curves")}
    results["certifications"] = []
    notes = list(dataset.get("notes", []))
    for part in releases:
        results["certifications"] += part["certifications"]
        results["power_curves"] += part["power_curves"]
        notes += part.get("notes", [])
    summary = dict(dataset.get("summary", {}))
    summary["certified_releases"] = [c["release_id"] for c in results["certifications"] if c["certified"]]
    summary["notes"] = notes
    return {"results": results, "summary": summary}


def alerts_for(previous: PreviousResults, results: Mapping[str, Any], options: AuditOptions) -> list[dict[str, Any]]:
    """Alerts on what changed since the last succeeded audit.

    A release whose verdict changed (or that is certified on its first audit); the
    verdict is the badge's (``options.method``: the anytime one by default). Vendors'
    and annotators' quality changes are found by the quality monitors
    (:mod:`auditor.audit.quality`), which raise their own alerts as the run is written.
    """
    alerts = []
    for c in results["certifications"]:
        before = previous.certifications.get(c["release_id"])
        name = f"{c['details']['model']} {c['details']['version']}"
        if before is None and not c["certified"]:
            continue
        if before is not None and before["verdict"] == c["verdict"]:
            continue
        was = "new" if before is None else before["verdict"]
        alerts.append({
            "kind": "certification_changed", "severity": "info" if c["certified"] else "warning",
            "subject": name[:200],
            "message": f"{name}: {was} → {c['verdict']} (L={c['l']:.4f}, U_t={c['u_t']:.4f}; "
                       f"{_METHOD_NAMES.get(c.get('method', options.method), options.method)} verdict)",
            "details": {"release_id": c["release_id"], "before": was, "after": c["verdict"],
                        "method": c.get("method", options.method),
                        "l": c["l"], "u_t": c["u_t"],
                        "score": c.get(f"s_{c.get('method', options.method)}_{BOUND_COLUMNS[options.bound]}")},
        })
    return alerts
