"""Outgoing webhooks per workspace: events signed with each webhook's secret
(:mod:`~auditor.webhooks.signing`), sent within bounds (:mod:`~auditor.webhooks.http`),
retried with backoff by the workers and logged (:mod:`~auditor.webhooks.deliveries`)."""

from auditor.webhooks.deliveries import (
    EVENTS,
    MAX_BODY_BYTES,
    Attempt,
    alerts_raised,
    attempt,
    audit_completed,
    create_deliveries,
    ping_delivery,
    stale_deliveries,
)
from auditor.webhooks.http import RefusedDestination, validate_url
from auditor.webhooks.signing import (
    SIGNATURE_HEADER,
    TOLERANCE_SECONDS,
    sign,
    signature_header,
    verify,
)

__all__ = [
    "EVENTS",
    "MAX_BODY_BYTES",
    "SIGNATURE_HEADER",
    "TOLERANCE_SECONDS",
    "Attempt",
    "RefusedDestination",
    "alerts_raised",
    "attempt",
    "audit_completed",
    "create_deliveries",
    "ping_delivery",
    "sign",
    "signature_header",
    "stale_deliveries",
    "validate_url",
    "verify",
]
