"""A link to a page, followed while logged out, lands on that very page (path and query) after
logging in; only a path of this site is followed (no open redirect)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from tests.web.conftest import PASSWORD, csrf_token, make_tenant

pytestmark = pytest.mark.services


def _log_in_from(client, tenant, target: str):
    """Open ``target`` logged out, follow the redirect to the form, log in there; the answer."""
    r = client.get(target)
    assert r.status_code == 302
    form = r.headers["Location"]
    assert urlsplit(form).path == "/login"
    token = csrf_token(client.get(form).get_data(as_text=True))
    return client.post(form, data={"csrf_token": token, "workspace": tenant.slug,
                                   "email": tenant.emails["admin"], "password": PASSWORD})


@pytest.mark.parametrize("target", [
    "/alerts?severity=critical&status=all",
    "/alerts?status=all&severity=warning&kind=vendor_quality_changed&sort=severity&dir=asc&page=2",
    "/vendors/acme%20labeling?dataset_id=3",
    "/vendors/a%20b%3Fc%25d?x=%26y",
    "/audit-runs",
])
def test_a_filtered_link_survives_login(app, target):
    tenant = make_tenant(app)
    client = app.test_client()
    r = _log_in_from(client, tenant, target)
    assert r.status_code == 302
    assert r.headers["Location"] == target
    # ... and the page it names answers (the vendor pages may have no data).
    assert client.get(r.headers["Location"]).status_code in (200, 404)


def test_the_login_form_carries_the_whole_target(app):
    client = app.test_client()
    r = client.get("/alerts?severity=critical&status=all")
    (nxt,) = parse_qs(urlsplit(r.headers["Location"]).query)["next"]
    assert nxt == "/alerts?severity=critical&status=all"
