"""Krippendorff's alpha (nominal) and Fleiss' kappa, from the per-item label counts,
with item-bootstrap intervals by re-weighting the histogram of distinct count vectors."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from auditor.stats.agreement.bootstrap import (
    _bootstrap_sums,
    _check_bootstrap_args,
    _interval,
    _undefined,
)
from auditor.stats.agreement.results import AgreementCoefficient, UndefinedAgreementWarning
from auditor.stats.counts import as_counts, row_histogram
from auditor.stats.validation import as_rng

__all__ = ["fleiss_kappa", "krippendorff_alpha"]


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
    arr = as_counts(counts, name="counts")
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
    return _coefficient("krippendorff_alpha", pairable, _alpha_sums, _alpha_features, _alpha_from_sums,
                        undefined="Krippendorff's alpha is undefined: every pairable label is the same class.",
                        n_items=n_pairable, n_pairable=n_pairable, n_values=int(pairable.sum()),
                        n_bootstrap=n_bootstrap, confidence=confidence, interval=interval, gen=gen)


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
    arr = as_counts(counts, name="counts")
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
    return _coefficient("fleiss_kappa", rated, _fleiss_sums, _fleiss_features,
                        lambda sums: _fleiss_from_sums(sums, n_rated),
                        undefined="Fleiss' kappa is undefined: only one class is ever used (P_e = 1).",
                        n_items=n_rated, n_pairable=n_pairable, n_values=int(k.sum()),
                        n_bootstrap=n_bootstrap, confidence=confidence, interval=interval, gen=gen)


def _coefficient(name: str, rows: np.ndarray, sums: Callable, features: Callable, from_sums: Callable, *,
                 undefined: str, n_items: int, n_pairable: int, n_values: int, n_bootstrap: int,
                 confidence: float, interval: str, gen: np.random.Generator) -> AgreementCoefficient:
    """A coefficient that is a function of summed per-item features (``from_sums`` gives the
    coefficient, observed and expected agreement): the point estimate straight from the
    items' features, the interval by re-weighting the histogram of distinct count vectors."""
    estimate, observed, expected = from_sums(sums(rows))
    value = float(estimate[0])
    lo = hi = np.nan
    n_undef = 0
    if np.isnan(value):
        warnings.warn(undefined, UndefinedAgreementWarning, stacklevel=3)
        n_undef = n_bootstrap
    elif n_bootstrap:
        unique, mult, _ = row_histogram(rows)
        boot = _bootstrap_sums(features(unique), mult, lambda s: from_sums(s)[0], n_bootstrap, gen)
        lo, hi, n_undef = _interval(boot, value, confidence, interval)
    return AgreementCoefficient(
        coefficient=name, value=value, ci_low=lo, ci_high=hi,
        observed_agreement=float(observed[0]), expected_agreement=float(expected[0]),
        n_items=n_items, n_pairable_items=n_pairable, n_values=n_values,
        confidence=confidence, interval=interval, n_bootstrap=n_bootstrap,
        n_bootstrap_undefined=n_undef,
    )
