"""Settings from the environment, read when :func:`load_settings` /
:func:`load_worker_settings` is called (never at import).

Every variable, its default and what it does is in one catalog,
:mod:`auditor.envfile`, which ``.env.example`` is rendered from (``auditor settings
env-example``); the tests check that each documented default is the loader's default
and that setting each variable changes what the loader returns.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

__all__ = ["Settings", "WorkerSettings", "load_settings", "load_worker_settings"]

_DEFAULT_MAX_UPLOAD = 1 << 30


@dataclass(frozen=True)
class Settings:
    """Deployment settings; build with :func:`load_settings`."""

    instance_path: Path
    database_url: str
    broker_url: str
    result_backend: str
    secret_key: str
    max_upload_bytes: int = _DEFAULT_MAX_UPLOAD
    login_limit: str = "10 per minute"
    login_account_limit: str = "5 per minute; 30 per hour"
    ingest_limit: str = "60 per minute"
    score_limit: str = "60 per minute"
    score_anonymous: bool = False
    response_cache_entries: int = 512
    response_cache_max_bytes: int = 4 << 20
    session_cookie_secure: str = "auto"
    proxy_count: int = 0
    log_format: str = "plain"
    metrics_token: str = field(default="", repr=False)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def _sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def _int(env: Mapping[str, str], name: str, default: int, *, low: int | None = None, high: int | None = None) -> int:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number; got {raw!r}.") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must lie in [{low}, {high if high is not None else '∞'}]; got {value}.")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}; got {raw!r}.")
    return raw


def _rate(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    from limits import parse_many

    try:
        parse_many(raw)
    except ValueError:
        raise ValueError(f"{name} must be a rate such as '60 per minute' or '1000/hour'; got {raw!r}.") from None
    return raw


def _metrics_token(env: Mapping[str, str]) -> str:
    raw = (env.get("AUDITOR_METRICS_TOKEN") or "").strip()
    if raw and len(raw) < 16:
        raise ValueError("AUDITOR_METRICS_TOKEN must be at least 16 characters (or empty: no /metrics).")
    return raw


def load_settings(environ: Mapping[str, str] | None = None, **overrides) -> Settings:
    """Settings from ``environ`` (default ``os.environ``); keyword overrides win."""
    env = os.environ if environ is None else environ
    instance = Path(overrides.pop("instance_path", None) or env.get("AUDITOR_INSTANCE_PATH") or "instance")
    database_url = env.get("AUDITOR_DATABASE_URL") or _sqlite_url(instance / "auditor.sqlite3")
    broker_url = env.get("AUDITOR_BROKER_URL") or "sqla+" + _sqlite_url(instance / "broker.sqlite3")
    result_backend = env.get("AUDITOR_RESULT_BACKEND") or "db+" + _sqlite_url(instance / "results.sqlite3")
    secret_key = env.get("AUDITOR_SECRET_KEY") or secrets.token_hex(32)
    raw_max = env.get("AUDITOR_MAX_UPLOAD_BYTES")
    try:
        max_upload = int(raw_max) if raw_max else _DEFAULT_MAX_UPLOAD
    except ValueError:
        raise ValueError(f"AUDITOR_MAX_UPLOAD_BYTES must be an integer number of bytes; got {raw_max!r}.") from None
    values = {
        "instance_path": instance,
        "database_url": database_url,
        "broker_url": broker_url,
        "result_backend": result_backend,
        "secret_key": secret_key,
        "max_upload_bytes": max_upload,
        "login_limit": _rate(env, "AUDITOR_LOGIN_LIMIT", "10 per minute"),
        "login_account_limit": _rate(env, "AUDITOR_LOGIN_ACCOUNT_LIMIT", "5 per minute; 30 per hour"),
        "ingest_limit": _rate(env, "AUDITOR_INGEST_LIMIT", "60 per minute"),
        "score_limit": _rate(env, "AUDITOR_SCORE_LIMIT", "60 per minute"),
        "score_anonymous": _choice(env, "AUDITOR_SCORE_ANONYMOUS", "false", ("true", "false")) == "true",
        "response_cache_entries": _int(env, "AUDITOR_RESPONSE_CACHE_ENTRIES", 512, low=0),
        "response_cache_max_bytes": _int(env, "AUDITOR_RESPONSE_CACHE_MAX_BYTES", 4 << 20, low=0),
        "session_cookie_secure": _choice(env, "AUDITOR_SESSION_COOKIE_SECURE", "auto", ("auto", "true", "false")),
        "proxy_count": _int(env, "AUDITOR_PROXY_COUNT", 0, low=0, high=10),
        "log_format": _choice(env, "AUDITOR_LOG_FORMAT", "plain", ("plain", "json")),
        "metrics_token": _metrics_token(env),
    }
    values.update(overrides)
    return Settings(**values)


# --- background workers (see auditor.envfile for each variable) ---

def default_concurrency(cores: int | None = None) -> int:
    """Audit worker processes by default: one per core but one (at least one).

    Audits are CPU-bound and the web processes usually share the machine: on 2 cores
    one audit process leaves a core to the dashboards.
    """
    cores = os.cpu_count() if cores is None else cores
    return max(1, (cores or 1) - 1)


@dataclass(frozen=True)
class WorkerSettings:
    """Settings of the Celery workers and of the audit pipeline; build with :func:`load_worker_settings`."""

    queue: str = "auditor"
    concurrency: int = field(default_factory=default_concurrency)
    nice: int = 10
    blas_threads: int = 1
    sweep_seconds: float = 60.0
    soft_time_limit: float = 1500.0
    time_limit: float = 1800.0
    lease_seconds: float = 60.0
    max_retries: int = 5
    retry_backoff: float = 2.0
    db_lock_timeout_ms: int = 10_000
    n_bootstrap: int = 500
    pairwise_max_annotations: int | None = None
    pairwise_bootstrap: int = 0
    seed: int = 0
    fanout_min_items: int = 500_000
    certify_threshold: float = 0.95
    certify_bound: str = "theoretical"
    certify_method: str = "anytime"
    quality_alpha: float = 0.05
    #: After each audit, the audit plans of this many uncertified releases are asked for (0: none).
    plans_per_audit: int = 5
    #: Where users reach the web UI (https://auditor.example.com), for links written elsewhere (MLflow tags).
    base_url: str | None = None
    webhook_max_attempts: int = 8
    webhook_retry_backoff: float = 5.0
    webhook_allow_private: bool = False
    labelstudio_sync_seconds: float = 300.0
    #: The SMTP relay that email alert channels send through (empty host: none).
    smtp_host: str = ""
    smtp_port: int = 587
    smtp_security: str = "starttls"
    smtp_user: str = ""
    smtp_password: str = field(default="", repr=False)
    smtp_from: str = "auditor@localhost"

    @property
    def lease(self) -> timedelta:
        """How long a running audit stays live without a heartbeat (renewed every quarter of it)."""
        return timedelta(seconds=self.lease_seconds)


def _env_number(env: Mapping[str, str], name: str, kind, default):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be a {kind.__name__}; got {raw!r}.") from None


def _quality_alpha(env: Mapping[str, str]) -> float:
    value = _env_number(env, "AUDITOR_QUALITY_ALPHA", float, 0.05)
    if not 0 < value < 1:
        raise ValueError(f"AUDITOR_QUALITY_ALPHA must lie strictly between 0 and 1; got {value!r}.")
    return value


def _base_url(env: Mapping[str, str]) -> str | None:
    raw = (env.get("AUDITOR_BASE_URL") or "").strip()
    if not raw:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"AUDITOR_BASE_URL must be an http(s) URL such as https://auditor.example.com; got {raw!r}.")
    return raw.rstrip("/")


def _smtp_from(env: Mapping[str, str]) -> str:
    from auditor.addresses import valid_address

    raw = (env.get("AUDITOR_SMTP_FROM") or "").strip()
    if raw and not valid_address(raw):
        raise ValueError(f"AUDITOR_SMTP_FROM must be a plain email address such as auditor@example.com; got {raw!r}.")
    return raw or "auditor@localhost"


def load_worker_settings(environ: Mapping[str, str] | None = None, **overrides) -> WorkerSettings:
    """Worker settings from ``environ`` (default ``os.environ``); keyword overrides win."""
    env = os.environ if environ is None else environ
    bound = env.get("AUDITOR_CERTIFY_BOUND") or "theoretical"
    if bound not in ("theoretical", "empirical"):
        raise ValueError(f"AUDITOR_CERTIFY_BOUND must be 'theoretical' or 'empirical'; got {bound!r}.")
    method = env.get("AUDITOR_CERTIFY_METHOD") or "anytime"
    if method not in ("anytime", "anytime-fan", "oms", "hms"):
        raise ValueError(f"AUDITOR_CERTIFY_METHOD must be 'anytime', 'anytime-fan', 'oms' or 'hms'; got {method!r}.")
    values = {
        "queue": env.get("AUDITOR_CELERY_QUEUE") or "auditor",
        "concurrency": _env_number(env, "AUDITOR_CELERY_CONCURRENCY", int, default_concurrency()),
        "nice": _env_number(env, "AUDITOR_WORKER_NICE", int, 10),
        "blas_threads": _env_number(env, "AUDITOR_WORKER_BLAS_THREADS", int, 1),
        "sweep_seconds": _env_number(env, "AUDITOR_SWEEP_SECONDS", float, 60.0),
        "soft_time_limit": _env_number(env, "AUDITOR_AUDIT_SOFT_TIME_LIMIT", float, 1500.0),
        "time_limit": _env_number(env, "AUDITOR_AUDIT_TIME_LIMIT", float, 1800.0),
        "lease_seconds": _env_number(env, "AUDITOR_AUDIT_LEASE_SECONDS", float, None),
        "max_retries": _env_number(env, "AUDITOR_AUDIT_MAX_RETRIES", int, 5),
        "retry_backoff": _env_number(env, "AUDITOR_AUDIT_RETRY_BACKOFF", float, 2.0),
        "db_lock_timeout_ms": _env_number(env, "AUDITOR_DB_LOCK_TIMEOUT_MS", int, 10_000),
        "n_bootstrap": _env_number(env, "AUDITOR_AUDIT_BOOTSTRAP", int, 500),
        "pairwise_max_annotations": _env_number(env, "AUDITOR_AUDIT_PAIRWISE_MAX_ANNOTATIONS", int, None),
        "pairwise_bootstrap": _env_number(env, "AUDITOR_AUDIT_PAIRWISE_BOOTSTRAP", int, 0),
        "seed": _env_number(env, "AUDITOR_AUDIT_SEED", int, 0),
        "fanout_min_items": _env_number(env, "AUDITOR_FANOUT_MIN_ITEMS", int, 500_000),
        "certify_threshold": _env_number(env, "AUDITOR_CERTIFY_THRESHOLD", float, 0.95),
        "certify_bound": bound,
        "certify_method": method,
        "quality_alpha": _quality_alpha(env),
        "plans_per_audit": _env_number(env, "AUDITOR_PLANS_PER_AUDIT", int, 5),
        "base_url": _base_url(env),
        "webhook_max_attempts": _env_number(env, "AUDITOR_WEBHOOK_MAX_ATTEMPTS", int, 8),
        "webhook_retry_backoff": _env_number(env, "AUDITOR_WEBHOOK_RETRY_BACKOFF", float, 5.0),
        "webhook_allow_private": _choice(env, "AUDITOR_WEBHOOK_ALLOW_PRIVATE", "false", ("true", "false")) == "true",
        "labelstudio_sync_seconds": _env_number(env, "AUDITOR_LABELSTUDIO_SYNC_SECONDS", float, 300.0),
        "smtp_host": (env.get("AUDITOR_SMTP_HOST") or "").strip(),
        "smtp_port": _env_number(env, "AUDITOR_SMTP_PORT", int, 587),
        "smtp_security": _choice(env, "AUDITOR_SMTP_SECURITY", "starttls", ("starttls", "tls", "none")),
        "smtp_user": env.get("AUDITOR_SMTP_USER") or "",
        "smtp_password": env.get("AUDITOR_SMTP_PASSWORD") or "",
        "smtp_from": _smtp_from(env),
    }
    values.update(overrides)
    if values["concurrency"] < 1:
        raise ValueError(f"AUDITOR_CELERY_CONCURRENCY must be at least 1; got {values['concurrency']}.")
    if not 0 <= values["nice"] <= 19:
        raise ValueError(f"AUDITOR_WORKER_NICE must be between 0 and 19; got {values['nice']}.")
    if not 1 <= values["blas_threads"] <= 256:
        raise ValueError(f"AUDITOR_WORKER_BLAS_THREADS must be between 1 and 256; got {values['blas_threads']}.")
    if not 1 <= values["webhook_max_attempts"] <= 20:
        raise ValueError(f"AUDITOR_WEBHOOK_MAX_ATTEMPTS must be between 1 and 20; got {values['webhook_max_attempts']}.")
    if not 0 < values["webhook_retry_backoff"] <= 3600:
        raise ValueError("AUDITOR_WEBHOOK_RETRY_BACKOFF must be a number of seconds in (0, 3600]; "
                         f"got {values['webhook_retry_backoff']}.")
    if not 0 <= values["plans_per_audit"] <= 50:
        raise ValueError(f"AUDITOR_PLANS_PER_AUDIT must be between 0 and 50; got {values['plans_per_audit']}.")
    if values["soft_time_limit"] >= values["time_limit"]:
        raise ValueError("AUDITOR_AUDIT_SOFT_TIME_LIMIT must be below AUDITOR_AUDIT_TIME_LIMIT.")
    if not 1 <= values["labelstudio_sync_seconds"] <= 7 * 86400:
        raise ValueError("AUDITOR_LABELSTUDIO_SYNC_SECONDS must be a number of seconds in [1, 604800]; "
                         f"got {values['labelstudio_sync_seconds']}.")
    if not 1 <= values["smtp_port"] <= 65535:
        raise ValueError(f"AUDITOR_SMTP_PORT must be between 1 and 65535; got {values['smtp_port']}.")
    if values["lease_seconds"] is None:  # a minute, or the whole time limit if that is shorter
        values["lease_seconds"] = min(60.0, values["time_limit"])
    if not 1 <= values["lease_seconds"] <= values["time_limit"]:
        raise ValueError("AUDITOR_AUDIT_LEASE_SECONDS must be at least 1 and at most AUDITOR_AUDIT_TIME_LIMIT; "
                         f"got {values['lease_seconds']}.")
    return WorkerSettings(**values)
# --- end background workers ---
