"""Audits first: a dataset's audit never waits behind plans (or syncs, write-backs) queued
before it, on one worker process; its queued time counts from the request.

A real worker (one process) on PostgreSQL and Redis, and the embedded broker (SQLite)
read by kombu as the worker reads it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import numpy as np
import redis
from kombu import Connection, Exchange, Queue
from sqlalchemy import select

from auditor.audit import plans
from auditor.db import session_scope
from auditor.db.models import AuditRun, Model, Release, ReleasePlan
from auditor.worker import AUDIT_TASKS, audit_queue, route_task, worker_queues
from auditor.worker.dispatch import request_audit
from auditor.worker.plans import plan_release
from tests.workers._data import import_annotations, import_predictions, make_dataset
from tests.workers.conftest import client_app, worker_env
from tests.workers.test_audit_workers import succeeded_at, wait_for


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def test_an_audit_requested_behind_queued_plans_runs_before_them(tmp_path, pg_factory, redis_url, start_worker):
    """One worker process busy with a plan and many more plans queued: an audit requested
    then runs before the queued plans (it was the last message of one queue before: it
    waited for all of them), and the plan in hand steps aside at its next release. Its run's
    ``created_at`` is the request, so its queued time includes the plan it waited for."""
    url, factory = pg_factory
    rng = np.random.default_rng(7)
    n = 1500
    truth = rng.integers(0, 3, n)
    labels = np.where(rng.random((n, 5)) < 0.8, truth[:, None], rng.integers(0, 3, (n, 5)))
    ds = make_dataset(factory, "audits-first", ["a", "b", "c"])
    import_annotations(factory, ds, [(f"i{i}", f"r{r}", int(labels[i, r])) for i in range(n) for r in range(5)],
                       vendors={f"r{r}": "acme" for r in range(5)})
    preds = np.where(rng.random(n) < 0.7, truth, (truth + 1) % 3)
    version = import_predictions(factory, ds, "clf", "0.1", labels={f"i{i}": int(preds[i]) for i in range(n)})
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_FANOUT_MIN_ITEMS="100000",
                     AUDITOR_PLANS_PER_AUDIT="0", AUDITOR_CELERY_CONCURRENCY="1")
    app = client_app(env)
    worker = start_worker(env)
    try:
        request_audit(ds)
        wait_for(lambda: succeeded_at(factory, ds, version), 180, worker, "the first audit")
        with session_scope(factory) as s:
            rid = s.scalar(select(Release.id).join(Model).where(Model.name == "clf"))
            plans.request(s, rid, ds)
        # Forty plans of the release queued (a fraction of a second of work each, on one process).
        results = [plan_release.apply_async((rid, ds)) for _ in range(40)]
        queued = redis.Redis.from_url(redis_url)
        # The worker has taken the first plan (one process, one message at a time): the rest wait.
        wait_for(lambda: queued.llen(env["AUDITOR_CELERY_QUEUE"]) < 40, 60, worker, "the first plan to start")
        # New labels, then the audit they ask for, while the first plan runs.
        before_write = datetime.now(UTC)
        version = import_annotations(factory, ds, [(f"i{i}", "late", int(truth[i])) for i in range(200)],
                                     vendors={"late": "acme"})
        asked = datetime.now(UTC)
        request_audit(ds)
        run = wait_for(lambda: succeeded_at(factory, ds, version), 300, worker, "the second audit")
        for r in results:
            r.get(timeout=300)

        def planned_after_the_audit():
            with session_scope(factory) as s:
                row = s.scalar(select(ReleasePlan).where(ReleasePlan.release_id == rid))
                return row if row.finished_at and _aware(row.finished_at) > _aware(run.finished_at) else None

        # Plans still ran after the audit: it did not wait for the queue of plans (all forty
        # ran before it when everything shared one queue, and none would come after).
        row = wait_for(planned_after_the_audit, 300, worker, "a plan after the audit")
        assert row.status == "succeeded" and row.data_version == run.data_version
        # Queued from the request (or, if the sweep's message came first, from the write that
        # asked for it); a second of slack for the server's clock against the test's.
        created, started = _aware(run.created_at), _aware(run.started_at)
        assert (before_write - created).total_seconds() < 1.0 and (created - asked).total_seconds() < 1.0
        assert (started - created).total_seconds() > 0
    finally:
        app.close()


def test_the_audit_tasks_are_routed_to_the_audits_queue():
    assert worker_queues("q") == ["q.audits", "q"] and audit_queue("q") == "q.audits"

    class Conf:
        task_default_queue = "q"

    class App:
        conf = Conf()

    class Task:
        app = App()

    for name in AUDIT_TASKS:
        assert route_task(name, (), {}, {}, task=Task()) == {"queue": "q.audits"}
    for name in ("workers.tasks.plan_releases", "workers.tasks.labelstudio_sync", "workers.tasks.mlflow_write_back",
                 "workers.tasks.deliver_webhook", "workers.tasks.sweep"):
        assert route_task(name, (), {}, {}, task=Task()) is None


def test_the_embedded_broker_serves_the_audits_queue_first(tmp_path):
    """kombu's SQLAlchemy transport (the embedded default) polls round robin, starting after
    the queue last served; Auditor's serves the worker's queues in order: with plans and
    audits waiting, every audit is taken before any plan."""
    import auditor.worker  # noqa: F401 - installs the in-order transport for sqla+ URLs

    url = f"sqla+sqlite:///{tmp_path}/broker.sqlite3"
    exchange = Exchange("auditor-test", type="direct")
    queues = [Queue(q, exchange, routing_key=q) for q in worker_queues("t")]
    with Connection(url) as conn:
        producer = conn.Producer()
        for k in range(3):
            producer.publish({"task": f"plan-{k}"}, exchange=exchange, routing_key="t", declare=queues)
            producer.publish({"task": f"audit-{k}"}, exchange=exchange, routing_key="t.audits", declare=queues)
        taken: list[str] = []

        def on_message(body, message):
            taken.append(body["task"])
            message.ack()

        with conn.Consumer(queues, callbacks=[on_message], prefetch_count=1):
            deadline = time.monotonic() + 30
            while len(taken) < 6 and time.monotonic() < deadline:
                try:
                    conn.drain_events(timeout=1)
                except TimeoutError:
                    continue
    assert taken == ["audit-0", "audit-1", "audit-2", "plan-0", "plan-1", "plan-2"], taken


def test_the_run_of_a_request_is_created_at_the_request(tmp_path):
    """``claim_audit`` with the request's time: the new run's ``created_at`` is that time
    (never in the future), so ``queued_seconds`` = started − requested."""
    from auditor.audit.store import claim_audit
    from auditor.db import make_engine, make_session_factory, migrate
    from auditor.ingest import create_dataset

    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    migrate.upgrade(engine)
    factory = make_session_factory(engine)
    with session_scope(factory) as s:
        d = create_dataset(s, "d", ["a", "b"]).id
    asked = time.time() - 12.5
    with session_scope(factory) as s:
        c = claim_audit(s, d, task_id="t1", lease=timedelta(seconds=60), requested_at=asked)
        assert c.state == "claimed"
    with session_scope(factory) as s:
        run = s.get(AuditRun, c.run_id)
        queued = (_aware(run.started_at) - _aware(run.created_at)).total_seconds()
    assert 12.0 < queued < 20.0
    engine.dispose()
