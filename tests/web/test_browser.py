"""The dashboards in a real headless Chromium (Debian's package, driven by Playwright).

Each test logs in through the form, opens dashboards on seeded data (real ingestion +
real audits), checks that their charts were drawn (uPlot, served by Auditor itself), that
hovering a point shows its exact value and interval, that the legend hides a series,
that no request left the host and that the console stayed clean (a CSP violation would
show there), and saves a screenshot under ``test-artifacts/``.
"""

from __future__ import annotations

import re
from datetime import datetime
from urllib.parse import quote

import pytest

from tests.web import browser_support
from tests.web.browser_support import ARTIFACTS, hover, series, x_ticks
from tests.web.conftest import make_tenant
from tests.web.quality_history import annotators_of, seed_history

# The browser fixtures (shared with the other browser tests).
browser = browser_support.browser
server = browser_support.server
watched = browser_support.watched

pytestmark = pytest.mark.services


def test_dashboards_render_their_charts_without_leaving_the_host(watched, seeded):
    page = watched.page
    watched.login_tenant(seeded.tenant)
    watched.open("/", "overview")
    assert page.locator("table#datasets tbody tr").count() == 1
    assert page.locator("table#releases tbody tr").count() == 1
    watched.open(f"/datasets/{seeded.dataset_id}", "dataset", charts=1)
    # Each power curve has its interval band and one marker per scored release.
    figures = page.locator('figure.chart[data-rendered="true"]')
    for i in range(figures.count()):
        selector = f'figure[data-chart="{figures.nth(i).get_attribute("data-chart")}"]'
        drawn = series(page, selector)
        humans = [s for s in drawn if s["role"] == "series"]
        assert len(humans) == 1 and humans[0]["lo"] is not None
        assert len([s for s in drawn if s["role"] == "marker"]) == len(seeded.release_ids)
        # The releases' labels never overlap one another and stay inside the plot (none clipped).
        labels, box = page.evaluate(f"[document.querySelector('{selector}')._chart.labels, "
                                    f"document.querySelector('{selector}')._chart.box]")
        assert labels
        for a, b in ((a, b) for i, a in enumerate(labels) for b in labels[i + 1:]):
            assert a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"] or \
                a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"], (a, b)
        for a in labels:
            assert box["left"] <= a["x"] and a["x"] + a["w"] <= box["left"] + box["width"]
            assert box["top"] <= a["y"] and a["y"] + a["h"] <= box["top"] + box["height"]
    watched.open(f"/models/{seeded.model_id}", "model", charts=1)
    assert page.locator("table#timeline tbody tr").count() == len(seeded.release_ids)
    # One certification badge per release on the timeline, and L drawn with its interval.
    drawn = series(page, 'figure[data-chart="chart-timeline"]')
    assert sum(len(s["points"]) for s in drawn if s["role"] == "badge") == len(seeded.release_ids)
    assert next(s for s in drawn if s["name"].startswith("L "))["lo"] is not None
    watched.open("/vendors/acme-labeling", "vendor", charts=1)
    assert page.locator("table.annotators tbody tr").count() >= 1
    watched.open("/audit-runs", "audit-runs")
    assert page.locator("table#runs tbody tr.status-succeeded").count() >= 1
    watched.check_clean()


def test_hovering_a_point_shows_its_value_and_interval_and_the_legend_hides_a_series(watched, seeded):
    page = watched.page
    watched.login_tenant(seeded.tenant)
    watched.open(f"/models/{seeded.model_id}", charts=1)
    figure = 'figure[data-chart="chart-timeline"]'
    drawn = series(page, figure)
    lower = next(s for s in drawn if s["name"].startswith("L "))
    x, y = lower["points"][-1]
    text = hover(page, figure, lower["i"], x, y)
    cells = page.locator("table#timeline tbody tr").first.locator("td").nth(2).inner_text()  # newest first
    value, low, high = re.fullmatch(r"([\d.]+) \[([\d.]+), ([\d.]+)\]", cells.strip()).groups()
    assert f"L (model lower bound): {value} [{low}, {high}]" in text
    assert "2.1" in text.splitlines()[0]  # the release under the cursor
    # The legend hides L and its band, and shows them again.
    button = page.locator(f'{figure} button.legend-item[data-series="{lower["i"]}"]')
    button.click()
    assert button.get_attribute("aria-pressed") == "false"
    assert not next(s for s in series(page, figure) if s["i"] == lower["i"])["shown"]
    button.click()
    assert next(s for s in series(page, figure) if s["i"] == lower["i"])["shown"]
    watched.check_clean()


def test_vendor_user_sees_only_its_own_page(watched, seeded):
    watched.login_tenant(seeded.tenant, role="vendor")
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
    watched.login_tenant(tenant)
    watched.open("/", "empty-overview")
    assert "Nothing here yet" in watched.page.content()
    watched.open("/audit-runs", "empty-audit-runs")
    assert "No audit has run yet" in watched.page.content()
    watched.open("/alerts", "empty-alerts")
    assert "No open alert" in watched.page.content()
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
    watched.login_tenant(tenant)
    watched.open("/", "xss-overview")
    assert evil in watched.page.inner_text("table#datasets")
    watched.open(f"/datasets/{ds['id']}", "xss-dataset")
    watched.open("/vendors/" + quote(evil, safe=""), "xss-vendor")
    watched.open("/vendors", "xss-vendors")
    watched.open(f"/datasets/{ds['id']}/items", "xss-items")
    assert evil in watched.page.inner_text("table#items")
    assert watched.page.locator("img[src=x]").count() == 0
    watched.check_clean()


