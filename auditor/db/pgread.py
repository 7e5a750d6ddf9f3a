"""Fast block reads of one dataset from PostgreSQL, shared by both snapshot loaders.

Fetching millions of rows as Python objects costs seconds; so does ``COPY ... TO STDOUT``
through psycopg, which hands over one message per row. Instead the server packs a block
of rows into one ``bytea`` (``string_agg(int8send(a) || int4send(b) ..., '')``), fetched
in binary (no hex) and read with one ``np.frombuffer``. An annotation travels as one
``int8`` — (item id − block start, annotator id, label) packed into bit fields — since on
the server the cost is per function call per row, not per byte.

Blocks are item-id ranges. :func:`read_parallel` runs them on the caller's connection
and on helper connections that import the caller's exported snapshot
(``pg_export_snapshot`` / ``SET TRANSACTION SNAPSHOT``), so every block sees exactly the
same committed data as the caller's transaction.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from sqlalchemy import Connection, Engine

__all__ = [
    "BLOCK_ROWS",
    "READERS",
    "IdIndex",
    "RowBlock",
    "annotation_block",
    "estimated_rows",
    "id_blocks",
    "item_block",
    "item_range",
    "positions",
    "prediction_block",
    "raw_connection",
    "read_parallel",
    "stack_rows",
]

T = TypeVar("T")

# Rows per block: large enough that per-query costs vanish, small enough that two
# readers stay balanced and a block's value stays far below PostgreSQL's 1 GB cap.
BLOCK_ROWS = 1_000_000
# Connections reading blocks at once (the server spends one core per reader).
READERS = 2
# Bits of the label field of a packed annotation (labels are non-negative smallints).
_LABEL_BITS = 15


def raw_connection(conn: Connection):
    """The psycopg connection under a SQLAlchemy connection."""
    return conn.connection.dbapi_connection


def _fetch(raw, sql: str, params: Sequence[Any] = ()) -> tuple:
    with raw.cursor(binary=True) as cur:
        cur.execute(sql, params)
        return cur.fetchone()


def item_range(raw, dataset_id: int) -> tuple[int, int, int]:
    """(smallest item id, largest item id, the planner's estimate of the number of items)."""
    lo, hi = _fetch(raw, "SELECT coalesce(min(id), 0), coalesce(max(id), -1) FROM item WHERE dataset_id = %s",
                    (dataset_id,))
    return int(lo), int(hi), estimated_rows(raw, "item WHERE dataset_id = %s", (dataset_id,))


def estimated_rows(raw, from_where: str, params: Sequence[Any] = ()) -> int:
    """The planner's estimate of the rows of ``SELECT ... FROM <from_where>`` (no scan)."""
    with raw.cursor() as cur:
        cur.execute(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {from_where}", params)
        plan = cur.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])


def id_blocks(lo: int, hi: int, n_blocks: int) -> list[tuple[int, int]]:
    """``n_blocks`` id ranges [a, b] covering [lo, hi] (fewer when the range is short)."""
    if hi < lo:
        return []
    edges = np.linspace(lo, hi + 1, max(1, n_blocks) + 1).astype(np.int64)
    return [(int(a), int(b) - 1) for a, b in itertools.pairwise(edges.tolist()) if b > a]


def _sorted_by(ids: np.ndarray, *arrays):
    """``ids`` ascending (usually already, as an index scan returns them) and the arrays alike."""
    if ids.size < 2 or bool((ids[1:] >= ids[:-1]).all()):
        return (ids, *arrays)
    order = np.argsort(ids, kind="stable")
    return (ids[order], *(a if a is None else a[order] if isinstance(a, np.ndarray) else [a[i] for i in order]
                          for a in arrays))


def item_block(raw, dataset_id: int, lo: int, hi: int, n_labels: int, *, counts: bool = True,
               names: bool = True) -> dict[str, Any]:
    """Items with ids in [lo, hi], ascending: ``id``, ``gold`` (-1 for none), ``counts`` (n, L) or None, ``names``."""
    fields = [("id", "int8send(id)", ">i8"), ("gold", "int2send(coalesce(gold_label, -1::int2))", ">i2")]
    if counts:
        fields += [(f"c{k}", f"int4send(coalesce(label_counts[{k + 1}], 0))", ">i4") for k in range(n_labels)]
    select = "string_agg(" + " || ".join(expr for _, expr, _ in fields) + ", ''::bytea)"
    if names:
        # External ids are text, which never holds a NUL byte: NUL separates them.
        select += ", string_agg(textsend(external_id), '\\x00'::bytea)"
    row = _fetch(raw, f"SELECT {select} FROM item WHERE dataset_id = %s AND id BETWEEN %s AND %s",
                 (dataset_id, lo, hi))
    rec = np.frombuffer(row[0] or b"", dtype=np.dtype([(name, kind) for name, _, kind in fields]))
    ids = rec["id"].astype(np.int64)
    gold = rec["gold"].astype(np.int64)
    cnt = np.stack([rec[f"c{k}"] for k in range(n_labels)], axis=1).astype(np.int64) if counts else None
    del rec
    strings: list[str] | None = None
    if names:
        strings = bytes(row[1]).decode(raw.info.encoding).split("\x00") if row[1] is not None else []
        if len(strings) != len(ids):
            raise RuntimeError("item names and ids of one block differ in number")  # one query: cannot happen
    ids, gold, cnt, strings = _sorted_by(ids, gold, cnt, strings)
    return {"id": ids, "gold": gold, "counts": cnt, "names": strings or []}


