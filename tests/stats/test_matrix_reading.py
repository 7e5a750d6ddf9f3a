"""A bare matrix is a rater matrix or label counts: said by the caller, or decided only
where one reading fits.

The survey-equivalence functions read a bare array as item × rater class codes. A count
matrix handed to them the same way (ChaosNLI MNLI: 3 columns of counts up to 100) used to
be read as 100 classes rated by 3 raters, and ran for minutes towards a 3-point curve. Such
a matrix is refused with an error naming both readings and how to choose; rater matrices
that cannot be counts (missing ratings, fewer classes than raters, ``n_labels`` other than
the number of columns) keep working, and the two ways of saying what a matrix is
(``matrix=`` and the typed inputs) give the same numbers.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.stats import (
    LabelCounts,
    StatsInputError,
    annotations_from_wide,
    calibrate_probabilities,
    classifier_score,
    expert_equivalence,
    fleiss_kappa,
    plan_equivalence,
    power_curve,
    survey_equivalence,
)

CURVE = dict(combiner="frequency", scorer="cross_entropy", n_bootstrap=20, rng=3)


def _label_counts(counts: np.ndarray) -> LabelCounts:
    return LabelCounts(counts, tuple(range(counts.shape[1])), tuple(range(counts.shape[0])))


def _soft(n_items: int, n_labels: int) -> np.ndarray:
    return np.random.default_rng(1).dirichlet(np.ones(n_labels), n_items)


def _entry_points(ratings, n_classes=None, **kw):
    """Every public function that reads a bare ratings matrix as raters or as counts (the
    predictions have ``n_classes`` columns, by default one per column of ``ratings``)."""
    n, cols = np.asarray(ratings).shape
    cols = cols if n_classes is None else n_classes
    return {
        "power_curve": lambda: power_curve(ratings, **CURVE, **kw),
        "survey_equivalence": lambda: survey_equivalence(ratings, _soft(n, cols), **CURVE, **kw),
        "classifier_score": lambda: classifier_score(ratings, _soft(n, cols), scorer="cross_entropy",
                                                     n_bootstrap=20, rng=3, **kw),
        "expert_equivalence ratings": lambda: expert_equivalence(
            ratings, np.zeros((n, 2), dtype=int), combiner="frequency", scorer="agreement", n_bootstrap=5, **kw),
        "expert_equivalence reference": lambda: expert_equivalence(
            np.zeros((n, 2), dtype=int), ratings, combiner="frequency", scorer="agreement", n_bootstrap=5, **kw),
        "power_curve reference": lambda: power_curve(np.zeros((n, 2), dtype=int), reference=ratings, **CURVE, **kw),
        "calibrate_probabilities": lambda: calibrate_probabilities(ratings, _soft(n, cols), **kw),
        "plan_equivalence": lambda: plan_equivalence(ratings, _soft(n, cols), width=5.0, combiner="frequency",
                                                     scorer="cross_entropy", n_bootstrap=50, n_items=[40], rng=3,
                                                     **kw),
    }


@pytest.fixture(scope="module")
def mnli_counts(datasets_dir) -> np.ndarray:
    path = datasets_dir / "chaosnli" / "chaosNLI_mnli_m.jsonl"
    with open(path) as f:
        return np.array([json.loads(line)["label_count"] for line in f if line.strip()])


def test_chaosnli_counts_as_a_bare_matrix_are_refused_naming_both_readings(mnli_counts):
    assert mnli_counts.shape == (1599, 3) and mnli_counts.sum(axis=1).min() == 100
    with pytest.raises(StatsInputError) as err:
        power_curve(mnli_counts, combiner="abc", scorer="cross_entropy")
    message = str(err.value)
    assert "`ratings` is ambiguous" in message
    assert "1599 items × 3 raters, class codes of 100 classes" in message
    assert "1599 items × 3 classes, 100 labels per item" in message
    for way in ("LabelCounts(counts, labels, items)", "matrix='counts'", "annotations_from_wide(matrix)",
                "matrix='raters'"):
        assert way in message


def test_chaosnli_counts_said_to_be_counts_give_the_label_counts_curve(mnli_counts):
    said = power_curve(mnli_counts, combiner="abc", scorer="cross_entropy", n_bootstrap=20, rng=0, matrix="counts")
    typed = power_curve(_label_counts(mnli_counts), combiner="abc", scorer="cross_entropy", n_bootstrap=20, rng=0)
    assert said.k_max == 99 and len(said.k) == typed.k.shape[0] > 3
    np.testing.assert_array_equal(said.mean, typed.mean)
    np.testing.assert_array_equal(said.replicates, typed.replicates)


def _ambiguous() -> np.ndarray:
    """Counts of 3 classes, 5 labels per item: read as raters, 6 classes and 3 raters."""
    rng = np.random.default_rng(0)
    return rng.multinomial(5, [0.6, 0.3, 0.1], size=40)


@pytest.mark.parametrize("entry", list(_entry_points(_ambiguous())))
def test_every_entry_point_refuses_an_ambiguous_bare_matrix(entry):
    with pytest.raises(StatsInputError, match=r"is ambiguous.*rater matrix.*label counts"):
        _entry_points(_ambiguous())[entry]()


@pytest.mark.parametrize("entry", list(_entry_points(_ambiguous())))
def test_every_entry_point_refuses_it_as_a_frame_too(entry):
    frame = pd.DataFrame(_ambiguous(), columns=["a", "b", "c"])
    with pytest.raises(StatsInputError, match="is ambiguous"):
        _entry_points(frame)[entry]()


@pytest.mark.parametrize("entry", list(_entry_points(_ambiguous())))
def test_every_entry_point_takes_the_matrix_once_told(entry):
    counts = _ambiguous()
    if entry != "calibrate_probabilities":
        _entry_points(counts, counts.max() + 1, matrix="raters")[entry]()  # 6 classes, 3 raters
    if not entry.startswith("expert") and entry != "power_curve reference":
        _entry_points(counts, matrix="counts")[entry]()


def test_counts_said_or_typed_give_the_same_numbers():
    counts = _ambiguous()
    pred = _soft(counts.shape[0], 3)
    said = survey_equivalence(counts, pred, **CURVE, matrix="counts")
    typed = survey_equivalence(_label_counts(counts), pred, **CURVE)
    np.testing.assert_array_equal(said.curve.mean, typed.curve.mean)
    assert said.value == typed.value
    np.testing.assert_array_equal(said.replicates, typed.replicates)
    np.testing.assert_array_equal(calibrate_probabilities(counts, pred, matrix="counts"),
                                  calibrate_probabilities(_label_counts(counts), pred))


def _rater_matrix(rng, n_items, n_raters, n_classes, missing=0.0):
    codes = rng.integers(0, n_classes, (n_items, n_raters))
    codes[:, :2] = rng.integers(0, n_classes, (n_items, 1))  # two raters on every item
    codes[:, 2:][rng.random((n_items, n_raters - 2)) < missing] = -1
    return codes


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_raters=st.integers(3, 8), n_classes=st.integers(2, 8),
       missing=st.sampled_from([0.0, 0.3]), give_n_labels=st.booleans())
def test_rater_matrices_read_as_raters_unless_they_read_as_counts_too(seed, n_raters, n_classes, missing,
                                                                      give_n_labels):
    """A rater matrix that cannot be counts (a missing rating, every code below the number
    of columns, or ``n_labels`` other than it) works bare and means what its Annotations
    mean; one that could be counts is refused, and means the same once said to be raters."""
    rng = np.random.default_rng(seed)
    codes = _rater_matrix(rng, 30, n_raters, n_classes, missing)
    n_labels = n_classes if give_n_labels else None
    cannot_be_counts = (codes < 0).any() or codes.max() < n_raters or n_labels not in (None, n_raters)
    classes = tuple(range(n_labels or int(codes.max()) + 1))
    typed = power_curve(annotations_from_wide(codes, labels=classes), **CURVE)
    if cannot_be_counts:
        bare = power_curve(codes, **CURVE, n_labels=n_labels)
    else:
        with pytest.raises(StatsInputError, match="is ambiguous"):
            power_curve(codes, **CURVE, n_labels=n_labels)
        bare = power_curve(codes, **CURVE, n_labels=n_labels, matrix="raters")
    assert bare.n_items.tolist() == typed.n_items.tolist()
    np.testing.assert_allclose(bare.mean, typed.mean, rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_classes=st.integers(2, 6), per_item=st.integers(2, 30))
def test_counts_with_more_labels_per_item_than_classes_are_never_read_as_raters(seed, n_classes, per_item):
    """Items with at least as many labels as classes: some count reaches the number of
    columns, so the bare matrix is refused, and said to be counts it is the LabelCounts."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(per_item, rng.dirichlet(np.ones(n_classes)), size=25)
    counts[0] = 0
    counts[0, 0] = max(per_item, n_classes)  # at least one count as large as the columns
    with pytest.raises(StatsInputError, match="is ambiguous"):
        power_curve(counts, **CURVE)
    np.testing.assert_array_equal(power_curve(counts, **CURVE, matrix="counts").mean,
                                  power_curve(_label_counts(counts), **CURVE).mean)


def test_a_typed_input_contradicted_by_the_keyword_is_refused():
    counts = _ambiguous()
    with pytest.raises(StatsInputError, match="LabelCounts, not what `matrix='raters'` says"):
        power_curve(_label_counts(counts), **CURVE, matrix="raters")
    with pytest.raises(StatsInputError, match="Annotations, not what `matrix='counts'` says"):
        power_curve(annotations_from_wide(counts), **CURVE, matrix="counts")
    with pytest.raises(StatsInputError, match=r"`matrix` must be one of \['auto', 'raters', 'counts'\]"):
        power_curve(counts, **CURVE, matrix="wide")


@pytest.mark.parametrize("missing", [-1, np.nan])
def test_count_functions_given_a_rater_matrix_with_missing_ratings_say_how_to_pass_it(missing):
    ratings = np.array([[0, 1, missing], [1, 1, 0]], dtype=float)
    with pytest.raises(StatsInputError, match=r"row 0, column 2.*annotations_from_wide\(matrix\)"):
        fleiss_kappa(ratings)
