"""PostgreSQL: the annotation table has one partition per dataset (``LIST (dataset_id)``).

A partition is a plain table ``annotation_p<dataset id>`` made with a ``CHECK
(dataset_id = <id>)`` constraint (so attaching it needs no validation scan) and its own
primary key; ``ALTER TABLE annotation ATTACH PARTITION`` then takes only a
``SHARE UPDATE EXCLUSIVE`` lock on ``annotation``, which readers and writers of other
datasets never wait for. (``CREATE TABLE ... PARTITION OF`` would lock the whole table.)

Callers hold the dataset's row lock (``UPDATE dataset ... data_version + 1``) while they
look for and create a dataset's partition, so two writers never both create it. The
general path does all of this inside its transaction. The bulk first load fills and
indexes the table on a second connection, which commits it before the importing
transaction attaches it; if that transaction then fails, the table is left unattached
(invisible to every query of ``annotation``) and is dropped by the next
:func:`create_annotation_partition_table` for the dataset, or at once when possible.
SQLite has no partitions; nothing here is called on it.
"""

from __future__ import annotations

import re

from sqlalchemy import Connection, text

__all__ = [
    "PARTITION_PATTERN",
    "add_annotation_partition_key",
    "annotation_partition",
    "attach_annotation_partition",
    "create_annotation_partition_table",
    "drop_unattached_annotation_partition",
    "ensure_annotation_partition",
    "has_annotation_partition",
]

KEY_COLUMNS = "item_id, annotator_id, dataset_id"
"""The annotation key on PostgreSQL: ``dataset_id`` last, as it never differs within a partition."""

PARTITION_PATTERN = re.compile(r"^annotation_p\d+$")
"""The names of the annotation partitions (Alembic's comparison skips these tables)."""


def annotation_partition(dataset_id: int) -> str:
    """The name of the dataset's annotation partition."""
    return f"annotation_p{int(dataset_id)}"


def has_annotation_partition(conn: Connection, dataset_id: int) -> bool:
    """Whether the dataset's partition is attached to ``annotation``."""
    return conn.execute(text(
        "SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = CAST('annotation' AS regclass) AND c.relname = :name"),
        {"name": annotation_partition(dataset_id)}).first() is not None


def drop_unattached_annotation_partition(conn: Connection, dataset_id: int) -> bool:
    """Drop the dataset's partition table if it exists but is not attached (a failed load's)."""
    name = annotation_partition(dataset_id)
    left = conn.execute(text(
        "SELECT 1 FROM pg_class c WHERE c.relname = :name AND c.relnamespace = CAST(current_schema() AS regnamespace) "
        "AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)"), {"name": name}).first()
    if left is None:
        return False
    conn.execute(text(f"DROP TABLE {name}"))
    return True


def create_annotation_partition_table(conn: Connection, dataset_id: int) -> str:
    """A new, empty, not yet attached table shaped like ``annotation`` for one dataset.

    A table of that name left unattached by a failed bulk load is dropped first.
    """
    name = annotation_partition(dataset_id)
    drop_unattached_annotation_partition(conn, dataset_id)
    conn.execute(text(
        f"CREATE TABLE {name} (LIKE annotation INCLUDING DEFAULTS, "
        f"CONSTRAINT ck_{name}_dataset CHECK (dataset_id = {int(dataset_id)}))"))
    return name


def add_annotation_partition_key(conn: Connection, dataset_id: int, *, maintenance_work_mem_mb: int = 0) -> None:
    """Build the table's primary key (one sorted index build)."""
    name = annotation_partition(dataset_id)
    if maintenance_work_mem_mb > 0:
        # The sort of the index build stays in memory up to this size (this transaction only).
        conn.execute(text(f"SET LOCAL maintenance_work_mem = '{int(maintenance_work_mem_mb)}MB'"))
        # One process: the bulk load builds this index while its other connection copies
        # the items, and parallel workers then only compete with that for the cores (the
        # 10M-row bench: 16.0 s serial, 18-19 s with two workers, on two cores).
        conn.execute(text("SET LOCAL max_parallel_maintenance_workers = 0"))
    # A primary key (not only a unique index): the parent's key adopts it when attaching.
    conn.execute(text(f"ALTER TABLE {name} ADD CONSTRAINT {name}_pkey PRIMARY KEY ({KEY_COLUMNS})"))


def attach_annotation_partition(conn: Connection, dataset_id: int, *, with_key: bool = True) -> None:
    """Attach the table as the dataset's partition (building its key first unless it has one)."""
    if with_key:
        add_annotation_partition_key(conn, dataset_id)
    name = annotation_partition(dataset_id)
    conn.execute(text(f"ALTER TABLE annotation ATTACH PARTITION {name} FOR VALUES IN ({int(dataset_id)})"))


def ensure_annotation_partition(conn: Connection, dataset_id: int) -> bool:
    """Create and attach the dataset's (empty) partition when it has none; True if created."""
    if has_annotation_partition(conn, dataset_id):
        return False
    create_annotation_partition_table(conn, dataset_id)
    attach_annotation_partition(conn, dataset_id)
    return True
