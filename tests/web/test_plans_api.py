"""Audit plans over HTTP: the plan of a release (computed by the worker task, stored, read back),
the relabel list as CSV, vendor prices, vendor costs, the release page's panel, and the vendors'
pages: each price and expert equivalence per unit cost, and the form that sets a price."""

from __future__ import annotations

import csv
import io
import re

import pytest
from sqlalchemy import func, select

from auditor.db import Item, ReleasePlan, make_session_factory
from auditor.simulate import Scenario
from tests.web.conftest import csrf_token, eager_audits, login, make_tenant, seed

pytestmark = pytest.mark.services

# Three classes, two vendors and an expert panel (for expert equivalence per unit cost).
SCENARIO = Scenario(n_items=150, experts=(0.98, 0.97, 0.97), expert_fraction=0.5, gold_fraction=0.05,
                    releases={"1.0": 0.75, "2.0": 0.95})


@pytest.fixture(scope="module")
def planned(app):
    return seed(app, make_tenant(app), name="planned", scenario=SCENARIO)


def _rows(app, release_id):
    with make_session_factory(app.extensions["auditor.engine"])() as db:
        return db.scalars(select(ReleasePlan).where(ReleasePlan.release_id == release_id)).all()


def test_the_plan_is_computed_by_the_worker_task_and_read_back(app, client, planned):
    auth = planned.tenant.auth("viewer")
    rid = planned.release_ids["2.0"]
    with eager_audits(app):  # the plan task runs inline, as a worker would
        r = client.post(f"/api/v1/releases/{rid}/plan", headers=auth)
    assert r.status_code == 202, r.get_json()
    body = r.get_json()
    assert body["status"] == "succeeded" and body["current"] and body["dataset_id"] == planned.dataset_id
    plan = body["plan"]
    assert plan["method"] == "anytime" and plan["n_items"] == 150
    assert plan["designs"][0]["labels"] == 0
    assert all(0 <= d["probability"] <= 1 for d in plan["designs"])
    assert plan["recommended"] is None or plan["recommended"]["probability"] >= plan["probability"]
    for d in plan["designs"]:
        if d["new_items"]:  # every new-item design carries its range, around its probability
            assert d["probability_low"] <= d["probability"] <= d["probability_high"]
    assert plan["confidence"] == 0.8
    assert plan["assured"] is None or plan["assured"]["probability_low"] >= plan["probability"]
    # read again: the stored plan, nothing asked of a worker (no eager mode: it would stay pending)
    again = client.get(f"/api/v1/releases/{rid}/plan?dataset_id={planned.dataset_id}", headers=auth)
    assert again.get_json() == body
    assert len(_rows(app, rid)) == 1


def test_a_missing_plan_is_pending_until_a_worker_computes_it(app, client, planned):
    """Issue 33, defect 8: GET /releases/<id>/plan stored a pending row and enqueued a task,
    with a session cookie alone. A GET now only reads; asking is a POST (a bearer token in
    the API, a form with its CSRF token on the release page)."""
    rid = planned.release_ids["1.0"]
    r = client.get(f"/api/v1/releases/{rid}/plan", headers=planned.tenant.auth("admin"))
    assert r.status_code == 200
    assert r.get_json()["status"] == "pending" and r.get_json()["plan"] is None and not r.get_json()["current"]
    assert _rows(app, rid) == []  # the GET wrote nothing
    browser = app.test_client()
    login(browser, planned.tenant, "viewer")
    assert browser.get(f"/api/v1/releases/{rid}/plan").status_code == 200 and _rows(app, rid) == []
    assert browser.post(f"/api/v1/releases/{rid}/plan").status_code == 401  # a cookie cannot write the API
    assert browser.post(f"/releases/{rid}/plan", data={"dataset_id": planned.dataset_id}).status_code == 400  # CSRF
    assert _rows(app, rid) == []
    r = client.post(f"/api/v1/releases/{rid}/plan", headers=planned.tenant.auth("viewer"))
    assert r.status_code == 202 and r.get_json()["status"] == "pending"
    (row,) = _rows(app, rid)
    assert row.status == "pending"


def test_relabel_list_as_json_and_csv(app, client, planned):
    auth = planned.tenant.auth("analyst")
    rid = planned.release_ids["2.0"]
    with eager_audits(app):
        client.post(f"/api/v1/releases/{rid}/plan", headers=auth)
    page = client.get(f"/api/v1/releases/{rid}/relabel-list?per_page=20", headers=auth).get_json()
    assert page["total"] == 150 and len(page["items"]) == 20
    assert [x["rank"] for x in page["items"]] == list(range(1, 21))
    gains = [x["expected_gain"] for x in page["items"]]
    assert gains == sorted(gains, reverse=True)
    r = client.get(f"/api/v1/releases/{rid}/relabel-list?format=csv", headers=auth)
    assert r.status_code == 200 and r.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(r.get_data(as_text=True))))
    assert len(rows) == 150 and list(rows[0]) == ["rank", "item_id", "external_id", "labels", "expected_gain"]
    with make_session_factory(app.extensions["auditor.engine"])() as db:
        known = set(db.scalars(select(Item.external_id).where(Item.dataset_id == planned.dataset_id)))
    assert {row["external_id"] for row in rows} <= known


