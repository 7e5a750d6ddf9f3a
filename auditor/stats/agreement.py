"""Chance-corrected agreement among annotators: Krippendorff's alpha, Fleiss' kappa and
pairwise Cohen's kappa, each with a bootstrap confidence interval over items.

Krippendorff's alpha (nominal) and Fleiss' kappa depend on the data only through the
per-item label-count vectors, so they are computed from the (N, L) count matrix and
bootstrapped by re-weighting the histogram of distinct count vectors, in blocks of
resamples: memory grows with the number of *distinct* count vectors, not with the
number of resamples, and each resample costs the cheaper of a multinomial over the
distinct vectors and an index draw over the items. Pairwise Cohen's kappa needs to know who gave which label and works on
:class:`~auditor.stats.counts.Annotations` (or an item × rater matrix).

References
----------
.. [K2011] K. Krippendorff (2011). "Computing Krippendorff's Alpha-Reliability".
   Annenberg School for Communication, University of Pennsylvania.
.. [F1971] J. L. Fleiss (1971). "Measuring nominal scale agreement among many raters".
   Psychological Bulletin 76(5), 378-382.
.. [G2014] K. L. Gwet (2014). *Handbook of Inter-Rater Reliability*, 4th ed.,
   Advanced Analytics (Fleiss' kappa with a varying number of raters per subject).
.. [C1960] J. Cohen (1960). "A coefficient of agreement for nominal scales".
   Educational and Psychological Measurement 20(1), 37-46.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from auditor.stats._validation import (
    StatsInputError,
    as_count_matrix,
    as_rng,
    check_probability,
)
from auditor.stats.counts import Annotations, LabelCounts, count_histogram

__all__ = [
    "AgreementCoefficient",
    "AgreementReport",
    "PairwiseKappa",
    "UndefinedAgreementWarning",
    "agreement",
    "fleiss_kappa",
    "krippendorff_alpha",
    "pairwise_cohen_kappa",
]

# Bootstrap resamples are drawn in blocks of at most this many (resample × distinct
# row) cells, so memory stays bounded however many resamples are asked for.
_BLOCK_CELLS = 1 << 21
# The pairwise-kappa bootstrap lists the label pairs (two annotations of one item)
# once when there are at most this many (about 40 bytes each), and otherwise
# recomputes one sparse product per resample.
_PAIR_LIST_MAX = 1 << 23


class UndefinedAgreementWarning(RuntimeWarning):
    """A coefficient is undefined on this data (e.g. every label is the same class).

    The coefficient is then reported as NaN rather than raising: an audit of a young
    dataset should show "undefined", not fail.
    """


@dataclass(frozen=True)
class AgreementCoefficient:
    """A chance-corrected agreement coefficient with its bootstrap interval.

    Attributes
    ----------
    coefficient : str
        ``"krippendorff_alpha"`` or ``"fleiss_kappa"``.
    value : float
        The coefficient, ``(observed - expected) / (1 - expected)``, in [-1, 1]
        (alpha can go slightly below -1 on tiny samples); NaN when undefined.
    ci_low, ci_high : float
        Bootstrap interval over items at level ``confidence`` (see ``interval``); NaN
        when ``n_bootstrap == 0`` or the coefficient is undefined.
    observed_agreement, expected_agreement : float
        The two agreement rates behind ``value`` (for alpha: ``1 - D_o`` and
        ``1 - D_e``).
    n_items : int
        Items that enter the coefficient (alpha: items with at least 2 labels;
        Fleiss: items with at least 1 label). The bootstrap resamples these.
    n_pairable_items : int
        Items with at least 2 labels (the ones that contribute pairs).
    n_values : int
        Labels carried by the items that enter.
    confidence : float
    interval : str
        ``"percentile"`` or ``"basic"`` (see :func:`krippendorff_alpha`).
    n_bootstrap : int
        Resamples drawn.
    n_bootstrap_undefined : int
        Resamples on which the coefficient was undefined (left out of the interval).
    """

    coefficient: str
    value: float
    ci_low: float
    ci_high: float
    observed_agreement: float
    expected_agreement: float
    n_items: int
    n_pairable_items: int
    n_values: int
    confidence: float
    interval: str
    n_bootstrap: int
    n_bootstrap_undefined: int


@dataclass(frozen=True)
class PairwiseKappa:
    """Cohen's kappa for every annotator pair that shares enough items.

    Attributes
    ----------
    annotators : tuple
        Names; row/column ``a`` of the matrices is ``annotators[a]``.
    kappa : ndarray of float, shape (R, R)
        Symmetric; NaN on the diagonal, for pairs sharing fewer than ``min_overlap``
        items, and for pairs whose kappa is undefined (both used one same class only).
    overlap : ndarray of int64, shape (R, R)
        Items both annotators labeled (0 on the diagonal).
    n_pairs : int
        Pairs (a < b) with a defined kappa and at least ``min_overlap`` shared items:
        the pairs the means are taken over.
    n_pairs_undefined : int
        Pairs with enough overlap whose kappa is undefined.
    mean_weighted : float
        ``sum_ab n_ab kappa_ab / sum_ab n_ab``: the mean weighted by overlap ``n_ab``.
    mean_unweighted : float
        The plain mean of the pair kappas (every pair counts once).
    weighted_ci_low, weighted_ci_high, unweighted_ci_low, unweighted_ci_high : float
        Bootstrap intervals over items for the two means (see ``interval``).
    n_items : int
        Items labeled by at least one eligible pair (the items the bootstrap resamples).
    min_overlap : int
    confidence : float
    interval : str
        ``"percentile"`` or ``"basic"`` (see :func:`pairwise_cohen_kappa`).
    n_bootstrap : int
    n_bootstrap_undefined : int
        Resamples on which no pair had a defined kappa.
    """

    annotators: tuple
    kappa: np.ndarray
    overlap: np.ndarray
    n_pairs: int
    n_pairs_undefined: int
    mean_weighted: float
    mean_unweighted: float
    weighted_ci_low: float
    weighted_ci_high: float
    unweighted_ci_low: float
    unweighted_ci_high: float
    n_items: int
    min_overlap: int
    confidence: float
    interval: str
    n_bootstrap: int
    n_bootstrap_undefined: int

    def pairs(self):
        """The eligible pairs as a DataFrame: annotator_a, annotator_b, overlap, kappa."""
        import pandas as pd

        a, b = np.triu_indices(len(self.annotators), k=1)
        keep = self.overlap[a, b] >= self.min_overlap
        a, b = a[keep], b[keep]
        names = np.asarray(self.annotators, dtype=object)
        return pd.DataFrame({
            "annotator_a": names[a], "annotator_b": names[b],
            "overlap": self.overlap[a, b], "kappa": self.kappa[a, b],
        })


@dataclass(frozen=True)
class AgreementReport:
    """All agreement coefficients of one data set (see :func:`agreement`).

    ``pairwise`` is None when the input carried counts only (no annotator identities).
    """

    krippendorff_alpha: AgreementCoefficient
    fleiss_kappa: AgreementCoefficient
    pairwise: PairwiseKappa | None


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


# ---------------------------------------------------------------------------
# Krippendorff's alpha (nominal)


def _alpha_features(counts: np.ndarray) -> np.ndarray:
    """Per pairable row: ``[sum_c n_c(n_c-1)/(K-1), n_1, ..., n_L]``."""
    k = counts.sum(axis=1)
    out = np.empty((counts.shape[0], counts.shape[1] + 1))
    out[:, 0] = (np.einsum("ij,ij->i", counts, counts) - k) / (k - 1.0)
    out[:, 1:] = counts
    return out


def _alpha_sums(counts: np.ndarray) -> np.ndarray:
    """``_alpha_features(counts).sum(axis=0)`` without the (N, L+1) intermediate."""
    k = counts.sum(axis=1)
    o_diag = np.sum((np.einsum("ij,ij->i", counts, counts) - k) / (k - 1.0))
    return np.concatenate([[o_diag], counts.sum(axis=0)]).astype(np.float64)


def _alpha_from_sums(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Alpha, A_o and A_e from summed features (rows: resamples)."""
    sums = np.atleast_2d(sums)
    o_diag = sums[:, 0]
    n_c = sums[:, 1:]
    n = n_c.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        a_obs = o_diag / n
        a_exp = (n_c * (n_c - 1.0)).sum(axis=1) / (n * (n - 1.0))
        alpha = (a_obs - a_exp) / (1.0 - a_exp)
    # Undefined when no value pairs or a single class: D_e = 0. Decided on the integer
    # class totals, not on a floating-point 1 - A_e.
    undefined = (n < 2) | ((n_c > 0).sum(axis=1) < 2)
    alpha[undefined] = np.nan
    return alpha, a_obs, a_exp


