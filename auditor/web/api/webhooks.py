"""Outgoing webhooks of the workspace and their delivery log (admins only).

A webhook's secret signs its requests (:mod:`auditor.webhooks.signing`); it is answered
once, by the request that creates the webhook, and never again (the API shows only its
first characters). Deliveries are sent by the workers; ``POST /webhooks/{id}/test`` queues
one at once.
"""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime

from flask import current_app
from sqlalchemy import select

from auditor.db import DeliveryStatus, Webhook, WebhookDelivery
from auditor.web.api import serializers as s
from auditor.web.api.common import (
    ADMIN,
    allow_private,
    check_quota,
    commit,
    delete_answer,
    get_owned,
    publish_delivery,
    set_active,
    workspace_rows,
)
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.errors import ApiError
from auditor.webhooks import EVENTS, RefusedDestination, ping_delivery, validate_url
from auditor.webhooks.http import MAX_URL_LENGTH

__all__: list[str] = []  # the operations register themselves with the route table

log = logging.getLogger(__name__)

MAX_WEBHOOKS = 20
"""Webhooks per workspace (each event is sent to every one of them)."""

_EVENT = {"type": "string", "enum": list(EVENTS)}
_EVENTS = {"type": "array", "items": _EVENT, "uniqueItems": True, "maxItems": len(EVENTS),
           "description": "Events to send; empty or absent: all of them."}
_NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}

s.SCHEMAS.update({
    "Webhook": {"type": "object", "required": ["id", "url", "events", "active", "secret_prefix"],
                "properties": {"id": s.INT, "url": s.STR, "description": s.STR, "events": _EVENTS,
                               "active": s.BOOL, "secret_prefix": s.STR,
                               "created_by_id": {"type": ["integer", "null"]}, "created_at": _NULLABLE_TIME}},
    "WebhookCreated": {"allOf": [s.ref("Webhook"), {
        "type": "object", "required": ["secret"],
        "properties": {"secret": {"type": "string", "description": "The signing secret: shown this once."}}}]},
    "WebhookDelivery": {
        "type": "object", "required": ["id", "webhook_id", "event", "status", "attempts"],
        "properties": {"id": s.INT, "webhook_id": {"type": ["integer", "null"]},
                       "channel_id": {"type": ["integer", "null"], "description": "The alert channel it goes to."},
                       "event": s.STR,
                       "status": {"type": "string", "enum": [m.value for m in DeliveryStatus]},
                       "attempts": s.INT, "response_code": {"type": ["integer", "null"]},
                       "error": {"type": ["string", "null"]},
                       "history": {"type": "array", "items": {
                           "type": "object", "properties": {"at": s.STR, "response_code": {"type": ["integer", "null"]},
                                                            "error": {"type": ["string", "null"]},
                                                            "duration_ms": s.NUM}}},
                       "created_at": _NULLABLE_TIME, "last_attempt_at": _NULLABLE_TIME,
                       "next_attempt_at": _NULLABLE_TIME, "delivered_at": _NULLABLE_TIME}},
})
s.BODIES.update({
    "WebhookCreate": {
        "type": "object", "required": ["url"], "additionalProperties": False,
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_LENGTH,
                    "description": "http(s) URL the events are POSTed to (no user name or password in it)."},
            "events": _EVENTS,
            "description": {"type": "string", "maxLength": 200},
            "active": {"type": "boolean", "default": True},
            "secret": {"type": "string", "minLength": 24, "maxLength": 200, "pattern": "^[\\x21-\\x7e]+$",
                       "description": "The signing secret (printable ASCII, 24 to 200 characters); "
                                      "default: a new random one."}}},
})


def _t(value: datetime | None) -> str | None:
    if value is None:
        return None
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).isoformat()


def webhook(h: Webhook) -> dict:
    return {"id": h.id, "url": h.url, "description": h.description or "", "events": list(h.events or []),
            "active": bool(h.active), "secret_prefix": h.secret_prefix + "…", "created_by_id": h.created_by_id,
            "created_at": _t(h.created_at)}


def delivery(d: WebhookDelivery) -> dict:
    return {"id": d.id, "webhook_id": d.webhook_id, "channel_id": d.channel_id, "event": d.event, "status": str(d.status),
            "attempts": d.attempts, "response_code": d.response_code, "error": d.error,
            "history": list(d.history or []), "created_at": _t(d.created_at),
            "last_attempt_at": _t(d.last_attempt_at), "next_attempt_at": _t(d.next_attempt_at),
            "delivered_at": _t(d.delivered_at)}


_WEBHOOK_COLUMNS = ["id", "url", "description", "events", "active", "secret_prefix", "created_by_id", "created_at"]
_DELIVERY_COLUMNS = ["id", "webhook_id", "event", "status", "attempts", "response_code", "error", "created_at",
                     "last_attempt_at", "next_attempt_at", "delivered_at"]


def _get(principal, db, webhook_id: int) -> Webhook:
    return get_owned(principal, db, Webhook, webhook_id, "webhook", "webhook_id")


