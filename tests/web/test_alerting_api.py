"""The alert lifecycle, the alert channels and rules, and the workspace thresholds through the
JSON API, on PostgreSQL: who may do what, what each step records (who and when), what is
refused (with the field named), and which channels a rule sends an alert to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from auditor.alerting.routing import route_alerts
from auditor.db import User, WebhookDelivery, make_session_factory
from tests.web.conftest import add_alert, make_tenant, new_dataset

pytestmark = pytest.mark.services


def _alerts(app, tenant, *specs) -> list[int]:
    """Stored alerts of the tenant's workspace: (kind, severity, dataset_id, subject) each."""
    return [add_alert(app, tenant, kind=kind, severity=sev, dataset_id=ds, subject=subject, message=f"{subject} moved")
            for kind, sev, ds, subject in specs]


@pytest.fixture(scope="module")
def team(app):
    tenant = make_tenant(app)
    client = app.test_client()
    ds = new_dataset(client, tenant.auth(), "routing")
    return tenant, ds


def test_each_step_records_who_and_when_and_the_thread_keeps_them_in_order(app, team):
    tenant, ds = team
    (alert_id,) = _alerts(app, tenant, ("vendor_quality_changed", "critical", ds, "acme-labeling"))
    client, analyst = app.test_client(), tenant.auth("analyst")
    before = datetime.now(UTC)
    r = client.post(f"/api/v1/alerts/{alert_id}/assign", json={"user_id": tenant.user_ids["admin"]}, headers=analyst)
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert body["assigned_to_id"] == tenant.user_ids["admin"] and body["assignee"] == tenant.emails["admin"]
    assert before <= datetime.fromisoformat(body["assigned_at"]) <= datetime.now(UTC)
    until = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    r = client.post(f"/api/v1/alerts/{alert_id}/snooze", json={"until": until.isoformat()}, headers=analyst)
    assert r.get_json()["status"] == "snoozed" and datetime.fromisoformat(r.get_json()["snoozed_until"]) == until
    r = client.post(f"/api/v1/alerts/{alert_id}/comments", json={"body": "  Asked acme about week 12.  "},
                    headers=analyst)
    assert r.status_code == 201
    r = client.post(f"/api/v1/alerts/{alert_id}/acknowledge", headers=tenant.auth("admin"))
    body = r.get_json()
    assert body["status"] == "acknowledged" and body["acknowledged_by"] == tenant.emails["admin"]
    assert body["acknowledged_by_id"] == tenant.user_ids["admin"]
    # Again: nothing changes, nothing is recorded.
    again = client.post(f"/api/v1/alerts/{alert_id}/acknowledge", headers=analyst).get_json()
    assert again["acknowledged_at"] == body["acknowledged_at"] and again["acknowledged_by"] == tenant.emails["admin"]
    events = client.get(f"/api/v1/alerts/{alert_id}", headers=tenant.auth("viewer")).get_json()["events"]
    assert [(e["action"], e["actor"]) for e in events] == [
        ("assigned", tenant.emails["analyst"]), ("snoozed", tenant.emails["analyst"]),
        ("commented", tenant.emails["analyst"]), ("acknowledged", tenant.emails["admin"])]
    assert events[0]["assignee"] == tenant.emails["admin"]
    assert datetime.fromisoformat(events[1]["until"]) == until
    assert events[2]["body"] == "Asked acme about week 12."
    times = [datetime.fromisoformat(e["created_at"]) for e in events]
    assert times == sorted(times) and all(before <= t <= datetime.now(UTC) for t in times)
    # Reopened, unassigned and woken: each a step of its own.
    client.post(f"/api/v1/alerts/{alert_id}/reopen", headers=analyst)
    client.post(f"/api/v1/alerts/{alert_id}/assign", json={"user_id": None}, headers=analyst)
    body = client.post(f"/api/v1/alerts/{alert_id}/snooze", json={"until": None}, headers=analyst).get_json()
    assert body["status"] == "open" and body["assigned_to_id"] is None and body["snoozed_until"] is None
    assert [e["action"] for e in body["events"]][-3:] == ["reopened", "unassigned", "unsnoozed"]


