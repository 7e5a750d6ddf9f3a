"""An alert's lifecycle (acknowledge, reopen, assign, snooze, comment) and the workspace's
alert routing: channels (email lists, Slack-compatible incoming webhooks), the rules that
send alerts to them, and the thresholds its admins set (:mod:`auditor.alerting`).

Anyone who reads the workspace reads an alert and its thread; admins and analysts take the
lifecycle steps; admins edit channels, rules and settings. A channel's webhook URL is a
secret: it is answered only in part.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

from sqlalchemy import select

from auditor.actions import alerts as alert_actions
from auditor.alerting import lifecycle
from auditor.alerting import settings as ws_settings
from auditor.alerting.channels import MAX_RECIPIENTS
from auditor.alerting.routing import ALERT_KINDS, test_delivery
from auditor.config import load_worker_settings
from auditor.db import (
    Alert,
    AlertChannel,
    AlertRule,
    AlertSeverity,
    ChannelKind,
    Dataset,
    DeliveryStatus,
    User,
    WebhookDelivery,
)
from auditor.web.api import serializers as s
from auditor.web.api.common import (
    ADMIN,
    WRITERS,
    allow_private,
    check_quota,
    delete_answer,
    get_owned,
    publish_delivery,
    set_active,
    workspace_rows,
)
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.api.webhooks import delivery, delivery_log
from auditor.web.errors import ApiError
from auditor.web.security import READERS
from auditor.webhooks import RefusedDestination, validate_url
from auditor.webhooks.http import MAX_URL_LENGTH

__all__ = ["actor", "channel", "delete_answer", "rule"]

MAX_CHANNELS = 20
MAX_RULES = 50

_NULL_TIME = {"type": ["string", "null"], "format": "date-time"}
_KINDS = {"type": "array", "items": {"type": "string", "enum": list(ALERT_KINDS)}, "uniqueItems": True,
          "maxItems": len(ALERT_KINDS), "description": "Alert kinds it sends; empty: any."}
_SEVERITIES = {"type": "array", "items": {"type": "string", "enum": [x.value for x in AlertSeverity]},
               "uniqueItems": True, "maxItems": len(AlertSeverity), "description": "Severities it sends; empty: any."}
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}, "uniqueItems": True}

s.SCHEMAS.update({
    "AlertEvent": s._obj(["id", "action", "actor", "created_at"], id=s.INT,
                         action={"type": "string", "enum": ["acknowledged", "reopened", "assigned", "unassigned",
                                                            "snoozed", "unsnoozed", "commented"]},
                         actor=s.STR, actor_id=s._n("integer"), assignee_id=s._n("integer"),
                         assignee=s._n("string"), until=_NULL_TIME, body=s._n("string"), created_at=s.TIME),
    "AlertDetail": {"allOf": [s.ref("Alert"), s._obj(
        ["events"], dataset=s._n("string"), acknowledged_by=s._n("string"), assignee=s._n("string"),
        status={"type": "string", "enum": ["open", "snoozed", "acknowledged"]},
        events={"type": "array", "items": s.ref("AlertEvent")})]},
    "AlertChannel": s._obj(["id", "kind", "name", "active"], id=s.INT,
                           kind={"type": "string", "enum": [k.value for k in ChannelKind]}, name=s.STR,
                           recipients={"type": "array", "items": s.STR},
                           url_hint=s._n("string", "The incoming webhook's host and last characters (the URL "
                                                   "is a secret)."),
                           active=s.BOOL, created_by_id=s._n("integer"), created_at=s._n(s.TIME)),
    "AlertRule": s._obj(["id", "name", "kinds", "severities", "dataset_ids", "channel_ids", "active"], id=s.INT,
                        name=s.STR, kinds=_KINDS, severities=_SEVERITIES, dataset_ids=_IDS, channel_ids=_IDS,
                        active=s.BOOL, created_by_id=s._n("integer"), created_at=s._n(s.TIME),
                        updated_at=s._n(s.TIME)),
    "WorkspaceSetting": s._obj(["name", "value", "default", "overridden"], name=s.STR, label=s.STR, help=s.STR,
                               value={"type": ["number", "string"]}, default={"type": ["number", "string"]},
                               overridden=s.BOOL, choices={"type": "array", "items": s.STR},
                               low=s._n("number"), high=s._n("number"), updated_by=s._n("string"),
                               updated_at=_NULL_TIME),
})
s.BODIES.update({
    "AlertAssign": {"type": "object", "required": ["user_id"], "additionalProperties": False,
                    "properties": {"user_id": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1,
                                               "description": "A user of the workspace; null: nobody."}}},
    "AlertSnooze": {"type": "object", "required": ["until"], "additionalProperties": False,
                    "properties": {"until": {**_NULL_TIME, "maxLength": 40,
                                             "description": "Off the open list until then (at most a year "
                                                            "ahead); null: wake it now."}}},
    "AlertComment": {"type": "object", "required": ["body"], "additionalProperties": False,
                     "properties": {"body": {"type": "string", "minLength": 1, "maxLength": lifecycle.MAX_COMMENT}}},
    "AlertChannelCreate": {
        "type": "object", "required": ["kind", "name"], "additionalProperties": False,
        "properties": {"kind": {"type": "string", "enum": [k.value for k in ChannelKind]},
                       "name": {"type": "string", "minLength": 1, "maxLength": 200},
                       "recipients": {"type": "array", "items": {"type": "string", "maxLength": 254},
                                      "minItems": 1, "maxItems": MAX_RECIPIENTS, "uniqueItems": True,
                                      "description": "Email addresses (email channels)."},
                       "url": {"type": "string", "minLength": 1, "maxLength": MAX_URL_LENGTH,
                               "description": "The incoming webhook's http(s) URL (slack channels)."},
                       "active": {"type": "boolean", "default": True}}},
    "AlertRuleSet": {
        "type": "object", "required": ["name", "channel_ids"], "additionalProperties": False,
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 200}, "kinds": _KINDS,
                       "severities": _SEVERITIES, "dataset_ids": {**_IDS, "maxItems": 200},
                       "channel_ids": {**_IDS, "minItems": 1, "maxItems": MAX_CHANNELS},
                       "active": {"type": "boolean", "default": True}}},
    "WorkspaceSettingsSet": {
        "type": "object", "additionalProperties": False, "minProperties": 1,
        "properties": {x.name: ({"type": ["string", "null"], "enum": [*x.choices, None]} if x.choices else
                                {"type": ["number", "null"], "minimum": x.low, "maximum": x.high})
                       for x in ws_settings.SETTINGS},
        "description": "The settings to change; null puts one back to the deployment's default."},
})


def actor(principal) -> lifecycle.Actor:
    return lifecycle.Actor(principal.user_id, principal.email)


def status(a: Alert) -> str:
    if a.acknowledged_at is not None:
        return "acknowledged"
    return "snoozed" if lifecycle.is_snoozed(a) else "open"


def _event(row) -> dict:
    e, assignee = row
    return {"id": e.id, "action": e.action, "actor": e.actor, "actor_id": e.actor_id, "assignee_id": e.assignee_id,
            "assignee": assignee, "until": s._t(e.until), "body": e.body, "created_at": s._t(e.created_at)}


def _alert(principal, db, alert_id: int, *, lock: bool = False) -> Alert:
    stmt = select(Alert).where(Alert.id == alert_id, Alert.workspace_id == principal.workspace_id)
    a = db.scalar(stmt.with_for_update() if lock else stmt)
    if a is None:
        raise ApiError(404, f"No alert with id {alert_id}.", field="alert_id")
    return a


def _email(db, user_id: int | None) -> str | None:
    return None if user_id is None else db.scalar(select(User.email).where(User.id == user_id))


def detail(db, a: Alert) -> dict:
    return {**s.alert(a), "status": status(a), "dataset": db.scalar(select(Dataset.name).where(
                Dataset.id == a.dataset_id)) if a.dataset_id else None,
            "acknowledged_by": _email(db, a.acknowledged_by_id), "assignee": _email(db, a.assigned_to_id),
            "events": [_event(r) for r in lifecycle.events(db, a.id)]}


@endpoint("GET", "/alerts/<int:alert_id>", summary="Describe an alert", tag="alerts", roles=READERS,
          response=s.ref("AlertDetail"))
def get_alert(principal, db, alert_id):
    """One alert: where it stands (open, snoozed or acknowledged), who acknowledged it and who it is
    assigned to, and its thread (every step and comment, oldest first)."""
    return detail(db, _alert(principal, db, alert_id))


def _step(principal, db, alert_id: int, fn, *args) -> dict:
    a = _alert(principal, db, alert_id, lock=True)
    try:
        fn(db, a, *args, actor=actor(principal))
    except lifecycle.LifecycleError as exc:
        raise ApiError(exc.status, str(exc), field=exc.field) from None
    return detail(db, a)


@endpoint("POST", "/alerts/<int:alert_id>/acknowledge", summary="Acknowledge an alert", tag="alerts",
          roles=WRITERS, response=s.ref("AlertDetail"))
def acknowledge_alert(principal, db, alert_id):
    """Mark an alert as seen by the caller (it leaves the open list); acknowledging again changes nothing."""
    return _step(principal, db, alert_id, alert_actions.acknowledge)


@endpoint("POST", "/alerts/<int:alert_id>/reopen", summary="Reopen an alert", tag="alerts", roles=WRITERS,
          response=s.ref("AlertDetail"))
def reopen_alert(principal, db, alert_id):
    """Put an acknowledged alert back on the open list."""
    return _step(principal, db, alert_id, alert_actions.reopen)


@endpoint("POST", "/alerts/<int:alert_id>/assign", summary="Assign an alert", tag="alerts", roles=WRITERS,
          body=s.BODIES["AlertAssign"], body_name="AlertAssign", response=s.ref("AlertDetail"))
def assign_alert(principal, db, alert_id, body):
    """Assign the alert to an active user of the workspace (``null``: to nobody)."""
    return _step(principal, db, alert_id, alert_actions.assign, body["user_id"])


def parse_time(raw: str | None, field: str) -> datetime | None:
    """An ISO 8601 time (a date alone is its midnight; no zone: UTC), or a 400 naming ``field``."""
    if raw is None:
        return None
    try:
        t = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ApiError(400, f"{field}: not an ISO 8601 date or time; got {raw[:40]!r}.", field=field) from None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


@endpoint("POST", "/alerts/<int:alert_id>/snooze", summary="Snooze an alert", tag="alerts", roles=WRITERS,
          body=s.BODIES["AlertSnooze"], body_name="AlertSnooze", response=s.ref("AlertDetail"))
def snooze_alert(principal, db, alert_id, body):
    """Keep the alert off the open list until a time (at most a year ahead); ``null`` wakes it now."""
    return _step(principal, db, alert_id, alert_actions.snooze, parse_time(body["until"], "until"))


@endpoint("POST", "/alerts/<int:alert_id>/comments", summary="Comment on an alert", tag="alerts", roles=WRITERS,
          body=s.BODIES["AlertComment"], body_name="AlertComment", response=s.ref("AlertDetail"), status=201)
def comment_alert(principal, db, alert_id, body):
    """Add a comment to the alert's thread."""
    return _step(principal, db, alert_id, alert_actions.comment, body["body"])


