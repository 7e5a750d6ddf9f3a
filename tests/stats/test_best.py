"""BEST performance (Lourie, Le Bras & Choi): published values, exact formulas against
Monte Carlo of the same posterior, the fit against a brute-force optimiser, limits."""

from __future__ import annotations

import doctest
import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special
from sklearn.metrics import f1_score

import auditor.stats.best as best_package
import auditor.stats.best.f1 as f1_module
import auditor.stats.best.fit as fit_module
import auditor.stats.best.quadrature as quadrature_module
import auditor.stats.best.scores as scores_module
from auditor.stats import (
    BEST_METRICS,
    BestPerformanceWarning,
    StatsInputError,
    best_performance,
    fit_dirichlet_multinomial,
)

ACC, BAL, F1, XENT = BEST_METRICS


def quiet(counts, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BestPerformanceWarning)
        return best_performance(counts, **kw)


# ------------------------------------------------------------- published values


@pytest.mark.parametrize(("counts", "accuracy", "f1"), [
    # The Scoracle API documentation's two examples (Monte Carlo, 10,000 draws).
    ([[1, 3], [4, 0]], 0.8878, 0.8485666666666668),
    ([[3, 2], [0, 5]], 0.7626, 0.6836),
])
def test_documented_examples(counts, accuracy, f1):
    res = best_performance(counts, metrics=["accuracy", "f1 (macro)"], rng=0)
    assert res.scores["accuracy"] == pytest.approx(accuracy, abs=0.005)
    assert res.scores["f1 (macro)"] == pytest.approx(f1, abs=0.005)
    assert res.standard_errors["accuracy"] == 0.0
    assert res.standard_errors["f1 (macro)"] == 0.0


def test_documented_example_fit_matches_the_reference_optimum():
    # α̂ of allenai/scruples' estimate_dirichlet_multinomial_parameters (L-BFGS-B) on
    # the documented examples: [0.76750624, 0.37713715] and [0.49324447, 1.3198332].
    np.testing.assert_allclose(fit_dirichlet_multinomial([[1, 3], [4, 0]]).alpha,
                               [0.76750624, 0.37713715], rtol=2e-5)
    np.testing.assert_allclose(fit_dirichlet_multinomial([[3, 2], [0, 5]]).alpha,
                               [0.49324447, 1.3198332], rtol=2e-5)


def test_exact_metrics_identical_across_runs_and_seeds():
    rng = np.random.default_rng(7)
    counts = rng.multinomial(5, rng.dirichlet([0.3, 0.2, 0.25], size=500))
    runs = [best_performance(counts, rng=seed) for seed in (0, 1, 12345, None)]
    for res in runs:
        assert res.methods[ACC].startswith("exact")
        assert res.methods[F1].startswith("exact")
        for name in BEST_METRICS:
            assert res.scores[name] == runs[0].scores[name]
            assert res.standard_errors[name] == 0.0


def test_docstring_examples():
    results = [doctest.testmod(m, optionflags=doctest.ELLIPSIS)
               for m in (best_package, fit_module, quadrature_module, f1_module, scores_module)]
    assert sum(r.attempted for r in results) >= 3 and sum(r.failed for r in results) == 0


# ------------------------------------------- exact formulas vs Monte Carlo draws


def _dataset(seed, n_items, n_classes, n_min, n_max):
    rng = np.random.default_rng(seed)
    alpha = rng.uniform(0.2, 2.0, n_classes)
    p = rng.dirichlet(alpha, size=n_items)
    n = rng.integers(n_min, n_max + 1, n_items)
    return np.stack([rng.multinomial(k, row) for k, row in zip(n, p, strict=True)])


SHAPES = [  # (seed, items, classes, min and max annotators per item)
    (1, 60, 2, 1, 100),
    (2, 200, 3, 5, 5),
    (3, 150, 4, 1, 3),
    (4, 80, 6, 2, 20),
    (5, 60, 10, 3, 40),
]


