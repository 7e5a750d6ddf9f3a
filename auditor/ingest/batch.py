"""The import batch protocol shared by every kind of import: validate a whole batch, then
write it in one step, or write nothing.

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

Any invalid row raises :class:`ImportRejected` and the batch's savepoint is rolled
back, so nothing of it is written even if the caller commits. The caller owns the
session and the transaction (and commits). The kinds of import are in
:mod:`auditor.ingest.annotations`, :mod:`~auditor.ingest.predictions` and
:mod:`~auditor.ingest.gold`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, select, text
from sqlalchemy.orm import Session

from auditor.db.models import Dataset, ImportBatch, ImportKind
from auditor.ingest import formats
from auditor.ingest.datasets import _write_connection, get_dataset
from auditor.ingest.errors import IngestError
from auditor.ingest.formats import (
    Source,
    open_source,
)

__all__ = ["FIELD_NAMES", "Batch", "ImportResult", "NoChange", "Sql", "finish", "lock_for_write", "parse_field_map",
           "prepare", "quote", "record_batch", "run_batch", "savepoint", "sqlite_time"]
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


# --- SQL dialect pieces ------------------------------------------------------------


class Sql:
    """The few places where SQLite and PostgreSQL spell things differently."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.pg = conn.dialect.name == "postgresql"
        self.created: list[str] = []  # every temporary table made here (SQLite drops them by hand)

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
        self.created.append(name)
        return name

    def analyze(self, table: str) -> None:
        """Planner statistics for a temporary table just filled (autovacuum never analyses
        temporary tables; without statistics the planner guesses their size and can put a
        loop over one inside a loop over another)."""
        self.run(f"ANALYZE {table}")

    def key_map(self, src: str, column: str, target: str, scope: str, scope_value: int) -> str:
        """A temporary table ``(ext, id)``: each distinct ``column`` of ``src`` (a staging
        table or a subquery over one) with the id of the ``target`` row (``item`` or
        ``annotator``) whose ``external_id`` it is within ``scope = scope_value``; values
        without a row are left out. Analysed, so joins of the batch go through it.

        The map is built driven from the batch: one probe of the target's unique index per
        distinct value (on PostgreSQL a LATERAL with LIMIT, which the planner never turns
        into a join), so its cost is the batch's, whatever the target's statistics say.
        A join of the batch straight to ``item`` or ``annotator`` whose statistics were
        never gathered (a fresh database, a table just filled) could instead loop over the
        whole batch once per target row: 300k labels onto 10k predicted items took minutes.
        """
        table = self.temp_table("ext TEXT, id BIGINT")
        probe = (f"CROSS JOIN LATERAL (SELECT t.id FROM {target} t WHERE t.{scope} = :scope "
                 f"AND t.external_id = k.ext LIMIT 1) t" if self.pg else
                 f"JOIN {target} t ON t.{scope} = :scope AND t.external_id = k.ext")
        self.run(f"INSERT INTO {table} (ext, id) SELECT k.ext, t.id FROM "
                 f"(SELECT DISTINCT {column} AS ext FROM {src} s WHERE {column} IS NOT NULL) k {probe}",
                 {"scope": scope_value})
        self.analyze(table)
        return table

    def drop(self, *names: str) -> None:
        for name in names:
            self.run(f"DROP TABLE IF EXISTS {name}")

    def load_rows(self, table: str, columns: Sequence[str], rows: Iterable[tuple]) -> int:
        """Stream tuples into ``table`` (COPY on PostgreSQL, batched inserts on SQLite)."""
        n = 0
        if self.pg:
            raw = self.conn.connection.driver_connection
            failure: BaseException | None = None
            try:
                with raw.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                    try:
                        for row in rows:
                            copy.write_row(row)
                            n += 1
                    except BaseException as exc:
                        # The reader refused the batch. psycopg ends the COPY with the error's
                        # text, and PostgreSQL drops a connection whose failure message passes
                        # 10,000 bytes ("invalid message length"): end it with a short one.
                        failure = exc
                        raise _ReaderStopped("the batch's reader stopped") from None
            except _ReaderStopped:
                assert failure is not None
                raise failure.with_traceback(failure.__traceback__) from None
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


class _ReaderStopped(Exception):
    """Ends a ``COPY`` whose rows' reader raised (the reader's error is raised after)."""


