"""BEST performance: the score an oracle could expect on a dataset's own labels.

Lourie, Le Bras & Choi ("Scruples", arXiv 2008.09094) define the *Bayesian Estimated
Score Terminus* of a dataset from its label counts alone. Item ``i`` has label counts
``Y_i`` over ``K`` classes, ``n_i = Σ_j Y_ij`` annotations, and

.. math::

    Y_i \\sim \\mathrm{Multinomial}(p_i, n_i), \\qquad p_i \\sim \\mathrm{Dirichlet}(\\alpha).

``α`` is fitted by maximum likelihood of the Dirichlet-multinomial (empirical Bayes);
the posterior of item ``i`` is ``Dirichlet(α̂ + Y_i)``. The gold label is the
plurality ``ĝ_i = argmax_j Y_ij`` (ties to the lowest index), the oracle predicts
``argmax_j p_ij`` (or ``p_i`` itself for cross-entropy), and BEST is the posterior
expectation of ``metric(ĝ, oracle)``.

The reference code (allenai/scruples, ``src/scruples/utils.py``) estimates every
metric by unseeded Monte Carlo. Here accuracy, balanced accuracy and cross-entropy
are computed exactly, F1 (macro) exactly or with a seeded Monte Carlo correction,
all once per distinct count vector.
"""

from auditor.stats.best.fit import (
    BestPerformanceWarning,
    DirichletMultinomialFit,
    fit_dirichlet_multinomial,
)
from auditor.stats.best.scores import BEST_METRICS, BestPerformance, best_performance

__all__ = [
    "BEST_METRICS",
    "BestPerformance",
    "BestPerformanceWarning",
    "DirichletMultinomialFit",
    "best_performance",
    "fit_dirichlet_multinomial",
]
