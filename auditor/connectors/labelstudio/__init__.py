"""Label Studio, live: a per-workspace, per-dataset connector of one Label Studio project.

* :mod:`~auditor.connectors.labelstudio.events` reads Label Studio's webhook events
  (``ANNOTATION_CREATED``, ``ANNOTATIONS_CREATED``, ``ANNOTATION_UPDATED``,
  ``ANNOTATIONS_DELETED``, ``TASKS_DELETED``), received by ``POST /hooks/label-studio/<id>``
  (:mod:`auditor.web.labelstudio`) with the connector's secret in a header;
* :mod:`~auditor.connectors.labelstudio.sync` pulls the project through
  ``label-studio-sdk`` (``auditor connect label-studio``, and a beat task) to backfill
  and to catch up after downtime;
* both map annotations the same way (:mod:`~auditor.connectors.labelstudio.mapping`) and
  apply them through :func:`~auditor.connectors.labelstudio.store.apply`, which records
  every Label Studio annotation's last known state, so that retries and the two paths
  never count one twice, and writes the dataset's differences as one import batch.

Only the pull needs the optional ``labelstudio`` extra (``label-studio-sdk`` and
``cryptography``); the webhook receiver needs nothing beyond Auditor.
"""

from auditor.connectors.labelstudio.credentials import SECRET_HEADER
from auditor.connectors.labelstudio.mapping import PayloadRejected, ReadSpec, VendorMap
from auditor.connectors.labelstudio.store import Applied, Changes, apply, configure, read_spec

__all__ = ["SECRET_HEADER", "Applied", "Changes", "PayloadRejected", "ReadSpec", "VendorMap", "apply", "configure",
           "read_spec"]
