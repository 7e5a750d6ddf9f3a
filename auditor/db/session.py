"""Engines and sessions. The caller (a request, a task, a CLI command) owns the transaction."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

from auditor.config import Settings, load_settings

__all__ = ["WRITE_OPTIONS", "make_engine", "make_session_factory", "normalize_url", "session_scope"]


def normalize_url(url: str | URL) -> URL:
    """``postgres://`` and ``postgresql://`` → the psycopg 3 driver; other URLs unchanged."""
    url = make_url(url)
    if url.drivername in ("postgres", "postgresql"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cur = dbapi_connection.cursor()
    # Foreign keys are off by default in SQLite; WAL lets readers run beside one writer;
    # the busy timeout makes concurrent writers wait instead of failing at once.
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    if dbapi_connection.execute("PRAGMA database_list").fetchone()[2]:
        cur.execute("PRAGMA journal_mode=WAL")
    cur.close()


def _sqlite_begin(conn) -> None:
    # pysqlite defers BEGIN on its own and never for reads; emit BEGIN ourselves so a
    # reader's snapshot covers the whole transaction. Writers ask for ``BEGIN IMMEDIATE``
    # (``execution_options(sqlite_begin="IMMEDIATE")``) to take the write lock up front
    # instead of failing when a read lock cannot be upgraded.
    mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


WRITE_OPTIONS = {"sqlite_begin": "IMMEDIATE"}
"""Pass to ``Session.connection(execution_options=...)`` first thing in a writing transaction."""


def make_engine(url: str | URL | None = None, *, settings: Settings | None = None, **kwargs) -> Engine:
    """An engine for ``url`` (default: the configured ``AUDITOR_DATABASE_URL``).

    SQLite files get their directory created, foreign keys on, WAL, a busy timeout and
    explicit ``BEGIN`` (see :data:`WRITE_OPTIONS`).
    """
    if url is None:
        url = (settings or load_settings()).database_url
    url = normalize_url(url)
    if url.get_backend_name() == "sqlite":
        if url.database and url.database != ":memory:":
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)

        @event.listens_for(engine, "connect")
        def _no_pysqlite_transactions(dbapi_connection, _record) -> None:
            dbapi_connection.isolation_level = None

        event.listen(engine, "begin", _sqlite_begin)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (results are read after the write)."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any exception."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
