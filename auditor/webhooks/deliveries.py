"""Outgoing webhook deliveries (and alert channels' messages, :mod:`auditor.alerting`): created
with the event, sent and retried by the workers, every attempt kept in the delivery log.

An event becomes one :class:`~auditor.db.WebhookDelivery` row per active webhook of the
workspace that takes it, holding the exact body sent at every attempt (at most
:data:`MAX_BODY_BYTES`; alerts are split over several deliveries rather than cut). A
worker task (``workers.tasks.deliver_webhook``) sends it: :func:`attempt` takes the row
(no two workers send the same delivery at once), POSTs it signed, and records the
answer; a failed attempt is retried after ``backoff · 2^(attempts − 1)`` seconds (at
most ten minutes) until the attempts run out. A delivery whose message was lost (the
broker was down when it was queued) is found by the periodic sweep
(:func:`stale_deliveries`). Receivers tell repeated attempts apart by the
``X-Auditor-Delivery`` header, the same for every attempt of a delivery.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from auditor.db.models import (
    Alert,
    AlertChannel,
    AuditRun,
    Certification,
    Dataset,
    DeliveryStatus,
    Model,
    Release,
    Webhook,
    WebhookDelivery,
    Workspace,
)
from auditor.db.session import session_scope
from auditor.webhooks.http import TIMEOUT, Answer, post
from auditor.webhooks.signing import SIGNATURE_HEADER, signature_header


@dataclass(frozen=True)
class ChannelTarget:
    """What a channel delivery needs to know of its alert channel (read with the delivery)."""

    kind: str
    name: str
    url: str | None
    recipients: tuple[str, ...]
    active: bool


#: Sends one stored message to an alert channel (:func:`auditor.alerting.channels.send`, with the
#: deployment's relay bound): ``(target, body, allow_private=..., timeout=...) -> Answer``; never raises.
ChannelSender = Callable[..., Answer]

__all__ = [
    "EVENTS",
    "MAX_BODY_BYTES",
    "Attempt",
    "ChannelSender",
    "ChannelTarget",
    "alerts_raised",
    "attempt",
    "audit_completed",
    "create_deliveries",
    "ping_delivery",
    "stale_deliveries",
    "store_deliveries",
]

log = logging.getLogger(__name__)

EVENTS = ("alert.raised", "audit.completed", "webhook.test")
"""Events a webhook may subscribe to (an empty list subscribes to all)."""
MAX_BODY_BYTES = 256 << 10
MAX_BACKOFF = 600.0
_ALERTS_PER_DELIVERY = 100
_MAX_CERTIFICATIONS = 200
_HISTORY_ERROR = 300
_MAX_HISTORY = 25  # attempts kept per delivery (AUDITOR_WEBHOOK_MAX_ATTEMPTS is at most 20)


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(t: datetime | None) -> datetime | None:
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=UTC)  # SQLite keeps no zone


def _iso(t: datetime | None) -> str | None:
    t = _aware(t)
    return None if t is None else t.isoformat()


def _body(event: str, workspace: str, data: Mapping[str, Any]) -> str:
    return json.dumps({"event": event, "workspace": workspace, "created_at": _now().isoformat(), "data": data},
                      ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)


def _subscribed(session: Session, workspace_id: int, event: str) -> list[Webhook]:
    hooks = session.scalars(select(Webhook).where(Webhook.workspace_id == workspace_id, Webhook.active.is_(True))
                            .order_by(Webhook.id)).all()
    return [h for h in hooks if not h.events or event in h.events]


def store_deliveries(session: Session, event: str, bodies: Iterable[str],
                     targets: list[dict[str, int]]) -> list[int]:
    """One pending delivery per body and target (``{"webhook_id": id}`` or ``{"channel_id": id}``);
    their ids. The caller commits, then hands the ids to the workers."""
    bodies = list(bodies)
    for body in set(bodies):
        if len(body.encode("utf-8")) > MAX_BODY_BYTES:
            raise ValueError(f"a {event} body is larger than {MAX_BODY_BYTES} bytes")
    now = _now()
    rows = [WebhookDelivery(**target, event=event, body=body, status=DeliveryStatus.PENDING, attempts=0,
                            history=[], next_attempt_at=now)
            for body in bodies for target in targets]
    session.add_all(rows)
    session.flush()
    return [r.id for r in rows]


def create_deliveries(session: Session, workspace_id: int, event: str, bodies: Iterable[str],
                      *, webhooks: list[Webhook] | None = None) -> list[int]:
    """One pending delivery per body and subscribed active webhook (or per given webhook); their ids.

    The caller commits, then hands the ids to the workers.
    """
    hooks = _subscribed(session, workspace_id, event) if webhooks is None else webhooks
    if not hooks:
        return []
    return store_deliveries(session, event, bodies, [{"webhook_id": h.id} for h in hooks])


def _alert(a: Alert, dataset_name: str | None) -> dict[str, Any]:
    return {"id": a.id, "kind": a.kind, "severity": str(a.severity), "subject": a.subject, "message": a.message,
            "dataset_id": a.dataset_id, "dataset": dataset_name, "audit_run_id": a.audit_run_id,
            "details": a.details, "created_at": _iso(a.created_at)}


def _alert_bodies(slug: str, alerts: list[dict[str, Any]]) -> list[str]:
    """``alert.raised`` bodies of at most :data:`MAX_BODY_BYTES`: alerts in groups, details
    dropped from an alert too large to send whole."""
    bodies: list[str] = []
    group: list[dict[str, Any]] = []

    def fits(items: list[dict[str, Any]]) -> bool:
        return len(_body("alert.raised", slug, {"alerts": items}).encode("utf-8")) <= MAX_BODY_BYTES

    for a in alerts:
        if not fits([a]):
            a = {**a, "details": None, "details_omitted": True}
            if not fits([a]):
                a = {**a, "message": a["message"][:2000]}
        if group and (len(group) >= _ALERTS_PER_DELIVERY or not fits([*group, a])):
            bodies.append(_body("alert.raised", slug, {"alerts": group}))
            group = []
        group.append(a)
    if group:
        bodies.append(_body("alert.raised", slug, {"alerts": group}))
    return bodies


def alerts_raised(session: Session, alert_ids: Iterable[int]) -> list[int]:
    """Deliveries of ``alert.raised`` for these alerts, to their workspaces' webhooks."""
    ids = sorted({int(i) for i in alert_ids})
    if not ids:
        return []
    rows = session.execute(select(Alert, Dataset.name, Workspace.slug)
                           .join(Workspace, Workspace.id == Alert.workspace_id)
                           .outerjoin(Dataset, Dataset.id == Alert.dataset_id)
                           .where(Alert.id.in_(ids)).order_by(Alert.id)).all()
    out: list[int] = []
    by_workspace: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for a, name, slug in rows:
        by_workspace.setdefault((a.workspace_id, slug), []).append(_alert(a, name))
    for (workspace_id, slug), alerts in by_workspace.items():
        hooks = _subscribed(session, workspace_id, "alert.raised")
        if hooks:
            out += create_deliveries(session, workspace_id, "alert.raised", _alert_bodies(slug, alerts),
                                     webhooks=hooks)
    return out


