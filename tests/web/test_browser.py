"""The dashboards in a real headless Chromium (Debian's package, driven by Playwright).

Each test logs in through the form, opens a dashboard on seeded data (real ingestion +
real audits), checks that its charts were drawn, that no request left the host and
that the console stayed clean (a CSP violation would show there), and saves a
screenshot under ``test-artifacts/``.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import quote

import pytest
from werkzeug.serving import make_server

from tests.web.conftest import PASSWORD, make_tenant
from tests.web.quality_history import annotators_of, seed_history

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


def test_quality_over_time_pages_chart_dates_bands_changes_and_sort(app, watched):
    """Weekly quality: the overview's change badge, the vendor page's time chart (dates on the
    axis, 95% bands, the change marked where it started), its annotator table sorted by a
    click on a heading, and an annotator's own page."""
    history = seed_history(app)
    page = watched.page
    watched.login(history.tenant)
    watched.open("/", "quality-overview")
    badge = page.locator('table#vendors tr[data-vendor="acme-labeling"] .badge.change')
    assert badge.count() == 1 and badge.inner_text().startswith("change detected: drop since 2026-")
    assert page.locator('table#vendors tr[data-vendor="crowdworks"] .badge.change').count() == 0

    watched.open("/vendors/acme-labeling", "quality-vendor", charts=2)
    chart = page.locator('figure[data-chart="chart-quality-1"][data-rendered="true"]')
    assert chart.count() == 1
    ticks = chart.locator("svg text.x-tick").all_text_contents()
    assert len(ticks) >= 3 and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", t) for t in ticks), ticks
    assert ticks[0] == "2026-01-05" and ticks == sorted(ticks)
    assert chart.locator("svg path.band").count() == 2  # agreement and gold accuracy, each with its interval
    assert chart.locator("svg path.series").count() == 2
    vline = chart.locator("svg g.vline")
    assert vline.count() == 1
    label = vline.locator("text.vline-label").text_content()
    start = re.search(r"drop from (\d{4}-\d{2}-\d{2})", label).group(1)
    # The marker stands on the week the change started: at that week's point.
    x = float(vline.locator("line").get_attribute("x1"))
    point = chart.locator("svg circle.point", has=page.locator(f'title:text-matches("^week of {start}, agreement")'))
    assert point.count() == 1 and abs(float(point.get_attribute("cx")) - x) < 0.01
    legend = chart.locator("ul.legend").inner_text()
    assert "agreement" in legend and "gold" in legend

    table = page.locator("table#annotators-1")
    assert table.get_attribute("data-sortable") == "true"

    def order():
        return table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.annotator)")

    def values(column):
        return table.locator(f"tbody tr td:nth-child({column})").evaluate_all(
            "cells => cells.map(c => parseFloat(c.dataset.sortValue))")

    assert order() == annotators_of("acme-labeling")
    heading = table.locator("thead th", has_text="agreement, latest week")
    heading.locator("button").click()
    assert heading.get_attribute("aria-sort") == "ascending"
    assert values(2) == sorted(values(2))
    ascending = order()
    heading.locator("button").click()
    assert heading.get_attribute("aria-sort") == "descending"
    assert values(2) == sorted(values(2), reverse=True)
    # The rows moved: one order is the other reversed (so at least one differs from the names' order).
    assert order() == ascending[::-1] != ascending
    gold = table.locator("thead th", has_text="gold accuracy, latest week")
    gold.locator("button").click()
    assert gold.get_attribute("aria-sort") == "ascending" and heading.get_attribute("aria-sort") is None
    assert values(3) == sorted(values(3))
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "quality-vendor-sorted.png"), full_page=True)

    # Each annotator links to its own page.
    first = order()[0]
    table.locator(f'tbody tr[data-annotator="{first}"] a').click()
    page.wait_for_load_state("load")
    assert page.url.endswith(f"/datasets/{history.dataset_id}/annotators/{first}")
    watched.open(f"/datasets/{history.dataset_id}/annotators/bolt-02", "quality-annotator", charts=1)
    chart = page.locator('figure[data-chart="chart-annotator"][data-rendered="true"]')
    assert chart.locator("svg path.band").count() == 2 and chart.locator("svg g.vline").count() == 1
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", t) for t in chart.locator("svg text.x-tick").all_text_contents())
    assert page.locator("table#annotator-changes tbody tr").count() == 1
    assert int(page.inner_text("#items-labelled")) > 0
    watched.check_clean()
