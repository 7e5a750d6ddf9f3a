"""Vendor and annotator quality over time: windowed series and change detection.

Two questions a team monitoring labeling vendors asks every week:

* *How good was each vendor (or annotator) in each time window?*
  :func:`quality_series` answers per group × window: the agreement of the group's
  labels with the leave-one-out plurality of the *other* annotators on the same items
  (all labels of those items, whenever they came), the accuracy against gold where gold
  exists, and the group's U_t / U_e (Xu et al., Theorem 1 / Definition 1) on the
  window's items, each with a confidence interval.
* *Which group got worse (or better), since when, and how sure are we?*
  :func:`detect_changes` measures each group against the other groups on the same
  items and runs a self-starting CUSUM on it, checked after every window (see
  :mod:`auditor.stats.monitoring`). Its false-alarm control is the one monitoring uses: a
  yearly rate. Fewer than ``alpha`` of stationary year-long streams raise any alert,
  over all groups of a dataset and its dataset level together; the delay to find a
  change depends on the change and the weekly volume, not on the age of the stream.

The unit of observation is one item within one window for one group: the mean of the
group's per-annotation scores on that item (items are independent; annotations of one
item are not, because they share the consensus). Intervals and detectors are built on
these units, so a vendor whose three annotators all label the same item is not counted
as three independent observations.

The detector
------------
A group's unit is paired: its score on an item minus the mean score of the other groups
on the same item, so that weeks in which the items get harder move every group together
and raise no group alert; what all groups share is watched once, on the dataset level
(``dataset_changes``). The groups and the dataset level share ``alpha`` equally (a group
with gold splits its share between agreement and gold accuracy). Each alert carries the
estimated first window of the change and the group's metric before and after it, and
``evidence``: the yearly false-alarm rate at which it would still fire. After an alert
the group's chart restarts from the estimated start. ``sensitivity`` says what the
monitor can see: per group, the smallest drop it would find within 4 windows with 90%
probability at its current volume (:mod:`auditor.stats.detectability`).

The consensus of an item uses all of its labels, including ones that arrived after the
window; re-running on more data can therefore move earlier units slightly. The
guarantee is for the units as computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from auditor.stats.certification import tie_credit
from auditor.stats.monitoring import (
    DEFAULT_K,
    LOOKS_PER_YEAR,
    cusum_scan,
)
from auditor.stats.quality_records import (
    _code_records,
    _Coded,
    _distinct,
    _gold_codes,
    _record_sums,
    _Sums,
)
from auditor.stats.validation import StatsInputError, check_probability

if TYPE_CHECKING:  # pandas loads pyarrow: imported where a function uses it
    import pandas as pd

__all__ = [
    "ChangeReport",
    "QualityMonitor",
    "QualitySeries",
    "UnitStream",
    "detect_changes",
    "quality_series",
    "quality_units",
]


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
    sums = _record_sums(coded, _gold_codes(gold, coded.items, coded.labels), paired=False)
    return _series(coded, sums, by, window, confidence)


def _series(coded: _Coded, sums: _Sums, by: str, window: str, confidence: float) -> QualitySeries:
    import pandas as pd

    agree, golds = sums.units["agreement"], sums.units["gold_accuracy"]
    a_mean, a_lo, a_hi = _unit_interval(*agree, confidence)
    g_mean, g_lo, g_hi = _unit_interval(*golds, confidence)
    n_labels, n_items = sums.n_labels, sums.n_items
    u = {}
    for name in ("t", "e"):
        m, lo, hi = _unit_interval(*sums.x[name], confidence)
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
        "n_gold_items": golds[0][gi, wi],
        "gold_accuracy": g_mean[gi, wi],
        "gold_accuracy_low": g_lo[gi, wi],
        "gold_accuracy_high": g_hi[gi, wi],
        "u_t": u["t"][0][gi, wi], "u_t_low": u["t"][1][gi, wi], "u_t_high": u["t"][2][gi, wi],
        "u_e": u["e"][0][gi, wi], "u_e_low": u["e"][1][gi, wi], "u_e_high": u["e"][2][gi, wi],
    })
    return QualitySeries(by, window, confidence, coded.labels, frame)


# --------------------------------------------------------------------------- detection


@dataclass(frozen=True)
class ChangeReport:
    """Changes found by :func:`detect_changes`.

    ``changes``: one row per vendor (or annotator) change; ``dataset_changes``: changes of
    the level all groups share (the items got harder or easier), reported once;
    ``sensitivity``: per group and metric, the smallest drop the monitor detects within 4
    windows with 90% probability at the group's current volume.
    """

    by: str
    window: str
    alpha: float
    changes: pd.DataFrame = field(repr=False)
    series: QualitySeries = field(repr=False)
    dataset_changes: pd.DataFrame = field(default=None, repr=False)
    sensitivity: pd.DataFrame = field(default=None, repr=False)


CHANGE_COLUMNS = ("group", "metric", "direction", "detected_at", "start", "before", "before_low", "before_high",
                  "after", "after_low", "after_high", "evidence")
DATASET_COLUMNS = ("metric", "direction", "detected_at", "start", "before", "after", "evidence")
SENSITIVITY_COLUMNS = ("group", "metric", "units_per_window", "unit_sd", "min_drop", "min_drop_accuracy",
                       "others_accuracy_low", "others_accuracy_high")


def _span(arr: np.ndarray, a: int, b: int):
    """(n, s1, s2) of one row of (W, 3) sums over windows a..b inclusive."""
    return arr[a:b + 1].sum(axis=0) if b >= a else np.zeros(3)


def _budget(alpha: float, paired: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """Per group and metric, and per metric for the dataset level: the yearly false-alarm
    rate each stream may spend. The groups and the dataset level share ``alpha`` equally;
    a stream with gold splits its share between agreement and gold accuracy."""
    agree, gold = paired["agreement"][..., 0], paired["gold_accuracy"][..., 0]
    active = (agree.sum(axis=1) > 0) | (gold.sum(axis=1) > 0)
    share = alpha / (int(active.sum()) + 1)
    has_gold = gold.sum(axis=1) > 0
    per_group = np.where(has_gold, share / 2, share)
    return per_group, share, int(active.sum())


def _find_changes(groups, windows, paired: Mapping[str, np.ndarray], level: Mapping[str, np.ndarray],
                  raw: Mapping[str, np.ndarray], alpha: float, *, k: float, looks: int, max_changes: int,
                  confidence: float = 0.95):
    """Changes of every group and of the dataset level from (G, W, 3) paired sums, (W, 3)
    level sums and (G, W, 3) raw unit sums (the values reported before and after)."""

    if sum(1 for g in range(len(groups)) if raw["agreement"][g, :, 0].sum() > 0) == 1:
        # one group: no other group to pair with, and its level is the dataset's
        paired = raw
        level = {m: np.zeros((len(windows), 3)) for m in raw}
    per_group, share, _ = _budget(alpha, paired)
    rows, dataset_rows = [], []
    has_gold_level = level["gold_accuracy"][:, 0].sum() > 0
    for metric in QualityMonitor.METRICS:
        arr = paired[metric]
        use = np.flatnonzero(arr[..., 0].sum(axis=1) > 0)
        if use.size:
            found = cusum_scan(arr[use, :, 0], arr[use, :, 1], arr[use, :, 2], alpha=per_group[use], k=k,
                               s3=arr[use, :, 3] if arr.shape[-1] > 3 else None,
                               looks=looks, max_changes=max_changes)
            for gi, changes in zip(use, found, strict=True):
                first = 0
                for ch in changes:
                    rate = ch["rate"] * alpha / float(per_group[gi])
                    b = _span(raw[metric][gi], first, ch["start"] - 1)
                    a = _span(raw[metric][gi], ch["start"], ch["detected"])
                    bm, blo, bhi = _unit_interval(b[0:1], b[1:2], b[2:3], confidence)
                    am, alo, ahi = _unit_interval(a[0:1], a[1:2], a[2:3], confidence)
                    rows.append(dict(zip(CHANGE_COLUMNS, (
                        groups[gi], metric, "drop" if ch["direction"] < 0 else "rise", windows[ch["detected"]],
                        windows[ch["start"]], float(bm[0]), float(blo[0]), float(bhi[0]), float(am[0]),
                        float(alo[0]), float(ahi[0]), float(min(1.0, rate))), strict=True)))
                    first = ch["start"]
        lv = level[metric]
        if lv[:, 0].sum() > 0:
            a_lv = share / 2 if has_gold_level else share
            for ch in cusum_scan(lv[None, :, 0], lv[None, :, 1], lv[None, :, 2], alpha=a_lv, k=k, looks=looks,
                                 max_changes=max_changes, between=True)[0]:
                rate = ch["rate"] * alpha / a_lv
                dataset_rows.append(dict(zip(DATASET_COLUMNS, (
                    metric, "drop" if ch["direction"] < 0 else "rise", windows[ch["detected"]], windows[ch["start"]],
                    ch["before"], ch["after"], float(min(1.0, rate))), strict=True)))
    return _explained_rises_removed(rows), dataset_rows


def _explained_rises_removed(rows: list[dict], near: int = 2) -> list[dict]:
    """Without the rises that another group's drop explains: measured against the others, the
    groups that did not change look better when one of them degrades (by a half of its drop
    with three groups, all of it with two). A rise is dropped when another group's drop on
    the same metric starts within ``near`` windows of it and was found no later than
    ``near`` windows after it."""
    drops = [r for r in rows if r["direction"] == "drop"]
    return [r for r in rows if r["direction"] == "drop" or not any(
        d["group"] != r["group"] and d["metric"] == r["metric"] and abs(d["start"] - r["start"]) <= near
        and d["detected_at"] <= r["detected_at"] + near for d in drops)]


def _sensitivity(groups, paired: Mapping[str, np.ndarray], raw: Mapping[str, np.ndarray], alpha: float, *,
                 n_classes: int, labels_per_item: float, k: float, looks: int) -> list[dict]:
    """:func:`auditor.stats.detectability.sensitivity_rows` at each group's share of ``alpha``."""
    from auditor.stats.detectability import sensitivity_rows

    rows = sensitivity_rows(paired, raw, _budget(alpha, paired)[0], metrics=QualityMonitor.METRICS,
                            n_classes=n_classes, labels_per_item=labels_per_item, k=k, looks=looks)
    return [dict(zip(SENSITIVITY_COLUMNS, (groups[gi], *rest), strict=True)) for gi, *rest in rows]


