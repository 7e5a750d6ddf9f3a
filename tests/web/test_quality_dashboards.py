"""The quality-over-time dashboards, server-side: the overview's weekly columns, the vendor
page's chart and annotator table, the annotator page, who may see what, and that the
pages' statements do not grow with the history (checked against the JSON API's numbers).
"""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from auditor.simulate import HistoryScenario, simulate_history
from tests.web.conftest import eager_audits, grant, login, make_tenant
from tests.web.quality_history import SCENARIO, annotators_of, items_labelled, seed_history
from tests.web.statements import statements

WEEK_0 = datetime(2026, 1, 5, tzinfo=UTC)  # the scenario's first Monday


@pytest.fixture(scope="module")
def history(app):
    return seed_history(app)


@pytest.fixture(scope="module")
def api(app, history):
    """The JSON API's windows and changes of the history: what the pages must agree with."""
    client = app.test_client()
    viewer = history.tenant.auth("viewer")
    base = f"/api/v1/datasets/{history.dataset_id}"

    def get(path):
        r = client.get(base + path, headers=viewer)
        assert r.status_code == 200, r.get_json()
        body = r.get_json()
        assert body["total"] == len(body["items"])  # one page holds them all
        return body["items"]

    return {"vendor": get("/quality?per_page=500"), "annotator": get("/quality?grouping=annotator&per_page=500"),
            "vendor_changes": get("/quality/changes"),
            "annotator_changes": get("/quality/changes?grouping=annotator")}


def _page(client, path: str, status: int = 200) -> str:
    r = client.get(path)
    assert r.status_code == status, (path, r.status_code)
    return r.get_data(as_text=True)


def _session(app, tenant, role="admin"):
    client = app.test_client()
    assert login(client, tenant, role).status_code == 302
    return client


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _row(page: str, attr: str, value: str) -> str:
    match = re.search(rf'<tr {attr}="{re.escape(value)}">(.*?)</tr>', page, re.S)
    assert match, f"no row {attr}={value}"
    return match.group(1)


def _cells(row: str) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)


def _chart(page: str, chart_id: str) -> dict:
    match = re.search(rf'<script type="application/json" id="{re.escape(chart_id)}">(.*?)</script>', page, re.S)
    assert match, f"no chart {chart_id}"
    return json.loads(match.group(1))


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def _latest(windows, group, metric="agreement", back=0):
    rows = sorted((w for w in windows if w["group"] == group and w["metric"] == metric),
                  key=lambda w: w["window_start"])
    return rows[-1 - back]


# --- overview ---------------------------------------------------------------------------------


def test_overview_shows_each_vendors_latest_week_its_change_and_the_detected_change(app, history, api):
    page = _page(_session(app, history.tenant), "/")
    changed = {c["group"]: c for c in api["vendor_changes"]}
    assert "acme-labeling" in changed
    for vendor in SCENARIO.vendors:
        cells = _cells(_row(page, "data-vendor", vendor))
        now, before = _latest(api["vendor"], vendor), _latest(api["vendor"], vendor, back=1)
        weekly, delta, badge = _text(cells[2]), _text(cells[3]), _text(cells[4])
        assert weekly == f"{now['value']:.3f} [{now['low']:.3f}, {now['high']:.3f}] week of {now['window_start'][:10]}"
        diff = now["value"] - before["value"]
        assert delta == f"{'+' if diff > 0 else '−'}{abs(diff):.3f}"
        if vendor in changed:
            # the newest of the vendor's changes (agreement, or gold accuracy: "(gold)")
            starts = {c["start"][:10] for c in api["vendor_changes"] if c["group"] == vendor}
            assert badge.removesuffix(" (gold)")[-10:] in starts
            assert badge.startswith("change detected: drop since ")
            assert 'class="badge change no"' in cells[4]
        else:
            assert badge == "none"
    # The last week is the eighth; acme's drop started in week 4 (± 1).
    assert _latest(api["vendor"], "acme-labeling")["window_start"][:10] == f"{WEEK_0 + timedelta(weeks=7):%Y-%m-%d}"
    assert changed["acme-labeling"]["start"][:10] in ("2026-01-26", "2026-02-02", "2026-02-09")


# --- vendor page ------------------------------------------------------------------------------


