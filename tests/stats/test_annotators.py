"""Per-annotator lower bounds, vendor upper bounds and assumption checks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.stats import (
    StatsInputError,
    annotations_from_records,
    annotations_from_wide,
    annotator_lower_bounds,
    certify,
    check_assumptions,
    group_upper_bounds,
    hoeffding_lower,
    upper_bounds,
)


def _loo_brute_force(matrix: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """Each rater's tie-credited agreement with the plurality of the others, by loops."""
    n_items, n_raters = matrix.shape
    total = np.zeros(n_raters)
    n = np.zeros(n_raters, dtype=int)
    for i in range(n_items):
        for r in range(n_raters):
            if matrix[i, r] < 0:
                continue
            others = [matrix[i, s] for s in range(n_raters) if s != r and matrix[i, s] >= 0]
            if not others:
                continue
            votes = np.bincount(others, minlength=n_labels)
            tied = np.flatnonzero(votes == votes.max())
            total[r] += (matrix[i, r] in tied) / len(tied)
            n[r] += 1
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), np.nan), n


@settings(max_examples=50, deadline=None)
@given(n_items=st.integers(1, 25), n_raters=st.integers(2, 6), n_labels=st.integers(2, 4),
       seed=st.integers(0, 2**32 - 1))
def test_leave_one_out_agreement_matches_brute_force(n_items, n_raters, n_labels, seed):
    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, n_labels, size=(n_items, n_raters))
    matrix[rng.random(matrix.shape) < 0.3] = -1
    if (matrix < 0).all():
        return
    ann = annotations_from_wide(matrix, labels=list(range(n_labels)))
    res = annotator_lower_bounds(ann)
    # annotations_from_wide drops raters with no label and renumbers items
    used_items = [i for i in range(n_items) if (matrix[i] >= 0).any()]
    expected, n = _loo_brute_force(matrix[used_items][:, list(ann.annotators)], n_labels)
    np.testing.assert_array_equal(res.n_items, n)
    np.testing.assert_allclose(res.agreement, expected, equal_nan=True)
    ok = n > 0
    assert (res.lower_confidence[ok] <= res.agreement[ok]).all()


def test_hoeffding_lower_bound():
    lo = hoeffding_lower([0.9, 0.9, 0.5], [100, 10000, 0], confidence=0.95)
    assert lo[0] == pytest.approx(0.9 - math.sqrt(math.log(20) / 200))
    assert lo[1] > lo[0]
    assert math.isnan(lo[2])
    assert hoeffding_lower([0.05], [10])[0] == 0.0
    with pytest.raises(StatsInputError, match="confidence"):
        hoeffding_lower([0.5], [10], confidence=1.0)