def _posterior_draws(alpha, counts, n_draws, rng):
    """Monte Carlo of the oracle's scores: p_i ~ Dirichlet(α̂ + Y_i), as the reference."""
    beta = alpha[None, :] + counts
    gold = counts.argmax(axis=1)
    q = counts / counts.sum(axis=1, keepdims=True)
    k = counts.shape[1]
    m = np.bincount(gold, minlength=k)
    out = {name: [] for name in BEST_METRICS}
    for _ in range(n_draws // 1000):
        g = rng.gamma(beta, size=(1000, *beta.shape))
        p = g / g.sum(axis=2, keepdims=True)
        pred = p.argmax(axis=2)
        hit = pred == gold[None, :]
        out[ACC].append(hit.mean(axis=1))
        recall = np.stack([hit[:, gold == c].mean(axis=1) for c in np.flatnonzero(m)], axis=1)
        out[BAL].append(recall.mean(axis=1))
        # scikit-learn's macro F1: classes in gold ∪ predicted, F1_c = 2TP/(m_c + k_c)
        k_pred = np.stack([(pred == c).sum(axis=1) for c in range(k)], axis=1)
        tp = np.stack([(hit & (gold == c)[None, :]).sum(axis=1) for c in range(k)], axis=1)
        present = (m[None, :] > 0) | (k_pred > 0)
        f1 = np.where(present, 2 * tp / np.maximum(m[None, :] + k_pred, 1), 0.0)
        out[F1].append(f1.sum(axis=1) / present.sum(axis=1))
        with np.errstate(divide="ignore", invalid="ignore"):
            out[XENT].append(np.mean(-np.sum(np.where(q > 0, q * np.log(p), 0.0), axis=2), axis=1))
    return {name: np.concatenate(v) for name, v in out.items()}


@pytest.mark.parametrize(("seed", "n_items", "n_classes", "n_min", "n_max"), SHAPES)
def test_exact_scores_match_a_large_monte_carlo_of_the_posterior(seed, n_items, n_classes, n_min,
                                                                 n_max):
    counts = _dataset(seed, n_items, n_classes, n_min, n_max)
    res = quiet(counts, rng=seed)
    assert res.fit.regime == "finite"
    draws = _posterior_draws(res.alpha, counts, 20_000, np.random.default_rng(100 + seed))
    for name in BEST_METRICS:
        mc = draws[name]
        se = mc.std() / np.sqrt(len(mc))
        assert abs(res.scores[name] - mc.mean()) <= 5 * se + 5 * res.standard_errors[name], name


@pytest.mark.parametrize(("seed", "n_items", "n_classes", "n_min", "n_max"), SHAPES)
def test_argmax_probabilities_match_posterior_frequencies(seed, n_items, n_classes, n_min, n_max):
    counts = _dataset(seed, n_items, n_classes, n_min, n_max)[:25]
    alpha = fit_dirichlet_multinomial(_dataset(seed, n_items, n_classes, n_min, n_max)).alpha
    beta = alpha[None, :] + counts
    probs = quadrature_module._argmax_probabilities(beta)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    rng = np.random.default_rng(seed)
    n_draws = 100_000
    for b, p in zip(beta, probs, strict=True):
        freq = np.bincount(rng.gamma(b, size=(n_draws, len(b))).argmax(axis=1),
                           minlength=len(b)) / n_draws
        tol = 5 * np.sqrt(np.maximum(p * (1 - p), 1e-12) / n_draws) + 1e-12
        assert np.all(np.abs(freq - p) <= tol)


def test_two_class_argmax_probability_is_a_beta_tail():
    # P(p_0 > 1/2) for p_0 ~ Beta(a, b); by symmetry 1/2 when a = b.
    probs = quadrature_module._argmax_probabilities(np.array([[2.5, 2.5], [3.0, 1.0], [0.0, 4.0]]))
    np.testing.assert_allclose(probs[0], [0.5, 0.5], atol=1e-15)
    # Beta(3, 1): P(X > 1/2) = 1 − (1/2)^3 = 7/8
    np.testing.assert_allclose(probs[1], [7 / 8, 1 / 8], atol=1e-15)
    np.testing.assert_array_equal(probs[2], [0.0, 1.0])


def test_symmetric_classes_split_the_argmax_evenly():
    for k in (3, 5, 10):
        for b in (0.05, 1.0, 40.0, 3000.0):
            probs = quadrature_module._argmax_probabilities(np.full((1, k), b))
            np.testing.assert_allclose(probs[0], 1.0 / k, atol=1e-11)


def test_cross_entropy_is_the_digamma_expectation():
    # E[-ln p_j] for p ~ Dirichlet(β) is ψ(B) − ψ(β_j), item by item.
    counts = np.array([[3, 0, 0], [0, 2, 1], [0, 0, 4], [1, 1, 0], [2, 0, 2], [1, 1, 1]])
    res = quiet(counts, metrics=[XENT])
    assert res.fit.regime == "finite"
    terms = []
    for y in counts:
        beta = res.alpha + y
        terms.append(sum(y[j] / y.sum() * (special.digamma(beta.sum()) - special.digamma(beta[j]))
                         for j in range(3) if y[j]))
    assert res.scores[XENT] == pytest.approx(np.mean(terms), rel=1e-13)


# ------------------------------------------------------------------ F1 (macro)


def _enumerated_f1(counts, probs):
    """E[macro F1] by enumerating every joint prediction (scikit-learn's definition)."""
    gold = counts.argmax(axis=1)
    n, k = probs.shape
    preds = np.indices((k,) * n).reshape(n, -1).T          # every joint prediction
    weight = np.prod(probs[np.arange(n), preds], axis=1)
    m = np.bincount(gold, minlength=k)
    k_pred = np.stack([(preds == c).sum(axis=1) for c in range(k)], axis=1)
    tp = np.stack([((preds == c) & (gold == c)).sum(axis=1) for c in range(k)], axis=1)
    present = (m > 0) | (k_pred > 0)
    f1 = np.where(present, 2 * tp / np.maximum(m + k_pred, 1), 0.0).sum(axis=1) / present.sum(axis=1)
    # the vectorised F1 is scikit-learn's, checked on a sample of the predictions
    for row in np.random.default_rng(0).choice(len(preds), size=min(40, len(preds)), replace=False):
        assert f1[row] == pytest.approx(
            f1_score(gold, preds[row], average="macro", zero_division=0), abs=1e-15)
    return float(weight @ f1)


@pytest.mark.parametrize("counts", [
    [[1, 3], [4, 0]],
    [[3, 2], [0, 5]],
    [[2, 1, 0], [0, 3, 1], [1, 1, 2], [4, 0, 0], [0, 2, 2]],
    [[4, 0, 1, 1], [0, 4, 1, 1], [5, 0, 0, 1], [0, 3, 2, 1], [3, 0, 1, 2]],  # 2, 3 never gold
])
def test_f1_convolution_equals_enumeration_with_sklearn(counts):
    counts = np.array(counts)
    res = quiet(counts, rng=0)
    assert res.fit.regime == "finite"
    probs = quadrature_module._argmax_probabilities(res.alpha[None, :] + counts)
    assert res.methods[F1].startswith("exact (Poisson-binomial convolution")
    assert res.scores[F1] == pytest.approx(_enumerated_f1(counts, probs), abs=1e-12)


NEVER_GOLD = np.array([[4, 0, 1], [0, 4, 1], [5, 0, 0], [0, 3, 2], [1, 4, 0], [3, 1, 2]])


def test_f1_with_a_never_gold_class_is_exact_by_inclusion_exclusion():
    # Class 2 is used but is nobody's plurality: scikit-learn's macro average counts it
    # (with F1 0) in the draws where the oracle predicts it, so the label set is random.
    res = best_performance(NEVER_GOLD, rng=3)
    probs = quadrature_module._argmax_probabilities(res.alpha[None, :] + NEVER_GOLD)
    assert probs[:, 2].max() > 0.01
    assert "inclusion-exclusion" in res.methods[F1] and res.standard_errors[F1] == 0.0
    assert res.scores[F1] == pytest.approx(_enumerated_f1(NEVER_GOLD, probs), abs=1e-12)


def test_f1_monte_carlo_correction_is_seeded_and_unbiased(monkeypatch):
    # Beyond a few never-gold classes the correction is estimated by Monte Carlo.
    monkeypatch.setattr(f1_module, "_MAX_EXACT_NEVER_GOLD", 0)
    a = best_performance(NEVER_GOLD, rng=3, f1_standard_error=1e-3)
    b = best_performance(NEVER_GOLD, rng=3, f1_standard_error=1e-3)
    assert a.scores[F1] == b.scores[F1]
    assert "Monte Carlo" in a.methods[F1]
    assert 0 < a.standard_errors[F1] <= 1e-3
    probs = quadrature_module._argmax_probabilities(a.alpha[None, :] + NEVER_GOLD)
    assert abs(a.scores[F1] - _enumerated_f1(NEVER_GOLD, probs)) <= 5 * a.standard_errors[F1]


def test_f1_monte_carlo_reaches_the_default_precision(monkeypatch):
    counts = _dataset(11, 300, 4, 2, 6)
    counts[:, 3] = np.minimum(counts[:, 3], 1)  # class 3 used, never the plurality
    counts[counts.sum(axis=1) == counts[:, 3]] += np.array([1, 0, 0, 0])
    exact = quiet(counts, rng=0)
    assert "inclusion-exclusion" in exact.methods[F1]
    monkeypatch.setattr(f1_module, "_MAX_EXACT_NEVER_GOLD", 0)
    res = quiet(counts, rng=0)
    assert "Monte Carlo" in res.methods[F1]
    assert res.standard_errors[F1] <= 1e-4
    assert abs(res.scores[F1] - exact.scores[F1]) <= 5 * res.standard_errors[F1]


def test_poisson_binomial_matches_direct_convolution():
    w = np.array([3.0, 1.0, 7.0, 1.0, 2.0])
    p = np.array([0.2, 0.9, 0.5, 1.0, 0.0])
    offset, pmf = f1_module._poisson_binomial(w, p)
    direct = np.ones(1)
    for wr, pr in zip(w, p, strict=True):
        direct = np.convolve(direct, [special.comb(wr, j) * pr**j * (1 - pr) ** (wr - j)
                                      for j in range(int(wr) + 1)])
    full = np.zeros(len(direct))
    full[offset:offset + len(pmf)] = pmf
    np.testing.assert_allclose(full, direct, atol=1e-15)


# ------------------------------------------------------------------------ the fit


def _brute_log_likelihood(alpha, counts):
    a_sum = alpha.sum()
    n = counts.sum(axis=1)
    return float(np.sum(special.gammaln(a_sum) - special.gammaln(a_sum + n)
                        + np.sum(special.gammaln(counts + alpha) - special.gammaln(alpha), axis=1)))


@pytest.mark.parametrize(("seed", "n_items", "n_classes", "n_min", "n_max"), SHAPES)
def test_fit_agrees_with_a_brute_force_optimiser(seed, n_items, n_classes, n_min, n_max):
    counts = _dataset(seed, n_items, n_classes, n_min, n_max)
    fit = fit_dirichlet_multinomial(counts)
    assert fit.regime == "finite" and fit.converged
    assert fit.log_likelihood == pytest.approx(_brute_log_likelihood(fit.alpha, counts), rel=1e-12)
    best = None
    for start in (np.zeros(n_classes), np.full(n_classes, 1.0), np.full(n_classes, -1.0)):
        res = optimize.minimize(lambda th: -_brute_log_likelihood(np.exp(th), counts), start,
                                method="Nelder-Mead",
                                options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 200_000,
                                         "maxfev": 200_000, "adaptive": True})
        if best is None or res.fun < best.fun:
            best = res
    assert fit.log_likelihood >= -best.fun - 1e-9 * abs(best.fun)
    np.testing.assert_allclose(fit.alpha, np.exp(best.x), rtol=2e-3)