def test_vendor_page_charts_weekly_agreement_and_gold_over_dates_with_bands_and_the_change(app, history, api):
    page = _page(_session(app, history.tenant, "viewer"), "/vendors/acme-labeling")
    spec = _chart(page, "chart-quality-1")
    assert spec["x_type"] == "time"
    by_metric = {s["metric"]: s for s in spec["series"]}
    assert set(by_metric) == {"agreement", "gold_accuracy"}
    for metric, series in by_metric.items():
        expected = sorted((w for w in api["vendor"] if w["group"] == "acme-labeling" and w["metric"] == metric),
                          key=lambda w: w["window_start"])
        assert [p[0] for p in series["points"]] == [_ms(WEEK_0 + timedelta(weeks=k)) for k in range(SCENARIO.weeks)]
        assert [p[1] for p in series["points"]] == pytest.approx([w["value"] for w in expected])
        assert [b[0] for b in series["band"]] == [p[0] for p in series["points"]]
        assert [b[1] for b in series["band"]] == pytest.approx([w["low"] for w in expected])
        assert [b[2] for b in series["band"]] == pytest.approx([w["high"] for w in expected])
    # measured against the other vendors, on agreement and on gold: a drop on each (same start, ± 1 week)
    acme = [c for c in api["vendor_changes"] if c["group"] == "acme-labeling"]
    assert {c["metric"] for c in acme} <= {"agreement", "gold_accuracy"} and acme
    change = next((c for c in acme if c["metric"] == "agreement"), acme[0])
    start = datetime.fromisoformat(change["start"])
    assert sorted((v["x"], v["kind"]) for v in spec["vlines"]) == sorted(
        (_ms(datetime.fromisoformat(c["start"])), "drop") for c in acme)
    assert any(f"drop from {start:%Y-%m-%d}" in v["label"] for v in spec["vlines"])
    # The change is listed under the chart with its intervals.
    changes = _text(re.search(r'<table class="data changes" id="vendor-changes-1">(.*?)</table>', page, re.S).group(1))
    assert f"change detected: drop since {start:%Y-%m-%d}" in changes
    assert f"{change['before']:.3f} [{change['before_low']:.3f}, {change['before_high']:.3f}]" in changes


def test_vendor_page_lists_its_annotators_latest_weeks_sortable_and_linked(app, history, api):
    page = _page(_session(app, history.tenant), "/vendors/bolt-annotations?sort=annotator")
    table = re.search(r'<table class="data stack annotators" id="annotators-1">(.*?)</table>', page, re.S).group(1)
    assert re.findall(r'<a class="sort" href="[^"]*">(agreement|gold accuracy), latest week</a>', table) == [
        "agreement", "gold accuracy"]
    rows = re.findall(r'<tr data-annotator="([^"]+)">', table)
    assert rows == annotators_of("bolt-annotations")
    for name in rows:
        cells = re.findall(r"<td([^>]*)>(.*?)</td>", _row(table, "data-annotator", name), re.S)
        assert f'href="/datasets/{history.dataset_id}/annotators/{name}"' in cells[0][1]
        for (attrs, body), metric in ((cells[1], "agreement"), (cells[2], "gold_accuracy")):
            w = _latest(api["annotator"], name, metric)
            assert float(re.search(r'data-sort-value="([^"]+)"', attrs).group(1)) == pytest.approx(w["value"])
            assert _text(body) == f"{w['value']:.3f} [{w['low']:.3f}, {w['high']:.3f}] week of {w['window_start'][:10]}"
    change = next(c for c in api["annotator_changes"] if c["group"] == "bolt-02")
    assert f"change detected: drop since {change['start'][:10]}" in _text(_row(table, "data-annotator", "bolt-02"))
    assert "change detected" not in _text(_row(table, "data-annotator", "bolt-01"))


def test_a_vendor_user_sees_its_own_vendor_and_annotators_only(app, history):
    client = _session(app, history.tenant, "vendor")
    page = _page(client, "/vendors/acme-labeling?sort=annotator")
    assert re.findall(r'<tr data-annotator="([^"]+)">', page) == annotators_of("acme-labeling")
    assert "chart-quality-1" in page
    _page(client, "/vendors/bolt-annotations", 404)
    r = client.get("/")
    assert r.status_code == 302 and r.headers["Location"].endswith("/vendors/acme-labeling")


# --- annotator page ---------------------------------------------------------------------------


