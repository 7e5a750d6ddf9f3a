"""Agreement coefficients: published values, library cross-checks, invariants, edge cases."""

from __future__ import annotations

import importlib
import warnings
from collections import defaultdict
from itertools import permutations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats as sps
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import aggregate_raters
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

from auditor.stats import (
    AgreementCoefficient,
    StatsInputError,
    UndefinedAgreementWarning,
    agreement_report,
    annotations_from_records,
    annotations_from_wide,
    fleiss_kappa,
    krippendorff_alpha,
    pairwise_cohen_kappa,
)

# ---------------------------------------------------------------------------
# published data

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C:
# 4 observers (rows) × 12 units (columns), nominal values 1..5, NaN = missing.
_ = np.nan
KRIPPENDORFF_2011 = np.array([
    [1, 2, 3, 3, 2, 1, 4, 1, 2, _, _, _],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, _, 3],
    [_, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, _],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, _],
])

# Fleiss' kappa example (10 subjects × 14 raters × 5 categories), as tabulated on
# the Wikipedia "Fleiss' kappa" page and in statsmodels' tests: P̄ = 0.378,
# P̄e = 0.213, κ = 0.210.
FLEISS_14_RATERS = np.array([
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
])

# Fleiss (1971), Table 1: 30 patients × 6 psychiatrists, 5 diagnoses; κ = .430
# (rater-level data as in R's irr::diagnoses and statsmodels' tests).
FLEISS_1971_DIAGNOSES = np.array([
    [4, 4, 4, 4, 4, 4], [2, 2, 2, 5, 5, 5], [2, 3, 3, 3, 3, 5], [5, 5, 5, 5, 5, 5],
    [2, 2, 2, 4, 4, 4], [1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5], [1, 1, 3, 3, 3, 4],
    [1, 1, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5], [1, 4, 4, 4, 4, 4], [1, 2, 4, 4, 4, 4],
    [2, 2, 2, 3, 3, 3], [1, 4, 4, 4, 4, 4], [2, 2, 4, 4, 4, 5], [3, 3, 3, 3, 3, 5],
    [1, 1, 1, 4, 5, 5], [1, 1, 1, 1, 1, 2], [2, 2, 4, 4, 4, 4], [1, 3, 3, 5, 5, 5],
    [5, 5, 5, 5, 5, 5], [2, 4, 4, 4, 4, 4], [2, 2, 4, 5, 5, 5], [1, 1, 4, 4, 4, 4],
    [1, 4, 4, 4, 4, 5], [2, 2, 2, 2, 2, 4], [1, 1, 1, 1, 5, 5], [2, 2, 4, 4, 4, 4],
    [1, 3, 3, 3, 3, 3], [5, 5, 5, 5, 5, 5],
])


def _krippendorff_counts() -> np.ndarray:
    matrix = KRIPPENDORFF_2011.T  # units × observers
    counts = np.zeros((12, 5), dtype=np.int64)
    for u, row in enumerate(matrix):
        for v in row[~np.isnan(row)]:
            counts[u, int(v) - 1] += 1
    return counts


def _pairs_from_table(table) -> tuple[np.ndarray, np.ndarray]:
    """Two raters' label vectors reproducing a square contingency table."""
    table = np.asarray(table)
    a, b = np.nonzero(table >= 0)
    reps = table[a, b]
    return np.repeat(a, reps), np.repeat(b, reps)


# ---------------------------------------------------------------------------
# independent oracles (textbook definitions, written without the library's algebra)


def alpha_by_value_pairs(matrix: np.ndarray) -> float:
    """Krippendorff's nominal alpha from an items × coders matrix (-1 = missing), by
    enumerating the pairable value pairs of each unit into the coincidence matrix."""
    o = defaultdict(float)
    for row in matrix:
        vals = [int(v) for v in row if v >= 0]
        m = len(vals)
        if m < 2:
            continue
        for i, j in permutations(range(m), 2):
            o[vals[i], vals[j]] += 1.0 / (m - 1)
    n_c = defaultdict(float)
    for (c, _k), v in o.items():
        n_c[c] += v
    n = sum(n_c.values())
    d_o = sum(v for (c, k), v in o.items() if c != k) / n
    d_e = sum(n_c[c] * n_c[k] for c in n_c for k in n_c if c != k) / (n * (n - 1))
    return 1.0 - d_o / d_e


