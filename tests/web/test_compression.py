"""Responses are compressed for clients that accept it (brotli or gzip, as they prefer), only text
and only above a size, never to a cross-site request that carries the session (BREACH), and
the API docs page, 2.08 MB before, travels in a fraction of that."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import brotli
import pytest

from tests.web.conftest import login, make_tenant

pytestmark = pytest.mark.services

STATIC = Path(__file__).resolve().parents[2] / "auditor" / "web" / "static"
BUNDLE = "/static/vendor/swagger-ui/swagger-ui-bundle.js"


def _decoded(r) -> bytes:
    body = r.get_data()
    encoding = r.headers.get("Content-Encoding")
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "br":
        return brotli.decompress(body)
    assert encoding is None, encoding
    return body


@pytest.mark.parametrize("accept, expected", [("gzip", "gzip"), ("br", "br"), ("gzip, deflate, br, zstd", "br"),
                                              ("br;q=0.5, gzip", "gzip"), ("identity", None), ("", None),
                                              ("compress", None)])
def test_static_files_are_compressed_as_the_client_asks(client, accept, expected):
    r = client.get(BUNDLE, headers={"Accept-Encoding": accept})
    assert r.status_code == 200
    assert r.headers.get("Content-Encoding") == expected
    assert "Accept-Encoding" in r.headers["Vary"]
    original = (STATIC / "vendor/swagger-ui/swagger-ui-bundle.js").read_bytes()
    assert _decoded(r) == original
    assert int(r.headers["Content-Length"]) == len(r.get_data())
    if expected:
        assert len(r.get_data()) < 0.35 * len(original)
        # Revalidating with the compressed copy's ETag is a 304.
        again = client.get(BUNDLE, headers={"Accept-Encoding": accept, "If-None-Match": r.headers["ETag"]})
        assert again.status_code == 304 and not again.get_data()


def test_hostile_accept_encoding_never_fails(client):
    for header in ("gzip;q=abc", "*;q=x, br;q=", ";;;,,,", "gzip;q=0", "*", "x" * 4000):
        r = client.get(BUNDLE, headers={"Accept-Encoding": header})
        assert r.status_code == 200, header
        assert len(_decoded(r)) == (STATIC / "vendor/swagger-ui/swagger-ui-bundle.js").stat().st_size


def test_pages_and_api_answers_are_compressed_but_not_for_cross_site_requests(app):
    tenant = make_tenant(app)
    client = app.test_client()
    login(client, tenant)
    page = client.get("/alerts?status=all", headers={"Accept-Encoding": "gzip"})
    assert page.headers["Content-Encoding"] == "gzip" and b"<h1>Alerts</h1>" in _decoded(page)
    assert "Accept-Encoding" in page.headers["Vary"]
    # A request another site started (a link, a form, an image) gets the page as it is.
    cross = client.get("/alerts?status=all", headers={"Accept-Encoding": "gzip", "Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 200 and "Content-Encoding" not in cross.headers
    assert "Accept-Encoding" in cross.headers["Vary"]
    same = client.get("/alerts?status=all", headers={"Accept-Encoding": "gzip", "Sec-Fetch-Site": "same-origin"})
    assert same.headers["Content-Encoding"] == "gzip"
    doc = client.get("/api/v1/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert doc.headers["Content-Encoding"] == "gzip" and _decoded(doc).startswith(b"{")
    # Small answers go as they are.
    small = client.get("/api/v1/datasets", headers={"Accept-Encoding": "gzip", **tenant.auth()})
    assert len(small.get_data()) < 1024 and "Content-Encoding" not in small.headers
    # Brotli for a client that prefers it.
    doc = client.get("/api/v1/openapi.json", headers={"Accept-Encoding": "br"})
    assert doc.headers["Content-Encoding"] == "br" and _decoded(doc).startswith(b"{")


def test_the_api_docs_page_travels_compressed(client):
    """Everything the API docs page loads, as a browser asks for it (brotli) and as it was (none)."""
    page = client.get("/api/v1/docs")
    assets = [*re.findall(r'(?:src|href)="(/static/[^"]+)"', page.get_data(as_text=True)), "/api/v1/openapi.json"]
    plain = len(page.get_data()) + sum(len(client.get(a).get_data()) for a in assets)
    accept = {"Accept-Encoding": "gzip, deflate, br, zstd"}
    sent = len(client.get("/api/v1/docs", headers=accept).get_data()) + sum(
        len(client.get(a, headers=accept).get_data()) for a in assets)
    print(f"API docs page: {plain} bytes as they are, {sent} bytes compressed")
    assert plain > 1_900_000
    assert sent < 0.25 * plain
