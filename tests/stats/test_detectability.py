"""The accuracy response of the paired statistic and the minimum detectable drop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.simulate import draw_panel
from auditor.stats.detectability import accuracy_response, minimum_detectable_drop
from auditor.stats.monitoring import _dense_credit, accuracy_slope, cusum_scan, dense_paired_sums


def _measured(rng, hard_share, easy=0.95, hard=0.5, drop=0.1, n_classes=3, streams=40, items=1500):
    """Simulated slope and second-moment response of vendor 0's paired difference, and the
    credit moments and mean accuracy of the stationary panel."""
    out = []
    for d in (0.0, drop):
        shift = np.zeros((1, 3))
        shift[0, 0] = -d
        p = draw_panel(rng, streams, 1, items, hard_share=hard_share, easy=easy, hard=hard, n_classes=n_classes,
                       shift=shift)
        ps = dense_paired_sums(p.label, p.who, 3, n_classes)
        n, s1, s2 = ps.n[:, 0].sum(), ps.s1[:, 0].sum(), ps.s2[:, 0].sum()
        credit = _dense_credit(p.label, n_classes)[..., 0]
        out.append((s1 / n, s2 / n, float(np.nanmean(credit)), float(np.nanmean(credit ** 2))))
    (m0, q0, c0, c2), (m1, q1, _, _) = out
    return (m0 - m1) / drop, (q0 - q1) / drop, c0, c2


def test_without_a_difficulty_mix_the_response_is_the_symmetric_models():
    rng = np.random.default_rng(1)
    slope, gamma, c0, c2 = _measured(rng, 0.0, easy=0.85)
    resp = accuracy_response(3, 3, c0, c2)
    assert resp.accuracy_low == pytest.approx(resp.accuracy_high, abs=0.01)
    assert resp.accuracy_low == pytest.approx(0.85, abs=0.01)
    assert resp.slope == pytest.approx(accuracy_slope(3, 3, c0), rel=0.02)
    assert resp.slope == pytest.approx(slope, rel=0.08)
    assert resp.gamma == pytest.approx(gamma, rel=0.1)


@pytest.mark.parametrize("hard_share", [0.222, 0.5])
def test_with_easy_and_hard_items_the_interval_holds_the_mean_accuracy_and_the_slope_is_near(hard_share):
    """The homogeneous model alone over-states the slope on a mixture (by 6% at a hard share
    of 0.222, by 17% at 0.5); the midpoint of the identified interval is within a few percent."""
    rng = np.random.default_rng(2)
    slope, gamma, c0, c2 = _measured(rng, hard_share)
    resp = accuracy_response(3, 3, c0, c2)
    truth = (1 - hard_share) * 0.95 + hard_share * 0.5
    assert resp.accuracy_low - 0.005 <= truth <= resp.accuracy_high + 0.005
    assert resp.slope == pytest.approx(slope, rel=0.05)
    assert resp.gamma == pytest.approx(gamma, rel=0.08)
    assert accuracy_slope(3, 3, c0) > resp.slope


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.integers(2, 5), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_the_interval_is_ordered_and_within_the_accuracies(n_classes, labels, u, v):
    """For credit moments of any mixture of an easy and a guessing class the interval is
    ordered, lies in [1/L, 1] and the slope is between the two ends' slopes (positive)."""
    from auditor.stats.detectability import _others_for, _table

    p, c_mean, c_sq, _, _ = _table(n_classes, _others_for(n_classes, labels))
    i = int(u * (p.size - 1))
    w = 0.6 * v
    cm = w * c_mean[0] + (1 - w) * c_mean[i]
    cs = w * c_sq[0] + (1 - w) * c_sq[i]
    resp = accuracy_response(n_classes, labels, cm, cs)
    assert 1 / n_classes - 1e-9 <= resp.accuracy_low <= resp.accuracy_high <= 1 + 1e-9
    assert resp.accuracy_low <= w / n_classes + (1 - w) * p[i] + 0.02
    assert resp.slope >= -1e-12


def test_no_information_gives_nan():
    assert np.isnan(accuracy_response(1, 3, 0.5).slope)
    assert np.isnan(accuracy_response(3, 3, float("nan")).slope)
    assert np.isnan(minimum_detectable_drop(0, 0.0, 0.2, 0.4, -0.2, 0.01))
    assert np.isnan(minimum_detectable_drop(100, 0.0, 0.2, float("nan"), -0.2, 0.01))


def test_the_drop_is_found_with_the_promised_power_when_the_spread_grows():
    """Normal units whose spread grows after the drop as ``gamma`` says: at the reported drop
    the chart finds it within 4 windows in about 90% of streams."""
    rng = np.random.default_rng(8)
    R, per, change = 3000, 100, 30
    mean, sd, slope, gamma, alpha = 0.0, 0.2, 0.4, -0.2, 0.01
    d = minimum_detectable_drop(per, mean, sd, slope, gamma, alpha, baseline_units=per * (change - 3))
    sd1 = np.sqrt(sd * sd + mean * mean - d * gamma - (mean - d * slope) ** 2)
    assert sd1 > sd
    x = rng.normal(mean, sd, size=(R, change + 4, per))
    x[:, change:] = rng.normal(mean - d * slope, sd1, size=(R, 4, per))
    n = np.full((R, change + 4), float(per))
    found = cusum_scan(n, x.sum(-1), (x * x).sum(-1), alpha=alpha, max_changes=1)
    hit = np.mean([bool(f) and f[0]["direction"] < 0 and f[0]["detected"] >= change for f in found])
    assert 0.85 <= hit <= 0.95, (d, hit)
    # a drop that leaves the spread alone is seen a little sooner: a smaller minimum
    assert minimum_detectable_drop(per, mean, sd, slope, -2 * mean * slope, alpha,
                                   baseline_units=per * (change - 3)) < d
