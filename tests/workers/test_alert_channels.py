"""Alert routing through a real Celery worker, PostgreSQL and Redis: an admin adds two channels
and a rule on the routing page in a headless Chromium; the rule sends a vendor's quality
drop, found by a real audit of weekly uploads, to an email list (a real local SMTP server,
aiosmtpd) and to a Slack-compatible incoming webhook (a local HTTP receiver), each linking to
the alert's page; a channel whose receiver is down is retried with backoff until it answers."""

from __future__ import annotations

import json
import threading
from email import message_from_bytes, policy
from types import SimpleNamespace

import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import select
from werkzeug.serving import make_server

from auditor.db import Alert, session_scope
from auditor.simulate import draw_history, simulate_history
from tests.web import browser_support
from tests.web.browser_support import Watched
from tests.web.quality_history import GOLD_PER_WEEK, SCENARIO
from tests.workers.conftest import free_port
from tests.workers.test_audit_workers import wait_for
from tests.workers.test_webhooks import Receiver, hooked_app

pytestmark = pytest.mark.services

browser = browser_support.browser

BASE_URL = "https://auditor.example.com"
SENDER = "alerts@auditor.example.com"


class Mailbox:
    """What the local SMTP server received: (envelope sender, recipients, parsed message) each."""

    def __init__(self):
        self.mails: list[tuple[str, list[str], object]] = []

    async def handle_DATA(self, server, session, envelope):
        self.mails.append((envelope.mail_from, list(envelope.rcpt_tos),
                           message_from_bytes(envelope.content, policy=policy.default)))
        return "250 Message accepted for delivery"


@pytest.fixture
def routed(tmp_path, pg_factory, redis_url, start_worker):
    """A worker whose SMTP relay is a local aiosmtpd server, a web app, and the receivers started."""
    mailbox, port = Mailbox(), free_port()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=port)
    smtp.start()
    app, factory, worker = hooked_app(tmp_path, pg_factory, redis_url, start_worker,
                                      AUDITOR_SMTP_HOST="127.0.0.1", AUDITOR_SMTP_PORT=str(port),
                                      AUDITOR_SMTP_SECURITY="none", AUDITOR_SMTP_FROM=SENDER,
                                      AUDITOR_BASE_URL=BASE_URL)
    receivers: list[Receiver] = []
    yield app, factory, worker, mailbox, receivers
    smtp.stop()
    for r in receivers:
        r.close()
    app.extensions["auditor.engine"].dispose()


def _post_history(client, auth, ds: int) -> None:
    """Eight weeks of labels, uploaded week by week (each audited by the worker); acme-labeling's
    annotators are 0.3 less accurate from week 4 on."""
    records = simulate_history(SCENARIO)
    truth = draw_history(SCENARIO).truth[0]
    for week in range(SCENARIO.weeks):
        gold = [{"item_id": f"w{week:03d}-item-{i:05d}", "label": SCENARIO.labels[int(truth[week, i])]}
                for i in range(GOLD_PER_WEEK)]
        assert client.post(f"/api/v1/datasets/{ds}/gold", json={"records": gold}, headers=auth).status_code == 202
        batch = [{k: rec[k] for k in ("item_id", "annotator_id", "label", "vendor", "timestamp")}
                 for rec in records if rec["batch"] == week]
        r = client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": batch}, headers=auth)
        assert r.status_code == 202, r.get_json()


