"""The OpenAPI 3.1 document, generated from the route table (``framework.OPERATIONS``)."""

from __future__ import annotations

import re
from functools import cache

from auditor import __version__
from auditor.web.api import serializers as s
from auditor.web.api.framework import MAX_ID, OPERATIONS, Operation

__all__ = ["build_document"]

_RULE_PARAM = re.compile(r"<(?:(?P<conv>[a-z]+):)?(?P<name>\w+)>")

_UPLOAD_TYPES = {
    "text/csv": {"schema": {"type": "string"}},
    "application/x-ndjson": {"schema": {"type": "string"}},
    "multipart/form-data": {"schema": {"type": "object", "required": ["file"],
                                       "properties": {"file": {"type": "string", "format": "binary"},
                                                      "idempotency_key": {"type": "string", "maxLength": 200}}}},
}


def _path(op: Operation) -> tuple[str, list[dict]]:
    params = []

    def repl(m):
        schema = ({"type": "integer", "minimum": 0, "maximum": MAX_ID} if m["conv"] == "int"
                  else {"type": "string", "minLength": 1, "maxLength": 200})
        params.append({"name": m["name"], "in": "path", "required": True, "schema": schema})
        return "{" + m["name"] + "}"

    return "/api/v1" + _RULE_PARAM.sub(repl, op.rule), params


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": s.ref("Error")}}}


def _operation(op: Operation, path_params: list[dict]) -> dict:
    out: dict = {"operationId": op.operation_id, "summary": op.summary, "tags": [op.tag]}
    if op.description:
        out["description"] = op.description
    params = list(path_params)
    for p in op.query:
        params.append({"name": p.name, "in": "query", "required": p.required, "description": p.description,
                       "schema": p.schema()})
    if params:
        out["parameters"] = params
    if op.body is not None:
        content = {"application/json": {"schema": s.ref(op.body_name)}}
        if op.uploads:
            content.update(_UPLOAD_TYPES)
        out["requestBody"] = {"required": True, "content": content}
    ok: dict = {"description": op.summary}
    if op.response is not None:
        ok["content"] = {"application/json": {"schema": op.response}}
    if op.listing:
        ok["content"]["text/csv"] = {"schema": {"type": "string"}}
    responses = {str(op.status): ok}
    if op.query or op.body is not None:
        responses["400"] = _error("Invalid parameter or body; the message names the field.")
    if not op.public:
        out["security"] = [{"bearerAuth": []}, {"sessionCookie": []}] if op.method == "GET" else [{"bearerAuth": []}]
        responses["401"] = _error("No valid credentials.")
        responses["403"] = _error("The caller's role may not do this.")
    if not op.public:
        # Path and query ids (dataset_id, release_id...) outside the caller's reach are not found.
        responses["404"] = _error("Not found in the caller's workspace.")
    if op.method == "POST":
        responses["409"] = _error("Conflicts with existing data.")
        responses["413"] = _error("The body is larger than the upload limit.")
        responses["415"] = _error("Unsupported content type.")
    if op.uploads:
        responses["429"] = _error("Too many ingestion requests; retry later.")
    out["responses"] = responses
    return out


@cache
def _document() -> dict:
    paths: dict[str, dict] = {}
    for op in OPERATIONS:
        path, path_params = _path(op)
        paths.setdefault(path, {})[op.method.lower()] = _operation(op, path_params)
    from auditor.web.score import score_operation

    paths["/api/score"] = {"post": score_operation()}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Auditor API", "version": __version__,
                 "description": "Datasets, annotations, predictions and audit results of one workspace. "
                                "Authenticate with 'Authorization: Bearer <token>'."},
        "paths": paths,
        "components": {
            "schemas": {**s.SCHEMAS, **s.BODIES},
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer"},
                "sessionCookie": {"type": "apiKey", "in": "cookie", "name": "session"},
            },
        },
    }


def build_document() -> dict:
    """The document (built once per process: the route table is fixed at import)."""
    return _document()
