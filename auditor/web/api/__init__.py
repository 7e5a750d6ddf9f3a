"""The JSON API under ``/api/v1``: the route table and its OpenAPI document."""

from auditor.web.api import (  # each registers its operations
    access,
    alerting,
    annotators,
    datasets,
    ingestion,
    models,
    plans,
    results,
    webhooks,
)
from auditor.web.api.framework import OPERATIONS, bp

__all__ = ["OPERATIONS", "bp"]
