"""Survey equivalence: invariants, the information-theoretic limit, and the two paths agreeing."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import comb as scomb
from sklearn.metrics import f1_score, roc_auc_score

from auditor.stats import (
    LabelCounts,
    StatsInputError,
    calibrate_probabilities,
    classifier_score,
    expert_equivalence,
    power_curve,
    survey_equivalence,
)
from auditor.stats.counts import row_histogram
from auditor.stats.equivalence import curve as curve_module
from auditor.stats.equivalence import scorers
from auditor.stats.equivalence.curve import equivalence_values


def _draw(rng, n_items, n_raters, states, weights):
    """Binary ratings from a finite mixture of item states (P(class 1) = state)."""
    state = rng.choice(np.asarray(states), size=n_items, p=np.asarray(weights))
    return (rng.random((n_items, n_raters)) < state[:, None]).astype(np.int64), state


def _entropy(p):
    p = np.clip(p, 1e-300, 1.0)
    q = np.clip(1.0 - p, 1e-300, 1.0)
    return -(p * np.log2(p) + q * np.log2(q))


def _mutual_information(k, states, weights):
    """MI(Y_{k+1}; Y_1..Y_k) in bits for i.i.d. labels given a state from a finite mixture."""
    s, w = np.asarray(states), np.asarray(weights)
    h1 = _entropy((w * s).sum())
    h_cond = 0.0
    for c in range(k + 1):
        seq = (w * s**c * (1 - s) ** (k - c)).sum()          # P(one sequence with c ones)
        nxt = (w * s ** (c + 1) * (1 - s) ** (k - c)).sum() / seq
        h_cond += scomb(k, c) * seq * _entropy(nxt)
    return h1 - h_cond


@pytest.mark.slow
def test_abc_cross_entropy_gain_is_the_mutual_information():
    """Theorem 4.1: with many items, c_k − c_0 of ABC + cross-entropy → MI(Y_{k+1}; Y_1..Y_k).

    200,000 items × 10 raters from the running example's kind of model (three item
    states); the analytic MI comes from the model, not from the data.
    """
    states, weights = [0.8, 0.1, 0.5], [0.7, 0.2, 0.1]
    ratings, _ = _draw(np.random.default_rng(11), 200_000, 10, states, weights)
    curve = power_curve(ratings, combiner="abc", scorer="cross_entropy", n_bootstrap=0)
    gain = curve.mean - curve.mean[0]
    expected = np.array([_mutual_information(k, states, weights) for k in curve.k])
    np.testing.assert_allclose(gain, expected, atol=0.002)
    assert np.all(np.diff(curve.mean) > 0)


@pytest.mark.parametrize(("n_raters", "n_labels"), [(6, 2), (5, 3), (10, 2)])
@pytest.mark.parametrize(("combiner", "scorer"), [
    ("plurality", "agreement"), ("frequency", "cross_entropy"), ("abc", "cross_entropy"),
    ("abc", "agreement"), ("frequency", "agreement"),
])
def test_exact_path_equals_all_subsets_sampling(n_raters, n_labels, combiner, scorer):
    """Where C(K, k) ≤ 200 the subset path enumerates every subset: the same number to 1e-9."""
    rng = np.random.default_rng(n_raters * 10 + n_labels)
    theta = rng.dirichlet(np.ones(n_labels), size=150)
    ratings = np.array([rng.choice(n_labels, size=n_raters, p=t) for t in theta])
    exact = power_curve(ratings, combiner=combiner, scorer=scorer, n_bootstrap=0, method="exact")
    sampled = power_curve(ratings, combiner=combiner, scorer=scorer, n_bootstrap=0, method="sampling", rng=0)
    full = [k for k in exact.k if comb(n_raters, k) <= 200]
    np.testing.assert_allclose(exact.mean[full], sampled.mean[full], rtol=0, atol=1e-9)
    # Elsewhere the 200 random subsets are a Monte-Carlo estimate of the same number.
    np.testing.assert_allclose(exact.mean, sampled.mean, atol=0.01)


def test_exact_and_sampling_agree_with_reference_raters():
    rng = np.random.default_rng(5)
    pool, state = _draw(rng, 200, 4, [0.2, 0.7], [0.5, 0.5])
    expert = (rng.random((200, 3)) < state[:, None]).astype(np.int64)
    for combiner, scorer in [("majority", "agreement"), ("abc", "cross_entropy")]:
        e = power_curve(pool, combiner=combiner, scorer=scorer, reference=expert, n_bootstrap=0)
        s = power_curve(pool, combiner=combiner, scorer=scorer, reference=expert, n_bootstrap=0,
                        method="sampling", rng=0)
        assert e.k.tolist() == [0, 1, 2, 3, 4]
        np.testing.assert_allclose(e.mean, s.mean, atol=1e-9)


def test_counts_input_equals_matrix_input():
    rng = np.random.default_rng(2)
    ratings, _ = _draw(rng, 300, 7, [0.1, 0.6, 0.9], [0.3, 0.4, 0.3])
    counts = np.stack([(ratings == 0).sum(axis=1), (ratings == 1).sum(axis=1)], axis=1)
    lc = LabelCounts(counts, (0, 1), tuple(range(300)))
    a = power_curve(ratings, combiner="abc", scorer="cross_entropy", n_bootstrap=30, rng=4)
    b = power_curve(lc, combiner="abc", scorer="cross_entropy", n_bootstrap=30, rng=4)
    np.testing.assert_allclose(a.mean, b.mean, atol=1e-12)
    np.testing.assert_allclose(a.replicates, b.replicates, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_raters=st.integers(2, 6), n_labels=st.integers(2, 3),
       combiner=st.sampled_from(["plurality", "frequency", "abc"]))
def test_curve_is_invariant_to_item_and_rater_order_and_label_names(seed, n_raters, n_labels, combiner):
    rng = np.random.default_rng(seed)
    ratings = rng.integers(0, n_labels, size=(40, n_raters))
    ratings[rng.random(ratings.shape) < 0.2] = -1
    ratings[:, :2] = rng.integers(0, n_labels, size=(40, 2))  # every item has two labels
    scorer = "cross_entropy" if combiner != "plurality" else "agreement"
    base = power_curve(ratings, combiner=combiner, scorer=scorer, n_bootstrap=0, n_labels=n_labels)
    shuffled = ratings[rng.permutation(40)][:, rng.permutation(n_raters)]
    perm = rng.permutation(n_labels)
    relabeled = np.where(ratings >= 0, perm[np.maximum(ratings, 0)], -1)
    for other in (shuffled, relabeled):
        again = power_curve(other, combiner=combiner, scorer=scorer, n_bootstrap=0, n_labels=n_labels)
        np.testing.assert_allclose(again.mean, base.mean, atol=1e-9)
    assert np.all(base.n_items[:-1] >= base.n_items[1:])


def test_bootstrap_is_reproducible_and_brackets_the_estimate():
    rng = np.random.default_rng(8)
    ratings, state = _draw(rng, 500, 8, [0.15, 0.85], [0.4, 0.6])
    probs = np.column_stack([1 - state, state]) * 0.8 + 0.1
    a = survey_equivalence(ratings, probs, combiner="abc", scorer="cross_entropy", n_bootstrap=200, rng=3)
    b = survey_equivalence(ratings, probs, combiner="abc", scorer="cross_entropy", n_bootstrap=200, rng=3)
    assert a.value == b.value and a.ci_low == b.ci_low and a.ci_high == b.ci_high
    np.testing.assert_array_equal(a.curve.replicates, b.curve.replicates)
    assert np.all(a.curve.ci_low <= a.curve.mean) and np.all(a.curve.mean <= a.curve.ci_high)
    assert a.classifier_score.ci_low <= a.classifier_score.value <= a.classifier_score.ci_high
    assert a.curve.replicates.shape == (200, 8)


@pytest.mark.parametrize("n_keys", [0, 1, 2])
@pytest.mark.parametrize("blocks", [(1 << 15, 1 << 13), (16, 4), (16, 1)])
def test_item_by_item_draws_account_for_one_sample_of_n_items(monkeypatch, n_keys, blocks):
    """With very many groups a replicate draws item positions block by block; its key counts
    and column sums are those of one sample of n items: with one column per group (its
    indicator), the column sums are the sample's group counts, and every key's counts are
    those groups' keys. Blocks of a few items exercise blocks within one key, blocks over
    several, blocks cut at the keys' starts and constant columns."""
    from auditor.stats.equivalence import resample

    monkeypatch.setattr(resample, "_draw_items", lambda n_items, n_groups: True)
    monkeypatch.setattr(resample, "_BLOCK", blocks[0])
    monkeypatch.setattr(resample, "_MIN_BLOCK", blocks[1])
    rng = np.random.default_rng(4)
    n_groups = 40
    gmult = rng.integers(1, 4, n_groups)
    item_group = rng.permutation(np.repeat(np.arange(n_groups), gmult))
    n = item_group.size
    keys = [(rng.integers(0, 6, n_groups), 6), (rng.integers(0, 3, n_groups), 3)][:n_keys]
    columns = np.column_stack([np.eye(n_groups), np.ones(n_groups), np.full(n_groups, 0.5)])
    got = list(resample._resampled_sums(gmult, item_group, 7, np.random.default_rng(11), keys=keys, columns=columns))
    assert [r.stop - r.start for r, _, _ in got] == [7]
    _, per_key, sums = got[0]
    counts = sums[:, :n_groups]
    np.testing.assert_array_equal(counts, np.rint(counts))
    np.testing.assert_array_equal(counts.sum(axis=1), n)
    np.testing.assert_array_equal(sums[:, n_groups], n)
    np.testing.assert_allclose(sums[:, n_groups + 1], n / 2, rtol=1e-12)
    assert (counts.std(axis=0) > 0).any()  # the replicates differ
    for w, (key, size) in zip(per_key, keys, strict=True):
        for i in range(7):
            np.testing.assert_array_equal(w[i], np.bincount(key, weights=counts[i], minlength=size))
    # The same generator state gives the same replicates.
    again = list(resample._resampled_sums(gmult, item_group, 7, np.random.default_rng(11), keys=keys, columns=columns))
    np.testing.assert_array_equal(again[0][2], sums)


