"""Access control: workspace isolation, roles, CSRF, inert rendering, size and rate limits, headers."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from auditor.db import ApiToken, make_session_factory
from auditor.web import create_app
from auditor.web.api.framework import OPERATIONS
from tests.web.conftest import app_config, csrf_token, login, make_tenant, seed

pytestmark = pytest.mark.services

XSS = '<script>alert("x")</script>'
XSS_ATTR = '"><img src=x onerror=alert(1)>'


VALID_BODIES = {
    "ItemsCreate": {"items": [{"external_id": "x"}]},
    "ReleaseCreate": {"version": "9.9"},
    "AnnotationsIngest": {"records": [{"item_id": "x", "annotator_id": "y", "label": "negative"}]},
    "GoldIngest": {"records": [{"item_id": "x", "label": "negative"}]},
    "PredictionsIngest": {"records": [{"item_id": "x", "label": "negative"}]},
    "AlertAssign": {"user_id": None},
    "AlertSnooze": {"until": None},
    "AlertComment": {"body": "hello"},
    "AlertRuleSet": {"name": "r", "channel_ids": [1]},
}


def _fill(rule: str, ids: dict) -> str:
    return "/api/v1" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(ids[m.group(1)]), rule)


def _object_ids(app, seeded) -> dict:
    """Ids of one of each kind of object of a seeded workspace (an alert and a webhook added)."""
    client = app.test_client()
    a = seeded.tenant.auth()
    run = client.get(f"/api/v1/datasets/{seeded.dataset_id}/audit-runs", headers=a).get_json()["items"][0]
    items = client.get(f"/api/v1/datasets/{seeded.dataset_id}/items", headers=a).get_json()["items"]
    annotators = client.get("/api/v1/annotators", headers=a).get_json()["items"]
    ids = {"dataset_id": seeded.dataset_id, "model_id": seeded.model_id, "release_id": seeded.release_ids["2.0"],
           "audit_run_id": run["id"], "item_id": items[0]["id"], "annotator_id": annotators[0]["id"],
           "vendor": "acme-labeling", "user_id": seeded.tenant.user_ids["viewer"]}
    ids["token_id"] = client.get(f"/api/v1/users/{ids['user_id']}/tokens", headers=a).get_json()["items"][0]["id"]
    from auditor.db import Alert, make_session_factory

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        alert = Alert(workspace_id=seeded.tenant.workspace_id, dataset_id=seeded.dataset_id, kind="vendor_drop",
                      subject="acme-labeling", message="A's alert")
        db.add(alert)
        db.commit()
        ids["alert_id"] = alert.id
    hook = client.post("/api/v1/webhooks", headers=a, json={"url": "https://hooks.example.org/a"})
    assert hook.status_code == 201, hook.get_json()
    ids["webhook_id"] = hook.get_json()["id"]
    channel = client.post("/api/v1/alert-channels", headers=a, json={"kind": "email", "name": "leads",
                                                                      "recipients": ["lead@example.org"]})
    ids["channel_id"] = channel.get_json()["id"]
    ids["rule_id"] = client.post("/api/v1/alert-rules", headers=a,
                                 json={"name": "all", "channel_ids": [ids["channel_id"]]}).get_json()["id"]
    return ids


@pytest.fixture(scope="module")
def two(app, seeded):
    """Workspace A (seeded) and B (its own dataset); ids of A's objects."""
    other = seed(app, name="other-set")
    return seeded, other, _object_ids(app, seeded)


@pytest.fixture(scope="module")
def b_ids(app, two):
    """Ids of workspace B's own objects (B calls its own URLs naming A's ids in the query or body)."""
    return _object_ids(app, two[1])


