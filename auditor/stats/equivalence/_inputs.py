"""Validation of rating matrices, predictions and option names (one place for the wording)."""

from __future__ import annotations

import numpy as np

from auditor.stats.counts import Annotations, LabelCounts, tally_counts
from auditor.stats.validation import StatsInputError, as_count_matrix, as_rng

COMBINERS = ("majority", "plurality", "frequency", "abc")
SCORERS = ("agreement", "cross_entropy", "f1", "auc", "pearson", "dmi")
#: Scorers whose expectation over rater subsets and reference raters is a per-item sum.
DECOMPOSABLE = ("agreement", "cross_entropy")
SOFT_COMBINERS = ("frequency", "abc")


def check_combiner(combiner) -> str:
    if combiner not in COMBINERS:
        raise StatsInputError(f"`combiner` must be one of {list(COMBINERS)}; got {combiner!r}.")
    return combiner


def check_scorer(scorer) -> str:
    if scorer not in SCORERS:
        raise StatsInputError(f"`scorer` must be one of {list(SCORERS)}; got {scorer!r}.")
    return scorer


def check_pair(combiner, scorer, n_labels: int) -> tuple[str, str]:
    combiner, scorer = check_combiner(combiner), check_scorer(scorer)
    if scorer == "cross_entropy" and combiner not in SOFT_COMBINERS:
        raise StatsInputError(
            f"`scorer` 'cross_entropy' needs a soft combiner ('frequency' or 'abc'); "
            f"{combiner!r} outputs hard labels, whose log-probabilities are infinite."
        )
    if combiner == "majority" and n_labels > 2:
        raise StatsInputError(
            f"`combiner` 'majority' is defined for two classes; there are {n_labels}: use 'plurality'."
        )
    if scorer == "auc" and n_labels != 2:
        raise StatsInputError(f"`scorer` 'auc' needs two classes; there are {n_labels}.")
    return combiner, scorer


def as_rating_matrix(ratings, *, name: str = "ratings", n_labels: int | None = None) -> np.ndarray:
    """An (N, K) item × rater matrix of class codes, ``-1`` where a rating is missing.

    Accepts arrays with ``-1`` or NaN for missing entries, DataFrames of codes, and
    :class:`~auditor.stats.counts.Annotations` (its ``.matrix()``).
    """
    if isinstance(ratings, Annotations):
        return ratings.matrix()
    if hasattr(ratings, "to_numpy"):
        ratings = ratings.to_numpy()
    arr = np.asarray(ratings)
    if arr.dtype == object:
        try:
            arr = arr.astype(float)
        except (TypeError, ValueError) as exc:
            raise StatsInputError(f"`{name}` must hold class indices (integers, -1 or NaN for missing): {exc}") from None
    if arr.ndim != 2:
        raise StatsInputError(f"`{name}` must be two-dimensional (items × raters); got shape {arr.shape}.")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise StatsInputError(f"`{name}` is empty; got shape {arr.shape}.")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise StatsInputError(f"`{name}` must hold integer class indices; got dtype {arr.dtype}.")
    if np.issubdtype(arr.dtype, np.floating):
        missing = np.isnan(arr)
        if np.isinf(arr).any():
            r, c = np.argwhere(np.isinf(arr))[0]
            raise StatsInputError(f"`{name}` has an infinite value at row {r}, rater {c}.")
        filled = np.where(missing, -1.0, arr)
        frac = filled != np.round(filled)
        if frac.any():
            r, c = np.argwhere(frac)[0]
            raise StatsInputError(f"`{name}` must hold class indices; row {r}, rater {c} is {arr[r, c]!r}.")
        arr = filled.astype(np.int64)
    else:
        arr = arr.astype(np.int64, copy=False)
    bad = arr < -1
    if n_labels is not None:
        bad |= arr >= n_labels
    if bad.any():
        r, c = np.argwhere(bad)[0]
        hint = f" (classes are 0..{n_labels - 1})" if n_labels is not None else ""
        raise StatsInputError(f"`{name}` row {r}, rater {c} is {arr[r, c]}, not a class index or -1{hint}.")
    if (arr >= 0).sum() == 0:
        raise StatsInputError(f"`{name}` has no ratings: every entry is missing.")
    return arr


