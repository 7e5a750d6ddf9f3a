"""Responses compressed for the browsers and clients that accept it (Flask-Compress).

Text responses (pages, JSON, CSV, scripts, styles) of at least :data:`MIN_SIZE` bytes are
sent with brotli or gzip, whichever the client's ``Accept-Encoding`` prefers (both when it
takes both: brotli); a client that names neither gets them as they are. Every such
response says ``Vary: Accept-Encoding`` so that no cache hands a compressed body to a
client that cannot read it. The static files (the API docs' 1.7 MB Swagger UI bundle
among them) are compressed once per process and kept.

A page or an answer that depends on the session cookie is not compressed for a request
that another site started (``Sec-Fetch-Site: cross-site``): compressing a secret (the
CSRF token) beside text an attacker's page chose lets the attacker read the secret off
the compressed lengths (BREACH). Requests of this site's own pages, typed addresses and
bookmarks, API clients and the static files are compressed.
"""

from __future__ import annotations

import os

from flask import Flask, Response, current_app, has_request_context, request
from flask_compress import Compress
from werkzeug.security import safe_join

__all__ = ["MIN_SIZE", "init_app"]

MIN_SIZE = 1024
_TEXT = [
    "text/html", "text/css", "text/plain", "text/csv", "text/javascript", "application/javascript",
    "application/json", "application/problem+json", "image/svg+xml",
]


class _StaticCache:
    """Compressed static files by algorithm, path and modification time: each compressed once per process."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def set(self, key: str, value: bytes) -> None:
        if key in self.data or len(self.data) < 256:  # (the static folder holds a few dozen files)
            self.data[key] = value


def _static_key(req) -> str:
    """The static file's path and modification time (an edited file is compressed again)."""
    path = safe_join(current_app.static_folder, (req.view_args or {}).get("filename", ""))
    try:
        return f"{req.path}|{os.stat(path).st_mtime_ns}" if path else req.path
    except OSError:
        return req.path


class _Compress(Compress):
    """Flask-Compress, but never on an answer to a cross-site request other than a static file, and
    with the static files compressed whole and kept (Flask-Compress's cache, for them only: its
    cache would hand any answer with the same key the same body)."""

    _static = _StaticCache()

    @property
    def cache(self):
        return self._static if has_request_context() and request.endpoint == "static" else None

    @cache.setter
    def cache(self, value) -> None:  # (set by Flask-Compress's init_app; the property decides)
        pass

    @property
    def cache_key(self):
        return _static_key

    @cache_key.setter
    def cache_key(self, value) -> None:
        pass

    def after_request(self, response: Response) -> Response:
        static = request.endpoint == "static"
        if not static and request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
            response.vary.add("Accept-Encoding")
            return response
        if static and response.status_code == 200 and response.direct_passthrough:
            # send_file streams from disk: read the (vendored, bounded) file so that it is compressed
            # whole, once, with a length, rather than streamed through the compressor at every view.
            response.direct_passthrough = False
            response.set_data(response.get_data())
        return super().after_request(response)


def init_app(app: Flask) -> None:
    app.config.setdefault("COMPRESS_MIMETYPES", _TEXT)
    app.config.setdefault("COMPRESS_MIN_SIZE", MIN_SIZE)
    app.config.setdefault("COMPRESS_ALGORITHM", ["br", "gzip"])
    app.config.setdefault("COMPRESS_ALGORITHM_STREAMING", ["br", "gzip"])
    app.config.setdefault("COMPRESS_LEVEL", 6)
    app.config.setdefault("COMPRESS_BR_LEVEL", 5)
    # A streamed answer (a large CSV, a range of a file) goes as it is: compressing a range would
    # break its Content-Range, and the static files are made whole above.
    app.config.setdefault("COMPRESS_STREAMS", False)
    _Compress(app)
