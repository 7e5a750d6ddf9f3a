"""What every resource module of the API shares: the role sets, and the lookups that
enforce the caller's workspace (another workspace's object is simply not found)."""

from __future__ import annotations

import logging

from flask import current_app
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from auditor.db import (
    AuditRun,
    Dataset,
    Model,
    Release,
    Role,
)
from auditor.web.api import serializers as s
from auditor.web.db import in_workspace
from auditor.web.errors import ApiError
from auditor.web.security import READERS

__all__ = ["ADMIN", "READ_OR_VENDOR", "WRITERS", "B", "allow_private", "check_quota", "commit", "delete_answer",
           "get_dataset", "get_model", "get_owned", "get_release", "get_run", "publish_delivery", "vendor_scope"]

log = logging.getLogger(__name__)
ADMIN = frozenset({Role.ADMIN})
WRITERS = frozenset({Role.ADMIN, Role.ANALYST})
READ_OR_VENDOR = READERS | {Role.VENDOR}
B = s.BODIES


# --- lookups that enforce the workspace (another workspace's object is simply not found) ---


def get_dataset(principal, db, dataset_id: int) -> Dataset:
    ds = in_workspace(db, Dataset, dataset_id, principal.workspace_id)
    if ds is None:
        raise ApiError(404, f"No dataset with id {dataset_id}.", field="dataset_id")
    if principal.role == Role.VENDOR and ds.id not in principal.grants:
        raise ApiError(404, f"No dataset with id {dataset_id}.", field="dataset_id")
    return ds


def get_model(principal, db, model_id: int) -> Model:
    m = in_workspace(db, Model, model_id, principal.workspace_id)
    if m is None:
        raise ApiError(404, f"No model with id {model_id}.", field="model_id")
    return m


def get_release(principal, db, release_id: int, *, field: str = "release_id") -> Release:
    row = db.execute(select(Release, Model).join(Model, Release.model_id == Model.id)
                     .where(Release.id == release_id, Model.workspace_id == principal.workspace_id)).first()
    if row is None:
        raise ApiError(404, f"No release with id {release_id}.", field=field)
    return row[0]


def get_run(principal, db, audit_run_id: int, *, dataset: Dataset | None = None) -> AuditRun:
    """The audit run if it is the workspace's (and, with ``dataset``, that dataset's), else a 404."""
    stmt = (select(AuditRun).join(Dataset, AuditRun.dataset_id == Dataset.id)
            .where(AuditRun.id == audit_run_id, Dataset.workspace_id == principal.workspace_id))
    if dataset is not None:
        stmt = stmt.where(AuditRun.dataset_id == dataset.id)
    row = db.execute(stmt).first()
    if row is None:
        raise ApiError(404, f"No audit run with id {audit_run_id}.", field="audit_run_id")
    return row[0]


def commit(db, what: str):
    try:
        db.commit()
    except IntegrityError:
        db.rollback()
        raise ApiError(409, f"{what} already exists.", field="name") from None


def vendor_scope(principal, vendor: str | None) -> str | None:
    """A vendor caller sees only its own vendor, whatever it asked for."""
    if principal.role != Role.VENDOR:
        return vendor
    if principal.vendor is None or (vendor is not None and vendor != principal.vendor):
        raise ApiError(404, "No such vendor.", field="vendor")
    return principal.vendor


def allow_private() -> bool:
    """Whether webhooks and alert channels may point at private addresses (the workers' setting)."""
    capp = current_app.extensions.get("celery")
    w = capp.conf.get("auditor_worker") if capp is not None else None
    return bool(getattr(w, "webhook_allow_private", False))


def publish_delivery(delivery_id: int) -> None:
    """Hand a stored delivery (a webhook's or an alert channel's) to the workers."""
    try:
        # Through this app's own Celery (its broker and queue), as any message of this app.
        current_app.extensions["celery"].send_task("workers.tasks.deliver_webhook", args=(delivery_id,),
                                                   retry=False, ignore_result=True)
    except Exception as exc:  # any broker failure: the periodic sweep sends it later
        log.warning("could not queue delivery %s (%s); the sweep will", delivery_id, exc.__class__.__name__)


def get_owned(principal, db, model, object_id: int, what: str, field: str):
    """The workspace's ``model`` object ``object_id``, or a 404 naming ``what`` (another
    workspace's is simply not found)."""
    obj = in_workspace(db, model, object_id, principal.workspace_id)
    if obj is None:
        raise ApiError(404, f"No {what} with id {object_id}.", field=field)
    return obj


def workspace_rows(principal, model, *order_by):
    """``SELECT`` of the workspace's ``model`` rows, ordered by ``order_by`` (default: the id)."""
    return select(model).where(model.workspace_id == principal.workspace_id).order_by(*(order_by or (model.id,)))


def set_active(db, obj, active: bool):
    """Switch ``obj`` (a channel or a webhook) on or off, commit, and return it."""
    obj.active = active
    db.commit()
    return obj


def check_quota(principal, db, model, limit: int, what: str) -> None:
    """A 409 when the workspace already has ``limit`` rows of ``model`` (``what``, plural)."""
    n = db.scalar(select(func.count()).select_from(model).where(model.workspace_id == principal.workspace_id))
    if n >= limit:
        raise ApiError(409, f"A workspace has at most {limit} {what}; delete one first.", field="name")


def delete_answer(db, obj, serialize) -> dict:
    """Delete ``obj`` and answer it as it was."""
    answer = serialize(obj)
    db.delete(obj)
    db.commit()
    return answer
