"""Migrations: one head, empty → head → empty → head on both databases, models match."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect

from auditor.db import Base, make_engine, migrate


def test_migrations_have_a_single_head():
    assert len(migrate.heads()) == 1, f"several heads, merge them: {migrate.heads()}"


def _fresh_engine(backend, pg_database, tmp_path):
    if backend == "sqlite":
        return make_engine(f"sqlite:///{tmp_path / 'fresh.sqlite3'}")
    return make_engine(pg_database())


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_upgrade_downgrade_upgrade_and_check(backend, request, tmp_path):
    pg_database = request.getfixturevalue("pg_database") if backend == "postgresql" else None
    engine = _fresh_engine(backend, pg_database, tmp_path)
    try:
        migrate.upgrade(engine)
        tables = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        # `alembic check`: the models and the migrated schema agree (raises on any diff).
        cfg = migrate.alembic_config(engine)
        with engine.connect() as conn:
            cfg.attributes["connection"] = conn
            command.check(cfg)

        migrate.downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}

        migrate.upgrade(engine)
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_every_constraint_is_named_by_the_convention():
    for table in Base.metadata.sorted_tables:
        for constraint in table.constraints:
            assert constraint.name, f"{table.name}: unnamed {type(constraint).__name__}"
        for index in table.indexes:
            assert index.name and index.name.startswith(f"ix_{table.name}_"), index
