"""The request's database session: opened lazily, closed on teardown (Flask tutorial's db.py)."""

from __future__ import annotations

from flask import Flask, current_app, g
from sqlalchemy.orm import Session

from auditor.db import make_engine, make_session_factory

__all__ = ["get_session", "init_app"]


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


def close_session(_exc: BaseException | None = None) -> None:
    session = g.pop("db_session", None)
    if session is not None:
        # Anything not committed by the view is abandoned (a failed request writes nothing).
        session.rollback()
        session.close()
