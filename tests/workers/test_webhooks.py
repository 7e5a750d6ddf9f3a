"""Outgoing webhooks through a real Celery worker, PostgreSQL, Redis and a local HTTP receiver.

Signatures are checked with the verification recipe of the integrations guide
(docs/integrations.md), run as printed there; the receiver first is not listening, then answers 500, then 200, and the delivery
log shows each attempt.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import select

from auditor import webhooks
from auditor.config import WorkerSettings
from auditor.db import (
    Alert,
    AlertSeverity,
    DeliveryStatus,
    Webhook,
    WebhookDelivery,
    Workspace,
    session_scope,
)
from auditor.web import create_app
from auditor.webhooks.http import is_internal
from tests.web.conftest import app_config, make_tenant
from tests.workers.conftest import free_port, worker_env
from tests.workers.test_audit_workers import wait_for

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]


def readme_recipe():
    """``verify_auditor_signature`` exactly as the integrations guide prints it."""
    text = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    code = next(b for b in blocks if "def verify_auditor_signature" in b)
    namespace: dict = {}
    exec(compile(code, "docs/integrations.md", "exec"), namespace)
    return namespace["verify_auditor_signature"]


class Receiver:
    """A local HTTP server that answers each POST with the next status of ``statuses`` (then the last)."""

    def __init__(self, port: int, statuses: list[int]):
        self.port, self.statuses, self.requests = port, list(statuses), []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.lock:
                    outer.requests.append((dict(self.headers), body))
                    status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def hooked_app(tmp_path, pg_factory, redis_url, start_worker, **extra_env):
    """A worker (JSON logs, quick retries, private destinations allowed, ``extra_env``) and a web
    app on the same database and queue: (app, session factory, worker)."""
    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_WEBHOOK_ALLOW_PRIVATE="true",
                     AUDITOR_WEBHOOK_RETRY_BACKOFF="0.5", AUDITOR_WEBHOOK_MAX_ATTEMPTS="6",
                     AUDITOR_LOG_FORMAT="json", **extra_env)
    queue = env["AUDITOR_CELERY_QUEUE"]
    app = create_app({
        "TESTING": True, "SECRET_KEY": "webhooks", "DATABASE_URL": url, "RATELIMIT_STORAGE_URI": "memory://",
        "CELERY": {"broker_url": redis_url, "result_backend": redis_url, "task_default_queue": queue,
                   "auditor_database_url": url,
                   "auditor_worker": WorkerSettings(queue=queue, webhook_allow_private=True, n_bootstrap=20)}})
    app.extensions["celery"].set_current()
    return app, factory, start_worker(env)


@pytest.fixture
def hooked(tmp_path, pg_factory, redis_url, start_worker):
    """:func:`hooked_app`, and the receivers a test starts (closed at its end)."""
    app, factory, worker = hooked_app(tmp_path, pg_factory, redis_url, start_worker)
    receivers: list[Receiver] = []
    yield app, factory, worker, receivers
    for r in receivers:
        r.close()
    app.extensions["auditor.engine"].dispose()


def _deliveries(client, auth, webhook_id):
    r = client.get(f"/api/v1/webhooks/{webhook_id}/deliveries", headers=auth)
    assert r.status_code == 200, r.get_json()
    return r.get_json()["items"]


def test_a_delivery_is_retried_after_the_receiver_was_down_and_its_signature_verifies(hooked):
    app, _factory, worker, receivers = hooked
    verify = readme_recipe()
    tenant = make_tenant(app)
    client, auth = app.test_client(), tenant.auth()
    port = free_port()  # nothing listens there yet: the first attempts are refused
    r = client.post("/api/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/hook", "description": "ops",
                                              "events": ["webhook.test"]}, headers=auth)
    assert r.status_code == 201, r.get_json()
    hook = r.get_json()
    secret = hook["secret"]
    assert secret.startswith("whsec_") and hook["secret_prefix"].endswith("…") and secret not in hook["secret_prefix"]
    listed = client.get(f"/api/v1/webhooks/{hook['id']}", headers=auth).get_json()
    assert "secret" not in listed and secret not in json.dumps(listed)

    r = client.post(f"/api/v1/webhooks/{hook['id']}/test", headers=auth)
    assert r.status_code == 202 and r.get_json()["status"] == "pending"
    delivery_id = r.get_json()["id"]
    wait_for(lambda: _deliveries(client, auth, hook["id"])[0]["attempts"] >= 1, 60, worker, "the first attempt")
    receivers.append(Receiver(port, [500, 200]))  # the receiver comes up, fails once, then accepts
    done = wait_for(lambda: next((d for d in _deliveries(client, auth, hook["id"])
                                  if d["id"] == delivery_id and d["status"] != "pending"), None),
                    60, worker, "the delivery to succeed")
    assert done["status"] == "succeeded" and done["response_code"] == 200 and done["error"] is None
    history = done["history"]
    assert done["attempts"] == len(history) >= 3
    refused, failed, ok = history[:-2], history[-2], history[-1]
    assert all(h["response_code"] is None and "ConnectionRefused" in h["error"] for h in refused)
    assert failed["response_code"] == 500 and failed["error"].startswith("HTTP 500")
    assert ok["response_code"] == 200 and ok["error"] is None
    times = [datetime.fromisoformat(h["at"]) for h in history]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    # Backoff: 0.5 s after the first failure, doubled after each one.
    assert all(gap >= 0.5 * 2 ** i * 0.9 for i, gap in enumerate(gaps)), gaps

    # The receiver saw the 500 and the 200: the same delivery, the same body, each signed.
    (h1, b1), (h2, b2) = receivers[0].requests
    assert b1 == b2 and h1["X-Auditor-Delivery"] == h2["X-Auditor-Delivery"] == str(delivery_id)
    assert h1["X-Auditor-Event"] == "webhook.test" and h1["Content-Type"] == "application/json"
    for headers, body in receivers[0].requests:
        assert verify(secret, headers["X-Auditor-Signature"], body)
        assert webhooks.verify(secret, headers["X-Auditor-Signature"], body)
    payload = json.loads(b2)
    assert payload["event"] == "webhook.test" and payload["workspace"] == tenant.slug
    assert payload["data"]["webhook_id"] == hook["id"]
    # Tampered: another body, another secret, or a replay outside the window all fail.
    header = h2["X-Auditor-Signature"]
    assert not verify(secret, header, b2.replace(b"webhook.test", b"webhook.tset"))
    assert not verify(secret, header, b2 + b" ")
    assert not verify("whsec_not-the-secret-at-all", header, b2)
    old = int(time.time()) - 400
    replayed = f"t={old},v1={webhooks.sign(secret, old, b2)}"
    assert not verify(secret, replayed, b2)
    assert webhooks.verify(secret, replayed, b2, now=old + 10)  # within its window it was valid
    assert not verify(secret, "v1=" + header.split("v1=")[1], b2) and not verify(secret, "garbage", b2)

    # The worker's log lines are JSON and name the task they were written in.
    lines = [json.loads(line) for line in worker.log_path.read_text().splitlines() if line.startswith("{")]
    attempts = [x for x in lines if "webhook delivery" in x.get("message", "")]
    assert attempts, worker.output()
    assert all(x["task_name"] == "workers.tasks.deliver_webhook" and re.fullmatch(r"[0-9a-f-]{36}", x["task_id"])
               for x in attempts)


def test_audits_and_alerts_reach_the_workspace_webhooks_signed(hooked):
    app, factory, worker, receivers = hooked
    verify = readme_recipe()
    receiver = Receiver(free_port(), [204])
    receivers.append(receiver)
    tenant = make_tenant(app)
    client, auth = app.test_client(), tenant.auth()
    secret = "my-own-secret-of-30-characters!"
    hook = client.post("/api/v1/webhooks", json={"url": receiver.url, "secret": secret}, headers=auth).get_json()
    other = make_tenant(app)  # another workspace's webhook hears nothing of this one's events
    quiet = Receiver(free_port(), [200])
    receivers.append(quiet)
    assert client.post("/api/v1/webhooks", json={"url": quiet.url}, headers=other.auth()).status_code == 201
    off = client.post("/api/v1/webhooks", json={"url": quiet.url, "active": False}, headers=auth).get_json()
    assert off["active"] is False

    ds = client.post("/api/v1/datasets", json={"name": "hooked", "labels": ["a", "b"]}, headers=auth).get_json()["id"]
    rows = "\n".join(f"i{n},w{r},{'ab'[(n + r * (n % 3 == 0)) % 2]}" for n in range(40) for r in range(3))
    r = client.post(f"/api/v1/datasets/{ds}/annotations", data="item_id,annotator_id,label\n" + rows,
                    headers={**auth, "Content-Type": "text/csv"})
    assert r.status_code == 202, r.get_json()
    wait_for(lambda: any(json.loads(b)["event"] == "audit.completed" for _, b in receiver.requests), 120, worker,
             "audit.completed")
    headers, body = next((h, b) for h, b in receiver.requests if json.loads(b)["event"] == "audit.completed")
    assert verify(secret, headers["X-Auditor-Signature"], body)
    data = json.loads(body)["data"]
    assert data["dataset"] == {"id": ds, "name": "hooked", "data_version": r.get_json()["data_version"]}
    assert data["audit_run"]["status"] == "succeeded" and data["audit_run"]["data_version"] == r.get_json()["data_version"]

    # Alerts: stored ones handed to the (compatible) deliver_alerts task reach the webhook.
    with session_scope(factory) as s:
        alerts = [Alert(workspace_id=tenant.workspace_id, dataset_id=ds, kind="vendor_drop",
                        severity=AlertSeverity.WARNING, subject=f"vendor-{i}", message=f"vendor {i} dropped",
                        details={"i": i}) for i in range(2)]
        s.add_all(alerts)
        s.flush()
        alert_ids = [a.id for a in alerts]
    from auditor.worker.tasks import deliver_alerts

    deliver_alerts.apply_async((alert_ids,))
    wait_for(lambda: any(json.loads(b)["event"] == "alert.raised" for _, b in receiver.requests), 60, worker,
             "alert.raised")
    headers, body = next((h, b) for h, b in receiver.requests if json.loads(b)["event"] == "alert.raised")
    assert verify(secret, headers["X-Auditor-Signature"], body)
    sent = json.loads(body)["data"]["alerts"]
    assert [a["id"] for a in sent] == alert_ids and sent[0]["dataset"] == "hooked" and sent[1]["details"] == {"i": 1}
    time.sleep(1.0)
    assert quiet.requests == []  # neither the other workspace's webhook nor the inactive one heard anything
    log = _deliveries(client, auth, hook["id"])
    assert {d["event"] for d in log} >= {"audit.completed", "alert.raised"}
    assert all(d["status"] == "succeeded" and d["attempts"] == 1 and d["response_code"] == 204 for d in log)
    assert _deliveries(client, auth, off["id"]) == []


def test_private_destinations_are_refused_unless_allowed(hooked, pg_engine):
    _app, factory, _worker, _receivers = hooked
    strict = create_app(app_config(pg_engine))  # AUDITOR_WEBHOOK_ALLOW_PRIVATE unset
    tenant = make_tenant(strict)
    client = strict.test_client()
    for url in ("http://127.0.0.1:9/x", "http://10.1.2.3/x", "http://169.254.169.254/latest/meta-data",
                "http://[::1]/x", "http://localhost/x"):
        r = client.post("/api/v1/webhooks", json={"url": url}, headers=tenant.auth())
        assert r.status_code == 400 and r.get_json()["field"] == "url", (url, r.get_json())
    for url, why in (("ftp://example.com/x", "http"), ("http://user:pw@example.com/x", "user name"),
                     ("https:///nohost", "host"), ("http://example.com/a b", "spaces")):
        r = client.post("/api/v1/webhooks", json={"url": url}, headers=tenant.auth())
        assert r.status_code == 400 and why in r.get_json()["message"], (url, r.get_json())

    # A host name that resolves to an internal address is refused when connecting, not retried.
    name = "localhost"
    addresses = {i[4][0] for i in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    assert addresses and all(is_internal(ipaddress.ip_address(a)) for a in addresses), addresses
    with session_scope(factory) as s:
        ws = Workspace(slug="private-dest", name="private-dest")
        s.add(ws)
        s.flush()
        hook = Webhook(workspace_id=ws.id, url=f"http://{name}:9/hook", secret="s" * 30, secret_prefix="ssss",
                       events=[], active=True)
        s.add(hook)
        s.flush()
        delivery_id = webhooks.ping_delivery(s, hook, requested_by=None)
    done = webhooks.attempt(factory, delivery_id, max_attempts=5, backoff=0.1, allow_private=False)
    assert done.status == "failed" and done.retry_in is None
    with session_scope(factory) as s:
        d = s.scalar(select(WebhookDelivery).where(WebhookDelivery.id == delivery_id))
        assert d.status == DeliveryStatus.FAILED and d.attempts == 1 and "refused" in d.error


def test_a_lost_message_is_sent_by_the_sweep(hooked):
    """A delivery queued while the broker was down (no message) is found and sent by the sweep."""
    app, factory, worker, receivers = hooked
    receiver = Receiver(free_port(), [200])
    receivers.append(receiver)
    tenant = make_tenant(app)
    hook_id = app.test_client().post("/api/v1/webhooks", json={"url": receiver.url},
                                     headers=tenant.auth()).get_json()["id"]
    with session_scope(factory) as s:
        hook = s.get(Webhook, hook_id)
        delivery_id = webhooks.ping_delivery(s, hook, requested_by="lost")
        # Its message never reached the broker, six minutes ago.
        s.get(WebhookDelivery, delivery_id).next_attempt_at = datetime.now(UTC) - timedelta(minutes=6)
    wait_for(lambda: receiver.requests, 60, worker, "the sweep to send the lost delivery")
    assert receiver.requests[0][0]["X-Auditor-Delivery"] == str(delivery_id)


def test_many_and_large_alerts_are_split_over_bounded_bodies(pg_factory):
    """250 alerts, one of them with details larger than a body may be: every alert is sent
    once, every body is at most MAX_BODY_BYTES, the large one without its details."""
    _url, factory = pg_factory
    with session_scope(factory) as s:
        ws = Workspace(slug="many-alerts", name="many-alerts")
        s.add(ws)
        s.flush()
        hook = Webhook(workspace_id=ws.id, url="https://hooks.example.com/x", secret="k" * 30, secret_prefix="kkkk",
                       events=["alert.raised"], active=True)
        s.add(hook)
        alerts = [Alert(workspace_id=ws.id, kind="vendor_drop", message=f"alert {i}",
                        details={"blob": "x" * (300_000 if i == 7 else 2_000)}) for i in range(250)]
        s.add_all(alerts)
        s.flush()
        ids = [a.id for a in alerts]
        delivery_ids = webhooks.alerts_raised(s, ids)
    with session_scope(factory) as s:
        bodies = [d.body for d in s.scalars(select(WebhookDelivery).where(WebhookDelivery.id.in_(delivery_ids))
                                            .order_by(WebhookDelivery.id))]
    assert len(bodies) == len(delivery_ids) >= 3
    assert all(len(b.encode()) <= webhooks.MAX_BODY_BYTES for b in bodies)
    sent = [a for b in bodies for a in json.loads(b)["data"]["alerts"]]
    assert [a["id"] for a in sent] == ids
    assert all(len(json.loads(b)["data"]["alerts"]) <= 100 for b in bodies)
    large = next(a for a in sent if a["id"] == ids[7])
    assert large["details"] is None and large["details_omitted"] is True
    assert all(a["details"] == {"blob": "x" * 2_000} for a in sent if a["id"] != ids[7])


def _hooked_dataset(factory, name: str) -> tuple[int, int]:
    """A dataset with labels and predictions whose workspace has a webhook for every event."""
    from auditor.db import Dataset
    from tests.workers._data import import_annotations, import_predictions, make_dataset

    ds = make_dataset(factory, name, ["a", "b"])
    import_annotations(factory, ds, [(f"i{n}", f"w{r}", (n + r * (n % 3 == 0)) % 2) for n in range(40) for r in range(3)])
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": n % 2 for n in range(40)})
    with session_scope(factory) as s:
        ws = s.get(Dataset, ds).workspace_id
        s.add(Webhook(workspace_id=ws, url="https://hooks.example.com/audits", secret="k" * 30, secret_prefix="kkkk",
                      events=["audit.completed", "alert.raised"], active=True))
    return ds, ws


def test_an_audit_stores_its_deliveries_in_the_transaction_of_its_results(pg_factory):
    """No worker here: the run's results and its webhook deliveries are committed together, so
    a crash after the commit cannot lose them (the sweep sends any whose message is lost); an
    inline audit is heard too."""
    from auditor.audit import runner
    from auditor.audit.pipeline import AuditOptions

    _url, factory = pg_factory
    ds, ws = _hooked_dataset(factory, "deliveries-in-tx")
    out = runner.run_audit(factory, ds, task_id="tx-1", options=AuditOptions(n_bootstrap=10),
                           lease=timedelta(seconds=60))
    assert out.state == "succeeded" and out.delivery_ids
    with session_scope(factory) as s:
        stored = s.scalars(select(WebhookDelivery).join(Webhook, Webhook.id == WebhookDelivery.webhook_id).where(Webhook.workspace_id == ws)).all()
        assert sorted(d.id for d in stored) == sorted(out.delivery_ids)
        assert {d.event for d in stored} == {"audit.completed"} and all(d.status == DeliveryStatus.PENDING for d in stored)
        body = json.loads(stored[0].body)
        assert body["data"]["audit_run"]["id"] == out.run_id and body["data"]["audit_run"]["status"] == "succeeded"


def test_a_failure_to_store_the_deliveries_never_fails_the_audit(pg_factory, monkeypatch, caplog):
    from auditor.audit import runner
    from auditor.audit.pipeline import AuditOptions
    from auditor.db import AuditRun

    _url, factory = pg_factory
    ds, ws = _hooked_dataset(factory, "deliveries-fail")

    def broken(session, run_id):
        webhooks.create_deliveries(session, ws, "audit.completed", ["{\"half\": \"written\"}"])  # then fails
        raise RuntimeError("webhook table unavailable")

    monkeypatch.setattr(webhooks, "audit_completed", broken)
    out = runner.run_audit(factory, ds, task_id="tx-2", options=AuditOptions(n_bootstrap=10),
                           lease=timedelta(seconds=60))
    assert out.state == "succeeded" and out.delivery_ids == ()
    assert "could not store the webhook deliveries" in caplog.text
    with session_scope(factory) as s:
        assert s.get(AuditRun, out.run_id).status == "succeeded"
        # the savepoint took back what the failed step had written, and only that
        assert s.scalars(select(WebhookDelivery).join(Webhook, Webhook.id == WebhookDelivery.webhook_id).where(Webhook.workspace_id == ws)).all() == []
