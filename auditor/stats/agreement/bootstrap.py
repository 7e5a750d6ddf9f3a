"""The item bootstrap shared by the agreement coefficients: argument checks, the
histogram of distinct count vectors, resampled multiplicities drawn in blocks of bounded
memory, and percentile/basic intervals."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from auditor.stats.agreement.results import AgreementCoefficient
from auditor.stats.resampling import resampled_multiplicities
from auditor.stats.validation import (
    StatsInputError,
    check_probability,
)

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


def _bootstrap_sums(features: np.ndarray, multiplicity: np.ndarray, statistic: Callable,
                    n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """Item bootstrap of a statistic of column sums of per-row ``features``.

    ``features`` has one row per distinct count vector; each block of resampled
    multiplicities ``W`` (see :func:`~auditor.stats.resampling.resampled_multiplicities`) gives the resampled
    column sums ``W @ features`` in one matrix product and ``statistic`` maps them
    (one row per resample) to the resampled values.
    """
    out = np.empty(n_bootstrap)
    # (F, U) @ (U, B): OpenBLAS runs this long-inner-dimension product several
    # times faster than the equivalent (B, U) @ (U, F).
    features_t = np.ascontiguousarray(features.T)
    start = 0
    for weights in resampled_multiplicities(multiplicity, n_bootstrap, rng, block_cells=_BLOCK_CELLS):
        out[start:start + weights.shape[0]] = statistic((features_t @ weights.T).T)
        start += weights.shape[0]
    return out
