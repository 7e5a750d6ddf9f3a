"""Rejected uploads, kept in short: who sent what, when, and its first errors (never its rows).

A dataset keeps its latest :data:`KEPT_PER_DATASET` rejected attempts: an older one is
deleted when a new one is recorded, so a client that keeps sending bad batches (within
the ingestion rate limit) cannot grow the table without bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from auditor.db.models import ImportAttempt
from auditor.ingest.errors import MAX_REPORTED_ERRORS

__all__ = ["KEPT_PER_DATASET", "record_rejected"]

KEPT_PER_DATASET = 200
_MESSAGE = 1000
_ERROR = 300


def record_rejected(session: Session, dataset_id: int, *, kind: str, format: str | None, source_name: str | None,
                    submitted_by: str | None, submitted_by_id: int | None, status_code: int, message: str,
                    errors: Iterable[Mapping[str, Any]] = (), bad_rows: int = 0) -> ImportAttempt:
    """Store one rejected attempt (the caller commits) and drop the dataset's oldest beyond the kept ones."""
    first = [{"row": e.get("row"), "field": None if e.get("field") is None else str(e["field"])[:200],
              "message": str(e.get("message", ""))[:_ERROR]} for e in list(errors)[:MAX_REPORTED_ERRORS]]
    row = ImportAttempt(dataset_id=dataset_id, kind=kind[:16], format=None if format is None else format[:32],
                        source_name=None if source_name is None else source_name[-1024:],
                        submitted_by=None if submitted_by is None else submitted_by[:320],
                        submitted_by_id=submitted_by_id, status_code=status_code, bad_rows=max(0, int(bad_rows)),
                        message=message[:_MESSAGE], errors=first)
    session.add(row)
    session.flush()
    cutoff = session.scalar(select(ImportAttempt.id).where(ImportAttempt.dataset_id == dataset_id)
                            .order_by(ImportAttempt.id.desc()).offset(KEPT_PER_DATASET).limit(1))
    if cutoff is not None:
        session.execute(delete(ImportAttempt).where(ImportAttempt.dataset_id == dataset_id,
                                                    ImportAttempt.id <= cutoff))
    return row