def audit_completed(session: Session, run_id: int) -> list[int]:
    """Deliveries of ``audit.completed`` for a succeeded audit run (its certifications' verdicts)."""
    row = session.execute(select(AuditRun, Dataset, Workspace.slug).join(Dataset, Dataset.id == AuditRun.dataset_id)
                          .join(Workspace, Workspace.id == Dataset.workspace_id)
                          .where(AuditRun.id == run_id)).first()
    if row is None:
        return []
    run, ds, slug = row
    hooks = _subscribed(session, ds.workspace_id, "audit.completed")
    if not hooks:
        return []
    certs = session.execute(select(Certification, Release.version, Model.name)
                            .join(Release, Release.id == Certification.release_id)
                            .join(Model, Model.id == Release.model_id)
                            .where(Certification.audit_run_id == run.id).order_by(Certification.id)
                            .limit(_MAX_CERTIFICATIONS)).all()
    raised = session.scalar(select(Alert.id).where(Alert.audit_run_id == run.id).limit(1)) is not None
    data = {
        "dataset": {"id": ds.id, "name": ds.name, "data_version": ds.data_version},
        "audit_run": {"id": run.id, "data_version": run.data_version, "status": str(run.status),
                      "started_at": _iso(run.started_at), "finished_at": _iso(run.finished_at)},
        "certifications": [{"release_id": c.release_id, "model": model, "version": version,
                            "certified": c.certified, "verdict": c.verdict, "method": c.method,
                            "l": c.l, "u_t": c.u_t, "s_anytime_t": c.s_anytime_t, "s_oms_t": c.s_oms_t}
                           for c, version, model in certs],
        "raised_alerts": raised,
    }
    return create_deliveries(session, ds.workspace_id, "audit.completed", [_body("audit.completed", slug, data)],
                             webhooks=hooks)


