"""Counts the statistics cannot hold exactly are refused, never wrapped around silently.

Before, ``upper_bounds([[10**30, 1], [1, 2]])`` dropped the first item and returned
U_t 0.7454 (the true value is 0.8819), and booleans passed as counts.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.stats import (
    StatsInputError,
    UndefinedBoundWarning,
    best_performance,
    certify,
    count_histogram,
    counts_from_records,
    fleiss_kappa,
    krippendorff_alpha,
    lower_bound,
    power_curve,
    upper_bounds,
)
from auditor.stats.counts import LabelCounts
from auditor.stats.validation import MAX_COUNT

ENTRY_POINTS = {
    "upper_bounds": upper_bounds,
    "lower_bound": lambda c: lower_bound(c, np.zeros(len(c), dtype=int)),
    "certify": lambda c: certify(c, np.zeros(len(c), dtype=int)),
    "krippendorff_alpha": lambda c: krippendorff_alpha(c, n_bootstrap=0),
    "fleiss_kappa": lambda c: fleiss_kappa(c, n_bootstrap=0),
    "best_performance": best_performance,
    "count_histogram": count_histogram,
    "power_curve": lambda c: power_curve(LabelCounts(np.asarray(c, dtype=object), ("a", "b"), ("x", "y")),
                                         combiner="plurality", scorer="agreement", n_bootstrap=0),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("huge", [10**30, 2**63 - 1, 2**40, float(2**70), MAX_COUNT + 1])
def test_counts_too_large_to_hold_exactly_are_refused(entry, huge):
    with pytest.raises(StatsInputError, match=r"row 0, column 0 .*counts above"):
        ENTRY_POINTS[entry]([[huge, 1], [1, 2]])


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_booleans_are_not_counts(entry):
    with pytest.raises(StatsInputError, match="booleans"):
        ENTRY_POINTS[entry]([[1, 2], [True, 2]])
    with pytest.raises(StatsInputError, match="booleans"):
        ENTRY_POINTS[entry](np.array([[True, False], [True, True]]))


def test_row_totals_are_bounded_too():
    with pytest.raises(StatsInputError, match="row 1 has"):
        upper_bounds([[1, 2], [MAX_COUNT, 5]])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10_000), min_size=3, max_size=3), min_size=1, max_size=20),
       st.integers(1, 2**20))
def test_large_legal_counts_give_the_exact_bound(rows, scale):
    """Scaling every count by the same factor leaves U_t unchanged (exact arithmetic below the limit)."""
    counts = np.asarray(rows) + 1
    scaled = counts * scale
    if scaled.sum(axis=1).max() > MAX_COUNT:
        return
    assert upper_bounds(scaled).theoretical == pytest.approx(upper_bounds(counts).theoretical, rel=1e-12)
    k = scaled.sum(axis=1).astype(float)
    exact = np.sqrt(np.mean((scaled.astype(float) ** 2).sum(axis=1) / k**2))
    assert upper_bounds(scaled).theoretical == pytest.approx(exact, rel=1e-12)


def test_inferred_numeric_string_labels_sort_naturally():
    counts = counts_from_records([("a", "x", "10"), ("a", "y", "2"), ("b", "x", "1"), ("c", "x", "c10"),
                                  ("c", "y", "c2")])
    assert counts.labels == ("1", "2", "10", "c2", "c10")
    assert counts_from_records([("a", "x", 10), ("b", "x", 2)]).labels == (2, 10)


def test_ue_with_one_label_per_item_warns_instead_of_a_silent_nan():
    with pytest.warns(UndefinedBoundWarning, match="no item has two or more labels"):
        ub = upper_bounds([[1, 0], [0, 1], [1, 0]])
    assert np.isnan(ub.empirical) and ub.theoretical == pytest.approx(1.0)
