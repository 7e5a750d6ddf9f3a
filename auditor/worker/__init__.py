"""Auditor's Celery application.

``celery_app`` is the module-level app of the ``auditor worker`` / ``auditor beat``
processes; it is configured from the environment (:mod:`auditor.config`) when first
used, not at import. ``celery_init_app(app)`` is Flask's pattern (docs/patterns/celery)
for a web application factory; it imports nothing from Flask. Tasks live in
:mod:`auditor.worker.tasks` and take ids, never objects. Their names (``workers.tasks.*``)
stay as they were, so messages queued before an upgrade still find their task.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from celery import Celery, Task
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_init,
    worker_process_init,
)

from auditor.config import Settings, WorkerSettings, load_settings, load_worker_settings

__all__ = ["AUDIT_TASKS", "audit_queue", "celery_app", "celery_config", "celery_init_app", "limit_blas_threads",
           "lower_priority", "route_task", "session_factory", "worker_queues", "worker_settings"]

AUDIT_TASKS = ("workers.tasks.audit_dataset", "workers.tasks.audit_release", "workers.tasks.finish_audit")
"""The tasks of an audit: routed to the audits queue, which every worker serves first."""


def audit_queue(queue: str) -> str:
    """The audits queue that goes with the default queue ``queue`` (plans, syncs, write-backs,
    webhooks and the sweep stay there)."""
    return f"{queue}.audits"


def route_task(name, args=None, kwargs=None, options=None, task=None, **_kw):
    """Celery router: the tasks of an audit go to the audits queue of the publishing app's
    default queue (:func:`audit_queue`); every other task to the default queue."""
    if name not in AUDIT_TASKS:
        return None
    if task is not None:
        default = task.app.conf.task_default_queue
    else:
        from celery import current_app

        default = current_app.conf.task_default_queue
    return {"queue": audit_queue(default)}


def worker_queues(queue: str) -> list[str]:
    """The queues a worker consumes, in the order it serves them: audits first."""
    return [audit_queue(queue), queue]


def celery_config(settings: Settings | None = None, worker: WorkerSettings | None = None) -> dict[str, Any]:
    """Celery configuration from Auditor's settings (environment by default)."""
    s = settings or load_settings()
    w = worker or load_worker_settings()
    return {
        "broker_url": s.broker_url,
        "result_backend": s.result_backend,
        "imports": ("auditor.worker.tasks", "auditor.worker.feeds", "auditor.worker.plans"),
        "task_default_queue": w.queue,
        # Audits first: their own queue, which the worker polls before the default one
        # (queue order below, ``worker_queues``); with one message prefetched at a time
        # and late acknowledgement, a free worker process always takes a waiting audit
        # before a plan, a sync or a write-back (docs/data-paths.md).
        "task_routes": (route_task,),
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        # A task is acknowledged when it finishes, and requeued if its process dies:
        # a killed worker delays an audit, it does not drop it.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": w.soft_time_limit,
        "task_time_limit": w.time_limit,
        "result_expires": 24 * 3600,
        # Publishing from a web request must fail fast when the broker is down.
        "broker_connection_timeout": 1.0,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": _transport_options(s.broker_url, w),
        "worker_concurrency": w.concurrency,
        # Celery's consumer, surviving a broker that drops while a task runs; that audit
        # runs to the end (its results go to the database, not the broker).
        "worker_consumer": "auditor.worker.consumer:Consumer",
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "beat_schedule": {
            "auditor-sweep": {"task": "workers.tasks.sweep", "schedule": w.sweep_seconds},
            "auditor-labelstudio-sync": {"task": "workers.tasks.labelstudio_sync",
                                         "schedule": w.labelstudio_sync_seconds},
            # New model versions of the connected MLflow registered models.
            "auditor-mlflow-sync": {"task": "workers.tasks.mlflow_sync", "schedule": w.mlflow_sync_seconds},
        },
        "beat_schedule_filename": str(s.instance_path / "celerybeat-schedule"),
        "auditor_database_url": s.database_url,
        "auditor_worker": w,
    }


def _transport_options(broker_url: str, w: WorkerSettings) -> dict[str, Any]:
    if broker_url.startswith(("redis", "rediss")):
        # Redis redelivers an unacknowledged message after this; it must outlive an audit.
        # ``priority``: BRPOP always lists the queues in the worker's order, audits first
        # (kombu's default, ``round_robin``, moves the queue just served to the end, so a
        # plan could go before a waiting audit).
        return {"visibility_timeout": int(w.time_limit + 60), "queue_order_strategy": "priority"}
    # The SQLAlchemy transport hands its options to create_engine: give it none (its
    # queue order is set by auditor.worker.transport instead).
    return {}


