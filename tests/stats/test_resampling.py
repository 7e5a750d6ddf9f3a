"""The Bayesian bootstrap's weights of distinct rows (Rubin 1981): Dirichlet(m), whose
mean is m / N and variance p (1 - p) / (N + 1)."""

from __future__ import annotations

import numpy as np
import pytest

from auditor.stats.resampling import (
    bayesian_bootstrap_weights,
    draw_by_index,
    multinomial_multiplicities,
)


def test_bayesian_bootstrap_weights_are_dirichlet_of_the_multiplicities():
    mult = np.array([1, 5, 30, 2, 12, 50])
    n = int(mult.sum())
    w = bayesian_bootstrap_weights(mult, 20_000, np.random.default_rng(4))
    assert w.shape == (20_000, mult.size) and np.allclose(w.sum(axis=1), 1.0) and (w >= 0).all()
    p = mult / n
    var = p * (1 - p) / (n + 1)
    assert np.all(np.abs(w.mean(axis=0) - p) < 5 * np.sqrt(var / 20_000))
    assert w.var(axis=0) == pytest.approx(var, rel=0.1)
    again = bayesian_bootstrap_weights(mult, 20_000, np.random.default_rng(4))
    assert np.array_equal(w, again)


def test_multinomial_multiplicities_sum_to_the_items_and_the_cheaper_draw_is_chosen():
    mult = np.array([3, 0, 7])
    w = multinomial_multiplicities(mult, 500, np.random.default_rng(0))
    assert w.shape == (500, 3) and (w.sum(axis=1) == 10).all() and (w[:, 1] == 0).all()
    assert draw_by_index(100, 10_000) and not draw_by_index(1_000_000, 10)
