"""Long CSV/TSV annotation files loaded by ``COPY``.

A later batch is staged raw into a text table and checked by one SQL pass
(:func:`_stage_raw_csv`). On PostgreSQL, the first long CSV/TSV load into a dataset
without items or annotations takes a bulk path instead (:func:`_try_bulk_first_load`,
:mod:`auditor.ingest.bulk`): same checks and messages, the rows parsed on the client
and streamed, block by block, by one binary ``COPY`` into the dataset's new partition
of ``annotation`` on a second connection, which the batch's transaction attaches.
"""

from __future__ import annotations

import csv
import io
import queue
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from auditor import timestamps
from auditor.db.models import Tier
from auditor.db.partitions import (
    add_annotation_partition_key,
    attach_annotation_partition,
    create_annotation_partition_table,
    drop_unattached_annotation_partition,
    has_annotation_partition,
)
from auditor.ingest import batch, bulk
from auditor.ingest.annotators import _merge_annotators, _refuse_expert_tier, _stage_annotators
from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, RowError
from auditor.ingest.formats import (
    MAX_ID_LENGTH,
    MAX_LINE_BYTES,
    MAX_NAME_LENGTH,
    AnnotationDefaults,
)

__all__ = []


# --- annotations ---------------------------------------------------------------------

_TS_PATTERN = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$"


def _raw_csv_plan(b: batch.Batch, field_map: Mapping[str, str] | None) -> list[str] | None:
    """The header when a long CSV can go straight to ``COPY`` (PostgreSQL), else None."""
    if not b.sql.pg or b.fmt not in ("csv", "tsv"):
        return None
    head = b.source.head(1 << 16)
    line = head.split(b"\n", 1)[0]
    if b"\r" in line.rstrip(b"\r"):
        return None  # lines ending with CR alone: the reader refuses them, saying so
    try:
        first = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    delimiter = "\t" if b.fmt == "tsv" or b.source.name.lower().removesuffix(".gz").endswith((".tsv", ".tab")) else ","
    try:
        header = [h.strip() for h in next(csv.reader(io.StringIO(first), delimiter=delimiter), [])]
    except csv.Error:
        return None  # the reader names the problem
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


