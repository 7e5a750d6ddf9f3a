"""``auditor plan`` and ``auditor vendors price`` on a SQLite database."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from sqlalchemy import select

from auditor.cli import main
from auditor.db import Workspace, make_session_factory
from auditor.db.models import ReleasePlan
from auditor.simulate import PoolScenario
from tests.workers._data import import_annotations, import_predictions, make_dataset


def _seed(sqlite_engine, monkeypatch):
    factory = make_session_factory(sqlite_engine)
    pool = PoolScenario(hard_fraction=0.0, model_accuracy=0.95, annotator_accuracy=(0.9, 0.85, 0.8, 0.75, 0.7))
    rng = np.random.default_rng(4)
    truth, hard = pool.items(rng, 400)
    labels = np.stack([pool.labels(rng, truth, hard, 1).argmax(axis=1) for _ in range(5)], axis=1)
    ds = make_dataset(factory, "plan-cli", ["a", "b", "c"])
    import_annotations(factory, ds, [(f"i{n}", f"r{j}", int(labels[n, j])) for n in range(400) for j in range(5)],
                       vendors={f"r{j}": "acme" if j < 3 else "bolt" for j in range(5)})
    preds = pool.predictions(rng, truth, hard)
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(p) for n, p in enumerate(preds)})
    monkeypatch.setenv("AUDITOR_DATABASE_URL", sqlite_engine.url.render_as_string())
    monkeypatch.setenv("AUDITOR_AUDIT_BOOTSTRAP", "30")
    with factory() as s:
        slug = s.scalar(select(Workspace.slug))
    assert CliRunner().invoke(main, ["audit", "--dataset", "plan-cli", "--inline", "--workspace", slug]).exit_code == 0
    return factory, slug


def test_plan_json_table_and_vendor_prices(sqlite_engine, monkeypatch):
    factory, slug = _seed(sqlite_engine, monkeypatch)
    run = CliRunner()
    args = ["plan", "--dataset", "plan-cli", "--model", "m", "--release", "1", "--workspace", slug]
    res = run.invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    plan = out["plan"]
    assert (out["model"], out["release"]) == ("m", "1")
    assert plan["n_items"] == 400 and plan["method"] == "anytime"
    assert plan["designs"][0]["labels"] == 0
    assert len(out["relabel_top"]) == 100 and out["relabel_top"][0]["item_id"].startswith("i")
    with factory() as s:  # stored for the release page
        (row,) = s.scalars(select(ReleasePlan)).all()
        assert row.status == "succeeded" and row.plan["designs"] == plan["designs"]

    table = run.invoke(main, args)
    assert table.exit_code == 0 and "release m 1 on dataset plan-cli" in table.output
    assert "population margin L − U by labels per new item" in table.output
    assert "confidence interval; it holds for one fixed truth" in table.output

    assert run.invoke(main, ["vendors", "price", "acme", "0.08", "--workspace", slug]).exit_code == 0
    assert run.invoke(main, ["vendors", "price", "bolt", "0.05", "--currency", "eur", "--workspace", slug]).exit_code == 0
    shown = run.invoke(main, ["vendors", "price", "bolt", "--workspace", slug])
    assert shown.exit_code == 0 and "0.05 EUR per label" in shown.output
    with factory() as s:  # a price change drops the stored plans
        assert s.scalars(select(ReleasePlan)).all() == []
    priced = json.loads(run.invoke(main, [*args, "--json"]).output)["plan"]
    assert priced["prices"] == {"acme": 0.08, "bolt": 0.05}
    assert {d["vendor"] for d in priced["designs"][1:]} == {"acme", "bolt"}
    assert run.invoke(main, ["vendors", "price", "bolt", "--delete", "--workspace", slug]).exit_code == 0
    missing = run.invoke(main, ["vendors", "price", "bolt", "--workspace", slug])
    assert missing.exit_code != 0 and "no price is set" in missing.output


def test_plan_of_unknown_names_is_an_error(sqlite_engine, monkeypatch):
    _factory, slug = _seed(sqlite_engine, monkeypatch)
    for args, message in ((["--dataset", "nope", "--model", "m", "--release", "1"], "no dataset 'nope'"),
                          (["--dataset", "plan-cli", "--model", "m", "--release", "9"], "no release '9'")):
        res = CliRunner().invoke(main, ["plan", *args, "--workspace", slug])
        assert res.exit_code != 0 and message in res.output