def test_annotator_page_shows_its_series_items_and_changes(app, history, api):
    page = _page(_session(app, history.tenant, "analyst"), f"/datasets/{history.dataset_id}/annotators/bolt-02")
    assert "<h1>Annotator bolt-02</h1>" in page
    assert re.search(r'<p class="big" id="items-labelled">(\d+)</p>', page).group(1) == str(items_labelled("bolt-02"))
    assert 'href="/vendors/bolt-annotations"' in page
    spec = _chart(page, "chart-annotator")
    assert spec["x_type"] == "time" and {s["metric"] for s in spec["series"]} == {"agreement", "gold_accuracy"}
    mine = sorted((w for w in api["annotator"] if w["group"] == "bolt-02" and w["metric"] == "agreement"),
                  key=lambda w: w["window_start"])
    agreement = next(s for s in spec["series"] if s["metric"] == "agreement")
    assert [p[1] for p in agreement["points"]] == pytest.approx([w["value"] for w in mine])
    assert all(lo <= y <= hi for (_, y), (_, lo, hi) in zip(agreement["points"], agreement["band"], strict=True))
    change = next(c for c in api["annotator_changes"] if c["group"] == "bolt-02")
    assert [v["x"] for v in spec["vlines"]] == [_ms(datetime.fromisoformat(change["start"]))]
    weeks = re.search(r'<table class="data" id="weeks">(.*?)</table>', page, re.S).group(1)
    assert weeks.count("<tr><td>") == SCENARIO.weeks
    changes = _text(re.search(r'id="annotator-changes">(.*?)</table>', page, re.S).group(1))
    assert f"change detected: drop since {change['start'][:10]}" in changes


def test_an_annotator_without_windows_on_a_dataset_gets_an_empty_page(app, history):
    page = _page(_session(app, history.tenant), f"/datasets/{history.unshared_id}/annotators/acme-01")
    assert "No weekly windows yet" in page and "No change found" in page
    assert re.search(r'id="items-labelled">0<', page)


@pytest.mark.parametrize(("role", "annotator", "unshared", "status"), [
    ("vendor", "acme-01", False, 200),
    ("vendor", "bolt-02", False, 404),        # another vendor's annotator
    ("vendor", "crowdworks-01", False, 404),
    ("vendor", "acme-01", True, 404),         # a dataset the vendor was not granted
    ("vendor:bolt-annotations", "bolt-02", False, 404),  # its own annotator, but no grant on the dataset
    ("viewer", "crowdworks-01", False, 200),
    ("viewer", "no-such-annotator", False, 404),
    ("admin", "acme-01", True, 200),
])
def test_annotator_page_access(app, history, role, annotator, unshared, status):
    ds = history.unshared_id if unshared else history.dataset_id
    _page(_session(app, history.tenant, role), f"/datasets/{ds}/annotators/{annotator}", status)


@pytest.mark.parametrize("path", [
    "/datasets/{other}/annotators/acme-01",       # another workspace's dataset
    "/datasets/999999999/annotators/acme-01",
    "/datasets/99999999999999/annotators/acme-01",  # beyond the ids' range
    "/datasets/{ds}/annotators/" + "x" * 2000,
    "/datasets/{ds}/annotators/a/b/../c",
    "/datasets/{ds}/annotators/%3Cscript%3E",
    "/datasets/99999999999999",
    "/models/99999999999999",
])
def test_unknown_annotators_and_datasets_are_not_found(app, history, seeded, path):
    client = _session(app, history.tenant)
    r = client.get(path.format(ds=history.dataset_id, other=seeded.dataset_id))
    assert r.status_code == 404, (path, r.status_code)


def test_a_nul_in_the_annotator_path_is_a_bad_request(app, history):
    r = _session(app, history.tenant).get(f"/datasets/{history.dataset_id}/annotators/a%00b")
    assert r.status_code == 400


def test_another_workspace_cannot_see_the_annotator(app, history, seeded):
    client = _session(app, seeded.tenant)
    _page(client, f"/datasets/{history.dataset_id}/annotators/acme-01", 404)


# --- bounded statements -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(app):
    """One vendor, two annotators, two weeks: the history's pages must not need more statements."""
    scenario = HistoryScenario(weeks=2, items_per_week=20, seed=3, labels_per_vendor=2,
                               vendors={"tiny-vendor": (0.9, 0.8)})
    tenant = make_tenant(app, vendor="tiny-vendor", extra_vendors=())
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "tiny", "labels": list(scenario.labels)},
                     headers=tenant.auth()).get_json()["id"]
    records = simulate_history(scenario)
    with eager_audits(app):
        for week in range(scenario.weeks):
            batch = [{k: r[k] for k in ("item_id", "annotator_id", "label", "vendor", "timestamp")}
                     for r in records if r["batch"] == week]
            assert client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": batch},
                               headers=tenant.auth()).status_code == 202
    grant(app, tenant, "vendor", ds)
    return tenant, ds


