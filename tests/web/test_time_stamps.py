"""Time stamps outside the accepted range (1970-01-01 to now + 1 day) are refused at every door.

Issue 33, defect 2: a vendor upload stamped ``9999-12-31T23:59:59+00:00`` was accepted, and
every later audit of the dataset failed in the quality windows (``OverflowError: date value
out of range``); a Label Studio event so stamped also froze its annotation. Each door below
(file and JSON imports over HTTP, Label Studio exports, events and the command line) now
answers 4xx naming the row and field, and writes nothing.
"""

from __future__ import annotations

import gzip
import io
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from tests.ingest.conftest import fingerprint
from tests.web.conftest import make_tenant

pytestmark = pytest.mark.services

FAR = "9999-12-31T23:59:59+00:00"


def _tomorrow_and_a_bit() -> str:
    return (datetime.now(UTC) + timedelta(days=1, hours=2)).isoformat()


@pytest.fixture(scope="module")
def tenant(app):
    return make_tenant(app)


def _dataset(app, tenant, *, seeded: bool) -> int:
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": f"stamps-{uuid.uuid4().hex[:8]}", "labels": ["a", "b"]},
                     headers=tenant.auth()).get_json()["id"]
    if seeded:  # a later batch: CSV goes through the COPY staging path, not the first-load bulk path
        r = client.post(f"/api/v1/datasets/{ds}/annotations", data="item_id,annotator_id,label\ni0,w0,a\n",
                        headers={**tenant.auth(), "Content-Type": "text/csv"})
        assert r.status_code == 202, r.get_json()
    return ds


def _csv(stamp: str, sep: str = ",") -> bytes:
    rows = [["item_id", "annotator_id", "label", "timestamp"], ["i1", "w1", "a", "2026-01-05T09:00:00Z"],
            ["i2", "w1", "b", stamp], ["i3", "w2", "a", ""]]
    return "".join(sep.join(r) + "\n" for r in rows).encode()


def _jsonl(stamp: str) -> bytes:
    rows = [{"item_id": "i1", "annotator_id": "w1", "label": "a", "timestamp": "2026-01-05T09:00:00Z"},
            {"item_id": "i2", "annotator_id": "w1", "label": "b", "timestamp": stamp}]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _label_studio(stamp: str) -> list:
    def ann(user, choice, when):
        return {"completed_by": user, "created_at": when, "result": [{"type": "choices", "value": {"choices": [choice]}}]}

    return [{"id": 1, "data": {"item_id": "t1"}, "annotations": [ann(3, "a", "2026-01-05T09:00:00Z")]},
            {"id": 2, "data": {"item_id": "t2"}, "annotations": [ann(3, "b", stamp)]}]


DOORS = {
    # name: (dataset already holds a batch, request keyword arguments for the stamp)
    "csv, first load (bulk path)": (False, lambda s: {"data": _csv(s), "content_type": "text/csv"}),
    "csv, later batch (COPY path)": (True, lambda s: {"data": _csv(s), "content_type": "text/csv"}),
    "tsv": (True, lambda s: {"data": _csv(s, "\t"), "content_type": "text/tab-separated-values"}),
    "gzip csv upload": (False, lambda s: {"data": {"file": (io.BytesIO(gzip.compress(_csv(s))), "a.csv.gz")},
                                          "content_type": "multipart/form-data"}),
    "jsonl": (False, lambda s: {"data": _jsonl(s), "content_type": "application/x-ndjson"}),
    "json records": (False, lambda s: {"json": {"records": [json.loads(x) for x in _jsonl(s).splitlines()]}}),
    "label studio export": (False, lambda s: {"json": _label_studio(s)}),
}


@pytest.mark.parametrize("door", sorted(DOORS))
@pytest.mark.parametrize("stamp", [FAR, "1969-12-31T23:59:59Z", "tomorrow and a bit"])
def test_an_out_of_range_time_stamp_is_refused_at_every_door(app, pg_engine, tenant, door, stamp):
    stamp = _tomorrow_and_a_bit() if stamp == "tomorrow and a bit" else stamp
    seeded, request = DOORS[door]
    ds = _dataset(app, tenant, seeded=seeded)
    before = fingerprint(pg_engine)
    r = app.test_client().post(f"/api/v1/datasets/{ds}/annotations", headers=tenant.auth(), **request(stamp))
    body = r.get_json()
    assert r.status_code == 400, body
    assert body["field"] == "timestamp" and body["errors"][0]["row"] == 2, body
    assert "outside the accepted range of time stamps" in body["message"], body
    assert fingerprint(pg_engine) == before
    # The same batch with a time stamp inside the range is accepted.
    r = app.test_client().post(f"/api/v1/datasets/{ds}/annotations", headers=tenant.auth(),
                               **request("2026-01-06T10:00:00+02:00"))
    assert r.status_code == 202, r.get_json()


def test_the_cli_refuses_an_out_of_range_time_stamp_naming_the_row(tmp_path):
    from auditor.cli import main

    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    run = lambda *a: CliRunner().invoke(main, [*a, "--url", url], catch_exceptions=False)  # noqa: E731
    assert run("db", "upgrade").exit_code == 0
    assert run("datasets", "create", "d", "--labels", "a,b").exit_code == 0
    bad = tmp_path / "bad.csv"
    bad.write_bytes(_csv(FAR))
    out = run("import", "annotations", str(bad), "--dataset", "d")
    assert out.exit_code == 1
    assert "row 2, field 'timestamp'" in out.output and "outside the accepted range" in out.output
    assert "items=0\tdata_version=0" in run("datasets", "list").output


def test_a_label_studio_event_stamped_far_ahead_is_refused_and_a_stored_one_does_not_freeze(app, pg_engine):
    """The webhook refuses ``updated_at`` out of range (422 naming the field, nothing written);
    an annotation an older version stored with such a stamp takes Label Studio's next real
    update instead of answering "unchanged" forever."""
    from sqlalchemy import update

    from auditor.db import session_scope
    from auditor.db.models import LabelStudioAnnotation
    from tests.integrations.test_labelstudio_events import Connector, annotation, created

    c = Connector(pg_engine)
    client = app.test_client()
    url, ok = f"/hooks/label-studio/{c.id}", {"X-Auditor-Webhook-Secret": c.secret}
    first = created(annotation(1, 11, 1, "Pos", 1), "r1")
    assert client.post(url, json=first, headers=ok).get_json()["status"] == "changed"
    before = fingerprint(pg_engine)
    far = created(annotation(1, 11, 1, "Neg", 2), "r1", "ANNOTATION_UPDATED")
    far["annotation"]["updated_at"] = "9999-12-31T23:59:59Z"
    r = client.post(url, json=far, headers=ok)
    assert r.status_code == 422 and r.get_json()["field"] == "annotation.updated_at", r.get_json()
    assert "outside the accepted range" in r.get_json()["message"]
    assert fingerprint(pg_engine) == before
    # An older version let the stamp in: the mirror row holds year 9999.
    with session_scope(c.factory) as s:
        s.execute(update(LabelStudioAnnotation).where(LabelStudioAnnotation.connector_id == c.id)
                  .values(ls_updated_at=datetime(9999, 12, 31, tzinfo=UTC)))
    real = created(annotation(1, 11, 1, "Neg", 3), "r1", "ANNOTATION_UPDATED")
    r = client.post(url, json=real, headers=ok)
    assert r.status_code == 200 and r.get_json()["status"] == "changed", r.get_json()
    assert c.state()["votes"] == {("r1", "1"): "negative"}
