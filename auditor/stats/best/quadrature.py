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
# Gauss-Legendre nodes of the rule used and of the rule it is checked against, and the
# largest disagreement between the two accepted without refinement.
_NODES = 48
_CHECK_NODES = 40
_QUAD_TOL = 1e-10
# The check rule's ln F interpolated from the rule's nodes (no gamma CDF of its own).
_INTERPOLATED_CHECK = True
# Windows are rounded outwards: widths to powers of 2^(1/8), starts to 1/16 of the width,
# so that rows share nodes (at most 16% wider than their own window).
_WIDTH_STEPS = 8
_START_STEPS = 16
# Largest (rows, shapes, nodes) block gathered at once, and (rows, nodes) block of the
# integrands multiplied at once.
_BLOCK = 1 << 21
_DENSE_BLOCK = 1 << 20
# Tables of several windows are evaluated together, about this many cells at a time.
_TABLE_BLOCK = 1 << 15
# Matrix products are done by blocks of rows of at most this many multiplications.
_BLAS_MAX_PRODUCT = 1 << 16
# Gamma CDFs of shapes of a window a whole number apart, at most this much, are chained
# (:func:`_chained_cdf`): a step costs one exponential per node, an incomplete gamma
# function about thirty.
_CHAIN_GAP = 16
# Rows whose largest β is below this are not searched for classes that cannot win.
_BEATEN_MIN_TOP = 8.0
# Inputs of at most this many rows start with the first refinement.
_FEW_ROWS = 64
# Windows shared by at most this many (rows × classes) are integrated row by row.
_DIRECT_CELLS = 64
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
    smallest value). Windows are rounded outwards onto a lattice (at most 16% wider) so
    that rows share them; on each window one 48-node Gauss–Legendre rule is checked
    against a 40-node rule (whose gamma CDFs are not evaluated but interpolated, as
    ``\\ln F``, from their values at the 48 nodes; the densities are evaluated), rows
    where the two differ by more than ``_QUAD_TOL`` are
    redone with 64 then 96 nodes, then composite rules of 2, 4, 8 panels of 96 (each
    checked against the previous), and pairs still differing by adaptive Gauss–Kronrod
    on their own range.

    The work is shared, never a Python loop per row: every gamma CDF ``F_β`` is
    evaluated once per window and distinct ``β`` (a column's smallest value, e.g.
    ``α_j`` for ``β = α + Y``, is the *background* of that column; the other entries are
    the *foreground*), so that per row and node only the foreground entries are
    gathered (a table of each value's ``\\ln F`` less its column's background one gives
    ``Σ_j \\ln F_{β_j}``), and the integrals of the background classes are one matrix
    product per window (the caller passes one row per distinct count vector). Windows
    of very few rows are integrated row by row, vectorised over rows, classes and nodes.

    Only the classes that can win count: a class whose gamma variable exceeds
    ``F_{β_max}^{-1}(ε)`` with probability at most ε is the argmax with probability
    below ``2ε`` and gets probability 0, and so does a class with ``P(G_j > G_max) < ε``
    (:func:`_beaten`, checked before any quadrature): rows left with one class that can
    win get probability 1 for it, rows left with two the beta function above (the other
    classes change them by less than ``Kε``), without quadrature. Rows are normalised
    to sum to 1.
    """
    beta = np.asarray(beta, dtype=float)
    n_classes = beta.shape[1]
    pos = beta > 0
    k_pos = pos.sum(axis=1)
    many = np.flatnonzero(k_pos > 2)
    out = np.zeros_like(beta, dtype=float)
    if many.size:
        # Classes that cannot win (P(G_j > G_top) < ε): the rows left with one or two
        # classes are exact without quadrature, the others get 0 for those classes.
        dead = _beaten(beta[many])
        n_live = k_pos[many] - dead.sum(axis=1)
        if n_live.min() > 2:
            quad = _gamma_quadrature(beta[many])
            quad[dead] = 0.0
            if many.size == len(beta):
                quad /= quad.sum(axis=1, keepdims=True)
                return quad
            out[many] = quad
        else:
            pos[many] &= ~dead
            k_pos[many] = n_live
            rest = many[n_live > 2]
            if rest.size:
                quad = _gamma_quadrature(beta[rest])
                quad[dead[n_live > 2]] = 0.0
                out[rest] = quad
    one = k_pos == 1
    out[one] = pos[one]
    two = np.flatnonzero(k_pos == 2)
    if two.size:
        b = beta[two][pos[two]].reshape(-1, 2)
        p_first = special.betainc(b[:, 1], b[:, 0], 0.5)
        cols = np.flatnonzero(pos[two].ravel()).reshape(-1, 2) % n_classes
        out[two, cols[:, 0]] = p_first
        out[two, cols[:, 1]] = 1.0 - p_first
    out /= out.sum(axis=1, keepdims=True)
    return out


def _beaten(beta: np.ndarray) -> np.ndarray:
    """``dead[r, j]``: ``β_rj > 0`` and class ``j`` is the argmax with probability below
    ``_TAIL``, by the bound ``P(argmax = j) ≤ P(G_j > G_t)`` (``t`` the row's largest
    ``β``, ``j ≠ t``). ``G_j / (G_j + G_t) ~ Beta(a, b)`` (``a = β_j ≤ b = β_t``) has
    density ``g(x) / B(a, b)``, ``g(x) = x^{a−1} (1−x)^{b−1}``. On ``[1/2, 1]``,
    ``x^{a−1} ≤ max(1, 2^{1−a})``; and for ``1 ≤ a < b``, ``ln g`` is concave with slope
    ``2(a − b)`` at ``1/2``, so ``g(x) ≤ g(1/2) e^{2(a−b)(x−1/2)}``. Hence

    .. math:: P(G_j > G_t) ≤ \\frac{1}{B(a, b)} \\min\\Big(
        \\frac{\\max(1, 2^{1−a})}{b\\, 2^{b}},\\;
        \\frac{2^{2−a−b}}{2(b − a)} \\text{ if } 1 ≤ a < b\\Big).

    Marking fewer classes is always safe (the quadrature takes them); rows whose largest
    ``β`` is below ``_BEATEN_MIN_TOP`` are not searched.
    """
    n_rows = beta.shape[0]
    top = beta.argmax(axis=1)
    b_all = beta[np.arange(n_rows), top]
    # Below this largest β the bound reaches ε only for β_j < 1e-13: rows left as they are.
    tall = np.flatnonzero(b_all >= _BEATEN_MIN_TOP)
    dead = np.zeros(beta.shape, dtype=bool)
    if tall.size < n_rows:
        if tall.size:
            dead[tall] = _beaten(beta[tall])
        return dead
    b = b_all[:, None]
    pos = beta > 0
    a = np.where(pos, beta, 1.0)
    ln2 = np.log(2.0)
    log_beta_fn = special.gammaln(a) + special.gammaln(b) - special.gammaln(a + b)
    log_bound = (np.maximum(1.0 - a, 0.0) - b) * ln2 - np.log(b)
    concave = (a >= 1.0) & (b > a)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_concave = (1.0 - a - b) * ln2 - np.log(b - a)
    log_bound = np.where(concave, np.minimum(log_bound, log_concave), log_bound) - log_beta_fn
    dead = pos & (log_bound < np.log(_TAIL))
    dead[np.arange(n_rows), top] = False
    return dead


class _Rows:
    """The rows of ``β`` as background values per column plus sparse foreground entries,
    with each row's live classes and its integration window (rounded onto the lattice).

    Rows are kept in the order of their windows (and, within a window, of their number
    of foreground entries): ``order[i]`` is the input row of row ``i``.
    """

    def __init__(self, beta: np.ndarray):
        n_rows = beta.shape[0]
        self.beta = beta
        self.bg = beta.min(axis=0)
        r_fg, j_fg = np.nonzero(beta != self.bg[None, :])
        v_fg = beta[r_fg, j_fg]
        self.values, v_id = np.unique(v_fg, return_inverse=True)
        n_fg = np.bincount(r_fg, minlength=n_rows)

        # Window end and the live classes depend on the row's largest β only.
        b_max = beta.max(axis=1)
        ub, inv_b = np.unique(b_max, return_inverse=True)
        x_lo0 = special.gammaincinv(ub, _TAIL)
        t_hi = np.log(special.gammainccinv(ub, _TAIL))[inv_b]
        bg_pos = self.bg > 0
        live_bg = bg_pos[None, :] & (special.gammaincc(np.where(bg_pos, self.bg, 1.0)[None, :],
                                                       x_lo0[:, None]) > _TAIL)
        live = live_bg[inv_b]
        if len(v_fg):
            if len(ub) * len(self.values) <= len(v_fg):
                table = special.gammaincc(self.values[None, :], x_lo0[:, None]) > _TAIL
                live[r_fg, j_fg] = table[inv_b[r_fg], v_id]
            else:  # once per distinct (β_max, value) pair
                pair, inv_pair = np.unique(inv_b[r_fg] * len(self.values) + v_id, return_inverse=True)
                table = special.gammaincc(self.values[pair % len(self.values)],
                                          x_lo0[pair // len(self.values)]) > _TAIL
                live[r_fg, j_fg] = table[inv_pair]

        # Window start: F_{β_max}^{-1}(ε), or where x^{B_S} / Π_S Γ(β_j + 1) = ε.
        lg_bg = np.where(bg_pos, special.gammaln(self.bg + 1.0), 0.0)
        lg_fg = special.gammaln(self.values + 1.0)[v_id] - lg_bg[j_fg]
        s_all = lg_bg.sum() + np.bincount(r_fg, weights=lg_fg, minlength=n_rows)
        b_all = beta.sum(axis=1)
        s_bg = lg_bg.sum() - np.bincount(r_fg, weights=lg_bg[j_fg], minlength=n_rows)
        b_bg = self.bg.sum() - np.bincount(r_fg, weights=self.bg[j_fg], minlength=n_rows)
        log_eps = np.log(_TAIL)
        with np.errstate(divide="ignore"):  # x_lo0 underflows to 0 for tiny shapes
            t_lo = np.maximum(np.log(x_lo0)[inv_b], (log_eps + s_all) / b_all)
        has_bg = b_bg > 1e-300
        t_lo[has_bg] = np.maximum(t_lo[has_bg], (log_eps + s_bg[has_bg]) / b_bg[has_bg])
        t_lo = np.minimum(t_lo, t_hi)

        # Rounded outwards onto the lattice: width 2^(ℓ/8), start a multiple of 1/16 of it.
        width_exact = np.maximum(t_hi - t_lo, 1e-3)
        level = np.ceil(_WIDTH_STEPS * np.log2(width_exact)).astype(np.int64)
        w_q = np.exp2(level / _WIDTH_STEPS)
        step = w_q / _START_STEPS
        start = np.floor(t_lo / step).astype(np.int64)
        key = (level + 4096) * (1 << 40) + (start + (1 << 39))
        _, group = np.unique(key, return_inverse=True)
        self.order = np.lexsort((n_fg, group))
        self.group = group[self.order]
        rank = np.empty(n_rows, dtype=np.int64)
        rank[self.order] = np.arange(n_rows)
        first = np.flatnonzero(np.r_[True, self.group[1:] != self.group[:-1]])
        self.t_start = (start * step)[self.order[first]]
        self.t_width = (w_q + step)[self.order[first]]
        self.live = live[self.order]
        self.n_fg = n_fg[self.order]
        # Foreground entries row by row (in the new order), padded to the longest row
        # (padding: value id -1, column 0).
        r_new = rank[r_fg]
        by_row = np.argsort(r_new, kind="stable")
        r_new, j_fg, v_id = r_new[by_row], j_fg[by_row], v_id[by_row]
        width = max(int(n_fg.max()), 1)
        slot = np.arange(len(r_new)) - np.repeat(np.cumsum(self.n_fg) - self.n_fg, self.n_fg)
        self.fg_id = np.full((n_rows, width), -1, dtype=np.int64)
        self.fg_col = np.zeros((n_rows, width), dtype=np.int64)
        self.fg_id[r_new, slot] = v_id
        self.fg_col[r_new, slot] = j_fg

    def integrate(self, rows: np.ndarray, rule, check=None) -> tuple[np.ndarray, np.ndarray]:
        """``P`` of ``rows`` (ascending, in the rows' order) by ``rule`` ``(nodes,
        weights)`` on [0, 1], mapped on the rows' windows, ``(len(rows), K)``; and, with
        a ``check`` rule, each row's largest difference between the two (else None).

        Per window: ``ln Π_j F_{β_j}`` at every node is the background total plus, for
        each foreground entry, its value's ``ln F`` less its column's background one
        (one table of differences); times ``x f_β / F_β``, integrated by a matrix
        product for the background classes and one dot product per foreground entry.
        The tables of all windows are evaluated together (:meth:`_tables`).
        """
        rules = [rule] if check is None else [rule, check]
        nodes = np.concatenate([u for u, _ in rules])
        bounds = np.cumsum([0] + [len(u) for u, _ in rules])
        parts = [slice(bounds[k], bounds[k + 1]) for k in range(len(rules))]
        weights = np.concatenate([w for _, w in rules])
        # ln F at the check rule's nodes: interpolated from the rule's nodes.
        interp = (_interpolation(len(rule[0]), len(check[0]))
                  if check is not None and _INTERPOLATED_CHECK else None)
        out = np.empty((len(rows), len(self.bg)))
        gap = np.zeros(len(rows)) if check is not None else None
        cut = np.flatnonzero(np.diff(self.group[rows])) + 1
        first_all, last_all = np.r_[0, cut], np.r_[cut, len(rows)]
        # Windows of a few rows: each row on its own (no shared tables to build).
        few = last_all - first_all <= max(1, _DIRECT_CELLS // len(self.bg))
        if few.any():
            sel = np.concatenate([np.arange(a, b) for a, b in zip(first_all[few], last_all[few],
                                                                  strict=True)])
            self._direct(rows, sel, nodes, weights, parts, out, gap, interp)
        shared = np.flatnonzero(~few)
        if shared.size:
            tables = self._tables(rows, first_all[shared], last_all[shared], nodes, interp)
        for k, (first, last) in enumerate(zip(first_all[shared], last_all[shared], strict=True)):
            g = self.group[rows[first]]
            t = self.t_start[g] + nodes * self.t_width[g]
            scale = weights * self.t_width[g]
            fg_diff, fg_h, bg_log, bg_h, local = tables(k)
            bg_total = bg_log.sum(axis=0)
            bg_h = bg_h.T * scale[:, None]                          # (nodes, K), weighted
            fg_h = fg_h * scale
            chunk = max(1, _DENSE_BLOCK // len(t))
            for lo in range(first, last, chunk):
                hi = min(lo + chunk, last)
                r = rows[lo:hi]
                width = max(int(self.n_fg[r].max()), 1)
                loc = local[lo - first:hi - first, :width]
                cols = self.fg_col[r, :width]
                # +ln F of each foreground value, −ln F of its column's background: the
                # entries in slot j of the rows that have more than j (rows sorted by number).
                log_prod = np.repeat(bg_total[None, :], hi - lo, axis=0)
                n_r = self.n_fg[r]
                starts = [int(np.searchsorted(n_r, slot, side="right")) for slot in range(width)]
                for slot, a in enumerate(starts):
                    log_prod[a:] += fg_diff[loc[a:, slot]]
                dens = np.exp(log_prod)
                blocks = [_matmul(dens[:, part], bg_h[part]) for part in parts]
                # The foreground entries, slot by slot: the rows' own densities (contiguous)
                # against the hazards of their entries in that slot.
                index = np.arange(hi - lo)
                for slot, a in enumerate(starts):
                    if a == hi - lo:
                        continue
                    h_fg = fg_h.take(loc[a:, slot], axis=0)
                    for block, part in zip(blocks, parts, strict=True):
                        block[index[a:], cols[a:, slot]] = np.einsum("rq,rq->r", h_fg[:, part], dens[a:, part])
                dead = ~self.live[r]
                for block in blocks:
                    block[dead] = 0.0
                out[lo:hi] = blocks[0]
                if check is not None:
                    gap[lo:hi] = np.max(np.abs(blocks[0] - blocks[1]), axis=1)
        return out, gap

    def _tables(self, rows, first, last, nodes, interp=None):
        """The tables of the windows ``rows[first[k]:last[k]]``, evaluated a batch of
        windows at a time: ``tables(k)`` gives, for window ``k``, the (value, column)
        pairs its rows use (first a zero row, the padding, if it has padding) as
        ``ln F`` of the value less ``ln F`` of the column's background and the ratio
        ``x f / F``; ``ln F`` and the ratio of the background; and its rows' entries as
        indices into the pairs."""
        n_win, n_classes = len(first), len(self.bg)
        size = last - first
        win_of = np.repeat(np.arange(n_win), size)
        pos = np.arange(int(size.sum())) + np.repeat(first - (np.cumsum(size) - size), size)
        ids, cols = self.fg_id[rows[pos]], self.fg_col[rows[pos]]
        n_val = len(self.values) + 1
        # (window, value, column) triples, padding (id -1) first within its window.
        keys, inverse = np.unique((win_of[:, None] * n_val + (ids + 1)) * n_classes + cols,
                                  return_inverse=True)
        inverse = inverse.reshape(ids.shape)
        key_col, key_id = keys % n_classes, (keys // n_classes) % n_val - 1
        key_win = keys // (n_classes * n_val)
        start = np.searchsorted(key_win, np.arange(n_win + 1))
        local = inverse - start[win_of][:, None]
        row_start = np.r_[0, np.cumsum(size)]
        g = self.group[rows[first]]
        t = self.t_start[g][:, None] + nodes[None, :] * self.t_width[g][:, None]
        x = np.exp(t)
        log_x = np.log(x)
        # Windows in batches of at most about _TABLE_BLOCK table cells.
        n_tab = np.diff(start) + n_classes
        batch = np.cumsum(n_tab) * len(nodes) // _TABLE_BLOCK
        cache = {}

        def tables(k):
            b = int(batch[k])
            if b not in cache:
                cache.clear()
                wins = np.flatnonzero(batch == b)
                w0, w1 = int(wins[0]), int(wins[-1]) + 1
                ids_b = key_id[start[w0]:start[w1]]
                vals = np.zeros(len(ids_b))        # padding: shape 0
                vals[ids_b >= 0] = self.values[ids_b[ids_b >= 0]]
                shapes = np.r_[vals, np.tile(self.bg, w1 - w0)]
                at = np.r_[key_win[start[w0]:start[w1]], np.repeat(np.arange(w0, w1), n_classes)]
                log_cdf, hazard = _tables_at(shapes[:, None], t[at], x[at], log_x[at], interp,
                                             cdf=_chained_cdf(shapes, at, x, log_x, interp))
                n_fg_tab = start[w1] - start[w0]
                # ln F of each value less that of its column's background (0: padding).
                own_bg = n_fg_tab + (at[:n_fg_tab] - w0) * n_classes + key_col[start[w0]:start[w1]]
                diff = log_cdf[:n_fg_tab] - log_cdf[own_bg]
                diff[ids_b < 0] = 0.0
                cache[b] = (w0, log_cdf, hazard, diff, n_fg_tab)
            w0, log_cdf, hazard, diff, n_fg_tab = cache[b]
            a, z = start[k] - start[w0], start[k + 1] - start[w0]
            bg = slice(n_fg_tab + (k - w0) * n_classes, n_fg_tab + (k - w0 + 1) * n_classes)
            return (diff[a:z], hazard[a:z], log_cdf[bg], hazard[bg],
                    local[row_start[k]:row_start[k + 1]])

        return tables

    def _direct(self, rows, sel, nodes, weights, parts, out, gap, interp=None):
        """:meth:`integrate` for ``rows[sel]``, every gamma CDF evaluated at each row's own
        nodes: ``(rows, K, nodes)`` arrays, a block of rows at a time."""
        n_classes = len(self.bg)
        step = max(1, _BLOCK // (n_classes * len(nodes)))
        for lo in range(0, len(sel), step):
            at = sel[lo:lo + step]
            r = rows[at]
            g = self.group[r]
            t = self.t_start[g][:, None] + nodes[None, :] * self.t_width[g][:, None]
            log_cdf, hazard = _log_cdf_and_hazard(self.beta[self.order[r]], t, interp)
            dens = np.exp(log_cdf.sum(axis=1)) * (weights[None, :] * self.t_width[g][:, None])
            blocks = [np.einsum("rkq,rq->rk", hazard[:, :, part], dens[:, part]) for part in parts]
            dead = ~self.live[r]
            for block in blocks:
                block[dead] = 0.0
            out[at] = blocks[0]
            if gap is not None:
                gap[at] = np.max(np.abs(blocks[0] - blocks[1]), axis=1)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b``, by BLAS on blocks of rows small enough that it runs on one thread (a
    threaded BLAS spends longer starting its threads than multiplying)."""
    step = max(1, _BLAS_MAX_PRODUCT // max(1, a.shape[1] * b.shape[1]))
    if a.shape[0] <= step:
        return a @ b
    return np.concatenate([a[lo:lo + step] @ b for lo in range(0, a.shape[0], step)])


def _log_cdf_and_hazard(shapes: np.ndarray, t: np.ndarray, interp=None) -> tuple[np.ndarray, np.ndarray]:
    """``ln F_β(e^t)`` and ``e^t f_β(e^t) / F_β(e^t)`` for each shape and node: shapes
    ``(S,)`` and nodes ``(Q,)`` give ``(S, Q)``; shapes ``(R, S)`` and nodes ``(R, Q)``
    give ``(R, S, Q)``.

    Shape 0 (``p_j = 0``) gives ``F = 1`` and 0; ``ln F`` is floored at ``_LOG_FLOOR``
    (where the product it enters underflows anyway) and the ratio is 0 where ``F``
    underflows (the integrand is below ``β F(x)`` there, i.e. 0).

    ``interp`` (``(n, Q − n)``, from :func:`_interpolation`): ``F`` is evaluated at the
    first ``n`` nodes only (a Gauss-Legendre rule's) and ``ln F`` interpolated at the
    others (a check rule's) by the polynomial through those values, capped at 0, and
    the ratio at ``β`` (its supremum): the check rule then costs no gamma CDF.
    """
    t = t[..., None, :]
    x = np.exp(t)
    return _tables_at(shapes[..., None], t, x, np.log(x), interp)


def _tables_at(shapes, t, x, log_x, interp=None, cdf=None):
    """:func:`_log_cdf_and_hazard` of ``shapes`` at nodes ``t`` (with ``x = e^t`` and
    ``ln x``), all broadcast together; ``cdf``: ``F`` at the first nodes, if the caller
    has it (:func:`_chained_cdf`)."""
    pos = shapes > 0
    b = np.where(pos, shapes, 1.0)
    log_pdf = b * t - x - special.gammaln(b)
    n = t.shape[-1] if interp is None else interp.shape[0]
    if cdf is None:
        cdf = _cdf(b, x[..., :n], log_x[..., :n])
    with np.errstate(divide="ignore"):
        log_cdf = np.log(cdf)
    finite = log_cdf > -np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        hazard = np.where(finite & pos, np.exp(log_pdf[..., :n] - log_cdf), 0.0)
    log_cdf = np.maximum(log_cdf, _LOG_FLOOR)
    if interp is not None:
        log_more = _matmul(log_cdf.reshape(-1, n), interp).reshape(*log_cdf.shape[:-1], -1)
        np.minimum(log_more, 0.0, out=log_more)
        with np.errstate(over="ignore"):
            h_more = np.where(pos, np.exp(np.minimum(log_pdf[..., n:] - log_more, np.log(b))), 0.0)
        log_cdf = np.concatenate([log_cdf, np.maximum(log_more, _LOG_FLOOR)], axis=-1)
        hazard = np.concatenate([hazard, h_more], axis=-1)
    return np.where(pos, log_cdf, 0.0), hazard


def _cdf(b, x, log_x):
    """``F_b(x)`` (regularised lower incomplete gamma), broadcast together."""
    # Far in the upper tail F rounds to 1: the Chernoff bound 1 − F ≤ e^{−x} (e x/β)^β
    # (x > β) below 2^-60 says so without evaluating F.
    with np.errstate(divide="ignore"):
        one = (x > b) & (b * (1.0 + log_x - np.log(b)) - x < -60.0 * np.log(2.0))
    cdf = np.ones(np.broadcast_shapes(b.shape, x.shape))
    rest = ~one
    cdf[rest] = special.gammainc(np.broadcast_to(b, cdf.shape)[rest], np.broadcast_to(x, cdf.shape)[rest])
    return cdf


def _chained_cdf(shapes: np.ndarray, at: np.ndarray, x: np.ndarray, log_x: np.ndarray, interp=None) -> np.ndarray:
    """``F_{shapes[i]}`` at the nodes ``x[at[i]]`` of its window (the first ``n`` nodes with
    ``interp``), ``(S, n)``; 1 for shape 0.

    Shapes of one window that differ by a whole number (a column's values ``α_j + y``)
    are chained: with ``d_a(x) = x^a e^{−x} / Γ(a + 1)``, ``F_a = F_{a+1} + d_a``, so
    along a chain ``s_1 < s_2 < … < s_m`` with gaps of at most :data:`_CHAIN_GAP`,
    ``F_{s_i} = F_{s_{i+1}} + Σ_{a = s_i}^{s_{i+1} − 1} d_a``: one incomplete gamma
    function per node at the top of the chain, the others sums of positive terms (no
    cancellation: each keeps its relative precision) of one exponential each, going down.
    """
    n = x.shape[1] if interp is None else interp.shape[0]
    x, log_x = x[:, :n], log_x[:, :n]
    n_shapes = shapes.shape[0]
    cdf = np.ones((n_shapes, n))
    pos = np.flatnonzero(shapes > 0)
    if not pos.size:
        return cdf
    s, win = shapes[pos], at[pos]
    frac = np.mod(s, 1.0)
    order = np.lexsort((s, np.round(frac * 1e9).astype(np.int64), win))
    s, win, pos = s[order], win[order], pos[order]
    gap = np.diff(s)
    steps = np.rint(gap)
    link = ((win[1:] == win[:-1]) & (steps >= 1) & (steps <= _CHAIN_GAP)
            & (np.abs(gap - steps) <= 1e-9 * np.maximum(s[1:], 1.0)))
    top = np.flatnonzero(~np.r_[link, False])
    cdf_sorted = np.empty((s.shape[0], n))
    cdf_sorted[top] = _cdf(s[top, None], x[win[top]], log_x[win[top]])
    low = np.flatnonzero(link)
    if low.size:
        # The terms d_a of every link, a = s_i, s_i + 1, …, s_{i+1} − 1, added up per link.
        count = steps[low].astype(np.int64)
        first = np.cumsum(count) - count
        owner = np.repeat(low, count)
        a = s[owner] + (np.arange(owner.shape[0]) - np.repeat(first, count))
        w = win[owner]
        terms = np.exp(a[:, None] * log_x[w] - x[w] - special.gammaln(a + 1.0)[:, None])
        added = np.add.reduceat(terms, first, axis=0)
        # Down each chain from its top: the shapes just below a top first, then the next, …
        # (depth: the links between a shape and its chain's top).
        index = np.arange(s.shape[0])
        depth = np.minimum.accumulate(np.where(np.r_[link, False], s.shape[0], index)[::-1])[::-1] - index
        row_of = np.empty(s.shape[0], dtype=np.int64)
        row_of[low] = np.arange(low.shape[0])
        by_depth = np.argsort(depth[low], kind="stable")
        bounds = np.searchsorted(depth[low][by_depth], np.arange(1, int(depth.max()) + 2))
        for d in range(int(depth.max())):
            i = low[by_depth[bounds[d]:bounds[d + 1]]]
            cdf_sorted[i] = np.minimum(cdf_sorted[i + 1] + added[row_of[i]], 1.0)
    cdf[pos] = cdf_sorted
    return cdf


@functools.cache
def _interpolation(n: int, m: int) -> np.ndarray:
    """``(n, m)``: values at the ``n`` Gauss-Legendre nodes on [0, 1] times this matrix
    are the values at the ``m``-node rule's nodes of the polynomial through them
    (barycentric Lagrange interpolation)."""
    u_n, _ = _legendre(n)
    u_m, _ = _legendre(m)
    diff = u_n[:, None] - u_n[None, :]
    np.fill_diagonal(diff, 1.0)
    # Barycentric weights 1 / Π_{k≠j} (u_j − u_k), scaled (only their ratios matter).
    lam = 1.0 / np.prod(diff * 4.0, axis=1)
    terms = lam[:, None] / (u_m[None, :] - u_n[:, None])
    return terms / terms.sum(axis=0, keepdims=True)


def _gamma_quadrature(beta: np.ndarray) -> np.ndarray:
    """``P`` for rows with at least three positive classes (not normalised)."""
    rows = _Rows(beta)
    # A few rows start one step finer: a second pass would cost more than it saves.
    rules = (_legendre(_NODES), *_REFINEMENTS)
    first = 1 if len(beta) <= _FEW_ROWS and len(rules) > 1 else 0
    check = _legendre(_CHECK_NODES) if first == 0 else rules[first - 1]
    out, gap = rows.integrate(np.arange(len(beta)), rules[first], check)
    # Rows on which the two rules disagree (a narrow peak in a wide window) are redone
    # with finer rules, each checked against the previous one.
    redo = np.flatnonzero(gap > _QUAD_TOL)
    previous, older = out[redo], None
    for rule in rules[first + 1:]:
        if not redo.size:
            break
        finer, _ = rows.integrate(redo, rule)
        out[redo] = finer
        keep = np.any(np.abs(finer - previous) > _QUAD_TOL, axis=1)
        redo, previous, older = redo[keep], finer[keep], previous[keep]
    if redo.size:
        # The pairs on which the rules still disagree (every live pair, if no refinement
        # was tried) go to adaptive Gauss-Kronrod, each on its own range.
        hard = rows.live[redo] if older is None else np.abs(previous - older) > _QUAD_TOL
        r_hard, c_hard = np.nonzero(hard)
        r_hard = redo[r_hard]
        integrand = _pair_integrand(beta[rows.order[r_hard]], c_hard,
                                    rows.t_start[rows.group[r_hard]])
        out[r_hard, c_hard], _err = integrate.quad_vec(
            lambda u, f=integrand: f(np.array([u]))[:, 0], 0.0, 1.0,
            epsabs=1e-13, epsrel=1e-11, norm="max", limit=2000)
    rank = np.empty_like(rows.order)
    rank[rows.order] = np.arange(len(rank))
    return out[rank]


def _pair_integrand(beta: np.ndarray, cls: np.ndarray, t_lo: np.ndarray):
    """The integrand of ``P_c`` for the given rows of ``beta`` and classes, on each
    pair's range.

    ``integrand(u)`` evaluates every pair at nodes ``u`` of [0, 1], mapped onto
    ``[t_lo, \\ln \\bar F_{β_c}^{-1}(ε)]`` in ``t = ln x`` (``t_lo``: the start of the
    row's window), and returns a ``(len(cls), len(u))`` array whose integral over ``u``
    is ``P_c``.
    """
    b_c = beta[np.arange(len(cls)), cls]
    width = np.maximum(np.log(special.gammainccinv(b_c, _TAIL)) - t_lo, 0.0)
    others = beta.copy()
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


def _composite(n: int, panels: int) -> tuple[np.ndarray, np.ndarray]:
    """``panels`` equal panels of the ``n``-node Gauss-Legendre rule on [0, 1]."""
    u, w = _legendre(n)
    return ((np.arange(panels)[:, None] + u[None, :]) / panels).ravel(), np.tile(w / panels, panels)


# Rows whose rules disagree are redone with these rules in turn, each checked against the
# previous one, before adaptive quadrature takes the pairs left.
_REFINEMENTS = (_legendre(64), _legendre(96), *(_composite(96, panels) for panels in (2, 4, 8)))