# --- channels ---------------------------------------------------------------------------------


def url_hint(url: str | None) -> str | None:
    """Enough of a secret URL to recognise it: its scheme, host and last four characters."""
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}/…{url[-4:]}"


def channel(c: AlertChannel) -> dict:
    return {"id": c.id, "kind": str(c.kind), "name": c.name, "recipients": list(c.recipients or []),
            "url_hint": url_hint(c.url), "active": bool(c.active), "created_by_id": c.created_by_id,
            "created_at": s._t(c.created_at)}


def _channel(principal, db, channel_id: int) -> AlertChannel:
    return get_owned(principal, db, AlertChannel, channel_id, "alert channel", "channel_id")


def channel_target(body: dict) -> tuple[list[str] | None, str | None]:
    """(recipients, url) of a new channel, checked; a 400 names the bad field."""
    from auditor.addresses import valid_address

    if body["kind"] == ChannelKind.EMAIL.value:
        recipients = [r.strip() for r in body.get("recipients") or []]
        if not recipients:
            raise ApiError(400, "recipients: an email channel needs at least one address.", field="recipients")
        for i, r in enumerate(recipients):
            if not valid_address(r):
                raise ApiError(400, f"recipients[{i}]: not a plain email address; got {r[:60]!r}.",
                               field=f"recipients[{i}]")
        if "url" in body:
            raise ApiError(400, "url: an email channel has recipients, not a URL.", field="url")
        return recipients, None
    if "recipients" in body:
        raise ApiError(400, "recipients: a slack channel has a URL, not recipients.", field="recipients")
    try:
        return None, validate_url(body.get("url", ""), allow_private=allow_private())
    except RefusedDestination as exc:
        raise ApiError(400, f"url: {exc}.", field="url") from None


