"""The exact power curve of an anonymous combiner under an item-decomposable scorer.

With an anonymous combiner (its prediction depends on the k labels only through their
count vector y) and a scorer that is a mean of per-item terms (agreement,
cross-entropy), the paper's expectation over rater subsets and reference raters is a
finite sum per item: for an item with count vector m (n = |m| labels),

    e_k(m) = Σ_{y ≤ m, |y| = k} H(y; m, k) Σ_l (m_l − y_l)/(n − k) · s(pred(y), l),

with H the multivariate hypergeometric probability Π_l C(m_l, y_l) / C(n, k) of seeing
sub-counts y among k of the item's labels drawn without replacement, and the second
factor the chance that a held-out reference label is l. It depends on the item only
through m, so c_k = Σ_m w_m e_k(m) / Σ_m w_m [n_m ≥ k + 1] over the histogram of
distinct count vectors (w_m items each). This is the all-subsets case of the paper's
Algorithm 3 (and the limit of its 200-subset sampling).

With reference raters (amateur vs expert, §7), the item's key is the pair (pool counts
a, reference counts r), k ranges over 0..|a| and the reference label is drawn from r.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

from auditor.lru import LRU
from auditor.stats.counts import row_histogram
from auditor.stats.equivalence.combiners import (
    ABCModel,
    abc_from_totals,
    clip_probabilities,
    predict_columns,
)
from auditor.stats.equivalence.scorers import label_scores_columns
from auditor.stats.equivalence.subcounts import (
    _abc_by_size,
    _abc_by_size_ok,
    _Block,
    _count_dtype,
    _enumerate,
    _pairs_per_size,
    _plurality_terms,
)
from auditor.stats.validation import StatsInputError


@dataclass(frozen=True)
class ExactTables:
    """Per distinct key: expected item score ``E[u, k]`` and eligibility ``A[u, k]``."""

    keys: np.ndarray          # (U, L) pool counts, or (U, 2L) pool then reference counts
    multiplicity: np.ndarray  # (U,)
    inverse: np.ndarray       # (N,) key row of each item
    expected: np.ndarray      # (U, n_k)
    eligible: np.ndarray      # (U, n_k) float 0/1
    per_label: np.ndarray | None = None  # (U, n_k, L): columns mode, score given reference label l
    #: (U, n_k): the variance of each ``expected`` entry where it is a Monte Carlo mean
    #: (:func:`sampled_tables`); None where the tables are exact.
    variance: np.ndarray | None = None
    #: (U,): keys whose rows (expected, eligible) are the same share a number here (keys
    #: that are permutations of each other, for the label-symmetric combiners), so that a
    #: bootstrap may draw these groups instead of the keys; None: every key its own.
    groups: np.ndarray | None = None

    def point_errors(self, weights: np.ndarray) -> np.ndarray | None:
        """Standard errors of the curve's points c_k = Σ w·expected / Σ w·eligible for the
        per-key weights ``weights`` (the items of each key), where the tables are Monte Carlo
        means (None where they are exact): the keys' draws are independent. 0 where c_k is
        undefined."""
        if self.variance is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            err = np.sqrt(weights ** 2 @ self.variance) / (weights @ self.eligible)
        err[~np.isfinite(err)] = 0.0
        return err


#: Curves up to this many raters are computed at every k; longer ones (items with very
#: many labels) at every k up to SMALL_K and then at GRID_POINTS geometrically spaced k
#: up to the last (:func:`k_grid`).
DENSE_K = 40
SMALL_K = 20
GRID_POINTS = 16


def k_grid(k_max: int) -> np.ndarray:
    """The numbers of raters a curve up to ``k_max`` is computed at.

    Every k when ``k_max`` ≤ :data:`DENSE_K`; beyond, every k ≤ :data:`SMALL_K` (where
    survey equivalences of classifiers fall in practice and the curve bends most), then
    :data:`GRID_POINTS` k spaced geometrically up to ``k_max`` (which is included).
    The work of the exact path grows with the number of sub-count vectors of each size
    computed, so this bounds it on items with hundreds of labels.
    """
    if k_max <= DENSE_K:
        return np.arange(k_max + 1)
    tail = np.rint(np.geomspace(SMALL_K, k_max, GRID_POINTS + 1)).astype(np.int64)
    return np.unique(np.concatenate([np.arange(SMALL_K + 1), tail, [k_max]]))


# Sub-count vectors handled at once (an upper bound per block): bounds the working memory of
# the exact path, and small blocks keep its arrays in the CPU caches and the allocator's reuse
# (measured on CIFAR-10H's plurality curve: 6.1 s at 250,000, 4.2–4.4 s at 40,000–50,000 when
# the blocks were sized by the bound; counted exactly on the k grid, 100,000: CIFAR-10H the
# same, 20k items × 100 labels × 3 classes 0.71 s instead of 1.03 s).
_PAIRS_PER_BLOCK = 100_000


def _key_blocks(counts: np.ndarray) -> list[np.ndarray]:
    """Consecutive blocks of keys with about ``_PAIRS_PER_BLOCK`` sub-count vectors each,
    from each key's number of them (``counts``, as :func:`_pairs_per_key` counts them
    exactly, on the k grid of long curves too: a bound such as min(Π_l (u_l + 1),
    C(top + L, L)) would overstate it several times over, items with 100 labels about 5×,
    and make the blocks that much smaller)."""
    blocks, start, acc = [], 0, 0.0
    for i, b in enumerate(counts):
        if acc and acc + b > _PAIRS_PER_BLOCK:
            blocks.append(np.arange(start, i))
            start, acc = i, 0.0
        acc += b
    blocks.append(np.arange(start, len(counts)))
    return blocks


#: Cells of the per-size counts computed at once by :func:`_pairs_per_key`.
_SIZE_CELLS = 1 << 20


def _log_comb(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def exact_tables(pool: np.ndarray, reference: np.ndarray | None, *, combiner: str, scorer: str,
                 k_max: int, prior: np.ndarray, model: ABCModel | None, clip: float,
                 slots: int | None = None, ks: np.ndarray | None = None,
                 rng: np.random.Generator | None = None) -> ExactTables:
    """Expected per-item scores e_k(key) for k = 0..k_max (or the k in ``ks``) on the histogram of keys.

    With ``slots`` = K rater columns (``raters="columns"``), k counts columns of the
    matrix, as the paper's package does on a matrix with empty cells: the reference
    label l sits in one of the item's columns, the k chosen columns are among the other
    K − 1 and show the item j ~ Hypergeometric(K − 1, n − 1, k) of its other labels,
    y ~ Hypergeometric(m − e_l, j). ``per_label[u, k, l]`` is then the expected score
    given reference label l: Σ_j P(j | k) f_j(m, l), using
    H(y; m, j) (m_l − y_l)/(n − j) = (m_l / n) H(y; m − e_l, j).
    """
    n_labels = pool.shape[1]
    keys_all = pool if reference is None else np.hstack([pool, reference])
    keys, mult, inverse = row_histogram(keys_all)
    # The tables depend on the data only through its distinct keys (and, for the ABC, how
    # many items have each; for the frequency combiner, its prior): a power curve and the
    # survey equivalences of several releases on the same items share one computation.
    digest = _digest(keys, mult if combiner == "abc" else None, prior if combiner == "frequency" else None,
                     reference is None, combiner, scorer, k_max, clip, slots,
                     None if ks is None else np.asarray(ks, dtype=np.int64))
    found = _TABLES.get(digest)
    if found is not None:
        expected, eligible, per_label, groups = found
        return ExactTables(keys, mult.astype(np.int64), inverse, expected, eligible, per_label, groups=groups)
    # Every combiner but the ABC, scored against a label held out of the item's own, is
    # symmetric in the labels (the frequency combiner up to its prediction from no labels):
    # keys that are permutations of each other have the same expected scores, so the
    # tables are computed once per sorted key (ChaosNLI SNLI's 832 keys are 414 sorted
    # ones; 4,708 keys of 3 classes and 100 labels, 884; 53,912 of 10 classes and 10
    # labels, 41) and each key's rows read from its sorted one's.
    symmetric = reference is None and model is None and slots is None and combiner in MC_COMBINERS
    if symmetric:
        sorted_keys, _, sorted_of = row_histogram(np.sort(keys, axis=1))
        symmetric = sorted_keys.shape[0] < keys.shape[0]
    work = sorted_keys if symmetric else keys
    pairs = _pairs_per_key(work[:, :n_labels], reference is None, k_max=k_max, slots=slots, ks=ks)
    cost = float(pairs.sum())
    if cost > MAX_SUB_COUNTS and rng is not None and combiner in MC_COMBINERS and slots is None:
        return sampled_tables(pool, reference, combiner=combiner, scorer=scorer, k_max=k_max, prior=prior,
                              clip=clip, ks=ks, rng=rng)
    if cost > MAX_SUB_COUNTS:
        raise StatsInputError(
            f"the exact {combiner} curve would sum over {cost:.3g} sub-count vectors (items with many labels "
            f"spread over many classes), above the limit of {MAX_SUB_COUNTS:.0e}: hours of work"
            f"{'' if combiner in MC_COMBINERS else ' (the ABC has no Monte Carlo path: its model is these sums)'}. "
            "Use method='sampling' (rater subsets) on a rating matrix, a smaller `max_k`, or fewer labels per item.")
    if symmetric:
        inner = _exact_tables(sorted_keys, np.ones(sorted_keys.shape[0]), np.arange(sorted_keys.shape[0]),
                              n_labels, True, combiner=combiner, scorer=scorer, k_max=k_max, prior=prior,
                              model=None, clip=clip, slots=None, ks=ks, pairs=pairs)
        expected = inner.expected.take(sorted_of, axis=0)
        groups = sorted_of
        if combiner == "frequency":
            column = _frequency_from_no_labels(expected, keys, ks, scorer, prior, clip)
            if column is not None:  # keys of one sorted key differ in their column k = 0
                groups = row_histogram(np.column_stack([sorted_of.astype(float), expected[:, column]])).inverse
        tables = ExactTables(keys, mult.astype(np.int64), inverse, expected, inner.eligible.take(sorted_of, axis=0),
                             groups=groups)
    else:
        tables = _exact_tables(keys, mult, inverse, n_labels, reference is None, combiner=combiner,
                               scorer=scorer, k_max=k_max, prior=prior, model=model, clip=clip, slots=slots,
                               ks=ks, pairs=pairs)
    if tables.expected.nbytes * (1 + (tables.per_label is not None) * n_labels) <= _CACHE_BYTES:
        shared = (tables.expected, tables.eligible, tables.per_label, tables.groups)
        for a in shared:
            if a is not None:
                a.flags.writeable = False  # handed to every later caller: nobody may change them
        _TABLES.put(digest, shared)
    return tables


def _frequency_from_no_labels(expected: np.ndarray, u: np.ndarray, ks: np.ndarray | None, scorer: str,
                              prior: np.ndarray, clip: float) -> int | None:
    """The column k = 0 of the frequency combiner's table (self-referenced), written in
    place; returns its index (None when k = 0 is not computed).

    From no labels the combiner predicts the overall label frequencies ``prior`` for every
    item, and the held-out label is label l with chance u_l / n. This is the one column of
    its table that is not symmetric in the labels: the others are computed on sorted keys."""
    columns = np.flatnonzero((np.arange(1) if ks is None else np.asarray(ks)) == 0)
    if columns.shape[0] == 0:
        return None
    pred = clip_probabilities(np.asarray(prior, dtype=float).reshape(-1, 1).copy(), clip, axis=0, inplace=True)
    score = label_scores_columns(scorer, pred, inplace=True)[:, 0]            # (L,)
    n = u.sum(axis=1)
    with np.errstate(invalid="ignore"):
        terms = np.where(u > 0, u * score[None, :], 0.0)                     # 0 · log 0 = 0
    expected[:, columns[0]] = np.where(n > 0, terms.sum(axis=1) / np.maximum(n, 1), 0.0)
    return int(columns[0])


def _winners_share(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Plurality scored by agreement: per pair (columns of ``y``, (L, P)), the reference
    counts ``ref`` of the tied winners argmax_l y_l, shared among them."""
    win = y == y.max(axis=0)
    return np.where(win, ref, 0).sum(axis=0) / win.sum(axis=0)


