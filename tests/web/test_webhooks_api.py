"""The webhooks API and page: admins only, per workspace, the secret answered once, bounded input.

Sending is the workers' (tests/workers/test_webhooks.py); here the deliveries a test
request queues are read back from the delivery log as the database holds them.
"""

from __future__ import annotations

import csv
import io

import pytest

from tests.web.conftest import login, make_tenant

pytestmark = pytest.mark.services

URL = "https://hooks.example.com/auditor"


def test_create_list_test_deactivate_delete(app, client):
    tenant = make_tenant(app)
    auth = tenant.auth()
    r = client.post("/api/v1/webhooks", json={"url": URL, "events": ["alert.raised", "audit.completed"],
                                              "description": "on-call"}, headers=auth)
    assert r.status_code == 201, r.get_json()
    created = r.get_json()
    secret = created["secret"]
    assert secret.startswith("whsec_") and len(secret) >= 40
    assert created["events"] == ["alert.raised", "audit.completed"] and created["active"] is True
    hook_id = created["id"]

    listed = client.get("/api/v1/webhooks", headers=auth).get_json()
    assert [h["id"] for h in listed["items"]] == [hook_id] and listed["total"] == 1
    exported = client.get("/api/v1/webhooks?format=csv", headers=auth).get_data(as_text=True)
    for body in (str(listed), str(client.get(f"/api/v1/webhooks/{hook_id}", headers=auth).get_json()), exported):
        assert secret not in body and secret[10:] not in body
    assert next(csv.DictReader(io.StringIO(exported)))["url"] == URL

    r = client.post(f"/api/v1/webhooks/{hook_id}/test", headers=auth)
    assert r.status_code == 202
    queued = r.get_json()
    assert (queued["event"], queued["status"], queued["attempts"], queued["history"]) == ("webhook.test", "pending", 0, [])
    log = client.get(f"/api/v1/webhooks/{hook_id}/deliveries", headers=auth).get_json()
    assert [d["id"] for d in log["items"]] == [queued["id"]]
    assert client.get(f"/api/v1/webhooks/{hook_id}/deliveries?status=succeeded", headers=auth).get_json()["total"] == 0
    assert client.get(f"/api/v1/webhooks/{hook_id}/deliveries?status=maybe", headers=auth).status_code == 400

    assert client.post(f"/api/v1/webhooks/{hook_id}/deactivate", headers=auth).get_json()["active"] is False
    assert client.post(f"/api/v1/webhooks/{hook_id}/activate", headers=auth).get_json()["active"] is True

    r = client.delete(f"/api/v1/webhooks/{hook_id}", headers=auth)
    assert r.status_code == 200 and r.get_json()["id"] == hook_id
    assert client.get(f"/api/v1/webhooks/{hook_id}", headers=auth).status_code == 404
    assert client.get(f"/api/v1/webhooks/{hook_id}/deliveries", headers=auth).status_code == 404


def test_only_admins_of_the_workspace(app, client):
    tenant, other = make_tenant(app), make_tenant(app)
    hook_id = client.post("/api/v1/webhooks", json={"url": URL}, headers=tenant.auth()).get_json()["id"]
    for role in ("analyst", "viewer", "vendor"):
        assert client.get("/api/v1/webhooks", headers=tenant.auth(role)).status_code == 403
        assert client.post("/api/v1/webhooks", json={"url": URL}, headers=tenant.auth(role)).status_code == 403
        assert client.delete(f"/api/v1/webhooks/{hook_id}", headers=tenant.auth(role)).status_code == 403
    assert client.get("/api/v1/webhooks").status_code == 401
    # Another workspace's admin finds nothing.
    for method, path in (("get", f"/api/v1/webhooks/{hook_id}"), ("delete", f"/api/v1/webhooks/{hook_id}"),
                         ("post", f"/api/v1/webhooks/{hook_id}/test"),
                         ("get", f"/api/v1/webhooks/{hook_id}/deliveries")):
        assert getattr(client, method)(path, headers=other.auth()).status_code == 404, path
    assert client.get("/api/v1/webhooks", headers=other.auth()).get_json()["total"] == 0


