"""File readers: row numbering, per-row checks, field mapping; no database needed."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.ingest.errors import ImportRejected
from auditor.ingest.formats import (
    AnnotationDefaults,
    detect_format,
    open_source,
    read_annotations,
    read_gold,
    read_predictions,
)

LABELS = ["a", "b", "c"]


def _ann(data: bytes, fmt: str, **kw):
    return list(read_annotations(open_source(data), fmt, LABELS, **kw))


def _errors(fn, *args, **kw):
    with pytest.raises(ImportRejected) as info:
        list(fn(*args, **kw))
    return [(e.row, e.field) for e in info.value.errors]


ids = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF, exclude_characters=',"'),
              min_size=1, max_size=8).map(str.strip).filter(bool)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(ids, ids, st.sampled_from(LABELS)), min_size=1, max_size=30))
def test_long_csv_round_trips_with_row_numbers(rows):
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["item_id", "annotator_id", "label"])
    writer.writerows(rows)
    parsed = _ann(buf.getvalue().encode(), "csv")
    assert [(r[1], r[2], LABELS[r[3]]) for r in parsed] == rows
    assert [r[0] for r in parsed] == list(range(1, len(rows) + 1))


def test_wide_csv_skips_empty_cells_and_names_the_rater_column():
    rows = _ann(b"item,r1,r2\ni1,a,\ni2,,c\n", "wide", defaults=AnnotationDefaults(vendor="v", tier="expert"))
    assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
        (1, "i1", "r1", 0, "v", "expert"), (2, "i2", "r2", 2, "v", "expert")]


def test_jsonl_positional_labels_and_field_map():
    data = b'{"pairID": "p1", "annotator_labels": ["a", "c"]}\n\n{"pairID": "p2", "annotator_labels": ["b"]}\n'
    rows = _ann(data, "jsonl", field_map={"item_id": "pairID", "labels": "annotator_labels"})
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [(1, "p1", "pos1", 0), (1, "p1", "pos2", 2),
                                                        (3, "p2", "pos1", 1)]


def test_errors_name_row_and_field_and_keep_file_order():
    data = b"item_id,annotator_id,label,timestamp\ni1,w1,z,\n,w2,a,\ni3,w3,a,2024-13-01\ni4,w4,a,2024-01-02 03:04\n"
    assert _errors(read_annotations, open_source(data), "csv", LABELS) == [(1, "label"), (2, "item_id"),
                                                                            (3, "timestamp")]


def test_naive_timestamps_are_utc():
    (row,) = _ann(b"item_id,annotator_id,label,timestamp\ni1,w1,a,2024-01-02T03:04:05\n", "csv")
    assert row[6].isoformat() == "2024-01-02T03:04:05+00:00"


def test_bad_utf8_is_reported_at_its_row():
    assert _errors(read_annotations, open_source(b"item_id,annotator_id,label\ni1,w1,a\ni2,w\xe9,a\n"), "csv",
                   LABELS) == [(2, None)]


def test_header_without_required_columns():
    with pytest.raises(ImportRejected, match=r"lacks the column\(s\) \['item_id'\]"):
        _ann(b"id,annotator_id,label\ni1,w1,a\n", "csv")


@pytest.mark.parametrize(("line", "field"), [
    ('{"item_id": "i", "probabilities": [NaN, 0.5, 0.5]}', "probabilities[a]"),
    ('{"item_id": "i", "probabilities": [Infinity, 0, 0]}', "probabilities[a]"),
    ('{"item_id": "i", "probabilities": [1.2, -0.2, 0]}', "probabilities[b]"),
    ('{"item_id": "i", "probabilities": [0.5, 0.5, 1e-5]}', "probabilities"),
    ('{"item_id": "i", "probabilities": [0.5, 0.5]}', "probabilities"),
    ('{"item_id": "i", "probabilities": {"a": 1}}', "probabilities"),
    ('{"item_id": "i", "probabilities": ["x", 0.5, 0.5]}', "probabilities[a]"),
    ('{"item_id": "i"}', "label"),
])
def test_probability_rows_are_checked(line, field):
    assert _errors(read_predictions, open_source(line.encode() + b"\n"), "jsonl", LABELS) == [(1, field)]


def test_probabilities_within_tolerance_are_accepted():
    ok = 1 - 5e-7
    (row,) = read_predictions(open_source(f'{{"item_id": "i", "probabilities": [{ok}, 0, 0]}}\n'.encode()),
                              "jsonl", LABELS)
    assert math.isclose(sum(row[3]), ok)


def test_prediction_csv_with_one_column_per_label():
    rows = list(read_predictions(open_source(b"item_id,c,b,a\ni1,0.5,0.5,0\n"), "csv", LABELS))
    assert rows == [(1, "i1", None, [0.0, 0.5, 0.5])]


def test_gold_rows():
    rows = list(read_gold(open_source(b"item_id,label,source\ni1,b,\ni2,c,expert\n"), "csv", LABELS,
                          default_source="adjudicated"))
    assert rows == [(1, "i1", 1, "adjudicated"), (2, "i2", 2, "expert")]


def test_gzip_and_format_detection(tmp_path):
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"item_id": "i", "annotator_id": "w", "label": "a"}\n'))
    src = open_source(path)
    assert detect_format(src, "annotations") == "jsonl"
    assert detect_format(open_source(json.dumps([{"id": 1}]).encode()), "annotations") == "label-studio"
    assert detect_format(open_source(b"a\tb\n", name="f.tsv"), "annotations") == "tsv"
    assert [r[1:4] for r in read_annotations(src, "jsonl", LABELS)] == [("i", "w", 0)]


def test_unseekable_stream_is_spooled():
    class Pipe(io.RawIOBase):
        def __init__(self, data):
            self._data = io.BytesIO(data)

        def readable(self):
            return True

        def seekable(self):
            return False

        def readinto(self, b):
            chunk = self._data.read(len(b))
            b[: len(chunk)] = chunk
            return len(chunk)

    src = open_source(io.BufferedReader(Pipe(b"item_id,annotator_id,label\ni1,w1,a\n")))
    assert src.sha256() == src.sha256()
    assert len(list(read_annotations(src, "csv", LABELS))) == 1


def test_rejection_counts_every_bad_row_not_only_the_listed_ones():
    rows = ["item_id,annotator_id,label"] + [f"i{n},w1,{'zz' if n % 3 == 0 else 'a'}" for n in range(474)]
    with pytest.raises(ImportRejected) as info:
        _ann("\n".join(rows).encode(), "csv")
    assert info.value.bad_rows == 158 and len(info.value.errors) == 20
    assert "158 bad rows in all" in str(info.value)


def test_line_bounds_name_the_row_of_the_long_line(monkeypatch):
    from auditor.ingest import sources

    monkeypatch.setattr(sources, "MAX_LINE_BYTES", 40)
    data = b"header\nshort\n" + b"y" * 100 + b"\nshort\n"
    src = open_source(data)
    with pytest.raises(ImportRejected) as info:
        list(src.chunks(max_line=40))
    assert info.value.errors[0].row == 2 and "longer than" in info.value.errors[0].reason
    for chunk_size in (1, 3, 7, 1 << 16):
        monkeypatch.setattr(sources, "_CHUNK", chunk_size)
        with pytest.raises(ImportRejected) as info:
            list(src.chunks(max_line=40))
        assert info.value.errors[0].row == 2, chunk_size
    assert b"".join(open_source(b"a\nbb\n").chunks(max_line=40)) == b"a\nbb\n"
    jsonl = b'{"item_id":"i"}\n{"item_id":"' + b"z" * 80 + b'"}\n'
    with pytest.raises(ImportRejected) as info:
        _ann(jsonl, "jsonl")
    assert info.value.errors[0].row == 2
