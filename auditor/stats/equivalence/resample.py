"""The bootstrap of the survey power curve: item weights drawn by multinomial resampling,
grouped by distinct count vector when that is cheaper, and the resampled sums of each
group's terms, in chunks that bound the working memory.
"""

from __future__ import annotations

import numpy as np

from auditor.stats.resampling import draw_by_index, multinomial_multiplicities

# Working memory of one chunk of bootstrap replicates (weights × groups), in numbers.
_CHUNK_CELLS = 2_000_000


# Bootstrap weights of the subset path are kept in memory up to this many numbers
# (200 MB); beyond, every pass regenerates the same chunks from fixed seeds.
_CACHE_CELLS = 25_000_000


def _item_weights(n_items: int, n_bootstrap: int, rng: np.random.Generator):
    """A callable giving the item-weight chunks: the actual set (ones), then bootstrap draws.

    Every call yields the same chunks, each drawn from its own seed spawned from ``rng``.
    """
    step = max(1, _CHUNK_CELLS // max(1, n_items))
    sizes = [min(step, n_bootstrap - start) for start in range(0, n_bootstrap, step)]
    seeds = [int(x) for x in rng.integers(0, 2**63 - 1, len(sizes))]
    p = np.full(n_items, 1.0 / n_items)

    def generate():
        yield np.ones((1, n_items))
        for size, seed in zip(sizes, seeds, strict=True):
            yield np.random.default_rng(seed).multinomial(n_items, p, size=size).astype(float)

    chunks = generate
    if (n_bootstrap + 1) * n_items <= _CACHE_CELLS:
        cached = list(generate())
        merged = [np.concatenate(cached)] if len(cached) <= 2 else cached

        def chunks():
            return merged

    chunks.n_rows = n_bootstrap + 1
    return chunks


def _group_draws(group_mult: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    """(b, G) counts of a bootstrap sample of items, drawn per group of identical items."""
    return multinomial_multiplicities(group_mult, b, rng)


def _draw_items(n_items: int, n_groups: int) -> bool:
    """Whether a replicate draws n item indices (cost ~ items) rather than a multinomial
    over the groups (cost ~ groups): the rule of the agreement coefficients' bootstrap."""
    return draw_by_index(n_items, n_groups)


def _group_items(values: np.ndarray) -> bool:
    """Whether grouping items by ``values`` can make the bootstrap cheaper: not when the
    distinct values are already too many for a multinomial over them."""
    import pandas as pd

    n = values.shape[0]
    return not (_draw_items(n, n) and _draw_items(n, pd.unique(values).shape[0]))


def _runs(key: np.ndarray):
    """A stable order of ``key`` and the starts and values of its runs in that order."""
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]]) if key.size else np.zeros(0, int)
    return order, starts, sorted_key[starts]