def test_a_rule_routes_a_vendor_alert_to_email_and_to_a_slack_receiver(routed, browser):
    app, factory, worker, mailbox, receivers = routed
    slack = Receiver(free_port(), [200])
    receivers.append(slack)
    from tests.web.conftest import make_tenant

    tenant = make_tenant(app)
    client, admin = app.test_client(), tenant.auth()
    ds = client.post("/api/v1/datasets", json={"name": "weekly", "labels": list(SCENARIO.labels)},
                     headers=admin).get_json()["id"]
    other = client.post("/api/v1/datasets", json={"name": "elsewhere", "labels": ["a", "b"]},
                        headers=admin).get_json()["id"]
    # The admin sets the routing up on its page.
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    w = Watched(browser, f"http://127.0.0.1:{srv.server_port}", width=1400)
    receivers.append(SimpleNamespace(close=lambda: (w.close(), srv.shutdown())))
    # (the page and the server stay up until the end: the alert's link is opened there)
    w.login_tenant(tenant)
    w.open("/alerting")
    for kind, name, field, value in (("email", "leads", "recipients", "lead@example.org, ops@example.org"),
                                     ("slack", "ops chat", "url", slack.url)):
        w.page.select_option("#channel-form select[name=kind]", kind)
        w.page.fill("#channel-form input[name=name]", name)
        w.page.fill(f"#channel-form input[name={field}]", value)
        w.page.click("#channel-form button[type=submit]")
        w.page.wait_for_load_state("load")
    form = w.page.locator("form#rule-form")
    form.locator("input[name=name]").fill("vendor drops")
    form.locator("input[name=kinds][value=vendor_quality_changed]").check()
    form.locator("input[name=severities][value=critical]").check()
    form.locator(f"input[name=dataset_ids][value='{ds}']").check()
    for box in form.locator("input[name=channel_ids]").all():
        box.check()
    form.locator("button[type=submit]").click()
    w.page.wait_for_load_state("load")
    w.shot("alerting/routing-with-a-real-worker-1400")
    w.check_clean()
    mail, chat = client.get("/api/v1/alert-channels", headers=admin).get_json()["items"]
    (rule,) = client.get("/api/v1/alert-rules", headers=admin).get_json()["items"]
    assert rule["channel_ids"] == [mail["id"], chat["id"]] and rule["dataset_ids"] == [ds]
    assert mail["recipients"] == ["lead@example.org", "ops@example.org"] and chat["kind"] == "slack"
    # A rule on another dataset routes nothing of this one.
    client.post("/api/v1/alert-rules", json={"name": "elsewhere", "dataset_ids": [other],
                                             "channel_ids": [mail["id"]]}, headers=admin)
    _post_history(client, admin, ds)

    def vendor_alert():
        with session_scope(factory) as s:
            return s.scalars(select(Alert.id).where(Alert.dataset_id == ds, Alert.kind == "vendor_quality_changed",
                                                    Alert.subject == "acme-labeling")).first()

    alert_id = wait_for(vendor_alert, 300, worker, "the vendor's drop to raise an alert")
    wait_for(lambda: mailbox.mails and slack.requests, 60, worker, "the email and the Slack message")
    with session_scope(factory) as s:
        alert = s.get(Alert, alert_id)
        message, severity = alert.message, str(alert.severity)
        others = s.scalars(select(Alert.id).where(Alert.dataset_id == ds, Alert.id != alert_id)).all()
    assert severity == "critical"

    # The email: to the channel's recipients, from the configured sender, naming the alert and linking to it.
    (sender, recipients, email), = [m for m in mailbox.mails if alert_id in _alert_ids(m[2])]
    assert sender == SENDER and sorted(recipients) == ["lead@example.org", "ops@example.org"]
    assert email["From"] == SENDER and email["To"] == "lead@example.org, ops@example.org"
    assert email["Subject"].startswith("[Auditor] critical vendor quality changed: acme-labeling")
    text = email.get_content()
    assert message in text and f"{BASE_URL}/alerts/{alert_id}" in text and "dataset: weekly" in text
    # The Slack message: one JSON text with a link to the alert.
    bodies = [json.loads(body) for _, body in slack.requests]
    (posted,) = [b for b in bodies if f"/alerts/{alert_id}|" in b["text"]]
    assert f"<{BASE_URL}/alerts/{alert_id}|[critical] vendor quality changed: acme-labeling>" in posted["text"]
    assert slack.requests[0][0]["Content-Type"] == "application/json"
    # Only the rule's alerts went out: annotators' changes (other kinds) stayed on the pages.
    sent = {i for m in mailbox.mails for i in _alert_ids(m[2])}
    drops = _vendor_drops(factory, ds)
    assert alert_id in sent and sent <= drops
    assert set(others) - drops  # (the annotators' changes were raised, and went nowhere)
    # Each channel's delivery log: sent at the first attempt, the relay's 250 and the receiver's 200.
    for channel, code in ((mail, 250), (chat, 200)):
        log = client.get(f"/api/v1/alert-channels/{channel['id']}/deliveries", headers=admin).get_json()["items"]
        assert log and all(d["status"] == "succeeded" and d["attempts"] == 1 and d["response_code"] == code
                           and d["channel_id"] == channel["id"] and d["webhook_id"] is None for d in log)
    # The link leads to the alert's page.
    w.open(f"/alerts/{alert_id}", "alerting/alert-from-the-email-1400")
    assert message in w.page.inner_text("p.alert-message")
    w.check_clean()


def _alert_ids(email) -> set[int]:
    import re

    return {int(x) for x in re.findall(r"/alerts/(\d+)", email.get_content())}


def _vendor_drops(factory, ds: int) -> set[int]:
    with session_scope(factory) as s:
        return set(s.scalars(select(Alert.id).where(Alert.dataset_id == ds, Alert.kind == "vendor_quality_changed",
                                                    Alert.severity == "critical")))


def test_a_channel_whose_receiver_is_down_is_retried_until_it_answers(routed):
    app, _factory, worker, mailbox, receivers = routed
    from tests.web.conftest import make_tenant

    tenant = make_tenant(app)
    client, admin = app.test_client(), tenant.auth()
    port = free_port()  # nothing listens there yet
    chat = client.post("/api/v1/alert-channels", json={"kind": "slack", "name": "ops",
                                                       "url": f"http://127.0.0.1:{port}/hook"},
                       headers=admin).get_json()
    r = client.post(f"/api/v1/alert-channels/{chat['id']}/test", headers=admin)
    assert r.status_code == 202 and r.get_json()["status"] == "pending" and r.get_json()["channel_id"] == chat["id"]

    def log():
        return client.get(f"/api/v1/alert-channels/{chat['id']}/deliveries", headers=admin).get_json()["items"]

    wait_for(lambda: log()[0]["attempts"] >= 1, 60, worker, "the first attempt")
    receivers.append(Receiver(port, [503, 200]))
    done = wait_for(lambda: log()[0]["status"] == "succeeded" and log()[0], 60, worker, "the delivery to succeed")
    history = done["history"]
    assert done["attempts"] == len(history) >= 3
    assert all("ConnectionRefused" in h["error"] for h in history[:-2])
    assert history[-2]["response_code"] == 503 and history[-1]["response_code"] == 200
    assert "ops" in json.loads(receivers[0].requests[-1][1])["text"]
    # The email channel's test message reaches the mailbox.
    mail = client.post("/api/v1/alert-channels", json={"kind": "email", "name": "leads",
                                                       "recipients": ["lead@example.org"]}, headers=admin).get_json()
    client.post(f"/api/v1/alert-channels/{mail['id']}/test", headers=admin)
    wait_for(lambda: any("leads" in m[2].get_content() for m in mailbox.mails), 60, worker, "the test email")
