"""Errors as JSON for the API (a message naming the field, never a stack trace), pages for the UI."""

from __future__ import annotations

import logging

from flask import Flask, jsonify, render_template, request
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
          415: "unsupported_media_type", 422: "unprocessable", 429: "too_many_requests"}


def _is_api() -> bool:
    return request.path.startswith("/api/")


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


def _handle_unexpected(exc: Exception):
    if isinstance(exc, HTTPException):
        return _handle_http(exc)
    log.exception("unhandled error on %s %s", request.method, request.path)
    return _handle_http(InternalServerError("Something went wrong on our side; the error was logged."))


def init_app(app: Flask) -> None:
    app.register_error_handler(ApiError, _handle_api_error)
    app.register_error_handler(HTTPException, _handle_http)
    app.register_error_handler(Exception, _handle_unexpected)