@pytest.mark.parametrize("page", ["overview", "vendor", "annotator"])
def test_statements_per_page_do_not_grow_with_vendors_annotators_or_weeks(app, history, tiny, page):
    tiny_tenant, tiny_ds = tiny
    paths = {"overview": ("/", "/"), "vendor": ("/vendors/acme-labeling", "/vendors/tiny-vendor"),
             "annotator": (f"/datasets/{history.dataset_id}/annotators/acme-01",
                           f"/datasets/{tiny_ds}/annotators/tiny-01")}[page]
    counts = []
    for tenant, path in zip((history.tenant, tiny_tenant), paths, strict=True):
        client = _session(app, tenant)
        with statements(app.extensions["auditor.engine"]) as seen:
            _page(client, path)
        counts.append(len(seen))
    assert counts[0] == counts[1], counts


# --- markup and scripts -----------------------------------------------------------------------


def test_the_pages_load_only_their_own_scripts(app, history):
    client = _session(app, history.tenant)
    for path in ("/", "/vendors/acme-labeling", f"/datasets/{history.dataset_id}/annotators/acme-01"):
        page = _page(client, path)
        for tag in re.findall(r"<script[^>]*>", page):
            assert ('type="application/json"' in tag or re.fullmatch(
                r'<script src="/static/(charts|tables)\.js" defer>', tag)), (path, tag)
        assert not re.search(r'(src|href)="(https?:)?//', page), path


def test_markup_in_annotator_ids_and_vendors_stays_text(app):
    evil = '<img src=x onerror="alert(1)">'
    tenant = make_tenant(app, vendor=evil, extra_vendors=())
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "evil", "labels": ["a", "b"]},
                     headers=tenant.auth()).get_json()["id"]
    stamp = (WEEK_0 + timedelta(days=1)).isoformat()
    records = [{"item_id": f"i{i}", "annotator_id": f"{evil}{j}", "label": "ab"[(i * j) % 2], "vendor": evil,
                "timestamp": stamp} for i in range(12) for j in range(3)]
    with eager_audits(app):
        assert client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": records},
                           headers=tenant.auth()).status_code == 202
    session = _session(app, tenant)
    from urllib.parse import quote

    vendor_page = _page(session, "/vendors/" + quote(evil, safe=""))
    assert "<img" not in vendor_page and "chart-quality-1" in vendor_page
    link = re.search(r'<a href="(/datasets/\d+/annotators/[^"]+)">', vendor_page).group(1)
    annotator_page = _page(session, html.unescape(link))
    assert "<img" not in annotator_page and "&lt;img src=x" in annotator_page


def test_annotator_page_lists_its_disagreements_with_the_others_plurality(app, history):
    """Each listed item is one where the annotator's label is none of the other annotators'
    most frequent labels (checked against the simulated records), at most 25 of them."""
    from collections import Counter

    page = _page(_session(app, history.tenant, "analyst"), f"/datasets/{history.dataset_id}/annotators/bolt-02")
    table = re.search(r'<table class="data" id="disagreements">(.*?)</table>', page, re.S).group(1)
    body = table.split("<tbody>", 1)[1]
    rows = [[_text(c) for c in re.findall(r"<td>(.*?)</td>", r, re.S)]
            for r in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]
    assert 0 < len(rows) <= 25
    by_item: dict[str, Counter] = {}
    mine: dict[str, str] = {}
    for rec in simulate_history(SCENARIO):
        if rec["annotator_id"] == "bolt-02":
            mine[rec["item_id"]] = rec["label"]
        else:
            by_item.setdefault(rec["item_id"], Counter())[rec["label"]] += 1
    for item, label, plurality, *_ in rows:
        others = by_item[item]
        top = max(others.values())
        assert mine[item] == label and label not in {k for k, n in others.items() if n == top}
        assert set(plurality.split(", ")) == {k for k, n in others.items() if n == top}


def test_a_dataset_with_weekly_windows_but_no_vendor_report_counts_its_annotators(app):
    """The vendor page's table of datasets: where the latest audit has no report of the vendor
    (here: removed), the number of its annotators with a weekly window stands in, for the
    dataset shown in detail and for the others."""
    from sqlalchemy import delete, select

    from auditor.db.models import AuditRun, VendorReport

    scenario = HistoryScenario(weeks=1, items_per_week=20, seed=5, labels_per_vendor=2,
                               vendors={"lone-vendor": (0.9, 0.8, 0.7)})
    tenant = make_tenant(app, vendor="lone-vendor", extra_vendors=())
    client = app.test_client()
    records = [{k: r[k] for k in ("item_id", "annotator_id", "label", "vendor", "timestamp")}
               for r in simulate_history(scenario)]
    ids = {}
    for name in ("unreported-a", "unreported-b"):
        ids[name] = client.post("/api/v1/datasets", json={"name": name, "labels": list(scenario.labels)},
                                headers=tenant.auth()).get_json()["id"]
        with eager_audits(app):
            assert client.post(f"/api/v1/datasets/{ids[name]}/annotations", json={"records": records},
                               headers=tenant.auth()).status_code == 202

    def rows():
        page = _page(_session(app, tenant), "/vendors/lone-vendor")
        return {name: re.search(rf'<tr data-dataset="{name}">.*?</tr>', page, re.S).group(0) for name in ids}

    before = rows()
    with app.extensions["auditor.engine"].begin() as conn:
        runs = select(AuditRun.id).where(AuditRun.dataset_id.in_(list(ids.values())))
        conn.execute(delete(VendorReport).where(VendorReport.audit_run_id.in_(runs)))
    after = rows()
    for name in ids:  # "unreported-a" is shown in detail (first by name), "-b" only in the table
        assert '<td class="n" data-label="annotators">3</td>' in before[name]
        assert 'data-label="U_t"><span class="na">' not in before[name]
        assert '<td class="n" data-label="annotators">3</td>' in after[name]
        assert 'data-label="U_t"><span class="na">' in after[name]


