"""Who is asking, and what they may do: passwords, API tokens, roles, limits, headers.

UI users log in with a password (argon2id hash) and get a signed session cookie; API
clients send ``Authorization: Bearer <token>``. Tokens are 256-bit random strings, so
a fast SHA-256 digest is enough to store them (a slow hash protects guessable secrets
like passwords, not random ones) and lets a request find its token by index.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from flask import Flask, Response, g, request, session
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from flask_wtf.csrf import CSRFProtect
from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.db import ApiToken, DatasetGrant, Role, User, Workspace

__all__ = [
    "ALL_ROLES",
    "READERS",
    "Principal",
    "csrf",
    "hash_password",
    "hash_token",
    "issue_token",
    "limiter",
    "load_principal",
    "verify_password",
]

READERS = frozenset({Role.ADMIN, Role.ANALYST, Role.VIEWER})
"""Roles that may read everything in their workspace."""
ALL_ROLES = frozenset(Role)

_hasher = PasswordHasher()
_TOKEN_PREFIX = "aud_"

limiter = Limiter(key_func=get_remote_address)
csrf = CSRFProtect()

# Nothing from another host: scripts, styles, images, fonts and fetches from this origin
# only; no inline script; no framing; forms post back here only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}


def hash_password(password: str) -> str:
    return _hasher.hash(password)


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
    plaintext = _TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(user_id=user.id, name=name, token_hash=hash_token(plaintext),
                     prefix=plaintext[:12], role=role, expires_at=expires_at)
    db.add(token)
    db.flush()
    return token, plaintext


@dataclass
class Principal:
    """The authenticated caller: a user (through a session or a token) and its effective role."""

    user_id: int
    workspace_id: int
    workspace_slug: str
    email: str
    role: Role
    vendor: str | None
    via: str  # "token" or "session"
    _granted: frozenset[int] | None = field(default=None, repr=False)

    def granted_dataset_ids(self, db: Session) -> frozenset[int]:
        """Datasets a vendor may submit to and see."""
        if self._granted is None:
            rows = db.scalars(select(DatasetGrant.dataset_id).where(DatasetGrant.user_id == self.user_id))
            self._granted = frozenset(rows)
        return self._granted

    @property
    def reads_all(self) -> bool:
        return self.role in READERS


def _bearer() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def load_principal(db: Session, *, allow_session: bool) -> Principal | None:
    """The caller of this request, from its bearer token or (if allowed) its session cookie."""
    if "principal" in g:
        return g.principal
    principal = None
    token_text = _bearer()
    if token_text is not None:
        row = db.execute(
            select(ApiToken, User, Workspace)
            .join(User, ApiToken.user_id == User.id)
            .join(Workspace, User.workspace_id == Workspace.id)
            .where(ApiToken.token_hash == hash_token(token_text))
        ).first()
        now = datetime.now(UTC)
        if row is not None:
            token, user, ws = row
            usable = (user.is_active and token.revoked_at is None
                      and (token.expires_at is None or token.expires_at > now))
            if usable:
                # A token may narrow its user's role, never widen it.
                role = token.role if token.role is not None and _narrower(token.role, user.role) else user.role
                principal = Principal(user.id, ws.id, ws.slug, user.email, Role(role), user.vendor, "token")
    elif allow_session and "user_id" in session:
        row = db.execute(
            select(User, Workspace).join(Workspace, User.workspace_id == Workspace.id)
            .where(User.id == session["user_id"])
        ).first()
        if row is not None and row[0].is_active and row[1].id == session.get("workspace_id"):
            user, ws = row
            principal = Principal(user.id, ws.id, ws.slug, user.email, Role(user.role), user.vendor,
                                  "session")
    g.principal = principal
    return principal


_RANK = {Role.VIEWER: 0, Role.VENDOR: 0, Role.ANALYST: 1, Role.ADMIN: 2}


def _narrower(token_role: Role, user_role: Role) -> bool:
    if token_role == user_role or user_role == Role.ADMIN:
        return True
    return _RANK[token_role] < _RANK[user_role] and token_role != Role.VENDOR


def _security_headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if request.path.startswith("/api/") or response.mimetype == "text/html":
        # Results and pages are per-user: never cache them in shared caches.
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def init_app(app: Flask) -> None:
    limiter.init_app(app)
    csrf.init_app(app)
    app.after_request(_security_headers)
