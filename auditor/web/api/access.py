"""The caller, users, tokens, and the log of who changed them."""

from __future__ import annotations

from sqlalchemy import select

from auditor.db import (
    AccessEvent,
    ApiToken,
    Role,
    User,
)
from auditor.web.api import serializers as s
from auditor.web.api.common import ADMIN, commit, workspace_rows
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.db import in_workspace
from auditor.web.errors import ApiError
from auditor.web.security import ALL_ROLES

__all__: list[str] = []  # the operations register themselves with the route table


# --- who am I ---------------------------------------------------------------------------------


@endpoint("GET", "/me", summary="Describe the caller", tag="access", roles=ALL_ROLES, response=s.ref("Me"))
def me(principal, db):
    """The caller's workspace, role, vendor and (for vendors) granted datasets."""
    granted = sorted(principal.grants) if principal.role == Role.VENDOR else None
    return {"user_id": principal.user_id, "workspace": principal.workspace_slug, "email": principal.email,
            "role": principal.role.value, "vendor": principal.vendor, "datasets": granted}


# --- users, tokens and who changed them ------------------------------------------------------
#
# Authentication reads a token's ``revoked_at`` and its user's ``is_active`` on every request,
# before any cached answer: a revoked token or a deactivated user is refused from the next request.


def _get_user(principal, db, user_id: int) -> User:
    u = in_workspace(db, User, user_id, principal.workspace_id)
    if u is None:
        raise ApiError(404, f"No user with id {user_id}.", field="user_id")
    return u


@endpoint("GET", "/users", summary="List users", tag="access", roles=ADMIN, listing=True,
          query=[Param("active", "boolean", "Only active (true) or deactivated (false) users.")],
          response=s.page_of("User"))
def list_users(principal, db, active):
    """Users of the workspace with their role, vendor and whether they may sign in."""
    stmt = workspace_rows(principal, User, User.email)
    if active is not None:
        stmt = stmt.where(User.is_active.is_(active))
    return Listing(stmt, s.user, ["id", "email", "display_name", "role", "vendor", "is_active", "created_at"],
                   "users")


def _set_active(principal, db, user_id: int, active: bool) -> dict:
    from auditor.actions.accounts import set_user_active

    u = _get_user(principal, db, user_id)
    if not active and u.id == principal.user_id:
        raise ApiError(409, "An admin cannot deactivate itself; ask another admin.", field="user_id")
    set_user_active(db, u, active, actor=principal.email, actor_id=principal.user_id)
    commit(db, f"User {user_id}")
    return s.user(u)


@endpoint("POST", "/users/<int:user_id>/deactivate", summary="Deactivate a user", tag="access", roles=ADMIN,
          response=s.ref("User"))
def deactivate_user(principal, db, user_id):
    """Refuse the user's sessions and tokens from the next request on; recorded as an access event."""
    return _set_active(principal, db, user_id, False)


@endpoint("POST", "/users/<int:user_id>/reactivate", summary="Reactivate a user", tag="access", roles=ADMIN,
          response=s.ref("User"))
def reactivate_user(principal, db, user_id):
    """Let a deactivated user in again (its tokens work again unless revoked); recorded as an access event."""
    return _set_active(principal, db, user_id, True)


@endpoint("GET", "/users/<int:user_id>/tokens", summary="List a user's tokens", tag="access", roles=ALL_ROLES,
          listing=True, response=s.page_of("Token"))
def list_tokens(principal, db, user_id):
    """A user's API tokens, never the tokens themselves (an admin sees anyone's, others their own)."""
    if principal.role != Role.ADMIN and user_id != principal.user_id:
        raise ApiError(404, f"No user with id {user_id}.", field="user_id")
    u = _get_user(principal, db, user_id)
    stmt = select(ApiToken).where(ApiToken.user_id == u.id).order_by(ApiToken.id)
    return Listing(stmt, s.token, ["id", "user_id", "name", "prefix", "role", "created_at", "expires_at",
                                   "revoked_at"], f"tokens-{u.id}")


@endpoint("POST", "/tokens/<int:token_id>/revoke", summary="Revoke a token", tag="access", roles=ALL_ROLES,
          response=s.ref("Token"))
def revoke_token(principal, db, token_id):
    """Revoke a token at once (an admin any token of the workspace, others their own); revoking again changes nothing."""
    from auditor.actions.accounts import revoke_token as revoke

    row = db.execute(select(ApiToken).join(User, ApiToken.user_id == User.id)
                     .where(ApiToken.id == token_id, User.workspace_id == principal.workspace_id)
                     .with_for_update(of=ApiToken)).first()
    if row is None or (principal.role != Role.ADMIN and row[0].user_id != principal.user_id):
        raise ApiError(404, f"No token with id {token_id}.", field="token_id")
    revoke(db, row[0], actor=principal.email, actor_id=principal.user_id)
    commit(db, f"Token {token_id}")
    return s.token(row[0])


@endpoint("GET", "/access-events", summary="List access events", tag="access", roles=ADMIN, listing=True,
          query=[Param("user_id", "integer", "Only events about this user.")], response=s.page_of("AccessEvent"))
def list_access_events(principal, db, user_id):
    """Who revoked which token or (de)activated which user, and when; newest first."""
    stmt = (select(AccessEvent).where(AccessEvent.workspace_id == principal.workspace_id)
            .order_by(AccessEvent.created_at.desc(), AccessEvent.id.desc()))
    if user_id is not None:
        stmt = stmt.where(AccessEvent.user_id == _get_user(principal, db, user_id).id)
    return Listing(stmt, s.access_event, ["id", "created_at", "action", "actor", "actor_id", "user_id",
                                          "token_id", "subject"], "access-events")
