"""Reading one dataset at one ``data_version`` into the arrays the statistics take.

The snapshot is read inside one transaction (REPEATABLE READ on PostgreSQL, one read
transaction on SQLite in WAL mode), so imports that commit meanwhile are not half
seen. Label counts come from ``item.label_counts`` (one row per item); annotations
(item × annotator, per-vendor subsets) only when asked for. On PostgreSQL the large
reads use binary ``COPY ... TO STDOUT`` parsed straight into numpy arrays.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection, Engine, text

if TYPE_CHECKING:
    from auditor.stats import Annotations, LabelCounts

__all__ = ["ReleaseInfo", "ReleasePredictions", "Snapshot", "SnapshotError", "load_snapshot"]

_BINARY_HEADER = 19  # signature (11) + flags (4) + header-extension length (4)


class SnapshotError(LookupError):
    """The dataset or the requested version does not exist."""


@dataclass(frozen=True)
class ReleaseInfo:
    id: int
    model: str
    version: str
    released_at: datetime | None


@dataclass(frozen=True)
class ReleasePredictions:
    """One release's predictions aligned with the snapshot's items.

    ``hard[n]`` is a label code or -1 (no hard label); ``probabilities[n]`` is NaN
    where the release gave none; ``has_prediction[n]`` says whether item ``n`` has any.
    """

    release: ReleaseInfo
    hard: np.ndarray
    probabilities: np.ndarray | None
    has_prediction: np.ndarray


@dataclass(frozen=True)
class Snapshot:
    """One dataset at one ``data_version``. Row ``n`` of every array is item ``items[n]``.

    ``counts`` covers every item (zero rows for items that have only predictions or
    gold); ``annotations`` uses the same item order. ``gold[n]`` is a label code or -1.
    """

    dataset_id: int
    dataset: str
    data_version: int
    labels: tuple[str, ...]
    item_ids: np.ndarray
    items: tuple[str, ...]
    counts: LabelCounts
    gold: np.ndarray
    annotations: Annotations | None = None
    annotator_ids: np.ndarray | None = None
    annotator_vendor: tuple[str | None, ...] = ()
    annotator_tier: tuple[str, ...] = ()
    predictions: dict[int, ReleasePredictions] = field(default_factory=dict)

    @property
    def n_items(self) -> int:
        return len(self.items)

    def vendors(self) -> tuple[str, ...]:
        return tuple(sorted({v for v in self.annotator_vendor if v is not None}))

    def vendor_annotations(self, vendor: str | None = None, *, tier: str | None = None) -> Annotations:
        """The annotations of one vendor's (and/or one tier's) annotators."""
        if self.annotations is None:
            raise SnapshotError("this snapshot was loaded without annotations (annotations=True)")
        names = [a for a, v, t in zip(self.annotations.annotators, self.annotator_vendor, self.annotator_tier,
                                      strict=True)
                 if (vendor is None or v == vendor) and (tier is None or t == tier)]
        if not names:
            raise SnapshotError(f"no annotator with vendor={vendor!r} tier={tier!r}")
        return self.annotations.subset(names)


# --- reading helpers ---------------------------------------------------------------


def _binary_rows(conn: Connection, query: str, fields: list[tuple[str, str]]) -> dict[str, np.ndarray]:
    """Fixed-width columns of ``COPY (query) TO STDOUT (FORMAT binary)`` as numpy arrays.

    ``fields`` are (name, numpy big-endian dtype) in select order; every value must be
    non-NULL (coalesce in the query), so each row has the same byte length.
    """
    dtype = [("nfields", ">i2")]
    for name, kind in fields:
        dtype += [(f"{name}_len", ">i4"), (name, kind)]
    row_dtype = np.dtype(dtype)
    parts: dict[str, list[np.ndarray]] = {name: [] for name, _ in fields}
    raw = conn.connection.driver_connection
    size = row_dtype.itemsize

    def parse(buf: bytes) -> bytes:
        n = len(buf) // size
        if n:
            rows = np.frombuffer(buf, dtype=row_dtype, count=n)
            for name, _ in fields:
                parts[name].append(rows[name].astype(rows[name].dtype.newbyteorder("=")))
        return buf[n * size:]

    # psycopg yields one message per row: gather them and parse in blocks of ~16 MB.
    block: list[bytes] = []
    held = 0
    pending = b""
    header_left = _BINARY_HEADER
    with raw.cursor() as cur, cur.copy(f"COPY ({query}) TO STDOUT (FORMAT binary)") as copy:
        for chunk in copy:
            if header_left:
                skip = min(header_left, len(chunk))
                chunk, header_left = bytes(chunk)[skip:], header_left - skip
            block.append(bytes(chunk))
            held += len(chunk)
            if held >= 1 << 24:
                pending = parse(pending + b"".join(block))
                block, held = [], 0
    parse(pending + b"".join(block))
    # What is left is the 2-byte trailer (-1).
    return {name: (np.concatenate(p) if p else np.empty(0, dtype=np.dtype(kind).newbyteorder("=")))
            for (name, kind), p in zip(fields, parts.values(), strict=True)}


def _text_column(conn: Connection, query: str) -> list[str]:
    raw = conn.connection.driver_connection
    with raw.cursor() as cur, cur.copy(f"COPY ({query}) TO STDOUT") as copy:
        data = b"".join(bytes(c) for c in copy)
    lines = data.decode("utf-8").split("\n")[:-1]
    if "\\" in data.decode("utf-8", errors="ignore"):
        lines = [_unescape(v) if "\\" in v else v for v in lines]
    return lines


_ESCAPES = {"\\\\": "\\", "\\t": "\t", "\\n": "\n", "\\r": "\r", "\\b": "\b", "\\f": "\f", "\\v": "\v"}


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        pair = value[i:i + 2]
        if pair in _ESCAPES:
            out.append(_ESCAPES[pair])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


@contextmanager
def _reading(bind: Engine | Connection) -> Iterator[Connection]:
    if isinstance(bind, Connection):
        yield bind
        return
    options = {"isolation_level": "REPEATABLE READ"} if bind.dialect.name == "postgresql" else {}
    with bind.connect().execution_options(**options) as conn, conn.begin():
        if bind.dialect.name == "postgresql":
            conn.execute(text("SET TRANSACTION READ ONLY"))
        yield conn


def _annotation_query(version_filter: bool) -> tuple[str, str]:
    """(current rows, superseded rows) for the dataset, optionally as of a version."""
    if not version_filter:
        return ("SELECT item_id, annotator_id, label FROM annotation WHERE dataset_id = {d}", "")
    return (
        "SELECT item_id, annotator_id, label FROM annotation WHERE dataset_id = {d} AND data_version <= {v}",
        "SELECT item_id, annotator_id, label FROM annotation_history WHERE dataset_id = {d} "
        "AND data_version <= {v} AND superseded_version > {v}",
    )


# --- the loader ----------------------------------------------------------------------


def load_snapshot(bind: Engine | Connection, dataset_id: int, *, annotations: bool = False,
                  data_version: int | None = None, releases: Iterable[int] | None = None) -> Snapshot:
    """Read dataset ``dataset_id`` into a :class:`Snapshot`.

    Parameters
    ----------
    bind : Engine or Connection
        With an engine, the snapshot gets its own consistent read transaction; with a
        connection, the caller's transaction (and its isolation level) is used.
    annotations : bool
        Also read the annotation rows (for per-annotator and per-vendor statistics).
    data_version : int, optional
        Read the dataset as it was at this version (annotations and counts are rebuilt
        from the history table; gold and predictions are read as they are now). Default:
        the current version.
    releases : iterable of int, optional
        Release ids whose predictions to read (default: every release with predictions
        on this dataset).
    """
    # Imported here so that importing the persistence layer stays cheap for the web process.
    from auditor.stats import Annotations, LabelCounts

    with _reading(bind) as conn:
        row = conn.execute(text("SELECT name, labels, data_version FROM dataset WHERE id = :d"),
                           {"d": dataset_id}).one_or_none()
        if row is None:
            raise SnapshotError(f"no dataset with id {dataset_id}")
        name, labels, current = row
        labels = tuple(json.loads(labels) if isinstance(labels, str) else labels)
        if data_version is not None and not 0 <= data_version <= current:
            raise SnapshotError(f"dataset {name!r} is at data_version {current}; {data_version} does not exist")
        as_of = data_version is not None and data_version < current
        version = current if data_version is None else data_version
        pg = conn.dialect.name == "postgresql"
        L = len(labels)

        if pg:
            fields = [("id", ">i8"), ("gold", ">i2")] + [(f"c{k}", ">i4") for k in range(L)]
            cols = ", ".join(["id", "coalesce(gold_label, -1)::int2"]
                             + [f"coalesce(label_counts[{k + 1}], 0)" for k in range(L)])
            arr = _binary_rows(conn, f"SELECT {cols} FROM item WHERE dataset_id = {int(dataset_id)} ORDER BY id",
                               fields)
            item_ids = arr["id"].astype(np.int64)
            gold = arr["gold"].astype(np.int64)
            counts = (np.stack([arr[f"c{k}"] for k in range(L)], axis=1).astype(np.int64)
                      if len(item_ids) else np.zeros((0, L), dtype=np.int64))
            items = tuple(_text_column(
                conn, f"SELECT external_id FROM item WHERE dataset_id = {int(dataset_id)} ORDER BY id"))
        else:
            rows = conn.execute(text("SELECT id, gold_label, label_counts, external_id FROM item "
                                     "WHERE dataset_id = :d ORDER BY id"), {"d": dataset_id}).all()
            item_ids = np.array([r[0] for r in rows], dtype=np.int64)
            gold = np.array([-1 if r[1] is None else r[1] for r in rows], dtype=np.int64)
            counts = np.zeros((len(rows), L), dtype=np.int64)
            for n, r in enumerate(rows):
                if r[2] is not None:
                    vec = json.loads(r[2]) if isinstance(r[2], str) else r[2]
                    counts[n, : len(vec)] = vec
            items = tuple(r[3] for r in rows)

        ann = None
        ann_ids = None
        vendors: tuple[str | None, ...] = ()
        tiers: tuple[str, ...] = ()
        if annotations or as_of:
            current_q, history_q = _annotation_query(as_of)
            queries = [q.format(d=int(dataset_id), v=int(version)) for q in (current_q, history_q) if q]
            if pg:
                fields = [("item", ">i8"), ("annotator", ">i4"), ("label", ">i2")]
                pieces = [_binary_rows(conn, q, fields) for q in queries]
                a_item = np.concatenate([p["item"] for p in pieces]).astype(np.int64)
                a_ann = np.concatenate([p["annotator"] for p in pieces]).astype(np.int64)
                a_label = np.concatenate([p["label"] for p in pieces]).astype(np.int64)
            else:
                rows = [r for q in queries for r in conn.execute(text(q)).all()]
                a_item = np.array([r[0] for r in rows], dtype=np.int64)
                a_ann = np.array([r[1] for r in rows], dtype=np.int64)
                a_label = np.array([r[2] for r in rows], dtype=np.int64)
            item_code = np.searchsorted(item_ids, a_item)
            ann_ids, ann_code = np.unique(a_ann, return_inverse=True)
            meta = {}
            if len(ann_ids):
                for aid, ext, vendor, tier in conn.execute(text(
                        "SELECT a.id, a.external_id, a.vendor, a.tier FROM annotator a WHERE a.id IN "
                        "(SELECT DISTINCT annotator_id FROM annotation WHERE dataset_id = :d "
                        " UNION SELECT DISTINCT annotator_id FROM annotation_history WHERE dataset_id = :d)"),
                        {"d": dataset_id}):
                    meta[int(aid)] = (ext, vendor, tier)
            names = tuple(meta[int(a)][0] for a in ann_ids)
            vendors = tuple(meta[int(a)][1] for a in ann_ids)
            tiers = tuple(meta[int(a)][2] for a in ann_ids)
            ann = Annotations(item_code.astype(np.int64), ann_code.reshape(-1).astype(np.int64), a_label,
                              items, names, labels)
            if as_of:
                # Counts as they were: rebuilt from the annotations valid at that version.
                counts = np.bincount(item_code * L + a_label, minlength=len(item_ids) * L).reshape(-1, L)
            if not annotations:
                ann, ann_ids, vendors, tiers = None, None, (), ()

        predictions = _load_predictions(conn, dataset_id, item_ids, L, releases)

    return Snapshot(
        dataset_id=dataset_id, dataset=name, data_version=version, labels=labels, item_ids=item_ids, items=items,
        counts=LabelCounts(counts.astype(np.int64), labels, items), gold=gold, annotations=ann,
        annotator_ids=ann_ids, annotator_vendor=vendors, annotator_tier=tiers, predictions=predictions,
    )


def _load_predictions(conn: Connection, dataset_id: int, item_ids: np.ndarray, n_labels: int,
                      releases: Iterable[int] | None) -> dict[int, ReleasePredictions]:
    infos = {
        int(rid): ReleaseInfo(int(rid), model, version, released_at)
        for rid, model, version, released_at in conn.execute(text(
            "SELECT r.id, m.name, r.version, r.released_at FROM release r JOIN model m ON m.id = r.model_id "
            "WHERE r.id IN (SELECT DISTINCT release_id FROM prediction WHERE dataset_id = :d) ORDER BY r.id"),
            {"d": dataset_id})
    }
    wanted = list(infos) if releases is None else [int(r) for r in releases if int(r) in infos]
    out: dict[int, ReleasePredictions] = {}
    n = len(item_ids)
    for rid in wanted:
        rows = conn.execute(text("SELECT item_id, label, probabilities FROM prediction "
                                 "WHERE dataset_id = :d AND release_id = :r"), {"d": dataset_id, "r": rid}).all()
        idx = np.searchsorted(item_ids, np.array([r[0] for r in rows], dtype=np.int64))
        hard = np.full(n, -1, dtype=np.int64)
        has = np.zeros(n, dtype=bool)
        has[idx] = True
        labels = np.array([-1 if r[1] is None else r[1] for r in rows], dtype=np.int64)
        hard[idx] = labels
        probs = None
        if any(r[2] is not None for r in rows):
            probs = np.full((n, n_labels), np.nan)
            for k, r in zip(idx, rows, strict=True):
                if r[2] is not None:
                    vec = json.loads(r[2]) if isinstance(r[2], str) else r[2]
                    probs[k, : len(vec)] = vec
        out[rid] = ReleasePredictions(infos[rid], hard, probs, has)
    return out