def test_gradient_and_hessian_are_analytic_derivatives():
    counts = _dataset(3, 150, 4, 1, 3)
    for rising_max in (fit_module._RISING_FORM_MAX_COUNT, 0):  # both summation forms
        rows, w, _ = fit_module._histogram(counts)
        original = fit_module._RISING_FORM_MAX_COUNT
        fit_module._RISING_FORM_MAX_COUNT = rising_max
        try:
            obj = fit_module._Objective(rows, w)
        finally:
            fit_module._RISING_FORM_MAX_COUNT = original
        theta = np.log([0.7, 1.3, 0.4, 2.0])
        assert obj.theta_value(theta) == pytest.approx(-_brute_log_likelihood(np.exp(theta), counts),
                                                      rel=1e-12)
        num_grad = optimize.approx_fprime(theta, obj.theta_value, 1e-6)
        np.testing.assert_allclose(obj.theta_grad(theta), num_grad, rtol=1e-5, atol=1e-5)
        num_hess = np.stack([optimize.approx_fprime(theta, lambda t, i=i, obj=obj: obj.theta_grad(t)[i], 1e-6)
                             for i in range(4)])
        np.testing.assert_allclose(obj.theta_hess(theta), num_hess, rtol=1e-5, atol=1e-4)


# ------------------------------------------------------------- degenerate data


