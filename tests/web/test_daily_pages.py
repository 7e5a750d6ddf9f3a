"""The daily loop's pages, server-side: the time range (parsing, "since my last visit", what
changed following it), an annotator's latest disagreements by time, the items filters against
a brute-force reading of the same items, the item page, the cross-vendor leaderboard, the
confusion matrices against the labels in the database, comparing more than two releases, the
workspace's currency, and hostile query strings (never a 5xx).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select, update

from auditor.db import (
    Annotation,
    Annotator,
    Item,
    Prediction,
    User,
    Workspace,
    make_session_factory,
)
from auditor.web.readmodels import items as item_pages
from auditor.web.timerange import EARLIEST, time_range
from tests.web.conftest import csrf_token, eager_audits, make_tenant
from tests.web.test_dashboard_pages import _page, _rows, _session, _table, _text

pytestmark = pytest.mark.services

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


# --- the time range -------------------------------------------------------------------------------


def test_the_ranges_name_their_days():
    assert time_range({}, default="7d", now=NOW).start == NOW - timedelta(days=7)
    assert time_range({"range": "90d"}, now=NOW).start == NOW - timedelta(days=90)
    r = time_range({"range": "custom", "from": "2026-03-10", "to": "2026-03-01"}, now=NOW)
    assert (r.first_day, r.last_day) == (date(2026, 3, 1), date(2026, 3, 10))  # swapped, both days included
    assert r.end == datetime(2026, 3, 11, tzinfo=UTC)
    assert time_range({"from": "2026-03-10"}, now=NOW).key == "custom"  # dates alone mean custom
    assert not time_range({"range": "all"}, now=NOW).bounded
    odd = time_range({"range": "<script>"}, default="30d", now=NOW)
    assert odd.key == "30d" and "not a time range" in odd.note
    blank = time_range({"range": "custom", "from": "nonsense"}, default="all", now=NOW)
    assert blank.key == "all" and "first or a last day" in blank.note
    first = time_range({"range": "visit"}, now=NOW)
    assert first.key == "7d" and "No earlier visit" in first.note
    seen = NOW - timedelta(hours=30)
    assert time_range({"range": "visit"}, now=NOW, last_visit=seen).start == seen
    far = time_range({"range": "custom", "from": "0001-01-01", "to": "9999-12-31"}, now=NOW)
    assert far.first_day == EARLIEST and far.last_day == (NOW + timedelta(days=1)).date()


@given(st.dates(min_value=EARLIEST, max_value=date(2026, 11, 29)), st.integers(0, 400),
       st.sampled_from(["7d", "30d", "90d", "all", "custom"]))
def test_a_range_round_trips_through_its_query_parameters(first, days, key):
    last = min(first + timedelta(days=days), date(2026, 11, 29))
    chosen = time_range({"range": key, "from": first.isoformat(), "to": last.isoformat()}, now=NOW)
    again = time_range(chosen.args(), now=NOW)
    assert (again.key, again.start, again.end) == (chosen.key, chosen.start, chosen.end)
    assert chosen.contains(chosen.start or NOW) and (chosen.end is None or not chosen.contains(chosen.end))


def test_since_my_last_visit_starts_where_the_previous_visit_ended(app, seeded):
    factory = make_session_factory(app.extensions["auditor.engine"])
    before = datetime(2026, 2, 3, 9, 30, tzinfo=UTC)
    with factory() as db:
        db.execute(update(User).where(User.id == seeded.tenant.user_ids["analyst"]).values(last_seen_at=before))
        db.commit()
    client = _session(app, seeded.tenant, "analyst")
    page = _page(client, "/?range=visit")
    assert "since my last visit (2026-02-03 – now)" in _text(page)
    with factory() as db:
        seen = db.scalar(select(User.last_seen_at).where(User.id == seeded.tenant.user_ids["analyst"]))
    assert seen > before  # this visit is recorded for the next one
    # Within the same visit the range keeps its start (the page is not reset by its own views).
    assert "since my last visit (2026-02-03 – now)" in _text(_page(client, "/alerts?range=visit"))


def test_what_changed_follows_the_range(app, seeded):
    client = _session(app, seeded.tenant)
    recent = _text(_page(client, "/?range=7d"))
    assert "annotations upload" in recent and "audit runs succeeded" in recent
    old = _text(_page(client, "/?range=custom&from=2025-01-01&to=2025-01-31"))
    assert "No uploads, audits, releases or alerts custom dates." in old
    runs = _page(client, "/audit-runs?range=custom&from=2025-01-01&to=2025-01-31")
    assert _rows(_table(runs, "runs"), "data-run") == []
    assert _rows(_table(_page(client, "/audit-runs?range=7d"), "runs"), "data-run")


# --- disagreements, items and the item page ---------------------------------------------------------


@pytest.fixture(scope="module")
def backfilled(app):
    """One dataset labelled in two uploads: the second a backfill of labels given *earlier* than the
    first upload's, so upload order and labelling time disagree."""
    tenant = make_tenant(app, vendor="acme-labeling", extra_vendors=())
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "backfill", "labels": ["a", "b"]},
                     headers=tenant.auth()).get_json()["id"]
    start = datetime(2026, 6, 1, tzinfo=UTC)

    def batch(items, day0):
        rows = []
        for i in items:
            at = (start + timedelta(days=day0, hours=(i * 7) % 24)).isoformat()
            for who in ("w1", "w2", "w3"):
                label = "b" if who == "w1" and i % 2 else "a"  # w1 disagrees on every odd item
                rows.append({"item_id": f"it-{i:03d}", "annotator_id": who, "label": label,
                             "vendor": "acme-labeling", "timestamp": at})
        return rows

    with eager_audits(app):
        for rows in (batch(range(0, 20), 30), batch(range(20, 40), 0)):
            r = client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": rows}, headers=tenant.auth())
            assert r.status_code == 202, r.get_json()
    return tenant, ds