def test_release_without_an_audit_and_unknown_release(client, planned):
    auth = planned.tenant.auth("admin")
    rel = client.post(f"/api/v1/models/{planned.model_id}/releases", json={"version": "9.9"}, headers=auth).get_json()
    r = client.get(f"/api/v1/releases/{rel['id']}/plan", headers=auth)
    assert r.status_code == 404 and "not been audited" in r.get_json()["message"]
    assert client.get("/api/v1/releases/999999/plan", headers=auth).status_code == 404
    r = client.get(f"/api/v1/releases/{planned.release_ids['2.0']}/plan?dataset_id=999999", headers=auth)
    assert r.status_code == 404


def test_vendor_prices_roles_validation_and_costs(app, client, planned):
    admin, viewer = planned.tenant.auth("admin"), planned.tenant.auth("viewer")
    rid = planned.release_ids["2.0"]
    with eager_audits(app):
        client.post(f"/api/v1/releases/{rid}/plan", headers=admin)
    r = client.post("/api/v1/vendor-prices", json={"vendor": "acme-labeling", "price_per_label": 0.08}, headers=admin)
    assert r.status_code == 200 and r.get_json()["price_per_label"] == 0.08 and r.get_json()["currency"] == "USD"
    assert client.post("/api/v1/vendor-prices", json={"vendor": "bolt-annotations", "price_per_label": 0.05,
                                                      "currency": "eur"}, headers=admin).get_json()["currency"] == "EUR"
    assert _rows(app, rid) == []  # a price change makes the stored plans stale
    assert client.post("/api/v1/vendor-prices", json={"vendor": "acme-labeling", "price_per_label": 1},
                       headers=viewer).status_code == 403
    bad = client.post("/api/v1/vendor-prices", json={"vendor": "acme-labeling", "price_per_label": -1}, headers=admin)
    assert bad.status_code == 400 and bad.get_json()["field"] == "price_per_label"
    listed = client.get("/api/v1/vendor-prices", headers=viewer).get_json()
    assert [p["vendor"] for p in listed["items"]] == ["acme-labeling", "bolt-annotations"]

    costs = client.get(f"/api/v1/datasets/{planned.dataset_id}/vendor-costs", headers=viewer).get_json()["items"]
    by = {c["vendor"]: c for c in costs}
    acme = by["acme-labeling"]
    assert acme["labels_per_item"] == pytest.approx(3.0)
    assert acme["cost_per_item"] == pytest.approx(3 * 0.08)
    assert acme["expert_equivalence"] is not None
    assert acme["experts_per_unit_cost"] == pytest.approx(acme["expert_equivalence"] / (3 * 0.08))
    assert by["in-house experts"]["price_per_label"] is None and by["in-house experts"]["experts_per_unit_cost"] is None

    # with prices, the plan costs its designs per vendor, from each vendor's own labels
    with eager_audits(app):
        plan = client.post(f"/api/v1/releases/{rid}/plan", headers=admin).get_json()["plan"]
    assert plan["prices"] == {"acme-labeling": 0.08, "bolt-annotations": 0.05}
    assert {d["vendor"] for d in plan["designs"][1:]} == {"acme-labeling", "bolt-annotations"}
    for d in plan["designs"][1:]:
        assert d["cost"] == pytest.approx(d["labels"] * plan["prices"][d["vendor"]])

    assert client.delete("/api/v1/vendor-prices?vendor=bolt-annotations", headers=admin).get_json() == {"deleted": True}
    assert client.delete("/api/v1/vendor-prices?vendor=bolt-annotations", headers=admin).status_code == 404
    client.delete("/api/v1/vendor-prices?vendor=acme-labeling", headers=admin)