@pytest.mark.parametrize("blocks", [(1 << 15, 1 << 13), (16, 4)])
def test_item_by_item_draws_have_the_law_of_group_draws(monkeypatch, blocks):
    """Both ways of drawing a replicate give the item bootstrap: same mean and spread (with
    one block, and with many: a multinomial over blocks, then uniform draws within)."""
    from auditor.stats.equivalence import resample

    monkeypatch.setattr(resample, "_BLOCK", blocks[0])
    monkeypatch.setattr(resample, "_MIN_BLOCK", blocks[1])

    rng = np.random.default_rng(5)
    gmult = rng.integers(1, 30, 25)
    item_group = np.repeat(np.arange(25), gmult)
    columns = np.column_stack([rng.normal(size=25), np.ones(25)])
    keys = [(np.arange(25) % 4, 4)]

    def replicates(by_item):
        monkeypatch.setattr(resample, "_draw_items", lambda n_items, n_groups: by_item)
        parts = list(resample._resampled_sums(gmult, item_group, 4000, np.random.default_rng(2), keys=keys,
                                           columns=columns))
        return (np.concatenate([s[:, 0] / s[:, 1] for _, _, s in parts]),
                np.concatenate([w[0][:, 0] for _, w, _ in parts]))

    (a, ka), (b, kb) = replicates(False), replicates(True)
    for x, y in ((a, b), (ka, kb)):
        se = np.sqrt(x.var() / x.size + y.var() / y.size)
        assert abs(x.mean() - y.mean()) < 4 * se
        assert 0.9 < y.std() / x.std() < 1.1  # 4,000 replicates: sd of this ratio ≈ 0.016


def test_survey_equivalence_draws_items_one_by_one_when_predictions_are_all_distinct(monkeypatch):
    """A classifier with a distinct prediction per item skips the grouping; the result is
    an item bootstrap (reproducible, and it brackets the estimate)."""
    from auditor.stats.equivalence import curve

    rng = np.random.default_rng(8)
    ratings, state = _draw(rng, 300, 6, [0.2, 0.8], [0.5, 0.5])
    probs = np.clip(np.column_stack([1 - state, state]) * 0.8 + 0.1 + rng.normal(0, 0.02, (300, 1)), 0.01, 0.99)
    probs /= probs.sum(axis=1, keepdims=True)
    a = survey_equivalence(ratings, probs, combiner="frequency", scorer="cross_entropy", n_bootstrap=100, rng=3)
    b = survey_equivalence(ratings, probs, combiner="frequency", scorer="cross_entropy", n_bootstrap=100, rng=3)
    np.testing.assert_array_equal(a.curve.replicates, b.curve.replicates)
    assert a.classifier_score.ci_low <= a.classifier_score.value <= a.classifier_score.ci_high
    assert np.all(a.curve.ci_low <= a.curve.mean) and np.all(a.curve.mean <= a.curve.ci_high)
    monkeypatch.setattr(curve, "_group_items", lambda values: True)
    grouped = survey_equivalence(ratings, probs, combiner="frequency", scorer="cross_entropy", n_bootstrap=0,
                                 rng=3)
    np.testing.assert_allclose(a.curve.mean, grouped.curve.mean, rtol=1e-12)
    assert a.classifier_score.value == pytest.approx(grouped.classifier_score.value, rel=1e-12)


def test_sampled_rater_subsets_report_an_honest_monte_carlo_error():
    """Where the rater-subset path draws 200 of the C(K, k) subsets, ``mc_error`` is the
    standard error of that draw: ±1.96 of it covers the all-subsets value (the exact
    path) in about 95% of cases; it is 0 wherever every subset is used, and on the
    exact path. (bench/bench_mc_error.py runs the larger study.)"""
    rng = np.random.default_rng(21)
    z = []
    for rep in range(12):
        p = rng.dirichlet(np.full(3, 0.7 if rep % 2 else 0.25), size=80)
        ratings = (rng.random((80, 12, 1)) > np.cumsum(p, axis=1)[:, None, :]).sum(axis=2)
        kw = dict(combiner="plurality", scorer="agreement", n_bootstrap=0, n_labels=3)
        exact = power_curve(ratings, method="exact", k_values="all", **kw)
        mc = power_curve(ratings, method="sampling", rng=rep, **kw)
        sampled = mc.mc_error > 0
        # C(12, k) > 200 exactly for k = 3..9; other k are enumerated, hence exact.
        assert np.flatnonzero(sampled).tolist() == list(range(3, 10))
        np.testing.assert_allclose(mc.mean[~sampled], exact.mean[~sampled], atol=1e-12)
        assert np.all(exact.mc_error == 0)
        z.extend(((mc.mean - exact.mean)[sampled] / mc.mc_error[sampled]).tolist())
    z = np.array(z)
    assert np.mean(np.abs(z) <= 1.96) >= 0.88  # 84 correlated cases: 95% less noise
    assert 0.6 < np.std(z) < 1.4               # neither too small an error nor too large
    assert mc.to_dict()["mc_error"] == mc.mc_error.tolist()


def test_equivalence_beyond_the_curve_is_reported_not_capped():
    """The reference package caps it at the largest k; here it is "> K − 1" (and "< 0")."""
    rng = np.random.default_rng(1)
    ratings, state = _draw(rng, 400, 5, [0.05, 0.95], [0.5, 0.5])
    # The omniscient classifier (it outputs each item's state) beats any finite survey.
    omniscient = np.column_stack([1 - state, state])
    above = survey_equivalence(ratings, omniscient, combiner="abc", scorer="cross_entropy", n_bootstrap=20, rng=0)
    assert above.value == "> 4" and above.position == "above"
    # A classifier that points the wrong way scores below the prior's c_0.
    reversed_ = np.column_stack([state, 1 - state]) * 0.9 + 0.05
    below = survey_equivalence(ratings, reversed_, combiner="abc", scorer="cross_entropy",
                               n_bootstrap=20, rng=0)
    assert below.value == "< 0" and below.position == "below"
    assert below.ci_low == "< 0" and below.ci_high == "< 0"


def test_equivalence_values_follow_algorithm_4():
    curve = np.array([[0.5, 0.6, 0.7, 0.65, 0.8]])
    values = equivalence_values(np.repeat(curve, 5, axis=0), np.array([0.4, 0.5, 0.65, 0.75, 0.9]))
    assert values[0] == -np.inf and values[1] == -np.inf   # h ≤ c_0 → "< 0"
    assert values[2] == pytest.approx(1.5)                  # leftmost crossing, interpolated
    assert values[3] == pytest.approx(3 + (0.75 - 0.65) / (0.8 - 0.65))
    assert values[4] == np.inf