def test_other_workspace_gets_404_for_every_object(client, two):
    a, b, ids = two
    checked = 0
    for op in OPERATIONS:
        if "<" not in op.rule:
            continue
        url = _fill(op.rule, ids) + (f"?release_id={ids['release_id']}" if "predictions" in op.rule else "")
        if op.method in ("GET", "DELETE"):
            r = client.open(url, method=op.method, headers=b.tenant.auth())
        else:
            r = client.open(url, method=op.method, json=VALID_BODIES[op.body_name] if op.body_name else None,
                            headers=b.tenant.auth())
        if op.rule.startswith("/vendors/"):
            # Vendors are names, not objects: B has its own "acme-labeling", so compare contents.
            mine = client.get(url, headers=a.tenant.auth()).get_json()
            assert r.status_code == 404 or r.get_json() != mine or mine["n_annotators"] == r.get_json()["n_annotators"]
            continue
        assert r.status_code == 404, (op.method, url, r.status_code, r.get_json())
        checked += 1
    assert checked >= 20
    # Query parameters pointing into A are not found either.
    r = client.get(f"/api/v1/alerts?dataset_id={ids['dataset_id']}", headers=b.tenant.auth())
    assert r.status_code == 404
    r = client.get(f"/api/v1/models/{b.model_id}/certifications?dataset_id={ids['dataset_id']}",
                   headers=b.tenant.auth())
    assert r.status_code == 404
    r = client.post(f"/api/v1/datasets/{b.dataset_id}/predictions?release_id={ids['release_id']}",
                    headers=b.tenant.auth(), json={"records": [{"item_id": "x", "label": "negative"}]})
    assert r.status_code == 404 and r.get_json()["field"] == "release_id"


def _id_fields(schema, path="") -> list[str]:
    """Integer fields named ``*_id``, and arrays of integers named ``*_ids``, anywhere in a body
    schema (their dotted paths)."""
    found = []
    if isinstance(schema, dict):
        for name, sub in (schema.get("properties") or {}).items():
            where = f"{path}.{name}" if path else name
            types = sub.get("type") if isinstance(sub, dict) else None
            types = types if isinstance(types, list) else [types]
            items = (sub.get("items") or {}) if isinstance(sub, dict) else {}
            if name.endswith("_id") and "integer" in types:
                found.append(where)
            elif name.endswith("_ids") and "array" in types and items.get("type") == "integer":
                found.append(where)
            found += _id_fields(sub, where)
        if isinstance(schema.get("items"), dict):
            found += _id_fields(schema["items"], path + "[]")
    return found


def _ids_taken(op) -> list[tuple[str, str]]:
    """Every id an operation takes outside its path: ("query", name) and ("body", dotted path)."""
    query = [("query", p.name) for p in op.query if p.type == "integer" and p.name.endswith("_id")]
    return query + [("body", f) for f in _id_fields(op.body or {})]


def _set_body_field(body: dict, dotted: str, value) -> dict:
    out = json.loads(json.dumps(body))
    *parents, last = dotted.split(".")
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return out


def test_ids_of_another_workspace_in_queries_and_bodies_are_not_found(client, two, b_ids):
    """Every id an operation reads from its query or body, enumerated from the route table:
    B calls its own URLs naming A's object there and gets a 404 that holds nothing of A's
    (``annotator-bounds?audit_run_id=`` of another workspace's run returned that run's
    annotators, agreement and bounds)."""
    a, b, ids = two
    probed = []
    for op in OPERATIONS:
        for where, name in _ids_taken(op):
            field = name.split(".")[-1]
            key = field.removesuffix("s") if field.endswith("_ids") else field
            assert key in ids, f"{op.method} {op.rule} takes {name!r} in its {where}: add the kind of object here"
            url = _fill(op.rule, b_ids)
            body = VALID_BODIES.get(op.body_name) if op.body_name else None
            if body and "channel_ids" in body:  # B's own channel, so only the probed id is A's
                body = {**body, "channel_ids": [b_ids["channel_id"]]}
            if where == "query":
                url += f"?{name}={ids[key]}"
                if "predictions" in op.rule and name != "release_id":
                    url += f"&release_id={b_ids['release_id']}"
            else:
                body = _set_body_field(body or {}, name, [ids[key]] if field != key else ids[key])
            for fmt in (("", "&format=csv") if op.listing else ("",)):
                r = client.open(url + fmt, method=op.method, json=body, headers=b.tenant.auth())
                assert r.status_code == 404, (op.method, url + fmt, r.status_code, r.get_data(as_text=True)[:300])
                assert r.mimetype == "application/json" and set(r.get_json()) <= {"error", "message", "field"}, \
                    (url, r.get_data(as_text=True)[:300])
                assert r.get_json()["field"] == field
                assert a.tenant.slug not in r.get_data(as_text=True)
            probed.append((op.method, op.rule, name))
    # the route table's ids outside paths today: alerts, certifications, power curves, annotator
    # bounds, predictions, plans, relabel lists and access events
    assert len(probed) >= 11, probed