def counts_of(matrix: np.ndarray, n_labels: int) -> np.ndarray:
    out = np.zeros((matrix.shape[0], n_labels), dtype=np.int64)
    for i, row in enumerate(matrix):
        for v in row[row >= 0]:
            out[i, v] += 1
    return out


# ---------------------------------------------------------------------------
# published values


def test_krippendorff_2011_nominal_example_with_missing_values():
    counts = _krippendorff_counts()
    res = krippendorff_alpha(counts, n_bootstrap=0)
    assert res.value == pytest.approx(0.743, abs=5e-4)
    # Unit 12 has a single value: it does not pair; 40 pairable values remain.
    assert res.n_items == 11
    assert res.n_values == 40
    # Same data given as a wide observer matrix with missing entries.
    ann = annotations_from_wide(KRIPPENDORFF_2011.T)
    assert krippendorff_alpha(ann, n_bootstrap=0).value == pytest.approx(res.value, rel=1e-12)


def test_fleiss_kappa_14_raters_example():
    res = fleiss_kappa(FLEISS_14_RATERS, n_bootstrap=0)
    assert res.value == pytest.approx(0.210, abs=5e-4)
    assert res.observed_agreement == pytest.approx(0.378, abs=5e-4)
    assert res.expected_agreement == pytest.approx(0.213, abs=5e-4)


def test_fleiss_1971_psychiatric_diagnoses():
    table, _cats = aggregate_raters(FLEISS_1971_DIAGNOSES)
    assert fleiss_kappa(table, n_bootstrap=0).value == pytest.approx(0.430, abs=5e-4)


def test_fleiss_kappa_varying_raters_matches_gwet():
    # Gwet's generalised Fleiss' kappa on Krippendorff's 4 × 12 data, as documented
    # for irrCAC's `fleiss.kappa.raw(cac.raw4raters)`: pa 0.8182, pe 0.2387, κ 0.7612.
    res = fleiss_kappa(_krippendorff_counts(), n_bootstrap=0)
    assert res.value == pytest.approx(0.76117, abs=5e-6)
    assert res.observed_agreement == pytest.approx(0.81818, abs=5e-6)
    assert res.expected_agreement == pytest.approx(0.23872, abs=5e-6)
    assert res.n_items == 12 and res.n_pairable_items == 11


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        # Artstein & Poesio (2008), Table 1 (also sklearn's test): κ = 0.348.
        ([[20, 20], [10, 50]], 0.348),
        # Artstein & Poesio (2008), Table 4, three classes: κ = 0.8013.
        ([[46, 0, 0], [6, 32, 6], [0, 0, 10]], 0.8013),
        # Wikipedia "Cohen's kappa", simple example: p_o = 0.7, p_e = 0.5, κ = 0.4.
        ([[20, 5], [10, 15]], 0.4),
        # Same page, equal p_o = 0.60 with different marginals: κ = 0.1304 and 0.2593.
        ([[45, 15], [25, 15]], 0.1304),
        ([[25, 35], [5, 35]], 0.2593),
    ],
)
def test_cohen_kappa_published_tables(table, expected):
    a, b = _pairs_from_table(table)
    res = pairwise_cohen_kappa(np.column_stack([a, b]), min_overlap=1, n_bootstrap=0)
    decimals = len(str(expected).split(".")[1])
    assert res.kappa[0, 1] == pytest.approx(expected, abs=0.5 * 10.0 ** -decimals)
    assert res.kappa[1, 0] == res.kappa[0, 1]
    assert res.overlap[0, 1] == np.sum(table)
    assert res.mean_weighted == pytest.approx(res.kappa[0, 1], rel=1e-12)
    assert res.mean_unweighted == pytest.approx(res.kappa[0, 1], rel=1e-12)


# ---------------------------------------------------------------------------
# cross-checks against statsmodels, sklearn and the textbook definitions

count_matrices = st.integers(1, 6).flatmap(
    lambda n_labels: arrays(np.int64, st.tuples(st.integers(1, 40), st.just(n_labels)),
                            elements=st.integers(0, 6))
)


@st.composite
def constant_k_counts(draw):
    n_labels = draw(st.integers(2, 5))
    k = draw(st.integers(2, 8))
    n = draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(n_labels), size=n)
    return np.stack([rng.multinomial(k, row) for row in p])


