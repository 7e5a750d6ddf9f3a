"""The item bootstrap shared by the agreement coefficients: argument checks, the
histogram of distinct count vectors, resampled multiplicities drawn in blocks of bounded
memory, and percentile/basic intervals."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from auditor.stats._validation import (
    StatsInputError,
    as_count_matrix,
    check_probability,
)
from auditor.stats.agreement.results import AgreementCoefficient
from auditor.stats.counts import Annotations, LabelCounts, count_histogram

__all__ = []

# Bootstrap resamples are drawn in blocks of at most this many (resample × distinct
# row) cells, so memory stays bounded however many resamples are asked for.
_BLOCK_CELLS = 1 << 21


# ---------------------------------------------------------------------------
# argument checks


_INTERVALS = ("percentile", "basic")


def _check_bootstrap_args(n_bootstrap, confidence, interval) -> tuple[int, float]:
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, int | np.integer) or n_bootstrap < 0:
        raise StatsInputError(f"`n_bootstrap` must be a non-negative integer; got {n_bootstrap!r}.")
    conf = check_probability(confidence, name="confidence", open_interval=True)
    if interval not in _INTERVALS:
        raise StatsInputError(f"`interval` must be one of {list(_INTERVALS)}; got {interval!r}.")
    return int(n_bootstrap), conf


def _as_counts(data, name: str) -> np.ndarray:
    """Counts from an (N, L) array-like, a LabelCounts or an Annotations table."""
    if isinstance(data, Annotations):
        return data.counts().counts
    if isinstance(data, LabelCounts):
        return as_count_matrix(data.counts, name=name)
    return as_count_matrix(data, name=name)


def _histogram(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of ``counts`` and their multiplicities.

    Rows are keyed by mixed-radix integers over groups of columns (each group's key
    fits 62 bits), the groups folded in one after another as dense codes, so many
    classes cost a few 1-D sorts rather than a row-wise ``np.unique``.
    """
    n_rows, n_cols = counts.shape
    if n_rows == 0:
        return counts[:0], np.zeros(0, dtype=np.int64)
    bits = np.log2(counts.max(axis=0).astype(np.float64) + 1.0)
    if bits.sum() < 62:
        unique, mult, _ = count_histogram(counts)
        return unique, mult
    code = np.zeros(n_rows, dtype=np.int64)
    code_bits = 0.0
    start = 0
    while start < n_cols:
        # Columns that fit beside the current dense code (< n_rows, so < 2**code_bits).
        stop, used = start, code_bits
        while stop < n_cols and used + bits[stop] < 62:
            used += bits[stop]
            stop += 1
        if stop == start:  # never: a dense code below 2**31 leaves 31 bits for a column
            raise AssertionError("count too large to key")
        radix = counts[:, start:stop].max(axis=0).astype(np.int64) + 1
        place = np.cumprod(np.concatenate([[1], radix[:-1]])).astype(np.int64)
        key = code * int(np.prod(radix, dtype=np.float64)) + counts[:, start:stop] @ place
        _, code = np.unique(key, return_inverse=True)
        code = code.reshape(-1).astype(np.int64)
        code_bits = np.log2(float(code.max()) + 1.0) if code.size else 0.0
        start = stop
    _, first, mult = np.unique(code, return_index=True, return_counts=True)
    return counts[first], mult.astype(np.int64)


def _undefined(coefficient: str, *, n_items: int, n_values: int, confidence: float,
               interval: str, n_bootstrap: int) -> AgreementCoefficient:
    """The result when no item has two labels: nothing to agree on."""
    return AgreementCoefficient(
        coefficient=coefficient, value=np.nan, ci_low=np.nan, ci_high=np.nan,
        observed_agreement=np.nan, expected_agreement=np.nan, n_items=n_items,
        n_pairable_items=0, n_values=n_values, confidence=confidence, interval=interval,
        n_bootstrap=n_bootstrap, n_bootstrap_undefined=n_bootstrap,
    )


