"""Workspaces and datasets: create, find and delete them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, select, text
from sqlalchemy.orm import Session

from auditor.db.models import Dataset, Workspace
from auditor.db.session import WRITE_OPTIONS
from auditor.ingest.errors import IngestError

__all__ = ["DEFAULT_WORKSPACE", "create_dataset", "delete_dataset", "get_dataset", "get_workspace"]

DEFAULT_WORKSPACE = "default"


# --- workspaces and datasets -------------------------------------------------------


def get_workspace(session: Session, slug: str = DEFAULT_WORKSPACE, *, create: bool = False) -> Workspace:
    """The workspace ``slug``; with ``create=True`` it is made when missing."""
    ws = session.scalar(select(Workspace).where(Workspace.slug == slug))
    if ws is None:
        if not create:
            raise IngestError(f"unknown workspace {slug!r}")
        ws = Workspace(slug=slug, name=slug)
        session.add(ws)
        session.flush()
    return ws


def _check_labels(labels: Sequence[str]) -> list[str]:
    out = [str(lab).strip() for lab in labels]
    if not out:
        raise IngestError("a dataset needs at least one label")
    if any(not lab for lab in out):
        raise IngestError("labels must be non-empty strings")
    dup = sorted({lab for lab in out if out.count(lab) > 1})
    if dup:
        raise IngestError(f"duplicate labels: {dup}")
    return out


QUALITY_WINDOWS = ("week", "batch")


def create_dataset(session: Session, name: str, labels: Sequence[str], *, workspace: str = DEFAULT_WORKSPACE,
                   description: str = "", quality_window: str = "week") -> Dataset:
    """Create the dataset ``name`` with an ordered label set (idempotent for identical labels).

    ``quality_window``: the vendor and annotator quality series are per calendar week of
    the annotations' time stamps (``"week"``) or per import batch (``"batch"``, for data
    without time stamps); it cannot change once the dataset exists.
    """
    if quality_window not in QUALITY_WINDOWS:
        raise IngestError(f"quality_window must be one of {', '.join(QUALITY_WINDOWS)}; got {quality_window!r}")
    name = name.strip()
    if not name:
        raise IngestError("a dataset needs a name")
    labels = _check_labels(labels)
    ws = get_workspace(session, workspace, create=True)
    existing = session.scalar(select(Dataset).where(Dataset.workspace_id == ws.id, Dataset.name == name))
    if existing is not None:
        if list(existing.labels) != labels:
            raise IngestError(f"dataset {name!r} exists with labels {existing.labels}, not {labels}")
        return existing
    ds = Dataset(workspace_id=ws.id, name=name, labels=labels, description=description, data_version=0,
                 quality_window=quality_window)
    session.add(ds)
    session.flush()
    return ds


def get_dataset(session: Session, name: str, *, workspace: str = DEFAULT_WORKSPACE) -> Dataset:
    """The dataset ``name``; an unknown name is an :class:`IngestError`."""
    ds = session.scalar(
        select(Dataset).join(Workspace).where(Workspace.slug == workspace, Dataset.name == name))
    if ds is None:
        raise IngestError(f"unknown dataset {name!r} in workspace {workspace!r}")
    return ds


def _write_connection(session: Session) -> Connection:
    """The session's connection; a writer's ``BEGIN IMMEDIATE`` on SQLite if nothing ran yet."""
    if session.in_transaction():
        return session.connection()
    return session.connection(execution_options=WRITE_OPTIONS)


def delete_dataset(session: Session, name: str, *, workspace: str = DEFAULT_WORKSPACE) -> None:
    """Delete a dataset with its items, annotations (and their history), predictions and results."""
    conn = _write_connection(session)
    ds = get_dataset(session, name, workspace=workspace)
    # These tables have no foreign key to cascade along (see auditor.db.models).
    for table in ("annotation_history", "annotation", "prediction", "item"):
        conn.execute(text(f"DELETE FROM {table} WHERE dataset_id = :d"), {"d": ds.id})
    session.delete(ds)
    session.flush()
