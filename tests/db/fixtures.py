"""Database fixtures shared by every test package (imported by ``tests/conftest.py``).

``pg_engine``      a migrated PostgreSQL database of its own for the test session
``sqlite_engine``  a migrated SQLite file of its own for one test
``db_engine``      both of the above, one after the other (parametrized)
``pg_database``    a factory: a new, empty, uniquely named PostgreSQL database (URL)

PostgreSQL is found at ``AUDITOR_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). Each database is named
``auditor_test_<random>`` and dropped afterwards, so several test runs share one server.
With ``CI=true`` an unreachable server fails the tests; elsewhere they skip, saying why.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, make_url
from sqlalchemy.engine import URL

from auditor.db import make_engine, migrate

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _server_url() -> URL:
    url = make_url(os.environ.get("AUDITOR_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL))
    return url.set(drivername="postgresql+psycopg")


def _admin_connect():
    import psycopg

    url = _server_url()
    return psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password,
        dbname=url.database, autocommit=True, connect_timeout=5,
    )


def _require_postgres() -> None:
    try:
        _admin_connect().close()
    except Exception as exc:  # any connection failure means the same thing here
        message = f"PostgreSQL not reachable at {_server_url().render_as_string()}: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message} (CI=true: the database tests must run)", pytrace=False)
        pytest.skip(f"{message}; set AUDITOR_TEST_POSTGRES_URL or start PostgreSQL")


def _create_database() -> str:
    name = f"auditor_test_{uuid.uuid4().hex[:12]}"
    with _admin_connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def _drop_database(name: str) -> None:
    with _admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_database() -> Iterator[Callable[[], URL]]:
    """Factory of empty PostgreSQL databases (URLs); all are dropped at the end of the session."""
    _require_postgres()
    created: list[str] = []

    def make() -> URL:
        name = _create_database()
        created.append(name)
        return _server_url().set(database=name)

    yield make
    for name in created:
        _drop_database(name)


@pytest.fixture(scope="session")
def pg_engine(pg_database) -> Iterator[Engine]:
    """A migrated PostgreSQL database for the whole session (tests use their own workspaces)."""
    engine = make_engine(pg_database())
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "auditor.sqlite3"
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    engine.dispose()
    return path


@pytest.fixture
def sqlite_engine(_sqlite_template, tmp_path) -> Iterator[Engine]:
    """A migrated SQLite file of this test's own (a copy of one migrated template)."""
    path = tmp_path / "auditor.sqlite3"
    shutil.copyfile(_sqlite_template, path)
    engine = make_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_engine(request) -> Engine:
    """The same test on SQLite and on PostgreSQL."""
    return request.getfixturevalue("sqlite_engine" if request.param == "sqlite" else "pg_engine")