def test_bad_steps_are_refused_naming_the_field(app, team):
    tenant, ds = team
    (alert_id,) = _alerts(app, tenant, ("certification_changed", "warning", ds, "m 1.0"))
    other = make_tenant(app)
    client, auth = app.test_client(), tenant.auth("analyst")
    # A user the workspace does not have (another workspace's, or none) is not found there.
    cases = [
        ("assign", {"user_id": other.user_ids["admin"]}, "user_id", 404),
        ("assign", {"user_id": 2**31 - 1}, "user_id", 404),
        ("assign", {"user_id": "me"}, "user_id"),
        ("snooze", {"until": (datetime.now(UTC) - timedelta(hours=1)).isoformat()}, "until"),
        ("snooze", {"until": (datetime.now(UTC) + timedelta(days=400)).isoformat()}, "until"),
        ("snooze", {"until": "next tuesday"}, "until"),
        ("comments", {"body": "   "}, "body"),
        ("comments", {"body": "x" * 4001}, "body"),
        ("comments", {"text": "hi"}, None),
    ]
    for step, body, field, *status in cases:
        r = client.post(f"/api/v1/alerts/{alert_id}/{step}", json=body, headers=auth)
        assert r.status_code == (status or [400])[0], (step, body, r.get_json())
        if field:
            assert r.get_json()["field"] == field, (step, body, r.get_json())
    assert client.get(f"/api/v1/alerts/{alert_id}", headers=auth).get_json()["events"] == []
    # An inactive user cannot be assigned.
    with make_session_factory(app.extensions["auditor.engine"])() as db:
        db.get(User, tenant.user_ids["viewer"]).is_active = False
        db.commit()
    try:
        r = client.post(f"/api/v1/alerts/{alert_id}/assign", json={"user_id": tenant.user_ids["viewer"]},
                        headers=auth)
        assert r.status_code == 400 and r.get_json()["field"] == "user_id"
    finally:
        with make_session_factory(app.extensions["auditor.engine"])() as db:
            db.get(User, tenant.user_ids["viewer"]).is_active = True
            db.commit()


def test_who_may_act_on_an_alert(app, team):
    tenant, ds = team
    (alert_id,) = _alerts(app, tenant, ("certification_changed", "info", ds, "m 2.0"))
    other = make_tenant(app)
    client = app.test_client()
    for role in ("viewer", "vendor"):
        for step, body in (("acknowledge", None), ("assign", {"user_id": None}), ("comments", {"body": "hi"}),
                           ("snooze", {"until": None}), ("reopen", None)):
            r = client.post(f"/api/v1/alerts/{alert_id}/{step}", json=body, headers=tenant.auth(role))
            assert r.status_code == 403, (role, step)
    assert client.get(f"/api/v1/alerts/{alert_id}", headers=tenant.auth("vendor")).status_code == 403
    assert client.get(f"/api/v1/alerts/{alert_id}", headers=other.auth()).status_code == 404
    assert client.post(f"/api/v1/alerts/{alert_id}/acknowledge", headers=other.auth()).status_code == 404


