"""Ingestion use cases: validate a whole batch, then write it in one step, or write nothing.

Every import runs the same way on SQLite and PostgreSQL:

1. the batch's checksum (content + options) and idempotency key are looked up: a batch
   seen before is a no-op;
2. the file is streamed into a temporary staging table (PostgreSQL: ``COPY`` via
   psycopg 3, a long CSV straight from its bytes); per-row checks run while reading
   (or, for the raw ``COPY``, as one SQL pass), cross-row checks as SQL on the staging
   table;
3. under a lock on the dataset row (``data_version`` + 1), set-wise ``INSERT ... SELECT``
   statements create the missing annotators and items, move re-labelled annotations
   to the history table, upsert the rows, keep ``item.label_counts`` current and
   write the batch record and an outbox row in the same transaction.

On PostgreSQL, the first long CSV/TSV load into a dataset without items or
annotations takes a bulk path instead of steps 2-3 (:func:`_try_bulk_first_load`,
:mod:`auditor.ingest.bulk`): same checks and messages, the rows parsed on the client
and streamed, block by block, by one binary ``COPY`` into the dataset's new partition
of ``annotation`` on a second connection, which the batch's transaction attaches.

Any invalid row raises :class:`ImportRejected` and the batch's savepoint is rolled
back, so nothing of it is written even if the caller commits. The caller owns the
session and the transaction (and commits).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import queue
import re
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

import numpy as np
from sqlalchemy import Connection, Engine, create_engine, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from auditor.db.models import Dataset, ImportBatch, ImportKind, Model, Release, Tier, Workspace
from auditor.db.partitions import (
    add_annotation_partition_key,
    attach_annotation_partition,
    create_annotation_partition_table,
    drop_unattached_annotation_partition,
    ensure_annotation_partition,
    has_annotation_partition,
)
from auditor.db.session import WRITE_OPTIONS
from auditor.ingest import bulk, formats
from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, IngestError, RowError
from auditor.ingest.formats import (
    MAX_ID_LENGTH,
    MAX_LINE_BYTES,
    AnnotationDefaults,
    Source,
    open_source,
)

__all__ = [
    "DEFAULT_WORKSPACE",
    "FIELD_NAMES",
    "ImportResult",
    "create_dataset",
    "delete_dataset",
    "get_dataset",
    "get_workspace",
    "import_annotations",
    "import_gold",
    "import_predictions",
    "parse_field_map",
]

DEFAULT_WORKSPACE = "default"
FIELD_NAMES = ("item_id", "annotator_id", "label", "labels", "probabilities", "vendor", "tier", "timestamp",
               "source")
"""Fields a batch's columns may be mapped to (``field_map``): the CLI's ``--field``, the API's ``field``."""


def parse_field_map(pairs: Iterable[str]) -> dict[str, str]:
    """``FIELD=COLUMN`` or ``FIELD:COLUMN`` pairs (e.g. ``item_id=uid``) as a ``field_map``.

    A field name holds neither ``=`` nor ``:``, so the first of them separates the pair
    and a column name may contain either. Raises :class:`IngestError` naming the bad pair.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        cut = min((i for i in (pair.find("="), pair.find(":")) if i >= 0), default=-1)
        name, column = (pair[:cut].strip(), pair[cut + 1:].strip()) if cut >= 0 else ("", "")
        if not name or not column:
            raise IngestError(f"{pair!r}: expected FIELD=COLUMN or FIELD:COLUMN, e.g. item_id=uid")
        if name not in FIELD_NAMES:
            raise IngestError(f"{pair!r}: {name!r} is not a field; fields are {', '.join(FIELD_NAMES)}")
        if name in out and out[name] != column:
            raise IngestError(f"{pair!r}: field {name!r} is mapped twice")
        out[name] = column
    return out
_COPY_CHUNK_ROWS = 5000


@dataclass(frozen=True)
class ImportResult:
    """What an import did. ``status``: ``imported``, ``duplicate`` (seen before) or ``unchanged``."""

    status: str
    kind: str
    dataset: str
    rows: int
    data_version: int
    batch_id: int | None = None
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    new_items: int = 0
    new_annotators: int = 0
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.status == "imported"


# --- workspaces and datasets -------------------------------------------------------


def get_workspace(session: Session, slug: str = DEFAULT_WORKSPACE, *, create: bool = False) -> Workspace:
    """The workspace ``slug``; with ``create=True`` it is made when missing."""
    ws = session.scalar(select(Workspace).where(Workspace.slug == slug))
    if ws is None:
        if not create:
            raise IngestError(f"unknown workspace {slug!r}")
        ws = Workspace(slug=slug, name=slug)
        session.add(ws)
        session.flush()
    return ws


def _check_labels(labels: Sequence[str]) -> list[str]:
    out = [str(lab).strip() for lab in labels]
    if not out:
        raise IngestError("a dataset needs at least one label")
    if any(not lab for lab in out):
        raise IngestError("labels must be non-empty strings")
    dup = sorted({lab for lab in out if out.count(lab) > 1})
    if dup:
        raise IngestError(f"duplicate labels: {dup}")
    return out


def create_dataset(session: Session, name: str, labels: Sequence[str], *, workspace: str = DEFAULT_WORKSPACE,
                   description: str = "") -> Dataset:
    """Create the dataset ``name`` with an ordered label set (idempotent for identical labels)."""
    name = name.strip()
    if not name:
        raise IngestError("a dataset needs a name")
    labels = _check_labels(labels)
    ws = get_workspace(session, workspace, create=True)
    existing = session.scalar(select(Dataset).where(Dataset.workspace_id == ws.id, Dataset.name == name))
    if existing is not None:
        if list(existing.labels) != labels:
            raise IngestError(f"dataset {name!r} exists with labels {existing.labels}, not {labels}")
        return existing
    ds = Dataset(workspace_id=ws.id, name=name, labels=labels, description=description, data_version=0)
    session.add(ds)
    session.flush()
    return ds


def get_dataset(session: Session, name: str, *, workspace: str = DEFAULT_WORKSPACE) -> Dataset:
    """The dataset ``name``; an unknown name is an :class:`IngestError`."""
    ds = session.scalar(
        select(Dataset).join(Workspace).where(Workspace.slug == workspace, Dataset.name == name))
    if ds is None:
        raise IngestError(f"unknown dataset {name!r} in workspace {workspace!r}")
    return ds


def _write_connection(session: Session) -> Connection:
    """The session's connection; a writer's ``BEGIN IMMEDIATE`` on SQLite if nothing ran yet."""
    if session.in_transaction():
        return session.connection()
    return session.connection(execution_options=WRITE_OPTIONS)


def delete_dataset(session: Session, name: str, *, workspace: str = DEFAULT_WORKSPACE) -> None:
    """Delete a dataset with its items, annotations (and their history), predictions and results."""
    conn = _write_connection(session)
    ds = get_dataset(session, name, workspace=workspace)
    # These tables have no foreign key to cascade along (see auditor.db.models).
    for table in ("annotation_history", "annotation", "prediction", "item"):
        conn.execute(text(f"DELETE FROM {table} WHERE dataset_id = :d"), {"d": ds.id})
    session.delete(ds)
    session.flush()


# --- SQL dialect pieces ------------------------------------------------------------


class _Sql:
    """The few places where SQLite and PostgreSQL spell things differently."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.pg = conn.dialect.name == "postgresql"

    def vec(self, parts: Sequence[str]) -> str:
        if self.pg:
            return "ARRAY[" + ", ".join(f"CAST({p} AS INTEGER)" for p in parts) + "]"
        return "json_array(" + ", ".join(parts) + ")"

    def elem(self, column: str, index: int) -> str:
        if self.pg:
            return f"coalesce({column}[{index + 1}], 0)"
        return f"coalesce(json_extract({column}, '$[{index}]'), 0)"

    @property
    def distinct(self) -> str:
        return "IS DISTINCT FROM" if self.pg else "IS NOT"

    def run(self, sql: str, params: Mapping[str, Any] | None = None):
        return self.conn.execute(text(sql), dict(params or {}))

    def scalar(self, sql: str, params: Mapping[str, Any] | None = None):
        return self.run(sql, params).scalar()

    def temp_table(self, columns: str) -> str:
        name = f"stg_{uuid.uuid4().hex[:12]}"
        suffix = " ON COMMIT DROP" if self.pg else ""
        self.run(f"CREATE TEMPORARY TABLE {name} ({columns}){suffix}")
        return name

    def drop(self, *names: str) -> None:
        for name in names:
            self.run(f"DROP TABLE IF EXISTS {name}")

    def load_rows(self, table: str, columns: Sequence[str], rows: Iterable[tuple]) -> int:
        """Stream tuples into ``table`` (COPY on PostgreSQL, batched inserts on SQLite)."""
        n = 0
        if self.pg:
            raw = self.conn.connection.driver_connection
            with raw.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
                    n += 1
            return n
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        chunk: list[tuple] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) >= _COPY_CHUNK_ROWS:
                self.conn.exec_driver_sql(sql, chunk)
                n += len(chunk)
                chunk = []
        if chunk:
            self.conn.exec_driver_sql(sql, chunk)
            n += len(chunk)
        return n


