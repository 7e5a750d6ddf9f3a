"""Errors as JSON for the API (a message naming the field, never a stack trace), pages for the UI."""

from __future__ import annotations

import logging

from flask import Flask, jsonify, make_response, render_template, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException, InternalServerError

__all__ = ["ApiError", "init_app"]

log = logging.getLogger(__name__)


class ApiError(Exception):
    """A 4xx answer: ``message`` says what is wrong, ``field`` where (``labels[2]``, ``page``...)."""

    def __init__(self, status: int, message: str, *, field: str | None = None,
                 errors: list[dict] | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.errors = errors
        self.code = code or _CODES.get(status, "error")

    def body(self) -> dict:
        out = {"error": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        if self.errors:
            out["errors"] = self.errors
        return out


_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
          415: "unsupported_media_type", 422: "unprocessable", 429: "too_many_requests", 503: "unavailable"}


def _is_api() -> bool:
    """Machine clients' paths, answered in JSON: the API and the incoming webhooks."""
    return request.path.startswith(("/api/", "/hooks/"))


def _is_scoracle() -> bool:
    return request.path.rstrip("/") == "/api/score"


def _json_http_error(exc: HTTPException):
    status = exc.code or 500
    code = _CODES.get(status, "error")
    message = exc.description or exc.name
    if status == 413:
        limit = request.max_content_length
        message = (f"The request body is larger than the limit of {limit} bytes."
                   if limit else "The request body is too large.")
    if _is_scoracle():
        # Scoracle's clients expect a list of {"error", "message"} objects.
        response = jsonify([{"error": exc.name, "message": message}])
    else:
        response = jsonify({"error": code, "message": message})
    response.status_code = status
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        value = exc.get_response().headers.get(header)
        if value:
            response.headers[header] = value
    return response


def _handle_api_error(exc: ApiError):
    response = jsonify(exc.body())
    response.status_code = exc.status
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="auditor"'
    return response


def _handle_http(exc: HTTPException):
    if _is_api():
        return _json_http_error(exc)
    if isinstance(exc, CSRFError):
        exc.description = "The form was missing its security token or it expired; reload the page and try again."
    status = exc.code or 500
    return render_template("error.html", status=status, title=exc.name,
                           message=exc.description), status


class _Unavailable(HTTPException):
    code = 503
    description = "The database cannot be reached (it may be restarting); retry in a few seconds."


#: SQLSTATE classes of a database that is not there: connection exceptions, operator
#: intervention (a shutdown or restart in progress).
_UNAVAILABLE_SQLSTATES = ("08", "57")
_UNAVAILABLE_MESSAGES = ("connection refused", "could not connect", "server closed the connection",
                         "connection is closed", "terminating connection", "the database system is starting up",
                         "the database system is shutting down", "consuming input failed", "database is locked")


def database_unavailable(exc: BaseException) -> bool:
    """Is ``exc`` the database being away for a moment (a restart, a lost connection), not a fault?"""
    from sqlalchemy import exc as sa_exc

    if isinstance(exc, sa_exc.DisconnectionError | sa_exc.TimeoutError):
        return True
    if not isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return False
    if exc.connection_invalidated:
        return True
    code = getattr(exc.orig, "sqlstate", None) or ""
    if code:
        return code[:2] in _UNAVAILABLE_SQLSTATES
    return any(m in str(exc.orig).lower() for m in _UNAVAILABLE_MESSAGES)


def _handle_unexpected(exc: Exception):
    if isinstance(exc, HTTPException):
        return _handle_http(exc)
    if database_unavailable(exc):
        log.warning("database unavailable on %s %s: %s", request.method, request.path, exc.__class__.__name__)
        response = _handle_http(_Unavailable())
        response = response if not isinstance(response, tuple) else make_response(response)
        response.headers["Retry-After"] = "5"
        return response
    log.exception("unhandled error on %s %s", request.method, request.path)
    return _handle_http(InternalServerError("Something went wrong on our side; the error was logged."))


def init_app(app: Flask) -> None:
    app.register_error_handler(ApiError, _handle_api_error)
    app.register_error_handler(HTTPException, _handle_http)
    app.register_error_handler(Exception, _handle_unexpected)
