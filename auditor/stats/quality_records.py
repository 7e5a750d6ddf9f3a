"""Annotation records as the integer codes quality monitoring works on, and their sums.

:mod:`auditor.stats.quality` reads records (a frame or an iterable of mappings with item,
label, annotator or vendor, and a timestamp or batch) through :func:`_code_records`: one
packed integer per annotation (its window, item, group and label codes), sorted once, with
the names behind the codes; gold labels through :func:`_gold_codes`. :func:`_record_sums`
turns the sorted keys into everything the windowed series and the change detector need
per (group, window): each metric's units, their paired differences (as
:func:`auditor.stats.monitoring.paired_sums` computes them) and the per-item X^t / X^e
sums of the upper bounds.

Memory: columns are read without a Python object per row (time stamps as int64 ticks),
codes are kept in the narrowest integer type, the packed keys are the only array of 8
bytes a record, and after the one sort everything works on the distinct
(window, item, group, label) runs and then on the units.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from auditor.stats.counts import _label_codes
from auditor.stats.monitoring import PairedSums
from auditor.stats.validation import StatsInputError

if TYPE_CHECKING:  # pandas loads pyarrow: imported where a function uses it
    import pandas as pd


GROUPINGS = ("vendor", "annotator")


CHUNK = 1 << 20  # rows per block where a full-length int64 temporary is avoided
KEY_LIMIT = 2**63  # packed keys beyond this rank their (window, item) pairs first


@dataclass
class _Coded:
    """Records as sorted distinct packed integers with their multiplicities, plus the names
    behind the codes.

    ``key`` holds the distinct ``((window * n_items + item) * n_groups + group) * n_labels
    + label`` of the annotations, sorted, and ``count`` how many annotations have each;
    when that product does not fit 63 bits the (window, item) pairs are ranked first and
    ``pairs`` holds ``window * n_items + item`` of each rank. The keys are the largest
    arrays: :meth:`take_keys` hands them over once (to be freed as soon as they are summed).
    """

    key: np.ndarray
    count: np.ndarray
    n_rows: int
    items: pd.Index
    groups: tuple
    labels: tuple
    window_start: np.ndarray  # datetime64[ns] or batch ids, one per window code
    window_end: np.ndarray
    pairs: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(windows, items, groups, labels)."""
        return len(self.window_start), len(self.items), len(self.groups), len(self.labels)

    def take_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """``key`` and ``count``, which this object then no longer holds."""
        if self.key is None:
            raise RuntimeError("the coded records' keys were already taken")
        key, count = self.key, self.count
        self.key = self.count = None
        return key, count


def _narrow(codes: np.ndarray, n: int) -> np.ndarray:
    """Codes in ``0..n-1`` in the smallest signed integer type that holds them."""
    for dtype in (np.int8, np.int16, np.int32):
        if n <= np.iinfo(dtype).max:
            return codes.astype(dtype, copy=False)
    return codes.astype(np.int64, copy=False)


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


def _column(frame: pd.DataFrame, col: str) -> pd.Series:
    """A required column as the frame holds it (factorised without a copy to Python objects)."""
    if col not in frame.columns:
        raise StatsInputError(f"`records` has no field {col!r} (fields: {list(frame.columns)}).")
    values = frame[col]
    missing = values.isna().to_numpy()
    if missing.any():
        raise StatsInputError(f"row {int(np.flatnonzero(missing)[0])}: field {col!r} is missing.")
    return values.reset_index(drop=True)


def _window_codes(frame: pd.DataFrame, window: str, origin) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Window code per row (narrow integers), and each window's start and end (sorted in time)."""
    import pandas as pd

    if window == "batch":
        batch = _require(frame, "batch")
        if "timestamp" in frame.columns:
            ts = _timestamps(frame)
            order = pd.DataFrame({"b": batch, "t": ts}).groupby("b", sort=False)["t"].agg(["min", "max"])
            order = order.sort_values("min", kind="stable")
            codes = pd.Index(order.index).get_indexer(batch)
            return _narrow(codes, len(order)), order["min"].to_numpy(), order["max"].to_numpy()
        uniq, codes = np.unique(batch, return_inverse=True)
        return _narrow(codes.ravel(), uniq.size), uniq, uniq
    try:
        step = pd.to_timedelta(window)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(
            f"`window` must be 'batch' or a fixed length such as '7D' or '1D'; got {window!r}."
        ) from exc
    if step <= pd.Timedelta(0):
        raise StatsInputError(f"`window` must be positive; got {window!r}.")
    ticks, per_tick, first = _ticks(frame)
    start = pd.Timestamp(first).floor("D") if origin is None else pd.Timestamp(origin)
    if start.tzinfo is None:
        start = start.tz_localize("UTC")
    raw = np.empty(ticks.size, dtype=np.int64)
    for at in range(0, ticks.size, CHUNK):  # window numbers in nanoseconds, block by block: (stamp - start) // step
        block = raw[at:at + CHUNK]
        np.multiply(ticks[at:at + CHUNK], per_tick, out=block)
        block -= start.value
        block //= step.value
    del ticks
    if raw.size and raw.min() < 0:
        raise StatsInputError(f"row {int(np.flatnonzero(raw < 0)[0])}: field 'timestamp' is before `origin`.")
    uniq, codes = _small_codes(raw)
    starts = (start + uniq * step)
    return codes, np.asarray(starts), np.asarray(starts + step)