def _sqlite_time(ts: datetime | None) -> str | None:
    # SQLAlchemy's SQLite DATETIME storage format (UTC, no offset), so the ORM reads it back.
    return None if ts is None else ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# --- the shared batch protocol ------------------------------------------------------


@dataclass
class _Batch:
    session: Session
    sql: _Sql
    dataset: Dataset
    kind: ImportKind
    fmt: str
    source: Source
    checksum: str
    idempotency_key: str | None
    submitted_by: str | None
    release_id: int | None = None
    version: int = 0
    batch_id: int = 0
    may_set_tier: bool = True


def _checksum(source: Source, kind: ImportKind, fmt: str, options: Mapping[str, Any]) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([kind.value, fmt, dict(options)], sort_keys=True, default=str).encode())
    digest.update(b"\0")
    for chunk in source.chunks():
        digest.update(chunk)
    return digest.hexdigest()


def _seen_before(session: Session, dataset: Dataset, checksum: str, key: str | None) -> ImportBatch | None:
    if key is not None:
        prior = session.scalar(select(ImportBatch).where(ImportBatch.dataset_id == dataset.id,
                                                         ImportBatch.idempotency_key == key))
        if prior is not None:
            if prior.checksum != checksum:
                raise IngestError(f"idempotency key {key!r} was already used for a different batch "
                                  f"(batch {prior.id}); use a new key for new content")
            return prior
    return session.scalar(select(ImportBatch).where(ImportBatch.dataset_id == dataset.id,
                                                    ImportBatch.checksum == checksum))


def _duplicate_result(prior: ImportBatch, dataset: Dataset) -> ImportResult:
    return ImportResult(
        status="duplicate", kind=prior.kind.value, dataset=dataset.name, rows=prior.row_count,
        data_version=dataset.data_version, batch_id=prior.id,
        message=f"already imported as batch {prior.id} at data_version {prior.data_version}; nothing changed",
    )


def _lock_and_bump(b: _Batch) -> None:
    # The row lock serialises writers of one dataset until commit; the new version names this batch.
    b.version = int(b.sql.scalar(
        "UPDATE dataset SET data_version = data_version + 1, updated_at = CURRENT_TIMESTAMP "
        "WHERE id = :d RETURNING data_version", {"d": b.dataset.id}))


def _record_batch(b: _Batch, rows: int) -> None:
    batch = ImportBatch(
        workspace_id=b.dataset.workspace_id, dataset_id=b.dataset.id, kind=b.kind, format=b.fmt,
        source_name=b.source.name[-1024:], release_id=b.release_id, submitted_by=b.submitted_by,
        row_count=rows, checksum=b.checksum, idempotency_key=b.idempotency_key, data_version=b.version,
    )
    b.session.add(batch)
    b.session.flush()
    b.batch_id = batch.id


def _finish(b: _Batch, stats: dict[str, int]) -> None:
    b.sql.run("UPDATE import_batch SET stats = :s WHERE id = :b",
              {"s": json.dumps(stats), "b": b.batch_id})
    b.sql.run("INSERT INTO audit_outbox (dataset_id, data_version, batch_id, reason) VALUES (:d, :v, :b, :r)",
              {"d": b.dataset.id, "v": b.version, "b": b.batch_id, "r": b.kind.value})
    b.session.expire(b.dataset, ["data_version", "updated_at"])


@contextmanager
def _savepoint(session: Session):
    """A savepoint; rolled back (and the error passed on) when the block raises."""
    nested = session.begin_nested()
    # The ORM emits SAVEPOINT lazily, on its next use of the connection; our statements go
    # through the Connection directly, so make it emit the savepoint now.
    session.connection()
    try:
        yield nested
    except BaseException:
        if nested.is_active:
            nested.rollback()
        raise
    else:
        nested.commit()


def _prepare(session: Session, dataset: str | Dataset, source, kind: ImportKind, fmt: str | None,
             options: Mapping[str, Any], *, workspace: str, idempotency_key: str | None,
             submitted_by: str | None, allowed: Sequence[str]) -> tuple[_Batch, ImportResult | None]:
    conn = _write_connection(session)
    sql = _Sql(conn)
    if sql.pg:
        # Naive timestamps in files mean UTC, as in the Python reader. The batch's
        # GROUP BYs and hash joins run in memory up to this size instead of spilling.
        sql.run("SET LOCAL TimeZone = 'UTC'")
        sql.run("SET LOCAL work_mem = '256MB'")
    ds = dataset if isinstance(dataset, Dataset) else get_dataset(session, dataset, workspace=workspace)
    src = open_source(source)
    fmt = fmt or formats.detect_format(src, kind.value)
    if fmt not in allowed:
        raise IngestError(f"format {fmt!r} cannot hold {kind.value}; use one of {list(allowed)}")
    checksum = _checksum(src, kind, fmt, options)
    batch = _Batch(session, sql, ds, kind, fmt, src, checksum, idempotency_key, submitted_by)
    prior = _seen_before(session, ds, checksum, idempotency_key)
    return batch, (_duplicate_result(prior, ds) if prior is not None else None)


def _recheck_under_lock(b: _Batch) -> ImportResult | None:
    prior = _seen_before(b.session, b.dataset, b.checksum, b.idempotency_key)
    return None if prior is None else _duplicate_result(prior, b.dataset)


class _NoChange(Exception):
    """Raised inside the merge savepoint when the batch would change nothing (or was seen meanwhile)."""

    def __init__(self, message: str, result: ImportResult | None = None):
        super().__init__(message)
        self.result = result


# --- annotations ---------------------------------------------------------------------

_TS_PATTERN = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$"


def _raw_csv_plan(b: _Batch, field_map: Mapping[str, str] | None) -> list[str] | None:
    """The header when a long CSV can go straight to ``COPY`` (PostgreSQL), else None."""
    if not b.sql.pg or b.fmt not in ("csv", "tsv"):
        return None
    head = b.source.head(1 << 16)
    try:
        first = head.split(b"\n", 1)[0].decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    delimiter = "\t" if b.fmt == "tsv" or b.source.name.lower().removesuffix(".gz").endswith((".tsv", ".tab")) else ","
    header = [h.strip() for h in next(csv.reader(io.StringIO(first), delimiter=delimiter), [])]
    inverse = {src: canonical for canonical, src in (field_map or {}).items()}
    names = [inverse.get(h, h) for h in header]
    if not {"item_id", "annotator_id", "label"} <= set(names) or len(set(names)) != len(names):
        return None
    if len(names) > _MAX_STAGED_COLUMNS:
        # The staging table would pass PostgreSQL's 1,600 columns: the reader copes with any width.
        return None
    return names


#: Widest header the COPY staging table takes (PostgreSQL allows 1,600 columns a table).
_MAX_STAGED_COLUMNS = 1000


_COPY_LINE = re.compile(r"line (\d+)")
_COPY_COLUMN = re.compile(r'column "?(c\d+)"?')


def _copy_error(exc: Exception, header: list[str]) -> RowError:
    diag = getattr(exc, "diag", None)
    message = getattr(diag, "message_primary", None) or str(exc).splitlines()[0]
    context = getattr(diag, "context", None) or ""
    line = _COPY_LINE.search(context) or _COPY_LINE.search(str(exc))
    row = int(line.group(1)) - 1 if line else 0
    column = _COPY_COLUMN.search(message) or _COPY_COLUMN.search(context)
    name = header[int(column.group(1)[1:])] if column and int(column.group(1)[1:]) < len(header) else None
    message = re.sub(r'column "?c(\d+)"?', lambda m: f"column {header[int(m.group(1))]!r}"
                     if int(m.group(1)) < len(header) else m.group(0), message)
    if "extra data after last expected column" in message:
        message, name = f"more than the header's {len(header)} columns", None
    elif "missing data for column" in message:
        message, name = f"fewer than the header's {len(header)} columns", None
    elif "invalid byte sequence" in message:
        message = f"not valid UTF-8 text ({message})"
    return RowError(row, name, message)


