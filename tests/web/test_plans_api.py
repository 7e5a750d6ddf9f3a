"""Audit plans over HTTP: the plan of a release (computed by the worker task, stored, read back),
the relabel list as CSV, vendor prices, vendor costs, and the release page's panel."""

from __future__ import annotations

import csv
import io

import pytest
from sqlalchemy import func, select

from auditor.db import Item, ReleasePlan, make_session_factory
from auditor.simulate import Scenario
from tests.web.conftest import eager_audits, login, make_tenant, seed

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
        r = client.get(f"/api/v1/releases/{rid}/plan", headers=auth)
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert body["status"] == "succeeded" and body["current"] and body["dataset_id"] == planned.dataset_id
    plan = body["plan"]
    assert plan["method"] == "anytime" and plan["n_items"] == 150
    assert plan["designs"][0]["labels"] == 0
    assert all(0 <= d["probability"] <= 1 for d in plan["designs"])
    assert plan["recommended"] is None or plan["recommended"]["probability"] >= plan["probability"]
    # read again: the stored plan, nothing asked of a worker (no eager mode: it would stay pending)
    again = client.get(f"/api/v1/releases/{rid}/plan?dataset_id={planned.dataset_id}", headers=auth)
    assert again.get_json() == body
    assert len(_rows(app, rid)) == 1


def test_a_missing_plan_is_pending_until_a_worker_computes_it(app, client, planned):
    rid = planned.release_ids["1.0"]
    r = client.get(f"/api/v1/releases/{rid}/plan", headers=planned.tenant.auth("admin"))
    assert r.status_code == 200
    assert r.get_json()["status"] == "pending" and r.get_json()["plan"] is None
    (row,) = _rows(app, rid)
    assert row.status == "pending"


def test_relabel_list_as_json_and_csv(app, client, planned):
    auth = planned.tenant.auth("analyst")
    rid = planned.release_ids["2.0"]
    with eager_audits(app):
        client.get(f"/api/v1/releases/{rid}/plan", headers=auth)
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
        client.get(f"/api/v1/releases/{rid}/plan", headers=admin)
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
        plan = client.get(f"/api/v1/releases/{rid}/plan", headers=admin).get_json()["plan"]
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
        client.get(f"/api/v1/releases/{rid}/plan", headers=planned.tenant.auth("admin"))
    login(client, planned.tenant, "viewer")
    html = client.get(f"/releases/{rid}?dataset_id={planned.dataset_id}").get_data(as_text=True)
    assert 'id="plan"' in html and "Audit plan" in html
    assert f"/api/v1/releases/{rid}/relabel-list?dataset_id={planned.dataset_id}&amp;format=csv" in html
    # the page asks for nothing new when the stored plan is current
    with make_session_factory(app.extensions["auditor.engine"])() as db:
        assert db.scalar(select(func.count()).select_from(ReleasePlan)
                         .where(ReleasePlan.release_id == rid, ReleasePlan.status == "pending")) == 0


def test_concurrent_first_views_store_one_pending_plan(app):
    """Several first views of a release's plan at once (a dashboard opened by a team): each gets
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
        codes.append(client.get(f"/api/v1/releases/{rid}/plan", headers=racing.tenant.auth("viewer")).status_code)

    threads = [threading.Thread(target=view) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 8
    assert len(_rows(app, rid)) == 1
