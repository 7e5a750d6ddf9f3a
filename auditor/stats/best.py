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

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from scipy import fft as sp_fft
from scipy import integrate, optimize, special

from auditor.stats._validation import StatsInputError, as_count_matrix, as_rng

__all__ = [
    "BEST_METRICS",
    "BestPerformance",
    "BestPerformanceWarning",
    "DirichletMultinomialFit",
    "best_performance",
    "fit_dirichlet_multinomial",
]

#: The metric names of the Scoracle API, in its order.
BEST_METRICS = ("accuracy", "balanced accuracy", "f1 (macro)", "cross entropy (soft labels)")

# Tail mass dropped on each side of a gamma or binomial distribution: far below the
# precision any score is reported with, and above double-precision underflow.
_TAIL = 1e-16
# Concentration beyond which a fitted prior is indistinguishable from its α → ∞ limit.
_HUGE_CONCENTRATION = 1e10
# Gauss-Legendre nodes of the fine rule (the check rule has two thirds as many), and the
# largest disagreement between the two rules accepted without adaptive quadrature.
_NODES = 96
# F1 (macro) is exact by inclusion-exclusion up to this many never-gold classes that
# the oracle may predict (2^n convolutions); beyond, a Monte Carlo correction.
_MAX_EXACT_NEVER_GOLD = 6
# At most this many (draw, distinct count vector, class) cells for that correction.
_MC_CELL_BUDGET = 5e8
_QUAD_TOL = 1e-10
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

    # In θ = ln α the problem is unconstrained; the chain rule gives these.
    def theta_value(self, theta):
        return self.value(np.exp(theta))

    def theta_grad(self, theta):
        alpha = np.exp(theta)
        return alpha * self.derivatives(alpha)[0]

    def theta_hess(self, theta):
        alpha = np.exp(theta)
        grad, hess = self.derivatives(alpha)
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
    radix = np.array([int(col.max()) + 1 for col in columns], dtype=np.int64)
    # Rows as mixed-radix integers: sorting one int64 column is far cheaper than
    # np.unique(axis=0); a bincount is cheaper still when the code space is small.
    if np.sum(np.log2(radix.astype(float))) < 62:
        place = np.concatenate([np.cumprod(radix[::-1])[::-1][1:], [1]]).astype(np.int64)
        codes = y[:, 0] * place[0]  # integer matmul has no BLAS
        for j in range(1, y.shape[1]):
            codes += y[:, j] * place[j]
        if int(np.prod(radix.astype(float))) <= max(4 * len(y), 1 << 16):
            hist = np.bincount(codes)
            uniq = np.flatnonzero(hist)
            weights = hist[uniq]
        else:
            uniq, weights = np.unique(codes, return_counts=True)
        rows = (uniq[:, None] // place[None, :]) % radix[None, :]
    else:
        rows, weights = np.unique(y, axis=0, return_counts=True)
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
    yu = rows[:, used]
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


# ------------------------------------------------------- posterior argmax probabilities


def _argmax_probabilities(beta: np.ndarray) -> np.ndarray:
    """``P[r, c] = P(argmax_j p_j = c)`` for ``p ~ Dirichlet(beta[r])``.

    Classes with ``beta = 0`` have ``p_j = 0`` almost surely and are never the argmax.
    Two positive classes: ``P(p_c > 1/2) = I_{1/2}(β_o, β_c)`` (regularised incomplete
    beta). More: with ``p_j = G_j / ΣG``, ``G_j ~ Gamma(β_j)`` independent,

    .. math:: P_c = \\int_0^\\infty f_{β_c}(x) \\prod_{j \\ne c} F_{β_j}(x)\\,dx,

    integrated in ``t = ln x`` (smooth for every shape) over
    ``[F_{β_max}^{-1}(ε), \\bar F_{β_max}^{-1}(ε)]``, outside which each integrand
    carries less than ``2ε`` of mass: 96-node Gauss–Legendre, checked against a
    64-node rule; rows where the two differ by more than ``_QUAD_TOL`` are redone
    with 128 nodes (checked against the 96), and pairs still differing by adaptive
    Gauss–Kronrod on their own range. Only the classes that can be the argmax (their
    upper tail beyond the window's start above ε) enter the quadrature; the others
    get probability 0 (their true value is below 2ε). Rows are normalised to sum to 1.
    """
    n_classes = beta.shape[1]
    pos = beta > 0
    k_pos = pos.sum(axis=1)
    out = np.zeros_like(beta, dtype=float)
    one = k_pos == 1
    out[one] = pos[one]
    two = np.flatnonzero(k_pos == 2)
    if two.size:
        b = beta[two][pos[two]].reshape(-1, 2)
        p_first = special.betainc(b[:, 1], b[:, 0], 0.5)
        cols = np.flatnonzero(pos[two].ravel()).reshape(-1, 2) % n_classes
        out[two, cols[:, 0]] = p_first
        out[two, cols[:, 1]] = 1.0 - p_first
    many = np.flatnonzero(k_pos > 2)
    chunk = max(1, 1_000_000 // (n_classes * _NODES))  # bounds the (rows, K, nodes) arrays
    for first in range(0, many.size, chunk):
        sel = many[first:first + chunk]
        # Only the classes that can win enter the quadrature: a class whose gamma
        # variable exceeds the start of the row's window with probability below
        # _TAIL is the argmax with probability below 2·_TAIL, and its CDF is within
        # _TAIL of 1 on the window. With many labels per item that is most classes.
        b_sel = beta[sel]
        x_lo = special.gammaincinv(b_sel.max(axis=1), _TAIL)
        live = (b_sel > 0) & (special.gammaincc(np.where(b_sel > 0, b_sel, 1.0), x_lo[:, None]) > _TAIL)
        width = max(int(live.sum(axis=1).max()), 1)
        order = np.argsort(-np.where(live, b_sel, -1.0), axis=1, kind="stable")[:, :width]
        b_live = np.take_along_axis(np.where(live, b_sel, 0.0), order, axis=1)
        fine_live = _shared_window_rule(b_live, *_legendre(_NODES))
        coarse_live = _shared_window_rule(b_live, *_legendre(2 * _NODES // 3))
        # Rows on which the two rules disagree (a narrow peak in a wide window: many
        # tied classes with hundreds of labels each) get a finer rule first.
        redo = np.flatnonzero(np.any(np.abs(fine_live - coarse_live) > _QUAD_TOL, axis=1))
        if redo.size:
            coarse_live[redo] = fine_live[redo]
            fine_live[redo] = _shared_window_rule(b_live[redo], *_legendre(4 * _NODES // 3))
        fine = np.zeros_like(b_sel)
        coarse = np.zeros_like(b_sel)
        np.put_along_axis(fine, order, fine_live, axis=1)
        np.put_along_axis(coarse, order, coarse_live, axis=1)
        out[sel] = fine
        # The pairs on which the rules still disagree go to adaptive Gauss-Kronrod,
        # each on its own range.
        r_hard, c_hard = np.nonzero(np.abs(fine - coarse) > _QUAD_TOL)
        if r_hard.size:
            r_hard = sel[r_hard]
            integrand = _pair_integrand(beta, r_hard, c_hard)
            out[r_hard, c_hard], _err = integrate.quad_vec(
                lambda u, f=integrand: f(np.array([u]))[:, 0], 0.0, 1.0,
                epsabs=1e-13, epsrel=1e-11, norm="max", limit=2000)
    sums = out.sum(axis=1, keepdims=True)
    return out / sums


def _shared_window_rule(beta: np.ndarray, nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``P_c`` for every class of each row by one quadrature rule on the row's range.

    The range ``[F_{β_max}^{-1}(ε), \bar F_{β_max}^{-1}(ε)]`` (in ``t = ln x``)
    contains every class's own range, so each gamma CDF is evaluated once per node
    and row and shared by the ``K`` integrands.
    """
    b_max = beta.max(axis=1)
    t_lo = np.log(special.gammaincinv(b_max, _TAIL))
    width = np.log(special.gammainccinv(b_max, _TAIL)) - t_lo
    t = t_lo[:, None] + nodes[None, :] * width[:, None]          # (R, Q)
    x = np.exp(t)
    pos = beta > 0
    b = np.where(pos, beta, 1.0)[:, :, None]                     # (R, K, 1)
    with np.errstate(divide="ignore"):
        log_cdf = np.where(pos[:, :, None], np.log(special.gammainc(b, x[:, None, :])), 0.0)
    log_pdf = b * t[:, None, :] - x[:, None, :] - special.gammaln(b)
    # Σ_{j≠c} ln F_j as the total less ln F_c. Where F_c underflows to 0 the
    # integrand is below β_c·F_c(x) (gamma left tail: x f(x) ≤ β F(x)), i.e. 0.
    total = log_cdf.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        log_others = np.where(np.isfinite(log_cdf), total - log_cdf, -np.inf)
    values = np.exp(log_pdf + log_others) @ weights * width[:, None]
    return np.where(pos, values, 0.0)


def _pair_integrand(beta: np.ndarray, rows: np.ndarray, cls: np.ndarray):
    """The integrand of ``P_c`` for the given (row, class) pairs, on each pair's range.

    ``integrand(u)`` evaluates every pair at nodes ``u`` of [0, 1], mapped onto
    ``[F_{β_max}^{-1}(ε), \bar F_{β_c}^{-1}(ε)]`` in ``t = ln x``, and returns a
    ``(len(rows), len(u))`` array whose integral over ``u`` is ``P_c``.
    """
    b_all = beta[rows]
    b_c = beta[rows, cls]
    t_lo = np.log(special.gammaincinv(b_all.max(axis=1), _TAIL))
    width = np.maximum(np.log(special.gammainccinv(b_c, _TAIL)) - t_lo, 0.0)
    others = b_all.copy()
    others[np.arange(len(cls)), cls] = np.nan  # excluded from the product
    others[others == 0] = np.nan             # p_j = 0: never above p_c
    lg_c = special.gammaln(b_c)

    def integrand(u):
        t = t_lo[:, None] + u[None, :] * width[:, None]
        x = np.exp(t)
        with np.errstate(divide="ignore"):
            log_cdf = np.log(special.gammainc(others[:, :, None], x[:, None, :]))
        log_prod = np.sum(np.where(np.isnan(log_cdf), 0.0, log_cdf), axis=1)
        return np.exp(b_c[:, None] * t - x - lg_c[:, None] + log_prod) * width[:, None]

    return integrand


@functools.cache
def _legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1] (an eigenproblem: computed once)."""
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1.0) / 2.0, w / 2.0


# -------------------------------------------------------------------- F1 (macro)


def _binom_pmf(k: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Binomial pmf in log space, for ``0 < p < 1``: exact to rounding for every ``p``.

    ``scipy.stats.binom.pmf`` goes through Boost's incomplete-beta derivative, which
    raises ``OverflowError`` for some extreme ``p`` (e.g. tiny argmax probabilities
    of large counts).
    """
    log_pmf = (special.gammaln(n + 1.0) - special.gammaln(k + 1.0) - special.gammaln(n - k + 1.0)
               + special.xlogy(k, p) + special.xlog1py(n - k, -p))
    return np.exp(log_pmf)


def _poisson_binomial(weights: np.ndarray, probs: np.ndarray) -> tuple[int, np.ndarray]:
    """Distribution of ``Σ_r Binomial(w_r, p_r)`` as ``(offset, pmf)``.

    Each binomial is cut to a range holding all but ``ε`` of its mass, and the
    pieces are convolved pairwise.
    """
    offset = int(weights[probs >= 1.0].sum())
    keep = (probs > 0.0) & (probs < 1.0)
    w, p = weights[keep], probs[keep]
    if not w.size:
        return offset, np.ones(1)
    # Bernstein's inequality, P(|X − wp| ≥ s) ≤ 2 exp(−s² / (2(wp(1−p) + s/3))), gives
    # the half-width s outside which each binomial has less than ε of its mass.
    log_tail = math.log(2.0 / _TAIL)
    half = log_tail / 3.0 + np.sqrt((log_tail / 3.0) ** 2 + 2.0 * log_tail * w * p * (1.0 - p))
    lo = np.maximum(np.ceil(w * p - half), 0).astype(np.int64)
    hi = np.minimum(np.floor(w * p + half), w).astype(np.int64)
    lengths = hi - lo + 1
    # One vectorised pmf call for every piece.
    piece = np.repeat(np.arange(len(w)), lengths)
    within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    pmf_all = _binom_pmf(lo[piece] + within, w[piece], p[piece])
    pieces = np.split(pmf_all, np.cumsum(lengths)[:-1])
    # Pairwise (tree) convolution: near-linear in the support; direct for short
    # pieces, FFT for long ones.
    while len(pieces) > 1:
        merged = [_convolve(a, b) for a, b in zip(pieces[0::2], pieces[1::2], strict=False)]
        if len(pieces) % 2:
            merged.append(pieces[-1])
        pieces = merged
    return offset + int(lo.sum()), pieces[0]


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if min(len(a), len(b)) < 200:
        return np.convolve(a, b)
    size = len(a) + len(b) - 1
    n_fft = sp_fft.next_fast_len(size, real=True)
    out = np.fft.irfft(np.fft.rfft(a, n_fft) * np.fft.rfft(b, n_fft), n_fft)[:size]
    # FFT round-off can leave tiny negative probabilities.
    return np.clip(out, 0.0, None)


def _f1_parts(weights, gold, probs, n_classes):
    """Per gold class ``c``: ``E[2 TP_c / (m_c + k_c)]`` exactly.

    ``TP_c`` (gold-``c`` items predicted ``c``) and ``FP_c`` (other items predicted
    ``c``) are independent Poisson-binomial counts, ``k_c = TP_c + FP_c``, so
    ``E[2 TP/(m + TP + FP)] = Σ_s 2 [(t·p_TP) ∗ p_FP](s) / (m + s)``.
    """
    m = np.bincount(gold, weights=weights, minlength=n_classes)
    parts = {}
    for c in np.flatnonzero(m > 0):
        is_c = gold == c
        off_t, p_t = _poisson_binomial(weights[is_c], probs[is_c, c])
        off_f, p_f = _poisson_binomial(weights[~is_c], probs[~is_c, c])
        tp = (off_t + np.arange(len(p_t))) * p_t
        s = off_t + off_f + np.arange(len(p_t) + len(p_f) - 1)
        parts[int(c)] = float(np.sum(2.0 * _convolve(tp, p_f) / (m[c] + s)))
    return m, parts


def _f1_macro(weights, gold, probs, rng, target_se, max_draws):
    """E[F1 (macro)] with scikit-learn's label set: gold classes ∪ predicted classes.

    ``F1 = S / (g + J)``: ``S`` the sum of the gold classes' F1, ``g`` their number,
    ``J = |A|``, ``A`` the set of never-gold classes predicted at least once (their
    F1 is 0 but they enter the average); only the classes ``D`` with
    ``P(predicted) > 1e-12`` count. With ``h(B) = E[S · 1{A ⊆ B}] =
    P(A ⊆ B) E[S | A ⊆ B]`` (items stay independent given ``A ⊆ B``: each item's
    argmax distribution is restricted to the classes outside ``D \\ B``), Möbius
    inversion over the subsets of ``D`` gives

    .. math:: E[F1] = \\sum_{B \\subseteq D} h(B) \\sum_{j=0}^{|D|-|B|}
        \binom{|D|-|B|}{j} \frac{(-1)^j}{g + |B| + j},

    exact, with ``2^{|D|}`` convolutions. Beyond ``_MAX_EXACT_NEVER_GOLD`` such
    classes, ``E[S]/g`` is kept exact and the remainder ``E[S/(g+J) − S/g]`` (zero
    whenever ``J = 0``) is estimated by seeded Monte Carlo over per-item argmax
    draws, batch after batch until its standard error is at most ``target_se``.
    Returns ``(score, standard_error, method)``.
    """
    n_classes = probs.shape[1]
    m, parts = _f1_parts(weights, gold, probs, n_classes)
    gold_classes = np.flatnonzero(m > 0)
    g = len(gold_classes)
    exact = sum(parts.values()) / g
    never_gold = np.flatnonzero(m == 0)
    with np.errstate(divide="ignore"):
        log_p_none = weights @ np.log1p(-np.minimum(probs[:, never_gold], 1.0))
    never_gold = never_gold[-np.expm1(log_p_none) > 1e-12]
    if never_gold.size == 0:
        return exact, 0.0, "exact (Poisson-binomial convolution)"
    n_never = len(never_gold)
    if n_never <= _MAX_EXACT_NEVER_GOLD:
        total = 0.0
        for mask in range(1 << n_never):
            inside = np.array([(mask >> b) & 1 for b in range(n_never)], dtype=bool)
            size = int(inside.sum())
            coef = sum(math.comb(n_never - size, j) * (-1) ** j / (g + size + j)
                       for j in range(n_never - size + 1))
            outside = never_gold[~inside]
            mass_out = probs[:, outside].sum(axis=1)
            if np.any(mass_out >= 1.0):
                continue  # some item always predicts outside B: h(B) = 0
            log_prob = float(weights @ np.log1p(-mass_out))
            conditional = probs.copy()
            conditional[:, outside] = 0.0
            conditional /= (1.0 - mass_out)[:, None]
            _, cond_parts = _f1_parts(weights, gold, conditional, n_classes)
            total += coef * math.exp(log_prob) * sum(cond_parts.values())
        return total, 0.0, ("exact (Poisson-binomial convolution, inclusion-exclusion over "
                            f"{n_never} never-gold class(es))")
    onehot = np.zeros_like(probs)
    onehot[np.arange(len(gold)), gold] = 1.0
    n_rows = probs.shape[0]
    batch = int(max(64, min(20_000, 4_000_000 // max(1, n_rows * n_classes))))
    total, total_sq, drawn = 0.0, 0.0, 0
    w_int = weights.astype(np.int64)
    se = math.inf
    # The work per draw grows with the distinct count vectors: bound the total too.
    max_draws = min(max_draws, max(1000, int(_MC_CELL_BUDGET // (n_rows * n_classes))))
    while drawn < max_draws:
        size = min(batch, max_draws - drawn)
        draws = rng.multinomial(w_int, probs, size=(size, n_rows))    # (B, R, K)
        k = draws.sum(axis=1)
        tp = np.einsum("brk,rk->bk", draws, onehot)
        s = np.sum(2.0 * tp[:, gold_classes] / (m[gold_classes] + k[:, gold_classes]), axis=1)
        j = np.sum(k[:, never_gold] > 0, axis=1)
        diff = -s * j / (g * (g + j))
        total += diff.sum()
        total_sq += np.sum(diff**2)
        drawn += size
        mean = total / drawn
        var = max(total_sq / drawn - mean**2, 0.0)
        se = math.sqrt(var / drawn) if drawn > 1 else math.inf
        if drawn >= 1000 and se <= target_se:
            break
    method = f"exact + Monte Carlo correction ({drawn} draws)"
    return exact + total / drawn, se, method


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
    q = rows / rows.sum(axis=1, keepdims=True)

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
                beta = fit.alpha[None, :] + rows
                b_sum = beta.sum(axis=1, keepdims=True)
                with np.errstate(invalid="ignore"):
                    terms = np.where(q > 0, q * (special.digamma(b_sum) - special.digamma(beta)), 0.0)
                method = "exact (digamma)"
            elif fit.regime == "infinite":
                with np.errstate(divide="ignore"):
                    terms = np.where(q > 0, -q * np.log(np.where(q > 0, fit.prior_mean, 1.0)), 0.0)
            else:
                terms = np.zeros(rows.shape)
            value = float(weights @ terms.sum(axis=1) / n_items)
        scores[name], ses[name], methods[name] = value, float(se), method
    return BestPerformance(
        scores=MappingProxyType(scores), standard_errors=MappingProxyType(ses),
        methods=MappingProxyType(methods), alpha=fit.alpha, fit=fit, n_items=n_items,
        n_distinct=int(rows.shape[0]), warnings=tuple(messages))