def _stage_raw_csv(b: _Batch, header: list[str], labels: Sequence[str], defaults: AnnotationDefaults,
                   progress) -> tuple[str, str, int, str]:
    """PostgreSQL: COPY the CSV bytes into text columns, then check every row in one SQL pass."""
    sql = b.sql
    cols = [f"c{i}" for i in range(len(header))]
    table = sql.temp_table(", ".join(f"{c} text" for c in cols) + ", row_no bigint GENERATED ALWAYS AS IDENTITY")
    delimiter = "E'\\t'" if b.fmt == "tsv" or b.source.name.lower().removesuffix(".gz").endswith((".tsv", ".tab")) else "','"
    raw = sql.conn.connection.driver_connection
    copy_sql = (f"COPY {table} ({', '.join(cols)}) FROM STDIN "
                f"WITH (FORMAT csv, HEADER true, DELIMITER {delimiter}, ENCODING 'UTF8')")
    import psycopg  # only this PostgreSQL path needs the driver's own errors

    try:
        with _savepoint(b.session), raw.cursor() as cur:
            with cur.copy(copy_sql) as copy:
                for chunk in b.source.chunks(progress, max_line=MAX_LINE_BYTES):
                    copy.write(chunk)
            rows = cur.rowcount
    except psycopg.Error as exc:
        raise ImportRejected([_copy_error(exc, header)], source=b.source.name) from None
    # Temporary tables are never analysed by autovacuum; without statistics the planner
    # picks nested loops for the batch's joins.
    sql.run(f"ANALYZE {table}")
    col = {name: f"nullif(btrim({c}), '')" for name, c in zip(header, cols, strict=True)}
    label_array = "ARRAY[" + ", ".join(_quote(str(lab)) for lab in labels) + "]::text[]"
    vendor = col.get("vendor", "NULL")
    tier = col.get("tier", "NULL")
    ts = col.get("timestamp", "NULL")
    if defaults.vendor is not None:
        vendor = f"coalesce({vendor}, {_quote(defaults.vendor)})"
    if defaults.tier is not None:
        tier = f"coalesce({tier}, {_quote(defaults.tier)})"
    checks = [
        (f"{col['item_id']} IS NULL", "'item_id'", "'missing'"),
        (f"{col['annotator_id']} IS NULL", "'annotator_id'", "'missing'"),
        (f"length({col['item_id']}) > {MAX_ID_LENGTH}", "'item_id'",
         f"'is ' || length({col['item_id']}) || ' characters long; ids have at most {MAX_ID_LENGTH}'"),
        (f"length({col['annotator_id']}) > {MAX_ID_LENGTH}", "'annotator_id'",
         f"'is ' || length({col['annotator_id']}) || ' characters long; ids have at most {MAX_ID_LENGTH}'"),
        (f"{col['label']} IS NULL", "'label'", "'missing'"),
        (f"array_position({label_array}, {col['label']}) IS NULL", "'label'",
         f"quote_literal({col['label']}) || ' is not one of the dataset''s labels ' || "
         f"{_quote(str(list(map(str, labels))))}"),
        (f"{tier} IS NOT NULL AND {tier} NOT IN ('crowd', 'expert')", "'tier'",
         f"quote_literal({tier}) || ' is not one of [''crowd'', ''expert'']'"),
        (f"{ts} IS NOT NULL AND {ts} !~ {_quote(_TS_PATTERN)}", "'timestamp'",
         f"quote_literal({ts}) || ' is not an ISO 8601 date-time'"),
    ]
    case_field = "CASE " + " ".join(f"WHEN {c} THEN {f}" for c, f, _ in checks) + " END"
    case_reason = "CASE " + " ".join(f"WHEN {c} THEN {r}" for c, _, r in checks) + " END"
    any_bad = " OR ".join(f"({c})" for c, _, _ in checks)
    # The per-row checks ride along the annotator aggregation (one pass over the batch);
    # only a batch with bad rows pays for a second pass that names them.
    ann = _stage_annotators(b, table, f"CASE WHEN {any_bad} THEN 1 ELSE 0 END",
                            annotator=col["annotator_id"], vendor=vendor, tier=tier)
    if ann is None:
        bad = sql.run(f"SELECT row_no, {case_field}, {case_reason}, count(*) OVER () FROM {table} "
                      f"WHERE {any_bad} ORDER BY row_no LIMIT {MAX_REPORTED_ERRORS}").all()
        raise ImportRejected([RowError(int(r), f, reason) for r, f, reason, _ in bad], source=b.source.name,
                             bad_rows=int(bad[0][3]) if bad else 0)
    src = (f"(SELECT row_no, {col['item_id']} AS item_ext, {col['annotator_id']} AS annotator_ext, "
           f"CAST(array_position({label_array}, {col['label']}) - 1 AS SMALLINT) AS label, "
           f"{vendor} AS vendor, {tier} AS tier, CAST({ts} AS TIMESTAMPTZ) AS ts FROM {table})")
    return table, src, rows, ann


_ANNOTATION_FIELDS = ("item_id", "annotator_id", "label", "vendor", "tier", "timestamp")


def _delimiter(b: _Batch) -> str:
    tsv = b.fmt == "tsv" or b.source.name.lower().removesuffix(".gz").endswith((".tsv", ".tab"))
    return "\t" if tsv else ","


def _dataset_is_empty(b: _Batch) -> bool:
    """No annotation partition and no items: a first load, which the bulk path can take."""
    d = b.dataset.id
    return not has_annotation_partition(b.sql.conn, d) and b.sql.scalar(
        "SELECT 1 FROM item WHERE dataset_id = :d LIMIT 1", {"d": d}) is None


def _try_bulk_first_load(b: _Batch, header: list[str], labels: Sequence[str], defaults: AnnotationDefaults,
                         progress) -> ImportResult | None:
    """PostgreSQL, long CSV/TSV, a dataset without items or annotations: the bulk path, else None.

    The file is read, checked and encoded on the client (:mod:`auditor.ingest.bulk`) and
    its annotation rows go through one binary ``COPY`` into a fresh table
    (:class:`_PartitionLoad`): for a small batch in this transaction; for a big one they
    stream, block by block as they are read, to a second connection, which then builds
    the table's key index in one sorted pass while this transaction copies in the items.
    This transaction then attaches the table as the dataset's partition.
    Whatever the path cannot settle exactly is left to the general path (its savepoint
    is rolled back first, and the fresh table dropped): None.
    """
    if not _dataset_is_empty(b):
        return None
    load = _PartitionLoad(b.sql.conn, b.dataset.id)  # batch and version are set once the lock is held
    try:
        with _savepoint(b.session):
            result = _bulk_first_load(b, header, labels, defaults, progress, load)
        load.attached = True  # kept, unless the caller's transaction fails (see partitions)
        return result
    except bulk.Fallback:
        return None
    except _NoChange as nc:  # the same batch was imported meanwhile
        assert nc.result is not None
        return nc.result
    except Exception as exc:
        # A pair twice in the batch (the key index refuses it) or a value PostgreSQL refuses
        # (an item id too long, say), from either connection: the general path names the rows.
        orig = getattr(exc, "orig", exc) if isinstance(exc, DBAPIError) else exc
        if (getattr(orig, "sqlstate", None) or "").startswith(("22", "23")):
            return None
        raise
    finally:
        load.discard()  # nothing, once attached; else the fresh table goes


_SIDE_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _side_engine(engine: Engine) -> Engine:
    """Connections of their own (no pool) for a bulk load's helpers.

    Taken from the engine's pool, they could wait forever: a pool of N connections and N
    loads at once, each holding one and waiting for another.
    """
    side = _SIDE_ENGINES.get(engine)
    if side is None:
        side = _SIDE_ENGINES[engine] = create_engine(engine.url, poolclass=NullPool)
    return side


