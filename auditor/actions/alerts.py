"""An alert's lifecycle steps as the alerts page and the JSON API take them: the step
(:mod:`auditor.alerting.lifecycle`), then one commit; a refused step rolls back and raises
:class:`~auditor.alerting.lifecycle.LifecycleError` (its ``status`` and ``field`` say how the
front end answers). The caller finds the alert in the principal's workspace, locked for update
(``SELECT … FOR UPDATE``), so two steps on one alert run one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session

from auditor.alerting import lifecycle
from auditor.alerting.lifecycle import Actor, LifecycleError
from auditor.db import Alert, Role

__all__ = ["STEPPERS", "Actor", "LifecycleError", "acknowledge", "assign", "comment", "reopen", "snooze", "step"]

#: The roles that may take an alert's steps.
STEPPERS = frozenset({Role.ADMIN, Role.ANALYST})


def step(db: Session, alert: Alert, fn: Callable[..., object], *args, actor: Actor) -> bool:
    """Take one lifecycle step (``fn(db, alert, *args, actor)``) and commit; whether it changed anything."""
    try:
        changed = fn(db, alert, *args, actor)
    except LifecycleError:
        db.rollback()
        raise
    db.commit()
    return bool(changed)


def acknowledge(db: Session, alert: Alert, actor: Actor) -> bool:
    """Mark the alert as seen (it leaves the open list); again changes nothing."""
    return step(db, alert, lifecycle.acknowledge, actor=actor)


def reopen(db: Session, alert: Alert, actor: Actor) -> bool:
    """Put an acknowledged alert back on the open list."""
    return step(db, alert, lifecycle.reopen, actor=actor)


def assign(db: Session, alert: Alert, user_id: int | None, actor: Actor) -> bool:
    """Assign the alert to an active user of its workspace (None: to nobody)."""
    return step(db, alert, lifecycle.assign, user_id, actor=actor)


def snooze(db: Session, alert: Alert, until: datetime | None, actor: Actor) -> bool:
    """Keep the alert off the open list until ``until`` (None wakes it now)."""
    return step(db, alert, lifecycle.snooze, until, actor=actor)


def comment(db: Session, alert: Alert, body: str, actor: Actor) -> bool:
    """Add a comment to the alert's thread."""
    return step(db, alert, lifecycle.comment, body, actor=actor)