def test_channels_keep_their_secret_and_refuse_bad_targets(app, team):
    tenant, _ = team
    client, admin = app.test_client(), tenant.auth()
    secret = "https://hooks.example.org/services/T0/B0/very-secret-token-4242"
    r = client.post("/api/v1/alert-channels", json={"kind": "slack", "name": "ops", "url": secret}, headers=admin)
    assert r.status_code == 201, r.get_json()
    slack = r.get_json()
    assert slack["url_hint"] == "https://hooks.example.org/…4242" and "very-secret" not in str(slack)
    listed = client.get("/api/v1/alert-channels", headers=admin).get_data(as_text=True)
    assert "very-secret" not in listed and "very-secret" not in client.get(
        "/api/v1/alert-channels?format=csv", headers=admin).get_data(as_text=True)
    r = client.post("/api/v1/alert-channels", json={"kind": "email", "name": "leads",
                                                    "recipients": ["lead@example.org", "ops@example.org"]},
                    headers=admin)
    assert r.status_code == 201 and r.get_json()["recipients"] == ["lead@example.org", "ops@example.org"]
    bad = [
        ({"kind": "slack", "name": "x", "url": "http://127.0.0.1:9/hook"}, "url"),  # loopback: no opt-in here
        ({"kind": "slack", "name": "x", "url": "http://10.1.2.3/hook"}, "url"),
        ({"kind": "slack", "name": "x", "url": "ftp://hooks.example.org/x"}, "url"),
        ({"kind": "slack", "name": "x"}, "url"),
        ({"kind": "slack", "name": "x", "url": secret, "recipients": ["a@example.org"]}, "recipients"),
        ({"kind": "email", "name": "x", "recipients": ["ops@example.org", "Eve <eve@example.org>"]}, "recipients[1]"),
        ({"kind": "email", "name": "x", "recipients": ["a@example.org\r\nBcc: eve@example.org"]}, "recipients[0]"),
        ({"kind": "email", "name": "x"}, "recipients"),
        ({"kind": "email", "name": "x", "recipients": ["a@example.org"], "url": secret}, "url"),
        ({"kind": "pager", "name": "x"}, "kind"),
    ]
    for body, field in bad:
        r = client.post("/api/v1/alert-channels", json=body, headers=admin)
        assert r.status_code == 400 and r.get_json()["field"] == field, (body, r.get_json())
    for role in ("analyst", "viewer", "vendor"):
        assert client.get("/api/v1/alert-channels", headers=tenant.auth(role)).status_code == 403
        assert client.post("/api/v1/alert-channels", json={"kind": "slack", "name": "x", "url": secret},
                           headers=tenant.auth(role)).status_code == 403


def test_rules_route_each_alert_once_to_the_channels_they_name(app):
    tenant = make_tenant(app)
    client, admin = app.test_client(), tenant.auth()
    ds = [new_dataset(client, admin, n) for n in ("one", "two")]

    def channel(name, **target):
        body = {"kind": "email", "name": name, **target} if "recipients" in target else \
            {"kind": "slack", "name": name, **target}
        return client.post("/api/v1/alert-channels", json=body, headers=admin).get_json()["id"]

    mail = channel("leads", recipients=["lead@example.org"])
    chat = channel("ops", url="https://hooks.example.org/services/x")
    off = channel("off", recipients=["off@example.org"])
    client.post(f"/api/v1/alert-channels/{off}/deactivate", headers=admin)

    def rule(**body):
        r = client.post("/api/v1/alert-rules", json=body, headers=admin)
        assert r.status_code == 201, r.get_json()
        return r.get_json()

    drops = rule(name="vendor drops on one", kinds=["vendor_quality_changed"], severities=["critical"],
                 dataset_ids=[ds[0]], channel_ids=[mail, chat, off])
    assert drops["channel_ids"] == sorted([mail, chat, off])
    rule(name="everything critical to chat", severities=["critical"], channel_ids=[chat])
    ids = _alerts(app, tenant, ("vendor_quality_changed", "critical", ds[0], "acme"),   # both rules: mail, chat once
                  ("vendor_quality_changed", "info", ds[0], "acme"),                     # none
                  ("vendor_quality_changed", "critical", ds[1], "bolt"),                 # chat only
                  ("certification_changed", "warning", ds[0], "m 1.0"))                  # none
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        made = route_alerts(db, ids)
        db.commit()
        rows = db.scalars(select(WebhookDelivery).where(WebhookDelivery.id.in_(made))).all()
    import json

    sent = {r.channel_id: [a["id"] for a in json.loads(r.body)["alerts"]] for r in rows}
    assert sent == {mail: [ids[0]], chat: [ids[0], ids[2]]}
    assert all(r.webhook_id is None and r.status.value == "pending" for r in rows)
    # Replacing the rule (now any severity of dataset one) routes the info alert too.
    r = client.put(f"/api/v1/alert-rules/{drops['id']}", json={"name": "all of one", "dataset_ids": [ds[0]],
                                                                "channel_ids": [mail]}, headers=admin)
    assert r.status_code == 200 and r.get_json()["kinds"] == [] and r.get_json()["channel_ids"] == [mail]
    with factory() as db:
        rows = db.scalars(select(WebhookDelivery).where(WebhookDelivery.id.in_(route_alerts(db, ids)))).all()
        sent = {r.channel_id: [a["id"] for a in json.loads(r.body)["alerts"]] for r in rows}
        db.rollback()
    assert sent == {mail: [ids[0], ids[1], ids[3]], chat: [ids[0], ids[2]]}
    # Rules name only the workspace's own channels and datasets (others are not found there).
    other = make_tenant(app)
    foreign = client.post("/api/v1/alert-channels", json={"kind": "email", "name": "x",
                                                          "recipients": ["x@example.org"]},
                          headers=other.auth()).get_json()["id"]
    r = client.post("/api/v1/alert-rules", json={"name": "x", "channel_ids": [foreign]}, headers=admin)
    assert r.status_code == 404 and r.get_json()["field"] == "channel_ids"
    r = client.post("/api/v1/alert-rules", json={"name": "x", "channel_ids": [mail], "dataset_ids": [2**31 - 1]},
                    headers=admin)
    assert r.status_code == 404 and r.get_json()["field"] == "dataset_ids"
    r = client.post("/api/v1/alert-rules", json={"name": "x", "channel_ids": [mail], "kinds": ["nope"]},
                    headers=admin)
    assert r.status_code == 400 and r.get_json()["field"].startswith("kinds")
    # Deleting a channel leaves the rule its other channels.
    client.delete(f"/api/v1/alert-channels/{chat}", headers=admin)
    rules = client.get("/api/v1/alert-rules", headers=admin).get_json()["items"]
    assert [r["channel_ids"] for r in rules] == [[mail], []]