def _copy_into_partition(conn: Connection, dataset_id: int, batch_id: int, data_version: int,
                         blocks: Iterable[memoryview | None], memory_mb: Callable[[], int]) -> None:
    """Create the dataset's partition table, ``COPY`` the rows in, build its key (not attached).

    The batch's constant columns come from defaults while the rows are copied (less to
    send and to parse), then the table is left as its shape says.
    """
    table = create_annotation_partition_table(conn, dataset_id)
    constants = {"dataset_id": dataset_id, "batch_id": batch_id, "data_version": data_version}
    conn.execute(text(f"ALTER TABLE {table} " + ", ".join(
        f"ALTER COLUMN {c} SET DEFAULT {int(v)}" for c, v in constants.items())))
    raw = conn.connection.driver_connection
    with raw.cursor() as cur, cur.copy(
            f"COPY {table} ({', '.join(bulk.ANNOTATION_COPY_COLUMNS)}) FROM STDIN (FORMAT binary)") as copy:
        copy.write(bulk.COPY_HEADER)
        for block in blocks:
            if block is None:
                raise _LoadAbandoned
            copy.write(block)
        copy.write(bulk.COPY_TRAILER)
    conn.execute(text(f"ALTER TABLE {table} " + ", ".join(f"ALTER COLUMN {c} DROP DEFAULT" for c in constants)))
    add_annotation_partition_key(conn, dataset_id, maintenance_work_mem_mb=memory_mb())


class _PartitionLoad:
    """The dataset's new annotation table: filled and indexed in the batch's transaction
    when the batch is small, else on a connection of its own.

    Up to ``INLINE_BYTES`` of ``COPY`` data is kept in memory and copied at :meth:`wait`
    by the batch's own connection (one transaction, as for any write). Past that, a
    thread with its own connection takes over: it writes the blocks from a short queue
    as they come and, at :meth:`finish`, builds the primary key and commits, so the
    ``COPY`` runs beside the client's reading and the index build beside the batch's own
    work. That table is committed but not attached (no query of ``annotation`` reaches
    it) until the batch's transaction attaches it; :meth:`discard` drops it unless the
    batch was kept. Callers hold the dataset's row lock throughout.
    """

    INLINE_BYTES = 8 << 20
    _DONE = object()

    def __init__(self, conn: Connection, dataset_id: int):
        self.main = conn
        self.engine = _side_engine(conn.engine)
        self.dataset_id = dataset_id
        self.batch_id = self.data_version = 0
        self.held: list[memoryview] | None = []  # None once the thread has taken over
        self.held_bytes = 0
        self.queue: queue.Queue = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self.memory_mb = 64
        self.committed = False
        self.attached = False
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        try:
            with self.engine.connect() as conn:
                _copy_into_partition(conn, self.dataset_id, self.batch_id, self.data_version,
                                     iter(self.queue.get, self._DONE), lambda: self.memory_mb)
                conn.commit()
                self.committed = True
        except BaseException as exc:  # passed on to the importing thread
            self.error = exc

    def _put(self, item: object) -> None:
        while True:
            if self.error is not None or (self.thread is not None and not self.thread.is_alive()):
                self._raise()
            try:
                self.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def send(self, block: memoryview) -> None:
        if self.held is not None:
            self.held.append(block)
            self.held_bytes += len(block)
            if self.held_bytes <= self.INLINE_BYTES:
                return
            held, self.held = self.held, None
            self.thread = threading.Thread(target=self._run, name=f"annotation-load-{self.dataset_id}",
                                           daemon=True)
            self.thread.start()
            for part in held:
                self._put(part)
            return
        self._put(block)

    def finish(self, n_rows: int) -> None:
        """End the ``COPY`` and start the key build (it runs on while the caller goes on)."""
        # About 60 bytes of sort memory per row keeps the index build in memory (capped).
        self.memory_mb = int(min(1024, max(64, n_rows * 64 >> 20)))
        if self.thread is not None:
            self._put(self._DONE)

    def wait(self) -> None:
        """Until the table is filled and keyed; its errors are raised here."""
        if self.held is not None:  # a small batch: in its own transaction
            _copy_into_partition(self.main, self.dataset_id, self.batch_id, self.data_version, self.held,
                                 lambda: self.memory_mb)
            return
        assert self.thread is not None
        self.thread.join()
        if self.error is not None:
            self._raise()

    def _raise(self) -> None:
        # The thread's error, raised in the batch's thread: a pair twice in the batch (the
        # key index refuses it) or a value PostgreSQL refuses sends the batch to the general
        # path there (:func:`_try_bulk_first_load`), which names the rows.
        exc = self.error
        if isinstance(exc, _LoadAbandoned) or exc is None:
            raise bulk.Fallback("the annotation load was abandoned")
        raise exc

    def discard(self) -> None:
        """Stop the thread if it runs; drop its table unless the batch was kept."""
        if self.thread is not None and self.thread.is_alive():
            while self.thread.is_alive():
                try:
                    self.queue.put(None, timeout=0.2)
                    break
                except queue.Full:
                    try:
                        self.queue.get_nowait()
                    except queue.Empty:
                        pass
            self.thread.join()
        if self.committed and not self.attached:
            with self.engine.connect() as conn:
                drop_unattached_annotation_partition(conn, self.dataset_id)
                conn.commit()


class _LoadAbandoned(Exception):
    """The importing thread gave the load up (a rejected or fallen-back batch)."""


class _IdRanges:
    """Fresh ids from a table's id sequence for a bulk load, on a connection of their own.

    ``ALTER SEQUENCE`` (here changing nothing) locks the sequence against every
    ``nextval`` until its transaction ends, so moving the sequence on by ``n`` with
    ``setval`` in that transaction hands this load ``n`` ids no one else can get, in a
    few milliseconds however large ``n`` is; ``nextval`` once per id costs about half a
    microsecond of server time each, which the load waits for. ``setval`` outlives the
    transaction: a failed load leaves a gap, never a reused id.

    That lock waits for every open transaction that has called ``nextval`` on the
    sequence (they hold a lock on it until they end), and holds up every later caller
    while it waits, so it is tried for at most ``LOCK_WAIT`` (a longer wait could even
    close a cycle through this load's own transaction, which PostgreSQL cannot see);
    then, or where the sequence may not be altered, the ids come from ``nextval``.
    """

    LOCK_WAIT = "50ms"

    def __init__(self, b: _Batch, table: str):
        self.engine = _side_engine(b.sql.conn.engine)
        self.sequence = str(b.sql.scalar(f"SELECT pg_get_serial_sequence('{table}', 'id')"))
        self.conn: Connection | None = None
        self.ranges = self.one_by_one = 0  # how the ids came (for tests and tracing)

    def take(self, n: int) -> np.ndarray:
        if self.conn is None:
            self.conn = self.engine.connect()
        try:
            ids = self._reserve(self.conn, n)
            self.ranges += 1
            return ids
        except DBAPIError as exc:
            # 55P03 lock_not_available (the wait ran out), 42501 insufficient_privilege
            if (getattr(exc.orig, "sqlstate", None) or "") not in ("55P03", "42501"):
                raise
        self.one_by_one += 1
        return self._nextval(self.conn, n)

    def _reserve(self, conn: Connection, n: int) -> np.ndarray:
        seq = self.sequence
        with conn.begin():
            conn.execute(text(f"SET LOCAL lock_timeout = '{self.LOCK_WAIT}'"))
            # Nothing waits on this commit: the batch's own commit flushes the log past it.
            conn.execute(text("SET LOCAL synchronous_commit = off"))
            conn.execute(text(f"ALTER SEQUENCE {seq} INCREMENT BY 1"))
            last, called = conn.execute(text(f"SELECT last_value, is_called FROM {seq}")).one()
            first = int(last) + 1 if called else int(last)
            conn.execute(text("SELECT setval(CAST(:s AS regclass), :v, true)"), {"s": seq, "v": first + n - 1})
        return np.arange(first, first + n, dtype=np.int64)

    def _nextval(self, conn: Connection, n: int) -> np.ndarray:
        data = bytearray()
        with conn.begin():  # ends at once, and with it this connection's lock on the sequence
            raw = conn.connection.driver_connection
            with raw.cursor() as cur, cur.copy(
                    f"COPY (SELECT nextval(CAST({_quote(self.sequence)} AS regclass)) "
                    f"FROM generate_series(1, {int(n)})) TO STDOUT (FORMAT binary)") as copy:
                for block in copy:
                    data += block
        rows = np.frombuffer(bytes(data), np.dtype([("n", ">i2"), ("len", ">i4"), ("id", ">i8")]), n,
                             len(bulk.COPY_HEADER))
        return np.sort(rows["id"].astype(np.int64))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _bulk_first_load(b: _Batch, header: list[str], labels: Sequence[str], defaults: AnnotationDefaults,
                     progress, load: _PartitionLoad) -> ImportResult:
    sql = b.sql
    d = b.dataset.id
    w = b.dataset.workspace_id
    columns = {name: i for i, name in enumerate(header) if name in _ANNOTATION_FIELDS}
    _lock_and_bump(b)
    prior = _recheck_under_lock(b)
    if prior is not None:
        raise _NoChange(prior.message, prior)
    if not _dataset_is_empty(b):  # another batch got in first: the general path merges
        raise bulk.Fallback("the dataset has rows now")
    _record_batch(b, 0)
    load.batch_id, load.data_version = b.batch_id, b.version
    created: list[int] = []

    def annotator_ids(names: list[str]) -> np.ndarray:
        # New annotators go in at once (vendor and tier are set from the whole batch at
        # the end); those the workspace has keep their ids.
        new = dict(sql.run("INSERT INTO annotator (workspace_id, external_id) SELECT :w, x FROM unnest(CAST(:names AS TEXT[])) x "
                           "ON CONFLICT (workspace_id, external_id) DO NOTHING RETURNING external_id, id",
                           {"w": w, "names": names}).all())
        created.extend(new.values())
        rest = [n for n in names if n not in new]
        if rest:
            new.update(sql.run("SELECT external_id, id FROM annotator WHERE workspace_id = :w "
                               "AND external_id = ANY(CAST(:names AS TEXT[]))", {"w": w, "names": rest}).all())
        return np.array([new[n] for n in names], np.int64)

    item_ids = _IdRanges(b, "item")
    try:
        loaded = bulk.stream_long_csv(
            b.source, delimiter=_delimiter(b), columns=columns, n_columns=len(header), labels=labels,
            defaults=defaults, progress=progress, new_item_ids=item_ids.take, new_annotator_ids=annotator_ids,
            send=load.send)
    finally:
        item_ids.close()
    load.finish(loaded.n_rows)
    ann = sql.temp_table("annotator_ext TEXT, first_row BIGINT, vendor TEXT, vendor2 TEXT, tier TEXT, "
                         "tier2 TEXT")
    sql.load_rows(ann, ["annotator_ext", "first_row", "vendor", "vendor2", "tier", "tier2"], loaded.annotator_rows)
    _refuse_expert_tier(b, ann)
    if created:
        # The new annotators take the batch's vendor and tier (conflicts are reported below).
        sql.run(f"UPDATE annotator a SET vendor = x.vendor, tier = coalesce(x.tier, :crowd) FROM {ann} x "
                f"WHERE a.workspace_id = :w AND a.external_id = x.annotator_ext AND a.id = ANY(:ids)",
                {"w": w, "ids": created, "crowd": Tier.CROWD.value})
    _merge_annotators(b, ann)
    sql.run("UPDATE import_batch SET row_count = :n WHERE id = :b", {"n": loaded.n_rows, "b": b.batch_id})
    raw = sql.conn.connection.driver_connection
    with raw.cursor() as cur, cur.copy("COPY item (id, dataset_id, external_id, label_counts) FROM STDIN") as copy:
        for block in bulk.item_copy_text(loaded.items, d, loaded.item_ids, loaded.item_counts):
            copy.write(block)
    load.wait()
    attach_annotation_partition(sql.conn, d, with_key=False)
    n_rows, new_items, new_annotators = loaded.n_rows, len(loaded.item_ids), len(created)
    stats = {"rows": n_rows, "inserted": n_rows, "relabeled": 0, "unchanged": 0, "new_items": new_items,
             "new_annotators": new_annotators}
    _finish(b, stats)
    return ImportResult(
        status="imported", kind="annotations", dataset=b.dataset.name, rows=n_rows, data_version=b.version,
        batch_id=b.batch_id, inserted=n_rows, updated=0, unchanged=0, new_items=new_items,
        new_annotators=new_annotators,
        message=(f"batch {b.batch_id}: {n_rows} new annotation(s), 0 re-label(s), 0 unchanged; "
                 f"{new_items} new item(s), {new_annotators} new annotator(s); data_version {b.version}"),
        details=stats,
    )


