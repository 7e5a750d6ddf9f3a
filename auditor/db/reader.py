"""The low-level dataset reader: one dataset read at one ``data_version`` into plain arrays
(item ids, gold codes, label counts, annotation rows, releases' predictions), in one
transaction. The audit's snapshot and the public snapshot (:mod:`auditor.audit.snapshot`)
are built on it.

A dataset is read inside one transaction (REPEATABLE READ READ ONLY on PostgreSQL, one
read transaction on SQLite), so imports that commit meanwhile are not half seen. On
PostgreSQL the reads go in item-id blocks, each packed by the server into one ``bytea``
and read with numpy, by two connections sharing one exported snapshot
(:mod:`auditor.db.pgread`). No query grows with the data: annotators are read by
workspace, never by a list of ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import numpy as np
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from auditor.db import pgread
from auditor.db.models import Annotator, Model, Prediction, Release

__all__ = [
    "DatasetRead",
    "RawRelease",
    "ReleaseInfo",
    "SnapshotError",
    "annotator_codes",
    "annotator_lookup",
    "annotators_by_id",
    "begin_snapshot",
    "check_labels",
    "dataset_releases",
    "read_dataset",
]


class SnapshotError(LookupError):
    """The dataset or the requested version does not exist."""


# --------------------------------------------------------------------------- types


@dataclass(frozen=True)
class ReleaseInfo:
    id: int
    model: str
    version: str
    released_at: datetime | None


# --------------------------------------------------------------------------- the reader

#: One release as read: item ids (ascending), hard labels (-1 for none), probabilities
#: (n, L; NaN where none) and whether each row has probabilities.
RawRelease = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class DatasetRead:
    items: np.ndarray | None          # (N, 2 + L): item id, gold code (-1 for none), label counts
    names: tuple[str, ...]            # external item ids (when asked for)
    rows: np.ndarray | None           # (M, 3): item id, annotator id, label (when asked for)
    releases: dict[int, RawRelease]


def begin_snapshot(session: Session) -> None:
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        # One REPEATABLE READ transaction: every query below sees the same committed state.
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")


def _row_filters(since: int | None, as_of: int | None) -> list[tuple[str, str, tuple]]:
    """(table, extra condition with %s placeholders, its parameters) of the annotation rows to read:
    the current rows (written after ``since``), or the rows in force at version ``as_of``."""
    if as_of is None:
        return [("annotation", "AND data_version > %s", (since,)) if since is not None else ("annotation", "", ())]
    return [("annotation", "AND data_version <= %s", (as_of,)),
            ("annotation_history", "AND data_version <= %s AND superseded_version > %s", (as_of, as_of))]


def read_dataset(session: Session, dataset_id: int, n_labels: int, *, rows: bool, since: int | None = None,
          as_of: int | None = None, releases: Iterable[int] = (), items: bool = True, names: bool = False,
          counts: bool = True) -> DatasetRead:
    """The dataset's items (with their label counts when ``counts``), annotation rows
    (``rows``) and releases' predictions, in this session's transaction."""
    releases = list(releases)
    if session.connection().dialect.name == "postgresql":
        return _read_postgresql(session, dataset_id, n_labels, rows=rows, since=since, as_of=as_of,
                                releases=releases, items=items, names=names, counts=counts)
    return _read_sqlite(session, dataset_id, n_labels, rows=rows, since=since, as_of=as_of, releases=releases,
                        items=items, names=names)


def _read_postgresql(session: Session, d: int, n_labels: int, *, rows: bool, since: int | None, as_of: int | None,
                     releases: list[int], items: bool, names: bool, counts: bool) -> DatasetRead:
    """Item-id blocks read by parallel connections that share this transaction's snapshot."""
    conn = session.connection()
    raw = pgread.raw_connection(conn)
    lo, hi, n_items = pgread.item_range(raw, d)
    item_blocks = pgread.id_blocks(lo, hi, max(pgread.READERS, -(-n_items // max(1, pgread.BLOCK_ROWS // 2))))
    jobs: list = []
    kinds: list[tuple] = []
    if rows:
        max_annotator = session.execute(select(func.coalesce(func.max(Annotator.id), 0))).scalar_one()
        for table, where, params in _row_filters(since, as_of):
            estimate = pgread.estimated_rows(raw, f"{table} WHERE dataset_id = %s {where}", (d, *params))
            for a, b in pgread.id_blocks(lo, hi, max(pgread.READERS, -(-estimate // pgread.BLOCK_ROWS))):
                jobs.append(partial(pgread.annotation_block, table=table, dataset_id=d, lo=a, hi=b,
                                    max_annotator=max_annotator, where=where, params=params))
                kinds.append(("rows",))
    for a, b in item_blocks if items else []:
        jobs.append(partial(pgread.item_block, dataset_id=d, lo=a, hi=b, n_labels=n_labels, names=names,
                            counts=counts))
        kinds.append(("items",))
    for rid in releases:
        for a, b in item_blocks:
            jobs.append(partial(pgread.prediction_block, dataset_id=d, release_id=rid, n_labels=n_labels, lo=a, hi=b))
            kinds.append(("predictions", rid))
    bind = session.get_bind()
    results = pgread.read_parallel(bind if isinstance(bind, Engine) else None, conn, jobs)
    del jobs
    blocks = [r for k, r in zip(kinds, results, strict=True) if k[0] == "items"]
    table = None
    item_names: list[str] = []
    if items:
        table = np.zeros((sum(len(b["id"]) for b in blocks), 2 + n_labels), dtype=np.int64)
        at = 0
        for b in blocks:
            end = at + len(b["id"])
            table[at:end, 0], table[at:end, 1] = b["id"], b["gold"]
            if counts:
                table[at:end, 2:] = b["counts"]
            item_names.extend(b["names"])
            at = end
    del blocks
    raw_releases = {}
    for rid in releases:
        parts = [r for k, r in zip(kinds, results, strict=True) if k == ("predictions", rid)]
        raw_releases[rid] = tuple(np.concatenate(col) for col in zip(*parts, strict=True))
        results = [None if k == ("predictions", rid) else r for k, r in zip(kinds, results, strict=True)]
        del parts
    row_blocks = [r for k, r in zip(kinds, results, strict=True) if k[0] == "rows"]
    del results  # stack_rows releases each block once copied
    return DatasetRead(table, tuple(item_names), pgread.stack_rows(row_blocks) if rows else None, raw_releases)


def _vector(value: Any) -> list:
    return (json.loads(value) if isinstance(value, str) else value) or []


def _read_sqlite(session: Session, d: int, n_labels: int, *, rows: bool, since: int | None, as_of: int | None,
                 releases: list[int], items: bool, names: bool) -> DatasetRead:
    table = None
    item_names: tuple[str, ...] = ()
    if items:
        found = session.execute(text("SELECT id, gold_label, label_counts, external_id FROM item "
                                     "WHERE dataset_id = :d ORDER BY id"), {"d": d}).all()
        table = np.zeros((len(found), 2 + n_labels), dtype=np.int64)
        for n, r in enumerate(found):
            table[n, 0], table[n, 1] = r[0], -1 if r[1] is None else r[1]
            vec = _vector(r[2])[:n_labels]
            table[n, 2:2 + len(vec)] = vec
        if names:
            item_names = tuple(r[3] for r in found)
    row_array = None
    if rows:
        parts = []
        for tbl, where, params in _row_filters(since, as_of):
            where = where.replace("%s", ":v0", 1).replace("%s", ":v1", 1)
            parts.extend(session.execute(
                text(f"SELECT item_id, annotator_id, label FROM {tbl} WHERE dataset_id = :d {where}"),
                {"d": d, **{f"v{k}": v for k, v in enumerate(params)}}).all())
        row_array = np.array(parts, dtype=np.int64).reshape(-1, 3).T.copy().T  # column-major, as on PostgreSQL
    raw_releases = {}
    for rid in releases:
        found = session.execute(text("SELECT item_id, label, probabilities FROM prediction "
                                     "WHERE dataset_id = :d AND release_id = :r ORDER BY item_id"),
                                {"d": d, "r": rid}).all()
        probs = np.full((len(found), n_labels), np.nan)
        soft = np.zeros(len(found), dtype=bool)
        for k, r in enumerate(found):
            if r[2] is not None:
                vec = _vector(r[2])[:n_labels]
                probs[k, :len(vec)] = vec
                soft[k] = True
        raw_releases[rid] = (np.array([r[0] for r in found], dtype=np.int64),
                             np.array([-1 if r[1] is None else r[1] for r in found], dtype=np.int64), probs, soft)
    return DatasetRead(table, item_names, row_array, raw_releases)


def check_labels(codes: np.ndarray, n_labels: int) -> None:
    if len(codes) and (codes.min() < 0 or codes.max() >= n_labels):
        raise SnapshotError(f"an annotation's label code is outside 0..{n_labels - 1}")


def annotators_by_id(session: Session, workspace_id: int, ids: np.ndarray) -> dict[int, Any]:
    """(external id, vendor, tier) rows by annotator id, for the annotator ids ``ids``.

    One query over the dataset's workspace, whatever the number of annotators: a list of
    ids in the query would grow with the data (and PostgreSQL takes at most 65,535
    parameters a statement).
    """
    if not ids.size:
        return {}
    present = np.zeros(int(ids.max()) + 1, dtype=bool)
    present[ids] = True
    return {a.id: a for a in session.execute(
        select(Annotator.id, Annotator.external_id, Annotator.vendor, Annotator.tier)
        .where(Annotator.workspace_id == workspace_id))
        if a.id < present.size and present[a.id]}


def annotator_lookup(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The annotator ids present, ascending, and a table from annotator id to position among them."""
    if not rows.size:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    present = np.bincount(rows[:, 1]) > 0
    return np.flatnonzero(present), np.cumsum(present) - 1


def annotator_codes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The annotator ids present, ascending, and each row's annotator as a position among them.

    Annotator ids are small integers: codes by a lookup table rather than by sorting."""
    ids, lookup = annotator_lookup(rows)
    return ids, lookup[rows[:, 1]] if rows.size else np.zeros(0, dtype=np.int64)


def dataset_releases(session: Session, dataset_id: int, releases: Iterable[int] | None = None
                  ) -> dict[int, ReleaseInfo]:
    """The releases with predictions on the dataset (those of ``releases`` when given), by id."""
    q = (select(Release.id, Model.name, Release.version, Release.released_at)
         .join(Model, Model.id == Release.model_id)
         .where(select(Prediction.release_id).where(Prediction.dataset_id == dataset_id,
                                                    Prediction.release_id == Release.id).exists())
         .order_by(Release.id))
    infos = {int(r.id): ReleaseInfo(int(r.id), r.name, r.version, r.released_at) for r in session.execute(q)}
    wanted = list(infos) if releases is None else [int(r) for r in releases if int(r) in infos]
    return {rid: infos[rid] for rid in wanted}
