"""Every page of the seeded demo workspace in a real headless Chromium, wide and narrow.

The workspace is the one ``auditor demo`` seeds (two datasets, four vendors and an expert
panel, gold labels, four releases), imported and audited for real into the session's
PostgreSQL database. Each page is opened at 1400 px and at 390 px (a phone): no request
leaves the host, the console stays clean (a CSP violation would show there), every chart
is drawn, and at 390 px the document is no wider than the screen. On the way: hovering
a chart point shows its exact value, clicking a column heading re-sorts a table, and
acknowledging an alert (a form post with its CSRF token) takes it off the open list.
Screenshots go to ``test-artifacts/demo/``; the README's three come from here, made
smaller, in ``test-artifacts/readme/``.
"""

from __future__ import annotations

import json
import re
import uuid
from urllib.parse import quote

import pytest
from sqlalchemy import select

from tests.web import browser_support
from tests.web.browser_support import ARTIFACTS, Watched, hover, optimise_png, series
from tests.web.conftest import PASSWORD

# The browser fixtures (shared with the other browser tests).
browser = browser_support.browser
server = browser_support.server

pytestmark = pytest.mark.services

WIDE, NARROW = 1400, 390


@pytest.fixture(scope="module")
def demo(app):
    """The demo workspace, seeded and audited as ``auditor demo --no-serve`` does (once per database)."""
    from auditor.audit import runner
    from auditor.audit.pipeline import AuditOptions
    from auditor.cli.demo import ADMIN, WORKSPACE, seed
    from auditor.config import load_worker_settings
    from auditor.db import Workspace, make_session_factory, session_scope

    factory = make_session_factory(app.extensions["auditor.engine"])
    with session_scope(factory) as session:
        dataset_ids, _ = seed(session, items=2000, seed_value=7, password=PASSWORD)
    w = load_worker_settings()
    for dataset_id in dataset_ids:
        outcome = runner.run_audit(factory, dataset_id, task_id=f"demo-{uuid.uuid4().hex}",
                                   options=AuditOptions.from_settings(w), lease=w.lease)
        assert outcome.state in ("succeeded", "current"), outcome
    with factory() as session:
        ws = session.scalar(select(Workspace).where(Workspace.slug == WORKSPACE))
    return {"slug": WORKSPACE, "email": ADMIN, "workspace_id": ws.id, "factory": factory}


