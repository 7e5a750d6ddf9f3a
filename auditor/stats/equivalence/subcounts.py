"""The enumeration behind the exact power curve: every sub-count vector y ≤ u of a key.

:mod:`auditor.stats.equivalence.exact` sums over the pairs (key u, sub-counts y) level by
level (one label at a time, :func:`_enumerate`), and for the ABC combiner along the
size-ordered path (:func:`_abc_by_size`) that shares its totals across the keys' own
sub-vectors. Kept apart from the tables so each module reads as one concept.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from auditor.stats.counts import row_histogram
from auditor.stats.equivalence.combiners import ABCModel


def _count_dtype(u: np.ndarray):
    """The smallest signed integer type that holds every count of ``u``."""
    top = int(u.max(initial=0))
    return np.int8 if top < 2**7 else np.int16 if top < 2**15 else np.int64


@dataclass
class _Pairs:
    """A block of pairs (owner, y), y ≤ u[owner]: ``y`` and ``rest`` = u[owner] − y
    column-major (L, P) in a small integer type, k = |y|, Σ_l log y_l! and
    Σ_l log (u_l − y_l)!, and (when asked) the mixed-radix code of y."""

    owner: np.ndarray
    k: np.ndarray
    y: np.ndarray
    rest: np.ndarray
    lf_y: np.ndarray
    lf_rest: np.ndarray
    code: np.ndarray | None


@dataclass(eq=False)
class _Walk:
    """The partial vectors of the enumeration after some levels: each one's key (``owner``),
    how many labels it holds (``used``), and its sums Σ log y_l! and Σ log (u_l − y_l)! so far."""

    owner: np.ndarray
    used: np.ndarray
    lf_y: np.ndarray
    lf_rest: np.ndarray

    @classmethod
    def start(cls, n_u: int) -> _Walk:
        return cls(np.arange(n_u), np.zeros(n_u, dtype=np.int64), np.zeros(n_u), np.zeros(n_u))


def _levels(unique: np.ndarray, k_max: np.ndarray, sizes: np.ndarray | None, lf: np.ndarray, walk: _Walk):
    """The enumeration of every y ≤ unique[owner] (|y| ≤ k_max, in ``sizes``), one label
    (level) at a time: ``walk`` (from :meth:`_Walk.start`) is updated with each level (one
    pass over its vectors), and ``(lab, parent, offsets, rest)`` yielded: each new partial
    vector's parent at the previous level, its count of label ``lab`` and u_lab − y_lab."""
    n_labels = unique.shape[1]
    # With ``sizes``: what the labels after each one can still add, to drop partial vectors
    # that can no longer reach the smallest size.
    left = None if sizes is None else np.ascontiguousarray(np.cumsum(unique[:, ::-1], axis=1)[:, ::-1].T)
    # (``take`` rather than fancy indexing: the same gathers, at half the cost.)
    columns = np.ascontiguousarray(unique.T)
    for lab in range(n_labels):
        have = columns[lab].take(walk.owner)
        room = np.minimum(have, k_max.take(walk.owner) - walk.used)
        parent, offsets = _expand(lab, n_labels, walk.owner, walk.used, room, sizes, left)
        walk.owner = walk.owner.take(parent)
        walk.used = walk.used.take(parent)
        walk.used += offsets
        rest = have.take(parent)
        rest -= offsets
        walk.lf_y = walk.lf_y.take(parent)
        walk.lf_y += lf.take(offsets)
        walk.lf_rest = walk.lf_rest.take(parent)
        walk.lf_rest += lf.take(rest)
        yield lab, parent, offsets, rest


