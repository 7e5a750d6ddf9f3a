"""The oracle's expected F1 (macro): exact by Poisson-binomial convolutions, with a seeded
Monte Carlo correction (its standard error reported) only where many classes are never gold.

Every class's TP and FP counts are sums of one binomial term per distinct count vector;
all these sums are convolved together, batched (a dense Bernoulli recursion for count
vectors of few items, then one tree for every sum), so that the cost grows with the
items and classes, not with Python calls per count vector."""

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
# Draws of the Monte Carlo correction: this many times what the pilot's spread says the
# target standard error needs, so that the estimate's own error rarely exceeds the target.
_PILOT_MARGIN = 1.3
# Tails of an intermediate convolution holding less mass than this are cut (summed over
# all cuts, far below ε).
_TRIM = 1e-22
# Single trials are first convolved in blocks of this many, this many pmf values at a time.
_BERNOULLI_BLOCK = 32
_RECURSION_CHUNK = 1 << 16
# Count vectors of at most this many items are expanded into one trial per item; the
# dense matrix of their FP terms is built for this many cells at most at a time.
_EXPAND_MAX_WEIGHT = 32
_DENSE_FP_CELLS = 1 << 23
# Pairs of pieces up to this length are convolved directly in batches; longer ones by
# FFT, in batches or (a few) one by one.
_BATCH_MAX_LENGTH = 64
# Sums of at most this many pieces in all are convolved pair by pair, without batches.
_FEW_PIECES = 128
# At most about this many values convolved in one batch.
_PAIR_CELLS = 1 << 20
# All the pairs of short pieces of a level go in one batch when (pairs × longest²) is at
# most this many per batch saved (a batch costs about as much as that many products);
# pieces up to this length are convolved by a loop over their values.
_BATCH_PRODUCTS = 1 << 16
_LOOP_MAX_LENGTH = 8


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
    """Distribution of ``Σ_r Binomial(w_r, p_r)`` as ``(offset, pmf)``."""
    sums = np.zeros(len(weights), dtype=np.int64)
    offset, pieces = _pieces(weights, probs, sums, 1)
    return _convolve_sums(offset, [pieces])[0]


def _pieces(weights, probs, sums, n_sums):
    """The terms ``Binomial(w_r, p_r)`` of the sums ``sums_r``: the constant part of each
    sum (terms with ``p ≥ 1``) and the other terms as ragged pieces (see
    :func:`_convolve_sums`); single trials convolved in blocks, the others cut to a range
    holding all but ``ε`` of their mass."""
    sums = np.asarray(sums, dtype=np.int64)
    offset = np.bincount(sums, weights=weights * (probs >= 1.0), minlength=n_sums)
    keep = (probs > 0.0) & (probs < 1.0)
    w, p, sums = weights[keep], probs[keep], sums[keep]
    if np.any(sums[1:] < sums[:-1]):
        order = np.argsort(sums, kind="stable")
        w, p, sums = w[order], p[order], sums[order]
    single = w == 1.0
    parts = [_bernoulli_blocks(p[single], sums[single]),
             _binomial_pieces(w[~single], p[~single], sums[~single])]
    return offset.round().astype(np.int64), _join(parts)


def _join(parts):
    """Ragged pieces ``(values, lengths, offsets, sums)`` one after the other."""
    return (np.concatenate([part[0] for part in parts]),
            *(np.concatenate([part[i] for part in parts]).astype(np.int64) for i in (1, 2, 3)))


