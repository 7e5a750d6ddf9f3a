"""BEST performance (:func:`best_performance`): every metric's expected oracle score."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from scipy import special

from auditor.stats._summary import table
from auditor.stats.best.f1 import _f1_macro
from auditor.stats.best.fit import DirichletMultinomialFit, _fit, _histogram, _warn
from auditor.stats.best.quadrature import _argmax_probabilities
from auditor.stats.validation import StatsInputError, as_count_matrix, as_rng

__all__ = ["BEST_METRICS", "BestPerformance", "best_performance"]

#: The metric names of the Scoracle API, in its order.
BEST_METRICS = ("accuracy", "balanced accuracy", "f1 (macro)", "cross entropy (soft labels)")


# ------------------------------------------------------------------- the scores


@dataclass(frozen=True)
class BestPerformance:
    """The BEST performance of a dataset.

    Attributes
    ----------
    scores : Mapping[str, float]
        Metric name → expected oracle score (cross-entropy in nats, lower is better).
    standard_errors : Mapping[str, float]
        Monte Carlo standard error of each score; 0 where it is exact.
    methods : Mapping[str, str]
        How each score was computed.
    alpha : ndarray, shape (K,)
        The fitted Dirichlet parameters (see :class:`DirichletMultinomialFit` for the
        limits ``inf`` and ``0``).
    fit : DirichletMultinomialFit
        The fit and its diagnostics, shared by all metrics.
    n_items : int
        Items scored (items with no annotation are excluded).
    n_distinct : int
        Distinct count vectors, the unit of computation.
    warnings : tuple of str
    """

    scores: Mapping[str, float]
    standard_errors: Mapping[str, float]
    methods: Mapping[str, str]
    alpha: np.ndarray
    fit: DirichletMultinomialFit
    n_items: int
    n_distinct: int
    warnings: tuple[str, ...] = field(default=())

    def summary(self, classes=None) -> str:
        """A plain-text summary: the data, the fitted prior (``alpha`` by class name,
        ``classes`` or the column numbers), and one row per metric with its Monte Carlo
        standard error and method. The warnings are in ``warnings``, not here."""
        names = [str(c) for c in classes] if classes is not None else [str(j) for j in range(len(self.alpha))]
        lines = [f"{self.n_items} items ({self.n_distinct} distinct count vectors), {len(names)} classes; "
                 f"prior: {self.fit.regime}",
                 "alpha: " + ", ".join(f"{c}={a:.6g}" for c, a in zip(names, self.alpha, strict=True))]
        rows = [[m, f"{self.scores[m]:.4f}", f"{self.standard_errors[m]:.1e}", f"  {self.methods[m]}"]
                for m in self.scores]
        lines += table(["metric", "score", "std. error", "  method"], rows, widths=[30, 10, 12, 0], align="lrrl")
        return "\n".join(lines)


def _check_metrics(metrics) -> tuple[str, ...]:
    if isinstance(metrics, str):
        metrics = (metrics,)
    try:
        names = tuple(metrics)
    except TypeError as exc:
        raise StatsInputError(f"`metrics` must be a list of metric names; got {metrics!r}.") from exc
    for k, name in enumerate(names):
        if name not in BEST_METRICS:
            raise StatsInputError(
                f"`metrics[{k}]` is {name!r}, not one of {list(BEST_METRICS)}.")
    return names


def best_performance(label_counts, /, *, metrics: Iterable[str] = BEST_METRICS, rng=None,
                     f1_standard_error: float = 1e-4,
                     max_f1_draws: int = 2_000_000) -> BestPerformance:
    """Expected score of the oracle that knows each item's label distribution.

    With the Dirichlet prior ``α̂`` of :func:`fit_dirichlet_multinomial`, item ``i``'s
    label distribution has posterior ``p_i ~ Dirichlet(β_i)``, ``β_i = α̂ + Y_i``,
    ``B_i = Σ_j β_ij``; the gold label is ``ĝ_i = argmax_j Y_ij`` (lowest index on
    ties) and ``q_i = Y_i / n_i``. Let ``P_ic = P(argmax_j p_ij = c)`` (exact: a
    beta CDF for two classes, a one-dimensional gamma integral for more). Then

    * accuracy: ``(1/N) Σ_i P_{i,ĝ_i}``;
    * balanced accuracy: ``(1/|G|) Σ_{c∈G} (1/m_c) Σ_{i: ĝ_i=c} P_ic``, ``G`` the gold
      classes and ``m_c`` their sizes (scikit-learn's recall average);
    * cross entropy (soft labels), in nats:
      ``(1/N) Σ_i Σ_j q_ij [ψ(B_i) − ψ(β_ij)]`` since ``E ln p_ij = ψ(β_ij) − ψ(B_i)``;
    * f1 (macro): the expectation of scikit-learn's macro F1 over the independent
      per-item predictions, ``Σ_c F1_c`` over gold ∪ predicted classes divided by
      their number; exact by Poisson-binomial convolution, with inclusion-exclusion
      over the never-gold classes the oracle may predict (up to six of them; beyond,
      a seeded Monte Carlo correction with its standard error).

    Everything is computed once per distinct count vector. In the fit's limits the
    posteriors are point masses: at ``π̂`` when ``α → ∞`` (ties in ``π̂`` split
    evenly, the limit of the posterior argmax) and at the item's label when
    ``α → 0`` (cross-entropy 0).

    Parameters
    ----------
    label_counts : array_like of int, shape (N, K)
        ``label_counts[i, j]`` annotators put item ``i`` in class ``j``. Rows summing
        to 0 are excluded (with a :class:`BestPerformanceWarning`).
    metrics : iterable of str, optional
        Names from :data:`BEST_METRICS` (the Scoracle names). Default: all four.
    rng : None, int or numpy.random.Generator, optional
        Seeds the Monte Carlo part of F1 (macro), the only random part.
    f1_standard_error : float, optional
        Target standard error of that Monte Carlo part (default 1e-4).
    max_f1_draws : int, optional
        Upper limit on its draws (also bounded by 5·10⁸ sampled item-class cells); a
        warning says when the target was not reached.

    Returns
    -------
    BestPerformance

    Raises
    ------
    StatsInputError
        Bad counts (see :func:`fit_dirichlet_multinomial`) or an unknown metric name.

    References
    ----------
    N. Lourie, R. Le Bras, Y. Choi, arXiv:2008.09094, §5 and the Scoracle demo; the
    reference implementation is ``oracle_performance`` in allenai/scruples.

    Examples
    --------
    The Scoracle documentation's example (it publishes 0.8878 and 0.8486, by Monte
    Carlo):

    >>> res = best_performance([[1, 3], [4, 0]], metrics=["accuracy", "f1 (macro)"])
    >>> round(res.scores["accuracy"], 4), round(res.scores["f1 (macro)"], 4)
    (0.887, 0.8499)
    >>> res.methods["accuracy"]
    'exact (beta function)'
    """
    counts = as_count_matrix(label_counts, name="label_counts")
    names = _check_metrics(metrics)
    try:
        target_se = float(f1_standard_error)
    except (TypeError, ValueError) as exc:
        raise StatsInputError("`f1_standard_error` must be a positive number.") from exc
    if not target_se > 0 or not math.isfinite(target_se):
        raise StatsInputError(f"`f1_standard_error` must be a positive number; got {f1_standard_error!r}.")
    if isinstance(max_f1_draws, bool) or not isinstance(max_f1_draws, int | np.integer) or max_f1_draws < 1000:
        raise StatsInputError(f"`max_f1_draws` must be an integer ≥ 1000; got {max_f1_draws!r}.")
    generator = as_rng(rng)

    messages: list[str] = []
    rows, weights, excluded = _histogram(counts)
    fit = _fit(rows, weights, excluded, counts.shape[1], messages)
    n_items = int(weights.sum())
    n_classes = rows.shape[1]
    gold = rows.argmax(axis=1)
    # The non-zero counts, item by item: the only terms of the cross-entropy.
    item, cls = np.nonzero(rows)
    q = rows[item, cls] / rows.sum(axis=1)[item]

    needs_argmax = any(name != "cross entropy (soft labels)" for name in names)
    if fit.regime == "finite":
        beta = fit.alpha[None, :] + rows
        probs = _argmax_probabilities(beta) if needs_argmax else np.full(rows.shape, np.nan)
        k_pos = int((fit.alpha > 0).sum())
        how = "exact (beta function)" if k_pos <= 2 else "exact (gamma quadrature)"
    elif fit.regime == "infinite":
        top = np.isclose(fit.prior_mean, fit.prior_mean.max(), rtol=0.0, atol=1e-15)
        probs = np.broadcast_to(top / top.sum(), rows.shape).copy()
        how = "exact (α → ∞ limit)"
    else:
        probs = np.zeros(rows.shape)
        probs[np.arange(len(gold)), gold] = 1.0
        how = "exact (α → 0 limit)"

    scores: dict[str, float] = {}
    ses: dict[str, float] = {}
    methods: dict[str, str] = {}
    p_gold = probs[np.arange(len(gold)), gold]
    for name in dict.fromkeys(names):
        se = 0.0
        method = how
        if name == "accuracy":
            value = float(weights @ p_gold / n_items)
        elif name == "balanced accuracy":
            m = np.bincount(gold, weights=weights, minlength=n_classes)
            recall = np.bincount(gold, weights=weights * p_gold, minlength=n_classes)
            value = float(np.mean(recall[m > 0] / m[m > 0]))
        elif name == "f1 (macro)":
            value, se, f1_method = _f1_macro(weights, gold, probs, generator, target_se,
                                             int(max_f1_draws))
            method = f1_method if fit.regime == "finite" or se > 0 else how
            if se > target_se:
                _warn(messages, f"f1 (macro): Monte Carlo standard error {se:.2g} is above "
                                f"the target {target_se:g} ({f1_method}).")
        else:
            if fit.regime == "finite":
                b_sum = fit.alpha.sum() + rows.sum(axis=1)
                terms = q * (special.digamma(b_sum[item]) - special.digamma(fit.alpha[cls] + rows[item, cls]))
                method = "exact (digamma)"
            elif fit.regime == "infinite":
                terms = -q * np.log(fit.prior_mean[cls])
            else:
                terms = np.zeros(len(q))
            per_item = np.bincount(item, weights=terms, minlength=len(rows))
            value = float(weights @ per_item / n_items)
        scores[name], ses[name], methods[name] = value, float(se), method
    return BestPerformance(
        scores=MappingProxyType(scores), standard_errors=MappingProxyType(ses),
        methods=MappingProxyType(methods), alpha=fit.alpha, fit=fit, n_items=n_items,
        n_distinct=int(rows.shape[0]), warnings=tuple(messages))