@st.composite
def rater_matrices(draw, max_items=25, max_raters=6, max_labels=4, missing=True):
    n_items = draw(st.integers(1, max_items))
    n_raters = draw(st.integers(2, max_raters))
    n_labels = draw(st.integers(2, max_labels))
    elements = st.integers(-1 if missing else 0, n_labels - 1)
    matrix = draw(arrays(np.int64, (n_items, n_raters), elements=elements)
                  .filter(lambda m: (m >= 0).any()))
    return matrix, n_labels


@settings(max_examples=150, deadline=None)
@given(constant_k_counts())
def test_fleiss_equals_statsmodels_for_constant_raters(counts):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedAgreementWarning)
        res = fleiss_kappa(counts, n_bootstrap=0)
    if (counts.sum(axis=0) > 0).sum() < 2:
        assert np.isnan(res.value)
        return
    assert res.value == pytest.approx(sm_fleiss_kappa(counts), rel=1e-10, abs=1e-12)
    # The generalised formula (used for the bootstrap) agrees with statsmodels too.
    p_a, p_e = res.observed_agreement, res.expected_agreement
    assert (p_a - p_e) / (1 - p_e) == pytest.approx(res.value, rel=1e-10, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(rater_matrices())
def test_alpha_from_counts_equals_alpha_from_value_pairs(data):
    matrix, n_labels = data
    counts = counts_of(matrix, n_labels)
    pairable = counts[counts.sum(axis=1) >= 2]
    defined = pairable.size and (pairable.sum(axis=0) > 0).sum() >= 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedAgreementWarning)
        res = krippendorff_alpha(counts, n_bootstrap=0)
    if not defined:
        assert np.isnan(res.value)
        return
    assert res.value == pytest.approx(alpha_by_value_pairs(matrix), rel=1e-9, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(rater_matrices(max_items=40, max_raters=5, max_labels=4))
def test_pairwise_kappa_equals_sklearn(data):
    matrix, _n_labels = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedAgreementWarning)
        res = pairwise_cohen_kappa(matrix, min_overlap=3, n_bootstrap=0)
    r = matrix.shape[1]
    weights, values = [], []
    for a in range(r):
        for b in range(r):
            shared = (matrix[:, a] >= 0) & (matrix[:, b] >= 0)
            assert res.overlap[a, b] == (0 if a == b else shared.sum())
            if a == b or shared.sum() < 3:
                assert np.isnan(res.kappa[a, b])
                continue
            x, y = matrix[shared, a], matrix[shared, b]
            if len(set(x)) == 1 and len(set(y)) == 1 and x[0] == y[0]:
                assert np.isnan(res.kappa[a, b])  # sklearn: undefined too
                continue
            expected = cohen_kappa_score(x, y)
            assert res.kappa[a, b] == pytest.approx(expected, rel=1e-9, abs=1e-12)
            if a < b:
                weights.append(shared.sum())
                values.append(expected)
    if values:
        assert res.n_pairs == len(values)
        assert res.mean_unweighted == pytest.approx(np.mean(values), abs=1e-12)
        assert res.mean_weighted == pytest.approx(np.average(values, weights=weights), abs=1e-12)
    else:
        assert res.n_pairs == 0 and np.isnan(res.mean_weighted) and np.isnan(res.mean_unweighted)


def test_pairwise_from_annotations_equals_matrix_and_names_annotators():
    rng = np.random.default_rng(3)
    matrix = rng.integers(0, 3, size=(60, 4))
    matrix[rng.random(matrix.shape) < 0.3] = -1
    frame = pd.DataFrame(matrix, columns=["ann", "bob", "cy", "dee"])
    from_frame = pairwise_cohen_kappa(frame, n_bootstrap=0)
    ann = annotations_from_wide(frame, labels=[0, 1, 2])
    from_ann = pairwise_cohen_kappa(ann, n_bootstrap=0)
    assert from_frame.annotators == ("ann", "bob", "cy", "dee") == from_ann.annotators
    np.testing.assert_array_equal(from_frame.overlap, from_ann.overlap)
    np.testing.assert_allclose(from_frame.kappa, from_ann.kappa, rtol=1e-12)
    table = from_frame.pairs()
    assert len(table) == 6
    assert set(table.columns) == {"annotator_a", "annotator_b", "overlap", "kappa"}


# ---------------------------------------------------------------------------
# invariants


