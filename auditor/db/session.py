"""Engines and sessions. The caller (a request, a task, a CLI command) owns the transaction."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

from auditor.config import Settings, load_settings

__all__ = ["WRITE_OPTIONS", "make_engine", "make_session_factory", "normalize_url", "refresh_statistics",
           "session_scope"]

log = logging.getLogger(__name__)


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


# PostgreSQL's autovacuum analyses a table once 50 + 10% of its rows have changed since its
# last analysis (autovacuum_analyze_threshold, autovacuum_analyze_scale_factor), but only
# on its next round, a minute or more later, and never where autovacuum is off.
_ANALYZE_THRESHOLD = 50
_ANALYZE_SCALE = 0.1


def refresh_statistics(factory: sessionmaker[Session], written: Mapping[str, int]) -> list[str]:
    """``ANALYZE`` (PostgreSQL) each table of ``written`` (table name → rows just written,
    replaced or deleted) whose rows written exceed autovacuum's own rule, ``50 + 10%`` of
    the rows its statistics know of, at once rather than on autovacuum's next round.

    A writer that fills a table from nothing (an audit's first quality windows) would
    otherwise leave the planner costing it as empty until then, and a lookup meant to be one
    index probe per key can become a scan of every key's rows (a dashboard's 5 ms query took
    200 ms). Best effort: waits at most a second for a table's lock, and any error is logged
    only. Returns the tables analysed."""
    wanted = {name: int(n) for name, n in written.items() if n > 0}
    if not wanted:
        return []
    done: list[str] = []
    try:
        with session_scope(factory) as session:
            if session.get_bind().dialect.name != "postgresql":
                return []
            session.execute(text("SET LOCAL lock_timeout = '1s'"))
            known = dict(session.execute(
                text("SELECT t.name, c.reltuples FROM unnest(CAST(:names AS text[])) AS t(name) "
                     "JOIN pg_class c ON c.oid = to_regclass(t.name)"), {"names": list(wanted)}).all())
            for name, n in sorted(wanted.items()):
                if name in known and n > _ANALYZE_THRESHOLD + _ANALYZE_SCALE * max(float(known[name]), 0.0):
                    # the name is a table the statistics know (to_regclass found it), quoted
                    session.execute(text(f'ANALYZE "{name}"'))
                    done.append(name)
    except Exception as exc:  # never fails the writer: autovacuum will still come round
        log.warning("could not refresh the planner statistics of %s (%s: %s)", sorted(wanted),
                    exc.__class__.__name__, exc)
        return []
    return done
