"""Snapshot loading: block-wise reads give the same arrays; bad ids and versions are refused."""

from __future__ import annotations

import threading
import uuid

import numpy as np
import pytest
from sqlalchemy import select

import auditor.db.pgread as pgread
from auditor.audit.snapshot import SnapshotError, load_snapshot
from auditor.db import make_session_factory, session_scope
from auditor.ingest import create_dataset, import_annotations, import_gold

ROWS = "".join(f"item-{i},w{(i * 3 + k) % 7},{'xyz'[(i * k) % 3]}\n" for i in range(40) for k in range(3))


def _load(engine):
    factory = make_session_factory(engine)
    with session_scope(factory) as s:
        ds = create_dataset(s, "snap", ["x", "y", "z"], workspace=f"snap-{uuid.uuid4().hex[:8]}")
        dataset_id, workspace = ds.id, ds.workspace.slug
    with session_scope(factory) as s:
        import_annotations(s, "snap", ("item_id,annotator_id,label\n" + ROWS).encode(), workspace=workspace)
    with session_scope(factory) as s:
        import_gold(s, "snap", b"item_id,label\nitem-3,z\nitem-39,x\n", workspace=workspace)
    return dataset_id


def test_blockwise_reads_equal_a_single_read(db_engine, monkeypatch):
    dataset_id = _load(db_engine)
    whole = load_snapshot(db_engine, dataset_id, annotations=True)
    monkeypatch.setattr(pgread, "BLOCK_ROWS", 7)
    blocks = load_snapshot(db_engine, dataset_id, annotations=True)
    assert blocks.items == whole.items and len(whole.items) == 40
    np.testing.assert_array_equal(blocks.counts.counts, whole.counts.counts)
    np.testing.assert_array_equal(blocks.gold, whole.gold)
    np.testing.assert_array_equal(blocks.annotations.matrix(), whole.annotations.matrix())
    assert whole.counts.counts.sum() == 120 and (whole.counts.counts.sum(axis=1) == 3).all()
    assert whole.gold[whole.items.index("item-3")] == 2 and (whole.gold >= 0).sum() == 2


def test_unknown_dataset_and_future_version_are_refused(db_engine):
    dataset_id = _load(db_engine)
    with pytest.raises(SnapshotError, match="no dataset"):
        load_snapshot(db_engine, 10**9)
    with pytest.raises(SnapshotError, match="does not exist"):
        load_snapshot(db_engine, dataset_id, data_version=99)
    empty = load_snapshot(db_engine, dataset_id, data_version=0)
    assert empty.counts.counts.sum() == 0 and empty.data_version == 0


def _expected_states(base: dict, batches: list[tuple[int, dict]]) -> dict[int, dict]:
    """(item, annotator) → label at each data_version, replaying the batches in version order."""
    states = {1: dict(base)}
    state = dict(base)
    for version, rows in sorted(batches):
        state = {**state, **rows}
        states[version] = state
    return states


