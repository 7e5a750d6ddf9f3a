"""Accounts: passwords, API tokens and users, with a record of who revoked or (de)activated what.

Shared by the command line, the JSON API and the admin page. Passwords are stored as argon2id
hashes. Tokens are 256-bit random strings, so a fast SHA-256 digest is enough to store them
(a slow hash protects guessable secrets like passwords, not random ones) and lets a request
find its token by index. Authentication (:mod:`auditor.web.security`) reads a token's
``revoked_at`` and its user's ``is_active`` and session generation on every request (before
any cached answer is looked up), so a change here refuses the next request of that token,
user or session.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from datetime import UTC, datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.orm import Session

from auditor.db import AccessAction, AccessEvent, ApiToken, Role, User

__all__ = ["MIN_PASSWORD", "TOKEN_PREFIX", "AccountError", "dummy_password_hash", "end_sessions", "hash_password", "hash_token", "issue_token",
           "revoke_token", "save_user", "set_password", "set_user_active", "verify_password"]

_hasher = PasswordHasher()
#: The start of every API token (lets secret scanners recognise one).
TOKEN_PREFIX = "aud_"


def hash_password(password: str) -> str:
    return _hasher.hash(password)


@functools.cache
def dummy_password_hash() -> str:
    """A hash of a random password, verified against when no account matches (same cost)."""
    return _hasher.hash(secrets.token_urlsafe(16))


def verify_password(password_hash: str | None, password: str) -> bool:
    if not password_hash:
        return False
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def issue_token(db: Session, user: User, *, name: str, role: Role | None = None,
                expires_at: datetime | None = None) -> tuple[ApiToken, str]:
    """Store a new token for ``user`` (hash only) and return it with its plaintext, shown once."""
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(user_id=user.id, name=name, token_hash=hash_token(plaintext),
                     prefix=plaintext[:12], role=role, expires_at=expires_at)
    db.add(token)
    db.flush()
    return token, plaintext


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
    user.password_hash = hash_password(password)
    end_sessions(user)


class AccountError(ValueError):
    """An account request refused; ``field`` names the input at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


#: The shortest password accepted.
MIN_PASSWORD = 8


def save_user(db: Session, workspace_id: int, email: str, *, role: Role, password: str, vendor: str | None = None,
              display_name: str | None = None) -> tuple[User, bool]:
    """Create the user ``email`` of the workspace, or reset its role, vendor and password (its
    sessions end); returns the user and whether it is new. Emails are compared lower-cased."""
    from sqlalchemy import select

    if role == Role.VENDOR and not vendor:
        raise AccountError("vendor", "a vendor user names the vendor it speaks for.")
    if len(password) < MIN_PASSWORD:
        raise AccountError("password", f"use at least {MIN_PASSWORD} characters.")
    email = email.strip().lower()
    user = db.scalar(select(User).where(User.workspace_id == workspace_id, User.email == email))
    created = user is None
    if user is None:
        user = User(workspace_id=workspace_id, email=email)
        db.add(user)
    user.role, user.vendor, user.display_name = role, vendor, display_name or user.display_name
    set_password(user, password)
    db.flush()
    return user, created
