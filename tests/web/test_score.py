"""``POST /api/score`` answers Scoracle's documented examples with Scoracle's shapes,
within its documented bounds, checked before any work."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest

from auditor.web.score import MAX_BODY_BYTES, MAX_CLASSES, MAX_COUNT, MAX_METRICS, MAX_ROWS
from tests.web.conftest import make_tenant


@pytest.fixture(autouse=True)
def anonymous(app):
    """Scoracle's clients send no credentials: these tests open the endpoint as
    ``AUDITOR_SCORE_ANONYMOUS=true`` does (it is closed by default)."""
    app.config["AUDITOR_SCORE_ANONYMOUS"] = True
    yield
    app.config["AUDITOR_SCORE_ANONYMOUS"] = False


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


def test_closed_to_anonymous_callers_by_default(app, client):
    app.config["AUDITOR_SCORE_ANONYMOUS"] = False
    body = {"metrics": ["accuracy"], "labelCounts": [[1, 3], [4, 0]]}
    r = client.post("/api/score", json=body)
    assert r.status_code == 401 and r.get_json()[0]["error"] == "Unauthorized"
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    tenant = make_tenant(app)
    r = client.post("/api/score", json=body, headers=tenant.auth())
    assert r.status_code == 200 and r.get_json()[0]["metric"] == "accuracy"


def _largest(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, MAX_COUNT + 1, size=(MAX_ROWS, MAX_CLASSES)).tolist()


@pytest.mark.parametrize(("body", "names"), [
    ({"metrics": ["accuracy"], "labelCounts": [[1, 2]] * (MAX_ROWS + 1)}, f"at most {MAX_ROWS} rows"),
    ({"metrics": ["accuracy"], "labelCounts": [[1] * (MAX_CLASSES + 1)]}, "labelCounts[0] has"),
    ({"metrics": ["accuracy"], "labelCounts": [[1, 2], [3, MAX_COUNT + 1]]}, "labelCounts[1][1]"),
    ({"metrics": ["accuracy"], "labelCounts": [[1, 2 ** 70]]}, "labelCounts[0][1]"),
    ({"metrics": ["accuracy"] * (MAX_METRICS + 1), "labelCounts": [[1, 2]]}, f"at most {MAX_METRICS} metrics"),
])
def test_beyond_the_documented_bounds_is_a_fast_400(client, body, names):
    t0 = time.perf_counter()
    r = client.post("/api/score", json=body)
    elapsed = time.perf_counter() - t0
    assert r.status_code == 400, r.get_data(as_text=True)[:300]
    entry = next(e for e in r.get_json() if e["error"] == "Too Large")
    assert names in entry["message"]
    assert elapsed < 5  # generous: the bench measures the real figure (under 100 ms)


def test_a_body_over_the_limit_is_a_413_before_it_is_read(client):
    rows = json.dumps({"metrics": ["accuracy"], "labelCounts": [[1, 2]] * (MAX_BODY_BYTES // 6)}).encode()
    assert len(rows) > MAX_BODY_BYTES
    r = client.post("/api/score", data=rows, content_type="application/json")
    assert r.status_code == 413 and r.get_json()[0]["error"] == "Too Large"
    # Chunked, without a Content-Length: the server stops reading past the limit.
    r = client.post("/api/score", input_stream=io.BytesIO(rows), content_type="application/json",
                    headers={"Transfer-Encoding": "chunked"}, environ_overrides={"wsgi.input_terminated": True})
    assert r.status_code == 413


def test_the_largest_legal_body_is_scored(client):
    body = {"metrics": ["accuracy", "balanced accuracy", "f1 (macro)", "cross entropy (soft labels)"],
            "labelCounts": _largest()}
    r = client.post("/api/score", json=body)
    assert r.status_code == 200
    scores = [e["score"] for e in r.get_json()]
    assert all(isinstance(x, float) for x in scores)
    assert 0 < scores[0] <= 1 and 0 < scores[1] <= 1 and 0 < scores[2] <= 1 and scores[3] > 0


def test_f1_on_extreme_counts_is_finite():
    """A 14×20 matrix of counts up to 1000 raised OverflowError in scipy's binomial pmf
    (Boost's incomplete-beta derivative) inside F1 (macro)."""
    from auditor.stats.best import best_performance

    counts = np.random.default_rng(15).integers(0, 1001, size=(14, 20))
    res = best_performance(counts, metrics=["f1 (macro)", "accuracy"], rng=0)
    assert 0 < res.scores["f1 (macro)"] <= 1 and 0 < res.scores["accuracy"] <= 1
