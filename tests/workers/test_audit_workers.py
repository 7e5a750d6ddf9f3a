"""Imports → audits through real Celery workers, PostgreSQL and Redis (and the embedded
SQLite + server-less broker default)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.pool import NullPool

from auditor.db import session_scope
from auditor.db.models import AuditRun, AuditStatus, Certification, PowerCurveRecord
from auditor.stats import confidence, lower_bound, upper_bounds
from auditor.worker.dispatch import request_audit
from tests.workers._data import import_annotations, import_predictions, make_dataset, synthetic
from tests.workers.conftest import RedisServer, client_app, free_port, worker_env

pytestmark = pytest.mark.services

RESNICK = "surveyequivalence_resnick"


def wait_for(predicate: Callable[[], object], timeout: float, worker=None, what: str = "condition",
             every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    detail = f"\n--- worker log ---\n{worker.output()}" if worker is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")


def runs(factory, dataset_id: int) -> list[AuditRun]:
    with session_scope(factory) as s:
        return list(s.execute(select(AuditRun).where(AuditRun.dataset_id == dataset_id)
                              .order_by(AuditRun.id)).scalars())


def succeeded_at(factory, dataset_id: int, version: int) -> AuditRun | None:
    return next((r for r in runs(factory, dataset_id)
                 if r.status == AuditStatus.SUCCEEDED and r.data_version >= version), None)


def _small(factory, name: str, *, n_items: int = 60, raters: int = 4, seed: int = 0) -> tuple[int, int, np.ndarray]:
    _truth, R = synthetic(n_items, raters, seed=seed)
    ds = make_dataset(factory, name, ["a", "b"])
    rows = [(f"i{n}", f"r{r}", int(R[n, r])) for n in range(n_items) for r in range(raters)]
    v = import_annotations(factory, ds, rows, vendors={f"r{r}": "acme" for r in range(raters)})
    return ds, v, R


@pytest.fixture
def services(tmp_path, pg_factory, redis_url, start_worker):
    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_FANOUT_MIN_ITEMS="500")
    app = client_app(env)
    worker = start_worker(env)
    yield factory, worker, env
    app.close()


def test_import_then_audit_reproduces_running_example(services, datasets_dir: Path):
    """The paper's running example imported as annotations + two releases: the audit
    (fanned out per release: 1000 items ≥ the test's fan-out threshold) stores
    majority-vote survey equivalence 4.31 (Resnick et al., Figure 4) and ABC +
    cross-entropy 1.96 (Figure 5), and the bounds of auditor.stats on the same counts."""
    factory, worker, _ = services
    base = datasets_dir / RESNICK / "data" / "running_example"
    ratings = pd.read_csv(base / "ref_rater_labels.csv", index_col=0)
    preds = pd.read_csv(base / "predictions.csv", index_col=0)
    codes = {"pos": 0, "neg": 1}
    matrix = ratings.replace(codes).to_numpy(dtype=np.int64)
    hard = preds["mock hard classifier"].str.split(": ").str[1].map(codes).to_numpy()
    soft = np.array([[float(x) for x in s.split(": ", 1)[1].strip("[]").split(",")]
                     for s in preds["calibrated hard classifier"]])
    ds = make_dataset(factory, "running-example", ["pos", "neg"])
    rows = [(f"i{n}", f"e{r}", int(matrix[n, r])) for n in range(matrix.shape[0]) for r in range(matrix.shape[1])]
    import_annotations(factory, ds, rows)
    import_predictions(factory, ds, "mock", "hard", labels={f"i{n}": int(h) for n, h in enumerate(hard)})
    version = import_predictions(factory, ds, "mock", "calibrated",
                                 probabilities={f"i{n}": p for n, p in enumerate(soft)})
    assert request_audit(ds) is not None
    run = wait_for(lambda: succeeded_at(factory, ds, version), 120, worker, "the audit")
    assert run.data_version == version
    with session_scope(factory) as s:
        certs = {c.details["version"]: c for c in s.execute(
            select(Certification).where(Certification.audit_run_id == run.id)).scalars()}
        curves = list(s.execute(select(PowerCurveRecord).where(PowerCurveRecord.audit_run_id == run.id)).scalars())
    assert set(certs) == {"hard", "calibrated"}
    ub = upper_bounds(np.stack([np.bincount(row, minlength=2) for row in matrix]))
    counts = np.stack([np.bincount(row, minlength=2) for row in matrix])
    lb = lower_bound(counts, hard)
    c = certs["hard"]
    assert c.u_t == pytest.approx(ub.theoretical) and c.u_e == pytest.approx(ub.empirical)
    assert c.l == pytest.approx(lb.value) and c.n_items_lower == 1000
    assert c.s_oms_t == pytest.approx(confidence(lb.value, ub.theoretical, 1000, method="oms").score)
    # The badge uses the anytime verdict by default; the paper's is kept beside it.
    assert c.method == "anytime"
    assert c.verdict == ("certified" if c.s_anytime_t >= 0.95 else "not certified")
    assert c.certified_paper == (c.s_oms_t >= 0.95)
    by = {(p.release_id, p.combiner, p.scorer): p for p in curves}
    hard_eq = by[(c.release_id, "majority", "agreement")]
    assert hard_eq.equivalence == pytest.approx(4.31, abs=0.03)
    soft_eq = by[(certs["calibrated"].release_id, "abc", "cross_entropy")]
    assert soft_eq.equivalence == pytest.approx(1.96, abs=0.015)
    assert soft_eq.equivalence_low < soft_eq.equivalence < soft_eq.equivalence_high
    assert run.summary["n_annotations"] == 10_000


def test_concurrent_imports_collapse_into_few_runs(services, record_property):
    """20 concurrent imports into one dataset: the last audit covers every row, and
    arrivals during a run cause one follow-up rather than a run each."""
    factory, worker, _ = services
    ds = make_dataset(factory, "busy", ["a", "b"])
    _truth, R = synthetic(200, 5, seed=3)
    batches = [[(f"i{n}", f"r{r}", int(R[n, r])) for n in range(k * 10, k * 10 + 10) for r in range(5)]
               for k in range(20)]
    errors: list[BaseException] = []

    def one(batch):
        try:
            import_annotations(factory, ds, batch)
            request_audit(ds)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    run = wait_for(lambda: succeeded_at(factory, ds, 20), 120, worker, "the final audit")
    assert run.summary["n_annotations"] == 1000 and run.summary["n_items"] == 200
    time.sleep(2)  # let stragglers (the sweep, late messages) show they change nothing
    all_runs = runs(factory, ds)
    record_property("audit_runs_for_20_imports", len(all_runs))
    assert len(all_runs) <= 6, [(r.data_version, r.status) for r in all_runs]
    assert all(r.status == AuditStatus.SUCCEEDED for r in all_runs)
    versions = [r.data_version for r in all_runs]
    assert len(set(versions)) == len(versions), "two runs of the same data"


def test_failing_audit_is_recorded_and_retried(services):
    """The result write times out on a lock (a transient database error): the run is
    recorded as failed with the error, and a retry succeeds once the lock is gone."""
    factory, worker, _ = services
    ds, version, _ = _small(factory, "flaky")
    with factory() as blocker:
        blocker.execute(text("LOCK TABLE certification IN ACCESS EXCLUSIVE MODE"))
        import_predictions(factory, ds, "m", "1", labels={f"i{n}": 0 for n in range(60)})
        assert request_audit(ds) is not None
        failed = wait_for(lambda: [r for r in runs(factory, ds) if r.status == AuditStatus.FAILED], 60, worker,
                          "a failed run")
        blocker.rollback()
    assert "lock" in failed[0].error.lower()
    run = wait_for(lambda: succeeded_at(factory, ds, version + 1), 60, worker, "the retried audit")
    with session_scope(factory) as s:
        n = s.execute(select(func.count()).select_from(Certification)
                      .where(Certification.audit_run_id == run.id)).scalar_one()
    assert n == 1


def test_killed_worker_audit_completes_later_without_duplicates(tmp_path, pg_factory, redis_url, start_worker,
                                                               record_property):
    """SIGKILL the whole worker (main process and pool) in the middle of an audit, with
    the production time limits (30 min) and lease (60 s): the run stops beating, and a new
    worker's sweep takes the same run over once the lease has passed, well within 2
    minutes of its start, not at the hard time limit. One result set."""
    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_AUDIT_BOOTSTRAP="3000",
                     AUDITOR_AUDIT_SOFT_TIME_LIMIT="1500", AUDITOR_AUDIT_TIME_LIMIT="1800")
    env.pop("AUDITOR_AUDIT_LEASE_SECONDS", None)
    client_app(env)
    ds, _, _ = _small(factory, "victim", n_items=400, raters=6)
    version = import_predictions(factory, ds, "m", "1", labels={f"i{n}": 0 for n in range(400)})
    first = start_worker(env)
    assert request_audit(ds) is not None
    # The audit runs for a fraction of a second on a fast machine: look often.
    running = wait_for(lambda: [r for r in runs(factory, ds) if r.status == AuditStatus.RUNNING], 60, first,
                       "a running audit", every=0.005)
    first.kill()
    assert not succeeded_at(factory, ds, version)
    second = start_worker(env)
    t0 = time.monotonic()
    run = wait_for(lambda: succeeded_at(factory, ds, version), 120, second, "the audit after the kill", every=0.5)
    record_property("takeover_seconds", round(time.monotonic() - t0, 1))
    assert run.id == running[0].id and run.parameters["attempts"] >= 2
    all_runs = runs(factory, ds)
    assert [r.status for r in all_runs] == [AuditStatus.SUCCEEDED]
    with session_scope(factory) as s:
        n = s.execute(select(func.count()).select_from(Certification)
                      .where(Certification.audit_run_id == run.id)).scalar_one()
    assert n == 1


def test_redis_outage_import_succeeds_and_sweep_catches_up(tmp_path, pg_factory, start_worker):
    """With the broker down the import commits and request_audit returns None at once;
    when Redis is back the worker reconnects and the sweep audits the dataset."""
    url, factory = pg_factory
    port = free_port()
    redis = RedisServer(port, tmp_path)
    redis.start()
    broker = f"redis://127.0.0.1:{port}/0"
    env = worker_env(tmp_path, url, broker, broker)
    client_app(env)
    worker = start_worker(env)
    try:
        ds, v1, _ = _small(factory, "outage")
        request_audit(ds)
        wait_for(lambda: succeeded_at(factory, ds, v1), 60, worker, "the first audit")
        redis.stop()
        v2 = import_annotations(factory, ds, [("i0", "late", 1), ("i1", "late", 0)])
        t0 = time.monotonic()
        assert request_audit(ds) is None
        assert time.monotonic() - t0 < 15  # a request must not hang on a dead broker
        time.sleep(1)
        redis.start()
        run = wait_for(lambda: succeeded_at(factory, ds, v2), 90, worker, "the sweep's audit")
        assert run.summary["n_annotations"] == 60 * 4 + 2
    finally:
        worker.stop()
        redis.stop()


def test_redis_drop_while_an_audit_runs_does_not_stop_the_worker(tmp_path, pg_factory, start_worker):
    """Redis goes away while an audit holds its (late-acknowledged) message. Celery 5.7
    then closed the lost connection twice and acknowledged the finished audit on it; both
    raised AttributeError, which stopped the worker ("Unrecoverable error"). The worker
    must reconnect, finish the audit, and take the next one."""
    url, factory = pg_factory
    port = free_port()
    redis = RedisServer(port, tmp_path)
    redis.start()
    broker = f"redis://127.0.0.1:{port}/0"
    env = worker_env(tmp_path, url, broker, broker, AUDITOR_DB_LOCK_TIMEOUT_MS="60000")
    client_app(env)
    worker = start_worker(env)
    engine = create_engine(url, poolclass=NullPool)
    try:
        ds, v1, _ = _small(factory, "drop")
        # The audit claims its run, then waits on the annotations this transaction
        # locks: it is running, its message unacknowledged, while Redis restarts.
        with engine.connect() as blocker:
            blocker.execute(text("LOCK TABLE annotation IN ACCESS EXCLUSIVE MODE"))
            assert request_audit(ds) is not None
            wait_for(lambda: any(r.status == AuditStatus.RUNNING for r in runs(factory, ds)), 60, worker,
                     "the audit to start")
            redis.stop()
            time.sleep(1)
            redis.start()
            blocker.rollback()
        wait_for(lambda: succeeded_at(factory, ds, v1), 90, worker, "the interrupted audit")
        v2 = import_annotations(factory, ds, [("i0", "late", 1), ("i1", "late", 0)])
        request_audit(ds)
        run = wait_for(lambda: succeeded_at(factory, ds, v2), 90, worker, "the next audit")
        assert run.summary["n_annotations"] == 60 * 4 + 2
        assert worker.proc.poll() is None, worker.output()
        log = worker.log_path.read_text(errors="replace")
        # The case this test is about: the audit's message was unacknowledged when the
        # connection dropped (the beat's sweep, every second here, may be held with it).
        assert re.search(r"Restoring [1-9]\d* unacknowledged message", log), log[-4000:]
        assert "Unrecoverable error" not in log
    finally:
        worker.stop()
        redis.stop()
        engine.dispose()


def test_embedded_sqlite_and_serverless_broker(tmp_path, start_worker):
    """The embedded default: SQLite file, kombu's SQLAlchemy transport on SQLite, a
    real worker process; the same import → audit flow."""
    from auditor.db import make_engine, make_session_factory, migrate

    db = f"sqlite:///{tmp_path / 'auditor.sqlite3'}"
    engine = make_engine(db)
    migrate.upgrade(engine)
    factory = make_session_factory(engine)
    env = worker_env(tmp_path, db, f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}",
                     f"db+sqlite:///{tmp_path / 'results.sqlite3'}", AUDITOR_CELERY_CONCURRENCY="1")
    client_app(env)
    worker = start_worker(env, pool="solo")
    ds, _, R = _small(factory, "embedded")
    version = import_predictions(factory, ds, "m", "1", labels={f"i{n}": 0 for n in range(60)})
    assert request_audit(ds) is not None
    run = wait_for(lambda: succeeded_at(factory, ds, version), 120, worker, "the embedded audit")
    with session_scope(factory) as s:
        cert = s.execute(select(Certification).where(Certification.audit_run_id == run.id)).scalar_one()
    counts = np.stack([np.bincount(row, minlength=2) for row in R])
    assert cert.u_t == pytest.approx(upper_bounds(counts).theoretical)
    assert cert.l == pytest.approx(lower_bound(counts, np.zeros(60, dtype=int)).value)
    engine.dispose()


def test_a_cli_import_starts_its_audit_at_once(tmp_path, pg_factory, redis_url, start_worker, record_property):
    """``auditor import annotations`` enqueues the audit after its commit, as the HTTP import
    does: with the sweep ten minutes away, the audit still succeeds within seconds (it
    waited 32-47 s for the sweep before)."""
    import subprocess
    import sys

    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_SWEEP_SECONDS="600", AUDITOR_WORKSPACE="cli")
    worker = start_worker(env)
    cli = [sys.executable, "-c", "from auditor.cli import main; main()"]
    subprocess.run([*cli, "datasets", "create", "rte", "--labels", "a,b"], env=env, check=True,
                   capture_output=True, text=True)
    _truth, R = synthetic(80, 4, seed=3)
    csv = tmp_path / "batch.csv"
    csv.write_text("item_id,annotator_id,label\n" + "".join(
        f"i{n},r{r},{'ab'[int(R[n, r])]}\n" for n in range(80) for r in range(4)))
    # Let the worker finish starting (its first sweep is ten minutes away).
    wait_for(lambda: "ready" in worker.output(), 60, worker, "the worker to start")
    t0 = time.monotonic()
    out = subprocess.run([*cli, "import", "annotations", str(csv), "--dataset", "rte"], env=env, check=True,
                         capture_output=True, text=True)
    assert "audit requested" in out.stdout and "workspace 'cli'" in out.stdout, out.stdout + out.stderr
    with session_scope(factory) as s:
        ds = s.execute(text("SELECT id FROM dataset WHERE name = 'rte'")).scalar_one()
    run = wait_for(lambda: succeeded_at(factory, ds, 1), 60, worker, "the audit after the CLI import", every=0.1)
    elapsed = time.monotonic() - t0
    record_property("cli_import_to_audit_seconds", round(elapsed, 2))
    assert run.data_version >= 1
    assert elapsed < 300  # far below the sweep's 600 s: the import enqueued it (typically ~2 s)