def sqlite_time(ts: datetime | None) -> str | None:
    # SQLAlchemy's SQLite DATETIME storage format (UTC, no offset), so the ORM reads it back.
    return None if ts is None else ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# --- the shared batch protocol ------------------------------------------------------


@dataclass
class Batch:
    session: Session
    sql: Sql
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


def lock_and_bump(b: Batch) -> None:
    # The row lock serialises writers of one dataset until commit; the new version names this batch.
    b.version = int(b.sql.scalar(
        "UPDATE dataset SET data_version = data_version + 1, updated_at = CURRENT_TIMESTAMP "
        "WHERE id = :d RETURNING data_version", {"d": b.dataset.id}))


def record_batch(b: Batch, rows: int) -> None:
    batch = ImportBatch(
        workspace_id=b.dataset.workspace_id, dataset_id=b.dataset.id, kind=b.kind, format=b.fmt,
        source_name=b.source.name[-1024:], release_id=b.release_id, submitted_by=b.submitted_by,
        row_count=rows, checksum=b.checksum, idempotency_key=b.idempotency_key, data_version=b.version,
    )
    b.session.add(batch)
    b.session.flush()
    b.batch_id = batch.id


def finish(b: Batch, stats: dict[str, int]) -> None:
    b.sql.run("UPDATE import_batch SET stats = :s WHERE id = :b",
              {"s": json.dumps(stats), "b": b.batch_id})
    b.sql.run("INSERT INTO audit_outbox (dataset_id, data_version, batch_id, reason) VALUES (:d, :v, :b, :r)",
              {"d": b.dataset.id, "v": b.version, "b": b.batch_id, "r": b.kind.value})
    b.session.expire(b.dataset, ["data_version", "updated_at"])


@contextmanager
def savepoint(session: Session):
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


def prepare(session: Session, dataset: str | Dataset, source, kind: ImportKind, fmt: str | None,
             options: Mapping[str, Any], *, workspace: str, idempotency_key: str | None,
             submitted_by: str | None, allowed: Sequence[str]) -> tuple[Batch, ImportResult | None]:
    conn = _write_connection(session)
    sql = Sql(conn)
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
    batch = Batch(session, sql, ds, kind, fmt, src, checksum, idempotency_key, submitted_by)
    prior = _seen_before(session, ds, checksum, idempotency_key)
    return batch, (_duplicate_result(prior, ds) if prior is not None else None)


def lock_for_write(b: Batch) -> None:
    """Step 3 begins: lock the dataset (its new ``data_version`` names this batch), then check
    again that no writer that held the lock first imported the same batch
    (:class:`NoChange` carrying that batch's result if one did)."""
    lock_and_bump(b)
    prior = recheck_under_lock(b)
    if prior is not None:
        raise NoChange(prior.message, prior)


def recheck_under_lock(b: Batch) -> ImportResult | None:
    prior = _seen_before(b.session, b.dataset, b.checksum, b.idempotency_key)
    return None if prior is None else _duplicate_result(prior, b.dataset)


class NoChange(Exception):
    """Raised inside the merge savepoint when the batch would change nothing (or was seen meanwhile)."""

    def __init__(self, message: str, result: ImportResult | None = None):
        super().__init__(message)
        self.result = result


def run_batch(b: Batch, stage: Callable[[list[str]], tuple[str, int]],
              merge: Callable[[str, int], ImportResult]) -> ImportResult:
    """Steps 2 and 3 of every import: ``stage(tables)`` reads and checks the whole batch
    into a staging table (registering every table it creates in ``tables``) and returns
    it with its row count; ``merge(table, n_rows)`` writes it under the dataset's lock, or
    raises :class:`NoChange`, which answers "unchanged". Each step in a savepoint, so a
    rejected batch leaves nothing; the staging tables are dropped on SQLite (PostgreSQL's
    are dropped at commit)."""
    sql = b.sql
    tables: list[str] = []
    try:
        with savepoint(b.session):
            table, n_rows = stage(tables)
            try:
                with savepoint(b.session):
                    return merge(table, n_rows)
            except NoChange as nc:
                return nc.result or ImportResult(
                    status="unchanged", kind=b.kind.value, dataset=b.dataset.name, rows=n_rows,
                    data_version=b.dataset.data_version, unchanged=n_rows, message=str(nc))
    finally:
        if sql.conn.in_transaction() and not sql.pg:
            sql.drop(*dict.fromkeys([*tables, *sql.created]))