def test_latest_disagreements_are_the_newest_labels_first(app, backfilled):
    tenant, ds = backfilled
    page = _page(_session(app, tenant), f"/datasets/{ds}/annotators/w1")
    table = _table(page, "disagreements")
    times = re.findall(r"<td>(\d{4}-\d{2}-\d{2} \d{2}:\d{2})</td></tr>", table)
    assert len(times) == 20 and times == sorted(times, reverse=True)
    # The newest are the first upload's (labelled a month after the backfill's).
    assert all(t.startswith("2026-07") for t in times[:10])
    assert _rows(table, "data-item")[0] in {f"it-{i:03d}" for i in range(0, 20)}


def _brute(app, ds_id: int, release_id: int | None = None) -> dict[str, set[str]]:
    """Each filter's items, read one by one from the database."""
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        items = db.scalars(select(Item).where(Item.dataset_id == ds_id)).all()
        preds = {p.item_id: p for p in db.scalars(select(Prediction).where(Prediction.release_id == (release_id or -1)))}
    out: dict[str, set[str]] = {"disagreement": set(), "gold_mismatch": set(), "model_error": set()}
    for it in items:
        counts = list(it.label_counts or [])
        top = [i for i, c in enumerate(counts) if c and c == max(counts)]
        if sum(1 for c in counts if c) > 1:
            out["disagreement"].add(it.external_id)
        if it.gold_label is not None and top and it.gold_label not in top:
            out["gold_mismatch"].add(it.external_id)
        p = preds.get(it.id)
        if p is not None and top:
            probs = p.probabilities
            label = p.label if p.label is not None else max(range(len(probs)), key=probs.__getitem__)
            if label not in top:
                out["model_error"].add(it.external_id)
    return out


