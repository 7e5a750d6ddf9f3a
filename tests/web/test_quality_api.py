"""Quality over time through the API: weekly batches posted as a team's pipeline would
(each upload audited), then the windows and the changes as JSON and CSV, scoped per role."""

from __future__ import annotations

import csv
import io

import pytest

from auditor.simulate import Drift, HistoryScenario, draw_history, simulate_history
from tests.web.conftest import eager_audits, grant, make_tenant, new_dataset

SCENARIO = HistoryScenario(weeks=8, items_per_week=150, seed=17, drift=(Drift("acme-labeling", 4, -0.3),))


@pytest.fixture(scope="module")
def history(app):
    tenant = make_tenant(app, vendor="acme-labeling", extra_vendors=("bolt-annotations",))
    client = app.test_client()
    admin = tenant.auth()
    ds = new_dataset(client, admin, "weekly", SCENARIO.labels)
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
    assert "/api/v1/datasets/{dataset_id}/quality/sensitivity" in paths


def test_the_monitor_says_what_it_can_see(app, history):
    """Per vendor: its weekly volume and the smallest drop found within 4 weeks with 90%
    probability (150 items a week, three labels per vendor and item: a few points)."""
    tenant, ds = history
    client = app.test_client()
    rows = client.get(f"/api/v1/datasets/{ds}/quality/sensitivity", headers=tenant.auth("viewer")).get_json()["items"]
    agreement = {r["group"]: r for r in rows if r["metric"] == "agreement"}
    assert set(agreement) == set(SCENARIO.vendors)
    for r in agreement.values():
        assert r["units_per_window"] == pytest.approx(150) and r["within_windows"] == 4 and r["power"] == 0.9
        assert 0 < r["min_drop"] < 0.2 and 0 < r["min_drop_accuracy"] < 0.3
        assert 0.5 < r["others_accuracy_low"] <= r["others_accuracy_high"] <= 1
    own = client.get(f"/api/v1/datasets/{ds}/quality/sensitivity?grouping=annotator",
                     headers=tenant.auth("vendor")).get_json()["items"]
    assert own and all(r["group"].startswith("acme-") for r in own)


def test_gold_imported_after_the_annotations_is_counted_per_window(app):
    """The common order: annotations first, gold later. The gold import makes the next audit
    rebuild the monitors, so every window gets its gold accuracy (no "–")."""
    tenant = make_tenant(app)
    client = app.test_client()
    admin = tenant.auth()
    scenario = HistoryScenario(weeks=4, items_per_week=60, seed=5)
    ds = new_dataset(client, admin, "gold-later", scenario.labels)
    records = simulate_history(scenario)
    draw = draw_history(scenario)
    with eager_audits(app):
        r = client.post(f"/api/v1/datasets/{ds}/annotations", headers=admin, json={"records": [
            {k: x[k] for k in ("item_id", "annotator_id", "label", "vendor", "timestamp")} for x in records]})
        assert r.status_code == 202, r.get_json()
        before = client.get(f"/api/v1/datasets/{ds}/quality?metric=gold_accuracy", headers=admin).get_json()
        assert before["items"] == []
        gold = [{"item_id": f"w{w:03d}-item-{i:05d}", "label": scenario.labels[int(draw.truth[0, w, i])]}
                for w in range(scenario.weeks) for i in range(scenario.items_per_week)]
        r = client.post(f"/api/v1/datasets/{ds}/gold", json={"records": gold}, headers=admin)
        assert r.status_code == 202, r.get_json()
    rows = client.get(f"/api/v1/datasets/{ds}/quality?metric=gold_accuracy&per_page=500",
                      headers=admin).get_json()["items"]
    assert len(rows) == scenario.weeks * len(scenario.vendors)
    # every item has gold: a window's gold accuracy counts all its items, and agrees with the truth
    assert all(x["n_items"] == scenario.items_per_week for x in rows)
    right = draw.label[0] == draw.truth[0][..., None]  # (weeks, items, slots)
    vendors = list(scenario.vendors)
    for x in rows:
        w = (int(x["window_start"][8:10]) - 5) // 7  # January 2026: weeks start on the 5th, 12th, 19th, 26th
        expected = right[w][:, draw.slot_vendor == vendors.index(x["group"])].mean()
        assert x["value"] == pytest.approx(expected, abs=1e-9)
    agreement = client.get(f"/api/v1/datasets/{ds}/quality?metric=agreement&per_page=500",
                           headers=admin).get_json()["items"]
    assert len(agreement) == len(rows)  # the rebuild wrote every window once


def test_a_relabel_updates_the_windows_it_touches_without_counting_twice(app):
    """An annotator replaces some labels: the next audit rebuilds the windows from the current
    labels (the replaced ones no longer count, nothing counts twice)."""
    tenant = make_tenant(app)
    client = app.test_client()
    admin = tenant.auth()
    scenario = HistoryScenario(weeks=3, items_per_week=50, seed=9)
    ds = new_dataset(client, admin, "relabels", scenario.labels)
    records = [{k: x[k] for k in ("item_id", "annotator_id", "label", "vendor", "timestamp")}
               for x in simulate_history(scenario)]
    with eager_audits(app):
        assert client.post(f"/api/v1/datasets/{ds}/annotations", headers=admin,
                           json={"records": records}).status_code == 202
        before = client.get(f"/api/v1/datasets/{ds}/quality?per_page=500", headers=admin).get_json()["items"]
        # acme's labels of week 0 all become the first class
        changed = [{**x, "label": scenario.labels[0]} for x in records
                   if x["vendor"] == "acme-labeling" and x["item_id"].startswith("w000-")]
        assert client.post(f"/api/v1/datasets/{ds}/annotations", headers=admin,
                           json={"records": changed}).status_code == 202
    after = client.get(f"/api/v1/datasets/{ds}/quality?per_page=500", headers=admin).get_json()["items"]
    key = {(x["group"], x["window_start"]): x for x in before}
    assert len(after) == len(before)
    for x in after:
        old = key[(x["group"], x["window_start"])]
        assert x["n_labels"] == old["n_labels"] and x["n_items"] == old["n_items"]  # nothing counted twice
    # the relabelled window moved, to what the offline series says of the current labels
    current = {(r["item_id"], r["annotator_id"]): r for r in records}
    current.update({(r["item_id"], r["annotator_id"]): r for r in changed})
    from auditor.stats.quality import quality_series

    offline = quality_series(list(current.values()), by="vendor", window="7D", origin="2026-01-05").to_frame()
    for _, row in offline.iterrows():
        got = next(x for x in after if x["group"] == row["group"] and x["window_start"][:10] == f"{row['window_start']:%Y-%m-%d}"
                   and x["metric"] == "agreement")
        assert got["value"] == pytest.approx(row["agreement"], abs=1e-9)