def test_auc_ranks_by_probability_of_the_positive_class():
    """A perfect ranking scores 1 (the reference package's max(p, 1−p) ranking gives 0.5 here)."""
    labels = np.array([0, 0, 0, 1, 1, 1])
    p1 = np.array([0.1, 0.2, 0.3, 0.7, 0.8, 0.9])
    pred = np.column_stack([1 - p1, p1])
    assert scorers.auc(pred, labels, np.ones((1, 6)))[0] == pytest.approx(1.0)
    ratings = np.column_stack([labels, labels])
    assert classifier_score(ratings, pred, scorer="auc", n_bootstrap=0).value == pytest.approx(1.0)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_labels=st.integers(2, 4))
def test_scorers_match_scikit_learn_and_numpy(seed, n_labels):
    rng = np.random.default_rng(seed)
    n = 60
    labels = rng.integers(0, n_labels, n)
    hard = rng.integers(0, n_labels, n)
    onehot = np.eye(n_labels)[hard]
    ones = np.ones((1, n))
    average = "binary" if n_labels == 2 else "macro"
    expected_f1 = f1_score(labels, hard, average=average, zero_division=0)
    assert scorers.f1(onehot, labels, ones)[0] == pytest.approx(expected_f1, abs=1e-12)
    assert scorers.agreement(onehot, labels, ones)[0] == pytest.approx((labels == hard).mean())
    if n_labels == 2 and len(set(labels)) == 2:
        p1 = rng.random(n)
        probs = np.column_stack([1 - p1, p1])
        assert scorers.auc(probs, labels, ones)[0] == pytest.approx(roc_auc_score(labels, p1), abs=1e-12)
        assert scorers.pearson(probs, labels, ones)[0] == pytest.approx(np.corrcoef(p1, labels)[0, 1], abs=1e-9)
    # Integer weights are repeated items.
    w = rng.integers(0, 3, n)
    rep = np.repeat(np.arange(n), w)
    if rep.size and n_labels == 2 and len(set(labels[rep])) == 2:
        probs = np.column_stack([1 - hard * 0.7, hard * 0.7])
        a = scorers.auc(probs, labels, w[None, :].astype(float))[0]
        assert a == pytest.approx(scorers.auc(probs[rep], labels[rep], np.ones((1, rep.size)))[0])


def test_dmi_is_absolute_determinant_of_the_joint_distribution():
    labels = np.array([0, 0, 1, 1])
    pred = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    assert scorers.dmi(pred, labels, np.ones((1, 4)))[0] == pytest.approx(0.25)
    # Invariant to renaming the predicted classes; zero when prediction and label are independent.
    assert scorers.dmi(pred[::-1], labels, np.ones((1, 4)))[0] == pytest.approx(0.25)
    independent = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert scorers.dmi(independent, labels, np.ones((1, 4)))[0] == pytest.approx(0.0)


def test_non_decomposable_scorers_use_the_subset_path():
    rng = np.random.default_rng(4)
    ratings, state = _draw(rng, 120, 5, [0.2, 0.8], [0.5, 0.5])
    preds = (state > 0.5).astype(int)
    for scorer in ("f1", "auc", "pearson", "dmi"):
        eq = survey_equivalence(ratings, preds, combiner="majority", scorer=scorer, n_bootstrap=20, rng=0)
        assert eq.curve.method == "sampling"
        assert np.all(np.isfinite(eq.curve.mean[1:]))
        assert eq.curve.mean[-1] > eq.curve.mean[1]


def test_expert_equivalence_of_pool_raters():
    """Pool raters as good as experts: k pool raters are worth about k experts."""
    rng = np.random.default_rng(9)
    pool, state = _draw(rng, 3000, 4, [0.15, 0.85], [0.5, 0.5])
    expert = (rng.random((3000, 5)) < state[:, None]).astype(np.int64)
    result = expert_equivalence(pool, expert, combiner="abc", scorer="cross_entropy", n_bootstrap=50, rng=0)
    assert result.pool_curve.k.tolist() == [0, 1, 2, 3, 4]
    assert result.expert_curve.k.tolist() == [0, 1, 2, 3, 4]
    assert result.value[0] == "< 0" or result.value[0] == pytest.approx(0, abs=0.1)
    for k in (1, 2, 3):
        assert result.value[k] == pytest.approx(k, abs=0.25)
        assert result.ci_low[k] <= result.value[k] <= result.ci_high[k]
    assert np.all(result.pool_curve.ci_low <= result.pool_curve.mean)
    values, lows, highs, pool_curve, expert_curve = result  # unpacks like a tuple
    assert (values, lows, highs) == (result.value, result.ci_low, result.ci_high)
    assert pool_curve is result.pool_curve and expert_curve is result.expert_curve
    # Count matrices (e.g. an audit's per-vendor counts) give the same result.
    counts = [LabelCounts(np.stack([(m == 0).sum(axis=1), (m == 1).sum(axis=1)], axis=1), (0, 1),
                          tuple(range(3000))) for m in (pool, expert)]
    again = expert_equivalence(*counts, combiner="abc", scorer="cross_entropy", n_bootstrap=50, rng=0)
    assert again.value == result.value


def test_calibration_recovers_the_label_frequencies():
    rng = np.random.default_rng(6)
    ratings, state = _draw(rng, 2000, 6, [0.1, 0.5, 0.8], [0.3, 0.3, 0.4])
    # A miscalibrated but monotone score of the state.
    raw = np.column_stack([1 - state**3, state**3])
    cal = calibrate_probabilities(ratings, raw)
    for s in (0.1, 0.5, 0.8):
        assert cal[state == s, 1].mean() == pytest.approx(s, abs=0.03)
    np.testing.assert_allclose(cal.sum(axis=1), 1.0)


@given(st.integers(0, 2**32 - 1), st.integers(2, 4), st.integers(1, 60))
@settings(max_examples=60, deadline=None)
def test_calibration_is_scikit_learns_isotonic_regression(seed, n_labels, n_items):
    """The scipy fit (ties pooled, weighted, clipped interpolation) is scikit-learn's
    ``IsotonicRegression(out_of_bounds="clip")``, ties and unseen scores included."""
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 5, size=(n_items, n_labels))
    counts[counts.sum(axis=1) == 0, 0] = 1
    # Few distinct probabilities, so that scores tie.
    probs = rng.dirichlet(np.ones(n_labels), size=n_items).round(1) + 1e-3
    probs /= probs.sum(axis=1, keepdims=True)
    target = rng.dirichlet(np.ones(n_labels), size=25)
    got = calibrate_probabilities(LabelCounts(counts, tuple(range(n_labels)), tuple(range(n_items))), probs,
                                  apply_to=target)
    n = counts.sum(axis=1)
    freq = counts / n[:, None]
    want = np.zeros_like(target)
    for lab in ([1] if n_labels == 2 else range(n_labels)):
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
        iso.fit(probs[:, lab], freq[:, lab], sample_weight=n)
        want[:, lab] = iso.predict(target[:, lab])
    if n_labels == 2:
        want[:, 0] = 1.0 - want[:, 1]
    else:
        total = want.sum(axis=1, keepdims=True)
        empty = total[:, 0] <= 0
        want[empty], total[empty] = 1.0 / n_labels, 1.0
        want /= total
    np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"combiner": "median", "scorer": "agreement"}, "`combiner` must be one of"),
    ({"combiner": "majority", "scorer": "cross_entropy"}, "needs a soft combiner"),
    ({"combiner": "frequency", "scorer": "brier"}, "`scorer` must be one of"),
    ({"combiner": "frequency", "scorer": "agreement", "n_bootstrap": -1}, "`n_bootstrap`"),
    ({"combiner": "frequency", "scorer": "agreement", "confidence": 1.5}, "`confidence`"),
    ({"combiner": "frequency", "scorer": "f1"}, "missing entries"),
    ({"combiner": "frequency", "scorer": "agreement", "rng": "seed"}, "`rng`"),
])
def test_bad_options_raise_naming_the_argument(kwargs, message):
    ratings = np.array([[0, 1, -1], [1, 1, 0], [0, 0, 0]])
    with pytest.raises(StatsInputError, match=message):
        power_curve(ratings, **kwargs)


def test_bad_data_raise_naming_the_row():
    with pytest.raises(StatsInputError, match="row 1, rater 2"):
        power_curve(np.array([[0, 1, 1], [1, 0, 0.5]]), combiner="plurality", scorer="agreement")
    with pytest.raises(StatsInputError, match="predictions"):
        survey_equivalence(np.array([[0, 1], [1, 1]]), np.array([0, 1]), combiner="abc",
                           scorer="cross_entropy")
    with pytest.raises(StatsInputError, match="`predictions` row 0"):
        survey_equivalence(np.array([[0, 1], [1, 1]]), np.array([[0.5, 0.6], [0.5, 0.5]]),
                           combiner="abc", scorer="cross_entropy")