def add_channel(principal, db, body: dict) -> AlertChannel:
    recipients, url = channel_target(body)
    check_quota(principal, db, AlertChannel, MAX_CHANNELS, "alert channels")
    c = AlertChannel(workspace_id=principal.workspace_id, kind=ChannelKind(body["kind"]), name=body["name"].strip(),
                     recipients=recipients, url=url, active=body.get("active", True), created_by_id=principal.user_id)
    db.add(c)
    db.commit()
    return c


@endpoint("GET", "/alert-channels", summary="List alert channels", tag="alerts", roles=ADMIN, listing=True,
          response=s.page_of("AlertChannel"))
def list_alert_channels(principal, db):
    """The workspace's alert channels (a Slack URL only in part)."""
    return Listing(workspace_rows(principal, AlertChannel), channel,
                   ["id", "kind", "name", "recipients", "url_hint", "active", "created_at"], "alert-channels")


@endpoint("POST", "/alert-channels", summary="Create an alert channel", tag="alerts", roles=ADMIN,
          body=s.BODIES["AlertChannelCreate"], body_name="AlertChannelCreate", response=s.ref("AlertChannel"),
          status=201)
def create_alert_channel(principal, db, body):
    """An email list (sent through the deployment's SMTP relay) or a Slack-compatible incoming webhook."""
    return channel(add_channel(principal, db, body))


