"""/healthz, /readyz, /metrics and request ids, on the session's PostgreSQL and a real Redis.

The metrics are checked against what the database holds (audit runs, alerts) and what
the test sent (imports, rows, requests); the readiness checks against a database that is
unreachable, unmigrated or behind the migrations' head, and a broker that is down.
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from auditor.config import WorkerSettings
from auditor.db import (
    Alert,
    AlertSeverity,
    AuditRun,
    AuditStatus,
    Dataset,
    Workspace,
    make_engine,
    make_session_factory,
    migrate,
)
from auditor.logs import ContextFilter, JsonLogFormatter
from auditor.web import create_app
from auditor.web.metrics import database_families
from tests.web.conftest import REDIS_URL, app_config, make_tenant, seed
from tests.workers.conftest import free_port

pytestmark = pytest.mark.services

TOKEN = "scrape-" + uuid.uuid4().hex
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def samples(client) -> dict[tuple[str, frozenset], float]:
    r = client.get("/metrics", headers=AUTH)
    assert r.status_code == 200, r.get_data(as_text=True)
    assert r.mimetype == "text/plain"
    out = {}
    for family in text_string_to_metric_families(r.get_data(as_text=True)):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(found, name: str, **labels) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def ops_app(pg_engine):
    app = create_app(app_config(pg_engine, AUDITOR_METRICS_TOKEN=TOKEN, METRICS_CACHE_SECONDS=0))
    yield app
    app.extensions["auditor.engine"].dispose()


# --- health and readiness ------------------------------------------------------------------


def test_healthz_and_readyz_answer_ok(ops_app):
    client = ops_app.test_client()
    r = client.get("/healthz")
    assert (r.status_code, r.get_json()) == (200, {"status": "ok"})
    r = client.get("/readyz")
    body = r.get_json()
    assert r.status_code == 200 and body["status"] == "ok", body
    assert set(body["checks"]) == {"database", "migrations", "broker"}
    assert all(c["ok"] for c in body["checks"].values())
    assert body["checks"]["migrations"]["revision"] == ", ".join(sorted(migrate.heads()))
    assert r.headers["Cache-Control"] == "no-store"


def test_probes_need_no_login_and_are_not_rate_limited(ops_app):
    client = ops_app.test_client()
    # No cookie, no token, no CSRF token: a probe is answered many times in a row.
    assert {client.get("/healthz").status_code for _ in range(30)} == {200}
    assert {client.get("/readyz").status_code for _ in range(5)} == {200}


def test_an_unreachable_database_fails_readiness_quickly_without_leaking_the_url(pg_engine):
    port = free_port()  # nothing listens there
    app = create_app({**app_config(pg_engine), "DATABASE_URL": f"postgresql://auditor:s3cr3t-pw@127.0.0.1:{port}/x"})
    client = app.test_client()
    assert client.get("/healthz").status_code == 200  # the process is up: no database touched
    t0 = time.monotonic()
    r = client.get("/readyz")
    assert time.monotonic() - t0 < 5
    body = r.get_json()
    assert r.status_code == 503 and body["status"] == "unavailable"
    assert body["checks"]["database"]["ok"] is False and "unreachable" in body["checks"]["database"]["error"]
    assert body["checks"]["migrations"] == {"ok": False, "error": "not checked: the database did not answer"}
    assert body["checks"]["broker"]["ok"] is True
    text = r.get_data(as_text=True)
    assert "s3cr3t-pw" not in text and str(port) not in text and "auditor:" not in text


def test_a_schema_behind_the_head_or_missing_fails_readiness(pg_engine, pg_database):
    url = pg_database()
    engine = make_engine(url)
    try:
        app = create_app({**app_config(pg_engine), "DATABASE_URL": url.render_as_string(hide_password=False)})
        client = app.test_client()
        r = client.get("/readyz")
        assert r.status_code == 503
        checks = r.get_json()["checks"]
        assert checks["database"]["ok"] is True
        assert checks["migrations"] == {"ok": False, "error": "the database has no schema yet: run 'auditor db upgrade'"}
        migrate.upgrade(engine)
        migrate.downgrade(engine, "-1")
        r = client.get("/readyz")
        checks = r.get_json()["checks"]
        assert r.status_code == 503 and checks["database"]["ok"] and not checks["migrations"]["ok"]
        assert "auditor db upgrade" in checks["migrations"]["error"]
        migrate.upgrade(engine)
        assert client.get("/readyz").status_code == 200
    finally:
        engine.dispose()


def test_a_broker_down_degrades_readiness_and_imports_do_not_wait_for_it(app, pg_engine):
    """Issue 33, defect 8: with Redis down /readyz answered 503 although imports worked, and
    every import waited about 2 s for the broker. Now /readyz is 200 "degraded" naming the
    broker, and imports are acknowledged without waiting: one connection attempt, then the
    process leaves the broker alone for a while (the sweep enqueues the audits later)."""
    port = free_port()
    config = app_config(pg_engine)
    config["CELERY"] = {**config["CELERY"], "broker_url": f"redis://127.0.0.1:{port}/0"}
    down = create_app(config)
    client = down.test_client()
    t0 = time.monotonic()
    r = client.get("/readyz")
    assert time.monotonic() - t0 < 5
    body = r.get_json()
    checks = body["checks"]
    assert r.status_code == 200 and body["status"] == "degraded", body
    assert checks["database"]["ok"] and checks["migrations"]["ok"]
    assert checks["broker"]["ok"] is False and checks["broker"]["error"].startswith("unreachable")
    down.extensions["celery"].set_current()
    try:
        tenant = make_tenant(down)
        ds = client.post("/api/v1/datasets", json={"name": "no-broker", "labels": ["a", "b"]},
                         headers=tenant.auth()).get_json()["id"]
        waits = []
        for k in range(3):
            t0 = time.monotonic()
            r = client.post(f"/api/v1/datasets/{ds}/annotations", headers=tenant.auth(),
                            json={"records": [{"item_id": f"i{k}", "annotator_id": "w", "label": "a"}]})
            waits.append(time.monotonic() - t0)
            assert r.status_code == 202, r.get_json()
        # the first import tries the broker once; the next ones do not try it at all
        assert waits[0] < 1.8 and max(waits[1:]) < 1.0, waits
        with make_session_factory(down.extensions["auditor.engine"])() as db:
            assert db.get(Dataset, ds).data_version == 3  # stored: the sweep audits it later
    finally:
        app.extensions["celery"].set_current()  # the session's app dispatches the other tests' audits
        app.extensions["celery"].set_default()
        down.extensions["auditor.engine"].dispose()


def test_a_hung_dependency_is_given_up_within_the_timeout(pg_engine):
    """A broker that accepts connections and never answers: /readyz still answers within
    its timeout, and a second probe does not start a second hung check."""
    import socket

    from auditor.web.health import CHECK_TIMEOUT

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        config = app_config(pg_engine)
        config["CELERY"] = {**config["CELERY"], "broker_url": f"redis://127.0.0.1:{listener.getsockname()[1]}/0"}
        client = create_app(config).test_client()
        t0 = time.monotonic()
        first = client.get("/readyz")
        elapsed = time.monotonic() - t0
        assert first.status_code == 200 and first.get_json()["status"] == "degraded"
        assert elapsed < CHECK_TIMEOUT + 1.5
        assert first.get_json()["checks"]["broker"]["ok"] is False
        second = client.get("/readyz").get_json()["checks"]["broker"]
        assert second["ok"] is False
        assert any(w in second["error"] for w in ("still waiting", "no answer", "unreachable"))
    finally:
        listener.close()


# --- request ids and log lines ----------------------------------------------------------------


def test_request_id_is_echoed_or_made_and_every_log_line_carries_it(ops_app):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLogFormatter())
    handler.addFilter(ContextFilter())
    requests_log = logging.getLogger("auditor.web.requests")
    requests_log.addHandler(handler)
    old = requests_log.level
    requests_log.setLevel(logging.INFO)
    try:
        client = ops_app.test_client()
        tenant = make_tenant(ops_app)
        r = client.get("/api/v1/me", headers={**tenant.auth(), "X-Request-ID": "trace-42.a:b"})
        assert r.status_code == 200 and r.headers["X-Request-ID"] == "trace-42.a:b"
        made = client.get("/api/v1/me", headers={**tenant.auth(), "X-Request-ID": "bad id\twith spaces"})
        assert re.fullmatch(r"[0-9a-f]{32}", made.headers["X-Request-ID"])
        assert client.get("/nowhere").headers["X-Request-ID"]  # 404s too
    finally:
        requests_log.removeHandler(handler)
        requests_log.setLevel(old)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["request_id"] for line in lines] == ["trace-42.a:b", made.headers["X-Request-ID"],
                                                       lines[2]["request_id"]]
    first = lines[0]
    assert first["logger"] == "auditor.web.requests" and first["level"] == "INFO"
    assert (first["method"], first["path"], first["rule"], first["status"]) == ("GET", "/api/v1/me", "/api/v1/me", 200)
    assert first["duration_ms"] >= 0 and "time" in first and "task_id" not in first
    assert lines[2]["rule"] == "unmatched" and lines[2]["status"] == 404


def test_plain_log_lines_carry_the_request_id():
    from auditor import logs

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.formatter("plain"))
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("auditor.test.plain")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    token = logs.request_id.set("req-7")
    try:
        logger.info("inside %s", "a request")
    finally:
        logs.request_id.reset(token)
        logger.info("outside")
        logger.removeHandler(handler)
    inside, outside = stream.getvalue().splitlines()
    assert inside.endswith("INFO auditor.test.plain: inside a request [request=req-7]")
    assert outside.endswith("INFO auditor.test.plain: outside")
    with pytest.raises(ValueError, match="plain' or 'json"):
        logs.formatter("xml")


# --- /metrics --------------------------------------------------------------------------------


def test_metrics_need_the_token(ops_app, pg_engine):
    client = ops_app.test_client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
    r = client.get("/metrics", headers=AUTH)
    assert r.status_code == 200 and b"auditor_http_request_duration_seconds" in r.data
    closed = create_app(app_config(pg_engine))  # no AUDITOR_METRICS_TOKEN: no /metrics at all
    assert closed.test_client().get("/metrics", headers=AUTH).status_code == 404


def test_metrics_expose_the_series_after_an_import_and_an_audit(ops_app):
    client = ops_app.test_client()
    before = samples(client)
    seeded = seed(ops_app, name="metered")
    ds = seeded.dataset_id
    admin = seeded.tenant.auth()
    # A rejected batch (a label the dataset does not have, on rows 2 and 3): nothing written.
    bad = "item_id,annotator_id,label\ni1,w1,negative\ni2,w1,maybe\ni3,w2,perhaps\n"
    r = client.post(f"/api/v1/datasets/{ds}/annotations", data=bad, headers={**admin, "Content-Type": "text/csv"})
    assert r.status_code == 400 and r.get_json()["error"] == "batch_rejected"
    # One more accepted batch, not yet audited (no worker listens to this app's in-memory broker).
    r = client.post(f"/api/v1/datasets/{ds}/annotations", data="item_id,annotator_id,label\nnew-1,w9,positive\n",
                    headers={**admin, "Content-Type": "text/csv"})
    assert r.status_code == 202
    after = samples(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("auditor_imports_total", kind="annotations", outcome="accepted") == 2
    assert delta("auditor_import_rows_total", kind="annotations", outcome="accepted") == len(seeded.data.annotations) + 1
    assert delta("auditor_imports_total", kind="gold", outcome="accepted") == 1
    assert delta("auditor_import_rows_total", kind="gold", outcome="accepted") == len(seeded.data.gold)
    assert delta("auditor_imports_total", kind="predictions", outcome="accepted") == len(seeded.release_ids)
    assert delta("auditor_imports_total", kind="annotations", outcome="rejected") == 1
    assert delta("auditor_import_rows_total", kind="annotations", outcome="rejected") == 2

    # Latency by URL rule: the dataset's id never becomes a label.
    rule = "/api/v1/datasets/<int:dataset_id>/annotations"
    assert delta("auditor_http_request_duration_seconds_count", method="POST", endpoint=rule, status="202") == 2
    assert delta("auditor_http_request_duration_seconds_count", method="POST", endpoint=rule, status="400") == 1
    assert not any(f"/datasets/{ds}/" in dict(labels).get("endpoint", "") for _, labels in after)

    factory = make_session_factory(ops_app.extensions["auditor.engine"])
    with factory() as db:
        # Runs written by other tests' fixtures without a start time have no duration (the metric skips them).
        succeeded = db.scalars(select(AuditRun).where(AuditRun.status == AuditStatus.SUCCEEDED,
                                                      AuditRun.started_at.is_not(None))).all()
        runs_by_status = dict(db.execute(select(AuditRun.status, func.count()).group_by(AuditRun.status)).all())
        alerts = db.execute(select(Alert.kind, Alert.severity, func.count()).group_by(Alert.kind, Alert.severity)).all()
        dataset = db.get(Dataset, ds)
        last = max((r for r in succeeded if r.dataset_id == ds), key=lambda r: r.id)
    # Audit duration: every succeeded run in the database, whoever ran it.
    durations = [(r.finished_at - r.started_at).total_seconds() for r in succeeded]
    assert value(after, "auditor_audit_duration_seconds_count") == len(succeeded)
    assert value(after, "auditor_audit_duration_seconds_sum") == pytest.approx(sum(durations), rel=1e-6, abs=1e-3)
    for le in ("0.5", "5.0", "60.0"):
        assert value(after, "auditor_audit_duration_seconds_bucket", le=le) == sum(d <= float(le) for d in durations)
    for status, n in runs_by_status.items():
        assert value(after, "auditor_audit_runs", status=str(status)) == n
    # Audit lag: the last batch is one data version past the last audit.
    labels = {"workspace": seeded.tenant.slug, "dataset_id": str(ds), "dataset": "metered"}
    assert dataset.data_version == last.data_version + 1
    assert value(after, "auditor_audit_lag_versions", **labels) == 1
    assert value(after, "auditor_audit_last_duration_seconds", **labels) == pytest.approx(
        (last.finished_at - last.started_at).total_seconds(), abs=1e-3)
    assert value(after, "auditor_audit_last_success_timestamp_seconds", **labels) == pytest.approx(
        last.finished_at.timestamp(), abs=1e-3)
    # Alerts raised, by kind and severity, as the database counts them (two more raised now).
    for kind, severity, n in alerts:
        assert value(after, "auditor_alerts_total", kind=kind, severity=str(severity)) == n
    with factory() as db:
        db.add_all([Alert(workspace_id=seeded.tenant.workspace_id, dataset_id=ds, kind="vendor_drop",
                          severity=AlertSeverity.CRITICAL, subject="acme-labeling", message="dropped"),
                     Alert(workspace_id=seeded.tenant.workspace_id, dataset_id=ds, kind="vendor_drop",
                           severity=AlertSeverity.CRITICAL, subject="bolt-annotations", message="dropped")])
        db.commit()
    again = samples(client)
    assert value(again, "auditor_alerts_total", kind="vendor_drop", severity="critical") == value(
        after, "auditor_alerts_total", kind="vendor_drop", severity="critical") + 2
    assert value(after, "auditor_metrics_database_up") == 1
    assert value(after, "auditor_webhook_deliveries", status="pending") >= 0


def test_queue_depth_of_a_redis_broker(pg_engine):
    queue = f"auditor-metrics-{uuid.uuid4().hex[:8]}"
    broker = REDIS_URL
    config = app_config(pg_engine, AUDITOR_METRICS_TOKEN=TOKEN, METRICS_CACHE_SECONDS=0)
    config["CELERY"] = {**config["CELERY"], "broker_url": broker, "task_default_queue": queue,
                        "auditor_worker": WorkerSettings(queue=queue)}
    app = create_app(config)
    capp = app.extensions["celery"]
    client = app.test_client()
    try:
        assert value(samples(client), "auditor_queue_messages", queue=queue) == 0
        for _ in range(3):  # no worker consumes this queue
            capp.send_task("workers.tasks.sweep", queue=queue)
        capp.send_task("workers.tasks.sweep", queue=queue, priority=6)  # kombu keeps it in a list of its own
        found = samples(client)
        assert value(found, "auditor_queue_messages", queue=queue) == 4
        assert value(found, "auditor_broker_up", transport="redis") == 1
    finally:
        r = redis.Redis.from_url(broker)
        r.delete(queue, *(f"{queue}\x06\x16{p}" for p in (3, 6, 9)))
        r.close()


def test_queue_depth_of_the_embedded_broker(pg_engine, tmp_path):
    queue = "auditor-embedded"
    config = app_config(pg_engine, AUDITOR_METRICS_TOKEN=TOKEN, METRICS_CACHE_SECONDS=0)
    config["CELERY"] = {**config["CELERY"], "broker_url": f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}",
                        "task_default_queue": queue, "auditor_worker": WorkerSettings(queue=queue)}
    app = create_app(config)
    client = app.test_client()
    assert value(samples(client), "auditor_queue_messages", queue=queue) == 0
    for _ in range(2):
        app.extensions["celery"].send_task("workers.tasks.sweep", queue=queue)
    found = samples(client)
    assert value(found, "auditor_queue_messages", queue=queue) == 2
    assert value(found, "auditor_broker_up", transport="sqla+sqlite") == 1


def test_the_database_series_on_sqlite(sqlite_engine):
    """The embedded deployment's database: the same statements, SQLite's date arithmetic."""
    t0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    with make_session_factory(sqlite_engine)() as db:
        ws = Workspace(slug="lite", name="lite")
        db.add(ws)
        db.flush()
        ds = Dataset(workspace_id=ws.id, name="reviews", labels=["a", "b"], data_version=7)
        db.add(ds)
        db.flush()
        db.add_all([AuditRun(dataset_id=ds.id, data_version=4, status=AuditStatus.SUCCEEDED, started_at=t0,
                             finished_at=t0 + timedelta(seconds=2.5)),
                    AuditRun(dataset_id=ds.id, data_version=5, status=AuditStatus.SUCCEEDED,
                             started_at=t0 + timedelta(minutes=1), finished_at=t0 + timedelta(minutes=1, seconds=40)),
                    AuditRun(dataset_id=ds.id, data_version=7, status=AuditStatus.FAILED, started_at=t0)])
        db.add(Alert(workspace_id=ws.id, dataset_id=ds.id, kind="certification_changed",
                     severity=AlertSeverity.INFO, message="m"))
        db.commit()
    found = {}
    for family in database_families(sqlite_engine):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    labels = {"workspace": "lite", "dataset_id": str(ds.id), "dataset": "reviews"}
    assert value(found, "auditor_audit_lag_versions", **labels) == 2
    assert value(found, "auditor_audit_last_duration_seconds", **labels) == pytest.approx(40, abs=1e-3)
    assert value(found, "auditor_audit_last_success_timestamp_seconds", **labels) == pytest.approx(
        (t0 + timedelta(minutes=1, seconds=40)).timestamp(), abs=1e-3)
    assert value(found, "auditor_audit_duration_seconds_count") == 2
    assert value(found, "auditor_audit_duration_seconds_sum") == pytest.approx(42.5, abs=1e-3)
    assert value(found, "auditor_audit_duration_seconds_bucket", le="5.0") == 1
    assert value(found, "auditor_audit_duration_seconds_bucket", le="60.0") == 2
    assert value(found, "auditor_audit_runs", status="failed") == 1
    assert value(found, "auditor_alerts_total", kind="certification_changed", severity="info") == 1


def test_compose_checks_readiness_and_shares_metrics_across_web_processes():
    root = Path(__file__).resolve().parents[2]
    web = yaml.safe_load((root / "docker-compose.yml").read_text(encoding="utf-8"))["services"]["web"]
    check = " ".join(web["healthcheck"]["test"])
    assert "/readyz" in check and "openapi" not in check
    assert "python:auditor.web.gunicorn_conf" in web["command"]
    assert "python:auditor.web.gunicorn_conf" in (root / "Dockerfile").read_text(encoding="utf-8")


def test_a_database_restart_answers_503_with_retry_after_not_500(pg_engine):
    """Issue 33, defect 8: inside a PostgreSQL restart's window requests answered 500. The
    window is a refused connection (as here) or a dropped one: a 503 with Retry-After, JSON
    for the API, a page for the dashboards; /healthz still answers."""
    from tests.web.conftest import csrf_token

    config = app_config(pg_engine, DATABASE_URL=f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/gone")
    down = create_app(config)
    client = down.test_client()
    r = client.get("/api/v1/datasets", headers={"Authorization": "Bearer aud_anything"})
    assert r.status_code == 503 and r.headers["Retry-After"] == "5", r.get_data(as_text=True)[:300]
    assert r.get_json()["error"] == "unavailable" and "retry" in r.get_json()["message"]
    r = client.post("/api/v1/datasets", json={"name": "x", "labels": ["a", "b"]},
                    headers={"Authorization": "Bearer aud_anything"})
    assert r.status_code == 503
    token = csrf_token(client.get("/login").get_data(as_text=True))
    r = client.post("/login", data={"csrf_token": token, "workspace": "w", "email": "e@x.example", "password": "p"})
    assert r.status_code == 503 and "text/html" in r.content_type and "Retry-After" in r.headers
    assert client.get("/healthz").status_code == 200
    down.extensions["auditor.engine"].dispose()