def test_nan_marks_missing_ratings_and_min_labels_keeps_full_rows():
    ratings = np.array([[0, 1, np.nan], [1, 1, 0], [0, 0, 1], [np.nan, 1, 1]])
    curve = power_curve(ratings, combiner="plurality", scorer="agreement", n_bootstrap=0)
    assert curve.n_items.tolist() == [4, 4, 2]
    f1 = power_curve(ratings, combiner="plurality", scorer="f1", n_bootstrap=0, min_labels=2, rng=0)
    assert f1.k.tolist() == [0, 1]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 80), n_cols=st.integers(1, 12),
       nan_share=st.sampled_from([0.0, 0.1, 0.5, 0.95]))
def test_interval_quantiles_equal_numpys_nanquantile(seed, n_rows, n_cols, nan_share):
    # The curve's intervals, column by column (replicates with NaN where a c_k is
    # undefined, and ±inf), bit for bit what np.nanquantile gives.
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n_rows, n_cols)).round(rng.integers(0, 3))  # ties too
    values[rng.random(values.shape) < nan_share] = np.nan
    values[rng.random(values.shape) < 0.03] = np.inf
    values[rng.random(values.shape) < 0.03] = -np.inf
    values[0] = np.where(np.isnan(values).all(axis=0), 0.5, values[0])  # a value per column
    qs = [0.025, 0.975]
    got = curve_module._column_quantiles(values, qs)
    with np.errstate(invalid="ignore"):
        expected = np.nanquantile(values, qs, axis=0)
    np.testing.assert_array_equal(got, expected)


