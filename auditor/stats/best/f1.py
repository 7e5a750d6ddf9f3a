"""The oracle's expected F1 (macro): exact by Poisson-binomial convolutions, with a seeded
Monte Carlo correction (its standard error reported) only where many classes are never gold."""

from __future__ import annotations

import math

import numpy as np
from scipy import fft as sp_fft
from scipy import special

from auditor.stats.best.quadrature import _TAIL

__all__ = []
# F1 (macro) is exact by inclusion-exclusion up to this many never-gold classes that
# the oracle may predict (2^n convolutions); beyond, a Monte Carlo correction.
_MAX_EXACT_NEVER_GOLD = 6
# At most this many (draw, distinct count vector, class) cells for that correction.
_MC_CELL_BUDGET = 5e8


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
