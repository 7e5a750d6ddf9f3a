"""The daily loop in a real headless Chromium: a filtered link followed while logged out lands,
after logging in, on the same filtered list; an alert is assigned, snoozed, commented on and
acknowledged from its page, each step shown with who took it and when; the admins' routing
page adds a channel and a rule; a dataset's imports page lists a rejected attempt with its
first errors. Each page is shot at 1400 and 390 px (``test-artifacts/alerting/``), stays on
the host with a clean console, and fits a phone's width."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.web import browser_support
from tests.web.browser_support import Watched
from tests.web.conftest import add_alert, make_tenant, new_dataset

browser = browser_support.browser
server = browser_support.server

pytestmark = pytest.mark.services

WIDTHS = (1400, 390)


def _alert(app, tenant, dataset_id=None, severity="critical", subject="acme-labeling") -> int:
    return add_alert(app, tenant, dataset_id=dataset_id, severity=severity, subject=subject,
                     message=f"vendor {subject}: agreement with the other annotators dropped from 0.812 to 0.604")


def _fits(w: Watched, what: str) -> None:
    if w.width <= 400:
        assert w.document_width() <= w.width, (what, w.document_width())


@pytest.mark.parametrize("width", WIDTHS)
def test_a_filtered_link_survives_login(app, browser, server, width):
    tenant = make_tenant(app)
    critical = _alert(app, tenant)
    warning = _alert(app, tenant, severity="warning", subject="bolt-annotations")
    w = Watched(browser, server, width=width)
    try:
        target = "/alerts?severity=critical&status=all"
        w.page.goto(server + target)
        assert w.page.url.startswith(server + "/login?next=")
        w.page.fill("input[name=workspace]", tenant.slug)
        w.page.fill("input[name=email]", tenant.emails["admin"])
        w.page.fill("input[name=password]", "correct horse battery")
        w.page.click("button[type=submit]")
        w.page.wait_for_load_state("load")
        assert w.page.url == server + target
        assert w.page.locator("select[name=severity]").input_value() == "critical"
        assert w.page.locator("select[name=status]").input_value() == "all"
        rows = w.page.locator("table#alerts tbody tr").evaluate_all("rs => rs.map(r => +r.dataset.alert)")
        assert critical in rows and warning not in rows
        w.shot(f"alerting/filtered-link-after-login-{width}")
        _fits(w, target)
        w.check_clean()
    finally:
        w.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_assign_snooze_comment_and_acknowledge_show_who_and_when(app, browser, server, width):
    tenant = make_tenant(app)
    alert_id = _alert(app, tenant)
    w = Watched(browser, server, width=width)
    page = w.page
    try:
        w.login_tenant(tenant, "analyst")
        w.open(f"/alerts/{alert_id}", f"alerting/alert-new-{width}")
        assert page.inner_text("#alert-assignee").strip() == "nobody"
        page.select_option("#assign-user", label=tenant.emails["admin"])
        page.click("button#assign")
        page.wait_for_load_state("load")
        stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"
        assert re.fullmatch(rf"{re.escape(tenant.emails['admin'])}, since {stamp}", page.inner_text("#alert-assignee"))
        until = (datetime.now(UTC) + timedelta(days=3)).date().isoformat()
        page.fill("#snooze-until", until)
        page.click("button#snooze")
        page.wait_for_load_state("load")
        assert re.fullmatch(rf"snoozed until {until} 00:00 UTC", page.inner_text("#alert-status").strip())
        page.fill("#comment-body", "Acme says week 12 had a new team; retraining.")
        page.click("button#comment")
        page.wait_for_load_state("load")
        page.click("button#acknowledge")
        page.wait_for_load_state("load")
        status = page.inner_text("#alert-status").strip()
        assert re.fullmatch(rf"acknowledged by {re.escape(tenant.emails['analyst'])}, {stamp}", status), status
        steps = page.locator("ol#thread li").all_inner_texts()
        who = re.escape(tenant.emails["analyst"])
        assert [bool(re.match(rf"{who} {stamp}", s)) for s in steps] == [True] * 4, steps
        assert f"assigned it to {tenant.emails['admin']}" in steps[0]
        assert f"snoozed it until {until} 00:00 UTC" in steps[1]
        assert "Acme says week 12 had a new team" in steps[2] and steps[3].endswith("acknowledged it")
        w.shot(f"alerting/alert-acted-on-{width}")
        _fits(w, "alert page")
        # The list shows the assignee and who acknowledged it, and when.
        w.open("/alerts?status=acknowledged", f"alerting/alerts-acknowledged-{width}")
        row = page.locator(f'table#alerts tr[data-alert="{alert_id}"]').inner_text()
        assert tenant.emails["admin"] in row and re.search(rf"by {who}, \d{{4}}-\d\d-\d\d \d\d:\d\d", row)
        _fits(w, "alerts")
        w.check_clean()
    finally:
        w.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_admins_add_a_channel_and_a_rule_and_the_imports_page_lists_a_rejected_attempt(app, browser, server, width):
    tenant = make_tenant(app)
    client = app.test_client()
    ds = new_dataset(client, tenant.auth(), "weekly", ["cat", "dog"])
    good = [{"item_id": f"i{i}", "annotator_id": f"a{j}", "label": "cat"} for i in range(5) for j in range(3)]
    assert client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": good},
                       headers=tenant.auth()).status_code == 202
    bad = "item_id,annotator_id,label\ni1,a1,cat\ni2,a1,bird\ni3,,dog\n"
    r = client.post(f"/api/v1/datasets/{ds}/annotations", data=bad, content_type="text/csv", headers=tenant.auth())
    assert r.status_code == 400
    w = Watched(browser, server, width=width)
    page = w.page
    try:
        w.login_tenant(tenant)
        w.open("/alerting", f"alerting/routing-empty-{width}")
        page.select_option("#channel-form select[name=kind]", "email")
        page.fill("#channel-form input[name=name]", "leads")
        page.fill("#channel-form input[name=recipients]", "lead@example.org, ops@example.org")
        page.click("#channel-form button[type=submit]")
        page.wait_for_load_state("load")
        assert "lead@example.org, ops@example.org" in page.inner_text("table#channels")
        form = page.locator("form#rule-form")
        form.locator("input[name=name]").fill("vendor drops")
        form.locator("input[name=kinds][value=vendor_quality_changed]").check()
        form.locator("input[name=severities][value=critical]").check()
        form.locator("input[name=channel_ids]").first.check()
        form.locator("button[type=submit]").click()
        page.wait_for_load_state("load")
        rule = page.locator("table#rules tbody tr").first.inner_text()
        assert "vendor drops" in rule and "vendor quality changed" in rule and "leads" in rule
        page.fill("#setting-certify_threshold", "0.9")
        page.click("#settings-form button[type=submit]")
        page.wait_for_load_state("load")
        assert f"Set by {tenant.emails['admin']}" in page.inner_text("#settings-form")
        w.shot(f"alerting/routing-{width}")
        _fits(w, "alerting")
        w.open(f"/datasets/{ds}/imports", f"alerting/imports-{width}")
        assert page.locator("table#batches tbody tr").count() == 1
        attempt = page.locator("table#attempts tbody tr")
        assert attempt.count() == 1
        text = attempt.inner_text()
        assert tenant.emails["admin"] in text and "rejected (400)" in text
        for e in r.get_json()["errors"][:2]:
            assert f"row {e['row']}" in text
        _fits(w, "imports")
        w.check_clean()
    finally:
        w.close()