def _reference_terms(scorer: str, pred: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(L, P): each label's score of the predictions ``pred`` (may be overwritten) times its
    reference count ``ref`` (0 · log 0 = 0 for a label no reference rater gave)."""
    if scorer == "cross_entropy":
        # Only the labels some reference rater gave: most cells of items with many classes
        # have none, and the logarithm is most of the cost.
        terms = np.zeros(pred.shape)
        with np.errstate(divide="ignore"):
            np.log2(pred, out=terms, where=ref > 0)
        terms *= ref
        return terms
    terms = label_scores_columns(scorer, pred, inplace=True)
    terms *= ref
    return terms


def _eligible(n_u: np.ndarray, ks: np.ndarray, ref_counts: np.ndarray | None) -> np.ndarray:
    """(U, n_k) 0/1: items with k + 1 labels (k and one held out), or with k pool labels and
    a reference label (``ref_counts``)."""
    js = ks[None, :]
    if ref_counts is None:
        return (n_u[:, None] >= js + 1).astype(float)
    return ((n_u[:, None] >= js) & (ref_counts.sum(axis=1)[:, None] >= 1)).astype(float)


#: The most sub-count vectors (pairs of a key and a y ≤ it) the exact path sums over: about
#: 10 s for plurality, a minute for the ABC. Beyond it (items with ~100 labels spread over
#: 10 or more classes: 10¹¹ and more), :func:`exact_tables` refuses with a clear error
#: rather than run for hours.
MAX_SUB_COUNTS = 200_000_000


def exact_cost(pool_keys: np.ndarray, self_ref: bool, *, k_max: int, slots: int | None = None,
               ks: np.ndarray | None = None) -> float:
    """How many sub-count vectors the exact path would enumerate for these distinct pool
    count vectors (as :func:`exact_tables` with the same arguments): Σ over keys of the
    y ≤ u with |y| among the k computed, by :func:`_pairs_per_size` (a few passes over
    the keys, no enumeration)."""
    return float(_pairs_per_key(pool_keys, self_ref, k_max=k_max, slots=slots, ks=ks).sum())


def _pairs_per_key(pool_keys: np.ndarray, self_ref: bool, *, k_max: int, slots: int | None = None,
                   ks: np.ndarray | None = None) -> np.ndarray:
    """(U,): the sub-count vectors of each key that the exact path enumerates (the terms of
    :func:`exact_cost`; :func:`_key_blocks` sizes its blocks by them)."""
    if pool_keys.shape[0] == 0:
        return np.zeros(0)
    n_u = pool_keys.sum(axis=1)
    k_lab = k_max if slots is None else int(n_u.max()) - 1
    top = np.minimum(n_u - 1 if self_ref else n_u, k_lab)
    k_hi = int(max(top.max(initial=0), 0))
    wanted = np.arange(k_hi + 1) if ks is None or slots is not None else np.asarray(ks, dtype=np.int64)
    wanted = wanted[wanted <= k_hi]
    out = np.empty(pool_keys.shape[0])
    step = max(1, _SIZE_CELLS // (k_hi + 1))
    for lo in range(0, pool_keys.shape[0], step):
        out[lo:lo + step] = _pairs_per_size(pool_keys[lo:lo + step], top[lo:lo + step], k_hi)[:, wanted].sum(axis=1)
    return out


#: Combiners whose tables have a Monte Carlo path beyond MAX_SUB_COUNTS (the ABC's model is
#: itself a sum over every sub-count vector of the data: it has none).
MC_COMBINERS = ("plurality", "majority", "frequency")
# Sampled (key, draw, k) cells of the Monte Carlo path, and its draws per key (at least
# _MC_MIN_DRAWS: the variance of each key's mean is estimated from its own draws).
_MC_CELLS_TOTAL = 20_000_000
_MC_MIN_DRAWS, _MC_MAX_DRAWS = 64, 4096
# (draw, position) cells of the label sequences shuffled at once.
_MC_BLOCK = 1 << 21


def sampled_tables(pool: np.ndarray, reference: np.ndarray | None, *, combiner: str, scorer: str, k_max: int,
                   prior: np.ndarray, clip: float, ks: np.ndarray | None, rng: np.random.Generator) -> ExactTables:
    """:func:`exact_tables` by Monte Carlo, for data whose exact sums are out of reach.

    Each distinct key (count vector m, n labels) gets D random orderings of its labels
    (seeded by ``rng``, vectorised: ``Generator.permuted`` along the rows); the first k
    labels of an ordering are a uniform k-subset, so one ordering gives a draw y(k) ~
    H(·; m, k) for every k at once. Each draw's term is the exact path's term for that
    y (the held-out or reference label's expectation given y, no further sampling), and
    ``expected[u, k]`` is their mean over the D orderings: unbiased, with ``variance``
    the variance of that mean (the draws' sample variance / D). D = 20,000,000 cells /
    (keys × k), between 64 and 4,096.
    """
    n_labels = pool.shape[1]
    self_ref = reference is None
    keys, mult, inverse = row_histogram(pool if self_ref else np.hstack([pool, reference]))
    u = keys[:, :n_labels]
    n_u = u.sum(axis=1)
    top = np.minimum(n_u - 1 if self_ref else n_u, k_max)
    ks = np.arange(k_max + 1) if ks is None else np.asarray(ks, dtype=np.int64)
    n_keys, n_j = keys.shape[0], ks.shape[0]
    draws = int(np.clip(_MC_CELLS_TOTAL // max(1, n_keys * n_j), _MC_MIN_DRAWS, _MC_MAX_DRAWS))
    ref_counts = None if self_ref else keys[:, n_labels:]
    hard = combiner in ("majority", "plurality") and scorer == "agreement"
    n_max = max(int(n_u.max(initial=0)), 1)
    u_t = np.ascontiguousarray(u.T.astype(_count_dtype(u)))
    total = np.zeros(n_keys * n_j)
    total_sq = np.zeros(n_keys * n_j)
    pos = np.arange(n_max)
    # The label at rank r of an ordering is among the first k for every k > r: it counts
    # from the first column j with ks[j] ≥ r + 1 on (n_j: beyond every k computed).
    first_col = np.searchsorted(ks, pos + 1)
    dtype = _count_dtype(u)
    # Cells per draw: its shuffled labels, and its sub-counts (every label at every k).
    per_chunk = max(1, _MC_BLOCK // (draws * max(n_max, n_j * n_labels)))
    for lo in range(0, n_keys, per_chunk):
        kk = np.arange(lo, min(lo + per_chunk, n_keys))
        # Each key's labels in class order (padding: class n_labels), then D shuffles of them
        # (padding shuffled in too: the labels' own order is uniform all the same).
        base = (pos[None, :, None] >= np.cumsum(u[kk], axis=1)[:, None, :]).sum(axis=2)
        row_key = np.repeat(np.arange(kk.shape[0]), draws)
        seq = rng.permuted(base[row_key], axis=1)
        n_rows = seq.shape[0]
        if (n_u[kk] < n_max).any():
            real = seq != n_labels
            rank = np.cumsum(real, axis=1)
            rank -= 1
            col = np.where(real, first_col.take(np.maximum(rank, 0)), n_j)
        else:
            col = np.broadcast_to(first_col, seq.shape)
        # Each label's count per (draw, column it enters), then added up over the columns:
        # (label, draw, column), so that the cells of the pairs are each label's row.
        cell = (seq * n_rows + np.arange(n_rows)[:, None]) * (n_j + 1) + col
        hist = np.bincount(cell.ravel(), minlength=(n_labels + 1) * n_rows * (n_j + 1))
        y_all = np.cumsum(hist.reshape(n_labels + 1, n_rows, n_j + 1)[:n_labels, :, :n_j], axis=2, dtype=dtype)
        valid = (ks[None, :] <= top[kk][row_key][:, None])
        r_idx, j_idx = np.nonzero(valid)
        y = y_all.reshape(n_labels, n_rows * n_j)
        if r_idx.shape[0] < n_rows * n_j:
            y = y[:, valid.ravel()]                                              # (L, P)
        owner = kk[row_key[r_idx]]
        k = ks[j_idx]
        rest = u_t.take(owner, axis=1)
        rest -= y
        ref = rest if self_ref else ref_counts[owner].T
        norm = (n_u[owner] - k) if self_ref else ref_counts[owner].sum(axis=1)
        if hard:
            value = _winners_share(y, ref)
        else:
            pred = predict_columns(combiner, y, None, prior=prior, model=None, clip=clip, rest=rest)
            value = _reference_terms(scorer, pred, ref).sum(axis=0)
        value /= np.maximum(norm, 1)
        index = owner * n_j + j_idx
        total += np.bincount(index, weights=value, minlength=n_keys * n_j)
        total_sq += np.bincount(index, weights=value * value, minlength=n_keys * n_j)
    mean = total / draws
    variance = np.maximum(total_sq / draws - mean * mean, 0.0) / (draws - 1)
    return ExactTables(keys, mult.astype(np.int64), inverse, mean.reshape(n_keys, n_j),
                       _eligible(n_u, ks, ref_counts), variance=variance.reshape(n_keys, n_j))


def clear_table_cache() -> None:
    """Forget the tables kept for reuse (they are recomputed on the next call)."""
    _TABLES.clear()


#: Tables of recent calls kept for reuse (each at most _CACHE_BYTES).
_TABLES = LRU(8)
_CACHE_BYTES = 64 << 20


def _digest(*parts) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(str((part.dtype.str, part.shape)).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(repr(part).encode())
        h.update(b"|")
    return h.digest()


#: Pairs whose predictions are computed at once on the ABC's size-ordered path (its (L, P)
#: arrays stay in the CPU caches).
_SLICE = 8_192


def _exact_tables(keys, mult, inverse, n_labels: int, self_ref: bool, *, combiner: str, scorer: str,
                  k_max: int, prior, model, clip: float, slots, ks, pairs: np.ndarray | None = None) -> ExactTables:
    """The tables of :func:`exact_tables` on these keys (``pairs``: each key's number of
    sub-count vectors, from :func:`_pairs_per_key`, if counted already)."""
    u = keys[:, :n_labels]
    if pairs is None:
        pairs = _pairs_per_key(u, self_ref, k_max=k_max, slots=slots, ks=ks)
    n_u = u.sum(axis=1)
    k_lab = k_max if slots is None else int(n_u.max()) - 1
    top = np.minimum(n_u - 1 if self_ref else n_u, k_lab)
    # The k computed (``ks``, a grid for curves with very many labels; every k otherwise)
    # and each one's column.
    ks = np.arange(k_lab + 1) if ks is None or slots is not None else np.asarray(ks, dtype=np.int64)
    n_j = ks.shape[0]
    column = np.full(k_lab + 1, -1, dtype=np.int64)
    column[ks] = np.arange(n_j)
    sizes = None if n_j == k_lab + 1 else ks
    n_keys = keys.shape[0]
    u_cols_ref = None if self_ref else np.ascontiguousarray(keys[:, n_labels:].T)
    ref_n = None if self_ref else keys[:, n_labels:].sum(axis=1)
    expected = np.zeros((n_keys, n_j))
    per_label = np.zeros((n_keys, n_j, n_labels)) if slots is not None else None
    # log k! for every count that occurs: table lookups instead of gammaln per sub-vector.
    lf = gammaln(np.arange(int(n_u.max(initial=0)) + 2, dtype=float) + 1.0)
    # The part of log H(y; m, k) that depends on the key only: Σ_l log m_l! − log n!.
    key_log = lf[u].sum(axis=1) - lf[n_u]
    hard = combiner in ("majority", "plurality") and scorer == "agreement"

    def weigh(owner, k, left, log_seq, lf_y):
        """H(y; m, k) = P_m(y) k! / Π_l y_l! (one sequence of k labels times its
        orderings), times the reference label's normaliser: 1/(n − k) (``left``) for a
        label held out of the item's own (its numerators are ``rest``), 1/|r| for
        reference counts r."""
        w = np.exp(log_seq + lf.take(k) - lf_y)
        if self_ref:
            w /= np.maximum(left, 1)
        else:
            w /= np.maximum(ref_n.take(owner), 1)
        return w

    def blocks():
        """The blocks of pairs (owner, y) with their weights (and ABC sums)."""
        by_size = model is not None and _abc_by_size_ok(model, u, mult)
        if by_size:
            yield from _abc_by_size(u, n_u, mult, top, ks, column, key_log, lf, model._place, weigh)
            return
        if hard and per_label is None and self_ref:
            yield from _plurality_blocks(u, pairs, top, sizes, lf, n_u, key_log, weigh)
            return
        if model is not None:
            model.prepare(ks + 1)  # predictions from k labels look up sub-vectors of size k + 1
        dtype = _count_dtype(u)
        for block in _key_blocks(pairs):
            p = _enumerate(u[block], top[block], sizes, lf, dtype)
            owner = block.take(p.owner)
            left = n_u.take(owner) - p.k
            # log P_m(y), one particular sequence of the |y| labels drawn without replacement
            # from the item with counts m: Σ_l log m_l! − log (m_l − y_l)! − (log n! − log (n − k)!).
            log_seq = key_log.take(owner) + lf.take(left) - p.lf_rest
            yield _Block(owner, p.k, p.rest, weigh(owner, p.k, left, log_seq, p.lf_y), y=p.y, log_seq=log_seq)

    for b in blocks():
        owner, w = b.owner, b.w
        index = b.index if b.index is not None else owner * n_j + column.take(b.k)
        if b.value is not None:
            expected += np.bincount(index, weights=b.value, minlength=n_keys * n_j).reshape(-1, n_j)
            continue
        ref = b.rest if self_ref else u_cols_ref[:, owner]
        if hard and per_label is None:
            # Plurality scored by agreement: the reference label's share of the tied winners.
            total = _winners_share(b.y, ref)
            expected += np.bincount(index, weights=total * w, minlength=n_keys * n_j).reshape(-1, n_j)
            continue
        if b.sums is not None and per_label is None:
            weight = _abc_sliced_weights(b, ref, scorer, clip)
            expected += np.bincount(index, weights=weight, minlength=n_keys * n_j).reshape(-1, n_j)
            continue
        if b.sums is not None:
            total = np.ascontiguousarray(b.sums.take(b.slot, axis=0).T)
            pred = clip_probabilities(abc_from_totals(total, b.rest, b.step), clip, axis=0, inplace=True)
        else:
            pred = predict_columns(combiner, b.y, None, prior=prior, model=model, clip=clip,   # (L, P)
                                   rest=b.rest, log_own=b.log_seq, n_own=n_u[owner])
        terms = _reference_terms(scorer, pred, ref)
        if per_label is None:
            expected += np.bincount(index, weights=terms.sum(axis=0) * w,
                                    minlength=n_keys * n_j).reshape(-1, n_j)
            continue
        terms *= w
        expected += np.bincount(index, weights=terms.sum(axis=0), minlength=n_keys * n_j).reshape(-1, n_j)
        for lab in range(n_labels):
            per_label[:, :, lab] += np.bincount(index, weights=terms[lab],
                                                minlength=n_keys * n_j).reshape(-1, n_j)
    eligible = _eligible(n_u, ks, None if self_ref else keys[:, n_labels:])
    if slots is None:
        return ExactTables(keys, mult.astype(np.int64), inverse, expected, eligible)
    return _slotted_tables(keys, mult, inverse, u, n_u, per_label, k_max=k_max, slots=slots, n_j=n_j)


def _plurality_blocks(u, pairs, top, sizes, lf, n_u, key_log, weigh):
    """Plurality by agreement: symmetric in the labels, so its blocks are computed on the
    sorted counts, each pair carrying the reference label's share of the tied winners."""
    u_sorted = np.sort(u, axis=1)
    for block in _key_blocks(pairs):
        owner, k, lf_y, lf_rest, share = _plurality_terms(u_sorted[block], top[block], sizes, lf)
        owner = block.take(owner)
        left = n_u.take(owner) - k
        log_seq = key_log.take(owner) + lf.take(left) - lf_rest
        w = weigh(owner, k, left, log_seq, lf_y)
        yield _Block(owner, k, None, w, value=share * w)


def _abc_sliced_weights(b, ref: np.ndarray, scorer: str, clip: float) -> np.ndarray:
    """Each pair's weighted score on the ABC's size-ordered path, in slices of pairs that
    stay in the CPU caches."""
    w = b.w
    weight = np.empty(w.shape[0])
    for lo in range(0, w.shape[0], _SLICE):
        hi = lo + _SLICE
        total = np.ascontiguousarray(b.sums.take(b.slot[lo:hi], axis=0).T)
        pred = clip_probabilities(abc_from_totals(total, b.rest[:, lo:hi], b.step[lo:hi]),
                                  clip, axis=0, inplace=True)
        terms = _reference_terms(scorer, pred, ref[:, lo:hi])
        np.multiply(terms.sum(axis=0), w[lo:hi], out=weight[lo:hi])
    return weight


def _slotted_tables(keys, mult, inverse, u, n_u, per_label, *, k_max: int, slots: int, n_j: int) -> ExactTables:
    """The tables when raters fill fixed slots per item: the per-label terms of each k' of
    the item's own labels are mixed over the hypergeometric chance that k drawn slots hold
    k' labelled ones."""
    with np.errstate(invalid="ignore", divide="ignore"):
        per_label = np.where(u[:, None, :] > 0, per_label * (n_u[:, None, None] / u[:, None, :]), 0.0)
    ks = np.arange(k_max + 1)[None, None, :]
    jj = np.arange(n_j)[None, :, None]
    nn = (n_u - 1)[:, None, None]
    valid = (jj <= nn) & (ks - jj >= 0) & (ks - jj <= slots - 1 - nn)
    with np.errstate(invalid="ignore"):
        logp = _log_comb(nn, jj) + _log_comb(slots - 1 - nn, ks - jj) - _log_comb(slots - 1, ks)
    mix = np.where(valid, np.exp(np.where(valid, logp, 0.0)), 0.0)
    per_label = np.einsum("ujl,ujk->ukl", per_label, mix)
    eligible = np.repeat((n_u >= 1).astype(float)[:, None], k_max + 1, axis=1)
    expected = np.einsum("ukl,ul->uk", per_label, u / np.maximum(n_u, 1)[:, None])
    return ExactTables(keys, mult.astype(np.int64), inverse, expected, eligible, per_label)