@st.composite
def perfect_agreement_counts(draw):
    n_labels = draw(st.integers(2, 6))
    n = draw(st.integers(2, 40))
    classes = draw(arrays(np.int64, n, elements=st.integers(0, n_labels - 1)).filter(
        lambda c: np.unique(c).size >= 2))
    k = draw(arrays(np.int64, n, elements=st.integers(2, 9)))
    counts = np.zeros((n, n_labels), dtype=np.int64)
    counts[np.arange(n), classes] = k
    return counts


@settings(max_examples=100, deadline=None)
@given(perfect_agreement_counts())
def test_perfect_agreement_gives_one(counts):
    assert krippendorff_alpha(counts, n_bootstrap=0).value == pytest.approx(1.0, abs=1e-12)
    assert fleiss_kappa(counts, n_bootstrap=0).value == pytest.approx(1.0, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=4, max_size=40).filter(lambda c: len(set(c)) >= 2),
       st.integers(2, 5))
def test_perfect_agreement_pairwise_kappa_is_one(truth, n_raters):
    matrix = np.repeat(np.asarray(truth)[:, None], n_raters, axis=1)
    res = pairwise_cohen_kappa(matrix, min_overlap=1, n_bootstrap=0)
    off = ~np.eye(n_raters, dtype=bool)
    np.testing.assert_allclose(res.kappa[off], 1.0, atol=1e-12)
    assert res.mean_weighted == pytest.approx(1.0) and res.mean_unweighted == pytest.approx(1.0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(count_matrices, st.integers(0, 2**32 - 1))
def test_alpha_and_fleiss_invariant_to_permuting_items_and_labels(counts, seed):
    rng = np.random.default_rng(seed)
    shuffled = counts[rng.permutation(counts.shape[0])][:, rng.permutation(counts.shape[1])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedAgreementWarning)
        for f in (krippendorff_alpha, fleiss_kappa):
            a, b = f(counts, n_bootstrap=0).value, f(shuffled, n_bootstrap=0).value
            assert (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(rater_matrices(max_items=30, max_raters=5), st.integers(0, 2**32 - 1))
def test_pairwise_invariant_to_permuting_items_labels_and_raters(data, seed):
    matrix, n_labels = data
    rng = np.random.default_rng(seed)
    relabel = np.r_[rng.permutation(n_labels), -1]  # index -1 keeps "missing"
    rows, cols = rng.permutation(matrix.shape[0]), rng.permutation(matrix.shape[1])
    permuted = relabel[matrix][rows][:, cols]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedAgreementWarning)
        a = pairwise_cohen_kappa(matrix, min_overlap=2, n_bootstrap=0)
        b = pairwise_cohen_kappa(permuted, min_overlap=2, n_bootstrap=0)
    np.testing.assert_allclose(b.kappa, a.kappa[np.ix_(cols, cols)], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(b.overlap, a.overlap[np.ix_(cols, cols)])


def test_unlabeled_and_single_label_items():
    counts = _krippendorff_counts()
    padded = np.vstack([counts, np.zeros((3, 5), dtype=np.int64), [[0, 0, 0, 1, 0]]])
    # Alpha ignores items that do not pair; both ignore items without labels.
    assert krippendorff_alpha(padded, n_bootstrap=0).value == krippendorff_alpha(counts, n_bootstrap=0).value
    with_empty = np.vstack([counts, np.zeros((3, 5), dtype=np.int64)])
    assert fleiss_kappa(with_empty, n_bootstrap=0).value == fleiss_kappa(counts, n_bootstrap=0).value
    # A single-label item still shifts Fleiss' class prevalences (Gwet's definition).
    assert fleiss_kappa(padded, n_bootstrap=0).n_items == 13


# ---------------------------------------------------------------------------
# bootstrap


def _structured_counts(seed: int, n: int = 300, k: int = 5, n_labels: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n_labels, 0.6), size=n)
    return np.stack([rng.multinomial(k, row) for row in p])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("func", [krippendorff_alpha, fleiss_kappa])
def test_bootstrap_interval_contains_estimate(func, seed):
    res = func(_structured_counts(seed), n_bootstrap=400, rng=seed)
    assert res.ci_low < res.value < res.ci_high
    assert res.n_bootstrap == 400 and res.n_bootstrap_undefined == 0
    assert res.confidence == 0.95


def test_bootstrap_is_reproducible_and_narrows_with_confidence():
    counts = _structured_counts(11)
    a = krippendorff_alpha(counts, n_bootstrap=300, rng=5)
    b = krippendorff_alpha(counts, n_bootstrap=300, rng=np.random.default_rng(5))
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    c = krippendorff_alpha(counts, n_bootstrap=300, confidence=0.5, rng=5)
    assert a.ci_low < c.ci_low < c.ci_high < a.ci_high


def _force_draw(monkeypatch, draw):
    """Make the histogram bootstrap draw multiplicities by ``"index"`` or ``"multinomial"``."""
    mod = importlib.import_module("auditor.stats.resampling")

    monkeypatch.setattr(mod, "INDEX_NS_PER_ITEM", 0.0 if draw == "index" else 1e12)


@pytest.mark.parametrize("draw", ["index", "multinomial"])
def test_resampled_multiplicities_are_the_item_bootstrap(monkeypatch, draw):
    # Both ways of drawing give Multinomial(N, m / N) multiplicities: each resample sums
    # to N, with mean m and variance N p (1 - p) per distinct row; blocks of resamples
    # stay within the cell budget, and a seed reproduces every draw.
    mod = importlib.import_module("auditor.stats.resampling")

    _force_draw(monkeypatch, draw)
    mult = np.array([1, 5, 30, 2, 12, 50])
    n = int(mult.sum())
    blocks = list(mod.resampled_multiplicities(mult, 4000, np.random.default_rng(3), block_cells=1000))
    assert all(b.shape[0] * max(n if draw == "index" else 1, mult.size) <= 1000 for b in blocks[:-1])
    w = np.vstack(blocks)
    assert w.shape == (4000, mult.size) and (w.sum(axis=1) == n).all()
    p = mult / n
    se_mean = np.sqrt(n * p * (1 - p) / 4000)
    assert np.all(np.abs(w.mean(axis=0) - mult) < 5 * se_mean)
    assert w.var(axis=0) == pytest.approx(n * p * (1 - p), rel=0.15)
    again = np.vstack(list(mod.resampled_multiplicities(mult, 4000, np.random.default_rng(3), block_cells=1000)))
    assert np.array_equal(w, again)


@pytest.mark.parametrize("draw", ["index", "multinomial"])
@pytest.mark.parametrize("func", [krippendorff_alpha, fleiss_kappa])
def test_histogram_bootstrap_matches_item_bootstrap(monkeypatch, func, draw):
    # Resampling the histogram of count vectors must be the item bootstrap: compare
    # with scipy's percentile bootstrap over items (independent draws; the tolerance
    # is far above their Monte Carlo error), whichever way the multiplicities are drawn.
    _force_draw(monkeypatch, draw)
    counts = _structured_counts(7, n=250, k=4)
    ours = func(counts, n_bootstrap=2000, rng=1)
    ref = sps.bootstrap(
        (np.arange(counts.shape[0]),), lambda idx: func(counts[idx], n_bootstrap=0).value,
        vectorized=False, n_resamples=2000, method="percentile", rng=2,
    ).confidence_interval
    tol = 0.15 * (ours.ci_high - ours.ci_low)
    assert ours.ci_low == pytest.approx(ref.low, abs=tol)
    assert ours.ci_high == pytest.approx(ref.high, abs=tol)


@pytest.mark.parametrize("func", [krippendorff_alpha, fleiss_kappa])
def test_basic_interval_reflects_the_percentile_interval(func):
    counts = _structured_counts(3)
    pct = func(counts, n_bootstrap=300, rng=9)
    basic = func(counts, n_bootstrap=300, interval="basic", rng=9)
    assert basic.interval == "basic" and pct.interval == "percentile"
    assert basic.ci_low == pytest.approx(2 * pct.value - pct.ci_high, abs=1e-12)
    assert basic.ci_high == pytest.approx(2 * pct.value - pct.ci_low, abs=1e-12)


def test_intervals_do_not_depend_on_the_row_order_of_many_classes():
    # 60 classes with counts up to 40 do not fit one 62-bit key (the histogram re-codes
    # the key on the way): the coefficients' intervals are unchanged by the row order.
    rng = np.random.default_rng(0)
    base = rng.multinomial(40, rng.dirichlet(np.full(60, 0.3), size=300))
    counts = base[rng.integers(0, 300, size=3000)]
    a = krippendorff_alpha(counts, n_bootstrap=50, rng=1)
    b = krippendorff_alpha(counts[::-1], n_bootstrap=50, rng=1)
    assert (a.ci_low, a.ci_high) == pytest.approx((b.ci_low, b.ci_high), abs=1e-12)


def _sparse_crowd(seed, n_items=400, n_raters=30, per_item=4, n_classes=3):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, n_classes, size=n_items)
    raters = np.argsort(rng.random((n_items, n_raters)), axis=1)[:, :per_item]
    right = rng.random((n_items, per_item)) < 0.75
    labels = np.where(right, truth[:, None], rng.integers(0, n_classes, size=(n_items, per_item)))
    return annotations_from_records({"item_id": np.repeat(np.arange(n_items), per_item),
                                     "annotator_id": raters.ravel(), "label": labels.ravel()})


