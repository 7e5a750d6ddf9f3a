"""An alert's lifecycle: acknowledged (who, when), reopened, assigned to a user of the
workspace, snoozed until a time, and commented on; every step is an
:class:`~auditor.db.AlertEvent` (who, when, what), read back in order as the alert's thread.

Shared by the JSON API and the pages; the caller commits. A step that changes nothing (an
alert acknowledged twice, assigned to whom it already is) records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.db.models import Alert, AlertEvent, User

__all__ = ["MAX_COMMENT", "MAX_SNOOZE", "Actor", "LifecycleError", "acknowledge", "assign", "comment", "events",
           "is_snoozed", "reopen", "snooze"]

MAX_COMMENT = 4000
"""Characters of one comment."""
MAX_SNOOZE = timedelta(days=366)
"""How far ahead an alert may be snoozed."""
MAX_EVENTS = 500
"""Steps of one alert's thread shown (the newest ones)."""


class LifecycleError(ValueError):
    """A step that cannot be taken as asked (``field`` names what was wrong; ``status`` is 404
    when it names something the workspace does not have)."""

    def __init__(self, message: str, field: str, status: int = 400):
        super().__init__(message)
        self.field, self.status = field, status


@dataclass(frozen=True)
class Actor:
    """Who takes a step: the user's id and email (kept as they are now)."""

    user_id: int | None
    email: str


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(t: datetime | None) -> datetime | None:
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=UTC)  # SQLite keeps no zone


def is_snoozed(alert: Alert, now: datetime | None = None) -> bool:
    until = _aware(alert.snoozed_until)
    return until is not None and until > (now or _now())


def _record(db: Session, alert: Alert, action: str, actor: Actor, **fields) -> AlertEvent:
    now = _now()
    event = AlertEvent(alert_id=alert.id, action=action, actor_id=actor.user_id, actor=actor.email[:320],
                       created_at=now, **fields)
    db.add(event)
    alert.updated_at = now
    db.flush()
    return event


def acknowledge(db: Session, alert: Alert, actor: Actor) -> bool:
    """Mark the alert as seen by ``actor`` (it leaves the open list); False when it already was."""
    if alert.acknowledged_at is not None:
        return False
    alert.acknowledged_at, alert.acknowledged_by_id = _now(), actor.user_id
    _record(db, alert, "acknowledged", actor)
    return True


def reopen(db: Session, alert: Alert, actor: Actor) -> bool:
    """Put an acknowledged alert back on the open list; False when it was open."""
    if alert.acknowledged_at is None:
        return False
    alert.acknowledged_at = alert.acknowledged_by_id = None
    _record(db, alert, "reopened", actor)
    return True


def assign(db: Session, alert: Alert, user_id: int | None, actor: Actor) -> bool:
    """Assign the alert to an active user of its workspace (None: to nobody); False when unchanged."""
    if user_id is not None:
        user = db.scalar(select(User).where(User.id == user_id, User.workspace_id == alert.workspace_id))
        if user is None:
            raise LifecycleError(f"No user with id {user_id} in this workspace.", "user_id", 404)
        if not user.is_active:
            raise LifecycleError(f"User {user_id} is deactivated: assign the alert to an active user.", "user_id")
    if alert.assigned_to_id == user_id:
        return False
    alert.assigned_to_id, alert.assigned_at = user_id, (_now() if user_id is not None else None)
    _record(db, alert, "assigned" if user_id is not None else "unassigned", actor, assignee_id=user_id)
    return True


def snooze(db: Session, alert: Alert, until: datetime | None, actor: Actor) -> bool:
    """Keep the alert off the open list until ``until`` (None: wake it now); False when unchanged."""
    now = _now()
    if until is not None:
        until = _aware(until)
        if until <= now:
            raise LifecycleError("A snooze must end in the future.", "until")
        if until > now + MAX_SNOOZE:
            raise LifecycleError(f"A snooze ends at most {MAX_SNOOZE.days} days ahead.", "until")
    elif not is_snoozed(alert, now):
        return False
    alert.snoozed_until = until
    _record(db, alert, "snoozed" if until is not None else "unsnoozed", actor, until=until)
    return True


def comment(db: Session, alert: Alert, body: str, actor: Actor) -> AlertEvent:
    """Add ``body`` to the alert's thread."""
    text = (body or "").strip()
    if not text:
        raise LifecycleError("A comment needs some text.", "body")
    if len(text) > MAX_COMMENT:
        raise LifecycleError(f"A comment holds at most {MAX_COMMENT} characters.", "body")
    return _record(db, alert, "commented", actor, body=text)


def events(db: Session, alert_id: int, *, limit: int = MAX_EVENTS) -> list[tuple[AlertEvent, str | None]]:
    """The alert's steps, oldest first (the newest ``limit``), each with its assignee's email."""
    rows = db.execute(select(AlertEvent, User.email).outerjoin(User, User.id == AlertEvent.assignee_id)
                      .where(AlertEvent.alert_id == alert_id)
                      .order_by(AlertEvent.created_at.desc(), AlertEvent.id.desc()).limit(limit)).all()
    return [(e, email) for e, email in reversed(rows)]