def _walk(client, path: str) -> list[str]:
    seen, url = [], path
    for _ in range(100):
        page = _page(client, url)
        seen += _rows(_table(page, "items"), "data-item") if 'id="items"' in page else []
        found = re.search(r'<a rel="next" href="([^"]+)"', page)
        if not found:
            return seen
        url = found.group(1).replace("&amp;", "&")
    raise AssertionError("the pages never end")


@pytest.mark.parametrize("show", ["disagreement", "gold_mismatch", "model_error"])
def test_each_items_filter_lists_exactly_its_items_once_across_pages(app, seeded, show, monkeypatch):
    monkeypatch.setattr(item_pages, "SCAN_ITEMS", 37)  # several scans per walk, each bounded
    client = _session(app, seeded.tenant)
    release = seeded.release_ids["1.0"]
    expected = _brute(app, seeded.dataset_id, release)[show]
    assert expected  # the seeded data has some of each
    got = _walk(client, f"/datasets/{seeded.dataset_id}/items?show={show}&release_id={release}&per_page=10")
    assert sorted(got) == sorted(expected) and len(got) == len(set(got))


def test_the_item_page_shows_every_label_and_each_releases_prediction(app, seeded):
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        it = db.scalars(select(Item).where(Item.dataset_id == seeded.dataset_id, Item.gold_label.is_not(None))
                        .order_by(Item.external_id)).first()
        labels = db.execute(select(Annotator.external_id, Annotation.label)
                            .join(Annotator, Annotator.id == Annotation.annotator_id)
                            .where(Annotation.item_id == it.id)).all()
        preds = db.execute(select(Prediction.release_id, Prediction.probabilities)
                           .where(Prediction.item_id == it.id)).all()
    client = _session(app, seeded.tenant)
    page = _page(client, f"/datasets/{seeded.dataset_id}/items/{it.external_id}")
    names = ["negative", "positive"]
    table = _table(page, "item-labels")
    assert sorted(_rows(table, "data-annotator")) == sorted(a for a, _ in labels)
    for who, code in labels:
        row = re.search(rf'<tr data-annotator="{who}">(.*?)</tr>', table, re.S).group(1)
        assert f'data-label="label">{names[code]}' in row
    predictions = _table(page, "item-predictions")
    for rid, probs in preds:
        row = _text(re.search(rf'<tr data-release="{rid}">(.*?)</tr>', predictions, re.S).group(1))
        assert f"{max(probs):.3f}" in row
    assert names[it.gold_label] in _text(re.search(r'id="item-gold">(.*?)</p>', page).group(1))
    _page(client, f"/datasets/{seeded.dataset_id}/items/no-such-item", 404)
    _page(client, f"/datasets/{seeded.dataset_id}/items/" + "x" * 600, 404)
    vendor = _session(app, seeded.tenant, "vendor")
    r = vendor.get(f"/datasets/{seeded.dataset_id}/items/{it.external_id}")
    assert r.status_code == 302 and r.headers["Location"].endswith("/vendors/acme-labeling")


def test_the_leaderboard_ranks_every_vendors_annotators_by_lower_bound(app, seeded):
    client = _session(app, seeded.tenant)
    page = _page(client, f"/datasets/{seeded.dataset_id}/leaderboard")
    table = _table(page, "leaderboard")
    lower = [float(x) for x in re.findall(r'data-label="lower bound \(95%\)">([\d.]+)</td>', table)]
    assert lower == sorted(lower, reverse=True) and len(lower) == len(_rows(table, "data-annotator"))
    vendors = set(re.findall(r'data-label="vendor"><a [^>]*>([^<]+)</a>', table))
    assert vendors == {"acme-labeling", "bolt-annotations"}
    only = _table(_page(client, f"/datasets/{seeded.dataset_id}/leaderboard?vendor=bolt-annotations"), "leaderboard")
    assert set(re.findall(r'data-label="vendor"><a [^>]*>([^<]+)</a>', only)) == {"bolt-annotations"}


