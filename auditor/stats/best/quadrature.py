"""P(class c is the argmax of p) under each item's Dirichlet posterior, by Gauss-Legendre
rules in ``t = ln x`` shared by every row with the same (rounded) integration window, each
gamma CDF evaluated once per distinct shape and node (checked against a coarser rule,
refined where they differ)."""

from __future__ import annotations

import functools

import numpy as np
from scipy import integrate, special

__all__ = []

# Tail mass dropped on each side of a gamma or binomial distribution: far below the
# precision any score is reported with, and above double-precision underflow.
_TAIL = 1e-16
# Gauss-Legendre nodes of the fine rule (the check rule has two thirds as many), and the
# largest disagreement between the two rules accepted without refinement.
_NODES = 96
_QUAD_TOL = 1e-10
# Rows whose rules still disagree are redone with composite rules of up to this many
# panels of ``_NODES`` nodes each, before adaptive quadrature takes the last pairs.
_MAX_PANELS = 8
# Windows are rounded outwards: widths to powers of 2^(1/4), starts to 1/8 of the width,
# so that rows share nodes (at most 34% wider than their own window).
_WIDTH_STEPS = 4
_START_STEPS = 8
# Largest (rows, shapes, nodes) block gathered at once.
_BLOCK = 1 << 21
# ln F below this counts as 0 (F underflows): exp of it is 0 in double precision.
_LOG_FLOOR = -1000.0


# ------------------------------------------------------- posterior argmax probabilities


def _argmax_probabilities(beta: np.ndarray) -> np.ndarray:
    """``P[r, c] = P(argmax_j p_j = c)`` for ``p ~ Dirichlet(beta[r])``.

    Classes with ``beta = 0`` have ``p_j = 0`` almost surely and are never the argmax.
    Two positive classes: ``P(p_c > 1/2) = I_{1/2}(β_o, β_c)`` (regularised incomplete
    beta). More: with ``p_j = G_j / ΣG``, ``G_j ~ Gamma(β_j)`` independent and
    ``M = max_j G_j``,

    .. math:: P_c = \\int_0^\\infty f_{β_c}(x) \\prod_{j \\ne c} F_{β_j}(x)\\,dx,

    integrated in ``t = ln x`` (smooth for every shape). The integrands of a row add up
    to the density of ``M``, so truncating to a window holding all but ``ε`` of ``M``'s
    mass on each side changes every ``P_c`` by less than ``Kε``: the window ends at
    ``\\bar F_{β_max}^{-1}(ε)`` and starts at the largest of ``F_{β_max}^{-1}(ε)`` and
    the points where the bound ``\\prod_{j∈S} F_{β_j}(x) ≤ x^{B_S} / \\prod_{j∈S}
    Γ(β_j + 1)`` reaches ``ε`` (``S`` all classes, or those at their column's
    smallest value). Windows are rounded outwards onto a lattice so that rows share
    them; on each window one 96-node Gauss–Legendre rule is checked against a 64-node
    rule, rows where the two differ by more than ``_QUAD_TOL`` are redone with
    composite rules of 2, 4, 8 panels (each checked against the previous), and pairs
    still differing by adaptive Gauss–Kronrod on their own range.

    The work is shared: every gamma CDF ``F_β`` is evaluated once per window and
    distinct ``β`` (a column's smallest value, e.g. ``α_j`` for ``β = α + Y``, is the
    *background* of that column; the other entries are the *foreground*), so that per
    row and node only the foreground entries are gathered, and the integrals of the
    background classes are one matrix product per window.

    Only the classes that can win count: a class whose gamma variable exceeds
    ``F_{β_max}^{-1}(ε)`` with probability at most ε is the argmax with probability
    below ``2ε`` and gets probability 0. Rows are normalised to sum to 1.
    """
    beta = np.asarray(beta, dtype=float)
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
    if many.size:
        out[many] = _gamma_quadrature(beta[many] if many.size < len(beta) else beta)
    sums = out.sum(axis=1, keepdims=True)
    return out / sums