def n_labels_of(*matrices, n_labels: int | None) -> int:
    top = max(int(m.max()) for m in matrices) + 1
    if n_labels is None:
        return max(top, 2)
    if not isinstance(n_labels, int | np.integer) or n_labels < 2:
        raise StatsInputError(f"`n_labels` must be an integer ≥ 2; got {n_labels!r}.")
    return int(n_labels)


def counts_of(matrix: np.ndarray, n_labels: int) -> np.ndarray:
    """Per-item label counts (N, L) of a code matrix with -1 for missing."""
    n, _ = matrix.shape
    if n_labels <= 16:
        # One comparison pass per class beats a bincount over every cell for few classes.
        out = np.empty((n, n_labels), dtype=np.int64)
        for lab in range(n_labels):
            out[:, lab] = np.count_nonzero(matrix == lab, axis=1)
        return out
    rows = np.repeat(np.arange(n), matrix.shape[1])
    flat = matrix.ravel()
    keep = flat >= 0
    return tally_counts(rows[keep], flat[keep], n, n_labels)


#: What a bare matrix given as ratings is (``matrix=``): decided from the matrix where only
#: one reading fits, or said by the caller.
MATRIX_READINGS = ("auto", "raters", "counts")


def as_counts_input(ratings, *, name: str, n_labels: int | None,
                    matrix: str = "auto") -> tuple[np.ndarray | None, np.ndarray]:
    """``(matrix or None, counts)`` from a rating matrix, Annotations or LabelCounts, or a
    bare matrix read as ``matrix`` says (see :func:`check_reading` for "auto")."""
    if matrix not in MATRIX_READINGS:
        raise StatsInputError(f"`matrix` must be one of {list(MATRIX_READINGS)}; got {matrix!r}.")
    typed = "counts" if isinstance(ratings, LabelCounts) else "raters" if isinstance(ratings, Annotations) else None
    if typed is not None and matrix not in ("auto", typed):
        raise StatsInputError(f"`{name}` is {type(ratings).__name__}, not what `matrix={matrix!r}` says it is.")
    if typed == "counts" or matrix == "counts":
        counts = as_count_matrix(ratings.counts if typed else ratings, name=name)
        if n_labels is not None and counts.shape[1] != n_labels:
            raise StatsInputError(f"`{name}` has {counts.shape[1]} label columns but `n_labels` is {n_labels}.")
        return None, counts
    if typed is None and matrix == "auto":
        check_reading(ratings, name=name, n_labels=n_labels)
    return as_rating_matrix(ratings, name=name, n_labels=n_labels), None


def check_reading(ratings, *, name: str, n_labels: int | None) -> None:
    """Refuse a bare matrix that reads as label counts as well as it reads as a rater matrix.

    An item × rater matrix of class codes and an item × label matrix of counts are both
    tables of non-negative integers. A bare one is read as raters (class codes) unless it
    looks like counts: nothing marks a missing rating (-1 or NaN: no count is negative),
    and its largest value is at least its number of columns, so that read as raters it
    would have more classes than raters (or a value beyond ``n_labels``), as a count
    matrix of items with more labels than classes does (ChaosNLI: 3 columns, counts up to
    100 — read as raters, 100 classes and a 3-point curve). Unless ``n_labels`` differs
    from the number of columns, which rules the counts out.
    """
    arr = ratings.to_numpy() if hasattr(ratings, "to_numpy") else np.asarray(ratings)
    if arr.ndim != 2 or arr.size == 0 or arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        return  # not a table of numbers: as_rating_matrix names what is wrong
    if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
        return  # NaN marks a missing rating (and an infinity is refused as a class code)
    n_items, n_cols = arr.shape
    top = arr.max()
    if arr.min() < 0 or top != np.floor(top) or (n_labels is not None and n_labels != n_cols):
        return
    if top < n_cols and (n_labels is None or top < n_labels):
        return
    per_item = arr.sum(axis=1)
    lo, hi = int(per_item.min()), int(per_item.max())
    n_classes = max(int(top) + 1, n_labels or 0)
    raise StatsInputError(
        f"`{name}` is ambiguous: a bare {n_items} × {n_cols} matrix of non-negative integers (largest {int(top)}) "
        f"reads as a rater matrix ({n_items} items × {n_cols} raters, class codes of {n_classes} classes) or as "
        f"label counts ({n_items} items × {n_cols} classes, {lo if lo == hi else f'{lo} to {hi}'} labels per "
        "item). Say which: for counts, pass LabelCounts(counts, labels, items) or `matrix='counts'`; for a rater "
        "matrix, pass Annotations (annotations_from_wide(matrix)) or `matrix='raters'` (missing ratings marked "
        "-1 or NaN also make it one)."
    )