def _ticks(frame: pd.DataFrame) -> tuple[np.ndarray, int, pd.Timestamp]:
    """The time stamps as int64 ticks since the epoch (UTC; naive stamps are read as UTC),
    nanoseconds per tick, and the earliest stamp as :func:`_timestamps` reads it. A column
    of date-times is read as its integers, not one Python object per row; other columns are
    parsed first."""
    import pandas as pd

    col = frame["timestamp"] if "timestamp" in frame.columns else None
    if col is None or not isinstance(col.array, pd.arrays.DatetimeArray):
        ts = _timestamps(frame)
        first = ts.min()
    else:
        missing = col.isna().to_numpy()
        if missing.any():
            raise StatsInputError(f"row {int(np.flatnonzero(missing)[0])}: field 'timestamp' is missing.")
        ts = col
        one = col.iloc[[int(col.array.asi8.argmin())]].to_numpy()
        first = pd.to_datetime(pd.Series(one), utc=True, format="mixed").iloc[0]
    ticks = ts.array.asi8
    per_tick = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[ts.array.unit]
    if ticks.size and max(abs(int(ticks.min())), abs(int(ticks.max()))) > np.iinfo(np.int64).max // per_tick:
        raise StatsInputError("field 'timestamp': time stamps beyond the years 1677-2262 are not supported.")
    return ticks, per_tick, first


def _distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array, by one sort (``np.unique`` takes a hash
    table first, many times slower on millions of mostly distinct keys)."""
    v = np.sort(values)
    return v[np.r_[True, v[1:] != v[:-1]]] if v.size else v


def _small_codes(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values and (narrow) codes of non-negative integers of small range (window
    numbers), in one pass (a count per value), not a sort."""
    raw = np.asarray(raw, dtype=np.int64)
    if raw.size and int(raw.max()) > 4 * raw.size + (1 << 20):  # a sparse range: sort instead
        uniq, codes = np.unique(raw, return_inverse=True)
        return uniq, _narrow(codes.ravel(), uniq.size)
    present = np.bincount(raw) > 0 if raw.size else np.zeros(0, dtype=bool)
    uniq = np.flatnonzero(present)
    remap = _narrow(np.cumsum(present) - 1, max(uniq.size, 1))
    return uniq, remap[raw]


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
    """The records as sorted packed keys (see :class:`_Coded`); per-row codes are narrow and
    dropped once packed."""
    import pandas as pd

    if by not in GROUPINGS:
        raise StatsInputError(f"`by` must be one of {GROUPINGS}; got {by!r}.")
    frame = _frame(records)
    if len(frame) == 0:
        raise StatsInputError("`records` is empty: there are no annotations.")
    item_v = _column(frame, "item_id")
    ann_v = _column(frame, "annotator_id")
    label, labels = _label_codes(_require(frame, "label"), labels)
    label = _narrow(label, len(labels))
    group_v = _column(frame, "vendor") if by == "vendor" else None
    item, items = pd.factorize(item_v, sort=False)
    item = _narrow(item, len(items))
    ann, anns = pd.factorize(ann_v, sort=by == "annotator")  # sorted: the annotators are the groups
    ann = _narrow(ann, len(anns))
    _check_one_label(item, ann, len(items), len(anns), item_v, ann_v)
    if group_v is None:
        group, groups = ann, anns
    else:
        del ann
        group, groups = pd.factorize(group_v, sort=True)
        group = _narrow(group, len(groups))
    wcode, wstart, wend = _window_codes(frame, window, origin)
    n_rows = item.size
    key, count, pairs = _pack(wcode, item, group, label, (len(wstart), len(items), len(groups), len(labels)))
    return _Coded(key, count, n_rows, items, tuple(groups), labels, wstart, wend, pairs)


