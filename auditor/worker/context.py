"""What every task of the workers shares: its settings and one session factory per database
and process (prefork children build their own after fork), and the per-process snapshot cache.

Public, so that the tasks of :mod:`auditor.worker.tasks`, :mod:`auditor.worker.plans` and the
connectors' tasks take them from one place.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from auditor.audit.snapshot import SnapshotCache
from auditor.config import WorkerSettings, load_worker_settings
from auditor.db import make_engine, make_session_factory

__all__ = ["session_factory", "snapshot_cache", "worker_settings"]


def worker_settings(task) -> WorkerSettings:
    return task.app.conf.get("auditor_worker") or load_worker_settings()


@lru_cache(maxsize=8)
def _factory(url: str, lock_timeout_ms: int) -> sessionmaker[Session]:
    # One engine per process and database (prefork children build their own after fork).
    kwargs: dict[str, Any] = {}
    if url.startswith("postgres"):
        # Waiting forever on a lock would hold the audit's slot; fail, record, retry instead.
        kwargs["connect_args"] = {"options": f"-c lock_timeout={int(lock_timeout_ms)}"}
    return make_session_factory(make_engine(url, **kwargs))


@lru_cache(maxsize=8)
def snapshot_cache(url: str) -> SnapshotCache:
    # Per process: the next audit of a dataset reads only the rows written since.
    return SnapshotCache()


def session_factory(task) -> sessionmaker[Session]:
    w = worker_settings(task)
    return _factory(task.app.conf.get("auditor_database_url"), w.db_lock_timeout_ms)
