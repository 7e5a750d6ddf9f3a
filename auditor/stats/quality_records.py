"""Annotation records as the integer codes quality monitoring works on.

:mod:`auditor.stats.quality` reads records (a frame or an iterable of mappings with item,
label, annotator or vendor, and a timestamp or batch) through :func:`_code_records`: one
row per annotation of integer codes for the item, the group, the label and the time
window, with the names behind the codes; gold labels through :func:`_gold_codes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from auditor.stats.counts import _label_codes
from auditor.stats.validation import StatsInputError

if TYPE_CHECKING:  # pandas loads pyarrow: imported where a function uses it
    import pandas as pd


GROUPINGS = ("vendor", "annotator")


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


def _column(frame: pd.DataFrame, col: str) -> pd.Series:
    """A required column as the frame holds it (factorised without a copy to Python objects)."""
    if col not in frame.columns:
        raise StatsInputError(f"`records` has no field {col!r} (fields: {list(frame.columns)}).")
    values = frame[col]
    missing = values.isna().to_numpy()
    if missing.any():
        raise StatsInputError(f"row {int(np.flatnonzero(missing)[0])}: field {col!r} is missing.")
    return values.reset_index(drop=True)


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
    uniq, codes = _small_codes(raw)
    starts = (start + uniq * step)
    # time stamps as int64 nanoseconds (UTC), not one Python object per row
    stamps = ts.dt.tz_convert(None).to_numpy() if isinstance(ts.dtype, pd.DatetimeTZDtype) else ts.to_numpy()
    return codes.astype(np.int64), np.asarray(starts), np.asarray(starts + step), stamps


def _distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array, by one sort (``np.unique`` takes a hash
    table first, many times slower on millions of mostly distinct keys)."""
    v = np.sort(values)
    return v[np.r_[True, v[1:] != v[:-1]]] if v.size else v


def _small_codes(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values and codes of non-negative integers of small range (window numbers),
    in one pass (a count per value), not a sort."""
    raw = np.asarray(raw, dtype=np.int64)
    if raw.size and int(raw.max()) > 4 * raw.size + (1 << 20):  # a sparse range: sort instead
        uniq, codes = np.unique(raw, return_inverse=True)
        return uniq, codes.ravel()
    present = np.bincount(raw) > 0 if raw.size else np.zeros(0, dtype=bool)
    uniq = np.flatnonzero(present)
    remap = np.cumsum(present) - 1
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
    import pandas as pd

    if by not in GROUPINGS:
        raise StatsInputError(f"`by` must be one of {GROUPINGS}; got {by!r}.")
    frame = _frame(records)
    if len(frame) == 0:
        raise StatsInputError("`records` is empty: there are no annotations.")
    item_v = _column(frame, "item_id")
    ann_v = _column(frame, "annotator_id")
    label_codes, labels = _label_codes(_require(frame, "label"), labels)
    group_v = _column(frame, "vendor") if by == "vendor" else ann_v
    item, items = pd.factorize(item_v, sort=False)
    ann, anns = pd.factorize(ann_v, sort=False)
    pair = item.astype(np.int64) * len(anns) + ann
    order = np.argsort(pair, kind="stable")
    dup = np.flatnonzero(pair[order][1:] == pair[order][:-1])
    if dup.size:
        first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        raise StatsInputError(
            f"row {second}: annotator {ann_v.iloc[second]!r} already labeled item {item_v.iloc[second]!r} at row "
            f"{first}; keep one (the current) label per (item, annotator)."
        )
    group, groups = pd.factorize(group_v, sort=True)
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
