"""What every task of the workers shares: its settings and one session factory per database
and process (prefork children build their own after fork), and the per-process snapshot cache.

Public, so that the tasks of :mod:`auditor.worker.tasks`, :mod:`auditor.worker.plans` and the
connectors' tasks take them from one place.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy.orm import Session, sessionmaker

from auditor.audit.snapshot import SnapshotCache
from auditor.config import WorkerSettings, load_worker_settings
from auditor.worker import session_factory as worker_session_factory

__all__ = ["session_factory", "snapshot_cache", "worker_settings"]


def worker_settings(task) -> WorkerSettings:
    return task.app.conf.get("auditor_worker") or load_worker_settings()


@lru_cache(maxsize=8)
def snapshot_cache(url: str) -> SnapshotCache:
    # Per process: the next audit of a dataset reads only the rows written since.
    return SnapshotCache()


def session_factory(task) -> sessionmaker[Session]:
    """The session factory of ``task``'s Celery app (:func:`auditor.worker.session_factory`)."""
    return worker_session_factory(task.app)