def detect_changes(records, *, by: str = "vendor", window: str = "7D", gold=None, labels=None,
                   alpha: float = 0.05, origin=None, max_changes: int = 10, k: float | None = None,
                   looks: int | None = None) -> ChangeReport:
    """Find when each vendor's (or annotator's) quality changed, with false alarms controlled.

    Each group is measured against the other groups on the same items (paired differences
    of leave-one-out agreement and, where gold exists, of gold accuracy; see
    :mod:`auditor.stats.monitoring`), and a self-starting CUSUM checks every window.
    ``alpha`` is the false-alarm rate per ``looks`` windows (52: a year of weeks): fewer
    than ``alpha`` of stationary datasets ever raise an alert in a year, over all their
    groups and the dataset level together. A shift all groups share is reported once in
    ``dataset_changes``.

    Returns
    -------
    ChangeReport
        ``changes`` columns: ``group``, ``metric`` ("agreement" or "gold_accuracy"),
        ``direction`` ("drop" or "rise"), ``detected_at`` (end of the window whose look
        flagged it), ``start`` (estimated start of the first window after the change),
        ``before``/``before_low``/``before_high`` and ``after``/``after_low``/``after_high``
        (the group's metric and its interval before and after the start), and
        ``evidence``: the yearly false-alarm rate at which this alarm would still fire.
    """
    import pandas as pd

    k = DEFAULT_K if k is None else float(k)
    looks = LOOKS_PER_YEAR if looks is None else int(looks)
    alpha = check_probability(alpha, name="alpha", open_interval=True)
    coded = _code_records(records, by, window, labels, origin)
    n_windows = len(coded.window_start)
    sums = _record_sums(coded, _gold_codes(gold, coded.items, coded.labels))
    series = _series(coded, sums, by, window, 0.95)
    paired = {m: np.stack([ps.n, ps.s1, ps.s2, ps.s3], axis=-1) for m, ps in sums.paired.items()}
    level = {m: np.stack([ps.level_n, ps.level_s1, ps.level_s2], axis=-1) for m, ps in sums.paired.items()}
    raw = {m: np.stack(st, axis=-1).astype(float) for m, st in sums.units.items()}
    rows, dataset_rows = _find_changes(coded.groups, list(range(n_windows)), paired, level, raw, alpha, k=k,
                                       looks=looks, max_changes=max_changes)
    for r in rows + dataset_rows:
        r["detected_at"] = coded.window_end[r["detected_at"]]
        r["start"] = coded.window_start[r["start"]]
    per_item = coded.n_rows / max(len(coded.items), 1)
    sens = _sensitivity(coded.groups, paired, raw, alpha, n_classes=len(coded.labels), labels_per_item=per_item,
                        k=k, looks=looks)
    return ChangeReport(by, window, alpha, pd.DataFrame(rows, columns=list(CHANGE_COLUMNS)), series,
                        pd.DataFrame(dataset_rows, columns=list(DATASET_COLUMNS)),
                        pd.DataFrame(sens, columns=list(SENSITIVITY_COLUMNS)))


