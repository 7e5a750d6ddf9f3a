"""``/healthz`` (the process answers) and ``/readyz`` (it can serve: database, schema, broker).

``/healthz`` touches nothing: a container orchestrator restarts a process that stops
answering it. ``/readyz`` checks, each within :data:`CHECK_TIMEOUT` seconds and all at
once, that the database answers, that its schema is at the migrations' head, and that
the task broker answers; it answers 200 (``ok``), 200 ``degraded`` when only the broker
is down (imports still work: their audits wait for the sweep), or 503 with the checks
that failed. Neither
needs a login (nor a CSRF token: they are GETs; nor counts against a rate limit), and
neither says more than which check failed and why in a few words: the error's details
(host names, user names) go to the log only.

A check that hangs (a server that accepts connections and never answers) is given up
after the timeout; until it returns, the next ``/readyz`` reports it failed instead of
starting another, so hung checks cannot pile up threads or connections.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import cache
from typing import Any

from flask import Blueprint, Flask, current_app, jsonify
from sqlalchemy import Engine, text
from sqlalchemy.pool import NullPool

from auditor.db import make_engine

__all__ = ["CHECK_TIMEOUT", "bp", "init_app", "readiness"]

log = logging.getLogger(__name__)

bp = Blueprint("health", __name__)

CHECK_TIMEOUT = 3.0
"""Seconds each readiness check may take."""


@bp.get("/healthz")
def healthz():
    response = jsonify({"status": "ok"})
    response.headers["Cache-Control"] = "no-store"
    return response


#: Checks whose failure leaves the process able to serve: without the broker, imports are
#: still stored and acknowledged (the sweep enqueues their audits once it is back).
DEGRADABLE = frozenset({"broker"})


@bp.get("/readyz")
def readyz():
    checks = readiness(current_app._get_current_object())  # type: ignore[attr-defined]
    failed = {name for name, c in checks.items() if not c["ok"]}
    status = "ok" if not failed else ("degraded" if failed <= DEGRADABLE else "unavailable")
    response = jsonify({"status": status, "checks": checks})
    response.status_code = 503 if status == "unavailable" else 200
    response.headers["Cache-Control"] = "no-store"
    return response


@cache
def _migration_heads() -> frozenset[str]:
    from auditor.db import migrate

    return frozenset(migrate.heads())


def _check_database(engine: Engine) -> dict[str, Any]:
    """The database answers (else raises); the migrations' check rides on the same connection."""
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
        try:
            at = frozenset(r[0] for r in conn.execute(text("SELECT version_num FROM alembic_version")))
        except Exception:
            at = None
    heads = _migration_heads()
    if at is None:
        migrations = {"ok": False, "error": "the database has no schema yet: run 'auditor db upgrade'"}
    elif at != heads:
        migrations = {"ok": False, "error": f"the schema is at {', '.join(sorted(at)) or 'nothing'} but the "
                                            f"migrations' head is {', '.join(sorted(heads))}: run 'auditor db upgrade'"}
    else:
        migrations = {"ok": True, "revision": ", ".join(sorted(at))}
    return {"migrations": migrations}


def _check_broker(url: str) -> dict[str, Any]:
    if url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=CHECK_TIMEOUT, socket_timeout=CHECK_TIMEOUT)
        try:
            client.ping()
        finally:
            client.close()
    elif url.startswith("sqla+"):
        engine = make_engine(url[len("sqla+"):], poolclass=NullPool)
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        finally:
            engine.dispose()
    elif not url.startswith("memory://"):  # in-process: nothing to reach
        from kombu import Connection

        with Connection(url, connect_timeout=CHECK_TIMEOUT) as conn:
            conn.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT)
    return {}


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FutureTimeout):
        return f"no answer within {CHECK_TIMEOUT:g} s"
    return f"unreachable ({exc.__class__.__name__})"


class _Checks:
    """The app's readiness checks: a small thread pool, one check of each kind in flight at most."""

    def __init__(self, app: Flask):
        self.app = app
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="auditor-readyz")
        self.lock = threading.Lock()
        self.running: dict[str, Future] = {}
        self._engine: Engine | None = None

    def engine(self) -> Engine:
        if self._engine is None:
            url = self.app.config["DATABASE_URL"]
            kwargs: dict[str, Any] = {"poolclass": NullPool}
            if url.startswith("postgres"):
                kwargs["connect_args"] = {"connect_timeout": max(1, int(CHECK_TIMEOUT)),
                                          "options": f"-c statement_timeout={int(CHECK_TIMEOUT * 1000)}"}
            self._engine = make_engine(url, **kwargs)
        return self._engine

    def run(self) -> dict[str, dict[str, Any]]:
        capp = self.app.extensions.get("celery")
        broker = str(capp.conf.broker_url) if capp is not None else "memory://"
        kinds = {"database": lambda: _check_database(self.engine()), "broker": lambda: _check_broker(broker)}
        futures: dict[str, Future | None] = {}
        with self.lock:
            for name, fn in kinds.items():
                previous = self.running.get(name)
                if previous is not None and not previous.done():
                    futures[name] = None  # still hung: do not start another
                else:
                    futures[name] = self.running[name] = self.pool.submit(_timed, fn)
        deadline = time.monotonic() + CHECK_TIMEOUT
        out: dict[str, dict[str, Any]] = {}
        for name, future in futures.items():
            if future is None:
                out[name] = {"ok": False, "error": f"the previous check is still waiting (over {CHECK_TIMEOUT:g} s)"}
            else:
                try:
                    more, ms = future.result(timeout=max(0.0, deadline - time.monotonic()))
                    out[name] = {"ok": True, "duration_ms": ms}
                    out.update(more)
                    continue
                except BaseException as exc:  # every failure is the check's answer, never the request's
                    if not isinstance(exc, FutureTimeout):
                        log.warning("readiness check %s failed: %s: %s", name, exc.__class__.__name__, exc)
                    out[name] = {"ok": False, "error": _reason(exc)}
            if name == "database":
                out["migrations"] = {"ok": False, "error": "not checked: the database did not answer"}
        return out


def _timed(fn) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    details = fn()
    return details, round((time.perf_counter() - t0) * 1000, 1)


def readiness(app: Flask) -> dict[str, dict[str, Any]]:
    """Run the readiness checks of ``app``: ``{name: {"ok": bool, "error"?: str, ...}}``."""
    return app.extensions["auditor.readiness"].run()


def init_app(app: Flask) -> None:
    app.extensions["auditor.readiness"] = _Checks(app)
    app.register_blueprint(bp)
