"""Anytime-valid and variance-adaptive certification; HMS on the feasible interval."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.simulate import least_favourable_model_accuracy, population_values, simulate_streams
from auditor.stats import (
    AnytimeState,
    MeanStream,
    StatsInputError,
    anytime_confidence,
    certify,
    confidence,
    confidence_sequence,
    item_values,
)
from auditor.stats.certification import (
    _anytime_log_evalue,
    _betting_paths,
    _confidence_many,
    _score_of_log_evalue,
)
from auditor.stats.confseq import _bound, _prefix_sums, log_evalue

ROOT = Path(__file__).resolve().parents[2]

# --- HMS outside the feasible interval ---------------------------------------------


def test_hms_is_clamped_to_the_feasible_interval():
    # (L - U)/2 = 0.0075 > L^2 - U^2 = 0.005475: the paper's HMS split has t_l < 0 and
    # its formula reports 0.9878, above the best valid split (OMS, 0.8606).
    hms = confidence(0.19, 0.175, 80000, method="hms")
    oms = confidence(0.19, 0.175, 80000, method="oms")
    assert oms.score == pytest.approx(0.8606, abs=5e-5)
    assert hms.clamped and not oms.clamped
    assert hms.t_u == pytest.approx(0.19**2 - 0.175**2, rel=1e-12)
    assert hms.t_l == 0.0
    assert hms.score == pytest.approx(-math.exp(-2 * 80000 * hms.t_u**2), rel=1e-9)
    assert hms.score <= oms.score


@pytest.mark.parametrize(("lower", "upper", "n"), [(0.971, 0.939, 1821), (0.899, 0.879, 10000),
                                                   (0.919, 0.879, 10000)])
def test_table4_cases_are_not_clamped(lower, upper, n):
    assert not confidence(lower, upper, n, method="hms").clamped


@settings(max_examples=200, deadline=None)
@given(upper=st.floats(0.0, 0.99), margin=st.floats(1e-4, 0.5), n=st.integers(10, 10**6))
def test_hms_split_is_always_valid_and_never_above_oms(upper, margin, n):
    lower = min(upper + margin, 1.0)
    if lower <= upper:
        return
    hms = confidence(lower, upper, n, method="hms")
    oms = confidence(lower, upper, n, method="oms")
    if math.isnan(hms.t_u):
        return
    assert 0.0 <= hms.t_u <= lower**2 - upper**2 + 1e-15
    assert hms.t_l >= 0.0
    assert hms.score <= oms.score + 1e-12
    assert hms.clamped == ((lower - upper) / 2 > lower**2 - upper**2)


# --- vectorised confidence (used by the simulations) --------------------------------


@settings(max_examples=80, deadline=None)
@given(upper=st.floats(0.3, 0.99), margin=st.floats(1e-4, 0.3), n=st.integers(10, 10**6),
       n_lower=st.integers(10, 10**6), var_u=st.floats(0.0, 0.25), var_l=st.floats(0.0, 0.25),
       method=st.sampled_from(["hms", "oms", "bernstein"]))
def test_vectorised_confidence_equals_the_scalar_one(upper, margin, n, n_lower, var_u, var_l, method):
    lower = min(upper + margin, 1.0)
    kw = dict(var_upper=var_u, var_lower=var_l) if method == "bernstein" else {}
    scalar = confidence(lower, upper, n, n_lower=n_lower, method=method, **kw).score
    many = _confidence_many([lower], [upper], [n], [n_lower], method=method, **kw)[0]
    assert many == pytest.approx(scalar, abs=1e-9)


# --- fixed-N empirical Bernstein ------------------------------------------------------


def test_bernstein_needs_variances_and_checks_them():
    with pytest.raises(StatsInputError, match="var_upper"):
        confidence(0.95, 0.85, 1000, method="bernstein")
    with pytest.raises(StatsInputError, match="var_lower"):
        confidence(0.95, 0.85, 1000, method="bernstein", var_upper=0.04, var_lower=-1)
    with pytest.raises(StatsInputError, match="anytime"):
        confidence(0.95, 0.85, 1000, method="anytime")


def test_bernstein_beats_hoeffding_when_the_values_vary_little():
    hoeff = confidence(0.92, 0.85, 1000, method="oms").score
    bern = confidence(0.92, 0.85, 1000, method="bernstein", var_upper=0.04, var_lower=0.07).score
    assert bern > hoeff
    # the Maurer-Pontil deviation at the chosen split, recomputed by hand
    c = confidence(0.92, 0.85, 1000, method="bernstein", var_upper=0.04, var_lower=0.07)

    def dev(delta, var, n):
        y = math.log(2 / delta)
        return math.sqrt(2 * var * y / n) + 7 * y / (3 * (n - 1))

    d_u = 2 * math.exp(-_y_of(c.t_u, 0.04, 1000))
    d_l = 2 * math.exp(-_y_of(c.t_l, 0.07, 1000))
    assert dev(d_u, 0.04, 1000) == pytest.approx(c.t_u, rel=1e-9)
    assert dev(d_l, 0.07, 1000) == pytest.approx(c.t_l, rel=1e-9)
    assert c.score == pytest.approx(1 - d_u - d_l, abs=1e-12)


def _y_of(t, var, n):
    a, c = math.sqrt(2 * var / n), 7 / (3 * (n - 1))
    return ((-a + math.sqrt(a * a + 4 * c * t)) / (2 * c)) ** 2


# --- confidence sequences -------------------------------------------------------------


def test_confidence_sequence_covers_and_shrinks():
    rng = np.random.default_rng(3)
    x = (rng.random(5000) < 0.1).astype(float)
    cs = confidence_sequence(x, alpha=0.05)
    assert cs.lower.shape == cs.upper.shape == (5000,)
    assert (cs.lower <= cs.mean + 1e-12).all() and (cs.mean <= cs.upper + 1e-12).all()
    assert cs.lower[-1] < 0.1 < cs.upper[-1]
    assert cs.upper[-1] - cs.lower[-1] < cs.upper[99] - cs.lower[99]
    # variance-adaptive: at variance 0.09, tighter than even the fixed-N Hoeffding interval
    assert cs.upper[-1] - cs.lower[-1] < 2 * math.sqrt(math.log(2 / 0.05) / (2 * 5000))


@pytest.mark.parametrize(("mean", "sided"), [(0.5, "lower"), (0.9, "lower"), (0.05, "upper"), (0.7, "two")])
def test_confidence_sequence_miss_rate_over_all_prefixes(mean, sided):
    # 600 streams of 1000 values, every prefix looked at: P(ever missing) <= alpha.
    rng = np.random.default_rng(int(mean * 100))
    x = (rng.random((600, 1000)) < mean).astype(float)
    n, s, v = _prefix_sums(x)
    idx = np.arange(9, 1000, 10)  # every 10th prefix keeps the test fast; the bound is for all
    n, s, v = n[:, idx], s[:, idx], v[:, idx]
    alpha = 0.1
    a = alpha / 2 if sided == "two" else alpha
    miss = np.zeros(600, dtype=bool)
    if sided in ("two", "lower"):
        miss |= (_bound(n, s, v, math.log(1 / a), side="lower") > mean).any(axis=1)
    if sided in ("two", "upper"):
        miss |= (_bound(n, s, v, math.log(1 / a), side="upper") < mean).any(axis=1)
    assert miss.mean() <= alpha


def test_confidence_sequence_rejects_bad_input():
    with pytest.raises(StatsInputError, match="row 1"):
        confidence_sequence([0.5, 1.5])
    with pytest.raises(StatsInputError, match="alpha"):
        confidence_sequence([0.5], alpha=1.0)
    with pytest.raises(StatsInputError, match="sided"):
        confidence_sequence([0.5], sided="left")
    with pytest.raises(StatsInputError, match="empty"):
        confidence_sequence([])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=60), st.lists(st.integers(0, 60), max_size=4))
def test_stream_updated_in_batches_equals_one_pass(values, cuts):
    one = MeanStream()
    one.update(values)
    batched = MeanStream()
    edges = [0, *sorted(c % (len(values) + 1) for c in cuts), len(values)]
    for a, b in itertools.pairwise(edges):
        batched.update(values[a:b])
    assert batched.n == one.n == len(values)
    assert batched.s == pytest.approx(one.s, abs=1e-9) and batched.v == pytest.approx(one.v, abs=1e-9)
    again = MeanStream.from_dict(batched.to_dict())
    assert again.lower(0.05) == pytest.approx(one.lower(0.05), abs=1e-9)
    cs = confidence_sequence(values, alpha=0.05, sided="lower")
    assert one.lower(0.05) == pytest.approx(cs.lower[-1], abs=1e-9)


def test_e_process_is_one_before_any_data_and_monotone_in_theta():
    assert float(log_evalue(0.3, 0, 0.0, 0.0, side="above")) == pytest.approx(0.0)
    th = np.linspace(0, 1, 11)
    up = log_evalue(th, 100, 60.0, 20.0, side="above")
    down = log_evalue(th, 100, 60.0, 20.0, side="below")
    assert (np.diff(up) < 0).all() and (np.diff(down) > 0).all()


# --- the anytime certification ----------------------------------------------------


def test_anytime_e_process_at_the_exact_boundary():
    """theta_L = sqrt(theta_U) exactly, high-variance streams: P(ever E* >= 20) <= 5%.

    Independent Bernoulli streams with means 0.9 (agreement) and 0.81 (X): the pair is
    on the boundary of H0, where the bound has no slack at all.
    """
    rng = np.random.default_rng(11)
    looks = np.arange(49, 3000, 50)
    lo = (rng.random((1000, 3000)) < 0.9).astype(float)
    up = (rng.random((1000, 3000)) < 0.81).astype(float)
    n, sl, vl = (q[:, looks] for q in _prefix_sums(lo))
    _, su, vu = (q[:, looks] for q in _prefix_sums(up))
    s = _score_of_log_evalue(_anytime_log_evalue(n, su, vu, n, sl, vl))
    assert (s >= 0.95).any(axis=1).mean() <= 0.05
    # and the e-process does react: a model clearly better is certified
    better = (rng.random((200, 3000)) < 0.97).astype(float)
    n2, sb, vb = (q[:, looks] for q in _prefix_sums(better))
    s2 = _score_of_log_evalue(_anytime_log_evalue(n2, su[:200], vu[:200], n2, sb, vb))
    assert (s2[:, -1] >= 0.95).mean() > 0.9


def test_anytime_minimum_is_the_infimum_over_the_null_boundary():
    rng = np.random.default_rng(5)
    counts, preds = simulate_streams(rng, 1, 3000, (0.7, 0.8, 0.9), 0.93)
    st_ = AnytimeState()
    st_.update(counts[0], preds[0])
    c = st_.confidence("theoretical", method="anytime-fan", tau=0.01, split=0.4)
    b = np.linspace(0, 1, 200001)
    a = np.minimum(1.0, 0.01 + np.sqrt(b))
    log_e = np.logaddexp(math.log(0.4) + log_evalue(a, st_.lower.n, st_.lower.s, st_.lower.v, side="above"),
                         math.log(0.6) + log_evalue(b, st_.upper_t.n, st_.upper_t.s, st_.upper_t.v, side="below"))
    e = math.exp(log_e.min())
    assert c.evalue == pytest.approx(e, rel=1e-6)
    assert c.score == pytest.approx(max(1 - 1 / e, -1.0), abs=1e-9)


def test_certify_anytime_reads_rows_as_a_stream():
    rng = np.random.default_rng(8)
    counts, preds = simulate_streams(rng, 1, 4000, (0.7, 0.75, 0.8, 0.85, 0.9), 0.95)
    counts, preds = counts[0].astype(int), preds[0].astype(int)
    res = certify(counts, preds, method="anytime")
    assert set(res.confidences) == {(b, m) for b in ("theoretical", "empirical") for m in ("hms", "oms", "anytime")}
    assert res.method == "anytime" and res.score == res.confidences[("theoretical", "anytime")].score
    assert res.certified == (res.score >= 0.95)
    state = AnytimeState()
    for a in range(0, 4000, 1000):
        state.update(counts[a:a + 1000], preds[a:a + 1000])
    assert state.confidence().score == pytest.approx(res.score, abs=1e-9)
    d = res.to_dict()
    assert d["verdict"]["method"] == "anytime" and "evalue" in d["confidence"]["theoretical/anytime"]
    # paper's methods do not depend on the order; the anytime one may
    rev = certify(counts[::-1], preds[::-1], method="anytime")
    assert rev.confidences[("theoretical", "oms")].score == pytest.approx(res.confidences[("theoretical", "oms")].score)
    bern = certify(counts, preds, method="bernstein")
    assert bern.score > bern.confidences[("theoretical", "oms")].score


def test_item_values_means_are_the_bounds():
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 4, size=(300, 3))
    preds = rng.integers(0, 3, size=300)
    v = item_values(counts, preds)
    res = certify(counts, preds)
    assert math.sqrt(np.nanmean(v.x_t)) == pytest.approx(res.u_t)
    assert math.sqrt(np.nanmean(v.x_e)) == pytest.approx(res.u_e)
    assert np.nanmean(v.agreement) == pytest.approx(res.l)


def test_anytime_rejects_bad_arguments():
    with pytest.raises(StatsInputError, match="split"):
        certify([[2, 0], [0, 2]], [0, 1], method="anytime-fan", split=1.0)
    with pytest.raises(StatsInputError, match="streams"):
        anytime_confidence(MeanStream(), MeanStream())
    with pytest.raises(StatsInputError, match="method"):
        certify([[2, 0]], [0], method="gd")


# --- calibration and power with a known oracle --------------------------------------

ANNOTATORS = (0.70, 0.75, 0.80, 0.85, 0.90)  # average 0.80
LOOKS = np.arange(100, 10_001, 100)


def _verdicts(counts, preds, looks, bound, threshold=0.95):
    """Certified? per stream and look, for the anytime methods (betting and the fan pair),
    fixed-N OMS and fixed-N Bernstein."""
    s, n, c = counts.shape
    v = item_values(counts.reshape(-1, c), preds.reshape(-1))
    x = (v.x_t if bound == "theoretical" else v.x_e).reshape(s, n)
    a = v.agreement.reshape(s, n)
    idx = np.asarray(looks) - 1
    nn, su, vu = (q[:, idx] for q in _prefix_sums(x))
    _, sl, vl = (q[:, idx] for q in _prefix_sums(a))
    mu, ml = su / nn, sl / nn
    var_u = np.maximum(np.cumsum(x * x, axis=1)[:, idx] - nn * mu**2, 0) / (nn - 1)
    var_l = np.maximum(np.cumsum(a * a, axis=1)[:, idx] - nn * ml**2, 0) / (nn - 1)
    if bound == "empirical":  # the betting stream takes items with two labels only
        ok = ~np.isnan(x)
        m = int(ok.sum(axis=1).min())
        xb, ab = np.stack([r[k][:m] for r, k in zip(x, ok, strict=True)]), \
            np.stack([r[k][:m] for r, k in zip(a, ok, strict=True)])
    else:
        xb, ab = x, a
    return {
        "anytime": _betting_paths(ab, xb)[:, np.minimum(idx, xb.shape[1] - 1)] >= -math.log1p(-threshold),
        "anytime-fan": _score_of_log_evalue(_anytime_log_evalue(nn, su, vu, nn, sl, vl)) >= threshold,
        "oms": _confidence_many(ml, np.sqrt(mu), nn, nn, method="oms") >= threshold,
        "bernstein": _confidence_many(ml, np.sqrt(mu), nn, nn, method="bernstein", var_upper=var_u,
                                      var_lower=var_l) >= threshold,
    }


def test_least_favourable_accuracy_puts_the_expected_agreement_on_the_bound():
    pop = population_values(ANNOTATORS)
    assert pop.average_accuracy == pytest.approx(0.80)
    assert math.sqrt(pop.theta_t) >= pop.average_accuracy  # Theorem 1 holds in the simulator
    for bound, theta in (("theoretical", pop.theta_t), ("empirical", pop.theta_e)):
        acc = least_favourable_model_accuracy(ANNOTATORS, bound=bound)
        assert pop.expected_agreement(acc) == pytest.approx(math.sqrt(theta), abs=1e-12)
        assert pop.expected_agreement(acc) <= acc  # Theorem 3 holds too
    # the simulator agrees with the enumeration
    counts, preds = simulate_streams(np.random.default_rng(0), 4, 20000, ANNOTATORS, 0.9)
    v = item_values(counts.reshape(-1, 3), preds.reshape(-1))
    assert np.mean(v.x_t) == pytest.approx(pop.theta_t, abs=3e-3)
    assert np.mean(v.x_e) == pytest.approx(pop.theta_e, abs=3e-3)
    assert np.mean(v.agreement) == pytest.approx(pop.expected_agreement(0.9), abs=3e-3)


@pytest.mark.parametrize("accuracies", [(0.9, 0.6), (0.7, 0.75, 0.8, 0.85), (0.55, 0.9, 0.8, 0.7, 0.95)])
@pytest.mark.parametrize("n_classes", [2, 3, 4])
def test_population_values_equal_a_full_enumeration(accuracies, n_classes):
    acc = np.asarray(accuracies)
    k = acc.size
    theta_t = right = 0.0
    for labels in itertools.product(range(n_classes), repeat=k):
        lab = np.asarray(labels)
        p = float(np.prod(np.where(lab == 0, acc, (1 - acc) / (n_classes - 1))))
        m = np.bincount(lab, minlength=n_classes)
        theta_t += p * (m * m).sum() / k**2
        tied = m == m.max()
        right += p * tied[0] / tied.sum()
    pop = population_values(acc, n_classes)
    assert pop.theta_t == pytest.approx(theta_t, abs=1e-12)
    assert pop.credit_right == pytest.approx(right, abs=1e-12)
    # one wrong class's share: what is left of the plurality's credit, split evenly
    assert pop.credit_right + (n_classes - 1) * pop.credit_wrong == pytest.approx(1.0, abs=1e-12)


WIDE_PANEL = tuple(np.linspace(0.7, 0.9, 25).tolist())  # 25 labels per item: U is nearly known


@pytest.mark.slow
@pytest.mark.parametrize(("case", "bounds"), [
    ("as good as the average annotator", ("theoretical", "empirical")),
    ("0.03 worse", ("theoretical", "empirical")),
    ("least favourable for U_t", ("theoretical",)),
    ("least favourable for U_e", ("empirical",)),
    ("least favourable for U_t, 25 labels per item", ("theoretical",)),
])
def test_anytime_is_rarely_ever_certified_when_checked_every_100_items(case, bounds):
    """500 streams, looked at every 100 items up to 10,000: P(ever certified) <= 5%.

    The least favourable cases put the model's expected agreement with the plurality
    exactly on the population value of U: the bounds have no slack. With 25 labels per
    item the per-item X hardly varies, U is nearly known, and the verdict rests on L
    alone.
    """
    panel = WIDE_PANEL if "25 labels" in case else ANNOTATORS
    acc = {
        "as good as the average annotator": 0.80,
        "0.03 worse": 0.77,
        "least favourable for U_t": least_favourable_model_accuracy(ANNOTATORS, bound="theoretical"),
        "least favourable for U_e": least_favourable_model_accuracy(ANNOTATORS, bound="empirical"),
        "least favourable for U_t, 25 labels per item": least_favourable_model_accuracy(WIDE_PANEL),
    }[case]
    counts, preds = simulate_streams(np.random.default_rng(zlib.crc32(case.encode())), 500, 10_000, panel, acc)
    for bound in bounds:
        ever = {k: float(v.any(axis=1).mean()) for k, v in _verdicts(counts, preds, LOOKS, bound).items()}
        print(f"\n{case} (model {acc:.4f}), U_{bound[0]}: ever certified over 100 looks: {ever}")
        assert ever["anytime"] <= 0.05 and ever["anytime-fan"] <= 0.05


@pytest.mark.slow
def test_power_at_1000_and_2000_items():
    """Model 0.95, annotators ~0.80, 3 classes, 5 labels per item, 500 datasets."""
    counts, preds = simulate_streams(np.random.default_rng(2026), 500, 2000, ANNOTATORS, 0.95)
    rate = {k: v.mean(axis=0) for k, v in _verdicts(counts, preds, [1000, 2000], "theoretical").items()}
    print(f"\ncertified at N=1000, 2000: { {k: v.tolist() for k, v in rate.items()} }")
    assert (rate["anytime"] >= rate["anytime-fan"]).all() and (rate["anytime-fan"] >= rate["oms"]).all()
    assert (rate["bernstein"] >= rate["oms"]).all()
    assert rate["bernstein"][0] > rate["oms"][0]


# --- the bench's smoke mode -------------------------------------------------------


def test_bench_anytime_smoke():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_anytime.py"), "--smoke"], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    assert "update after a batch" in out.stdout
