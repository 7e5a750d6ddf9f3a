"""What no plan can know: truths whose current data have the same distribution but whose
plans' outcomes differ (``bench/_identification.py``).

A plan is a function of the current data, so for two such truths every planner announces
the same probabilities on average; when the truths certify a design with frequencies
``f_a`` and ``f_b``, one of them is missed by at least ``|f_a - f_b| / 2``. These tests pin
the construction: the data distributions agree exactly, and 10 labels per item planned from
3-label data are not decided by the data (7 from 5 are, for two-type truths).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench._identification import (
    ItemTypes,
    certified_share,
    data_distribution,
    expected_agreement,
    expected_credit,
    plurality_accuracy,
    twin_truth,
)

#: The calibration bench's kind of truth: a quarter of the items hard for the annotators
#: (0.84 → 0.54) and for the model (0.96 → 0.76).
SHARED_HARD = ItemTypes(np.array([0.84, 0.54]), np.array([0.96, 0.76]), np.array([0.75, 0.25]))


def test_plurality_accuracy_of_one_and_three_labels():
    p = np.array([0.2, 0.5, 0.9])
    np.testing.assert_allclose(plurality_accuracy(p, 1), p)
    # three labels, 3 classes: all right, two right, or one of each class (credit 1/3)
    q = (1 - p) / 2
    want = p ** 3 + 3 * p ** 2 * (1 - p) + 6 * p * q * q / 3
    np.testing.assert_allclose(plurality_accuracy(p, 3), want, rtol=1e-12)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(easy=st.floats(0.7, 0.95), penalty=st.floats(0.1, 0.4), hard=st.floats(0.1, 0.5),
       model=st.floats(0.8, 0.98))
def test_the_twin_has_the_same_data_and_agreement(easy, penalty, hard, model):
    """Whatever the two-type truth: its twin's 3-label data (label counts and whether the model
    is right) have the same distribution, its X^t has the same mean at any number of labels
    (a second moment), and its 10-label credit is at least the truth's."""
    a = ItemTypes(np.array([easy, easy - penalty]), np.array([model, model - 0.1]), np.array([1 - hard, hard]))
    b = twin_truth(a, 3, 10)
    assert np.abs(data_distribution(a, 3) - data_distribution(b, 3)).max() < 1e-9
    assert np.isclose(b.weight.sum(), 1.0) and (b.p >= 1 / 3 - 1e-12).all()
    for k in (3, 10, 25):
        assert expected_agreement(b, k) == pytest.approx(expected_agreement(a, k), abs=1e-9)
    assert expected_credit(b, 3) == pytest.approx(expected_credit(a, 3), abs=1e-9)
    assert expected_credit(b, 10) >= expected_credit(a, 10) - 1e-9


def test_ten_labels_from_three_are_not_decided_by_the_data():
    """The planner's 10-from-3 case: a twin whose labels are never worse than chance certifies
    2,000 new items × 10 labels far more often, so any plan is off by more than 0.05 for one."""
    b = twin_truth(SHARED_HARD, 3, 10)
    assert expected_credit(b, 10) - expected_credit(SHARED_HARD, 10) > 0.004
    rng = np.random.default_rng(11)
    fa = certified_share(rng, SHARED_HARD, 300)
    fb = certified_share(rng, b, 300)
    assert 0.15 < fa < 0.55 and fb - fa > 0.12, (fa, fb)


def test_seven_labels_from_five_are_decided_for_two_type_truths():
    """Five labels pin a two-type truth's moments up to the fifth, and with them its
    7-label credit: the twin is the truth (to the LP's tolerance)."""
    for p_low in (0.0, 1 / 3):
        b = twin_truth(SHARED_HARD, 5, 7, p_range=(p_low, 1.0))
        assert expected_credit(b, 7) == pytest.approx(expected_credit(SHARED_HARD, 7), abs=1e-6)
    # a three-type truth is not pinned by five labels, but nearly: its 7-label credit is
    # decided within a few ten-thousandths, where 3 labels leave 10 labels' open by 0.005
    three = ItemTypes(np.array([0.95, 0.75, 0.5]), np.array([0.97, 0.9, 0.7]), np.array([0.5, 0.3, 0.2]))
    width = (expected_credit(twin_truth(three, 5, 7, p_range=(0.0, 1.0)), 7)
             - expected_credit(twin_truth(three, 5, 7, p_range=(0.0, 1.0), largest=False), 7))
    assert 2e-4 < width < 2e-3
