"""The relabel list: which labelled items one more label helps most."""

from __future__ import annotations

import math

import numpy as np

from auditor.stats._validation import StatsInputError
from auditor.stats.certification import (
    BOUNDS,
    _check_choice,
    tie_credit,
)
from auditor.stats.planning.label_model import _distinct, _Population, _population
from auditor.stats.planning.results import RelabelPriority
from auditor.stats.planning.simulation import _Current, _current_sums, _prepare


def _item_gains(counts: np.ndarray, pred: np.ndarray, predictive: np.ndarray, *, bound: str,
                n_u: float, s_u: float, n_l: float) -> np.ndarray:
    """Expected change of L − U from one more label on each item (rows with a label)."""
    m = counts.astype(float)
    k = m.sum(axis=1)
    n_labels = m.shape[1]
    sq = (m * m).sum(axis=1)
    rows = np.arange(m.shape[0])
    cur_credit = tie_credit(m, pred)
    upper = math.sqrt(max(s_u / max(n_u, 1.0), 1e-12))
    gain = np.zeros(m.shape[0])
    for c in range(n_labels):
        after = m.copy()
        after[:, c] += 1.0
        credit = tie_credit(after, pred)
        sq_after = sq + 2.0 * m[:, c] + 1.0
        if bound == "theoretical":
            dx = sq_after / (k + 1.0) ** 2 - sq / k**2
            d_upper = dx / (2.0 * upper * n_u)
        else:
            x_after = (sq_after - (k + 1.0)) / ((k + 1.0) * k)
            with np.errstate(invalid="ignore", divide="ignore"):
                x_now = np.where(k >= 2, (sq - k) / (k * (k - 1.0)), np.nan)
            mean = s_u / max(n_u, 1.0)
            # an item with one label enters the U_e stream: the mean moves by (x − mean)/(n + 1)
            d_mean = np.where(k >= 2, (x_after - x_now) / max(n_u, 1.0), (x_after - mean) / (n_u + 1.0))
            d_upper = d_mean / (2.0 * math.sqrt(max(mean, 1e-12)))
        gain += predictive[rows, c] * ((credit - cur_credit) / n_l - d_upper)
    return gain