def test_release_page_shows_the_plan_panel(app, client, planned):
    rid = planned.release_ids["2.0"]
    with eager_audits(app):
        client.post(f"/api/v1/releases/{rid}/plan", headers=planned.tenant.auth("admin"))
    login(client, planned.tenant, "viewer")
    html = client.get(f"/releases/{rid}?dataset_id={planned.dataset_id}").get_data(as_text=True)
    assert 'id="plan"' in html and "Audit plan" in html
    # the betting verdict certifies this fixture's release already; the panel then says so and
    # gives the chance that it stays certified, over the same design table
    assert ("across the margin" in html or "No design within the grid" in html or "Cannot be certified" in html
            or "Certified now: the plan gives the chance that it stays certified" in html)
    assert 'id="plan-designs"' in html
    assert "the range gives it at either end" in html
    assert f"/api/v1/releases/{rid}/relabel-list?dataset_id={planned.dataset_id}&amp;format=csv" in html
    # the page asks for nothing new when the stored plan is current
    with make_session_factory(app.extensions["auditor.engine"])() as db:
        assert db.scalar(select(func.count()).select_from(ReleasePlan)
                         .where(ReleasePlan.release_id == rid, ReleasePlan.status == "pending")) == 0


def test_concurrent_first_requests_store_one_pending_plan(app):
    """Several first requests of a release's plan at once (a team asking together): each gets
    its answer, one row is stored, nothing fails on the unique (release, dataset) key."""
    import threading

    racing = seed(app, make_tenant(app), name="racing",
                  scenario=Scenario(n_items=40, gold_fraction=0.1, releases={"1.0": 0.9}))
    rid = racing.release_ids["1.0"]
    barrier = threading.Barrier(8)
    codes: list[int] = []

    def view():
        client = app.test_client()
        barrier.wait()
        codes.append(client.post(f"/api/v1/releases/{rid}/plan", headers=racing.tenant.auth("viewer")).status_code)

    threads = [threading.Thread(target=view) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [202] * 8
    assert len(_rows(app, rid)) == 1


# --- prices on the vendors' pages ---------------------------------------------------------------


def _logged_in(app, tenant, role):
    c = app.test_client()
    assert login(c, tenant, role).status_code == 302
    return c


def _cell(page: str, row_attrs: str, css: str) -> str:
    row = re.search(rf"<tr {re.escape(row_attrs)}>(.*?)</tr>", page, re.S)
    assert row, f"no row {row_attrs}"
    cell = re.search(rf'<td class="{re.escape(css)}"[^>]*>(.*?)</td>', row.group(1), re.S)
    assert cell, f"no {css} cell in {row_attrs}"
    return cell.group(1)


def _per_cost(cell: str) -> float | None:
    found = re.search(r'data-value="([^"]+)">([^<]+)<', cell)
    if found is None:
        return None
    assert found.group(2) == f"{float(found.group(1)):.3g}"
    return float(found.group(1))


def test_vendor_pages_show_the_price_and_experts_per_unit_cost_and_a_writer_sets_it_by_form(app, client, planned):
    tenant, ds = planned.tenant, planned.dataset_id
    admin = tenant.auth("admin")
    assert client.post("/api/v1/vendor-prices", json={"vendor": "acme-labeling", "price_per_label": 0.08},
                       headers=admin).status_code == 200
    try:
        costs = {c["vendor"]: c for c in client.get(f"/api/v1/datasets/{ds}/vendor-costs",
                                                    headers=admin).get_json()["items"]}
        acme = costs["acme-labeling"]
        assert acme["experts_per_unit_cost"] is not None
        viewer = _logged_in(app, tenant, "viewer")
        page = viewer.get("/vendors").get_data(as_text=True)
        row = 'data-vendor="acme-labeling" data-dataset="planned"'
        assert re.sub(r"<[^>]+>", "", _cell(page, row, "n price")).split() == ["0.08", "USD"]
        assert _per_cost(_cell(page, row, "n per-cost")) == pytest.approx(acme["experts_per_unit_cost"], rel=1e-12)
        bolt = 'data-vendor="bolt-annotations" data-dataset="planned"'
        assert _per_cost(_cell(page, bolt, "n per-cost")) is None and 'class="na"' in _cell(page, bolt, "n price")
        assert 'data-price-vendor="acme-labeling"' in page
        # sorted by it, the vendors with a price come first (most expert raters per unit of money)
        by_cost = viewer.get("/vendors?sort=per_cost").get_data(as_text=True)
        assert re.findall(r'<tr data-vendor="([^"]+)" data-dataset="planned"', by_cost)[0] == "acme-labeling"
        # the vendor's own page: its price, and the same figure on the dataset
        mine = viewer.get(f"/vendors/acme-labeling?dataset_id={ds}").get_data(as_text=True)
        assert re.search(r'<strong class="price">0\.08 USD</strong>', mine)
        assert _per_cost(_cell(mine, 'data-dataset="planned"', "n per-cost")) == pytest.approx(
            acme["experts_per_unit_cost"], rel=1e-12)
        # a viewer sees no form and may not post one; a vendor user sees no price at all
        assert 'action="/vendor-prices"' not in page and 'action="/vendor-prices"' not in mine
        token = csrf_token(page)
        assert viewer.post("/vendor-prices", data={"csrf_token": token, "vendor": "bolt-annotations",
                                                   "price_per_label": "0.05"}).status_code == 403
        vendor_user = _logged_in(app, tenant, "vendor")
        own = vendor_user.get("/vendors/acme-labeling").get_data(as_text=True)
        assert "Vendor acme-labeling" in own and "Price per label" not in own and "per-cost" not in own

        # an analyst sets a price through the form: refused without the CSRF token
        analyst = _logged_in(app, tenant, "analyst")
        form = {"vendor": "bolt-annotations", "price_per_label": "0.05", "currency": "eur", "action": "set",
                "next": "/vendors?sort=price"}
        assert analyst.post("/vendor-prices", data=form).status_code == 400
        listed = client.get("/api/v1/vendor-prices", headers=admin).get_json()["items"]
        assert [p["vendor"] for p in listed] == ["acme-labeling"]
        page = analyst.get("/vendors").get_data(as_text=True)
        assert 'action="/vendor-prices"' in page
        before = analyst.get("/vendors?sort=price").get_data(as_text=True)  # now in the response cache
        assert 'class="na"' in _cell(before, bolt, "n price")
        assert 'action="/vendor-prices"' in analyst.get("/vendors/acme-labeling").get_data(as_text=True)
        r = analyst.post("/vendor-prices", data={**form, "csrf_token": csrf_token(page)})
        assert r.status_code == 302 and r.headers["Location"] == "/vendors?sort=price"
        listed = {p["vendor"]: p for p in client.get("/api/v1/vendor-prices", headers=admin).get_json()["items"]}
        assert listed["bolt-annotations"]["price_per_label"] == 0.05 and listed["bolt-annotations"]["currency"] == "EUR"
        after = analyst.get("/vendors?sort=price").get_data(as_text=True)  # a new price: not the cached page
        assert "bolt-annotations charges 0.05 EUR per label." in after
        assert re.sub(r"<[^>]+>", "", _cell(after, bolt, "n price")).split() == ["0.05", "EUR"]
        costs = {c["vendor"]: c for c in client.get(f"/api/v1/datasets/{ds}/vendor-costs",
                                                    headers=admin).get_json()["items"]}
        assert costs["bolt-annotations"]["price_per_label"] == 0.05
        assert _per_cost(_cell(after, bolt, "n per-cost")) == pytest.approx(
            costs["bolt-annotations"]["experts_per_unit_cost"], rel=1e-12)

        # bad input: a 400 naming the field, nothing written
        token = csrf_token(after)
        for bad, field in (({"price_per_label": "abc"}, "price_per_label"), ({"price_per_label": "-1"}, "price_per_label"),
                           ({"price_per_label": "nan"}, "price_per_label"), ({"price_per_label": "1e10"}, "price_per_label"),
                           ({"currency": "€"}, "currency"), ({"currency": "TOOLONGCODE"}, "currency"),
                           ({"vendor": "  "}, "vendor"), ({"vendor": "x" * 201}, "vendor"),
                           ({"action": "drop"}, "action")):
            r = analyst.post("/vendor-prices", data={**form, "csrf_token": token, **bad})
            assert r.status_code == 400, bad
            assert f"{field}:" in r.get_data(as_text=True), bad
        r = analyst.post("/vendor-prices", data={**form, "csrf_token": token, "vendor": "a\x00b"})
        assert r.status_code == 400 and r.get_json()["field"] == "vendor"  # refused for every form
        assert {p["vendor"]: (p["price_per_label"], p["currency"]) for p in client.get(
            "/api/v1/vendor-prices", headers=admin).get_json()["items"]} == {
            "acme-labeling": (0.08, "USD"), "bolt-annotations": (0.05, "EUR")}

        # clearing it through the form (again: not found)
        clear = {"csrf_token": token, "vendor": "bolt-annotations", "action": "clear"}
        r = analyst.post("/vendor-prices", data=clear)
        assert r.status_code == 302 and r.headers["Location"] == "/vendors"
        assert [p["vendor"] for p in client.get("/api/v1/vendor-prices", headers=admin).get_json()["items"]] == [
            "acme-labeling"]
        assert analyst.post("/vendor-prices", data=clear).status_code == 404
        # another workspace's analyst changes nothing here
        other = make_tenant(app)
        stranger = _logged_in(app, other, "analyst")
        token = csrf_token(stranger.get("/vendors").get_data(as_text=True))
        assert stranger.post("/vendor-prices", data={"csrf_token": token, "vendor": "acme-labeling",
                                                     "action": "clear"}).status_code == 404
    finally:
        client.delete("/api/v1/vendor-prices?vendor=acme-labeling", headers=admin)
        client.delete("/api/v1/vendor-prices?vendor=bolt-annotations", headers=admin)