def _stage_raw_csv(b: batch.Batch, header: list[str], labels: Sequence[str], defaults: AnnotationDefaults,
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
        with batch.savepoint(b.session), raw.cursor() as cur:
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
    label_array = "ARRAY[" + ", ".join(batch.quote(str(lab)) for lab in labels) + "]::text[]"
    vendor = col.get("vendor", "NULL")
    tier = col.get("tier", "NULL")
    ts = col.get("timestamp", "NULL")
    if defaults.vendor is not None:
        vendor = f"coalesce({vendor}, {batch.quote(defaults.vendor)})"
    if defaults.tier is not None:
        tier = f"coalesce({tier}, {batch.quote(defaults.tier)})"
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
         f"{batch.quote(str(list(map(str, labels))))}"),
        (f"length({vendor}) > {MAX_NAME_LENGTH}", "'vendor'",
         f"'is ' || length({vendor}) || ' characters long; at most {MAX_NAME_LENGTH}'"),
        (f"{tier} IS NOT NULL AND {tier} NOT IN ('crowd', 'expert')", "'tier'",
         f"quote_literal({tier}) || ' is not one of [''crowd'', ''expert'']'"),
        (f"{ts} IS NOT NULL AND {ts} !~ {batch.quote(_TS_PATTERN)}", "'timestamp'",
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
    if "timestamp" in col:
        _refuse_out_of_range(b, table, ts)
    src = (f"(SELECT row_no, {col['item_id']} AS item_ext, {col['annotator_id']} AS annotator_ext, "
           f"CAST(array_position({label_array}, {col['label']}) - 1 AS SMALLINT) AS label, "
           f"{vendor} AS vendor, {tier} AS tier, CAST({ts} AS TIMESTAMPTZ) AS ts FROM {table})")
    return table, src, rows, ann


def _refuse_out_of_range(b: batch.Batch, table: str, ts: str) -> None:
    """Refuse the batch, naming the rows, if a time stamp is outside the accepted range
    (:mod:`auditor.timestamps`); the rows' form was checked by the pattern before."""
    try:
        with batch.savepoint(b.session):
            bad = b.sql.run(f"SELECT row_no, {ts}, count(*) OVER () FROM {table} WHERE {ts} IS NOT NULL AND "
                            f"CAST({ts} AS TIMESTAMPTZ) NOT BETWEEN :lo AND :hi ORDER BY row_no "
                            f"LIMIT {MAX_REPORTED_ERRORS}", {"lo": timestamps.EARLIEST, "hi": timestamps.latest()}
                            ).all()
    except DBAPIError as exc:
        # a form the pattern lets through that is no date (month 13): the batch's data, not ours
        if not (getattr(exc.orig, "sqlstate", None) or "").startswith("22"):
            raise
        raise ImportRejected([RowError(0, "timestamp", str(exc.orig).splitlines()[0])],
                             source=b.source.name) from None
    if bad:
        raise ImportRejected([RowError(int(r), "timestamp", timestamps.refusal(repr(shown))) for r, shown, _ in bad],
                             source=b.source.name, bad_rows=int(bad[0][2]))


_ANNOTATION_FIELDS = ("item_id", "annotator_id", "label", "vendor", "tier", "timestamp")


def _delimiter(b: batch.Batch) -> str:
    tsv = b.fmt == "tsv" or b.source.name.lower().removesuffix(".gz").endswith((".tsv", ".tab"))
    return "\t" if tsv else ","


MAX_KNOWN_ITEMS = 2_000_000
"""The bulk path takes a first load onto at most this many existing items (their names and
ids are held in memory while the file is read); past it the general path does."""


def _dataset_is_empty(b: batch.Batch) -> bool:
    """No annotation partition: a first load, which the bulk path can take. The dataset may
    have items already (predictions or gold came first): the load gives them their counts."""
    return not has_annotation_partition(b.sql.conn, b.dataset.id)


def _try_bulk_first_load(b: batch.Batch, header: list[str], labels: Sequence[str], defaults: AnnotationDefaults,
                         progress) -> batch.ImportResult | None:
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
        with batch.savepoint(b.session):
            result = _bulk_first_load(b, header, labels, defaults, progress, load)
        load.attached = True  # kept, unless the caller's transaction fails (see partitions)
        return result
    except bulk.Fallback:
        return None
    except batch.NoChange as nc:  # the same batch was imported meanwhile
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

    def __init__(self, b: batch.Batch, table: str):
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
                    f"COPY (SELECT nextval(CAST({batch.quote(self.sequence)} AS regclass)) "
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


def _copy_items(sql, d: int, loaded, known: dict) -> np.ndarray:
    """Copy the batch's new items in with their counts; items the dataset had (``known``)
    take their counts by one update. Returns the new items' ids."""
    raw = sql.conn.connection.driver_connection
    names, ids, counts = loaded.items, loaded.item_ids, loaded.item_counts
    existing = np.zeros(len(ids), bool)
    if known:
        # Items that were there take their counts; only the others are copied in.
        existing = np.isin(ids, np.fromiter(known.values(), np.int64, len(known)))
        if existing.any():
            counted = sql.temp_table("id BIGINT, dataset_id INTEGER, external_id TEXT, label_counts INTEGER[]")
            with raw.cursor() as cur, cur.copy(f"COPY {counted} (id, dataset_id, external_id, label_counts) "
                                               f"FROM STDIN") as copy:
                for block in bulk.item_copy_text(names.filter(pa.array(existing)), d, ids[existing],
                                                 counts[existing]):
                    copy.write(block)
            sql.analyze(counted)
            sql.run(f"UPDATE item SET label_counts = c.label_counts FROM {counted} c WHERE item.id = c.id")
        names, ids, counts = names.filter(pa.array(~existing)), ids[~existing], counts[~existing]
    with raw.cursor() as cur, cur.copy("COPY item (id, dataset_id, external_id, label_counts) FROM STDIN") as copy:
        for block in bulk.item_copy_text(names, d, ids, counts):
            copy.write(block)
    return ids


def _bulk_first_load(b: batch.Batch, header: list[str], labels: Sequence[str], defaults: AnnotationDefaults,
                     progress, load: _PartitionLoad) -> batch.ImportResult:
    sql = b.sql
    d = b.dataset.id
    w = b.dataset.workspace_id
    columns = {name: i for i, name in enumerate(header) if name in _ANNOTATION_FIELDS}
    batch.lock_for_write(b)
    if not _dataset_is_empty(b):  # another batch got in first: the general path merges
        raise bulk.Fallback("the dataset has rows now")
    known_items = int(sql.scalar("SELECT count(*) FROM item WHERE dataset_id = :d", {"d": d}))
    if known_items > MAX_KNOWN_ITEMS:
        raise bulk.Fallback("too many existing items to hold")
    # Items the dataset has (predictions or gold first): name → id, read under the lock.
    known = dict(sql.run("SELECT external_id, id FROM item WHERE dataset_id = :d", {"d": d}).all()) \
        if known_items else {}
    batch.record_batch(b, 0)
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

    def new_item_ids(names) -> np.ndarray:
        if not known:
            return item_ids.take(len(names))
        ids = np.array([known.get(n, 0) for n in names.to_pylist()], np.int64)
        missing = ids == 0
        if missing.any():
            ids[missing] = item_ids.take(int(np.count_nonzero(missing)))
        return ids

    try:
        loaded = bulk.stream_long_csv(
            b.source, delimiter=_delimiter(b), columns=columns, n_columns=len(header), labels=labels,
            defaults=defaults, progress=progress, new_item_ids=new_item_ids, new_annotator_ids=annotator_ids,
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
    ids = _copy_items(sql, d, loaded, known)
    load.wait()
    attach_annotation_partition(sql.conn, d, with_key=False)
    n_rows, new_items, new_annotators = loaded.n_rows, len(ids), len(created)
    stats = {"rows": n_rows, "inserted": n_rows, "relabeled": 0, "unchanged": 0, "new_items": new_items,
             "new_annotators": new_annotators}
    batch.finish(b, stats)
    return batch.ImportResult(
        status="imported", kind="annotations", dataset=b.dataset.name, rows=n_rows, data_version=b.version,
        batch_id=b.batch_id, inserted=n_rows, updated=0, unchanged=0, new_items=new_items,
        new_annotators=new_annotators,
        message=(f"batch {b.batch_id}: {n_rows} new annotation(s), 0 re-label(s), 0 unchanged; "
                 f"{new_items} new item(s), {new_annotators} new annotator(s); data_version {b.version}"),
        details=stats,
    )