def _check_one_label(item: np.ndarray, ann: np.ndarray, n_items: int, n_anns: int, item_v, ann_v) -> None:
    """Raise when an annotator labeled an item twice (one sort of packed (item, annotator))."""
    import pandas as pd

    wide = np.int32 if n_items * n_anns < 2**31 else np.int64
    pair = item.astype(wide)
    pair *= n_anns
    pair += ann
    pair.sort()
    if not (pair[1:] == pair[:-1]).any():
        return
    del pair
    ann, _ = pd.factorize(ann_v, sort=False)  # the first pair in (item, annotator) order of appearance
    pair = item.astype(np.int64) * n_anns + ann
    order = np.argsort(pair, kind="stable")
    dup = np.flatnonzero(pair[order][1:] == pair[order][:-1])
    first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
    raise StatsInputError(
        f"row {second}: annotator {ann_v.iloc[second]!r} already labeled item {item_v.iloc[second]!r} at row "
        f"{first}; keep one (the current) label per (item, annotator)."
    )


def _pack(window: np.ndarray, item: np.ndarray, group: np.ndarray, label: np.ndarray,
          shape: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The distinct ``((window * n_items + item) * n_groups + group) * n_labels + label`` of
    the rows, sorted, with how many rows have each, and the ranked (window, item) pairs when
    the product passes 63 bits (see :class:`_Coded`). The keys are written block by block
    and sorted in place: one array of 8 bytes a row."""
    n_windows, n_items, n_groups, n_labels = shape
    pairs = None
    if n_windows * n_items * n_groups * n_labels >= KEY_LIMIT:
        pairs, rank = np.unique(window.astype(np.int64) * n_items + item, return_inverse=True)
        if pairs.size * n_groups * n_labels >= 2**63:
            raise StatsInputError("too many distinct (window, item, group, label) combinations to pack.")
        window, item, n_items = np.zeros(item.size, dtype=np.int8), rank.ravel(), pairs.size
    n = item.size
    key = np.empty(n, dtype=np.int64)
    for at in range(0, n, CHUNK):
        block = key[at:at + CHUNK]
        block[:] = window[at:at + CHUNK]
        block *= n_items
        block += item[at:at + CHUNK]
        block *= n_groups
        block += group[at:at + CHUNK]
        block *= n_labels
        block += label[at:at + CHUNK]
    key.sort()
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    distinct = key[new]
    del key
    start = np.flatnonzero(new)
    del new
    count = np.empty(start.size, dtype=np.int32 if n < 2**31 else np.int64)
    np.subtract(start[1:], start[:-1], out=count[:-1], casting="unsafe")
    count[-1:] = n - start[-1:]
    return distinct, count, pairs


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


# --------------------------------------------------------------------------- sums


@dataclass(frozen=True)
class _Sums:
    """Per (group, window) sums of coded records; arrays of shape (n_groups, n_windows).

    ``units[metric]``: (n, s1, s2) of the units' means, as
    :func:`auditor.stats.quality.quality_units` sums them; ``paired[metric]``: as
    :func:`auditor.stats.monitoring.paired_sums` (``None`` when not asked for);
    ``x["t"]``, ``x["e"]``: (n, s1, s2) of the per-item X^t and X^e of the upper bounds.
    """

    n_labels: np.ndarray
    n_items: np.ndarray
    units: dict
    paired: dict | None
    x: dict


def _credit_table(counts: np.ndarray) -> np.ndarray:
    """Leave-one-out tie credit of label ``l`` on item ``i`` from the label counts (L, I):
    the credit of :func:`auditor.stats.certification.tie_credit` against the other labels
    of the item (NaN when the item has no other label). Only a label alone at the item's
    top scores: 1 when it still leads without its own vote, ``1 / (T + 1)`` when it then
    ties with the ``T`` labels one below."""
    top = counts.max(axis=0)
    at_top = counts == top
    below = np.where(at_top, -1.0, counts)
    second = below.max(axis=0)
    n_second = (below == second).sum(axis=0)
    del below
    value = np.where(top - 1 == second, 1 / (n_second + 1), 1.0)
    out = np.where(at_top & (at_top.sum(axis=0) == 1), value, 0.0)
    out[:, counts.sum(axis=0) < 2] = np.nan
    return out


def _gold_table(gold_item: np.ndarray, n_labels: int) -> np.ndarray:
    """Correctness of label ``l`` on item ``i`` (L, I): 1 for the gold label, 0 for another,
    NaN where the item has no gold label."""
    out = np.where(gold_item >= 0, 0.0, np.nan)[None, :].repeat(n_labels, axis=0)
    known = np.flatnonzero(gold_item >= 0)
    out[gold_item[known], known] = 1.0
    return out


def _record_sums(coded: _Coded, gold_item: np.ndarray, *, paired: bool = True) -> _Sums:
    """Everything the series and the detector need from coded records, from their sorted
    keys (released here: ``coded`` keeps its names).

    Each distinct (window, item, group, label) gets its labels' agreement credit (from the
    item's label counts) and correctness against ``gold_item`` (gold label code per item,
    -1 where none), NaN where the metric has no value for the item; each unit (window,
    item, group) their sums; then per (group, window) as :func:`_unit_sums`,
    :func:`_paired_sums` and :func:`_x_sums`.
    """
    n_windows, n_items, n_groups, n_labels = coded.shape
    key, count = coded.take_keys()
    unit = key // n_labels
    il = unit // n_groups  # (window, item), then (label, item): the cell of the label tables
    if coded.pairs is not None:
        il = coded.pairs[il]
    il %= n_items
    for at in range(0, il.size, CHUNK):
        il[at:at + CHUNK] += (key[at:at + CHUNK] % n_labels) * np.int64(n_items)
    del key
    counts = np.bincount(il, weights=count, minlength=n_labels * n_items).reshape(n_labels, n_items)
    credit = _credit_table(counts).ravel()[il]
    del counts
    credit *= count
    right = None
    if (gold_item >= 0).any():
        right = _gold_table(gold_item, n_labels).ravel()[il]
        right *= count
    del il
    heads = np.empty(unit.size, dtype=bool)
    heads[:1] = True
    np.not_equal(unit[1:], unit[:-1], out=heads[1:])
    heads = np.flatnonzero(heads)
    n_lab = np.add.reduceat(count, heads)
    sq = np.add.reduceat(np.square(count, dtype=np.float64), heads)
    del count
    sums = {"agreement": np.add.reduceat(credit, heads)}
    del credit
    if right is not None:
        sums["gold_accuracy"] = np.add.reduceat(right, heads)
        del right
    unit = unit[heads]
    del heads
    cell, window, new_pair = _unit_cells(unit, coded)
    del unit
    shape = (n_groups, n_windows)
    x = _x_sums(cell, n_lab, sq, shape)
    del sq
    units, pairs = {}, {}
    for metric in ("agreement", "gold_accuracy"):
        lab_sum = sums.pop(metric, None)
        ok = None if lab_sum is None else ~np.isnan(lab_sum)
        if ok is None or not ok.any():
            units[metric] = _unit_sums(cell[:0], np.zeros(0), shape)
            pairs[metric] = _paired_sums(cell[:0], window[:0], new_pair[:0], np.zeros(0), n_lab[:0], shape)
            continue
        if ok.all():
            c, w, new, lab_n = cell, window, new_pair, n_lab
        else:
            c, w, new, lab_n, lab_sum = cell[ok], window[ok], new_pair[ok], n_lab[ok], lab_sum[ok]
        del ok
        item_sums = _item_sums(lab_sum, lab_n, new) if paired else None
        mean = np.divide(lab_sum, lab_n, out=lab_sum)  # the units' means, in place of their sums
        units[metric] = _unit_sums(c, mean, shape)
        if paired:
            pairs[metric] = _paired_sums(c, w, new, mean, item_sums, shape)
        del c, w, new, lab_n, lab_sum, mean
    size = n_groups * n_windows
    n_items_cell = np.bincount(cell, minlength=size).reshape(shape)
    n_labels_cell = np.bincount(cell, weights=n_lab, minlength=size).reshape(shape).round().astype(np.int64)
    return _Sums(n_labels_cell, n_items_cell, units, pairs if paired else None, x)


def _unit_cells(unit: np.ndarray, coded: _Coded) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of unit keys ``pair * n_groups + group`` (sorted): the (group, window) cell (intp, as
    ``np.bincount`` takes it), the window, and where each (window, item) pair starts."""
    n_windows, n_items, n_groups, _ = coded.shape
    pair = unit // n_groups
    new_pair = np.empty(pair.size, dtype=bool)
    new_pair[:1] = True
    np.not_equal(pair[1:], pair[:-1], out=new_pair[1:])
    cell = pair * n_groups
    np.subtract(unit, cell, out=cell)  # the group
    if coded.pairs is not None:
        pair = coded.pairs[pair]
    pair //= n_items
    window = _narrow(pair, n_windows)
    del pair
    cell *= n_windows
    cell += window
    return cell.astype(np.intp, copy=False), window, new_pair


