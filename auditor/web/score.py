"""``POST /api/score``: the Scoracle API (Lourie et al.), request and response shapes unchanged.

Scoracle's clients post ``{"labelCounts": [[...], ...], "metrics": [...]}`` and read
back ``[{"metric": ..., "score": ...}, ...]``, or on bad input a 400 with
``[{"error": ..., "message": ...}, ...]``; so does this endpoint.

Every request's work is bounded before any is done: the body is at most
:data:`MAX_BODY_BYTES` (read no further), and the counts at most :data:`MAX_ROWS` rows
of :data:`MAX_CLASSES` classes with entries up to :data:`MAX_COUNT`, at most
:data:`MAX_METRICS` metrics; the largest such request is scored in well under two
seconds. Callers must be signed in (a session or a bearer token) unless
``AUDITOR_SCORE_ANONYMOUS=true`` opens the endpoint to anyone, as Scoracle's was.
"""

from __future__ import annotations

import json

from flask import Blueprint, current_app, jsonify, request

from auditor.scoracle import ScoreRequestError, scoracle_score
from auditor.stats.best import BEST_METRICS
from auditor.web.security import csrf, limiter, load_principal

__all__ = ["MAX_BODY_BYTES", "MAX_CLASSES", "MAX_COUNT", "MAX_METRICS", "MAX_ROWS", "REQUEST_SCHEMA", "RESPONSE_SCHEMA",
           "bp", "score_operation"]

bp = Blueprint("score", __name__)

#: The documented bounds of a request (also in the OpenAPI document).
MAX_ROWS = 1000
MAX_CLASSES = 20
MAX_COUNT = 1000
MAX_METRICS = 8
#: The largest legal request is about 100 KB of JSON; 1 MiB leaves room for whitespace.
MAX_BODY_BYTES = 1 << 20


def _limit() -> str:
    return current_app.config["AUDITOR_SCORE_LIMIT"]


def _errors(status: int, error: str, message: str):
    response = jsonify([{"error": error, "message": message}])
    response.status_code = status
    return response


def _body() -> bytes | None:
    """At most MAX_BODY_BYTES + 1 bytes of the body, whatever its framing (chunked or not)."""
    declared = request.content_length
    if declared is not None and declared > MAX_BODY_BYTES:
        return None
    data = request.stream.read(MAX_BODY_BYTES + 1)
    return None if len(data) > MAX_BODY_BYTES else data


def _parse(data: bytes):
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


@bp.post("/api/score")
@limiter.limit(_limit)
@csrf.exempt
def score():
    """The BEST performance of the posted label counts, per requested metric."""
    if not current_app.config.get("AUDITOR_SCORE_ANONYMOUS") and load_principal(allow_session=True) is None:
        response = _errors(401, "Unauthorized",
                           "Sign in or send 'Authorization: Bearer <token>'; this server does not score "
                           "anonymous requests (AUDITOR_SCORE_ANONYMOUS=true would allow them).")
        response.headers["WWW-Authenticate"] = 'Bearer realm="auditor"'
        return response
    data = _body()
    if data is None:
        return _errors(413, "Too Large", f"The request body is larger than the limit of {MAX_BODY_BYTES} bytes.")
    body = _parse(data) if request.is_json else None
    try:
        return jsonify(scoracle_score(body, limits=(MAX_ROWS, MAX_CLASSES, MAX_COUNT, MAX_METRICS)))
    except ScoreRequestError as exc:
        response = jsonify(exc.errors)
        response.status_code = 400
        return response


#: The request body, as the OpenAPI document declares it; the parser
#: (:func:`auditor.scoracle.parse_score_request`) accepts exactly the bodies this schema
#: accepts whose rows have one length (which JSON Schema cannot say), a property test
#: holds the two together. The parser keeps its own checks for Scoracle's error order
#: and wording, which clients read.
REQUEST_SCHEMA = {
    "type": "object", "required": ["labelCounts", "metrics"], "additionalProperties": False,
    "properties": {
        "labelCounts": {"type": "array", "minItems": 1, "maxItems": MAX_ROWS,
                        "items": {"type": "array", "minItems": 1, "maxItems": MAX_CLASSES,
                                  "items": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}},
                        # at least one annotation somewhere
                        "contains": {"type": "array", "contains": {"type": "integer", "minimum": 1}}},
        "metrics": {"type": "array", "maxItems": MAX_METRICS, "items": {"type": "string", "enum": list(BEST_METRICS)}},
    },
}
RESPONSE_SCHEMA = {
    "type": "array", "items": {"type": "object", "required": ["metric", "score"],
                               "properties": {"metric": {"type": "string"}, "score": {"type": ["number", "string"]}}},
}
_ERROR_LIST = {"type": "array", "items": {"type": "object", "required": ["error", "message"],
                                          "properties": {"error": {"type": "string"}, "message": {"type": "string"}}}}


def score_operation() -> dict:
    """This endpoint's entry in the OpenAPI document."""

    def errors(description: str) -> dict:
        return {"description": description, "content": {"application/json": {"schema": _ERROR_LIST}}}

    return {
        "operationId": "score",
        "summary": "BEST performance of label counts (Scoracle API)",
        "tags": ["scoracle"],
        "requestBody": {"required": True, "content": {"application/json": {"schema": REQUEST_SCHEMA}}},
        "responses": {
            "200": {"description": "One score per requested metric, in the request's order.",
                    "content": {"application/json": {"schema": RESPONSE_SCHEMA}}},
            "400": errors("The request cannot be scored (or is beyond the documented bounds); one object per "
                          "problem."),
            "401": errors("Not signed in, and anonymous scoring is off (AUDITOR_SCORE_ANONYMOUS)."),
            "413": errors(f"The body is larger than {MAX_BODY_BYTES} bytes."),
            "429": errors("Too many requests; retry later."),
        },
    }