def test_docstring_examples_run():
    import doctest

    from auditor.stats.equivalence import curve

    result = doctest.testmod(curve, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2
    assert result.failed == 0


def _literal_columns_curve(matrix, combiner, scorer, n_labels, clip=0.02):
    """Algorithms 1 and 3 read literally on a matrix with empty cells, every subset.

    For each k-subset S of the columns, each item's prediction combines its labels in S;
    for each other column r, the score is the mean over the items labelled in r; c_k is
    the mean over columns (that have labels) and subsets.
    """
    from itertools import combinations

    from auditor.stats.equivalence._inputs import counts_of
    from auditor.stats.equivalence.combiners import ABCModel, predict

    counts = counts_of(matrix, n_labels)
    prior = counts.sum(axis=0) / counts.sum()
    uniq, mult = np.unique(counts, axis=0, return_counts=True)
    model = ABCModel(uniq, mult)
    score_fn = scorers.SCORERS[scorer]
    n_cols = matrix.shape[1]
    curve = []
    for k in range(n_cols):
        per_subset = []
        for subset in combinations(range(n_cols), k):
            y = counts_of(matrix[:, list(subset)], n_labels) if k else np.zeros_like(counts)
            pred = predict(combiner, y, counts, prior=prior, model=model, clip=clip)
            cols = [score_fn(pred, matrix[:, r], np.ones((1, matrix.shape[0])))[0]
                    for r in range(n_cols) if r not in subset and (matrix[:, r] >= 0).any()]
            per_subset.append(np.mean(cols))
        curve.append(np.mean(per_subset))
    return np.array(curve)


@pytest.mark.parametrize(("combiner", "scorer"), [
    ("plurality", "agreement"), ("frequency", "cross_entropy"), ("abc", "cross_entropy"),
])
def test_columns_semantics_equals_the_literal_algorithm(combiner, scorer):
    rng = np.random.default_rng(12)
    matrix = rng.integers(0, 2, size=(30, 5))
    holes = rng.random(matrix.shape) < 0.35
    holes[:, 0] = False  # every item keeps a label
    matrix[holes] = -1
    literal = _literal_columns_curve(matrix, combiner, scorer, 2)
    ours = power_curve(matrix, combiner=combiner, scorer=scorer, n_bootstrap=0, raters="columns")
    np.testing.assert_allclose(ours.mean, literal, atol=1e-12)


def test_columns_and_labels_semantics_coincide_on_a_full_matrix():
    rng = np.random.default_rng(13)
    ratings, _ = _draw(rng, 200, 6, [0.2, 0.7], [0.5, 0.5])
    for combiner, scorer in [("abc", "cross_entropy"), ("majority", "agreement")]:
        a = power_curve(ratings, combiner=combiner, scorer=scorer, n_bootstrap=0)
        b = power_curve(ratings, combiner=combiner, scorer=scorer, n_bootstrap=0, raters="columns")
        np.testing.assert_allclose(a.mean, b.mean, atol=1e-12)


def test_classifier_score_is_algorithm_1():
    rng = np.random.default_rng(14)
    ratings, state = _draw(rng, 100, 4, [0.2, 0.8], [0.5, 0.5])
    probs = np.column_stack([1 - state, state])
    ce = classifier_score(ratings, probs, scorer="cross_entropy", n_bootstrap=40, rng=0)
    by_column = [np.mean(np.log2(probs[np.arange(100), ratings[:, j]])) for j in range(4)]
    assert ce.value == pytest.approx(np.mean(by_column), abs=1e-12)
    assert ce.ci_low <= ce.value <= ce.ci_high
    f1 = classifier_score(ratings, (state > 0.5).astype(int), scorer="f1", n_bootstrap=40, rng=0)
    by_column = [f1_score(ratings[:, j], (state > 0.5).astype(int)) for j in range(4)]
    assert f1.value == pytest.approx(np.mean(by_column), abs=1e-12)
    assert f1.replicates.shape == (40,)


def test_subset_path_regenerates_large_weight_sets_identically(monkeypatch):
    """Above the cache limit the bootstrap weights are redrawn from fixed seeds: same result."""
    from auditor.stats.equivalence import resample

    rng = np.random.default_rng(15)
    ratings, _ = _draw(rng, 80, 4, [0.2, 0.8], [0.5, 0.5])
    cached = power_curve(ratings, combiner="majority", scorer="f1", n_bootstrap=30, rng=7)
    monkeypatch.setattr(resample, "_CACHE_CELLS", 10)
    lazy = power_curve(ratings, combiner="majority", scorer="f1", n_bootstrap=30, rng=7)
    np.testing.assert_allclose(lazy.mean, cached.mean, atol=1e-12)
    np.testing.assert_allclose(lazy.replicates, cached.replicates, atol=1e-12)


def test_exact_path_in_small_blocks_gives_the_same_curve(monkeypatch):
    """The exact path processes count vectors in blocks of bounded size; blocks change nothing."""
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(16)
    theta = rng.dirichlet(np.ones(3), size=200)
    n_have = rng.integers(2, 9, size=200)
    ratings = np.full((200, 8), -1)
    for i in range(200):
        ratings[i, : n_have[i]] = rng.choice(3, size=n_have[i], p=theta[i])
    whole = power_curve(ratings, combiner="abc", scorer="cross_entropy", n_bootstrap=20, rng=1)
    cols = power_curve(ratings, combiner="frequency", scorer="agreement", n_bootstrap=0, raters="columns")
    monkeypatch.setattr(exact, "_PAIRS_PER_BLOCK", 50)
    exact.clear_table_cache()
    # Each [3, 2, 1] has 23 sub-count vectors of at most 5 labels: two keys per block of 50.
    assert len(exact._key_blocks(exact._pairs_per_key(np.array([[3, 2, 1]] * 5), True, k_max=5))) == 3
    blocks = power_curve(ratings, combiner="abc", scorer="cross_entropy", n_bootstrap=20, rng=1)
    np.testing.assert_allclose(blocks.mean, whole.mean, atol=1e-12)
    np.testing.assert_allclose(blocks.replicates, whole.replicates, atol=1e-12)
    cols_blocks = power_curve(ratings, combiner="frequency", scorer="agreement", n_bootstrap=0, raters="columns")
    np.testing.assert_allclose(cols_blocks.mean, cols.mean, atol=1e-12)


@pytest.mark.parametrize(("combiner", "scorer"), [("plurality", "agreement"), ("frequency", "cross_entropy"),
                                                  ("abc", "cross_entropy")])
def test_long_curves_on_a_grid_equal_every_k_at_the_grid_points(combiner, scorer):
    """Items with very many labels: the curve is computed at every small k and then on a
    geometric grid to the last k; at those k it is the every-k curve, bootstrap included."""
    from auditor.stats.equivalence.exact import DENSE_K, SMALL_K, k_grid

    rng = np.random.default_rng(21)
    p = rng.dirichlet(np.full(3, 0.7), size=60)
    n_labels = rng.integers(2, 70, size=60)
    counts = np.vstack([rng.multinomial(n, q) for n, q in zip(n_labels, p, strict=True)])
    counts[0] = rng.multinomial(90, p[0])  # one item long enough for the grid
    ratings = LabelCounts(counts, ("a", "b", "c"), tuple(range(60)))
    grid = power_curve(ratings, combiner=combiner, scorer=scorer, n_bootstrap=25, rng=3)
    every = power_curve(ratings, combiner=combiner, scorer=scorer, n_bootstrap=25, rng=3, k_values="all")
    ks = grid.k
    assert ks.tolist() == k_grid(89).tolist() and ks[-1] == 89 and len(ks) < 45
    assert ks[: SMALL_K + 1].tolist() == list(range(SMALL_K + 1)) and np.all(np.diff(ks) > 0)
    assert every.k.tolist() == list(range(90))
    # The ABC's sums over sub-vectors are added in another order when the sizes group differently
    # (rounding at 1e-10 relative, amplified by its leave-one-out subtraction); the rest are equal to 1e-12.
    tol = dict(rtol=1e-9, atol=1e-12) if combiner == "abc" else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(grid.mean, every.mean[ks], **tol)
    np.testing.assert_allclose(grid.replicates, every.replicates[:, ks], **tol)
    np.testing.assert_array_equal(grid.n_items, every.n_items[ks])
    assert k_grid(DENSE_K).tolist() == list(range(DENSE_K + 1))


def test_equivalence_values_on_a_grid_interpolate_in_k():
    curve = np.array([[0.5, 0.6, 0.7, 0.9]])
    v = equivalence_values(curve, np.array([0.8]), np.array([0, 1, 2, 10]))
    assert v[0] == pytest.approx(2 + 0.5 * 8)


def test_abc_sparse_and_dense_sub_vector_tables_agree(monkeypatch):
    """The ABC's table of sub-vector probabilities is a dense array when its key space is
    small and a hashed set of keys otherwise: the same predictions."""
    from auditor.stats.equivalence.combiners import ABCModel
    from auditor.stats.equivalence.exact import clear_table_cache

    rng = np.random.default_rng(5)
    counts = rng.multinomial(7, rng.dirichlet(np.ones(4), size=300))
    dense = power_curve(counts_to := LabelCounts(counts, tuple("abcd"), tuple(range(300))), combiner="abc",
                        scorer="cross_entropy", n_bootstrap=10, rng=2)
    monkeypatch.setattr(ABCModel, "DENSE_KEYS", 0)
    clear_table_cache()
    sparse = power_curve(counts_to, combiner="abc", scorer="cross_entropy", n_bootstrap=10, rng=2)
    np.testing.assert_allclose(sparse.mean, dense.mean, rtol=1e-12)
    monkeypatch.setattr(ABCModel, "TABLE_BUDGET", 0)  # no table at all: the direct sum
    clear_table_cache()
    direct = power_curve(counts_to, combiner="abc", scorer="cross_entropy", n_bootstrap=10, rng=2)
    np.testing.assert_allclose(direct.mean, dense.mean, rtol=1e-10)


def test_curve_and_equivalences_on_the_same_items_share_one_table_computation(monkeypatch):
    """The exact tables depend on the distinct count vectors only: a power curve and the
    survey equivalences of several releases on the same items compute them once, with
    results identical to computing them anew."""
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(8)
    counts = rng.multinomial(6, rng.dirichlet(np.ones(3), size=150))
    ratings = LabelCounts(counts, ("a", "b", "c"), tuple(range(150)))
    exact.clear_table_cache()
    calls = []
    real = exact._exact_tables
    monkeypatch.setattr(exact, "_exact_tables", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    curve = power_curve(ratings, combiner="abc", scorer="cross_entropy", n_bootstrap=10, rng=1)
    preds = [rng.dirichlet(np.ones(3), size=150) for _ in range(3)]
    eqs = [survey_equivalence(ratings, p, combiner="abc", scorer="cross_entropy", n_bootstrap=10, rng=1)
           for p in preds]
    assert len(calls) == 1
    exact.clear_table_cache()
    fresh = survey_equivalence(ratings, preds[2], combiner="abc", scorer="cross_entropy", n_bootstrap=10, rng=1)
    assert len(calls) == 2
    np.testing.assert_array_equal(fresh.curve.mean, eqs[2].curve.mean)
    np.testing.assert_array_equal(fresh.curve.replicates, eqs[2].curve.replicates)
    np.testing.assert_array_equal(curve.mean, eqs[0].curve.mean)
    # Other counts, another combiner: computed, not confused with the kept ones.
    power_curve(ratings, combiner="frequency", scorer="cross_entropy", n_bootstrap=0)
    power_curve(LabelCounts(counts[::-1][:100], ("a", "b", "c"), tuple(range(100))), combiner="abc",
                scorer="cross_entropy", n_bootstrap=0)
    assert len(calls) == 4


def _abc_case(seed: int, n_labels: int, reference: bool):
    """Random ragged pool counts (and reference counts), the ABC fitted on them, and the
    arguments of ``exact_tables`` for every k or a grid of them."""
    from auditor.stats.equivalence.combiners import ABCModel

    rng = np.random.default_rng(seed)
    n_items = int(rng.integers(5, 60))
    per_item = rng.integers(1, 9, n_items)
    pool = np.stack([rng.multinomial(n, rng.dirichlet(np.full(n_labels, 0.7))) for n in per_item])
    ref = np.stack([rng.multinomial(2, rng.dirichlet(np.ones(n_labels))) for _ in range(n_items)]) \
        if reference else None
    uniq, mult, _ = row_histogram(pool)
    prior = pool.sum(axis=0) / pool.sum()
    k_max = int(per_item.max()) - (0 if reference else 1)
    # Every k, or a grid of them (as on curves with very many labels).
    ks = None if seed % 2 else np.unique(np.r_[0, rng.choice(k_max + 1, size=min(3, k_max + 1), replace=False)])
    kw = dict(combiner="abc", scorer="cross_entropy", k_max=k_max, prior=prior, clip=0.01, ks=ks)
    return pool, ref, lambda: ABCModel(uniq, mult), kw


def _abc_tables(pool, ref, model, kw, **constants):
    """``exact_tables`` with some of the ABC path's constants set, from an empty cache."""
    from auditor.stats.equivalence import exact, subcounts

    exact.clear_table_cache()
    with pytest.MonkeyPatch.context() as m:
        for name, value in constants.items():
            m.setattr(subcounts, name, value)
        tables = exact.exact_tables(pool, ref, model=model(), **kw)
    exact.clear_table_cache()
    return tables


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_distinct=st.integers(1, 40), n_blocks=st.integers(1, 4),
       n_labels=st.integers(1, 6))
def test_block_sums_add_as_add_at_to_the_last_bit(seed, n_distinct, n_blocks, n_labels):
    """The ABC's table sums, block after block: each block's terms of a sub-vector added up
    in the block's order, then added once to its row. The distinct-row ``+=`` that replaced
    ``np.add.at`` must give exactly what per-label ``np.add.at`` of the same block sums
    gives, with ids repeated within and across blocks."""
    from auditor.stats.equivalence import subcounts

    rng = np.random.default_rng(seed)
    sums = np.zeros((n_distinct, n_labels))
    expected = np.zeros((n_distinct, n_labels))
    first = np.empty(n_distinct, dtype=np.int64)
    for _ in range(n_blocks):
        n_p = int(rng.integers(1, 60))
        ids = rng.integers(0, n_distinct, n_p)
        rest = rng.integers(0, 9, (n_labels, n_p)).astype(np.int8)
        scaled = rng.random(n_p) * 10.0 ** rng.integers(-12, 3, n_p)
        subcounts._add_block_sums(sums, first, ids, rest, scaled)
        once = ids[np.sort(np.unique(ids, return_index=True)[1])]  # each id of the block once
        for lab in range(n_labels):
            block = np.zeros(n_distinct)
            for i in range(n_p):  # the block's order
                block[ids[i]] += rest[lab, i] * scaled[i]
            np.add.at(expected[:, lab], once, block[once])
    np.testing.assert_array_equal(sums, expected)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_labels=st.integers(2, 5), block=st.sampled_from([7, 40, 10_000]),
       reference=st.booleans())
