"""The workspace's rules send its alerts to its channels.

An alert goes to every active channel of every active rule it matches (its kind, severity
and dataset are among the rule's, an empty list matching any), once per channel however
many of its rules match. Each channel gets one message per group of alerts (at most
:data:`ALERTS_PER_MESSAGE`), stored as a pending delivery in the webhook delivery log in
the caller's transaction (so that it is stored with the alerts, and the workers' sweep
sends any whose message to the broker was lost); the workers send it and retry it with
the webhooks' backoff.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from auditor.db.models import Alert, AlertChannel, AlertRule, Dataset
from auditor.webhooks.deliveries import MAX_BODY_BYTES, store_deliveries

__all__ = ["ALERTS_PER_MESSAGE", "ALERT_KINDS", "EVENT", "matches", "message", "route_alerts", "test_delivery"]

#: What raises alerts: the audits (a release's verdict) and the quality monitors (a vendor's or annotator's
#: change, or one that all vendors share: the items got harder or easier).
ALERT_KINDS = ("certification_changed", "vendor_quality_changed", "annotator_quality_changed",
               "dataset_quality_changed")
EVENT = "alert.routed"
ALERTS_PER_MESSAGE = 50
_MESSAGE_CHARS = 2000


def matches(rule: AlertRule, alert: Alert) -> bool:
    """Whether the alert is one the rule sends (an empty list of the rule's matches any)."""
    return ((not rule.kinds or alert.kind in rule.kinds)
            and (not rule.severities or str(alert.severity) in rule.severities)
            and (not rule.dataset_ids or alert.dataset_id in rule.dataset_ids))


def _entry(alert: Alert, dataset: str | None) -> dict[str, Any]:
    return {"id": alert.id, "severity": str(alert.severity), "kind": alert.kind, "subject": alert.subject,
            "message": (alert.message or "")[:_MESSAGE_CHARS], "dataset": dataset, "path": f"/alerts/{alert.id}"}


def message(entries: list[dict[str, Any]], *, note: str | None = None) -> str:
    """A stored message (JSON): a subject naming the worst alert, and the alerts."""
    worst = max(entries, key=lambda e: ("info", "warning", "critical").index(e["severity"])
                if e["severity"] in ("info", "warning", "critical") else 0, default=None)
    if worst is None:
        subject = "Auditor: a test message"
    else:
        what = worst["kind"].replace("_", " ") + (f": {worst['subject']}" if worst.get("subject") else "")
        more = f" (+{len(entries) - 1} more)" if len(entries) > 1 else ""
        subject = f"[Auditor] {worst['severity']} {what}{more}"
    body = json.dumps({"subject": subject[:200], "alerts": entries, "note": note}, ensure_ascii=False,
                      separators=(",", ":"))
    if len(body.encode("utf-8")) > MAX_BODY_BYTES:  # (50 alerts of 2,000 characters stay far below)
        raise ValueError("an alert message is too large")
    return body


def _routes(session: Session, workspace_id: int) -> list[AlertRule]:
    return list(session.scalars(select(AlertRule).options(selectinload(AlertRule.channels))
                                .where(AlertRule.workspace_id == workspace_id, AlertRule.active.is_(True))
                                .order_by(AlertRule.id)))


def route_alerts(session: Session, alert_ids: Iterable[int]) -> list[int]:
    """Deliveries of these alerts to the channels their workspaces' rules send them to; their ids."""
    ids = sorted({int(i) for i in alert_ids})
    if not ids:
        return []
    rows = session.execute(select(Alert, Dataset.name).outerjoin(Dataset, Dataset.id == Alert.dataset_id)
                           .where(Alert.id.in_(ids)).order_by(Alert.id)).all()
    by_workspace: dict[int, list[tuple[Alert, str | None]]] = {}
    for alert, name in rows:
        by_workspace.setdefault(alert.workspace_id, []).append((alert, name))
    out: list[int] = []
    for workspace_id, alerts in by_workspace.items():
        per_channel: dict[int, list[dict[str, Any]]] = {}
        for rule in _routes(session, workspace_id):
            for alert, name in alerts:
                if not matches(rule, alert):
                    continue
                for channel in rule.channels:
                    sent = per_channel.setdefault(channel.id, []) if channel.active else None
                    if sent is not None and all(e["id"] != alert.id for e in sent):
                        sent.append(_entry(alert, name))
        for channel_id, entries in per_channel.items():
            entries.sort(key=lambda e: e["id"])
            bodies = [message(entries[i:i + ALERTS_PER_MESSAGE]) for i in range(0, len(entries), ALERTS_PER_MESSAGE)]
            out += store_deliveries(session, EVENT, bodies, [{"channel_id": channel_id}])
    return out


def test_delivery(session: Session, channel: AlertChannel, *, requested_by: str | None) -> int:
    """A test message to ``channel`` (whatever its active flag), as a pending delivery."""
    note = f"A test message from Auditor to the channel {channel.name!r}" + (
        f", sent by {requested_by}." if requested_by else ".")
    return store_deliveries(session, "channel.test", [message([], note=note)], [{"channel_id": channel.id}])[0]
