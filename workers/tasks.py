"""Re-export of :mod:`auditor.worker.tasks` (see :mod:`workers`)."""

from auditor.worker.tasks import (
    audit_dataset,
    audit_release,
    deliver_alerts,
    deliver_webhook,
    finish_audit,
    sweep,
)

__all__ = ["audit_dataset", "audit_release", "deliver_alerts", "deliver_webhook", "finish_audit", "sweep"]
