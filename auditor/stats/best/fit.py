"""The Dirichlet-multinomial prior of BEST, fitted by maximum likelihood (empirical Bayes)
on the histogram of distinct count vectors, with the documented limits for degenerate data."""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from auditor.stats.counts import row_histogram
from auditor.stats.validation import StatsInputError, as_count_matrix

__all__ = ["BestPerformanceWarning", "DirichletMultinomialFit", "fit_dirichlet_multinomial"]
# Concentration beyond which a fitted prior is indistinguishable from its α → ∞ limit.
_HUGE_CONCENTRATION = 1e10
# Above this many annotations on one item, the log-likelihood is summed with log-gamma
# differences over distinct values instead of the exact rising-factorial form.
_RISING_FORM_MAX_COUNT = 100_000


class BestPerformanceWarning(UserWarning):
    """Degenerate data: the BEST fit used a documented limit or dropped items."""


# --------------------------------------------------------------------------- fit


@dataclass(frozen=True)
class DirichletMultinomialFit:
    """Maximum-likelihood Dirichlet prior of a label-count matrix.

    Attributes
    ----------
    alpha : ndarray, shape (K,)
        The fitted ``α̂``. ``inf`` for every used class in the ``"infinite"`` regime,
        ``0`` for every class in the ``"zero"`` regime and for unused classes.
    prior_mean : ndarray, shape (K,)
        ``α̂ / Σα̂``, or its limit: the pooled label proportions for ``"infinite"``,
        the proportions of the items' (unanimous) labels for ``"zero"``.
    concentration : float
        ``A = Σ_j α̂_j`` (``inf`` or ``0`` in the limits).
    regime : {"finite", "infinite", "zero"}
        ``"finite"``: an interior maximum. ``"infinite"``: the data are no more
        dispersed than a multinomial, the likelihood grows as ``A → ∞`` and the
        posterior is the point mass at ``prior_mean``. ``"zero"``: every item is
        unanimous, the likelihood grows as ``A → 0`` and each posterior is the point
        mass on its item's label.
    log_likelihood : float
        The objective at ``α̂`` (or its limit), without the multinomial coefficients.
    multinomial_log_likelihood : float
        ``Σ_ij Y_ij ln π̂_j``, the ``A → ∞`` limit of the same objective.
    dispersion : float
        ``Σ_i [Σ_j Y_ij(Y_ij − 1)/π̂_j − n_i(n_i − 1)]``: the ``1/A`` coefficient of
        the log-likelihood along ``α = A π̂`` as ``A → ∞`` (times 2); negative for
        under-dispersed data.
    converged, n_iterations, gradient_norm
        Optimiser diagnostics (gradient with respect to ``ln α``).
    n_items : int
        Items the fit used (those with at least one annotation).
    excluded_items : tuple of int
        Row indices of items with no annotation (left out of the fit and the scores).
    unused_classes : tuple of int
        Classes no annotator used (``α̂_j = 0``).
    warnings : tuple of str
        What was degenerate about the data, and the answer given.
    """

    alpha: np.ndarray
    prior_mean: np.ndarray
    concentration: float
    regime: str
    log_likelihood: float
    multinomial_log_likelihood: float
    dispersion: float
    converged: bool
    n_iterations: int
    gradient_norm: float
    n_items: int
    excluded_items: tuple[int, ...]
    unused_classes: tuple[int, ...]
    warnings: tuple[str, ...] = ()


