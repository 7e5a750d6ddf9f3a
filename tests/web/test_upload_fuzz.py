"""Property-based fuzz of every import format over real HTTP (``auditor serve``, gunicorn):
CSV, TSV, wide CSV, JSONL, Label Studio JSON, each also gzip-compressed, as annotations,
gold and predictions. Whatever the bytes: no 5xx, nothing written when the batch is
refused, and no web process above 512 MB (issue 33, defects 3 and 6: a 3.6 MB Label Studio
``.json.gz`` took a web process to 6.2 GB; CR-only line ends, odd JSON types and NUL
characters gave 500s).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import uuid
import zlib
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.db import make_engine
from tests.ingest.conftest import fingerprint
from tests.web.conftest import make_tenant
from tests.web.served import serve

pytestmark = pytest.mark.services

MEMORY_LIMIT_MB = 512
UPLOAD_LIMIT = 96 << 20
LABELS = ["neg", "pos"]


@pytest.fixture(scope="module")
def server(pg_database, tmp_path_factory):
    url = pg_database().render_as_string(hide_password=False)
    with serve(url, tmp_path_factory.mktemp("fuzz"), threads=2, AUDITOR_MAX_UPLOAD_BYTES=str(UPLOAD_LIMIT),
               AUDITOR_INGEST_LIMIT="100000 per minute") as served:
        engine = make_engine(url)
        tenant = make_tenant(SimpleNamespace(extensions={"auditor.engine": engine}))
        status, model = served.json("POST", "/api/v1/models", {"name": "m"}, tenant.auth())
        assert status == 201, model
        status, release = served.json("POST", f"/api/v1/models/{model['id']}/releases", {"version": "1"},
                                      tenant.auth())
        assert status == 201, release
        yield SimpleNamespace(http=served, tenant=tenant, engine=engine, release=release["id"])
        engine.dispose()


def _dataset(server) -> int:
    status, ds = server.http.json("POST", "/api/v1/datasets", {"name": f"fuzz-{uuid.uuid4().hex[:10]}",
                                                               "labels": LABELS}, server.tenant.auth())
    assert status == 201, ds
    return ds["id"]


# --- what a file may hold ---------------------------------------------------------------------

ODD_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
TEXT = st.one_of(st.sampled_from(["", "i1", "i2", "w1", "neg", "pos", "acme", "crowd", "expert", "x" * 600,
                                  "2026-01-05T09:00:00Z", "9999-12-31T23:59:59+00:00", "1969-01-01",
                                  "2026-13-45T00:00:00Z", "a\x00b", "\r", '"', "\u2028", "🙂"]), ODD_TEXT)
JSON_SCALAR = st.one_of(TEXT, st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.booleans(), st.none())
JSON_VALUE = st.recursive(JSON_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                               st.dictionaries(TEXT, inner, max_size=3)), max_leaves=6)
FIELDS = ["item_id", "annotator_id", "label", "vendor", "tier", "timestamp", "source", "probabilities", "labels"]


def _record(value):
    return st.dictionaries(st.sampled_from(FIELDS), value, max_size=7)


def _csv_bytes(records: list[dict], delimiter: str, line_end: str) -> bytes:
    names = list(dict.fromkeys(k for r in records for k in r)) or ["item_id"]
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator=line_end)
    writer.writerow(names)
    for r in records:
        writer.writerow([r.get(k, "") for k in names])
    return out.getvalue().encode("utf-8", "surrogatepass")


def _wide_bytes(rows: list[list[str]], line_end: str) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=line_end)
    writer.writerow(["item"] + [f"w{k}" for k in range(max((len(r) for r in rows), default=1))])
    for r in rows:
        writer.writerow(r)
    return out.getvalue().encode("utf-8", "surrogatepass")


def _json_bytes(doc) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


CHOICE = st.one_of(st.sampled_from(LABELS), JSON_VALUE)
ANNOTATION = st.one_of(JSON_VALUE, st.fixed_dictionaries(
    {"completed_by": st.one_of(st.integers(1, 5), JSON_VALUE),
     "result": st.one_of(st.just([{"type": "choices", "value": {"choices": ["pos"]}}]), st.lists(
         st.fixed_dictionaries({"type": st.just("choices"), "value": st.fixed_dictionaries(
             {"choices": st.one_of(st.lists(CHOICE, max_size=2), CHOICE)})}), max_size=2), JSON_VALUE)},
    optional={"ground_truth": JSON_VALUE, "was_cancelled": JSON_VALUE, "created_at": TEXT}))
TASK = st.one_of(JSON_VALUE, st.fixed_dictionaries(
    {"id": st.one_of(st.integers(1, 50), JSON_VALUE), "data": st.one_of(st.fixed_dictionaries({"item_id": TEXT}),
                                                                        JSON_VALUE)},
    optional={"annotations": st.one_of(st.lists(ANNOTATION, max_size=3), JSON_VALUE),
              "predictions": st.one_of(st.lists(st.fixed_dictionaries(
                  {"model_version": st.one_of(st.just("1"), JSON_VALUE), "result": JSON_VALUE}), max_size=2),
                  JSON_VALUE)}))


@st.composite
def upload(draw, fmt: str) -> tuple[bytes, str]:
    line_end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    if fmt in ("csv", "tsv"):
        records = draw(st.lists(_record(TEXT), max_size=6))
        data = _csv_bytes(records, "," if fmt == "csv" else "\t", line_end)
    elif fmt == "wide":
        data = _wide_bytes(draw(st.lists(st.lists(TEXT, max_size=4), max_size=5)), line_end)
    elif fmt == "jsonl":
        records = draw(st.lists(st.one_of(_record(JSON_VALUE), JSON_VALUE), max_size=6))
        data = "".join(json.dumps(r, ensure_ascii=False) + line_end for r in records).encode("utf-8", "surrogatepass")
    else:
        data = _json_bytes(draw(st.one_of(st.lists(TASK, max_size=4), JSON_VALUE)))
    # a damaged file: a byte changed, inserted or cut off
    damage = draw(st.sampled_from(["none", "none", "cut", "insert"]))
    if damage != "none" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] if damage == "cut" else data[:at] + draw(st.sampled_from(
            [b"\x00", b"\xff", b'"', b"\r", b"[", b"{", b"\xef\xbb\xbf"])) + data[at:]
    return data, line_end


TARGETS = {  # format → the kinds of batch it is sent as
    "csv": ("annotations", "gold", "predictions"), "tsv": ("annotations", "gold"), "wide": ("annotations",),
    "jsonl": ("annotations", "gold", "predictions"), "label-studio": ("annotations", "predictions"),
}
CONTENT_TYPES = {"csv": "text/csv", "tsv": "text/tab-separated-values", "wide": "text/csv",
                 "jsonl": "application/x-ndjson", "label-studio": "application/json"}
SUFFIX = {"csv": ".csv", "tsv": ".tsv", "wide": ".csv", "jsonl": ".jsonl", "label-studio": ".json"}


def _multipart(data: bytes, filename: str) -> tuple[bytes, str]:
    boundary = "fuzz" + uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def _send(server, ds: int, kind: str, fmt: str, data: bytes, gzipped: bool):
    query = f"?file_format={fmt}"
    if kind == "predictions":
        query += f"&release_id={server.release}"
    path = f"/api/v1/datasets/{ds}/{kind}{query}"
    if gzipped:
        body, ctype = _multipart(gzip.compress(data), "upload" + SUFFIX[fmt] + ".gz")
    else:
        body, ctype = data, CONTENT_TYPES[fmt]
    return server.http.request("POST", path, body, {**server.tenant.auth(), "Content-Type": ctype})


def _check(server, ds: int, kind: str, fmt: str, data: bytes, gzipped: bool) -> None:
    before = fingerprint(server.engine)
    status, body, _ = _send(server, ds, kind, fmt, data, gzipped)
    assert status < 500, (status, body[:500], server.http.output()[-2000:])
    if status >= 400:
        assert fingerprint(server.engine) == before, (status, body[:300])
        assert json.loads(body)["message"]


FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("fmt", sorted(TARGETS))
def test_any_upload_in_any_format_gets_an_answer_and_a_refusal_writes_nothing(server, fmt, gzipped):
    ds = _dataset(server)

    @FUZZ
    @given(drawn=upload(fmt), kind=st.sampled_from(TARGETS[fmt]))
    def check(drawn, kind):
        _check(server, ds, kind, fmt, drawn[0], gzipped)

    check()


# --- bombs: small uploads that inflate, and JSON that nests ----------------------------------


def _deflate_repeat(head: bytes, unit: bytes, size: int, tail: bytes = b"") -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = unit * max(1, (1 << 20) // len(unit))
    out = [comp.compress(head)]
    for _ in range(size // len(block)):
        out.append(comp.compress(block))
    out.append(comp.compress(tail))
    out.append(comp.flush())
    return b"".join(out)


TASK_UNIT = (b'{"id": 1, "data": {"item_id": "t"}, "annotations": [{"completed_by": 3, '
             b'"result": [{"type": "choices", "value": {"choices": ["pos"]}}]}]},')
BOMBS = {
    # tasks until past the upload limit: refused at the limit, read one task at a time
    "Label Studio .json.gz over the limit": ("annotations", "label-studio", _deflate_repeat(
        b"[", TASK_UNIT, UPLOAD_LIMIT + (8 << 20), b"{}]"), 413),
    # 64 MB of tasks, within the limit: parsed whole, this took gigabytes
    "Label Studio .json.gz of 64 MB": ("annotations", "label-studio", _deflate_repeat(
        b"[", b'{"id": 1, "data": {}, "annotations": [{}, {}, {}, {}, {}, {}, {}, {}, {}, {}]},', 64 << 20,
        b"{}]"), 400),
    "Label Studio .json.gz nested 50 million deep": ("annotations", "label-studio",
                                                     _deflate_repeat(b"", b"[", 50 << 20), 400),
    "one Label Studio task of 64 MB": ("annotations", "label-studio", _deflate_repeat(
        b'[{"id": 1, "data": {"item_id": "', b"x", 64 << 20, b'"}}]'), 400),
    "JSONL .gz of one 64 MB line": ("annotations", "jsonl", _deflate_repeat(b'{"item_id": "', b"x", 64 << 20), 400),
    "CSV .gz of a 64 MB header": ("annotations", "csv", _deflate_repeat(b"", b",", 64 << 20), 400),
    "wide CSV .gz of 3 million columns": ("annotations", "wide", _deflate_repeat(b"item", b",w", 6 << 20), 400),
    "gold CSV .gz over the limit": ("gold", "csv", _deflate_repeat(b"item_id,label\n", b"i,neg\n",
                                                                   UPLOAD_LIMIT + (8 << 20)), 413),
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_compressed_and_nested_bombs_are_refused_within_bounded_memory(server, bomb):
    kind, fmt, gz, expected = BOMBS[bomb]
    assert len(gz) < 4 << 20
    ds = _dataset(server)
    before = fingerprint(server.engine)
    body, ctype = _multipart(gz, "bomb" + SUFFIX[fmt] + ".gz")
    status, answer, _ = server.http.request("POST", f"/api/v1/datasets/{ds}/{kind}?file_format={fmt}", body,
                                            {**server.tenant.auth(), "Content-Type": ctype}, timeout=300)
    assert status == expected, (status, answer[:400])
    assert fingerprint(server.engine) == before
    assert server.http.peak_rss_mb() < MEMORY_LIMIT_MB, (bomb, server.http.peak_rss_mb())


def test_no_web_process_grew_past_512_mb(server):
    """After every fuzzed upload and bomb above (this module's server served them all)."""
    assert 0 < server.http.peak_rss_mb() < MEMORY_LIMIT_MB, server.http.peak_rss_mb()