def test_pages_given_another_workspaces_ids_show_nothing_of_it(app, two, b_ids):
    """The dashboards' pages that read an id from the query: another workspace's id is a 404."""
    a, b, ids = two
    client = app.test_client()
    login(client, b.tenant)
    pages = [f"/models/{b_ids['model_id']}?dataset_id={ids['dataset_id']}",
             f"/releases/{b_ids['release_id']}?dataset_id={ids['dataset_id']}",
             f"/compare?a={b_ids['release_id']}&b={ids['release_id']}",
             f"/compare?a={ids['release_id']}&b={b_ids['release_id']}",
             f"/compare?a={b_ids['release_id']}&b={b.release_ids['2.1']}&dataset_id={ids['dataset_id']}",
             f"/vendors/acme-labeling?dataset_id={ids['dataset_id']}"]
    for url in pages:
        r = client.get(url)
        assert r.status_code == 404, (url, r.status_code)
        assert a.tenant.slug not in r.get_data(as_text=True)


def test_annotator_bounds_of_another_workspaces_run_are_not_found(app):
    """Issue 33, defect 1: A's viewer asked for A's dataset's annotator bounds naming B's
    audit run and got B's annotators (without a vendor), agreement and bounds, as JSON and
    CSV. A run of another dataset of the same workspace is not this dataset's either."""
    from tests.web.conftest import eager_audits

    def dataset(tenant, name, prefix):
        c = app.test_client()
        ds = c.post("/api/v1/datasets", json={"name": name, "labels": ["a", "b"]}, headers=tenant.auth()).get_json()
        rows = [{"item_id": f"i{i}", "annotator_id": f"{prefix}-{j}", "label": "ab"[(i * j + i) % 3 % 2]}
                for i in range(30) for j in range(3)]
        with eager_audits(app):
            r = c.post(f"/api/v1/datasets/{ds['id']}/annotations", json={"records": rows}, headers=tenant.auth())
            assert r.status_code == 202, r.get_json()
        run = c.get(f"/api/v1/datasets/{ds['id']}/audit-runs", headers=tenant.auth()).get_json()["items"][0]
        assert run["status"] == "succeeded", run
        return ds["id"], run["id"]

    a, b = make_tenant(app), make_tenant(app)
    a_ds, a_run = dataset(a, "mine", "own-annotator")
    _, a_other_run = dataset(a, "mine-too", "other-annotator")
    _, b_run = dataset(b, "theirs", "secret-annotator")
    client = app.test_client()
    viewer = a.auth("viewer")
    own = client.get(f"/api/v1/datasets/{a_ds}/annotator-bounds?audit_run_id={a_run}", headers=viewer)
    assert own.status_code == 200 and "own-annotator-0" in own.get_data(as_text=True)
    for run in (b_run, a_other_run):
        for fmt in ("json", "csv"):
            r = client.get(f"/api/v1/datasets/{a_ds}/annotator-bounds?audit_run_id={run}&format={fmt}",
                           headers=viewer)
            text = r.get_data(as_text=True)
            assert r.status_code == 404 and r.get_json()["field"] == "audit_run_id", (run, fmt, text[:300])
            assert "secret-annotator" not in text and "other-annotator" not in text


def test_lists_never_show_another_workspace(client, two):
    a, b, _ = two
    for path in ("/datasets", "/models", "/annotators", "/alerts"):
        mine = {x["id"] for x in client.get(f"/api/v1{path}?per_page=500", headers=a.tenant.auth()).get_json()["items"]}
        theirs = {x["id"] for x in client.get(f"/api/v1{path}?per_page=500", headers=b.tenant.auth()).get_json()["items"]}
        assert not mine & theirs, path


def test_other_workspace_user_gets_404_on_pages(app, two):
    _, b, ids = two
    client = app.test_client()
    assert login(client, b.tenant).status_code == 302
    for url in (f"/datasets/{ids['dataset_id']}", f"/models/{ids['model_id']}"):
        assert client.get(url).status_code == 404
    # Its own pages work.
    assert client.get(f"/datasets/{b.dataset_id}").status_code == 200


