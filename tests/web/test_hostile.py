"""Hostile input: no request yields a 5xx, and no rejected request changes the database.

Each case is a request an attacker (or a broken client) can send; each must get a 4xx
that says what is wrong, and the database must be exactly as before.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib

import pytest

from tests.ingest.conftest import fingerprint
from tests.web.conftest import login, make_tenant, new_dataset

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def target(app):
    tenant = make_tenant(app)
    client = app.test_client()
    return tenant, new_dataset(client, tenant.auth(), "hostile")


def _gzip_bomb(size: int) -> bytes:
    """``size`` bytes of one letter and no newline, gzip-compressed (about 1,000 : 1)."""
    out = io.BytesIO()
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"a" * (1 << 20)
    for _ in range(size >> 20):
        out.write(comp.compress(block))
    out.write(comp.flush())
    return out.getvalue()


DEEP = "[" * 100_000


def _cases(ds):
    ann = f"/api/v1/datasets/{ds}/annotations"
    wide = ",".join(f"c{i}" for i in range(10_000))
    return {
        "NUL in a dashboard path": ("get", "/vendors/a%00b", {}),
        "NUL in a query parameter": ("get", "/api/v1/datasets?name=a%00b", {}),
        "NUL in an API path": ("get", "/api/v1/datasets/1%00/annotators", {}),
        "too many query parameters": ("get", "/api/v1/datasets?" + "&".join(f"p{i}=1" for i in range(500)), {}),
        "NUL in an item id (JSON)": ("post", ann, {"json": {"records": [{"item_id": "x\u0000", "annotator_id": "w",
                                                                          "label": "a"}]}}),
        "NUL in a CSV field": ("post", ann, {"data": b"item_id,annotator_id,label\nx\x00y,w1,a\n",
                                             "content_type": "text/csv"}),
        "NUL in an upload's file name": ("post", ann, {"data": {"file": (io.BytesIO(b"item_id,annotator_id,label\n"
                                                                                   b"i1,w1,a\n"), "a\x00.csv")},
                                                       "content_type": "multipart/form-data"}),
        "deep JSON": ("post", ann, {"data": DEEP, "content_type": "application/json"}),
        "deep JSON in NDJSON": ("post", ann, {"data": '{"item_id": "i", "annotator_id": "w", "label": ' + DEEP + "\n",
                                              "content_type": "application/x-ndjson"}),
        "deep JSON to /api/score": ("post", "/api/score", {"data": DEEP, "content_type": "application/json"}),
        "10,000 CSV columns": ("post", ann, {"data": f"item_id,annotator_id,label,{wide}\ni,w,a\n",
                                             "content_type": "text/csv"}),
        "NaN as an item id": ("post", ann, {"data": '{"records": [{"item_id": NaN, "annotator_id": "w", "label": "a"}]}',
                                            "content_type": "application/json"}),
        "1e400 as an item id": ("post", ann, {"data": '{"records": [{"item_id": 1e400, "annotator_id": "w", '
                                                      '"label": "a"}]}', "content_type": "application/json"}),
        "an object as an item id": ("post", ann, {"json": {"records": [{"item_id": {"a": [1, 2]}, "annotator_id": "w",
                                                                         "label": "a"}]}}),
        "gzip of 64 MiB without a newline": ("post", ann, {"data": _gzip_bomb(64 << 20), "content_type": "text/csv",
                                                           "headers": {"Content-Encoding": "gzip"}}),
        "gzipped file of 64 MiB without a newline": ("post", ann, {"data": _gzip_bomb(64 << 20),
                                                                   "content_type": "text/csv"}),
        "empty body": ("post", ann, {"data": b"", "content_type": "text/csv"}),
        "wrong content type": ("post", ann, {"data": b"\x89PNG\r\n", "content_type": "image/png"}),
        "invalid UTF-8": ("post", ann, {"data": b"item_id,annotator_id,label\n\xff\xfe,w,a\n",
                                        "content_type": "text/csv"}),
        "raw Label Studio JSON body": ("post", ann + "?format=label-studio", {"data": b'{"not": "a list"}',
                                                                              "content_type": "application/json"}),
    }


CASES = sorted(_cases(0))


@pytest.mark.parametrize("case", CASES)
def test_hostile_request_gets_a_4xx_and_changes_nothing(app, pg_engine, target, case):
    tenant, ds = target
    method, path, kw = _cases(ds)[case]
    client = app.test_client()
    headers = dict(kw.pop("headers", {}))
    if path.startswith("/api/v1"):
        headers.update(tenant.auth())
    else:
        login(client, tenant)
    before = fingerprint(pg_engine)
    r = getattr(client, method)(path, headers=headers, **kw)
    assert 400 <= r.status_code < 500, (r.status_code, r.get_data(as_text=True)[:300])
    assert fingerprint(pg_engine) == before
    if r.mimetype == "application/json":
        body = r.get_json()
        assert (body[0] if isinstance(body, list) else body).get("message")


def test_a_json_body_without_records_says_what_it_expected(app, target):
    tenant, ds = target
    r = app.test_client().post(f"/api/v1/datasets/{ds}/annotations", data=json.dumps({"rows": []}),
                               headers={**tenant.auth(), "Content-Type": "application/json"})
    assert r.status_code == 400
    assert "records" in r.get_json()["message"]


def test_gzip_is_not_decompressed_without_bound():
    # the fixture itself: a small upload that inflates a thousandfold
    bomb = _gzip_bomb(8 << 20)
    assert len(bomb) < 64 << 10 and len(gzip.decompress(bomb)) == 8 << 20


def _gzip_rows(n_rows: int) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [comp.compress(b"item_id,annotator_id,label\n")]
    row = b"".join(b"i%d,w1,a\n" % k for k in range(10_000))
    for _ in range(n_rows // 10_000):
        out.append(comp.compress(row))
    out.append(comp.flush())
    return b"".join(out)


def test_a_line_without_end_is_refused_at_its_bound_not_read_whole(app, pg_engine, target):
    tenant, ds = target
    before = fingerprint(pg_engine)
    for data in (_gzip_bomb(64 << 20), b"item_id,annotator_id,label\n" + b"x" * (20 << 20)):
        r = app.test_client().post(f"/api/v1/datasets/{ds}/annotations", data=data,
                                   headers={**tenant.auth(), "Content-Type": "text/csv"})
        assert r.status_code == 400 and "longer than" in r.get_json()["message"], r.get_data(as_text=True)[:300]
    assert fingerprint(pg_engine) == before


def test_a_gzip_upload_may_not_decompress_past_the_upload_limit(app, pg_engine, target):
    tenant, ds = target
    bomb = _gzip_rows(400_000)  # about 5 MB of valid rows, in well under 1 MB
    assert len(bomb) < 1 << 20
    before = fingerprint(pg_engine)
    old = app.config["MAX_CONTENT_LENGTH"]
    app.config["MAX_CONTENT_LENGTH"] = 1 << 20
    try:
        r = app.test_client().post(f"/api/v1/datasets/{ds}/annotations", data=bomb,
                                   headers={**tenant.auth(), "Content-Type": "text/csv"})
    finally:
        app.config["MAX_CONTENT_LENGTH"] = old
    assert r.status_code == 413 and "decompresses to more than" in r.get_json()["message"]
    assert fingerprint(pg_engine) == before


def test_the_dataset_page_shows_a_failed_audit_and_its_cause(app):
    from datetime import timedelta

    from auditor.audit import runner
    from auditor.audit.store import claim_audit
    from auditor.db import make_session_factory, session_scope

    tenant = make_tenant(app)
    client = app.test_client()
    ds = new_dataset(client, tenant.auth(), "fails")
    r = client.post(f"/api/v1/datasets/{ds}/annotations", data="item_id,annotator_id,label\ni1,w1,a\ni1,w2,b\n",
                    headers={**tenant.auth(), "Content-Type": "text/csv"})
    assert r.status_code == 202
    factory = make_session_factory(app.extensions["auditor.engine"])
    with session_scope(factory) as s:
        c = claim_audit(s, ds, task_id="t-fail", lease=timedelta(seconds=60))
    runner.fail(factory, c.run_id, task_id="t-fail", exc=ValueError("the statistics cannot take this <data>"))
    login(client, tenant)
    page = client.get(f"/datasets/{ds}").get_data(as_text=True)
    assert "The last audit failed" in page and "not retried" in page
    assert "ValueError: the statistics cannot take this &lt;data&gt;" in page


def test_a_chunked_json_body_over_the_upload_limit_is_a_413(app, pg_engine):
    """Without a Content-Length (chunked transfer, as a WSGI server hands it on), a JSON
    body past the upload limit is a 413 naming the limit, not a 400 "must be JSON"; one
    within the limit is read and accepted."""
    from auditor.web import create_app
    from tests.web.conftest import app_config

    small = create_app(app_config(pg_engine, MAX_CONTENT_LENGTH=4096))
    # The session's app keeps dispatching the audits (a new Celery app makes itself current).
    app.extensions["celery"].set_default()
    app.extensions["celery"].set_current()
    tenant = make_tenant(small)
    client = small.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "chunked", "labels": ["a", "b"]},
                     headers=tenant.auth()).get_json()
    url = f"/api/v1/datasets/{ds['id']}/annotations"
    chunked = {"Transfer-Encoding": "chunked", "Content-Type": "application/json", **tenant.auth()}
    terminated = {"wsgi.input_terminated": True}

    def post(n):
        body = json.dumps({"records": [{"item_id": f"i{i}", "annotator_id": "w", "label": "a"}
                                       for i in range(n)]}).encode()
        return len(body), client.post(url, input_stream=io.BytesIO(body), headers=chunked,
                                      environ_overrides=terminated)

    before = fingerprint(pg_engine)
    size, r = post(200)
    assert size > 4096 and r.status_code == 413, r.get_data(as_text=True)[:300]
    assert "4096" in r.get_json()["message"]
    assert fingerprint(pg_engine) == before
    size, r = post(5)
    assert size < 4096 and r.status_code == 202, r.get_data(as_text=True)[:300]
    # A chunked CSV over the limit was imported as its first 4096 bytes: now a 413, nothing written.
    before = fingerprint(pg_engine)
    csv = ("item_id,annotator_id,label\n" + "".join(f"item{i},w{i},a\n" for i in range(400))).encode()
    r = client.post(url, input_stream=io.BytesIO(csv), environ_overrides=terminated,
                    headers={**chunked, "Content-Type": "text/csv"})
    assert r.status_code == 413, r.get_data(as_text=True)[:300]
    assert fingerprint(pg_engine) == before


def test_a_label_studio_export_posted_as_a_raw_json_body_is_read_as_one(app, target):
    """A Label Studio export is a JSON list of tasks; posted as ``application/json`` it got
    a 400 whose message only echoed the body. Now it is read as that format (and a bad
    one is refused naming the row and field)."""
    tenant, _ = target
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "studio-raw", "labels": ["pos", "neg"]},
                     headers=tenant.auth()).get_json()
    url = f"/api/v1/datasets/{ds['id']}/annotations"
    export = [{"id": 1, "data": {"item_id": "t1"},
               "annotations": [{"completed_by": 3, "result": [{"type": "choices", "value": {"choices": ["pos"]}}]},
                               {"completed_by": 4, "ground_truth": True,
                                "result": [{"type": "choices", "value": {"choices": ["neg"]}}]}]}]
    r = client.post(url, json=export, headers=tenant.auth())
    assert r.status_code == 202, r.get_data(as_text=True)[:300]
    bad = [{"id": 2, "data": {"item_id": "t2"},
            "annotations": [{"completed_by": 3, "result": [{"type": "choices", "value": {"choices": ["maybe"]}}]}]}]
    r = client.post(url, json=bad, headers=tenant.auth())
    assert r.status_code == 400
    body = r.get_json()
    assert body["errors"][0]["row"] == 1 and "maybe" in body["message"]
    r = client.post(f"/api/v1/datasets/{ds['id']}/gold", json=export, headers=tenant.auth())
    assert r.status_code == 400 and r.get_json()["field"] == "file_format"
