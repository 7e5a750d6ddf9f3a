"""Every documented web setting takes effect when set in the environment.

Before, ``create_app`` hard-coded the rate limits and cache sizes: with
``AUDITOR_INGEST_LIMIT="100000 per minute"`` set, the limit was still 60.
"""

from __future__ import annotations

import pytest

from auditor.config import load_settings
from auditor.web import create_app
from tests.web.conftest import PASSWORD, app_config, csrf_token, make_tenant

pytestmark = pytest.mark.services

OVERRIDDEN = ("AUDITOR_INGEST_LIMIT", "AUDITOR_LOGIN_LIMIT", "AUDITOR_SCORE_LIMIT")


def _app(pg_engine, monkeypatch, **env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = {k: v for k, v in app_config(pg_engine).items() if k not in OVERRIDDEN}
    return create_app(config)


def _statuses(send, n):
    return [send().status_code for _ in range(n)]


def test_ingest_limit(pg_engine, monkeypatch):
    app = _app(pg_engine, monkeypatch, AUDITOR_INGEST_LIMIT="2 per minute")
    tenant = make_tenant(app)
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "lim", "labels": ["a", "b"]}, headers=tenant.auth()).get_json()
    body = "item_id,annotator_id,label\ni1,w1,a\n"
    codes = _statuses(lambda: client.post(f"/api/v1/datasets/{ds['id']}/annotations", data=body,
                                          headers={**tenant.auth(), "Content-Type": "text/csv"}), 3)
    assert 429 in codes and codes.count(202) + codes.count(200) + codes.count(400) <= 2


def test_score_limit(pg_engine, monkeypatch):
    app = _app(pg_engine, monkeypatch, AUDITOR_SCORE_LIMIT="2 per minute", AUDITOR_SCORE_ANONYMOUS="true")
    client = app.test_client()
    send = lambda: client.post("/api/score", json={"labelCounts": [[1, 3], [4, 0]], "metrics": ["accuracy"]})  # noqa: E731
    codes = _statuses(send, 3)  # the limiter may share counts with other apps of this test session
    assert codes[-1] == 429 and codes.count(200) <= 2


def test_login_limit(pg_engine, monkeypatch):
    app = _app(pg_engine, monkeypatch, AUDITOR_LOGIN_LIMIT="2 per minute")
    client = app.test_client()
    token = csrf_token(client.get("/login").get_data(as_text=True))
    send = lambda: client.post("/login", data={"csrf_token": token, "workspace": "x", "email": "y", "password": "z"})  # noqa: E731
    codes = _statuses(send, 3)
    assert codes[-1] == 429 and codes.count(401) <= 2


def test_a_generous_limit_is_honoured(pg_engine, monkeypatch):
    app = _app(pg_engine, monkeypatch, AUDITOR_SCORE_LIMIT="100000 per minute", AUDITOR_SCORE_ANONYMOUS="true")
    client = app.test_client()
    send = lambda: client.post("/api/score", json={"labelCounts": [[1, 3]], "metrics": ["accuracy"]})  # noqa: E731
    assert 429 not in _statuses(send, 70)


def test_score_anonymous(pg_engine, monkeypatch):
    body = {"labelCounts": [[1, 3], [4, 0]], "metrics": ["accuracy"]}
    closed = _app(pg_engine, monkeypatch, AUDITOR_SCORE_ANONYMOUS="false")
    r = closed.test_client().post("/api/score", json=body)
    assert r.status_code == 401 and r.get_json()[0]["error"] == "Unauthorized"
    assert "AUDITOR_SCORE_ANONYMOUS" in r.get_json()[0]["message"]
    tenant = make_tenant(closed)
    assert closed.test_client().post("/api/score", json=body, headers=tenant.auth()).status_code == 200
    opened = _app(pg_engine, monkeypatch, AUDITOR_SCORE_ANONYMOUS="true")
    assert opened.test_client().post("/api/score", json=body).status_code == 200
    monkeypatch.setenv("AUDITOR_SCORE_ANONYMOUS", "maybe")
    with pytest.raises(ValueError, match="AUDITOR_SCORE_ANONYMOUS"):
        load_settings()


def test_response_cache_settings(pg_engine, monkeypatch):
    off = _app(pg_engine, monkeypatch, AUDITOR_RESPONSE_CACHE_ENTRIES="0")
    assert "auditor.cache" not in off.extensions
    small = _app(pg_engine, monkeypatch, AUDITOR_RESPONSE_CACHE_ENTRIES="7", AUDITOR_RESPONSE_CACHE_MAX_BYTES="10")
    store = small.extensions["auditor.cache"]
    assert (store.entries, store.max_bytes) == (7, 10)


def _session_cookie(app, **kw) -> str:
    """The session cookie the login page sets (it stores the CSRF token in the session)."""
    r = app.test_client().get("/login", **kw)
    assert r.status_code == 200
    return next(v for k, v in r.headers.items() if k.lower() == "set-cookie" and v.startswith("session="))


def test_session_cookie_secure_and_proxy(pg_engine, monkeypatch):
    always = _app(pg_engine, monkeypatch, AUDITOR_SESSION_COOKIE_SECURE="true")
    assert "Secure" in _session_cookie(always)
    never = _app(pg_engine, monkeypatch, AUDITOR_SESSION_COOKIE_SECURE="false")
    assert "Secure" not in _session_cookie(never, base_url="https://localhost")
    auto = _app(pg_engine, monkeypatch, AUDITOR_SESSION_COOKIE_SECURE="auto")
    assert "Secure" not in _session_cookie(auto)
    assert "Secure" in _session_cookie(auto, base_url="https://localhost")
    # Behind a TLS-terminating proxy: its header is trusted only when AUDITOR_PROXY_COUNT says so.
    forwarded = {"headers": {"X-Forwarded-Proto": "https"}}
    assert "Secure" not in _session_cookie(auto, **forwarded)
    proxied = _app(pg_engine, monkeypatch, AUDITOR_SESSION_COOKIE_SECURE="auto", AUDITOR_PROXY_COUNT="1")
    assert "Secure" in _session_cookie(proxied, **forwarded)
    # and a login over HTTPS keeps its session
    tenant = make_tenant(auto)
    client = auto.test_client()
    token = csrf_token(client.get("/login", base_url="https://localhost").get_data(as_text=True))
    r = client.post("/login", base_url="https://localhost", headers={"Referer": "https://localhost/login"}, data={
        "csrf_token": token, "workspace": tenant.slug, "email": tenant.emails["admin"], "password": PASSWORD})
    assert r.status_code == 302 and client.get("/", base_url="https://localhost").status_code == 200


def test_max_upload_bytes(pg_engine, monkeypatch):
    app = _app(pg_engine, monkeypatch, AUDITOR_MAX_UPLOAD_BYTES="64", AUDITOR_SCORE_ANONYMOUS="true")
    client = app.test_client()
    r = client.post("/api/score", json={"labelCounts": [[1, 3]] * 40, "metrics": ["accuracy"]})
    assert r.status_code == 413


@pytest.mark.parametrize(("name", "value"), [
    ("AUDITOR_INGEST_LIMIT", "lots"), ("AUDITOR_RESPONSE_CACHE_ENTRIES", "-1"),
    ("AUDITOR_SESSION_COOKIE_SECURE", "maybe"), ("AUDITOR_PROXY_COUNT", "x"),
])
def test_a_bad_value_is_refused_at_start_naming_the_variable(name, value):
    with pytest.raises(ValueError, match=name):
        load_settings({name: value})
