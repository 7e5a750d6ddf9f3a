"""The results of the agreement statistics (and their warning)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["AgreementCoefficient", "AgreementReport", "PairwiseKappa", "UndefinedAgreementWarning"]


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