@endpoint("GET", "/alert-channels/<int:channel_id>", summary="Describe an alert channel", tag="alerts",
          roles=ADMIN, response=s.ref("AlertChannel"))
def get_alert_channel(principal, db, channel_id):
    """One alert channel."""
    return channel(_channel(principal, db, channel_id))


@endpoint("DELETE", "/alert-channels/<int:channel_id>", summary="Delete an alert channel", tag="alerts",
          roles=ADMIN, response=s.ref("AlertChannel"))
def delete_alert_channel(principal, db, channel_id):
    """Delete a channel and its deliveries; rules keep their other channels."""
    return delete_answer(db, _channel(principal, db, channel_id), channel)


def set_channel_active(principal, db, channel_id: int, active: bool) -> AlertChannel:
    return set_active(db, _channel(principal, db, channel_id), active)


@endpoint("POST", "/alert-channels/<int:channel_id>/deactivate", summary="Deactivate an alert channel",
          tag="alerts", roles=ADMIN, response=s.ref("AlertChannel"))
def deactivate_alert_channel(principal, db, channel_id):
    """Stop sending alerts to the channel (messages not yet sent are given up)."""
    return channel(set_channel_active(principal, db, channel_id, False))


@endpoint("POST", "/alert-channels/<int:channel_id>/activate", summary="Activate an alert channel",
          tag="alerts", roles=ADMIN, response=s.ref("AlertChannel"))
