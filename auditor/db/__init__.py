"""Persistence: SQLAlchemy models, engines and sessions, migrations, the low-level dataset reader.

The public snapshot (``load_snapshot``, ``Snapshot``…) lives in :mod:`auditor.audit.snapshot`;
the names below are kept, loaded on first use, so that ``from auditor.db import load_snapshot``
goes on working.
"""

from auditor.db.models import *  # noqa: F403 - the tables are the package's vocabulary
from auditor.db.models import __all__ as _models_all
from auditor.db.reader import ReleaseInfo, SnapshotError
from auditor.db.session import (
    WRITE_OPTIONS,
    make_engine,
    make_session_factory,
    normalize_url,
    session_scope,
)

#: Names of :mod:`auditor.audit.snapshot` kept here for compatibility (loaded lazily: the
#: persistence layer itself does not depend on the audit).
_SNAPSHOT_NAMES = frozenset({"ReleasePredictions", "Snapshot", "load_snapshot"})


def __getattr__(name: str):
    if name in _SNAPSHOT_NAMES:
        from auditor.audit import snapshot

        return getattr(snapshot, name)
    raise AttributeError(f"module 'auditor.db' has no attribute {name!r}")


__all__ = [*_models_all, "ReleaseInfo", "SnapshotError", "WRITE_OPTIONS", "make_engine",
           "make_session_factory", "normalize_url", "session_scope", *sorted(_SNAPSHOT_NAMES)]
