"""Simulated futures: k-label items of a template, stream sums, and the verdict on them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse, special
from scipy.special import logsumexp

from auditor.stats.anytime import _B_MIN, _B_PRIOR, _bet_values
from auditor.stats.certification import (
    _LOG_E_CAP,
    AnytimeState,
    _anytime_log_evalue,
    _as_labels,
    _confidence_many,
    _counts_array,
    _score_of_log_evalue,
    tie_credit,
)
from auditor.stats.confseq import BETS
from auditor.stats.planning.label_model import _INFINITE, _credit_code, _Population

#: Template × composition cells computed exactly; beyond, each template's k-label
#: distribution is estimated from draws.
_EXACT_CELLS = 4_000_000
_SAMPLED_CELLS = 2_000_000


def _compositions(k: int, n_labels: int) -> np.ndarray:
    """All count vectors of ``k`` labels over ``n_labels`` classes, (V, n_labels)."""
    if n_labels == 1:
        return np.array([[k]], dtype=np.int64)
    rows = [np.array([[k]], dtype=np.int64)]
    # stars and bars, column by column: the first c columns hold some of the k labels
    out = np.zeros((1, 0), dtype=np.int64)
    remaining = np.array([k], dtype=np.int64)
    for _ in range(n_labels - 1):
        reps = remaining + 1
        first = np.repeat(out, reps, axis=0)
        values = np.concatenate([np.arange(r) for r in reps])
        out = np.column_stack([first, values])
        remaining = np.repeat(remaining, reps) - values
    del rows
    return np.column_stack([out, remaining])


def _log_pmf(pop: _Population, comps: np.ndarray, k: int, rows_idx: np.ndarray) -> np.ndarray:
    """log P(the template's k-label item has counts ``comps``): (len(rows_idx), V)."""
    m = pop.rows[rows_idx].astype(float)                       # (u, L)
    km = m.sum(axis=1)                                         # (u,)
    v = comps.astype(float)[None, :, :]                         # (1, V, L)
    out = np.full((m.shape[0], comps.shape[0]), -np.inf)
    sub = km >= k
    if sub.any():
        mm = m[sub][:, None, :]
        ok = (v <= mm).all(axis=2)
        with np.errstate(invalid="ignore"):
            lp = (special.gammaln(mm + 1) - special.gammaln(v + 1) - special.gammaln(np.maximum(mm - v, 0) + 1)).sum(2)
        lp -= (special.gammaln(km[sub] + 1) - special.gammaln(k + 1) - special.gammaln(km[sub] - k + 1))[:, None]
        out[sub] = np.where(ok, lp, -np.inf)
    ext = ~sub
    if ext.any():
        mm = m[ext][:, None, :]
        w = v - mm                                               # labels still to draw
        ok = (w >= 0).all(axis=2)
        j = (k - km[ext])[:, None]
        wpos = np.maximum(w, 0.0)
        base = special.gammaln(j + 1) - special.gammaln(wpos + 1).sum(axis=2)
        beta = pop.beta(pop.rows[rows_idx][ext])                  # (u, T, L)
        resp = pop.resp[rows_idx][ext]
        acc = np.full(base.shape, -np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            for t in range(beta.shape[1]):
                if pop.kind[t] == _INFINITE:
                    logp = np.log(pop.mean[t])
                    lp = np.where(wpos > 0, wpos * logp[None, None, :], 0.0).sum(axis=2)
                else:
                    bt = beta[:, t, None, :]
                    b0 = bt.sum(axis=2)
                    pos = bt > 0
                    terms = np.where(pos, special.gammaln(bt + wpos) - special.gammaln(np.where(pos, bt, 1.0)),
                                     np.where(wpos > 0, -np.inf, 0.0))
                    lp = special.gammaln(b0) - special.gammaln(b0 + j) + terms.sum(axis=2)
                acc = np.logaddexp(acc, np.log(resp[:, t])[:, None] + lp)
        out[ext] = np.where(ok, base + acc, -np.inf)
    return out


@dataclass(frozen=True, eq=False)
class _Atoms:
    """Per-item values a new k-label item can take, and each template's distribution over them."""

    x_t: np.ndarray      # (A,)
    x_e: np.ndarray      # (A,) NaN when k < 2
    credit: np.ndarray   # (A,)
    q: np.ndarray        # (U, A) rows sum to 1
    k: int


def _atom_index(sq: np.ndarray, code: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (Σz², credit code) keys, sorted, and each entry's index among them."""
    key = sq.astype(np.int64) * (n_labels + 1) + code.astype(np.int64)
    top = int(key.max()) + 1 if key.size else 1
    if top > 4 * key.size + 1_000_000:
        uniq, inv = np.unique(key, return_inverse=True)
        return uniq, inv.reshape(key.shape)
    # keys are small integers (Σz² ≤ k²): a lookup table instead of a sort
    present = np.zeros(top, dtype=bool)
    present[key.ravel()] = True
    uniq = np.flatnonzero(present)
    lookup = np.cumsum(present) - 1
    return uniq, lookup[key]


def _atom_values(keys: np.ndarray, k: int, n_labels: int):
    sq = (keys // (n_labels + 1)).astype(float)
    code = (keys % (n_labels + 1)).astype(float)
    x_t = sq / (k * k)
    x_e = (sq - k) / (k * (k - 1.0)) if k >= 2 else np.full(sq.shape, np.nan)
    credit = np.divide(1.0, code, out=np.zeros_like(code), where=code > 0)
    return x_t, x_e, credit


def _atoms(pop: _Population, k: int, rng: np.random.Generator) -> _Atoms:
    """The distribution of a new k-label item's (X^t, X^e, credit) under each template."""
    if k in pop.cache:
        return pop.cache[k]
    n_labels = pop.n_labels
    u = pop.rows.shape[0]
    n_comps = math.comb(k + n_labels - 1, n_labels - 1)
    if u * n_comps <= _EXACT_CELLS:
        comps = _compositions(k, n_labels)
        sq = (comps * comps).sum(axis=1)
        code = _credit_code(comps)                                      # (V, L)
        keys, inv = _atom_index(np.repeat(sq[:, None], n_labels, axis=1), code, n_labels)   # inv (V, L)
        q = np.zeros((u, keys.shape[0]))
        step = max(1, _EXACT_CELLS // max(1, n_comps * 4))
        for start in range(0, u, step):
            idx = np.arange(start, min(u, start + step))
            lp = _log_pmf(pop, comps, k, idx)
            pmf = np.exp(lp - lp.max(axis=1, keepdims=True))
            pmf /= pmf.sum(axis=1, keepdims=True)
            cols = inv[:, pop.pred[idx]].T                               # (u, V) atom of each composition
            rows = np.repeat(np.arange(idx.size), n_comps)
            block = sparse.coo_matrix((pmf.ravel(), (rows, cols.ravel())), shape=(idx.size, keys.shape[0]))
            q[idx] = block.toarray()
    else:
        # Too many count vectors to enumerate: draw each template's k-label items.
        s = int(min(1000, max(32, _SAMPLED_CELLS // max(1, u))))
        draws = _draw_items(pop, k, s, rng)                               # (u, s, L)
        sq = np.einsum("usl,usl->us", draws, draws)
        # the credit code of the prediction's class only: number of tied classes if it is among them
        top = draws.max(axis=2)
        mine = np.take_along_axis(draws, np.broadcast_to(pop.pred[:, None, None], (u, s, 1)), axis=2)[..., 0]
        code = np.where(mine == top, (draws == top[..., None]).sum(axis=2), 0)
        keys, inv = _atom_index(sq, code, n_labels)
        cells = (np.arange(u)[:, None] * keys.shape[0] + inv).ravel()
        q = np.bincount(cells, minlength=u * keys.shape[0]).reshape(u, keys.shape[0]) / s
    x_t, x_e, credit = _atom_values(keys, k, n_labels)
    atoms = _Atoms(x_t=x_t, x_e=x_e, credit=credit, q=q, k=k)
    pop.cache[k] = atoms
    return atoms


def _draw_items(pop: _Population, k: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """``s`` draws of each template's k-label count vector: (U, s, L).

    Templates with at least ``k`` labels give ``k`` of their own labels drawn without
    replacement (a multivariate hypergeometric draw); the others all of theirs plus labels
    from the Pólya urn of their posterior (each drawn label joins it), which is a
    Dirichlet-multinomial: label proportions from the posterior Dirichlet of the item's
    class, then a multinomial; the pooled proportions in the ``"infinite"`` regime.
    """
    u, n_labels = pop.rows.shape
    km = pop.k
    out = np.zeros((u, s, n_labels), dtype=np.int64)
    for t in np.flatnonzero(km >= k):
        # "count" is the faster method up to a few thousand labels; "marginals" costs O(L) per draw
        out[t] = rng.multivariate_hypergeometric(pop.rows[t], k, size=s,
                                                 method="count" if km[t] <= 1000 else "marginals")
    ext = np.flatnonzero(km < k)
    if ext.size:
        # the item's class, then label proportions from its posterior (fixed for α → ∞)
        cum = np.cumsum(pop.resp[ext], axis=1)
        x = rng.random((ext.size, s, 1)) * cum[:, None, -1:]
        comp = np.minimum((x >= cum[:, None, :]).sum(axis=2), cum.shape[1] - 1)      # (u, s)
        beta = pop.beta(pop.rows[ext])                                                # (u, T, L)
        shape = beta[np.arange(ext.size)[:, None], comp]                              # (u, s, L)
        fixed = (pop.kind[comp] == _INFINITE)[..., None]
        g = rng.standard_gamma(np.where(fixed, 1.0, shape))
        tot = g.sum(axis=2, keepdims=True)
        p = np.where(fixed, pop.mean[comp], g / np.where(tot > 0, tot, 1.0))
        p /= p.sum(axis=2, keepdims=True)
        todo = np.broadcast_to((k - km[ext])[:, None], (ext.size, s))
        out[ext] = pop.rows[ext][:, None, :] + rng.multinomial(todo, p)
    return out


# --------------------------------------------------------------------------- streams and verdicts


@dataclass(frozen=True)
class _Sums:
    """Count, sum and sum of squares of one stream's values (arrays over simulations)."""

    n: np.ndarray
    s: np.ndarray
    ss: np.ndarray


def _anytime_v(n0, s0, v0, n, s_new, ss_new):
    """The variance process after ``n`` new values appended in random order, in expectation.

    With the stream's state before them (``n0``, ``s0``, ``v0``), the new values' mean
    :math:`\\bar x` and variance :math:`\\sigma^2`, and the predictable centre
    :math:`c_j = (1/2 + s_0 + T_{j-1}) / (n_0 + j)` (:mod:`~auditor.stats.confseq`), a
    uniformly random order gives

    .. math:: E\\sum_j (x_j - c_j)^2 = (\\bar x (n_0+1) - a)^2 H_2
              + \\sigma^2 \\Bigl[n + \\tfrac{2 (n - b H_1)}{n-1}
              + \\tfrac{(n + 2b) H_1 - n - b(n+b) H_2}{n-1}\\Bigr]

    with :math:`a = 1/2 + s_0`, :math:`b = n_0 + 1`, :math:`H_1 = \\sum_j 1/(n_0+j)`,
    :math:`H_2 = \\sum_j 1/(n_0+j)^2` (sampling without replacement from the new values).
    The order's own randomness moves :math:`V` by far less than the e-process can see.
    """
    n = np.asarray(n, dtype=float)
    n0 = np.asarray(n0, dtype=float)
    safe_n = np.maximum(n, 1.0)
    mean = s_new / safe_n
    var = np.maximum(ss_new / safe_n - mean * mean, 0.0)
    a = 0.5 + s0
    b = n0 + 1.0
    h1 = special.digamma(n0 + n + 1.0) - special.digamma(n0 + 1.0)
    h2 = special.polygamma(1, n0 + 1.0) - special.polygamma(1, n0 + n + 1.0)
    nm1 = np.maximum(n - 1.0, 1.0)
    spread = n + 2.0 * (n - b * h1) / nm1 + ((n + 2.0 * b) * h1 - n - b * (n + b) * h2) / nm1
    spread = np.where(n > 1, spread, n)
    out = v0 + (mean * b - a) ** 2 * h2 + var * spread
    return np.where(n > 0, out, v0)


@dataclass(frozen=True, eq=False)
class _Current:
    """The current data as the verdict sees it."""

    anytime: AnytimeState | None
    t: _Sums            # per-item X^t of labelled items (scalars)
    e: _Sums            # X^e of items with two labels
    l: _Sums  # noqa: E741 - the streams are named t, e, l throughout: credit of labelled, predicted items


def _sums_of(x: np.ndarray) -> _Sums:
    x = x[~np.isnan(x)]
    return _Sums(np.asarray(float(x.size)), np.asarray(float(x.sum())), np.asarray(float((x * x).sum())))


def _verdict_scores(cur: _Current, new: dict, *, method: str, bound: str, tau: float, split: float) -> np.ndarray:
    """Scores of the verdict after adding ``new`` to the current data, one per simulated future.

    ``new`` holds the new items' stream sums (``"t"``, ``"e"``, ``"l"``: n, s, ss arrays) and,
    for the betting verdict (``"anytime"``), ``"pairs"``: the distinct (credit, X^t, X^e)
    values a new item can take and how many new items take each in each future (``h``,
    shape (R, A)), as :meth:`~auditor.stats.BettingStream.log_evalue_after` reads them.
    """
    if method == "anytime":
        return _betting_scores(cur.anytime.betting(bound), new["pairs"], bound)
    if method == "anytime-fan":
        return _fan_scores(cur, new, bound=bound, tau=tau, split=split)
    return _fixed_sample_scores(cur, new, method=method, bound=bound, tau=tau)


def _betting_scores(stream, pairs, bound: str) -> np.ndarray:
    """The betting verdict's score after new items given as (credit, X^t, X^e, counts): items
    without the bound's value (one label, empirical bound) do not enter its stream."""
    credit, x_t, x_e, h = pairs
    x = np.asarray(x_t if bound == "theoretical" else x_e, dtype=float)
    ok = np.isfinite(x) & np.isfinite(credit)
    h = np.where(ok, h, 0)
    log_e = _betting_log_evalue_after(stream, np.where(ok, credit, 0.0), np.where(ok, x, 0.0), h)
    score = _score_of_log_evalue(np.minimum(log_e, _LOG_E_CAP))
    # an empty stream has no verdict (as the current one without items)
    return np.where(stream.n + h.sum(axis=-1) > 0, score, np.nan)


#: Segments of the new items' arrival path over which the betting verdict's tangent point is
#: held (equal steps in the new items' share of the running mean).
_PATH_SEGMENTS = 8


def _betting_log_evalue_after(stream, credit: np.ndarray, x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The betting e-process's log :math:`\\max E` once new items arrive, vectorised over futures.

    ``credit`` and ``x`` (A,) are the distinct values a new item can take, ``counts``
    (..., A) how many new items take each in each future. The stream's tangent point
    :math:`b_j` is the square root of the running mean of :math:`x` *before* item
    :math:`j`; with the new items in a random order its expected path is
    :math:`b^2(w) = (1 - w)\\,\\bar x_0 + w\\,\\bar x_{new}`, :math:`w = j / (n_0 + 1 + j)` the new
    items' share (:math:`\\bar x_0` with the stream's prior item). The path is cut into
    :data:`_PATH_SEGMENTS` equal steps in :math:`w`; the items of a step (each new item's
    values with the future's frequencies) are bet with :math:`b` at its midpoint, and the
    largest capital at the steps' ends counts, as the stream's running maximum does.

    Holding :math:`b` at the final mean for every new item (``BettingStream.log_evalue_after``)
    uses hindsight: the tangent touches :math:`\\sqrt{\\theta_U}` exactly, while the stream's
    early new items are bet with the old items' mean. When new items have more labels than
    the old (lower :math:`E X^t`) the stream loses :math:`(\\sqrt{\\theta_U} - b_j)^2 / (2 b_j)` per item
    that the fixed point does not, and the simulated verdict was optimistic (10 labels per
    new item on 3-label data: certified in 93% of futures of actual items where the stream
    did in 90%).
    """
    return _betting_path(stream, credit, x, counts)[0]


def _betting_path(stream, credit: np.ndarray, x: np.ndarray, counts: np.ndarray):
    """:func:`_betting_log_evalue_after`'s log max E, the log capital at the end, and the
    variance of the log capital's increments over the new items (their sum of squared
    deviations, at the end's tangent point and with the bets weighted by their capital at
    the end): what :func:`_betting_certified` needs."""
    counts = np.asarray(counts, dtype=float)
    n_new = counts.sum(axis=-1)
    n0 = 1.0 + stream.n
    x0 = (_B_PRIOR + stream.s_x) / n0
    # one tangent path for every future (the futures' new means differ by their sampling
    # error, which moves the tangent's loss by its square): the bets' log factors are then
    # one (A, bets) table per step, and each future's gain a matrix product
    n_all = float(n_new.mean()) if n_new.size else 0.0
    x_all = float((counts.reshape(-1, x.size) @ x).sum() / max(float(n_new.sum()), 1.0))
    share = counts / np.maximum(n_new, 1.0)[..., None]
    gain = np.zeros((*n_new.shape, BETS.size))
    log_max = np.full(n_new.shape, stream.log_max)
    j_prev = np.zeros(n_new.shape)
    w_end = n_new / (n0 + n_new)
    for s in range(1, _PATH_SEGMENTS + 1):
        w_hi = w_end * s / _PATH_SEGMENTS
        j_hi = np.where(s == _PATH_SEGMENTS, n_new, w_hi * n0 / (1.0 - w_hi))
        w_mid = n_all / (n0 + n_all) * (s - 0.5) / _PATH_SEGMENTS
        b = min(max(math.sqrt(max((1.0 - w_mid) * x0 + w_mid * x_all, 0.0)), _B_MIN), 1.0)
        log_f = np.log1p(np.maximum(_bet_values(credit, x, b, stream.tau), -1.0)[:, None] * BETS)   # (A, bets)
        gain = gain + (share * (j_hi - j_prev)[..., None]) @ log_f
        log_end = logsumexp(stream.log_wealth + gain, axis=-1) - math.log(BETS.size)
        log_max = np.maximum(log_max, log_end)
        j_prev = j_hi
    lw = stream.log_wealth + gain
    bet_w = np.exp(lw - logsumexp(lw, axis=-1, keepdims=True))                              # (..., bets)
    inc = bet_w @ log_f.T                                                                   # (..., A)
    mean_inc = (counts * inc).sum(axis=-1) / np.maximum(n_new, 1.0)
    var = (counts * (inc - mean_inc[..., None]) ** 2).sum(axis=-1)
    return log_max, log_end, var


#: Broadie, Glasserman & Kou's (1997) continuity correction: a walk's discrete steps cross a
#: barrier as a Brownian motion crosses one this many step standard deviations higher.
_BGK = 0.5826
#: The smallest probability of a crossing on the way that counts (below, the future does not certify).
_MIN_CROSSING = 1e-3


def _betting_certified(stream, pairs, bound: str, target: float) -> np.ndarray:
    """The probability that the betting verdict certifies once new items given as (credit,
    X^t, X^e, counts) arrive in a random order, per simulated future.

    The stream's running maximum counts, so a path can cross the threshold
    :math:`c = -\\log(1 - \\text{target})` between its start and its end. Given the
    future's items the order is uniformly random and the log capital's path is, to a good
    approximation, a Brownian bridge from the current log capital :math:`a` to the final
    :math:`b` with the increments' total variance :math:`V`; such a bridge's maximum exceeds
    :math:`c > \\max(a, b)` with probability :math:`\\exp(-2 (c - a)(c - b) / V)` (the
    barrier moved up by the continuity correction of the walk's steps). 1 where the end or an
    earlier maximum has crossed. The end value alone (:func:`_betting_scores`) misses the
    crossings on the way, and was pessimistic: on actual items its log max E was 0.2 to 0.7
    below the stream's.
    """
    credit, x_t, x_e, h = pairs
    x = np.asarray(x_t if bound == "theoretical" else x_e, dtype=float)
    ok = np.isfinite(x) & np.isfinite(credit)
    h = np.where(ok, h, 0)
    log_max, log_end, var = _betting_path(stream, np.where(ok, credit, 0.0), np.where(ok, x, 0.0), h)
    c = min(-math.log1p(-target), _LOG_E_CAP) if target < 1.0 else _LOG_E_CAP
    n_new = h.sum(axis=-1)
    step_sd = np.sqrt(var / np.maximum(n_new, 1.0))
    barrier = c + _BGK * step_sd
    a = stream.log_evalue
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        cross = np.exp(-2.0 * np.maximum(barrier - a, 0.0) * np.maximum(barrier - log_end, 0.0) / var)
    # a crossing less likely than _MIN_CROSSING is no crossing: such futures add under 0.001 to
    # a design's probability, and a design none of whose futures can certify stays at 0
    cross = np.where((var > 0) & (cross >= _MIN_CROSSING), cross, 0.0)
    done = np.maximum(log_max, log_end) >= c
    out = np.where(done, 1.0, np.clip(cross, 0.0, 1.0))
    return np.where(stream.n + n_new > 0, out, 0.0)


def _fan_scores(cur: _Current, new: dict, *, bound: str, tau: float, split: float) -> np.ndarray:
    """The pair of Fan sequences (``"anytime-fan"``) after the new items' sums."""
    up = "t" if bound == "theoretical" else "e"
    st = cur.anytime
    ustream = st.upper_t if up == "t" else st.upper_e
    un, us, uss = new[up]
    ln_, ls, lss = new["l"]
    uv = _anytime_v(ustream.n, ustream.s, ustream.v, un, us, uss)
    lv = _anytime_v(st.lower.n, st.lower.s, st.lower.v, ln_, ls, lss)
    n_u, n_l = ustream.n + un, st.lower.n + ln_
    s_u, s_l = ustream.s + us, st.lower.s + ls
    n_u, n_l, s_u, s_l, uv, lv = np.broadcast_arrays(n_u, n_l, s_u, s_l, uv, lv)
    score = np.full(n_u.shape, -1.0)
    # Where the stream means lie in H0 (L̄ ≤ τ + √Ū), E* ≤ 1 at that point (each bet's gap
    # is 0), so S ≤ 0: not certified, and the search is skipped.
    with np.errstate(invalid="ignore", divide="ignore"):
        live = (n_u > 0) & (n_l > 0) & (s_l / n_l > tau + np.sqrt(np.clip(s_u / n_u, 0.0, None)))
    if live.any():
        log_e = _anytime_log_evalue(n_u[live], s_u[live], uv[live], n_l[live], s_l[live], lv[live],
                                    tau=tau, split=split)
        score[live] = _score_of_log_evalue(log_e)
    return np.where((n_u > 0) & (n_l > 0), score, np.nan)


def _fixed_sample_scores(cur: _Current, new: dict, *, method: str, bound: str, tau: float) -> np.ndarray:
    """The paper's fixed-sample verdicts (``"oms"``, ``"hms"``, ``"bernstein"``) on all the items' sums."""
    up = "t" if bound == "theoretical" else "e"
    cu = cur.t if up == "t" else cur.e
    un, us, uss = (cu.n + new[up][0], cu.s + new[up][1], cu.ss + new[up][2])
    ln_, ls, lss = (cur.l.n + new["l"][0], cur.l.s + new["l"][1], cur.l.ss + new["l"][2])
    ok = (un > 0) & (ln_ > 0)
    un1, ln1 = np.maximum(un, 1.0), np.maximum(ln_, 1.0)
    upper = np.sqrt(np.clip(us / un1, 0.0, 1.0))
    lower = np.clip(ls / ln1, 0.0, 1.0)
    kw = {}
    if method == "bernstein":
        def var(n, s, ss):
            return np.clip((ss - s * s / np.maximum(n, 1.0)) / np.maximum(n - 1.0, 1.0), 0.0, 0.25)
        kw = dict(var_upper=np.where(un > 1, var(un, us, uss), 0.25), var_lower=np.where(ln_ > 1, var(ln_, ls, lss), 0.25))
    score = _confidence_many(lower, upper, un1, ln1, tau=tau, method=method, **kw)
    return np.where(ok, score, np.nan)


def _prepare(counts, predictions):
    m = _counts_array(counts)
    pred = _as_labels(predictions, m.shape[0], m.shape[1])
    return m, pred


def _current_sums(m: np.ndarray, pred: np.ndarray) -> _Current:
    mf = m.astype(float)
    k = mf.sum(axis=1)
    sq = (mf * mf).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        x_t = np.where(k > 0, sq / (k * k), np.nan)
        x_e = np.where(k >= 2, (sq - k) / (k * (k - 1.0)), np.nan)
    cr = tie_credit(mf, pred)
    cr[k == 0] = np.nan
    return _Current(anytime=None, t=_sums_of(x_t), e=_sums_of(x_e), l=_sums_of(cr))


# --------------------------------------------------------------------------- the plan


def _new_sums(atoms: _Atoms, h: np.ndarray) -> dict:
    """What the verdicts read of new items with atom counts ``h`` (R, A): the stream sums
    (n, s, ss) and the (credit, X^t, X^e, counts) pairs of the betting verdict."""
    n = h.sum(axis=1).astype(float)
    out = {"t": (n, h @ atoms.x_t, h @ (atoms.x_t ** 2)), "l": (n, h @ atoms.credit, h @ (atoms.credit ** 2))}
    if atoms.k >= 2:
        out["e"] = (n, h @ atoms.x_e, h @ (atoms.x_e ** 2))
    else:
        z = np.zeros_like(n)
        out["e"] = (z, z, z)
    out["pairs"] = (atoms.credit, atoms.x_t, atoms.x_e, h)
    return out


def _value_atoms(credit: np.ndarray, x_t: np.ndarray, x_e: np.ndarray):
    """Distinct (credit, X^t, X^e) values of actual items (NaN where an item has no such value)
    and each item's index among them."""
    keys = np.nan_to_num(np.column_stack([credit, x_t, x_e]).astype(float), nan=-1.0)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    uniq = np.where(uniq < 0, np.nan, uniq)
    return uniq, inv.ravel()


def _values_new(credit: np.ndarray, x_t: np.ndarray, x_e: np.ndarray, idx: np.ndarray, atoms=None) -> dict:
    """:func:`_new_sums` of actual items: per-item values (credit, X^t, X^e; NaN where an item
    has no such value) and, per simulated future, the indices of the items it draws (R, n);
    ``atoms`` (:func:`_value_atoms` of the values) saves recomputing them."""
    uniq, inv = _value_atoms(credit, x_t, x_e) if atoms is None else atoms
    n_atoms = uniq.shape[0]
    cells = (np.arange(idx.shape[0])[:, None] * n_atoms + inv[idx]).ravel()
    h = np.bincount(cells, minlength=idx.shape[0] * n_atoms).reshape(idx.shape[0], n_atoms)
    out = {}
    for key, x in (("t", uniq[:, 1]), ("e", uniq[:, 2]), ("l", uniq[:, 0])):
        ok = np.isfinite(x) & np.isfinite(uniq[:, 1])
        hk = np.where(ok, h, 0)
        xk = np.where(ok, x, 0.0)
        out[key] = (hk.sum(axis=1).astype(float), hk @ xk, hk @ (xk * xk))
    out["pairs"] = (uniq[:, 0], uniq[:, 1], uniq[:, 2], h)
    return out


#: Ridge on the slope of the probability-vs-margin fit (standardised margin units): keeps the
#: fit finite when the simulated futures separate perfectly at some margin.
_RANGE_RIDGE = 1.0


def _population_margins(pop: _Population, atoms: _Atoms, g: np.ndarray, *, bound: str, tau: float) -> np.ndarray | None:
    """Each simulated population's margin for new k-label items, θ_L − τ − √θ_U: (R,), or None
    when the bound has no value for such items (the empirical bound with one label)."""
    x = atoms.x_t if bound == "theoretical" else atoms.x_e
    if not np.isfinite(x).all():
        return None
    return g @ (atoms.q @ atoms.credit) - tau - np.sqrt(np.maximum(g @ (atoms.q @ x), 0.0))


def _fit_error_sd(pop: _Population, k: int, atoms: _Atoms, refits: list, *, bound: str, tau: float) -> float:
    """The standard deviation of the label model's fitting error in the margin of new k-label
    items: over the refitted bootstrap draws, the margin from the refitted model less the
    margin from the fitted one at the same weights. 0 when no template needs the model (every
    template has at least k labels: k of its own are drawn)."""
    if not refits or not (pop.k < k).any():
        return 0.0
    x = atoms.x_t if bound == "theoretical" else atoms.x_e
    if not np.isfinite(x).all():
        return 0.0
    diffs = []
    for w, fit in refits:
        a2 = _atoms(fit, k, np.random.default_rng(0))
        x2 = a2.x_t if bound == "theoretical" else a2.x_e
        refit = w @ (a2.q @ a2.credit) - math.sqrt(max(float(w @ (a2.q @ x2)), 0.0))
        fixed = w @ (atoms.q @ atoms.credit) - math.sqrt(max(float(w @ (atoms.q @ x)), 0.0))
        diffs.append(refit - fixed)
    return float(np.std(diffs, ddof=1)) if len(diffs) > 1 else 0.0


def _probability_range(theta: np.ndarray | None, cert: np.ndarray, confidence: float,
                       fit_sd: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The probability of certifying at the ends of the margin's confidence interval.

    ``theta`` (R,) are the simulated populations' margins, ``cert`` (D, R) whether each of
    D designs certified in each simulated future. P(certified | margin) is fitted per design
    as a logistic curve in the margin (maximum likelihood, a small ridge on the slope), and
    read at the ``(1 ∓ confidence)/2`` quantiles of ``theta``: the Bayesian bootstrap's
    equal-tailed interval of the margin, whose frequentist coverage is the bootstrap's.
    Given the current data, the chance that the design certifies grows with the true margin,
    so when the interval covers the true margin the range covers that chance. ``fit_sd``, the
    label model's fitting error in the margin (:func:`_fit_error_sd`), widens the interval:
    its ends move out by the factor :math:`\\sqrt{1 + \\sigma_{fit}^2 / \\mathrm{sd}(\\theta)^2}`
    (independent errors add variances).

    The curve itself is fitted to finitely many futures: each end's Monte Carlo error, ``z``
    standard errors of the fitted linear predictor at that end (from the fit's information
    matrix; ``z`` the range's own normal quantile), is added to the margin's half-width on the
    curve's logit scale in quadrature (independent errors add variances), and a design whose
    futures all agree (all certify, or none does) gets the Jeffreys interval of that count
    as its range. More futures, narrower ranges. (Without it the ends of a fixed truth's
    ranges missed the probability of certifying given the data mostly by less than the
    futures resolve: 7 labels from 5 held it in 0.75 of cases, 0.89 within 0.02.)
    """
    y = np.asarray(cert, dtype=float)
    mean = y.mean(axis=1)
    if theta is None or y.shape[1] < 2:
        return mean.copy(), mean.copy()
    sd = float(np.std(theta))
    if not np.isfinite(sd) or sd <= 0.0:
        return mean.copy(), mean.copy()
    z = (theta - theta.mean()) / sd
    q_lo, q_hi = np.quantile(z, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    widen = math.sqrt(1.0 + (fit_sd / sd) ** 2)
    q_lo, q_hi = q_lo * widen, q_hi * widen
    a = special.logit(np.clip(mean, 0.5 / y.shape[1], 1.0 - 0.5 / y.shape[1]))
    b = np.zeros_like(a)
    for _ in range(100):
        p = special.expit(a[:, None] + b[:, None] * z[None, :])
        w = p * (1.0 - p)
        r = y - p
        g_a, g_b = r.sum(axis=1), (r * z).sum(axis=1) - _RANGE_RIDGE * b
        h_aa, h_ab, h_bb = w.sum(axis=1), (w * z).sum(axis=1), (w * z * z).sum(axis=1) + _RANGE_RIDGE
        det = h_aa * h_bb - h_ab * h_ab
        safe = det > 1e-12
        da = np.where(safe, (h_bb * g_a - h_ab * g_b) / np.where(safe, det, 1.0), 0.0)
        db = np.where(safe, (h_aa * g_b - h_ab * g_a) / np.where(safe, det, 1.0), 0.0)
        step = np.maximum(1.0, np.maximum(np.abs(da), np.abs(db)) / 5.0)
        a += da / step
        b += db / step
        if max(np.abs(da).max(), np.abs(db).max()) < 1e-9:
            break
    # the Monte Carlo error of the fitted curve at each end: the linear predictor's standard
    # error from the inverse of the (ridged) information matrix at the fit
    p = special.expit(a[:, None] + b[:, None] * z[None, :])
    w = p * (1.0 - p)
    h_aa, h_ab, h_bb = w.sum(axis=1), (w * z).sum(axis=1), (w * z * z).sum(axis=1) + _RANGE_RIDGE
    det = np.maximum(h_aa * h_bb - h_ab * h_ab, 1e-300)
    k = special.ndtri((1.0 + confidence) / 2.0)

    def se(q):
        return np.sqrt(np.maximum((h_bb - 2.0 * q * h_ab + q * q * h_aa) / det, 0.0))

    eta_lo, eta_hi = a + b * q_lo, a + b * q_hi
    centre = (eta_lo + eta_hi) / 2.0
    half = np.abs(eta_hi - eta_lo) / 2.0
    # the fit is monotone either way; a slope of the wrong sign is noise, the range is still its
    # ends. Each end's Monte Carlo error adds to the margin's in quadrature (independent errors)
    lo_first = eta_lo <= eta_hi
    se_low, se_high = np.where(lo_first, se(q_lo), se(q_hi)), np.where(lo_first, se(q_hi), se(q_lo))
    low = special.expit(centre - np.sqrt(half * half + (k * se_low) ** 2))
    high = special.expit(centre + np.sqrt(half * half + (k * se_high) ** 2))
    r = y.shape[1]
    constant = (mean == 0.0) | (mean == 1.0)
    # every future agreed: the Jeffreys interval of that count
    jeff_high = special.betaincinv(0.5, r + 0.5, (1.0 + confidence) / 2.0)
    low = np.where(constant, np.where(mean == 1.0, 1.0 - jeff_high, 0.0), np.minimum(low, mean))
    high = np.where(constant, np.where(mean == 0.0, jeff_high, 1.0), np.maximum(high, mean))
    # ends closer to 0 or 1 than half a future's share are beyond what the futures resolve
    res = 0.5 / y.shape[1]
    return np.where(low < res, 0.0, low), np.where(high > 1.0 - res, 1.0, high)