def _item_predictive(pop: _Population, counts: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """P(next label = c) for each item: the posterior predictive of its own counts and prediction."""
    out = np.zeros(counts.shape)
    has = counts.sum(axis=1) > 0
    if has.any():
        out[has] = pop.predictive(counts[has], pred[has])
    return out


def relabel_priority(counts, predictions, *, bound: str = "theoretical") -> RelabelPriority:
    """Labelled items ranked by how much one more label is expected to tighten the margin.

    For item :math:`n` with counts :math:`m_n` (:math:`K_n` labels) and prediction
    :math:`d_n`, the next label is :math:`c` with the posterior predictive probability
    :math:`q_{nc} = \\sum_t P(t \\mid m_n, d_n)\\,(\\alpha_{tc} + m_{nc}) / (A_t + K_n)` of the fitted
    label model (see :mod:`auditor.stats.planning`). Its expected effect on the margin
    :math:`L - U` is

    .. math:: g_n = \\sum_c q_{nc}\\Bigl[\\frac{\\mathrm{cr}(m_n + e_c, d_n) - \\mathrm{cr}(m_n, d_n)}{N_l}
              - \\frac{X(m_n + e_c) - X(m_n)}{2 U N_u}\\Bigr]

    (:math:`\\mathrm{cr}` the tie credit behind :math:`L`, :math:`X` the per-item value behind
    :math:`U^2`, to first order in :math:`U`). Items rank by :math:`g_n`, largest first (ties:
    fewer labels first, then row order): items with one label (their :math:`X^t = 1` falls
    most), items whose plurality a label could move onto or off the model's label.

    Caveat: the ranking reads the items' labels, so labels bought this way depend on earlier
    labels of the same items; the bounds assume they do not (see
    :class:`~auditor.stats.AnytimeState`), and the anytime verdict ignores labels that reach
    an item after it entered its stream. The list serves the fixed-sample verdicts and the
    point estimates.

    Parameters
    ----------
    counts : array-like of int, shape (N, L), LabelCounts or Annotations
    predictions : array-like, shape (N,) class indices or (N, L) probabilities
    bound : {"theoretical", "empirical"}
        Which :math:`U` the margin uses.

    Returns
    -------
    RelabelPriority

    Examples
    --------
    Unanimous items the model agrees with come first here: a dissenting label would lower
    :math:`U` and cannot move their plurality, whereas on ``[2, 1]`` and ``[1, 0]`` it
    could make a tie and cost :math:`L` credit.

    >>> r = relabel_priority([[3, 0], [2, 1], [1, 0], [0, 3]] * 25, [0, 0, 0, 1] * 25)
    >>> len(r), r.indices[:3].tolist()
    (100, [0, 4, 8])
    """
    _check_choice(bound, BOUNDS, "bound")
    m, pred = _prepare(counts, predictions)
    pop = _population(m, pred, None, [])
    if pop is None:
        raise StatsInputError("`counts` has no labelled item.")
    return _relabel_rank(pop, m, pred, bound, _current_sums(m, pred))


def _relabel_rank(pop: _Population, m: np.ndarray, pred: np.ndarray, bound: str, cur: _Current) -> RelabelPriority:
    """:func:`relabel_priority` with the fitted model and current sums at hand; the gains are
    computed once per distinct (count vector, prediction) row."""
    su = cur.t if bound == "theoretical" else cur.e
    if float(su.n) == 0:
        raise StatsInputError("the empirical bound needs an item with two labels.")
    labelled = np.flatnonzero(m.sum(axis=1) > 0)
    uniq, _, inv = _distinct(np.column_stack([m[labelled], pred[labelled]]))
    rows, rpred = uniq[:, :-1], uniq[:, -1]
    q = _item_predictive(pop, rows, rpred)
    gain = _item_gains(rows, rpred, q, bound=bound, n_u=float(su.n), s_u=float(su.s), n_l=float(cur.l.n))[inv]
    k = m[labelled].sum(axis=1)
    order = np.lexsort((labelled, k, -np.round(gain, 15)))
    return RelabelPriority(indices=labelled[order], expected_gain=gain[order], labels=k[order], bound=bound)


def _relabel_sums(m: np.ndarray, pred: np.ndarray, pop: _Population, r: int, rng: np.random.Generator) -> dict:
    """Changes of the stream sums from one more label on each of the items ``m``, per simulation:
    each label from the item's posterior predictive, one multinomial per distinct row."""
    n_labels = m.shape[1]
    uniq, mult, _ = _distinct(np.column_stack([m, pred]))
    g_m = uniq[:, :-1].astype(float)
    g_pred = uniq[:, -1]
    g_q = _item_predictive(pop, uniq[:, :-1], g_pred)
    g_q /= g_q.sum(axis=1, keepdims=True)
    draws = rng.multinomial(mult, g_q, size=(r, uniq.shape[0])).astype(float)   # (R, G, L)
    g_k = g_m.sum(axis=1)
    sq = (g_m * g_m).sum(axis=1)
    cr0 = tie_credit(g_m, g_pred)
    xt0 = sq / g_k**2
    with np.errstate(invalid="ignore", divide="ignore"):
        xe0 = np.where(g_k >= 2, (sq - g_k) / (g_k * (g_k - 1.0)), np.nan)
    d = {s: np.zeros((uniq.shape[0], n_labels)) for s in ("t", "tt", "e", "ee", "l", "ll")}
    for c in range(n_labels):
        after = g_m.copy()
        after[:, c] += 1.0
        sq1 = sq + 2.0 * g_m[:, c] + 1.0
        xt1 = sq1 / (g_k + 1.0) ** 2
        xe1 = (sq1 - (g_k + 1.0)) / ((g_k + 1.0) * g_k)
        cr1 = tie_credit(after, g_pred)
        d["t"][:, c], d["tt"][:, c] = xt1 - xt0, xt1**2 - xt0**2
        d["e"][:, c] = xe1 - np.nan_to_num(xe0)
        d["ee"][:, c] = xe1**2 - np.nan_to_num(xe0) ** 2
        d["l"][:, c], d["ll"][:, c] = cr1 - cr0, cr1**2 - cr0**2

    def total(key):
        return np.einsum("rgc,gc->r", draws, d[key])

    n_enter_e = float(mult[g_k == 1].sum())
    z = np.zeros(r)
    return {"t": (z, total("t"), total("tt")), "e": (z + n_enter_e, total("e"), total("ee")),
            "l": (z, total("l"), total("ll"))}
