"""The web application: JSON API, Scoracle endpoint and dashboards (Flask application factory)."""

from __future__ import annotations

import io
import os

from flask import Flask, Request, has_request_context, request
from flask.json.provider import DefaultJSONProvider
from flask.sessions import SecureCookieSessionInterface
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.utils import cached_property
from werkzeug.wsgi import LimitedStream

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


class _OverLimit(io.RawIOBase):
    """Reads a stream of unknown length and raises 413 once it has given more than ``limit`` bytes."""

    def __init__(self, inner: LimitedStream, limit: int):
        self.inner, self.limit, self.position = inner, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.inner.readinto(buffer) or 0
        self.position += n
        if self.position > self.limit:
            raise RequestEntityTooLarge()
        return n


class _Request(Request):
    """Werkzeug's request, with a body of unknown length (chunked) held to the upload limit.

    For such a body Werkzeug stops reading at ``max_content_length`` and returns what it
    has, silently: a JSON body over the limit then read as truncated ("must be JSON"),
    and a CSV as its first ``max_content_length`` bytes. Here one byte more is read, and
    getting it is a 413.
    """

    @cached_property
    def stream(self):
        limit = self.max_content_length
        if limit is not None and self.content_length is None and "wsgi.input_terminated" in self.environ \
                and not self.shallow:
            inner = LimitedStream(self.environ["wsgi.input"], limit + 1, is_max=True)
            return io.BufferedReader(_OverLimit(inner, limit))
        return super().stream


class _Flask(Flask):
    json_provider_class = _JSONProvider
    request_class = _Request


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
        AUDITOR_LOGIN_ACCOUNT_LIMIT=settings.login_account_limit,
        AUDITOR_INGEST_LIMIT=settings.ingest_limit,
        AUDITOR_SCORE_LIMIT=settings.score_limit,
        AUDITOR_SCORE_ANONYMOUS=settings.score_anonymous,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.session_cookie_secure == "true",
        AUDITOR_SESSION_COOKIE_SECURE=settings.session_cookie_secure,
        WTF_CSRF_TIME_LIMIT=8 * 3600,
        AUDITOR_RESPONSE_CACHE_ENTRIES=settings.response_cache_entries,
        AUDITOR_RESPONSE_CACHE_MAX_BYTES=settings.response_cache_max_bytes,
        AUDITOR_METRICS_TOKEN=settings.metrics_token,
    )
    if test_config:
        app.config.from_mapping(test_config)
    if settings.proxy_count:
        from werkzeug.middleware.proxy_fix import ProxyFix

        n = settings.proxy_count
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n)  # type: ignore[method-assign]
    app.session_interface = _SessionInterface()
    app.json.sort_keys = False

    from auditor.web import (
        cache,
        compression,
        currency,
        db,
        errors,
        formatting,
        security,
        timerange,
    )

    compression.init_app(app)
    db.init_app(app)
    cache.init_app(app)
    security.init_app(app)
    errors.init_app(app)
    formatting.init_app(app)
    timerange.init_app(app)
    currency.init_app(app)
    from auditor.web import plan_panel  # the release page's plan panel

    plan_panel.init_app(app)

    from auditor.web import health, metrics, observe

    observe.init_app(app, settings.log_format)
    health.init_app(app)
    metrics.init_app(app)

    # pages: its views join ui.bp (registered below)
    from auditor.web import alerting_pages, api, pages, score, ui, webhooks_ui

    security.csrf.exempt(api.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(score.bp)
    app.register_blueprint(ui.bp)
    app.register_blueprint(webhooks_ui.bp)
    # Label Studio's webhooks (authenticated by the secret header, not by a session or CSRF token).
    from auditor.web import labelstudio

    security.csrf.exempt(labelstudio.bp)
    app.register_blueprint(labelstudio.bp)

    from auditor.worker import celery_init_app

    celery_init_app(app)
    return app