def test_the_confusion_matrices_count_the_labels_on_gold_items(app, seeded):
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        rows = db.execute(select(Annotator.external_id, Annotator.vendor, Item.gold_label, Annotation.label)
                          .join(Annotation, Annotation.annotator_id == Annotator.id)
                          .join(Item, Item.id == Annotation.item_id)
                          .where(Annotation.dataset_id == seeded.dataset_id, Item.gold_label.is_not(None))).all()
    client = _session(app, seeded.tenant)

    def matrix(page, table_id):
        table = _table(page, table_id)
        return [[int(n) for n in re.findall(r'<td class="n[^"]*">(\d+)</td>', row)]
                for row in re.findall(r'<tr data-gold="[^"]+">(.*?)</tr>', table, re.S)]

    def expected(keep):
        m = [[0, 0], [0, 0]]
        for who, vendor, gold, label in rows:
            if keep(who, vendor):
                m[gold][label] += 1
        return m

    vendor_page = _page(client, f"/vendors/acme-labeling?dataset_id={seeded.dataset_id}")
    assert matrix(vendor_page, "confusion-vendor") == expected(lambda w, v: v == "acme-labeling")
    person = next(w for w, v, *_ in rows if v == "bolt-annotations")
    page = _page(client, f"/datasets/{seeded.dataset_id}/annotators/{person}")
    assert matrix(page, "confusion-annotator") == expected(lambda w, v: w == person)


# --- compare, currency, hostile input ---------------------------------------------------------------


def test_comparing_three_releases_names_their_items_and_every_difference(app, seeded):
    client = _session(app, seeded.tenant)
    ids = [seeded.release_ids[v] for v in ("1.0", "2.0", "2.1")]
    page = _page(client, "/compare?" + "&".join(f"r={i}" for i in ids))
    table = _table(page, "comparison")
    assert len(re.findall(r"<th scope=\"col\"", table)) == 1 + 3 + 2
    for row in ("l", "s_anytime", "s_paper", "gap-agreement", "n_items"):
        cells = re.search(rf'<tr data-row="{row}">(.*?)</tr>', table, re.S).group(1)
        assert len(re.findall(r'class="n diff"', cells)) == 2
    assert "compare-warning" not in page  # same items, same audit
    assert 'id="n-items-differ"' in page
    _page(client, f"/compare?r={ids[0]}&r={ids[0]}", 400)
    _page(client, f"/compare?r={ids[0]}&r=abc", 404)
    # More than six are not read (the first six are compared).
    _page(client, "/compare?" + "&".join(f"r={i}" for i in ids * 5))


def test_costs_are_in_the_workspaces_currency(app):
    tenant = make_tenant(app)
    admin = _session(app, tenant)
    page = _page(admin, "/vendors")
    assert re.search(r'id="workspace-currency">USD<', page)
    token = csrf_token(page)
    r = admin.post("/workspace-currency", data={"csrf_token": token, "currency": "eur", "next": "/vendors"})
    assert r.status_code == 302
    assert re.search(r'id="workspace-currency">EUR<', _page(admin, "/vendors"))
    bad = admin.post("/workspace-currency", data={"csrf_token": token, "currency": "€uro!"})
    assert bad.status_code == 400 and "currency: must be a currency code" in bad.get_data(as_text=True)
    analyst = _session(app, tenant, "analyst")
    assert analyst.post("/workspace-currency", data={"csrf_token": csrf_token(_page(analyst, "/vendors")),
                                                     "currency": "GBP"}).status_code == 403
    # A price set without a currency is in the workspace's.
    r = app.test_client().post("/api/v1/vendor-prices", json={"vendor": "acme-labeling", "price_per_label": 0.1},
                               headers=tenant.auth("analyst"))
    assert r.status_code in (200, 201) and r.get_json()["currency"] == "EUR"
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        assert db.get(Workspace, tenant.workspace_id).currency == "EUR"