def test_workspace_thresholds_default_to_the_environment_and_record_who_set_them(app):
    from auditor.alerting.settings import audit_options
    from auditor.audit.pipeline import AuditOptions

    tenant = make_tenant(app)
    client, admin = app.test_client(), tenant.auth()
    ds = new_dataset(client, admin, "thresholds")
    listed = {x["name"]: x for x in client.get("/api/v1/workspace-settings", headers=tenant.auth("viewer")).get_json()}
    defaults = app.extensions["celery"].conf["auditor_worker"]
    assert listed["certify_threshold"]["value"] == defaults.certify_threshold and not listed["certify_threshold"]["overridden"]
    r = client.put("/api/v1/workspace-settings", json={"certify_threshold": 0.9, "certify_method": "oms"},
                   headers=admin)
    assert r.status_code == 200, r.get_json()
    got = {x["name"]: x for x in r.get_json()}
    assert got["certify_threshold"]["value"] == 0.9 and got["certify_threshold"]["updated_by"] == tenant.emails["admin"]
    assert got["certify_method"]["value"] == "oms" and got["quality_alpha"]["overridden"] is False
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        used = audit_options(db, ds, AuditOptions())
    assert (used.threshold, used.method, used.quality_alpha) == (0.9, "oms", AuditOptions().quality_alpha)
    for body in ({"certify_threshold": 1.5}, {"certify_method": "vibes"}, {"nope": 1}, {}, {"quality_alpha": 0}):
        assert client.put("/api/v1/workspace-settings", json=body, headers=admin).status_code == 400, body
    assert client.put("/api/v1/workspace-settings", json={"certify_threshold": 0.9},
                      headers=tenant.auth("analyst")).status_code == 403
    # null: back to the default.
    r = client.put("/api/v1/workspace-settings", json={"certify_threshold": None}, headers=admin)
    assert {x["name"]: x for x in r.get_json()}["certify_threshold"]["overridden"] is False
    with factory() as db:
        assert audit_options(db, ds, AuditOptions()).threshold == AuditOptions().threshold
