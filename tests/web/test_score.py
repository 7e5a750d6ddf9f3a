"""``POST /api/score`` answers Scoracle's documented examples with Scoracle's shapes,
within its documented bounds, checked before any work."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from auditor.scoracle import ScoreRequestError, parse_score_request
from auditor.stats.best import BEST_METRICS
from auditor.web.score import (
    MAX_BODY_BYTES,
    MAX_CLASSES,
    MAX_COUNT,
    MAX_METRICS,
    MAX_ROWS,
    REQUEST_SCHEMA,
)
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


_BAD_ENTRY = st.one_of(st.sampled_from([-1, MAX_COUNT + 1, 2 ** 70, True, False, "1", None]),
                       st.floats(0.1, 5.0).filter(lambda x: not x.is_integer()))


@st.composite
def _bodies(draw):
    """A legal body near the documented bounds, then (most of the time) one defect."""
    width = draw(st.sampled_from([1, 2, 3, MAX_CLASSES]))
    n_rows = draw(st.sampled_from([1, 2, 5, MAX_ROWS]))
    rows = [draw(st.lists(st.sampled_from([0, 1, 2, MAX_COUNT]), min_size=width, max_size=width))
            for _ in range(min(n_rows, 5))]
    rows = (rows * (n_rows // len(rows) + 1))[:n_rows]
    body = {"labelCounts": rows, "metrics": draw(st.lists(st.sampled_from(list(BEST_METRICS)),
                                                          max_size=MAX_METRICS))}
    defect = draw(st.sampled_from(["none", "none", "entry", "rows", "width", "zero", "metric", "metrics",
                                   "missing", "extra", "type"]))
    i = draw(st.integers(0, n_rows - 1))
    if defect == "entry":
        rows[i] = list(rows[i])
        rows[i][draw(st.integers(0, width - 1))] = draw(_BAD_ENTRY)
    elif defect == "rows":
        body["labelCounts"] = draw(st.sampled_from([[], rows + [rows[0]] * (MAX_ROWS + 1 - n_rows)]))
    elif defect == "width":
        rows[:] = [[] for _ in rows] if draw(st.booleans()) else [list(r) + [0] * (MAX_CLASSES + 1 - width)
                                                                for r in rows]
    elif defect == "zero":
        rows[:] = [[0] * width for _ in rows]
    elif defect == "metric":
        body["metrics"] = body["metrics"] + [draw(st.sampled_from(["recall", "", 3, None]))]
    elif defect == "metrics":
        body["metrics"] = draw(st.sampled_from([["accuracy"] * (MAX_METRICS + 1), "accuracy", None]))
    elif defect == "missing":
        del body[draw(st.sampled_from(["labelCounts", "metrics"]))]
    elif defect == "extra":
        body["extra"] = 1
    elif defect == "type":
        body["labelCounts"] = draw(st.sampled_from([{}, "x", [1, 2], None, [[1], "x"]]))
    return body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bodies())
def test_the_documented_request_schema_is_what_the_endpoint_accepts(body):
    """The OpenAPI document's request schema and the endpoint's checks are one contract:
    a body passes the checks exactly when the schema accepts it."""
    documented = Draft202012Validator(REQUEST_SCHEMA).is_valid(body)
    try:
        parse_score_request(body, limits=(MAX_ROWS, MAX_CLASSES, MAX_COUNT, MAX_METRICS))
        accepted = True
    except ScoreRequestError:
        accepted = False
    assert accepted == documented, body if len(str(body)) < 2000 else str(body)[:2000]


# --- issue 33, defect 4: the work of a body is capped, and scoring cannot starve the process ---


def _ties(rows: int, seed: int = 0) -> list:
    """Counts of 0 or 1000 over 20 classes: ties, many never-gold classes, F1 (macro)'s costly case."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random((rows, 20)) < 0.5, 0, 1000).tolist()


def test_the_work_of_a_body_is_estimated_and_capped_before_any_is_done(app, client):
    """80 × 20 counts of 0 or 1000 with F1 (macro) took 5 s of CPU (200,000 Monte Carlo
    draws): the work is now estimated from the counts, F1 draws at most what fits, and
    a body estimated above the cap is refused without being scored."""
    from auditor.scoracle import F1_MAX_DRAWS, score_work
    from auditor.web.score import MAX_CELLS

    body = {"labelCounts": _ties(80), "metrics": ["f1 (macro)"]}
    work = score_work(*parse_score_request(body))
    assert work.cells <= MAX_CELLS and work.f1_draws <= F1_MAX_DRAWS
    r = client.post("/api/score", json=body)
    assert r.status_code == 200 and isinstance(r.get_json()[0]["score"], float)
    app.config["SCORE_MAX_CELLS"] = work.cells / 2
    try:
        r = client.post("/api/score", json=body)
    finally:
        del app.config["SCORE_MAX_CELLS"]
    assert r.status_code == 400 and r.get_json()[0]["error"] == "Too Costly", r.get_json()
    # Accuracy on the same counts is cheap and still answered.
    assert client.post("/api/score", json={**body, "metrics": ["accuracy"]}).status_code == 200


@given(st.lists(st.lists(st.sampled_from([0, 1, 2, 10, 1000]), min_size=20, max_size=20), min_size=1,
                max_size=1000).filter(lambda c: any(any(r) for r in c)))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_body_within_the_bounds_is_within_the_work_cap(counts):
    """Within the documented shape bounds (1000 × 20, counts to 1000) the estimate never
    refuses: the cap is there for the work, and F1's draws shrink to fit it."""
    from auditor.scoracle import score_work
    from auditor.web.score import MAX_CELLS

    work = score_work(*parse_score_request({"labelCounts": counts, "metrics": list(BEST_METRICS)}))
    assert work.cells <= MAX_CELLS


def test_scoring_takes_one_slot_per_process_and_one_per_caller(app, client):
    """While a score is computed, a second one by the same caller is a 429 and any other
    beyond the process's slot a 503 (both with Retry-After) instead of a queued thread;
    health checks are answered meanwhile."""
    from auditor.web import score as score_module

    body = {"labelCounts": [[3, 2], [0, 5]], "metrics": ["accuracy"]}
    assert score_module._slots.acquire(blocking=False)  # another request is being scored
    try:
        r = client.post("/api/score", json=body)
        assert r.status_code == 503 and "Retry-After" in r.headers and r.get_json()[0]["error"] == "Busy"
        assert client.get("/healthz").status_code == 200
    finally:
        score_module._slots.release()
    with score_module._in_flight_lock:
        score_module._in_flight.add("addr:127.0.0.1")  # this caller's first score is in flight
    try:
        r = client.post("/api/score", json=body)
        assert r.status_code == 429 and "Retry-After" in r.headers
    finally:
        score_module._in_flight.discard("addr:127.0.0.1")
    assert client.post("/api/score", json=body).status_code == 200
