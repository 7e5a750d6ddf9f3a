"""Persistence: SQLAlchemy models, engines and sessions, migrations, audit snapshots."""

from auditor.db.models import *  # noqa: F403 - the tables are the package's vocabulary
from auditor.db.models import __all__ as _models_all
from auditor.db.session import (
    WRITE_OPTIONS,
    make_engine,
    make_session_factory,
    normalize_url,
    session_scope,
)
from auditor.db.snapshot import (
    ReleaseInfo,
    ReleasePredictions,
    Snapshot,
    SnapshotError,
    load_snapshot,
)

__all__ = [*_models_all, "ReleaseInfo", "ReleasePredictions", "Snapshot", "SnapshotError", "load_snapshot",
           "WRITE_OPTIONS", "make_engine", "make_session_factory", "normalize_url", "session_scope"]
