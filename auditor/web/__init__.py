"""The web application: JSON API, Scoracle endpoint and dashboards (Flask application factory)."""

from __future__ import annotations

import os

from flask import Flask, has_request_context, request
from flask.json.provider import DefaultJSONProvider
from flask.sessions import SecureCookieSessionInterface

from auditor.config import load_settings

__all__ = ["create_app"]


class _JSONProvider(DefaultJSONProvider):
    """Flask's JSON, with nesting too deep to parse refused as bad input (a 400, not a 500).

    The parser gives up at Python's recursion limit (about 1,000 levels) after reading
    at most that many characters of brackets; a ``RecursionError`` there is the client's
    doing, so it is reported as invalid JSON.
    """

    def loads(self, s, **kwargs):
        try:
            return super().loads(s, **kwargs)
        except RecursionError:
            raise ValueError("the JSON is nested too deeply") from None


class _Flask(Flask):
    json_provider_class = _JSONProvider


class _SessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions; ``Secure`` also when ``auto`` and the request came over HTTPS."""

    def get_cookie_secure(self, app: Flask) -> bool:
        if app.config.get("SESSION_COOKIE_SECURE"):
            return True
        return app.config.get("AUDITOR_SESSION_COOKIE_SECURE") == "auto" and has_request_context() and request.is_secure


def create_app(test_config: dict | None = None) -> Flask:
    """Build the app from the environment's settings; ``test_config`` overrides any key."""
    app = _Flask(__name__)
    settings = load_settings()
    redis_broker = settings.broker_url if settings.broker_url.startswith(("redis://", "rediss://")) else None
    app.config.from_mapping(
        SECRET_KEY=settings.secret_key,
        DATABASE_URL=settings.database_url,
        MAX_CONTENT_LENGTH=settings.max_upload_bytes,
        CELERY={"broker_url": settings.broker_url, "result_backend": settings.result_backend,
                "task_ignore_result": True},
        # Limits are counted in Redis in production so every web process shares them.
        RATELIMIT_STORAGE_URI=os.environ.get("AUDITOR_RATELIMIT_STORAGE_URL") or redis_broker or "memory://",
        RATELIMIT_HEADERS_ENABLED=True,
        # A Redis outage must not take ingestion down with it: count in memory meanwhile.
        RATELIMIT_IN_MEMORY_FALLBACK_ENABLED=True,
        RATELIMIT_KEY_PREFIX="auditor-web",
        AUDITOR_LOGIN_LIMIT=settings.login_limit,
        AUDITOR_INGEST_LIMIT=settings.ingest_limit,
        AUDITOR_SCORE_LIMIT=settings.score_limit,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.session_cookie_secure == "true",
        AUDITOR_SESSION_COOKIE_SECURE=settings.session_cookie_secure,
        WTF_CSRF_TIME_LIMIT=8 * 3600,
        AUDITOR_RESPONSE_CACHE_ENTRIES=settings.response_cache_entries,
        AUDITOR_RESPONSE_CACHE_MAX_BYTES=settings.response_cache_max_bytes,
    )
    if test_config:
        app.config.from_mapping(test_config)
    if settings.proxy_count:
        from werkzeug.middleware.proxy_fix import ProxyFix

        n = settings.proxy_count
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n)  # type: ignore[method-assign]
    app.session_interface = _SessionInterface()
    app.json.sort_keys = False

    from auditor.web import cache, db, errors, formatting, security

    db.init_app(app)
    cache.init_app(app)
    security.init_app(app)
    errors.init_app(app)
    formatting.init_app(app)

    from auditor.web import api, score, ui

    security.csrf.exempt(api.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(score.bp)
    app.register_blueprint(ui.bp)

    import workers

    workers.celery_init_app(app)
    return app
