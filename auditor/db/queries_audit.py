"""The audit pipeline's SQL: claim a run, load a consistent snapshot, write results once.

A dataset is *stale* when its ``data_version`` is newer than its last succeeded audit.
At most one run per dataset is ``running``; a run still ``running`` after the audit's
hard time limit is known dead (Celery killed it, or its worker died) and the next
claim takes it over. Results are written in one transaction that first checks the run
is still owned by the writer, so a run taken over never writes twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from auditor.db import pgread
from auditor.db.models import (
    Agreement,
    Alert,
    Annotation,
    Annotator,
    AuditOutbox,
    AuditRun,
    AuditStatus,
    BestScore,
    Certification,
    Dataset,
    Item,
    Model,
    PowerCurve,
    Prediction,
    Release,
    VendorReport,
)
from auditor.db.session import WRITE_OPTIONS

__all__ = [
    "AuditSnapshot",
    "Claim",
    "Finished",
    "PreviousResults",
    "ReleaseSnapshot",
    "SnapshotCache",
    "alerts_by_id",
    "claim_audit",
    "fail_audit",
    "find_datasets",
    "finish_audit",
    "heartbeat_audit",
    "latest_run",
    "latest_runs",
    "load_snapshot",
    "run_results",
    "stale_datasets",
]


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(dt: datetime | None) -> datetime | None:
    # SQLite hands timezone-aware columns back naive; they were written in UTC.
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


# --------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class Claim:
    """Outcome of :func:`claim_audit`.

    ``state`` is ``"claimed"`` (``run_id`` is ours), ``"busy"`` (another live run),
    ``"current"`` (the last succeeded audit already covers ``data_version``),
    ``"abandoned"`` (its attempts kept dying) or ``"missing"`` (no such dataset).
    """

    state: str
    run_id: int | None = None
    data_version: int | None = None
    took_over: bool = False


def _begin_write(session: Session) -> None:
    # SQLite: BEGIN IMMEDIATE serialises writers; PostgreSQL: the row lock below does.
    if not session.in_transaction() or session.get_transaction().connections == {}:
        session.connection(execution_options=WRITE_OPTIONS)


def _lock_dataset(session: Session, dataset_id: int) -> Dataset | None:
    _begin_write(session)
    return session.execute(select(Dataset).where(Dataset.id == dataset_id).with_for_update()).scalar_one_or_none()


def _last_succeeded_version(session: Session, dataset_id: int) -> int | None:
    return session.execute(
        select(func.max(AuditRun.data_version)).where(
            AuditRun.dataset_id == dataset_id, AuditRun.status == AuditStatus.SUCCEEDED)
    ).scalar_one()


def claim_audit(session: Session, dataset_id: int, *, task_id: str, lease: timedelta,
                parameters: Mapping[str, Any] | None = None, max_attempts: int = 3) -> Claim:
    """Make ``task_id`` the one running audit of the dataset, if it needs one.

    A ``running`` run whose heartbeat (:func:`heartbeat_audit`, else its start) is older
    than ``lease`` is dead and is taken over: it keeps its id, so a dead attempt leaves
    no second row behind. A run whose
    attempts all died (``max_attempts``) is recorded as failed instead (state
    ``"abandoned"``): an audit that kills its worker every time must not loop.
    """
    dataset = _lock_dataset(session, dataset_id)
    if dataset is None:
        return Claim("missing")
    now = utcnow()
    running = session.execute(
        select(AuditRun).where(AuditRun.dataset_id == dataset_id, AuditRun.status == AuditStatus.RUNNING)
        .order_by(AuditRun.id.desc()).with_for_update()
    ).scalars().all()
    live = [r for r in running if r.task_id == task_id or _alive(r, now, lease)]
    if live and live[0].task_id != task_id:
        return Claim("busy", live[0].id, live[0].data_version)
    done = _last_succeeded_version(session, dataset_id)
    if done is not None and done >= dataset.data_version:
        _mark_outbox(session, dataset_id, done, now)
        for r in running:  # dead runs of versions already covered
            r.status, r.finished_at, r.error = AuditStatus.FAILED, now, "abandoned: worker lost"
        return Claim("current", None, done)
    params = dict(parameters or {})
    if running:
        run = running[0]
        for r in running[1:]:
            r.status, r.finished_at, r.error = AuditStatus.FAILED, now, "abandoned: worker lost"
        # Only a dead attempt leaves a run "running" for a claim to find (a lease that
        # expired, or its own message redelivered after its process died).
        took_over = True
        attempts = int((run.parameters or {}).get("attempts", 1)) + 1
        run.parameters = {**params, "attempts": attempts}
        if attempts > max_attempts:
            run.status, run.finished_at = AuditStatus.FAILED, now
            run.error = f"abandoned after {attempts - 1} attempts that did not finish (worker lost or killed)"
            session.flush()
            return Claim("abandoned", run.id, run.data_version)
        run.task_id, run.started_at, run.heartbeat_at, run.data_version = task_id, now, now, dataset.data_version
    else:
        took_over = False
        run = AuditRun(dataset_id=dataset_id, data_version=dataset.data_version, status=AuditStatus.RUNNING,
                       task_id=task_id, started_at=now, heartbeat_at=now, parameters={**params, "attempts": 1})
        session.add(run)
    session.flush()
    return Claim("claimed", run.id, dataset.data_version, took_over)


def _alive(run: Any, now: datetime, lease: timedelta) -> bool:
    beat = run.heartbeat_at or run.started_at
    return beat is not None and _aware(beat) > now - lease


def heartbeat_audit(session: Session, run_id: int, *, task_id: str) -> bool:
    """Renew the lease of run ``run_id`` while ``task_id`` still owns it; False once it does not
    (taken over, finished or failed), which tells the worker to stop beating."""
    _begin_write(session)
    res = session.execute(
        update(AuditRun).where(AuditRun.id == run_id, AuditRun.task_id == task_id,
                               AuditRun.status == AuditStatus.RUNNING)
        .values(heartbeat_at=utcnow())
    )
    return res.rowcount == 1


def fail_audit(session: Session, run_id: int, *, task_id: str, error: str, retryable: bool = True) -> bool:
    """Record the run as failed with ``error``, if ``task_id`` still owns it.

    ``retryable=False`` says the same data will fail the same way: the sweep then leaves
    this data version alone (a later version gets a new run).
    """
    _begin_write(session)
    res = session.execute(
        update(AuditRun).where(AuditRun.id == run_id, AuditRun.task_id == task_id,
                               AuditRun.status == AuditStatus.RUNNING)
        .values(status=AuditStatus.FAILED, error=error[:20_000], finished_at=utcnow(), retryable=retryable)
    )
    return res.rowcount == 1


def _mark_outbox(session: Session, dataset_id: int, version: int, now: datetime) -> None:
    session.execute(
        update(AuditOutbox).where(AuditOutbox.dataset_id == dataset_id, AuditOutbox.processed_at.is_(None),
                                  AuditOutbox.data_version <= version).values(processed_at=now)
    )


def stale_datasets(session: Session, *, lease: timedelta, retry_backoff: float,
                   max_backoff: float = 3600.0) -> list[int]:
    """Datasets whose data is newer than their last succeeded audit and that no live run covers.

    A dataset whose audits of its current version keep failing is retried after
    ``retry_backoff · 2^(failures − 1)`` seconds (at most ``max_backoff``).
    """
    now = utcnow()
    done = (select(AuditRun.dataset_id, func.max(AuditRun.data_version).label("v"))
            .where(AuditRun.status == AuditStatus.SUCCEEDED).group_by(AuditRun.dataset_id).subquery())
    rows = session.execute(
        select(Dataset.id, Dataset.data_version).outerjoin(done, done.c.dataset_id == Dataset.id)
        .where((done.c.v.is_(None) & (Dataset.data_version > 0)) | (done.c.v < Dataset.data_version))
        .order_by(Dataset.id)
    ).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    version = {r.id: r.data_version for r in rows}
    stale = {r.id for r in rows}
    runs = session.execute(
        select(AuditRun.dataset_id, AuditRun.status, AuditRun.data_version, AuditRun.started_at,
               AuditRun.heartbeat_at, AuditRun.finished_at, AuditRun.retryable)
        .join(Dataset, Dataset.id == AuditRun.dataset_id)
        .where((AuditRun.status == AuditStatus.RUNNING)
               | ((AuditRun.status == AuditStatus.FAILED) & (AuditRun.data_version == Dataset.data_version)))
    ).all()
    blocked: set[int] = set()
    failures: dict[int, list[datetime]] = {}
    for r in runs:
        if r.dataset_id not in stale:
            continue
        if r.status == AuditStatus.RUNNING and _alive(r, now, lease):
            blocked.add(r.dataset_id)
        elif r.status == AuditStatus.FAILED and r.retryable is False:
            blocked.add(r.dataset_id)  # the same data fails the same way: wait for new data
        elif r.status == AuditStatus.FAILED and r.data_version == version[r.dataset_id] and r.finished_at:
            failures.setdefault(r.dataset_id, []).append(_aware(r.finished_at))
    for ds, times in failures.items():
        wait = min(max_backoff, retry_backoff * 2 ** (len(times) - 1))
        if max(times) > now - timedelta(seconds=wait):
            blocked.add(ds)
    return [i for i in ids if i not in blocked]


# --------------------------------------------------------------------------- snapshot


@dataclass(frozen=True)
class ReleaseSnapshot:
    """One release's predictions, aligned with the snapshot's items by position."""

    release_id: int
    model: str
    version: str
    item_index: np.ndarray
    labels: np.ndarray
    probabilities: np.ndarray | None


@dataclass(frozen=True)
class PreviousResults:
    """What the last succeeded audit said, for alerts on changes."""

    run_id: int | None = None
    certifications: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    vendors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditSnapshot:
    """Everything an audit reads, as of one ``data_version``.

    ``counts`` is (N, L) from the per-item counts kept at ingestion, rows in the order
    of ``item_ids`` (database ids, which also name the items in the statistics);
    ``ann_*`` are positions into ``item_ids`` / ``annotator_ids`` and label codes.
    """

    dataset_id: int
    workspace_id: int
    name: str
    labels: tuple[str, ...]
    data_version: int
    item_ids: np.ndarray
    counts: np.ndarray
    gold: np.ndarray
    ann_item: np.ndarray
    ann_annotator: np.ndarray
    ann_label: np.ndarray
    annotator_ids: np.ndarray
    annotator_names: tuple[str, ...]
    annotator_vendors: tuple[str | None, ...]
    annotator_tiers: tuple[str, ...]
    releases: tuple[ReleaseSnapshot, ...]
    previous: PreviousResults

    @property
    def n_annotations(self) -> int:
        return int(self.ann_item.shape[0])


def _begin_snapshot(session: Session) -> None:
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        # One REPEATABLE READ transaction: every query below sees the same committed state.
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")


def _annotation_rows(session: Session, dataset_id: int, since: int = -1) -> np.ndarray:
    """(item id, annotator id, label) of the current annotations written after version ``since`` (SQLite)."""
    rows = session.execute(
        select(Annotation.item_id, Annotation.annotator_id, Annotation.label)
        .where(Annotation.dataset_id == dataset_id, Annotation.data_version > since)
    ).all()
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def _item_rows(session: Session, dataset_id: int, n_labels: int) -> np.ndarray:
    """(N, 2 + L): item id, gold code (-1 for none), then the label counts (SQLite)."""
    rows = session.execute(select(Item.id, Item.gold_label, Item.label_counts)
                           .where(Item.dataset_id == dataset_id).order_by(Item.id)).all()
    out = np.zeros((len(rows), 2 + n_labels), dtype=np.int64)
    for n, r in enumerate(rows):
        out[n, 0], out[n, 1] = r.id, -1 if r.gold_label is None else r.gold_label
        vec = (r.label_counts or [])[:n_labels]
        out[n, 2:2 + len(vec)] = vec
    return out


def _release_rows(session: Session, dataset_id: int, release_id: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Item ids, hard labels (the argmax where only probabilities were given), probabilities or None (SQLite)."""
    rows = session.execute(
        select(Prediction.item_id, Prediction.label, Prediction.probabilities)
        .where(Prediction.dataset_id == dataset_id, Prediction.release_id == release_id)
        .order_by(Prediction.item_id)).all()
    hard = np.array([(r.item_id, -1 if r.label is None else r.label) for r in rows], dtype=np.int64).reshape(-1, 2)
    soft = [r.probabilities for r in rows]
    probs = np.array(soft, dtype=float) if soft and all(p is not None for p in soft) else None
    return _hard_labels(hard[:, 0], hard[:, 1], probs)


