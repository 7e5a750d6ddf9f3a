"""The web application: JSON API, Scoracle endpoint and dashboards (Flask application factory)."""

from __future__ import annotations

import os

from flask import Flask

from auditor.config import load_settings

__all__ = ["create_app"]


def create_app(test_config: dict | None = None) -> Flask:
    """Build the app from the environment's settings; ``test_config`` overrides any key."""
    app = Flask(__name__)
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
        AUDITOR_LOGIN_LIMIT="10 per minute",
        AUDITOR_INGEST_LIMIT="60 per minute",
        AUDITOR_SCORE_LIMIT="60 per minute",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        WTF_CSRF_TIME_LIMIT=8 * 3600,
        AUDITOR_RESPONSE_CACHE_ENTRIES=512,
    )
    if test_config:
        app.config.from_mapping(test_config)
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