# --------------------------------------------------------------------------- incremental


class QualityMonitor:
    """Running (group, window) sums and their change detector, fed one batch at a time.

    A service keeps one monitor per dataset and grouping: each new batch of annotations
    is scored (its items' leave-one-out consensus from the current counts, gold where
    known), and added to the window it falls in: the group's raw units (for the windowed
    series) and its paired differences against the other groups on the batch's items
    (for the detector). The detector is the one of :func:`detect_changes`, run on these
    sums (``O(groups × windows)`` at each look, whatever the number of annotations
    before), so the same records in the same windows give the same changes offline and
    here. Every batch is a look; a change is reported once, at the first look that finds
    it.

    Parameters
    ----------
    alpha : float
        Yearly false-alarm rate over all groups and the dataset level (see :func:`detect_changes`).
    """

    METRICS = ("agreement", "gold_accuracy")
    COLUMNS = CHANGE_COLUMNS

    def __init__(self, *, alpha: float = 0.05, k: float | None = None, looks: int | None = None,
                 n_classes: int | None = None):
        from auditor.stats.monitoring import DEFAULT_K, LOOKS_PER_YEAR

        self.alpha = check_probability(alpha, name="alpha", open_interval=True)
        self.k = DEFAULT_K if k is None else float(k)
        self.looks = LOOKS_PER_YEAR if looks is None else int(looks)
        self.n_classes = n_classes
        self.groups: list = []
        self.windows: list = []
        self._sums = {m: np.zeros((0, 0, 3)) for m in self.METRICS}
        self._paired = {m: np.zeros((0, 0, 4)) for m in self.METRICS}  # n, s1, s2, s3
        self._level = {m: np.zeros((0, 3)) for m in self.METRICS}
        self._labels = np.zeros((0, 0), dtype=np.int64)
        self._items_labels = np.zeros(2)  # labels and units seen (labels per item, for the sensitivity)
        self._open_window: int | None = None  # the newest window, when its labels are kept
        self._open = np.zeros((3, 0), dtype=np.int64)  # its labels: item id, group code, label
        self._reported: set = set()
        self._found: list[dict] = []
        self._dataset_found: list[dict] = []

    def _grow(self, n_groups: int, n_windows: int) -> None:
        def grown(arr):
            g, w = arr.shape[:2]
            if g >= n_groups and w >= n_windows:
                return arr
            out = np.zeros((max(g, n_groups), max(w, n_windows), *arr.shape[2:]), dtype=arr.dtype)
            out[:g, :w] = arr
            return out

        self._labels = grown(self._labels)
        for m in self.METRICS:
            self._sums[m] = grown(self._sums[m])
            self._paired[m] = grown(self._paired[m])
            lv = self._level[m]
            if lv.shape[0] < n_windows:
                self._level[m] = np.concatenate([lv, np.zeros((n_windows - lv.shape[0], 3))])

    def add_batch(self, window, *, item: np.ndarray, group, label: np.ndarray, counts: np.ndarray,
                  gold: np.ndarray | None = None, keys: np.ndarray | None = None) -> list[dict]:
        """Score one batch, add it to ``window`` (a time-ordered key) and look for changes.

        With ``keys`` the monitor keeps the labels of the newest window and scores the whole
        window again at each batch: labels of one item that arrive in different batches
        (each vendor importing its own file) are paired, and every label's agreement is
        against its item's current labels. Without, each batch is scored and paired alone.

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
        keys : int array (N,), optional
            Stable ids of the items of ``counts``' rows, ascending; ``counts`` must then have
            a row for every item of :meth:`open_items` too.

        Returns
        -------
        list of dict
            The group changes this look found (also kept in :meth:`changes`; changes of
            the dataset level in :meth:`dataset_changes`).
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
        G = len(self.groups)
        self._grow(G, len(self.windows))
        item = np.asarray(item, dtype=np.int64)
        label = np.asarray(label, dtype=np.int64)
        counts = np.asarray(counts)
        if self.n_classes is None:
            self.n_classes = int(counts.shape[1])
        if keys is not None:
            keys = np.asarray(keys, dtype=np.int64)
            if self._open_window != w:  # a new window: the previous one is closed as it stands
                self._open_window, self._open = w, np.zeros((3, 0), dtype=np.int64)
            else:  # the window holds only its kept labels: clear it, score them again with these
                self._clear(w)
            self._open = np.concatenate([self._open, np.stack([keys[item], gcode, label])], axis=1)
            self._add(w, self._open, counts, gold, keys)
        else:
            self._open_window, self._open = None, np.zeros((3, 0), dtype=np.int64)
            self._add(w, np.stack([item, gcode, label]), counts, gold, None)
        return self._look()

    def _clear(self, w: int) -> None:
        self._labels[:, w] = 0
        for m in self.METRICS:
            self._sums[m][:, w] = 0.0
            self._paired[m][:, w] = 0.0
            self._level[m][w] = 0.0
        self._items_labels -= [self._open.shape[1], np.unique(self._open[0]).size]

    def open_items(self) -> np.ndarray:
        """The ids of the items of the newest window's labels (kept when batches come with ``keys``)."""
        return np.unique(self._open[0])

    def _add(self, w: int, rows: np.ndarray, counts: np.ndarray, gold, keys) -> None:
        """Add the scores of labels ``rows`` (item, group code, label; the items as rows of
        ``counts``, or as ids in ``keys``) to window ``w``."""
        from auditor.stats.monitoring import paired_sums

        item, gcode, label = rows
        if keys is not None:
            item = np.searchsorted(keys, item)
        G = len(self.groups)
        self._labels[:, w] += np.bincount(gcode, minlength=G)
        others = counts[item].astype(np.int64)
        others[np.arange(item.size), label] -= 1
        scores = {"agreement": tie_credit(others, label)}
        if gold is not None:
            g_item = np.asarray(gold)[item]
            scores["gold_accuracy"] = np.where(g_item >= 0, (label == g_item).astype(float), np.nan)
        zero = np.zeros(item.size, dtype=np.int64)
        for metric, score in scores.items():
            units = quality_units(item, score, gcode, zero, G, 1)
            self._sums[metric][:, w] += np.stack([units.n[:, 0], units.s1[:, 0], units.s2[:, 0]], axis=-1)
            ps = paired_sums(item, gcode, zero, score, G, 1)
            self._paired[metric][:, w] += np.stack([ps.n[:, 0], ps.s1[:, 0], ps.s2[:, 0], ps.s3[:, 0]],
                                                          axis=-1)
            self._level[metric][w] += np.array([ps.level_n[0], ps.level_s1[0], ps.level_s2[0]])
        self._items_labels += [item.size, _distinct(item).size]

    def _look(self) -> list[dict]:
        W = len(self.windows)
        rows, dataset_rows = _find_changes(self.groups, list(range(W)), {m: a[:, :W] for m, a in self._paired.items()},
                                           {m: a[:W] for m, a in self._level.items()},
                                           {m: a[:, :W] for m, a in self._sums.items()}, self.alpha, k=self.k,
                                           looks=self.looks, max_changes=10)
        new = []
        for r in rows:
            key = (r["group"], r["metric"], r["direction"], r["start"], r["detected_at"])
            if key not in self._reported:
                self._reported.add(key)
                new.append({**r, "detected_at": self.windows[r["detected_at"]], "start": self.windows[r["start"]]})
        for r in dataset_rows:
            key = (None, r["metric"], r["direction"], r["start"], r["detected_at"])
            if key not in self._reported:
                self._reported.add(key)
                self._dataset_found.append({**r, "detected_at": self.windows[r["detected_at"]],
                                            "start": self.windows[r["start"]]})
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

    def carry_reported(self, other: QualityMonitor) -> None:
        """Treat the changes ``other`` reported as reported here too (a monitor rebuilt from
        every annotation, e.g. after gold arrived, does not raise them again)."""
        self._reported |= other._reported

    def sensitivity(self) -> list[dict]:
        """Per group and metric, the smallest drop detected within 4 windows with 90% probability
        at the group's current volume (columns of :attr:`ChangeReport.sensitivity`)."""
        W = len(self.windows)
        if not W:
            return []
        per_item = self._items_labels[0] / max(self._items_labels[1], 1)
        return _sensitivity(self.groups, {m: a[:, :W] for m, a in self._paired.items()},
                            {m: a[:, :W] for m, a in self._sums.items()}, self.alpha,
                            n_classes=int(self.n_classes or 2), labels_per_item=per_item, k=self.k, looks=self.looks)

    def to_state(self) -> dict:
        """Everything the monitor holds, as JSON-ready lists (see :meth:`from_state`)."""
        return {"version": 3, "alpha": self.alpha, "k": self.k, "looks": self.looks, "n_classes": self.n_classes,
                "groups": list(self.groups), "windows": list(self.windows), "labels": self._labels.tolist(),
                "sums": {m: v.tolist() for m, v in self._sums.items()},
                "paired": {m: v.tolist() for m, v in self._paired.items()},
                "level": {m: v.tolist() for m, v in self._level.items()},
                "items_labels": self._items_labels.tolist(),
                "open": {"window": self._open_window, "labels": self._open.tolist()},
                "reported": [list(r) for r in sorted(self._reported, key=repr)]}

    @classmethod
    def from_state(cls, state: Mapping) -> QualityMonitor:
        """A monitor continuing from :meth:`to_state` (the changes found before are not listed
        again; a state of the earlier detector starts its paired sums from empty)."""
        mon = cls(alpha=state["alpha"], k=state.get("k"), looks=state.get("looks"), n_classes=state.get("n_classes"))
        mon.groups, mon.windows = list(state["groups"]), list(state["windows"])
        g, w = len(mon.groups), len(mon.windows)
        mon._labels = np.asarray(state["labels"], dtype=np.int64).reshape(g, w)
        for m in cls.METRICS:
            mon._sums[m] = np.asarray(state["sums"][m], dtype=float).reshape(g, w, 3)
            if "paired" in state:
                paired = np.asarray(state["paired"][m], dtype=float)
                cols = paired.size // max(g * w, 1) if g * w else 4
                paired = paired.reshape(g, w, cols)
                if cols == 3:  # an earlier state: no sums of cubes (no skewness correction until rebuilt)
                    paired = np.concatenate([paired, np.zeros((g, w, 1))], axis=-1)
                mon._paired[m] = paired
                mon._level[m] = np.asarray(state["level"][m], dtype=float).reshape(w, 3)
            else:
                mon._paired[m] = np.zeros((g, w, 4))
                mon._level[m] = np.zeros((w, 3))
        mon._items_labels = np.asarray(state.get("items_labels", [0, 0]), dtype=float)
        if state.get("open") and state["open"]["window"] is not None:
            mon._open_window = int(state["open"]["window"])
            mon._open = np.asarray(state["open"]["labels"], dtype=np.int64).reshape(3, -1)
        mon._reported = {tuple(r) for r in state.get("reported", [])}
        return mon

    def sums(self, metric: str = "agreement") -> UnitStream:
        """The (group, window) unit sums of ``metric`` so far."""
        arr = self._sums[metric]
        return UnitStream(arr[..., 0], arr[..., 1], arr[..., 2], arr[..., 0])

    def changes(self) -> pd.DataFrame:
        """Every group change found so far, in the order found (columns as :func:`detect_changes`)."""
        import pandas as pd

        return pd.DataFrame(self._found, columns=list(self.COLUMNS))

    def dataset_changes(self) -> pd.DataFrame:
        """Every change of the dataset level found so far (columns as ``ChangeReport.dataset_changes``)."""
        import pandas as pd

        return pd.DataFrame(self._dataset_found, columns=list(DATASET_COLUMNS))