def _hard_labels(items: np.ndarray, labels: np.ndarray, probs: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    labels = labels.copy()
    if probs is not None:
        missing = labels < 0
        labels[missing] = probs[missing].argmax(axis=1)
    return items, labels, probs


def _pg_release(parts: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A release's prediction blocks (item-id order) as item ids, hard labels, probabilities or None.

    Probabilities only when every row has them; elements a row lacks count as 0.
    """
    items, labels, probs, soft = (np.concatenate(col) for col in zip(*parts, strict=True))
    if len(soft) and soft.all():
        np.nan_to_num(probs, copy=False, nan=0.0)
    else:
        probs = None
    return _hard_labels(items, labels, probs)


def _pg_read(session: Session, dataset_id: int, n_labels: int, *, since: int | None,
             releases: list[int], items: bool = True) -> tuple[np.ndarray | None, np.ndarray, dict[int, tuple]]:
    """PostgreSQL: items (N, 2 + L), current annotation rows newer than ``since`` (all when None)
    and the given releases' predictions, in item-id blocks read by parallel connections
    that share this transaction's snapshot."""
    conn = session.connection()
    raw = pgread.raw_connection(conn)
    lo, hi, n_items = pgread.item_range(raw, dataset_id)
    item_blocks = pgread.id_blocks(lo, hi, max(pgread.READERS, -(-n_items // max(1, pgread.BLOCK_ROWS // 2))))
    jobs: list = []
    kinds: list[tuple] = []
    max_annotator = session.execute(select(func.coalesce(func.max(Annotator.id), 0))).scalar_one()
    where, params = ("AND data_version > %s", (since,)) if since is not None else ("", ())
    estimate = pgread.estimated_rows(raw, f"annotation WHERE dataset_id = %s {where}", (dataset_id, *params))
    for a, b in pgread.id_blocks(lo, hi, max(pgread.READERS, -(-estimate // pgread.BLOCK_ROWS))):
        jobs.append(partial(pgread.annotation_block, table="annotation", dataset_id=dataset_id, lo=a, hi=b,
                            max_annotator=max_annotator, where=where, params=params))
        kinds.append(("rows",))
    for a, b in item_blocks if items else []:
        jobs.append(partial(pgread.item_block, dataset_id=dataset_id, lo=a, hi=b, n_labels=n_labels, names=False))
        kinds.append(("items",))
    for rid in releases:
        for a, b in item_blocks:
            jobs.append(partial(pgread.prediction_block, dataset_id=dataset_id, release_id=rid, n_labels=n_labels,
                                lo=a, hi=b))
            kinds.append(("predictions", rid))
    results = pgread.read_parallel(session.get_bind(), conn, jobs)
    del jobs
    blocks = [r for k, r in zip(kinds, results, strict=True) if k[0] == "items"]
    table = np.zeros((sum(len(b["id"]) for b in blocks), 2 + n_labels), dtype=np.int64) if items else None
    at = 0
    for b in blocks:
        end = at + len(b["id"])
        table[at:end, 0], table[at:end, 1], table[at:end, 2:] = b["id"], b["gold"], b["counts"]
        at = end
    del blocks
    release_rows = {rid: _pg_release([r for k, r in zip(kinds, results, strict=True) if k == ("predictions", rid)])
                    for rid in releases}
    row_blocks = [r for k, r in zip(kinds, results, strict=True) if k[0] == "rows"]
    del results  # stack_rows releases each block once copied
    return table, pgread.stack_rows(row_blocks), release_rows


@dataclass
class _Cached:
    version: int
    annotations: np.ndarray  # (M, 3) item id, annotator id, label; sorted by (item, annotator)
    releases: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]]


class SnapshotCache:
    """The annotation and prediction rows of the last snapshot of a few datasets, in memory.

    Writes to a dataset are serialised by its row lock and tag every row with the
    ``data_version`` they create, so the next snapshot only reads rows newer than the
    cached version and merges them (a re-label replaces its (item, annotator) row).
    The merge is checked against the per-item counts and per-release row counts of the
    snapshot; on any mismatch the dataset is read in full.
    """

    def __init__(self, max_datasets: int = 4):
        self.max_datasets = max_datasets
        self._entries: dict[int, _Cached] = {}

    def get(self, dataset_id: int) -> _Cached | None:
        return self._entries.get(dataset_id)

    def put(self, dataset_id: int, entry: _Cached) -> None:
        self._entries.pop(dataset_id, None)
        self._entries[dataset_id] = entry
        while len(self._entries) > self.max_datasets:
            self._entries.pop(next(iter(self._entries)))


def _keys(rows: np.ndarray) -> np.ndarray:
    return (rows[:, 0] << 32) | rows[:, 1]


def _merge_annotations(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``old`` (sorted by key) with ``new`` merged in, sorted: a re-label replaces its row in
    place (``old`` is the cache's own array), other rows are inserted at their place."""
    if new.shape[0] == 0:
        return old
    new = new[np.argsort(_keys(new), kind="stable")]
    old_keys, new_keys = _keys(old), _keys(new)
    pos = np.searchsorted(old_keys, new_keys)
    hit = pos < old_keys.size
    hit[hit] = old_keys[pos[hit]] == new_keys[hit]
    del old_keys
    old[pos[hit]] = new[hit]
    if hit.all():
        return old
    return np.insert(old, pos[~hit], new[~hit], axis=0)


def _current_annotations(session: Session, dataset_id: int, counts: np.ndarray, index: pgread.IdIndex,
                         cached: _Cached | None, new_rows: np.ndarray) -> np.ndarray:
    """The current annotation rows sorted by (item, annotator): the cached rows merged with
    ``new_rows`` (those written since) when that agrees with the per-item counts, else all
    rows read again; without a cache, ``new_rows`` are all rows."""
    if cached is not None:
        rows = _merge_annotations(cached.annotations, new_rows)
        per_item = np.bincount(index(rows[:, 0]), minlength=index.ids.size) if rows.size else \
            np.zeros(index.ids.size, dtype=np.int64)
        if per_item.shape[0] == counts.shape[0] and np.array_equal(per_item, counts.sum(axis=1)):
            return rows
        if session.connection().dialect.name == "postgresql":
            new_rows = _pg_read(session, dataset_id, counts.shape[1], since=None, releases=[], items=False)[1]
        else:
            new_rows = _annotation_rows(session, dataset_id)
    rows = new_rows
    if rows.shape[0] > 1:
        keys = _keys(rows)
        ordered = bool((keys[1:] > keys[:-1]).all())  # blocks in item order, each in index order: usually
        if not ordered:
            rows = rows[np.argsort(keys, kind="stable")]
        del keys
    return rows


def _prediction_sizes(session: Session, dataset_id: int, since: int) -> tuple[dict[int, int], set[int]]:
    """Rows per release, and the releases with rows newer than ``since`` (one scan)."""
    rows = session.execute(select(Prediction.release_id, func.count(), func.max(Prediction.data_version))
                           .where(Prediction.dataset_id == dataset_id).group_by(Prediction.release_id)).all()
    return {r[0]: r[1] for r in rows}, {r[0] for r in rows if r[2] > since}


def load_snapshot(session: Session, dataset_id: int, *, cache: SnapshotCache | None = None) -> AuditSnapshot:
    """Read the dataset, its items, annotations, annotators and releases in one snapshot.

    Call first thing in a fresh transaction; the caller owns it (read-only). With a
    ``cache``, only rows written since the cached version are read. On PostgreSQL the
    reads go in item-id blocks on parallel connections that import this transaction's
    snapshot (:mod:`auditor.db.pgread`).
    """
    _begin_snapshot(session)
    ds = session.execute(select(Dataset).where(Dataset.id == dataset_id)).scalar_one()
    labels = tuple(ds.labels)
    n_labels = len(labels)
    cached = cache.get(dataset_id) if cache is not None else None
    if cached is not None and cached.version > ds.data_version:
        cached = None
    rel_rows = session.execute(
        select(Release.id, Release.version, Model.name).join(Model, Model.id == Release.model_id)
        .where(select(Prediction.release_id).where(Prediction.dataset_id == dataset_id,
                                                   Prediction.release_id == Release.id).exists())
        .order_by(Release.id)
    ).all()
    release_rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
    if cached is not None:
        sizes, changed = _prediction_sizes(session, dataset_id, cached.version)
        for rel in rel_rows:
            got = cached.releases.get(rel.id) if rel.id not in changed else None
            if got is not None and got[0].shape[0] == sizes.get(rel.id):
                release_rows[rel.id] = got
    to_read = [rel.id for rel in rel_rows if rel.id not in release_rows]
    since = cached.version if cached is not None else None
    if session.connection().dialect.name == "postgresql":
        items, new_rows, fresh = _pg_read(session, dataset_id, n_labels, since=since, releases=to_read)
    else:
        items = _item_rows(session, dataset_id, n_labels)
        new_rows = _annotation_rows(session, dataset_id, -1 if since is None else since)
        fresh = {rid: _release_rows(session, dataset_id, rid) for rid in to_read}
    release_rows.update(fresh)
    item_ids, gold, counts = items[:, 0], items[:, 1], items[:, 2:]
    index = pgread.IdIndex(item_ids)
    rows = _current_annotations(session, dataset_id, counts, index, cached, new_rows)
    del new_rows
    # Annotator ids are small integers: codes by a lookup table rather than by sorting.
    present = np.bincount(rows[:, 1]) > 0 if rows.size else np.zeros(0, dtype=bool)
    ann_ids = np.flatnonzero(present)
    annotators = {}
    if ann_ids.size:
        # The workspace's annotators in one query, kept where present: a list of ids in the
        # query would grow with the data and fails past PostgreSQL's 65,535 parameters.
        for a in session.execute(select(Annotator.id, Annotator.external_id, Annotator.vendor, Annotator.tier)
                                 .where(Annotator.workspace_id == ds.workspace_id)):
            if a.id < present.size and present[a.id]:
                annotators[a.id] = a
    releases = []
    for rel in rel_rows:
        pred_items, hard, probs = release_rows[rel.id]
        releases.append(ReleaseSnapshot(rel.id, rel.name, rel.version, index(pred_items), hard, probs))
    if cache is not None:
        cache.put(dataset_id, _Cached(int(ds.data_version), rows, release_rows))
    return AuditSnapshot(
        dataset_id=ds.id, workspace_id=ds.workspace_id, name=ds.name, labels=labels,
        data_version=int(ds.data_version), item_ids=item_ids, counts=counts, gold=gold,
        ann_item=index(rows[:, 0]),
        ann_annotator=(np.cumsum(present) - 1)[rows[:, 1]] if rows.size else np.zeros(0, dtype=np.int64),
        ann_label=rows[:, 2].astype(np.int64),
        annotator_ids=ann_ids,
        annotator_names=tuple(annotators[i].external_id for i in ann_ids.tolist()),
        annotator_vendors=tuple(annotators[i].vendor for i in ann_ids.tolist()),
        annotator_tiers=tuple(str(annotators[i].tier) for i in ann_ids.tolist()),
        releases=tuple(releases),
        previous=_previous(session, dataset_id),
    )


def _previous(session: Session, dataset_id: int) -> PreviousResults:
    run_id = session.execute(
        select(AuditRun.id).where(AuditRun.dataset_id == dataset_id, AuditRun.status == AuditStatus.SUCCEEDED)
        .order_by(AuditRun.data_version.desc(), AuditRun.id.desc()).limit(1)
    ).scalar_one_or_none()
    if run_id is None:
        return PreviousResults()
    certs = {c.release_id: {"certified": c.certified, "verdict": c.verdict, "l": c.l, "u_t": c.u_t,
                            "method": c.method, "anytime": (c.details or {}).get("anytime")}
             for c in session.execute(select(Certification).where(Certification.audit_run_id == run_id)).scalars()}
    vendors = {v.vendor: {"u_t": v.u_t, "u_e": v.u_e, "agreement": v.agreement}
               for v in session.execute(select(VendorReport).where(VendorReport.audit_run_id == run_id)).scalars()}
    return PreviousResults(run_id, certs, vendors)


# --------------------------------------------------------------------------- results


_RESULT_TABLES = {
    "certifications": Certification,
    "power_curves": PowerCurve,
    "vendor_reports": VendorReport,
    "best_scores": BestScore,
    "agreements": Agreement,
}


@dataclass(frozen=True)
class Finished:
    """Outcome of :func:`finish_audit`: whether we wrote, and the dataset's version now."""

    written: bool
    current_version: int
    alert_ids: tuple[int, ...] = ()


def finish_audit(session: Session, run_id: int, *, task_id: str, data_version: int,
                 results: Mapping[str, Iterable[Mapping[str, Any]]], summary: Mapping[str, Any],
                 alerts: Iterable[Mapping[str, Any]] = (), timings: Mapping[str, float] | None = None) -> Finished:
    """Write every result row of the run and mark it succeeded, in the caller's transaction.

    Nothing is written unless ``task_id`` still owns the running run (a run taken over
    after its lease expired is finished by its new owner only).
    """
    _begin_write(session)
    dataset_id = session.execute(select(AuditRun.dataset_id).where(AuditRun.id == run_id)).scalar_one()
    dataset = _lock_dataset(session, dataset_id)
    run = session.execute(select(AuditRun).where(AuditRun.id == run_id).with_for_update()).scalar_one()
    if run.status != AuditStatus.RUNNING or run.task_id != task_id:
        return Finished(False, int(dataset.data_version))
    now = utcnow()
    for key, model in _RESULT_TABLES.items():
        rows = [dict(r) for r in results.get(key, ())]
        if key != "certifications":
            for r in rows:
                r.pop("data_version", None)
        else:
            for r in rows:
                r["data_version"] = data_version
        session.add_all(model(audit_run_id=run_id, **r) for r in rows)
    new_alerts = [Alert(workspace_id=dataset.workspace_id, dataset_id=dataset.id, audit_run_id=run_id, **a)
                  for a in alerts]
    session.add_all(new_alerts)
    run.status, run.data_version, run.finished_at = AuditStatus.SUCCEEDED, data_version, now
    run.summary = {**summary, "timings": dict(timings or {})}
    run.error = None
    _mark_outbox(session, dataset.id, data_version, now)
    session.flush()
    return Finished(True, int(dataset.data_version), tuple(a.id for a in new_alerts))


def latest_runs(session: Session, dataset_ids: Iterable[int], *, status: AuditStatus = AuditStatus.SUCCEEDED
                ) -> dict[int, AuditRun]:
    """The latest run with ``status`` (by default the latest successful audit) of each
    dataset, by data version then id, in one query."""
    ids = list(dataset_ids)
    if not ids:
        return {}
    ranked = (select(AuditRun.id, func.row_number().over(
        partition_by=AuditRun.dataset_id, order_by=(AuditRun.data_version.desc(), AuditRun.id.desc())).label("rn"))
        .where(AuditRun.dataset_id.in_(ids), AuditRun.status == status).subquery())
    runs = session.scalars(select(AuditRun).join(ranked, ranked.c.id == AuditRun.id).where(ranked.c.rn == 1))
    return {r.dataset_id: r for r in runs}


def latest_run(session: Session, dataset_id: int, *, status: AuditStatus | None = AuditStatus.SUCCEEDED
               ) -> AuditRun | None:
    """The dataset's latest run with ``status`` (as :func:`latest_runs`), or with
    ``status=None`` its most recent run of any state."""
    if status is not None:
        return latest_runs(session, [dataset_id], status=status).get(dataset_id)
    return session.execute(select(AuditRun).where(AuditRun.dataset_id == dataset_id)
                           .order_by(AuditRun.id.desc()).limit(1)).scalar_one_or_none()


def run_results(session: Session, run_id: int) -> dict[str, Any]:
    """All result rows of one run as plain dictionaries (columns by name)."""
    def rows(model) -> list[dict[str, Any]]:
        cols = [c.key for c in model.__table__.columns if c.key not in ("audit_run_id", "created_at")]
        return [{c: getattr(obj, c) for c in cols}
                for obj in session.execute(select(model).where(model.audit_run_id == run_id)
                                           .order_by(model.id)).scalars()]

    out = {key: rows(model) for key, model in _RESULT_TABLES.items()}
    out["alerts"] = rows(Alert)
    releases = {r.id: (r.name, r.version) for r in session.execute(
        select(Release.id, Release.version, Model.name).join(Model, Model.id == Release.model_id)
        .where(Release.id.in_([c["release_id"] for c in out["certifications"]])))}
    for c in out["certifications"] + out["power_curves"]:
        if c.get("release_id") in releases:
            c["model"], c["version"] = releases[c["release_id"]]
    return out


def alerts_by_id(session: Session, ids: Iterable[int]) -> list[dict[str, Any]]:
    """Alerts as JSON-ready dictionaries, with their dataset's name."""
    rows = session.execute(
        select(Alert, Dataset.name).join(Dataset, Dataset.id == Alert.dataset_id, isouter=True)
        .where(Alert.id.in_(list(ids))).order_by(Alert.id)
    ).all()
    return [{"id": a.id, "dataset_id": a.dataset_id, "dataset": name, "audit_run_id": a.audit_run_id,
             "kind": a.kind, "severity": str(a.severity), "subject": a.subject, "message": a.message,
             "details": a.details, "created_at": a.created_at.isoformat() if a.created_at else None}
            for a, name in rows]


def find_datasets(session: Session, name: str, *, workspace: str | None = None) -> list[tuple[int, str, int]]:
    """Datasets called ``name`` (in the workspace with slug ``workspace``): (id, workspace slug, data_version)."""
    from auditor.db.models import Workspace

    q = (select(Dataset.id, Workspace.slug, Dataset.data_version).join(Workspace, Workspace.id == Dataset.workspace_id)
         .where(Dataset.name == name))
    if workspace is not None:
        q = q.where(Workspace.slug == workspace)
    return [tuple(r) for r in session.execute(q.order_by(Dataset.id))]
