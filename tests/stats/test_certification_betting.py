"""The anytime certification as one betting e-process (issue 38): the tangent, the bets'
range, the state, its validity at the null's boundary and its power."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.simulate import StreamScenario, draw_phases, simulate_streams
from auditor.stats import AnytimeState, BettingStream, StatsInputError, certify, item_values
from auditor.stats.certification import _B_MIN, _bet_values, _betting_paths, _tangent_points
from auditor.stats.confseq import BETS, betting_log_wealth

LOG_20 = math.log(20.0)
unit = st.floats(0.0, 1.0)


def _values(counts, preds, bound="theoretical"):
    s, n, c = counts.shape
    v = item_values(counts.reshape(-1, c), preds.reshape(-1))
    x = (v.x_t if bound == "theoretical" else v.x_e).reshape(s, n)
    credit = v.agreement.reshape(s, n)
    keep = ~np.isnan(x)
    m = int(keep.sum(axis=1).min())
    return (np.stack([credit[i][keep[i]][:m] for i in range(s)]), np.stack([x[i][keep[i]][:m] for i in range(s)]))


# --- the tangent and the range ----------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(theta=unit, b=st.floats(_B_MIN, 1.0))
def test_the_tangent_bounds_the_square_root_from_above(theta, b):
    # sqrt(theta) <= theta/(2b) + b/2, with equality at b = sqrt(theta): (sqrt(theta) - b)^2 >= 0
    assert math.sqrt(theta) <= theta / (2 * b) + b / 2 + 1e-15
    assert theta / (2 * b) + b / 2 - math.sqrt(theta) == pytest.approx((math.sqrt(theta) - b) ** 2 / (2 * b), abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(c=unit, x=unit, b=st.floats(_B_MIN, 1.0), tau=st.floats(0.0, 0.5))
def test_scaled_values_lie_in_minus_one_to_one(c, x, b, tau):
    xi = float(_bet_values(c, x, b, tau))
    assert -1.0 - 1e-12 <= xi < 1.0
    # -1 exactly where the model gets no credit and the labels are unanimous
    assert float(_bet_values(0.0, 1.0, b, tau)) == pytest.approx(-1.0, abs=1e-12)


def test_the_scaled_value_has_mean_at_most_zero_under_the_null():
    # E v = theta_L - theta_U/(2b) - b/2 <= theta_L - sqrt(theta_U) <= tau, for any b
    rng = np.random.default_rng(0)
    for _ in range(200):
        theta_u = rng.uniform(0.3, 1.0)
        tau = rng.uniform(0, 0.05)
        theta_l = min(1.0, tau + math.sqrt(theta_u)) * rng.uniform(0.9, 1.0)
        b = rng.uniform(_B_MIN, 1.0)
        # xi is affine in (c, x) for a fixed b: its mean is xi at the means
        assert float(_bet_values(theta_l, theta_u, b, tau)) <= 1e-12


def test_tangent_points_are_the_running_estimate_before_each_item():
    x = np.array([0.5, 1.0, 0.36, 0.64])
    b = _tangent_points(x)
    hand = [math.sqrt(1.0 / 1), math.sqrt(1.5 / 2), math.sqrt(2.5 / 3), math.sqrt(2.86 / 4)]
    np.testing.assert_allclose(b, hand, rtol=1e-12)
    # continuing a stream: the state's count and sum stand for the items before
    np.testing.assert_allclose(_tangent_points(x[2:], 2, 1.5), hand[2:], rtol=1e-12)


# --- the wealth ----------------------------------------------------------------------


def test_wealth_is_the_average_of_the_products_computed_by_hand():
    credit = [1.0, 0.5, 0.0, 1.0]
    x = [1.0, 0.52, 1.0, 0.68]
    tau = 0.01
    st_ = BettingStream(tau=tau)
    st_.update(credit, x)
    caps, path, s_x = [], [], 0.0
    for i, (c, xx) in enumerate(zip(credit, x, strict=True)):
        b = min(1.0, max(_B_MIN, math.sqrt((1.0 + s_x) / (1 + i))))
        v = c - xx / (2 * b) - b / 2
        xi = (v - tau) / (tau + 1 / (2 * b) + b / 2)
        caps.append(xi)
        s_x += xx
        wealth = np.mean([math.prod(1 + eta * z for z in caps) for eta in BETS])
        path.append(wealth)
    assert math.exp(st_.log_evalue) == pytest.approx(path[-1], rel=1e-12)
    assert math.exp(st_.log_max) == pytest.approx(max(1.0, *path), rel=1e-12)
    c = st_.confidence()
    assert c.score == pytest.approx(1 - 1 / max(1.0, *path), abs=1e-12)
    assert c.wealth == pytest.approx(path[-1], rel=1e-12) and c.method == "anytime"
    assert c.lower == pytest.approx(np.mean(credit)) and c.upper == pytest.approx(math.sqrt(np.mean(x)))


def test_wealth_never_reaches_zero_on_the_worst_items():
    # every item: no credit, unanimous labels (xi = -1): each bet keeps 1 - eta of its capital
    st_ = BettingStream()
    st_.update(np.zeros(5000), np.ones(5000))
    assert np.isfinite(st_.log_wealth).all()
    np.testing.assert_allclose(st_.log_wealth, 5000 * np.log1p(-BETS), rtol=1e-9)
    assert st_.confidence().score == 0.0 and st_.log_max == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(unit, unit), min_size=1, max_size=60), st.lists(st.integers(0, 60), max_size=4),
       st.floats(0.0, 0.1))
def test_stream_updated_in_batches_equals_one_pass(pairs, cuts, tau):
    c, x = (np.array(v) for v in zip(*pairs, strict=True))
    one = BettingStream(tau=tau)
    one.update(c, x)
    batched = BettingStream(tau=tau)
    edges = [0, *sorted(k % (len(pairs) + 1) for k in cuts), len(pairs)]
    for a, b in itertools.pairwise(edges):
        batched.update(c[a:b], x[a:b])
        batched = BettingStream.from_dict(json.loads(json.dumps(batched.to_dict())), tau=tau)  # stored between
    assert batched.n == one.n
    np.testing.assert_allclose(batched.log_wealth, one.log_wealth, atol=1e-9)
    assert batched.log_max == pytest.approx(one.log_max, abs=1e-9)
    assert float(_betting_paths(c, x, tau=tau)[-1]) == pytest.approx(one.log_max, abs=1e-9)


def test_the_score_never_falls_and_is_capped():
    rng = np.random.default_rng(1)
    st_ = BettingStream()
    scores = []
    for _ in range(40):
        good = rng.random() < 0.5
        c = (rng.random(50) < (0.97 if good else 0.6)).astype(float)
        st_.update(c, np.full(50, 0.7))
        scores.append(st_.confidence().score)
    assert (np.diff(scores) >= 0).all()
    assert 0.0 <= scores[0] and scores[-1] <= 1 - 1e-6
    assert st_.confidence().evalue >= st_.confidence().wealth


def test_many_streams_at_once_equal_one_by_one():
    counts, preds = StreamScenario(labels_per_item=(1, 2, 3, 5)).draw(np.random.default_rng(3), 4, 700)
    credit, x = _values(counts, preds)
    paths = _betting_paths(credit, x, tau=0.02)
    for s in range(4):
        st_ = BettingStream(tau=0.02)
        for a in range(0, credit.shape[1], 150):
            st_.update(credit[s, a:a + 150], x[s, a:a + 150])
            assert paths[s, min(a + 150, credit.shape[1]) - 1] == pytest.approx(st_.log_max, abs=1e-9)


def test_betting_log_wealth_blocks_do_not_change_the_result():
    xi = np.random.default_rng(2).uniform(-1, 1, (3, 30_000)) * 0.3 + 0.01
    whole, state = betting_log_wealth(xi)
    first, mid = betting_log_wealth(xi[:, :12_345])
    second, end = betting_log_wealth(xi[:, 12_345:], mid)
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), whole, atol=1e-8)
    np.testing.assert_allclose(end, state, atol=1e-8)


def test_bad_input_is_named():
    st_ = BettingStream()
    with pytest.raises(StatsInputError, match="credit"):
        st_.update([1.5], [0.5])
    with pytest.raises(StatsInputError, match="one value per item"):
        st_.update([1.0, 0.0], [0.5])
    with pytest.raises(StatsInputError, match="at least one item"):
        st_.confidence()
    with pytest.raises(StatsInputError, match="bets"):
        BettingStream.from_dict({"n": 2, "s_credit": 1.0, "s_x": 1.0, "log_wealth": [0.0] * 3, "log_max": 0.0})
    state = AnytimeState(tau=0.0)
    state.update([[2, 0]], [0])
    with pytest.raises(StatsInputError, match="tau"):
        state.confidence(tau=0.01)  # the bets were made for another margin


# --- the state the service stores ----------------------------------------------------------


def test_state_round_trips_and_old_states_restart_the_betting_streams():
    rng = np.random.default_rng(4)
    counts, preds = simulate_streams(rng, 1, 400, (0.7, 0.8, 0.9), 0.95)
    st_ = AnytimeState()
    st_.update(counts[0], preds[0])
    d = json.loads(json.dumps(st_.to_dict()))
    assert d["version"] == 2 and d["tau"] == 0.0
    back = AnytimeState.from_dict(d)
    for bound in ("theoretical", "empirical"):
        for method in ("anytime", "anytime-fan"):
            assert back.confidence(bound, method=method) == st_.confidence(bound, method=method)
    assert not AnytimeState.restarts_betting(d, 0.0)
    # a version-1 state: the fan pair alone
    v1 = {k: d[k] for k in ("upper_t", "upper_e", "lower")}
    old = AnytimeState.from_dict(v1)
    assert AnytimeState.restarts_betting(v1, 0.0)
    assert old.bet_t.n == old.bet_e.n == 0 and old.lower.n == 400
    assert old.confidence(method="anytime-fan") == st_.confidence(method="anytime-fan")
    # another margin: the betting streams restart, the fan pair reads any margin
    other = AnytimeState.from_dict(d, tau=0.02)
    assert AnytimeState.restarts_betting(d, 0.02) and other.bet_t.n == 0 and other.tau == 0.02
    assert other.confidence(method="anytime-fan").tau == 0.02


def test_certify_anytime_is_the_betting_verdict_and_the_fan_is_kept_by_name():
    rng = np.random.default_rng(8)
    counts, preds = simulate_streams(rng, 1, 1500, (0.7, 0.75, 0.8, 0.85, 0.9), 0.95)
    counts, preds = counts[0].astype(int), preds[0].astype(int)
    bet = certify(counts, preds, method="anytime")
    fan = certify(counts, preds, method="anytime-fan")
    assert bet.method == "anytime" and fan.method == "anytime-fan"
    assert bet.confidences[("theoretical", "anytime")].method == "anytime"
    assert fan.confidences[("theoretical", "anytime-fan")].method == "anytime-fan"
    st_ = BettingStream()
    v = item_values(counts, preds)
    st_.update(v.agreement, v.x_t)
    assert bet.score == st_.confidence().score
    assert bet.score > fan.score  # at 1,500 items of this case both certify; betting with more evidence
    d = bet.to_dict()["confidence"]["theoretical/anytime"]
    assert d["evalue"] >= d["wealth"] > 0


# --- validity and power, with exact population values ----------------------------------


def _ever(scenario, bound, rng, streams, items, looks_every=100):
    credit, x = _values(*scenario.draw(rng, streams, int(items * 1.4)), bound)
    credit, x = credit[:, :items], x[:, :items]
    looks = np.arange(looks_every, items + 1, looks_every) - 1
    return (_betting_paths(credit, x)[:, looks] >= LOG_20).any(axis=1).mean()


@pytest.mark.parametrize(("scenario", "bound"), [
    (StreamScenario(), "theoretical"),
    (StreamScenario(labels_per_item=(2, 3, 4, 5), n_classes=5, annotator_accuracy=0.75, hard_fraction=0.25,
                    hard_penalty=0.3, copy=0.3), "empirical"),
])
def test_never_certified_more_than_five_percent_at_the_boundary(scenario, bound):
    """E L = the population U exactly (least favourable): 400 streams, 3,000 items, 30 looks."""
    lf = scenario.on_boundary(bound)
    credit_mean, x_mean = lf.expectations(bound)
    assert credit_mean == pytest.approx(math.sqrt(x_mean), abs=1e-12)
    assert _ever(lf, bound, np.random.default_rng(12), 400, 3000) <= 0.05


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "bound"), [
    (StreamScenario(), "empirical"),
    (StreamScenario(n_classes=2, labels_per_item=(2, 3), annotator_accuracy=0.75, copy=0.6), "empirical"),
    (StreamScenario(labels_per_item=(1, 2, 3, 4, 5), copy=0.5), "theoretical"),
    (StreamScenario(labels_per_item=(3,), hard_fraction=0.3, hard_penalty=0.3, annotator_accuracy=0.9,
                    model_hard_penalty=-0.05, copy=0.4), "theoretical"),
    (StreamScenario(labels_per_item=(25,)), "empirical"),
    (StreamScenario(n_classes=4, labels_per_item=(2,), copy=0.8), "empirical"),
])
def test_least_favourable_nulls_over_sixty_looks(scenario, bound):
    """1,000 streams, 6,000 items looked at every 100: ever certified at most 5%."""
    assert _ever(scenario.on_boundary(bound), bound, np.random.default_rng(21), 1000, 6000) <= 0.05


@pytest.mark.slow
def test_valid_when_items_get_harder_over_time():
    phases = [StreamScenario(hard_fraction=h, hard_penalty=0.3, annotator_accuracy=0.85, labels_per_item=(3, 5),
                             copy=0.3).on_boundary() for h in (0.05, 0.25, 0.5)]
    credit, x = _values(*draw_phases(np.random.default_rng(5), [(p, 2000) for p in phases], 1000))
    assert (_betting_paths(credit, x)[:, 99::100] >= LOG_20).any(axis=1).mean() <= 0.05


def test_power_where_the_issue_measured_it():
    """Model 0.95 vs annotators 0.80 (a panel of 0.70-0.90), 5 labels, 3 classes, U_t: at
    least 60% of 400 datasets certified at N = 500 and 97% at N = 1,000 (the fan pair: about
    47% and 98.5%)."""
    counts, preds = simulate_streams(np.random.default_rng(2026), 400, 1000, (0.70, 0.75, 0.80, 0.85, 0.90), 0.95)
    credit, x = _values(counts, preds)
    rate = (_betting_paths(credit, x)[:, [499, 999]] >= LOG_20).mean(axis=0)
    assert rate[0] >= 0.6 and rate[1] >= 0.97


@pytest.mark.slow
def test_power_with_the_empirical_bound():
    """Model 0.90 vs annotators 0.85 (a pool), 5 labels, 3 classes, U_e: at least 40% at N = 2,000."""
    credit, x = _values(*StreamScenario(annotator_accuracy=0.85, model_accuracy=0.90).draw(
        np.random.default_rng(7), 500, 2000), "empirical")
    assert (_betting_paths(credit, x)[:, 1999] >= LOG_20).mean() >= 0.4


def test_planner_projection_tracks_the_real_update():
    """``log_evalue_after`` (fixed tangent point, order ignored) against feeding the items."""
    sc = StreamScenario(annotator_accuracy=0.8, model_accuracy=0.9)
    counts, preds = sc.draw(np.random.default_rng(9), 1, 6000)
    v = item_values(counts[0], preds[0])
    st_ = BettingStream()
    st_.update(v.agreement[:3000], v.x_t[:3000])
    pairs, inv = np.unique(np.column_stack([v.agreement[3000:], v.x_t[3000:]]), axis=0, return_inverse=True)
    n_pairs = np.bincount(inv.ravel(), minlength=pairs.shape[0])
    projected = float(st_.log_evalue_after(pairs[:, 0], pairs[:, 1], n_pairs))
    fed = BettingStream.from_dict(st_.to_dict())
    fed.update(v.agreement[3000:], v.x_t[3000:])
    assert projected == pytest.approx(max(st_.log_max, fed.log_evalue), rel=0.05)
    # vectorised over futures; more favourable items never lower it
    futures = np.stack([n_pairs, n_pairs * 2])
    both = st_.log_evalue_after(pairs[:, 0], pairs[:, 1], futures)
    assert both.shape == (2,) and both[0] == pytest.approx(projected) and both[1] >= both[0]
