"""Every /api/v1 endpoint on a dataset filled through the API and audited by a real audit run."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.web.conftest import eager_audits, make_tenant

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def ctx(seeded):
    return seeded


def get(client, ctx, path, role="admin", **kw):
    r = client.get("/api/v1" + path, headers=ctx.tenant.auth(role), **kw)
    return r


def rows_of_csv(response) -> list[dict]:
    assert response.mimetype == "text/csv"
    return list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))


def test_me(client, ctx):
    body = get(client, ctx, "/me").get_json()
    assert body["role"] == "admin" and body["workspace"] == ctx.tenant.slug
    vendor = get(client, ctx, "/me", role="vendor").get_json()
    assert vendor["vendor"] == "acme-labeling" and vendor["datasets"] == [ctx.dataset_id]


def test_datasets_list_read_filter_paginate_csv(client, ctx):
    admin = ctx.tenant.auth()
    r = client.post("/api/v1/datasets", json={"name": "second set", "labels": ["a", "b", "c"]}, headers=admin)
    assert r.status_code == 201
    body = get(client, ctx, "/datasets").get_json()
    assert body["total"] == 2 and {d["name"] for d in body["items"]} == {"sentiment", "second set"}
    page = get(client, ctx, "/datasets?per_page=1&page=2").get_json()
    assert page["page"] == 2 and len(page["items"]) == 1 and page["total"] == 2
    assert get(client, ctx, "/datasets?name=sec").get_json()["total"] == 1
    one = get(client, ctx, f"/datasets/{ctx.dataset_id}").get_json()
    assert one["labels"] == ["negative", "positive"] and one["data_version"] == 2 + len(ctx.release_ids)
    assert {r["name"] for r in rows_of_csv(get(client, ctx, "/datasets?format=csv"))} == {"sentiment", "second set"}


def test_dataset_create_conflict_and_field_errors(client, ctx):
    admin = ctx.tenant.auth()
    r = client.post("/api/v1/datasets", json={"name": "sentiment", "labels": ["x", "y"]}, headers=admin)
    assert r.status_code == 409 and r.get_json()["field"] == "name"
    r = client.post("/api/v1/datasets", json={"name": "z", "labels": ["x", "x"]}, headers=admin)
    assert r.status_code == 400 and r.get_json()["field"] == "labels"
    r = client.post("/api/v1/datasets", json={"name": "z", "labels": ["x", 3]}, headers=admin)
    assert r.status_code == 400 and r.get_json()["field"] == "labels[1]"
    r = client.post("/api/v1/datasets", json={"labels": ["x", "y"]}, headers=admin)
    assert r.status_code == 400 and "name" in r.get_json()["message"]
    r = get(client, ctx, "/datasets?per_page=100000")
    assert r.status_code == 400 and r.get_json()["field"] == "per_page"


def test_items(client, ctx):
    body = get(client, ctx, f"/datasets/{ctx.dataset_id}/items?per_page=500").get_json()
    assert body["total"] == 120
    annotated = {}
    for row in ctx.data.annotations:
        annotated[row["item_id"]] = annotated.get(row["item_id"], 0) + 1
    assert {i["external_id"]: i["n_labels"] for i in body["items"]} == annotated
    gold = get(client, ctx, f"/datasets/{ctx.dataset_id}/items?has_gold=true&per_page=500").get_json()
    assert gold["total"] == len(ctx.data.gold)
    assert {g["item_id"]: g["label"] for g in ctx.data.gold} == {i["external_id"]: i["gold_label"] for i in gold["items"]}
    first = body["items"][0]
    assert get(client, ctx, f"/datasets/{ctx.dataset_id}/items/{first['id']}").get_json() == first
    one = get(client, ctx, f"/datasets/{ctx.dataset_id}/items?external_id={first['external_id']}").get_json()
    assert one["items"] == [first]
    many = get(client, ctx, f"/datasets/{ctx.dataset_id}/items?min_labels=4&per_page=500").get_json()
    assert all(i["n_labels"] >= 4 for i in many["items"]) and many["total"] == sum(v >= 4 for v in annotated.values())
    r = client.post(f"/api/v1/datasets/{ctx.dataset_id}/items", headers=ctx.tenant.auth(),
                    json={"items": [{"external_id": first["external_id"]}, {"external_id": "new-item"}]})
    assert r.status_code == 201 and r.get_json() == {"created": 1, "existing": 1}
    assert get(client, ctx, f"/datasets/{ctx.dataset_id}/items/999999").status_code == 404
    assert len(rows_of_csv(get(client, ctx, f"/datasets/{ctx.dataset_id}/items?format=csv"))) == 121


def test_annotators_and_vendors(client, ctx):
    body = get(client, ctx, "/annotators?per_page=500").get_json()
    expected = {row["annotator_id"] for row in ctx.data.annotations}
    assert {a["external_id"] for a in body["items"]} == expected
    one = body["items"][0]
    assert get(client, ctx, f"/annotators/{one['id']}").get_json() == one
    r = client.post("/api/v1/annotators", headers=ctx.tenant.auth(),
                    json={"external_id": "new-rater", "vendor": "acme-labeling", "tier": "expert"})
    assert r.status_code == 201 and r.get_json()["vendor"] == "acme-labeling"
    experts = get(client, ctx, "/annotators?tier=expert&per_page=500").get_json()["items"]
    assert [a["external_id"] for a in experts] == ["new-rater"]
    vendors = get(client, ctx, "/vendors").get_json()["items"]
    by_name = {v["name"]: v for v in vendors}
    assert set(by_name) >= {"acme-labeling", "bolt-annotations"}
    acme = {row["annotator_id"] for row in ctx.data.annotations if row.get("vendor") == "acme-labeling"}
    assert by_name["acme-labeling"]["n_annotators"] == len(acme) + 1
    assert by_name["acme-labeling"]["n_experts"] == 1
    assert get(client, ctx, "/vendors/acme-labeling").get_json() == by_name["acme-labeling"]
    assert get(client, ctx, "/vendors/nobody").status_code == 404
    assert rows_of_csv(get(client, ctx, "/vendors?format=csv"))


def test_models_and_releases(client, ctx):
    models = get(client, ctx, "/models").get_json()["items"]
    assert [m["name"] for m in models] == ["sentiment-classifier"]
    assert get(client, ctx, f"/models/{ctx.model_id}").get_json()["id"] == ctx.model_id
    rels = get(client, ctx, f"/models/{ctx.model_id}/releases").get_json()["items"]
    assert [r["version"] for r in rels] == list(ctx.release_ids)  # oldest first
    rid = ctx.release_ids["2.0"]
    assert get(client, ctx, f"/releases/{rid}").get_json()["version"] == "2.0"
    r = client.post("/api/v1/models", json={"name": "other"}, headers=ctx.tenant.auth("analyst"))
    assert r.status_code == 201
    r = client.post(f"/api/v1/models/{r.get_json()['id']}/releases", headers=ctx.tenant.auth("analyst"),
                    json={"version": "0.1", "released_at": "2026-01-01T00:00:00+00:00", "tags": {"arch": "cnn"}})
    assert r.status_code == 201 and r.get_json()["tags"] == {"arch": "cnn"}
    r = client.post(f"/api/v1/models/{ctx.model_id}/releases", headers=ctx.tenant.auth(), json={"version": "1.0"})
    assert r.status_code == 409
    r = client.post(f"/api/v1/models/{ctx.model_id}/releases", headers=ctx.tenant.auth(),
                    json={"version": "9", "released_at": "yesterday"})
    assert r.status_code == 400 and r.get_json()["field"] == "released_at"
    assert len(rows_of_csv(get(client, ctx, f"/models/{ctx.model_id}/releases?format=csv"))) == 3


def test_audit_runs_and_detail(client, ctx):
    runs = get(client, ctx, f"/datasets/{ctx.dataset_id}/audit-runs").get_json()["items"]
    assert runs and all(r["status"] == "succeeded" for r in runs)
    latest = runs[0]
    assert latest["data_version"] == 2 + len(ctx.release_ids)
    assert latest["run_seconds"] >= 0 and latest["queued_seconds"] >= 0
    detail = get(client, ctx, f"/audit-runs/{latest['id']}").get_json()
    assert {b["metric"] for b in detail["best_scores"]} >= {"accuracy", "f1 (macro)"}
    assert all(0 <= b["value"] <= 1 for b in detail["best_scores"] if b["metric"] == "accuracy")
    assert detail["n_certifications"] == len(ctx.release_ids)
    assert get(client, ctx, f"/datasets/{ctx.dataset_id}/audit-runs?status=failed").get_json()["total"] == 0
    assert rows_of_csv(get(client, ctx, f"/datasets/{ctx.dataset_id}/audit-runs?format=csv"))


def test_certification_history(client, ctx):
    body = get(client, ctx, f"/datasets/{ctx.dataset_id}/certifications?per_page=500").get_json()
    # Release k (1-based) was first audited with its own upload, and again by every later run.
    n = len(ctx.release_ids)
    assert body["total"] == n * (n + 1) // 2
    latest = get(client, ctx, f"/datasets/{ctx.dataset_id}/certifications?latest=true").get_json()["items"]
    assert [c["version"] for c in latest] == list(ctx.release_ids)
    for c in latest:
        # Theorem 1 and Definition 1: U_e <= U_t; L is an agreement, within [0, 1].
        assert 0 <= c["u_e"] <= c["u_t"] <= 1 and 0 <= c["l"] <= 1
        # A negative confidence is "not certified", never a certificate.
        if c["s_oms_t"] is not None and c["s_oms_t"] < 0:
            assert c["certified"] is False
    by_model = get(client, ctx, f"/models/{ctx.model_id}/certifications?dataset_id={ctx.dataset_id}&per_page=500")
    assert by_model.get_json()["total"] == body["total"]
    one = get(client, ctx, f"/datasets/{ctx.dataset_id}/certifications?release_id={ctx.release_ids['2.1']}").get_json()
    assert one["total"] == 1
    rows = rows_of_csv(get(client, ctx, f"/datasets/{ctx.dataset_id}/certifications?format=csv"))
    assert len(rows) == body["total"] and {"l", "u_t", "u_e", "s_oms_t", "certified"} <= set(rows[0])


def test_power_curves(client, ctx):
    curves = get(client, ctx, f"/datasets/{ctx.dataset_id}/power-curves").get_json()["items"]
    base = [c for c in curves if c["release_id"] is None and c["vendor"] is None]
    assert base, "the dataset's own power curve"
    points = [p for p in base[0]["points"] if "k" in p]
    assert [p["k"] for p in points] == list(range(len(points)))
    for p in points:
        if p["mean"] is not None and p["ci_low"] is not None:
            assert p["ci_low"] <= p["mean"] + 1e-12 and p["mean"] <= p["ci_high"] + 1e-12
    every = get(client, ctx, f"/datasets/{ctx.dataset_id}/power-curves?all_runs=true&per_page=500").get_json()
    assert every["total"] >= len(curves)
    rows = rows_of_csv(get(client, ctx, f"/datasets/{ctx.dataset_id}/power-curves?format=csv"))
    assert len(rows) >= len(points)


def test_vendor_reports_and_annotator_bounds(client, ctx):
    reports = get(client, ctx, f"/datasets/{ctx.dataset_id}/vendor-reports?per_page=500").get_json()["items"]
    assert {r["vendor"] for r in reports} == {row["vendor"] for row in ctx.data.annotations if row.get("vendor")}
    runs = [r["audit_run_id"] for r in reports]
    assert runs == sorted(runs)  # oldest first: quality over time
    for r in reports:
        assert r["u_e"] <= r["u_t"] <= 1
    only = get(client, ctx, f"/datasets/{ctx.dataset_id}/vendor-reports?vendor=bolt-annotations").get_json()
    assert {r["vendor"] for r in only["items"]} == {"bolt-annotations"}
    bounds = get(client, ctx, f"/datasets/{ctx.dataset_id}/annotator-bounds?per_page=500").get_json()["items"]
    vendors_of = {row["annotator_id"]: row.get("vendor") for row in ctx.data.annotations}
    assert {b["annotator"] for b in bounds} == {a for a, v in vendors_of.items() if v}
    for b in bounds:
        assert vendors_of[b["annotator"]] == b["vendor"]
        # Theorem 3 + Hoeffding: the lower confidence bound sits below the observed agreement.
        if b["lower_confidence"] is not None:
            assert b["lower_confidence"] <= b["agreement"]
    assert rows_of_csv(get(client, ctx, f"/datasets/{ctx.dataset_id}/annotator-bounds?format=csv"))
    assert rows_of_csv(get(client, ctx, f"/datasets/{ctx.dataset_id}/vendor-reports?format=csv"))


def test_best_scores(client, ctx):
    body = get(client, ctx, f"/datasets/{ctx.dataset_id}/best-scores?metric=accuracy&per_page=500").get_json()
    assert body["total"] >= 1 and all(b["metric"] == "accuracy" for b in body["items"])
    assert rows_of_csv(get(client, ctx, f"/datasets/{ctx.dataset_id}/best-scores?format=csv"))


def test_alerts(client, ctx, app):
    from auditor.db import Alert, make_session_factory

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        db.add(Alert(workspace_id=ctx.tenant.workspace_id, dataset_id=ctx.dataset_id, kind="vendor_drop",
                     severity="critical", subject="bolt-annotations", message="U_t dropped by 0.05"))
        db.commit()
    body = get(client, ctx, "/alerts?severity=critical").get_json()
    assert any(a["message"] == "U_t dropped by 0.05" for a in body["items"])
    assert get(client, ctx, f"/alerts?dataset_id={ctx.dataset_id}&unacknowledged=true").get_json()["total"] >= 1
    assert rows_of_csv(get(client, ctx, "/alerts?format=csv"))


def test_acknowledging_an_alert(client, ctx, app):
    from auditor.db import Alert, make_session_factory

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        alert = Alert(workspace_id=ctx.tenant.workspace_id, dataset_id=ctx.dataset_id, kind="vendor_drop",
                      severity="warning", subject="acme-labeling", message="acknowledge me")
        db.add(alert)
        db.commit()
        alert_id = alert.id
    url = f"/api/v1/alerts/{alert_id}/acknowledge"
    open_ids = {a["id"] for a in get(client, ctx, "/alerts?unacknowledged=true&per_page=500").get_json()["items"]}
    assert alert_id in open_ids
    # Readers and vendors may not acknowledge; another workspace does not see the alert.
    for role in ("viewer", "vendor"):
        assert client.post(url, headers=ctx.tenant.auth(role)).status_code == 403
    assert client.post(url, headers=make_tenant(app).auth()).status_code == 404
    first = client.post(url, headers=ctx.tenant.auth("analyst"))
    assert first.status_code == 200 and first.get_json()["acknowledged_at"] is not None
    # Acknowledging again keeps the first acknowledgement.
    again = client.post(url, headers=ctx.tenant.auth())
    assert again.get_json()["acknowledged_at"] == first.get_json()["acknowledged_at"]
    open_ids = {a["id"] for a in get(client, ctx, "/alerts?unacknowledged=true&per_page=500").get_json()["items"]}
    assert alert_id not in open_ids
    with make_session_factory(app.extensions["auditor.engine"])() as db:
        assert db.get(Alert, alert_id).acknowledged_by_id == ctx.tenant.user_ids["analyst"]


def test_batches_listing(client, ctx):
    body = get(client, ctx, f"/datasets/{ctx.dataset_id}/batches").get_json()
    assert [b["kind"] for b in body["items"]][-2:] == ["gold", "annotations"]  # newest first
    assert get(client, ctx, f"/datasets/{ctx.dataset_id}/batches?kind=predictions").get_json()["total"] == 3
    assert rows_of_csv(get(client, ctx, f"/datasets/{ctx.dataset_id}/batches?format=csv"))


def test_ingestion_formats_idempotency_and_all_or_nothing(app, client):
    tenant = make_tenant(app)
    admin = tenant.auth()
    ds = client.post("/api/v1/datasets", json={"name": "up", "labels": ["no", "yes"]}, headers=admin).get_json()
    url = f"/api/v1/datasets/{ds['id']}/annotations"
    csv_body = "item_id,annotator_id,label\ni1,a1,yes\ni1,a2,no\ni2,a1,yes\n"
    r = client.post(url, data=csv_body, content_type="text/csv", headers=admin)
    assert r.status_code == 202, r.get_json()
    first = r.get_json()
    assert first["data_version"] == 1 and first["rows"] == 3 and first["batch_id"]
    # The same batch again changes nothing.
    again = client.post(url, data=csv_body, content_type="text/csv", headers=admin).get_json()
    assert again["duplicate"] is True and again["data_version"] == 1
    # JSONL body and multipart upload.
    jsonl = '{"item_id": "i3", "annotator_id": "a1", "label": "no"}\n'
    r = client.post(url, data=jsonl, content_type="application/x-ndjson", headers=admin)
    assert r.status_code == 202 and r.get_json()["data_version"] == 2
    r = client.post(url, headers=admin, content_type="multipart/form-data",
                    data={"file": (io.BytesIO(b"item_id,annotator_id,label\ni4,a2,yes\n"), "batch.csv")})
    assert r.status_code == 202 and r.get_json()["data_version"] == 3
    # One bad row: the whole batch is refused, naming the row and the field; nothing is written.
    bad = {"records": [{"item_id": "i5", "annotator_id": "a1", "label": "yes"},
                       {"item_id": "i6", "annotator_id": "a1", "label": "maybe"}]}
    r = client.post(url, json=bad, headers=admin)
    assert r.status_code == 400
    err = r.get_json()
    assert err["errors"][0]["row"] == 2 and err["errors"][0]["field"] == "label" and "maybe" in err["message"]
    items = client.get(f"/api/v1/datasets/{ds['id']}/items?external_id=i5", headers=admin).get_json()
    assert items["total"] == 0
    assert client.get(f"/api/v1/datasets/{ds['id']}", headers=admin).get_json()["data_version"] == 3
    # Idempotency key reused for other content is refused.
    r = client.post(url + "?idempotency_key=k1", data=jsonl.replace("i3", "i7"), content_type="application/x-ndjson",
                    headers=admin)
    assert r.status_code == 202
    r = client.post(url + "?idempotency_key=k1", data=jsonl.replace("i3", "i8"), content_type="application/x-ndjson",
                    headers=admin)
    assert r.status_code == 400 and "idempotency key" in r.get_json()["message"]
    r = client.post(url, data="x", content_type="application/xml", headers=admin)
    assert r.status_code == 415


def test_gold_and_predictions_ingestion(app, client):
    tenant = make_tenant(app)
    admin = tenant.auth()
    ds = client.post("/api/v1/datasets", json={"name": "g", "labels": ["no", "yes"]}, headers=admin).get_json()
    base = f"/api/v1/datasets/{ds['id']}"
    r = client.post(base + "/annotations", headers=admin,
                    json={"records": [{"item_id": "i1", "annotator_id": "a", "label": "no"}]})
    assert r.status_code == 202
    r = client.post(base + "/gold", headers=tenant.auth("analyst"), data="item_id,label\ni1,no\n",
                    content_type="text/csv")
    assert r.status_code == 202 and r.get_json()["kind"] == "gold"
    model = client.post("/api/v1/models", json={"name": "m"}, headers=admin).get_json()
    rel = client.post(f"/api/v1/models/{model['id']}/releases", json={"version": "1"}, headers=admin).get_json()
    r = client.post(f"{base}/predictions?release_id={rel['id']}", headers=tenant.auth("analyst"),
                    json={"records": [{"item_id": "i1", "probabilities": [0.5, float("nan")]}]})
    assert r.status_code == 400
    r = client.post(f"{base}/predictions?release_id={rel['id']}", headers=tenant.auth("analyst"),
                    data=json.dumps({"records": [{"item_id": "i1", "label": "yes"}]}), content_type="application/json")
    assert r.status_code == 202 and r.get_json()["kind"] == "predictions"
    r = client.post(f"{base}/predictions", headers=admin, json={"records": [{"item_id": "i1", "label": "yes"}]})
    assert r.status_code == 400 and r.get_json()["field"] == "release_id"


def test_ingestion_requests_an_audit(app, client):
    tenant = make_tenant(app)
    admin = tenant.auth()
    ds = client.post("/api/v1/datasets", json={"name": "q", "labels": ["no", "yes"]}, headers=admin).get_json()
    records = [{"item_id": f"i{i}", "annotator_id": f"a{j}", "label": "yes" if (i + j) % 3 else "no"}
               for i in range(10) for j in range(3)]
    with eager_audits(app):
        r = client.post(f"/api/v1/datasets/{ds['id']}/annotations", json={"records": records}, headers=admin)
    assert r.status_code == 202
    runs = client.get(f"/api/v1/datasets/{ds['id']}/audit-runs", headers=admin).get_json()["items"]
    assert [(x["data_version"], x["status"]) for x in runs] == [(1, "succeeded")]


def test_openapi_document_is_public_json(client):
    r = client.get("/api/v1/openapi.json")
    assert r.status_code == 200 and r.get_json()["openapi"].startswith("3.1")


def test_csv_downloads_release_their_database_connection_before_streaming(app, ctx):
    client = app.test_client()
    pool = app.extensions["auditor.engine"].pool
    responses = [client.get(f"/api/v1/datasets/{ctx.dataset_id}/certifications?format=csv",
                            headers=ctx.tenant.auth(), buffered=False) for _ in range(20)]
    # Twenty downloads not yet read by their clients hold no connection.
    assert pool.checkedout() == 0
    body = responses[0].get_data(as_text=True)
    assert body.startswith("audit_run_id,") and int(responses[0].headers["Content-Length"]) == len(body.encode())
    for r in responses:
        r.close()


def test_cached_results_and_pages_follow_new_data(app):
    from tests.web.conftest import login

    tenant = make_tenant(app)
    client = app.test_client()
    admin = tenant.auth()
    ds = client.post("/api/v1/datasets", json={"name": "c", "labels": ["no", "yes"]}, headers=admin).get_json()
    runs_url = f"/api/v1/datasets/{ds['id']}/audit-runs"
    assert client.get(runs_url, headers=admin).get_json()["total"] == 0
    assert client.get(runs_url, headers=admin).get_json()["total"] == 0  # served again
    login(client, tenant)
    assert "c</a>" in client.get("/").get_data(as_text=True)
    page = client.get(f"/datasets/{ds['id']}").get_data(as_text=True)
    assert "0 items" in page and "No audit yet" in page
    records = [{"item_id": f"i{i}", "annotator_id": f"a{j}", "label": "yes" if (i + j) % 3 else "no"}
               for i in range(6) for j in range(3)]
    with eager_audits(app):
        assert client.post(f"/api/v1/datasets/{ds['id']}/annotations", json={"records": records},
                           headers=admin).status_code == 202
    assert client.get(runs_url, headers=admin).get_json()["total"] == 1
    page = client.get(f"/datasets/{ds['id']}").get_data(as_text=True)
    assert "6 items" in page and "No audit yet" not in page
    client.post(f"/api/v1/datasets/{ds['id']}/items", json={"items": [{"external_id": "x"}]}, headers=admin)
    assert "7 items" in client.get(f"/datasets/{ds['id']}").get_data(as_text=True)
    client.post("/api/v1/datasets", json={"name": "d2", "labels": ["a", "b"]}, headers=admin)
    assert "d2</a>" in client.get("/").get_data(as_text=True)


def test_a_cached_answer_costs_one_statement_and_still_checks_the_caller(app):
    from sqlalchemy import event

    tenant = make_tenant(app)
    stranger = make_tenant(app)
    client = app.test_client()
    admin = tenant.auth()
    ds = client.post("/api/v1/datasets", json={"name": "one-query", "labels": ["no", "yes"]},
                     headers=admin).get_json()
    url = f"/api/v1/datasets/{ds['id']}/audit-runs"
    first = client.get(url, headers=admin)
    engine = app.extensions["auditor.engine"]

    def statements_of(headers):
        seen = []

        def count(conn, cursor, statement, *args):
            seen.append(statement)

        event.listen(engine, "before_cursor_execute", count)
        try:
            response = client.get(url, headers=headers)
        finally:
            event.remove(engine, "before_cursor_execute", count)
        return response, seen

    again, statements = statements_of(admin)
    assert again.status_code == 200 and again.get_data() == first.get_data()
    # One statement reads the caller (token, user, workspace, grants) and the workspace's fingerprint.
    assert len(statements) == 1
    assert "api_token" in statements[0] and "audit_run" in statements[0]
    # The same URL with another workspace's token is answered afresh, not from the cache.
    other, statements = statements_of(stranger.auth())
    assert other.status_code == 404 and len(statements) > 1


def test_a_vendor_cannot_make_annotators_experts(app, client):
    """The expert tier puts an annotator on every vendor's expert panel: only admins and analysts set it."""
    tenant = make_tenant(app)
    admin, vendor = tenant.auth(), tenant.auth("vendor")
    ds = client.post("/api/v1/datasets", json={"name": "tiers", "labels": ["no", "yes"]}, headers=admin).get_json()
    from tests.web.conftest import grant

    grant(app, tenant, "vendor", ds["id"])
    url = f"/api/v1/datasets/{ds['id']}/annotations"

    def annotators():
        rows = client.get("/api/v1/annotators?per_page=500", headers=admin).get_json()["items"]
        return {a["external_id"]: a["tier"] for a in rows}

    # The tier as a query parameter or in the JSON body: refused.
    r = client.post(url + "?tier=expert", headers=vendor,
                    json={"records": [{"item_id": "i1", "annotator_id": "v1", "label": "yes"}]})
    assert r.status_code == 403 and r.get_json()["field"] == "tier"
    r = client.post(url, headers=vendor,
                    json={"tier": "expert", "records": [{"item_id": "i1", "annotator_id": "v1", "label": "yes"}]})
    assert r.status_code == 403 and r.get_json()["field"] == "tier"
    # The tier in a row (JSON records, CSV): the batch is refused naming the row and field; nothing is written.
    r = client.post(url, headers=vendor, json={"records": [
        {"item_id": "i1", "annotator_id": "v1", "label": "yes"},
        {"item_id": "i2", "annotator_id": "v2", "label": "no", "tier": "expert"}]})
    assert r.status_code == 400, r.get_json()
    assert r.get_json()["errors"][0] == {"row": 2, "field": "tier", "message": r.get_json()["errors"][0]["message"]}
    r = client.post(url, headers=vendor, content_type="text/csv",
                    data="item_id,annotator_id,label,tier\ni1,v3,yes,expert\n")
    assert r.status_code == 400 and r.get_json()["errors"][0]["field"] == "tier", r.get_json()
    assert annotators() == {}
    # "crowd" is allowed, and so is naming the tier an admin gave an annotator already.
    r = client.post(url, headers=vendor, content_type="text/csv",
                    data="item_id,annotator_id,label,tier\ni1,v1,yes,crowd\n")
    assert r.status_code == 202, r.get_json()
    assert client.post("/api/v1/annotators", headers=admin, json={"external_id": "e1", "vendor": "acme-labeling",
                                                                  "tier": "expert"}).status_code == 201
    r = client.post(url, headers=vendor, json={"records": [{"item_id": "i2", "annotator_id": "e1", "label": "no",
                                                            "tier": "expert"}]})
    assert r.status_code == 202, r.get_json()
    assert annotators() == {"v1": "crowd", "e1": "expert"}
    # Admins still set tiers in a batch.
    r = client.post(url + "?tier=expert", headers=admin,
                    json={"records": [{"item_id": "i3", "annotator_id": "x1", "label": "yes"}]})
    assert r.status_code == 202 and annotators()["x1"] == "expert"


