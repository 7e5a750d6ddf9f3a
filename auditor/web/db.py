"""The request's database session: opened lazily, closed on teardown (Flask tutorial's db.py)."""

from __future__ import annotations

from typing import TypeVar

from flask import Flask, current_app, g
from sqlalchemy.orm import Session

from auditor.db import ApiToken, make_engine, make_session_factory

__all__ = ["get_session", "in_workspace", "init_app"]

T = TypeVar("T")


def init_app(app: Flask) -> None:
    """One engine and session factory per application; one session per request."""
    engine = make_engine(app.config["DATABASE_URL"], **app.config.get("DATABASE_ENGINE_OPTIONS", {}))
    app.extensions["auditor.engine"] = engine
    app.extensions["auditor.sessions"] = make_session_factory(engine)
    app.teardown_appcontext(close_session)


def get_session() -> Session:
    """The session of the current request (the view owns its transaction)."""
    if "db_session" not in g:
        g.db_session = current_app.extensions["auditor.sessions"]()
    return g.db_session


def in_workspace(db: Session, model: type[T], object_id: int, workspace_id: int) -> T | None:
    """The ``model`` object with id ``object_id`` if it belongs to the workspace, else None:
    another workspace's object is simply not found (every view, page and endpoint asks here)."""
    obj = db.get(model, object_id)
    if obj is None:
        return None
    owner = obj.user.workspace_id if isinstance(obj, ApiToken) else obj.workspace_id  # a token is its user's
    return obj if owner == workspace_id else None


def close_session(_exc: BaseException | None = None) -> None:
    session = g.pop("db_session", None)
    if session is not None:
        # Anything not committed by the view is abandoned (a failed request writes nothing).
        session.rollback()
        session.close()