def _stage_annotators(b: _Batch, table: str, bad: str, *, annotator: str = "annotator_ext",
                      vendor: str = "vendor", tier: str = "tier") -> str | None:
    """One row per annotator of the batch; None when ``bad`` flags any row of the batch."""
    ann = b.sql.temp_table("annotator_ext TEXT, first_row BIGINT, vendor TEXT, vendor2 TEXT, tier TEXT, "
                           "tier2 TEXT, bad BIGINT")
    b.sql.run(f"INSERT INTO {ann} SELECT {annotator}, min(row_no), min({vendor}), max({vendor}), min({tier}), "
              f"max({tier}), sum({bad}) FROM {table} GROUP BY {annotator}")
    if b.sql.scalar(f"SELECT 1 FROM {ann} WHERE bad > 0 LIMIT 1") is not None:
        return None
    return ann


def _stage_rows(b: _Batch, rows: Iterable[tuple]) -> tuple[str, str, int, str]:
    sql = b.sql
    ts_type = "TIMESTAMPTZ" if sql.pg else "TEXT"
    table = sql.temp_table(f"row_no BIGINT, item_ext TEXT, annotator_ext TEXT, label SMALLINT, vendor TEXT, "
                           f"tier TEXT, ts {ts_type}")
    if not sql.pg:
        rows = ((r, i, a, lab, v, t, _sqlite_time(ts)) for r, i, a, lab, v, t, ts in rows)
    n = sql.load_rows(table, ["row_no", "item_ext", "annotator_ext", "label", "vendor", "tier", "ts"], rows)
    sql.run(f"ANALYZE {table}")
    ann = _stage_annotators(b, table, "0")
    return table, table, n, ann


def _duplicate_pairs(b: _Batch, src: str) -> list[RowError]:
    rows = b.sql.run(
        f"SELECT item_ext, annotator_ext, min(row_no), max(row_no) FROM {src} s "
        f"GROUP BY item_ext, annotator_ext HAVING count(*) > 1 ORDER BY 3 LIMIT {MAX_REPORTED_ERRORS}").all()
    return [RowError(int(last), "annotator_id",
                     f"annotator {ann!r} already labelled item {item!r} at row {first}; "
                     f"one label per (item, annotator) in a batch")
            for item, ann, first, last in rows]


def import_annotations(session: Session, dataset: str | Dataset, source: str | bytes | IO[bytes], *,
                       workspace: str = DEFAULT_WORKSPACE, format: str | None = None,
                       field_map: Mapping[str, str] | None = None, vendor: str | None = None,
                       tier: str | Tier | None = None, idempotency_key: str | None = None,
                       submitted_by: str | None = None, progress: Callable[[int], None] | None = None,
                       may_set_tier: bool = True) -> ImportResult:
    """Import one batch of annotations (all or nothing); see the module docstring.

    ``vendor``/``tier`` apply to rows that carry none. A re-label of an existing
    (item, annotator) supersedes it and moves the old row to ``annotation_history``.
    With ``may_set_tier=False`` (a vendor's batch) no row may make an annotator
    ``expert``: such a batch is refused, naming the row and the ``tier`` field.
    """
    tier_value = Tier(tier).value if tier is not None else None
    defaults = AnnotationDefaults(vendor=vendor, tier=tier_value)
    options = {"field_map": dict(field_map or {}), "vendor": vendor, "tier": tier_value}
    b, prior = _prepare(session, dataset, source, ImportKind.ANNOTATIONS, format, options, workspace=workspace,
                        idempotency_key=idempotency_key, submitted_by=submitted_by,
                        allowed=formats.ANNOTATION_FORMATS)
    if prior is not None:
        return prior
    b.may_set_tier = may_set_tier
    labels = list(b.dataset.labels)
    sql = b.sql
    tables: list[str] = []
    report = formats.LabelStudioReport()
    try:
        with _savepoint(session):
            header = _raw_csv_plan(b, field_map)
            if header is not None:
                bulk_result = _try_bulk_first_load(b, header, labels, defaults, progress)
                if bulk_result is not None:
                    return bulk_result
                table, src, n_rows, ann = _stage_raw_csv(b, header, labels, defaults, progress)
            else:
                rows = formats.read_annotations(b.source, b.fmt, labels, field_map=field_map, defaults=defaults,
                                                progress=progress, report=report)
                table, src, n_rows, ann = _stage_rows(b, rows)
            tables.extend([table, ann])
            if report.gold:
                gold_table = _stage_gold(b, report.gold)
                tables.append(gold_table)
                if n_rows == 0:  # an export of ground truth only: a gold batch
                    return _with_skipped(_merge_gold(b, gold_table, len(report.gold)), report)
            if n_rows == 0:
                raise ImportRejected([RowError(0, None, "the file holds no annotations" + _skipped_note(report))],
                                     source=b.source.name)
            if not sql.pg:
                # SQLite's upsert would silently merge two rows of one pair; on PostgreSQL
                # the primary key catches them for free in a batch of new items (below).
                dups = _duplicate_pairs(b, src)
                if dups:
                    raise ImportRejected(dups, source=b.source.name)
            try:
                with _savepoint(session):
                    result = _merge_annotations(b, src, ann, n_rows, labels, tables)
                    if report.gold:
                        result = _with_gold(b, result, gold_table)
                    if report.cancelled or report.empty:
                        result = _with_skipped(result, report)
            except _NoChange as nc:
                if report.gold and nc.result is None:  # the votes are known; the ground truth may be new
                    try:
                        with _savepoint(session):
                            return _with_skipped(_merge_gold(b, gold_table, len(report.gold)), report)
                    except _NoChange:
                        pass
                return nc.result or ImportResult(
                    status="unchanged", kind="annotations", dataset=b.dataset.name, rows=n_rows,
                    data_version=b.dataset.data_version, unchanged=n_rows, message=str(nc) + _skipped_note(report))
            except DBAPIError as exc:
                # PostgreSQL: a pair twice in the batch violates the primary key (or hits one
                # row twice in the upsert); name the rows. A value the raw path's pattern let
                # through but PostgreSQL refused (e.g. month 13) is a data exception (22xxx).
                dups = _duplicate_pairs(b, src) if sql.pg else []
                if dups:
                    raise ImportRejected(dups, source=b.source.name) from None
                code = getattr(exc.orig, "sqlstate", None) or ""
                if code.startswith("22"):
                    raise ImportRejected([RowError(0, "timestamp", str(exc.orig).splitlines()[0])],
                                         source=b.source.name) from None
                raise
            return result
    finally:
        if sql.conn.in_transaction() and not sql.pg:
            sql.drop(*tables)


