"""No single stored row stops an audit: a time stamp an older version let in is skipped and reported.

Issue 33, defect 2: one annotation stamped ``9999-12-31`` (accepted before the door checked
the range) made every later audit of its dataset fail with ``OverflowError: date value out
of range`` in the quality windows, also after clean imports. Imports go through the real
HTTP stack, the audits through a real Celery worker on PostgreSQL and Redis.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select, text

from auditor.config import WorkerSettings
from auditor.db import AuditRun, AuditStatus, QualityWindow, session_scope
from auditor.web import create_app
from tests.web.conftest import make_tenant
from tests.workers.conftest import worker_env
from tests.workers.test_audit_workers import wait_for

pytestmark = pytest.mark.services


@pytest.fixture
def served(tmp_path, pg_factory, redis_url, start_worker):
    """A web app and a worker on one database and queue (the worker started by the test)."""
    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url)
    queue = env["AUDITOR_CELERY_QUEUE"]
    app = create_app({
        "TESTING": True, "SECRET_KEY": "stamps", "DATABASE_URL": url, "RATELIMIT_STORAGE_URI": "memory://",
        "CELERY": {"broker_url": redis_url, "result_backend": redis_url, "task_default_queue": queue,
                   "auditor_database_url": url,
                   "auditor_worker": WorkerSettings(queue=queue, n_bootstrap=20, plans_per_audit=0)}})
    app.extensions["celery"].set_current()
    yield app, factory, lambda: start_worker(env)
    app.extensions["auditor.engine"].dispose()


def _batch(week: int, n_items: int = 12) -> str:
    rows = ["item_id,annotator_id,label,vendor,timestamp"]
    for i in range(n_items):
        for j in range(3):
            label = "ab"[(i + j * (i % 3 == 0)) % 2]
            rows.append(f"w{week}-i{i},ann{j},{label},acme,2026-0{1 + week}-0{5 + j}T09:00:00Z")
    return "\n".join(rows) + "\n"


def test_a_stored_far_future_time_stamp_is_left_out_of_the_windows_and_the_audit_says_so(served):
    app, factory, start = served
    tenant = make_tenant(app)
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "stamped", "labels": ["a", "b"]},
                     headers=tenant.auth()).get_json()["id"]

    def post(body: str) -> int:
        r = client.post(f"/api/v1/datasets/{ds}/annotations", data=body,
                        headers={**tenant.auth(), "Content-Type": "text/csv"})
        assert r.status_code == 202, r.get_json()
        return r.get_json()["data_version"]

    post(_batch(0))
    # What an older version accepted: one row of the stored batch stamped in the year 9999.
    with session_scope(factory) as s:
        s.execute(text("UPDATE annotation SET annotated_at = :far WHERE dataset_id = :d AND ctid = "
                       "(SELECT ctid FROM annotation WHERE dataset_id = :d LIMIT 1)"),
                  {"far": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), "d": ds})
    version = post(_batch(1))
    worker = start()

    def finished(v):
        with session_scope(factory) as s:
            run = s.scalars(select(AuditRun).where(AuditRun.dataset_id == ds, AuditRun.data_version >= v,
                                                   AuditRun.status.in_([AuditStatus.SUCCEEDED, AuditStatus.FAILED]))
                            .order_by(AuditRun.id.desc())).first()
            return None if run is None else (run.status, run.error, run.summary)

    status, error, summary = wait_for(lambda: finished(version), 120, worker, "the audit")
    assert status == AuditStatus.SUCCEEDED, error
    assert summary["quality_skipped"] == {"time_stamp_out_of_range": 1}
    assert any(n.startswith("quality windows: 1 annotation(s) with a time stamp outside") for n in summary["notes"])
    with session_scope(factory) as s:
        starts = s.scalars(select(QualityWindow.window_start).where(QualityWindow.dataset_id == ds)).all()
    assert starts and max(starts).year == 2026
    # The run says so over the API too, and later audits keep succeeding.
    run = client.get(f"/api/v1/datasets/{ds}/audit-runs?status=succeeded", headers=tenant.auth()).get_json()
    assert run["items"][0]["summary"]["quality_skipped"] == {"time_stamp_out_of_range": 1}
    version = post(_batch(2))
    status, error, summary = wait_for(lambda: finished(version), 120, worker, "the next audit")
    assert status == AuditStatus.SUCCEEDED, error
    assert "quality_skipped" not in summary
