"""Ingestion use cases on SQLite and PostgreSQL: all-or-nothing, idempotent, history, concurrency."""

from __future__ import annotations

import gzip
import json
import threading

import numpy as np
import pytest
from sqlalchemy import select, text

from auditor.audit.snapshot import load_snapshot
from auditor.db import (
    Annotation,
    AnnotationHistory,
    AuditOutbox,
    Dataset,
    ImportBatch,
    Item,
    session_scope,
)
from auditor.ingest import (
    ImportRejected,
    IngestError,
    delete_dataset,
    get_dataset,
    import_annotations,
    import_gold,
    import_predictions,
)
from auditor.stats import counts_from_records
from tests.ingest.conftest import fingerprint

LONG = b"item_id,annotator_id,label\ni1,w1,a\ni1,w2,b\ni2,w1,c\ni2,w2,c\ni3,w3,a\n"


def _dataset_id(factory, workspace, name) -> int:
    with session_scope(factory) as s:
        return get_dataset(s, name, workspace=workspace).id


def _import(factory, kind, workspace, name, data, **kw):
    fn = {"annotations": import_annotations, "predictions": import_predictions, "gold": import_gold}[kind]
    with session_scope(factory) as s:
        return fn(s, name, data, workspace=workspace, **kw)


def test_import_then_snapshot_gives_the_file_counts(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    result = _import(factory, "annotations", ws, name, LONG)
    assert (result.status, result.inserted, result.new_items, result.new_annotators) == ("imported", 5, 3, 3)
    snap = load_snapshot(db_engine, _dataset_id(factory, ws, name), annotations=True)
    expected = counts_from_records([r.split(",") for r in LONG.decode().split("\n")[1:-1]], labels=["a", "b", "c"])
    order = [snap.items.index(i) for i in expected.items]
    np.testing.assert_array_equal(snap.counts.counts[order], expected.counts)
    # Invariant: the per-item counts kept at ingestion equal the counts of the rows.
    np.testing.assert_array_equal(snap.counts.counts, snap.annotations.counts().counts)
    assert snap.data_version == result.data_version == 1


BAD_BATCHES = {
    "unknown label": ("annotations", "csv", b"item_id,annotator_id,label\ni1,w1,a\ni2,w1,zebra\n", (2, "label")),
    "duplicate pair": ("annotations", "csv", b"item_id,annotator_id,label\ni1,w1,a\ni2,w1,b\ni1,w1,b\n",
                       (3, "annotator_id")),
    "duplicate pair on an existing item": ("annotations", "csv", b"item_id,annotator_id,label\ni0,w1,a\ni0,w1,a\n",
                                           (2, "annotator_id")),
    "too many columns": ("annotations", "csv", b"item_id,annotator_id,label\ni1,w1,a\ni2,w1,b,extra\n", (2, None)),
    "too few columns": ("annotations", "csv", b"item_id,annotator_id,label\ni1,w1,a\ni2,w1\n", (2, None)),
    "bad encoding": ("annotations", "csv", b"item_id,annotator_id,label\ni1,w1,a\ni\xff2,w1,b\n", (2, None)),
    "missing label": ("annotations", "csv", b"item_id,annotator_id,label\ni1,w1,a\ni2,w1,\n", (2, "label")),
    "bad tier": ("annotations", "csv", b"item_id,annotator_id,label,tier\ni1,w1,a,guru\n", (1, "tier")),
    "bad timestamp": ("annotations", "csv", b"item_id,annotator_id,label,timestamp\ni1,w1,a,yesterday\n",
                      (1, "timestamp")),
    "jsonl unknown label": ("annotations", "jsonl",
                            b'{"item_id": "i1", "annotator_id": "w1", "label": "a"}\n'
                            b'{"item_id": "i1", "annotator_id": "w2", "label": "d"}\n', (2, "label")),
    "jsonl duplicate pair": ("annotations", "jsonl",
                             b'{"item_id": "i1", "annotator_id": "w1", "label": "a"}\n'
                             b'{"item_id": "i1", "annotator_id": "w1", "label": "a"}\n', (2, "annotator_id")),
    "jsonl bad json": ("annotations", "jsonl", b'{"item_id": "i1", "annotator_id": "w1", "label": "a"}\n{"item_id"\n',
                       (2, None)),
    "wide unknown label": ("annotations", "wide", b"item,w1,w2\ni1,a,b\ni2,,q\n", (2, "label")),
    "NaN probability": ("predictions", "jsonl", b'{"item_id": "i1", "probabilities": [0.5, 0.5, 0]}\n'
                                                b'{"item_id": "i2", "probabilities": [NaN, 0.5, 0.5]}\n',
                        (2, "probabilities[a]")),
    "negative probability": ("predictions", "csv", b"item_id,a,b,c\ni1,0.5,0.5,0\ni2,-0.1,0.6,0.5\n",
                             (2, "probabilities[a]")),
    "probabilities not summing to 1": ("predictions", "csv", b"item_id,a,b,c\ni1,0.5,0.5,0\ni2,0.3,0.3,0.3\n",
                                       (2, "probabilities")),
    "wrong number of probabilities": ("predictions", "jsonl", b'{"item_id": "i1", "probabilities": [0.5, 0.5]}\n',
                                      (1, "probabilities")),
    "prediction unknown label": ("predictions", "csv", b"item_id,label\ni1,a\ni2,nope\n", (2, "label")),
    "duplicate prediction": ("predictions", "csv", b"item_id,label\ni1,a\ni1,b\n", (2, "item_id")),
    "conflicting gold": ("gold", "csv", b"item_id,label\ni1,a\ni1,b\n", (2, "label")),
    "gold unknown label": ("gold", "csv", b"item_id,label\ni1,x\n", (1, "label")),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_every_rejection_names_row_and_field_and_writes_nothing(case, db_engine, factory, new_dataset):
    kind, fmt, data, (row, field) = BAD_BATCHES[case]
    ws, name = new_dataset()
    _import(factory, "annotations", ws, name, b"item_id,annotator_id,label\ni0,w0,a\n")
    before = fingerprint(db_engine)
    extra = {"model": "m", "release": "r1"} if kind == "predictions" else {}
    with pytest.raises(ImportRejected) as info:
        _import(factory, kind, ws, name, data, format=fmt, **extra)
    first = info.value.errors[0]
    assert (first.row, first.field) == (row, field), str(info.value)
    assert first.reason and "nothing was written" in str(info.value)
    assert fingerprint(db_engine) == before


def test_rejection_inside_a_caller_transaction_that_commits_still_writes_nothing(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    before = fingerprint(db_engine)
    with session_scope(factory) as s:  # the caller swallows the error and commits
        with pytest.raises(ImportRejected):
            import_annotations(s, name, b"item_id,annotator_id,label\ni1,w1,a\ni1,w1,b\n", workspace=ws)
    assert fingerprint(db_engine) == before


def test_unknown_dataset_is_rejected_and_writes_nothing(db_engine, factory, new_dataset):
    ws, _ = new_dataset()
    before = fingerprint(db_engine)
    with pytest.raises(IngestError, match="unknown dataset 'nope'"):
        _import(factory, "annotations", ws, "nope", LONG)
    assert fingerprint(db_engine) == before


def test_reimport_is_a_noop_by_content_and_by_key(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    first = _import(factory, "annotations", ws, name, LONG, idempotency_key="k1")
    state = fingerprint(db_engine)
    again = _import(factory, "annotations", ws, name, LONG)
    assert again.status == "duplicate" and again.batch_id == first.batch_id
    assert "nothing changed" in again.message
    by_key = _import(factory, "annotations", ws, name, LONG, idempotency_key="k1")
    assert by_key.status == "duplicate"
    # Same rows in another order (another checksum): the natural key makes it a no-op too.
    lines = LONG.split(b"\n")
    shuffled = b"\n".join([lines[0], *reversed(lines[1:-1])]) + b"\n"
    same_rows = _import(factory, "annotations", ws, name, shuffled)
    assert same_rows.status == "unchanged" and same_rows.unchanged == 5
    assert fingerprint(db_engine) == state
    with pytest.raises(IngestError, match="already used for a different batch"):
        _import(factory, "annotations", ws, name, shuffled, idempotency_key="k1")


def test_relabel_supersedes_and_keeps_history(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    v1 = _import(factory, "annotations", ws, name, LONG).data_version
    relabel = _import(factory, "annotations", ws, name,
                      b"item_id,annotator_id,label,timestamp\ni1,w1,c,2024-05-01T10:00:00Z\ni4,w1,b,\n")
    assert (relabel.inserted, relabel.updated, relabel.new_items) == (1, 1, 1)
    d = _dataset_id(factory, ws, name)
    with session_scope(factory) as s:
        item = s.scalar(select(Item).where(Item.dataset_id == d, Item.external_id == "i1"))
        current = s.scalars(select(Annotation).where(Annotation.item_id == item.id)).all()
        history = s.scalars(select(AnnotationHistory).where(AnnotationHistory.item_id == item.id)).all()
        assert sorted(a.label for a in current) == [1, 2]  # w2:b, w1:c
        assert [(h.label, h.superseded_version) for h in history] == [(0, relabel.data_version)]
        assert item.label_counts == [0, 1, 1]
        outbox = s.scalars(select(AuditOutbox).where(AuditOutbox.dataset_id == d).order_by(AuditOutbox.id)).all()
        assert [o.data_version for o in outbox] == [v1, relabel.data_version]
    now = load_snapshot(db_engine, d, annotations=True)
    then = load_snapshot(db_engine, d, annotations=True, data_version=v1)
    i1 = now.items.index("i1")
    assert now.counts.counts[i1].tolist() == [0, 1, 1]
    assert then.counts.counts[i1].tolist() == [1, 1, 0]
    np.testing.assert_array_equal(now.counts.counts, now.annotations.counts().counts)
    assert then.data_version == v1 and now.data_version == relabel.data_version


def test_vendor_and_tier_are_kept_and_conflicts_rejected(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    _import(factory, "annotations", ws, name,
            b"item_id,annotator_id,label,vendor,tier\ni1,w1,a,acme,crowd\ni1,e1,b,,expert\ni2,w2,c,acme,\n")
    snap = load_snapshot(db_engine, _dataset_id(factory, ws, name), annotations=True)
    assert snap.vendors() == ("acme",)
    assert sorted(snap.vendor_annotations("acme").annotators) == ["w1", "w2"]
    assert snap.vendor_annotations(tier="expert").annotators == ("e1",)
    before = fingerprint(db_engine)
    with pytest.raises(ImportRejected, match="registered with vendor 'acme'"):
        _import(factory, "annotations", ws, name, b"item_id,annotator_id,label,vendor\ni3,w1,a,other\n")
    with pytest.raises(ImportRejected, match="is given both"):
        _import(factory, "annotations", ws, name, b"item_id,annotator_id,label,vendor\ni3,w9,a,x\ni4,w9,a,y\n")
    assert fingerprint(db_engine) == before


def test_wide_jsonl_gzip_and_label_studio_formats(db_engine, factory, new_dataset):
    ws, name = new_dataset(("pos", "neg"))
    _import(factory, "annotations", ws, name, b"item,r1,r2\nx1,pos,neg\nx2,,pos\n", format="wide")
    jsonl = gzip.compress(b'{"id": "x3", "votes": ["pos", "pos", "neg"]}\n')
    _import(factory, "annotations", ws, name, jsonl, field_map={"item_id": "id", "labels": "votes"})
    studio = json.dumps([
        {"id": 7, "data": {"item_id": "x4"},
         "annotations": [{"completed_by": {"id": 3, "email": "ann@example.org"}, "created_at": "2024-01-02T03:04:05Z",
                          "result": [{"type": "choices", "value": {"choices": ["neg"]}}]},
                         {"completed_by": 4, "was_cancelled": True, "result": []}],
         "predictions": [{"model_version": "v2", "result": [{"value": {"choices": ["pos"]}}]}]},
    ]).encode()
    _import(factory, "annotations", ws, name, studio)
    _import(factory, "predictions", ws, name, studio, model="studio-model", release="v2")
    snap = load_snapshot(db_engine, _dataset_id(factory, ws, name), annotations=True)
    counts = dict(zip(snap.items, snap.counts.counts.tolist(), strict=True))
    assert counts == {"x1": [1, 1], "x2": [1, 0], "x3": [2, 1], "x4": [0, 1]}
    # completed_by as the user object names the user by id, as the plain id does
    assert "3" in snap.annotations.annotators and "pos3" in snap.annotations.annotators
    (pred,) = snap.predictions.values()
    assert pred.release.version == "v2" and pred.hard[snap.items.index("x4")] == 0


def test_label_studio_ground_truth_empty_results_and_user_forms(db_engine, factory, new_dataset):
    """Label Studio's ground truth is gold, not a vote; an annotation submitted with an
    empty result is skipped and counted (it rejected the whole file); ``completed_by: 10``
    and ``completed_by: {"id": 10, ...}`` are one annotator (they were two)."""
    ws, name = new_dataset(("pos", "neg"))
    choice = lambda c: [{"type": "choices", "value": {"choices": [c]}}]  # noqa: E731
    studio = json.dumps([
        {"id": 1, "data": {"item_id": "t1"},
         "annotations": [{"completed_by": 10, "result": choice("pos")},
                         {"completed_by": {"id": 11, "email": "b@example.org"}, "result": choice("neg")},
                         {"completed_by": 12, "ground_truth": True, "result": choice("neg")},
                         {"completed_by": 13, "result": []}]},
        {"id": 2, "data": {"item_id": "t2"},
         "annotations": [{"completed_by": {"id": 10, "email": "a@example.org"}, "result": choice("neg")},
                         {"completed_by": 11, "result": choice("neg")},
                         {"completed_by": 14, "was_cancelled": True, "result": []}]},
        {"id": 3, "data": {"item_id": "t3"},
         "annotations": [{"completed_by": 12, "ground_truth": True, "result": choice("pos")}]},
    ]).encode()
    res = _import(factory, "annotations", ws, name, studio)
    assert res.status == "imported" and res.inserted == 4 and res.new_annotators == 2
    assert res.details["gold"] == 2 and res.details["skipped_empty"] == 1 and res.details["skipped_cancelled"] == 1
    assert "1 empty (no choice) annotation(s)" in res.message and "2 gold label(s)" in res.message
    snap = load_snapshot(db_engine, _dataset_id(factory, ws, name), annotations=True)
    counts = dict(zip(snap.items, snap.counts.counts.tolist(), strict=True))
    assert counts == {"t1": [1, 1], "t2": [0, 2], "t3": [0, 0]}  # the ground truth is no vote
    assert sorted(snap.annotations.annotators) == ["10", "11"]
    assert snap.gold[[snap.items.index(i) for i in ("t1", "t2", "t3")]].tolist() == [1, -1, 0]
    # The same export again changes nothing; ground truth alone is a gold batch.
    assert _import(factory, "annotations", ws, name, studio).status in ("unchanged", "duplicate")
    only_gold = json.dumps([{"id": 2, "data": {"item_id": "t2"},
                             "annotations": [{"completed_by": 12, "ground_truth": True, "result": choice("pos")}]}])
    res = _import(factory, "annotations", ws, name, only_gold.encode())
    assert res.status == "imported" and res.kind == "gold" and res.updated == 1
    # Two ground truths disagreeing on one item reject the batch, naming the row.
    clash = json.dumps([{"id": 4, "data": {"item_id": "t4"},
                         "annotations": [{"completed_by": 12, "ground_truth": True, "result": choice("pos")},
                                         {"completed_by": 15, "ground_truth": True, "result": choice("neg")},
                                         {"completed_by": 10, "result": choice("pos")}]},
                        {"id": 5, "data": {"item_id": "t4"},
                         "annotations": [{"completed_by": 12, "ground_truth": True, "result": choice("neg")}]}])
    before = fingerprint(db_engine)
    with pytest.raises(ImportRejected, match="ground-truth"):
        _import(factory, "annotations", ws, name, clash.encode())
    assert fingerprint(db_engine) == before


def test_predictions_upsert_and_gold(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    _import(factory, "annotations", ws, name, LONG)
    probs = b'{"item_id": "i1", "probabilities": {"a": 0.2, "b": 0.3, "c": 0.5}}\n{"item_id": "i2", "label": "b"}\n'
    first = _import(factory, "predictions", ws, name, probs, model="m", release="1.0")
    assert (first.inserted, first.updated) == (2, 0)
    second = _import(factory, "predictions", ws, name, b"item_id,label\ni1,a\ni2,b\n", model="m", release="1.0")
    assert (second.inserted, second.updated, second.unchanged) == (0, 1, 1)
    same = _import(factory, "predictions", ws, name, b"item_id,label\ni2,b\n", model="m", release="1.0")
    assert same.status == "unchanged"
    gold = _import(factory, "gold", ws, name, b"item_id,label\ni1,a\ni1,a\ni3,c\n", gold_source="expert")
    assert gold.updated == 2
    snap = load_snapshot(db_engine, _dataset_id(factory, ws, name))
    (pred,) = snap.predictions.values()
    assert pred.hard[[snap.items.index("i1"), snap.items.index("i2")]].tolist() == [0, 1]
    assert snap.gold[[snap.items.index(i) for i in ("i1", "i2", "i3")]].tolist() == [0, -1, 2]


def test_concurrent_imports_of_different_batches_all_land(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    n_batches, per_batch = 6, 40
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        rows = "".join(f"i{j},w{k},{'abc'[(j + k) % 3]}\n" for j in range(per_batch))
        try:
            _import(factory, "annotations", ws, name, f"item_id,annotator_id,label\n{rows}".encode())
        except BaseException as exc:  # re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_batches)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    d = _dataset_id(factory, ws, name)
    snap = load_snapshot(db_engine, d, annotations=True)
    assert snap.data_version == n_batches
    assert snap.counts.counts.sum() == n_batches * per_batch
    assert (snap.counts.counts.sum(axis=1) == n_batches).all()
    np.testing.assert_array_equal(snap.counts.counts, snap.annotations.counts().counts)
    with session_scope(factory) as s:
        versions = sorted(s.scalars(select(ImportBatch.data_version).where(ImportBatch.dataset_id == d)))
        assert versions == list(range(1, n_batches + 1))


def test_snapshot_is_consistent_while_writes_continue(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    _import(factory, "annotations", ws, name, LONG)
    d = _dataset_id(factory, ws, name)
    options = {"isolation_level": "REPEATABLE READ"} if db_engine.dialect.name == "postgresql" else {}
    with db_engine.connect().execution_options(**options) as conn, conn.begin():
        first = load_snapshot(conn, d, annotations=True)
        _import(factory, "annotations", ws, name, b"item_id,annotator_id,label\ni1,w9,a\ni9,w9,b\n")
        second = load_snapshot(conn, d, annotations=True)
    assert second.data_version == first.data_version
    np.testing.assert_array_equal(second.counts.counts, first.counts.counts)
    after = load_snapshot(db_engine, d)
    assert after.data_version == first.data_version + 1 and after.counts.counts.sum() == 7


def test_dataset_version_bumps_once_per_accepted_batch(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    _import(factory, "annotations", ws, name, LONG)
    _import(factory, "annotations", ws, name, LONG)  # duplicate: no bump
    with pytest.raises(ImportRejected):
        _import(factory, "annotations", ws, name, b"item_id,annotator_id,label\ni1,w1,zzz\n")
    _import(factory, "gold", ws, name, b"item_id,label\ni1,a\n")
    with session_scope(factory) as s:
        assert s.scalar(select(Dataset.data_version).where(Dataset.name == name)) == 2
        n_outbox = s.execute(text("SELECT count(*) FROM audit_outbox o JOIN dataset d ON d.id = o.dataset_id "
                                  "WHERE d.name = :n"), {"n": name}).scalar()
        assert n_outbox == 2


def test_delete_dataset_removes_every_row_of_it(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    _import(factory, "annotations", ws, name, LONG)
    _import(factory, "annotations", ws, name, b"item_id,annotator_id,label\ni1,w1,b\n")
    _import(factory, "predictions", ws, name, b"item_id,label\ni1,a\n", model="m", release="1")
    d = _dataset_id(factory, ws, name)
    with session_scope(factory) as s:
        delete_dataset(s, name, workspace=ws)
    with db_engine.connect() as conn:
        for table in ("annotation_history", "annotation", "prediction", "item", "import_batch", "audit_outbox"):
            assert conn.execute(text(f"SELECT count(*) FROM {table} WHERE dataset_id = :d"), {"d": d}).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM dataset WHERE id = :d"), {"d": d}).scalar() == 0


def test_the_existing_items_probe_cannot_degrade_without_statistics(pg_database):
    """A later batch of new items checks whether it touches existing ones. Without planner
    statistics of ``item`` (autovacuum has not analysed it yet) the old query walked the
    whole dataset and re-scanned the batch for each item (quadratic: 40k new items ran for
    ten minutes). The probe is driven from the batch: an index probe per batch row,
    never a scan of ``item``, whatever the statistics say."""
    from auditor.db import make_engine, migrate
    from auditor.ingest.annotations import existing_items_probe
    from tests.ingest.conftest import seed_items

    engine = make_engine(pg_database())
    migrate.upgrade(engine)
    try:
        with engine.begin() as conn:
            d = seed_items(conn, "old-", 20000)
            # The staged batch as the raw-CSV path reads it: an expression over text columns.
            conn.execute(text("CREATE TEMP TABLE stg (row_no BIGINT, c0 TEXT)"))
            conn.execute(text("INSERT INTO stg SELECT g, 'new-' || g FROM generate_series(1, 5000) g"))
            conn.execute(text("ANALYZE stg"))
            conn.execute(text("DELETE FROM pg_statistic WHERE starelid = 'item'::regclass"))
            conn.execute(text("UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = 'item'::regclass"))
            batch = "(SELECT row_no, nullif(btrim(c0), '') AS item_ext FROM stg)"
            probe = existing_items_probe(batch, pg=True)
            plan = [r[0] for r in conn.execute(text("EXPLAIN " + probe), {"d": d, "m": 10 ** 9})]
            # Each batch row finds its item through the index on (dataset_id, external_id);
            # the old shape compared external_id in a join filter, item rows × batch rows.
            assert any("Index Cond" in line and "external_id" in line for line in plan), "\n".join(plan)
            assert not any("Join Filter" in line and "external_id" in line for line in plan), "\n".join(plan)
            assert conn.execute(text(probe), {"d": d, "m": 10 ** 9}).first() is None
            conn.execute(text("INSERT INTO stg VALUES (0, 'old-17')"))
            assert conn.execute(text(probe), {"d": d, "m": 10 ** 9}).first()
    finally:
        engine.dispose()
