"""After a change every open dashboard misses the response cache at once: the process
renders each missed answer once, and the other requests for it wait for that answer."""

from __future__ import annotations

import threading
import time

from flask import Response

from auditor.web.cache import _Lru, answer


def _race(store, key, compute, n=8):
    start = threading.Barrier(n)
    out = [None] * n

    def ask(i):
        start.wait()
        out[i] = answer(store, key, compute)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _counted(calls, seconds, make):
    """A renderer that records each call and takes ``seconds``."""

    def render():
        calls.append(1)
        time.sleep(seconds)
        return make()

    return render


def test_concurrent_misses_of_one_key_render_it_once():
    store, calls = _Lru(16, 1 << 20), []
    render = _counted(calls, 0.3, lambda: Response("page", status=200, headers={"X-Rendered": str(len(calls))}))
    out = _race(store, ("w", "/vendor/1", "v1"), render)
    assert len(calls) == 1
    assert {r.get_data(as_text=True) for r in out} == {"page"}
    assert {r.headers["X-Rendered"] for r in out} == {"1"}
    assert not store.flights
    # Another key (e.g. after the fingerprint moved) renders again.
    _race(store, ("w", "/vendor/1", "v2"), render)
    assert len(calls) == 2


def test_an_answer_that_cannot_be_kept_is_rendered_by_each_request():
    store, calls = _Lru(16, 1 << 20), []
    out = _race(store, ("w", "/x", "v1"), _counted(calls, 0.1, lambda: Response("busy", status=503)), n=4)
    assert len(calls) == 4 and {r.status_code for r in out} == {503}
    assert not store.flights


def test_a_leader_that_raises_lets_the_others_render():
    store = _Lru(16, 1 << 20)
    calls = []
    lock = threading.Lock()

    def flaky():
        with lock:
            calls.append(1)
            first = len(calls) == 1
        time.sleep(0.1)
        if first:
            raise RuntimeError("database went away")
        return Response("page", status=200)

    errors = []

    def ask():
        try:
            answer(store, ("w", "/y", "v1"), flaky)
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 1
    assert store.get(("w", "/y", "v1")) is not None
    assert not store.flights