def test_quality_over_time_pages_chart_dates_bands_changes_and_sort(app, watched):
    """Weekly quality: the overview's change badge, the vendor page's time chart (dates on the
    axis, 95% bands, the change marked where it started, its value on hover), its annotator
    table sorted worst first and re-sorted by a click on a heading, and an annotator's own page."""
    history = seed_history(app)
    page = watched.page
    watched.login_tenant(history.tenant)
    watched.open("/", "quality-overview")
    badge = page.locator('table#vendors tr[data-vendor="acme-labeling"] .badge.change')
    assert badge.count() == 1 and badge.inner_text().startswith("change detected: drop since 2026-")
    assert page.locator('table#vendors tr[data-vendor="crowdworks"] .badge.change').count() == 0

    watched.open("/vendors/acme-labeling", "quality-vendor", charts=2)
    figure = 'figure[data-chart="chart-quality-1"]'
    ticks = x_ticks(page, figure)
    assert len(ticks) >= 3 and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", t) for t in ticks), ticks
    assert ticks == sorted(ticks) and all(datetime.fromisoformat(t).weekday() == 0 for t in ticks)  # Mondays
    drawn = series(page, figure)
    assert [s["name"] for s in drawn] == ["agreement with the others' consensus", "accuracy on gold items"]
    assert all(s["lo"] is not None for s in drawn)  # each with its 95% band
    spec = page.evaluate(f"document.querySelector('{figure}')._chart.spec")
    # The agreement's change, and the same drop found in gold accuracy, both where it started.
    (change,) = [c for c in spec["vlines"] if "(gold accuracy)" not in c["label"]]
    assert all(c["x"] == change["x"] and c["kind"] == "drop" for c in spec["vlines"]), spec["vlines"]
    start = re.search(r"drop from (\d{4}-\d{2}-\d{2})", change["label"]).group(1)
    # The marker stands on the week the change started: hovering that week's point says so.
    agreement = drawn[0]
    x, y = next(p for p in agreement["points"] if p[0] == change["x"])
    text = hover(page, figure, agreement["i"], x, y)
    band = next(b for b in spec["series"][0]["band"] if b[0] == x)
    assert text.splitlines()[0] == f"week of {start}"
    assert f"agreement with the others' consensus: {y:.3f} [{band[1]:.3f}, {band[2]:.3f}]" in text

    table = page.locator("table#annotators-1")

    def order():
        return table.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.annotator)")

    def values(column):
        return table.locator(f"tbody tr td:nth-child({column})").evaluate_all(
            "cells => cells.map(c => c.dataset.sortValue === '' ? null : parseFloat(c.dataset.sortValue))")

    # Ranked by the lower bound on accuracy (the surest first); a click on a heading sorts by it.
    assert sorted(order()) == annotators_of("acme-labeling")
    assert table.locator('thead th[data-column="lower"]').get_attribute("aria-sort") == "descending"
    assert values(7) == sorted(values(7), reverse=True)
    heading = table.locator('thead th[data-column="agreement"]')
    heading.locator("a.sort").click()
    page.wait_for_load_state("load")
    heading = table.locator('thead th[data-column="agreement"]')
    assert heading.get_attribute("aria-sort") == "ascending"
    assert values(2) == sorted(values(2))
    ascending = order()
    heading.locator("a.sort").click()
    page.wait_for_load_state("load")
    heading = table.locator('thead th[data-column="agreement"]')
    assert heading.get_attribute("aria-sort") == "descending"
    assert values(2) == sorted(values(2), reverse=True)
    assert order() == ascending[::-1] != ascending  # the rows moved
    gold = table.locator('thead th[data-column="gold"]')
    gold.locator("a.sort").click()
    page.wait_for_load_state("load")
    assert table.locator('thead th[data-column="gold"]').get_attribute("aria-sort") == "ascending"
    assert table.locator('thead th[data-column="agreement"]').get_attribute("aria-sort") is None
    assert values(3) == sorted(values(3))
    watched.shot("quality-vendor-sorted")

    # Each annotator links to its own page.
    first = order()[0]
    table.locator(f'tbody tr[data-annotator="{first}"] a').click()
    page.wait_for_load_state("load")
    assert page.url.endswith(f"/datasets/{history.dataset_id}/annotators/{first}")
    watched.open(f"/datasets/{history.dataset_id}/annotators/bolt-02", "quality-annotator", charts=1)
    figure = 'figure[data-chart="chart-annotator"]'
    assert all(s["lo"] is not None for s in series(page, figure)) and len(series(page, figure)) == 2
    assert len(page.evaluate(f"document.querySelector('{figure}')._chart.spec")["vlines"]) == 1
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", t) for t in x_ticks(page, figure))
    assert page.locator("table#annotator-changes tbody tr").count() == 1
    assert int(page.inner_text("#items-labelled")) > 0
    assert ARTIFACTS.is_dir()
    watched.check_clean()