class _Objective:
    """Negative Dirichlet-multinomial log-likelihood of ``α`` (no multinomial coefficient).

    ``lnΓ(y + a) − lnΓ(a) = Σ_{t<y} ln(a + t)``, so with ``c_j(t) = #{i: Y_ij > t}``
    and ``d(t) = #{i: n_i > t}`` the objective is
    ``Σ_t d(t) ln(A + t) − Σ_j Σ_t c_j(t) ln(α_j + t)``: exact (no cancellation of
    large log-gamma values when ``α`` is large) and as cheap as the largest count.
    """

    def __init__(self, rows: np.ndarray, weights: np.ndarray):
        n = rows.sum(axis=1)
        self.rising = int(n.max()) <= _RISING_FORM_MAX_COUNT
        if self.rising:
            t_max = int(n.max())
            self.t = np.arange(t_max, dtype=float)

            def exceed(values):  # [#{i : value_i > t} for t < t_max], item-weighted
                hist = np.bincount(values, weights=weights, minlength=t_max + 1)
                return hist[::-1].cumsum()[::-1][1:]

            self.c = np.stack([exceed(col) for col in rows.T])
            self.d = exceed(n)
        else:
            self.cols = [(col[col > 0], weights[col > 0]) for col in rows.T]
            self.ns = (n, weights)

    def value(self, alpha: np.ndarray) -> float:
        a_sum = alpha.sum()
        if self.rising:
            return float(self.d @ np.log(a_sum + self.t)
                         - np.sum(self.c * np.log(alpha[:, None] + self.t[None, :])))
        nv, nw = self.ns
        out = nw @ (special.gammaln(a_sum + nv) - special.gammaln(a_sum))
        for a, (v, w) in zip(alpha, self.cols, strict=True):
            out -= w @ (special.gammaln(a + v) - special.gammaln(a))
        return float(out)

    def derivatives(self, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gradient and Hessian with respect to ``α``."""
        a_sum = alpha.sum()
        if self.rising:
            inv = 1.0 / (alpha[:, None] + self.t[None, :])
            inv_a = 1.0 / (a_sum + self.t)
            grad = self.d @ inv_a - np.sum(self.c * inv, axis=1)
            hess = np.diag(np.sum(self.c * inv**2, axis=1)) - self.d @ inv_a**2
            return grad, hess
        nv, nw = self.ns
        g0 = nw @ (special.digamma(a_sum + nv) - special.digamma(a_sum))
        h0 = nw @ (special.polygamma(1, a_sum + nv) - special.polygamma(1, a_sum))
        grad = np.full(alpha.shape, g0)
        diag = np.empty_like(alpha)
        for j, (a, (v, w)) in enumerate(zip(alpha, self.cols, strict=True)):
            grad[j] -= w @ (special.digamma(a + v) - special.digamma(a))
            diag[j] = -(w @ (special.polygamma(1, a + v) - special.polygamma(1, a)))
        return grad, np.diag(diag) + h0

    # In θ = ln α the problem is unconstrained; the chain rule gives these. (The
    # optimiser asks for the gradient and the Hessian at the same points: the
    # derivatives of the last point are kept.)
    def theta_value(self, theta):
        return self.value(np.exp(theta))

    def _theta_derivatives(self, theta):
        key = np.asarray(theta, dtype=float).tobytes()
        if getattr(self, "_last_key", None) != key:
            alpha = np.exp(theta)
            self._last_key, self._last = key, (alpha, *self.derivatives(alpha))
        return self._last

    def theta_grad(self, theta):
        alpha, grad, _ = self._theta_derivatives(theta)
        return alpha * grad

    def theta_hess(self, theta):
        alpha, grad, hess = self._theta_derivatives(theta)
        return alpha[:, None] * hess * alpha[None, :] + np.diag(alpha * grad)


def _warn(messages: list[str], text: str) -> None:
    messages.append(text)
    warnings.warn(text, BestPerformanceWarning, stacklevel=3)


def fit_dirichlet_multinomial(label_counts, /) -> DirichletMultinomialFit:
    """Fit the Dirichlet prior of the label-count vectors by maximum likelihood.

    Maximises the Dirichlet-multinomial log-likelihood without its multinomial
    coefficients, as the reference implementation does:

    .. math::

        \\ell(\\alpha) = \\sum_i \\Big[\\ln\\Gamma(A) - \\ln\\Gamma(A + n_i)
            + \\sum_j \\big(\\ln\\Gamma(Y_{ij} + \\alpha_j) - \\ln\\Gamma(\\alpha_j)\\big)\\Big],
        \\qquad A = \\sum_j \\alpha_j,

    over ``θ = ln α`` with its analytic gradient and Hessian (trust-region Newton),
    started from the best point of the profile ``α = s π̂`` (``π̂`` the pooled label
    proportions).

    Degenerate data get the limit the likelihood tends to, and a
    :class:`BestPerformanceWarning`:

    * items with no annotation carry no likelihood: they are excluded;
    * a class nobody used has ``α̂_j → 0``: it is set to 0 and left out;
    * every item unanimous (including one annotation per item, where the dispersion
      is not identified): the supremum is at ``A → 0`` (regime ``"zero"``);
    * data no more dispersed than a multinomial, e.g. a single item with split
      labels: the supremum is at ``A → ∞`` along ``π̂`` (regime ``"infinite"``),
      detected by comparing the optimum with the limit ``Σ_ij Y_ij ln π̂_j``.

    Parameters
    ----------
    label_counts : array_like of int, shape (N, K)
        ``label_counts[i, j]`` annotators put item ``i`` in class ``j``.

    Returns
    -------
    DirichletMultinomialFit

    Raises
    ------
    StatsInputError
        Counts that are not a non-empty rectangular matrix of non-negative
        integers, or that hold no annotation at all.

    References
    ----------
    N. Lourie, R. Le Bras, Y. Choi, "Scruples: A Corpus of Community Ethical
    Judgments on 32,000 Real-Life Anecdotes", AAAI 2021, arXiv:2008.09094, §5 (BEST).
    T. Minka, "Estimating a Dirichlet distribution", 2000 (Pólya likelihood).

    Examples
    --------
    >>> fit = fit_dirichlet_multinomial([[1, 3], [4, 0]])
    >>> fit.regime, fit.alpha.round(4).tolist()
    ('finite', [0.7675, 0.3771])
    """
    counts = as_count_matrix(label_counts, name="label_counts")
    return _fit(*_histogram(counts), counts.shape[1], [])


def _histogram(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Distinct non-empty count vectors, their multiplicities, and the empty rows."""
    # Column by column: numpy reduces a long, narrow matrix along its rows slowly.
    columns = [counts[:, j] for j in range(counts.shape[1])]
    n = functools.reduce(np.add, columns)
    excluded = tuple(np.flatnonzero(n == 0).tolist())
    if len(excluded) == counts.shape[0]:
        raise StatsInputError("`label_counts` holds no annotation: every row sums to 0.")
    y = counts[n > 0] if excluded else counts
    rows, weights, _ = row_histogram(y)
    return rows.astype(np.int64), weights.astype(float), excluded


def _fit(rows: np.ndarray, weights: np.ndarray, excluded: tuple[int, ...], n_classes: int,
         messages: list[str]) -> DirichletMultinomialFit:
    if excluded:
        _warn(messages, f"{len(excluded)} item(s) with no annotation excluded "
                        f"(first: row {excluded[0]}).")
    n = rows.sum(axis=1)
    n_items = float(weights.sum())
    totals = weights @ rows
    used = totals > 0
    unused = tuple(int(j) for j in np.flatnonzero(~used))
    if unused:
        _warn(messages, f"class(es) {list(unused)} never used: their α is 0 and the oracle "
                        "never predicts them.")
    if n_items == 1:
        _warn(messages, "a single item: the prior is fitted to that one item.")
    yu = rows if used.all() else rows[:, used]
    pi_hat = np.zeros(n_classes)
    pi_hat[used] = totals[used] / totals.sum()
    log_pi = np.log(pi_hat[used])
    mult_ll = float(totals[used] @ log_pi)
    dispersion = float(weights @ ((yu * (yu - 1.0)) @ (1.0 / pi_hat[used]) - n * (n - 1.0)))
    common = dict(multinomial_log_likelihood=mult_ll, dispersion=dispersion,
                  n_items=int(n_items), excluded_items=excluded, unused_classes=unused)

    if np.all((yu > 0).sum(axis=1) == 1):
        # P(all n_i labels in class j) = E[p_j^n_i] < E[p_j] = π_j for A > 0 when
        # n_i ≥ 2, and = π_j when n_i = 1: the supremum is the A → 0 limit, where
        # the prior puts mass π_j on vertex j and π is the items' label frequencies.
        gold = rows.argmax(axis=1)
        mean = np.bincount(gold, weights=weights, minlength=n_classes) / n_items
        if np.all(n == 1):
            detail = ("every item has a single annotation, so annotator disagreement is not "
                      "identified; the optimistic limit α → 0 (a perfect oracle) is used.")
        else:
            detail = "every item is unanimous: the likelihood is maximal as α → 0."
        _warn(messages, detail + " Each posterior is the point mass on its item's label.")
        ll = float(weights @ np.log(mean[gold]))
        return DirichletMultinomialFit(
            alpha=np.zeros(n_classes), prior_mean=mean, concentration=0.0, regime="zero",
            log_likelihood=ll, converged=True, n_iterations=0, gradient_norm=0.0,
            warnings=tuple(messages), **common)

    objective = _Objective(yu, weights)
    # Start from the best point of the profile α = s·π̂, on a log scale.
    profile = optimize.minimize_scalar(
        lambda log_s: objective.theta_value(log_s + log_pi), bounds=(-25.0, 40.0),
        method="bounded", options={"xatol": 1e-6})
    theta0 = profile.x + log_pi
    scale = max(1.0, float(weights @ n))
    with np.errstate(over="ignore"):
        res = optimize.minimize(
            objective.theta_value, theta0, jac=objective.theta_grad,
            hess=objective.theta_hess, method="trust-exact",
            options={"gtol": 1e-10 * scale, "maxiter": 1000})
    alpha_used = np.exp(res.x)
    a_sum = float(alpha_used.sum())
    ll = -float(res.fun)
    grad_norm = float(np.max(np.abs(res.jac)))
    if not np.isfinite(a_sum) or a_sum > _HUGE_CONCENTRATION or ll <= mult_ll + 1e-12 * abs(mult_ll):
        _warn(messages, "the labels are no more dispersed than a multinomial (dispersion "
                        f"statistic {dispersion:.4g}): the likelihood is maximal as α → ∞, so "
                        "every posterior is the point mass at the pooled label proportions.")
        alpha = np.where(used, np.inf, 0.0)
        return DirichletMultinomialFit(
            alpha=alpha, prior_mean=pi_hat, concentration=math.inf, regime="infinite",
            log_likelihood=mult_ll, converged=True, n_iterations=int(res.nit),
            gradient_norm=grad_norm, warnings=tuple(messages), **common)
    converged = bool(res.success) or grad_norm <= 1e-7 * scale
    if not converged:
        _warn(messages, f"the α fit did not converge ({res.message}); gradient {grad_norm:.3g}.")
    alpha = np.zeros(n_classes)
    alpha[used] = alpha_used
    return DirichletMultinomialFit(
        alpha=alpha, prior_mean=alpha / a_sum, concentration=a_sum, regime="finite",
        log_likelihood=ll, converged=converged, n_iterations=int(res.nit),
        gradient_norm=grad_norm, warnings=tuple(messages), **common)
