"""Who is asking, and what they may do: sessions, API tokens, roles, limits, headers.

UI users log in with a password (argon2id hash) and get a signed session cookie; API
clients send ``Authorization: Bearer <token>``. Passwords and tokens are made and checked
by :mod:`auditor.actions.accounts` (the names are re-exported here for the web layer).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime

from flask import Flask, Response, current_app, g, request, session
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from flask_wtf.csrf import CSRFProtect
from sqlalchemy import Connection, Integer, String, bindparam, cast, func, select

from auditor.actions.accounts import (
    dummy_password_hash,
    hash_password,
    hash_token,
    issue_token,
    verify_password,
)
from auditor.db import ApiToken, DatasetGrant, Role, User, Workspace

__all__ = [
    "ALL_ROLES",
    "READERS",
    "Principal",
    "csrf",
    "dummy_password_hash",
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
    grants: frozenset[int] = field(default=frozenset(), repr=False)
    """Datasets a vendor may submit to and see (read with the principal)."""

    @property
    def reads_all(self) -> bool:
        return self.role in READERS


def _bearer() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


_USER = User.__table__
_TOKEN = ApiToken.__table__
_WORKSPACE = Workspace.__table__
_GRANT = DatasetGrant.__table__


@functools.cache
def _principal_statement(*, by_token: bool, with_fingerprint: bool):
    """One statement: the caller's user, workspace, token, grants and (optionally) the cache fingerprint.

    Built once per variant; the token's digest or the session's user id is bound per request.
    """
    from auditor.web.cache import fingerprint_column

    grants = (select(func.aggregate_strings(cast(_GRANT.c.dataset_id, String), ","))
              .where(_GRANT.c.user_id == _USER.c.id).scalar_subquery())
    columns = [_USER.c.id, _USER.c.workspace_id, _WORKSPACE.c.slug, _USER.c.email, _USER.c.role, _USER.c.vendor,
               _USER.c.is_active, _USER.c.session_generation, grants.label("grants")]
    if with_fingerprint:
        columns.append(fingerprint_column(_USER.c.workspace_id).label("fingerprint"))
    if by_token:
        columns += [_TOKEN.c.role.label("token_role"), _TOKEN.c.revoked_at, _TOKEN.c.expires_at]
        return (select(*columns).select_from(_TOKEN.join(_USER, _TOKEN.c.user_id == _USER.c.id)
                                             .join(_WORKSPACE, _USER.c.workspace_id == _WORKSPACE.c.id))
                .where(_TOKEN.c.token_hash == bindparam("key", type_=String)))
    return (select(*columns).select_from(_USER.join(_WORKSPACE, _USER.c.workspace_id == _WORKSPACE.c.id))
            .where(_USER.c.id == bindparam("key", type_=Integer)))


def _read_connection() -> Connection:
    """A pooled connection for this request's authentication read (no ORM session)."""
    engine = current_app.extensions["auditor.engine"]
    conn = engine.connect()
    if engine.dialect.name == "postgresql":
        # One statement needs no transaction: no BEGIN/ROLLBACK round trips.
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
    return conn


def load_principal(*, allow_session: bool, with_fingerprint: bool = False) -> Principal | None:
    """The caller of this request, from its bearer token or (if allowed) its session cookie.

    One statement reads the user, workspace, token and vendor grants; with
    ``with_fingerprint`` it also reads the response cache's fingerprint of the caller's
    workspace (``g.cache_fingerprint``), so a cached answer costs one round trip.
    """
    if "principal" in g:
        return g.principal
    principal = None
    token_text = _bearer()
    user_id = None
    if token_text is None and allow_session and "user_id" in session:
        user_id = session["user_id"]
    if token_text is not None or user_id is not None:
        # The response cache serves PostgreSQL deployments only (see auditor.web.cache).
        with_fingerprint = with_fingerprint and current_app.extensions["auditor.engine"].dialect.name == "postgresql"
        stmt = _principal_statement(by_token=token_text is not None, with_fingerprint=with_fingerprint)
        key = hash_token(token_text) if token_text is not None else user_id
        with _read_connection() as conn:
            row = conn.execute(stmt, {"key": key}).mappings().first()
        if row is not None and row["is_active"]:
            grants = frozenset(int(x) for x in (row["grants"] or "").split(",") if x)
            role = Role(row["role"])
            if token_text is not None:
                expires = row["expires_at"]
                if expires is not None and expires.tzinfo is None:
                    expires = expires.replace(tzinfo=UTC)  # SQLite keeps no zone; we store UTC
                if row["revoked_at"] is None and (expires is None or expires > datetime.now(UTC)):
                    token_role = row["token_role"]
                    # A token may narrow its user's role, never widen it.
                    if token_role is not None and _narrower(Role(token_role), role):
                        role = Role(token_role)
                    principal = Principal(row["id"], row["workspace_id"], row["slug"], row["email"], role,
                                          row["vendor"], "token", grants)
            elif row["workspace_id"] == session.get("workspace_id") and \
                    row["session_generation"] == session.get("generation", 0):
                # a session issued before its user's last logout, deactivation or new password has ended
                principal = Principal(row["id"], row["workspace_id"], row["slug"], row["email"], role,
                                      row["vendor"], "session", grants)
        if principal is not None and with_fingerprint:
            g.cache_fingerprint = row["fingerprint"]
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


@limiter.request_filter
def _is_read() -> bool:
    # Limits guard writes and logins (every limit is declared on a POST); reads skip the check.
    return request.method in ("GET", "HEAD", "OPTIONS")


_MAX_QUERY_PARAMETERS = 64


def _refuse_unstorable_request():
    """Refuse NUL characters and floods of query parameters before any view runs.

    PostgreSQL cannot store or compare text holding NUL, so a NUL that reached a query
    (``/vendors/a%00b``, a query parameter, a form field or an upload's file name) ended
    as a 500; no legitimate id, name or file name holds one. Query parameters are bounded
    so that no request can make a view loop over an unbounded number of them.
    """
    from flask import request

    from auditor.web.errors import ApiError

    if "\x00" in request.path or "%00" in request.query_string.decode("latin-1").lower():
        raise ApiError(400, "the URL holds a NUL character", field="url")
    if len(request.args) > _MAX_QUERY_PARAMETERS or sum(len(v) for v in request.args.listvalues()) > 4 * _MAX_QUERY_PARAMETERS:
        raise ApiError(400, f"too many query parameters (at most {_MAX_QUERY_PARAMETERS})", field="query")
    if request.content_type and request.content_type.startswith(("multipart/form-data",
                                                                 "application/x-www-form-urlencoded")):
        for key, value in request.form.items(multi=True):
            key = key if isinstance(key, str) else ""
            if "\x00" in key or (isinstance(value, str) and "\x00" in value):
                raise ApiError(400, f"form field {key[:40]!r} holds a NUL character", field=key[:40])
        for key, upload in request.files.items(multi=True):
            key = key if isinstance(key, str) else ""
            if "\x00" in key or "\x00" in (getattr(upload, "filename", None) or ""):
                raise ApiError(400, "an uploaded file's name holds a NUL character", field=key[:40])


def init_app(app: Flask) -> None:
    limiter.init_app(app)
    csrf.init_app(app)
    app.before_request(_refuse_unstorable_request)
    app.after_request(_security_headers)
