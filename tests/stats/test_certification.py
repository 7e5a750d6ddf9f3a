"""Certification bounds: Xu, Walder & Xu, "Humanly Certifying Superhuman Classifiers"."""

from __future__ import annotations

import gzip
import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.stats import (
    StatsInputError,
    annotations_from_records,
    annotations_from_wide,
    certify,
    confidence,
    confidence_score,
    counts_from_records,
    lower_bound,
    upper_bounds,
)

# --- Table 4 of the paper ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "lower", "upper", "n", "hms", "oms"),
    [
        ("StructBERT SST-2", 0.971, 0.939, 1821, 0.4730, 0.6208),
        ("GPT SNLI", 0.899, 0.879, 10000, 0.8482, 0.9267),
    ],
)
def test_reproduces_table4(name, lower, upper, n, hms, oms):
    assert confidence_score(lower, upper, n, method="hms") == pytest.approx(hms, abs=5e-5)
    assert confidence_score(lower, upper, n, method="oms") == pytest.approx(oms, abs=5e-5)


def test_sembert_snli_reaches_the_true_feasible_optimum():
    # The paper prints 0.9999 for OMS: its 100-step gradient ascent stopped short.
    assert confidence_score(0.919, 0.879, 10000, method="hms") == pytest.approx(0.9997, abs=5e-5)
    oms = confidence_score(0.919, 0.879, 10000, method="oms")
    assert oms >= 0.9999
    assert oms == pytest.approx(0.999996, abs=5e-7)


@pytest.mark.parametrize("method", ["hms", "oms"])
def test_bert_large_sst2_is_not_certified(method):
    # Table 4 reports "< 0"; unconstrained gradient ascent would claim 0.99.
    c = confidence(0.949, 0.939, 1821, method=method)
    assert c.score < 0
    assert c.feasible  # L > U, yet the sample is too small to certify


def test_oms_stays_in_the_feasible_interval():
    c = confidence(0.949, 0.939, 1821, method="oms")
    assert 0 <= c.t_u <= 0.949**2 - 0.939**2 + 1e-15
    assert c.t_l >= -1e-12


def test_no_feasible_split_is_minus_one():
    for method in ("hms", "oms"):
        c = confidence(0.85, 0.9, 1000, method=method)
        assert c.score == -1.0 and not c.feasible and math.isnan(c.t_u)
        # tau eats the margin
        assert confidence_score(0.95, 0.9, 1000, tau=0.06, method=method) == -1.0


@settings(max_examples=200, deadline=None)
@given(
    upper=st.floats(0.3, 0.99),
    margin=st.floats(1e-4, 0.3),
    n=st.integers(10, 10**6),
    n_lower=st.integers(10, 10**6),
)
def test_oms_is_the_feasible_maximum(upper, margin, n, n_lower):
    lower = min(upper + margin, 1.0)
    if lower <= upper:
        return
    oms = confidence(lower, upper, n, n_lower=n_lower, method="oms")
    hms = confidence(lower, upper, n, n_lower=n_lower, method="hms")
    assert oms.score >= hms.score - 1e-12
    hi = lower**2 - upper**2
    grid = np.linspace(0, hi, 20001)
    t_l = lower - np.sqrt(grid + upper**2)
    s = 1 - np.exp(-2 * n * grid**2) - np.exp(-2 * n_lower * t_l**2)
    assert oms.score >= s.max() - 1e-9
    assert oms.score <= 1.0
    assert 0 <= oms.t_u <= hi * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(upper=st.floats(0.3, 0.9), margin=st.floats(1e-3, 0.09), n=st.integers(100, 10**5))
def test_confidence_grows_with_items_and_margin(upper, margin, n):
    lower = upper + margin
    s = confidence_score(lower, upper, n)
    assert confidence_score(lower, upper, 2 * n) >= s - 1e-12
    assert confidence_score(min(lower + 0.005, 1.0), upper, n) >= s - 1e-12


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(lower=1.2, upper=0.9, n=10), "lower"),
        (dict(lower=0.9, upper=float("nan"), n=10), "upper"),
        (dict(lower=0.9, upper=0.8, n=0), "n"),
        (dict(lower=0.9, upper=0.8, n=10, method="gd"), "method"),
        (dict(lower=0.9, upper=0.8, n=10, tau=-0.1), "tau"),
        (dict(lower=0.9, upper=0.8, n=10, n_lower=2.5), "n_lower"),
    ],
)
def test_confidence_rejects_bad_arguments(kwargs, match):
    with pytest.raises(StatsInputError, match=match):
        confidence(**kwargs)


# --- upper bounds --------------------------------------------------------------------