def test_abc_size_ordered_sums_equal_the_sub_vector_table(seed, n_labels, block, reference):
    """The ABC's exact path sums T(y + e_l) from the enumerated pairs (by size, in blocks, two
    passes when a size spans several blocks); the table of sub-vectors of size |y| + 1 that
    it replaced must give the same expected scores, for every block size."""
    pool, ref, model, kw = _abc_case(seed, n_labels, reference)
    by_size = _abc_tables(pool, ref, model, kw, _ABC_BLOCK=block, _ABC_GROUP=3 * block)
    table = _abc_tables(pool, ref, model, kw, _abc_by_size_ok=lambda *a: False)
    np.testing.assert_allclose(by_size.expected, table.expected, rtol=1e-10, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_labels=st.integers(2, 5), block=st.sampled_from([7, 40, 10_000]),
       reference=st.booleans())
def test_abc_tables_do_not_depend_on_the_memory_held(seed, n_labels, block, reference):
    """The ABC's size-ordered path holds as many sizes of a group at once as its memory
    allows; the blocks, and so the order of every sum, are fixed by the groups alone. With
    room for one size at a time or for whole groups, the tables are the same to the last
    bit (so are they with the distinct-index += that replaced ``np.add.at``)."""
    pool, ref, model, kw = _abc_case(seed, n_labels, reference)
    fixed = dict(_ABC_BLOCK=block, _ABC_GROUP=3 * block)
    one_size = _abc_tables(pool, ref, model, kw, _ABC_MEMORY=1, **fixed)
    whole = _abc_tables(pool, ref, model, kw, _ABC_MEMORY=1 << 40, **fixed)
    np.testing.assert_array_equal(one_size.expected, whole.expected)
    np.testing.assert_array_equal(one_size.eligible, whole.eligible)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_labels=st.integers(2, 5), grid=st.booleans(),
       combiner=st.sampled_from(["plurality", "majority", "frequency"]),
       scorer=st.sampled_from(["agreement", "cross_entropy"]), clip=st.sampled_from([0.0, 0.01]))
def test_tables_computed_on_sorted_keys_equal_each_keys_own(seed, n_labels, grid, combiner, scorer, clip):
    """Every combiner but the ABC is symmetric in the labels when scored against a held-out
    label of the item's own, so the tables are computed once per sorted count vector and
    read back for each key; the frequency combiner's prediction from no labels (the
    overall label frequencies, not symmetric) is put back in column k = 0. Both must give
    what each key's own enumeration gives, with a lopsided prior."""
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(seed)
    n_items = int(rng.integers(5, 80))
    per_item = rng.integers(0, 10, n_items)
    skew = np.linspace(3.0, 0.2, n_labels)  # labels of very different frequencies
    pool = np.stack([rng.multinomial(n, rng.dirichlet(skew)) for n in per_item])
    pool[0] = np.sort(pool[0])[::-1]
    pool[1] = np.sort(pool[0])  # a permutation of another key, at least once
    k_max = max(int(pool.sum(axis=1).max()) - 1, 0)
    ks = np.unique(np.r_[0, rng.choice(k_max + 1, size=min(3, k_max + 1), replace=False)]) if grid else None
    prior = pool.sum(axis=0) / max(pool.sum(), 1)
    kw = dict(combiner=combiner, scorer=scorer, k_max=k_max, prior=prior, model=None, clip=clip, slots=None, ks=ks)
    exact.clear_table_cache()
    with np.errstate(invalid="ignore", divide="ignore"):
        tables = exact.exact_tables(pool, None, **kw)
        keys, mult, inverse = row_histogram(pool)
        own = exact._exact_tables(keys, mult, inverse, n_labels, True, **kw)
    exact.clear_table_cache()
    np.testing.assert_array_equal(tables.eligible, own.eligible)
    np.testing.assert_allclose(tables.expected, own.expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_labels", [2, 3])
def test_bootstrap_over_groups_of_permuted_keys_has_the_law_of_the_key_bootstrap(monkeypatch, n_labels):
    """Keys that are permutations of each other have the same rows of the tables, and the
    bootstrap draws them as one category: the point curve is the same, and the replicates
    have the law of drawing every key on its own (their means and spreads agree within
    the Monte Carlo error of 4,000 replicates)."""
    import dataclasses

    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(11)
    counts = rng.multinomial(8, rng.dirichlet(np.full(n_labels, 0.6), size=400))
    ratings = LabelCounts(counts, ("a", "b", "c")[:n_labels], tuple(range(400)))
    combiner = "majority" if n_labels == 2 else "plurality"
    exact.clear_table_cache()
    grouped = power_curve(ratings, combiner=combiner, scorer="agreement", n_bootstrap=4000, rng=3)
    real = exact.exact_tables

    def without_groups(*a, **kw):
        t = real(*a, **kw)
        assert t.groups is not None and t.groups.max() + 1 < t.keys.shape[0]  # some keys were merged
        return dataclasses.replace(t, groups=None)

    exact.clear_table_cache()
    monkeypatch.setattr("auditor.stats.equivalence.curve.exact_tables", without_groups)
    per_key = power_curve(ratings, combiner=combiner, scorer="agreement", n_bootstrap=4000, rng=3)
    exact.clear_table_cache()
    np.testing.assert_allclose(grouped.mean, per_key.mean, rtol=1e-12, atol=1e-12)
    sd = per_key.replicates.std(axis=0)
    ok = sd > 0
    # Means of 4,000 replicates: SE sd/√4000 each, the difference √2 times that (< 5 SE).
    assert np.all(np.abs(grouped.replicates.mean(axis=0) - per_key.replicates.mean(axis=0))[ok]
                  < 5 * np.sqrt(2 / 4000) * sd[ok])
    np.testing.assert_allclose(grouped.replicates.std(axis=0)[ok], sd[ok], rtol=0.1)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_labels=st.integers(1, 5), grid=st.booleans())
def test_plurality_table_equals_the_sum_over_every_sub_count_vector(seed, n_labels, grid):
    """The plurality-by-agreement table (computed on each key's sorted counts, its winners
    tracked while the sub-count vectors are built) is the definition summed term by term:
    Σ_y H(y; m, k) Σ_{l ∈ argmax y} (m_l − y_l) / ((n − k) |argmax y|)."""
    from itertools import product

    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(seed)
    n_items = int(rng.integers(1, 25))
    pool = np.stack([rng.multinomial(int(rng.integers(1, 9)), rng.dirichlet(np.full(n_labels, 0.6)))
                     for _ in range(n_items)])
    k_max = int(pool.sum(axis=1).max()) - 1
    ks = np.unique(np.r_[0, rng.choice(k_max + 1, size=min(3, k_max + 1), replace=False)]) if grid else None
    exact.clear_table_cache()
    t = exact.exact_tables(pool, None, combiner="plurality", scorer="agreement", k_max=k_max,
                           prior=np.full(n_labels, 1.0 / n_labels), model=None, clip=0.0, ks=ks)
    exact.clear_table_cache()
    ks = np.arange(k_max + 1) if ks is None else ks
    for m, row in zip(t.keys, t.expected, strict=True):
        n = int(m.sum())
        for j, k in enumerate(ks):
            want = 0.0
            if k <= n - 1:
                for y in product(*(range(c + 1) for c in m)):
                    y = np.array(y)
                    if y.sum() != k:
                        continue
                    h = np.prod([comb(int(a), int(b)) for a, b in zip(m, y, strict=True)]) / comb(n, int(k))
                    win = y == y.max()
                    want += h * (m - y)[win].sum() / ((n - k) * win.sum())
            assert row[j] == pytest.approx(want, rel=1e-12, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n_labels=st.integers(2, 5), per_item=st.integers(41, 120),
       capacity=st.sampled_from([50, 400, 3_000]))
def test_exact_blocks_hold_the_sub_count_vectors_they_are_sized_for(seed, n_labels, per_item, capacity):
    """On the k grid of long curves, the exact path's blocks of keys are sized by the number of
    sub-count vectors it will really enumerate (not a bound several times larger): each block
    holds at most the capacity (or one key), and could not take the next key."""
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(seed)
    u = rng.multinomial(per_item, rng.dirichlet(np.ones(n_labels)), size=30)
    top = u.sum(axis=1) - 1
    sizes = exact.k_grid(int(top.max()))
    lf = np.cumsum(np.log(np.maximum(np.arange(per_item + 2), 1)))
    pairs = exact._enumerate(u, top, sizes, lf, np.int64)
    per_key = np.bincount(pairs.owner, minlength=len(u))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exact, "_PAIRS_PER_BLOCK", capacity)
        blocks = exact._key_blocks(exact._pairs_per_key(u, True, k_max=int(top.max()), ks=sizes))
    assert np.array_equal(np.concatenate(blocks), np.arange(len(u)))
    for block, after in zip(blocks, [*blocks[1:], None], strict=True):
        held = per_key[block].sum()
        assert held <= capacity or len(block) == 1
        if after is not None:
            assert held + per_key[after[0]] > capacity


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n_labels=st.integers(2, 5), per_item=st.integers(3, 60),
       self_ref=st.booleans())