@pytest.mark.parametrize("min_overlap", [1, 8, 10, 14])
def test_pairwise_items_and_overlaps_by_enumeration(min_overlap):
    # The sparse product must give every pair's overlap and kappa, and the items the
    # bootstrap resamples must be those on which some eligible pair both labeled,
    # whichever of the eligible / ineligible pair sets is the smaller one.
    ann = _sparse_crowd(1)
    matrix = ann.matrix()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedAgreementWarning)  # pairs of one shared item
        res = pairwise_cohen_kappa(ann, min_overlap=min_overlap, n_bootstrap=0)
    r = len(ann.annotators)
    entering = np.zeros(matrix.shape[0], dtype=bool)
    for a in range(r):
        for b in range(a + 1, r):
            both = (matrix[:, a] >= 0) & (matrix[:, b] >= 0)
            assert res.overlap[a, b] == res.overlap[b, a] == both.sum()
            if both.sum() >= min_overlap:
                entering |= both
                x, y = matrix[both, a], matrix[both, b]
                if np.unique(x).size == np.unique(y).size == 1 and x[0] == y[0]:
                    assert np.isnan(res.kappa[a, b])  # p_e = 1: undefined
                else:
                    assert res.kappa[a, b] == pytest.approx(cohen_kappa_score(x, y), rel=1e-9, abs=1e-12)
            else:
                assert np.isnan(res.kappa[a, b])
    assert res.n_items == entering.sum()


