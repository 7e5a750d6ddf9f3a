"""The audit pipeline: a dataset's snapshot → :mod:`auditor.stats` → one atomic write.

:mod:`auditor.audit.pipeline` says what an audit computes; :mod:`auditor.audit.runner`
claims, runs and records audits (the Celery tasks in ``workers/`` are thin wrappers);
:mod:`auditor.audit.alerts` delivers alerts to a webhook.
"""