@pytest.mark.parametrize("query", ["range=%3Cscript%3E", "range=custom&from=99999-99-99&to=", "range=" + "9" * 5000,
                                   "range=custom&from=0001-01-01&to=9999-12-31", "from=2026-02-30",
                                   "range=visit&from=x", "zoom-chart-quality-1=nonsense", "show=%3Cb%3E&release_id=-1&per_page=100000"])
def test_hostile_ranges_never_fail(app, seeded, query):
    client = _session(app, seeded.tenant)
    for path in ("/", "/alerts", "/audit-runs", f"/vendors/acme-labeling?dataset_id={seeded.dataset_id}",
                 f"/datasets/{seeded.dataset_id}/items", f"/datasets/{seeded.dataset_id}/leaderboard"):
        sep = "&" if "?" in path else "?"
        assert client.get(path + sep + query).status_code == 200, (path, query)


def test_token_calls_record_no_visit(app, seeded):
    """API calls (tokens) do not move "since my last visit": only pages do."""
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        db.execute(update(User).where(User.id == seeded.tenant.user_ids["viewer"]).values(last_seen_at=None))
        db.commit()
    r = app.test_client().get(f"/api/v1/datasets/{seeded.dataset_id}", headers=seeded.tenant.auth("viewer"))
    assert r.status_code == 200
    with factory() as db:
        assert db.scalar(select(User.last_seen_at).where(User.id == seeded.tenant.user_ids["viewer"])) is None


def test_the_daily_pages_on_sqlite(sqlite_engine):
    """The embedded default (SQLite) serves the same pages from the same code."""
    from auditor.web import create_app
    from tests.web.conftest import app_config, seed

    app = create_app(app_config(sqlite_engine))
    try:
        data = seed(app, name="embedded")
        client = _session(app, data.tenant)
        ds, ids = data.dataset_id, list(data.release_ids.values())
        factory = make_session_factory(app.extensions["auditor.engine"])
        with factory() as db:
            item = db.scalar(select(Item.external_id).where(Item.dataset_id == ds).order_by(Item.external_id))
            person = db.scalar(select(Annotator.external_id).where(Annotator.workspace_id == data.tenant.workspace_id)
                               .order_by(Annotator.external_id))
        for path in ("/?range=visit", "/?range=custom&from=2026-01-01&to=2026-12-31", "/alerts?range=30d",
                     "/audit-runs?range=7d", f"/vendors/acme-labeling?dataset_id={ds}&range=90d",
                     f"/datasets/{ds}/annotators/{person}?range=all", f"/datasets/{ds}/items?show=disagreement",
                     f"/datasets/{ds}/items?show=model_error", f"/datasets/{ds}/items/{item}",
                     f"/datasets/{ds}/leaderboard", "/compare?" + "&".join(f"r={i}" for i in ids)):
            _page(client, path)
        assert 'id="confusion-annotator"' in _page(client, f"/datasets/{ds}/annotators/{person}")
    finally:
        app.extensions["auditor.engine"].dispose()


def test_a_confusion_matrix_reads_a_bounded_number_of_gold_items(app, seeded, monkeypatch):
    from auditor.web.readmodels import annotators

    monkeypatch.setattr(annotators, "CONFUSION_GOLD_ITEMS", 5)
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        first = db.scalars(select(Item.id).where(Item.dataset_id == seeded.dataset_id, Item.gold_label.is_not(None))
                           .order_by(Item.external_id).limit(5)).all()
        n = db.scalar(select(func.count()).select_from(Annotation).join(Annotator, Annotator.id == Annotation.annotator_id)
                      .where(Annotation.item_id.in_(first), Annotator.vendor == "acme-labeling"))
    page = _page(_session(app, seeded.tenant), f"/vendors/acme-labeling?dataset_id={seeded.dataset_id}")
    assert f"acme-labeling's {n:,} labels on gold items (the first 5 gold items by item id)" in _text(page)
