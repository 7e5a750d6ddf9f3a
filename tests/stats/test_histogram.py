"""The one row histogram (``row_histogram``, and ``count_histogram`` on checked counts).

Invariants, whatever the values: the distinct rows are exactly ``np.unique(axis=0)``'s
(lexicographic order, NaN equal to NaN), ``unique[inverse]`` gives the rows back, the
multiplicities sum to the number of rows and count each group, and the first row of a
group is the row ``unique`` holds. Wide rows with large values take the key past 2**62
and exercise the one overflow rule (a dense re-coding of the key so far).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.stats import StatsInputError, count_histogram, row_histogram, tally_counts


def _check_against_numpy(rows: np.ndarray) -> None:
    got = row_histogram(rows)
    ref_u, ref_i, ref_c = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(got.unique, ref_u)
    np.testing.assert_array_equal(got.inverse, ref_i.reshape(-1))
    np.testing.assert_array_equal(got.multiplicity, ref_c)
    np.testing.assert_array_equal(got.unique[got.inverse], rows)
    assert got.multiplicity.sum() == rows.shape[0]
    assert np.array_equal(np.bincount(got.inverse, minlength=len(got.multiplicity)), got.multiplicity)
    assert got.inverse.dtype == np.int64 and got.multiplicity.dtype == np.int64


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 80), n_cols=st.integers(0, 6),
       top=st.sampled_from([1, 3, 40, 70_000, 2**40]), negative=st.booleans())
def test_integer_rows_equal_numpy_unique(seed, n_rows, n_cols, top, negative):
    rng = np.random.default_rng(seed)
    rows = rng.integers(-top if negative else 0, top + 1, size=(n_rows, n_cols))
    rows = rows[rng.integers(0, n_rows, size=n_rows)]  # repeats
    _check_against_numpy(rows)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 60), n_cols=st.integers(1, 4))
def test_float_rows_with_infinities_and_nan_equal_numpy_unique(seed, n_rows, n_cols):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 3, size=(n_rows, n_cols)) * 0.5
    rows[rng.random(rows.shape) < 0.1] = -np.inf
    rows[rng.random(rows.shape) < 0.1] = np.nan
    got = row_histogram(rows)
    # NaN equals NaN in the histogram: rows compare by their bytes.
    ref = {tuple(r) for r in np.where(np.isnan(rows), 9.0, rows)}
    assert len(got.unique) == len(ref)
    np.testing.assert_array_equal(got.unique[got.inverse], rows)  # NaN positions equal too
    order = np.lexsort(np.where(np.isnan(got.unique), np.inf, got.unique).T[::-1])
    assert np.array_equal(order, np.arange(len(order)))  # lexicographic, NaN last


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_classes=st.integers(20, 80), per_item=st.integers(10, 60))
def test_many_classes_past_one_key_equal_numpy_unique(seed, n_classes, per_item):
    # 60 classes with up to 40 labels each: about 320 bits of key, re-coded on the way.
    rng = np.random.default_rng(seed)
    base = rng.multinomial(per_item, rng.dirichlet(np.full(n_classes, 0.3), size=50))
    counts = base[rng.integers(0, 50, size=400)]
    _check_against_numpy(counts)
    hist = count_histogram(counts)
    assert hist.unique.shape[1] == n_classes and hist.multiplicity.sum() == 400


def test_count_histogram_checks_counts_and_keeps_the_empty_case():
    with pytest.raises(StatsInputError, match="row 1"):
        count_histogram([[1, 2], [-1, 0]])
    empty = row_histogram(np.zeros((0, 3), dtype=np.int64))
    assert empty.unique.shape == (0, 3) and empty.multiplicity.shape == (0,) and empty.inverse.shape == (0,)
    with pytest.raises(StatsInputError, match="2-D"):
        row_histogram(np.arange(4))


def test_count_histogram_of_a_paper_table_by_hand():
    # Five items, three count vectors: (0, 3) twice, (1, 2) twice, (3, 0) once.
    hist = count_histogram([[1, 2], [0, 3], [3, 0], [0, 3], [1, 2]])
    assert hist.unique.tolist() == [[0, 3], [1, 2], [3, 0]]
    assert hist.multiplicity.tolist() == [2, 2, 1]
    assert hist.inverse.tolist() == [1, 0, 2, 0, 1]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_items=st.integers(1, 30), n_labels=st.integers(1, 6),
       n_pairs=st.integers(0, 200))
def test_tally_counts_counts_every_pair_once(seed, n_items, n_labels, n_pairs):
    rng = np.random.default_rng(seed)
    item, label = rng.integers(0, n_items, n_pairs), rng.integers(0, n_labels, n_pairs)
    got = tally_counts(item, label, n_items, n_labels)
    want = np.zeros((n_items, n_labels), dtype=np.int64)
    np.add.at(want, (item, label), 1)
    assert got.dtype == np.int64 and np.array_equal(got, want) and got.sum() == n_pairs
