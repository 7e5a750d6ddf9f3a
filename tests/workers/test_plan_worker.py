"""A release's audit plan, computed by a real Celery worker on PostgreSQL and Redis."""

from __future__ import annotations

import numpy as np
from sqlalchemy import select

from auditor.audit import plans
from auditor.db import session_scope
from auditor.db.models import Model, Release, ReleasePlan
from auditor.simulate import PoolScenario
from auditor.worker.dispatch import request_audit
from auditor.worker.plans import request_plan
from tests.workers._data import import_annotations, import_predictions, make_dataset
from tests.workers.conftest import client_app, worker_env
from tests.workers.test_audit_workers import succeeded_at, wait_for


def test_a_worker_computes_and_stores_the_plan_of_an_audited_release(tmp_path, pg_factory, redis_url, start_worker):
    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_FANOUT_MIN_ITEMS="100000")
    app = client_app(env)
    worker = start_worker(env)
    try:
        pool = PoolScenario(hard_fraction=0.1, model_accuracy=0.93)
        rng = np.random.default_rng(3)
        truth, hard = pool.items(rng, 300)
        labels = np.stack([pool.labels(rng, truth, hard, 1).argmax(axis=1) for _ in range(4)], axis=1)
        ds = make_dataset(factory, "planned", ["a", "b", "c"])
        rows = [(f"i{n}", f"r{(n + j) % 6}", int(labels[n, j])) for n in range(300) for j in range(4)]
        import_annotations(factory, ds, rows, vendors={f"r{r}": "acme" if r < 3 else "bolt" for r in range(6)})
        preds = pool.predictions(rng, truth, hard)
        version = import_predictions(factory, ds, "sentiment", "2.1", labels={f"i{n}": int(preds[n]) for n in range(300)})
        request_audit(ds)
        wait_for(lambda: succeeded_at(factory, ds, version), 120, worker, "the audit")
        with session_scope(factory) as s:
            rid = s.scalar(select(Release.id).join(Model).where(Model.name == "sentiment"))
            row, ask = plans.request(s, rid, ds)
            assert ask and row.status == "pending"
        assert request_plan(rid, ds) is not None

        def done():
            with session_scope(factory) as s:
                r = s.scalar(select(ReleasePlan).where(ReleasePlan.release_id == rid))
                return r if r is not None and r.status != "pending" else None

        row = wait_for(done, 120, worker, "the plan")
        assert row.status == "succeeded", row.error
        assert row.audit_run_id == succeeded_at(factory, ds, version).id
        assert row.plan["method"] == "anytime" and row.plan["n_items"] == 300
        assert row.plan["designs"][0]["labels"] == 0 and len(row.plan["designs"]) > 10
        assert len(row.relabel) == 300
        with session_scope(factory) as s:
            # current: nothing more to ask
            assert plans.request(s, rid, ds)[1] is False
    finally:
        app.close()
