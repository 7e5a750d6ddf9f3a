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
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Settings", "load_settings"]

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

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def _sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


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
    }
    values.update(overrides)
    return Settings(**values)
