"""The Label Studio pull sync as a Celery task: run by beat every
``AUDITOR_LABELSTUDIO_SYNC_SECONDS`` for every enabled connector, and on demand for one
(the webhook receiver asks for it when an event names a user whose email it does not know).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from sqlalchemy import select

from auditor.db.models import LabelStudioConnector

__all__ = ["labelstudio_sync", "request_sync"]

log = logging.getLogger(__name__)


@shared_task(bind=True, name="workers.tasks.labelstudio_sync", ignore_result=True)
def labelstudio_sync(self, connector_id: int | None = None) -> dict[str, Any]:
    """Pull every enabled connector (or one); a connector that fails is logged and recorded
    (``last_sync_error``) and the others still run."""
    from auditor.connectors.labelstudio.mapping import PayloadRejected
    from auditor.connectors.labelstudio.sync import ConnectorError, sync_connector
    from auditor.worker.context import session_factory
    from auditor.worker.dispatch import request_audit

    factory = session_factory(self)
    with factory() as s:
        query = select(LabelStudioConnector.id).where(LabelStudioConnector.enabled.is_(True))
        if connector_id is not None:
            query = query.where(LabelStudioConnector.id == int(connector_id))
        ids = list(s.scalars(query.order_by(LabelStudioConnector.id)))
    done: dict[str, Any] = {}
    for cid in ids:
        try:
            done[str(cid)] = sync_connector(factory, cid, on_change=request_audit).to_json()
        except (ConnectorError, PayloadRejected) as exc:
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
