"""PostgreSQL's bulk path for a first long CSV/TSV load: same rows as the general path, same errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from alembic import command
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from auditor.db import make_session_factory, migrate, session_scope
from auditor.db.partitions import annotation_partition, has_annotation_partition
from auditor.ingest import (
    ImportRejected,
    bulk,
    create_dataset,
    csv_load,
    get_dataset,
    import_annotations,
)
from auditor.ingest import annotations as annotation_import
from auditor.ingest import batch as batch_protocol
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


@pytest.fixture(params=["inline", "side"])
def load_mode(request, monkeypatch):
    """Small batches copy their rows in their own transaction; big ones on a second connection."""
    if request.param == "side":
        monkeypatch.setattr(csv_load._PartitionLoad, "INLINE_BYTES", 0)
    return request.param


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
    monkeypatch.setattr(annotation_import, "_try_bulk_first_load", lambda *a, **k: None)


def _bulk_path_only(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(annotation_import, "_stage_raw_csv", refuse)


def test_bulk_load_stores_the_same_rows_as_the_general_path(pg_engine, pg_factory, monkeypatch, load_mode):
    ws_bulk, bulk_name = _fresh(pg_factory)
    ws_general, general_name = _fresh(pg_factory)
    with monkeypatch.context() as m:
        _bulk_path_only(m)
        with session_scope(pg_factory) as s:
            bulk_result = import_annotations(s, bulk_name, FILE, workspace=ws_bulk, vendor="house")
    with monkeypatch.context() as m:
        _general_path_only(m)
        with session_scope(pg_factory) as s:
            general = import_annotations(s, general_name, FILE, workspace=ws_general, vendor="house")
    assert bulk_result.details == general.details
    assert bulk_result.message.split(":", 1)[1] == general.message.split(":", 1)[1]
    d, *stored = _rows(pg_engine, ws_bulk, bulk_name)
    _, *expected = _rows(pg_engine, ws_general, general_name)
    assert stored == expected
    annotations, items = stored[0], stored[1]
    assert len(annotations) == 6 and [i for i, _ in items] == ["i1", "i2", "i3", "i,4"]
    assert dict(items)["i2"] == [0, 1, 1]
    with pg_engine.connect() as conn:
        assert has_annotation_partition(conn, d)
        assert conn.execute(text("SELECT DISTINCT batch_id FROM annotation WHERE dataset_id = :d"),
                            {"d": d}).scalars().all() == [bulk_result.batch_id]
        # The batch's constants were column defaults only while the rows were copied.
        assert conn.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
            "AND column_default IS NOT NULL"), {"t": annotation_partition(d)}).scalars().all() == ["created_at"]
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
def test_bulk_load_rejections_name_row_and_field_and_write_nothing(case, pg_engine, pg_factory, load_mode):
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
        d = get_dataset(s, name, workspace=ws).id
        assert not has_annotation_partition(conn, d)
        # Not even unattached: the table the load filled on its own connection is gone.
        assert conn.execute(text("SELECT to_regclass(:t)"), {"t": annotation_partition(d)}).scalar() is None


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
    bulk_outcome = _outcome(pg_factory, pg_engine, data)
    with monkeypatch.context() as m:
        _general_path_only(m)
        general = _outcome(pg_factory, pg_engine, data)
    assert bulk_outcome == general


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


def _interleaved_file() -> bytes:
    """Items come back block after block; some rows have time stamps, vendors vary by annotator."""
    rows = [b"item_id,annotator_id,label,vendor,timestamp"]
    for k in range(5):
        for i in range(60):
            ts = f"2024-05-{1 + (i % 28):02d}T10:00:00Z" if (i + k) % 3 else ""
            rows.append(f"item-{(i * 7) % 60},w{(i + k) % 9},{'abc'[(i * k) % 3]},v{(i + k) % 9 % 2},{ts}".encode())
    return b"\n".join(rows) + b"\n"


def test_bulk_load_in_tiny_blocks_stores_the_same_rows_as_the_general_path(pg_engine, pg_factory, monkeypatch, load_mode):
    # Blocks of a few rows: most items and annotators were met in an earlier block, and
    # the rows of one block leave in several COPY messages.
    data = _interleaved_file()
    ws_bulk, bulk_name = _fresh(pg_factory)
    ws_general, general_name = _fresh(pg_factory)
    with monkeypatch.context() as m:
        _bulk_path_only(m)
        m.setattr(bulk, "BLOCK_BYTES", 300)
        m.setattr(bulk, "ROWS_PER_MESSAGE", 4)
        with session_scope(pg_factory) as s:
            got = import_annotations(s, bulk_name, data, workspace=ws_bulk)
    with monkeypatch.context() as m:
        _general_path_only(m)
        with session_scope(pg_factory) as s:
            expected = import_annotations(s, general_name, data, workspace=ws_general)
    assert got.details == expected.details and got.inserted == 300 and got.new_items == 60
    assert _rows(pg_engine, ws_bulk, bulk_name)[1:] == _rows(pg_engine, ws_general, general_name)[1:]


def test_a_table_left_unattached_by_a_failed_load_is_replaced(pg_engine, pg_factory, monkeypatch, load_mode):
    ws, name = _fresh(pg_factory)
    with session_scope(pg_factory) as s:
        d = get_dataset(s, name, workspace=ws).id
    table = annotation_partition(d)
    with pg_engine.begin() as conn:  # what a load cut off after its table was committed leaves
        conn.execute(text(f"CREATE TABLE {table} (LIKE annotation INCLUDING DEFAULTS)"))
        conn.execute(text(f"INSERT INTO {table} (dataset_id, item_id, annotator_id, label, batch_id, data_version) "
                          f"VALUES ({d}, -1, -1, 0, -1, 99)"))
    _bulk_path_only(monkeypatch)
    with session_scope(pg_factory) as s:
        result = import_annotations(s, name, FILE, workspace=ws)
    assert result.inserted == 6
    with pg_engine.connect() as conn:
        assert has_annotation_partition(conn, d)
        assert conn.execute(text("SELECT count(*), min(item_id) > 0 FROM annotation WHERE dataset_id = :d"),
                            {"d": d}).one() == (6, True)


def test_a_load_rejected_after_its_rows_were_sent_leaves_nothing(pg_engine, pg_factory, monkeypatch, load_mode):
    # The conflict shows only once the whole file is read (rows 2 and 250, blocks apart),
    # after every row went to the other connection and its key index was built.
    lines = [b"item_id,annotator_id,label,vendor"] + [f"i{i},w{i % 5},a,acme".encode() for i in range(300)]
    lines[250] = b"i249,w1,b,other"
    ws, name = _fresh(pg_factory)
    before = fingerprint(pg_engine)
    monkeypatch.setattr(bulk, "BLOCK_BYTES", 500)
    with pytest.raises(ImportRejected) as info, session_scope(pg_factory) as s:
        import_annotations(s, name, b"\n".join(lines) + b"\n", workspace=ws)
    assert (info.value.errors[0].row, info.value.errors[0].field) == (2, "vendor")
    assert fingerprint(pg_engine) == before
    with pg_engine.connect() as conn, session_scope(pg_factory) as s:
        d = get_dataset(s, name, workspace=ws).id
        assert conn.execute(text("SELECT to_regclass(:t)"), {"t": annotation_partition(d)}).scalar() is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=3), max_size=12), max_size=6))
def test_registry_codes_in_order_of_first_appearance_across_blocks(blocks):
    registry, expected = bulk.Registry(), {}
    for block in blocks:
        distinct = list(dict.fromkeys(block))
        codes, new = registry.add(pa.array(distinct, pa.string()))
        was_known = [v in expected for v in distinct]
        for v in distinct:
            expected.setdefault(v, len(expected))
        assert codes.tolist() == [expected[v] for v in distinct]
        assert new.tolist() == [not k for k in was_known]
    assert registry.values().to_pylist() == list(expected)


def test_registry_never_merges_two_ids_with_one_hash():
    registry = bulk.Registry(hasher=lambda s: len(s))  # "ab" and "cd" collide
    codes, _ = registry.add(pa.array(["ab", "xyz"]))
    assert codes.tolist() == [0, 1]
    assert registry.add(pa.array(["xyz", "ab"]))[0].tolist() == [1, 0]
    with pytest.raises(bulk.Fallback):
        registry.add(pa.array(["cd"]))
    with pytest.raises(bulk.Fallback):
        bulk.Registry(hasher=lambda s: 7).add(pa.array(["p", "q"]))
    assert np.array_equal(bulk.Registry().add(pa.array([], pa.string()))[0], [])


def test_bulk_loads_and_item_inserts_elsewhere_at_once_never_share_an_id(pg_engine, pg_factory, monkeypatch):
    # The bulk load takes its item ids in ranges (one per block: tiny blocks here); general
    # imports into other datasets take theirs one by one from the same sequence meanwhile.
    import threading

    monkeypatch.setattr(bulk, "BLOCK_BYTES", 400)
    bulk_loaded: list[str] = []
    real = csv_load._bulk_first_load

    def spy(b, *args, **kwargs):
        result = real(b, *args, **kwargs)
        bulk_loaded.append(b.dataset.name)  # reached only if no fallback was needed
        return result

    monkeypatch.setattr(csv_load, "_bulk_first_load", spy)
    targets = [_fresh(pg_factory) for _ in range(4)]
    big = b"item_id,annotator_id,label\n" + b"".join(f"b{i},w{i % 3},a\n".encode() for i in range(400))
    errors: list[BaseException] = []

    def load(ws: str, name: str, data: bytes) -> None:
        try:
            with session_scope(pg_factory) as s:
                import_annotations(s, name, data, workspace=ws)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def small(ws: str, name: str) -> None:
        for k in range(15):  # first a bulk load, then general imports adding items
            load(ws, name, f"item_id,annotator_id,label\ns{k}a,w1,a\ns{k}b,w2,b\n".encode())

    threads = [threading.Thread(target=load, args=(*targets[0], big)),
               threading.Thread(target=load, args=(*targets[1], big))]
    threads += [threading.Thread(target=small, args=t) for t in targets[2:]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert {targets[0][1], targets[1][1]} <= set(bulk_loaded)
    with pg_engine.connect() as conn:
        ids, stored = {}, []
        for ws, name in targets:
            d, annotations, *_ = _rows(pg_engine, ws, name)
            stored.append(len(annotations))
            ids[name] = conn.execute(text("SELECT id FROM item WHERE dataset_id = :d"), {"d": d}).scalars().all()
    assert sorted(len(v) for v in ids.values()) == [30, 30, 400, 400] and sorted(stored) == [30, 30, 400, 400]
    every = [i for v in ids.values() for i in v]
    assert len(set(every)) == len(every)


def test_a_bulk_load_does_not_wait_for_other_transactions_holding_the_item_sequence(pg_engine, pg_factory,
                                                                                    monkeypatch):
    # An open transaction that took an item id holds a lock on the sequence until it ends;
    # the load's id ranges give up waiting for it at once and take ids one by one.
    import threading

    monkeypatch.setattr(bulk, "BLOCK_BYTES", 400)
    used: list[tuple[int, int]] = []
    real_close = csv_load._IdRanges.close

    def close(self):
        used.append((self.ranges, self.one_by_one))
        real_close(self)

    monkeypatch.setattr(csv_load._IdRanges, "close", close)
    ws, name = _fresh(pg_factory)
    data = b"item_id,annotator_id,label\n" + b"".join(f"x{i},w{i % 3},a\n".encode() for i in range(200))
    with pg_engine.connect() as other:
        other.begin()
        taken = other.execute(text("SELECT nextval(pg_get_serial_sequence('item', 'id'))")).scalar()
        result: list = []
        load = threading.Thread(target=lambda: result.append(_load(pg_factory, ws, name, data)), daemon=True)
        load.start()
        load.join(timeout=60)
        other.rollback()
    load.join(timeout=60)
    assert result and result[0].inserted == 200 and result[0].new_items == 200
    assert used and used[-1][0] == 0 and used[-1][1] >= 2  # every block's ids one by one
    with pg_engine.connect() as conn:
        ids = conn.execute(text("SELECT i.id FROM item i JOIN dataset d ON d.id = i.dataset_id WHERE d.name = :n"),
                           {"n": name}).scalars().all()
    assert len(set(ids)) == 200 and taken not in ids
    # With the sequence free again, ids come in ranges.
    ws2, name2 = _fresh(pg_factory)
    assert _load(pg_factory, ws2, name2, data).inserted == 200
    assert used[-1][0] >= 2 and used[-1][1] == 0


def _load(factory, ws, name, data):
    with session_scope(factory) as s:
        return import_annotations(s, name, data, workspace=ws)


def test_a_load_failing_after_the_attach_leaves_no_table(pg_engine, pg_factory, monkeypatch, load_mode):
    def fail(*a, **k):
        raise RuntimeError("the outbox is gone")

    monkeypatch.setattr(batch_protocol, "finish", fail)
    ws, name = _fresh(pg_factory)
    before = fingerprint(pg_engine)
    with pytest.raises(RuntimeError, match="outbox"), session_scope(pg_factory) as s:
        import_annotations(s, name, FILE, workspace=ws)
    assert fingerprint(pg_engine) == before
    with pg_engine.connect() as conn, session_scope(pg_factory) as s:
        d = get_dataset(s, name, workspace=ws).id
        assert conn.execute(text("SELECT to_regclass(:t)"), {"t": annotation_partition(d)}).scalar() is None



def test_bulk_loads_need_no_second_connection_from_the_pool(pg_engine, monkeypatch):
    # A pool of one: a load whose helpers took connections from the pool would wait for
    # the one it holds itself. Three loads at once take turns with it.
    import threading

    from auditor.db import make_engine

    monkeypatch.setattr(csv_load._PartitionLoad, "INLINE_BYTES", 0)
    engine = make_engine(pg_engine.url, pool_size=1, max_overflow=0, pool_timeout=20)
    factory = make_session_factory(engine)
    targets = [_fresh(factory) for _ in range(3)]
    data = b"item_id,annotator_id,label\n" + b"".join(f"p{i},w{i % 4},b\n".encode() for i in range(100))
    results: list = []
    threads = [threading.Thread(target=lambda t=t: results.append(_load(factory, *t, data))) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    engine.dispose()
    assert sorted(r.inserted for r in results) == [100, 100, 100]


def test_bulk_and_general_rejections_count_every_bad_row(pg_engine, pg_factory, monkeypatch, load_mode):
    rows = ["item_id,annotator_id,label"] + [f"i{n},w{n % 7},{'zz' if n % 3 == 0 else 'a'}" for n in range(474)]
    data = ("\n".join(rows) + "\n").encode()
    for only in (_bulk_path_only, _general_path_only):
        ws, name = _fresh(pg_factory)
        with monkeypatch.context() as m, pytest.raises(ImportRejected) as info:
            only(m)
            with session_scope(pg_factory) as s:
                import_annotations(s, name, data, workspace=ws)
        assert info.value.bad_rows == 158, only.__name__
        assert [e.row for e in info.value.errors] == list(range(1, 60, 3)), only.__name__


@pytest.mark.parametrize("field", ["item_id", "annotator_id"])
def test_an_id_over_512_characters_is_named_by_its_row_and_field(pg_engine, pg_factory, monkeypatch, load_mode,
                                                                  field):
    long_id = "é" * 300 + "x" * 213  # 513 characters, more bytes
    rows = ["item_id,annotator_id,label"] + [f"i{n},w{n % 3},a" for n in range(40)]
    item, ann = (long_id, "w1") if field == "item_id" else ("i7", long_id)
    rows[8] = f"{item},{ann},b"
    rows.append("i8,w2," + "é" * 200)  # 512 is fine for an id; this row's label is just unknown
    data = ("\n".join(rows) + "\n").encode()
    for only in (_bulk_path_only, _general_path_only):
        ws, name = _fresh(pg_factory)
        before = fingerprint(pg_engine)
        with monkeypatch.context() as m, pytest.raises(ImportRejected) as info:
            only(m)
            with session_scope(pg_factory) as s:
                import_annotations(s, name, data, workspace=ws)
        first = info.value.errors[0]
        assert (first.row, first.field) == (8, field), (only.__name__, str(info.value))
        assert "513 characters" in first.reason
        assert fingerprint(pg_engine) == before
