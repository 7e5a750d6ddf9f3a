"""Shared fixtures: where the public datasets live, and how tests that need them skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench._datasets import shared_dir

SHARED = shared_dir()


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The public multi-annotator datasets; skips the test when they are absent."""
    if SHARED is None:
        pytest.skip(
            "public datasets not found: put the project's shared/ folder next to the checkout "
            "or set AUDITOR_SHARED_DIR"
        )
    return SHARED / "datasets"


# --- database fixtures (tests/db/fixtures.py): pg_engine, sqlite_engine, db_engine, pg_database ---
from tests.db.fixtures import (  # noqa: E402, F401
    _sqlite_template,
    db_engine,
    pg_database,
    pg_engine,
    sqlite_engine,
)

# --- end database fixtures ---


# --- CI: a test that needs a service never passes as "skipped" -------------------------
SERVICE_FIXTURES = {"pg_engine", "pg_database", "pg_factory", "db_engine", "redis_url", "worker_env", "start_worker"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI", "").lower() != "true" or not report.skipped:
        return
    needs_service = item.get_closest_marker("services") is not None or bool(
        SERVICE_FIXTURES & set(getattr(item, "fixturenames", ()))
    )
    if needs_service:
        report.outcome = "failed"
        report.longrepr = f"CI=true: {item.nodeid} needs PostgreSQL/Redis/Celery and must run, not skip " \
                          f"({report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr})"
