"""The dashboards in a real headless Chromium (Debian's package, driven by Playwright).

Each test logs in through the form, opens a dashboard on seeded data (real ingestion +
real audits), checks that its charts were drawn, that no request left the host and
that the console stayed clean (a CSP violation would show there), and saves a
screenshot under ``test-artifacts/``.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from urllib.parse import quote

import pytest
from werkzeug.serving import make_server

from tests.web.conftest import PASSWORD, make_tenant

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("AUDITOR_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def server(app):
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()


@pytest.fixture(scope="module")
def browser():
    if shutil.which(CHROMIUM) is None:
        message = f"Chromium not found at {CHROMIUM} (Debian: apt-get install chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; CI=true: the browser tests must run", pytrace=False)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Watched:
    """A page whose requests, console errors and dialogs are recorded."""

    def __init__(self, browser, base: str):
        self.base = base
        self.context = browser.new_context(viewport={"width": 1200, "height": 900})
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def on_dialog(d):
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", on_dialog)

    def login(self, tenant, role="admin"):
        self.page.goto(self.base + "/login")
        self.page.fill("input[name=workspace]", tenant.slug)
        self.page.fill("input[name=email]", tenant.emails[role])
        self.page.fill("input[name=password]", PASSWORD)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state("load")
        assert "/login" not in self.page.url

    def open(self, path: str, shot: str, *, charts: int = 0):
        response = self.page.goto(self.base + path)
        assert response.status == 200, path
        if charts:
            self.page.wait_for_selector("figure.chart[data-rendered]", timeout=10_000)
            rendered = self.page.locator('figure.chart[data-rendered="true"]')
            assert rendered.count() >= charts, path
            assert self.page.locator('figure.chart[data-rendered="error"]').count() == 0
            assert self.page.locator("figure.chart svg path.series").count() >= charts
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=True)

    def check_clean(self):
        foreign = [u for u in self.requests if not (u.startswith(self.base + "/") or u.startswith("data:"))]
        assert not foreign, f"requests left the host: {foreign}"
        assert not self.errors, self.errors
        assert not self.dialogs, self.dialogs

    def close(self):
        self.context.close()


@pytest.fixture
def watched(browser, server):
    w = Watched(browser, server)
    yield w
    w.close()


def test_dashboards_render_their_charts_without_leaving_the_host(watched, seeded):
    watched.login(seeded.tenant)
    watched.open("/", "overview")
    assert watched.page.locator("table#datasets tbody tr").count() == 1
    assert watched.page.locator("table#releases tbody tr").count() == 1
    watched.open(f"/datasets/{seeded.dataset_id}", "dataset", charts=1)
    # Each power curve has its interval band and one marker per scored release.
    figures = watched.page.locator('figure.chart[data-rendered="true"]')
    for i in range(figures.count()):
        assert figures.nth(i).locator("svg path.band").count() == 1
        assert figures.nth(i).locator("svg g.marker").count() == len(seeded.release_ids)
    watched.open(f"/models/{seeded.model_id}", "model", charts=1)
    assert watched.page.locator("table#timeline tbody tr").count() == len(seeded.release_ids)
    # One certification badge per release on the timeline.
    badges = watched.page.locator("figure.chart svg circle.badge-yes, figure.chart svg circle.badge-no")
    assert badges.count() == len(seeded.release_ids)
    watched.open("/vendors/acme-labeling", "vendor", charts=1)
    assert watched.page.locator("table.annotators tbody tr").count() >= 1
    watched.open("/audit-runs", "audit-runs")
    assert watched.page.locator("table#runs tbody tr.status-succeeded").count() >= 1
    watched.check_clean()


def test_vendor_user_sees_only_its_own_page(watched, seeded):
    watched.login(seeded.tenant, role="vendor")
    assert watched.page.url.endswith("/vendors/acme-labeling")
    watched.open("/vendors/acme-labeling", "vendor-own", charts=1)
    response = watched.page.goto(watched.base + "/vendors/bolt-annotations")
    assert response.status == 404
    watched.errors.clear()  # the browser logs the 404 we asked for
    watched.page.goto(watched.base + f"/datasets/{seeded.dataset_id}")
    assert watched.page.url.endswith("/vendors/acme-labeling")
    watched.check_clean()


def test_new_workspace_shows_what_to_do(app, watched):
    tenant = make_tenant(app)
    watched.login(tenant)
    watched.open("/", "empty-overview")
    assert "Nothing here yet" in watched.page.content()
    watched.open("/audit-runs", "empty-audit-runs")
    assert "No audit has run yet" in watched.page.content()
    watched.check_clean()


def test_markup_in_names_is_shown_as_text_and_never_runs(app, watched):
    from tests.web.conftest import eager_audits

    evil = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    tenant = make_tenant(app, vendor=evil, extra_vendors=())
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": evil, "labels": [evil, "b"]}, headers=tenant.auth()).get_json()
    records = [{"item_id": f"{evil}{i}", "annotator_id": f"{evil}{j}", "label": [evil, "b"][(i * j) % 2],
                "vendor": evil} for i in range(8) for j in range(3)]
    with eager_audits(app):
        r = client.post(f"/api/v1/datasets/{ds['id']}/annotations", json={"records": records}, headers=tenant.auth())
        assert r.status_code == 202
    watched.login(tenant)
    watched.open("/", "xss-overview")
    assert evil in watched.page.inner_text("table#datasets")
    watched.open(f"/datasets/{ds['id']}", "xss-dataset")
    watched.open("/vendors/" + quote(evil, safe=""), "xss-vendor")
    assert watched.page.locator("img[src=x]").count() == 0
    watched.check_clean()
