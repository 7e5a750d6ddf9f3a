"""Persistence: SQLAlchemy models, engines and sessions, migrations, the low-level dataset reader.

The public snapshot (``load_snapshot``, ``Snapshot``…) lives in :mod:`auditor.audit.snapshot`
(it moved there from this package: persistence does not depend on the audit).
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

__all__ = [*_models_all, "ReleaseInfo", "SnapshotError", "WRITE_OPTIONS", "make_engine",
           "make_session_factory", "normalize_url", "session_scope"]
