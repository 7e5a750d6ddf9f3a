"""``POST /api/score`` answers Scoracle's documented examples with Scoracle's shapes."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("counts", "accuracy", "f1"), [
    # The Scoracle API documentation's cURL and HTTPie examples; its numbers are Monte
    # Carlo estimates (10,000 posterior draws), ours exact, hence the tolerance.
    ([[1, 3], [4, 0]], 0.8878, 0.8485666666666668),
    ([[3, 2], [0, 5]], 0.7626, 0.6836),
])
def test_documented_examples(client, counts, accuracy, f1):
    r = client.post("/api/score", json={"metrics": ["accuracy", "f1 (macro)"], "labelCounts": counts})
    assert r.status_code == 200
    assert r.mimetype == "application/json"
    body = r.get_json()
    assert [list(e) for e in body] == [["metric", "score"], ["metric", "score"]]
    assert [e["metric"] for e in body] == ["accuracy", "f1 (macro)"]
    assert body[0]["score"] == pytest.approx(accuracy, abs=0.005)
    assert body[1]["score"] == pytest.approx(f1, abs=0.005)


def test_all_metrics_in_request_order_without_credentials(client):
    metrics = ["cross entropy (soft labels)", "balanced accuracy", "accuracy", "f1 (macro)"]
    r = client.post("/api/score", json={"metrics": metrics, "labelCounts": [[3, 2], [0, 5], [1, 4]]})
    assert r.status_code == 200
    assert [e["metric"] for e in r.get_json()] == metrics
    assert all(isinstance(e["score"], float) for e in r.get_json())


@pytest.mark.parametrize(("kwargs", "error", "names"), [
    ({}, "No JSON", "JSON"),
    ({"data": "not json", "content_type": "application/json"}, "No JSON", "JSON"),
    ({"json": {"labelCounts": [[1, 2]]}}, "Missing Key", "metrics"),
    ({"json": {"metrics": ["accuracy"]}}, "Missing Key", "labelCounts"),
    ({"json": {"metrics": ["accuracy"], "labelCounts": [[1, 2]], "foo": 1}}, "Unexpected Key", "foo"),
    ({"json": {"metrics": ["accuracy"], "labelCounts": [[1, 2], [3]]}}, "Bad List Length", "labelCounts[1]"),
    ({"json": {"metrics": ["accuracy"], "labelCounts": [[1, -2]]}}, "Wrong Value", "labelCounts[0][1]"),
    ({"json": {"metrics": ["accuracy"], "labelCounts": [[1, "2"]]}}, "Wrong Type", "labelCounts[0][1]"),
    ({"json": {"metrics": ["precision"], "labelCounts": [[1, 2]]}}, "Bad Metric", "metrics[0]"),
])
def test_bad_requests_get_scoracle_400s_naming_the_field(client, kwargs, error, names):
    r = client.post("/api/score", **kwargs)
    assert r.status_code == 400
    body = r.get_json()
    assert isinstance(body, list) and body
    entry = next(e for e in body if e["error"] == error)
    assert set(entry) == {"error", "message"}
    assert names in entry["message"]
    assert "Traceback" not in r.get_data(as_text=True)


def test_wrong_method_is_a_json_405(client):
    r = client.get("/api/score")
    assert r.status_code == 405
    assert isinstance(r.get_json(), list)