class RowBlock:
    """The annotation rows of one block as fetched (8 bytes a row when packed), unpacked on demand.

    The unpacking methods write into ``out`` when given (no temporary of the block's size).
    """

    def __init__(self, data: np.ndarray, lo: int = 0, shift: int = 0, ann_bits: int = 0):
        self._data, self._lo, self._shift, self._ann_bits = data, lo, shift, ann_bits

    def __len__(self) -> int:
        return len(self._data)

    def item_ids(self) -> np.ndarray:
        if not self._shift:
            return self._data["i"].astype(np.int64)
        out = np.right_shift(self._data, self._shift, dtype=np.int64)
        out += self._lo
        return out

    def annotator_ids(self) -> np.ndarray:
        if not self._shift:
            return self._data["a"].astype(np.int64)
        out = np.right_shift(self._data, _LABEL_BITS, dtype=np.int64)
        out &= (1 << self._ann_bits) - 1
        return out

    def labels(self, out: np.ndarray | None = None) -> np.ndarray:
        if not self._shift:
            if out is None:
                return self._data["l"].astype(np.int64)
            out[:] = self._data["l"]
            return out
        return np.bitwise_and(self._data, (1 << _LABEL_BITS) - 1, out=out, dtype=np.int64)

    def rows(self) -> np.ndarray:
        """(M, 3) int64: item id, annotator id, label."""
        out = np.empty((len(self), 3), dtype=np.int64)
        out[:, 0], out[:, 1], out[:, 2] = self.item_ids(), self.annotator_ids(), self.labels()
        return out


def annotation_block(raw, table: str, dataset_id: int, lo: int, hi: int, *, max_annotator: int,
                     where: str = "", params: Sequence[Any] = ()) -> RowBlock:
    """The ``table`` rows of the dataset with item ids in [lo, hi], in the server's order.

    ``max_annotator`` bounds the annotator ids (for the width of their bit field);
    ``where`` adds conditions (with ``params``).
    """
    item_bits = max(1, int(hi - lo).bit_length())
    ann_bits = max(1, int(max_annotator).bit_length())
    base = f"FROM {table} WHERE dataset_id = %s AND item_id BETWEEN %s AND %s {where}"
    args = (dataset_id, lo, hi, *params)
    if item_bits + ann_bits + _LABEL_BITS <= 63:
        shift = ann_bits + _LABEL_BITS
        (blob,) = _fetch(raw, f"SELECT string_agg(int8send(((item_id - {int(lo)}) << {shift}) | "
                              f"(annotator_id::int8 << {_LABEL_BITS}) | label), ''::bytea) {base}", args)
        packed = np.frombuffer(blob or b"", dtype=">i8")  # big-endian as sent: numpy swaps while unpacking
        block = RowBlock(packed, int(lo), shift, ann_bits)
        if len(block) and (packed.min() < 0 or block.item_ids().max() > hi
                           or block.annotator_ids().max() > max_annotator):
            # A label outside 0..2^15-1 (the import never writes one) would spill into the other fields.
            raise RuntimeError(f"{table}: a label or annotator id outside the packed range")
        return block
    (blob,) = _fetch(raw, f"SELECT string_agg(int8send(item_id) || int4send(annotator_id) || int2send(label), "
                          f"''::bytea) {base}", args)
    return RowBlock(np.frombuffer(blob or b"", dtype=np.dtype([("i", ">i8"), ("a", ">i4"), ("l", ">i2")])))


