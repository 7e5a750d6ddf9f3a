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
from auditor.stats.equivalence._inputs import row_histogram, sub_counts_columns
from auditor.stats.equivalence.combiners import ABCModel, predict_columns
from auditor.stats.equivalence.scorers import label_scores_columns


@dataclass(frozen=True)
class ExactTables:
    """Per distinct key: expected item score ``E[u, k]`` and eligibility ``A[u, k]``."""

    keys: np.ndarray          # (U, L) pool counts, or (U, 2L) pool then reference counts
    multiplicity: np.ndarray  # (U,)
    inverse: np.ndarray       # (N,) key row of each item
    expected: np.ndarray      # (U, n_k)
    eligible: np.ndarray      # (U, n_k) float 0/1
    per_label: np.ndarray | None = None  # (U, n_k, L): columns mode, score given reference label l


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


# Sub-count vectors handled at once (bounds the working memory of the exact path).
_PAIRS_PER_BLOCK = 250_000


def _key_blocks(unique: np.ndarray, top: np.ndarray) -> list[np.ndarray]:
    """Consecutive blocks of keys with about ``_PAIRS_PER_BLOCK`` sub-count vectors each.

    The number of y ≤ u with |y| ≤ top is bounded by min(Π_l (u_l + 1), C(top + L, L)).
    """
    n_labels = unique.shape[1]
    with np.errstate(over="ignore"):
        bound = np.minimum(np.prod(unique.astype(float) + 1.0, axis=1),
                           np.exp(_log_comb(top.astype(float) + n_labels, np.full(top.shape, float(n_labels)))))
    blocks, start, acc = [], 0, 0.0
    for i, b in enumerate(bound):
        if acc and acc + b > _PAIRS_PER_BLOCK:
            blocks.append(np.arange(start, i))
            start, acc = i, 0.0
        acc += b
    blocks.append(np.arange(start, unique.shape[0]))
    return blocks


def _log_comb(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def exact_tables(pool: np.ndarray, reference: np.ndarray | None, *, combiner: str, scorer: str,
                 k_max: int, prior: np.ndarray, model: ABCModel | None, clip: float,
                 slots: int | None = None, ks: np.ndarray | None = None) -> ExactTables:
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
    keys, inverse, mult = row_histogram(keys_all)
    # The tables depend on the data only through its distinct keys (and, for the ABC, how
    # many items have each; for the frequency combiner, its prior): a power curve and the
    # survey equivalences of several releases on the same items share one computation.
    digest = _digest(keys, mult if combiner == "abc" else None, prior if combiner == "frequency" else None,
                     reference is None, combiner, scorer, k_max, clip, slots,
                     None if ks is None else np.asarray(ks, dtype=np.int64))
    found = _TABLES.get(digest)
    if found is not None:
        return ExactTables(keys, mult.astype(np.int64), inverse, *found)
    tables = _exact_tables(keys, mult, inverse, n_labels, reference is None, combiner=combiner, scorer=scorer,
                           k_max=k_max, prior=prior, model=model, clip=clip, slots=slots, ks=ks)
    if tables.expected.nbytes * (1 + (tables.per_label is not None) * n_labels) <= _CACHE_BYTES:
        shared = (tables.expected, tables.eligible, tables.per_label)
        for a in shared:
            if a is not None:
                a.flags.writeable = False  # handed to every later caller: nobody may change them
        _TABLES.put(digest, shared)
    return tables


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


def _exact_tables(keys, mult, inverse, n_labels: int, self_ref: bool, *, combiner: str, scorer: str,
                  k_max: int, prior, model, clip: float, slots, ks) -> ExactTables:
    u = keys[:, :n_labels]
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
    expected = np.zeros((n_keys, n_j))
    per_label = np.zeros((n_keys, n_j, n_labels)) if slots is not None else None
    # log k! for every count that occurs: table lookups instead of gammaln per sub-vector.
    lf = gammaln(np.arange(int(n_u.max(initial=0)) + 2, dtype=float) + 1.0)
    # The part of log H(y; m, k) that depends on the key only: Σ_l log m_l! − log n!.
    key_log = lf[u].sum(axis=1) - lf[n_u]
    u_cols = np.ascontiguousarray(u.T)
    hard = combiner in ("majority", "plurality") and scorer == "agreement"
    if model is not None:
        model.prepare(ks + 1)  # the ABC's predictions from k labels look up sub-vectors of size k + 1
    for block in _key_blocks(u, top):
        owner, y = sub_counts_columns(u[block], top[block], sizes)
        owner = block[owner]
        m = u_cols[:, owner]                                      # (L, P), like y
        k = y.sum(axis=0)
        n_o = n_u[owner]
        logw = key_log[owner] + lf[k] + lf[n_o - k]
        for lab in range(n_labels):
            logw -= lf[y[lab]] + lf[m[lab] - y[lab]]
        w = np.exp(logw)
        index = owner * n_j + column[k]
        if self_ref:
            ref = m - y                                           # × 1/(n − k): folded into w
            w /= np.maximum(n_o - k, 1)
        else:
            r = u_cols_ref[:, owner]
            ref = r
            w /= np.maximum(r.sum(axis=0), 1)
        if hard and per_label is None:
            # Plurality scored by agreement: the reference label's share of the tied winners.
            top_y = y.max(axis=0)
            win = y == top_y
            total = np.where(win, ref, 0).sum(axis=0) / win.sum(axis=0)
            expected += np.bincount(index, weights=total * w, minlength=n_keys * n_j).reshape(-1, n_j)
            continue
        pred = predict_columns(combiner, y, m, prior=prior, model=model, clip=clip)  # (L, P)
        scores = label_scores_columns(scorer, pred)
        terms = np.where(ref > 0, ref * scores, 0.0) * w
        expected += np.bincount(index, weights=terms.sum(axis=0), minlength=n_keys * n_j).reshape(-1, n_j)
        if per_label is not None:
            for lab in range(n_labels):
                per_label[:, :, lab] += np.bincount(index, weights=terms[lab],
                                                    minlength=n_keys * n_j).reshape(-1, n_j)
    js = ks[None, :]
    if self_ref:
        eligible = n_u[:, None] >= js + 1
    else:
        eligible = (n_u[:, None] >= js) & (keys[:, n_labels:].sum(axis=1)[:, None] >= 1)
    eligible = eligible.astype(float)
    if slots is None:
        return ExactTables(keys, mult.astype(np.int64), inverse, expected, eligible)
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