def _pages(app, demo) -> list[tuple[str, str]]:
    """(name, path) of every page of the workspace: each dataset, its items (all, and those
    annotators disagree on), one item, its imports, its annotators' leaderboard, each audit run, vendor
    (on each of its datasets), one annotator of each vendor on each dataset, model, release,
    comparisons of two and three releases, the lists, an alert, the admin pages and the API docs."""
    from auditor.db import (
        Alert,
        Annotator,
        AuditRun,
        Dataset,
        Item,
        Model,
        QualityWindow,
        Release,
        VendorReport,
    )

    w = demo["workspace_id"]
    with demo["factory"]() as db:
        datasets = db.execute(select(Dataset.id, Dataset.name).where(Dataset.workspace_id == w)
                              .order_by(Dataset.name)).all()
        ids = [d for d, _ in datasets]
        runs = db.scalars(select(AuditRun.id).where(AuditRun.dataset_id.in_(ids)).order_by(AuditRun.id)).all()
        vendors = db.execute(select(VendorReport.vendor, AuditRun.dataset_id)
                             .join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
                             .where(AuditRun.dataset_id.in_(ids)).distinct()).all()
        vendor_of = dict(db.execute(select(Annotator.external_id, Annotator.vendor)
                                    .where(Annotator.workspace_id == w)).all())
        windows = db.execute(select(QualityWindow.dataset_id, QualityWindow.group_name)
                             .where(QualityWindow.dataset_id.in_(ids), QualityWindow.grouping == "annotator")
                             .distinct()).all()
        first: dict[tuple, str] = {}
        for d, a in sorted(windows, key=lambda r: (r[0], r[1])):
            first.setdefault((vendor_of.get(a), d), a)
        people = [(v, d, a) for (v, d), a in first.items()]
        models = db.scalars(select(Model.id).where(Model.workspace_id == w)).all()
        releases = db.execute(select(Release.id, Release.version).where(Release.model_id.in_(models))
                              .order_by(Release.released_at, Release.id)).all()
        alerts = db.scalars(select(Alert.id).where(Alert.workspace_id == w).order_by(Alert.id).limit(1)).all()
        # One item per dataset that annotators disagree on (its page), found by key order.
        items = {}
        for d in ids:
            for ext, counts in db.execute(select(Item.external_id, Item.label_counts).where(Item.dataset_id == d)
                                          .order_by(Item.external_id).limit(200)):
                if sum(1 for n in counts or [] if n) > 1:
                    items[d] = ext
                    break
    names = dict(datasets)
    pages = [("overview", "/"), ("alerts", "/alerts"), ("alerts-all", "/alerts?status=all"),
             ("audit-runs", "/audit-runs"), ("vendors", "/vendors"), ("compare-pick", "/compare"),
             ("access", "/access"), ("api-docs", "/api/v1/docs")]
    if "webhooks_ui.webhooks" in app.view_functions:
        pages.append(("webhooks", "/webhooks"))
    pages += [(f"dataset-{names[d]}", f"/datasets/{d}") for d in ids]
    pages += [(f"items-{names[d]}", f"/datasets/{d}/items") for d in ids]
    pages += [(f"imports-{names[d]}", f"/datasets/{d}/imports") for d in ids]
    pages += [("alerting", "/alerting")] + [(f"alert-{a}", f"/alerts/{a}") for a in alerts]
    pages += [(f"items-disagreement-{names[d]}", f"/datasets/{d}/items?show=disagreement") for d in ids]
    pages += [(f"item-{names[d]}", f"/datasets/{d}/items/{quote(items[d], safe='')}") for d in ids if d in items]
    pages += [(f"leaderboard-{names[d]}", f"/datasets/{d}/leaderboard") for d in ids]
    pages += [(f"run-{r}", f"/audit-runs/{r}") for r in runs]
    pages += [(f"vendor-{v}-{names[d]}", f"/vendors/{quote(v, safe='')}?dataset_id={d}") for v, d in sorted(vendors)]
    pages += [(f"annotator-{a}-{names[d]}", f"/datasets/{d}/annotators/{quote(a, safe='')}")
              for _v, d, a in sorted(people)]
    pages += [(f"model-{m}", f"/models/{m}") for m in models]
    pages += [(f"release-{v}", f"/releases/{r}") for r, v in releases]
    (a, va), (b, vb) = releases[-2:]
    pages.append((f"compare-{va}-{vb}", f"/compare?a={a}&b={b}"))
    pages.append(("compare-three", "/compare?" + "&".join(f"r={r}" for r, _ in releases[-3:])))
    pages.append(("overview-30-days", "/?range=30d"))
    return [(re.sub(r"[^a-z0-9.]+", "-", n.lower()), p) for n, p in pages]


@pytest.fixture(scope="module")
def pages(app, demo):
    return _pages(app, demo)


@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_every_demo_page_stays_on_the_host_draws_its_charts_and_fits_the_screen(browser, server, demo, pages, width):
    from auditor.web.security import CONTENT_SECURITY_POLICY

    w = Watched(browser, server, width=width)
    try:
        w.page.goto(server + "/login")
        w.settle()
        w.shot(f"demo/login-{width}")
        assert w.document_width() <= width
        w.login(demo["slug"], demo["email"])
        seen_charts = 0
        for name, path in pages:
            response = w.page.goto(server + path)
            assert response.status == 200, path
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            if name == "api-docs":
                w.page.wait_for_selector("#swagger-ui[data-ready]", timeout=20_000)
                assert w.page.locator("#swagger-ui .opblock").count() > 10
            w.settle(what=path)
            seen_charts += w.page.locator('figure.chart[data-rendered="true"]').count()
            w.shot(f"demo/{name}-{width}")
            if width == NARROW:
                assert w.document_width() <= width, (path, w.document_width())
            else:  # the content takes the window (no cap near 1210 px)
                assert w.page.evaluate("document.querySelector('main').clientWidth") >= width - 20, path
            if name == "vendors" and width == WIDE:
                # Every column in view at 1400 px, the detected change second.
                wrap = w.page.locator("table#vendors-index").locator("xpath=..")
                scroll, shown = wrap.evaluate("e => [e.scrollWidth, e.clientWidth]")
                assert scroll <= shown, (scroll, shown)
                assert w.page.locator("table#vendors-index thead th").nth(1).get_attribute("data-column") == "change"
            assert not w.errors, (path, w.errors)
        assert seen_charts >= 15
        w.check_clean()
    finally:
        w.close()


