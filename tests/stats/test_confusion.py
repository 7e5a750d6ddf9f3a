"""The confusion matrix against a reference: its cells count the pairs (each cell's count
when grouped), and its accuracy, recall and precision are read off it as defined."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.stats import StatsInputError, confusion_matrix

pairs = st.integers(1, 6).flatmap(lambda k: st.tuples(
    st.just(k), st.lists(st.tuples(st.integers(0, k - 1), st.integers(0, k - 1), st.integers(0, 50)), max_size=60)))


@settings(max_examples=200, deadline=None)
@given(pairs)
def test_cells_are_the_grouped_counts_of_the_pairs(case):
    k, cells = case
    t, p, n = (list(x) for x in zip(*cells, strict=True)) if cells else ([], [], [])
    m = confusion_matrix(t, p, n, n_classes=k)
    expected = np.zeros((k, k), dtype=np.int64)
    for a, b, c in cells:
        expected[a, b] += c
    assert m.counts.shape == (k, k) and (m.counts == expected).all()
    assert m.n == expected.sum()
    # The same matrix from the ungrouped pairs (each cell repeated its count times).
    flat_t = [a for a, _, c in cells for _ in range(c)]
    flat_p = [b for _, b, c in cells for _ in range(c)]
    assert (confusion_matrix(flat_t, flat_p, n_classes=k).counts == expected).all()
    if m.n:
        assert m.accuracy == pytest.approx(np.trace(expected) / m.n)
    else:
        assert math.isnan(m.accuracy)
    for c in range(k):
        row, col = expected[c].sum(), expected[:, c].sum()
        assert (math.isnan(m.recall[c]) if row == 0 else m.recall[c] == pytest.approx(expected[c, c] / row))
        assert (math.isnan(m.precision[c]) if col == 0 else m.precision[c] == pytest.approx(expected[c, c] / col))


def test_a_known_matrix():
    # Gold: 3 cats, 2 dogs; labels: cat cat dog | dog cat.
    m = confusion_matrix([0, 0, 0, 1, 1], [0, 0, 1, 1, 0], n_classes=2)
    assert m.counts.tolist() == [[2, 1], [1, 1]]
    assert m.accuracy == pytest.approx(3 / 5)
    assert m.recall.tolist() == pytest.approx([2 / 3, 1 / 2])
    assert m.precision.tolist() == pytest.approx([2 / 3, 1 / 2])


@pytest.mark.parametrize("args, kwargs", [
    (([0, 2], [0, 1]), {"n_classes": 2}),
    (([0, 1], [0]), {"n_classes": 2}),
    (([0], [0], [-1]), {"n_classes": 2}),
    (([0], [0]), {"n_classes": 0}),
])
def test_bad_input_is_refused(args, kwargs):
    with pytest.raises(StatsInputError):
        confusion_matrix(*args, **kwargs)
