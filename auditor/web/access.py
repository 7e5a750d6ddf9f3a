"""Revoking API tokens and (de)activating users, with a record of who did it and when.

Shared by the command line, the JSON API and the admin page. Authentication reads a
token's ``revoked_at`` and its user's ``is_active`` and session generation on every
request (before any cached answer is looked up), so a change here refuses the next
request of that token, user or session.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from auditor.db import AccessAction, AccessEvent, ApiToken, User

__all__ = ["end_sessions", "revoke_token", "set_password", "set_user_active"]


def _record(db: Session, user: User, action: AccessAction, *, actor: str, actor_id: int | None,
            token: ApiToken | None = None) -> AccessEvent:
    subject = f"token {token.id} ({token.name!r}, {token.prefix}…) of {user.email}" if token else user.email
    event = AccessEvent(workspace_id=user.workspace_id, action=action, actor=actor[:320], actor_id=actor_id,
                        user_id=user.id, token_id=token.id if token else None, subject=subject[:400])
    db.add(event)
    return event


def revoke_token(db: Session, token: ApiToken, *, actor: str, actor_id: int | None = None) -> bool:
    """Revoke ``token`` (False when it was revoked already: nothing changes, nothing is recorded)."""
    if token.revoked_at is not None:
        return False
    token.revoked_at = datetime.now(UTC)
    _record(db, token.user, AccessAction.TOKEN_REVOKED, actor=actor, actor_id=actor_id, token=token)
    db.flush()
    return True


def set_user_active(db: Session, user: User, active: bool, *, actor: str, actor_id: int | None = None) -> bool:
    """Deactivate (or reactivate) ``user``: its sessions and tokens are refused while inactive.

    Reactivating does not bring back tokens revoked one by one. Returns False when the
    user already was in that state (nothing is recorded).
    """
    if bool(user.is_active) == active:
        return False
    user.is_active = active
    end_sessions(user)  # reactivating must not revive the sessions of before
    _record(db, user, AccessAction.USER_REACTIVATED if active else AccessAction.USER_DEACTIVATED,
            actor=actor, actor_id=actor_id)
    db.flush()
    return True


def end_sessions(user: User) -> None:
    """End every session of ``user``: cookies issued before carry an older generation."""
    user.session_generation = (user.session_generation or 0) + 1


def set_password(user: User, password: str) -> None:
    """A new password ends the sessions opened with the old one."""
    from auditor.web.security import hash_password

    user.password_hash = hash_password(password)
    end_sessions(user)
