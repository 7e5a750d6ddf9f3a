"""The live feeds' Celery tasks; each calls its connector's functions with the worker's
session factory (:func:`auditor.worker.session_factory`).

* ``labelstudio_sync``: the Label Studio pull sync
  (:func:`auditor.connectors.labelstudio.sync.sync_connector`), run by beat every
  ``AUDITOR_LABELSTUDIO_SYNC_SECONDS`` for every enabled connector, and on demand for one
  (the webhook receiver asks for it when an event names a user whose email it does not know).
* ``mlflow_sync``: the MLflow sweep (:func:`auditor.connectors.mlflow.sweep`) every
  ``AUDITOR_MLFLOW_SYNC_SECONDS``: versions registered since the connection are imported as releases, and the
  rejected ones are tagged ``auditor.rejected`` with the reason.

Beat runs both in ``auditor worker --beat`` (the embedded deployment) as in ``auditor beat``.
The task names (``workers.tasks.*``) are those messages already queued carry.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from sqlalchemy import select

from auditor.db.models import LabelStudioConnector, MlflowConnector
from auditor.worker import session_factory

__all__ = ["labelstudio_sync", "mlflow_sync", "request_sync"]

log = logging.getLogger(__name__)


@shared_task(bind=True, name="workers.tasks.labelstudio_sync", ignore_result=True)
def labelstudio_sync(self, connector_id: int | None = None) -> dict[str, Any]:
    """Pull every enabled connector (or one); a connector that fails is logged and recorded
    (``last_sync_error``) and the others still run."""
    from auditor.connectors.errors import ConnectorError
    from auditor.connectors.labelstudio.sync import sync_connector
    from auditor.worker.dispatch import request_audit

    factory = session_factory(self.app)
    with factory() as s:
        query = select(LabelStudioConnector.id).where(LabelStudioConnector.enabled.is_(True))
        if connector_id is not None:
            query = query.where(LabelStudioConnector.id == int(connector_id))
        ids = list(s.scalars(query.order_by(LabelStudioConnector.id)))
    done: dict[str, Any] = {}
    for cid in ids:
        try:
            done[str(cid)] = sync_connector(factory, cid, on_change=request_audit).to_json()
        except ConnectorError as exc:
            log.error("Label Studio connector %s: sync failed: %s", cid, exc)
            done[str(cid)] = {"error": str(exc)}
        except Exception as exc:  # recorded in the log; the next beat tries again
            log.exception("Label Studio connector %s: sync failed", cid)
            done[str(cid)] = {"error": f"{type(exc).__name__}: {exc}"}
    return done


def request_sync(connector_id: int) -> None:
    """Enqueue a sync of one connector; never raises (the beat schedule catches up anyway)."""
    try:
        labelstudio_sync.apply_async((int(connector_id),), retry=False, ignore_result=True)
    except Exception as exc:  # any broker failure
        log.warning("could not enqueue the sync of Label Studio connector %s (%s: %s)", connector_id,
                    type(exc).__name__, exc)


@shared_task(bind=True, name="workers.tasks.mlflow_sync", ignore_result=True)
def mlflow_sync(self, connector_id: int | None = None) -> dict[str, Any]:
    """Import the versions registered since the last sweep of every MLflow connector (or one);
    a connector that fails is logged and recorded (``last_error``) and the others still run."""
    from auditor.connectors import mlflow as connector
    from auditor.worker.dispatch import request_audit

    factory = session_factory(self.app)
    with factory() as s:
        query = select(MlflowConnector.id)
        if connector_id is not None:
            query = query.where(MlflowConnector.id == int(connector_id))
        ids = list(s.scalars(query.order_by(MlflowConnector.id)))
    done: dict[str, Any] = {}
    for cid in ids:
        try:
            result = connector.sweep(factory, cid)
        except connector.ConnectorError as exc:
            log.error("MLflow connector %s: sweep failed: %s", cid, exc)
            done[str(cid)] = {"error": str(exc)}
            continue
        except Exception as exc:  # recorded in the log; the next beat tries again
            log.exception("MLflow connector %s: sweep failed", cid)
            done[str(cid)] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        if result.changed:
            request_audit(result.dataset_id)
        done[str(cid)] = {"versions": {v.version: v.status for v in result.versions}, "notes": result.notes}
    return done
