"""One survey power-curve problem: the arguments checked, the ratings split into the raters'
pool and the reference, the number of labels, slots and largest k, and the computation
path (exact tables, Monte Carlo tables or sampled subsets) chosen for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.stats.counts import row_histogram
from auditor.stats.equivalence._inputs import (
    DECOMPOSABLE,
    as_counts_input,
    check_combiner,
    check_pair,
    check_scorer,
    compact_rows,
    counts_of,
    is_full,
    n_labels_of,
)
from auditor.stats.equivalence.combiners import ABCModel
from auditor.stats.equivalence.exact import k_grid
from auditor.stats.validation import StatsInputError, check_probability


def _check_options(n_bootstrap, confidence, clip, max_k, min_labels, method):
    if not isinstance(n_bootstrap, int | np.integer) or isinstance(n_bootstrap, bool) or n_bootstrap < 0:
        raise StatsInputError(f"`n_bootstrap` must be a non-negative integer; got {n_bootstrap!r}.")
    check_probability(confidence, name="confidence", open_interval=True)
    check_probability(clip, name="clip")
    if clip >= 0.5:
        raise StatsInputError(f"`clip` must be below 0.5; got {clip}.")
    for name, v in (("max_k", max_k), ("min_labels", min_labels)):
        if v is not None and (not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 0):
            raise StatsInputError(f"`{name}` must be a non-negative integer; got {v!r}.")
    if min_labels is not None and min_labels < 2:
        raise StatsInputError(f"`min_labels` must be at least 2 (k raters plus a reference); got {min_labels}.")
    if method not in ("auto", "exact", "sampling"):
        raise StatsInputError(f"`method` must be 'auto', 'exact' or 'sampling'; got {method!r}.")


@dataclass
class _Problem:
    """Validated inputs shared by the public functions."""

    pool: np.ndarray | None          # (N, K) codes, -1 missing; None for counts input
    pool_counts: np.ndarray           # (N, L)
    reference: np.ndarray | None      # (N, R) codes or None (score against the pool)
    reference_counts: np.ndarray | None
    rows: np.ndarray | None           # kept item rows when min_labels subsets them
    n_labels: int
    k_max: int
    method: str
    combiner: str | None
    scorer: str
    slots: int | None = None
    n_total: int = 0                  # items before `min_labels` dropped any
    ks: np.ndarray | None = None      # the k computed: 0..k_max, or a grid (exact path)


def _prepare(ratings, *, combiner, scorer, reference, n_labels, max_k, min_labels, method,
             rng, raters: str = "labels", k_values: str = "auto", matrix: str = "auto") -> _Problem:
    """Check every argument and bring the ratings (and reference raters) to the one
    problem the curve's paths take: counts (and matrices where given), the largest k,
    and the path (exact or rater subsets)."""
    scorer = check_scorer(scorer)
    if combiner is not None:
        check_combiner(combiner)
    if raters not in ("labels", "columns"):
        raise StatsInputError(f"`raters` must be 'labels' or 'columns'; got {raters!r}.")
    if k_values not in ("auto", "all"):
        raise StatsInputError(f"`k_values` must be 'auto' or 'all'; got {k_values!r}.")
    pool, pool_counts = as_counts_input(ratings, name="ratings", n_labels=n_labels, matrix=matrix)
    ref, ref_counts = (None, None) if reference is None else as_counts_input(
        reference, name="reference", n_labels=n_labels, matrix=matrix)
    n_lab = _n_labels(pool, pool_counts, ref, ref_counts, n_labels)
    if combiner is not None:
        check_pair(combiner, scorer, n_lab)
    elif scorer == "auc" and n_lab != 2:
        raise StatsInputError(f"`scorer` 'auc' needs two classes; there are {n_lab}.")
    n_total = (pool if pool is not None else pool_counts).shape[0]
    if reference is not None:
        n_ref = (ref if ref is not None else ref_counts).shape[0]
        if n_ref != n_total:
            raise StatsInputError(f"`reference` has {n_ref} items but `ratings` has {n_total}.")
    rows = None
    if min_labels is not None:
        if pool is None:
            raise StatsInputError("`min_labels` needs a rating matrix, not counts.")
        rows, pool = compact_rows(pool, min_labels, rng)
        if ref is not None:
            ref = ref[rows]
        elif ref_counts is not None:
            ref_counts = ref_counts[rows]
    pool_counts = counts_of(pool, n_lab) if pool is not None else pool_counts
    ref_counts = counts_of(ref, n_lab) if ref is not None else ref_counts
    slots = _slots(raters, pool, reference)
    k_max = _k_max(pool_counts, slots, reference is not None, max_k)
    method = _path(method, scorer, pool, ref, reference is not None, slots)
    grid = method == "exact" and slots is None and k_values == "auto"
    ks = k_grid(k_max) if grid else np.arange(k_max + 1)
    return _Problem(pool, pool_counts, ref, ref_counts, rows, n_lab, k_max, method, combiner, scorer, slots,
                    n_total, ks)


def _n_labels(pool, pool_counts, ref, ref_counts, n_labels) -> int:
    """The number of classes, checked across every matrix and count matrix given."""
    mats = [m for m in (pool, ref) if m is not None]
    cnts = [c for c in (pool_counts, ref_counts) if c is not None]
    if not cnts:
        return n_labels_of(*mats, n_labels=n_labels)
    n_lab = cnts[0].shape[1]
    if any(c.shape[1] != n_lab for c in cnts) or (n_labels is not None and n_lab != n_labels):
        raise StatsInputError("count matrices must all have the same number of label columns.")
    if mats and int(max(m.max() for m in mats)) >= n_lab:
        raise StatsInputError("a rating matrix uses a class index beyond the count columns.")
    return n_lab


def _slots(raters: str, pool, reference) -> int | None:
    """The rater columns of ``raters="columns"`` (None: raters are an item's labels)."""
    if raters != "columns":
        return None
    if pool is None:
        raise StatsInputError("`raters='columns'` needs a rating matrix, not counts.")
    if reference is not None:
        raise StatsInputError("`raters='columns'` is not available with `reference` raters.")
    return pool.shape[1]


def _k_max(pool_counts: np.ndarray, slots: int | None, has_reference: bool, max_k) -> int:
    """The largest number of combined raters: all but the held-out one (of the pool), at most ``max_k``."""
    top = (slots if slots is not None else int(pool_counts.sum(axis=1).max())) - (0 if has_reference else 1)
    if top < 0 or (not has_reference and top < 1):
        raise StatsInputError("`ratings` needs at least two labels on some item (k raters plus a reference).")
    return top if max_k is None else min(top, int(max_k))


def _path(method: str, scorer: str, pool, ref, has_reference: bool, slots: int | None) -> str:
    """``"exact"`` (from the histogram of count vectors) or ``"sampling"`` (the paper's rater subsets)."""
    decomposable = scorer in DECOMPOSABLE
    if method == "auto":
        method = "exact" if decomposable else "sampling"
    if method == "exact" and not decomposable:
        raise StatsInputError(
            f"`scorer` {scorer!r} is not a mean of per-item terms, so it has no exact path; "
            "use method='sampling' (the default for it)."
        )
    if method == "sampling":
        if pool is None or (has_reference and ref is None):
            raise StatsInputError("the rater-subset path needs rating matrices, not counts.")
        if not is_full(pool):
            raise StatsInputError(
                "`ratings` has missing entries: the rater-subset path needs every item rated by "
                "the same number of raters; pass `min_labels=m` to keep items with at least m "
                "labels and m of each (or use an exact scorer)."
            )
    if slots is not None and method != "exact":
        raise StatsInputError("`raters='columns'` is computed on the exact path only (agreement, cross-entropy).")
    return method


def _fitted(problem: _Problem, combiner: str):
    counts = problem.pool_counts
    prior = counts.sum(axis=0) / counts.sum()
    model = None
    if combiner == "abc":
        uniq, mult, _ = row_histogram(counts)
        model = ABCModel(uniq, mult)
    return prior, model
