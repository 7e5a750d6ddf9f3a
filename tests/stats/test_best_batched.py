"""BEST's batched computations against straightforward references: the posterior argmax
probabilities (one Gauss-Legendre rule shared by every row of a window) against adaptive
quadrature of each integral on its own, and the Poisson-binomial trees of F1 (macro)
against direct convolution of the binomial pmfs.

Tolerance of the argmax probabilities: ``1e-10 + 1e-9·P``, the accuracy the quadrature
checks itself to (two rules agreeing to 1e-10; probabilities are reported to 4 digits).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import integrate, special

import auditor.stats.best.f1 as f1_module
import auditor.stats.best.quadrature as quadrature_module
from auditor.stats import BestPerformanceWarning, best_performance


def _reference_argmax(row):
    """P(argmax = c) for p ~ Dirichlet(row), each class by adaptive Gauss-Kronrod of
    ∫ f_c(x) Π_{j≠c} F_j(x) dx in t = ln x over the 1e-30 quantiles of the largest shape
    (from x = 1e-300 at least: below, x underflows)."""
    pos = np.flatnonzero(row > 0)
    b = row[pos]
    lo = np.log(max(special.gammaincinv(b.max(), 1e-30), 1e-300))
    hi = np.log(special.gammainccinv(b.max(), 1e-30))
    out = np.zeros(len(row))
    for k, c in enumerate(pos):
        others = np.delete(b, k)

        def integrand(t, b_c=b[k], others=others):
            x = np.exp(t)
            with np.errstate(divide="ignore"):
                log_others = np.sum(np.log(special.gammainc(others, x)))
            return np.exp(b_c * t - x - special.gammaln(b_c) + log_others)

        points = [t for t in (np.log(b[k]), np.log(b.max())) if lo < t < hi] or None
        out[c], _ = integrate.quad(integrand, lo, hi, epsabs=1e-15, epsrel=1e-13, limit=1000,
                                   points=points)
    return out / out.sum()


def _random_rows(seed, n_rows):
    """Posterior shapes α + Y of one random dataset: small and large α, 1 to 3,000
    labels per item, some tied rows, some unused classes."""
    rng = np.random.default_rng(seed)
    k = int(rng.choice([3, 4, 6, 10, 20]))
    alpha = rng.choice([0.01, 0.2, 1.0, 3.0]) * rng.uniform(0.5, 1.5, k)
    if seed % 3 == 0:
        alpha[-1] = 0.0  # an unused class: β = 0 in every row
    n = rng.choice([1, 2, 3, 10, 60, 500, 3000], size=n_rows)
    p = rng.dirichlet(np.full(k, rng.choice([0.2, 1.0, 10.0])), size=n_rows)
    counts = np.stack([rng.multinomial(m, row) for m, row in zip(n, p, strict=True)])
    counts[:, alpha == 0] = 0
    beta = alpha[None, :] + counts
    beta[::5] = beta[::5, :1]  # ties: every class of the row equal (all but unused ones)
    beta[:, alpha == 0] = 0.0
    return beta


def _assert_close(probs, reference):
    np.testing.assert_array_less(np.abs(probs - reference), 1e-10 + 1e-9 * reference)


@pytest.mark.parametrize("seed", range(8))
def test_argmax_probabilities_match_adaptive_quadrature_of_each_integral(seed):
    beta = _random_rows(seed, 12)
    probs = quadrature_module._argmax_probabilities(beta)
    reference = np.stack([_reference_argmax(row) for row in beta])
    _assert_close(probs, reference)


def test_refinement_and_adaptive_fallback_reach_the_same_values(monkeypatch):
    beta = _random_rows(1, 10)
    reference = np.stack([_reference_argmax(row) for row in beta])
    # Rules too coarse for every row: each is refined, row by row...
    monkeypatch.setattr(quadrature_module, "_FEW_ROWS", 0)
    monkeypatch.setattr(quadrature_module, "_NODES", 10)
    monkeypatch.setattr(quadrature_module, "_CHECK_NODES", 8)
    _assert_close(quadrature_module._argmax_probabilities(beta), reference)
    # ... and without refinements, the pairs go to adaptive quadrature.
    monkeypatch.setattr(quadrature_module, "_REFINEMENTS", ())
    calls = []
    original = quadrature_module.integrate.quad_vec

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(quadrature_module.integrate, "quad_vec", counting)
    _assert_close(quadrature_module._argmax_probabilities(beta), reference)
    assert calls


@pytest.mark.parametrize("seed", range(4))
def test_interpolated_check_rule_keeps_the_accuracy(monkeypatch, seed):
    # The check rule's gamma CDFs interpolated from the rule's nodes, or evaluated at its
    # own nodes: the same probabilities, to the quadrature's accuracy.
    beta = _random_rows(seed, 200)
    interpolated = quadrature_module._argmax_probabilities(beta)
    monkeypatch.setattr(quadrature_module, "_INTERPOLATED_CHECK", False)
    _assert_close(interpolated, quadrature_module._argmax_probabilities(beta))


@pytest.mark.parametrize("seed", range(4))
def test_chained_gamma_cdfs_keep_their_relative_precision(seed):
    # Shapes α_j + y of a few columns in a few windows: chained down from each chain's top
    # by F_a = F_{a+1} + x^a e^{-x} / Γ(a + 1), every value to 1e-11 relative, deep in the
    # lower tail (F ~ 1e-250) included: a term's exponent a ln x − x − ln Γ(a + 1) adds and
    # subtracts numbers of ~1e4 at shapes in the thousands (an error ~1e-12 of its own;
    # ln F enters the integrands, whose tolerance is 1e-10).
    rng = np.random.default_rng(seed)
    alpha = rng.choice([0.01, 0.3, 1.0, 2.5], size=4) * rng.uniform(0.5, 1.5, 4)
    n_windows = 5
    centre = rng.choice([0.5, 5.0, 60.0, 800.0, 3000.0], size=n_windows)
    t = np.log(centre)[:, None] + np.linspace(-1.5, 1.5, 48)[None, :]
    x = np.exp(t)
    shapes, at = [], []
    for w in range(n_windows):
        for a in alpha:
            y = np.unique(np.concatenate([[0], rng.integers(0, 4000, 6),
                                          np.cumsum(rng.integers(1, 40, 30))]))
            shapes.append(a + y)
            at.append(np.full(y.shape, w))
    shapes = np.concatenate([*shapes, np.zeros(3)])  # and shape 0 (F = 1)
    at = np.concatenate([*at, np.zeros(3, dtype=int)])
    chained = quadrature_module._chained_cdf(shapes, at, x, np.log(x))
    direct = np.where(shapes[:, None] > 0, special.gammainc(np.maximum(shapes, 1e-300)[:, None], x[at]), 1.0)
    tiny = direct < 1e-300  # below double precision's normal range: both are ~0
    np.testing.assert_allclose(chained[~tiny], direct[~tiny], rtol=1e-11, atol=0)
    assert np.all(chained[tiny] < 1e-290)
    assert (direct[~tiny] < 1e-200).any() and (direct == 1.0).any()


def test_chained_and_direct_gamma_cdfs_give_the_same_probabilities(monkeypatch):
    # Many rows per window (shared tables, where shapes are chained) against the same
    # rows with every gamma CDF evaluated on its own.
    rng = np.random.default_rng(7)
    for k, n in ((5, 40), (10, 12), (20, 30)):
        alpha = rng.uniform(0.02, 2.0, k)
        beta = alpha[None, :] + rng.multinomial(n, rng.dirichlet(np.full(k, 0.5)), size=600)
        chained = quadrature_module._argmax_probabilities(beta)
        monkeypatch.setattr(quadrature_module, "_CHAIN_GAP", 0)
        direct = quadrature_module._argmax_probabilities(beta)
        monkeypatch.undo()
        np.testing.assert_allclose(chained, direct, rtol=0, atol=1e-13)


def test_interpolation_matrix_reproduces_polynomials():
    u_n, _ = quadrature_module._legendre(48)
    u_m, _ = quadrature_module._legendre(40)
    matrix = quadrature_module._interpolation(48, 40)
    for degree in (0, 1, 10, 47):
        np.testing.assert_allclose(u_n**degree @ matrix, u_m**degree, rtol=0, atol=1e-13)


def test_shared_windows_and_row_by_row_agree():
    # Many rows per window share tables; a row alone takes the row-by-row path.
    rng = np.random.default_rng(3)
    alpha = rng.uniform(0.2, 2.0, 8)
    beta = alpha[None, :] + rng.multinomial(12, rng.dirichlet(np.ones(8)), size=400)
    together = quadrature_module._argmax_probabilities(beta)
    alone = np.concatenate([quadrature_module._argmax_probabilities(row[None, :])
                            for row in beta[:40]])
    np.testing.assert_allclose(together[:40], alone, rtol=0, atol=1e-13)
    # Relabelling the classes relabels the probabilities.
    perm = rng.permutation(8)
    np.testing.assert_allclose(quadrature_module._argmax_probabilities(beta[:, perm]),
                               together[:, perm], rtol=0, atol=1e-13)


def test_classes_that_cannot_win_get_exactly_zero():
    probs = quadrature_module._argmax_probabilities(np.array([[3000.0, 3000.0, 0.01, 0.5]]))
    assert probs[0, 2] == 0.0 and probs[0, 3] == 0.0
    np.testing.assert_allclose(probs[0, :2], 0.5, atol=1e-12)


def _rows_with_clear_winners():
    """Rows where some classes cannot win: one large count beside small ones, with small
    and large α, a few counts near the cut."""
    rows = []
    for alpha in ([0.02, 0.03, 0.025, 0.5], [0.5, 1.5, 0.2, 0.3], [3.0, 2.0, 1.0, 4.0]):
        for top in (20, 45, 60, 200, 3000):
            for second in (0, 1, 5, top // 3, top - 2):
                for third in (0, 1, 3):
                    rows.append(np.add(alpha, (top, second, third, 0)))
    return np.array(rows)


def test_beaten_classes_cannot_win():
    # Every class marked as beaten has P(G_j > G_top) < ε (an upper bound of its
    # argmax probability), and the quadrature gives it at most 2ε.
    beta = _rows_with_clear_winners()
    dead = quadrature_module._beaten(beta)
    assert dead.any() and not dead.all(axis=1).any()
    top = beta.max(axis=1, keepdims=True)
    exact = special.betainc(np.broadcast_to(top, beta.shape), beta, 0.5)  # P(G_j > G_top)
    assert np.all(exact[dead] < quadrature_module._TAIL)
    # The bound is not loose by much: pairs far below the cut are all marked.
    assert np.all(dead[(exact < 1e-3 * quadrature_module._TAIL) & (beta < top)])


def test_rows_left_with_one_or_two_classes_equal_the_quadrature(monkeypatch):
    # The shortcut (one class left: probability 1; two: the beta function) against the
    # quadrature of the whole row.
    beta = _rows_with_clear_winners()
    n_live = (beta > 0).sum(axis=1) - quadrature_module._beaten(beta).sum(axis=1)
    assert np.any(n_live == 1) and np.any(n_live == 2) and np.any(n_live > 2)
    shortcut = quadrature_module._argmax_probabilities(beta)
    monkeypatch.setattr(quadrature_module, "_beaten", lambda b: np.zeros(b.shape, dtype=bool))
    full = quadrature_module._argmax_probabilities(beta)
    np.testing.assert_allclose(shortcut, full, rtol=0, atol=1e-12)
    assert np.all(shortcut[n_live == 1].max(axis=1) == 1.0)
    reference = np.stack([_reference_argmax(row) for row in beta[n_live <= 2][::4]])
    _assert_close(shortcut[n_live <= 2][::4], reference)


def test_many_classes_need_no_adaptive_quadrature(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("adaptive quadrature used")

    monkeypatch.setattr(quadrature_module.integrate, "quad_vec", refuse)
    rng = np.random.default_rng(0)
    counts = rng.multinomial(10, rng.dirichlet(np.full(50, 0.5), size=3000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BestPerformanceWarning)
        res = best_performance(counts, rng=0)
    assert res.methods["accuracy"] == "exact (gamma quadrature)"


# ------------------------------------------------------------------ F1 (macro)


def _binomial(w, p):
    k = np.arange(int(w) + 1)
    return special.comb(w, k) * p**k * (1 - p) ** (w - k)


def _direct(weights, probs):
    pmf = np.ones(1)
    for w, p in zip(weights, probs, strict=True):
        pmf = np.convolve(pmf, _binomial(w, p))
    return pmf


@pytest.mark.parametrize("seed", range(4))
def test_batched_poisson_binomials_equal_direct_convolution(seed):
    rng = np.random.default_rng(seed)
    n = 300
    weights = rng.choice([1, 1, 1, 2, 5, 40], size=n).astype(float)
    probs = rng.choice([0.0, 1.0, 1e-30, 0.3, 0.9], size=n) * (rng.random(n) < 0.2)
    probs = np.where(probs > 0, probs, rng.beta(0.3, 2.0, n))
    sums = np.sort(rng.integers(0, 4, n))
    offset, pieces = f1_module._pieces(weights, probs, sums, 5)
    dists = f1_module._convolve_sums(offset, [pieces])
    for k, (start, pmf) in enumerate(dists):
        direct = _direct(weights[sums == k], probs[sums == k])
        full = np.zeros(max(len(direct), start + len(pmf)))
        full[start:start + len(pmf)] = pmf
        np.testing.assert_allclose(full[:len(direct)], direct, rtol=0, atol=1e-14)
        assert full[len(direct):].sum() == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_f1_parts_equal_direct_convolution(seed):
    # Distinct count vectors of weight 1 (a dense matrix, recursion in blocks), a few
    # (expanded into trials) and many (binomial pieces).
    rng = np.random.default_rng(seed)
    n_rows, k = 160, 4
    probs = rng.dirichlet(np.full(k, 0.4), size=n_rows)
    gold = rng.integers(0, k - (seed == 2), n_rows)  # seed 2: a class never gold
    weights = rng.choice([1, 1, 1, 3, 60], size=n_rows).astype(float)
    # (the reference's own 60-trial binomials are good to about 1e-12)
    _assert_f1_parts_are_direct_convolutions(weights, gold, probs, k)


def _assert_f1_parts_are_direct_convolutions(weights, gold, probs, k):
    m, parts = f1_module._f1_parts(weights, gold, probs, k)
    for c in np.flatnonzero(m):
        tp = _direct(weights[gold == c], probs[gold == c, c])
        fp = _direct(weights[gold != c], probs[gold != c, c])
        joint = np.convolve(np.arange(len(tp)) * tp, fp)
        expected = np.sum(2.0 * joint / (m[c] + np.arange(len(joint))))
        assert parts[int(c)] == pytest.approx(expected, rel=1e-11, abs=1e-14)


def test_f1_parts_with_certain_and_impossible_predictions():
    # Expanded trials whose argmax probability is exactly 0 or 1 (left out, or counted
    # in their sum's offset) beside uncertain ones and count vectors of many items.
    rng = np.random.default_rng(7)
    n_rows, k = 200, 5
    probs = rng.dirichlet(np.full(k, 0.4), size=n_rows)
    certain = rng.random(n_rows) < 0.4
    probs[certain] = np.eye(k)[rng.integers(0, k, int(certain.sum()))]
    probs[(rng.random(n_rows) < 0.2) & ~certain, 1] = 0.0
    probs /= probs.sum(axis=1, keepdims=True)
    gold = rng.integers(0, k, n_rows)
    weights = rng.choice([1, 1, 1, 2, 50], size=n_rows).astype(float)
    _assert_f1_parts_are_direct_convolutions(weights, gold, probs, k)