def test_under_dispersed_data_use_the_infinite_limit():
    counts = np.array([[2, 3], [3, 2], [2, 3], [2, 3]])  # tighter than a binomial
    with pytest.warns(BestPerformanceWarning, match="α → ∞"):
        res = best_performance(counts)
    fit = res.fit
    assert fit.regime == "infinite" and fit.dispersion < 0
    assert np.all(np.isinf(res.alpha))
    np.testing.assert_allclose(fit.prior_mean, [9 / 20, 11 / 20])
    # Along α = s π̂ the likelihood rises towards its multinomial limit.
    lls = [_brute_log_likelihood(s * fit.prior_mean, counts) for s in (1, 10, 100, 1e4)]
    assert np.all(np.diff(lls) > 0) and lls[-1] < fit.log_likelihood
    # Every posterior is the point mass at π̂: the oracle always predicts class 1.
    gold = np.array([1, 0, 1, 1])
    assert res.scores[ACC] == pytest.approx(0.75)
    assert res.scores[BAL] == pytest.approx(0.5)
    assert res.scores[F1] == pytest.approx((0 + 6 / 7) / 2)
    q = counts / 5
    assert res.scores[XENT] == pytest.approx(np.mean(-(q @ np.log(fit.prior_mean))))
    assert gold.tolist() == counts.argmax(axis=1).tolist()
    # ... which is where the exact finite-α formulas tend as α grows.
    probs = quadrature_module._argmax_probabilities(1e9 * fit.prior_mean + counts)
    assert probs[:, 1].min() > 1 - 1e-6


