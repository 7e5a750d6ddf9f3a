"""Per-process cache of rendered results and dashboards, keyed on the workspace's data version.

Results change only when an audit run changes state, data is written, or an alert is
raised or acknowledged. One query reads a fingerprint of all of that for the caller's
workspace; a cached answer is reused only under the same fingerprint, the same caller
role, vendor and grants, and the same URL. Authentication always runs first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import wraps

from flask import Flask, Response, current_app, g, request, session
from sqlalchemy import ColumnElement, String, literal_column

from auditor.lru import LRU

__all__ = ["answer", "cached", "init_app", "lookup", "remember"]

# Every component moves when something a dashboard or a results endpoint shows changes:
# datasets (count, versions, updates), audit runs (new ones and every state change),
# models and releases, alerts (new, and every step of their lifecycle), annotators, release plans (asked for
# and done), vendor prices (set and cleared), the live feeds' connectors (added, removed, and
# each event, sync, write-back, refused webhook or error they record), the workspace's currency. (Items come with
# a data version bump, or
# through ``POST .../items``, which touches the dataset's ``updated_at``.)
# It is read in the same statement as the caller's identity (auditor.web.security), so a
# cached answer costs one round trip to the database.
_FINGERPRINT = """(
 (SELECT count(*) || '.' || coalesce(max(id), 0) || '.' || coalesce(sum(data_version), 0) || '.'
         || coalesce(max(updated_at)::text, '') FROM dataset WHERE workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(a.id), 0) || '.'
         || coalesce(max(greatest(a.created_at, a.started_at, a.finished_at))::text, '') || '.'
         || count(*) FILTER (WHERE a.status IN ('queued', 'running'))
    FROM audit_run a JOIN dataset d ON d.id = a.dataset_id WHERE d.workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(id), 0) FROM model WHERE workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(r.id), 0) FROM release r JOIN model m ON m.id = r.model_id
   WHERE m.workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(id), 0) || '.'
         || coalesce(max(greatest(acknowledged_at, updated_at))::text, '') FROM alert WHERE workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(id), 0) FROM annotator WHERE workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(greatest(p.requested_at, p.finished_at))::text, '')
    FROM release_plan p JOIN dataset d ON d.id = p.dataset_id WHERE d.workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(updated_at)::text, '') FROM vendor_price WHERE workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(greatest(c.updated_at, c.last_event_at, c.last_sync_at, c.last_refused_at))::text, '')
    FROM labelstudio_connector c WHERE c.workspace_id = {w})
 || '|' || (SELECT count(*) || '.' || coalesce(max(greatest(c.updated_at, c.last_written_at))::text, '')
    FROM mlflow_connector c JOIN dataset d ON d.id = c.dataset_id WHERE d.workspace_id = {w})
 || '|' || (SELECT currency FROM workspace WHERE id = {w}))"""


def fingerprint_column(workspace_id: ColumnElement) -> ColumnElement:
    """PostgreSQL: a text that changes whenever anything a cached answer shows changes."""
    table, column = workspace_id.table.name, workspace_id.name
    return literal_column(_FINGERPRINT.format(w=f"{table}.{column}"), String)


class _Lru(LRU):
    """Rendered answers: entries also age out (so a cached page never carries a CSRF token
    near its expiry), and an answer larger than ``max_bytes`` is not kept. ``flights``
    holds the keys being computed right now (see :func:`answer`)."""

    def __init__(self, entries: int, max_bytes: int, ttl: float = 300.0):
        super().__init__(entries, ttl=ttl)
        self.max_bytes = max_bytes
        self.flights: dict[tuple, threading.Event] = {}
        self.flights_lock = threading.Lock()


# How long a request waits for another thread's answer to the same key before it computes
# its own (a slow answer must not hold the others for longer than computing it would).
_WAIT_SECONDS = 10.0


def _response(hit) -> Response:
    body, headers = hit
    return Response(body, status=200, headers=headers)


def lookup(principal) -> tuple[_Lru, tuple, Response | None] | None:
    """(store, key, cached response or None) for this GET request, or None when not cacheable.

    ``principal`` must come from ``load_principal(..., with_fingerprint=True)``.
    """
    store: _Lru | None = current_app.extensions.get("auditor.cache")
    if store is None or principal is None or request.method != "GET":
        return None
    token = None
    if principal.via == "session":
        # Pages embed the session's CSRF token: cache them per session token, once it exists.
        token = session.get("csrf_token")
        if token is None:
            return None
    version = g.get("cache_fingerprint")
    if version is None:
        return None  # SQLite (the embedded deployment serves one team: no cache needed)
    grants = tuple(sorted(principal.grants)) if principal.role.value == "vendor" else ()
    key = (principal.workspace_id, principal.user_id, principal.role.value, principal.vendor, grants, token,
           request.full_path, version)
    hit = store.get(key)
    return store, key, None if hit is None else _response(hit)


def remember(store: _Lru, key: tuple, response: Response) -> Response:
    if response.status_code == 200 and not response.direct_passthrough and not response.is_streamed:
        body = response.get_data()
        if len(body) <= store.max_bytes:
            store.put(key, (body, [(k, v) for k, v in response.headers.items()
                                   if k.lower() not in ("set-cookie", "content-length")]))
    return response


def answer(store: _Lru, key: tuple, compute: Callable[[], Response]) -> Response:
    """A missed answer, computed once per process however many ask for it at once.

    Every change (an audit queued, started or finished; new labels) moves the fingerprint,
    so every open dashboard misses at the same moment; without this each of the process's
    threads would render the same page side by side, each slower for the others. The
    first request computes; the others wait for its answer (up to ``_WAIT_SECONDS``) and
    compute their own only if it could not be kept.
    """
    with store.flights_lock:
        event = store.flights.get(key)
        leader = event is None
        if leader:
            event = store.flights[key] = threading.Event()
    if not leader:
        if event.wait(_WAIT_SECONDS):
            hit = store.get(key)
            if hit is not None:
                return _response(hit)
        return remember(store, key, compute())
    try:
        return remember(store, key, compute())
    finally:
        with store.flights_lock:
            store.flights.pop(key, None)
        event.set()


def cached(view):
    """Serve a GET page from the cache; the caller was authenticated into ``g.principal`` before."""

    @wraps(view)
    def wrapper(*args, **kwargs):
        found = lookup(g.get("principal"))
        if found is None:
            return view(*args, **kwargs)
        store, key, hit = found
        if hit is not None:
            return hit
        return answer(store, key, lambda: current_app.make_response(view(*args, **kwargs)))

    return wrapper


def init_app(app: Flask) -> None:
    entries = int(app.config.get("AUDITOR_RESPONSE_CACHE_ENTRIES", 512))
    if entries > 0:
        app.extensions["auditor.cache"] = _Lru(entries, int(app.config.get("AUDITOR_RESPONSE_CACHE_MAX_BYTES", 4 << 20)))
