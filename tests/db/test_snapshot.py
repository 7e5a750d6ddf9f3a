"""Snapshot loading: block-wise reads give the same arrays; bad ids and versions are refused."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

import auditor.db.pgread as pgread
from auditor.db import SnapshotError, load_snapshot, make_session_factory, session_scope
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
