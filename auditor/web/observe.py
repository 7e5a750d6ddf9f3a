"""Each web request's id, its log line and its latency.

A request keeps the ``X-Request-ID`` it came with (a proxy's or a client's, if it is
1–128 characters of letters, digits and ``-_.:``; else a new one is made) and the
answer echoes it back. Every log line written while the request runs carries the id
(:mod:`auditor.logs`). When the request ends, one line (logger
``auditor.web.requests``) records method, path, URL rule, status, duration and id, and
the latency histogram of :mod:`auditor.web.metrics` counts it under its URL rule (never
the raw path, so the number of series stays bounded). Probes (``/healthz``,
``/readyz``, ``/metrics``) log at DEBUG only.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from flask import Flask, Response, g, request

from auditor import logs
from auditor.web import metrics

__all__ = ["REQUEST_ID_HEADER", "init_app"]

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_PROBES = frozenset({"health.healthz", "health.readyz", "metrics.metrics"})

request_log = logging.getLogger("auditor.web.requests")


def _start() -> None:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    g.request_id = given if _VALID_ID.match(given) else uuid.uuid4().hex
    g.request_started = time.perf_counter()
    g.request_id_token = logs.request_id.set(g.request_id)


def _finish(response: Response) -> Response:
    rid = g.get("request_id")
    if rid is not None:
        response.headers[REQUEST_ID_HEADER] = rid
    started = g.get("request_started")
    if started is None:
        return response
    seconds = time.perf_counter() - started
    rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
    metrics.observe_request(request.method, rule, response.status_code, seconds)
    level = logging.DEBUG if request.endpoint in _PROBES else logging.INFO
    if request_log.isEnabledFor(level):
        request_log.log(level, "%s %s %s %.1f ms", request.method, request.path[:300], response.status_code,
                        seconds * 1000, extra={"method": request.method, "path": request.path[:300], "rule": rule,
                                               "status": response.status_code,
                                               "duration_ms": round(seconds * 1000, 1),
                                               "remote_addr": request.remote_addr})
    return response


def _teardown(_exc: BaseException | None = None) -> None:
    token = g.pop("request_id_token", None)
    if token is not None:
        logs.request_id.reset(token)


def init_app(app: Flask, log_format: str) -> None:
    """Request ids, request log lines and latencies for ``app``; logging in ``log_format`` for
    this process where nobody configured logging yet (:func:`auditor.logs.configure_logging`)."""
    logs.configure_logging(log_format)
    # First of the before-request functions, so every other one's log lines carry the id.
    app.before_request_funcs.setdefault(None, []).insert(0, _start)
    app.after_request(_finish)
    app.teardown_request(_teardown)
