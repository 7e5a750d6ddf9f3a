"""``celery_init_app`` (Flask's pattern without importing Flask) and the Celery settings."""

from __future__ import annotations

from contextlib import contextmanager

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