def test_revoking_tokens_and_deactivating_users_takes_effect_at_once_and_is_recorded(app, client):
    from click.testing import CliRunner

    from auditor.cli import main
    from tests.web.conftest import csrf_token, login

    tenant = make_tenant(app)
    admin = tenant.auth()
    ids = tenant.user_ids
    analyst, vendor = tenant.auth("analyst"), tenant.auth("vendor")
    # Warm the response cache (and the per-request auth) for the analyst's token.
    for _ in range(2):
        assert client.get("/api/v1/alerts", headers=analyst).status_code == 200
    tokens = client.get(f"/api/v1/users/{ids['analyst']}/tokens", headers=admin).get_json()["items"]
    [tok] = tokens
    assert tok["revoked_at"] is None and "token_hash" not in tok and tenant.tokens["analyst"].startswith(tok["prefix"])
    # Only admins list users and revoke others' tokens; another workspace's token is not found.
    assert client.get("/api/v1/users", headers=vendor).status_code == 403
    assert client.post(f"/api/v1/tokens/{tok['id']}/revoke", headers=vendor).status_code == 404
    other = make_tenant(app)
    assert client.post(f"/api/v1/tokens/{tok['id']}/revoke", headers=other.auth()).status_code == 404
    r = client.post(f"/api/v1/tokens/{tok['id']}/revoke", headers=admin)
    assert r.status_code == 200 and r.get_json()["revoked_at"] is not None
    assert client.get("/api/v1/alerts", headers=analyst).status_code == 401
    assert client.get("/api/v1/me", headers=analyst).status_code == 401
    # A user may revoke its own token.
    me = client.get("/api/v1/me", headers=vendor).get_json()
    [vtok] = client.get(f"/api/v1/users/{me['user_id']}/tokens", headers=vendor).get_json()["items"]
    assert client.post(f"/api/v1/tokens/{vtok['id']}/revoke", headers=vendor).status_code == 200
    assert client.get("/api/v1/me", headers=vendor).status_code == 401

    # Deactivating a user refuses its tokens and its session; reactivating lets it back in.
    viewer = tenant.auth("viewer")
    session_client = app.test_client()
    assert login(session_client, tenant, "viewer").status_code == 302
    assert session_client.get("/").status_code == 200
    assert client.get("/api/v1/alerts", headers=viewer).status_code == 200
    r = client.post(f"/api/v1/users/{ids['viewer']}/deactivate", headers=admin)
    assert r.status_code == 200 and r.get_json()["is_active"] is False
    assert client.get("/api/v1/alerts", headers=viewer).status_code == 401
    assert session_client.get("/").status_code == 302  # back to the login page
    assert login(app.test_client(), tenant, "viewer").status_code == 401
    assert client.post(f"/api/v1/users/{ids['admin']}/deactivate", headers=admin).status_code == 409
    assert client.get("/api/v1/users?active=false", headers=admin).get_json()["items"][0]["id"] == ids["viewer"]
    assert client.post(f"/api/v1/users/{ids['viewer']}/reactivate", headers=admin).status_code == 200
    assert client.get("/api/v1/alerts", headers=viewer).status_code == 200

    # The admin page: CSRF required; deactivating there refuses the user at once.
    page = app.test_client()
    assert login(page, tenant, "admin").status_code == 302
    html = page.get("/access").get_data(as_text=True)
    assert tenant.emails["viewer"] in html
    assert page.post(f"/access/users/{ids['viewer']}/deactivate").status_code == 400
    assert client.get("/api/v1/alerts", headers=viewer).status_code == 200
    r = page.post(f"/access/users/{ids['viewer']}/deactivate", data={"csrf_token": csrf_token(html)})
    assert r.status_code == 302
    assert client.get("/api/v1/alerts", headers=viewer).status_code == 401
    assert page.post(f"/access/users/{ids['viewer']}/reactivate", data={"csrf_token": csrf_token(html)}).status_code == 302
    analyst_page = app.test_client()
    login(analyst_page, tenant, "analyst")
    assert analyst_page.get("/access").status_code == 403

    api_events = client.get("/api/v1/access-events", headers=admin).get_json()["items"]
    assert [(e["action"], e["actor"]) for e in api_events[:2]] == [("user_reactivated", tenant.emails["admin"]),
                                                                   ("user_deactivated", tenant.emails["admin"])]
    assert client.get("/api/v1/access-events", headers=tenant.auth("viewer")).status_code == 403

    # The command line: revoke by prefix, deactivate by email.
    env = {"AUDITOR_DATABASE_URL": app.extensions["auditor.engine"].url.render_as_string(hide_password=False)}

    def cli(*args):
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)

    assert client.get("/api/v1/me", headers=admin).status_code == 200
    listed = cli("tokens", "list", "--workspace", tenant.slug, "--user", tenant.emails["admin"])
    assert tenant.tokens["admin"][:12] in listed.output and "active" in listed.output
    out = cli("tokens", "revoke", "--workspace", tenant.slug, "--user", tenant.emails["admin"],
              "--prefix", tenant.tokens["admin"][:12])
    assert out.exit_code == 0 and "1 token(s)" in out.output and f"workspace {tenant.slug!r}" in out.output
    assert client.get("/api/v1/me", headers=admin).status_code == 401
    assert client.get("/api/v1/me", headers=tenant.auth("vendor:bolt-annotations")).status_code == 200
    out = cli("users", "deactivate", "--workspace", tenant.slug, "--email", tenant.emails["vendor:bolt-annotations"])
    assert out.exit_code == 0 and "deactivated" in out.output
    assert client.get("/api/v1/me", headers=tenant.auth("vendor:bolt-annotations")).status_code == 401
    assert cli("users", "reactivate", "--workspace", tenant.slug,
               "--email", tenant.emails["vendor:bolt-annotations"]).exit_code == 0
    assert client.get("/api/v1/me", headers=tenant.auth("vendor:bolt-annotations")).status_code == 200

    # Every change is recorded with who made it and when, newest first.
    events = page.get("/access").get_data(as_text=True)
    assert "token revoked" in events and "user deactivated" in events
    from sqlalchemy import select

    from auditor.db import AccessEvent, make_session_factory

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        rows = db.execute(select(AccessEvent.action, AccessEvent.actor, AccessEvent.user_id)
                          .where(AccessEvent.workspace_id == tenant.workspace_id).order_by(AccessEvent.id)).all()
    a = tenant.emails["admin"]
    assert [(str(x), actor if not actor.startswith("cli") else "cli", u) for x, actor, u in rows] == [
        ("token_revoked", a, ids["analyst"]), ("token_revoked", tenant.emails["vendor"], me["user_id"]),
        ("user_deactivated", a, ids["viewer"]), ("user_reactivated", a, ids["viewer"]),
        ("user_deactivated", a, ids["viewer"]), ("user_reactivated", a, ids["viewer"]),
        ("token_revoked", "cli", ids["admin"]), ("user_deactivated", "cli", ids["vendor:bolt-annotations"]),
        ("user_reactivated", "cli", ids["vendor:bolt-annotations"])]


