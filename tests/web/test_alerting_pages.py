"""The pages of the alert lifecycle, the admins' alert routing and a dataset's imports, through
their forms (with their CSRF tokens) on PostgreSQL: each step shows who took it and when, bad
fields are 400s naming them, and only admins route alerts."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.web.conftest import add_alert as _alert
from tests.web.conftest import csrf_token, login, make_tenant, new_dataset

pytestmark = pytest.mark.services


def _analyst_on_a_new_alert(app):
    """A new tenant with one stored alert, and a client logged in as its analyst: (tenant, alert id, client, page)."""
    tenant = make_tenant(app)
    alert_id = _alert(app, tenant)
    client = app.test_client()
    login(client, tenant, "analyst")
    return tenant, alert_id, client, f"/alerts/{alert_id}"


def _post(client, page: str, action: str, data: dict):
    token = csrf_token(client.get(page).get_data(as_text=True))
    return client.post(action, data={"csrf_token": token, **data})


def test_the_alert_page_takes_each_step_and_shows_who_and_when(app):
    tenant, alert_id, client, page = _analyst_on_a_new_alert(app)
    html = client.get(page).get_data(as_text=True)
    assert "Nobody has acted on it yet" in html and 'id="assign-user"' in html
    # The page's forms name it as where to go back to; without it a step goes back to the list.
    r = _post(client, page, f"/alerts/{alert_id}/assign", {"user_id": str(tenant.user_ids["admin"]), "next": page})
    assert r.status_code == 302 and r.headers["Location"] == page
    r = _post(client, page, f"/alerts/{alert_id}/assign", {"user_id": str(tenant.user_ids["admin"])})
    assert r.status_code == 302 and r.headers["Location"] == "/alerts"
    tomorrow = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    assert _post(client, page, f"/alerts/{alert_id}/snooze", {"until": tomorrow}).status_code == 302
    assert _post(client, page, f"/alerts/{alert_id}/comments", {"body": "Acme says week 12 was a new team."}
                 ).status_code == 302
    html = client.get(page).get_data(as_text=True)
    assert re.search(rf'id="alert-assignee">{re.escape(tenant.emails["admin"])}, since \d{{4}}-\d\d-\d\d \d\d:\d\d UTC', html)
    assert f"snoozed</span> until {tomorrow} 00:00 UTC" in html
    thread = html[html.index('id="thread"'):]
    assert thread.index("assigned it to") < thread.index("snoozed it until") < thread.index("Acme says week 12")
    assert thread.count(tenant.emails["analyst"]) == 3
    # The snoozed alert is off the open list, on the snoozed one.
    assert f'data-alert="{alert_id}"' not in client.get("/alerts").get_data(as_text=True)
    listed = client.get("/alerts?status=snoozed").get_data(as_text=True)
    assert f'data-alert="{alert_id}"' in listed and tenant.emails["admin"] in listed
    assert f'data-alert="{alert_id}"' not in client.get("/alerts?status=snoozed&assigned=nobody").get_data(
        as_text=True)
    assert _post(client, page, f"/alerts/{alert_id}/acknowledge", {}).status_code == 302
    html = client.get(page).get_data(as_text=True)
    assert re.search(rf"acknowledged</span> by {re.escape(tenant.emails['analyst'])}, \d{{4}}-\d\d-\d\d \d\d:\d\d UTC",
                     html)
    listed = client.get("/alerts?status=acknowledged").get_data(as_text=True)
    assert f"by {tenant.emails['analyst']}" in listed


def test_bad_steps_are_400s_naming_the_field_and_viewers_cannot_take_them(app):
    tenant, alert_id, client, page = _analyst_on_a_new_alert(app)
    # Another workspace's user is not found in this one (404), as in the API.
    for action, data, field, status in (("snooze", {"until": "soon"}, "until", 400),
                                        ("snooze", {"until": "2001-01-01"}, "until", 400),
                                        ("assign", {"user_id": "eve"}, "user_id", 400),
                                        ("assign", {"user_id": str(make_tenant(app).user_ids["admin"])}, "user_id", 404),
                                        ("comments", {"body": "  "}, "body", 400)):
        r = _post(client, page, f"/alerts/{alert_id}/{action}", data)
        assert r.status_code == status and field in r.get_data(as_text=True), (action, data)
    viewer = app.test_client()
    login(viewer, tenant, "viewer")
    assert 'id="assign-user"' not in viewer.get(page).get_data(as_text=True)
    assert _post(viewer, page, f"/alerts/{alert_id}/acknowledge", {}).status_code == 403
    other = app.test_client()
    login(other, make_tenant(app))
    assert other.get(page).status_code == 404


def test_admins_route_alerts_from_the_page(app):
    tenant = make_tenant(app)
    client = app.test_client()
    ds = new_dataset(client, tenant.auth(), "pages")
    login(client, tenant)
    r = _post(client, "/alerting", "/alerting/channels", {"kind": "email", "name": "leads",
                                                          "recipients": "lead@example.org; ops@example.org"})
    assert r.status_code == 302
    r = _post(client, "/alerting", "/alerting/channels", {"kind": "slack", "name": "ops chat",
                                                          "url": "https://hooks.example.org/services/T/B/secret-abcd"})
    assert r.status_code == 302
    channels = client.get("/api/v1/alert-channels", headers=tenant.auth()).get_json()["items"]
    assert [c["recipients"] for c in channels] == [["lead@example.org", "ops@example.org"], []]
    html = client.get("/alerting").get_data(as_text=True)
    assert "https://hooks.example.org/…abcd" in html and "secret-abcd" not in html
    r = client.post("/alerting/rules", data={"csrf_token": csrf_token(html), "name": "drops",
                                             "kinds": "vendor_quality_changed", "severities": "critical",
                                             "dataset_ids": str(ds), "channel_ids": [str(c["id"]) for c in channels],
                                             "active": "on"})
    assert r.status_code == 302
    (rule,) = client.get("/api/v1/alert-rules", headers=tenant.auth()).get_json()["items"]
    assert (rule["kinds"], rule["severities"], rule["dataset_ids"], rule["active"]) == (
        ["vendor_quality_changed"], ["critical"], [ds], True)
    # Edited: any kind now, one channel, inactive.
    html = client.get(f"/alerting?edit={rule['id']}").get_data(as_text=True)
    assert f'id="rule-form-{rule["id"]}"' in html
    r = client.post(f"/alerting/rules/{rule['id']}", data={"csrf_token": csrf_token(html), "name": "any of pages",
                                                          "dataset_ids": str(ds), "channel_ids": str(channels[0]["id"])})
    assert r.status_code == 302
    (rule,) = client.get("/api/v1/alert-rules", headers=tenant.auth()).get_json()["items"]
    assert (rule["name"], rule["kinds"], rule["channel_ids"], rule["active"]) == (
        "any of pages", [], [channels[0]["id"]], False)
    for data, field, status in (({"name": "x", "channel_ids": "999999"}, "channel_ids", 404),
                                ({"name": "x", "channel_ids": "abc"}, "channel_ids", 400),
                                ({"name": "x", "kinds": "nope", "channel_ids": str(channels[0]["id"])}, "kinds", 400)):
        r = client.post("/alerting/rules", data={"csrf_token": csrf_token(html), **data})
        assert r.status_code == status and field in r.get_data(as_text=True), data
    r = client.post("/alerting/channels", data={"csrf_token": csrf_token(html), "kind": "slack", "name": "x",
                                                "url": "http://127.0.0.1:9/x"})
    assert r.status_code == 400 and "url" in r.get_data(as_text=True)
    # Thresholds: set, shown with who and when, cleared back to the default.
    r = client.post("/alerting/settings", data={"csrf_token": csrf_token(html), "certify_threshold": "0.9",
                                                "certify_method": "", "certify_bound": "", "quality_alpha": ""})
    assert r.status_code == 302
    html = client.get("/alerting").get_data(as_text=True)
    assert re.search(rf"Set by {re.escape(tenant.emails['admin'])}, \d{{4}}-\d\d-\d\d \d\d:\d\d UTC", html)
    r = client.post("/alerting/settings", data={"csrf_token": csrf_token(html), "certify_threshold": "2"})
    assert r.status_code == 400 and "certify_threshold" in r.get_data(as_text=True)
    # Analysts see neither the page nor its forms.
    analyst = app.test_client()
    login(analyst, tenant, "analyst")
    assert analyst.get("/alerting").status_code == 403
    assert analyst.post("/alerting/settings", data={"csrf_token": csrf_token(analyst.get("/").get_data(as_text=True)),
                                                    "certify_threshold": "0.9"}).status_code == 403


def test_the_imports_page_lists_batches_and_rejected_attempts_with_their_first_errors(app):
    tenant = make_tenant(app)
    client = app.test_client()
    admin = tenant.auth()
    ds = new_dataset(client, admin, "imports", ["cat", "dog"])
    good = [{"item_id": f"i{i}", "annotator_id": f"a{j}", "label": "cat"} for i in range(4) for j in range(2)]
    assert client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": good}, headers=admin).status_code == 202
    bad = "item_id,annotator_id,label\ni1,a1,cat\ni2,a1,bird\ni3,,dog\n"
    r = client.post(f"/api/v1/datasets/{ds}/annotations", data=bad, content_type="text/csv",
                    headers=tenant.auth("vendor"))
    assert r.status_code == 404  # the vendor is not granted this dataset: nothing is recorded then
    r = client.post(f"/api/v1/datasets/{ds}/annotations", data=bad, content_type="text/csv", headers=admin)
    assert r.status_code == 400, r.get_json()
    attempts = client.get(f"/api/v1/datasets/{ds}/import-attempts", headers=admin).get_json()["items"]
    assert len(attempts) == 1
    (attempt,) = attempts
    assert attempt["submitted_by"] == tenant.emails["admin"] and attempt["kind"] == "annotations"
    assert attempt["status_code"] == 400 and attempt["bad_rows"] == 2
    assert [(e["row"], e["field"]) for e in attempt["errors"]] == [(e["row"], e["field"])
                                                                  for e in r.get_json()["errors"]]
    assert "bird" not in str({k: v for k, v in attempt.items() if k not in ("errors", "message")})
    login(client, tenant, "viewer")
    html = client.get(f"/datasets/{ds}/imports").get_data(as_text=True)
    batches = html[html.index('id="batches"'):html.index('id="attempts-heading"')]
    assert batches.count("data-batch=") == 1 and tenant.emails["admin"] in batches and ">8<" in batches
    rejected = html[html.index('id="attempts"'):]
    assert rejected.count("data-attempt=") == 1 and "rejected (400)" in rejected
    assert f"row {attempt['errors'][0]['row']}" in rejected and tenant.emails["admin"] in rejected
    assert f'/datasets/{ds}/imports' in client.get(f"/datasets/{ds}").get_data(as_text=True)