def _interval(samples: np.ndarray, estimate: float, confidence: float,
              method: str) -> tuple[float, float, int]:
    """Bootstrap interval from the defined (finite) samples, and how many were not.

    ``"percentile"``: the quantiles ``q(a/2), q(1 - a/2)`` of the resampled values.
    ``"basic"`` (reverse percentile): ``2·estimate - q(1 - a/2), 2·estimate - q(a/2)``,
    which corrects, to first order, a shift of the resampled values away from the
    estimate (the statistic's own bias).
    """
    ok = np.isfinite(samples)
    n_bad = int(samples.size - ok.sum())
    if not ok.any() or not np.isfinite(estimate):
        return np.nan, np.nan, n_bad
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(samples[ok], [tail, 1.0 - tail])
    if method == "basic":
        lo, hi = 2.0 * estimate - hi, 2.0 * estimate - lo
    return float(lo), float(hi), n_bad


# Cost per resample of drawing the multiplicities, in nanoseconds on a current CPU:
# ``rng.multinomial`` spends about this much per distinct row, an index draw plus
# ``bincount`` about this much per item. The cheaper of the two is used.
_MULTINOMIAL_NS_PER_ROW = 110.0
_INDEX_NS_PER_ITEM = 15.0


def _resampled_multiplicities(multiplicity: np.ndarray, n_bootstrap: int, rng: np.random.Generator):
    """Item-bootstrap multiplicities of the distinct rows, in blocks of resamples.

    Resampling the N items with replacement gives the distinct rows multiplicities
    ``Multinomial(N, m_u / N)``. Yields float arrays of shape (B, U), B resamples at a
    time, whose rows are those multiplicities. They are drawn either directly (cost
    ~ U per resample) or, when the rows are nearly all distinct, by drawing N item
    indices and counting them per row (cost ~ N per resample, several times cheaper
    per unit than a multinomial over U categories). Each block holds at most
    ``_BLOCK_CELLS`` cells, whatever ``n_bootstrap`` is; the draws depend only on
    ``rng``'s state, so a seed reproduces them.
    """
    n_rows = int(multiplicity.size)
    n = int(multiplicity.sum())
    by_index = n * _INDEX_NS_PER_ITEM < n_rows * _MULTINOMIAL_NS_PER_ROW
    if by_index:
        block = max(1, min(n_bootstrap, _BLOCK_CELLS // max(1, n)))
        # 32-bit draws and codes where they fit: a quarter faster than 64-bit ones.
        small = max(n, block * n_rows) < 2**31
        code = np.int32 if small else np.int64
        owner = np.repeat(np.arange(n_rows, dtype=code), multiplicity)
    else:
        p = multiplicity / n
        block = max(1, min(n_bootstrap, _BLOCK_CELLS // max(1, n_rows)))
    for start in range(0, n_bootstrap, block):
        size = min(block, n_bootstrap - start)
        if by_index:
            draw = owner[rng.integers(0, n, size=(size, n), dtype=code)]
            draw += (np.arange(size, dtype=code) * n_rows)[:, None]
            weights = np.bincount(draw.ravel(), minlength=size * n_rows).reshape(size, n_rows)
        else:
            weights = rng.multinomial(n, p, size=size)
        yield weights.astype(np.float64)


def _bootstrap_sums(features: np.ndarray, multiplicity: np.ndarray, statistic: Callable,
                    n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """Item bootstrap of a statistic of column sums of per-row ``features``.

    ``features`` has one row per distinct count vector; each block of resampled
    multiplicities ``W`` (see :func:`_resampled_multiplicities`) gives the resampled
    column sums ``W @ features`` in one matrix product and ``statistic`` maps them
    (one row per resample) to the resampled values.
    """
    out = np.empty(n_bootstrap)
    # (F, U) @ (U, B): OpenBLAS runs this long-inner-dimension product several
    # times faster than the equivalent (B, U) @ (U, F).
    features_t = np.ascontiguousarray(features.T)
    start = 0
    for weights in _resampled_multiplicities(multiplicity, n_bootstrap, rng):
        out[start:start + weights.shape[0]] = statistic((features_t @ weights.T).T)
        start += weights.shape[0]
    return out
