"""The vendor change detector: paired differences, the calibrated CUSUM, what it can see.

The simulations use :func:`auditor.simulate.draw_panel` (items of mixed difficulty: easy
ones labelled right with probability 0.95, hard ones 0.5; 3 classes; one label per
vendor and item) and check the guarantees :mod:`auditor.stats.monitoring` documents: the
yearly false-alarm rate, one dataset change (no vendor alert) when the items get easier,
the power against a degrading vendor, and the minimum detectable drop.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from auditor.simulate import draw_panel
from auditor.stats.monitoring import (
    DEFAULT_K,
    accuracy_slope,
    crossing_probability,
    cusum_scan,
    cusum_threshold,
    dense_paired_sums,
    minimum_detectable_shift,
    paired_sums,
)
from auditor.stats.quality import QualityMonitor, detect_changes

ALPHA = 0.05
WEEKS = 52


def _scan_panels(rng, streams, *, per_week=150, n_groups=3, slots=None, hard_share=0.222, shift=None):
    """(group changes per stream, dataset-level changes per stream), budget as detect_changes spends it."""
    groups, level = [], []
    for c in range(0, streams, 50):
        S = min(50, streams - c)
        share = hard_share(rng, S) if callable(hard_share) else hard_share
        d = draw_panel(rng, S, WEEKS, per_week, n_groups=n_groups, slots=slots, hard_share=share, shift=shift)
        ps = dense_paired_sums(d.label, d.who, n_groups, 3)
        R = S * n_groups
        found = cusum_scan(ps.n.reshape(R, WEEKS), ps.s1.reshape(R, WEEKS), ps.s2.reshape(R, WEEKS),
                           alpha=ALPHA / (n_groups + 1), max_changes=1, s3=ps.s3.reshape(R, WEEKS),
                           pool=np.repeat(np.arange(S), n_groups))
        groups += [found[i * n_groups:(i + 1) * n_groups] for i in range(S)]
        level += cusum_scan(ps.level_n, ps.level_s1, ps.level_s2, alpha=ALPHA / (n_groups + 1), max_changes=1,
                            between=True)
    return groups, level


# --- the chain and the thresholds ---------------------------------------------------------


def test_the_markov_chain_matches_a_simulated_cusum():
    """Brook & Evans: P(a CUSUM of N(shift, 1) increments crosses h within 52 steps)."""
    rng = np.random.default_rng(1)
    for shift, h in ((0.0, 5.0), (-1.0, 4.0)):
        z = rng.standard_normal((40_000, 52)) - shift  # a drop of the mean raises the drop CUSUM
        c = np.zeros(z.shape[0])
        crossed = np.zeros(z.shape[0], bool)
        for w in range(52):
            c = np.maximum(0.0, c + z[:, w] - DEFAULT_K)
            crossed |= c > h
        p = crossing_probability(h, DEFAULT_K, 52, shift=-shift)
        assert abs(crossed.mean() - p) <= 4 * np.sqrt(p * (1 - p) / z.shape[0]) + 0.002, (shift, crossed.mean(), p)


@pytest.mark.parametrize("alpha", [0.05, 0.0125])
def test_the_calibrated_chart_keeps_its_yearly_rate_on_normal_units(alpha):
    """The self-starting chart as it runs (held-out windows, estimated spread), on normal
    units of equal weekly volume: a false alarm within 52 windows in about ``alpha`` of the
    streams (the threshold comes from a simulation with another seed)."""
    rng = np.random.default_rng(7)
    R, per = 6000, 50
    x = rng.normal(0.3, 0.2, size=(R, WEEKS, per))
    n = np.full((R, WEEKS), float(per))
    found = cusum_scan(n, x.sum(-1), (x * x).sum(-1), alpha=alpha, max_changes=1)
    rate = np.mean([bool(f) for f in found])
    assert abs(rate - alpha) <= 4 * np.sqrt(alpha * (1 - alpha) / R), rate
    assert cusum_threshold(alpha) > cusum_threshold(2 * alpha)


def test_the_minimum_detectable_shift_is_detected_with_the_promised_power_on_normal_units():
    """At the reported shift the chart (starting from a long stationary baseline) finds the
    drop within 4 windows in about 90% of streams: normal units, so the figure checks the
    computation; the benchmark checks it on labels."""
    rng = np.random.default_rng(8)
    R, per, sd, change = 3000, 100, 0.3, 30
    delta = float(minimum_detectable_shift(per, sd, 0.01, baseline_units=per * (change - 3))[0])
    x = rng.normal(0.5, sd, size=(R, change + 4, per))
    x[:, change:] -= delta
    n = np.full((R, change + 4), float(per))
    found = cusum_scan(n, x.sum(-1), (x * x).sum(-1), alpha=0.01, max_changes=1)
    hit = np.mean([bool(f) and f[0]["direction"] < 0 and f[0]["detected"] >= change for f in found])
    assert 0.80 <= hit <= 0.97, (delta, hit)


# --- the paired statistic -------------------------------------------------------------------


def test_paired_sums_of_records_equal_the_dense_panels():
    rng = np.random.default_rng(3)
    d = draw_panel(rng, 1, 3, 40)
    dense = dense_paired_sums(d.label, d.who, 3, 3)
    W, n_items, K = d.label.shape[1:]
    window = np.repeat(np.arange(W), n_items * K)
    item = np.tile(np.repeat(np.arange(n_items), K), W)
    group = d.who[0].ravel()
    label = d.label[0].ravel().astype(np.int64)
    counts = np.zeros((W * n_items, 3), dtype=np.int64)
    np.add.at(counts, (window * n_items + item, label), 1)
    others = counts[window * n_items + item]
    others[np.arange(label.size), label] -= 1
    top = others.max(1)
    tied = others == top[:, None]
    credit = tied[np.arange(label.size), label] / tied.sum(1)
    ps = paired_sums(item, group, window, credit, 3, W)
    np.testing.assert_allclose(ps.n, dense.n[0])
    np.testing.assert_allclose(ps.s1, dense.s1[0], atol=1e-9)
    np.testing.assert_allclose(ps.s2, dense.s2[0], atol=1e-9)
    np.testing.assert_allclose(ps.level_s1, dense.level_s1[0], atol=1e-9)
    # a difference against the others sums to zero over an item's groups
    assert abs(ps.s1.sum()) < 1e-9


def test_harder_items_move_every_vendor_together_and_leave_the_paired_mean():
    rng = np.random.default_rng(4)
    easy = dense_paired_sums(*(lambda d: (d.label, d.who))(draw_panel(rng, 4, 4, 2000, hard_share=0.1)), 3, 3)
    hard = dense_paired_sums(*(lambda d: (d.label, d.who))(draw_panel(rng, 4, 4, 2000, hard_share=0.7)), 3, 3)
    for ps in (easy, hard):
        assert np.abs(ps.s1.sum((0, 2)) / ps.n.sum((0, 2))).max() < 0.01
    assert hard.level_s1.sum() / hard.level_n.sum() < easy.level_s1.sum() / easy.level_n.sum() - 0.2


def test_the_accuracy_slope_matches_a_simulated_drop():
    """The paired agreement difference falls by slope × the accuracy lost (no difficulty mix)."""
    rng = np.random.default_rng(5)
    shift = np.zeros((2, 3))
    shift[1, 0] = -0.1
    d = draw_panel(rng, 20, 2, 3000, easy=0.85, hard=0.85, hard_share=0.0, shift=shift)
    ps = dense_paired_sums(d.label, d.who, 3, 3)
    mean = ps.s1.sum(0) / ps.n.sum(0)
    measured = (mean[0, 0] - mean[0, 1]) / 0.1
    base = dense_paired_sums(d.label[:, :1], d.who[:, :1], 3, 3)
    agreement = float(base.level_s1.sum() / base.level_n.sum())
    assert accuracy_slope(3, 3, agreement) == pytest.approx(measured, rel=0.1)


# --- the detector on labels -------------------------------------------------------------------


@pytest.mark.slow
def test_stationary_vendors_rarely_alert_even_when_the_items_change():
    rng = np.random.default_rng(11)
    for share in (0.222, lambda r, S: r.uniform(0.1, 0.5, (S, WEEKS))):
        groups, level = _scan_panels(rng, 200, hard_share=share)
        any_alert = np.mean([any(map(bool, g)) or bool(lv) for g, lv in zip(groups, level, strict=True)])
        assert any_alert <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 200), any_alert


@pytest.mark.slow
def test_items_getting_easier_is_one_dataset_change_and_no_vendor_alert():
    rng = np.random.default_rng(12)
    step = np.where(np.arange(WEEKS) < 26, 0.7, 0.3)[None, :]
    groups, level = _scan_panels(rng, 200, hard_share=step)
    assert np.mean([bool(lv) and lv[0]["direction"] > 0 and abs(lv[0]["start"] - 26) <= 2 for lv in level]) >= 0.95
    assert np.mean([any(map(bool, g)) for g in groups]) <= 0.05


@pytest.mark.slow
def test_a_vendor_dropping_by_010_at_150_a_week_is_found_within_8_weeks():
    rng = np.random.default_rng(13)
    shift = np.zeros((WEEKS, 3))
    shift[10:, 0] = -0.10
    groups, _ = _scan_panels(rng, 200, shift=shift)
    first = [next((c for c in g[0] if c["direction"] < 0 and c["detected"] >= 10), None) for g in groups]
    delays = [c["detected"] - 10 for c in first if c is not None]
    assert sum(d < 8 for d in delays) / len(first) >= 0.90
    assert np.median(delays) <= 5
    assert np.mean([c is not None and abs(c["start"] - 10) <= 2 for c in first]) >= 0.75


def test_detect_changes_and_the_monitor_agree_and_report_the_dataset_level_once():
    """Records of three vendors whose items get much harder in week 6 (no vendor changes):
    one dataset change, no vendor change, offline and fed batch by batch alike."""
    rng = np.random.default_rng(14)
    share = np.where(np.arange(12) < 6, 0.1, 0.8)[None, :]
    d = draw_panel(rng, 1, 12, 300, hard_share=share)
    vendors = np.array(["acme", "bolt", "crowd"])
    W, n_items, K = d.label.shape[1:]
    frame = pd.DataFrame({
        "item_id": np.repeat([f"w{w}-i{i}" for w in range(W) for i in range(n_items)], K),
        "annotator_id": np.tile([f"{v}-1" for v in vendors], W * n_items),
        "vendor": np.tile(vendors, W * n_items), "label": d.label[0].ravel().astype(int),
        "batch": np.repeat(np.arange(W), n_items * K)})
    report = detect_changes(frame, by="vendor", window="batch", labels=[0, 1, 2])
    assert report.changes.empty
    assert len(report.dataset_changes) == 1 and report.dataset_changes.iloc[0]["direction"] == "drop"
    assert abs(int(report.dataset_changes.iloc[0]["start"]) - 6) <= 1
    item_codes, items = pd.factorize(frame["item_id"])
    counts = np.zeros((len(items), 3), dtype=np.int64)
    np.add.at(counts, (item_codes, frame["label"].to_numpy()), 1)
    monitor = QualityMonitor()
    for w in range(W):
        rows = np.flatnonzero(frame["batch"].to_numpy() == w)
        monitor.add_batch(w, item=item_codes[rows], group=frame["vendor"].to_numpy()[rows],
                          label=frame["label"].to_numpy()[rows], counts=counts)
    assert monitor.changes().empty
    online = monitor.dataset_changes()
    cols = ["metric", "direction", "start", "detected_at", "before", "after", "evidence"]
    offline = report.dataset_changes.assign(start=lambda f: f["start"].astype(int),
                                            detected_at=lambda f: f["detected_at"].astype(int))
    pd.testing.assert_frame_equal(online[cols].reset_index(drop=True), offline[cols].reset_index(drop=True),
                                  check_dtype=False)
    sens = report.sensitivity
    assert set(sens["group"]) == set(vendors) and (sens["min_drop"] > 0).all()
    assert (sens["units_per_window"] == n_items).all()


def test_skewed_units_at_low_volume_keep_the_false_alarm_rate_with_their_cubes():
    """Thirty units a window with a long lower tail (an annotator's paired agreement, gold
    correctness near 1): a normal threshold takes the tail for drops; with the sums of
    cubes the chart removes the skewness and keeps the yearly rate."""
    rng = np.random.default_rng(12)
    R, per, alpha = 4000, 30, 0.05
    x = -rng.exponential(1.0, size=(R, WEEKS, per))
    n = np.full((R, WEEKS), float(per))
    s1, s2, s3 = x.sum(-1), (x * x).sum(-1), (x ** 3).sum(-1)
    plain = np.mean([bool(f) for f in cusum_scan(n, s1, s2, alpha=alpha, max_changes=1)])
    fixed = np.mean([bool(f) for f in cusum_scan(n, s1, s2, alpha=alpha, max_changes=1, s3=s3, pool=np.arange(R))])
    se = np.sqrt(alpha * (1 - alpha) / R)
    assert fixed <= alpha + 4 * se, fixed
    assert plain > fixed + 4 * se, (plain, fixed)