@pytest.mark.parametrize("n_classes", [3, 12])
def test_pairwise_bootstrap_paths_agree(monkeypatch, n_classes):
    # Listing the label pairs once, or one sparse product per resample, are two ways
    # of computing the same resamples: same seed, same intervals.
    mod = importlib.import_module("auditor.stats.agreement.pairwise")

    ann = _sparse_crowd(2, n_classes=n_classes)
    listed = pairwise_cohen_kappa(ann, min_overlap=8, n_bootstrap=60, rng=5)
    monkeypatch.setattr(mod, "_PAIR_LIST_MAX", 0)
    product = pairwise_cohen_kappa(ann, min_overlap=8, n_bootstrap=60, rng=5)
    for field in ("weighted_ci_low", "weighted_ci_high", "unweighted_ci_low", "unweighted_ci_high"):
        assert getattr(product, field) == pytest.approx(getattr(listed, field), abs=1e-12)
    assert listed.weighted_ci_low < listed.mean_weighted < listed.weighted_ci_high


def test_pairwise_bootstrap_interval():
    rng = np.random.default_rng(4)
    truth = rng.integers(0, 3, size=200)
    noisy = np.where(rng.random((200, 5)) < 0.7, truth[:, None], rng.integers(0, 3, size=(200, 5)))
    noisy[rng.random(noisy.shape) < 0.2] = -1
    res = pairwise_cohen_kappa(noisy, n_bootstrap=150, rng=0)
    assert res.n_pairs == 10
    assert res.n_items == int(((noisy >= 0).sum(axis=1) >= 2).sum())
    assert res.weighted_ci_low < res.mean_weighted < res.weighted_ci_high
    assert res.unweighted_ci_low < res.mean_unweighted < res.unweighted_ci_high
    again = pairwise_cohen_kappa(noisy, n_bootstrap=150, rng=0)
    assert again.weighted_ci_low == res.weighted_ci_low
    basic = pairwise_cohen_kappa(noisy, n_bootstrap=150, interval="basic", rng=0)
    assert basic.weighted_ci_low == pytest.approx(2 * res.mean_weighted - res.weighted_ci_high, abs=1e-12)
    assert basic.unweighted_ci_high == pytest.approx(2 * res.mean_unweighted - res.unweighted_ci_low, abs=1e-12)