def test_vendor_page_says_what_the_monitor_can_see(app, history, api):
    page = _page(_session(app, history.tenant, "viewer"), "/vendors/acme-labeling")
    sees = _text(re.search(r'<p class="sees" id="vendor-sees">(.*?)</p>', page, re.S).group(1))
    assert sees.startswith("What the monitor can see: at 150 items a week, drops of 0.")
    assert "within 4 weeks with 90% probability" in sees and "on gold items" in sees


def test_vendors_table_says_what_the_monitor_can_see_per_vendor(app, history):
    """The /vendors table's "sees drops of" cell is the API's minimum detectable drop in
    accuracy (agreement with the other vendors) for that vendor on that dataset."""
    client = app.test_client()
    sens = client.get(f"/api/v1/datasets/{history.dataset_id}/quality/sensitivity",
                      headers=history.tenant.auth("viewer")).get_json()
    expected = {r["group"]: r["min_drop_accuracy"] for r in sens["items"]
                if r["metric"] == "agreement" and r["min_drop_accuracy"] is not None}
    assert expected
    page = _page(_session(app, history.tenant, "viewer"), "/vendors")
    cells = dict(re.findall(r'<tr data-vendor="([^"]+)" data-dataset="[^"]*">.*?<td class="n sees" '
                            r'data-label="sees drops of"><span data-value="([^"]+)"', page, re.S))
    assert set(cells) == set(expected)
    for vendor, value in cells.items():
        assert float(value) == pytest.approx(expected[vendor])


def test_vendor_pages_say_when_the_monitor_cannot_see_a_vendor(app):
    """Two vendors labelling each item once, no gold: each vendor's agreement is the other's,
    so no drop of one can be told from a drop of the other. The vendor page and the
    /vendors table say that no drop is found in time, instead of saying nothing."""
    scenario = HistoryScenario(weeks=8, items_per_week=60, seed=7, labels_per_vendor=1,
                               vendors={"alpha-labels": (0.9, 0.85), "beta-labels": (0.8, 0.75)})
    tenant = make_tenant(app, vendor="alpha-labels", extra_vendors=("beta-labels",))
    client = app.test_client()
    records = [{k: r[k] for k in ("item_id", "annotator_id", "label", "vendor", "timestamp")}
               for r in simulate_history(scenario)]
    ds = client.post("/api/v1/datasets", json={"name": "two-vendors", "labels": list(scenario.labels)},
                     headers=tenant.auth()).get_json()["id"]
    with eager_audits(app):
        assert client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": records},
                           headers=tenant.auth()).status_code == 202
    sens = client.get(f"/api/v1/datasets/{ds}/quality/sensitivity", headers=tenant.auth("viewer")).get_json()
    agreement = {r["group"]: r for r in sens["items"] if r["metric"] == "agreement"}
    assert set(agreement) == {"alpha-labels", "beta-labels"}
    assert all(r["min_drop_accuracy"] is None for r in agreement.values())
    session = _session(app, tenant, "viewer")
    sees = _text(re.search(r'<p class="sees" id="vendor-sees">(.*?)</p>', _page(session, "/vendors/alpha-labels"),
                           re.S).group(1))
    assert sees.startswith("What the monitor can see: at 60 items a week, no drop, however large, is found")
    assert "cannot be told apart" in sees
    cell = re.search(r'<tr data-vendor="beta-labels" data-dataset="[^"]*">.*?<td class="n sees" '
                     r'data-label="sees drops of">(.*?)</td>', _page(session, "/vendors"), re.S).group(1)
    assert 'class="na blind"' in cell and _text(cell) == "none"
