"""PostgreSQL's bulk path for a first long CSV/TSV load: same rows as the general path, same errors."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import text

from auditor.db import make_session_factory, migrate, session_scope
from auditor.db.partitions import annotation_partition, has_annotation_partition
from auditor.ingest import ImportRejected, create_dataset, get_dataset, import_annotations, usecases
from tests.ingest.conftest import fingerprint

FILE = (b"item_id,annotator_id,label,vendor,tier,timestamp,note\n"
        b"i1,w1,a,acme,crowd,2024-05-01T10:00:00Z,x\n"
        b" i1 ,e1,b,,expert,,y\n"
        b"i2,w1,c,acme,,2024-05-02 08:30,\n"
        b"i2,w2, b ,,,2024-05-03,\n"
        b"i3,w2,a,,,,\n"
        b'"i,4",w3,c,"beta",crowd,2024-05-01T10:00:00+02:00,"q"\n')


@pytest.fixture
def pg_factory(pg_engine):
    return make_session_factory(pg_engine)


def _fresh(factory, labels=("a", "b", "c")) -> tuple[str, str]:
    import uuid

    ws, name = f"ws-{uuid.uuid4().hex[:8]}", f"ds-{uuid.uuid4().hex[:8]}"
    with session_scope(factory) as s:
        create_dataset(s, name, list(labels), workspace=ws)
    return ws, name


def _rows(engine, ws, name):
    with engine.connect() as conn:
        d = conn.execute(text("SELECT d.id FROM dataset d JOIN workspace w ON w.id = d.workspace_id "
                              "WHERE w.slug = :w AND d.name = :n"), {"w": ws, "n": name}).scalar_one()
        annotations = conn.execute(text(
            "SELECT i.external_id, an.external_id, an.vendor, an.tier, a.label, a.annotated_at, a.data_version "
            "FROM annotation a JOIN item i ON i.id = a.item_id JOIN annotator an ON an.id = a.annotator_id "
            "WHERE a.dataset_id = :d ORDER BY 1, 2"), {"d": d}).all()
        items = conn.execute(text("SELECT external_id, label_counts FROM item WHERE dataset_id = :d ORDER BY id"),
                             {"d": d}).all()
        batch = conn.execute(text("SELECT row_count, data_version, stats FROM import_batch WHERE dataset_id = :d"),
                             {"d": d}).all()
        outbox = conn.execute(text("SELECT data_version, reason FROM audit_outbox WHERE dataset_id = :d"),
                              {"d": d}).all()
    return d, annotations, items, batch, outbox


def _general_path_only(monkeypatch):
    monkeypatch.setattr(usecases, "_try_bulk_first_load", lambda *a, **k: None)


def _bulk_path_only(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(usecases, "_stage_raw_csv", refuse)


def test_bulk_load_stores_the_same_rows_as_the_general_path(pg_engine, pg_factory, monkeypatch):
    ws_bulk, bulk_name = _fresh(pg_factory)
    ws_general, general_name = _fresh(pg_factory)
    with monkeypatch.context() as m:
        _bulk_path_only(m)
        with session_scope(pg_factory) as s:
            bulk = import_annotations(s, bulk_name, FILE, workspace=ws_bulk, vendor="house")
    with monkeypatch.context() as m:
        _general_path_only(m)
        with session_scope(pg_factory) as s:
            general = import_annotations(s, general_name, FILE, workspace=ws_general, vendor="house")
    assert bulk.details == general.details and bulk.message.split(":", 1)[1] == general.message.split(":", 1)[1]
    d, *stored = _rows(pg_engine, ws_bulk, bulk_name)
    _, *expected = _rows(pg_engine, ws_general, general_name)
    assert stored == expected
    annotations, items = stored[0], stored[1]
    assert len(annotations) == 6 and [i for i, _ in items] == ["i1", "i2", "i3", "i,4"]
    assert dict(items)["i2"] == [0, 1, 1]
    with pg_engine.connect() as conn:
        assert has_annotation_partition(conn, d)
    # A second batch into the loaded dataset goes the general way and re-labels.
    with session_scope(pg_factory) as s:
        again = import_annotations(s, bulk_name, b"item_id,annotator_id,label\ni3,w2,b\ni9,w1,a\n", workspace=ws_bulk)
    assert (again.inserted, again.updated) == (1, 1)


def test_bulk_load_tsv_gzip_and_reimport(pg_engine, pg_factory, monkeypatch):
    import gzip

    _bulk_path_only(monkeypatch)
    ws, name = _fresh(pg_factory)
    data = gzip.compress(b"item_id\tannotator_id\tlabel\n" + b"".join(
        f"it{i}\tw{i % 7}\t{'abc'[i % 3]}\n".encode() for i in range(1000)))
    with session_scope(pg_factory) as s:
        first = import_annotations(s, name, data, workspace=ws, format="tsv")
    assert (first.inserted, first.new_items, first.new_annotators) == (1000, 1000, 7)
    state = fingerprint(pg_engine)
    with session_scope(pg_factory) as s:
        assert import_annotations(s, name, data, workspace=ws, format="tsv").status == "duplicate"
    assert fingerprint(pg_engine) == state


BAD_FIRST_LOADS = {
    "unknown label": (b"item_id,annotator_id,label\ni1,w1,a\ni2,w1,zebra\n", (2, "label"), "zebra"),
    "missing label": (b"item_id,annotator_id,label\ni1,w1,a\ni2,w1, \n", (2, "label"), "missing"),
    "missing item": (b"item_id,annotator_id,label\ni1,w1,a\n,w1,b\n", (2, "item_id"), "missing"),
    "bad tier": (b"item_id,annotator_id,label,tier\ni1,w1,a,crowd\ni1,w2,a,guru\n", (2, "tier"), "guru"),
    "bad timestamp": (b"item_id,annotator_id,label,timestamp\ni1,w1,a,yesterday\n", (1, "timestamp"), "ISO 8601"),
    "impossible date": (b"item_id,annotator_id,label,timestamp\ni1,w1,a,2024-05-01\ni1,w2,a,2024-13-01\n",
                        (None, "timestamp"), ""),
    "duplicate pair": (b"item_id,annotator_id,label\ni1,w1,a\ni2,w1,b\ni1,w1,b\n", (3, "annotator_id"),
                       "already labelled"),
    "too many columns": (b"item_id,annotator_id,label\ni1,w1,a\ni2,w1,b,extra\n", (2, None), "more than"),
    "bad encoding": (b"item_id,annotator_id,label\ni1,w1,a\ni\xff2,w1,b\n", (2, None), "UTF-8"),
    "vendor conflict": (b"item_id,annotator_id,label,vendor\ni1,w9,a,x\ni2,w9,a,y\n", (1, "vendor"), "given both"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIRST_LOADS))
def test_bulk_load_rejections_name_row_and_field_and_write_nothing(case, pg_engine, pg_factory):
    data, (row, field), reason = BAD_FIRST_LOADS[case]
    ws, name = _fresh(pg_factory)
    before = fingerprint(pg_engine)
    with pytest.raises(ImportRejected) as info:
        with session_scope(pg_factory) as s:
            import_annotations(s, name, data, workspace=ws)
    first = info.value.errors[0]
    assert first.field == field and (row is None or first.row == row), str(info.value)
    assert reason in first.reason and "nothing was written" in str(info.value)
    assert fingerprint(pg_engine) == before
    with pg_engine.connect() as conn, session_scope(pg_factory) as s:
        assert not has_annotation_partition(conn, get_dataset(s, name, workspace=ws).id)


def _outcome(factory, engine, data):
    ws, name = _fresh(factory)
    try:
        with session_scope(factory) as s:
            result = import_annotations(s, name, data, workspace=ws)
    except ImportRejected as exc:
        return [(e.row, e.field, e.reason) for e in exc.errors]
    return result.details, _rows(engine, ws, name)[1:3]


@pytest.mark.parametrize("data", [
    b'item_id,annotator_id,label\ni1,w1,a\n"i\n2",w1,b\ni3,w2,c\n',  # a quoted line break
    b"item_id,annotator_id,label\ni1,w1,a\n\ni3,w2,c\n",  # a blank line
    b"item_id,annotator_id,label,timestamp\ni1,w1,a,2024-05-01T10\n",  # a form Arrow reads, the pattern not
])
def test_what_the_bulk_reader_cannot_settle_gets_the_general_paths_answer(data, pg_engine, pg_factory, monkeypatch):
    bulk = _outcome(pg_factory, pg_engine, data)
    with monkeypatch.context() as m:
        _general_path_only(m)
        general = _outcome(pg_factory, pg_engine, data)
    assert bulk == general


def test_alembic_check_ignores_the_partitions(pg_engine, pg_factory):
    ws, name = _fresh(pg_factory)
    with session_scope(pg_factory) as s:
        import_annotations(s, name, b"item_id,annotator_id,label\ni1,w1,a\n", workspace=ws)
        d = get_dataset(s, name, workspace=ws).id
    with pg_engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": annotation_partition(d)}).scalar()
    cfg = migrate.alembic_config(pg_engine)
    with pg_engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.check(cfg)