class _Rows:
    """The rows of ``β`` as background values per column plus sparse foreground entries,
    with each row's live classes and its integration window (rounded onto the lattice)."""

    def __init__(self, beta: np.ndarray):
        n_rows, n_classes = beta.shape
        self.beta = beta
        self.bg = beta.min(axis=0)
        fg = beta != self.bg[None, :]
        self.fg_float = fg.astype(float)
        r_fg, j_fg = np.nonzero(fg)
        v_fg = beta[r_fg, j_fg]
        self.values, v_id = np.unique(v_fg, return_inverse=True)
        # Foreground entries row by row, padded to the longest row (pad: id -1).
        n_fg = np.bincount(r_fg, minlength=n_rows)
        width = max(int(n_fg.max()), 1)
        slot = np.arange(len(r_fg)) - np.repeat(np.cumsum(n_fg) - n_fg, n_fg)
        self.fg_id = np.full((n_rows, width), -1, dtype=np.int64)
        self.fg_col = np.zeros((n_rows, width), dtype=np.int64)
        self.fg_id[r_fg, slot] = v_id
        self.fg_col[r_fg, slot] = j_fg

        # Window end and the live classes depend on the row's largest β only.
        b_max = beta.max(axis=1)
        ub, inv_b = np.unique(b_max, return_inverse=True)
        x_lo0 = special.gammaincinv(ub, _TAIL)
        t_hi = np.log(special.gammainccinv(ub, _TAIL))[inv_b]
        bg_pos = self.bg > 0
        with np.errstate(divide="ignore"):
            live_bg = bg_pos[None, :] & (special.gammaincc(np.where(bg_pos, self.bg, 1.0)[None, :],
                                                           x_lo0[:, None]) > _TAIL)
        self.live = live_bg[inv_b]
        if len(v_fg):
            if len(ub) * len(self.values) <= len(v_fg):
                table = special.gammaincc(self.values[None, :], x_lo0[:, None]) > _TAIL
                live_fg = table[inv_b[r_fg], v_id]
            else:
                live_fg = special.gammaincc(v_fg, x_lo0[inv_b[r_fg]]) > _TAIL
            self.live[r_fg, j_fg] = live_fg

        # Window start: F_{β_max}^{-1}(ε), or where x^{B_S} / Π_S Γ(β_j + 1) = ε.
        lg_bg = np.where(bg_pos, special.gammaln(self.bg + 1.0), 0.0)
        lg_fg = special.gammaln(self.values + 1.0)[v_id] - lg_bg[j_fg]
        s_all = lg_bg.sum() + np.bincount(r_fg, weights=lg_fg, minlength=n_rows)
        b_all = beta.sum(axis=1)
        s_bg = lg_bg.sum() - np.bincount(r_fg, weights=lg_bg[j_fg], minlength=n_rows)
        b_bg = self.bg.sum() - np.bincount(r_fg, weights=self.bg[j_fg], minlength=n_rows)
        log_eps = np.log(_TAIL)
        t_lo = np.maximum(np.log(x_lo0)[inv_b], (log_eps + s_all) / b_all)
        has_bg = b_bg > 1e-300
        t_lo[has_bg] = np.maximum(t_lo[has_bg], (log_eps + s_bg[has_bg]) / b_bg[has_bg])
        t_lo = np.minimum(t_lo, t_hi)

        # Rounded outwards onto the lattice: width 2^(ℓ/4), start a multiple of 1/8 of it.
        width_exact = np.maximum(t_hi - t_lo, 1e-3)
        level = np.ceil(_WIDTH_STEPS * np.log2(width_exact)).astype(np.int64)
        w_q = np.exp2(level / _WIDTH_STEPS)
        step = w_q / _START_STEPS
        start = np.floor(t_lo / step).astype(np.int64)
        key = (level + 4096) * (1 << 40) + (start + (1 << 39))
        _, self.group = np.unique(key, return_inverse=True)
        first = np.zeros(self.group.max() + 1, dtype=np.int64)
        first[self.group[::-1]] = np.arange(n_rows)[::-1]
        self.t_start = (start * step)[first]
        self.t_width = (w_q + step)[first]
        self.n_groups = len(first)

    def integrate(self, rows: np.ndarray, rules) -> list[np.ndarray]:
        """``P`` of ``rows`` by each rule ``(nodes, weights)`` on [0, 1], mapped on the
        rows' windows; one list entry per rule, each ``(len(rows), K)``."""
        nodes = np.concatenate([u for u, _ in rules])
        bounds = np.cumsum([0] + [len(u) for u, _ in rules])
        outs = [np.zeros((len(rows), self.beta.shape[1])) for _ in rules]
        order = np.argsort(self.group[rows], kind="stable")
        grp = self.group[rows][order]
        cut = np.flatnonzero(np.diff(grp)) + 1
        for part in np.split(order, cut):
            g = self.group[rows[part[0]]]
            t = self.t_start[g] + nodes * self.t_width[g]
            bg_log, bg_h = _log_cdf_and_hazard(self.bg, t)
            bg_total = bg_log.sum(axis=0)
            ids = self.fg_id[rows[part]]
            used = np.unique(ids[ids >= 0])
            fg_log, fg_h = _log_cdf_and_hazard(self.values[used], t)
            # One zero row for the padding.
            fg_log = np.vstack([fg_log, np.zeros((1, len(t)))])
            fg_h = np.vstack([fg_h, np.zeros((1, len(t)))])
            local = np.where(ids >= 0, np.searchsorted(used, ids), len(used))
            chunk = max(1, _BLOCK // (local.shape[1] * len(t)))
            for lo in range(0, len(part), chunk):
                sel = part[lo:lo + chunk]
                r = rows[sel]
                loc = local[lo:lo + chunk]
                log_prod = bg_total - self.fg_float[r] @ bg_log + fg_log[loc].sum(axis=1)
                dens = np.exp(log_prod)
                h = fg_h[loc]
                for k, (_, w) in enumerate(rules):
                    sl = slice(bounds[k], bounds[k + 1])
                    e = dens[:, sl] * (w * self.t_width[g])
                    p = e @ bg_h[:, sl].T
                    p_fg = np.einsum("rq,rmq->rm", e, h[:, :, sl])
                    cols = self.fg_col[r]
                    valid = loc < len(used)
                    rr = np.broadcast_to(np.arange(len(sel))[:, None], cols.shape)
                    p[rr[valid], cols[valid]] = p_fg[valid]
                    outs[k][sel] = p
        live = self.live[rows]
        return [np.where(live, o, 0.0) for o in outs]


def _log_cdf_and_hazard(shapes: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ln F_β(e^t)`` and ``e^t f_β(e^t) / F_β(e^t)`` for each shape (rows) and node.

    Shape 0 (``p_j = 0``) gives ``F = 1`` and 0; ``ln F`` is floored at ``_LOG_FLOOR``
    (where the product it enters underflows anyway) and the ratio is 0 where ``F``
    underflows (the integrand is below ``β F(x)`` there, i.e. 0).
    """
    pos = shapes > 0
    b = np.where(pos, shapes, 1.0)[:, None]
    x = np.exp(t)[None, :]
    with np.errstate(divide="ignore"):
        log_cdf = np.log(special.gammainc(b, x))
    log_pdf = b * t[None, :] - x - special.gammaln(b)
    finite = log_cdf > -np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        hazard = np.where(finite, np.exp(log_pdf - log_cdf), 0.0)
    log_cdf = np.maximum(log_cdf, _LOG_FLOOR)
    return np.where(pos[:, None], log_cdf, 0.0), np.where(pos[:, None], hazard, 0.0)


def _gamma_quadrature(beta: np.ndarray) -> np.ndarray:
    """``P`` for rows with at least three positive classes (not normalised)."""
    rows = _Rows(beta)
    every = np.arange(len(beta))
    fine, coarse = rows.integrate(every, [_legendre(_NODES), _legendre(2 * _NODES // 3)])
    out = fine
    # Rows on which the two rules disagree (a narrow peak in a wide window) are redone
    # with composite rules, each checked against the previous one.
    redo = np.flatnonzero(np.any(np.abs(fine - coarse) > _QUAD_TOL, axis=1))
    previous, older = fine[redo], coarse[redo]
    panels = 2
    while redo.size and panels <= _MAX_PANELS:
        (finer,) = rows.integrate(redo, [_composite(_NODES, panels)])
        out[redo] = finer
        keep = np.any(np.abs(finer - previous) > _QUAD_TOL, axis=1)
        redo, previous, older = redo[keep], finer[keep], previous[keep]
        panels *= 2
    if redo.size:
        # The pairs on which the rules still disagree go to adaptive Gauss-Kronrod,
        # each on its own range.
        r_hard, c_hard = np.nonzero(np.abs(previous - older) > _QUAD_TOL)
        r_hard = redo[r_hard]
        integrand = _pair_integrand(beta, r_hard, c_hard)
        out[r_hard, c_hard], _err = integrate.quad_vec(
            lambda u, f=integrand: f(np.array([u]))[:, 0], 0.0, 1.0,
            epsabs=1e-13, epsrel=1e-11, norm="max", limit=2000)
    return out


def _pair_integrand(beta: np.ndarray, rows: np.ndarray, cls: np.ndarray):
    """The integrand of ``P_c`` for the given (row, class) pairs, on each pair's range.

    ``integrand(u)`` evaluates every pair at nodes ``u`` of [0, 1], mapped onto
    ``[F_{β_max}^{-1}(ε), \\bar F_{β_c}^{-1}(ε)]`` in ``t = ln x``, and returns a
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


@functools.cache
def _composite(n: int, panels: int) -> tuple[np.ndarray, np.ndarray]:
    """``panels`` equal panels of the ``n``-node Gauss-Legendre rule on [0, 1]."""
    u, w = _legendre(n)
    return ((np.arange(panels)[:, None] + u[None, :]) / panels).ravel(), np.tile(w / panels, panels)