def _resampled_sums(group_mult: np.ndarray, item_group: np.ndarray, n_bootstrap: int,
                    rng: np.random.Generator, keys=(), columns: np.ndarray | None = None):
    """Linear summaries of ``n_bootstrap`` bootstrap samples of the items, in chunks.

    Items are grouped (``item_group``; ``group_mult`` items per group). A replicate is a
    sample of n items with replacement; what the statistics need of it is, for every
    ``(key_of_group, n_keys)`` in ``keys``, the number of sampled items per key, and the
    sums ``counts @ columns`` of the per-group values ``columns`` (G, d). Yields
    ``(rows, [per-key counts (b, n_keys)...], sums (b, d))`` for consecutive slices.

    A replicate is either one multinomial draw of the group counts (cost ~ groups) or,
    when the groups are nearly as many as the items (e.g. items with distinct
    predictions), n item positions drawn uniformly (cost ~ items), whichever is cheaper
    (:func:`_draw_items`). Both give the law of the item bootstrap. The second orders the
    items by their group's first key and cuts them into blocks (:class:`_ItemBlocks`):
    the numbers of draws per block are multinomial, the draws within a block uniform (the
    same law), and each block adds up its draws' columns and keys, reading only its own
    values (a bincount over every item, as before, spent its time in cache misses).
    """
    group_mult = np.asarray(group_mult)
    g = group_mult.shape[0]
    n = int(group_mult.sum())
    cols = np.zeros((g, 0)) if columns is None else np.asarray(columns, dtype=float).reshape(g, -1)
    if not _draw_items(n, g):
        runs = [(*_runs(np.asarray(key)), n_keys) for key, n_keys in keys]
        step = max(1, _CHUNK_CELLS // max(1, g))
        for start in range(0, n_bootstrap, step):
            b = min(step, n_bootstrap - start)
            counts = _group_draws(group_mult, b, rng)
            per_key = []
            for order, starts, present, n_keys in runs:
                w = np.zeros((b, n_keys))
                if starts.size:
                    w[:, present] = np.add.reduceat(counts[:, order], starts, axis=1)
                per_key.append(w)
            yield slice(start, start + b), per_key, counts @ cols
        return
    item_group = np.asarray(item_group, dtype=np.intp).reshape(-1)
    if keys:
        item_group = item_group[_runs(np.asarray(keys[0][0])[item_group])[0]]
    item_keys = [np.asarray(key).astype(np.intp, copy=False)[item_group] for key, _ in keys]
    item_cols = [np.ascontiguousarray(cols[item_group, j]) for j in range(cols.shape[1])]
    if n == 0:
        for start in range(0, n_bootstrap, _CHUNK_CELLS):
            b = min(_CHUNK_CELLS, n_bootstrap - start)
            yield slice(start, start + b), [np.zeros((b, n_keys)) for _, n_keys in keys], np.zeros((b, cols.shape[1]))
        return
    blocks = _ItemBlocks(item_keys[0] if keys else None, n)
    # A column constant over a block adds (draws × value): no gather.
    const = [blocks.constant(c) for c in item_cols]
    first = blocks.bounds[:-1]
    step = max(1, _CHUNK_CELLS // max(1, n))
    extra = [np.empty(n, dtype=np.intp) for _ in keys[1:]]
    for start in range(0, n_bootstrap, step):
        b = min(step, n_bootstrap - start)
        per_key = [np.zeros((b, n_keys)) for _, n_keys in keys]
        sums = np.zeros((b, cols.shape[1]))
        in_block = rng.multinomial(n, blocks.sizes / n, size=b)
        for r in range(b):
            at = 0
            for blk in np.flatnonzero(in_block[r]):
                m = int(in_block[r, blk])
                lo, hi = int(first[blk]), int(blocks.bounds[blk + 1])
                pos = rng.integers(0, hi - lo, m)
                if keys:
                    k_lo, k_hi = blocks.key_lo[blk], blocks.key_hi[blk]
                    if k_lo == k_hi:
                        per_key[0][r, k_lo] += m
                    else:
                        per_key[0][r, k_lo:k_hi + 1] += np.bincount(blocks.local[lo:hi].take(pos),
                                                                    minlength=k_hi - k_lo + 1)
                    for out, key in zip(extra, item_keys[1:], strict=True):
                        out[at:at + m] = key[lo:hi].take(pos)
                for j, (c, flat) in enumerate(zip(item_cols, const, strict=True)):
                    sums[r, j] += m * c[lo] if flat[blk] else c[lo:hi].take(pos).sum()
                at += m
            for w, out, (_, n_keys) in zip(per_key[1:], extra, keys[1:], strict=True):
                w[r] = np.bincount(out, minlength=n_keys)
        yield slice(start, start + b), per_key, sums


#: Items drawn one by one (:func:`_resampled_sums`) are drawn from blocks of at most this
#: many consecutive items (in the first key's order), whose values stay in the CPU caches;
#: blocks start where a key does when keys are no more than one per _MIN_BLOCK items.
_BLOCK = 1 << 15


_MIN_BLOCK = 1 << 13


class _ItemBlocks:
    """Consecutive positions of the items (sorted by their first key, if any) cut into
    blocks: a replicate draws how many of its n items fall in each block (a multinomial
    with the blocks' sizes), then that many uniform positions within each block. The law is
    the item bootstrap's; the draws and the values they read stay within a block.

    ``key_lo``/``key_hi``: the first key's range over each block (equal: one key, whose
    count is the block's); ``local``: each position's key less its block's first."""

    def __init__(self, key: np.ndarray | None, n: int):  # n ≥ 1
        cuts = np.arange(0, n, _BLOCK)
        if key is not None:
            starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
            if starts.shape[0] <= max(1, n // _MIN_BLOCK):
                cuts = np.union1d(cuts, starts)
        self.bounds = np.r_[cuts, n].astype(np.int64)
        self.sizes = np.diff(self.bounds).astype(float)
        if key is not None:
            self.key_lo = key[self.bounds[:-1]].tolist()
            self.key_hi = key[self.bounds[1:] - 1].tolist()
            self.local = key - np.repeat(key[self.bounds[:-1]], np.diff(self.bounds))

    def constant(self, values: np.ndarray) -> np.ndarray:
        """Whether ``values`` is constant over each block."""
        first = self.bounds[:-1]
        return np.minimum.reduceat(values, first) == np.maximum.reduceat(values, first)
