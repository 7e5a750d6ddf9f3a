"""``POST /api/score``: the Scoracle API (Lourie et al.), request and response shapes unchanged.

Scoracle's clients post ``{"labelCounts": [[...], ...], "metrics": [...]}`` and read
back ``[{"metric": ..., "score": ...}, ...]``, or on bad input a 400 with
``[{"error": ..., "message": ...}, ...]``; so does this endpoint.

Every request's work is bounded before any is done: the body is at most
:data:`MAX_BODY_BYTES` (read no further), and the counts at most :data:`MAX_ROWS` rows
of :data:`MAX_CLASSES` classes with entries up to :data:`MAX_COUNT`, at most
:data:`MAX_METRICS` metrics; then the work itself is estimated from the counts
(:func:`auditor.scoracle.score_work`) and a request above :data:`MAX_CELLS` is refused
("Too Costly"), so every accepted body takes under a second of CPU. Each web process
scores one request at a time, in a process of its own at a lower priority, and each
caller has one in flight (others get 503 or 429 with ``Retry-After`` before their body
is read), so scoring takes neither the threads nor the CPU that answer health checks and
other users' pages. Callers must be signed in (a session or a bearer token) unless
``AUDITOR_SCORE_ANONYMOUS=true`` opens the endpoint to anyone, as Scoracle's was.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

from flask import Blueprint, current_app, jsonify, request

from auditor.scoracle import ScoreRequestError, scoracle_score
from auditor.stats.best import BEST_METRICS
from auditor.web.security import csrf, limiter, load_principal

__all__ = ["MAX_BODY_BYTES", "MAX_CELLS", "MAX_CLASSES", "MAX_COUNT", "MAX_METRICS", "MAX_ROWS", "REQUEST_SCHEMA", "RESPONSE_SCHEMA",
           "bp", "score_operation"]

bp = Blueprint("score", __name__)

#: The documented bounds of a request (also in the OpenAPI document).
MAX_ROWS = 1000
MAX_CLASSES = 20
MAX_COUNT = 1000
MAX_METRICS = 8
#: The largest legal request is about 100 KB of JSON; 1 MiB leaves room for whitespace.
MAX_BODY_BYTES = 1 << 20
#: The most work one request may take (:func:`auditor.scoracle.score_work`'s units, about 7 ns
#: of CPU each here): under a second of CPU for every accepted body.
MAX_CELLS = 1e8


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
    try:
        with _slot(_caller()):
            data = _body()
            if data is None:
                return _errors(413, "Too Large",
                               f"The request body is larger than the limit of {MAX_BODY_BYTES} bytes.")
            body = _parse(data) if request.is_json else None
            return jsonify(_score_elsewhere(body, current_app.config.get("SCORE_MAX_CELLS", MAX_CELLS)))
    except ScoreRequestError as exc:
        response = jsonify(exc.errors)
        response.status_code = 400
        return response
    except _Busy as exc:
        response = _errors(exc.status, "Busy", exc.message)
        response.headers["Retry-After"] = "1"
        return response


# --- isolation: scoring never takes the threads that serve everything else ----------------

#: Scores computed at once by one web process. The others are answered at once (503,
#: Retry-After) rather than queued: a queued request would hold one of the process's
#: request threads, and enough of them would starve health checks and other users' pages.
SCORE_SLOTS = 1
_slots = threading.BoundedSemaphore(SCORE_SLOTS)
_in_flight: set[str] = set()
_in_flight_lock = threading.Lock()


class _Busy(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _caller() -> str:
    principal = load_principal(allow_session=True)
    return f"user:{principal.user_id}" if principal is not None else f"addr:{request.remote_addr}"


#: Seconds a score may take in its process before the request gives up (503).
SCORE_TIMEOUT = 30.0
_pool: ProcessPoolExecutor | None = None
_pool_owner: int | None = None
_pool_lock = threading.Lock()


def _child_init() -> None:
    # Below the web process's priority: its threads answer health checks and pages first.
    os.nice(10)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def _executor() -> ProcessPoolExecutor:
    """This web process's scoring process (started on first use, after any fork)."""
    global _pool, _pool_owner
    with _pool_lock:
        if _pool is None or _pool_owner != os.getpid():
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["auditor.scoracle"])
            _pool = ProcessPoolExecutor(max_workers=SCORE_SLOTS, mp_context=context, initializer=_child_init)
            _pool_owner = os.getpid()
        return _pool


def _score_elsewhere(body, max_cells: float) -> list[dict]:
    """Score in this web process's scoring process, which runs at a lower priority and
    holds no lock the request threads need (the GIL), so they answer meanwhile."""
    global _pool
    future = _executor().submit(scoracle_score, body, limits=(MAX_ROWS, MAX_CLASSES, MAX_COUNT, MAX_METRICS),
                                max_cells=max_cells)
    try:
        return future.result(timeout=SCORE_TIMEOUT)
    except (BrokenProcessPool, FutureTimeout):
        with _pool_lock:
            broken, _pool = _pool, None
        if broken is not None:
            broken.shutdown(wait=False, cancel_futures=True)
        raise _Busy(503, "The score could not be computed in time; retry later.") from None


@contextmanager
def _slot(caller: str):
    """One score at a time per caller (a 429 for a second) and :data:`SCORE_SLOTS` per process (a 503 beyond)."""
    with _in_flight_lock:
        if caller in _in_flight:
            raise _Busy(429, "A score of yours is still being computed: send the next when it is answered.")
        _in_flight.add(caller)
    try:
        if not _slots.acquire(blocking=False):
            raise _Busy(503, "The server is scoring other requests; retry in a second.")
        try:
            yield
        finally:
            _slots.release()
    finally:
        with _in_flight_lock:
            _in_flight.discard(caller)


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
            "400": errors("The request cannot be scored (or is beyond the documented bounds, or its estimated "
                          "work is: \"Too Costly\"); one object per problem."),
            "401": errors("Not signed in, and anonymous scoring is off (AUDITOR_SCORE_ANONYMOUS)."),
            "413": errors(f"The body is larger than {MAX_BODY_BYTES} bytes."),
            "429": errors("Too many requests, or a score of this caller's is still being computed; retry later."),
            "503": errors("The server is scoring other requests; retry after the Retry-After seconds."),
        },
    }
