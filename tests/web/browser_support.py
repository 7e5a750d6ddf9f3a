"""Driving the dashboards in a real headless Chromium (Debian's package, through Playwright).

The fixtures serve the session's app (PostgreSQL, Redis) on a local port and open pages
whose requests, console errors and dialogs are recorded. Chart helpers read the uPlot
instance that ``charts.js`` keeps on each figure, to find where a data point is drawn,
and hover it as a user would.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from tests.web.conftest import PASSWORD

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

    def __init__(self, browser, base: str, width: int = 1200, height: int = 900):
        self.base = base
        self.width = width
        self.context = browser.new_context(viewport={"width": width, "height": height})
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

    def login(self, slug: str, email: str, password: str = PASSWORD):
        self.page.goto(self.base + "/login")
        self.page.fill("input[name=workspace]", slug)
        self.page.fill("input[name=email]", email)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state("load")
        assert "/login" not in self.page.url

    def login_tenant(self, tenant, role="admin"):
        self.login(tenant.slug, tenant.emails[role])

    def open(self, path: str, shot: str | None = None, *, charts: int = 0, status: int = 200):
        response = self.page.goto(self.base + path)
        assert response.status == status, (path, response.status)
        self.settle(charts, path)
        if shot:
            self.shot(shot)

    def settle(self, charts: int = 0, what: str = ""):
        """Wait until every chart of the page is drawn (or failed); at least ``charts`` drawn."""
        self.page.wait_for_load_state("load")
        if self.page.locator("figure.chart").count():
            self.page.wait_for_function(
                "[...document.querySelectorAll('figure.chart')].every(f => f.hasAttribute('data-rendered'))",
                timeout=10_000)
        assert self.page.locator('figure.chart[data-rendered="error"]').count() == 0, what
        drawn = self.page.locator('figure.chart[data-rendered="true"]')
        assert drawn.count() >= charts, what
        for i in range(drawn.count()):
            assert drawn.nth(i).locator(".uplot canvas").count() >= 1, what

    def shot(self, name: str, *, full_page: bool = True):
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def document_width(self) -> int:
        return self.page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")

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


# --- charts ---------------------------------------------------------------------------------------

_SERIES = """(args) => {
  const [selector, kinds] = args;
  const fig = document.querySelector(selector);
  return fig._chart.roles.map((r, i) => ({i, role: r.role, name: r.name || null, lo: r.lo === undefined ? null : r.lo,
    shown: fig._chart.uplot.series[i].show,
    points: fig._chart.uplot.data[i].map((v, j) => v === null ? null : [fig._chart.uplot.data[0][j], v])
      .filter(p => p !== null)})).filter(s => kinds.includes(s.role));
}"""

_POSITION = """(args) => {
  const [selector, seriesIdx, x, y] = args;
  const u = document.querySelector(selector)._chart.uplot;
  const r = u.over.getBoundingClientRect();
  return [r.left + u.valToPos(x, 'x'), r.top + u.valToPos(y, 'y')];
}"""


def series(page, figure: str, kinds=("series", "marker", "badge")) -> list[dict]:
    """The chart's series as drawn: role, name, whether shown, and its (x, y) points."""
    return page.evaluate(_SERIES, [figure, list(kinds)])


def hover(page, figure: str, series_index: int, x: float, y: float) -> str:
    """Move the mouse onto the point (x, y) of a series and return the tooltip's text."""
    page.locator(f"{figure} .u-over").scroll_into_view_if_needed()  # the mouse only reaches the viewport
    left, top = page.evaluate(_POSITION, [figure, series_index, x, y])
    page.mouse.move(left, top)
    tip = page.locator(f"{figure} .chart-tip")
    tip.wait_for(state="visible", timeout=5_000)
    return tip.inner_text()


def x_ticks(page, figure: str) -> list[str]:
    return json.loads(page.get_attribute(figure, "data-x-ticks") or "[]")


def optimise_png(source: Path, target: Path, *, colors: int = 96) -> int:
    """A smaller copy of a screenshot (a palette of ``colors``; the dashboards' flat colours survive)."""
    from PIL import Image

    target.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(source) as im:
        im.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT,
                                   dither=Image.Dither.NONE).save(target, optimize=True)
    return target.stat().st_size