def test_snapshots_taken_while_imports_commit_equal_their_version(db_engine, monkeypatch):
    """Both loaders, read in many small blocks (on parallel connections on PostgreSQL) while
    another thread keeps importing, give exactly the rows and counts of one data_version."""
    from auditor.audit.snapshot import load_audit_snapshot as worker_snapshot
    from auditor.db import Annotator, Item, session_scope

    monkeypatch.setattr(pgread, "BLOCK_ROWS", 8)
    factory = make_session_factory(db_engine)
    workspace = f"snap-{uuid.uuid4().hex[:8]}"
    with session_scope(factory) as s:
        dataset_id = create_dataset(s, "snap", ["x", "y", "z"], workspace=workspace).id
    base = {(f"item-{i}", f"w{(i * 3 + k) % 7}"): "xyz"[(i * k) % 3] for i in range(40) for k in range(3)}
    with session_scope(factory) as s:
        import_annotations(s, "snap", ("item_id,annotator_id,label\n" + ROWS).encode(), workspace=workspace)
    batches: list[tuple[int, dict]] = []

    def write() -> None:
        for b in range(6):
            # New labels from a new annotator, and re-labels of rows already there.
            rows = {(f"item-{i}", f"late{b}"): "xyz"[(i + b) % 3] for i in range(b, 40, 3)}
            rows |= {(f"item-{i}", f"w{(i * 3) % 7}"): "xyz"[(b + 1) % 3] for i in range(b * 5, b * 5 + 6)}
            body = "item_id,annotator_id,label\n" + "".join(f"{i},{a},{lab}\n" for (i, a), lab in rows.items())
            with session_scope(factory) as s:
                result = import_annotations(s, "snap", body.encode(), workspace=workspace)
            batches.append((result.data_version, rows))

    writer = threading.Thread(target=write)
    writer.start()
    taken, by_worker = [], []
    while writer.is_alive() or len(taken) < 2:
        snap = load_snapshot(db_engine, dataset_id, annotations=True)
        a = snap.annotations
        taken.append((snap.data_version, snap.counts.counts.copy(), snap.items, {
            (a.items[i], a.annotators[n]): snap.labels[c] for i, n, c in zip(a.item, a.annotator, a.label, strict=True)}))
        np.testing.assert_array_equal(snap.counts.counts, a.counts().counts)
        with factory() as s, s.begin():
            w = worker_snapshot(s, dataset_id)
        by_worker.append(w)
    writer.join()
    states = _expected_states({k: v for k, v in base.items()}, batches)
    assert sorted(states) == list(range(1, 8))

    def counts_of(state: dict, items: tuple) -> np.ndarray:
        out = np.zeros((len(items), 3), dtype=np.int64)
        pos = {name: n for n, name in enumerate(items)}
        for (item, _), label in state.items():
            out[pos[item], "xyz".index(label)] += 1
        return out

    for version, counts, items, table in taken:
        assert table == states[version]
        np.testing.assert_array_equal(counts, counts_of(states[version], items))
    with session_scope(factory) as s:
        item_name = dict(s.execute(select(Item.id, Item.external_id).where(Item.dataset_id == dataset_id)).all())
        annotator_name = dict(s.execute(select(Annotator.id, Annotator.external_id)).all())
    for w in by_worker:
        items = tuple(item_name[int(i)] for i in w.item_ids)
        table = {(items[i], annotator_name[int(w.annotator_ids[n])]): "xyz"[c]
                 for i, n, c in zip(w.ann_item, w.ann_annotator, w.ann_label, strict=True)}
        assert table == states[w.data_version]
        np.testing.assert_array_equal(w.counts, counts_of(states[w.data_version], items))
    # And afterwards, every earlier version as of its data_version.
    for version, state in states.items():
        snap = load_snapshot(db_engine, dataset_id, annotations=True, data_version=version)
        a = snap.annotations
        assert {(a.items[i], a.annotators[n]): snap.labels[c]
                for i, n, c in zip(a.item, a.annotator, a.label, strict=True)} == state
        np.testing.assert_array_equal(snap.counts.counts, counts_of(state, snap.items))


def test_rows_sent_unpacked_equal_rows_sent_packed(db_engine, monkeypatch):
    """When the bit fields cannot hold the ids, the rows travel as three columns: same snapshot."""
    dataset_id = _load(db_engine)
    packed = load_snapshot(db_engine, dataset_id, annotations=True)
    monkeypatch.setattr(pgread, "_LABEL_BITS", 62)
    unpacked = load_snapshot(db_engine, dataset_id, annotations=True)
    np.testing.assert_array_equal(unpacked.annotations.matrix(), packed.annotations.matrix())
    np.testing.assert_array_equal(unpacked.counts.counts, packed.counts.counts)


def test_id_index_dense_and_sparse():
    dense = pgread.IdIndex(np.arange(100, 200, dtype=np.int64))
    sparse = pgread.IdIndex(np.array([3, 10**9, 10**12], dtype=np.int64))
    np.testing.assert_array_equal(dense(np.array([150, 100, 199])), [50, 0, 99])
    np.testing.assert_array_equal(sparse(np.array([10**12, 3])), [2, 0])
    out = np.empty(2, dtype=np.int64)
    dense(np.array([101, 102]), out=out)
    np.testing.assert_array_equal(out, [1, 2])
    for index, bad in ((dense, 99), (dense, 200), (sparse, 4), (sparse, 10**13)):
        with pytest.raises(RuntimeError):
            index(np.array([bad]))
    holes = pgread.IdIndex(np.array([1, 3, 5], dtype=np.int64))
    with pytest.raises(RuntimeError):
        holes(np.array([2]))


def test_the_public_snapshot_keeps_its_old_address():
    """``auditor.db.load_snapshot`` (documented before the audit's storage moved to
    :mod:`auditor.audit`) is the same function, loaded on first use."""
    import auditor.db
    from auditor.audit import snapshot

    assert auditor.db.load_snapshot is snapshot.load_snapshot
    assert auditor.db.Snapshot is snapshot.Snapshot
    assert auditor.db.SnapshotError is snapshot.SnapshotError
    with pytest.raises(AttributeError):
        auditor.db.no_such_name  # noqa: B018