def _skipped_note(report: formats.LabelStudioReport) -> str:
    parts = [f"{n} {what} annotation(s)" for n, what in ((report.cancelled, "cancelled"),
                                                         (report.empty, "empty (no choice)")) if n]
    return f" ({' and '.join(parts)} skipped)" if parts else ""


def _with_skipped(result: ImportResult, report: formats.LabelStudioReport) -> ImportResult:
    details = {**result.details, "skipped_cancelled": report.cancelled, "skipped_empty": report.empty}
    return dataclasses.replace(result, message=result.message + _skipped_note(report), details=details)


def _stage_gold(b: _Batch, rows: Sequence[tuple]) -> str:
    """Gold rows in a temporary table; two rows giving one item different labels reject the batch."""
    sql = b.sql
    table = sql.temp_table("row_no BIGINT, item_ext TEXT, label SMALLINT, source TEXT")
    sql.load_rows(table, ["row_no", "item_ext", "label", "source"], rows)
    conflicts = sql.run(
        f"SELECT item_ext, min(row_no), max(row_no) FROM {table} GROUP BY item_ext "
        f"HAVING min(label) <> max(label) ORDER BY 2 LIMIT {MAX_REPORTED_ERRORS}").all()
    if conflicts:
        raise ImportRejected([RowError(int(last), "ground_truth", f"item {item!r} has another ground-truth label "
                                                                  f"at row {first}")
                              for item, first, last in conflicts], source=b.source.name)
    return table


def _with_gold(b: _Batch, result: ImportResult, table: str) -> ImportResult:
    """The batch's ground truth as its items' gold labels, in the same batch and version."""
    sql = b.sql
    # A task with ground truth and no vote still names an item.
    gold_only = sql.run(f"INSERT INTO item (dataset_id, external_id) SELECT DISTINCT :d, item_ext FROM {table} s "
                        f"WHERE true ON CONFLICT (dataset_id, external_id) DO NOTHING", {"d": b.dataset.id}).rowcount
    changed = sql.run(
        f"UPDATE item SET gold_label = g.label, gold_source = g.source FROM "
        f"(SELECT item_ext, min(label) AS label, min(source) AS source FROM {table} GROUP BY item_ext) g "
        f"WHERE item.dataset_id = :d AND item.external_id = g.item_ext "
        f"AND (item.gold_label {sql.distinct} g.label OR item.gold_source {sql.distinct} g.source)",
        {"d": b.dataset.id}).rowcount
    details = {**result.details, "gold": changed, "new_items": result.new_items + gold_only}
    sql.run("UPDATE import_batch SET stats = :s WHERE id = :b", {"s": json.dumps(details), "b": b.batch_id})
    return dataclasses.replace(result, details=details, new_items=details["new_items"],
                               message=result.message + f"; {changed} gold label(s) from ground-truth annotations")


def _refuse_expert_tier(b: _Batch, ann: str) -> None:
    """A caller that may not set tiers (a vendor) names no annotator ``expert`` that is not one already.

    The expert tier makes an annotator part of every vendor's expert panel in the audit,
    so only admins and analysts decide it; naming ``crowd``, or ``expert`` for an
    annotator an admin registered as expert, changes nothing and is allowed.
    """
    if b.may_set_tier:
        return
    expert = Tier.EXPERT.value
    errors = [RowError(int(r), "tier", f"annotator {a!r}: a vendor cannot set the tier {expert!r} "
                                       f"(only admins and analysts register experts)")
              for a, r in b.sql.run(
                  f"SELECT x.annotator_ext, x.first_row FROM {ann} x WHERE (x.tier = :e OR x.tier2 = :e) "
                  f"AND NOT EXISTS (SELECT 1 FROM annotator a WHERE a.workspace_id = :w "
                  f"AND a.external_id = x.annotator_ext AND a.tier = :e) "
                  f"ORDER BY x.first_row LIMIT {MAX_REPORTED_ERRORS}",
                  {"e": expert, "w": b.dataset.workspace_id})]
    if errors:
        raise ImportRejected(errors, source=b.source.name)


def _merge_annotators(b: _Batch, ann: str) -> int:
    """Check the batch's annotators (one staged row each) against each other and the database; add new ones."""
    sql = b.sql
    w = b.dataset.workspace_id
    _refuse_expert_tier(b, ann)
    # Annotators (one staged row per distinct id), checked against each other and the database.
    errors = [RowError(int(r), "vendor" if v1 != v2 else "tier",
                       f"annotator {a!r} is given both {(v1 if v1 != v2 else t1)!r} and "
                       f"{(v2 if v1 != v2 else t2)!r} in this batch")
              for a, r, v1, v2, t1, t2 in sql.run(
                  f"SELECT annotator_ext, first_row, vendor, vendor2, tier, tier2 FROM {ann} "
                  f"WHERE vendor <> vendor2 OR tier <> tier2 ORDER BY first_row LIMIT {MAX_REPORTED_ERRORS}")]
    for a, r, old_v, new_v, old_t, new_t in sql.run(
            f"SELECT x.annotator_ext, x.first_row, a.vendor, x.vendor, a.tier, x.tier FROM {ann} x "
            f"JOIN annotator a ON a.workspace_id = :w AND a.external_id = x.annotator_ext "
            f"WHERE (x.vendor IS NOT NULL AND (a.vendor IS NULL OR a.vendor <> x.vendor)) "
            f"OR (x.tier IS NOT NULL AND a.tier <> x.tier) ORDER BY x.first_row LIMIT {MAX_REPORTED_ERRORS}",
            {"w": w}):
        if new_v is not None and old_v != new_v:
            errors.append(RowError(int(r), "vendor", f"annotator {a!r} is registered with vendor {old_v!r}, "
                                                     f"not {new_v!r}"))
        else:
            errors.append(RowError(int(r), "tier", f"annotator {a!r} is registered as {old_t!r}, not {new_t!r}"))
    if errors:
        raise ImportRejected(errors, source=b.source.name)
    return sql.run(
        f"INSERT INTO annotator (workspace_id, external_id, vendor, tier) "
        f"SELECT :w, annotator_ext, vendor, coalesce(tier, :crowd) FROM {ann} WHERE true "
        f"ON CONFLICT (workspace_id, external_id) DO NOTHING", {"w": w, "crowd": Tier.CROWD.value}).rowcount