def _item_sums(lab_sum: np.ndarray, lab_n: np.ndarray, new_pair: np.ndarray):
    """Per (window, item) pair: where its units start, and the sum and count of its labels' scores."""
    ihead = np.flatnonzero(new_pair)
    return ihead, np.add.reduceat(lab_sum, ihead), np.add.reduceat(lab_n, ihead)


def _unit_sums(cell: np.ndarray, mean: np.ndarray, shape: tuple[int, int]):
    """(n, s1, s2) per (group, window) of units with these means (as :func:`quality_units`)."""
    size = shape[0] * shape[1]
    n = np.bincount(cell, minlength=size).reshape(shape)
    s1 = np.bincount(cell, weights=mean, minlength=size).reshape(shape)
    return n, s1, np.bincount(cell, weights=mean * mean, minlength=size).reshape(shape)


def _paired_sums(cell: np.ndarray, window: np.ndarray, new_pair: np.ndarray, unit: np.ndarray, item_sums,
                 shape: tuple[int, int]) -> PairedSums:
    """:func:`auditor.stats.monitoring.paired_sums` on units in (window, item, group) order:
    each unit's mean against the mean of the other groups' units of its item, and per
    window the items' mean score (``item_sums`` from :func:`_item_sums`)."""
    n_groups, n_windows = shape
    size = n_groups * n_windows
    if cell.size == 0:
        z = np.zeros(n_windows)
        return PairedSums(np.zeros(shape), np.zeros(shape), np.zeros(shape), z, z.copy(), z.copy(), np.zeros(shape))
    ihead, lab_sum, lab_n = item_sums
    icnt = np.diff(np.r_[ihead, unit.size])
    # x = unit - (sum of the item's units - unit) / (units of the item - 1), in place
    x = np.repeat(np.add.reduceat(unit, ihead), icnt)
    x -= unit
    with np.errstate(invalid="ignore", divide="ignore"):
        x /= np.repeat((icnt - 1).astype(np.float64), icnt)
    np.subtract(unit, x, out=x)
    alone = np.repeat(icnt < 2, icnt)  # an item only this group labeled: no pair
    x[alone] = 0.0  # adds nothing to the sums below
    n = np.bincount(cell[~alone], minlength=size).reshape(shape).astype(float)
    del alone
    s1 = np.bincount(cell, weights=x, minlength=size).reshape(shape)
    s3 = np.bincount(cell, weights=x * x * x, minlength=size).reshape(shape)
    s2 = np.bincount(cell, weights=np.square(x, out=x), minlength=size).reshape(shape)
    item_mean = lab_sum / lab_n
    iwin = window[ihead]
    return PairedSums(n, s1, s2, np.bincount(iwin, minlength=n_windows).astype(float),
                      np.bincount(iwin, weights=item_mean, minlength=n_windows),
                      np.bincount(iwin, weights=item_mean ** 2, minlength=n_windows), s3)


def _x_sums(cell: np.ndarray, lab_n: np.ndarray, sq: np.ndarray, shape: tuple[int, int]) -> dict:
    """Per (group, window): count, sum and sum of squares of the per-item X^t = sum_l n_l^2 / k^2
    and X^e = (sum_l n_l^2 - k) / (k (k - 1)) over the group's k labels of the item (X^e
    where k >= 2)."""
    size = shape[0] * shape[1]
    out = {}
    k = lab_n.astype(np.float64)
    for name in ("t", "e"):
        if name == "e":
            two = lab_n >= 2
            cell, k, sq = (cell, k, sq) if two.all() else (cell[two], k[two], sq[two])
            del two
            x = k - 1
            x *= k
            np.divide(sq - k, x, out=x)
        else:
            x = k * k
            np.divide(sq, x, out=x)
        n = np.bincount(cell, minlength=size).reshape(shape)
        s1 = np.bincount(cell, weights=x, minlength=size).reshape(shape)
        out[name] = (n, s1, np.bincount(cell, weights=np.square(x, out=x), minlength=size).reshape(shape))
        del x
    return out
