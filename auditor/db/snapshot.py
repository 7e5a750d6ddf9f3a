"""Reading one dataset at one ``data_version`` into the arrays the statistics take.

The snapshot is read inside one transaction (REPEATABLE READ on PostgreSQL, one read
transaction on SQLite in WAL mode), so imports that commit meanwhile are not half
seen. Label counts come from ``item.label_counts`` (one row per item); annotations
(item × annotator, per-vendor subsets) only when asked for, and then the counts are
taken from those very rows. On PostgreSQL the reads go in item-id blocks, each packed
by the server into one ``bytea`` and read with numpy, by two connections sharing one
exported snapshot (:mod:`auditor.db.pgread`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection, Engine, text

from auditor.db import pgread
from auditor.db.pgread import (
    IdIndex,
    annotation_block,
    estimated_rows,
    id_blocks,
    item_block,
    item_range,
    positions,
    prediction_block,
    raw_connection,
    read_parallel,
)

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
        infos = _release_infos(conn, dataset_id, releases)
        read = _read_postgresql if conn.dialect.name == "postgresql" else _read_sqlite
        engine = bind if isinstance(bind, Engine) else None
        data = read(engine, conn, int(dataset_id), len(labels), rows=annotations or as_of,
                    as_of=int(version) if as_of else None, releases=list(infos))
        item_ids, items, gold, counts = data["item_ids"], data["items"], data["gold"], data["counts"]
        release_rows = data.pop("predictions")

        ann = None
        ann_ids = None
        vendors: tuple[str | None, ...] = ()
        tiers: tuple[str, ...] = ()
        if annotations:
            ann_ids, ann_code = data.pop("annotator_ids"), data.pop("ann_annotator")
            meta = _annotators(conn, ann_ids, int(dataset_id))
            names = tuple(meta[int(a)][0] for a in ann_ids)
            vendors = tuple(meta[int(a)][1] for a in ann_ids)
            tiers = tuple(meta[int(a)][2] for a in ann_ids)
            ann = Annotations(data.pop("ann_item"), ann_code, data.pop("ann_label"), items, names, labels)
        del data

        predictions = {rid: ReleasePredictions(infos[rid], hard, probs, has)
                       for rid, (hard, probs, has) in release_rows.items()}

    return Snapshot(
        dataset_id=dataset_id, dataset=name, data_version=version, labels=labels, item_ids=item_ids, items=items,
        counts=LabelCounts(counts.astype(np.int64, copy=False), labels, items), gold=gold, annotations=ann,
        annotator_ids=ann_ids, annotator_vendor=vendors, annotator_tier=tiers, predictions=predictions,
    )


def _release_infos(conn: Connection, dataset_id: int, releases: Iterable[int] | None) -> dict[int, ReleaseInfo]:
    infos = {
        int(rid): ReleaseInfo(int(rid), model, version, released_at)
        for rid, model, version, released_at in conn.execute(text(
            "SELECT r.id, m.name, r.version, r.released_at FROM release r JOIN model m ON m.id = r.model_id "
            "WHERE EXISTS (SELECT 1 FROM prediction p WHERE p.dataset_id = :d AND p.release_id = r.id) "
            "ORDER BY r.id"),
            {"d": dataset_id})
    }
    wanted = list(infos) if releases is None else [int(r) for r in releases if int(r) in infos]
    return {rid: infos[rid] for rid in wanted}


def _annotators(conn: Connection, ids: np.ndarray, dataset_id: int) -> dict[int, tuple[str, str | None, str]]:
    """(external id, vendor, tier) by annotator id, for the annotator ids ``ids`` of the dataset.

    One query over the dataset's workspace, whatever the number of annotators: a list of
    ids in the query would grow with the data (and PostgreSQL takes at most 65,535
    parameters a statement).
    """
    wanted = set(map(int, ids))
    meta = {}
    for aid, ext, vendor, tier in conn.execute(text(
            "SELECT a.id, a.external_id, a.vendor, a.tier FROM annotator a "
            "JOIN dataset d ON d.workspace_id = a.workspace_id WHERE d.id = :d"), {"d": int(dataset_id)}):
        if int(aid) in wanted:
            meta[int(aid)] = (ext, vendor, tier)
    return meta


def _read_postgresql(engine: Engine | None, conn: Connection, d: int, L: int, *, rows: bool, as_of: int | None,
                     releases: list[int]) -> dict:
    """Items (and annotation rows, and predictions) in item-id blocks, read by parallel connections."""
    raw = raw_connection(conn)
    lo, hi, n_items = item_range(raw, d)
    jobs: list = []
    kinds: list[tuple] = []
    if rows:
        max_annotator = int(conn.execute(text("SELECT coalesce(max(id), 0) FROM annotator")).scalar())
        if as_of is None:
            tables = [("annotation", "", ())]
        else:
            tables = [("annotation", "AND data_version <= %s", (as_of,)),
                      ("annotation_history", "AND data_version <= %s AND superseded_version > %s", (as_of, as_of))]
        for table, where, params in tables:
            estimate = estimated_rows(raw, f"{table} WHERE dataset_id = %s", (d,))
            for a, b in id_blocks(lo, hi, max(pgread.READERS, -(-estimate // pgread.BLOCK_ROWS))):
                jobs.append(partial(annotation_block, table=table, dataset_id=d, lo=a, hi=b,
                                    max_annotator=max_annotator, where=where, params=params))
                kinds.append(("rows",))
    # Per-item counts are read only when no rows are (the rows give them otherwise).
    item_blocks = id_blocks(lo, hi, max(pgread.READERS, -(-n_items // max(1, pgread.BLOCK_ROWS // 2))))
    for a, b in item_blocks:
        jobs.append(partial(item_block, dataset_id=d, lo=a, hi=b, n_labels=L, counts=not rows))
        kinds.append(("items",))
    for rid in releases:
        for a, b in item_blocks:
            jobs.append(partial(prediction_block, dataset_id=d, release_id=rid, n_labels=L, lo=a, hi=b))
            kinds.append(("predictions", rid))
    results = read_parallel(engine, conn, jobs)
    del jobs

    items = [r for k, r in zip(kinds, results, strict=True) if k[0] == "items"]
    item_ids = np.concatenate([b["id"] for b in items]) if items else np.zeros(0, dtype=np.int64)
    out = {
        "item_ids": item_ids,
        "gold": np.concatenate([b["gold"] for b in items]) if items else np.zeros(0, dtype=np.int64),
        "counts": np.concatenate([b["counts"] for b in items]) if items and not rows else
        np.zeros((0, L), dtype=np.int64),
        "items": tuple(itertools.chain.from_iterable(b["names"] for b in items)),
    }
    del items
    index = IdIndex(item_ids)
    predictions: dict[int, tuple] = {}
    for rid in releases:
        parts = [r for k, r in zip(kinds, results, strict=True) if k == ("predictions", rid)]
        predictions[rid] = _aligned_predictions(index, L, parts)
        del parts
        results = [None if k == ("predictions", rid) else r for k, r in zip(kinds, results, strict=True)]
    out["predictions"] = predictions
    if rows:
        blocks = [r for k, r in zip(kinds, results, strict=True) if k[0] == "rows"]
        del results
        # Unpacked block by block into the final arrays; the counts follow from the rows.
        total = sum(len(b) for b in blocks)
        # Annotators as codes 0..A-1 in id order straight away: ids are small integers, so
        # a lookup table (from a first pass over the packed blocks) beats sorting 10M values.
        present = np.zeros(1, dtype=bool)
        for block in blocks:
            seen = np.bincount(block.annotator_ids()) > 0
            present = np.pad(present, (0, max(0, len(seen) - len(present))))
            present[:len(seen)] |= seen
        annotator_ids = np.flatnonzero(present)
        lookup = np.cumsum(present) - 1
        ann_item, ann_annotator, ann_label = (np.empty(total, dtype=np.int64) for _ in range(3))
        counts = np.zeros(len(item_ids) * L, dtype=np.int64)
        at = 0
        while blocks:
            block = blocks.pop(0)
            end = at + len(block)
            ids = block.item_ids()
            index(ids, out=ann_item[at:end])
            np.take(lookup, block.annotator_ids(), out=ann_annotator[at:end])
            block.labels(out=ann_label[at:end])
            _check_labels(ann_label[at:end], L)
            if end > at:
                # The block's items are consecutive positions: count them in a short vector.
                first = int(ann_item[at:end].min())
                np.subtract(ann_item[at:end], first, out=ids)
                ids *= L
                ids += ann_label[at:end]
                part = np.bincount(ids)
                counts[first * L:first * L + len(part)] += part
            at = end
            del block, ids
        out.update(ann_item=ann_item, ann_annotator=ann_annotator, ann_label=ann_label,
                   annotator_ids=annotator_ids, counts=counts.reshape(-1, L))
    return out


def _aligned_predictions(index: IdIndex, n_labels: int, parts: list[tuple]
                         ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """One release's (item ids, hard, probabilities, has probabilities) parts as per-item arrays:
    hard label or -1, probabilities (NaN where none; None when no row has any), has a prediction."""
    n = len(index.ids)
    hard = np.full(n, -1, dtype=np.int64)
    has = np.zeros(n, dtype=bool)
    probs = None
    while parts:
        p_items, p_hard, p_probs, p_soft = parts.pop(0)
        idx = index(p_items)
        hard[idx] = p_hard
        has[idx] = True
        if p_soft.any():
            if probs is None:
                probs = np.full((n, n_labels), np.nan)
            probs[idx[p_soft]] = p_probs[p_soft]
        del p_items, p_hard, p_probs, p_soft, idx
    return hard, probs, has


def _check_labels(codes: np.ndarray, n_labels: int) -> None:
    if len(codes) and (codes.min() < 0 or codes.max() >= n_labels):
        raise SnapshotError(f"an annotation's label code is outside 0..{n_labels - 1}")


def _read_sqlite(engine: Engine | None, conn: Connection, d: int, L: int, *, rows: bool, as_of: int | None,
                 releases: list[int]) -> dict:
    items = conn.execute(text("SELECT id, gold_label, label_counts, external_id FROM item "
                              "WHERE dataset_id = :d ORDER BY id"), {"d": d}).all()
    item_ids = np.array([r[0] for r in items], dtype=np.int64)
    counts = np.zeros((len(items), L), dtype=np.int64)
    for n, r in enumerate(items):
        if r[2] is not None:
            vec = json.loads(r[2]) if isinstance(r[2], str) else r[2]
            counts[n, : len(vec)] = vec[:L]
    out = {
        "item_ids": item_ids, "counts": counts, "items": tuple(r[3] for r in items),
        "gold": np.array([-1 if r[1] is None else r[1] for r in items], dtype=np.int64),
    }
    if rows:
        queries = ["SELECT item_id, annotator_id, label FROM annotation WHERE dataset_id = :d"]
        if as_of is not None:
            queries = [queries[0] + " AND data_version <= :v",
                       "SELECT item_id, annotator_id, label FROM annotation_history WHERE dataset_id = :d "
                       "AND data_version <= :v AND superseded_version > :v"]
        found = np.array([r for q in queries for r in conn.execute(text(q), {"d": d, "v": as_of}).all()],
                         dtype=np.int64).reshape(-1, 3)
        out["ann_item"] = positions(item_ids, found[:, 0])
        out["annotator_ids"], out["ann_annotator"] = np.unique(found[:, 1], return_inverse=True)
        out["ann_label"] = found[:, 2].copy()
        _check_labels(out["ann_label"], L)
        out["counts"] = np.bincount(out["ann_item"] * L + out["ann_label"],
                                    minlength=len(item_ids) * L).reshape(-1, L)
    predictions = {}
    index = IdIndex(item_ids)
    for rid in releases:
        found = conn.execute(text("SELECT item_id, label, probabilities FROM prediction "
                                  "WHERE dataset_id = :d AND release_id = :r ORDER BY item_id"),
                             {"d": d, "r": rid}).all()
        probs = np.full((len(found), L), np.nan)
        soft = np.zeros(len(found), dtype=bool)
        for k, r in enumerate(found):
            if r[2] is not None:
                vec = json.loads(r[2]) if isinstance(r[2], str) else r[2]
                probs[k, : len(vec)] = vec[:L]
                soft[k] = True
        predictions[rid] = _aligned_predictions(index, L, [(
            np.array([r[0] for r in found], dtype=np.int64),
            np.array([-1 if r[1] is None else r[1] for r in found], dtype=np.int64), probs, soft)])
    out["predictions"] = predictions
    return out