def _enumerate(unique: np.ndarray, k_max: np.ndarray, sizes: np.ndarray | None, lf: np.ndarray,
               dtype, place: np.ndarray | None = None, want_y: bool = True) -> _Pairs:
    """The pairs of :func:`~auditor.stats.equivalence._inputs.sub_counts_columns` (the
    same pairs, in another order within a key), with the per-pair sums over labels added
    up level by level while the vectors are built (one pass over each level's partial
    vectors) instead of gathering every label's column again afterwards. Without
    ``want_y``, ``y`` is None (``rest`` only).

    Each key's labels are walked in ascending order of its counts (its own order): labels
    it never received add no branch, and with the largest count last the partial vectors
    of the earlier levels are few (the last level lands on the sizes). On CIFAR-10H's keys
    (10 classes, ~50 labels, on the k grid) that is 13.7M partial vectors over the levels
    instead of 38.5M in label order. The columns ``y`` and ``rest`` and the codes are in
    the labels' own order."""
    n_u, n_labels = unique.shape
    # order[i, level]: the label of key i walked at that level.
    order = np.argsort(unique, axis=1, kind="stable")
    walked = np.take_along_axis(unique, order, axis=1)
    order_t = np.ascontiguousarray(order.T)
    code = None if place is None else np.zeros(n_u, dtype=np.int64)
    key_place = None if place is None else place.take(order_t)        # (L, U)
    offsets_by_level: list[np.ndarray] = []  # y's count of the level's label (with ``want_y``)
    rest_by_level: list[np.ndarray] = []
    parents: list[np.ndarray] = []
    walk = _Walk.start(n_u)
    for level, parent, offsets, rest in _levels(walked, k_max, sizes, lf, walk):
        if code is not None:
            code = code.take(parent)
            code += offsets * key_place[level].take(walk.owner)
        if want_y:
            offsets_by_level.append(offsets.astype(dtype))
        rest_by_level.append(rest.astype(dtype))
        parents.append(parent)
    n_pairs = walk.owner.shape[0]
    # The columns, gathered along the chain of parents and put in their labels' rows (each
    # pair's labels are a permutation of 0..L-1: every cell is written once).
    y = np.empty((n_labels, n_pairs), dtype=dtype) if want_y else None
    rest = np.empty((n_labels, n_pairs), dtype=dtype)
    y_flat = None if y is None else y.reshape(-1)
    rest_flat = rest.reshape(-1)
    index = np.arange(n_pairs)
    pair = np.arange(n_pairs)
    for level in range(n_labels - 1, -1, -1):
        cell = order_t[level].take(walk.owner)
        cell *= n_pairs
        cell += pair
        if want_y:
            y_flat[cell] = offsets_by_level[level].take(index)
        rest_flat[cell] = rest_by_level[level].take(index)
        if level:
            index = parents[level].take(index)
    return _Pairs(walk.owner, walk.used, y, rest, walk.lf_y, walk.lf_rest, code)


def _plurality_terms(unique: np.ndarray, k_max: np.ndarray, sizes: np.ndarray | None, lf: np.ndarray):
    """Plurality scored by agreement against one of the item's own held-out labels: for
    every y ≤ unique[owner] (|y| ≤ k_max, in ``sizes``), (owner, k, Σ_l log y_l!,
    Σ_l log (u_l − y_l)!, share), share = Σ_{l ∈ W(y)} (u_l − y_l) / |W(y)| over the
    tied winners W(y) = argmax_l y_l: the chance (times n − k) that the held-out label
    is the tie-broken vote.

    That share, and the hypergeometric weight, are symmetric in the labels, so each
    row of ``unique`` may come with its counts in any order: sorted ascending (zeros
    first, the largest count last), the vectors branch late and the partial vectors of
    the first levels are few. The winners are tracked level by level (the largest count
    so far, how many labels have it and their remaining counts), so no label columns are
    built.
    """
    n_u = unique.shape[0]
    best = np.full(n_u, -1, dtype=np.int64)
    ties = np.zeros(n_u, dtype=np.int64)
    share = np.zeros(n_u, dtype=np.int64)
    walk = _Walk.start(n_u)
    for _lab, parent, offsets, rest in _levels(unique, k_max, sizes, lf, walk):
        best = best.take(parent)
        top = offsets > best
        same = offsets == best
        np.maximum(best, offsets, out=best)
        ties = ties.take(parent)
        ties += same
        ties[top] = 1
        share = share.take(parent)
        np.add(share, rest, out=share, where=same)
        np.copyto(share, rest, where=top)
    return walk.owner, walk.used, walk.lf_y, walk.lf_rest, share / ties