def existing_items_probe(src: str, *, pg: bool) -> str:
    """SQL: 1 if a row of the staged batch ``src`` names an item of dataset ``:d`` with id ``<= :m``.

    Driven from the batch, one index probe per row (a LATERAL with LIMIT is never turned
    into a join): linear whatever the statistics say. Written as ``item ... IN (batch)
    LIMIT 1``, the planner, without statistics of ``item``, walked the whole dataset and
    re-scanned the batch for each of its items: 10k new items took a minute, 40k ten.
    """
    if pg:
        return (f"SELECT 1 FROM {src} s CROSS JOIN LATERAL (SELECT 1 FROM item i WHERE i.dataset_id = :d "
                f"AND i.external_id = s.item_ext AND i.id <= :m LIMIT 1) hit LIMIT 1")
    return (f"SELECT 1 FROM {src} s WHERE EXISTS (SELECT 1 FROM item i WHERE i.dataset_id = :d "
            f"AND i.external_id = s.item_ext AND i.id <= :m) LIMIT 1")


def _merge_annotations(b: _Batch, src: str, ann: str, n_rows: int, labels: Sequence[str],
                       tables: list[str]) -> ImportResult:
    sql = b.sql
    d = b.dataset.id
    w = b.dataset.workspace_id
    _lock_and_bump(b)
    prior = _recheck_under_lock(b)
    if prior is not None:
        raise _NoChange(prior.message, prior)
    if sql.pg:
        # Under the dataset's lock: its partition of ``annotation`` exists before any row goes in.
        ensure_annotation_partition(sql.conn, d)
    L = len(labels)

    new_annotators = _merge_annotators(b, ann)

    # Items: new ones arrive with their counts; ids above max_before are this batch's.
    had_items = sql.scalar("SELECT 1 FROM item WHERE dataset_id = :d LIMIT 1", {"d": d}) is not None
    max_before = int(sql.scalar("SELECT coalesce(max(id), 0) FROM item"))
    counts = [f"sum(CASE WHEN label = {c} THEN 1 ELSE 0 END)" for c in range(L)]
    # Into a dataset without items every item is new: skip the speculative-insert work.
    on_conflict = " ON CONFLICT (dataset_id, external_id) DO NOTHING" if had_items else ""
    # Ids in order of first appearance: the annotation rows then arrive (nearly) in key
    # order, so their primary-key index grows at its right edge without a sort.
    new_items = sql.run(
        f"INSERT INTO item (dataset_id, external_id, label_counts) "
        f"SELECT :d, item_ext, {sql.vec(counts)} FROM {src} s WHERE true GROUP BY item_ext "
        f"ORDER BY min(row_no){on_conflict}", {"d": d}).rowcount
    touches_old = had_items and sql.scalar(existing_items_probe(src, pg=sql.pg), {"d": d, "m": max_before}) is not None

    if touches_old and sql.pg:
        # The upsert below would let two identical rows of one pair pass (the second
        # finds nothing to change), so a batch touching existing items is checked here.
        dups = _duplicate_pairs(b, src)
        if dups:
            raise ImportRejected(dups, source=b.source.name)
    _record_batch(b, n_rows)
    params = {"d": d, "w": w, "b": b.batch_id, "v": b.version, "m": max_before}
    resolve = (f"FROM {src} s JOIN item i ON i.dataset_id = :d AND i.external_id = s.item_ext "
               f"JOIN annotator an ON an.workspace_id = :w AND an.external_id = s.annotator_ext")
    n_old = n_old_new = n_relabel = 0
    if touches_old:
        old = sql.temp_table("item_id BIGINT, annotator_id INTEGER, new_label SMALLINT, old_label SMALLINT")
        tables.append(old)
        sql.run(f"INSERT INTO {old} SELECT i.id, an.id, s.label, a.label {resolve} "
                f"LEFT JOIN annotation a ON a.dataset_id = :d AND a.item_id = i.id AND a.annotator_id = an.id "
                f"WHERE i.id <= :m", params)
        n_old, n_old_new, n_relabel = (int(x or 0) for x in sql.run(
            f"SELECT count(*), sum(CASE WHEN old_label IS NULL THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN old_label <> new_label THEN 1 ELSE 0 END) FROM {old}").one())
        if n_relabel:
            sql.run(f"INSERT INTO annotation_history (dataset_id, item_id, annotator_id, label, annotated_at, "
                    f"batch_id, data_version, created_at, superseded_by_batch_id, superseded_version) "
                    f"SELECT a.dataset_id, a.item_id, a.annotator_id, a.label, a.annotated_at, a.batch_id, "
                    f"a.data_version, a.created_at, :b, :v FROM annotation a JOIN {old} o "
                    f"ON a.dataset_id = :d AND a.item_id = o.item_id AND a.annotator_id = o.annotator_id "
                    f"WHERE o.old_label <> o.new_label", params)
    inserted = n_rows - n_old + n_old_new
    if inserted == 0 and n_relabel == 0:
        raise _NoChange(f"all {n_rows} annotations are already present with the same labels; nothing changed")

    upsert = (" ON CONFLICT (dataset_id, item_id, annotator_id) DO UPDATE SET label = excluded.label, "
              "annotated_at = excluded.annotated_at, batch_id = excluded.batch_id, "
              "data_version = excluded.data_version WHERE annotation.label <> excluded.label") if touches_old else ""
    sql.run(f"INSERT INTO annotation (dataset_id, item_id, annotator_id, label, annotated_at, batch_id, "
            f"data_version) SELECT :d, i.id, an.id, s.label, s.ts, :b, :v {resolve} WHERE true{upsert}", params)

    if touches_old and (n_old_new or n_relabel):
        deltas = [f"sum(CASE WHEN new_label = {c} THEN 1 ELSE 0 END) - "
                  f"sum(CASE WHEN old_label = {c} THEN 1 ELSE 0 END) AS d{c}" for c in range(L)]
        new_vec = sql.vec([f"{sql.elem('item.label_counts', c)} + g.d{c}" for c in range(L)])
        sql.run(f"UPDATE item SET label_counts = {new_vec} FROM (SELECT item_id, {', '.join(deltas)} FROM {old} "
                f"WHERE old_label IS NULL OR old_label <> new_label GROUP BY item_id) g WHERE item.id = g.item_id")

    stats = {"rows": n_rows, "inserted": inserted, "relabeled": n_relabel,
             "unchanged": n_old - n_old_new - n_relabel, "new_items": new_items, "new_annotators": new_annotators}
    _finish(b, stats)
    return ImportResult(
        status="imported", kind="annotations", dataset=b.dataset.name, rows=n_rows, data_version=b.version,
        batch_id=b.batch_id, inserted=inserted, updated=n_relabel, unchanged=stats["unchanged"],
        new_items=new_items, new_annotators=new_annotators,
        message=(f"batch {b.batch_id}: {inserted} new annotation(s), {n_relabel} re-label(s), "
                 f"{stats['unchanged']} unchanged; {new_items} new item(s), {new_annotators} new annotator(s); "
                 f"data_version {b.version}"),
        details=stats,
    )


# --- predictions ------------------------------------------------------------------


def _release(session: Session, workspace_id: int, model: str, version: str, *, released_at: datetime | None,
             alias: str | None, tags: Any) -> Release:
    m = session.scalar(select(Model).where(Model.workspace_id == workspace_id, Model.name == model))
    if m is None:
        m = Model(workspace_id=workspace_id, name=model)
        session.add(m)
        session.flush()
    rel = session.scalar(select(Release).where(Release.model_id == m.id, Release.version == version))
    if rel is None:
        rel = Release(model_id=m.id, version=version, released_at=released_at, alias=alias, tags=tags)
        session.add(rel)
        session.flush()
    else:
        for attr, value in (("released_at", released_at), ("alias", alias), ("tags", tags)):
            if value is not None:
                setattr(rel, attr, value)
        session.flush()
    return rel


