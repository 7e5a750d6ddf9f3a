"""Reading one dataset at one ``data_version`` into the arrays the statistics take.

The snapshot is read inside one transaction (REPEATABLE READ on PostgreSQL, one read
transaction on SQLite in WAL mode), so imports that commit meanwhile are not half
seen. Label counts come from ``item.label_counts`` (one row per item); annotations
(item × annotator, per-vendor subsets) only when asked for. On PostgreSQL the large
reads are packed by the server into one ``bytea`` per block, read with numpy.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection, Engine, text

if TYPE_CHECKING:
    from auditor.stats import Annotations, LabelCounts

__all__ = ["ReleaseInfo", "ReleasePredictions", "Snapshot", "SnapshotError", "load_snapshot"]



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


_SEND = {"int8": ">i8", "int4": ">i4", "int2": ">i2"}
# One aggregated value per query block; PostgreSQL caps a value at 1 GB.
_BLOCK_ROWS = 2_000_000
# Connections reading annotation blocks at once (the server aggregates each on one core).
_READERS = 2


def _packed(conn: Connection, fields: list[tuple[str, str, str]], from_where: str, *,
            with_text: str | None = None, into: tuple[dict[str, np.ndarray], int] | None = None
            ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Fixed-width columns packed by the server into one ``bytea`` and read with numpy.

    ``fields`` are (name, SQL expression, ``int8``/``int4``/``int2``); the expressions
    must not be NULL. Reading one aggregated value instead of millions of rows is what
    makes a 10-million-annotation snapshot fast. ``with_text`` adds one text column
    (same row order), returned as a list of strings.
    """
    dtype = np.dtype([(name, _SEND[kind]) for name, _, kind in fields])
    packed = " || ".join(f"{kind}send(CAST({expr} AS {kind}))" for _, expr, kind in fields)
    select = f"string_agg({packed}, ''::bytea)"
    if with_text is not None:
        select += (f", string_agg({with_text}, ''), "
                   f"string_agg(int4send(CAST(char_length({with_text}) AS int4)), ''::bytea)")
    row = conn.execute(text(f"SELECT {select} FROM {from_where}")).one()
    data = np.frombuffer(row[0] or b"", dtype=dtype)
    if into is not None:
        # Straight into the caller's arrays: no per-block intermediate copies.
        target, offset = into
        if offset + len(data) > len(next(iter(target.values()))):
            raise RuntimeError("the data changed under a snapshot read")  # cannot happen in one snapshot
        for name, _, _ in fields:
            target[name][offset:offset + len(data)] = data[name]
        return {}, []
    out = {name: data[name].astype(np.int64) for name, _, _ in fields}
    del data
    strings: list[str] = []
    if with_text is not None and row[1] is not None:
        ends = np.cumsum(np.frombuffer(row[2], dtype=">i4")).tolist()
        whole = row[1]
        strings = [whole[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    return out, strings


def _blocks(lo: int, hi: int, rows: int, *, min_blocks: int = 1) -> list[tuple[int, int]]:
    """Id ranges [a, b] covering [lo, hi], about ``_BLOCK_ROWS`` rows each if spread evenly."""
    n = max(min_blocks if rows >= 2 * _READERS else 1, -(-rows // _BLOCK_ROWS))
    edges = np.linspace(lo, hi + 1, n + 1).astype(np.int64)
    return [(int(a), int(b) - 1) for a, b in itertools.pairwise(edges.tolist()) if b > a]


def _balanced_blocks(item_ids: np.ndarray, per_item: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(first id, last id, first row, rows) of item ranges with about ``_BLOCK_ROWS`` annotations each."""
    if len(item_ids) == 0:
        return []
    cum = np.cumsum(per_item)
    total = int(cum[-1])
    n = max(_READERS, -(-total // _BLOCK_ROWS))
    cuts = np.searchsorted(cum, np.arange(1, n) * total / n)
    starts = np.unique(np.concatenate([[0], cuts]))
    starts = starts[starts < len(item_ids)]
    ends = np.append(starts[1:] - 1, len(item_ids) - 1)
    before = np.concatenate([[0], cum])
    return [(int(item_ids[a]), int(item_ids[b]), int(before[a]), int(cum[b] - before[a]))
            for a, b in zip(starts, ends, strict=True)]


def _read_blocks(bind: Engine | Connection, conn: Connection,
                 jobs: list) -> list[tuple[dict[str, np.ndarray], list[str]]]:
    """Run the block reads, in parallel connections sharing ``conn``'s snapshot when we own it.

    The reading transaction exports its snapshot (``pg_export_snapshot``); each helper
    connection imports it, so all blocks see exactly the same data.
    """
    if not isinstance(bind, Engine) or len(jobs) < 2:
        return [_packed(conn, fields, where, into=into, with_text=with_text)
                for fields, where, into, with_text in jobs]
    snapshot_id = conn.execute(text("SELECT pg_export_snapshot()")).scalar_one()

    def read(job) -> tuple[dict[str, np.ndarray], list[str]]:
        fields, where, into, with_text = job
        with bind.connect().execution_options(isolation_level="REPEATABLE READ") as helper, helper.begin():
            helper.execute(text(f"SET TRANSACTION SNAPSHOT '{snapshot_id}'"))
            return _packed(helper, fields, where, into=into, with_text=with_text)

    with ThreadPoolExecutor(max_workers=min(_READERS, len(jobs))) as pool:
        return list(pool.map(read, jobs))


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
            d = int(dataset_id)
            lo, hi, n_items = conn.execute(text(
                "SELECT coalesce(min(id), 0), coalesce(max(id), -1), count(*) FROM item WHERE dataset_id = :d"),
                {"d": d}).one()
            fields = [("id", "id", "int8"), ("gold", "coalesce(gold_label, -1)", "int2")] + [
                (f"c{k}", f"coalesce(label_counts[{k + 1}], 0)", "int4") for k in range(L)]
            parts, names = [], []
            jobs = [(fields, f"item WHERE dataset_id = {d} AND id BETWEEN {a} AND {b}", None, "external_id")
                    for a, b in _blocks(int(lo), int(hi), int(n_items), min_blocks=_READERS)]
            for arr, strings in _read_blocks(bind, conn, jobs):
                parts.append(arr)
                names.extend(strings)
            order = np.argsort(np.concatenate([p["id"] for p in parts]), kind="stable") if parts else []
            item_ids = np.concatenate([p["id"] for p in parts]).astype(np.int64)[order] if parts else \
                np.zeros(0, dtype=np.int64)
            gold = np.concatenate([p["gold"] for p in parts]).astype(np.int64)[order] if parts else \
                np.zeros(0, dtype=np.int64)
            counts = (np.stack([np.concatenate([p[f"c{k}"] for p in parts]) for k in range(L)], axis=1)
                      .astype(np.int64)[order] if parts else np.zeros((0, L), dtype=np.int64))
            items = tuple(names[i] for i in order) if parts else ()
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
                fields = [("item", "item_id", "int8"), ("annotator", "annotator_id", "int4"),
                          ("label", "label", "int2")]
                between = "({q}) AS q WHERE item_id BETWEEN {a} AND {b}"
                if as_of:
                    total = int(conn.execute(text("SELECT count(*) FROM annotation WHERE dataset_id = :d"),
                                             {"d": d}).scalar())
                    lo_id = int(item_ids[0]) if len(item_ids) else 0
                    hi_id = int(item_ids[-1]) if len(item_ids) else -1
                    pieces = [arr for arr, _ in _read_blocks(
                        bind, conn, [(fields, between.format(q=q, a=a, b=b), None, None)
                                     for q in queries for a, b in _blocks(lo_id, hi_id, total)])]
                    a_item, a_ann, a_label = (np.concatenate([p[k] for p in pieces]) if pieces
                                              else np.zeros(0, dtype=np.int64) for k in ("item", "annotator", "label"))
                    del pieces
                else:
                    # The per-item counts say how many rows each block holds: read into place.
                    arrays = {name: np.empty(int(counts.sum()), dtype=np.int64) for name, _, _ in fields}
                    _read_blocks(bind, conn, [(fields, between.format(q=queries[0], a=a, b=b), (arrays, start), None)
                                              for a, b, start, _ in _balanced_blocks(item_ids, counts.sum(axis=1))])
                    a_item, a_ann, a_label = arrays["item"], arrays["annotator"], arrays["label"]
                    del arrays
            else:
                rows = [r for q in queries for r in conn.execute(text(q)).all()]
                a_item = np.array([r[0] for r in rows], dtype=np.int64)
                a_ann = np.array([r[1] for r in rows], dtype=np.int64)
                a_label = np.array([r[2] for r in rows], dtype=np.int64)
            item_code = np.searchsorted(item_ids, a_item)
            del a_item
            # Annotator ids are small integers: a lookup table beats sorting 10M values.
            present = np.bincount(a_ann) > 0 if len(a_ann) else np.zeros(0, dtype=bool)
            ann_ids = np.flatnonzero(present)
            lookup = np.cumsum(present) - 1
            ann_code = lookup[a_ann]
            del a_ann, lookup
            meta = {}
            ids_list = [int(a) for a in ann_ids]
            for start in range(0, len(ids_list), 10_000):
                chunk = ids_list[start:start + 10_000]
                for aid, ext, vendor, tier in conn.execute(text(
                        f"SELECT id, external_id, vendor, tier FROM annotator "
                        f"WHERE id IN ({', '.join(map(str, chunk))})")):
                    meta[int(aid)] = (ext, vendor, tier)
            names = tuple(meta[int(a)][0] for a in ann_ids)
            vendors = tuple(meta[int(a)][1] for a in ann_ids)
            tiers = tuple(meta[int(a)][2] for a in ann_ids)
            ann = Annotations(item_code.astype(np.int64, copy=False), ann_code.reshape(-1).astype(np.int64, copy=False),
                              a_label, items, names, labels)
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
