"""Alembic environment: Auditor's metadata, the configured database, batch mode on SQLite."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from auditor.db.models import Base
from auditor.db.partitions import PARTITION_PATTERN
from auditor.db.session import make_engine

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _include_name(name: str | None, type_: str, parent_names) -> bool:
    # PostgreSQL's per-dataset annotation partitions are data, not schema.
    return not (type_ == "table" and name is not None and PARTITION_PATTERN.match(name))


def _configure(connection: Connection | None = None, **kwargs) -> None:
    context.configure(
        target_metadata=target_metadata,
        connection=connection,
        # SQLite cannot ALTER most things in place; batch mode rebuilds the table.
        render_as_batch=True,
        compare_type=True,
        include_name=_include_name,
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        # A caller (tests, `auditor db upgrade`) lent us its connection.
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or None)
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
