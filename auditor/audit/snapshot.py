"""The audit's storage, read side: one dataset at one ``data_version`` as the statistics
take it, built on the low-level reader :mod:`auditor.db.reader`. Two entry points:

* :func:`load_audit_snapshot` — what an audit reads (:class:`AuditSnapshot`): the current
  version, with an incremental :class:`SnapshotCache` (only rows written since the
  cached version are read) and the previous audit's results (for alerts);
* :func:`load_snapshot` — the public reader (:class:`Snapshot`): counts only or
  annotations too, any past ``data_version`` (rebuilt from the history table), a chosen
  set of releases, external item ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.orm import Session

from auditor.audit.inputs import AuditSnapshot, PreviousResults, ReleaseSnapshot
from auditor.db import pgread
from auditor.db.models import (
    AuditRun,
    AuditStatus,
    Certification,
    Dataset,
    Prediction,
    VendorReport,
)
from auditor.db.reader import (
    RawRelease,
    ReleaseInfo,
    SnapshotError,
    annotator_codes,
    annotator_lookup,
    annotators_by_id,
    begin_snapshot,
    check_labels,
    dataset_releases,
    read_dataset,
)
from auditor.lru import LRU

if TYPE_CHECKING:
    from auditor.stats import Annotations, LabelCounts

__all__ = [
    "AuditSnapshot",
    "PreviousResults",
    "ReleaseInfo",
    "ReleasePredictions",
    "ReleaseSnapshot",
    "Snapshot",
    "SnapshotCache",
    "SnapshotError",
    "load_audit_snapshot",
    "load_snapshot",
]


# --------------------------------------------------------------------------- the public types


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


# --------------------------------------------------------------------------- the audit's snapshot


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
        self._entries = LRU(max_datasets)

    def get(self, dataset_id: int) -> _Cached | None:
        return self._entries.get(dataset_id)

    def put(self, dataset_id: int, entry: _Cached) -> None:
        self._entries.put(dataset_id, entry)


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


def _sorted_rows(rows: np.ndarray) -> np.ndarray:
    if rows.shape[0] > 1:
        keys = _keys(rows)
        if not bool((keys[1:] > keys[:-1]).all()):  # blocks in item order, each in index order: usually sorted
            rows = rows[np.argsort(keys, kind="stable")]
    return rows


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
        new_rows = read_dataset(session, dataset_id, counts.shape[1], rows=True, items=False).rows
    return _sorted_rows(new_rows)


def _prediction_sizes(session: Session, dataset_id: int, since: int) -> tuple[dict[int, int], set[int]]:
    """Rows per release, and the releases with rows newer than ``since`` (one scan)."""
    rows = session.execute(select(Prediction.release_id, func.count(), func.max(Prediction.data_version))
                           .where(Prediction.dataset_id == dataset_id).group_by(Prediction.release_id)).all()
    return {r[0]: r[1] for r in rows}, {r[0] for r in rows if r[2] > since}


def _audit_release(raw: RawRelease) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A release as the audit takes it: item ids, hard labels (the argmax where only
    probabilities were given), probabilities only when every row has them (elements a row
    lacks count as 0), else None."""
    items, labels, probs, soft = raw
    if len(soft) and soft.all():
        probs = np.nan_to_num(probs, nan=0.0)
        labels = labels.copy()
        missing = labels < 0
        labels[missing] = probs[missing].argmax(axis=1)
    else:
        probs = None
    return items, labels, probs


