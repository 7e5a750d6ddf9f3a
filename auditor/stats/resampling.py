"""Resampling, in one place: the item bootstrap's multiplicities of distinct rows (drawn
as a multinomial over the rows or as item indices, whichever is cheaper) and the Bayesian
bootstrap's Dirichlet weights (Rubin 1981).

Statistics that depend on the data only through distinct rows (see
:func:`~auditor.stats.counts.row_histogram`) resample the rows' multiplicities instead
of the items: resampling N items with replacement gives multiplicities
``Multinomial(N, m_u / N)``; the Bayesian bootstrap gives the rows weights
``Dirichlet(m_u)`` (the items' Dirichlet(1, …, 1) weights summed per row).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = [
    "INDEX_NS_PER_ITEM",
    "MULTINOMIAL_NS_PER_ROW",
    "bayesian_bootstrap_weights",
    "draw_by_index",
    "multinomial_multiplicities",
    "resampled_multiplicities",
]

#: Cost per resample of drawing the multiplicities, in nanoseconds on a current CPU:
#: ``rng.multinomial`` spends about this much per distinct row, an index draw plus
#: ``bincount`` about this much per item. The cheaper of the two is used.
MULTINOMIAL_NS_PER_ROW = 110.0
INDEX_NS_PER_ITEM = 15.0

#: Resamples are drawn in blocks of at most this many (resample × row) cells, so memory
#: stays bounded however many resamples are asked for.
BLOCK_CELLS = 1 << 21


def draw_by_index(n_items: int, n_rows: int) -> bool:
    """Whether a resample draws ``n_items`` item indices (cost ~ items) rather than a
    multinomial over ``n_rows`` distinct rows (cost ~ rows)."""
    return n_items * INDEX_NS_PER_ITEM < n_rows * MULTINOMIAL_NS_PER_ROW


def multinomial_multiplicities(multiplicity: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, U) float item-bootstrap multiplicities of U rows, by one multinomial each."""
    n = int(multiplicity.sum())
    return rng.multinomial(n, multiplicity / n, size=size).astype(float)


def resampled_multiplicities(multiplicity: np.ndarray, n_bootstrap: int, rng: np.random.Generator,
                             *, block_cells: int = BLOCK_CELLS) -> Iterator[np.ndarray]:
    """Item-bootstrap multiplicities of the distinct rows, in blocks of resamples.

    Yields float arrays of shape (B, U), B resamples at a time, whose rows are
    ``Multinomial(N, m_u / N)`` draws. They are drawn either directly (cost ~ U per
    resample) or, when the rows are nearly all distinct, by drawing N item indices and
    counting them per row (cost ~ N per resample, several times cheaper per unit than a
    multinomial over U categories); see :func:`draw_by_index`. Each block holds at most
    ``block_cells`` cells, whatever ``n_bootstrap`` is; the draws depend only on
    ``rng``'s state, so a seed reproduces them.
    """
    n_rows = int(multiplicity.size)
    n = int(multiplicity.sum())
    by_index = draw_by_index(n, n_rows)
    if by_index:
        block = max(1, min(n_bootstrap, block_cells // max(1, n)))
        # 32-bit draws and codes where they fit: a quarter faster than 64-bit ones.
        small = max(n, block * n_rows) < 2**31
        code = np.int32 if small else np.int64
        owner = np.repeat(np.arange(n_rows, dtype=code), multiplicity)
    else:
        block = max(1, min(n_bootstrap, block_cells // max(1, n_rows)))
    for start in range(0, n_bootstrap, block):
        size = min(block, n_bootstrap - start)
        if by_index:
            draw = owner[rng.integers(0, n, size=(size, n), dtype=code)]
            draw += (np.arange(size, dtype=code) * n_rows)[:, None]
            yield np.bincount(draw.ravel(), minlength=size * n_rows).reshape(size, n_rows).astype(np.float64)
        else:
            yield multinomial_multiplicities(multiplicity, size, rng)


def bayesian_bootstrap_weights(multiplicity: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """(size, U) Bayesian-bootstrap weights of U distinct rows: ``Dirichlet(m_u)`` draws
    (normalised Gamma(m_u) variables); each row of the result sums to 1."""
    g = rng.standard_gamma(np.broadcast_to(np.asarray(multiplicity, dtype=float), (size, np.size(multiplicity))))
    tot = g.sum(axis=1, keepdims=True)
    return g / np.where(tot > 0, tot, 1.0)
