"""BEST's Monte Carlo F1 correction reports an honest standard error: against the exact
inclusion–exclusion value, ±1.96 standard errors cover it in about 95% of data sets
(bench/bench_mc_error.py runs the larger study), and a seed gives the same result."""

from __future__ import annotations

import numpy as np

from auditor.stats import best_performance
from auditor.stats.best import f1 as f1_module

F1 = "f1 (macro)"


def _never_gold_counts(rng, n_items, n_never):
    base = rng.multinomial(5, rng.dirichlet([0.8, 0.8], size=n_items))
    extra = np.zeros((n_items, n_never), dtype=np.int64)
    who = rng.random(n_items) < 0.4
    extra[np.flatnonzero(who), rng.integers(0, n_never, who.sum())] = 1
    return np.hstack([base, extra])


def test_the_f1_correction_error_covers_the_exact_value(monkeypatch):
    rng = np.random.default_rng(3)
    z = []
    for rep in range(30):
        counts = _never_gold_counts(rng, 120, 1 + rep % 3)
        exact = best_performance(counts, metrics=[F1], rng=0)
        assert "inclusion-exclusion" in exact.methods[F1] and exact.standard_errors[F1] == 0.0
        with monkeypatch.context() as m:
            m.setattr(f1_module, "_MAX_EXACT_NEVER_GOLD", 0)
            mc = best_performance(counts, metrics=[F1], rng=rep, f1_standard_error=1e-3)
            again = best_performance(counts, metrics=[F1], rng=rep, f1_standard_error=1e-3)
        assert "Monte Carlo" in mc.methods[F1]
        assert mc.scores[F1] == again.scores[F1] and mc.standard_errors[F1] == again.standard_errors[F1]
        assert 0 < mc.standard_errors[F1] <= 1e-3
        z.append((mc.scores[F1] - exact.scores[F1]) / mc.standard_errors[F1])
    z = np.array(z)
    assert np.mean(np.abs(z) <= 1.96) >= 0.85   # 30 cases: 95% less noise
    assert 0.5 < np.std(z) < 1.5


def test_no_draw_predicting_a_never_gold_class_still_reports_an_error(monkeypatch):
    """A never-gold class that no draw predicts leaves a zero correction; its standard
    error is then the rule of three's bound, not 0, and still covers the exact value."""
    rng = np.random.default_rng(0)
    n = 40
    gold = rng.integers(0, 2, n)
    probs = np.zeros((n, 3))
    probs[np.arange(n), gold] = 0.7
    probs[np.arange(n), 1 - gold] = 0.3 - 1e-9
    probs[:, 2] = 1e-9                      # predicted with probability 4e-8 per data set
    weights = np.ones(n)
    exact, exact_se, how = f1_module._f1_macro(weights, gold, probs, np.random.default_rng(1), 1e-3, 10**6)
    assert exact_se == 0.0 and "inclusion-exclusion" in how
    monkeypatch.setattr(f1_module, "_MAX_EXACT_NEVER_GOLD", 0)
    value, se, how = f1_module._f1_macro(weights, gold, probs, np.random.default_rng(1), 1e-3, 10**6)
    assert "Monte Carlo" in how
    assert se > 0 and abs(value - exact) <= 1.96 * se