def import_predictions(session: Session, dataset: str | Dataset, source: str | bytes | IO[bytes], *, model: str,
                       release: str, workspace: str = DEFAULT_WORKSPACE, format: str | None = None,
                       field_map: Mapping[str, str] | None = None, released_at: datetime | None = None,
                       alias: str | None = None, tags: Any = None, idempotency_key: str | None = None,
                       submitted_by: str | None = None, progress: Callable[[int], None] | None = None
                       ) -> ImportResult:
    """Import one release's predictions (all or nothing); model and release are created if new."""
    options = {"field_map": dict(field_map or {}), "model": model, "release": release}
    b, prior = _prepare(session, dataset, source, ImportKind.PREDICTIONS, format, options, workspace=workspace,
                        idempotency_key=idempotency_key, submitted_by=submitted_by,
                        allowed=formats.PREDICTION_FORMATS)
    if prior is not None:
        return prior
    labels = [str(lab) for lab in b.dataset.labels]
    sql = b.sql
    tables: list[str] = []
    try:
        with _savepoint(session):
            rows = formats.read_predictions(b.source, b.fmt, labels, field_map=field_map, release=release,
                                            progress=progress)
            table = sql.temp_table(f"row_no BIGINT, item_ext TEXT, label SMALLINT, "
                                   f"probs {'DOUBLE PRECISION[]' if sql.pg else 'TEXT'}")
            tables.append(table)
            if not sql.pg:
                rows = ((r, i, lab, None if p is None else json.dumps(p)) for r, i, lab, p in rows)
            n_rows = sql.load_rows(table, ["row_no", "item_ext", "label", "probs"], rows)
            if n_rows == 0:
                raise ImportRejected([RowError(0, None, "the file holds no predictions")], source=b.source.name)
            dups = sql.run(f"SELECT item_ext, min(row_no), max(row_no) FROM {table} GROUP BY item_ext "
                           f"HAVING count(*) > 1 ORDER BY 2 LIMIT {MAX_REPORTED_ERRORS}").all()
            if dups:
                raise ImportRejected([RowError(int(last), "item_id", f"item {item!r} already has a prediction at "
                                                                     f"row {first} of this batch")
                                      for item, first, last in dups], source=b.source.name)
            try:
                with _savepoint(session):
                    return _merge_predictions(b, table, n_rows, model, release, released_at, alias, tags)
            except _NoChange as nc:
                return nc.result or ImportResult(
                    status="unchanged", kind="predictions", dataset=b.dataset.name, rows=n_rows,
                    data_version=b.dataset.data_version, unchanged=n_rows, message=str(nc))
    finally:
        if sql.conn.in_transaction() and not sql.pg:
            sql.drop(*tables)


def _merge_predictions(b: _Batch, table: str, n_rows: int, model: str, release: str,
                       released_at: datetime | None, alias: str | None, tags: Any) -> ImportResult:
    sql = b.sql
    d = b.dataset.id
    _lock_and_bump(b)
    prior = _recheck_under_lock(b)
    if prior is not None:
        raise _NoChange(prior.message, prior)
    rel = _release(b.session, b.dataset.workspace_id, model, release, released_at=released_at, alias=alias, tags=tags)
    b.release_id = rel.id
    new_items = sql.run(f"INSERT INTO item (dataset_id, external_id) SELECT DISTINCT :d, item_ext FROM {table} s "
                        f"WHERE true ON CONFLICT (dataset_id, external_id) DO NOTHING", {"d": d}).rowcount
    _record_batch(b, n_rows)
    params = {"d": d, "r": rel.id, "b": b.batch_id, "v": b.version}
    resolve = f"FROM {table} s JOIN item i ON i.dataset_id = :d AND i.external_id = s.item_ext"
    existing = int(sql.scalar(f"SELECT count(*) {resolve} JOIN prediction p ON p.release_id = :r "
                              f"AND p.item_id = i.id", params))
    written = sql.run(
        f"INSERT INTO prediction (release_id, item_id, dataset_id, label, probabilities, batch_id, data_version) "
        f"SELECT :r, i.id, :d, s.label, s.probs, :b, :v {resolve} WHERE true "
        f"ON CONFLICT (release_id, item_id) DO UPDATE SET label = excluded.label, "
        f"probabilities = excluded.probabilities, batch_id = excluded.batch_id, "
        f"data_version = excluded.data_version WHERE prediction.label {sql.distinct} excluded.label "
        f"OR prediction.probabilities {sql.distinct} excluded.probabilities", params).rowcount
    inserted = n_rows - existing
    updated = written - inserted
    if written == 0:
        raise _NoChange(f"all {n_rows} predictions of {model} {release} are already present; nothing changed")
    stats = {"rows": n_rows, "inserted": inserted, "updated": updated, "unchanged": existing - updated,
             "new_items": new_items, "release_id": rel.id}
    _finish(b, stats)
    return ImportResult(
        status="imported", kind="predictions", dataset=b.dataset.name, rows=n_rows, data_version=b.version,
        batch_id=b.batch_id, inserted=inserted, updated=updated, unchanged=existing - updated, new_items=new_items,
        message=(f"batch {b.batch_id}: {model} {release}: {inserted} new prediction(s), {updated} updated, "
                 f"{existing - updated} unchanged; {new_items} new item(s); data_version {b.version}"),
        details=stats,
    )


# --- gold --------------------------------------------------------------------------


def import_gold(session: Session, dataset: str | Dataset, source: str | bytes | IO[bytes], *,
                workspace: str = DEFAULT_WORKSPACE, format: str | None = None,
                field_map: Mapping[str, str] | None = None, gold_source: str | None = None,
                idempotency_key: str | None = None, submitted_by: str | None = None,
                progress: Callable[[int], None] | None = None) -> ImportResult:
    """Import gold labels (all or nothing). Repeated rows for one item must agree."""
    options = {"field_map": dict(field_map or {}), "gold_source": gold_source}
    b, prior = _prepare(session, dataset, source, ImportKind.GOLD, format, options, workspace=workspace,
                        idempotency_key=idempotency_key, submitted_by=submitted_by, allowed=("csv", "tsv", "jsonl"))
    if prior is not None:
        return prior
    labels = [str(lab) for lab in b.dataset.labels]
    sql = b.sql
    tables: list[str] = []
    try:
        with _savepoint(session):
            rows = formats.read_gold(b.source, b.fmt, labels, field_map=field_map, default_source=gold_source,
                                     progress=progress)
            table = sql.temp_table("row_no BIGINT, item_ext TEXT, label SMALLINT, source TEXT")
            tables.append(table)
            n_rows = sql.load_rows(table, ["row_no", "item_ext", "label", "source"], rows)
            if n_rows == 0:
                raise ImportRejected([RowError(0, None, "the file holds no gold labels")], source=b.source.name)
            conflicts = sql.run(
                f"SELECT item_ext, min(row_no), max(row_no) FROM {table} GROUP BY item_ext "
                f"HAVING min(label) <> max(label) OR min(coalesce(source, '')) <> max(coalesce(source, '')) "
                f"ORDER BY 2 LIMIT {MAX_REPORTED_ERRORS}").all()
            if conflicts:
                raise ImportRejected([RowError(int(last), "label", f"item {item!r} was given another gold label "
                                                                   f"(or source) at row {first}")
                                      for item, first, last in conflicts], source=b.source.name)
            try:
                with _savepoint(session):
                    return _merge_gold(b, table, n_rows)
            except _NoChange as nc:
                return nc.result or ImportResult(
                    status="unchanged", kind="gold", dataset=b.dataset.name, rows=n_rows,
                    data_version=b.dataset.data_version, unchanged=n_rows, message=str(nc))
    finally:
        if sql.conn.in_transaction() and not sql.pg:
            sql.drop(*tables)


def _merge_gold(b: _Batch, table: str, n_rows: int) -> ImportResult:
    sql = b.sql
    d = b.dataset.id
    _lock_and_bump(b)
    prior = _recheck_under_lock(b)
    if prior is not None:
        raise _NoChange(prior.message, prior)
    new_items = sql.run(f"INSERT INTO item (dataset_id, external_id) SELECT DISTINCT :d, item_ext FROM {table} s "
                        f"WHERE true ON CONFLICT (dataset_id, external_id) DO NOTHING", {"d": d}).rowcount
    changed = sql.run(
        f"UPDATE item SET gold_label = g.label, gold_source = g.source FROM "
        f"(SELECT item_ext, min(label) AS label, min(source) AS source FROM {table} GROUP BY item_ext) g "
        f"WHERE item.dataset_id = :d AND item.external_id = g.item_ext "
        f"AND (item.gold_label {sql.distinct} g.label OR item.gold_source {sql.distinct} g.source)",
        {"d": d}).rowcount
    if changed == 0:
        raise _NoChange(f"all {n_rows} gold labels are already present; nothing changed")
    _record_batch(b, n_rows)
    n_items = int(sql.scalar(f"SELECT count(DISTINCT item_ext) FROM {table}"))
    stats = {"rows": n_rows, "items": n_items, "updated": changed, "unchanged": n_items - changed,
             "new_items": new_items}
    _finish(b, stats)
    return ImportResult(
        status="imported", kind="gold", dataset=b.dataset.name, rows=n_rows, data_version=b.version,
        batch_id=b.batch_id, updated=changed, unchanged=n_items - changed, new_items=new_items,
        message=(f"batch {b.batch_id}: gold labels set on {changed} item(s), {n_items - changed} unchanged; "
                 f"{new_items} new item(s); data_version {b.version}"),
        details=stats,
    )
