"""The release page's plan panel (``templates/_plan_panel.html``): the stored plan of a release
(read only: the page is a GET), with a form that asks a worker for a new one when it is
missing or older than the latest audit (a POST with its CSRF token; never computed in a request)."""

from __future__ import annotations

from flask import Flask

from auditor.web.db import get_session

__all__ = ["init_app", "release_plan"]

#: Designs shown in the panel's table: the cheapest reaching the probability per labels per
#: item (or the likeliest within the grid), at most this many rows.
PANEL_ROWS = 8


def _summary(plan: dict) -> list[dict]:
    """One design per (vendor, labels per item, relabel or not): the cheapest reaching the
    plan's probability, else the likeliest; cheapest first."""
    best: dict[tuple, dict] = {}
    target = plan.get("probability", 0.8)
    for d in plan.get("designs", [])[1:]:
        key = (d.get("vendor"), d["labels_per_item"], d["extra_labels_on_existing"] > 0)
        have = best.get(key)
        reach, have_reach = d["probability"] >= target, have is not None and have["probability"] >= target
        if have is None or (reach and not have_reach) or (not reach and not have_reach and
                                                          d["probability"] > have["probability"]):
            best[key] = d
    rows = sorted(best.values(), key=lambda d: (d["probability"] < target, d["cost"] if d["cost"] is not None
                                                else d["labels"]))
    return rows[:PANEL_ROWS]


#: The top of the relabel list shown in the panel, each item linked to its page.
RELABEL_SHOWN = 10


def _relabel_top(release_id: int, dataset_id: int) -> list[dict]:
    """The first :data:`RELABEL_SHOWN` items of the stored relabel list, with their ids (two
    lookups by key)."""
    from sqlalchemy import select

    from auditor.db import Item
    from auditor.db.models import ReleasePlan

    db = get_session()
    ranked = db.scalar(select(ReleasePlan.relabel).where(ReleasePlan.release_id == release_id,
                                                         ReleasePlan.dataset_id == dataset_id)) or []
    top = [(int(r[0]), r[1], int(r[2])) for r in ranked[:RELABEL_SHOWN]]
    ext = dict(db.execute(select(Item.id, Item.external_id).where(Item.dataset_id == dataset_id,
                                                                  Item.id.in_([i for i, _, _ in top] or [-1]))).all())
    return [{"rank": k + 1, "item": ext[i], "gain": gain, "labels": n} for k, (i, gain, n) in enumerate(top) if i in ext]


def release_plan(release_id: int, dataset_id: int | None) -> dict | None:
    """The panel's data: the API's view of the stored plan, with a short table of designs and
    the top of its relabel list."""
    if dataset_id is None:
        return None
    from auditor.web.api.plans import stored_plan

    view = stored_plan(get_session(), release_id, dataset_id)
    view["rows"] = _summary(view["plan"]) if view.get("plan") else []
    view["relabel_top"] = _relabel_top(release_id, dataset_id) if view.get("plan") else []
    return view


def init_app(app: Flask) -> None:
    app.jinja_env.globals["release_plan"] = release_plan
