"""Hoeffding's bounds, in one place: the margin inverts the tail, the bounds are the
textbook ones, and the two-sided interval spends half the error on each side."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.stats import hoeffding_delta, hoeffding_interval, hoeffding_lower, hoeffding_margin


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 10**6), delta=st.floats(1e-12, 0.999))
def test_the_margin_inverts_the_tail(n, delta):
    t = float(hoeffding_margin(n, delta))
    assert float(hoeffding_delta(n, t)) == pytest.approx(delta, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(mean=st.floats(0, 1), n=st.integers(1, 10**5), confidence=st.floats(0.5, 0.999))
def test_interval_brackets_the_mean_and_is_symmetric_before_clipping(mean, n, confidence):
    low, high = hoeffding_interval(mean, n, confidence=confidence)
    assert 0.0 <= low <= mean <= high <= 1.0
    eps = math.sqrt(math.log(2.0 / (1.0 - confidence)) / (2.0 * n))
    assert float(low) == pytest.approx(max(mean - eps, 0.0), abs=1e-12)
    assert float(high) == pytest.approx(min(mean + eps, 1.0), abs=1e-12)


def test_lower_bound_by_hand_and_without_items():
    # 0.9 over 200 items at 95 %: 0.9 - sqrt(ln 20 / 400) = 0.9 - 0.08654...
    assert float(hoeffding_lower(0.9, 200)) == pytest.approx(0.9 - math.sqrt(math.log(20.0) / 400.0), abs=1e-15)
    assert float(hoeffding_lower(0.9, 200)) == pytest.approx(0.81346, abs=1e-5)
    got = hoeffding_lower(np.array([0.5, 0.01]), np.array([0, 10]))
    assert math.isnan(got[0]) and got[1] == 0.0  # no items: NaN; below 0: clipped
    assert np.isinf(hoeffding_margin(0, 0.05))
