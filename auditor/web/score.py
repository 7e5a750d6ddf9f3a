"""``POST /api/score``: the Scoracle API (Lourie et al.), request and response shapes unchanged.

Scoracle's clients post ``{"labelCounts": [[...], ...], "metrics": [...]}`` without
credentials and read back ``[{"metric": ..., "score": ...}, ...]``, or on bad input a
400 with ``[{"error": ..., "message": ...}, ...]``; so does this endpoint.
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

from auditor.stats.best import BEST_METRICS, ScoreRequestError, scoracle_score
from auditor.web.security import csrf, limiter

__all__ = ["bp", "score_operation"]

bp = Blueprint("score", __name__)


def _limit() -> str:
    return current_app.config["AUDITOR_SCORE_LIMIT"]


@bp.post("/api/score")
@limiter.limit(_limit)
@csrf.exempt
def score():
    """The BEST performance of the posted label counts, per requested metric."""
    try:
        return jsonify(scoracle_score(request.get_json(silent=True)))
    except ScoreRequestError as exc:
        response = jsonify(exc.errors)
        response.status_code = 400
        return response


def score_operation() -> dict:
    """This endpoint's entry in the OpenAPI document."""
    error_list = {"type": "array", "items": {"type": "object", "required": ["error", "message"],
                                             "properties": {"error": {"type": "string"},
                                                            "message": {"type": "string"}}}}
    return {
        "operationId": "score",
        "summary": "BEST performance of label counts (Scoracle API)",
        "tags": ["scoracle"],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["labelCounts", "metrics"], "additionalProperties": False,
            "properties": {
                "labelCounts": {"type": "array", "minItems": 1, "maxItems": 1000,
                                "items": {"type": "array", "minItems": 1, "maxItems": 20,
                                          "items": {"type": "integer", "minimum": 0, "maximum": 1000}}},
                "metrics": {"type": "array", "maxItems": 8,
                            "items": {"type": "string", "enum": list(BEST_METRICS)}}}}}}},
        "responses": {
            "200": {"description": "One score per requested metric, in the request's order.",
                    "content": {"application/json": {"schema": {
                        "type": "array", "items": {"type": "object", "required": ["metric", "score"],
                                                   "properties": {"metric": {"type": "string"},
                                                                  "score": {"type": ["number", "string"]}}}}}}},
            "400": {"description": "The request cannot be scored; one object per problem.",
                    "content": {"application/json": {"schema": error_list}}},
            "413": {"description": "The body is larger than the upload limit.",
                    "content": {"application/json": {"schema": error_list}}},
            "429": {"description": "Too many requests; retry later.",
                    "content": {"application/json": {"schema": error_list}}},
        },
    }
