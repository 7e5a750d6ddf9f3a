"""Re-export of :mod:`auditor.worker.dispatch` (see :mod:`workers`)."""

from auditor.worker.dispatch import request_audit, request_audit_after_commit

__all__ = ["request_audit", "request_audit_after_commit"]