from auditor.worker import transport as _transport  # noqa: E402 (the embedded broker serves audits first)

_transport.install()

celery_app = Celery("auditor")


def worker_settings(app=None) -> WorkerSettings:
    """The worker settings of a Celery ``app`` (the environment's when it holds none)."""
    return _settings_of(app)


@lru_cache(maxsize=8)
def _factory(url: str, lock_timeout_ms: int):
    from auditor.db import make_engine, make_session_factory

    # One engine per process and database (prefork children build their own after fork).
    kwargs: dict[str, Any] = {}
    if url.startswith("postgres"):
        # Waiting forever on a lock would hold a task's slot; fail, record, retry instead.
        kwargs["connect_args"] = {"options": f"-c lock_timeout={int(lock_timeout_ms)}"}
    return make_session_factory(make_engine(url, **kwargs))


def session_factory(app=None):
    """The session factory of the tasks run by Celery ``app`` (its database, this
    process's engine, ``AUDITOR_DB_LOCK_TIMEOUT_MS``); ``celery_app`` by default."""
    app = app if app is not None else celery_app
    url = app.conf.get("auditor_database_url") or load_settings().database_url
    return _factory(url, worker_settings(app).db_lock_timeout_ms)


def _settings_of(app) -> WorkerSettings:
    conf = getattr(app, "conf", None)
    return (conf.get("auditor_worker") if conf is not None else None) or load_worker_settings()


@worker_init.connect
def _lower_priority(sender=None, **_kwargs) -> None:
    """The worker runs at ``AUDITOR_WORKER_NICE`` (its pool processes inherit it): a
    dashboard request on the same machine gets the CPU ahead of an audit's computing.
    Its linear algebra runs on ``AUDITOR_WORKER_BLAS_THREADS`` threads (the solo and
    thread pools compute in this process)."""
    w = _settings_of(getattr(sender, "app", None))
    lower_priority(w.nice)
    limit_blas_threads(w.blas_threads)


@worker_process_init.connect
def _limit_pool_process(**_kwargs) -> None:
    """Each prefork pool process: ``AUDITOR_WORKER_BLAS_THREADS`` linear algebra threads."""
    from celery import current_app

    limit_blas_threads(_settings_of(current_app).blas_threads)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _log_format(logger=None, **_kwargs) -> None:
    """Worker and beat log lines in ``AUDITOR_LOG_FORMAT``, with the running task's id."""
    from auditor.logs import configure_celery_handlers

    if logger is not None:
        configure_celery_handlers(logger, load_settings().log_format)


def limit_blas_threads(n: int) -> None:
    """At most ``n`` threads in this process's BLAS (OpenBLAS, MKL...), from now on.

    A worker already runs one audit per process, about one per core: BLAS's own threads
    (one per core by default) only contend with the other audits and the web for the
    same cores. Two CIFAR-10H audits side by side on two cores took 11.1 s with one
    thread each against 12.9 s with two (``bench/bench_real_audits.py``)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")


def lower_priority(nice: int) -> int:
    """Raise this process's niceness to at least ``nice`` (never lowers it); returns the new value."""
    current = os.nice(0)
    return os.nice(nice - current) if nice > current else current


@celery_app.on_configure.connect
def _configure(sender: Celery, **_kwargs) -> None:
    # Read the environment when the app is first used, not when this module is imported.
    defaults = celery_config()
    for key, value in defaults.items():
        sender.conf.setdefault(key, value)


def celery_init_app(app) -> Celery:
    """A Celery app bound to a Flask-like ``app``: tasks run inside its app context.

    ``app.config["CELERY"]`` (a mapping, optional) overrides the environment's Celery
    settings, e.g. ``{"broker_url": ..., "auditor_database_url": ...}``.
    """

    class AppTask(Task):
        def __call__(self, *args: object, **kwargs: object) -> object:
            with app.app_context():
                return self.run(*args, **kwargs)

    capp = Celery(getattr(app, "name", "auditor"), task_cls=AppTask)
    config = celery_config()
    config.update(dict(app.config.get("CELERY") or {}))
    capp.config_from_object(config)
    capp.set_default()
    app.extensions["celery"] = capp
    return capp