def test_vendor_token_cannot_read_certifications_predictions_or_other_vendors(client, two):
    a, _, ids = two
    vendor = a.tenant.auth("vendor")
    ds = ids["dataset_id"]
    forbidden = [f"/datasets/{ds}/certifications", f"/models/{ids['model_id']}/certifications",
                 "/models", f"/models/{ids['model_id']}", f"/models/{ids['model_id']}/releases",
                 f"/releases/{ids['release_id']}", f"/datasets/{ds}/power-curves", f"/datasets/{ds}/items",
                 f"/datasets/{ds}/audit-runs", f"/audit-runs/{ids['audit_run_id']}", f"/datasets/{ds}/best-scores",
                 "/alerts"]
    for path in forbidden:
        r = client.get("/api/v1" + path, headers=vendor)
        assert r.status_code == 403, path
        assert r.get_json()["error"] == "forbidden"
    assert client.get(f"/api/v1/datasets/{ds}/certifications?format=csv", headers=vendor).status_code == 403
    # Other vendors' data: not found; own data: only its own.
    assert client.get("/api/v1/vendors/bolt-annotations", headers=vendor).status_code == 404
    assert client.get(f"/api/v1/datasets/{ds}/vendor-reports?vendor=bolt-annotations", headers=vendor).status_code == 404
    reports = client.get(f"/api/v1/datasets/{ds}/vendor-reports", headers=vendor).get_json()["items"]
    assert reports and {r["vendor"] for r in reports} == {"acme-labeling"}
    bounds = client.get(f"/api/v1/datasets/{ds}/annotator-bounds", headers=vendor).get_json()["items"]
    assert bounds and {b["vendor"] for b in bounds} == {"acme-labeling"}
    annotators = client.get("/api/v1/annotators?per_page=500", headers=vendor).get_json()["items"]
    assert annotators and {x["vendor"] for x in annotators} == {"acme-labeling"}
    bolt = client.get("/api/v1/annotators?vendor=bolt-annotations", headers=a.tenant.auth()).get_json()["items"][0]
    assert client.get(f"/api/v1/annotators/{bolt['id']}", headers=vendor).status_code == 404
    assert [v["name"] for v in client.get("/api/v1/vendors", headers=vendor).get_json()["items"]] == ["acme-labeling"]
    # Its own submissions only (the seed's batches were the admin's).
    assert client.get(f"/api/v1/datasets/{ds}/batches", headers=vendor).get_json()["total"] == 0


def test_vendor_submits_only_to_granted_datasets_as_itself(app, client, two):
    a, _, ids = two
    vendor = a.tenant.auth("vendor")
    ds = ids["dataset_id"]
    row = {"item_id": "item-00001", "annotator_id": "acme-new", "label": "positive"}
    r = client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": [row]}, headers=vendor)
    assert r.status_code == 202, r.get_json()
    batches = client.get(f"/api/v1/datasets/{ds}/batches", headers=vendor).get_json()["items"]
    assert [b["id"] for b in batches] == [r.get_json()["batch_id"]]
    version = r.get_json()["data_version"]
    # Another vendor's annotator, or a row naming another vendor: refused, nothing written.
    for bad in ({**row, "annotator_id": "bolt-01"}, {**row, "annotator_id": "x9", "vendor": "bolt-annotations"}):
        r = client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": [bad]}, headers=vendor)
        # Refused by the ingestion checks (400, annotator registered with another vendor) or
        # by the vendor check after them (403); either way nothing is written.
        assert r.status_code in (400, 403), r.get_json()
        assert r.get_json()["field"] == "vendor"
    r = client.post(f"/api/v1/datasets/{ds}/annotations?vendor=bolt-annotations", json={"records": [row]},
                    headers=vendor)
    assert r.status_code == 403
    assert client.get(f"/api/v1/datasets/{ds}", headers=a.tenant.auth()).get_json()["data_version"] == version
    # A dataset it is not granted does not exist for it; gold and predictions are not its to write.
    other = client.post("/api/v1/datasets", json={"name": "ungranted", "labels": ["a", "b"]},
                        headers=a.tenant.auth()).get_json()
    assert client.get(f"/api/v1/datasets/{other['id']}", headers=vendor).status_code == 404
    r = client.post(f"/api/v1/datasets/{other['id']}/annotations", json={"records": [row]}, headers=vendor)
    assert r.status_code == 404
    assert client.post(f"/api/v1/datasets/{ds}/gold", json={"records": [row]}, headers=vendor).status_code == 403
    listed = client.get("/api/v1/datasets", headers=vendor).get_json()["items"]
    assert [d["id"] for d in listed] == [ds]


