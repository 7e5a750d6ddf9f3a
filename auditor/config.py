"""Settings from the environment, read when :func:`load_settings` is called (never at import).

Variables (all optional):

``AUDITOR_INSTANCE_PATH``
    Directory for local state (default ``./instance``); the default SQLite database
    and the embedded broker's files live there.
``AUDITOR_DATABASE_URL``
    SQLAlchemy URL. Default: ``sqlite:///<instance>/auditor.sqlite3``. A plain
    ``postgresql://`` URL is served by psycopg 3.
``AUDITOR_BROKER_URL`` / ``AUDITOR_RESULT_BACKEND``
    Celery broker and result backend. Default: a SQLite-backed broker in the instance
    directory, so the embedded deployment needs no server.
``AUDITOR_SECRET_KEY``
    Secret for sessions and CSRF tokens (default: a random key per process, fine for
    a single embedded process only).
``AUDITOR_MAX_UPLOAD_BYTES``
    Largest accepted upload (default 1 GiB).
``AUDITOR_LOGIN_LIMIT`` / ``AUDITOR_INGEST_LIMIT`` / ``AUDITOR_SCORE_LIMIT``
    Rate limits per client address of login attempts, ingestion requests and
    ``/api/score`` (defaults ``10 per minute``, ``60 per minute``, ``60 per minute``;
    any rate the ``limits`` package parses, e.g. ``1000 per hour;20 per second``).
``AUDITOR_RESPONSE_CACHE_ENTRIES`` / ``AUDITOR_RESPONSE_CACHE_MAX_BYTES``
    Per-process cache of rendered results: how many (default 512; 0 turns it off) and
    the largest response kept (default 4 MiB).
``AUDITOR_SESSION_COOKIE_SECURE``
    ``auto`` (default): the session cookie is ``Secure`` whenever the request came over
    HTTPS (as seen through ``AUDITOR_PROXY_COUNT`` proxies); ``true``: always; ``false``:
    never (plain-HTTP development only).
``AUDITOR_PROXY_COUNT``
    Reverse proxies in front of the web process whose ``X-Forwarded-For/-Proto/-Host``
    headers are trusted (default 0: none; behind one TLS-terminating proxy set 1).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    ingest_limit: str = "60 per minute"
    score_limit: str = "60 per minute"
    response_cache_entries: int = 512
    response_cache_max_bytes: int = 4 << 20
    session_cookie_secure: str = "auto"
    proxy_count: int = 0

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
        "ingest_limit": _rate(env, "AUDITOR_INGEST_LIMIT", "60 per minute"),
        "score_limit": _rate(env, "AUDITOR_SCORE_LIMIT", "60 per minute"),
        "response_cache_entries": _int(env, "AUDITOR_RESPONSE_CACHE_ENTRIES", 512, low=0),
        "response_cache_max_bytes": _int(env, "AUDITOR_RESPONSE_CACHE_MAX_BYTES", 4 << 20, low=0),
        "session_cookie_secure": _choice(env, "AUDITOR_SESSION_COOKIE_SECURE", "auto", ("auto", "true", "false")),
        "proxy_count": _int(env, "AUDITOR_PROXY_COUNT", 0, low=0, high=10),
    }
    values.update(overrides)
    return Settings(**values)


# --- background workers (workers/, auditor.audit): Celery and audit settings ---------
#
# ``AUDITOR_CELERY_QUEUE``            queue the audit tasks use (default ``auditor``)
# ``AUDITOR_CELERY_CONCURRENCY``      worker processes (default: one per core but one, at least
#                                     one: on 2 cores one audit process, so the web keeps a core)
# ``AUDITOR_WORKER_NICE``             niceness added to every worker process (default 10, 0-19):
#                                     audits yield the CPU to the web processes' requests
# ``AUDITOR_SWEEP_SECONDS``           period of the stale-dataset sweep (default 60)
# ``AUDITOR_AUDIT_SOFT_TIME_LIMIT``   seconds before an audit is asked to stop (default 1500)
# ``AUDITOR_AUDIT_TIME_LIMIT``        seconds before its process is killed (default 1800);
#                                     a run still "running" after this is known dead
# ``AUDITOR_AUDIT_MAX_RETRIES``       retries after a transient database error (default 5)
# ``AUDITOR_AUDIT_RETRY_BACKOFF``     first retry delay in seconds, doubled each time (default 2)
# ``AUDITOR_DB_LOCK_TIMEOUT_MS``      PostgreSQL lock_timeout of audit transactions (default 10000)
# ``AUDITOR_AUDIT_BOOTSTRAP``         bootstrap resamples for intervals (default 500)
# ``AUDITOR_AUDIT_PAIRWISE_MAX_ANNOTATIONS`` pairwise Cohen's kappa only for datasets with at most
#                                     this many annotations (default: every dataset; 0: never).
#                                     Its memory grows with the annotator pairs that share items
#                                     (10M annotations of 200 raters: about 4 s, 0.6 GB).
# ``AUDITOR_AUDIT_PAIRWISE_BOOTSTRAP`` resamples for the interval of the mean pairwise Cohen's
#                                     kappa (default 0: each one recomputes every pair's kappa)
# ``AUDITOR_AUDIT_SEED``              seed of every random choice of an audit (default 0)
# ``AUDITOR_FANOUT_MIN_ITEMS``        items from which an audit fans out as a Celery group
#                                     (default 500000). Fanning out pays when there are more
#                                     worker cores than one machine's: on 2 cores, 1M annotations
#                                     (100k items, 5 releases) took p50 3.2 s fanned out, 2.1 s in one task
# ``AUDITOR_CERTIFY_THRESHOLD``       confidence a "certified" verdict needs (default 0.95)
# ``AUDITOR_CERTIFY_BOUND``           ``theoretical`` (U_t, default) or ``empirical`` (U_e)
# ``AUDITOR_CERTIFY_METHOD``          which verdict the badge and the certification alert use:
#                                     ``anytime`` (default; valid however often audits re-check
#                                     it), or the paper's fixed-sample ``oms`` / ``hms``
# ``AUDITOR_ALERT_VENDOR_DELTA``      change of a vendor's upper bound that raises an alert
#                                     (default 0.02); per vendor: ``AUDITOR_ALERT_VENDOR_DELTAS``
#                                     as ``vendorA=0.05,vendorB=0.01``
# ``AUDITOR_ALERT_WEBHOOK_URL``       where new alerts are POSTed as JSON (default: nowhere)


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
    sweep_seconds: float = 60.0
    soft_time_limit: float = 1500.0
    time_limit: float = 1800.0
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
    vendor_alert_delta: float = 0.02
    vendor_alert_deltas: tuple[tuple[str, float], ...] = ()
    alert_webhook_url: str | None = None

    def vendor_delta(self, vendor: str) -> float:
        return dict(self.vendor_alert_deltas).get(vendor, self.vendor_alert_delta)


def _env_number(env: Mapping[str, str], name: str, kind, default):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be a {kind.__name__}; got {raw!r}.") from None


def _vendor_deltas(raw: str | None) -> tuple[tuple[str, float], ...]:
    out = []
    for part in (raw or "").split(","):
        if not part.strip():
            continue
        vendor, sep, value = part.rpartition("=")
        try:
            out.append((vendor.strip(), float(value)))
        except ValueError:
            sep = ""
        if not sep:
            raise ValueError(f"AUDITOR_ALERT_VENDOR_DELTAS must look like 'vendor=0.05,...'; got {part!r}.")
    return tuple(out)


def load_worker_settings(environ: Mapping[str, str] | None = None, **overrides) -> WorkerSettings:
    """Worker settings from ``environ`` (default ``os.environ``); keyword overrides win."""
    env = os.environ if environ is None else environ
    bound = env.get("AUDITOR_CERTIFY_BOUND") or "theoretical"
    if bound not in ("theoretical", "empirical"):
        raise ValueError(f"AUDITOR_CERTIFY_BOUND must be 'theoretical' or 'empirical'; got {bound!r}.")
    method = env.get("AUDITOR_CERTIFY_METHOD") or "anytime"
    if method not in ("anytime", "oms", "hms"):
        raise ValueError(f"AUDITOR_CERTIFY_METHOD must be 'anytime', 'oms' or 'hms'; got {method!r}.")
    values = {
        "queue": env.get("AUDITOR_CELERY_QUEUE") or "auditor",
        "concurrency": _env_number(env, "AUDITOR_CELERY_CONCURRENCY", int, default_concurrency()),
        "nice": _env_number(env, "AUDITOR_WORKER_NICE", int, 10),
        "sweep_seconds": _env_number(env, "AUDITOR_SWEEP_SECONDS", float, 60.0),
        "soft_time_limit": _env_number(env, "AUDITOR_AUDIT_SOFT_TIME_LIMIT", float, 1500.0),
        "time_limit": _env_number(env, "AUDITOR_AUDIT_TIME_LIMIT", float, 1800.0),
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
        "vendor_alert_delta": _env_number(env, "AUDITOR_ALERT_VENDOR_DELTA", float, 0.02),
        "vendor_alert_deltas": _vendor_deltas(env.get("AUDITOR_ALERT_VENDOR_DELTAS")),
        "alert_webhook_url": env.get("AUDITOR_ALERT_WEBHOOK_URL") or None,
    }
    values.update(overrides)
    if values["concurrency"] < 1:
        raise ValueError(f"AUDITOR_CELERY_CONCURRENCY must be at least 1; got {values['concurrency']}.")
    if not 0 <= values["nice"] <= 19:
        raise ValueError(f"AUDITOR_WORKER_NICE must be between 0 and 19; got {values['nice']}.")
    if values["soft_time_limit"] >= values["time_limit"]:
        raise ValueError("AUDITOR_AUDIT_SOFT_TIME_LIMIT must be below AUDITOR_AUDIT_TIME_LIMIT.")
    return WorkerSettings(**values)
# --- end background workers ---