def _expand(lab: int, n_labels: int, owner: np.ndarray, used: np.ndarray, room: np.ndarray,
            sizes: np.ndarray | None, left: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One level of the enumeration: each partial vector's children, as (parent, count
    of label ``lab``). With ``sizes``, the last label's count is chosen to land on them,
    and earlier counts that would leave the vector short of the smallest are left out."""
    if sizes is not None and lab == n_labels - 1:
        # The totals in [used, used + room] that are allowed, and the counts reaching them.
        first = np.searchsorted(sizes, used, side="left")
        reps = np.maximum(np.searchsorted(sizes, used + room, side="right") - first, 0)
        starts = np.cumsum(reps) - reps
        parent = np.repeat(np.arange(owner.shape[0]), reps)
        return parent, sizes.take(np.arange(parent.shape[0]) - (starts - first).take(parent)) - used.take(parent)
    if left is not None and lab + 1 < n_labels:
        # Counts below ``low`` leave the vector short of the smallest size.
        low = np.maximum(sizes[0] - used - left[lab + 1].take(owner), 0)
        reps = np.maximum(room - low + 1, 0)
    else:
        low = None
        reps = np.maximum(room, -1) + 1
    starts = np.cumsum(reps) - reps
    parent = np.repeat(np.arange(owner.shape[0]), reps)
    return parent, np.arange(parent.shape[0]) - (starts if low is None else starts - low).take(parent)


@dataclass
class _Block:
    """What the exact path sums over one block of pairs (owner, y): the hypergeometric
    weight ``w`` of each (with its reference factor's denominator), its key's row, and
    for the ABC's size-ordered path the predictor's inputs in place of ``y`` and
    ``log_seq``: ``step`` and the table sums T(y + e_l) = ``sums[slot].T``."""

    owner: np.ndarray
    k: np.ndarray | None
    rest: np.ndarray
    w: np.ndarray
    y: np.ndarray | None = None
    log_seq: np.ndarray | None = None
    step: np.ndarray | None = None
    sums: np.ndarray | None = None
    slot: np.ndarray | None = None
    index: np.ndarray | None = None  # owner × n_j + the column of k, when given
    value: np.ndarray | None = None  # each pair's term of the expected score, when given


#: The ABC's size-ordered path: its pairs are enumerated in blocks of about _ABC_BLOCK, cut
#: between keys within groups of sizes |y| of about _ABC_GROUP pairs. The blocks fix the order
#: in which the table sums are added (block by block), and so their last digits: a fixed
#: rule, so that the numbers never depend on the memory at hand.
_ABC_GROUP = 4_000_000
_ABC_BLOCK = 80_000
#: What the path may hold at once (the pairs kept between its two passes, one row of sums
#: per sub-vector, the hashing of their codes: :func:`_abc_pair_bytes` per pair): the sizes
#: of a group are taken a few at a time, as many as fit. (CIFAR-10H's curve: 12.6M pairs, at
#: most 0.85M of one size; held a whole group of 4M pairs at once, it peaked at 1.16 GB.)
_ABC_MEMORY = 160 << 20


def _abc_pair_bytes(n_labels: int, dtype) -> int:
    """Bytes one pair of a group holds at most on the ABC's size-ordered path: its record
    (owner, index, remaining counts, weight, step, code), its sub-vector's id, and its
    sub-vector's row of L sums and first position (at most one sub-vector per pair), or
    instead of these last two the hashing's temporaries (about six 8-byte arrays)."""
    record = 4 + 8 + n_labels * np.dtype(dtype).itemsize + 8 + 8 + 8
    return record + 8 + max(8 * n_labels + 8, 48)


def _pairs_per_size(u: np.ndarray, top: np.ndarray, k_hi: int) -> np.ndarray:
    """(U, k_hi + 1): how many sub-vectors y ≤ u_i have |y| = k (0 where k > top_i).

    The coefficients of Π_l (1 + x + … + x^{u_il}), one label at a time by running sums,
    for keys grouped by their ``top`` (within a factor of 2), each group up to its own
    largest: one item with 1,000 labels among items with 10 no longer makes every key's
    row 1,000 long.
    """
    out = np.zeros((u.shape[0], k_hi + 1))
    reach = np.clip(top, 0, k_hi)
    bucket = np.ceil(np.log2(reach + 1.0)).astype(np.int64)
    for b in np.unique(bucket):
        rows = np.flatnonzero(bucket == b) if b != bucket[0] or (bucket != b).any() else slice(None)
        k_b = int(reach[rows].max())
        cols = np.arange(k_b + 1)
        c = np.zeros((reach[rows].shape[0], k_b + 1))
        c[:, 0] = 1.0
        u_b = u[rows]
        for lab in range(u.shape[1]):
            run = np.cumsum(c, axis=1)
            back = cols[None, :] - u_b[:, lab:lab + 1] - 1
            c = run - np.where(back >= 0, np.take_along_axis(run, np.maximum(back, 0), axis=1), 0.0)
        c[cols[None, :] > top[rows, None]] = 0.0
        out[rows, :k_b + 1] = c
    return out


def _abc_by_size_ok(model: ABCModel, u: np.ndarray, mult: np.ndarray) -> bool:
    """The size-ordered path sums the ABC's table from the keys' own sub-vectors: valid
    when the model was fitted on exactly these count vectors (it always is here; checked
    in case), and when the mixed-radix code of a sub-vector fits in 64 bits."""
    if float(np.prod(model._radix.astype(float))) >= 2.0 ** 62:
        return False
    if (u.max(axis=0, initial=0) + 1 > model._radix).any():
        return False
    uniq, _, inverse = row_histogram(u)
    weight = np.bincount(inverse, weights=mult, minlength=uniq.shape[0])
    return bool(uniq.shape == model.unique.shape and (uniq == model.unique).all()
                and np.allclose(weight, model.weight, rtol=0, atol=1e-9))


#: Codes hashed at once by :func:`_factorize`: its hash tables stay in the CPU caches.
_HASH_PART = 1 << 17
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _factorize(codes: np.ndarray, *, out: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Integer ids of the values of ``codes`` (int64), numbered in order of first
    appearance as ``pd.factorize`` numbers them, in ``out`` (an int64 buffer at least as
    long: its first len(codes) entries) or a new array; and how many distinct values
    there are.

    Many codes are hashed in parts of about :data:`_HASH_PART` (by a multiplicative hash
    of each code's bits, so equal codes fall in the same part), each with its own small
    hash table: one table for millions of codes spends its time in cache misses (and page
    faults while it grows). The parts' ids are then renumbered in order of first
    appearance (the rank of each one's first position), which keeps the callers' sums
    over ids close together in memory.
    """
    import pandas as pd

    n = codes.shape[0]
    ids = np.empty(n, dtype=np.int64) if out is None else out[:n]
    bits = min(16, int(np.ceil(np.log2(max(n / _HASH_PART, 1.0)))))
    if bits == 0:
        local, distinct = pd.factorize(codes)
        ids[:] = local
        return ids, distinct.shape[0]
    part = ((codes.view(np.uint64) * _GOLDEN) >> np.uint64(64 - bits)).astype(np.uint16)
    order = np.argsort(part, kind="stable")  # a radix sort for 16-bit keys
    bounds = np.concatenate([[0], np.cumsum(np.bincount(part, minlength=1 << bits))])
    del part
    grouped = codes.take(order)
    found = 0
    for lo, hi in itertools.pairwise(bounds):
        local, distinct = pd.factorize(grouped[lo:hi])
        np.add(local, found, out=grouped[lo:hi])  # the ids, part after part
        found += distinct.shape[0]
    # Within a part, ids are in order of first appearance and increase from part to part:
    # an id is new where it exceeds every id before it.
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.greater(grouped[1:], np.maximum.accumulate(grouped[:-1]), out=new[1:])
    first = order[new]                     # each part id's first position
    del new
    # The rank of each first position among them all: the id in order of first appearance.
    is_first = np.zeros(n, dtype=bool)
    is_first[first] = True
    renumber = np.cumsum(is_first).take(first)
    renumber -= 1
    del is_first, first
    ids[order] = renumber.take(grouped)
    return ids, found


def _abc_by_size(u, n_u, mult, top, ks, column, key_log, lf, place, weigh):
    """The ABC's pairs in groups of sizes |y|, with each sub-vector's table sum.

    The ABC predicts from the sums T(y + e_l) = Σ_v w_v P_v(y + e_l) over the data set's
    count vectors v (weights w_v), and P_v(y + e_l) = P_v(y) (v_l − y_l) / (|v| − |y|): so
    T(y + e_l) is a sum over the very pairs (v, y) with this y that the exact path
    enumerates anyway. For each group of sizes (about :data:`_ABC_GROUP` pairs), taken as
    many sizes at a time as :data:`_ABC_MEMORY` holds (at least one), a first pass
    enumerates the pairs in the group's blocks and keeps what the predictions need of
    each pair compactly (its weight, own step, remaining counts and the code of y: not y
    itself); the codes are then numbered (hashed in cache-sized parts), each block's terms
    of a sub-vector added up and the blocks' sums added in block order; the second pass
    hands the blocks on with their sums. No table of sub-vectors of size |y| + 1 is built
    and nothing is searched per label. A block enumerated for fewer of its group's sizes
    lists their pairs in the same order (keys, then y lexicographically), so every sum,
    and the expected scores, are the same to the last bit whatever the memory allowed.
    The arrays live in buffers allocated once, so the blocks handed on own no memory.
    """
    n_labels = u.shape[1]
    per_size = _pairs_per_size(u, top, int(ks.max(initial=0)))[:, ks]      # (U, n_j)
    totals = per_size.sum(axis=0)
    dtype = _count_dtype(u)
    # Each group of sizes, and the runs of its sizes held at once.
    most = _ABC_MEMORY // _abc_pair_bytes(n_labels, dtype)
    runs = []
    for a, b in _size_groups(totals, _ABC_GROUP):
        runs.append(((a, b), [(a + c, a + d) for c, d in _size_groups(totals[a:b], most)]))
    largest = max((int(totals[c:d].sum()) for _, held in runs for c, d in held), default=0)
    # Fresh memory costs a page fault per 4 kB on first use: the buffers are allocated once.
    buf = {"owner": np.empty(largest, dtype=np.int32), "index": np.empty(largest, dtype=np.int64),
           "rest": np.empty((n_labels, largest), dtype=dtype), "w": np.empty(largest),
           "step": np.empty(largest), "code": np.empty(largest, dtype=np.int64),
           "ids": np.empty(largest, dtype=np.int64), "sums": np.empty((largest, n_labels)),
           "first": np.empty(largest, dtype=np.int64)}
    for (a, b), held in runs:
        per_key = per_size[:, a:b].sum(axis=1)
        keys = np.flatnonzero(per_key > 0)
        if keys.shape[0] == 0:
            continue
        blocks = _abc_blocks(keys, per_key[keys])
        for c, d in held:
            yield from _abc_held(u, n_u, mult, top, ks, ks[c:d], blocks, column, key_log, lf, place, weigh,
                                 dtype, buf)


def _abc_blocks(keys: np.ndarray, pairs: np.ndarray) -> list[np.ndarray]:
    """The ``keys`` (with ``pairs`` each in the group) cut into blocks of about
    :data:`_ABC_BLOCK` pairs."""
    cum = np.cumsum(pairs)
    cuts = np.unique(np.clip(np.searchsorted(cum, np.arange(_ABC_BLOCK, cum[-1], _ABC_BLOCK), side="right"),
                             1, keys.shape[0] - 1)) if cum[-1] > _ABC_BLOCK else []
    return np.split(keys, cuts)


def _abc_held(u, n_u, mult, top, ks, sizes, blocks, column, key_log, lf, place, weigh, dtype, buf):
    """The blocks of pairs of ``sizes`` (some sizes of a group; ``blocks``: the group's keys
    in blocks), with the table sums of their sub-vectors."""
    spans, at = [], 0
    for block in blocks:
        p = _enumerate(u[block], np.minimum(top[block], sizes[-1]), sizes, lf, dtype, place, want_y=False)
        owner = block.take(p.owner)
        n_p = owner.shape[0]
        if n_p == 0:
            continue
        left = n_u.take(owner) - p.k
        log_seq = key_log.take(owner) + lf.take(left) - p.lf_rest
        buf["owner"][at:at + n_p] = owner
        np.add(owner * ks.shape[0], column.take(p.k), out=buf["index"][at:at + n_p])
        buf["rest"][:, at:at + n_p] = p.rest
        buf["w"][at:at + n_p] = weigh(owner, p.k, left, log_seq, p.lf_y)
        buf["step"][at:at + n_p] = np.where(left > 0, np.exp(log_seq) / np.maximum(left, 1), 0.0)
        buf["code"][at:at + n_p] = p.code
        spans.append((at, at + n_p))
        at += n_p
        del p, owner, log_seq, left
    if not spans:
        return
    # Each sub-vector's id, and the sums: a block's terms of one sub-vector are added up in
    # the block's order, and the blocks' sums in block order (the summation order does
    # matter here: the ABC subtracts the item's own term from these sums, which can cancel
    # nearly all of them).
    ids, n_distinct = _factorize(buf["code"][:at], out=buf["ids"])
    # One row of L sums per sub-vector: a pair reads them back as one or two cache lines,
    # not L lines far apart.
    sums = buf["sums"][:n_distinct]
    sums.fill(0.0)
    for lo, hi in spans:
        _add_block_sums(sums, buf["first"], ids[lo:hi], buf["rest"][:, lo:hi],
                        buf["step"][lo:hi] * mult.take(buf["owner"][lo:hi]))
    for lo, hi in spans:
        yield _Block(buf["owner"][lo:hi], None, buf["rest"][:, lo:hi], buf["w"][lo:hi], step=buf["step"][lo:hi],
                     sums=sums, slot=ids[lo:hi], index=buf["index"][lo:hi])


def _size_groups(totals: np.ndarray, most: int) -> list[tuple[int, int]]:
    """Consecutive runs [a, b) of the sizes whose pairs (``totals``) add up to at most
    ``most``; a size with more pairs than that is a group of its own (its sums need all of
    them at once)."""
    groups, start = [], 0
    while start < totals.shape[0]:
        end = start + 1
        while end < totals.shape[0] and totals[start:end + 1].sum() <= most:
            end += 1
        groups.append((start, end))
        start = end
    return groups


def _add_block_sums(sums: np.ndarray, first: np.ndarray, block_ids: np.ndarray, rest: np.ndarray,
                    scaled: np.ndarray) -> None:
    """Add one block's terms rest_l · scaled of each sub-vector (``block_ids``) to its row of
    ``sums``: first added up within the block (in the block's order), then once into the row.

    One pair of each sub-vector stands for it, its head. ``first[block_ids] = 0..n_p − 1``
    leaves in ``first[i]``, for each id i of the block, one position p of a pair with that
    id (whichever write lands last; ``first`` is scratch, as long as the group's
    sub-vectors), so ``head = first[block_ids]`` is p at every pair of id i, and
    ``head == position`` holds at p alone. The heads' ids are therefore distinct, one per
    sub-vector of the block, and a plain fancy-indexed ``+=`` adds each block sum to its
    row exactly once, as ``np.add.at`` would (the same additions: bit-identical), without
    its per-element cost.
    """
    n_p = block_ids.shape[0]
    first[block_ids] = np.arange(n_p)
    head = first.take(block_ids)
    heads = np.flatnonzero(head == np.arange(n_p))
    once = heads.shape[0] == n_p  # no sub-vector twice in the block (e.g. a single key)
    block_sums = np.empty((rest.shape[0], heads.shape[0]))
    term = np.empty(n_p)
    for lab in range(rest.shape[0]):
        np.multiply(rest[lab], scaled, out=term)
        if once:
            block_sums[lab] = term
        else:
            block_sums[lab] = np.bincount(head, weights=term, minlength=n_p).take(heads)
    heads_ids = block_ids if once else block_ids.take(heads)
    sums[heads_ids] += block_sums.T