def _convolve_sums(offset: np.ndarray, parts) -> list[tuple[int, np.ndarray]]:
    """Each sum's distribution ``(offset, pmf)`` from its constant and its pieces.

    ``parts``: a list of ragged pieces ``(values, lengths, offsets, sums)`` (emptied
    here), piece ``i`` the pmf
    ``values[start_i : start_i + lengths[i]]`` of values ``offsets[i], offsets[i] + 1, …``
    (``start_i`` the running total of the lengths), a term of sum ``sums[i]``.

    The pieces of each sum are convolved pairwise, in a tree: level by level, every
    sum's pieces sorted by length and paired, all pairs of every sum and level in a
    few batches of similar lengths (short pieces directly, long ones by FFT), never a
    Python loop per piece. After each level, the tails of a piece holding at most
    ``_TRIM`` of its mass are cut, so that pieces stay as short as the bulk of their
    distribution (the mass cut, summed over every piece, stays far below ε). A few
    pieces in all (``_FEW_PIECES``) are simply convolved pair by pair.
    """
    result = [(int(o), np.ones(1)) for o in offset]
    values, lengths, offsets, sums = _join(parts)
    parts.clear()  # (the caller's pieces: joined, no longer needed)
    starts = np.cumsum(lengths) - lengths
    if len(sums) <= _FEW_PIECES:  # a few pieces: pair by pair (no batching to set up)
        for k in np.unique(sums):
            mine = np.flatnonzero(sums == k)
            mine = mine[np.argsort(lengths[mine], kind="stable")]
            pieces = [(int(offsets[i]), values[starts[i]:starts[i] + lengths[i]]) for i in mine]
            while len(pieces) > 1:
                merged = [(oa + ob, _convolve(a, b))
                          for (oa, a), (ob, b) in zip(pieces[0::2], pieces[1::2], strict=False)]
                pieces = merged + pieces[len(pieces) - len(pieces) % 2:]
            result[k] = (int(offset[k] + pieces[0][0]), pieces[0][1].copy())
        return result
    while len(sums):
        count = np.bincount(sums, minlength=len(offset))
        alone = count[sums] == 1
        for i in np.flatnonzero(alone):
            k = int(sums[i])
            result[k] = (int(offset[k] + offsets[i]), values[starts[i]:starts[i] + lengths[i]].copy())
        if alone.all():
            break
        if alone.any():
            busy = ~alone
            starts, lengths, offsets, sums = starts[busy], lengths[busy], offsets[busy], sums[busy]
        values, starts, lengths, offsets, sums = _tree_level(values, starts, lengths, offsets, sums)
    return result


def _binomial_pieces(w, p, sums):
    """``Binomial(w, p)`` cut to a range holding all but ``ε`` of its mass, as ragged
    ``(values, lengths, offsets, sums)``."""
    # Bernstein's inequality, P(|X − wp| ≥ s) ≤ 2 exp(−s² / (2(wp(1−p) + s/3))), gives
    # the half-width s outside which each binomial has less than ε of its mass.
    log_tail = math.log(2.0 / _TAIL)
    half = log_tail / 3.0 + np.sqrt((log_tail / 3.0) ** 2 + 2.0 * log_tail * w * p * (1.0 - p))
    lo = np.maximum(np.ceil(w * p - half), 0).astype(np.int64)
    hi = np.minimum(np.floor(w * p + half), w).astype(np.int64)
    lengths = hi - lo + 1
    # One vectorised pmf call for every piece; pieces are stored one after the other.
    piece = np.repeat(np.arange(len(w)), lengths)
    within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return _binom_pmf(lo[piece] + within, w[piece], p[piece]), lengths, lo, sums