def ping_delivery(session: Session, webhook: Webhook, *, requested_by: str | None) -> int:
    """A ``webhook.test`` delivery to ``webhook`` (whatever its events and active flag)."""
    slug = session.scalar(select(Workspace.slug).where(Workspace.id == webhook.workspace_id)) or ""
    body = _body("webhook.test", slug, {"webhook_id": webhook.id, "requested_by": requested_by,
                                        "message": "A test delivery from Auditor."})
    return create_deliveries(session, webhook.workspace_id, "webhook.test", [body], webhooks=[webhook])[0]


@dataclass(frozen=True)
class Attempt:
    """What :func:`attempt` did: the delivery's status after it, and when to try again (seconds)."""

    status: str
    retry_in: float | None = None
    response_code: int | None = None


def _backoff(attempts: int, base: float) -> float:
    return min(MAX_BACKOFF, base * 2 ** max(0, attempts - 1))


@dataclass(frozen=True)
class _Hook:
    """What a signed webhook delivery needs to know of its webhook."""

    url: str
    secret: str
    active: bool


def _target(hook: Webhook | None, channel: AlertChannel | None) -> _Hook | ChannelTarget | None:
    if hook is not None:
        return _Hook(hook.url, hook.secret, bool(hook.active))
    if channel is not None:
        return ChannelTarget(str(channel.kind), channel.name, channel.url, tuple(channel.recipients or ()),
                      bool(channel.active))
    return None


def _send(target: _Hook | ChannelTarget, delivery_id: int, event: str, body: str, *, allow_private: bool,
          timeout: float, send_channel: ChannelSender | None) -> Answer:
    """One attempt at the delivery: a signed POST to a webhook, or a message to an alert channel."""
    if not isinstance(target, _Hook):
        if send_channel is None:
            return Answer(None, "this process sends no alert channel messages (no channel sender)", 0.0, False)
        return send_channel(target, body, allow_private=allow_private, timeout=timeout)
    payload = body.encode("utf-8")
    headers = {"Content-Type": "application/json", "User-Agent": "Auditor-Webhooks/1",
               "X-Auditor-Event": event, "X-Auditor-Delivery": str(delivery_id),
               SIGNATURE_HEADER: signature_header(target.secret, payload, timestamp=int(time.time()))}
    return post(target.url, payload, headers, allow_private=allow_private, timeout=timeout)