def _pairwise_bounds(matrix: np.ndarray) -> tuple[float, float]:
    """The paper's eqs. (2) and (8) computed literally from an item × annotator matrix."""
    k = matrix.shape[1]
    total_t = total_e = 0.0
    for i, j in itertools.product(range(k), repeat=2):
        p = float((matrix[:, i] == matrix[:, j]).mean())
        total_t += p
        if i != j:
            total_e += p
    return math.sqrt(total_t / k**2), math.sqrt(total_e / (k * (k - 1)))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    k=st.integers(2, 7),
    n_labels=st.integers(2, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_upper_bounds_equal_the_papers_pairwise_formulas(n, k, n_labels, seed):
    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, n_labels, size=(n, k))
    ub = upper_bounds(annotations_from_wide(matrix, labels=list(range(n_labels))).counts())
    u_t, u_e = _pairwise_bounds(matrix)
    assert ub.theoretical == pytest.approx(u_t, abs=1e-12)
    assert ub.empirical == pytest.approx(u_e, abs=1e-12)
    assert ub.empirical <= ub.theoretical + 1e-12
    assert ub.n_items == n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=3, max_size=3), min_size=1, max_size=30),
       st.permutations([0, 1, 2]))
def test_upper_bounds_invariant_to_label_and_item_order(rows, perm):
    counts = np.array(rows)
    if (counts.sum(axis=1) == 0).all():
        return
    a = upper_bounds(counts)
    b = upper_bounds(counts[::-1][:, list(perm)])
    assert a.theoretical == pytest.approx(b.theoretical)
    assert (math.isnan(a.empirical) and math.isnan(b.empirical)) or a.empirical == pytest.approx(b.empirical)


def test_upper_bounds_per_item_form_with_varying_label_counts():
    counts = np.array([[2, 0], [1, 1, ], [3, 0], [0, 1], [0, 0]])
    ub = upper_bounds(counts)
    x_t = [1, 0.5, 1, 1]
    x_e = [1, 0, 1]
    assert ub.theoretical == pytest.approx(math.sqrt(np.mean(x_t)))
    assert ub.empirical == pytest.approx(math.sqrt(np.mean(x_e)))
    assert (ub.n_items, ub.n_items_empirical) == (4, 3)


def test_upper_bounds_with_single_labels_only():
    ub = upper_bounds([[1, 0], [0, 1]])
    assert ub.theoretical == 1.0 and math.isnan(ub.empirical) and ub.n_items_empirical == 0


@pytest.mark.parametrize(
    ("counts", "match"),
    [
        ([], "empty"),
        ([[1, -1]], "non-negative"),
        ([[1.5, 1]], "whole counts"),
        ([[1, float("nan")]], "NaN"),
        ([[True, False]], "booleans"),
        ([[1, 2], [3]], "ragged"),
        ([[0, 0]], "no labeled item"),
        ([1, 2, 3], "two-dimensional"),
    ],
)
def test_upper_bounds_rejects_bad_counts(counts, match):
    with pytest.raises(StatsInputError, match=match):
        upper_bounds(counts)


# --- lower bound ---------------------------------------------------------------------


def test_lower_bound_counts_ties_as_random_tie_break():
    counts = [[3, 0, 0], [1, 1, 0], [1, 1, 1], [0, 0, 2]]
    preds = [0, 1, 2, 0]
    lb = lower_bound(counts, preds)
    assert lb.value == pytest.approx((1 + 0.5 + 1 / 3 + 0) / 4)
    assert lb.n_items == 4


def test_lower_bound_accepts_probabilities_and_skips_unlabeled_items():
    counts = [[2, 0], [0, 0], [0, 3]]
    probs = [[0.9, 0.1], [0.5, 0.5], [0.4, 0.6]]
    lb = lower_bound(counts, probs)
    assert lb.value == 1.0 and lb.n_items == 2


def test_weighted_aggregation():
    ann = annotations_from_records(
        [("i1", "expert", "a"), ("i1", "c1", "b"), ("i1", "c2", "b"),
         ("i2", "expert", "b"), ("i2", "c1", "b"), ("i2", "c2", "a")],
        labels=["a", "b"],
    )
    preds = np.array([0, 1])
    assert lower_bound(ann, preds).value == pytest.approx(0.5)
    assert lower_bound(ann, preds, weights={"expert": 3.0}).value == pytest.approx(1.0)
    assert lower_bound(ann, preds, weights=np.ones(3)).value == pytest.approx(lower_bound(ann, preds).value)
    with pytest.raises(StatsInputError, match="Annotations"):
        lower_bound(ann.counts().counts, preds, weights=np.ones(3))
    with pytest.raises(StatsInputError, match="unknown annotator"):
        lower_bound(ann, preds, weights={"nobody": 1.0})


@pytest.mark.parametrize(
    ("preds", "match"),
    [
        ([0, 1], "2 entries but there are 3 items"),
        ([0, 1, 5], "outside"),
        ([0, 1, float("nan")], "NaN"),
        ([[0.5, 0.6], [1, 0], [0, 1]], "sums to"),
        ([0, 1, 0.5], "integer"),
    ],
)
def test_lower_bound_rejects_bad_predictions(preds, match):
    with pytest.raises(StatsInputError, match=match):
        lower_bound([[1, 0], [0, 2], [1, 1]], preds)


