"""The access page: the workspace's users, their tokens and the latest access events."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.db import AccessEvent, ApiToken, User

#: The access page lists at most this many events, newest first.
LISTED_EVENTS = 50


def access_page(db: Session, workspace_id: int) -> dict:
    """``users`` by email, ``tokens`` by user id (oldest first) and the newest ``events``."""
    users = list(db.scalars(select(User).where(User.workspace_id == workspace_id).order_by(User.email)))
    tokens: dict[int, list] = {}
    for t in db.scalars(select(ApiToken).join(User, ApiToken.user_id == User.id)
                        .where(User.workspace_id == workspace_id).order_by(ApiToken.id)):
        tokens.setdefault(t.user_id, []).append(t)
    events = list(db.scalars(select(AccessEvent).where(AccessEvent.workspace_id == workspace_id)
                             .order_by(AccessEvent.created_at.desc(), AccessEvent.id.desc())
                             .limit(LISTED_EVENTS)))
    return {"users": users, "tokens": tokens, "events": events}