def activate_alert_channel(principal, db, channel_id):
    """Send the channel its alerts again (from the next alert on)."""
    return channel(set_channel_active(principal, db, channel_id, True))


def send_test(principal, db, c: AlertChannel) -> WebhookDelivery:
    delivery_id = test_delivery(db, c, requested_by=principal.email)
    db.commit()
    publish_delivery(delivery_id)
    return db.get(WebhookDelivery, delivery_id)


def _test_limit() -> str:
    from flask import current_app

    return current_app.config["AUDITOR_INGEST_LIMIT"]


@endpoint("POST", "/alert-channels/<int:channel_id>/test", summary="Send a test message", tag="alerts",
          roles=ADMIN, response=s.ref("WebhookDelivery"), status=202, limit=_test_limit)
def test_alert_channel(principal, db, channel_id):
    """Queue a test message to the channel (even an inactive one); follow it in its delivery log."""
    return delivery(send_test(principal, db, _channel(principal, db, channel_id)))


@endpoint("GET", "/alert-channels/<int:channel_id>/deliveries", summary="List a channel's deliveries",
          tag="alerts", roles=ADMIN, listing=True, response=s.page_of("WebhookDelivery"),
          query=[Param("status", "string", "Only deliveries in this state.",
                       enum=tuple(m.value for m in DeliveryStatus))])
def list_alert_channel_deliveries(principal, db, channel_id, status):
    """The channel's delivery log, newest first: each message's state, attempts and every attempt's outcome."""
    c = _channel(principal, db, channel_id)
    return delivery_log(WebhookDelivery.channel_id == c.id, status,
                        ["id", "channel_id", "event", "status", "attempts", "response_code", "error", "created_at",
                         "last_attempt_at", "delivered_at"], f"alert-channel-{c.id}")


# --- rules ------------------------------------------------------------------------------------


def rule(r: AlertRule) -> dict:
    return {"id": r.id, "name": r.name, "kinds": list(r.kinds or []), "severities": list(r.severities or []),
            "dataset_ids": list(r.dataset_ids or []), "channel_ids": [c.id for c in r.channels],
            "active": bool(r.active), "created_by_id": r.created_by_id, "created_at": s._t(r.created_at),
            "updated_at": s._t(r.updated_at)}


def _rule(principal, db, rule_id: int) -> AlertRule:
    return get_owned(principal, db, AlertRule, rule_id, "alert rule", "rule_id")


def fill_rule(principal, db, r: AlertRule, body: dict) -> AlertRule:
    """Set the rule's fields from ``body`` (its datasets and channels must be the workspace's)."""
    channel_ids, dataset_ids = sorted(set(body["channel_ids"])), sorted(set(body.get("dataset_ids") or []))
    channels = list(db.scalars(select(AlertChannel).where(AlertChannel.workspace_id == principal.workspace_id,
                                                          AlertChannel.id.in_(channel_ids))
                               .order_by(AlertChannel.id)))
    missing = sorted(set(channel_ids) - {c.id for c in channels})
    if missing:
        raise ApiError(404, f"channel_ids: no alert channel with id {missing[0]}.", field="channel_ids")
    found = set(db.scalars(select(Dataset.id).where(Dataset.workspace_id == principal.workspace_id,
                                                    Dataset.id.in_(dataset_ids))))
    missing = sorted(set(dataset_ids) - found)
    if missing:
        raise ApiError(404, f"dataset_ids: no dataset with id {missing[0]}.", field="dataset_ids")
    r.name, r.channels = body["name"].strip(), channels
    r.kinds, r.severities = sorted(set(body.get("kinds") or [])), sorted(set(body.get("severities") or []))
    r.dataset_ids, r.active = dataset_ids, body.get("active", True)
    r.updated_at = datetime.now(UTC)
    return r