def krippendorff_alpha(counts, *, n_bootstrap: int = 1000, confidence: float = 0.95,
                       interval: str = "percentile", rng=None) -> AgreementCoefficient:
    r"""Krippendorff's alpha for nominal data, from per-item label counts.

    With :math:`n_{uc}` the number of labels of class :math:`c` on unit (item)
    :math:`u`, :math:`m_u = \sum_c n_{uc}` and only *pairable* units
    (:math:`m_u \ge 2`) entering, the coincidence matrix of [K2011]_ has diagonal
    :math:`o_{cc} = \sum_u n_{uc}(n_{uc}-1)/(m_u-1)` and margins
    :math:`n_c = \sum_u n_{uc}`, :math:`n = \sum_c n_c`. Then

    .. math::

        \alpha = 1 - \frac{D_o}{D_e}
               = \frac{(n-1)\sum_c o_{cc} - \sum_c n_c(n_c-1)}
                      {n(n-1) - \sum_c n_c(n_c-1)},

    i.e. :math:`(A_o - A_e)/(1 - A_e)` with observed agreement
    :math:`A_o = \sum_c o_{cc}/n` and expected agreement
    :math:`A_e = \sum_c n_c(n_c-1)/(n(n-1))`. Items may carry different numbers of
    labels (missing data); items with fewer than 2 labels do not pair and are ignored.

    Parameters
    ----------
    counts : array-like of int, shape (N, L), LabelCounts, or Annotations
        ``counts[n, c]`` labels of class ``c`` on item ``n``.
    n_bootstrap : int, default 1000
        Item-bootstrap resamples for the interval; 0 skips it.
    confidence : float, default 0.95
        Level of the interval, in (0, 1).
    interval : {"percentile", "basic"}, default "percentile"
        Percentile interval of the resampled values, or the basic (reverse
        percentile) interval ``[2·value - q_hi, 2·value - q_lo]``, which corrects a
        bias of the statistic that shifts the resampled values off the estimate.
    rng : None, int or numpy.random.Generator
        Source of the resampling randomness.

    Returns
    -------
    AgreementCoefficient
        ``coefficient="krippendorff_alpha"``; ``value`` is NaN (with an
        :class:`UndefinedAgreementWarning`) when no item has 2 labels or every
        pairable label is the same class (:math:`D_e = 0`).

    Raises
    ------
    StatsInputError
        Counts that are not a non-empty (N, L) matrix of non-negative integers, or bad
        ``n_bootstrap`` / ``confidence`` / ``interval`` / ``rng``.

    Warns
    -----
    UndefinedAgreementWarning
        When alpha is undefined (returned as NaN).

    Notes
    -----
    The interval resamples pairable *items* with replacement (by a multinomial on the
    multiplicities of the distinct count vectors), which is the usual unit of sampling
    in annotation audits; Krippendorff's own bootstrap resamples pairs of values
    instead and gives somewhat different intervals. Memory of the bootstrap grows
    with the number of distinct count vectors, not with the number of items or
    resamples.

    References
    ----------
    K. Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", sections A
    (nominal data) and C (missing values).

    Examples
    --------
    The nominal example of [K2011]_ (4 observers, 12 units, missing values):

    >>> counts = [[3, 0, 0, 0, 0], [0, 3, 1, 0, 0], [0, 0, 4, 0, 0], [0, 0, 4, 0, 0],
    ...           [0, 4, 0, 0, 0], [1, 1, 1, 1, 0], [0, 0, 0, 4, 0], [3, 1, 0, 0, 0],
    ...           [0, 4, 0, 0, 0], [0, 0, 0, 0, 3], [2, 0, 0, 0, 0], [0, 0, 1, 0, 0]]
    >>> round(krippendorff_alpha(counts, n_bootstrap=0).value, 3)
    0.743
    """
    arr = _as_counts(counts, "counts")
    n_bootstrap, confidence = _check_bootstrap_args(n_bootstrap, confidence, interval)
    gen = as_rng(rng)
    k = arr.sum(axis=1)
    pairable = arr[k >= 2] if (k < 2).any() else arr
    n_pairable = int(pairable.shape[0])
    if n_pairable == 0:
        warnings.warn("Krippendorff's alpha is undefined: no item has 2 or more labels.",
                      UndefinedAgreementWarning, stacklevel=2)
        return _undefined("krippendorff_alpha", n_items=0, n_values=0, confidence=confidence,
                          interval=interval, n_bootstrap=n_bootstrap)
    # Point estimate straight from the per-item features (no histogram needed).
    alpha, a_obs, a_exp = _alpha_from_sums(_alpha_sums(pairable))
    value = float(alpha[0])
    lo = hi = np.nan
    n_undef = 0
    if np.isnan(value):
        warnings.warn("Krippendorff's alpha is undefined: every pairable label is the same class.",
                      UndefinedAgreementWarning, stacklevel=2)
        n_undef = n_bootstrap
    elif n_bootstrap:
        unique, mult = _histogram(pairable)
        boot = _bootstrap_sums(_alpha_features(unique), mult,
                               lambda s: _alpha_from_sums(s)[0], n_bootstrap, gen)
        lo, hi, n_undef = _interval(boot, value, confidence, interval)
    return AgreementCoefficient(
        coefficient="krippendorff_alpha", value=value, ci_low=lo, ci_high=hi,
        observed_agreement=float(a_obs[0]), expected_agreement=float(a_exp[0]),
        n_items=n_pairable, n_pairable_items=n_pairable, n_values=int(pairable.sum()),
        confidence=confidence, interval=interval, n_bootstrap=n_bootstrap,
        n_bootstrap_undefined=n_undef,
    )


