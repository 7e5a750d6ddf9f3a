"""The function behind ``POST /api/score``: Scoracle's request and response shapes."""

from __future__ import annotations

import json

import pytest

from auditor.scoracle import ScoreRequestError, parse_score_request, scoracle_score
from auditor.stats import (
    BEST_METRICS,
    StatsInputError,
    best_performance,
)


def test_response_has_exactly_the_scoracle_shape_and_order():
    body = {"metrics": ["f1 (macro)", "accuracy"], "labelCounts": [[1, 3], [4, 0]]}
    out = scoracle_score(body)
    assert [list(entry) for entry in out] == [["metric", "score"], ["metric", "score"]]
    assert [entry["metric"] for entry in out] == ["f1 (macro)", "accuracy"]
    assert all(type(entry["score"]) is float for entry in out)
    # the published response for this body (Monte Carlo): 0.8878 and 0.84857
    assert out[1]["score"] == pytest.approx(0.8878, abs=0.005)
    assert out[0]["score"] == pytest.approx(0.8485666666666668, abs=0.005)
    json.dumps(out)  # serialisable as is


def test_response_matches_best_performance_and_repeats_requested_metrics():
    counts = [[3, 2], [0, 5], [1, 1], [4, 0]]
    out = scoracle_score({"labelCounts": counts, "metrics": [*BEST_METRICS, "accuracy"]})
    res = best_performance(counts, rng=0)
    assert [e["metric"] for e in out] == [*BEST_METRICS, "accuracy"]
    assert [e["score"] for e in out] == [res.scores[m] for m in (*BEST_METRICS, "accuracy")]


def test_empty_metric_list_answers_an_empty_list():
    assert scoracle_score({"labelCounts": [[1, 2]], "metrics": []}) == []


def test_parse_returns_counts_and_metrics():
    counts, metrics = parse_score_request({"labelCounts": [[1, 2], [0, 3]], "metrics": ["accuracy"]})
    assert counts.tolist() == [[1, 2], [0, 3]] and metrics == ["accuracy"]


def _errors(body):
    with pytest.raises(ScoreRequestError) as err:
        scoracle_score(body)
    assert isinstance(err.value, StatsInputError)
    return err.value.errors


@pytest.mark.parametrize(("body", "kind", "message_start"), [
    # Scoracle's own error objects (allenai/scruples demos/scoracle/app.py)
    (None, "No JSON", "Requests to this API endpoint must contain JSON."),
    ({"metrics": ["accuracy"]}, "Missing Key", "Please include \"labelCounts\" in your request."),
    ({"labelCounts": [[1, 0]]}, "Missing Key", "Please include \"metrics\" in your request."),
    ({"labelCounts": "foo", "metrics": ["accuracy"]}, "Wrong Type", "labelCounts must be an array."),
    ({"labelCounts": [[0, 1], None], "metrics": ["accuracy"]}, "Wrong Type",
     "labelCounts must be an array of arrays"),
    ({"labelCounts": [[0, 1.5]], "metrics": ["accuracy"]}, "Wrong Type",
     "labelCounts must be an array of arrays of integers"),
    ({"labelCounts": [[0, True]], "metrics": ["accuracy"]}, "Wrong Type",
     "labelCounts must be an array of arrays of integers"),
    ({"labelCounts": [[0, -1]], "metrics": ["accuracy"]}, "Wrong Value",
     "labelCounts must have only nonnegative entries"),
    ({"labelCounts": [], "metrics": ["accuracy"]}, "Bad List Length", "labelCounts must be non-empty."),
    ({"labelCounts": [[]], "metrics": ["accuracy"]}, "Bad List Length",
     "The arrays in labelCounts must be non-empty."),
    ({"labelCounts": [[1, 2], [1]], "metrics": ["accuracy"]}, "Bad List Length",
     "Each array in labelCounts must have the same length"),
    ({"labelCounts": [[0, 0]], "metrics": ["accuracy"]}, "Wrong Value",
     "labelCounts must contain at least one annotation"),
    ({"labelCounts": [[1, 2]], "metrics": "accuracy"}, "Wrong Type", "metrics must be an array."),
    ({"labelCounts": [[1, 2]], "metrics": [1]}, "Wrong Type", "metrics must be an array of strings"),
    ({"labelCounts": [[1, 2]], "metrics": ["accuracy", "auc"]}, "Bad Metric",
     "Unsupported metric found in metrics"),
])
def test_bad_bodies_get_scoracles_error_objects(body, kind, message_start):
    errors = _errors(body)
    assert len(errors) == 1
    assert errors[0]["error"] == kind
    assert errors[0]["message"].startswith(message_start)


@pytest.mark.parametrize(("body", "where"), [
    ({"labelCounts": [[1, 2], [3, 0.5]], "metrics": ["accuracy"]}, "labelCounts[1][1]"),
    ({"labelCounts": [[1, 2], [3, -4]], "metrics": ["accuracy"]}, "labelCounts[1][1]"),
    ({"labelCounts": [[1, 2], [3, 4], [5]], "metrics": ["accuracy"]}, "labelCounts[2]"),
    ({"labelCounts": [[1, 2]], "metrics": ["accuracy", "auc"]}, "metrics[1]"),
])
def test_error_messages_name_the_entry(body, where):
    assert where in _errors(body)[0]["message"]


def test_unexpected_keys_are_reported_beside_other_errors():
    errors = _errors({"foo": "bar", "labelCounts": [[1, 0], [0, 1]], "metrics": ["nope"]})
    assert [e["error"] for e in errors] == ["Unexpected Key", "Bad Metric"]
    assert errors[0]["message"].startswith(
        "The request object only accepts the \"labelCounts\" and \"metrics\" keys")
    assert "foo" in errors[0]["message"]


def test_a_body_that_is_not_an_object_is_refused():
    assert _errors([[1, 2]])[0]["error"] == "Wrong Type"