def _take(session: Session, delivery_id: int, now: datetime, timeout: float):
    """(delivery, its target) if it is pending and now held by this worker; else an :class:`Attempt` saying why."""
    row = session.execute(select(WebhookDelivery, Webhook, AlertChannel)
                          .outerjoin(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                          .outerjoin(AlertChannel, AlertChannel.id == WebhookDelivery.channel_id)
                          .where(WebhookDelivery.id == delivery_id)).first()
    if row is None:
        return Attempt("gone")
    delivery, hook, channel = row
    if delivery.status != DeliveryStatus.PENDING:
        return Attempt(str(delivery.status))
    locked = _aware(delivery.locked_until)
    if locked is not None and locked > now:
        return Attempt("busy")
    # Take it: the conditional update fails if another worker took it meanwhile.
    taken = session.execute(
        update(WebhookDelivery).where(WebhookDelivery.id == delivery_id,
                                      WebhookDelivery.status == DeliveryStatus.PENDING,
                                      or_(WebhookDelivery.locked_until.is_(None),
                                          WebhookDelivery.locked_until <= now))
        .values(locked_until=now + timedelta(seconds=4 * timeout + 30))).rowcount
    if not taken:
        return Attempt("busy")
    return delivery, _target(hook, channel)


def attempt(factory: sessionmaker[Session], delivery_id: int, *, max_attempts: int, backoff: float,
            allow_private: bool, timeout: float = TIMEOUT, send_channel: ChannelSender | None = None) -> Attempt:
    """Send delivery ``delivery_id`` once, if it is still pending and nobody else is sending it,
    and record the outcome. ``smtp`` is the relay of email channels; ``base_url`` starts the
    links of channel messages."""
    now = _now()
    with session_scope(factory) as session:
        taken = _take(session, delivery_id, now, timeout)
        if isinstance(taken, Attempt):
            return taken
        delivery, target = taken
        body, event, attempts = delivery.body, delivery.event, delivery.attempts
    if target is None or (not target.active and not event.endswith(".test")):
        answer = None
        error, code, retry = "the webhook or channel was deactivated before this delivery was sent", None, False
    else:
        answer = _send(target, delivery_id, event, body, allow_private=allow_private, timeout=timeout,
                       send_channel=send_channel)
        error, code, retry = answer.error, answer.status, answer.retry
    attempts += 1
    finished = _now()
    ok = answer is not None and answer.ok
    entry = {"at": finished.isoformat(), "response_code": code,
             "error": None if error is None else error[:_HISTORY_ERROR],
             "duration_ms": answer.duration_ms if answer is not None else 0.0}
    if ok:
        status, retry_in = DeliveryStatus.SUCCEEDED, None
    elif retry and attempts < max_attempts:
        status, retry_in = DeliveryStatus.PENDING, _backoff(attempts, backoff)
    else:
        status, retry_in = DeliveryStatus.FAILED, None
    with session_scope(factory) as session:
        delivery = session.get(WebhookDelivery, delivery_id, with_for_update=True)
        if delivery is None:  # the webhook or channel was deleted meanwhile
            return Attempt("gone")
        delivery.attempts = attempts
        delivery.history = [*(delivery.history or []), entry][-_MAX_HISTORY:]
        delivery.response_code, delivery.error = code, error
        delivery.last_attempt_at, delivery.locked_until = finished, None
        delivery.status = status
        delivery.next_attempt_at = finished + timedelta(seconds=retry_in) if retry_in is not None else None
        if ok:
            delivery.delivered_at = finished
    if not ok:
        log.warning("webhook delivery %s (%s) attempt %s failed: %s%s", delivery_id, event, attempts,
                    error, f"; retrying in {retry_in:g} s" if retry_in is not None else "; giving up")
    return Attempt(str(status), retry_in, code)


def stale_deliveries(session: Session, *, grace: timedelta = timedelta(minutes=5), limit: int = 500) -> list[int]:
    """Pending deliveries whose next attempt is overdue by ``grace`` and that nobody holds:
    their message was lost (the broker was down when they were queued, say)."""
    now = _now()
    return list(session.scalars(
        select(WebhookDelivery.id)
        .where(WebhookDelivery.status == DeliveryStatus.PENDING, WebhookDelivery.next_attempt_at <= now - grace,
               or_(WebhookDelivery.locked_until.is_(None), WebhookDelivery.locked_until <= now))
        .order_by(WebhookDelivery.next_attempt_at).limit(limit)))