def test_roles_that_may_not_write(client, two):
    a, _, ids = two
    ds = ids["dataset_id"]
    viewer, analyst = a.tenant.auth("viewer"), a.tenant.auth("analyst")
    row = {"records": [{"item_id": "i", "annotator_id": "z", "label": "positive"}]}
    assert client.post("/api/v1/datasets", json={"name": "v", "labels": ["a", "b"]}, headers=viewer).status_code == 403
    assert client.post(f"/api/v1/datasets/{ds}/annotations", json=row, headers=viewer).status_code == 403
    assert client.post("/api/v1/models", json={"name": "v"}, headers=viewer).status_code == 403
    assert client.post(f"/api/v1/datasets/{ds}/annotations", json=row, headers=analyst).status_code == 403
    assert client.post("/api/v1/datasets", json={"name": "v", "labels": ["a", "b"]}, headers=analyst).status_code == 403
    # Reading is fine for both.
    assert client.get(f"/api/v1/datasets/{ds}/certifications", headers=viewer).status_code == 200


def test_authentication_required_and_tokens_stored_hashed(app, client, two):
    a, _, _ = two
    r = client.get("/api/v1/datasets")
    assert r.status_code == 401 and r.get_json()["error"] == "unauthorized"
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/api/v1/datasets", headers={"Authorization": "Bearer nope"}).status_code == 401
    factory = make_session_factory(app.extensions["auditor.engine"])
    token = a.tenant.tokens["viewer"]
    with factory() as db:
        stored = db.scalars(select(ApiToken.token_hash)).all()
        assert token not in stored and all(len(h) == 64 for h in stored)
        db.execute(update(ApiToken).where(ApiToken.prefix == token[:12])
                   .values(expires_at=datetime.now(UTC) - timedelta(seconds=1)))
        db.commit()
    assert client.get("/api/v1/me", headers=a.tenant.auth("viewer")).status_code == 401
    with factory() as db:
        db.execute(update(ApiToken).where(ApiToken.prefix == token[:12])
                   .values(expires_at=None, revoked_at=datetime.now(UTC)))
        db.commit()
    assert client.get("/api/v1/me", headers=a.tenant.auth("viewer")).status_code == 401


def test_session_cookie_reads_but_never_writes_the_api(app, two):
    a, _, _ = two
    client = app.test_client()
    login(client, a.tenant)
    assert client.get("/api/v1/datasets").status_code == 200
    assert client.post("/api/v1/models", json={"name": "from-a-cookie"}).status_code == 401


def test_forms_without_csrf_token_are_refused(app, two):
    a, _, _ = two
    client = app.test_client()
    r = client.post("/login", data={"workspace": a.tenant.slug, "email": a.tenant.emails["admin"],
                                    "password": "correct horse battery"})
    assert r.status_code == 400 and "security token" in r.get_data(as_text=True)
    assert "session" not in {c.key for c in client._cookies.values()} or client.get("/").status_code == 302
    assert client.get("/").status_code == 302  # still logged out
    r = client.post("/login", data={"csrf_token": "forged", "workspace": a.tenant.slug,
                                    "email": a.tenant.emails["admin"], "password": "correct horse battery"})
    assert r.status_code == 400
    login(client, a.tenant)
    assert client.post("/logout").status_code == 400
    assert client.get("/").status_code == 200  # the forged logout did nothing
    page = client.get("/").get_data(as_text=True)
    assert client.post("/logout", data={"csrf_token": csrf_token(page)}).status_code == 302
    assert client.get("/").status_code == 302


def test_bad_password_and_open_redirect(app, two):
    a, _, _ = two
    client = app.test_client()
    token = csrf_token(client.get("/login").get_data(as_text=True))
    r = client.post("/login", data={"csrf_token": token, "workspace": a.tenant.slug,
                                    "email": a.tenant.emails["admin"], "password": "wrong"})
    assert r.status_code == 401
    r = client.post("/login?next=//evil.example/x", data={
        "csrf_token": token, "workspace": a.tenant.slug, "email": a.tenant.emails["admin"],
        "password": "correct horse battery"})
    assert r.status_code == 302 and r.headers["Location"] == "/"


