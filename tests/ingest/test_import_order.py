"""Imports in the orders real data takes: predictions (or gold) before the labels, gold after.

Whatever came first, the stored rows are the file's rows and each item's kept counts are
the counts of its rows; on PostgreSQL the batch's joins go through analysed maps of the
batch's own items, probed by index, whatever the statistics of ``item`` say.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, text

from auditor.db import Annotation, Item, load_snapshot, make_engine, migrate, session_scope
from auditor.ingest import (
    ImportRejected,
    get_dataset,
    import_annotations,
    import_gold,
    import_predictions,
)
from auditor.ingest.batch import Sql
from auditor.stats import counts_from_records
from tests.ingest.conftest import fingerprint

LABELS = ["a", "b", "c"]


def _dataset_id(factory, workspace, name) -> int:
    with session_scope(factory) as s:
        return get_dataset(s, name, workspace=workspace).id


def _labels_csv(rows) -> bytes:
    return ("item_id,annotator_id,label\n" + "".join(f"{i},{a},{lab}\n" for i, a, lab in rows)).encode()


def _check_counts(engine, dataset_id, rows):
    """The stored annotations are ``rows`` (last label of each pair) and every item's kept
    counts equal the counts of its stored rows."""
    snap = load_snapshot(engine, dataset_id, annotations=True)
    expected = counts_from_records([list(r) for r in rows], labels=LABELS)
    order = [snap.items.index(i) for i in expected.items]
    np.testing.assert_array_equal(snap.counts.counts[order], expected.counts)
    np.testing.assert_array_equal(snap.counts.counts, snap.annotations.counts().counts)


rows_strategy = st.lists(st.tuples(st.integers(0, 11), st.integers(0, 5), st.sampled_from(LABELS)),
                         min_size=1, max_size=40, unique_by=lambda r: (r[0], r[1]))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_strategy, predicted=st.integers(1, 12), gold_first=st.booleans())
def test_labels_onto_items_that_exist_store_the_files_rows(db_engine, factory, new_dataset, rows, predicted,
                                                           gold_first):
    """Predictions (or gold) for some items first, then labels on any items: the same
    stored rows and counts as into an empty dataset, and the new items counted."""
    ws, name = new_dataset()
    first = "".join(f"i{k},{LABELS[k % 3]}\n" for k in range(predicted)).encode()
    with session_scope(factory) as s:
        if gold_first:
            import_gold(s, name, b"item_id,label\n" + first, workspace=ws)
        else:
            import_predictions(s, name, b"item_id,label\n" + first, workspace=ws, model="m", release="1")
    records = [(f"i{i}", f"w{a}", lab) for i, a, lab in rows]
    with session_scope(factory) as s:
        result = import_annotations(s, name, _labels_csv(records), workspace=ws)
    assert result.status == "imported" and result.inserted == len(records)
    assert result.new_items == len({i for i, _, _ in records} - {f"i{k}" for k in range(predicted)})
    d = _dataset_id(factory, ws, name)
    _check_counts(db_engine, d, records)
    if gold_first:  # the labels leave the gold where it was
        with session_scope(factory) as s:
            gold = dict(s.execute(select(Item.external_id, Item.gold_label).where(Item.dataset_id == d,
                                                                                   Item.gold_label.is_not(None))).all())
        assert gold == {f"i{k}": k % 3 for k in range(predicted)}
    # A second batch onto the now labelled items: re-labels and new pairs, counts still exact.
    again = [(i, a, LABELS[(LABELS.index(lab) + 1) % 3]) for i, a, lab in records[: len(records) // 2]]
    late = dict.fromkeys(i for i, _, _ in records[:3])
    again += [(i, "w-late", "a") for i in late]
    with session_scope(factory) as s:
        second = import_annotations(s, name, _labels_csv(again), workspace=ws)
    assert (second.inserted, second.updated) == (len(late), len(records) // 2)
    final = {(i, a): lab for i, a, lab in records}
    final.update({(i, a): lab for i, a, lab in again})
    _check_counts(db_engine, d, [(i, a, lab) for (i, a), lab in final.items()])


def test_a_pair_twice_onto_predicted_items_is_named_and_nothing_is_written(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    with session_scope(factory) as s:
        import_predictions(s, name, b"item_id,label\ni1,a\ni2,b\n", workspace=ws, model="m", release="1")
    before = fingerprint(db_engine)
    with pytest.raises(ImportRejected) as err, session_scope(factory) as s:
        import_annotations(s, name, _labels_csv([("i1", "w1", "a"), ("i2", "w1", "b"), ("i1", "w1", "c")]),
                           workspace=ws)
    assert [(e.row, e.field) for e in err.value.errors] == [(3, "annotator_id")]
    assert fingerprint(db_engine) == before


def test_gold_after_annotations_sets_every_items_gold(db_engine, factory, new_dataset):
    ws, name = new_dataset()
    records = [(f"i{k}", f"w{k % 4}", LABELS[k % 3]) for k in range(30)]
    with session_scope(factory) as s:
        import_annotations(s, name, _labels_csv(records), workspace=ws)
    gold = b"item_id,label,source\n" + "".join(f"i{k},{LABELS[(k + 1) % 3]},expert\n" for k in range(0, 30, 2)
                                               ).encode() + b"i-new,a,expert\n"
    with session_scope(factory) as s:
        result = import_gold(s, name, gold, workspace=ws)
    assert (result.updated, result.new_items) == (16, 1)
    d = _dataset_id(factory, ws, name)
    with session_scope(factory) as s:
        stored = dict(s.execute(select(Item.external_id, Item.gold_label).where(Item.dataset_id == d)).all())
        n_ann = s.scalar(select(text("count(*)")).select_from(Annotation).where(Annotation.dataset_id == d))
    assert n_ann == 30
    assert stored == {**{f"i{k}": (None if k % 2 else (k + 1) % 3) for k in range(30)}, "i-new": 0}


def test_the_batch_finds_its_items_by_index_without_statistics(pg_database):
    """Sql.key_map, the way every import resolves its items: with ``item`` never analysed
    (and its page count wiped) the plan still probes the unique index once per distinct
    name of the batch, never a join of the batch to ``item`` that can loop over either."""
    engine = make_engine(pg_database())
    migrate.upgrade(engine)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO workspace (slug, name) VALUES ('w', 'w')"))
            ws = conn.execute(text("SELECT id FROM workspace WHERE slug = 'w'")).scalar_one()
            conn.execute(text("INSERT INTO dataset (workspace_id, name, labels) VALUES (:w, 'd', '[\"a\", \"b\"]')"),
                         {"w": ws})
            d = conn.execute(text("SELECT id FROM dataset WHERE name = 'd'")).scalar_one()
            conn.execute(text("INSERT INTO item (dataset_id, external_id) SELECT :d, 'i-' || g "
                              "FROM generate_series(1, 20000) g"), {"d": d})
            conn.execute(text("DELETE FROM pg_statistic WHERE starelid = 'item'::regclass"))
            conn.execute(text("UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = 'item'::regclass"))
            sql = Sql(conn)
            stg = sql.temp_table("row_no BIGINT, item_ext TEXT")
            conn.execute(text(f"INSERT INTO {stg} SELECT g, 'i-' || (g % 30000) FROM generate_series(1, 60000) g"))
            sql.analyze(stg)
            plans = []
            real_run = sql.run

            def run(statement, params=None):
                if statement.startswith("INSERT INTO") and "LATERAL" in statement:
                    plans.append([r[0] for r in real_run("EXPLAIN " + statement, params)])
                return real_run(statement, params)

            sql.run = run
            mapped = sql.key_map(stg, "item_ext", "item", "dataset_id", d)
            (plan,) = plans
            assert any("Index Cond" in line and "external_id" in line for line in plan), "\n".join(plan)
            assert not any("Seq Scan on item" in line for line in plan), "\n".join(plan)
            # Names without an item are left out; every other one maps to its own row.
            assert conn.execute(text(f"SELECT count(*) FROM {mapped}")).scalar_one() == 20000
            assert conn.execute(text(f"SELECT count(*) FROM {mapped} m JOIN item i ON i.id = m.id "
                                     f"AND i.external_id = m.ext AND i.dataset_id = :d"), {"d": d}).scalar_one() == 20000
    finally:
        engine.dispose()