def _bernoulli_blocks(p, sums):
    """Each sum's ``Bernoulli(p)`` terms (``sums`` sorted) in blocks of ``_BERNOULLI_BLOCK``
    consecutive terms (see :func:`_bernoulli_recursion`)."""
    size_b = _BERNOULLI_BLOCK
    if not len(sums):
        return _bernoulli_recursion(np.zeros((0, size_b)), sums)
    first = np.flatnonzero(np.r_[True, sums[1:] != sums[:-1]])
    size = np.diff(np.r_[first, len(sums)])
    n_blocks = -(-size // size_b)
    # Each sum's terms, padded with p = 0 (a term that is always 0) to whole blocks.
    place = np.arange(len(sums)) + np.repeat(size_b * (np.cumsum(n_blocks) - n_blocks) - first, size)
    probs = np.zeros(size_b * int(n_blocks.sum()))
    probs[place] = p
    return _bernoulli_recursion(probs.reshape(-1, size_b), np.repeat(sums[first], n_blocks))


def _bernoulli_recursion(probs: np.ndarray, sums: np.ndarray):
    """The pmf of ``Σ_k Bernoulli(probs[i, k])`` for each row ``i`` (a term of sum
    ``sums[i]``) by ``P_k(j) = (1 − p_k) P_{k−1}(j) + p_k P_{k−1}(j − 1)``, trimmed, as
    ragged ``(values, lengths, offsets, sums)``."""
    n_rows, size_b = probs.shape
    values, lengths, heads = [np.zeros(0)], [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    step = max(1, _RECURSION_CHUNK // (size_b + 1))  # rows at a time, the pmf in cache
    for lo in range(0, n_rows, step):
        p = np.ascontiguousarray(probs[lo:lo + step].T)
        q = 1.0 - p
        pmf = np.zeros((size_b + 1, p.shape[1]))   # (count, row): each step on whole rows
        pmf[0] = 1.0
        moved = np.empty_like(pmf)
        for k in range(size_b):
            # (row k + 1 is still 0: it only receives the moved mass)
            np.multiply(pmf[:k + 1], p[k], out=moved[:k + 1])
            pmf[:k + 1] *= q[k]
            pmf[1:k + 2] += moved[:k + 1]
        head = np.minimum(np.sum(np.cumsum(pmf, axis=0) <= _TRIM, axis=0), size_b)
        tail = np.sum(np.cumsum(pmf[::-1], axis=0) <= _TRIM, axis=0)
        length = np.maximum(size_b + 1 - head - tail, 1)
        values.append(_ragged(pmf.T.copy(), head, length))
        lengths.append(length)
        heads.append(head)
    return np.concatenate(values), np.concatenate(lengths), np.concatenate(heads), sums


def _ragged(block: np.ndarray, head: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row ``i`` of ``block`` from ``head[i]``, ``lengths[i]`` values, rows one after the other."""
    cols = np.arange(block.shape[1])[None, :]
    return block[(cols >= head[:, None]) & (cols < (head + lengths)[:, None])]


def _gather(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """Pieces ``values[starts[i]:starts[i] + lengths[i]]`` as rows, zero-padded to ``width``."""
    cols = np.arange(width)[None, :]
    idx = np.minimum(starts[:, None] + cols, len(values) - 1)
    return np.where(cols < lengths[:, None], values[idx], 0.0)


def _tree_level(values, starts, lengths, offsets, sums):
    """One level of the tree: each sum's pieces, sorted by length, convolved in pairs."""
    order = np.lexsort((lengths, sums))
    starts, lengths, offsets, sums = starts[order], lengths[order], offsets[order], sums[order]
    first = np.flatnonzero(np.r_[True, sums[1:] != sums[:-1]])
    size = np.diff(np.r_[first, len(sums)])
    pos = np.arange(len(sums)) - np.repeat(first, size)
    seg_size = np.repeat(size, size)
    a = np.flatnonzero((pos % 2 == 0) & (pos + 1 < seg_size))
    b = a + 1
    carry = np.flatnonzero((pos % 2 == 0) & (pos + 1 == seg_size))  # an odd one out waits
    out_values, out_lengths, out_offsets, out_sums = [], [], [], []
    if carry.size:
        width = int(lengths[carry].max())
        block = _gather(values, starts[carry], lengths[carry], width)
        out_values.append(block[np.arange(width)[None, :] < lengths[carry][:, None]])
        out_lengths.append(lengths[carry])
        out_offsets.append(offsets[carry])
        out_sums.append(sums[carry])
    # Batches of pairs whose longer piece has about the same length.
    # (Lengths to 4 apart up to 64, then to a factor 2: little padding, few batches; all
    # the short pairs in one batch when padding them costs less than the batches would.)
    lb = lengths[b]
    bucket = np.where(lb <= 64, (lb + 3) // 4, 16 + np.ceil(np.log2(np.maximum(lb, 64))).astype(np.int64))
    short = lb <= _BATCH_MAX_LENGTH
    if short.any():
        n_buckets = len(np.unique(bucket[short]))
        if n_buckets > 1 and int(short.sum()) * int(lb[short].max()) ** 2 <= _BATCH_PRODUCTS * (n_buckets - 1):
            bucket = np.where(short, 0, bucket)
    order = np.argsort(bucket, kind="stable")
    edges = np.flatnonzero(np.diff(bucket[order])) + 1
    batches = []
    for sel in np.split(order, edges):
        size = max(1, _PAIR_CELLS // (2 * int(lengths[b[sel]].max())))
        batches.extend(sel[i:i + size] for i in range(0, len(sel), size))
    for sel in batches:
        sa, sb = a[sel], b[sel]
        la, lb = lengths[sa], lengths[sb]
        len_a, len_b = int(la.max()), int(lb.max())
        if len_a <= _BATCH_MAX_LENGTH or len(sel) > 8:
            left = _gather(values, starts[sa], la, len_a)
            right = _gather(values, starts[sb], lb, len_b)
            out = _batch_convolve(left, right)
        else:
            out = np.zeros((len(sel), len_a + len_b - 1))
            for k in range(len(sel)):
                i, j = starts[sa[k]], starts[sb[k]]
                out[k, :la[k] + lb[k] - 1] = _convolve(values[i:i + la[k]], values[j:j + lb[k]])
        head, new_len = _trim(out, la + lb - 1)
        out_values.append(_ragged(out, head, new_len))
        out_lengths.append(new_len)
        out_offsets.append(offsets[sa] + offsets[sb] + head)
        out_sums.append(sums[sa])
    lengths = np.concatenate(out_lengths)
    return (np.concatenate(out_values), np.cumsum(lengths) - lengths, lengths,
            np.concatenate(out_offsets), np.concatenate(out_sums))


def _batch_convolve(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-by-row convolutions of two zero-padded matrices."""
    n_a, n_b = left.shape[1], right.shape[1]
    if n_a <= _LOOP_MAX_LENGTH:
        out = np.zeros((left.shape[0], n_a + n_b - 1))
        for i in range(n_a):
            out[:, i:i + n_b] += left[:, i:i + 1] * right
        return out
    if n_a <= _BATCH_MAX_LENGTH:
        # out[r, s] = Σ_i left[r, i] right[r, s − i]: one batched product with a sliding
        # window of the zero-padded right rows.
        padded = np.zeros((left.shape[0], n_b + 2 * (n_a - 1)))
        padded[:, n_a - 1:n_a - 1 + n_b] = right
        window = np.lib.stride_tricks.sliding_window_view(padded, n_a, axis=1)
        return np.matmul(window, left[:, ::-1, None])[:, :, 0]
    size = n_a + n_b - 1
    n_fft = sp_fft.next_fast_len(size, real=True)
    out = np.fft.irfft(np.fft.rfft(left, n_fft, axis=1) * np.fft.rfft(right, n_fft, axis=1),
                       n_fft, axis=1)[:, :size]
    return np.clip(out, 0.0, None)


def _trim(pieces: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The longest head and tail of each row holding at most ``_TRIM`` of mass: returns
    the head's length and the length left."""
    head = np.minimum(np.sum(np.cumsum(pieces, axis=1) <= _TRIM, axis=1), lengths - 1)
    tail = np.sum(np.cumsum(pieces[:, ::-1], axis=1) <= _TRIM, axis=1) - (pieces.shape[1] - lengths)
    tail = np.clip(tail, 0, lengths - head - 1)
    return head, lengths - head - tail


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
    ``E[2 TP/(m + TP + FP)] = Σ_s 2 [(t·p_TP) ∗ p_FP](s) / (m + s)``. Every class's
    two sums are computed together (one tree).
    """
    m = np.bincount(gold, weights=weights, minlength=n_classes)
    gold_classes = np.flatnonzero(m > 0)
    g = len(gold_classes)
    column = np.full(n_classes, -1)
    column[gold_classes] = np.arange(g)
    # Sum k: TP of the k-th gold class c, from each gold-c item; sum g + k: its FP, from
    # every other item. Count vectors shared by a few items are expanded into one trial
    # per item, whose terms are single trials: those with p = 1 only shift their sum
    # (counted in its offset), those with p = 0 are left out, the others are convolved
    # in blocks of consecutive trials; the other terms are binomials.
    # (A few count vectors: each a binomial term, no expansion.)
    few = len(weights) * (g + 1) <= _FEW_PIECES
    expand = (weights <= _EXPAND_MAX_WEIGHT) & (not few)
    trial = np.repeat(np.flatnonzero(expand), weights[expand].astype(np.int64))
    tp_sum = column[gold[trial]]
    by_sum = np.argsort(tp_sum, kind="stable")
    offset = np.zeros(2 * g, dtype=np.int64)
    p_tp, s_tp = probs[trial, gold[trial]][by_sum], tp_sum[by_sum]
    offset += np.bincount(s_tp[p_tp >= 1.0], minlength=2 * g)
    mid = (p_tp > 0.0) & (p_tp < 1.0)
    parts = [_bernoulli_blocks(p_tp[mid], s_tp[mid])]
    step = max(1, _DENSE_FP_CELLS // max(1, len(trial)))
    for k0 in range(0, g, step):
        cls = gold_classes[k0:k0 + step]
        # (class, trial) in class order: each class's FP terms, its own items' left out.
        p_fp = probs[trial][:, cls].T
        p_fp[column[gold[trial]][None, :] == k0 + np.arange(len(cls))[:, None]] = 0.0
        sums = g + k0 + np.repeat(np.arange(len(cls)), len(trial))
        p_fp = p_fp.ravel()
        offset += np.bincount(sums[p_fp >= 1.0], minlength=2 * g)
        mid = (p_fp > 0.0) & (p_fp < 1.0)
        parts.append(_bernoulli_blocks(p_fp[mid], sums[mid]))
        del p_fp
    several = np.flatnonzero(~expand)
    if several.size:
        cls, idx = np.nonzero(probs[several][:, gold_classes].T > 0)
        idx = several[idx]
        is_fp = gold[idx] != gold_classes[cls]
        offset_several, pieces = _pieces(weights[idx], probs[idx, gold_classes[cls]],
                                         cls + g * is_fp, 2 * g)
        offset += offset_several
        parts.append(pieces)
    dists = _convolve_sums(offset, parts)
    parts_f1 = {}
    for k, c in enumerate(gold_classes):
        (off_t, p_t), (off_f, p_f) = dists[k], dists[g + k]
        tp = (off_t + np.arange(len(p_t))) * p_t
        s = off_t + off_f + np.arange(len(p_t) + len(p_f) - 1)
        parts_f1[int(c)] = float(np.sum(2.0 * _convolve(tp, p_f) / (m[c] + s)))
    return m, parts_f1


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
    draws: a pilot batch sets how many draws a standard error of ``target_se`` needs,
    and the estimate and its standard error come from that many fresh draws.
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
    w_int = weights.astype(np.int64)

    def differences(size):
        draws = rng.multinomial(w_int, probs, size=(size, n_rows))    # (B, R, K)
        k = draws.sum(axis=1)
        tp = np.einsum("brk,rk->bk", draws, onehot)
        s = np.sum(2.0 * tp[:, gold_classes] / (m[gold_classes] + k[:, gold_classes]), axis=1)
        j = np.sum(k[:, never_gold] > 0, axis=1)
        return -s * j / (g * (g + j))

    # The work per draw grows with the distinct count vectors: bound the total too.
    max_draws = min(max_draws, max(1000, int(_MC_CELL_BUDGET // (n_rows * n_classes))))
    # Two stages: a pilot batch measures the spread of the differences and so fixes how
    # many draws the estimate needs (with a margin); the estimate and its standard error
    # come from those draws alone. (Stopping as soon as the running standard error looks
    # small enough would understate it: the stop would favour draws that happen to vary
    # little, and the error would cover the exact value less often than it says.)
    pilot = differences(min(batch, max_draws))
    need = _PILOT_MARGIN * float(np.var(pilot, ddof=1)) / target_se**2 if pilot.size > 1 else math.inf
    n_draws = int(min(max_draws, max(1000, math.ceil(need))))
    total, total_sq, drawn = 0.0, 0.0, 0
    while drawn < n_draws:
        diff = differences(min(batch, n_draws - drawn))
        total += diff.sum()
        total_sq += np.sum(diff**2)
        drawn += diff.shape[0]
    mean = total / drawn
    var = max(total_sq - drawn * mean**2, 0.0) / (drawn - 1)
    se = math.sqrt(var / drawn)
    if var == 0.0:
        # No draw predicted a never-gold class: the correction is 0 here, and at 95% such an
        # event has probability at most 3 / n (the rule of three), each costing at most
        # |S / (g + J) − S / g| ≤ J / (g + J).
        se = 3.0 / drawn * n_never / (g + n_never) / 1.96
    method = f"exact + Monte Carlo correction ({drawn} draws)"
    return exact + mean, se, method
