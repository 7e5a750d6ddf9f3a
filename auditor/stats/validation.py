"""Argument checks and coercers shared by the statistics (one place for the error wording):
label counts (:func:`as_count_matrix`; :func:`auditor.stats.counts.as_counts` also takes the count tables), predictions
(:func:`as_predictions`, :func:`as_hard_predictions`, :func:`as_probabilities`),
probabilities and non-negative numbers, and random generators."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class StatsInputError(ValueError):
    """Raised for input the statistics cannot use; the message names the argument."""


#: The largest count of one label on one item, and of all labels on one item: squares
#: and products of counts stay exact in 64-bit integers below it.
MAX_COUNT = 2**31 - 1
_IS_BOOL = np.frompyfunc(lambda v: isinstance(v, bool | np.bool_), 1, 1)


#: A count matrix has no missing entries; a rater matrix marks them -1 or NaN.
_RATER_HINT = (": label counts are never missing or negative; an item × rater matrix with missing ratings goes in "
               "as Annotations, e.g. annotations_from_wide(matrix)")


def as_count_matrix(counts, *, name: str = "counts", allow_empty_rows: bool = True) -> np.ndarray:
    """Validate an (N, L) array-like of non-negative integer label counts.

    Returns an ``int64`` array. Booleans, NaN, negative or non-integer values,
    ragged rows and empty input raise :class:`StatsInputError` naming ``name`` and,
    where it applies, the first offending row.
    """
    if hasattr(counts, "to_numpy"):  # pandas DataFrame
        counts = counts.to_numpy()
    if isinstance(counts, np.ndarray):
        arr = counts
    else:
        rows = list(counts)
        if rows and all(isinstance(r, Sequence | np.ndarray) for r in rows):
            widths = {len(r) for r in rows}
            if len(widths) > 1:
                first = len(rows[0])
                bad = next(i for i, r in enumerate(rows) if len(r) != first)
                raise StatsInputError(
                    f"`{name}` is ragged: row {bad} has {len(rows[bad])} entries, "
                    f"row 0 has {first}."
                )
        try:
            arr = np.asarray(rows)
        except ValueError as exc:  # pragma: no cover - numpy's ragged message
            raise StatsInputError(f"`{name}` must be a rectangular (N, L) array: {exc}") from exc
        if arr.dtype != bool and arr.ndim == 2 and arr.size:
            # numpy reads [[True, 2]] as integers: booleans are not counts, say so
            flags = _IS_BOOL(np.asarray(rows, dtype=object)).astype(bool)
            if flags.any():
                r, c = np.argwhere(flags)[0]
                raise StatsInputError(f"`{name}` must hold integer counts, not booleans (row {r}, column {c}).")
    if arr.size == 0 and arr.ndim <= 1:
        raise StatsInputError(f"`{name}` is empty: it has no items.")
    if arr.ndim != 2:
        raise StatsInputError(f"`{name}` must be two-dimensional (items × labels); got shape {arr.shape}.")
    if arr.shape[0] == 0:
        raise StatsInputError(f"`{name}` is empty: it has no items.")
    if arr.shape[1] == 0:
        raise StatsInputError(f"`{name}` has no label columns.")
    if arr.dtype == bool:
        raise StatsInputError(f"`{name}` must hold integer counts, not booleans.")
    if arr.dtype == object:
        flags = _IS_BOOL(arr).astype(bool)
        if flags.any():
            r, c = np.argwhere(flags)[0]
            raise StatsInputError(f"`{name}` must hold integer counts, not booleans (row {r}, column {c}).")
        try:
            arr = arr.astype(float)
        except (TypeError, ValueError) as exc:
            raise StatsInputError(f"`{name}` must hold numbers: {exc}") from exc
    if not np.issubdtype(arr.dtype, np.number):
        raise StatsInputError(f"`{name}` must hold numbers; got dtype {arr.dtype}.")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            hint = _RATER_HINT if np.isnan(arr[r, c]) else ""
            raise StatsInputError(f"`{name}` has a NaN or infinite value at row {r}, column {c}{hint}.")
        frac = arr != np.round(arr)
        if frac.any():
            r, c = np.argwhere(frac)[0]
            raise StatsInputError(
                f"`{name}` must hold whole counts; row {r}, column {c} is {arr[r, c]!r}."
            )
    neg = arr < 0
    if neg.any():
        r, c = np.argwhere(neg)[0]
        raise StatsInputError(f"`{name}` must be non-negative; row {r}, column {c} is {arr[r, c]!r}{_RATER_HINT}.")
    big = arr > MAX_COUNT
    if big.any():
        r, c = np.argwhere(big)[0]
        raise StatsInputError(
            f"`{name}` row {r}, column {c} is {arr[r, c].item():.6g}: counts above {MAX_COUNT:,} are not supported "
            "(their squares and sums would overflow 64-bit integers)."
        )
    out = arr.astype(np.int64, copy=False)
    totals = out.sum(axis=1)
    if (totals > MAX_COUNT).any():
        r = int(np.flatnonzero(totals > MAX_COUNT)[0])
        raise StatsInputError(f"`{name}` row {r} has {int(totals[r]):,} labels in all: at most {MAX_COUNT:,} per item.")
    if not allow_empty_rows:
        empty = out.sum(axis=1) == 0
        if empty.any():
            raise StatsInputError(f"`{name}` row {int(np.flatnonzero(empty)[0])} has no labels.")
    return out


def as_predictions(predictions, n_items: int, n_labels: int, *, name: str = "predictions",
                   soft: bool = False) -> np.ndarray:
    """Hard (N,) class indices or soft (N, L) probabilities, checked.

    Returns the (N,) labels (a soft prediction's most probable class), or with ``soft``
    the (N, L) distributions (a hard prediction one-hot).
    """
    if hasattr(predictions, "to_numpy"):
        predictions = predictions.to_numpy()
    arr = np.asarray(predictions)
    if arr.ndim == 2:
        probs = as_probabilities(arr, n_items, n_labels, name=name)
        return probs if soft else probs.argmax(axis=1)
    hard = as_hard_predictions(arr, n_items, n_labels, name=name)
    if not soft:
        return hard
    out = np.zeros((n_items, n_labels))
    out[np.arange(n_items), hard] = 1.0
    return out


def as_hard_predictions(predictions, n_items: int, n_labels: int, *, name: str = "predictions") -> np.ndarray:
    """Validate (N,) class indices in ``[0, n_labels)``; returns ``int64``."""
    if hasattr(predictions, "to_numpy"):
        predictions = predictions.to_numpy()
    arr = np.asarray(predictions)
    if arr.ndim != 1:
        raise StatsInputError(f"`{name}` must be one-dimensional (one class index per item); got shape {arr.shape}.")
    if arr.shape[0] != n_items:
        raise StatsInputError(f"`{name}` has {arr.shape[0]} entries but there are {n_items} items.")
    if arr.dtype == bool:
        raise StatsInputError(f"`{name}` must hold class indices, not booleans.")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr)
        if bad.any():
            raise StatsInputError(f"`{name}` has a NaN at item {int(np.flatnonzero(bad)[0])}.")
        if (arr != np.round(arr)).any():
            i = int(np.flatnonzero(arr != np.round(arr))[0])
            raise StatsInputError(f"`{name}` must hold integer class indices; item {i} is {arr[i]!r}.")
    elif not np.issubdtype(arr.dtype, np.integer):
        raise StatsInputError(f"`{name}` must hold integer class indices; got dtype {arr.dtype}.")
    out = arr.astype(np.int64, copy=False)
    bad = (out < 0) | (out >= n_labels)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise StatsInputError(f"`{name}` item {i} is class {out[i]}, outside 0..{n_labels - 1}.")
    return out


def as_probabilities(probs, n_items: int | None, n_labels: int | None, *, name: str = "predictions",
                     atol: float = 1e-6) -> np.ndarray:
    """Validate an (N, L) array of class probabilities (rows sum to 1 within ``atol``)."""
    if hasattr(probs, "to_numpy"):
        probs = probs.to_numpy()
    arr = np.asarray(probs, dtype=float)
    if arr.ndim != 2:
        raise StatsInputError(f"`{name}` must be (items × classes) probabilities; got shape {arr.shape}.")
    if n_items is not None and arr.shape[0] != n_items:
        raise StatsInputError(f"`{name}` has {arr.shape[0]} rows but there are {n_items} items.")
    if n_labels is not None and arr.shape[1] != n_labels:
        raise StatsInputError(f"`{name}` has {arr.shape[1]} columns but there are {n_labels} classes.")
    bad = ~np.isfinite(arr)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise StatsInputError(f"`{name}` has a NaN or infinite probability at item {r}, class {c}.")
    if (arr < 0).any():
        r, c = np.argwhere(arr < 0)[0]
        raise StatsInputError(f"`{name}` has a negative probability at item {r}, class {c}.")
    off = np.abs(arr.sum(axis=1) - 1.0) > atol
    if off.any():
        r = int(np.flatnonzero(off)[0])
        raise StatsInputError(f"`{name}` row {r} sums to {arr[r].sum()!r}, not 1.")
    return arr


def check_probability(value: float, *, name: str, open_interval: bool = False) -> float:
    """Validate a scalar in [0, 1] (or (0, 1))."""
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`{name}` must be a number; got {value!r}.") from exc
    if not np.isfinite(v):
        raise StatsInputError(f"`{name}` must be finite; got {value!r}.")
    if open_interval and not 0.0 < v < 1.0:
        raise StatsInputError(f"`{name}` must lie strictly between 0 and 1; got {v}.")
    if not 0.0 <= v <= 1.0:
        raise StatsInputError(f"`{name}` must lie in [0, 1]; got {v}.")
    return v


def check_nonnegative(value, *, name: str) -> float:
    """Validate a finite scalar ≥ 0 (a margin, a price, a budget)."""
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`{name}` must be a number; got {value!r}.") from exc
    if not np.isfinite(v) or v < 0:
        raise StatsInputError(f"`{name}` must be finite and non-negative; got {value!r}.")
    return v


def as_rng(rng) -> np.random.Generator:
    """``None`` / int seed / Generator → Generator (the only way randomness enters)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, int | np.integer):
        return np.random.default_rng(rng)
    raise StatsInputError(f"`rng` must be None, an integer seed or a numpy Generator; got {type(rng).__name__}.")
