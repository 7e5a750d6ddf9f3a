"""Quality over time through the API: weekly batches posted as a team's pipeline would
(each upload audited), then the windows and the changes as JSON and CSV, scoped per role."""

from __future__ import annotations

import csv
import io

import pytest

from auditor.simulate import Drift, HistoryScenario, simulate_history
from tests.web.conftest import eager_audits, grant, make_tenant

SCENARIO = HistoryScenario(weeks=8, items_per_week=150, seed=17, drift=(Drift("acme-labeling", 4, -0.3),))


@pytest.fixture(scope="module")
def history(app):
    tenant = make_tenant(app, vendor="acme-labeling", extra_vendors=("bolt-annotations",))
    client = app.test_client()
    admin = tenant.auth()
    ds = client.post("/api/v1/datasets", json={"name": "weekly", "labels": list(SCENARIO.labels)},
                     headers=admin).get_json()["id"]
    records = simulate_history(SCENARIO)
    with eager_audits(app):
        for week in range(SCENARIO.weeks):
            batch = [{k: r[k] for k in ("item_id", "annotator_id", "label", "vendor", "timestamp")}
                     for r in records if r["batch"] == week]
            r = client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": batch}, headers=admin)
            assert r.status_code == 202, r.get_json()
    grant(app, tenant, "vendor", ds)
    return tenant, ds


def test_weekly_windows_with_intervals_for_vendors_and_annotators(app, history):
    tenant, ds = history
    client = app.test_client()
    rows = client.get(f"/api/v1/datasets/{ds}/quality?per_page=500", headers=tenant.auth("viewer")).get_json()
    items = rows["items"]
    assert rows["total"] == len(items) == SCENARIO.weeks * len(SCENARIO.vendors)
    weeks = sorted({x["window_start"] for x in items})
    assert len(weeks) == SCENARIO.weeks and weeks[0].startswith("2026-01-05T00:00:00")
    for x in items:
        assert x["grouping"] == "vendor" and x["metric"] == "agreement"
        assert 0 <= x["low"] <= x["value"] <= x["high"] <= 1 and x["n_labels"] > 0
    acme = [x["value"] for x in items if x["group"] == "acme-labeling"]
    assert max(acme[4:]) < min(acme[:4])  # the drop shows in the series
    annotators = client.get(f"/api/v1/datasets/{ds}/quality?grouping=annotator&group=acme-01",
                            headers=tenant.auth("viewer")).get_json()["items"]
    assert annotators and {x["group"] for x in annotators} == {"acme-01"}
    text = client.get(f"/api/v1/datasets/{ds}/quality?format=csv", headers=tenant.auth("viewer")).get_data(as_text=True)
    table = list(csv.DictReader(io.StringIO(text)))
    assert len(table) == len(items) and {"group", "window_start", "value", "low", "high"} <= set(table[0])


def test_changes_name_the_vendor_its_start_and_evidence(app, history):
    tenant, ds = history
    client = app.test_client()
    changes = client.get(f"/api/v1/datasets/{ds}/quality/changes", headers=tenant.auth("viewer")).get_json()["items"]
    assert [(c["group"], c["direction"]) for c in changes] == [("acme-labeling", "drop")]
    c = changes[0]
    assert c["start"][:10] in ("2026-01-26", "2026-02-02", "2026-02-09")  # week 4 ± 1
    assert c["after_high"] < c["before_low"] and 0 < c["evidence"] <= 0.05
    alerts = client.get("/api/v1/alerts?per_page=100", headers=tenant.auth("viewer")).get_json()["items"]
    assert [a["subject"] for a in alerts if a["kind"] == "vendor_quality_changed"] == ["acme-labeling"]


def test_a_vendor_sees_its_own_vendor_and_annotators_only(app, history):
    tenant, ds = history
    client = app.test_client()
    vendor = tenant.auth("vendor")
    own = client.get(f"/api/v1/datasets/{ds}/quality?per_page=500", headers=vendor).get_json()["items"]
    assert own and {x["group"] for x in own} == {"acme-labeling"}
    people = client.get(f"/api/v1/datasets/{ds}/quality?grouping=annotator&per_page=500", headers=vendor).get_json()
    assert people["items"] and all(x["group"].startswith("acme-") for x in people["items"])
    assert client.get(f"/api/v1/datasets/{ds}/quality?group=crowdworks", headers=vendor).get_json()["items"] == []
    other = client.get(f"/api/v1/datasets/{ds}/quality/changes?grouping=vendor", headers=vendor).get_json()["items"]
    assert {c["group"] for c in other} <= {"acme-labeling"}


def test_the_quality_endpoints_are_in_the_openapi_document(client):
    paths = client.get("/api/v1/openapi.json").get_json()["paths"]
    assert "/api/v1/datasets/{dataset_id}/quality" in paths
    assert "/api/v1/datasets/{dataset_id}/quality/changes" in paths