def test_hovering_a_demo_chart_shows_the_value_the_api_has(browser, server, demo, pages):
    """The vendor that got worse: its chart at the week the drop started shows the stored window's
    value and interval; the comparison's L point shows L and its interval as the table does."""
    from auditor.db import Dataset, QualityChange, QualityWindow

    with demo["factory"]() as db:
        change = db.scalar(select(QualityChange).join(Dataset, QualityChange.dataset_id == Dataset.id)
                           .where(Dataset.workspace_id == demo["workspace_id"], QualityChange.grouping == "vendor"))
        window = db.scalar(select(QualityWindow).where(
            QualityWindow.dataset_id == change.dataset_id, QualityWindow.grouping == "vendor",
            QualityWindow.group_name == change.group_name, QualityWindow.metric == "agreement",
            QualityWindow.window_start == change.start))
    assert change.group_name == "bolt-annotations"
    w = Watched(browser, server, width=WIDE)
    try:
        w.login(demo["slug"], demo["email"])
        w.open(f"/vendors/{change.group_name}?dataset_id={change.dataset_id}", charts=2)
        figure = 'figure[data-chart="chart-quality-1"]'
        agreement = series(w.page, figure)[0]
        x = int(change.start.timestamp() * 1000)
        y = next(v for px, v in agreement["points"] if px == x)
        text = hover(w.page, figure, agreement["i"], x, y)
        assert text.splitlines()[0] == f"week of {change.start:%Y-%m-%d}"
        assert f"{window.value:.3f} [{window.low:.3f}, {window.high:.3f}]" in text
        w.shot("demo/hover-vendor")

        compare = next(p for n, p in pages if n.startswith("compare-") and n != "compare-pick")
        w.open(compare, charts=2)
        figure = 'figure[data-chart="chart-compare"]'
        lower = next(s for s in series(w.page, figure) if s["name"].startswith("L "))
        x, y = lower["points"][-1]
        text = hover(w.page, figure, lower["i"], x, y)
        cell = w.page.locator('table#comparison tr[data-row="l"] td').nth(1).inner_text().strip()
        assert f"L (model lower bound): {cell}" in text
        w.shot("demo/hover-compare")
        w.check_clean()
    finally:
        w.close()


def test_sorting_a_demo_table_reorders_it(browser, server, demo):
    w = Watched(browser, server, width=WIDE)
    try:
        w.login(demo["slug"], demo["email"])
        w.open("/vendors")
        table = w.page.locator("table#vendors-index")

        def rows():
            return table.locator("tbody tr").evaluate_all(
                "rs => rs.map(r => r.dataset.vendor + ' / ' + r.dataset.dataset)")

        def u_t():
            return [float(t) for t in table.locator('tbody tr td[data-label="U_t"]').all_inner_texts()]

        before = rows()
        table.locator('thead th[data-column="u_t"] a.sort').click()
        w.page.wait_for_load_state("load")
        assert table.locator('thead th[data-column="u_t"]').get_attribute("aria-sort") == "ascending"
        assert u_t() == sorted(u_t()) and rows() != before and sorted(rows()) == sorted(before)
        table.locator('thead th[data-column="u_t"] a.sort').click()
        w.page.wait_for_load_state("load")
        assert u_t() == sorted(u_t(), reverse=True)
        w.shot("demo/vendors-sorted")
        w.check_clean()
    finally:
        w.close()