def prediction_block(raw, dataset_id: int, release_id: int, n_labels: int, lo: int, hi: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One release's predictions on items [lo, hi], sorted by item id: item ids, hard labels
    (-1 for none), probabilities (n, L; NaN where none) and whether the row has probabilities."""
    probs = " || ".join(f"float8send(coalesce(probabilities[{k + 1}], 'NaN'))" for k in range(n_labels))
    fields = [("i", ">i8"), ("l", ">i2"), ("s", ">i2")] + [(f"p{k}", ">f8") for k in range(n_labels)]
    (blob,) = _fetch(raw, "SELECT string_agg(int8send(item_id) || int2send(coalesce(label, -1::int2)) || "
                          f"int2send((probabilities IS NOT NULL)::int::int2) || {probs}, ''::bytea) "
                          "FROM prediction WHERE release_id = %s AND item_id BETWEEN %s AND %s AND dataset_id = %s",
                 (release_id, lo, hi, dataset_id))
    rec = np.frombuffer(blob or b"", dtype=np.dtype(fields))
    ids = rec["i"].astype(np.int64)
    hard = rec["l"].astype(np.int64)
    soft = rec["s"] != 0
    p = np.stack([rec[f"p{k}"] for k in range(n_labels)], axis=1).astype(np.float64)
    del rec
    return _sorted_by(ids, hard, p, soft)


def stack_rows(blocks: list[RowBlock]) -> np.ndarray:
    """(M, 3) int64 rows of the blocks, one under the other; each block is released once copied.

    The result is allocated untouched and filled block by block, so memory holds about
    the result plus one block rather than the result plus every block unpacked. It is
    column-major (the transpose of a (3, M) array): each column — item ids, annotator
    ids, labels — is one contiguous array, which a caller can transform in place and
    hand on without a copy.
    """
    out = np.empty((3, sum(len(b) for b in blocks)), dtype=np.int64)
    at = 0
    while blocks:
        block = blocks.pop(0)
        end = at + len(block)
        out[0, at:end] = block.item_ids()
        out[1, at:end] = block.annotator_ids()
        block.labels(out=out[2, at:end])
        at = end
        del block
    return out.T


class IdIndex:
    """Positions of ids in an ascending array of known ids."""

    def __init__(self, sorted_ids: np.ndarray):
        self.ids = sorted_ids
        self._table = None
        if sorted_ids.size and sorted_ids[-1] - sorted_ids[0] < 8 * sorted_ids.size + 1024:
            # Dense ids (the usual case): a lookup table beats a binary search per value.
            self._lo = int(sorted_ids[0])
            self._table = np.full(int(sorted_ids[-1]) - self._lo + 1, -1, dtype=np.int64)
            self._table[sorted_ids - self._lo] = np.arange(sorted_ids.size)

    def __call__(self, ids: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Positions of ``ids`` (into ``out`` when given); every one must be a known id."""
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64) if out is None else out
        if self._table is not None:
            rel = ids - self._lo
            if rel.min() < 0 or rel.max() >= self._table.size:
                raise RuntimeError("an id outside the known range")
            out = np.take(self._table, rel, out=out)
            del rel
            if out.min() < 0:
                raise RuntimeError("an id that is not among the known ids")
            return out
        found = np.searchsorted(self.ids, ids)
        if out is None:
            out = found.astype(np.int64)
        else:
            out[:] = found
        del found
        if out.max() >= self.ids.size or not np.array_equal(self.ids[out], ids):
            raise RuntimeError("an id that is not among the known ids")
        return out


def positions(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Positions of ``ids`` in ``sorted_ids``; every id must be there."""
    return IdIndex(sorted_ids)(ids)


def read_parallel(engine: Engine | None, conn: Connection, jobs: Sequence[Callable[[Any], T]]) -> list[T]:
    """Run ``job(raw psycopg connection)`` for every job; results in the order of ``jobs``.

    With an ``engine`` and several jobs, ``READERS`` connections work at once: ``conn``
    (whose transaction must be REPEATABLE READ) exports its snapshot and the helpers
    import it, so all jobs read the same data. Without, the jobs run one after another
    on ``conn``.
    """
    main = raw_connection(conn)
    if engine is None or READERS < 2 or len(jobs) < 2:
        return [job(main) for job in jobs]
    (snapshot_id,) = _fetch(main, "SELECT pg_export_snapshot()")
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []
    queue = iter(range(len(jobs)))
    lock = threading.Lock()

    def work(raw) -> None:
        while not errors:
            with lock:
                i = next(queue, None)
            if i is None:
                return
            try:
                results[i] = jobs[i](raw)
            except BaseException as exc:  # re-raised in the caller's thread
                errors.append(exc)

    def helper() -> None:
        try:
            with engine.connect().execution_options(isolation_level="REPEATABLE READ") as h, h.begin():
                h.exec_driver_sql("SET TRANSACTION READ ONLY")
                h.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{snapshot_id}'")
                work(raw_connection(h))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=helper, daemon=True) for _ in range(min(READERS, len(jobs)) - 1)]
    for t in threads:
        t.start()
    work(main)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