@endpoint("GET", "/webhooks", summary="List webhooks", tag="webhooks", roles=ADMIN, listing=True,
          response=s.page_of("Webhook"))
def list_webhooks(principal, db):
    """The workspace's outgoing webhooks (never their secrets)."""
    return Listing(workspace_rows(principal, Webhook), webhook, _WEBHOOK_COLUMNS, "webhooks")


@endpoint("POST", "/webhooks", summary="Create a webhook", tag="webhooks", roles=ADMIN,
          body=s.BODIES["WebhookCreate"], body_name="WebhookCreate", response=s.ref("WebhookCreated"), status=201)
def create_webhook(principal, db, body):
    """A webhook that receives the workspace's events, signed with its secret (answered this once only)."""
    try:
        url = validate_url(body["url"], allow_private=allow_private())
    except RefusedDestination as exc:
        raise ApiError(400, f"url: {exc}.", field="url") from None
    check_quota(principal, db, Webhook, MAX_WEBHOOKS, "webhooks")
    secret = body.get("secret") or "whsec_" + secrets.token_urlsafe(32)
    h = Webhook(workspace_id=principal.workspace_id, url=url, description=body.get("description", ""),
                secret=secret, secret_prefix=secret[:min(10, len(secret) // 4)],
                events=sorted(set(body.get("events") or [])), active=body.get("active", True),
                created_by_id=principal.user_id)
    db.add(h)
    commit(db, "This webhook")
    return {**webhook(h), "secret": secret}


@endpoint("GET", "/webhooks/<int:webhook_id>", summary="Describe a webhook", tag="webhooks", roles=ADMIN,
          response=s.ref("Webhook"))
def get_webhook(principal, db, webhook_id):
    """One webhook (never its secret)."""
    return webhook(_get(principal, db, webhook_id))


@endpoint("DELETE", "/webhooks/<int:webhook_id>", summary="Delete a webhook", tag="webhooks", roles=ADMIN,
          response=s.ref("Webhook"))
def delete_webhook(principal, db, webhook_id):
    """Delete a webhook and its delivery log; deliveries still queued are dropped."""
    return delete_answer(db, _get(principal, db, webhook_id), webhook)


def delivery_log(owner, status: str | None, columns: list[str], name: str) -> Listing:
    """The deliveries matching ``owner`` (a webhook's or an alert channel's), newest first, only
    those in ``status`` when given: the one delivery log both the webhook and channel endpoints list."""
    stmt = select(WebhookDelivery).where(owner).order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
    if status is not None:
        stmt = stmt.where(WebhookDelivery.status == status)
    return Listing(stmt, delivery, columns, name)


def _set_active(principal, db, webhook_id: int, active: bool) -> dict:
    return webhook(set_active(db, _get(principal, db, webhook_id), active))


@endpoint("POST", "/webhooks/<int:webhook_id>/deactivate", summary="Deactivate a webhook", tag="webhooks",
          roles=ADMIN, response=s.ref("Webhook"))
def deactivate_webhook(principal, db, webhook_id):
    """Stop sending events to the webhook (deliveries not yet sent are given up)."""
    return _set_active(principal, db, webhook_id, False)


@endpoint("POST", "/webhooks/<int:webhook_id>/activate", summary="Activate a webhook", tag="webhooks",
          roles=ADMIN, response=s.ref("Webhook"))
def activate_webhook(principal, db, webhook_id):
    """Send the webhook its events again (from the next event on)."""
    return _set_active(principal, db, webhook_id, True)


def _test_limit() -> str:
    return current_app.config["AUDITOR_INGEST_LIMIT"]


@endpoint("POST", "/webhooks/<int:webhook_id>/test", summary="Send a test delivery", tag="webhooks",
          roles=ADMIN, response=s.ref("WebhookDelivery"), status=202, limit=_test_limit)
def send_test_delivery(principal, db, webhook_id):
    """Queue a signed ``webhook.test`` delivery (sent even to an inactive webhook); follow it in the delivery log."""
    h = _get(principal, db, webhook_id)
    delivery_id = ping_delivery(db, h, requested_by=principal.email)
    db.commit()
    publish_delivery(delivery_id)
    return delivery(db.get(WebhookDelivery, delivery_id))


@endpoint("GET", "/webhooks/<int:webhook_id>/deliveries", summary="List a webhook's deliveries", tag="webhooks",
          roles=ADMIN, listing=True, response=s.page_of("WebhookDelivery"),
          query=[Param("status", "string", "Only deliveries in this state.",
                       enum=tuple(m.value for m in DeliveryStatus))])
def list_webhook_deliveries(principal, db, webhook_id, status):
    """The delivery log, newest first: each delivery's state, attempts, last answer and every attempt's outcome."""
    h = _get(principal, db, webhook_id)
    return delivery_log(WebhookDelivery.webhook_id == h.id, status, _DELIVERY_COLUMNS, f"webhook-{h.id}-deliveries")