def test_single_item_with_split_labels():
    with pytest.warns(BestPerformanceWarning) as record:
        res = best_performance([[1, 3]])
    messages = [str(w.message) for w in record]
    assert any("single item" in m for m in messages) and any("α → ∞" in m for m in messages)
    assert res.fit.regime == "infinite"
    assert res.scores[ACC] == 1.0 and res.scores[F1] == 1.0
    # a tie in π̂: the limit of the posterior argmax splits evenly
    res = quiet([[2, 2]])
    assert res.scores[ACC] == pytest.approx(0.5)


def test_unanimous_items_use_the_zero_limit():
    with pytest.warns(BestPerformanceWarning, match="unanimous"):
        res = best_performance([[3, 0], [0, 2], [4, 0]])
    assert res.fit.regime == "zero"
    np.testing.assert_array_equal(res.alpha, [0.0, 0.0])
    np.testing.assert_allclose(res.fit.prior_mean, [2 / 3, 1 / 3])
    assert res.scores == {ACC: 1.0, BAL: 1.0, F1: 1.0, XENT: 0.0}


def test_single_annotations_say_the_dispersion_is_not_identified():
    with pytest.warns(BestPerformanceWarning, match="not identified"):
        res = best_performance([[1, 0], [0, 1], [1, 0]])
    assert res.fit.regime == "zero" and res.scores[ACC] == 1.0


def test_unused_class_gets_zero_alpha_and_changes_nothing():
    two = np.array([[1, 3], [4, 0], [2, 2], [0, 5], [3, 1]])
    three = np.column_stack([two, np.zeros(len(two), dtype=int)])
    with pytest.warns(BestPerformanceWarning, match="never used"):
        res3 = best_performance(three, rng=0)
    res2 = best_performance(two, rng=0)
    assert res3.alpha[2] == 0.0 and res3.fit.unused_classes == (2,)
    np.testing.assert_allclose(res3.alpha[:2], res2.alpha, rtol=1e-9)
    for name in BEST_METRICS:
        assert res3.scores[name] == pytest.approx(res2.scores[name], abs=1e-12)


def test_items_without_annotations_are_excluded_and_reported():
    base = np.array([[1, 3], [4, 0], [2, 2], [0, 5]])
    padded = np.insert(base, [1, 3], [[0, 0], [0, 0]], axis=0)
    with pytest.warns(BestPerformanceWarning, match="no annotation excluded"):
        res = best_performance(padded, rng=0)
    assert res.fit.excluded_items == (1, 4)
    assert res.n_items == 4
    assert dict(res.scores) == dict(best_performance(base, rng=0).scores)


# ------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("counts", "match"), [
    ([[1.5, 2]], "whole counts"),
    ([[-1, 2]], "non-negative"),
    ([[True, False]], "booleans"),
    ([[1, 2], [3]], "ragged"),
    ([], "empty|two-dimensional"),
    ([[0, 0], [0, 0]], "no annotation"),
    ([["a", 1]], "numbers"),
])
def test_bad_counts_are_refused_with_the_argument_named(counts, match):
    with pytest.raises(StatsInputError, match=match) as err:
        best_performance(counts)
    assert "label_counts" in str(err.value)


