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
import pandas as pd
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


# Sub-count vectors handled at once (an upper bound per block): bounds the working memory of
# the exact path, and small blocks keep its arrays in the CPU caches and the allocator's reuse
# (measured on CIFAR-10H's plurality curve: 6.1 s at 250,000, 4.2–4.4 s at 40,000–50,000).
_PAIRS_PER_BLOCK = 50_000


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


def _sequence_terms(owner: np.ndarray, y: np.ndarray, u_cols: np.ndarray, n_u: np.ndarray,
                    key_log: np.ndarray, lf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``m − y`` and log P_m(y) (one particular sequence of the |y| labels, drawn without
    replacement from the item with counts m) for the pairs (owner, y):
    log P_m(y) = Σ_l log m_l! − log (m_l − y_l)! − (log n! − log (n − k)!)."""
    rest = u_cols[:, owner] - y
    k = y.sum(axis=0)
    return rest, key_log[owner] + lf[n_u[owner] - k] - lf[rest].sum(axis=0)


#: The ABC's size-ordered path: sub-count vectors kept between its two passes (compactly,
#: about 2 bytes × labels + 16 each), and handled at once (working memory of about
#: 80 bytes × labels each).
_ABC_GROUP = 4_000_000
_ABC_BLOCK = 80_000  # CIFAR-10H's ABC curve: 12.7 s at 250,000, 10.3–10.9 s at 45,000–100,000


def _pairs_per_size(u: np.ndarray, top: np.ndarray, k_hi: int) -> np.ndarray:
    """(U, k_hi + 1): how many sub-vectors y ≤ u_i have |y| = k (0 where k > top_i).

    The coefficients of Π_l (1 + x + … + x^{u_il}), one label at a time by running sums.
    """
    cols = np.arange(k_hi + 1)
    c = np.zeros((u.shape[0], k_hi + 1))
    c[:, 0] = 1.0
    for lab in range(u.shape[1]):
        run = np.cumsum(c, axis=1)
        back = cols[None, :] - u[:, lab:lab + 1] - 1
        c = run - np.where(back >= 0, np.take_along_axis(run, np.maximum(back, 0), axis=1), 0.0)
    c[cols[None, :] > top[:, None]] = 0.0
    return c


def _abc_by_size_ok(model: ABCModel, u: np.ndarray, mult: np.ndarray) -> bool:
    """The size-ordered path sums the ABC's table from the keys' own sub-vectors: valid
    when the model was fitted on exactly these count vectors (it always is here; checked
    in case), and when the mixed-radix code of a sub-vector fits in 64 bits."""
    if float(np.prod(model._radix.astype(float))) >= 2.0 ** 62:
        return False
    if (u.max(axis=0, initial=0) + 1 > model._radix).any():
        return False
    uniq, inverse, _ = row_histogram(u)
    weight = np.bincount(inverse, weights=mult, minlength=uniq.shape[0])
    return bool(uniq.shape == model.unique.shape and (uniq == model.unique).all()
                and np.allclose(weight, model.weight, rtol=0, atol=1e-9))


def _abc_by_size(u, u_cols, n_u, mult, top, ks, key_log, lf, place):
    """The ABC's pairs in groups of sizes |y|, with each sub-vector's table sum.

    The ABC predicts from the sums T(y + e_l) = Σ_v w_v P_v(y + e_l) over the data set's
    count vectors v (weights w_v), and P_v(y + e_l) = P_v(y) (v_l − y_l) / (|v| − |y|): so
    T(y + e_l) is a sum over the very pairs (v, y) with this y that the exact path
    enumerates anyway. For each group of sizes (about :data:`_ABC_GROUP` pairs), a first
    pass enumerates the pairs in blocks of :data:`_ABC_BLOCK` (small arrays: the working
    memory stays in the allocator's reuse), hashes each sub-vector's code and adds its
    terms to its sum, keeping the pairs compactly; the second pass hands the blocks on
    with their sums. No table of sub-vectors of size |y| + 1 is built and nothing is
    searched per label.
    """
    n_labels = u.shape[1]
    per_size = _pairs_per_size(u, top, int(ks.max(initial=0)))[:, ks]      # (U, n_j)
    totals = per_size.sum(axis=0)
    small = np.int16 if int(u.max(initial=0)) < 2**15 else np.int64
    start = 0
    while start < ks.shape[0]:
        end = start + 1
        while end < ks.shape[0] and totals[start:end + 1].sum() <= _ABC_GROUP:
            end += 1
        sizes = ks[start:end]
        per_key = per_size[:, start:end].sum(axis=1)
        start = end
        keys = np.flatnonzero(per_key > 0)
        if keys.shape[0] == 0:
            continue
        cum = np.cumsum(per_key[keys])
        cuts = np.unique(np.clip(np.searchsorted(cum, np.arange(_ABC_BLOCK, cum[-1], _ABC_BLOCK), side="right"),
                                 1, keys.shape[0] - 1)) if cum[-1] > _ABC_BLOCK else []
        kept, codes, parts = [], [], []
        for block in np.split(keys, cuts):
            owner, y = sub_counts_columns(u[block], np.minimum(top[block], sizes[-1]), sizes)
            owner = block[owner]
            rest, log_seq = _sequence_terms(owner, y, u_cols, n_u, key_log, lf)
            code = place[0] * y[0]
            for lab in range(1, n_labels):
                code += place[lab] * y[lab]
            which, distinct = pd.factorize(code)
            left = n_u[owner] - y.sum(axis=0)
            step = np.where(left > 0, np.exp(log_seq) / np.maximum(left, 1), 0.0) * mult[owner]
            rest = rest * step
            parts.append(np.stack([np.bincount(which, weights=rest[lab], minlength=distinct.shape[0])
                                   for lab in range(n_labels)]))
            codes.append(np.asarray(distinct, dtype=np.int64))
            kept.append((owner.astype(np.int32), y.astype(small), log_seq, which.astype(np.int32)))
            del owner, y, rest, code, which, left, step
        # The sums over all the group's blocks, and each block's map onto them.
        merged, distinct_all = pd.factorize(np.concatenate(codes), sort=False)
        sums = np.zeros((n_labels, distinct_all.shape[0]))
        for lab in range(n_labels):
            sums[lab] = np.bincount(merged, weights=np.concatenate([p[lab] for p in parts]),
                                    minlength=distinct_all.shape[0])
        del parts
        offsets = np.cumsum([0] + [c.shape[0] for c in codes])
        for j, (owner, y, log_seq, which) in enumerate(kept):
            kept[j] = None
            owner = owner.astype(np.int64)
            y = y.astype(np.int64)
            rest = u_cols[:, owner] - y
            yield owner, y, rest, log_seq, sums[:, merged[offsets[j]:offsets[j + 1]][which]]


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

    def pairs():
        """(owner, y, rest, log_seq, ABC totals or None) per block of sub-count vectors."""
        by_size = model is not None and _abc_by_size_ok(model, u, mult)
        if not by_size:
            if model is not None:
                model.prepare(ks + 1)  # predictions from k labels look up sub-vectors of size k + 1
            for block in _key_blocks(u, top):
                owner, y = sub_counts_columns(u[block], top[block], sizes)
                owner = block[owner]
                yield (owner, y, *_sequence_terms(owner, y, u_cols, n_u, key_log, lf), None)
            return
        yield from _abc_by_size(u, u_cols, n_u, mult, top, ks, key_log, lf, model._place)

    for owner, y, rest, log_seq, abc_total in pairs():
        m = u_cols[:, owner]                                      # (L, P), like y
        k = y.sum(axis=0)
        n_o = n_u[owner]
        # H(y; m, k) = P_m(y) k! / Π_l y_l!: one sequence of k labels times its orderings.
        w = np.exp(log_seq + lf[k] - lf[y].sum(axis=0))
        index = owner * n_j + column[k]
        if self_ref:
            ref = rest                                            # × 1/(n − k): folded into w
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
        pred = predict_columns(combiner, y, m, prior=prior, model=model, clip=clip,   # (L, P)
                               rest=rest, log_own=log_seq, total=abc_total)
        terms = label_scores_columns(scorer, pred, inplace=True)
        terms *= ref
        if scorer == "cross_entropy" and clip <= 0:
            np.copyto(terms, 0.0, where=ref == 0)                 # 0 · log 0 (no such reference label)
        if per_label is None:
            expected += np.bincount(index, weights=terms.sum(axis=0) * w,
                                    minlength=n_keys * n_j).reshape(-1, n_j)
            continue
        terms *= w
        expected += np.bincount(index, weights=terms.sum(axis=0), minlength=n_keys * n_j).reshape(-1, n_j)
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
