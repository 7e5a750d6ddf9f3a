"""Ingestion: validated, all-or-nothing, idempotent imports of annotations, predictions and gold.

:mod:`~auditor.ingest.formats` reads every file format; :mod:`~auditor.ingest.batch` is
the protocol every import follows; :mod:`~auditor.ingest.annotations`,
:mod:`~auditor.ingest.predictions` and :mod:`~auditor.ingest.gold` are the imports;
:mod:`~auditor.ingest.csv_load` and :mod:`~auditor.ingest.bulk` load long CSV files by
``COPY``; :mod:`~auditor.ingest.datasets` creates and finds datasets.
"""

from auditor.ingest.annotations import import_annotations
from auditor.ingest.batch import ImportResult
from auditor.ingest.datasets import (
    DEFAULT_WORKSPACE,
    create_dataset,
    delete_dataset,
    get_dataset,
    get_workspace,
)
from auditor.ingest.errors import ImportRejected, IngestError, RowError
from auditor.ingest.gold import import_gold
from auditor.ingest.predictions import import_predictions

__all__ = [
    "DEFAULT_WORKSPACE",
    "ImportRejected",
    "ImportResult",
    "IngestError",
    "RowError",
    "create_dataset",
    "delete_dataset",
    "get_dataset",
    "get_workspace",
    "import_annotations",
    "import_gold",
    "import_predictions",
]
