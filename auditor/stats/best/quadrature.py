"""P(class c is the argmax of p) under each item's Dirichlet posterior, by one batched
Gauss-Legendre rule in ``t = ln x`` (checked against a coarser rule, refined where they differ)."""

from __future__ import annotations

import functools

import numpy as np
from scipy import integrate, special

__all__ = []

# Tail mass dropped on each side of a gamma or binomial distribution: far below the
# precision any score is reported with, and above double-precision underflow.
_TAIL = 1e-16
# Gauss-Legendre nodes of the fine rule (the check rule has two thirds as many), and the
# largest disagreement between the two rules accepted without adaptive quadrature.
_NODES = 96
_QUAD_TOL = 1e-10


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
