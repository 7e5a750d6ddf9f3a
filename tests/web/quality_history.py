"""A dataset with eight weeks of history, posted week by week through the API as a team's
pipeline would (each upload audited): three vendors, gold labels on some of each week's
items; acme-labeling's annotators are 0.3 less accurate from week 4 on, annotator bolt-02
0.55 less from week 3.

Shared by the quality dashboard tests (server-side and in the browser): seeded once per
app, read only.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor.simulate import Drift, HistoryScenario, draw_history, simulate_history
from tests.web.conftest import Tenant, eager_audits, grant, make_tenant

SCENARIO = HistoryScenario(weeks=8, items_per_week=150, seed=17,
                           drift=(Drift("acme-labeling", 4, -0.3), Drift("bolt-02", 3, -0.55)))
#: Gold labels on the first this many items of every week.
GOLD_PER_WEEK = 40


@dataclass(frozen=True)
class History:
    tenant: Tenant
    dataset_id: int
    unshared_id: int
    """A second dataset of the workspace, empty and not granted to the vendor user."""


_SEEDED: dict[int, History] = {}


def seed_history(app) -> History:
    """The history in its own workspace (one per app; later calls return the same one)."""
    if id(app) in _SEEDED:
        return _SEEDED[id(app)]
    tenant = make_tenant(app, vendor="acme-labeling", extra_vendors=("bolt-annotations",))
    client = app.test_client()
    admin = tenant.auth()
    r = client.post("/api/v1/datasets", json={"name": "weekly", "labels": list(SCENARIO.labels)}, headers=admin)
    assert r.status_code == 201, r.get_json()
    ds = r.get_json()["id"]
    records = simulate_history(SCENARIO)
    truth = draw_history(SCENARIO).truth[0]
    with eager_audits(app):
        for week in range(SCENARIO.weeks):
            # Gold first: the week's annotations are scored against the gold their items have when audited.
            gold = [{"item_id": f"w{week:03d}-item-{i:05d}", "label": SCENARIO.labels[int(truth[week, i])]}
                    for i in range(GOLD_PER_WEEK)]
            r = client.post(f"/api/v1/datasets/{ds}/gold", json={"records": gold}, headers=admin)
            assert r.status_code == 202, r.get_json()
            batch = [{k: rec[k] for k in ("item_id", "annotator_id", "label", "vendor", "timestamp")}
                     for rec in records if rec["batch"] == week]
            r = client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": batch}, headers=admin)
            assert r.status_code == 202, r.get_json()
    grant(app, tenant, "vendor", ds)
    r = client.post("/api/v1/datasets", json={"name": "weekly-unshared", "labels": list(SCENARIO.labels)},
                    headers=admin)
    assert r.status_code == 201, r.get_json()
    _SEEDED[id(app)] = History(tenant, ds, r.get_json()["id"])
    return _SEEDED[id(app)]


def annotators_of(vendor: str) -> list[str]:
    names, vendors, _ = SCENARIO.annotators()
    return [n for n, v in zip(names, vendors, strict=True) if v == vendor]


def items_labelled(annotator: str) -> int:
    return len({r["item_id"] for r in simulate_history(SCENARIO) if r["annotator_id"] == annotator})


__all__ = ["GOLD_PER_WEEK", "SCENARIO", "History", "annotators_of", "items_labelled", "seed_history"]