def test_html_and_script_in_ids_and_labels_are_rendered_inert(app):
    tenant = make_tenant(app, vendor=XSS_ATTR, extra_vendors=())
    client = app.test_client()
    admin = tenant.auth()
    ds = client.post("/api/v1/datasets", json={"name": XSS, "labels": [XSS, XSS_ATTR]}, headers=admin).get_json()
    records = [{"item_id": f"{XSS}{i}", "annotator_id": f"{XSS_ATTR}{j}", "label": [XSS, XSS_ATTR][(i + j) % 2],
                "vendor": XSS_ATTR} for i in range(6) for j in range(3)]
    from tests.web.conftest import eager_audits

    with eager_audits(app):
        assert client.post(f"/api/v1/datasets/{ds['id']}/annotations", json={"records": records},
                           headers=admin).status_code == 202
    model = client.post("/api/v1/models", json={"name": XSS}, headers=admin).get_json()
    client.post(f"/api/v1/models/{model['id']}/releases", json={"version": XSS_ATTR}, headers=admin)
    login(client, tenant)
    pages = ["/", f"/datasets/{ds['id']}", f"/models/{model['id']}", "/audit-runs"]
    from urllib.parse import quote

    pages.append("/vendors/" + quote(XSS_ATTR, safe=""))
    for url in pages:
        r = client.get(url)
        assert r.status_code == 200, url
        html = r.get_data(as_text=True)
        assert XSS not in html and XSS_ATTR not in html and "<img" not in html, url
    html = client.get(f"/datasets/{ds['id']}").get_data(as_text=True)
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    # Every script element is either our own file or an inert JSON data block.
    for tag in re.findall(r"<script[^>]*>", html):
        assert 'type="application/json"' in tag or tag in ('<script src="/static/charts.js" defer>',
                                                       '<script src="/static/tables.js" defer>'), tag
    # CSV exports neutralise formulas.
    client.post(f"/api/v1/datasets/{ds['id']}/items", json={"items": [{"external_id": "=HYPERLINK(1)"}]},
                headers=admin)
    text = client.get(f"/api/v1/datasets/{ds['id']}/items?format=csv", headers=admin).get_data(as_text=True)
    assert "'=HYPERLINK(1)" in text and "\n=HYPERLINK" not in text.replace(",", "\n").replace("'=", "")


@pytest.fixture(scope="module")
def small_app(pg_engine):
    return create_app(app_config(pg_engine, MAX_CONTENT_LENGTH=2048, AUDITOR_INGEST_LIMIT="3 per minute",
                                 AUDITOR_LOGIN_LIMIT="3 per minute", AUDITOR_SCORE_LIMIT="2 per minute"))


def test_oversized_uploads_get_413(small_app):
    tenant = make_tenant(small_app)
    client = small_app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "big", "labels": ["a", "b"]}, headers=tenant.auth()).get_json()
    body = "item_id,annotator_id,label\n" + "".join(f"item{i},ann{i},a\n" for i in range(400))
    assert len(body) > 2048
    url = f"/api/v1/datasets/{ds['id']}/annotations"
    r = client.post(url, data=body, content_type="text/csv", headers=tenant.auth())
    assert r.status_code == 413 and "2048" in r.get_json()["message"]
    import io

    r = client.post(url, headers=tenant.auth(), content_type="multipart/form-data",
                    data={"file": (io.BytesIO(body.encode()), "big.csv")})
    assert r.status_code == 413
    r = client.post(url, headers=tenant.auth(),
                    json={"records": [{"item_id": f"i{i}", "annotator_id": "a", "label": "a"} for i in range(100)]})
    assert r.status_code == 413
    r = small_app.test_client().post("/api/score", json={"metrics": ["accuracy"], "labelCounts": [[1, 2]] * 500},
                                     headers=tenant.auth())
    assert r.status_code == 413 and isinstance(r.get_json(), list)
    assert client.get(f"/api/v1/datasets/{ds['id']}", headers=tenant.auth()).get_json()["data_version"] == 0


