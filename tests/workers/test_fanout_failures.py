"""The fan-out's join (``finish_audit``) against the real Redis result backend and
PostgreSQL: a failed release part, lost parts and parts past the time limit each end the
run as failed with the cause, in one call, and say whether the same data may be retried.
The success path runs through real workers in test_audit_workers."""

from __future__ import annotations

import time
import uuid

import pytest
from billiard.exceptions import WorkerLostError
from celery.result import AsyncResult, GroupResult

from auditor.audit.store import claim_audit
from auditor.db import session_scope
from auditor.db.models import AuditRun, AuditStatus
from tests.workers._data import import_annotations, make_dataset
from tests.workers.conftest import client_app, worker_env

pytestmark = pytest.mark.services


@pytest.fixture
def join(tmp_path, pg_factory, redis_url):
    url, factory = pg_factory
    app = client_app(worker_env(tmp_path, url, redis_url, redis_url))
    ds = make_dataset(factory, f"fan-{uuid.uuid4().hex[:6]}", ["a", "b"])
    version = import_annotations(factory, ds, [("i1", "w1", 0), ("i1", "w2", 1)])
    with session_scope(factory) as s:
        run = claim_audit(s, ds, task_id="owner", lease=app.conf["auditor_worker"].lease)
    yield app, factory, run.run_id, version
    app.close()


def _group(app, states):
    """A saved group whose parts have the given outcomes (a value, or an exception)."""
    parts = []
    for outcome in states:
        r = AsyncResult(uuid.uuid4().hex, app=app)
        if isinstance(outcome, BaseException):
            app.backend.mark_as_failure(r.id, outcome)
        else:
            app.backend.mark_as_done(r.id, outcome)
        parts.append(r)
    group = GroupResult(uuid.uuid4().hex, parts, app=app)
    group.save()
    return group.id


def _finish(app, group_id, run_id, version, started):
    from auditor.worker.tasks import finish_audit

    return finish_audit(group_id, run_id, "owner", version, {}, {}, {"n_bootstrap": 10}, {}, started)


def _run(factory, run_id) -> AuditRun:
    with session_scope(factory) as s:
        return s.get(AuditRun, run_id)


def test_a_failed_part_fails_the_run_once_with_its_cause(join):
    app, factory, run_id, version = join
    group_id = _group(app, [{"release_id": 1}, ValueError("bad release payload")])
    out = _finish(app, group_id, run_id, version, time.time())
    assert out["state"] == "failed" and "bad release payload" in out["error"] and out["retryable"] is False
    run = _run(factory, run_id)
    assert run.status == AuditStatus.FAILED and "bad release payload" in run.error and run.retryable is False
    assert GroupResult.restore(group_id, app=app) is not None  # the group itself stays; its parts are forgotten


def test_a_part_whose_worker_died_is_retryable(join):
    app, factory, run_id, version = join
    out = _finish(app, _group(app, [{"release_id": 1}, WorkerLostError("Worker exited prematurely: signal 9")]),
                  run_id, version, time.time())
    assert out["state"] == "failed" and out["retryable"] is True, out
    assert _run(factory, run_id).retryable is True


def test_lost_parts_end_the_run(join):
    app, factory, run_id, version = join
    out = _finish(app, uuid.uuid4().hex, run_id, version, time.time())  # no such group: expired or lost
    assert out == {"state": "failed", "run_id": run_id, "error": "release parts lost", "retryable": True}
    assert _run(factory, run_id).status == AuditStatus.FAILED


def test_parts_past_the_time_limit_end_the_run(join):
    app, factory, run_id, version = join
    pending = GroupResult(uuid.uuid4().hex, [AsyncResult(uuid.uuid4().hex, app=app)], app=app)
    pending.save()
    limit = app.conf["auditor_worker"].time_limit
    out = _finish(app, pending.id, run_id, version, time.time() - limit - 1)
    assert out["error"] == "release parts timed out" and out["retryable"] is True
    run = _run(factory, run_id)
    assert run.status == AuditStatus.FAILED and run.retryable is True