def test_exact_cost_counts_the_sub_count_vectors_enumerated(seed, n_labels, per_item, self_ref):
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(seed)
    u = rng.multinomial(per_item, rng.dirichlet(np.ones(n_labels)), size=12)
    u = u[u.sum(axis=1) > 1]
    k_max = int(u.sum(axis=1).max()) - (1 if self_ref else 0)
    top = np.minimum(u.sum(axis=1) - (1 if self_ref else 0), k_max)
    ks = exact.k_grid(k_max)
    sizes = None if len(ks) == k_max + 1 else ks
    lf = np.cumsum(np.log(np.maximum(np.arange(per_item + 2), 1)))
    enumerated = exact._enumerate(u, top, sizes, lf, np.int64).owner.shape[0]
    assert exact.exact_cost(u, self_ref, k_max=k_max, ks=ks) == enumerated


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n_labels=st.integers(1, 4))
def test_sub_vectors_per_size_on_ragged_items(seed, n_labels):
    # Items of 0 to 120 labels, each counted up to its own top (keys grouped by top):
    # the number of y ≤ u with |y| = k, for every k, as a direct count gives.
    import itertools

    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(seed)
    n = rng.choice([0, 1, 2, 5, 9, 30, 120], size=10)
    u = np.stack([rng.multinomial(m, rng.dirichlet(np.ones(n_labels))) for m in n])
    top = np.minimum(n - rng.integers(0, 3, size=10), rng.integers(0, 130))
    k_hi = int(max(top.max(), 0))
    got = exact._pairs_per_size(u, top, k_hi)
    expected = np.zeros((len(u), k_hi + 1))
    for i, row in enumerate(u):
        sizes = np.array([sum(y) for y in itertools.product(*(range(c + 1) for c in row))])
        sizes = sizes[sizes <= top[i]]
        expected[i] = np.bincount(sizes, minlength=k_hi + 1)[:k_hi + 1]
    np.testing.assert_array_equal(got, expected)


def test_a_power_curve_out_of_exact_reach_is_drawn_by_monte_carlo_and_the_abc_refused():
    """600 items × 100 labels over 10 classes (Dirichlet(0.5)): about 3·10¹⁰ sub-count
    vectors on the exact path. Plurality is drawn by Monte Carlo, with its standard error;
    the ABC (its model is those sums) says so at once instead of running for hours."""
    rng = np.random.default_rng(0)
    counts = rng.multinomial(100, rng.dirichlet(np.full(10, 0.5), size=600))
    lc = LabelCounts(counts, tuple(str(i) for i in range(10)), tuple(range(600)))
    curve = power_curve(lc, combiner="plurality", scorer="agreement", n_bootstrap=20, rng=0)
    assert curve.method == "monte_carlo" and curve.k_max == 99
    assert np.all(curve.mc_error[1:] > 0) and curve.mc_error.max() < 5e-3
    assert np.all(np.diff(curve.mean[1:]) > -4 * curve.mc_error[1:].max())  # agreement grows with k
    with pytest.raises(StatsInputError, match=r"would sum over .* sub-count vectors.*no Monte Carlo path"):
        power_curve(lc, combiner="abc", scorer="cross_entropy", n_bootstrap=20, rng=0)
    # A smaller max_k brings the ABC within reach, as the message says.
    small = power_curve(lc, combiner="abc", scorer="cross_entropy", n_bootstrap=20, rng=0, max_k=3)
    assert small.method == "exact" and small.k_max == 3


@pytest.mark.parametrize(("combiner", "scorer", "reference"), [
    ("plurality", "agreement", False), ("frequency", "cross_entropy", False), ("majority", "agreement", True),
    ("frequency", "cross_entropy", True)])
def test_monte_carlo_tables_cover_the_exact_curve_and_repeat_with_the_seed(combiner, scorer, reference,
                                                                            monkeypatch):
    """Forced onto the Monte Carlo path (the limit set to 0) on data where the exact sums run
    (items with as many labels each, or ragged): its mean ± 1.96·mc_error covers the exact c_k in about 95% of the (data set, k) cases, and
    the same seed gives the same numbers."""
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(7)
    n_labels = 2 if combiner == "majority" else 4
    z = []
    for rep in range(8):
        # Half the data sets ragged (5 to 24 labels per item: orderings padded).
        sizes = np.full(150, 24) if rep % 2 == 0 else rng.integers(5, 25, 150)
        p_items = rng.dirichlet(np.full(n_labels, 0.7), size=150)
        pool = np.stack([rng.multinomial(m, p) for m, p in zip(sizes, p_items, strict=True)])
        ref = rng.multinomial(3, rng.dirichlet(np.full(n_labels, 0.7)), size=150) if reference else None
        names = tuple("abcd"[:n_labels])
        lc = LabelCounts(pool, names, tuple(range(150)))
        ref_lc = None if ref is None else LabelCounts(ref, names, tuple(range(150)))
        exact.clear_table_cache()
        ex = power_curve(lc, combiner=combiner, scorer=scorer, reference=ref_lc, n_bootstrap=0, rng=rep)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(exact, "MAX_SUB_COUNTS", 0)
            mp.setattr(exact, "_MC_CELLS_TOTAL", 1_000_000)  # fewer draws: seconds, the same law
            exact.clear_table_cache()  # (the exact tables just computed are kept for reuse)
            mc = power_curve(lc, combiner=combiner, scorer=scorer, reference=ref_lc, n_bootstrap=0, rng=rep)
            again = power_curve(lc, combiner=combiner, scorer=scorer, reference=ref_lc, n_bootstrap=0, rng=rep)
        assert ex.method == "exact" and mc.method == "monte_carlo"
        np.testing.assert_array_equal(mc.mean, again.mean)
        np.testing.assert_array_equal(mc.mc_error, again.mc_error)
        drawn = mc.mc_error > 0
        assert drawn[1:].any()
        # An error of 0 (k = 0; every draw the same, as where only one subset or outcome exists)
        # is honest: the value is then the exact one.
        np.testing.assert_allclose(mc.mean[~drawn], ex.mean[~drawn], rtol=0, atol=1e-12)
        z.append((mc.mean[drawn] - ex.mean[drawn]) / mc.mc_error[drawn])
    z = np.concatenate(z)
    assert len(z) >= 100
    assert np.mean(np.abs(z) < 1.96) >= 0.88, np.mean(np.abs(z) < 1.96)
    assert np.std(z) < 1.3  # not understated (k of one data set share their draws: the spread varies)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n_k=st.integers(3, 30), grid=st.booleans(), frac=st.floats(0.02, 0.98),
       flat=st.booleans())
