"""The audit pipeline: a dataset's snapshot → :mod:`auditor.stats` → one atomic write.

:mod:`auditor.audit.inputs` holds what an audit takes (plain arrays, no database);
:mod:`auditor.audit.pipeline` says what an audit computes; :mod:`auditor.audit.runner`
claims, runs and records audits (the one orchestration: the Celery tasks of
:mod:`auditor.worker` call it). The workers send the alerts an audit raises to the
workspace's webhooks (:mod:`auditor.webhooks`).
"""