# ---------------------------------------------------------------------------
# Fleiss' kappa (Gwet's generalisation to a varying number of raters)


def _fleiss_parts(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per rated row: 1{K>=2}, P_i 1{K>=2} and 1/K."""
    k = counts.sum(axis=1)
    pairable = k >= 2
    with np.errstate(divide="ignore", invalid="ignore"):
        p_i = (np.einsum("ij,ij->i", counts, counts) - k) / (k * (k - 1.0))
    return pairable.astype(np.float64), np.where(pairable, p_i, 0.0), 1.0 / k


def _fleiss_features(counts: np.ndarray) -> np.ndarray:
    """Per rated row: ``[1{K>=2}, P_i 1{K>=2}, n_1/K, ..., n_L/K]``."""
    pairable, p_i, inv_k = _fleiss_parts(counts)
    return np.column_stack([pairable, p_i, counts * inv_k[:, None]])


def _fleiss_sums(counts: np.ndarray) -> np.ndarray:
    """``_fleiss_features(counts).sum(axis=0)`` without the (N, L+2) intermediate."""
    pairable, p_i, inv_k = _fleiss_parts(counts)
    return np.concatenate([[pairable.sum(), p_i.sum()], inv_k @ counts])


def _fleiss_from_sums(sums: np.ndarray, n_rated: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kappa, P_a and P_e from summed features (rows: resamples)."""
    sums = np.atleast_2d(sums)
    n_pairable = sums[:, 0]
    pi = sums[:, 2:] / np.reshape(n_rated, (-1, 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        p_a = sums[:, 1] / n_pairable
        p_e = (pi * pi).sum(axis=1)
        kappa = (p_a - p_e) / (1.0 - p_e)
    undefined = (n_pairable < 1) | ((sums[:, 2:] > 0).sum(axis=1) < 2)
    kappa[undefined] = np.nan
    return kappa, p_a, p_e


def fleiss_kappa(counts, *, n_bootstrap: int = 1000, confidence: float = 0.95,
                 interval: str = "percentile", rng=None) -> AgreementCoefficient:
    r"""Fleiss' kappa from per-item label counts, for constant or varying raters per item.

    For item :math:`i` with :math:`K_i` labels, :math:`n_{ic}` of class :math:`c`:

    .. math::

        P_a = \frac{1}{N_2}\sum_{i: K_i \ge 2} \frac{\sum_c n_{ic}(n_{ic}-1)}{K_i(K_i-1)},
        \qquad
        \pi_c = \frac{1}{N_1}\sum_{i: K_i \ge 1} \frac{n_{ic}}{K_i},
        \qquad
        P_e = \sum_c \pi_c^2,
        \qquad
        \kappa = \frac{P_a - P_e}{1 - P_e},

    with :math:`N_2` the items with at least 2 labels and :math:`N_1` those with at
    least one. With the same number of labels on every item this is exactly Fleiss'
    kappa [F1971]_ (the tests check it against ``statsmodels.stats.inter_rater.fleiss_kappa``);
    with a varying number it is the standard generalisation of Gwet [G2014]_ (also
    ``fleiss.kappa.raw`` of Gwet's irrCAC package): agreement averaged over items
    with 2+ labels, class prevalence averaged over per-item proportions.

    Parameters
    ----------
    counts : array-like of int, shape (N, L), LabelCounts, or Annotations
        ``counts[i, c]`` labels of class ``c`` on item ``i``; rows without labels
        are ignored.
    n_bootstrap : int, default 1000
        Item-bootstrap resamples (items with at least one label); 0 skips it.
    confidence : float, default 0.95
        Level of the interval, in (0, 1).
    interval : {"percentile", "basic"}, default "percentile"
        See :func:`krippendorff_alpha`.
    rng : None, int or numpy.random.Generator
        Source of the resampling randomness.

    Returns
    -------
    AgreementCoefficient
        ``coefficient="fleiss_kappa"``; ``value`` is NaN (with an
        :class:`UndefinedAgreementWarning`) when no item has 2 labels or only one
        class is ever used (:math:`P_e = 1`).

    Raises
    ------
    StatsInputError
        Counts that are not a non-empty (N, L) matrix of non-negative integers, or bad
        ``n_bootstrap`` / ``confidence`` / ``interval`` / ``rng``.

    Warns
    -----
    UndefinedAgreementWarning
        When kappa is undefined (returned as NaN).

    References
    ----------
    J. L. Fleiss (1971), "Measuring nominal scale agreement among many raters";
    K. L. Gwet (2014), *Handbook of Inter-Rater Reliability*, 4th ed.

    Examples
    --------
    The 10 subjects × 14 raters × 5 categories example (Fleiss' kappa 0.210):

    >>> table = [[0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0],
    ...          [2, 2, 8, 1, 1], [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2],
    ...          [6, 5, 2, 1, 0], [0, 2, 2, 3, 7]]
    >>> round(fleiss_kappa(table, n_bootstrap=0).value, 3)
    0.21
    """
    arr = _as_counts(counts, "counts")
    n_bootstrap, confidence = _check_bootstrap_args(n_bootstrap, confidence, interval)
    gen = as_rng(rng)
    k = arr.sum(axis=1)
    if (k == 0).any():
        arr, k = arr[k >= 1], k[k >= 1]
    rated = arr
    n_rated = int(rated.shape[0])
    n_pairable = int((k >= 2).sum())
    if n_pairable == 0:
        warnings.warn("Fleiss' kappa is undefined: no item has 2 or more labels.",
                      UndefinedAgreementWarning, stacklevel=2)
        return _undefined("fleiss_kappa", n_items=n_rated, n_values=int(k.sum()),
                          confidence=confidence, interval=interval, n_bootstrap=n_bootstrap)
    kappa, p_a, p_e = _fleiss_from_sums(_fleiss_sums(rated), n_rated)
    value = float(kappa[0])
    lo = hi = np.nan
    n_undef = 0
    if np.isnan(value):
        warnings.warn("Fleiss' kappa is undefined: only one class is ever used (P_e = 1).",
                      UndefinedAgreementWarning, stacklevel=2)
        n_undef = n_bootstrap
    else:
        if n_bootstrap:
            unique, mult = _histogram(rated)
            boot = _bootstrap_sums(_fleiss_features(unique), mult,
                                   lambda s: _fleiss_from_sums(s, n_rated)[0], n_bootstrap, gen)
            lo, hi, n_undef = _interval(boot, value, confidence, interval)
    return AgreementCoefficient(
        coefficient="fleiss_kappa", value=value, ci_low=lo, ci_high=hi,
        observed_agreement=float(p_a[0]), expected_agreement=float(p_e[0]),
        n_items=n_rated, n_pairable_items=n_pairable, n_values=int(k.sum()),
        confidence=confidence, interval=interval, n_bootstrap=n_bootstrap,
        n_bootstrap_undefined=n_undef,
    )


# ---------------------------------------------------------------------------
# pairwise Cohen's kappa


def _long_form(data) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple, int]:
    """(item, annotator, label) codes, annotator names and the number of classes."""
    if isinstance(data, Annotations):
        return data.item, data.annotator, data.label, data.annotators, data.n_labels
    if isinstance(data, LabelCounts):
        raise StatsInputError(
            "`annotations` is a label-count matrix: pairwise Cohen's kappa needs who gave which "
            "label (an Annotations table or an item × rater matrix)."
        )
    names = None
    if hasattr(data, "to_numpy") and hasattr(data, "columns"):
        names = tuple(data.columns)
        data = data.to_numpy()
    arr = np.asarray(data)
    if arr.ndim != 2:
        raise StatsInputError(
            f"`annotations` must be an Annotations table or a 2-D item × rater matrix; got shape {arr.shape}."
        )
    if arr.size == 0:
        raise StatsInputError("`annotations` is empty.")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise StatsInputError(
            f"`annotations` matrix must hold integer class indices; got dtype {arr.dtype} "
            "(build an Annotations table with annotations_from_wide for label names)."
        )
    vals = arr.astype(np.float64)
    present = ~(np.isnan(vals) | (vals == -1))
    bad = present & ((vals < 0) | (vals != np.round(vals)) | ~np.isfinite(vals))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise StatsInputError(
            f"`annotations` row {r}, rater {c}: {arr[r, c]!r} is not a class index (use -1 or NaN for missing)."
        )
    if not present.any():
        raise StatsInputError("`annotations` has no labels: every entry is missing.")
    item, ann = np.nonzero(present)
    label = vals[item, ann].astype(np.int64)
    names = tuple(range(arr.shape[1])) if names is None else names
    return item.astype(np.int64), ann.astype(np.int64), label, names, int(label.max()) + 1


def _incidence(item: np.ndarray, ann: np.ndarray, label: np.ndarray, n_ann: int, n_labels: int,
               n_items: int, weights: np.ndarray | None = None):
    """Sparse (annotator × class) × item incidence: entry ``(a·L + c, n)`` is the weight
    of item ``n`` (1 without weights) where annotator ``a`` gave class ``c`` on it."""
    from scipy import sparse

    data = np.ones(item.size) if weights is None else weights[item]
    return sparse.csr_matrix((data, (ann * n_labels + label, item)), shape=(n_ann * n_labels, n_items))


def _pair_cells(left, right, n_ann: int, n_labels: int):
    """Confusion cells of every annotator pair a < b sharing an item.

    ``left @ right.T`` has entry ``(a·L + i, b·L + j)`` = (weighted) number of items on
    which ``a`` gave class ``i`` and ``b`` class ``j``: one sparse product, whose
    size is the annotator pairs that share items times the class pairs they use, not
    the pairs of annotations. Returns pair codes ``a·R + b``, ``i``, ``j`` and counts.
    """
    product = (left @ right.T).tocoo()
    a, i = np.divmod(product.row.astype(np.int64), n_labels)
    b, j = np.divmod(product.col.astype(np.int64), n_labels)
    keep = a < b
    return a[keep] * n_ann + b[keep], i[keep], j[keep], product.data[keep]


def _pairs_within_items(item: np.ndarray, annotator: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (first, second) of every pair of annotations on the same item, with
    ``annotator[first] < annotator[second]``, fully vectorised."""
    order = np.lexsort((annotator, item))
    it = item[order]
    starts = np.flatnonzero(np.r_[True, it[1:] != it[:-1]])
    sizes = np.diff(np.r_[starts, it.size])
    pos = np.arange(it.size) - np.repeat(starts, sizes)
    n_after = np.repeat(sizes, sizes) - pos - 1  # partners following each annotation
    first = np.repeat(np.arange(it.size), n_after)
    offset = np.arange(first.size) - np.repeat(np.cumsum(n_after) - n_after, n_after) + 1
    return order[first], order[first + offset]


def _pair_kappas(pair: np.ndarray, i: np.ndarray, j: np.ndarray, count: np.ndarray, n_pairs: int,
                 n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """Cohen's kappa and overlap of pairs ``0..n_pairs-1`` from their confusion cells
    ``(pair, i, j, count)`` (NaN where undefined or the pair shares no item)."""
    n = np.bincount(pair, weights=count, minlength=n_pairs)
    same = i == j
    agree = np.bincount(pair[same], weights=count[same], minlength=n_pairs)
    rows = np.bincount(pair * n_labels + i, weights=count, minlength=n_pairs * n_labels).reshape(n_pairs, n_labels)
    cols = np.bincount(pair * n_labels + j, weights=count, minlength=n_pairs * n_labels).reshape(n_pairs, n_labels)
    return _kappas(n, agree, rows, cols)


def _conf_kappas(conf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cohen's kappa and overlap of each (P, L, L) confusion matrix (NaN if undefined)."""
    return _kappas(conf.sum(axis=(1, 2)), np.trace(conf, axis1=1, axis2=2), conf.sum(axis=2), conf.sum(axis=1))


def _kappas(n: np.ndarray, agree: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kappa from each pair's shared items ``n``, agreements and the two class margins."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p_o = agree / n
        p_e = np.einsum("pc,pc->p", rows, cols) / (n * n)
        kappa = (p_o - p_e) / (1.0 - p_e)
    # p_e = 1 exactly when both raters used one and the same class on every shared item.
    undefined = (n == 0) | ((rows == n[:, None]) & (cols == n[:, None])).any(axis=1)
    kappa[undefined] = np.nan
    return kappa, n


def _items_of_pairs(item: np.ndarray, ann: np.ndarray, eligible: np.ndarray, ineligible: np.ndarray,
                    n_ann: int) -> np.ndarray:
    """Sorted codes of the items labeled by both annotators of some pair in ``eligible``
    (codes ``a·R + b``; ``ineligible``: the other pairs sharing items).

    An item enters when the annotator pairs on it, ``K(K-1)/2``, are not all
    ineligible, or when it holds an eligible pair: whichever of the two pair sets is
    smaller is counted per item, through a sparse product in blocks of items.
    """
    from scipy import sparse

    n_items = int(item.max()) + 1
    per_item = np.bincount(item, minlength=n_items)
    if ineligible.size == 0:
        return np.flatnonzero(per_item >= 2)
    if eligible.size == 0:
        return np.zeros(0, dtype=np.int64)
    use_eligible = eligible.size <= ineligible.size
    a, b = np.divmod(eligible if use_eligible else ineligible, n_ann)
    adjacency = sparse.csr_matrix((np.ones(a.size), (a, b)), shape=(n_ann, n_ann))
    adjacency = adjacency + adjacency.T
    labeled = sparse.csr_matrix((np.ones(item.size), (item, ann)), shape=(n_items, n_ann))
    counted = np.zeros(n_items)
    step = max(1, _BLOCK_CELLS // max(1, n_ann))
    for start in range(0, n_items, step):
        block = labeled[start:start + step]
        # Entry (n, b): partners of b (in the counted set) that labeled n, kept where b
        # labeled n; the row sum counts each such pair on item n twice.
        counted[start:start + step] = np.asarray((block @ adjacency).multiply(block).sum(axis=1)).ravel() / 2
    if use_eligible:
        return np.flatnonzero(counted > 0)
    return np.flatnonzero(per_item * (per_item - 1) / 2 - counted > 0)


def _pair_means(kappa: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Overlap-weighted and unweighted means over pairs (last axis), ignoring NaN."""
    ok = np.isfinite(kappa)
    w = np.where(ok, n, 0.0)
    k0 = np.where(ok, kappa, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        weighted = (w * k0).sum(axis=-1) / w.sum(axis=-1)
        unweighted = k0.sum(axis=-1) / ok.sum(axis=-1)
    return weighted, unweighted


def pairwise_cohen_kappa(annotations, *, min_overlap: int = 10, n_bootstrap: int = 200,
                         confidence: float = 0.95, interval: str = "percentile",
                         rng=None) -> PairwiseKappa:
    r"""Cohen's kappa for every pair of annotators sharing at least ``min_overlap`` items.

    For annotators :math:`a, b` and their :math:`n_{ab}` shared items, with
    :math:`p_o` the fraction of shared items given the same class and
    :math:`p_{a,c}`, :math:`p_{b,c}` each one's class proportions on those items
    [C1960]_:

    .. math::

        \kappa_{ab} = \frac{p_o - p_e}{1 - p_e}, \qquad p_e = \sum_c p_{a,c}\, p_{b,c}.

    This is ``sklearn.metrics.cohen_kappa_score`` (unweighted) on the shared items of
    each pair, computed for all pairs at once (see the notes).
    The summaries are the overlap-weighted mean
    :math:`\sum n_{ab}\kappa_{ab} / \sum n_{ab}` (``mean_weighted``: pairs that
    share more items count more) and the unweighted mean over pairs
    (``mean_unweighted``).

    Parameters
    ----------
    annotations : Annotations, or array-like / DataFrame of shape (N, R)
        Who gave which label: an :class:`~auditor.stats.counts.Annotations` table, or
        an item × rater matrix of class indices ``0..L-1`` with ``-1`` (or NaN) where a
        rater gave no label (a DataFrame's columns name the raters).
    min_overlap : int, default 10
        Pairs sharing fewer items get NaN and stay out of the means.
    n_bootstrap : int, default 200
        Item-bootstrap resamples for the intervals of the two means; 0 skips them.
        Each resample costs one pass over all label pairs, hence the lower default.
    confidence : float, default 0.95
    interval : {"percentile", "basic"}, default "percentile"
        See :func:`krippendorff_alpha` and the notes below.
    rng : None, int or numpy.random.Generator

    Returns
    -------
    PairwiseKappa
        Pair kappas and overlaps as (R, R) matrices, the two means and their
        bootstrap intervals. Pairs whose kappa is undefined (both annotators used
        one same class on all shared items) are NaN, counted in ``n_pairs_undefined``
        and left out of the means; a warning says so.

    Raises
    ------
    StatsInputError
        Label counts instead of who-labeled-what, a matrix entry that is not a class
        index or -1/NaN, no labels, bad ``min_overlap`` / ``n_bootstrap`` /
        ``confidence`` / ``interval`` / ``rng``.

    Warns
    -----
    UndefinedAgreementWarning
        When some eligible pairs, or all of them, have an undefined kappa.

    Notes
    -----
    The confusion counts of all pairs come from one sparse product of the
    (annotator × class) × item incidence matrix with itself, so memory grows with
    the annotator pairs that share items (times the class pairs they use), not with
    the pairs of annotations :math:`\sum_n K_n(K_n-1)/2`; time grows with the latter.
    A bootstrap resample re-weights the items: with at most ``_PAIR_LIST_MAX`` label
    pairs they are listed once and each resample is one ``bincount``, otherwise each
    resample is one weighted sparse product. The set of eligible pairs is fixed on the
    original data; a resample in which a pair shares no item leaves that pair out.

    Kappa on few items is biased, typically downwards (its chance term is estimated
    from the same few items). When many pairs share only a few items each (a sparse crowd
    design), the means inherit that bias, the resampled means sit lower still, and
    the percentile interval can lie entirely below the estimate; the ``"basic"``
    interval corrects such a shift to first order, and a larger ``min_overlap``
    reduces its cause.

    References
    ----------
    J. Cohen (1960), "A coefficient of agreement for nominal scales".

    Examples
    --------
    >>> m = [[0, 0], [0, 1], [1, 1], [1, 1], [0, 0], [1, 0]]
    >>> res = pairwise_cohen_kappa(m, min_overlap=2, n_bootstrap=0)
    >>> round(float(res.kappa[0, 1]), 4)
    0.3333
    """
    item, ann, label, names, n_labels = _long_form(annotations)
    if isinstance(min_overlap, bool) or not isinstance(min_overlap, int | np.integer) or min_overlap < 1:
        raise StatsInputError(f"`min_overlap` must be a positive integer; got {min_overlap!r}.")
    n_bootstrap, confidence = _check_bootstrap_args(n_bootstrap, confidence, interval)
    gen = as_rng(rng)
    n_ann = len(names)

    n_items_total = int(item.max()) + 1
    ones = _incidence(item, ann, label, n_ann, n_labels, n_items_total)
    pair, ci, cj, count = _pair_cells(ones, ones, n_ann, n_labels)
    codes, pair_idx = np.unique(pair, return_inverse=True)
    shared = np.bincount(pair_idx, weights=count, minlength=codes.size).astype(np.int64)
    overlap = np.zeros((n_ann, n_ann), dtype=np.int64)
    a_all, b_all = np.divmod(codes, n_ann)
    overlap[a_all, b_all] = shared
    overlap[b_all, a_all] = shared

    eligible = codes[shared >= min_overlap]  # codes a * R + b, a < b, sorted
    n_p = eligible.size
    keep = np.isin(pair, eligible)
    kappa_p, n_p_items = _pair_kappas(np.searchsorted(eligible, pair[keep]), ci[keep], cj[keep], count[keep],
                                      n_p, n_labels)
    weighted, unweighted = _pair_means(kappa_p, n_p_items)
    n_undefined = int(np.isnan(kappa_p).sum())
    if n_undefined:
        warnings.warn(
            f"Cohen's kappa is undefined for {n_undefined} of {n_p} annotator pairs "
            "(both used one same class on every shared item); they are left out of the means.",
            UndefinedAgreementWarning, stacklevel=2,
        )
    if n_p == n_undefined:
        warnings.warn(
            f"no annotator pair shares {min_overlap} items with a defined kappa: the means are undefined.",
            UndefinedAgreementWarning, stacklevel=2,
        )

    kappa = np.full((n_ann, n_ann), np.nan)
    a, b = np.divmod(eligible, n_ann)
    kappa[a, b] = kappa_p
    kappa[b, a] = kappa_p

    # The items the bootstrap resamples: those labeled by both annotators of at least
    # one eligible pair.
    in_pair = np.zeros(n_ann, dtype=bool)
    in_pair[a] = in_pair[b] = True
    entering = _items_of_pairs(item, ann, eligible, codes[shared < min_overlap], n_ann)
    w_lo = w_hi = u_lo = u_hi = np.nan
    n_boot_undef = n_bootstrap if n_p == n_undefined else 0
    if n_bootstrap and n_p > n_undefined:
        # Only the annotations of annotators in eligible pairs enter a resample.
        sel = in_pair[ann]
        s_item, s_ann, s_label = item[sel], ann[sel], label[sel]
        boot_w = np.empty(n_bootstrap)
        boot_u = np.empty(n_bootstrap)
        per_item = np.bincount(s_item, minlength=n_items_total)
        listed = int((per_item * (per_item - 1) // 2).sum()) <= _PAIR_LIST_MAX
        if listed:
            # Few enough label pairs to list once: each resample is then one bincount
            # (four with many pairs × classes) over the list, weighted by the items'
            # multiplicities.
            first, second = _pairs_within_items(s_item, s_ann)
            code = s_ann[first] * n_ann + s_ann[second]
            on = np.isin(code, eligible)
            first, second = first[on], second[on]
            l_pair = np.searchsorted(eligible, code[on])
            l_i, l_j, l_item = s_label[first], s_label[second], s_item[first]
            del first, second, code, on
            # One bincount per resample into the (pair, i, j) cells when they are few.
            l_cell = l_pair * n_labels * n_labels + l_i * n_labels + l_j if n_p * n_labels**2 <= _PAIR_LIST_MAX else None
        else:
            right = _incidence(s_item, s_ann, s_label, n_ann, n_labels, n_items_total)
        for r in range(n_bootstrap):
            draw = gen.integers(0, entering.size, size=entering.size)
            weights = np.bincount(entering[draw], minlength=n_items_total).astype(np.float64)
            if listed and l_cell is not None:
                conf = np.bincount(l_cell, weights=weights[l_item], minlength=n_p * n_labels * n_labels)
                kb, nb = _conf_kappas(conf.reshape(n_p, n_labels, n_labels))
            elif listed:
                kb, nb = _pair_kappas(l_pair, l_i, l_j, weights[l_item], n_p, n_labels)
            else:
                # Too many label pairs to hold: one sparse product per resample, in
                # memory bounded by the sharing annotator pairs.
                bp, bi, bj, bc = _pair_cells(_incidence(s_item, s_ann, s_label, n_ann, n_labels, n_items_total,
                                                        weights), right, n_ann, n_labels)
                bkeep = np.isin(bp, eligible)
                kb, nb = _pair_kappas(np.searchsorted(eligible, bp[bkeep]), bi[bkeep], bj[bkeep], bc[bkeep],
                                      n_p, n_labels)
            boot_w[r], boot_u[r] = _pair_means(kb, nb)
        w_lo, w_hi, n_boot_undef = _interval(boot_w, float(weighted), confidence, interval)
        u_lo, u_hi, _ = _interval(boot_u, float(unweighted), confidence, interval)
    return PairwiseKappa(
        annotators=tuple(names), kappa=kappa, overlap=overlap,
        n_pairs=int(n_p - n_undefined), n_pairs_undefined=n_undefined,
        mean_weighted=float(weighted), mean_unweighted=float(unweighted),
        weighted_ci_low=w_lo, weighted_ci_high=w_hi, unweighted_ci_low=u_lo, unweighted_ci_high=u_hi,
        n_items=int(entering.size), min_overlap=int(min_overlap), confidence=confidence,
        interval=interval, n_bootstrap=n_bootstrap, n_bootstrap_undefined=n_boot_undef,
    )


# ---------------------------------------------------------------------------
# all at once


def agreement(data, *, n_bootstrap: int = 1000, n_bootstrap_pairwise: int = 200,
              min_overlap: int = 10, confidence: float = 0.95, interval: str = "percentile",
              rng=None) -> AgreementReport:
    """Krippendorff's alpha, Fleiss' kappa and (with identities) pairwise Cohen's kappa.

    Parameters
    ----------
    data : Annotations, LabelCounts or array-like of int, shape (N, L)
        With an :class:`~auditor.stats.counts.Annotations` table all three are
        computed; with label counts only alpha and Fleiss' kappa (``pairwise`` is
        None). An item × rater matrix is not accepted here, as it cannot be told apart
        from a count matrix: convert it with
        :func:`~auditor.stats.counts.annotations_from_wide` first.
    n_bootstrap : int, default 1000
        Resamples for alpha and Fleiss' kappa.
    n_bootstrap_pairwise : int, default 200
        Resamples for the pairwise means.
    min_overlap : int, default 10
        See :func:`pairwise_cohen_kappa`.
    confidence : float, default 0.95
    interval : {"percentile", "basic"}, default "percentile"
        See :func:`krippendorff_alpha`.
    rng : None, int or numpy.random.Generator
        One generator drives the three bootstraps in turn.

    Returns
    -------
    AgreementReport
    """
    gen = as_rng(rng)
    counts = _as_counts(data, "data")
    common = {"confidence": confidence, "interval": interval, "rng": gen}
    alpha = krippendorff_alpha(counts, n_bootstrap=n_bootstrap, **common)
    kappa = fleiss_kappa(counts, n_bootstrap=n_bootstrap, **common)
    pairwise = None
    if isinstance(data, Annotations):
        pairwise = pairwise_cohen_kappa(data, min_overlap=min_overlap, n_bootstrap=n_bootstrap_pairwise,
                                        **common)
    return AgreementReport(alpha, kappa, pairwise)