@pytest.mark.parametrize(("body", "field"), [
    ({"url": URL, "events": ["audit.started"]}, "events[0]"),
    ({"url": URL, "events": ["alert.raised", "alert.raised"]}, "events"),
    ({"url": URL, "secret": "too-short"}, "secret"),
    ({"url": URL, "secret": "has a space in it but is long enough"}, "secret"),
    ({"url": "x" * 2001}, "url"),
    ({"url": "javascript:alert(1)"}, "url"),
    ({"url": URL, "extra": 1}, "body"),
    ({}, "body"),  # the message names it: "'url' is a required property"
])
def test_bad_webhooks_are_refused_naming_the_field(app, client, body, field):
    tenant = make_tenant(app)
    r = client.post("/api/v1/webhooks", json=body, headers=tenant.auth())
    assert r.status_code == 400, r.get_json()
    assert r.get_json()["field"] == field
    assert field != "body" or "url" in r.get_json()["message"] or "extra" in r.get_json()["message"]
    assert client.get("/api/v1/webhooks", headers=tenant.auth()).get_json()["total"] == 0


def test_a_given_secret_is_kept_and_webhooks_per_workspace_are_bounded(app, client):
    from auditor.web.api.webhooks import MAX_WEBHOOKS

    tenant = make_tenant(app)
    own = "a-secret-of-my-own-choosing-0123456789"
    r = client.post("/api/v1/webhooks", json={"url": URL, "secret": own}, headers=tenant.auth())
    assert r.get_json()["secret"] == own and r.get_json()["secret_prefix"] == own[:9] + "…"
    for _ in range(MAX_WEBHOOKS - 1):
        assert client.post("/api/v1/webhooks", json={"url": URL}, headers=tenant.auth()).status_code == 201
    r = client.post("/api/v1/webhooks", json={"url": URL}, headers=tenant.auth())
    assert r.status_code == 409 and str(MAX_WEBHOOKS) in r.get_json()["message"]


def test_the_webhooks_page_shows_each_webhook_and_its_log_to_admins(app):
    tenant = make_tenant(app)
    client = app.test_client()
    hook = client.post("/api/v1/webhooks", json={"url": URL, "description": "pager"}, headers=tenant.auth()).get_json()
    delivery = client.post(f"/api/v1/webhooks/{hook['id']}/test", headers=tenant.auth()).get_json()
    assert client.get("/webhooks").status_code == 302  # not logged in: to the login page
    login(client, tenant, "admin")
    page = client.get("/webhooks")
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert "pager" in html and URL in html and "webhook.test" in html and "pending" in html
    assert f">{delivery['id']}<" in html and hook["secret"] not in html
    viewer = app.test_client()
    login(viewer, tenant, "analyst")
    assert viewer.get("/webhooks").status_code == 403


def test_the_delivery_log_does_not_show_what_internal_names_resolve_to(app, client):
    """Issue 33, defect 8: a delivery to a name resolving inside the network was refused
    with "<name> resolves to 10.x.y.z": the log admins read answered DNS questions about the
    inside. It still says why, without the address."""
    import socket

    from auditor.db import make_session_factory
    from auditor.webhooks.deliveries import attempt

    host = socket.gethostname()
    resolved = {info[4][0] for info in socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM)}
    tenant = make_tenant(app)
    auth = tenant.auth()
    hook = client.post("/api/v1/webhooks", json={"url": f"http://{host}:9/hook"}, headers=auth).get_json()
    queued = client.post(f"/api/v1/webhooks/{hook['id']}/test", headers=auth)
    assert queued.status_code == 202
    # the worker's attempt, made here (the task sends it the same way)
    attempt(make_session_factory(app.extensions["auditor.engine"]), queued.get_json()["id"], max_attempts=1,
            backoff=1.0, allow_private=False)
    text = client.get(f"/api/v1/webhooks/{hook['id']}/deliveries", headers=auth).get_data(as_text=True)
    assert "loopback, private or link-local" in text, text[:500]
    assert not any(ip in text for ip in resolved), (resolved, text[:500])
