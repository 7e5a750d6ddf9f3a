"""A release's audit plan, computed by a real Celery worker on PostgreSQL and Redis: when asked
for, and after each audit for the releases it did not certify."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import select, update

from auditor.audit import plans
from auditor.config import load_worker_settings
from auditor.db import session_scope
from auditor.db.models import Certification, Model, Release, ReleasePlan
from auditor.simulate import PoolScenario
from auditor.worker.dispatch import request_audit
from auditor.worker.plans import request_plan
from tests.workers._data import import_annotations, import_predictions, make_dataset, rated_dataset
from tests.workers.conftest import client_app, worker_env
from tests.workers.test_audit_workers import succeeded_at, wait_for


def test_a_worker_computes_and_stores_the_plan_of_an_audited_release(tmp_path, pg_factory, redis_url, start_worker):
    url, factory = pg_factory
    # Plans on demand only (after-audit plans are the next test's).
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_FANOUT_MIN_ITEMS="100000",
                     AUDITOR_PLANS_PER_AUDIT="0")
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


def test_after_an_audit_the_worker_plans_its_most_recent_uncertified_releases(tmp_path, pg_factory, redis_url,
                                                                              start_worker):
    """Nobody reads a plan: the audit asks for those of the releases it did not certify (here at
    most 2, the most recently released first); a certified release gets none."""
    url, factory = pg_factory
    ds, truth = rated_dataset(factory, "after-audit", seed=1)
    n = truth.size
    rng = np.random.default_rng(101)
    # A perfect model certifies (as in the anytime tests); three weak ones cannot.
    version = import_predictions(factory, ds, "clf", "1.0", labels={f"i{i}": int(truth[i]) for i in range(n)})
    weak = {"0.1": datetime(2026, 3, 1, tzinfo=UTC), "0.2": datetime(2026, 1, 1, tzinfo=UTC),
            "0.3": datetime(2026, 2, 1, tzinfo=UTC)}
    for v in weak:
        preds = np.where(rng.random(n) < 0.6, truth, (truth + 1) % 3)
        version = import_predictions(factory, ds, "clf", v, labels={f"i{i}": int(preds[i]) for i in range(n)})
    with session_scope(factory) as s:
        ids = dict(s.execute(select(Release.version, Release.id).join(Model).where(Model.name == "clf")).all())
        for v, when in {**weak, "1.0": datetime(2026, 4, 1, tzinfo=UTC)}.items():
            s.execute(update(Release).where(Release.id == ids[v]).values(released_at=when))

    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_FANOUT_MIN_ITEMS="100000",
                     AUDITOR_PLANS_PER_AUDIT="2")
    app = client_app(env)
    worker = start_worker(env)
    try:
        request_audit(ds)
        run = wait_for(lambda: succeeded_at(factory, ds, version), 180, worker, "the audit")
        with session_scope(factory) as s:
            certified = dict(s.execute(select(Certification.release_id, Certification.certified)
                                       .where(Certification.audit_run_id == run.id)).all())
        assert certified == {ids["1.0"]: True, ids["0.1"]: False, ids["0.2"]: False, ids["0.3"]: False}

        def planned():
            with session_scope(factory) as s:
                rows = {r.release_id: r for r in s.scalars(select(ReleasePlan).where(ReleasePlan.dataset_id == ds))}
                return rows if rows and all(r.status != "pending" for r in rows.values()) else None

        rows = wait_for(planned, 180, worker, "the plans after the audit")
        # the two most recently released uncertified releases (0.1, then 0.3), not 0.2, not the certified 1.0
        assert set(rows) == {ids["0.1"], ids["0.3"]}
        for row in rows.values():
            assert row.status == "succeeded", row.error
            assert row.audit_run_id == run.id and row.data_version == run.data_version
            assert not row.plan["certified_now"] and row.plan["n_items"] == n
        with session_scope(factory) as s:
            # current: a page reading them asks for nothing, and the overview has each next step
            assert all(plans.request(s, rid, ds)[1] is False for rid in rows)
            from auditor.web.readmodels import next_steps

            steps = next_steps(s, [(rid, ds) for rid in ids.values()])
        assert set(steps) == {(ids["0.1"], ds), (ids["0.3"], ds)}
        assert all(step["audit_run_id"] == run.id for step in steps.values())
    finally:
        app.close()


def test_plans_per_audit_is_a_bounded_count():
    assert load_worker_settings({}).plans_per_audit == 5
    assert load_worker_settings({"AUDITOR_PLANS_PER_AUDIT": "0"}).plans_per_audit == 0
    for bad in ("-1", "51", "many"):
        with pytest.raises(ValueError, match="AUDITOR_PLANS_PER_AUDIT"):
            load_worker_settings({"AUDITOR_PLANS_PER_AUDIT": bad})