def test_predictions_by_model_and_release_name_with_a_field_mapping(app, client, datasets_dir):
    """The raw SNLI prediction file (a ``uid`` column, ``probs`` list) in one call, as the CLI imports it."""
    tenant = make_tenant(app)
    admin, analyst = tenant.auth(), tenant.auth("analyst")
    labels = ["entailment", "contradiction", "neutral"]  # the Baan et al. class index order
    ds = client.post("/api/v1/datasets", json={"name": "snli", "labels": labels}, headers=admin).get_json()
    url = f"/api/v1/datasets/{ds['id']}/predictions"
    path = datasets_dir / "snli_dev_model_predictions_baan2022" / "SNLI_dev_roberta-base_0.json"
    lines = path.read_text(encoding="utf-8").splitlines()[:300]
    body = "\n".join(lines).encode("utf-8")
    # Without a mapping the file is refused (it has no item_id column); nothing is written.
    r = client.post(url + "?model=roberta-base&release=seed-0", data=body, content_type="application/x-ndjson",
                    headers=analyst)
    assert r.status_code == 400 and r.get_json()["field"] == "item_id", r.get_json()
    assert client.get("/api/v1/models", headers=admin).get_json()["items"] == []
    r = client.post(url + "?model=roberta-base&release=seed-0&field=item_id:uid,probabilities:probs", data=body,
                    content_type="application/x-ndjson", headers=analyst)
    assert r.status_code == 202, r.get_json()
    assert r.get_json()["rows"] == 300 and r.get_json()["kind"] == "predictions"
    # The model and release were created on first use; the next release of the model reuses the model.
    [model] = client.get("/api/v1/models", headers=admin).get_json()["items"]
    assert model["name"] == "roberta-base"
    r = client.post(url + "?model=roberta-base&release=seed-1&field=item_id%3Duid&field=probabilities=probs",
                    data=body, content_type="application/x-ndjson", headers=analyst)
    assert r.status_code == 202, r.get_json()
    releases = client.get(f"/api/v1/models/{model['id']}/releases", headers=admin).get_json()["items"]
    assert sorted(x["version"] for x in releases) == ["seed-0", "seed-1"]
    # The same content again, named by release_id: a duplicate of the first batch.
    seed0 = next(x["id"] for x in releases if x["version"] == "seed-0")
    r = client.post(url + f"?release_id={seed0}&field=item_id:uid,probabilities:probs", data=body,
                    content_type="application/x-ndjson", headers=analyst)
    assert r.status_code == 202 and r.get_json()["duplicate"] is True, r.get_json()
    # The stored probabilities are the file's, on the items named by its uid column.
    from sqlalchemy import select

    from auditor.db import Item, Prediction, make_session_factory

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        stored = dict(db.execute(select(Item.external_id, Prediction.probabilities)
                                 .join(Prediction, Prediction.item_id == Item.id)
                                 .where(Prediction.release_id == seed0)).all())
    expected = {rec["uid"]: rec["probs"] for rec in map(json.loads, lines)}
    assert stored.keys() == expected.keys()
    for uid, probs in expected.items():
        assert stored[uid] == pytest.approx(probs, rel=1e-12)
    # Bad names and mappings are 400s naming the parameter.
    for query, field in [("?model=m", "release"), ("?release=1", "model"), (f"?release_id={seed0}&model=m", "release_id"),
                         ("?model=m&release=1&field=uid", "field"), ("?model=m&release=1&field=nope:uid", "field"),
                         ("", "release_id")]:
        r = client.post(url + query, data=body, content_type="application/x-ndjson", headers=analyst)
        assert r.status_code == 400 and r.get_json()["field"] == field, (query, r.get_json())
    # Vendors and viewers may not submit predictions.
    assert client.post(url + "?model=m&release=1", data=body, content_type="application/x-ndjson",
                       headers=tenant.auth("viewer")).status_code == 403


def test_a_rejected_batch_says_how_many_rows_are_bad_in_all(client, ctx):
    rows = ["item_id,annotator_id,label"] + [f"n{n},w{n % 5},{'zz' if n % 3 == 0 else 'negative'}"
                                             for n in range(474)]
    r = client.post(f"/api/v1/datasets/{ctx.dataset_id}/annotations", data="\n".join(rows) + "\n",
                    headers={**ctx.tenant.auth(), "Content-Type": "text/csv"})
    assert r.status_code == 400
    body = r.get_json()
    assert "(and 157 more bad rows; the first 20 are listed in errors)" in body["message"], body["message"]
    assert len(body["errors"]) == 20 and body["errors"][0]["row"] == 1
