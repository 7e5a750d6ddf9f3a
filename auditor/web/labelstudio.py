"""``POST /hooks/label-studio/<connector id>``: Label Studio's webhooks into a dataset.

Label Studio sends each event with the headers configured on its webhook; the connector's
secret travels in ``X-Auditor-Webhook-Secret`` and is checked against its stored hash in
constant time before anything else is read. The body is bounded
(:data:`MAX_EVENT_BYTES`, :data:`~auditor.connectors.labelstudio.events.MAX_EVENT_ANNOTATIONS`),
each event is applied all or nothing and at most once
(:func:`auditor.connectors.labelstudio.store.apply`), and a change asks the workers for
an audit as an import does. Answers are JSON, failures included: 200 with what changed;
400/422 naming the bad field; 401 for a wrong secret; 409 for a disabled connector; 413
for a body too large; 500 for a fault (logged); 503 with ``Retry-After`` while the
database is away (Label Studio does not retry a webhook: the pull sync catches up). Every
refusal but the 503 is counted on the connector (``webhook_refused``) and shown on the feed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time

from flask import Blueprint, jsonify, request
from sqlalchemy import func, update

from auditor.connectors.labelstudio.credentials import SECRET_HEADER, secret_matches
from auditor.connectors.labelstudio.events import TooManyAnnotations, parse_event
from auditor.connectors.labelstudio.mapping import PayloadRejected
from auditor.connectors.labelstudio.store import apply, read_spec
from auditor.db.models import Dataset, LabelStudioConnector
from auditor.web.api.framework import check_json_text
from auditor.web.db import get_session
from auditor.web.errors import ApiError, database_unavailable

__all__ = ["MAX_EVENT_BYTES", "bp"]

log = logging.getLogger(__name__)

bp = Blueprint("labelstudio", __name__, url_prefix="/hooks/label-studio")

MAX_EVENT_BYTES = 16 << 20
"""The largest event body accepted (a bulk event of 5,000 annotations with their tasks fits)."""
_MAX_ID = 2**31 - 1
SYNC_REQUEST_SECONDS = 60.0
"""A process asks for a connector's sync (to learn new users' emails) at most this often."""
_sync_asked: dict[int, float] = {}


def _body() -> bytes:
    length = request.content_length
    if length is not None and length > MAX_EVENT_BYTES:
        raise ApiError(413, f"The event is {length} bytes; at most {MAX_EVENT_BYTES} are accepted.", field="body")
    data = request.stream.read(MAX_EVENT_BYTES + 1)
    if len(data) > MAX_EVENT_BYTES:
        raise ApiError(413, f"The event is larger than {MAX_EVENT_BYTES} bytes.", field="body")
    return data


@bp.post("/<int:connector_id>")
def receive(connector_id: int):
    """One event; a refused one (any 4xx or 5xx but the database being away) is counted on
    the connector, which the feed shows."""
    try:
        return _receive(connector_id)
    except ApiError as exc:
        _count_refusal(connector_id, exc.status, exc.message)
        raise
    except Exception as exc:
        if not database_unavailable(exc):  # nowhere to count it: the 503 says so
            _count_refusal(connector_id, 500, f"{type(exc).__name__} (logged by the web process)")
        raise


def _count_refusal(connector_id: int, status: int, message: str) -> None:
    """Count a refused delivery on the connector (if there is one); never raises."""
    if connector_id > _MAX_ID:
        return
    C = LabelStudioConnector
    try:
        db = get_session()
        db.rollback()
        db.execute(update(C).where(C.id == connector_id).values(
            webhook_refused=C.webhook_refused + 1, last_refused_at=func.now(),
            last_refusal=f"HTTP {status}: {message}"[:1000], updated_at=C.updated_at))  # not a settings change
        db.commit()
    except Exception as exc:  # the answer matters more than the count
        log.warning("could not count a refused webhook of Label Studio connector %s (%s)", connector_id,
                    type(exc).__name__)
        with contextlib.suppress(Exception):
            get_session().rollback()
    log.info("Label Studio connector %s: webhook refused with %s: %s", connector_id, status, message[:300])


def _receive(connector_id: int):
    db = get_session()
    conn = db.get(LabelStudioConnector, connector_id) if connector_id <= _MAX_ID else None
    if not secret_matches(request.headers.get(SECRET_HEADER), conn.webhook_secret_hash if conn else None):
        raise ApiError(401, f"Unknown connector or wrong secret: send the connector's secret in the "
                            f"{SECRET_HEADER} header (the webhook's headers in Label Studio).", field=SECRET_HEADER)
    if not conn.enabled:
        raise ApiError(409, "This connector is disabled.", field="connector")
    raw = _body()
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(400, "The event must be a JSON object (Label Studio's webhook payload).", field="body") from None
    check_json_text(body)
    spec = read_spec(conn, db.get(Dataset, conn.dataset_id))
    try:
        action, changes = parse_event(body, spec)
    except TooManyAnnotations as exc:
        raise ApiError(413, str(exc), field=exc.field) from None
    except PayloadRejected as exc:
        raise ApiError(422, f"Event rejected, nothing was written: {exc}", field=exc.field,
                       errors=[{"field": e.field, "message": e.reason} for e in exc.errors]) from None
    if changes is None:
        return jsonify({"status": "ignored", "action": action,
                        "message": f"{action} events are not read; nothing changed"})
    # End the read transaction of the lookups; apply takes the dataset's lock in a writing one.
    db.commit()
    outcome = apply(db, conn, changes, source="webhook", action=action)
    dataset_id = conn.dataset_id
    db.commit()
    c = outcome.counts
    log.info("Label Studio connector %s: %s event %s: %s (%s cancelled, %s empty skipped)", connector_id, action,
             outcome.event_id, outcome.message, c["skipped_cancelled"], c["skipped_empty"])
    if outcome.changed:
        from auditor.worker.dispatch import request_audit

        request_audit(dataset_id)
    if outcome.unknown_users and time.monotonic() - _sync_asked.get(connector_id, -1e9) > SYNC_REQUEST_SECONDS:
        # Their emails (and so their vendors) come with the users list: the sync reads it.
        from auditor.worker.feeds import request_sync

        _sync_asked[connector_id] = time.monotonic()
        request_sync(connector_id)
    return jsonify({"action": action, **outcome.to_json()})
