"""Vendor and annotator quality over time: windowed series and change detection.

Two questions a team monitoring labeling vendors asks every week:

* *How good was each vendor (or annotator) in each time window?*
  :func:`quality_series` answers per group × window: the agreement of the group's
  labels with the leave-one-out plurality of the *other* annotators on the same items
  (all labels of those items, whenever they came), the accuracy against gold where gold
  exists, and the group's U_t / U_e (Xu et al., Theorem 1 / Definition 1) on the
  window's items, each with a confidence interval.
* *Which group got worse (or better), since when, and how sure are we?*
  :func:`detect_changes` runs a sequential change detector on each group's stream of
  per-item quality, checked after every window, whose probability of *ever* raising a
  false alarm on a stationary stream is at most ``alpha`` for all groups together.

The unit of observation is one item within one window for one group: the mean of the
group's per-annotation scores on that item (items are independent; annotations of one
item are not, because they share the consensus). Intervals and detectors are built on
these units, so a vendor whose three annotators all label the same item is not counted
as three independent observations.

The detector
------------
For a candidate change between windows ``k - 1`` and ``k``, the units before ``k`` give a
fixed-sample empirical-Bernstein interval for the pre-change mean (Maurer & Pontil,
2009), and the units from ``k`` on give an empirical-Bernstein *confidence sequence*
(Howard, Ramdas, McAuliffe & Sekhon, Annals of Statistics 2021, Theorem 4 with the
polynomial stitched boundary of their eq. (10)), valid at every later look at once. A
change is flagged when the two are disjoint. Under stationarity (every unit has the same
mean, units independent) both hold for candidate ``k`` with probability at least
``1 - a_k``; with ``a_k = alpha_g / (k (k + 1))`` (which sums to ``alpha_g`` over
``k = 1, 2, …``) and ``alpha_g = alpha / n_groups × share of the metric``, the
probability that any group ever raises a false alarm at any look is at most ``alpha``:
a guarantee that holds however often the detector is re-checked and however long the
stream runs. The estimated start is the candidate ``k`` with the largest standardized
difference; after a change, the group's detector restarts from that start.

The consensus of an item uses all of its labels, including ones that arrived after the
window; re-running on more data can therefore move earlier units slightly. The
guarantee is for the units as computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from scipy import special, stats

from auditor.stats._validation import StatsInputError, check_probability
from auditor.stats.certification import tie_credit
from auditor.stats.counts import _label_codes

if TYPE_CHECKING:  # pandas loads pyarrow: imported where a function uses it
    import pandas as pd

__all__ = [
    "ChangeReport",
    "QualityMonitor",
    "QualitySeries",
    "UnitStream",
    "change_scan",
    "detect_changes",
    "eb_confidence_sequence_radius",
    "quality_series",
    "quality_units",
]

GROUPINGS = ("vendor", "annotator")
_STITCH_ETA, _STITCH_S = 2.0, 1.4


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class _Coded:
    """Records as integer codes (one row per annotation) plus the names behind them."""

    item: np.ndarray
    group: np.ndarray
    label: np.ndarray
    window: np.ndarray
    items: tuple
    groups: tuple
    labels: tuple
    window_start: np.ndarray  # datetime64[ns] or batch ids, one per window code
    window_end: np.ndarray
    timestamp: np.ndarray | None


def _frame(records) -> pd.DataFrame:
    import pandas as pd

    if isinstance(records, pd.DataFrame):
        return records
    if isinstance(records, Mapping):
        return pd.DataFrame(dict(records))
    rows = list(records)
    if not rows:
        raise StatsInputError("`records` is empty: there are no annotations.")
    if not isinstance(rows[0], Mapping):
        raise StatsInputError("`records` must be a DataFrame, a mapping of columns, or a list of dicts.")
    return pd.DataFrame.from_records(rows)


def _require(frame: pd.DataFrame, col: str) -> np.ndarray:
    import pandas as pd

    if col not in frame.columns:
        raise StatsInputError(f"`records` has no field {col!r} (fields: {list(frame.columns)}).")
    values = frame[col].to_numpy()
    missing = pd.isna(values)
    if missing.any():
        raise StatsInputError(f"row {int(np.flatnonzero(missing)[0])}: field {col!r} is missing.")
    return values


def _window_codes(frame: pd.DataFrame, window: str, origin) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Window code per row, and each window's start and end (sorted in time)."""
    import pandas as pd

    if window == "batch":
        batch = _require(frame, "batch")
        if "timestamp" in frame.columns:
            ts = _timestamps(frame)
            order = pd.DataFrame({"b": batch, "t": ts}).groupby("b", sort=False)["t"].agg(["min", "max"])
            order = order.sort_values("min", kind="stable")
            codes = pd.Index(order.index).get_indexer(batch)
            return codes.astype(np.int64), order["min"].to_numpy(), order["max"].to_numpy(), ts
        uniq, codes = np.unique(batch, return_inverse=True)
        return codes.astype(np.int64), uniq, uniq, None
    try:
        step = pd.to_timedelta(window)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(
            f"`window` must be 'batch' or a fixed length such as '7D' or '1D'; got {window!r}."
        ) from exc
    if step <= pd.Timedelta(0):
        raise StatsInputError(f"`window` must be positive; got {window!r}.")
    ts = _timestamps(frame)
    start = pd.Timestamp(ts.min()).floor("D") if origin is None else pd.Timestamp(origin)
    if start.tzinfo is None and isinstance(ts.dtype, pd.DatetimeTZDtype):
        start = start.tz_localize("UTC")
    raw = ((ts - start) // step).to_numpy()
    if (raw < 0).any():
        raise StatsInputError(f"row {int(np.flatnonzero(raw < 0)[0])}: field 'timestamp' is before `origin`.")
    uniq, codes = np.unique(raw, return_inverse=True)
    starts = (start + uniq * step)
    return codes.astype(np.int64), np.asarray(starts), np.asarray(starts + step), ts.to_numpy()


def _timestamps(frame: pd.DataFrame) -> pd.Series:
    import pandas as pd

    raw = _require(frame, "timestamp")
    try:
        ts = pd.to_datetime(pd.Series(raw), utc=True, format="mixed")
    except (TypeError, ValueError) as exc:
        # find the first bad row for the message
        for i, v in enumerate(raw):
            try:
                pd.Timestamp(v)
            except (TypeError, ValueError):
                raise StatsInputError(f"row {i}: field 'timestamp' {v!r} is not a date and time.") from exc
        raise StatsInputError(f"field 'timestamp': {exc}") from exc
    return ts


def _code_records(records, by: str, window: str, labels, origin) -> _Coded:
    import pandas as pd

    if by not in GROUPINGS:
        raise StatsInputError(f"`by` must be one of {GROUPINGS}; got {by!r}.")
    frame = _frame(records)
    if len(frame) == 0:
        raise StatsInputError("`records` is empty: there are no annotations.")
    item_v = _require(frame, "item_id")
    ann_v = _require(frame, "annotator_id")
    label_codes, labels = _label_codes(_require(frame, "label"), labels)
    group_v = _require(frame, "vendor") if by == "vendor" else ann_v
    item, items = pd.factorize(pd.Series(item_v), sort=False)
    ann, anns = pd.factorize(pd.Series(ann_v), sort=False)
    pair = item.astype(np.int64) * len(anns) + ann
    order = np.argsort(pair, kind="stable")
    dup = np.flatnonzero(pair[order][1:] == pair[order][:-1])
    if dup.size:
        first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise StatsInputError(
            f"row {second}: annotator {ann_v[second]!r} already labeled item {item_v[second]!r} at row "
            f"{first}; keep one (the current) label per (item, annotator)."
        )
    group, groups = pd.factorize(pd.Series(group_v), sort=True)
    wcode, wstart, wend, ts = _window_codes(frame, window, origin)
    return _Coded(item.astype(np.int64), group.astype(np.int64), label_codes, wcode, tuple(items),
                  tuple(groups), labels, wstart, wend, ts)


def _gold_codes(gold, items: tuple, labels: tuple) -> np.ndarray:
    """Gold label code per item code, -1 where an item has no gold label."""
    import pandas as pd

    out = np.full(len(items), -1, dtype=np.int64)
    if gold is None:
        return out
    if isinstance(gold, pd.DataFrame):
        gold = dict(zip(_require(gold, "item_id"), _require(gold, "label"), strict=True))
    if not isinstance(gold, Mapping):
        raise StatsInputError("`gold` must be a mapping item_id → label or a frame with item_id and label.")
    if not gold:
        return out
    keys = list(gold)
    codes, _ = _label_codes(np.asarray([gold[k] for k in keys], dtype=object), labels, field_name="gold label")
    index = pd.Index(items).get_indexer(keys)
    known = index >= 0
    out[index[known]] = codes[known]
    return out


# --------------------------------------------------------------------------- units


@dataclass(frozen=True)
class UnitStream:
    """Per (group, window): the number of units and the sums of their values and squares.

    A *unit* is one item within one window for one group; its value is the mean of the
    group's per-annotation scores on that item (e.g. agreement with the consensus).
    Arrays have shape (n_groups, n_windows); windows are in time order.
    """

    n: np.ndarray
    s1: np.ndarray
    s2: np.ndarray
    n_labels: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.s1 / self.n


def quality_units(unit_key: np.ndarray, score: np.ndarray, group: np.ndarray, window: np.ndarray,
                  n_groups: int, n_windows: int) -> UnitStream:
    """Aggregate per-annotation scores into units and then into (group, window) sums.

    Parameters
    ----------
    unit_key : int array (M,)
        Identifies the unit of each annotation (the same for annotations of one item by
        one group in one window; e.g. ``item`` codes when each item lies in one window).
    score : float array (M,)
        Per-annotation score in [0, 1]; NaN rows (no consensus, no gold) are left out.
    group, window : int arrays (M,)
    """
    ok = ~np.isnan(score)
    key = (group[ok] * n_windows + window[ok]).astype(np.int64)
    unit = unit_key[ok].astype(np.int64)
    # One integer per (cell, unit), ordered as the pairs are: a 1-D sort, not a row sort.
    base = min(0, int(unit.min(initial=0)))
    span = int(unit.max(initial=-1)) + 1 - base
    if 0 < span and n_groups * n_windows * span < 2**62:
        codes, inv = np.unique(key * span + (unit - base), return_inverse=True)
        cell = codes // span
    else:
        ukeys, inv = np.unique(np.stack([key, unit]), axis=1, return_inverse=True)
        cell = ukeys[0]
    inv = inv.ravel()
    cnt = np.bincount(inv)
    mean = np.bincount(inv, weights=score[ok]) / cnt
    size = n_groups * n_windows
    n = np.bincount(cell, minlength=size).reshape(n_groups, n_windows)
    s1 = np.bincount(cell, weights=mean, minlength=size).reshape(n_groups, n_windows)
    s2 = np.bincount(cell, weights=mean * mean, minlength=size).reshape(n_groups, n_windows)
    labels = np.bincount(key, minlength=size).reshape(n_groups, n_windows)
    return UnitStream(n, s1, s2, labels)


def _loo_credit(coded: _Coded) -> np.ndarray:
    """Each annotation's tie credit against the plurality of the other labels on its item."""
    n_items, n_labels = len(coded.items), len(coded.labels)
    counts = np.bincount(coded.item * n_labels + coded.label, minlength=n_items * n_labels).reshape(n_items, n_labels)
    out = np.empty(coded.item.size)
    chunk = 1 << 18
    for start in range(0, coded.item.size, chunk):
        sl = slice(start, start + chunk)
        others = counts[coded.item[sl]].copy()
        others[np.arange(others.shape[0]), coded.label[sl]] -= 1
        out[sl] = tie_credit(others, coded.label[sl])
    return out


# --------------------------------------------------------------------------- intervals


def _wilson(p: np.ndarray, n_eff: np.ndarray, z) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = 1 + z * z / n_eff
        centre = (p + z * z / (2 * n_eff)) / denom
        half = z * np.sqrt(p * (1 - p) / n_eff + z * z / (4 * n_eff * n_eff)) / denom
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def _unit_interval(n: np.ndarray, s1: np.ndarray, s2: np.ndarray, confidence: float):
    """Mean of units in [0, 1] with a Wilson interval on the effective sample size.

    The effective size is ``n p (1 - p) / var`` with ``var`` the units' sample variance
    (so that ``p (1 - p) / n_eff`` is the variance of the mean): the Wilson interval
    then keeps its good behaviour near 0 and 1, and reduces to the normal interval on
    the units' own spread in the middle.
    """
    # Student's quantile on the units' degrees of freedom: small windows estimate their
    # own variance, and the normal quantile under-covers there.
    z = stats.t.ppf(0.5 + confidence / 2, np.maximum(n - 1, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        p = s1 / n
        var = np.where(n > 1, (s2 - n * p * p) / np.maximum(n - 1, 1), np.nan)
        var = np.maximum(var, 0.0)
        bern = p * (1 - p)
        n_eff = np.where((var > 0) & (bern > 0), n * bern / np.where(var > 0, var, 1.0), n)
        n_eff = np.maximum(n_eff, 1.0)
    lo, hi = _wilson(p, n_eff, z)
    lo = np.where(n > 0, lo, np.nan)
    hi = np.where(n > 0, hi, np.nan)
    return np.where(n > 0, p, np.nan), lo, hi


# --------------------------------------------------------------------------- series


@dataclass(frozen=True)
class QualitySeries:
    """Quality per group and window. ``to_frame()`` gives one row per group × window."""

    by: str
    window: str
    confidence: float
    labels: tuple
    frame: pd.DataFrame = field(repr=False)

    def to_frame(self) -> pd.DataFrame:
        return self.frame.copy()


def _x_sums(coded: _Coded, keep: np.ndarray, n_windows: int, n_groups: int):
    """Per (group, window): per-item X^t and X^e sums over the group's labels in the window."""
    n_labels = len(coded.labels)
    cell = coded.group[keep] * n_windows + coded.window[keep]
    key = np.stack([cell, coded.item[keep], coded.label[keep]])
    ukey, cnt = np.unique(key, axis=1, return_counts=True)
    cell_item = ukey[0] * (len(coded.items) + 1) + ukey[1]
    ci, inv = np.unique(cell_item, return_inverse=True)
    k = np.bincount(inv, weights=cnt)
    sq = np.bincount(inv, weights=cnt.astype(float) ** 2)
    xt = sq / (k * k)
    with np.errstate(invalid="ignore", divide="ignore"):
        xe = np.where(k >= 2, (sq - k) / (k * (k - 1)), np.nan)
    cells = ci // (len(coded.items) + 1)
    size = n_groups * n_windows
    del n_labels
    out = {}
    for name, x in (("t", xt), ("e", xe)):
        ok = ~np.isnan(x)
        out[name] = (
            np.bincount(cells[ok], minlength=size).reshape(n_groups, n_windows),
            np.bincount(cells[ok], weights=x[ok], minlength=size).reshape(n_groups, n_windows),
            np.bincount(cells[ok], weights=x[ok] ** 2, minlength=size).reshape(n_groups, n_windows),
        )
    return out


def quality_series(records, *, by: str = "vendor", window: str = "7D", gold=None, labels=None,
                   confidence: float = 0.95, origin=None) -> QualitySeries:
    """Each vendor's (or annotator's) quality per time window, with intervals.

    Parameters
    ----------
    records : DataFrame, mapping of columns or list of dicts
        The long import format: ``item_id``, ``annotator_id``, ``label``, ``vendor``
        (when ``by="vendor"``), ``timestamp`` (calendar windows) or ``batch``
        (``window="batch"``). One current label per (item, annotator).
    by : {"vendor", "annotator"}
    window : str
        ``"batch"`` (one window per import batch, ordered by their first time stamp) or a
        fixed length understood by :func:`pandas.to_timedelta` (``"7D"``, ``"1D"``,
        ``"12h"``); calendar windows start at ``origin`` (default: midnight UTC of the
        first time stamp).
    gold : mapping item_id → label, or DataFrame with ``item_id`` and ``label``, optional
    labels : sequence, optional
        The ordered label set (inferred when omitted).
    confidence : float, default 0.95
        Level of every interval.

    Returns
    -------
    QualitySeries
        ``to_frame()`` columns: ``group``, ``window_start``, ``window_end``, ``n_items``,
        ``n_labels``, ``agreement`` (mean over the window's items of the group's
        agreement with the leave-one-out plurality of the other annotators on the item;
        ties give 1/T), ``agreement_low``/``agreement_high``, ``gold_accuracy`` (on items
        with gold, NaN without) with ``gold_accuracy_low``/``_high``, ``n_gold_items``,
        ``u_t``/``u_t_low``/``u_t_high`` and ``u_e``/``u_e_low``/``u_e_high`` (the
        group's upper bounds on its own labels of the window's items).

    Notes
    -----
    Intervals treat items as the independent units (annotations of one item share its
    consensus): a Wilson interval on the effective sample size of the per-item means.
    U intervals are the interval of the mean of X mapped through the square root.
    """
    confidence = check_probability(confidence, name="confidence", open_interval=True)
    coded = _code_records(records, by, window, labels, origin)
    return _series(coded, _unit_streams(coded, gold), by, window, confidence)


def _unit_streams(coded: _Coded, gold) -> dict[str, UnitStream]:
    """Per (group, window) units of agreement with the leave-one-out consensus and of gold accuracy."""
    n_groups, n_windows = len(coded.groups), len(coded.window_start)
    credit = _loo_credit(coded)
    g_item = _gold_codes(gold, coded.items, coded.labels)[coded.item]
    correct = np.where(g_item >= 0, (coded.label == g_item).astype(float), np.nan)
    return {
        "agreement": quality_units(coded.item, credit, coded.group, coded.window, n_groups, n_windows),
        "gold_accuracy": quality_units(coded.item, correct, coded.group, coded.window, n_groups, n_windows),
    }


def _series(coded: _Coded, streams: dict[str, UnitStream], by: str, window: str, confidence: float) -> QualitySeries:
    import pandas as pd

    n_groups, n_windows = len(coded.groups), len(coded.window_start)
    agree, golds = streams["agreement"], streams["gold_accuracy"]
    a_mean, a_lo, a_hi = _unit_interval(agree.n, agree.s1, agree.s2, confidence)
    g_mean, g_lo, g_hi = _unit_interval(golds.n, golds.s1, golds.s2, confidence)

    all_rows = np.ones(coded.item.size, dtype=bool)
    cell = coded.group * n_windows + coded.window
    size = n_groups * n_windows
    n_labels = np.bincount(cell, minlength=size).reshape(n_groups, n_windows)
    pairs = np.unique(np.stack([cell, coded.item]), axis=1)
    n_items = np.bincount(pairs[0], minlength=size).reshape(n_groups, n_windows)
    x = _x_sums(coded, all_rows, n_windows, n_groups)
    u = {}
    for name in ("t", "e"):
        m, lo, hi = _unit_interval(*x[name], confidence)
        u[name] = (np.sqrt(m), np.sqrt(lo), np.sqrt(hi))

    gi, wi = np.nonzero(n_labels > 0)
    frame = pd.DataFrame({
        "group": np.asarray(coded.groups, dtype=object)[gi],
        "window_start": coded.window_start[wi],
        "window_end": coded.window_end[wi],
        "n_items": n_items[gi, wi],
        "n_labels": n_labels[gi, wi],
        "agreement": a_mean[gi, wi],
        "agreement_low": a_lo[gi, wi],
        "agreement_high": a_hi[gi, wi],
        "n_gold_items": golds.n[gi, wi],
        "gold_accuracy": g_mean[gi, wi],
        "gold_accuracy_low": g_lo[gi, wi],
        "gold_accuracy_high": g_hi[gi, wi],
        "u_t": u["t"][0][gi, wi], "u_t_low": u["t"][1][gi, wi], "u_t_high": u["t"][2][gi, wi],
        "u_e": u["e"][0][gi, wi], "u_e_low": u["e"][1][gi, wi], "u_e_high": u["e"][2][gi, wi],
    })
    return QualitySeries(by, window, confidence, coded.labels, frame)


# --------------------------------------------------------------------------- detection


def _stitch_radius(v: np.ndarray, alpha: np.ndarray, *, c: float = 1.0, m: float = 1.0) -> np.ndarray:
    """Howard et al. (2021) polynomial stitched boundary for a sub-exponential process.

    One-sided: P(∃t: S_t ≥ radius(max(V_t, m))) ≤ alpha, with eta = 2, s = 1.4.
    """
    eta, s = _STITCH_ETA, _STITCH_S
    v = np.maximum(v, m)
    ell = s * np.log(np.log(eta * v / m)) + np.log(special.zeta(s) / (alpha * np.log(eta) ** s))
    k1 = (eta ** 0.25 + eta ** -0.25) / np.sqrt(2.0)
    k2 = (np.sqrt(eta) + 1) / 2
    return np.sqrt(k1 * k1 * v * ell + k2 * k2 * c * c * ell * ell) + c * k2 * ell


def eb_confidence_sequence_radius(n, variance_process, alpha, *, m: float = 1.0) -> np.ndarray:
    """Half-width on the mean of an empirical-Bernstein confidence sequence for [0, 1] data.

    ``variance_process`` is ``Σ (X_i − X̂_i)²`` for predictable centres ``X̂_i ∈ [0, 1]``
    (Howard et al. 2021, Theorem 4: the centred sum is then sub-exponential with scale
    1). Two-sided at level ``alpha`` (``alpha / 2`` a side), valid at all ``n`` at once.
    """
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return _stitch_radius(np.asarray(variance_process, float), np.asarray(alpha, float) / 2, m=m) / n


def _mp_radius(n: np.ndarray, var: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Maurer & Pontil (2009) empirical-Bernstein half-width, two-sided at level ``delta``."""
    log_term = np.log(4.0 / delta)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(2 * var * log_term / n) + 7 * log_term / (3 * np.maximum(n - 1, 1))


@dataclass(frozen=True)
class ScanResult:
    """Per stream: the first window at which a change was detected (-1: none), and more."""

    detected: np.ndarray      # int (R,): window index of the look that flagged, -1 if none
    start: np.ndarray         # int (R,): estimated first post-change window
    before: np.ndarray        # float (R, 3): mean, low, high of the pre-change units
    after: np.ndarray         # float (R, 3): mean, low, high of the post-change units
    evidence: np.ndarray      # float (R,): smallest family-wise alpha at which it flags
    direction: np.ndarray     # int (R,): -1 drop, +1 rise, 0 none


def _rebased_cumsums(n, s1, s2, first):
    """Cumulative sums over windows, minus everything before each stream's ``first`` window."""
    out = []
    for x in (n, s1, s2):
        c = np.cumsum(x, axis=1)
        base = np.take_along_axis(np.pad(c, ((0, 0), (1, 0))), first[:, None], axis=1)
        out.append(c - base)
    return out


def _look(cn, c1, c2, alpha, first, J, m, live):
    """Evaluate the look after window ``J`` for every live stream.

    Candidates ``k`` (first post-change window) run over ``first + 1 .. J``: before is
    windows ``[first, k)``, after is ``[k, J]``. Returns, per stream, whether it flags
    and, at the most significant candidate, ``k`` and the (mean, low, high) of before
    and after.
    """
    R = cn.shape[0]
    ks = np.arange(1, J + 1)
    bn, b1, b2 = cn[:, ks - 1], c1[:, ks - 1], c2[:, ks - 1]
    an, a1, a2 = cn[:, [J]] - bn, c1[:, [J]] - b1, c2[:, [J]] - b2
    rank = ks[None, :] - first[:, None]  # 1 for the first candidate of the stream
    valid = live[:, None] & (rank >= 1) & (bn >= 2) & (an >= 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        a_k = alpha[:, None] / (rank * (rank + 1.0))
        bm = b1 / bn
        bvar = np.maximum((b2 - bn * bm * bm) / np.maximum(bn - 1, 1), 0.0)
        b_rad = _mp_radius(bn, bvar, a_k / 2)
        am = a1 / an
        vproc = np.maximum(a2 - 2 * bm * a1 + an * bm * bm, 0.0)  # Σ (x - bm)², bm is predictable
        a_rad = eb_confidence_sequence_radius(an, vproc, a_k / 2, m=m)
        flag = valid & ((am + a_rad < bm - b_rad) | (am - a_rad > bm + b_rad))
        avar = np.maximum((a2 - an * am * am) / np.maximum(an - 1, 1), 0.0)
        zstat = np.abs(am - bm) / np.sqrt(bvar / bn + avar / np.maximum(an, 1) + 1e-300)
    hit = flag.any(axis=1)
    best = np.argmax(np.where(valid, zstat, -np.inf), axis=1)
    r = np.arange(R)
    before = np.stack([bm[r, best], bm[r, best] - b_rad[r, best], bm[r, best] + b_rad[r, best]], axis=1)
    after = np.stack([am[r, best], am[r, best] - a_rad[r, best], am[r, best] + a_rad[r, best]], axis=1)
    return hit, ks[best], before, after


def _scan_block(n, s1, s2, alpha, first, m, from_look=None):
    """Scan streams (R, W) from window ``first`` (R,), looks after ``from_look`` (R,) only."""
    R, W = n.shape
    cn, c1, c2 = _rebased_cumsums(n, s1, s2, first)
    from_look = first if from_look is None else from_look
    detected = np.full(R, -1)
    start = np.full(R, -1)
    out_b = np.full((R, 3), np.nan)
    out_a = np.full((R, 3), np.nan)
    direction = np.zeros(R, dtype=int)
    for J in range(1, W):
        live = (detected < 0) & (from_look < J) & (first < J)
        if not live.any():
            continue
        hit, k, before, after = _look(cn, c1, c2, alpha, first, J, m, live)
        rows = np.flatnonzero(hit)
        detected[rows] = J
        start[rows] = k[rows]
        out_b[rows] = before[rows]
        out_a[rows] = after[rows]
        direction[rows] = np.where(after[rows, 0] < before[rows, 0], -1, 1)
    return detected, start, out_b, out_a, direction


def change_scan(n, s1, s2, *, alpha, m: float = 50.0, max_changes: int = 10) -> list[list[dict]]:
    """Sequential change detection on streams of per-window unit sums.

    Parameters
    ----------
    n, s1, s2 : arrays (R, W)
        Units, sum of unit values and sum of squares per stream and window (time order);
        unit values lie in [0, 1].
    alpha : float or array (R,)
        Per-stream probability of ever raising a false alarm under stationarity.
    m : float, default 50
        Variance-process value from which the stitched boundary is tight (about one
        window's worth of units times their variance); any positive value keeps the
        guarantee, it only moves where the boundary is tightest.
    max_changes : int
        After a change the stream restarts at its estimated start (the pre-change units
        are forgotten) and is checked again at the following looks; at most this many.

    Returns
    -------
    list (one per stream) of changes, each a dict with ``detected`` (window index of the
    look that flagged it), ``start`` (estimated first window after the change),
    ``before``/``after`` ((mean, low, high) of the units before and after) and
    ``direction`` (-1 drop, +1 rise).
    """
    n = np.asarray(n, dtype=float)
    s1 = np.asarray(s1, dtype=float)
    s2 = np.asarray(s2, dtype=float)
    if n.ndim != 2 or n.shape != s1.shape or n.shape != s2.shape:
        raise StatsInputError("`n`, `s1` and `s2` must be arrays of the same shape (streams, windows).")
    R = n.shape[0]
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), (R,)).copy()
    if not ((alpha > 0) & (alpha < 1)).all():
        raise StatsInputError("`alpha` must lie in (0, 1).")
    first = np.zeros(R, dtype=int)
    last_look = np.zeros(R, dtype=int)
    found: list[list[dict]] = [[] for _ in range(R)]
    active = np.arange(R)
    for _ in range(max_changes):
        if active.size == 0:
            break
        det, st, b, a, d = _scan_block(n[active], s1[active], s2[active], alpha[active], first[active], m,
                                       from_look=last_look[active])
        hit = det >= 0
        for i in np.flatnonzero(hit):
            r = int(active[i])
            found[r].append({"detected": int(det[i]), "start": int(st[i]), "before": tuple(map(float, b[i])),
                             "after": tuple(map(float, a[i])), "direction": int(d[i])})
            # restart at the estimated start; alarms are raised only at later looks
            first[r], last_look[r] = int(st[i]), int(det[i])
        active = active[hit]
    return found


@dataclass(frozen=True)
class ChangeReport:
    """Changes found by :func:`detect_changes`; ``changes`` has one row per change."""

    by: str
    window: str
    alpha: float
    changes: pd.DataFrame = field(repr=False)
    series: QualitySeries = field(repr=False)


def _evidence(n, s1, s2, first, detected, alpha_hi, m) -> float:
    """Smallest per-stream alpha at which the look that flagged still flags (bisection on log alpha)."""
    lo, hi = -300.0, float(np.log10(alpha_hi))
    for _ in range(40):
        mid = (lo + hi) / 2
        det, *_ = _scan_block(n[None, : detected + 1], s1[None, : detected + 1], s2[None, : detected + 1],
                              np.array([10 ** mid]), np.array([first]), m, from_look=np.array([detected - 1]))
        if det[0] >= 0:
            hi = mid
        else:
            lo = mid
    return float(10 ** hi)


def detect_changes(records, *, by: str = "vendor", window: str = "7D", gold=None, labels=None,
                   alpha: float = 0.05, origin=None, max_changes: int = 10, m: float = 50.0) -> ChangeReport:
    """Find when each vendor's (or annotator's) quality changed, with false alarms controlled.

    Each group's stream of per-item agreement with the leave-one-out consensus (and, where
    gold exists, of per-item gold accuracy) is checked after every window (see the module
    docstring for the detector and its guarantee). ``alpha`` bounds the probability that
    *any* group raises a false alarm on *any* of its streams at *any* look when nothing
    changed: it is split equally over the groups, and within a group between agreement
    and gold accuracy when the group has gold items.

    Returns
    -------
    ChangeReport
        ``changes`` columns: ``group``, ``metric`` ("agreement" or "gold_accuracy"),
        ``direction`` ("drop" or "rise"), ``detected_at`` (end of the window whose look
        flagged it), ``start`` (estimated start of the first window after the change),
        ``before``/``before_low``/``before_high``, ``after``/``after_low``/``after_high``,
        and ``evidence``: the smallest family-wise false-alarm level at which this look
        would still flag the change (smaller is stronger).
    """
    import pandas as pd

    alpha = check_probability(alpha, name="alpha", open_interval=True)
    coded = _code_records(records, by, window, labels, origin)
    n_groups = len(coded.groups)
    streams = _unit_streams(coded, gold)
    series = _series(coded, streams, by, window, 0.95)
    has_gold = streams["gold_accuracy"].n.sum(axis=1) > 0
    per_group = alpha / n_groups
    share = {"agreement": np.where(has_gold, per_group / 2, per_group),
             "gold_accuracy": np.where(has_gold, per_group / 2, per_group)}
    rows = []
    for metric, st in streams.items():
        use = np.flatnonzero(st.n.sum(axis=1) > 0)
        if use.size == 0:
            continue
        found = change_scan(st.n[use], st.s1[use], st.s2[use], alpha=share[metric][use], m=m,
                            max_changes=max_changes)
        for gi, changes in zip(use, found, strict=True):
            first = 0
            for ch in changes:
                ev = _evidence(st.n[gi], st.s1[gi], st.s2[gi], first, ch["detected"], share[metric][gi], m)
                rows.append({
                    "group": coded.groups[gi], "metric": metric,
                    "direction": "drop" if ch["direction"] < 0 else "rise",
                    "detected_at": coded.window_end[ch["detected"]],
                    "start": coded.window_start[ch["start"]],
                    "before": ch["before"][0], "before_low": ch["before"][1], "before_high": ch["before"][2],
                    "after": ch["after"][0], "after_low": ch["after"][1], "after_high": ch["after"][2],
                    "evidence": min(1.0, ev * n_groups * (2 if has_gold[gi] else 1)),
                })
                first = ch["start"]
    columns = ["group", "metric", "direction", "detected_at", "start", "before", "before_low", "before_high",
               "after", "after_low", "after_high", "evidence"]
    return ChangeReport(by, window, alpha, pd.DataFrame(rows, columns=columns), series)


# --------------------------------------------------------------------------- incremental


class QualityMonitor:
    """Running (group, window) unit sums and their change detector, fed one batch at a time.

    A service keeps one monitor per dataset and grouping: each new batch of annotations
    is scored (its items' leave-one-out consensus from the current counts, gold where
    known), added to the window it falls in, and the detector evaluates the current
    look only. History is never recomputed: a batch costs time in proportion to its own
    size plus ``O(groups × windows)`` array work, whatever the number of annotations
    before it. Every batch is a look; the guarantee of :func:`change_scan` holds across
    all of them.

    Parameters
    ----------
    alpha : float
        Family-wise false-alarm probability over all groups (see :func:`detect_changes`).
    m : float
        Where the stitched boundary is tightest (see :func:`change_scan`).
    """

    METRICS = ("agreement", "gold_accuracy")
    COLUMNS = ("group", "metric", "direction", "detected_at", "start", "before", "before_low", "before_high",
               "after", "after_low", "after_high", "evidence")

    def __init__(self, *, alpha: float = 0.05, m: float = 50.0):
        self.alpha = check_probability(alpha, name="alpha", open_interval=True)
        self.m = float(m)
        self.groups: list = []
        self.windows: list = []
        self._sums = {k: np.zeros((0, 0, 3)) for k in self.METRICS}
        self._first = {k: np.zeros(0, dtype=np.int64) for k in self.METRICS}
        self._last = {k: np.zeros(0, dtype=np.int64) for k in self.METRICS}
        self._labels = np.zeros((0, 0), dtype=np.int64)
        self._found: list[dict] = []

    def _grow(self, n_groups: int, n_windows: int) -> None:
        g, w = self._labels.shape
        if g < n_groups or w < n_windows:
            out = np.zeros((max(g, n_groups), max(w, n_windows)), dtype=np.int64)
            out[:g, :w] = self._labels
            self._labels = out
        for k, arr in self._sums.items():
            g, w, _ = arr.shape
            if g < n_groups or w < n_windows:
                out = np.zeros((max(g, n_groups), max(w, n_windows), 3))
                out[:g, :w] = arr
                self._sums[k] = out
            for state in (self._first, self._last):
                if state[k].size < n_groups:
                    state[k] = np.concatenate([state[k], np.zeros(n_groups - state[k].size, dtype=np.int64)])

    def add_batch(self, window, *, item: np.ndarray, group, label: np.ndarray, counts: np.ndarray,
                  gold: np.ndarray | None = None) -> list[dict]:
        """Score one batch, add it to ``window`` (a time-ordered key) and look for changes.

        Parameters
        ----------
        window : hashable, comparable
            The batch's window (e.g. its week's start); windows must come in time order
            (the current last window may receive more batches).
        item : int array (M,)
            Row of each annotation's item in ``counts``.
        group : sequence (M,)
            Each annotation's vendor or annotator.
        label : int array (M,)
            Label codes.
        counts : array (N, L)
            Current label counts of the items (all labels, whenever they came).
        gold : int array (N,), optional
            Gold label code per item row, -1 where unknown.

        Returns
        -------
        list of dict
            The changes this look found (also kept in :meth:`changes`).
        """
        import pandas as pd

        if self.windows and window < self.windows[-1]:
            raise StatsInputError(f"window {window!r} comes before the last window {self.windows[-1]!r}.")
        if not self.windows or window != self.windows[-1]:
            self.windows.append(window)
        w = len(self.windows) - 1
        gcode, names = pd.factorize(np.asarray(group, dtype=object))  # hashing: no sort of the names
        index = {g: i for i, g in enumerate(self.groups)}
        for g in names:
            if g not in index:
                index[g] = len(self.groups)
                self.groups.append(g)
        gcode = np.asarray([index[g] for g in names], dtype=np.int64)[gcode]
        self._grow(len(self.groups), len(self.windows))
        item = np.asarray(item, dtype=np.int64)
        label = np.asarray(label, dtype=np.int64)
        self._labels[:, w] += np.bincount(gcode, minlength=len(self.groups))
        others = np.asarray(counts)[item].astype(np.int64)
        others[np.arange(item.size), label] -= 1
        scores = {"agreement": tie_credit(others, label)}
        if gold is not None:
            g_item = np.asarray(gold)[item]
            scores["gold_accuracy"] = np.where(g_item >= 0, (label == g_item).astype(float), np.nan)
        for metric, score in scores.items():
            units = quality_units(item, score, gcode, np.zeros(item.size, dtype=np.int64), len(self.groups), 1)
            self._sums[metric][:, w, 0] += units.n[:, 0]
            self._sums[metric][:, w, 1] += units.s1[:, 0]
            self._sums[metric][:, w, 2] += units.s2[:, 0]
        return self._look(w)

    def _look(self, J: int) -> list[dict]:
        new = []
        if J < 1:
            return new
        n_groups = len(self.groups)
        gold_groups = self._sums["gold_accuracy"][..., 0].sum(axis=1) > 0
        for metric in self.METRICS:
            arr = self._sums[metric][:, : J + 1]
            first, last = self._first[metric], self._last[metric]
            live = (arr[..., 0].sum(axis=1) > 0) & (last < J) & (first < J)
            if not live.any():
                continue
            alpha = np.where(gold_groups, self.alpha / n_groups / 2, self.alpha / n_groups)
            cn, c1, c2 = _rebased_cumsums(arr[..., 0], arr[..., 1], arr[..., 2], first)
            hit, k, before, after = _look(cn, c1, c2, alpha, first, J, self.m, live)
            for g in np.flatnonzero(hit):
                scale = n_groups * (2 if gold_groups[g] else 1)
                ev = _evidence(arr[g, :, 0], arr[g, :, 1], arr[g, :, 2], int(first[g]), J, float(alpha[g]), self.m)
                row = dict(zip(self.COLUMNS, (
                    self.groups[g], metric, "drop" if after[g, 0] < before[g, 0] else "rise", self.windows[J],
                    self.windows[int(k[g])], *map(float, before[g]), *map(float, after[g]), min(1.0, ev * scale)),
                    strict=True))
                new.append(row)
                first[g], last[g] = int(k[g]), J
        self._found += new
        return new

    def window_rows(self, windows=None, *, confidence: float = 0.95) -> list[dict]:
        """Per group × window × metric (``windows``: only those window keys), with data:
        the units, the labels, the mean and its interval (as :func:`quality_series`)."""
        cols = range(len(self.windows)) if windows is None else [self.windows.index(w) for w in windows]
        cols = np.asarray(list(cols), dtype=np.int64)
        out = []
        for metric in self.METRICS:
            arr = self._sums[metric][:, cols] if cols.size else np.zeros((len(self.groups), 0, 3))
            mean, lo, hi = _unit_interval(arr[..., 0], arr[..., 1], arr[..., 2], confidence)
            for g, j in zip(*np.nonzero(arr[..., 0] > 0), strict=True):
                out.append({"group": self.groups[g], "metric": metric, "window": self.windows[int(cols[j])],
                            "n_units": float(arr[g, j, 0]), "n_labels": int(self._labels[g, cols[j]]),
                            "s1": float(arr[g, j, 1]), "s2": float(arr[g, j, 2]),
                            "value": float(mean[g, j]), "low": float(lo[g, j]), "high": float(hi[g, j])})
        return out

    def to_state(self) -> dict:
        """Everything the monitor holds, as JSON-ready lists (see :meth:`from_state`)."""
        return {"alpha": self.alpha, "m": self.m, "groups": list(self.groups), "windows": list(self.windows),
                "labels": self._labels.tolist(),
                "sums": {k: v.tolist() for k, v in self._sums.items()},
                "first": {k: v.tolist() for k, v in self._first.items()},
                "last": {k: v.tolist() for k, v in self._last.items()}}

    @classmethod
    def from_state(cls, state: Mapping) -> QualityMonitor:
        """A monitor continuing from :meth:`to_state` (changes found before are not kept)."""
        mon = cls(alpha=state["alpha"], m=state["m"])
        mon.groups, mon.windows = list(state["groups"]), list(state["windows"])
        g, w = len(mon.groups), len(mon.windows)
        mon._labels = np.asarray(state["labels"], dtype=np.int64).reshape(g, w)
        for k in cls.METRICS:
            mon._sums[k] = np.asarray(state["sums"][k], dtype=float).reshape(g, w, 3)
            mon._first[k] = np.asarray(state["first"][k], dtype=np.int64).reshape(g)
            mon._last[k] = np.asarray(state["last"][k], dtype=np.int64).reshape(g)
        return mon

    def sums(self, metric: str = "agreement") -> UnitStream:
        """The (group, window) unit sums of ``metric`` so far."""
        arr = self._sums[metric]
        return UnitStream(arr[..., 0], arr[..., 1], arr[..., 2], arr[..., 0])

    def changes(self) -> pd.DataFrame:
        """Every change found so far, in the order found (columns as :func:`detect_changes`)."""
        import pandas as pd

        return pd.DataFrame(self._found, columns=list(self.COLUMNS))