def test_lower_bound_rejects_unknown_aggregation():
    with pytest.raises(StatsInputError, match="aggregation"):
        lower_bound([[1, 0]], [0], aggregation="mean")


# --- certify -------------------------------------------------------------------------


def test_certify_reports_both_bounds_and_methods():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, size=4000)
    labels = np.where(rng.random((4000, 5)) < 0.8, truth[:, None], rng.integers(0, 3, (4000, 5)))
    counts = np.stack([(labels == c).sum(axis=1) for c in range(3)], axis=1)
    preds = np.where(rng.random(4000) < 0.97, truth, (truth + 1) % 3)
    res = certify(counts, preds)
    assert set(res.confidences) == {(b, m) for b in ("theoretical", "empirical") for m in ("hms", "oms")}
    assert res.bound == "theoretical" and res.method == "oms"
    assert res.score == res.confidences[("theoretical", "oms")].score
    assert res.u_e < res.u_t < res.l
    assert res.certified
    assert res.margin_theoretical == pytest.approx(res.l - res.u_t)
    d = res.to_dict()
    json.dumps(d)
    assert d["verdict"] == {"certified": True, "bound": "theoretical", "method": "oms", "score": res.score}
    emp = certify(counts, preds, bound="empirical", method="hms", threshold=0.99)
    assert emp.score == emp.confidences[("empirical", "hms")].score
    assert emp.certified == (emp.score >= 0.99)


def test_certify_with_single_labels_warns_about_empirical_bound():
    with pytest.warns(RuntimeWarning, match="empirical"):
        res = certify([[1, 0], [0, 1]], [0, 1], bound="empirical")
    assert not res.certified


# --- simulations with a known oracle ----------------------------------------------


def _simulate(rng, n_items, n_annotators, n_classes, annotator_acc, model_acc):
    """Annotators and a model with symmetric confusion matrices around a known oracle."""
    truth = rng.integers(0, n_classes, size=n_items)
    acc = np.asarray(annotator_acc)[None, :]
    right = rng.random((n_items, n_annotators)) < acc
    wrong = (truth[:, None] + rng.integers(1, n_classes, size=(n_items, n_annotators))) % n_classes
    labels = np.where(right, truth[:, None], wrong)
    counts = np.stack([(labels == c).sum(axis=1) for c in range(n_classes)], axis=1)
    m_right = rng.random(n_items) < model_acc
    preds = np.where(m_right, truth, (truth + rng.integers(1, n_classes, size=n_items)) % n_classes)
    return counts, preds, truth, labels


@pytest.mark.parametrize("n_annotators", [3, 5, 10])
def test_simulated_bounds_hold(n_annotators):
    rng = np.random.default_rng(n_annotators)
    acc = np.linspace(0.65, 0.9, n_annotators)
    for model_acc in (0.7, 0.85, 0.95):
        counts, preds, truth, labels = _simulate(rng, 20000, n_annotators, 3, acc, model_acc)
        true_avg = float((labels == truth[:, None]).mean())
        true_model = float((preds == truth).mean())
        ub = upper_bounds(counts)
        lb = lower_bound(counts, preds)
        assert ub.theoretical >= true_avg
        assert ub.empirical >= true_avg - 0.01  # an approximation, tight in expectation
        assert lb.value <= true_model + 0.01


@pytest.mark.slow
def test_false_certification_rate_is_at_most_five_percent():
    """Models no better than the average annotator are (almost) never certified."""
    rng = np.random.default_rng(2023)
    certified_t = certified_e = 0
    runs = 400
    for _ in range(runs):
        n_annotators = int(rng.integers(3, 8))
        acc = rng.uniform(0.6, 0.95, size=n_annotators)
        model_acc = float(acc.mean()) - float(rng.uniform(0.0, 0.02))
        n_items = int(rng.integers(200, 3000))
        counts, preds, _, _ = _simulate(rng, n_items, n_annotators, int(rng.integers(2, 5)), acc, model_acc)
        certified_t += certify(counts, preds).certified
        certified_e += certify(counts, preds, bound="empirical").certified
    assert certified_t / runs <= 0.05
    assert certified_e / runs <= 0.05


# --- a real dataset: SNLI test (paper's Table 3) -------------------------------------


def test_snli_test_upper_bounds_match_table3(datasets_dir):
    path = datasets_dir / "snli_1.0_full_dev_test" / "snli_1.0_test.jsonl.gz"
    records = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            records.extend((row["pairID"], k, lab) for k, lab in enumerate(row["annotator_labels"]))
    counts = counts_from_records(records, labels=["entailment", "neutral", "contradiction"])
    ub = upper_bounds(counts)
    assert counts.shape == (10000, 3)
    assert ub.theoretical == pytest.approx(0.9046, abs=5e-5)
    assert ub.empirical == pytest.approx(0.8791, abs=5e-5)
