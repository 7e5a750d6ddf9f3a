"""All agreement coefficients of one data set at once (:func:`agreement`)."""

from __future__ import annotations

from auditor.stats.agreement.coefficients import fleiss_kappa, krippendorff_alpha
from auditor.stats.agreement.pairwise import pairwise_cohen_kappa
from auditor.stats.agreement.results import AgreementReport
from auditor.stats.counts import Annotations, as_counts
from auditor.stats.validation import (
    as_rng,
)

__all__ = ["agreement_report"]


# ---------------------------------------------------------------------------
# all at once


def agreement_report(data, *, n_bootstrap: int = 1000, n_bootstrap_pairwise: int = 200,
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
    counts = as_counts(data, name="data")
    common = {"confidence": confidence, "interval": interval, "rng": gen}
    alpha = krippendorff_alpha(counts, n_bootstrap=n_bootstrap, **common)
    kappa = fleiss_kappa(counts, n_bootstrap=n_bootstrap, **common)
    pairwise = None
    if isinstance(data, Annotations):
        pairwise = pairwise_cohen_kappa(data, min_overlap=min_overlap, n_bootstrap=n_bootstrap_pairwise,
                                        **common)
    return AgreementReport(alpha, kappa, pairwise)
