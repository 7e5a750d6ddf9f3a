"""``celery_init_app`` (Flask's pattern without importing Flask) and the Celery settings."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from auditor.config import load_settings, load_worker_settings
from auditor.worker import celery_config, celery_init_app


class FakeApp:
    """The part of a Flask app ``celery_init_app`` uses: name, config, extensions, app_context."""

    name = "fake"

    def __init__(self, config):
        self.config, self.extensions, self.contexts = config, {}, 0

    @contextmanager
    def app_context(self):
        self.contexts += 1
        yield


def test_celery_init_app_binds_tasks_to_the_app_context(tmp_path):
    app = FakeApp({"CELERY": {"broker_url": "memory://", "auditor_database_url": f"sqlite:///{tmp_path}/x.db"}})
    capp = celery_init_app(app)
    assert app.extensions["celery"] is capp
    assert capp.conf.broker_url == "memory://" and capp.conf.task_acks_late and capp.conf.task_reject_on_worker_lost
    import auditor.worker.tasks  # noqa: F401 - registers the shared tasks

    # Without a webhook the task returns before touching the database; it ran inside the app context.
    assert capp.tasks["workers.tasks.deliver_alerts"]([]) == 0
    assert app.contexts == 1


def test_celery_config_from_settings(tmp_path):
    env = {"AUDITOR_INSTANCE_PATH": str(tmp_path), "AUDITOR_CELERY_QUEUE": "q1", "AUDITOR_SWEEP_SECONDS": "7",
           "AUDITOR_AUDIT_SOFT_TIME_LIMIT": "30", "AUDITOR_AUDIT_TIME_LIMIT": "40"}
    conf = celery_config(load_settings(env), load_worker_settings(env))
    # The embedded default needs no server: a SQLite-backed broker in the instance directory.
    assert conf["broker_url"].startswith("sqla+sqlite:///") and str(tmp_path) in conf["broker_url"]
    assert conf["broker_transport_options"] == {}
    assert conf["task_default_queue"] == "q1"
    assert conf["beat_schedule"]["auditor-sweep"] == {"task": "workers.tasks.sweep", "schedule": 7.0}
    assert (conf["task_soft_time_limit"], conf["task_time_limit"]) == (30.0, 40.0)
    redis = celery_config(load_settings({**env, "AUDITOR_BROKER_URL": "redis://h:6379/3"}), load_worker_settings(env))
    # Redis redelivers unacknowledged messages only after the visibility timeout: longer than an audit.
    assert redis["broker_transport_options"]["visibility_timeout"] > 40


def test_finish_task_may_reschedule_itself_until_the_lease_ends():
    from auditor.worker.tasks import finish_audit

    # It polls the release parts by retrying; a retry limit would strand the run as "running".
    assert finish_audit.max_retries is None


def test_each_pool_process_limits_its_blas_threads(tmp_path):
    """A prefork pool process (``worker_process_init``) and the worker's own process
    (``worker_init``, where the solo and thread pools compute) run their BLAS on
    ``AUDITOR_WORKER_BLAS_THREADS`` threads: one by default."""
    import json
    import os
    import subprocess
    import sys

    probe = (
        "import json, os\n"
        "from threadpoolctl import threadpool_info\n"
        "import numpy  # noqa: F401 - loads its BLAS\n"
        "def blas(): return [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "before = blas()\n"
        "import auditor.worker\n"
        "from celery.signals import worker_process_init\n"
        "worker_process_init.send(sender=None)\n"
        "print(json.dumps({'before': before, 'after': blas()}))\n")
    for setting, expected in ((None, 1), ("2", 2)):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AUDITOR_", "OPENBLAS_", "OMP_", "MKL_"))}
        env["AUDITOR_INSTANCE_PATH"] = str(tmp_path)
        # Two threads to start from (BLAS's default is one per core, capped by the cores).
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "2"
        if setting is not None:
            env["AUDITOR_WORKER_BLAS_THREADS"] = setting
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        if min(seen["before"] or [0]) < 2:
            pytest.skip(f"BLAS runs {seen['before']} thread(s) here (one core): no limit to observe")
        assert all(n == 2 for n in seen["before"]), seen
        assert all(n == expected for n in seen["after"]), (setting, seen)