def test_the_equivalence_error_spans_the_curves_within_the_points_errors(seed, n_k, grid, frac, flat):
    """equivalence_mc_error: ± 1.96 of it spans the equivalences of curves whose points move
    within 1.96 of their errors (checked on random such curves); for small errors it is the
    first-order bound |∂v/∂c_{i−1}| σ_{i−1} + |∂v/∂c_i| σ_i (derivatives by finite
    differences); 0 outside the curve or where the points it depends on are exact."""
    from auditor.stats.equivalence.curve import equivalence_mc_error

    rng = np.random.default_rng(seed)
    steps = rng.uniform(0.01, 1.0, n_k)
    if flat:  # a stretch of nearly equal points, as plurality's c_1 = c_2
        steps[n_k // 3: n_k // 3 + 3] = 1e-4
    curve = np.cumsum(steps)
    k = np.cumsum(rng.integers(1, 5, n_k)) if grid else None
    score = curve[0] + frac * (curve[-1] - curve[0])
    v = equivalence_values(curve[None, :], np.array([score]), k)[0]
    errors = rng.uniform(0.0, 0.01, n_k)
    err = equivalence_mc_error(curve, score, errors, k)
    moved = curve + 1.959963984540054 * errors * rng.uniform(-1.0, 1.0, (200, n_k))
    others = equivalence_values(moved, np.full(200, score), k)
    assert np.all(np.abs(others - v) <= 1.959963984540054 * err * (1 + 1e-9) + 1e-12)
    # Small errors: the first-order bound on the interpolated crossing.
    i = int(np.argmax(curve[1:] > score)) + 1
    gap = curve[i] - curve[i - 1]
    tiny = errors * 1e-3 * gap   # moves of at most 2e-5 of the bracketing gap
    h = 1e-6 * gap
    bound = 0.0
    for j in (i - 1, i):
        bumped = curve.copy()
        bumped[j] += h
        derivative = (equivalence_values(bumped[None, :], np.array([score]), k)[0] - v) / h
        bound += abs(derivative) * tiny[j]
    if not np.any(np.abs(curve - score) <= 1e-9 * gap):
        # v is not differentiable where the score meets a point of the curve (a kink: the
        # error there adds both sides' slopes, an upper bound on either one-sided bound)
        assert equivalence_mc_error(curve, score, tiny, k) == pytest.approx(bound, rel=1e-3, abs=1e-15)
    else:
        assert equivalence_mc_error(curve, score, tiny, k) >= bound * (1 - 1e-3)
    assert equivalence_mc_error(curve, score, np.zeros(n_k), k) == 0.0
    assert equivalence_mc_error(curve, curve[0] - 1.0, errors, k) == 0.0   # "< 0"
    assert equivalence_mc_error(curve, curve[-1] + 1.0, errors, k) == 0.0  # "> K"


def test_expert_equivalence_beyond_exact_reach_is_drawn_and_covered_by_its_error():
    """Expert equivalence where the exact sums are out of reach (the limit set to 0 on data
    where they run): both curves are drawn by Monte Carlo, each value ± 1.96 of its
    mc_error (from both curves' point errors) covers the exact path's value in about 95% of
    the cases, to_dict carries the errors, and the same seed gives the same numbers."""
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(5)
    z, n_drawn = [], 0
    for rep in range(10):
        p = rng.dirichlet(np.full(3, 0.5), size=200)
        # A noisy vendor and sharp experts: k vendor raters are worth fewer experts.
        pool = LabelCounts(rng.multinomial(12, 0.4 * p + 0.2), ("a", "b", "c"), tuple(range(200)))
        expert = LabelCounts(rng.multinomial(8, p), ("a", "b", "c"), tuple(range(200)))
        exact.clear_table_cache()
        ex = expert_equivalence(pool, expert, combiner="plurality", scorer="agreement", n_bootstrap=0, rng=rep)
        assert ex.pool_curve.method == ex.expert_curve.method == "exact" and not any(ex.mc_error)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(exact, "MAX_SUB_COUNTS", 0)
            mp.setattr(exact, "_MC_CELLS_TOTAL", 1_000_000)  # fewer draws: seconds, the same law
            exact.clear_table_cache()
            mc = expert_equivalence(pool, expert, combiner="plurality", scorer="agreement", n_bootstrap=20,
                                    rng=rep)
            exact.clear_table_cache()
            again = expert_equivalence(pool, expert, combiner="plurality", scorer="agreement", n_bootstrap=20,
                                       rng=rep)
        exact.clear_table_cache()
        assert mc.pool_curve.method == mc.expert_curve.method == "monte_carlo"
        assert mc.value == again.value and mc.mc_error == again.mc_error and mc.ci_low == again.ci_low
        assert mc.to_dict()["mc_error"] == [e if np.isfinite(e) else None for e in mc.mc_error]
        for e, m, err in zip(ex.value, mc.value, mc.mc_error, strict=True):
            if isinstance(e, str) or isinstance(m, str):
                continue
            n_drawn += err > 0
            z.append((m - e) / err if err > 0 else (0.0 if abs(m - e) < 1e-12 else np.inf))
    z = np.array(z)
    assert n_drawn >= 40
    assert np.mean(np.abs(z) <= 1.96) >= 0.88, np.mean(np.abs(z) <= 1.96)


def test_equivalences_read_off_monte_carlo_curves_are_covered_by_their_error(monkeypatch):
    """Forced onto the Monte Carlo path on data where the exact sums run: the equivalence read
    off the drawn curve, ± 1.96 of its mc_error, covers the one read off the exact curve for
    about 95% of scores spread over the curve; survey_equivalence reports that error (and
    to_dict carries it), and the exact path reports 0."""
    from auditor.stats.equivalence import exact
    from auditor.stats.equivalence.curve import equivalence_mc_error

    rng = np.random.default_rng(11)
    z = []
    for rep in range(8):
        p = rng.dirichlet(np.full(4, 0.7 if rep % 2 else 0.2), size=150)
        lc = LabelCounts(rng.multinomial(24, p), tuple("abcd"), tuple(range(150)))
        for combiner, scorer in (("plurality", "agreement"), ("frequency", "cross_entropy")):
            exact.clear_table_cache()
            ex = power_curve(lc, combiner=combiner, scorer=scorer, n_bootstrap=0)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(exact, "MAX_SUB_COUNTS", 0)
                mp.setattr(exact, "_MC_CELLS_TOTAL", 1_000_000)  # fewer draws: seconds, the same law
                exact.clear_table_cache()
                mc = power_curve(lc, combiner=combiner, scorer=scorer, n_bootstrap=0, rng=rep)
                if rep == 0:
                    pred = p.argmax(axis=1) if scorer == "agreement" else 0.5 * p + 0.125
                    eq = survey_equivalence(lc, pred, combiner=combiner, scorer=scorer, n_bootstrap=0, rng=rep)
                    assert eq.curve.method == "monte_carlo"
                    assert eq.mc_error == equivalence_mc_error(eq.curve.mean, eq.classifier_score.value,
                                                               eq.curve.mc_error, eq.curve.k)
                    assert eq.to_dict()["mc_error"] == eq.mc_error
                    assert isinstance(eq.value, str) or eq.mc_error > 0
            for score in rng.uniform(ex.mean[1], ex.mean.max(), size=6):
                e = equivalence_values(ex.mean[None, :], np.array([score]), ex.k)[0]
                m = equivalence_values(mc.mean[None, :], np.array([score]), mc.k)[0]
                if not (np.isfinite(e) or np.isfinite(m)):
                    continue
                assert np.isfinite(e) and np.isfinite(m)
                err = equivalence_mc_error(mc.mean, score, mc.mc_error, mc.k)
                z.append((m - e) / err if err > 0 else (0.0 if abs(m - e) < 1e-12 else np.inf))
    exact.clear_table_cache()
    p = rng.dirichlet(np.full(4, 0.7), size=60)
    lc = LabelCounts(rng.multinomial(8, p), tuple("abcd"), tuple(range(60)))
    assert survey_equivalence(lc, p.argmax(axis=1), combiner="plurality", scorer="agreement",
                              n_bootstrap=0).mc_error == 0.0
    z = np.array(z)
    assert len(z) >= 60
    assert np.mean(np.abs(z) < 1.96) >= 0.88, np.mean(np.abs(z) < 1.96)
    assert np.std(z) < 1.3


def test_an_equivalence_whose_crossing_could_leave_the_curve_has_an_undetermined_error():
    """Scores just under the curve's last point, with errors larger than the gap: lowered by
    1.96 of their errors no point exceeds the score, so the error is inf (None in JSON)."""
    from auditor.stats.equivalence.curve import SurveyEquivalence, equivalence_mc_error

    curve = np.array([0.5, 0.6, 0.62, 0.63])
    errors = np.array([0.0, 0.01, 0.01, 0.01])
    assert equivalence_mc_error(curve, 0.625, errors) == np.inf
    assert np.isfinite(equivalence_mc_error(curve, 0.55, errors))
    # Hostile inputs: no number to read, or an error that is itself unknown.
    assert equivalence_mc_error(curve[:1], 0.55, errors[:1]) == 0.0
    assert equivalence_mc_error(curve, float("nan"), errors) == 0.0
    assert equivalence_mc_error(curve, 0.55, np.array([0.0, np.nan, 0.01, 0.01])) == np.inf
    import dataclasses
    import json

    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(3), size=40)
    lc = LabelCounts(rng.multinomial(6, p), tuple("abc"), tuple(range(40)))
    eq = survey_equivalence(lc, p.argmax(axis=1), combiner="plurality", scorer="agreement", n_bootstrap=0)
    undetermined = dataclasses.replace(eq, mc_error=np.inf)
    assert isinstance(undetermined, SurveyEquivalence)
    assert undetermined.to_dict()["mc_error"] is None
    json.dumps(undetermined.to_dict()["mc_error"], allow_nan=False)
    assert eq.to_dict()["mc_error"] == 0.0
