"""Malformed uploads that answered 500 (issue 33, defect 6): each now gets a 4xx naming what is
wrong, and nothing is written. Through the real app on PostgreSQL."""

from __future__ import annotations

import json

import pytest

from tests.ingest.conftest import fingerprint
from tests.web.conftest import make_tenant, new_dataset

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def target(app):
    tenant = make_tenant(app)
    client = app.test_client()
    ds = new_dataset(client, tenant.auth(), "malformed")
    rel = client.post("/api/v1/models", json={"name": "m"}, headers=tenant.auth()).get_json()["id"]
    release = client.post(f"/api/v1/models/{rel}/releases", json={"version": "1"}, headers=tenant.auth()).get_json()
    # a batch already there, so later CSVs take the staging paths too
    r = client.post(f"/api/v1/datasets/{ds}/annotations", data="item_id,annotator_id,label\ni0,w0,a\n",
                    headers={**tenant.auth(), "Content-Type": "text/csv"})
    assert r.status_code == 202
    return tenant, ds, release["id"]


def _studio(result) -> list:
    return [{"id": 1, "data": {"item_id": "t1"}, "annotations": [{"completed_by": 3, "result": result}]}]


LONG = "x" * 2_000


def _cases(ds: int, release: int) -> dict:
    ann, gold = f"/api/v1/datasets/{ds}/annotations", f"/api/v1/datasets/{ds}/gold"
    preds = f"/api/v1/datasets/{ds}/predictions?release_id={release}"
    wide = ",".join(f"p{i}" for i in range(10_000))
    return {
        "CR-only line endings (CSV)": (ann, {"data": b"item_id,annotator_id,label\ri1,w1,a\ri2,w1,b\r",
                                             "content_type": "text/csv"}),
        "CR-only line endings (TSV)": (ann, {"data": b"item_id\tannotator_id\tlabel\ri1\tw1\ta\r",
                                             "content_type": "text/tab-separated-values"}),
        "CR-only line endings (gold)": (gold, {"data": b"item_id,label\ri1,a\ri2,b\r", "content_type": "text/csv"}),
        "CR-only line endings (predictions)": (preds, {"data": b"item_id,label\ri1,a\r", "content_type": "text/csv"}),
        "Label Studio result a number": (ann + "?file_format=label-studio", {"json": _studio(5)}),
        "Label Studio result a boolean": (ann + "?file_format=label-studio", {"json": _studio(True)}),
        "Label Studio result a string": (ann + "?file_format=label-studio", {"json": _studio("a")}),
        "Label Studio region value a list": (ann, {"json": _studio([{"type": "choices", "value": [1]}])}),
        "Label Studio choices a number": (ann, {"json": _studio([{"type": "choices", "value": {"choices": 7}}])}),
        "Label Studio choice an object": (ann, {"json": _studio([{"type": "choices",
                                                                  "value": {"choices": [{"a": 1}]}}])}),
        "Label Studio annotations an object": (ann, {"json": [{"id": 1, "data": {"item_id": "t"},
                                                               "annotations": {"a": 1}}]}),
        "Label Studio predictions a number": (preds + "&file_format=label-studio",
                                              {"json": [{"id": 1, "data": {"item_id": "t"}, "predictions": 3}]}),
        "NUL in a JSONL vendor": (ann, {"data": b'{"item_id": "i", "annotator_id": "w", "label": "a", '
                                                b'"vendor": "v\\u0000x"}\n', "content_type": "application/x-ndjson"}),
        "NUL in a JSON vendor": (ann, {"json": {"records": [{"item_id": "i", "annotator_id": "w", "label": "a"}],
                                                "vendor": "v\u0000"}}),
        "NUL in a CSV vendor": (ann, {"data": b"item_id,annotator_id,label,vendor\ni,w,a,v\x00x\n",
                                      "content_type": "text/csv"}),
        "a vendor of 300 characters (CSV)": (ann, {"data": f"item_id,annotator_id,label,vendor\ni,w,a,{'v' * 300}\n"
                                                  .encode(), "content_type": "text/csv"}),
        "a vendor of 300 characters (JSONL)": (ann, {"data": json.dumps({"item_id": "i", "annotator_id": "w",
                                                                          "label": "a", "vendor": "v" * 300}).encode(),
                                                    "content_type": "application/x-ndjson"}),
        "a gold source of 300 characters": (gold, {"data": f"item_id,label,source\ni,a,{'s' * 300}\n".encode(),
                                                   "content_type": "text/csv"}),
        "NUL in a gold source (JSONL)": (gold, {"data": b'{"item_id": "i", "label": "a", "source": "s\\u0000"}\n',
                                                "content_type": "application/x-ndjson"}),
        "NUL in a gold source (CSV)": (gold, {"data": b"item_id,label,source\ni,a,s\x00t\n", "content_type": "text/csv"}),
        "a tier of 5 as a Label Studio body": (ann + "?file_format=label-studio", {"json": {"tier": 5}}),
        "an object as a Label Studio body": (ann + "?file_format=label-studio", {"json": {"records": []}}),
        "predictions CSV with 10,000 columns, none item_id": (preds, {"data": f"{wide}\n".encode(),
                                                                      "content_type": "text/csv"}),
        "predictions CSV with 1,500 columns, none item_id": (preds, {"data": ",".join(
            f"probability_column_{i}" for i in range(1_500)).encode() + b"\n", "content_type": "text/csv"}),
        "gold CSV with 10,000 columns, none label": (gold, {"data": f"item_id,{wide}\n".encode(),
                                                            "content_type": "text/csv"}),
        "annotations CSV with 10,000 columns, no label": (ann, {"data": f"item_id,annotator_id,{wide}\n".encode(),
                                                                "content_type": "text/csv"}),
        "gold rejection messages over 10 KB": (gold, {"json": {"records": [
            {"item_id": f"i{k}", "label": LONG + str(k)} for k in range(60)]}}),
        "prediction rejection messages over 10 KB": (preds, {"json": {"records": [
            {"item_id": f"i{k}", "label": LONG + str(k)} for k in range(60)]}}),
        "annotation rejection messages over 10 KB": (ann, {"json": {"records": [
            {"item_id": f"i{k}", "annotator_id": "w", "label": LONG + str(k)} for k in range(60)]}}),
    }


CASES = sorted(_cases(0, 0))


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_upload_gets_a_4xx_naming_the_problem_and_writes_nothing(app, pg_engine, target, case):
    tenant, ds, release = target
    url, kw = _cases(ds, release)[case]
    before = fingerprint(pg_engine)
    r = app.test_client().post(url, headers=tenant.auth(), **kw)
    assert 400 <= r.status_code < 500, (r.status_code, r.get_data(as_text=True)[:400])
    body = r.get_json()
    assert body["message"] and len(json.dumps(body)) < 64_000, body
    assert fingerprint(pg_engine) == before
    # the connection the request used is still good: the next request works
    assert app.test_client().get(f"/api/v1/datasets/{ds}", headers=tenant.auth()).status_code == 200