def test_rate_limits_on_ingestion_and_login_are_shared_through_redis(pg_engine, small_app):
    tenant = make_tenant(small_app)
    # A second app on the same Redis counters stands for a second web process.
    twin = create_app(app_config(pg_engine, RATELIMIT_KEY_PREFIX=small_app.config["RATELIMIT_KEY_PREFIX"],
                                 AUDITOR_INGEST_LIMIT="3 per minute", AUDITOR_LOGIN_LIMIT="3 per minute"))
    clients = [small_app.test_client(), twin.test_client()]
    ds = clients[0].post("/api/v1/datasets", json={"name": "rl", "labels": ["a", "b"]}, headers=tenant.auth()).get_json()
    url = f"/api/v1/datasets/{ds['id']}/annotations"
    statuses = []
    for i in range(4):
        rec = {"records": [{"item_id": f"i{i}", "annotator_id": "a", "label": "a"}]}
        statuses.append(clients[i % 2].post(url, json=rec, headers=tenant.auth()).status_code)
    assert statuses == [202, 202, 202, 429]
    r = clients[1].post(url, json={"records": [{"item_id": "z", "annotator_id": "a", "label": "a"}]},
                        headers=tenant.auth())
    assert r.status_code == 429 and r.get_json()["error"] == "too_many_requests"
    # Another token has its own budget.
    r = clients[0].post(url, json={"records": [{"item_id": "y", "annotator_id": "a", "label": "a"}]},
                        headers=make_tenant_token(small_app, tenant))
    assert r.status_code == 202
    login_statuses = []
    for i in range(4):
        c = clients[i % 2]
        token = csrf_token(c.get("/login").get_data(as_text=True))
        login_statuses.append(c.post("/login", data={"csrf_token": token, "workspace": "nope", "email": "x@y.z",
                                                     "password": "wrong"}).status_code)
    assert login_statuses == [401, 401, 401, 429]


def make_tenant_token(app, tenant) -> dict:
    """A second admin token of the same user (its own rate-limit budget)."""
    from auditor.db import User
    from auditor.web.security import issue_token

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        user = db.get(User, tenant.user_ids["admin"])
        plaintext = issue_token(db, user, name="second")[1]
        db.commit()
    return {"Authorization": f"Bearer {plaintext}"}


def test_security_headers(app, client, two):
    a, _, _ = two
    for r in (client.get("/login"), client.get("/api/v1/datasets", headers=a.tenant.auth()),
              client.post("/api/score", json={})):
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "http" not in csp and "*" not in csp and "unsafe-inline" not in csp
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["X-Frame-Options"] == "DENY"
    assert client.get("/login").headers["Cache-Control"] == "no-store"


def test_errors_are_json_without_stack_traces(client, two):
    a, _, _ = two
    for r in (client.get("/api/v1/nothing-here", headers=a.tenant.auth()),
              client.delete("/api/v1/datasets", headers=a.tenant.auth()),
              client.get("/api/v1/datasets?page=abc", headers=a.tenant.auth()),
              client.post("/api/v1/datasets", data="{", content_type="application/json", headers=a.tenant.auth())):
        assert r.mimetype == "application/json"
        body = r.get_json()
        assert set(body) >= {"error", "message"}
        assert "Traceback" not in r.get_data(as_text=True)
    assert client.get("/api/v1/datasets?page=abc", headers=a.tenant.auth()).get_json()["field"] == "page"


@pytest.mark.parametrize("target", ["/%09/evil.example/phish", "/%0a/evil.example", "/%5cevil.example",
                                    "/\\evil.example", "https://evil.example/", "%2F%2Fevil.example",
                                    "/%0d%0a/evil.example", "/ /evil.example"])
def test_login_never_redirects_off_site(app, two, target):
    a, _, _ = two
    client = app.test_client()
    token = csrf_token(client.get("/login").get_data(as_text=True))
    r = client.post(f"/login?next={target}", data={
        "csrf_token": token, "workspace": a.tenant.slug, "email": a.tenant.emails["admin"],
        "password": "correct horse battery"})
    assert r.status_code == 302 and r.headers["Location"] == "/", r.headers["Location"]


def test_login_keeps_a_local_next_path(app, two):
    a, _, _ = two
    client = app.test_client()
    token = csrf_token(client.get("/login").get_data(as_text=True))
    r = client.post("/login?next=/runs%3Fpage%3D2", data={
        "csrf_token": token, "workspace": a.tenant.slug, "email": a.tenant.emails["admin"],
        "password": "correct horse battery"})
    assert r.status_code == 302 and r.headers["Location"] == "/runs?page=2"
