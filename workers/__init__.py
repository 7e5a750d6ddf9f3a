"""The project's ``workers/`` entry point: Auditor's Celery application and tasks live in
:mod:`auditor.worker` (installed with the package, under a name no other distribution
claims); this folder re-exports them for ``celery -A workers`` and older imports.

Start workers with ``auditor worker`` (and the sweep with ``auditor beat``).
"""

from auditor.worker import celery_app, celery_config, celery_init_app, lower_priority

__all__ = ["celery_app", "celery_config", "celery_init_app", "lower_priority"]