def test_bad_options_are_refused():
    with pytest.raises(StatsInputError, match=r"metrics\[1\].*'precision'"):
        best_performance([[1, 2]], metrics=["accuracy", "precision"])
    with pytest.raises(StatsInputError, match="f1_standard_error"):
        best_performance([[1, 2]], f1_standard_error=0)
    with pytest.raises(StatsInputError, match="max_f1_draws"):
        best_performance([[1, 2]], max_f1_draws=10)
    with pytest.raises(StatsInputError, match="rng"):
        best_performance([[1, 2]], rng="seed")


# ------------------------------------------------------------------- invariants


count_matrices = st.integers(2, 5).flatmap(lambda k: st.lists(
    st.lists(st.integers(0, 6), min_size=k, max_size=k), min_size=1, max_size=12))


@settings(max_examples=40, deadline=None)
@given(count_matrices)
def test_scores_are_in_range_and_invariant_to_item_order_and_duplication(rows):
    counts = np.array(rows)
    if counts.sum() == 0:
        return
    res = quiet(counts, rng=0, f1_standard_error=1e-2)
    for name in (ACC, BAL, F1):
        assert -1e-12 <= res.scores[name] <= 1 + 1e-12
    assert res.scores[XENT] >= -1e-12
    shuffled = quiet(counts[::-1], rng=0, f1_standard_error=1e-2)
    doubled = quiet(np.concatenate([counts, counts]), rng=0, f1_standard_error=1e-2)
    for name in (ACC, BAL, XENT):  # the fit and the per-item terms are unchanged
        assert shuffled.scores[name] == res.scores[name]
        assert doubled.scores[name] == pytest.approx(res.scores[name], rel=1e-6, abs=1e-9)


# --------------------------------------------------- the Scoracle demo's presets

# Reference implementation (allenai/scruples src/scruples/utils.py, run as the demo
# runs it: numpy seeded with 0 before each metric, 625 posterior draws each):
# α̂, then (score, Monte Carlo standard error) per metric.
REFERENCE_PRESETS = {
    "dev.snli_label-counts.json": (
        [0.1759004893113619, 0.18955514743956967, 0.1562524466021025],
        {ACC: (0.9213212800000001, 9.003589650000714e-05),
         BAL: (0.9214046050607343, 9.007666405021985e-05),
         F1: (0.92134818915576, 9.00526286390048e-05),
         XENT: (0.3726597285371403, 5.768173523271209e-05)}),
    "dev.scruples-dilemmas_label-counts.json": (
        [0.9779560752705188, 0.9487473919157059],
        {ACC: (0.848319316239316, 0.0002653741876421383),
         BAL: (0.848270360783459, 0.00026591652308617577),
         F1: (0.8481659880349889, 0.00026566741716112496),
         XENT: (0.4940209321393177, 0.00010559703548797417)}),
    "dev.scruples-anecdotes_label-counts.json": (
        [0.5029407373337849, 1.5472204574010628, 0.19310771676724392, 0.31741076834044796,
         0.16588702177112533],
        {ACC: (0.8810528, 0.00021536295748340759),
         BAL: (0.7044442813511331, 0.001365990834390018),
         F1: (0.6825581970835568, 0.000813910376540183),
         XENT: (0.7345475534590205, 0.000144553572084046)}),
}


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(REFERENCE_PRESETS))
def test_presets_agree_with_the_reference_implementation(datasets_dir, name):
    with open(datasets_dir / "scruples_best_label_counts" / name, encoding="utf-8") as fh:
        counts = np.array(json.load(fh))
    res = best_performance(counts, rng=0)
    ref_alpha, ref_scores = REFERENCE_PRESETS[name]
    assert res.fit.regime == "finite"
    np.testing.assert_allclose(res.alpha, ref_alpha, rtol=1e-4)
    # our optimum is at least as good as the reference's L-BFGS-B stopping point
    assert res.fit.log_likelihood >= _brute_log_likelihood(np.array(ref_alpha), counts) - 1e-9
    for metric, (value, se) in ref_scores.items():
        assert res.methods[metric].startswith("exact")
        assert abs(res.scores[metric] - value) <= 4 * se, metric