def test_single_item_interval_collapses_to_the_value():
    res = fleiss_kappa([[2, 1]], n_bootstrap=50, rng=0)
    assert res.value == pytest.approx(-0.5)  # P_a = 1/3, P_e = 5/9
    assert res.ci_low == res.ci_high == pytest.approx(res.value)
    alpha = krippendorff_alpha([[2, 1]], n_bootstrap=50, rng=0)
    assert alpha.value == pytest.approx(0.0)  # A_o = A_e = 1/3


def test_no_bootstrap_gives_nan_interval():
    res = krippendorff_alpha(_krippendorff_counts(), n_bootstrap=0)
    assert np.isnan(res.ci_low) and np.isnan(res.ci_high)


# ---------------------------------------------------------------------------
# undefined coefficients and bad input


@pytest.mark.parametrize("counts", [[[3, 0], [4, 0], [2, 0]], [[5, 0, 0]]])
@pytest.mark.parametrize("func", [krippendorff_alpha, fleiss_kappa])
def test_single_class_is_undefined_not_an_error(func, counts):
    with pytest.warns(UndefinedAgreementWarning, match="undefined"):
        res = func(counts, n_bootstrap=20, rng=0)
    assert isinstance(res, AgreementCoefficient)
    assert np.isnan(res.value) and np.isnan(res.ci_low) and np.isnan(res.ci_high)
    assert res.n_bootstrap_undefined == 20


@pytest.mark.parametrize("func", [krippendorff_alpha, fleiss_kappa])
def test_no_pairable_item_is_undefined(func):
    with pytest.warns(UndefinedAgreementWarning, match="2 or more labels"):
        res = func([[1, 0], [0, 1], [0, 0]], n_bootstrap=0)
    assert np.isnan(res.value) and res.n_pairable_items == 0


def test_bootstrap_leaves_out_undefined_resamples():
    # One disagreeing item among unanimous ones of a single class: many resamples
    # contain only the unanimous items and are undefined.
    counts = [[3, 0]] * 3 + [[2, 1]]
    res = krippendorff_alpha(counts, n_bootstrap=200, rng=0)
    assert 0 < res.n_bootstrap_undefined < 200
    assert np.isfinite(res.ci_low) and np.isfinite(res.ci_high)


def test_pairwise_undefined_and_sparse_pairs():
    matrix = np.array([[0, 0, 1], [0, 0, 0], [0, 0, 1], [0, 0, 0], [0, -1, 1]])
    with pytest.warns(UndefinedAgreementWarning, match="1 of 3 annotator pairs"):
        res = pairwise_cohen_kappa(matrix, min_overlap=4, n_bootstrap=0)
    assert np.isnan(res.kappa[0, 1])  # both always class 0
    assert res.n_pairs_undefined == 1 and res.n_pairs == 2
    assert res.overlap[0, 2] == 5 and res.overlap[1, 2] == 4
    sparse = pairwise_cohen_kappa(matrix, min_overlap=5, n_bootstrap=0)
    assert np.isnan(sparse.kappa[1, 2]) and sparse.overlap[1, 2] == 4
    with pytest.warns(UndefinedAgreementWarning, match="no annotator pair"):
        none = pairwise_cohen_kappa(matrix, min_overlap=50, n_bootstrap=10)
    assert none.n_pairs == 0 and np.isnan(none.mean_weighted) and np.isnan(none.weighted_ci_low)


@pytest.mark.parametrize(
    ("counts", "match"),
    [
        ([[1, -1]], "non-negative; row 0, column 1"),
        ([[1.5, 1]], "whole counts; row 0"),
        ([[np.nan, 1]], "NaN"),
        ([1, 2, 3], "two-dimensional"),
        ([[1, 2], [1]], "ragged"),
    ],
)
def test_bad_counts_name_the_argument(counts, match):
    for func in (krippendorff_alpha, fleiss_kappa):
        with pytest.raises(StatsInputError, match=match):
            func(counts)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_bootstrap": -1}, "`n_bootstrap`"),
        ({"n_bootstrap": 2.5}, "`n_bootstrap`"),
        ({"n_bootstrap": True}, "`n_bootstrap`"),
        ({"confidence": 1.0}, "`confidence`"),
        ({"confidence": 0}, "`confidence`"),
        ({"rng": "seed"}, "`rng`"),
        ({"interval": "bca"}, "`interval`"),
    ],
)
def test_bad_options_name_the_argument(kwargs, match):
    for func in (krippendorff_alpha, fleiss_kappa, pairwise_cohen_kappa):
        data = [[0, 1], [1, 1]] if func is pairwise_cohen_kappa else [[1, 2]]
        with pytest.raises(StatsInputError, match=match):
            func(data, **kwargs)