def load_audit_snapshot(session: Session, dataset_id: int, *, cache: SnapshotCache | None = None) -> AuditSnapshot:
    """Read the dataset, its items, annotations, annotators and releases in one snapshot.

    Call first thing in a fresh transaction; the caller owns it (read-only). With a
    ``cache``, only rows written since the cached version are read.
    """
    begin_snapshot(session)
    ds = session.execute(select(Dataset).where(Dataset.id == dataset_id)).scalar_one()
    labels = tuple(ds.labels)
    cached = cache.get(dataset_id) if cache is not None else None
    if cached is not None and cached.version > ds.data_version:
        cached = None
    infos = dataset_releases(session, dataset_id)
    release_rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
    if cached is not None:
        sizes, changed = _prediction_sizes(session, dataset_id, cached.version)
        for rid in infos:
            got = cached.releases.get(rid) if rid not in changed else None
            if got is not None and got[0].shape[0] == sizes.get(rid):
                release_rows[rid] = got
    read = read_dataset(session, dataset_id, len(labels), rows=True, since=cached.version if cached is not None else None,
                 releases=[rid for rid in infos if rid not in release_rows])
    release_rows.update({rid: _audit_release(raw) for rid, raw in read.releases.items()})
    item_ids, gold, counts = read.items[:, 0], read.items[:, 1], read.items[:, 2:]
    index = pgread.IdIndex(item_ids)
    rows = _current_annotations(session, dataset_id, counts, index, cached, read.rows)
    del read
    ann_ids, ann_codes = annotator_codes(rows)
    annotators = annotators_by_id(session, ds.workspace_id, ann_ids)
    releases = []
    for rid, info in infos.items():
        pred_items, hard, probs = release_rows[rid]
        releases.append(ReleaseSnapshot(rid, info.model, info.version, index(pred_items), hard, probs))
    if cache is not None:
        cache.put(dataset_id, _Cached(int(ds.data_version), rows, release_rows))
    return AuditSnapshot(
        dataset_id=ds.id, workspace_id=ds.workspace_id, name=ds.name, labels=labels,
        data_version=int(ds.data_version), item_ids=item_ids, counts=counts, gold=gold,
        ann_item=index(rows[:, 0]), ann_annotator=ann_codes, ann_label=rows[:, 2].astype(np.int64),
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


# --------------------------------------------------------------------------- the public snapshot

#: Rows transformed at once by the public loader (bounds its temporaries).
_CHUNK = 1 << 22



@contextmanager
def _reading(bind: Engine | Connection) -> Iterator[Session]:
    """A session on the caller's connection (its transaction), or a read-only snapshot
    transaction of its own on an engine."""
    if isinstance(bind, Connection):
        with Session(bind=bind) as session:
            yield session
        return
    with Session(bind) as session:
        begin_snapshot(session)
        try:
            yield session
        finally:
            session.rollback()


def _aligned_predictions(index: pgread.IdIndex, n_labels: int, raw: RawRelease
                         ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """One release as per-item arrays: hard label or -1, probabilities (NaN where none;
    None when no row has any), has a prediction."""
    n = len(index.ids)
    p_items, p_hard, p_probs, p_soft = raw
    idx = index(p_items)
    hard = np.full(n, -1, dtype=np.int64)
    hard[idx] = p_hard
    has = np.zeros(n, dtype=bool)
    has[idx] = True
    probs = None
    if p_soft.any():
        probs = np.full((n, n_labels), np.nan)
        probs[idx[p_soft]] = p_probs[p_soft]
    return hard, probs, has


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

    with _reading(bind) as session:
        ds = session.execute(select(Dataset.name, Dataset.labels, Dataset.data_version, Dataset.workspace_id)
                             .where(Dataset.id == dataset_id)).one_or_none()
        if ds is None:
            raise SnapshotError(f"no dataset with id {dataset_id}")
        labels = tuple(ds.labels)
        n_labels = len(labels)
        if data_version is not None and not 0 <= data_version <= ds.data_version:
            raise SnapshotError(f"dataset {ds.name!r} is at data_version {ds.data_version}; {data_version} "
                                f"does not exist")
        as_of = data_version is not None and data_version < ds.data_version
        version = int(ds.data_version if data_version is None else data_version)
        infos = dataset_releases(session, dataset_id, releases)
        with_rows = annotations or as_of
        # With the rows at hand the counts follow from them (one pass, no per-item counts read).
        read = read_dataset(session, int(dataset_id), n_labels, rows=with_rows, as_of=version if as_of else None,
                     releases=list(infos), names=True, counts=not with_rows)
        item_ids, gold, counts = read.items[:, 0], read.items[:, 1], read.items[:, 2:]
        items, releases_read = read.names, read.releases
        index = pgread.IdIndex(item_ids)
        ann = ann_ids = None
        vendors: tuple[str | None, ...] = ()
        tiers: tuple[str, ...] = ()
        if read.rows is not None:
            rows = read.rows  # column-major: each column is contiguous, transformed in place below
            del read
            ann_ids, lookup = annotator_lookup(rows) if annotations else (None, None)
            flat = np.zeros(len(item_ids) * n_labels, dtype=np.int64)
            for at in range(0, rows.shape[0], _CHUNK):  # bounded temporaries
                part = rows[at:at + _CHUNK]
                part[:, 0] = index(part[:, 0])
                check_labels(part[:, 2], n_labels)
                flat += np.bincount(part[:, 0] * n_labels + part[:, 2], minlength=flat.size)
                if lookup is not None:
                    part[:, 1] = lookup[part[:, 1]]
            counts = flat.reshape(-1, n_labels)
            if annotations:
                meta = annotators_by_id(session, ds.workspace_id, ann_ids)
                vendors = tuple(meta[i].vendor for i in ann_ids.tolist())
                tiers = tuple(str(meta[i].tier) for i in ann_ids.tolist())
                ann = Annotations(rows[:, 0], rows[:, 1], rows[:, 2], items,
                                  tuple(meta[i].external_id for i in ann_ids.tolist()), labels)
            del rows
        predictions = {rid: ReleasePredictions(infos[rid], *_aligned_predictions(index, n_labels, raw))
                       for rid, raw in releases_read.items()}
    return Snapshot(
        dataset_id=dataset_id, dataset=ds.name, data_version=version, labels=labels, item_ids=item_ids, items=items,
        counts=LabelCounts(np.ascontiguousarray(counts, dtype=np.int64), labels, items), gold=gold,
        annotations=ann, annotator_ids=ann_ids, annotator_vendor=vendors, annotator_tier=tiers,
        predictions=predictions,
    )
