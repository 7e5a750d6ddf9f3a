"""Audit planning: the plan simulates the badge's verdict, is reproducible, and is calibrated.

The full calibration study (300 repetitions per scenario) is ``bench/bench_plan_calibration.py``;
here a reduced one keeps each claim honest at a cost of a couple of minutes.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.simulate import PoolScenario
from auditor.stats import (
    AnytimeState,
    LabelCounts,
    StatsInputError,
    certify,
    item_values,
    plan_certification,
    plan_equivalence,
    relabel_priority,
    survey_equivalence,
    tie_credit,
    upper_bounds,
)
from auditor.stats.confseq import _prefix_sums
from auditor.stats.planning import certification_plan, label_model, simulation
from bench._datasets import snli_bert
from bench._plan_calibration import (
    CalibrationScenario,
    VendorConfusionScenario,
    check_scenario,
    fixed_truth_error_bound,
    margin_lower_bound,
    relabel_gain,
)

TIGHT = (0.9, 0.85, 0.8, 0.75, 0.7)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def data(pool: PoolScenario, n: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    truth, hard = pool.items(rng, n)
    return pool.labels(rng, truth, hard, k), pool.predictions(rng, truth, hard)


# --- the verdict the plan simulates is the pipeline's ----------------------------------------


@settings(max_examples=25, deadline=None, derandomize=True)
@given(n0=st.integers(0, 3000), n=st.integers(1, 400), seed=st.integers(0, 10**6))
def test_expected_variance_process_equals_an_average_over_arrival_orders(n0, n, seed):
    rng = np.random.default_rng(seed)
    x0 = rng.choice([0.0, 0.5, 1.0], size=n0, p=[0.1, 0.1, 0.8])
    s0, v0 = (0.0, 0.0) if n0 == 0 else (float(_prefix_sums(x0)[1][-1]), float(_prefix_sums(x0)[2][-1]))
    vals = rng.choice([0.0, 1 / 3, 0.5, 1.0], size=n, p=[0.2, 0.1, 0.1, 0.6])
    orders = np.stack([rng.permutation(vals) for _ in range(4000)])
    exact = _prefix_sums(orders, n0, s0, v0)[2][:, -1]
    approx = simulation._anytime_v(n0, s0, v0, n, vals.sum(), (vals**2).sum())
    # the formula is the expectation over orders: equal within the Monte Carlo error of 4,000 orders
    assert approx == pytest.approx(exact.mean(), abs=4 * exact.std() / math.sqrt(4000) + 1e-9)


@pytest.mark.parametrize("method", ["anytime", "anytime-fan", "oms", "hms", "bernstein"])
def test_simulated_verdict_equals_the_real_one_on_actual_items(method):
    pool = PoolScenario(hard_fraction=0.1, model_accuracy=0.93, annotator_accuracy=TIGHT)
    counts, preds = data(pool, 1500, 5, 1)
    new_counts, new_preds = data(pool, 3000, 7, 2)
    cur = simulation._current_sums(counts, preds)
    if method.startswith("anytime"):
        st_ = AnytimeState()
        st_.update(counts, preds)
        cur = simulation._Current(anytime=st_, t=cur.t, e=cur.e, l=cur.l)
    v = item_values(new_counts, new_preds)
    new = simulation._values_new(v.agreement, v.x_t, v.x_e, np.arange(new_counts.shape[0])[None, :])
    for bound in ("theoretical", "empirical"):
        simulated = simulation._verdict_scores(cur, new, method=method, bound=bound, tau=0.0, split=0.5)[0]
        if method.startswith("anytime"):
            real = AnytimeState()
            real.update(counts, preds)
            real.update(new_counts, new_preds)
            expected = real.confidence(bound, method=method).score
        else:
            expected = certify(np.vstack([counts, new_counts]), np.concatenate([preds, new_preds]),
                               bound=bound, method=method).confidences[(bound, method)].score
        # anytime: the betting verdict holds the tangent point at the final running mean, and
        # the Fan pair's variance process is its expectation over arrival orders (the items'
        # own order moves S by far less); the fixed-sample verdicts are exact
        assert simulated == pytest.approx(expected, abs=2e-3 if method.startswith("anytime") else 1e-9)


@pytest.mark.parametrize("margin", [0.0, 0.01, 0.02, 0.04])
def test_simulated_betting_verdict_matches_the_stream_on_its_certification_decision(margin):
    # Over many datasets near the threshold, the simulated betting verdict (tangent point held
    # at the final mean, the path's maximum between looks unseen) and the stream fed the same
    # items in order agree on "certified" in nearly every case.
    pool = PoolScenario(hard_fraction=0.1, model_accuracy=0.8 + margin, annotator_accuracy=(0.8,))
    agree = []
    for seed in range(40):
        counts, preds = data(pool, 300, 5, 100 + seed)
        new_counts, new_preds = data(pool, 700, 5, 200 + seed)
        st_ = AnytimeState()
        st_.update(counts, preds)
        cur = simulation._current_sums(counts, preds)
        cur = simulation._Current(anytime=st_, t=cur.t, e=cur.e, l=cur.l)
        v = item_values(new_counts, new_preds)
        new = simulation._values_new(v.agreement, v.x_t, v.x_e, np.arange(new_counts.shape[0])[None, :])
        sim = simulation._verdict_scores(cur, new, method="anytime", bound="theoretical", tau=0.0, split=0.5)[0]
        st_.update(new_counts, new_preds)
        agree.append((sim >= 0.95) == (st_.confidence("theoretical").score >= 0.95))
    assert np.mean(agree) >= 0.9


def test_the_planners_betting_verdict_is_the_streams_frequency_over_arrival_orders():
    # Given a future's items only their order is random: the planner's probability of
    # certifying (tangent points along the expected path, crossings on the way by the
    # Brownian bridge) is the stream's frequency over orders. 7 labels per new item from
    # 5-label data, hard items shared by the annotators and the model, datasets near the
    # threshold; the end value alone misses the crossings on the way and is below it.
    pool = PoolScenario(hard_fraction=0.25, hard_penalty=0.3, model_accuracy=0.95, model_hard_penalty=0.2)
    rng = np.random.default_rng(0)
    real, planned, end_only = [], [], []
    for seed in range(12):
        counts, preds = data(pool, 1000, 5, 300 + seed)
        new_counts, new_preds = data(pool, 3000, 7, 400 + seed)
        st_ = AnytimeState()
        st_.update(counts, preds)
        stream = st_.betting("theoretical")
        v = item_values(new_counts, new_preds)
        new = simulation._values_new(v.agreement, v.x_t, v.x_e, np.arange(3000)[None, :])
        planned.append(float(simulation._betting_certified(stream, new["pairs"], "theoretical", 0.95)[0]))
        end_only.append(simulation._betting_scores(stream, new["pairs"], "theoretical")[0] >= 0.95)
        for _ in range(40):
            order = rng.permutation(3000)
            fed = type(stream).from_dict(stream.to_dict())
            fed.update(v.agreement[order], v.x_t[order])
            real.append(fed.confidence().score >= 0.95)
    # 480 paths: the frequency's Monte Carlo standard error is at most 0.023
    assert 0.2 <= np.mean(real) <= 0.8
    assert np.mean(planned) == pytest.approx(np.mean(real), abs=0.05)
    assert np.mean(end_only) <= np.mean(planned)


# --- reproducible, and the grid's arithmetic -------------------------------------------------


def test_same_seed_gives_the_same_plan_bit_for_bit():
    counts, preds = data(PoolScenario(hard_fraction=0.0, annotator_accuracy=TIGHT, model_accuracy=0.9), 800, 5, 3)
    kw = dict(new_items=[500, 2000, 8000], labels_per_item=[3, 5, 7], n_simulations=100)
    a = plan_certification(counts, preds, rng=11, **kw)
    b = plan_certification(counts, preds, rng=11, **kw)
    c = plan_certification(counts, preds, rng=12, **kw)
    assert json.dumps(a.to_dict()) == json.dumps(b.to_dict())
    assert [d.probability for d in a.designs] != [d.probability for d in c.designs]


def test_designs_costs_budget_and_recommendation():
    counts, preds = data(PoolScenario(hard_fraction=0.0, annotator_accuracy=TIGHT, model_accuracy=0.93), 1500, 5, 4)
    plan = plan_certification(counts, preds, label_cost=0.25, max_budget=6000.0, n_simulations=100, rng=1,
                              labels_per_item=[3, 5, 7], probability=0.6)
    assert plan.designs[0].labels == 0 and plan.designs[0].new_items == 0
    for d in plan.designs:
        assert d.labels == d.new_items * d.labels_per_item + d.extra_labels_on_existing
        assert d.cost == pytest.approx(0.25 * d.labels)
        assert d.cost <= 6000.0
        assert 0.0 <= d.probability <= 1.0
        assert d.std_error == pytest.approx(math.sqrt(d.probability * (1 - d.probability) / 100))
    costs = [d.cost for d in plan.designs]
    assert costs == sorted(costs)
    reach = [d for d in plan.designs if d.probability >= 0.6]
    assert plan.recommended == (reach[0] if reach else None)
    assert plan.recommended is not None and plan.certifiable


def test_designs_carry_a_range_around_their_probability_and_the_assured_design_reaches_it_at_the_low_end():
    counts, preds = data(PoolScenario(hard_fraction=0.0, annotator_accuracy=TIGHT, model_accuracy=0.9), 1500, 5, 8)
    plan = plan_certification(counts, preds, method="oms", n_simulations=200, rng=2, labels_per_item=[5, 7],
                              new_items=[500, 2000, 8000, 32000], extra_labels=[300])
    ranged = [d for d in plan.designs if d.new_items]
    assert ranged and any(d.probability_high - d.probability_low > 0.1 for d in ranged)
    for d in plan.designs:
        if d.extra_labels_on_existing:
            assert d.probability_low is None and d.probability_high is None
        else:
            assert 0.0 <= d.probability_low <= d.probability <= d.probability_high <= 1.0
    assert plan.assured is not None and plan.assured.probability_low >= plan.probability
    assert plan.assured == next(d for d in plan.designs
                                if d.probability_low is not None and d.probability_low >= plan.probability)
    # reaching the probability at the low end costs at least what reaching it on average does
    assert plan.assured.labels >= plan.recommended.labels
    out = plan.to_dict()
    assert out["assured"]["probability_low"] == plan.assured.probability_low and out["confidence"] == 0.8
    wider = plan_certification(counts, preds, method="oms", n_simulations=200, rng=2, labels_per_item=[5, 7],
                               new_items=[500, 2000, 8000, 32000], extra_labels=[300], confidence=0.95)
    for a, b in zip(plan.designs, wider.designs, strict=True):
        assert a.probability == b.probability
        if a.probability_low is not None:
            assert b.probability_low <= a.probability_low + 1e-12 and b.probability_high >= a.probability_high - 1e-12


@settings(max_examples=30, deadline=None, derandomize=True)
@given(intercept=st.floats(-2.0, 2.0), slope=st.floats(0.5, 4.0), confidence=st.sampled_from([0.5, 0.8, 0.9]),
       seed=st.integers(0, 10**6))
def test_probability_range_reads_the_fitted_curve_at_the_margins_quantiles(intercept, slope, confidence, seed):
    rng = np.random.default_rng(seed)
    theta = rng.normal(0.01, 0.004, size=4000)
    z = (theta - theta.mean()) / theta.std()
    cert = rng.random((1, theta.size)) < 1.0 / (1.0 + np.exp(-(intercept + slope * z)))
    low, high = simulation._probability_range(theta, cert, confidence)
    q = np.quantile(z, [(1 - confidence) / 2, (1 + confidence) / 2])
    want = 1.0 / (1.0 + np.exp(-(intercept + slope * q)))
    # the maximum-likelihood curve from 4,000 draws is within a few of its standard errors
    assert low[0] == pytest.approx(min(want[0], cert.mean()), abs=0.06)
    assert high[0] == pytest.approx(max(want[1], cert.mean()), abs=0.06)
    assert low[0] <= cert.mean() <= high[0]
    # every future certified: the Jeffreys interval of 4,000 of 4,000 (its low end within the
    # "rule of three" of 1), not a certainty
    same = simulation._probability_range(theta, np.ones((2, theta.size), dtype=bool), confidence)
    assert same[1].tolist() == [1.0, 1.0]
    assert (same[0] < 1.0).all() and (same[0] > 1.0 - 3.0 / theta.size).all()
    none = simulation._probability_range(theta, np.zeros((1, theta.size), dtype=bool), confidence)
    assert none[0][0] == 0.0 and 0.0 < none[1][0] < 3.0 / theta.size
    assert simulation._probability_range(None, cert, confidence)[0][0] == cert.mean()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(ratio=st.floats(0.0, 8.0), values=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=12),
       lo=st.floats(0.05, 0.4), hi=st.floats(0.6, 0.99))
def test_no_plan_is_closer_than_the_fixed_truth_limit_for_every_truth(ratio, values, lo, hi):
    """Any plan, a function of the current estimate with values in [0, 1] (here a step function
    with arbitrary levels), misses the certification frequency at one of the two truths where it
    is ``lo`` and ``hi`` by at least ``fixed_truth_error_bound`` (the normal approximation)."""
    from scipy import stats

    n0 = 1000
    n1 = round(ratio * n0)
    v = (n0 + n1) / n0
    t1, t2 = stats.norm.ppf(lo), stats.norm.ppf(hi)
    edges = np.linspace(t1 - 3, t2 + 3, len(values) + 1)[1:-1]
    levels = np.asarray(values)

    def expected(theta):
        # E f(X), X ~ N(theta, v): f is levels[j] between consecutive edges
        cdf = stats.norm.cdf((edges - theta) / math.sqrt(v))
        probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
        return float(probs @ levels)

    worst = max(abs(expected(t1) - lo), abs(expected(t2) - hi))
    assert worst >= fixed_truth_error_bound(n0, n1, band=(lo, hi)) - 1e-9
    # and it is the least possible: a 0/1 step at the midpoint rises by exactly the most any plan
    # can, so its two errors add up to twice the limit
    mid = (t1 + t2) / 2
    rise = stats.norm.cdf((t2 - mid) / math.sqrt(v)) - stats.norm.cdf((t1 - mid) / math.sqrt(v))
    if fixed_truth_error_bound(n0, n1, band=(lo, hi)) > 0:
        assert (hi - lo) - rise == pytest.approx(2 * fixed_truth_error_bound(n0, n1, band=(lo, hi)))


def test_per_vendor_prices_plan_each_vendor_from_its_own_labels():
    rng = np.random.default_rng(5)
    cheap = PoolScenario(hard_fraction=0.0, annotator_accuracy=(0.7, 0.7, 0.7), model_accuracy=0.9)
    good = PoolScenario(hard_fraction=0.0, annotator_accuracy=(0.85, 0.85, 0.85), model_accuracy=0.9)
    truth, hard = cheap.items(rng, 1500)
    a, b = cheap.labels(rng, truth, hard, 3), good.labels(rng, truth, hard, 3)
    preds = cheap.predictions(rng, truth, hard)
    plan = plan_certification(a + b, preds, label_cost={"cheap": 0.02, "good": 0.08},
                              vendor_counts={"cheap": a, "good": b}, labels_per_item=[3, 5],
                              new_items=[1000, 4000, 16000], n_simulations=100, rng=2)
    assert {d.vendor for d in plan.designs[1:]} == {"cheap", "good"}
    for d in plan.designs[1:]:
        assert d.cost == pytest.approx({"cheap": 0.02, "good": 0.08}[d.vendor] * d.labels)
    assert {m.vendor for m in plan.models} == {"cheap", "good"}
    # new items' labels come from the vendor's own: with as many labels as it gave, the
    # population margin is the one observed on its labels
    for name, own in (("cheap", a), ("good", b)):
        res = certify(own, preds)
        assert plan.margins[f"{name}:3"] == pytest.approx(res.l - res.u_t, abs=1e-12)
    with pytest.raises(StatsInputError, match="vendor_counts"):
        plan_certification(a + b, preds, label_cost={"cheap": 0.02})
    with pytest.raises(StatsInputError, match="no price for vendor 'good'"):
        plan_certification(a + b, preds, label_cost={"cheap": 0.02}, vendor_counts={"cheap": a, "good": b})


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(method="bootstrap"), "`method`"),
    (dict(probability=1.0), "`probability`"),
    (dict(target=1.5), "`target`"),
    (dict(tau=-0.1), "`tau`"),
    (dict(n_simulations=5), "`n_simulations`"),
    (dict(label_cost=-1), "`label_cost`"),
    (dict(new_items=[0, 10]), "`new_items`"),
    (dict(labels_per_item=["x"]), "`labels_per_item`"),
    (dict(rule_out=0.0), "`rule_out`"),
])
def test_bad_options_are_rejected_by_name(kwargs, match):
    with pytest.raises(StatsInputError, match=match):
        plan_certification([[3, 0], [1, 2]], [0, 1], **kwargs)


def test_bad_data_is_rejected():
    with pytest.raises(StatsInputError, match="3 entries but there are 2 items"):
        plan_certification([[3, 0], [1, 2]], [0, 1, 1])
    with pytest.raises(StatsInputError, match="no labelled item"):
        plan_certification([[0, 0], [0, 0]], [0, 1])


# --- invariants (hypothesis) ----------------------------------------------------------------


@settings(max_examples=8, deadline=None, derandomize=True)
@given(model=st.floats(0.84, 0.97), hard=st.sampled_from([0.0, 0.2]), k=st.sampled_from([3, 5]),
       seed=st.integers(0, 10**6), method=st.sampled_from(["anytime", "oms"]))
def test_probability_grows_with_the_number_of_new_items(model, hard, k, seed, method):
    pool = PoolScenario(hard_fraction=hard, hard_penalty=0.2, annotator_accuracy=TIGHT, model_accuracy=model)
    counts, preds = data(pool, 600, k, seed)
    grid = [250, 1000, 4000, 16000, 64000]
    plan = plan_certification(counts, preds, method=method, new_items=grid, labels_per_item=[k, k + 2],
                              n_simulations=200, rng=seed)
    for kk in (k, k + 2):
        p = [next(d.probability for d in plan.designs if d.new_items == n and d.labels_per_item == kk)
             for n in grid]
        # the futures are nested along the grid (the same items plus more): a verdict may
        # still dip as items arrive, so allow twice the standard error of one estimate
        for a, b in itertools.pairwise(p):
            assert b >= a - 2 * math.sqrt(0.25 / 200)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(k=st.integers(1, 12), n_labels=st.integers(1, 5))
def test_compositions_are_every_count_vector_once(k, n_labels):
    comps = simulation._compositions(k, n_labels)
    assert comps.shape == (math.comb(k + n_labels - 1, n_labels - 1), n_labels)
    assert (comps.sum(axis=1) == k).all() and (comps >= 0).all()
    assert np.unique(comps, axis=0).shape[0] == comps.shape[0]


@settings(max_examples=20, deadline=None, derandomize=True)
@given(n=st.integers(30, 400), k=st.integers(1, 6), seed=st.integers(0, 10**6),
       bound=st.sampled_from(["theoretical", "empirical"]))
def test_relabel_priority_ranks_every_labelled_item_once(n, k, seed, bound):
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(k, [0.7, 0.2, 0.1], size=n)
    counts[rng.random(n) < 0.2] = 0               # unlabelled items are not ranked
    counts[rng.random(n) < 0.2, 0] += 2           # some items have more labels
    preds = rng.integers(0, 3, n)
    if not (counts.sum(axis=1) > 0).any() or (bound == "empirical" and not (counts.sum(axis=1) >= 2).any()):
        return
    r = relabel_priority(counts, preds, bound=bound)
    labelled = np.flatnonzero(counts.sum(axis=1) > 0)
    assert sorted(r.indices.tolist()) == labelled.tolist()
    assert (np.diff(r.expected_gain) <= 1e-12).all()
    assert (r.labels == counts[r.indices].sum(axis=1)).all()


# --- the label model extrapolates beyond the labels an item has -------------------------------


def _true_margin(pool, k, n=300_000, seed=99):
    rng = np.random.default_rng(seed)
    truth, hard = pool.items(rng, n)
    c = pool.labels(rng, truth, hard, k).astype(float)
    p = pool.predictions(rng, truth, hard)
    return float(np.nanmean(tie_credit(c, p))), float(((c * c).sum(axis=1) / k**2).mean())


def test_with_as_many_labels_as_the_items_have_the_margin_is_the_observed_one():
    counts, preds = data(PoolScenario(hard_fraction=0.2, annotator_accuracy=TIGHT, model_accuracy=0.9), 1200, 5, 8)
    plan = plan_certification(counts, preds, labels_per_item=[5], new_items=[100], n_simulations=20, rng=0)
    res = certify(counts, preds)
    assert plan.margins["5"] == pytest.approx(res.l - res.u_t, abs=1e-12)


@pytest.mark.parametrize("hard", [0.0, 0.25])
def test_the_mixture_extrapolates_the_agreement_with_more_labels(hard):
    pool = PoolScenario(hard_fraction=hard, hard_penalty=0.3, model_accuracy=0.86, model_hard_penalty=0.2,
                        annotator_accuracy=TIGHT)
    est_l, est_x = [], []
    for seed in range(4):
        counts, preds = data(pool, 2000, 5, seed)
        pop = label_model._population(counts, preds, None, [])
        w = pop.mult / pop.mult.sum()
        atoms = simulation._atoms(pop, 10, np.random.default_rng(0))
        est_l.append(w @ (atoms.q @ atoms.credit))
        est_x.append(w @ (atoms.q @ atoms.x_t))
    true_l, true_x = _true_margin(pool, 10)
    # with 5 labels per item the 10-label agreement is an extrapolation; the one-component
    # Dirichlet-multinomial missed it by 0.035 on the first scenario (the mixture: 0.002);
    # where the model and the annotators share hard items the mixture is 0.012 low
    assert np.mean(est_l) == pytest.approx(true_l, abs=0.005 if hard == 0 else 0.015)
    assert np.mean(est_x) == pytest.approx(true_x, abs=0.005)


def _latent_class_data(n, k, seed, confusion, prior, model_accuracy=0.9):
    """Dawid & Skene's process: a true class, k independent labels from its confusion row,
    a model right with ``model_accuracy`` (else a uniformly wrong class)."""
    rng = np.random.default_rng(seed)
    n_labels = len(prior)
    z = rng.choice(n_labels, size=n, p=prior)
    counts = np.stack([rng.multinomial(k, confusion[c]) for c in z])
    wrong = (z + rng.integers(1, n_labels, size=n)) % n_labels
    preds = np.where(rng.random(n) < model_accuracy, z, wrong)
    return counts, preds


_CONFUSION = np.array([[0.85, 0.12, 0.03], [0.20, 0.70, 0.10], [0.02, 0.08, 0.90]])


def test_independent_annotators_are_fitted_by_the_latent_class_model_and_extrapolate_to_more_labels():
    prior = [0.5, 0.3, 0.2]
    big_counts, big_preds = _latent_class_data(300_000, 10, 99, _CONFUSION, prior)
    true_l = float(np.mean(tie_credit(big_counts.astype(float), big_preds)))
    true_x = float(((big_counts.astype(float) ** 2).sum(axis=1) / 100).mean())
    est_l, est_x = [], []
    for seed in range(3):
        counts, preds = _latent_class_data(2000, 3, seed, _CONFUSION, prior)
        pop = label_model._population(counts, preds, None, [])
        assert pop.family == "latent-class" and pop.model().family == "latent-class"
        w = pop.mult / pop.mult.sum()
        atoms = simulation._atoms(pop, 10, np.random.default_rng(0))
        est_l.append(w @ (atoms.q @ atoms.credit))
        est_x.append(w @ (atoms.q @ atoms.x_t))
    # 10 labels from 3: the latent-class model is the process, so only the sampling error remains
    assert np.mean(est_l) == pytest.approx(true_l, abs=0.01)
    assert np.mean(est_x) == pytest.approx(true_x, abs=0.01)


def test_extrapolating_from_three_labels_with_shared_hard_items_is_not_one_sidedly_optimistic():
    # two vendors with their own confusion matrices, a fifth of the items hard for the
    # annotators and the model: the 10-label margin from 3-label data, against the process's.
    # A single difficulty class (AIC's choice here before) gives hard items the easy items'
    # label distributions, so pluralities of 10 labels look too reliable: +0.013 on average
    # over these seeds, every one of them high; two classes are the process (+0.007).
    pool = VendorConfusionScenario(model_accuracy=0.92)
    c, p = data(pool, 300_000, 10, 99)
    c = c.astype(float)
    true = float(np.mean(tie_credit(c, p))) - math.sqrt(float(((c * c).sum(axis=1) / 100).mean()))
    est = []
    for seed in range(4):
        counts, preds = data(pool, 2000, 3, seed)
        pop = label_model._population(counts, preds, None, [])
        assert pop.family == "mixture" or pop.n_difficulty >= 2
        w = pop.mult / pop.mult.sum()
        atoms = simulation._atoms(pop, 10, np.random.default_rng(0))
        est.append(float(w @ (atoms.q @ atoms.credit)) - math.sqrt(float(w @ (atoms.q @ atoms.x_t))))
    assert np.mean(est) == pytest.approx(true, abs=0.01)


def test_the_mixture_stays_where_items_label_distributions_vary_continuously():
    # each item's label distribution drawn from a Dirichlet: no finite set of classes has it
    rng = np.random.default_rng(5)
    p = rng.dirichlet([1.5, 1.0, 0.8], size=3000)
    counts = np.stack([rng.multinomial(6, row) for row in p])
    preds = p.argmax(axis=1)
    pop = label_model._population(counts, preds, None, [])
    assert pop.family == "mixture"
    assert pop.model().to_dict()["aic"] == pytest.approx(pop.aic)


def test_latent_class_em_increases_the_likelihood_and_a_refit_on_equal_weights_is_the_fit():
    counts, preds = _latent_class_data(1500, 4, 3, _CONFUSION, [0.4, 0.4, 0.2])
    uniq, mult, _ = label_model._distinct(np.column_stack([counts, preds]))
    rows, pred, mult = uniq[:, :-1].astype(np.int64), uniq[:, -1].astype(np.int64), mult.astype(float)
    onehot = np.eye(3)[pred]
    resp = label_model._lc_start(rows, mult, 2)
    lls = []
    for _ in range(30):
        _, resp, ll = label_model._lc_step(rows.astype(float), onehot, mult, resp)
        lls.append(ll)
    assert all(b >= a - 1e-8 for a, b in itertools.pairwise(lls))
    fit = label_model._fit_latent_class(rows, pred, mult, 2, None)
    again = fit.refit(mult / mult.sum())
    assert again.log_likelihood == pytest.approx(fit.log_likelihood, rel=1e-5)


def test_drawn_k_label_items_match_the_enumerated_distribution(monkeypatch):
    counts, preds = data(PoolScenario(hard_fraction=0.2, annotator_accuracy=TIGHT, model_accuracy=0.9), 800, 3, 9)
    pop = label_model._population(counts, preds, None, [])
    w = pop.mult / pop.mult.sum()
    exact = simulation._atoms(pop, 6, np.random.default_rng(0))
    pop.cache.clear()
    monkeypatch.setattr(simulation, "_EXACT_CELLS", 0)
    monkeypatch.setattr(simulation, "_SAMPLED_CELLS", 400_000)
    drawn = simulation._atoms(pop, 6, np.random.default_rng(0))
    for attr in ("x_t", "credit"):
        e, d = w @ (exact.q @ getattr(exact, attr)), w @ (drawn.q @ getattr(drawn, attr))
        assert d == pytest.approx(e, abs=0.01)


# --- "cannot be certified at any budget" -------------------------------------------------------


def test_a_model_below_the_annotators_cannot_be_certified_at_any_budget():
    pool = PoolScenario(hard_fraction=0.0, annotator_accuracy=TIGHT, model_accuracy=0.74)
    counts, preds = data(pool, 2000, 5, 10)
    plan = plan_certification(counts, preds, n_simulations=100, rng=3, labels_per_item=[5, 10])
    assert not plan.certifiable and plan.certifiable_probability < 0.05
    assert plan.recommended is None
    assert all(d.probability == 0.0 for d in plan.designs)
    assert any("cannot be certified at any budget" in n for n in plan.notes)


def test_cannot_be_certified_needs_every_candidate_label_models_bound_below_zero():
    # the infinite-label margin's upper bound is the largest over the chosen label model and
    # its latent-class rivals: no rival's own bound is above the plan's, and a plan whose
    # bound is below zero has every candidate below zero
    pool = PoolScenario(hard_fraction=0.25, hard_penalty=0.3, model_accuracy=0.95, model_hard_penalty=0.2)
    counts, preds = data(pool, 2000, 5, 4)
    pop = label_model._population(counts, preds, None, [])
    assert {(r.family, r.n_difficulty) for r in pop.rivals} | {(pop.family, pop.n_difficulty)} == \
        {("mixture", 0), ("latent-class", 2), ("latent-class", 3)}
    rivals = label_model._rival_limit_draws(pop, np.random.default_rng(0), tau=0.0)
    assert len(rivals) == sum(r.family == "latent-class" for r in pop.rivals)
    refits = {id(pop): label_model._refits(pop, np.random.default_rng(1))}
    weights = {id(pop): label_model._gamma_weights(pop, 50, np.random.default_rng(2))}
    for tau in (0.0, 0.2):
        riv = {id(pop): label_model._rival_limit_draws(pop, np.random.default_rng(0), tau=tau)}
        _, _, alone = certification_plan._margins([pop], (5,), weights, refits, bound="theoretical", tau=tau,
                                                  rule_out=0.05)
        _, _, upper = certification_plan._margins([pop], (5,), weights, refits, bound="theoretical", tau=tau,
                                                  rule_out=0.05, rivals=riv)
        bounds = [certification_plan._upper_bound(d, e, 0.05) for e, d in riv[id(pop)]]
        assert upper == pytest.approx(max([alone, *bounds]))
    # far below the annotators, every candidate agrees: still "cannot"
    low = PoolScenario(hard_fraction=0.25, hard_penalty=0.3, model_accuracy=0.7, model_hard_penalty=0.2)
    counts, preds = data(low, 2000, 5, 5)
    assert not plan_certification(counts, preds, n_simulations=20, rng=0, new_items=[1000],
                                  labels_per_item=[5]).certifiable


@pytest.mark.parametrize("seed", range(6))
def test_a_model_better_by_three_points_is_never_declared_uncertifiable(seed):
    # average annotator 0.80, model 0.83: with errors spread evenly U_t tends to 0.812 as
    # labels per item grow, so the release can be certified with enough of them
    pool = PoolScenario(hard_fraction=0.0, annotator_accuracy=TIGHT, model_accuracy=0.83)
    counts, preds = data(pool, 2000, 5, 100 + seed)
    plan = plan_certification(counts, preds, n_simulations=100, rng=seed, new_items=[1000], labels_per_item=[5])
    assert plan.certifiable


# --- calibration (reduced; the full study is bench/bench_plan_calibration.py) ------------------


@pytest.mark.slow
def test_announced_probabilities_match_certification_frequencies():
    sc = CalibrationScenario("tight pool", PoolScenario(hard_fraction=0.0, annotator_accuracy=TIGHT,
                                                        model_accuracy=0.9),
                             n_items=1500, labels_per_item=5, new_items=(2000, 8000), labels_per_new_item=(5, 7),
                             model_spread=0.04)
    reps = 80
    check = check_scenario(sc, reps, seed=7, n_simulations=200)
    checked = 0
    for d in check.designs:
        if 0.2 <= d.predicted <= 0.95:
            checked += 1
            # the observed frequency of 80 independent repetitions has standard error
            # sqrt(p(1-p)/80) <= 0.056 around the true one; 3 of them, plus 0.02 for the model
            assert abs(d.difference) <= 3 * d.std_error + 0.02, d
    assert checked >= 2


@pytest.mark.slow
def test_for_one_fixed_truth_the_range_covers_the_probability_given_the_current_data():
    """What a plan can promise for one fixed truth: the probability of certifying given the
    current data lies in the design's range (nominal 0.8 both ends, 0.9 each). The point
    probability is not that, and a range of zero width covers it far less often."""
    sc = CalibrationScenario("fixed", PoolScenario(hard_fraction=0.0, annotator_accuracy=TIGHT, model_accuracy=0.91),
                             n_items=1500, labels_per_item=5, new_items=(1500, 4500), labels_per_new_item=(5,))
    check = check_scenario(sc, 40, seed=21, n_simulations=200, conditional=300, pool_size=300_000)
    rr = check.ranges
    assert len(rr) == 80
    tol = 0.03   # the Monte Carlo error of both the range and the conditional probability
    low_ok = np.mean([c.low - tol <= c.conditional for c in rr])
    high_ok = np.mean([c.conditional <= c.high + tol for c in rr])
    both = np.mean([c.low - tol <= c.conditional <= c.high + tol for c in rr])
    point = np.mean([abs(c.announced - c.conditional) <= tol for c in rr])
    assert low_ok >= 0.8 and high_ok >= 0.8 and both >= 0.7, (low_ok, high_ok, both)
    assert point <= both - 0.2, (point, both)
    # the conditional probabilities do spread: the check is not trivially at 0 or 1
    assert np.std([c.conditional for c in rr]) > 0.2


@pytest.mark.slow
def test_relabeling_the_top_items_tightens_the_margin_more_than_random_items():
    pool = PoolScenario(hard_fraction=0.25, hard_penalty=0.3, model_accuracy=0.95, model_hard_penalty=0.2)
    g = relabel_gain(pool, 1000, 3, 150, 30, seed=4)
    assert g.gain_top > g.gain_random + 3 * g.std_error_difference
    assert g.coverage_top == 1.0 and g.coverage_random == 1.0


def test_docstring_examples():
    import doctest

    from auditor.stats.planning import certification_plan, relabel

    attempted = 0
    for module in (certification_plan, relabel):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0
        attempted += result.attempted
    assert attempted >= 5


def test_margin_lower_bound_is_theorem_7_with_the_error_halved():
    counts = np.array([[3, 0], [2, 1], [0, 3], [3, 0]] * 250)
    preds = np.array([0, 0, 1, 0] * 250)
    res = certify(counts, preds)
    eps = math.sqrt(math.log(2 / 0.05) / 2000)
    assert margin_lower_bound(counts, preds) == pytest.approx(res.l - eps - math.sqrt(res.u_t**2 + eps))


# --- survey equivalence ----------------------------------------------------------------------


def test_equivalence_plan_widths_shrink_and_the_recommendation_meets_the_width():
    rng = np.random.default_rng(0)
    p = rng.choice([0.2, 0.8], size=600)
    ratings = (rng.random((600, 6)) < p[:, None]).astype(int)
    preds = (rng.random(600) < np.where(p > 0.5, 0.85, 0.15)).astype(int)
    eq = survey_equivalence(ratings, preds, combiner="majority", scorer="agreement", n_bootstrap=300, rng=1)
    plan = plan_equivalence(ratings, preds, width=0.5, combiner="majority", n_bootstrap=300, rng=1)
    assert plan.current_items == 600
    # the width at the current number of items is the interval's own width, up to bootstrap noise
    assert plan.current_width == pytest.approx(eq.ci_high - eq.ci_low, rel=0.35)
    grid = [(n, w) for n, w in plan.designs if n in (100, 1000, 10000)]
    widths = [w for _, w in sorted(grid)]
    assert widths == sorted(widths, reverse=True)
    assert plan.recommended_items is not None
    assert dict(plan.designs)[plan.recommended_items] <= 0.5
    with pytest.raises(StatsInputError, match="`width`"):
        plan_equivalence(ratings, preds, width=0, combiner="majority")


def test_equivalence_plan_beyond_exact_reach_draws_the_curve_and_says_so(monkeypatch):
    """Where the exact sums are out of reach, the plan draws the curve by Monte Carlo (as
    survey_equivalence does) instead of stopping, says so with the points' largest error,
    and its widths stay close to the exact path's."""
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.full(3, 0.5), size=400)
    ratings = LabelCounts(rng.multinomial(10, p), ("a", "b", "c"), tuple(range(400)))
    preds = p.argmax(axis=1)
    kw = dict(width=0.5, combiner="plurality", n_bootstrap=200, rng=3)
    exact.clear_table_cache()
    plan = plan_equivalence(ratings, preds, **kw)
    assert not any("Monte Carlo" in n for n in plan.notes)
    monkeypatch.setattr(exact, "MAX_SUB_COUNTS", 0)
    exact.clear_table_cache()
    drawn = plan_equivalence(ratings, preds, **kw)
    exact.clear_table_cache()
    note = next(n for n in drawn.notes if "drawn by Monte Carlo" in n)
    worst = float(note.split("at most ")[1].split(";")[0])
    assert 0 < worst < 0.01
    assert drawn.current_width == pytest.approx(plan.current_width, rel=0.25)


# --- real data ---------------------------------------------------------------------------


def test_snli_dev_plan_with_bert(datasets_dir: Path):
    counts, preds = snli_bert(datasets_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = plan_certification(counts, preds, n_simulations=200, rng=0)
    res = certify(counts, preds)
    assert counts.shape == (9842, 3)
    assert upper_bounds(counts).theoretical == pytest.approx(res.u_t)
    # a few SNLI items have fewer than 5 labels: their 5th is the label model's, hence 1e-4
    assert plan.margins["5"] == pytest.approx(res.l - res.u_t, abs=1e-4)
    assert not plan.certified_now
    assert plan.designs[0].probability == 0.0