def compact_rows(matrix: np.ndarray, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Keep items with at least ``m`` ratings and ``m`` of each, chosen at random.

    Returns ``(kept_rows, compact)`` with ``compact`` of shape (N', m) and no missing
    entries: the reference package's full-matrix alternative for ragged data.
    """
    present = matrix >= 0
    n_have = present.sum(axis=1)
    rows = np.flatnonzero(n_have >= m)
    if rows.size == 0:
        raise StatsInputError(f"no item has at least `min_labels`={m} ratings.")
    sub = matrix[rows]
    # A random key per present rating; missing ones sort last, so the first m are a
    # uniformly random m-subset of the item's ratings.
    keys = rng.random(sub.shape)
    keys[sub < 0] = 2.0
    order = np.argsort(keys, axis=1)[:, :m]
    return rows, np.take_along_axis(sub, order, axis=1)


def is_full(matrix: np.ndarray) -> bool:
    return bool((matrix >= 0).all())


__all__ = ["as_rng"]


def sub_counts_columns(unique: np.ndarray, k_max: np.ndarray,
                       sizes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All (owner, y) with y ≤ unique[owner] elementwise and |y| ≤ k_max[owner].

    Built one label at a time, expanding each partial vector by every admissible count.
    ``y`` is column-major, (L, P): each label's counts contiguous, so the per-label
    arithmetic and the reductions over labels run on whole columns. With ``sizes`` (a
    sorted array of totals), only the y with |y| in ``sizes``: the last label's count
    is then chosen to land on them.
    """
    n_u, n_labels = unique.shape
    owner = np.arange(n_u)
    # Level by level: each partial vector's children, their count for this label, and
    # (``parents``) the partial vector each came from; the columns are gathered at the end
    # along that chain (2L passes over the pairs rather than L²/2 repeats).
    offsets_by_level: list[np.ndarray] = []
    parents: list[np.ndarray] = []
    used = np.zeros(n_u, dtype=np.int64)
    # With ``sizes``: what the labels after each one can still add, to drop partial vectors
    # that can no longer reach the smallest size.
    left = None if sizes is None else np.cumsum(unique[:, ::-1], axis=1)[:, ::-1]
    for lab in range(n_labels):
        room = np.minimum(unique[owner, lab], k_max[owner] - used)
        if sizes is not None and lab == n_labels - 1:
            # The totals in [used, used + room] that are allowed, and the counts reaching them.
            first = np.searchsorted(sizes, used, side="left")
            reps = np.maximum(np.searchsorted(sizes, used + room, side="right") - first, 0)
            starts = np.cumsum(reps) - reps
            parent = np.repeat(np.arange(owner.shape[0]), reps)
            offsets = sizes[first[parent] + np.arange(parent.shape[0]) - starts[parent]] - used[parent]
        else:
            reps = np.maximum(room, -1) + 1
            starts = np.cumsum(reps) - reps
            parent = np.repeat(np.arange(owner.shape[0]), reps)
            offsets = np.arange(parent.shape[0]) - starts[parent]
            if left is not None and lab + 1 < n_labels:
                keep = used[parent] + offsets + left[owner[parent], lab + 1] >= sizes[0]
                if not keep.all():
                    parent, offsets = parent[keep], offsets[keep]
        owner = owner[parent]
        used = used[parent] + offsets
        offsets_by_level.append(offsets)
        parents.append(parent)
    y = np.empty((n_labels, owner.shape[0]), dtype=np.int64)
    index = np.arange(owner.shape[0])
    for lab in range(n_labels - 1, -1, -1):
        y[lab] = offsets_by_level[lab][index]
        if lab:
            index = parents[lab][index]
    return owner, y