@pytest.mark.parametrize(
    ("matrix", "match"),
    [
        ([[0, -2]], "row 0, rater 1"),
        ([[0, 1.5]], "row 0, rater 1"),
        ([[-1, -1]], "every entry is missing"),
        ([0, 1], "2-D"),
        ([["a", "b"]], "class indices"),
    ],
)
def test_bad_rater_matrix(matrix, match):
    with pytest.raises(StatsInputError, match=match):
        pairwise_cohen_kappa(matrix)


def test_pairwise_refuses_label_counts():
    counts = annotations_from_wide(KRIPPENDORFF_2011.T).counts()
    with pytest.raises(StatsInputError, match="label-count matrix"):
        pairwise_cohen_kappa(counts)


def test_bad_min_overlap():
    with pytest.raises(StatsInputError, match="`min_overlap`"):
        pairwise_cohen_kappa([[0, 1]], min_overlap=0)


# ---------------------------------------------------------------------------
# agreement_report(): all three at once


def test_agreement_with_annotations_and_with_counts():
    ann = annotations_from_wide(KRIPPENDORFF_2011.T)
    report = agreement_report(ann, n_bootstrap=100, n_bootstrap_pairwise=20, min_overlap=5, rng=0)
    assert report.krippendorff_alpha.value == pytest.approx(0.743, abs=5e-4)
    assert report.fleiss_kappa.value == pytest.approx(0.76117, abs=5e-6)
    assert report.pairwise is not None
    assert report.pairwise.annotators == (0, 1, 2, 3)
    assert report.pairwise.overlap[0, 1] == 9
    counts_only = agreement_report(ann.counts(), n_bootstrap=100, rng=0)
    assert counts_only.pairwise is None
    assert counts_only.krippendorff_alpha == report.krippendorff_alpha  # same rng stream


# ---------------------------------------------------------------------------
# real data


@pytest.mark.shared
def test_dog_crowd_labels_match_reference_libraries(datasets_dir):
    # Zheng et al. (2017) "dog": 807 items × 10 workers' labels, 4 breeds, 109 workers.
    frame = pd.read_csv(datasets_dir / "truth_inference_zheng2017" / "datasets" / "dog" / "answer.csv")
    ann = annotations_from_records(frame, item="question", annotator="worker", label="answer")
    counts = ann.counts().counts
    assert counts.shape == (807, 4) and set(counts.sum(axis=1)) == {10}
    report = agreement_report(ann, n_bootstrap=200, n_bootstrap_pairwise=20, rng=0)
    assert report.fleiss_kappa.value == pytest.approx(sm_fleiss_kappa(counts), rel=1e-12)
    assert report.krippendorff_alpha.value == pytest.approx(
        alpha_by_value_pairs(ann.matrix()), rel=1e-9)
    pw = report.pairwise
    matrix = ann.matrix()
    a, b = np.nonzero(np.triu(pw.overlap >= pw.min_overlap, k=1))
    assert a.size == pw.n_pairs + pw.n_pairs_undefined > 0
    for i, j in zip(a, b, strict=True):
        shared = (matrix[:, i] >= 0) & (matrix[:, j] >= 0)
        expected = cohen_kappa_score(matrix[shared, i], matrix[shared, j])
        assert pw.kappa[i, j] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for coef in (report.krippendorff_alpha, report.fleiss_kappa):
        assert coef.ci_low < coef.value < coef.ci_high


def test_the_subpackage_is_not_shadowed_and_the_old_call_is_deprecated():
    import auditor.stats
    import auditor.stats.agreement as sub

    assert isinstance(auditor.stats.agreement, type(importlib)) and sub is auditor.stats.agreement
    assert sub.krippendorff_alpha is krippendorff_alpha
    counts = _structured_counts(2, n=40, k=3)
    with pytest.warns(DeprecationWarning, match="agreement_report"):
        old = auditor.stats.agreement(counts, n_bootstrap=20, rng=0)
    new = agreement_report(counts, n_bootstrap=20, rng=0)
    assert old.krippendorff_alpha.value == new.krippendorff_alpha.value
    assert (old.fleiss_kappa.ci_low, old.fleiss_kappa.ci_high) == (new.fleiss_kappa.ci_low, new.fleiss_kappa.ci_high)