def test_annotator_records_and_group_bounds():
    records = [
        ("i1", "a", "x"), ("i1", "b", "x"), ("i1", "c", "y"),
        ("i2", "a", "y"), ("i2", "b", "y"), ("i2", "c", "y"),
        ("i3", "a", "x"), ("i3", "c", "x"),
    ]
    ann = annotations_from_records(records, labels=["x", "y"])
    res = annotator_lower_bounds(ann)
    recs = {r["annotator"]: r for r in res.to_records()}
    # on i1 the others of `a` are tied (b says x, c says y): credit 1/2
    assert recs["a"]["agreement"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert recs["c"]["agreement"] == pytest.approx((0 + 1 + 1) / 3)
    groups = group_upper_bounds(ann, {"a": "vendor1", "b": "vendor1", "c": "vendor2"})
    assert set(groups) == {"vendor1", "vendor2"}
    assert groups["vendor1"].theoretical == pytest.approx(1.0)  # a and b always agree
    assert groups["vendor2"].n_items == 3 and math.isnan(groups["vendor2"].empirical)
    sub = ann.subset(["a", "b"]).counts()
    assert upper_bounds(sub).empirical == pytest.approx(1.0)
    with pytest.raises(StatsInputError, match="Annotations"):
        annotator_lower_bounds(np.zeros((2, 2)))


# --- assumption checks ---------------------------------------------------------------


def test_assumption_quantities_by_hand():
    counts = np.array([[3, 1], [0, 4], [2, 2], [0, 0]])
    rep = check_assumptions(counts, np.array([0, 1, 1, 0]), predictions={"m": np.array([0, 1, 1, 0])})
    assert rep.n_gold_items == 3
    # Σ c(c-1) / Σ c(K-1) and Σ c(K-1) / Σ K(K-1) with (c, K) = (3,4), (4,4), (2,4)
    assert rep.theorem1.conditional == pytest.approx(20 / 27)
    assert rep.theorem1.marginal == pytest.approx(27 / 36)
    assert not rep.theorem1.holds
    assert rep.average_annotator_accuracy == pytest.approx((3 / 4 + 1 + 2 / 4) / 3)
    m = rep.models["m"]
    assert m.true_accuracy == 1.0
    # aggregate wrong only on the tied item 3 (weight 1/2), where the model is right
    assert m.weight_a_wrong == pytest.approx(0.5)
    assert m.p_correct_given_a_wrong == 1.0 and m.holds and m.bound_holds
    assert rep.upper_bound_holds


def test_assumption_checks_reject_bad_gold():
    with pytest.raises(StatsInputError, match="no labeled item has a gold label"):
        check_assumptions(np.array([[1, 1]]), np.array([-1]))
    with pytest.raises(StatsInputError, match="one entry per item"):
        check_assumptions(np.array([[1, 1]]), np.array([0, 1]))


def test_assumptions_hold_in_a_simulation_where_they_should():
    rng = np.random.default_rng(5)
    n, k = 5000, 5
    truth = rng.integers(0, 3, n)
    # Items differ in difficulty, so annotators are positively correlated (Theorem 1).
    p_right = np.where(rng.random(n) < 0.7, 0.9, 0.45)
    right = rng.random((n, k)) < p_right[:, None]
    labels = np.where(right, truth[:, None], (truth[:, None] + rng.integers(1, 3, (n, k))) % 3)
    counts = np.stack([(labels == c).sum(1) for c in range(3)], 1)
    model = np.where(rng.random(n) < 0.9, truth, (truth + 1) % 3)
    rep = check_assumptions(counts, truth, predictions={"model": model})
    assert rep.theorem1.holds
    assert rep.theorem1.conditional > rep.theorem1.marginal + 0.02
    assert rep.upper_bound_holds
    assert rep.models["model"].holds and rep.models["model"].bound_holds


# --- real data with independent gold -------------------------------------------------


def test_snow_rte_assumptions(datasets_dir):
    frame = pd.read_csv(datasets_dir / "snow2008_mturk" / "all_collected_data" / "rte.standardized.tsv", sep="\t")
    ann = annotations_from_records(
        frame.rename(columns={"orig_id": "item_id", "!amt_worker_ids": "annotator_id", "response": "label"}),
        labels=[0, 1],
    )
    rep = check_assumptions(ann, dict(zip(frame["orig_id"], frame["gold"], strict=True)))
    assert rep.n_gold_items == 800
    # Snow et al. (2008): individual-label accuracy 0.729 on RTE
    assert rep.average_annotator_accuracy == pytest.approx(0.729, abs=5e-4)
    assert rep.theorem1.holds and rep.upper_bound_holds
    assert rep.upper.theoretical >= rep.average_annotator_accuracy
    bounds = annotator_lower_bounds(ann)
    assert len(bounds.annotators) == 164


def test_dog_assumptions(datasets_dir):
    base = datasets_dir / "truth_inference_zheng2017" / "datasets" / "dog"
    answers = pd.read_csv(base / "answer.csv")
    truth = pd.read_csv(base / "truth.csv")
    ann = annotations_from_records(
        answers.rename(columns={"question": "item_id", "worker": "annotator_id", "answer": "label"}),
        labels=[0, 1, 2, 3],
    )
    rep = check_assumptions(ann, dict(zip(truth["question"], truth["truth"], strict=True)))
    assert rep.n_gold_items == 807
    assert rep.theorem1.holds and rep.upper_bound_holds
    # Single annotators against the others' plurality: errors are shared on this data,
    # so Theorem 3's assumption fails and the leave-one-out "lower bound" overshoots.
    assert not rep.annotators.holds
    assert rep.annotators.lower_bound > rep.annotators.true_accuracy


def test_cifar10h_assumptions_with_models(datasets_dir):
    base = datasets_dir / "cifar10h"
    counts = np.load(base / "cifar10h-counts.npy")
    predictions = {}
    truth = None
    for name in ("densenet-bc-L190-k40", "preresnet-110", "resnet-110"):
        table = np.loadtxt(base / "model_predictions_kerrigan2021" / f"{name}.csv", delimiter=",")
        truth = table[:, 0].astype(int)
        np.testing.assert_array_equal(table[:, 1:11], counts)
        predictions[name] = table[:, 11:21].argmax(axis=1)
    rep = check_assumptions(counts, truth, predictions=predictions)
    assert rep.n_gold_items == 10000
    assert rep.theorem1.holds and rep.upper_bound_holds
    for name, check in rep.models.items():
        assert check.holds and check.bound_holds, name
    # The published model accuracies (datasets README): 0.967, 0.951, 0.939
    assert [round(rep.models[m].true_accuracy, 3) for m in predictions] == [0.967, 0.951, 0.939]
    # No model beats the average CIFAR-10H annotator's upper bound with confidence.
    assert not any(certify(counts, p).certified for p in predictions.values())
