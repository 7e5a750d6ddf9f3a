"""Ingestion: validated, all-or-nothing, idempotent imports of annotations, predictions and gold."""

from auditor.ingest.errors import ImportRejected, IngestError, RowError
from auditor.ingest.usecases import (
    DEFAULT_WORKSPACE,
    ImportResult,
    create_dataset,
    delete_dataset,
    get_dataset,
    get_workspace,
    import_annotations,
    import_gold,
    import_predictions,
)

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
