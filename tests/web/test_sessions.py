"""Sessions end on the server (issue 33, defect 7): a session cookie captured before a logout,
a deactivation or a new password reads nothing afterwards, and reactivating a user does not
revive its old sessions. Through the real app on PostgreSQL."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tests.web.conftest import PASSWORD, csrf_token, login, make_tenant

pytestmark = pytest.mark.services


def _captured(app, client) -> object:
    """Another browser holding a copy of ``client``'s session cookie (as a thief would)."""
    thief = app.test_client()
    thief.set_cookie("session", client.get_cookie("session").value)
    return thief


def _reads(client) -> tuple[int, int]:
    return client.get("/").status_code, client.get("/api/v1/datasets").status_code


def test_a_cookie_captured_before_logout_reads_nothing_after_it(app):
    tenant = make_tenant(app)
    client = app.test_client()
    assert login(client, tenant, "viewer").status_code == 302
    thief = _captured(app, client)
    assert _reads(thief) == (200, 200)
    page = client.get("/").get_data(as_text=True)
    assert client.post("/logout", data={"csrf_token": csrf_token(page)}).status_code == 302
    assert _reads(client)[1] == 401
    assert _reads(thief) == (302, 401)
    # Logging in again works, with a new session.
    assert login(client, tenant, "viewer").status_code == 302 and _reads(client) == (200, 200)
    assert _reads(thief) == (302, 401)


def test_deactivation_ends_sessions_and_reactivation_does_not_revive_them(app):
    tenant = make_tenant(app)
    client = app.test_client()
    assert login(client, tenant, "analyst").status_code == 302
    thief = _captured(app, client)
    admin = app.test_client()
    uid = tenant.user_ids["analyst"]
    assert admin.post(f"/api/v1/users/{uid}/deactivate", headers=tenant.auth()).status_code == 200
    assert _reads(thief) == (302, 401)
    assert admin.post(f"/api/v1/users/{uid}/reactivate", headers=tenant.auth()).status_code == 200
    assert _reads(thief) == (302, 401) and _reads(client) == (302, 401)
    assert login(client, tenant, "analyst").status_code == 302 and _reads(client) == (200, 200)


def test_a_new_password_ends_the_sessions_opened_with_the_old(app, pg_engine, monkeypatch):
    from auditor.cli import main

    tenant = make_tenant(app)
    client = app.test_client()
    assert login(client, tenant, "viewer").status_code == 302
    thief = _captured(app, client)
    monkeypatch.setenv("AUDITOR_DATABASE_URL", pg_engine.url.render_as_string(hide_password=False))
    out = CliRunner().invoke(main, ["users", "create", "--workspace", tenant.slug, "--email",
                                    tenant.emails["viewer"], "--role", "viewer", "--password", PASSWORD + "!"],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert _reads(thief) == (302, 401)