def test_readme_screenshots(browser, server, demo, pages):
    """The README's three: the overview, the vendor that got worse, and the latest two releases side by side."""
    from auditor.db import Dataset

    with demo["factory"]() as db:
        weekly = db.scalar(select(Dataset.id).where(Dataset.workspace_id == demo["workspace_id"],
                                                    Dataset.name == "support-tickets-weekly"))
    compare = next(p for n, p in pages if n.startswith("compare-") and n != "compare-pick")
    w = Watched(browser, server, width=WIDE, height=1000)
    try:
        w.login(demo["slug"], demo["email"])
        for name, path in (("overview", "/"), ("vendor", f"/vendors/bolt-annotations?dataset_id={weekly}"),
                           ("compare", compare)):
            w.open(path)
            shot = w.shot(f"readme/{name}-full", full_page=False)
            size = optimise_png(shot, ARTIFACTS / "readme" / f"{name}.png")
            assert size < 250_000, (name, size)
        w.check_clean()
    finally:
        w.close()


def test_acknowledging_a_demo_alert_takes_it_off_the_open_list(browser, server, demo):
    from auditor.db import Alert

    w = Watched(browser, server, width=WIDE)
    try:
        w.login(demo["slug"], demo["email"])
        w.open("/alerts")
        rows = w.page.locator("table#alerts tbody tr")
        n = rows.count()
        assert n >= 1
        alert_id = int(rows.first.get_attribute("data-alert"))
        rows.first.locator("button", has_text="Acknowledge").click()
        w.page.wait_for_load_state("load")
        assert w.page.url.endswith("/alerts")
        assert f"Alert {alert_id} acknowledged." in w.page.inner_text("p.flash")
        assert w.page.locator(f'table#alerts tr[data-alert="{alert_id}"]').count() == 0
        assert w.page.locator("table#alerts tbody tr").count() == n - 1
        w.open("/alerts?status=acknowledged", "demo/alerts-acknowledged")
        assert "acknowledged" in w.page.inner_text(f'table#alerts tr[data-alert="{alert_id}"]')
        with demo["factory"]() as db:
            assert db.get(Alert, alert_id).acknowledged_at is not None
        w.check_clean()
    finally:
        w.close()


#: axe-core's impacts that fail a page (its minor and moderate findings are reported, not failed).
_FAILING = ("serious", "critical")
_AXE = """async () => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });  // the charts' data tables too
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 4).map(n => n.target.join(' ') + ' :: ' + (n.failureSummary || '').slice(0, 240))}));
}"""


@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_no_demo_page_has_a_serious_or_critical_accessibility_finding(browser, server, demo, pages, width):
    """axe-core (the pinned build vendored beside the other browser files, loaded from this site)
    on every page of the demo at 1400 and 390 px: no serious or critical finding."""
    w = Watched(browser, server, width=width)
    found: dict[str, list] = {}
    try:
        def check(name: str) -> None:
            w.page.add_script_tag(url=server + "/static/vendor/axe-core/axe.min.js")
            w.page.wait_for_selector("html[data-tables-ready]", state="attached", timeout=10_000)
            bad = [v for v in w.page.evaluate(_AXE) if v["impact"] in _FAILING]
            if bad:
                found[name] = bad

        w.page.goto(server + "/login")
        w.settle()
        check("login")
        w.login(demo["slug"], demo["email"])
        for name, path in pages:
            w.page.goto(server + path)
            if name == "api-docs":
                w.page.wait_for_selector("#swagger-ui[data-ready]", timeout=20_000)
            w.settle(what=path)
            check(name)
        summary = {name: [f"{v['impact']} {v['id']} ({v['help']}): {v['nodes']}" for v in bad]
                   for name, bad in found.items()}
        (ARTIFACTS / "demo").mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "demo" / f"axe-{width}.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
        assert not found, "\n".join(f"{name}: {lines}" for name, lines in summary.items())
        w.check_clean()
    finally:
        w.close()
