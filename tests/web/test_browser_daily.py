"""The daily loop in a real headless Chromium: time ranges and zoom kept in the URL, a lone
point drawn on a padded axis, drilling from a disagreement to the item, comparing three
releases scored on different items, and the downloads (CSV of a table, PNG and SVG of a
chart). Real ingestion and real audits on the session's PostgreSQL; screenshots go to
``test-artifacts/daily/``.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from sqlalchemy import select

from tests.web import browser_support
from tests.web.browser_support import x_ticks
from tests.web.conftest import SCENARIO, eager_audits, seed
from tests.web.quality_history import seed_history

# The browser fixtures (shared with the other browser tests).
browser = browser_support.browser
server = browser_support.server
watched = browser_support.watched

pytestmark = pytest.mark.services


def _query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def _pick_range(page, key: str, first: str | None = None, last: str | None = None) -> None:
    form = page.locator("form.range-pick")
    if first is not None:
        form.locator("input[name=from]").fill(first)
    if last is not None:
        form.locator("input[name=to]").fill(last)
    form.locator("select[name=range]").select_option(key)
    form.locator("button[type=submit]").click()
    page.wait_for_load_state("load")


def test_the_range_picker_round_trips_through_the_url_on_every_page_that_has_it(app, watched):
    history = seed_history(app)
    page = watched.page
    watched.login_tenant(history.tenant)
    pages = {"overview": "/", "alerts": "/alerts", "runs": "/audit-runs",
             "vendor": f"/vendors/acme-labeling?dataset_id={history.dataset_id}",
             "annotator": f"/datasets/{history.dataset_id}/annotators/bolt-02"}
    for name, path in pages.items():
        watched.open(path)
        _pick_range(page, "30d")
        assert _query(page.url)["range"] == ["30d"], (name, page.url)
        assert page.locator("#range-now").get_attribute("data-range") == "30d"
        # The URL alone brings the range back (a shared link), and the page's own links keep it.
        watched.open(urlsplit(page.url).path + "?" + urlsplit(page.url).query)
        assert page.locator("form.range-pick select[name=range]").input_value() == "30d", name
        _pick_range(page, "custom", "2026-01-05", "2026-02-01")
        query = _query(page.url)
        assert (query["range"], query["from"], query["to"]) == (["custom"], ["2026-01-05"], ["2026-02-01"]), name
        watched.page.reload()
        watched.settle()
        assert page.locator("form.range-pick input[name=from]").input_value() == "2026-01-05"
        assert page.locator("form.range-pick input[name=to]").input_value() == "2026-02-01"
        assert "(2026-01-05 – 2026-02-01)" in page.inner_text("#range-now")
        watched.shot(f"daily/range-{name}")
    watched.check_clean()


def test_what_changed_and_the_charts_follow_the_range(app, watched):
    history = seed_history(app)
    page = watched.page
    watched.login_tenant(history.tenant)
    watched.open("/?range=7d")
    assert "upload" in page.inner_text("ul.changes")  # seeded just now
    past = (datetime.now(UTC) - timedelta(days=400)).date()
    watched.open(f"/?range=custom&from={past}&to={past + timedelta(days=7)}")
    assert "No uploads, audits, releases or alerts custom dates." in page.inner_text("#what-changed + p")
    # The vendor's weekly chart shows only the weeks inside the range.
    watched.open(f"/vendors/acme-labeling?dataset_id={history.dataset_id}", charts=1)
    figure = 'figure[data-chart="chart-quality-1"]'
    every = page.evaluate(f"document.querySelector('{figure}')._chart.spec.series[0].points.map(p => p[0])")
    assert len(every) >= 6
    first = datetime.fromtimestamp(every[2] / 1000, tz=UTC).date()
    last = datetime.fromtimestamp(every[4] / 1000, tz=UTC).date()
    watched.open(f"/vendors/acme-labeling?dataset_id={history.dataset_id}&range=custom&from={first}&to={last}",
                 "daily/vendor-range", charts=1)
    assert page.evaluate(f"document.querySelector('{figure}')._chart.spec.series[0].points.map(p => p[0])") \
        == every[2:5]
    watched.check_clean()


def test_zoom_is_kept_in_the_url_and_a_double_click_clears_it(app, watched):
    history = seed_history(app)
    page = watched.page
    watched.login_tenant(history.tenant)
    path = f"/vendors/acme-labeling?dataset_id={history.dataset_id}"
    watched.open(path, charts=1)
    figure = 'figure[data-chart="chart-quality-1"]'
    page.locator(f"{figure} .u-over").scroll_into_view_if_needed()
    box = page.locator(f"{figure} .u-over").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=8)
    page.mouse.up()
    # (history.replaceState: the page's own location, read in the page, is the URL a user copies.)
    href = page.evaluate("location.href")
    zoom = _query(href)["zoom-chart-quality-1"][0]
    lo, hi = zoom.split("..")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", lo) and lo < hi
    # Opened from the link, the chart shows the same span.
    watched.open(urlsplit(href).path + "?" + urlsplit(href).query, "daily/zoomed", charts=1)
    shown = page.evaluate(f"[document.querySelector('{figure}')._chart.uplot.scales.x.min, "
                          f"document.querySelector('{figure}')._chart.uplot.scales.x.max]")
    assert datetime.fromtimestamp(shown[0] / 1000, tz=UTC).date().isoformat() == lo
    assert datetime.fromtimestamp(shown[1] / 1000, tz=UTC).date().isoformat() == hi
    assert all(lo <= t <= hi for t in x_ticks(page, figure))
    page.locator(f"{figure} .u-over").dblclick()
    assert "zoom-chart-quality-1" not in _query(page.evaluate("location.href"))
    watched.check_clean()


def test_a_one_point_series_is_drawn_on_a_padded_axis_not_from_1970(watched, seeded):
    """Release 2.1 was audited once: its history charts have one point each."""
    page = watched.page
    watched.login_tenant(seeded.tenant)
    watched.open(f"/releases/{seeded.release_ids['2.1']}?dataset_id={seeded.dataset_id}", "daily/one-point",
                 charts=2)
    for chart in ("chart-release-1", "chart-release-2"):
        figure = f'figure[data-chart="{chart}"]'
        spec = page.evaluate(f"document.querySelector('{figure}')._chart.spec")
        (x,) = {p[0] for s in spec["series"] for p in s["points"]}
        lo, hi = page.evaluate(f"[document.querySelector('{figure}')._chart.uplot.scales.x.min, "
                               f"document.querySelector('{figure}')._chart.uplot.scales.x.max]")
        assert lo < x < hi and hi - lo <= 8 * 86_400_000, (chart, lo, hi)  # about a week around it
        ticks = x_ticks(page, figure)
        assert ticks and not any(t.startswith(("1970", "2080")) for t in ticks), ticks
        # The chart's data as a table beside it (its text alternative).
        assert page.locator(f"{figure} table.data tbody tr").count() == 1
    watched.check_clean()


def test_from_a_disagreement_to_the_item_page(app, watched, seeded):
    from auditor.db import Annotator, make_session_factory

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        people = db.scalars(select(Annotator.external_id).where(Annotator.workspace_id == seeded.tenant.workspace_id)
                            .order_by(Annotator.external_id)).all()
    page = watched.page
    watched.login_tenant(seeded.tenant)
    for person in people:
        watched.open(f"/datasets/{seeded.dataset_id}/annotators/{quote(person, safe='')}")
        if page.locator("table#disagreements tbody tr").count():
            break
    else:
        pytest.fail("no annotator disagrees with the others anywhere")
    rows = page.locator("table#disagreements tbody tr")
    # Newest first: the times listed never go up.
    times = [t.strip() for t in rows.locator("td:last-child").all_inner_texts()]
    assert times == sorted(times, reverse=True)
    row = rows.first
    item, label = row.get_attribute("data-item"), row.locator("td").nth(1).inner_text().strip()
    others = {k: int(n) for k, n in re.findall(r"(\S+) (\d+)", row.locator("td").nth(3).inner_text())}
    row.locator("a").first.click()
    page.wait_for_load_state("load")
    assert urlsplit(page.url).path == f"/datasets/{seeded.dataset_id}/items/{quote(item, safe='')}"
    watched.settle()
    watched.shot("daily/item")
    mine = page.locator(f'table#item-labels tr[data-annotator="{person}"]')
    assert mine.count() == 1 and label in mine.inner_text()
    # The item's labels are the others' (as the disagreement listed them) and this annotator's.
    everyone = {k: int(n) for k, n in re.findall(r"(\S+) (\d+)", page.inner_text("#item-labels-card"))}
    assert everyone == {**others, label: others.get(label, 0) + 1}
    assert page.locator("table#item-predictions tbody tr").count() == len(seeded.release_ids)
    for cell in page.locator('table#item-predictions td[data-label="its probability"]').all_inner_texts():
        assert 0.0 <= float(cell) <= 1.0
    assert page.locator("#item-plurality").inner_text().strip() != "–"
    assert page.locator("table#item-history tbody tr").count() >= 2
    watched.check_clean()


@pytest.fixture(scope="module")
def three_releases(app):
    """A dataset with three releases: 1.0 and 2.0 predict every item, 3.0 only half of them."""
    data = seed(app, name="three-releases")
    client = app.test_client()
    admin = data.tenant.auth()
    rel = client.post(f"/api/v1/models/{data.model_id}/releases", json={"version": "3.0"}, headers=admin)
    assert rel.status_code == 201, rel.get_json()
    rows = data.data.predictions["2.1"][: SCENARIO.n_items // 2]
    records = [{"item_id": row["item_id"], "probabilities": {lab: row[lab] for lab in SCENARIO.labels}}
               for row in rows]
    with eager_audits(app):
        r = client.post(f"/api/v1/datasets/{data.dataset_id}/predictions?release_id={rel.get_json()['id']}",
                        json={"records": records}, headers=admin)
        assert r.status_code == 202, r.get_json()
    return data, rel.get_json()["id"]


def test_comparing_three_releases_with_different_item_counts_warns(watched, three_releases):
    data, third = three_releases
    page = watched.page
    watched.login_tenant(data.tenant)
    a, b = data.release_ids["1.0"], data.release_ids["2.0"]
    watched.open("/compare")
    selects = page.locator("form.compare-pick select[name=r]")
    selects.nth(0).select_option(str(a))
    selects.nth(1).select_option(str(b))
    selects.nth(2).select_option(str(third))
    page.locator("form.compare-pick button[type=submit]").click()
    page.wait_for_load_state("load")
    watched.settle(charts=1)
    assert _query(page.url)["r"] == [str(a), str(b), str(third)]
    watched.shot("daily/compare-three")
    table = page.locator("table#comparison")
    assert table.locator("thead th").count() == 1 + 3 + 2  # figure, three releases, two differences
    counts = table.locator('tr[data-row="n_items"] td').all_inner_texts()
    assert counts[0] == counts[1] == f"{SCENARIO.n_items:,}" and counts[2] == f"{SCENARIO.n_items // 2:,}"
    warning = page.locator(".compare-warning").first.inner_text()
    assert "different items" in warning and f"3.0: {SCENARIO.n_items // 2:,}" in warning
    # A difference for every figure that has values: S, survey equivalence and the gap to BEST included.
    for row in ("l", "s_anytime", "s_paper", "s_badge", "gap-agreement", "gap-cross_entropy", "u_t", "margin"):
        diffs = table.locator(f'tr[data-row="{row}"] td.diff').all_inner_texts()
        assert len(diffs) == 2 and all(re.search(r"\d", d) for d in diffs), (row, diffs)
    # Survey equivalence: a difference wherever both ends are numbers (3.0's lies beyond the curve here).
    values = table.locator('tr[data-row="equivalence-agreement"] td').all_inner_texts()
    diffs = values[3:]
    for other, diff in zip(values[1:3], diffs, strict=True):
        assert bool(re.fullmatch(r"[\d.]+( \[.*\])?", other.strip()) and
                    re.fullmatch(r"[\d.]+( \[.*\])?", values[0].strip())) == bool(re.search(r"\d", diff))
    # Items labelled differently link to their pages.
    differ = page.locator("table#compare-items tbody tr")
    assert differ.count() >= 1
    differ.first.locator("a").click()
    page.wait_for_load_state("load")
    assert "/items/" in page.url and page.locator("table#item-predictions tbody tr").count() >= 3
    watched.check_clean()


def test_csv_of_a_table_and_png_and_svg_of_a_chart_download(watched, seeded):
    page = watched.page
    watched.login_tenant(seeded.tenant)
    watched.open(f"/models/{seeded.model_id}", charts=1)
    with page.expect_download() as got:
        page.locator("table#timeline").locator("xpath=ancestor::div[contains(@class,'table-wrap')]"
                                               "/following-sibling::div[1]//button").click()
    rows = list(csv.reader(io.StringIO(open(got.value.path(), encoding="utf-8-sig").read())))
    assert got.value.suggested_filename == "timeline.csv"
    assert rows[0][0] == "release" and len(rows) == 1 + page.locator("table#timeline tbody tr").count()
    figure = 'figure[data-chart="chart-timeline"]'
    with page.expect_download() as got:
        page.locator(f'{figure} button[data-format="png"]').click()
    png = open(got.value.path(), "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and got.value.suggested_filename == "chart-timeline.png"
    with page.expect_download() as got:
        page.locator(f'{figure} button[data-format="svg"]').click()
    svg = open(got.value.path(), encoding="utf-8").read()
    assert svg.startswith("<svg") and svg.count("<circle") >= len(seeded.release_ids)
    for version in seeded.release_ids:
        assert f">{version}<" in svg  # the release axis' labels
    watched.check_clean()