def add_rule(principal, db, body: dict) -> AlertRule:
    check_quota(principal, db, AlertRule, MAX_RULES, "alert rules")
    r = fill_rule(principal, db, AlertRule(workspace_id=principal.workspace_id, created_by_id=principal.user_id),
                  body)
    db.add(r)
    db.commit()
    return r


@endpoint("GET", "/alert-rules", summary="List alert rules", tag="alerts", roles=ADMIN, listing=True,
          response=s.page_of("AlertRule"))
def list_alert_rules(principal, db):
    """The workspace's rules: which alerts (kinds, severities, datasets; empty: any) go to which channels."""
    return Listing(workspace_rows(principal, AlertRule), rule,
                   ["id", "name", "kinds", "severities", "dataset_ids", "channel_ids", "active"], "alert-rules")


@endpoint("POST", "/alert-rules", summary="Create an alert rule", tag="alerts", roles=ADMIN,
          body=s.BODIES["AlertRuleSet"], body_name="AlertRuleSet", response=s.ref("AlertRule"), status=201)
def create_alert_rule(principal, db, body):
    """Send the alerts of these kinds, severities and datasets (empty lists: any) to these channels."""
    return rule(add_rule(principal, db, body))


@endpoint("GET", "/alert-rules/<int:rule_id>", summary="Describe an alert rule", tag="alerts", roles=ADMIN,
          response=s.ref("AlertRule"))
def get_alert_rule(principal, db, rule_id):
    """One alert rule."""
    return rule(_rule(principal, db, rule_id))


@endpoint("PUT", "/alert-rules/<int:rule_id>", summary="Replace an alert rule", tag="alerts", roles=ADMIN,
          body=s.BODIES["AlertRuleSet"], body_name="AlertRuleSet", response=s.ref("AlertRule"))
def replace_alert_rule(principal, db, rule_id, body):
    """Replace every field of the rule (alerts raised from now on follow it)."""
    r = fill_rule(principal, db, _rule(principal, db, rule_id), body)
    db.commit()
    return rule(r)


@endpoint("DELETE", "/alert-rules/<int:rule_id>", summary="Delete an alert rule", tag="alerts", roles=ADMIN,
          response=s.ref("AlertRule"))
def delete_alert_rule(principal, db, rule_id):
    """Delete the rule (its channels stay)."""
    return delete_answer(db, _rule(principal, db, rule_id), rule)


# --- thresholds -------------------------------------------------------------------------------


def worker_defaults():
    """The deployment's values of the settings (the workers'), the defaults of every workspace."""
    from flask import current_app

    capp = current_app.extensions.get("celery")
    w = capp.conf.get("auditor_worker") if capp is not None else None
    return w or load_worker_settings()


def _settings(db, principal) -> list[dict]:
    return [{**x, "updated_at": s._t(x["updated_at"])}
            for x in ws_settings.effective(db, principal.workspace_id, worker_defaults())]


@endpoint("GET", "/workspace-settings", summary="List the workspace's thresholds", tag="alerts", roles=READERS,
          response={"type": "array", "items": s.ref("WorkspaceSetting")})
def list_workspace_settings(principal, db):
    """Each threshold's value in this workspace, the deployment's default, and who set it when."""
    return _settings(db, principal)


@endpoint("PUT", "/workspace-settings", summary="Set the workspace's thresholds", tag="alerts", roles=ADMIN,
          body=s.BODIES["WorkspaceSettingsSet"], body_name="WorkspaceSettingsSet",
          response={"type": "array", "items": s.ref("WorkspaceSetting")})
def set_workspace_settings(principal, db, body):
    """Set some thresholds (``null``: back to the default); the next audits use them."""
    try:
        ws_settings.store(db, principal.workspace_id, body, actor=principal.email, actor_id=principal.user_id)
    except ValueError as exc:
        db.rollback()
        raise ApiError(400, str(exc), field=str(exc).split(" ", 1)[0]) from None
    db.commit()
    return _settings(db, principal)



