"""Migrations: one head, empty → head → empty → head on both databases, models match."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect

from auditor.db import Base, make_engine, migrate


def test_migrations_have_a_single_head():
    assert len(migrate.heads()) == 1, f"several heads, merge them: {migrate.heads()}"


def _fresh_engine(backend, pg_database, tmp_path):
    if backend == "sqlite":
        return make_engine(f"sqlite:///{tmp_path / 'fresh.sqlite3'}")
    return make_engine(pg_database())


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_upgrade_downgrade_upgrade_and_check(backend, request, tmp_path):
    pg_database = request.getfixturevalue("pg_database") if backend == "postgresql" else None
    engine = _fresh_engine(backend, pg_database, tmp_path)
    try:
        migrate.upgrade(engine)
        tables = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        # `alembic check`: the models and the migrated schema agree (raises on any diff).
        cfg = migrate.alembic_config(engine)
        with engine.connect() as conn:
            cfg.attributes["connection"] = conn
            command.check(cfg)

        migrate.downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}

        migrate.upgrade(engine)
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_every_constraint_is_named_by_the_convention():
    for table in Base.metadata.sorted_tables:
        for constraint in table.constraints:
            assert constraint.name, f"{table.name}: unnamed {type(constraint).__name__}"
        for index in table.indexes:
            assert index.name and index.name.startswith(f"ix_{table.name}_"), index


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_certified_since_is_filled_in_from_the_history(backend, request, tmp_path):
    """The migration that stores each certification's certified-since run fills in the rows
    written before it: per release and dataset, the first run of each unbroken certified
    streak (a release absent from a run keeps its streak), None where not certified."""
    from sqlalchemy import text

    pg_database = request.getfixturevalue("pg_database") if backend == "postgresql" else None
    engine = _fresh_engine(backend, pg_database, tmp_path)
    try:
        migrate.upgrade(engine, "2f8c4d6a9e01")
        verdicts = {1: [False, True, True, False, True], 2: [True, None, True, False, None], 3: [True] * 5}
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO workspace (id, slug, name) VALUES (1, 'w', 'w')"))
            for ds in (1, 2):
                conn.execute(text("INSERT INTO dataset (id, workspace_id, name, labels, data_version) "
                                  "VALUES (:id, 1, :name, '[\"a\", \"b\"]', 0)"), {"id": ds, "name": f"d{ds}"})
            conn.execute(text("INSERT INTO model (id, workspace_id, name) VALUES (1, 1, 'm')"))
            for rid in verdicts:
                conn.execute(text("INSERT INTO release (id, model_id, version) VALUES (:id, 1, :v)"),
                             {"id": rid, "v": str(rid)})
            cert_id = 0
            # Runs of dataset 1 and 2 interleaved: dataset 2 sees release 1 certified once.
            for n in range(5):
                for ds in (1, 2):
                    run = 10 * n + ds
                    conn.execute(text("INSERT INTO audit_run (id, dataset_id, data_version, status) "
                                      "VALUES (:id, :ds, :n, 'succeeded')"), {"id": run, "ds": ds, "n": n})
                    for rid, v in verdicts.items():
                        v = v[n] if ds == 1 else (rid == 1 and n == 4)
                        if v is None or (ds == 2 and rid != 1):
                            continue
                        cert_id += 1
                        conn.execute(text(
                            "INSERT INTO certification (id, audit_run_id, release_id, data_version, n_items_upper, "
                            "n_items_lower, u_t, l, tau, method, certified, certified_with, verdict) VALUES "
                            "(:id, :run, :rid, :n, 1, 1, 0.5, 0.6, 0, 'oms', :c, 'U_t', 'v')"),
                            {"id": cert_id, "run": run, "rid": rid, "n": n, "c": bool(v)})
        migrate.upgrade(engine)
        with engine.connect() as conn:
            got = {(rid, run): since for rid, run, since in conn.execute(text(
                "SELECT release_id, audit_run_id, certified_since_run_id FROM certification"))}
        assert [got.get((1, 10 * n + 1)) for n in range(5)] == [None, 11, 11, None, 41]
        assert [got.get((2, 10 * n + 1)) for n in range(5)] == [1, None, 1, None, None]
        assert (2, 11) not in got and (2, 41) not in got
        assert [got[(3, 10 * n + 1)] for n in range(5)] == [1] * 5
        assert [got[(1, 10 * n + 2)] for n in range(5)] == [None] * 4 + [42]
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_curve_methods_and_monte_carlo_errors_move_out_of_the_points(backend, request, tmp_path):
    """The migration that gives curves their method and equivalence error columns moves the
    entries the audits used to append after a curve's points into them (and a vendor's
    expert-equivalence error out of its details); the downgrade puts them back."""
    import json

    from sqlalchemy import text

    pg_database = request.getfixturevalue("pg_database") if backend == "postgresql" else None
    engine = _fresh_engine(backend, pg_database, tmp_path)
    point = {"k": 0, "mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n_items": 10}
    drawn = {**point, "k": 1, "mc_error": 0.001}
    curves = {
        1: [point],                                                      # exact
        2: [point, drawn, {"equivalence_mc_error": 0.25}],               # drawn, with its error
        3: [point, drawn, {"interval_notes": {"low": None, "high": "> 9"}}, {"equivalence_mc_error": None}],
        4: [point, drawn],                                               # drawn (the dataset's curve)
    }
    reports = {
        1: (None, {"n_items_empirical": 3}),
        2: (1.5, {"expert_equivalence": [{"k": 0, "value": 0.5}, {"k": 1, "value": 1.5}]}),
        3: (2.5, {"expert_equivalence": [{"k": 0, "value": 0.5, "mc_error": 0.01},
                                         {"k": 1, "value": 2.5, "mc_error": 0.125}]}),
        4: (3.5, {"expert_equivalence": [{"k": 0, "value": 0.5, "mc_error": 0.01},
                                         {"k": 1, "value": 3.5, "mc_error": None}]}),
    }
    try:
        migrate.upgrade(engine, "5c1e9a7d3b20")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO workspace (id, slug, name) VALUES (1, 'w', 'w')"))
            conn.execute(text("INSERT INTO dataset (id, workspace_id, name, labels, data_version) "
                              "VALUES (1, 1, 'd', '[\"a\", \"b\"]', 0)"))
            conn.execute(text("INSERT INTO audit_run (id, dataset_id, data_version, status) "
                              "VALUES (1, 1, 1, 'succeeded')"))
            for cid, points in curves.items():
                conn.execute(text("INSERT INTO power_curve (id, audit_run_id, reference, combiner, scorer, max_k, "
                                  "n_bootstrap, points, equivalence) VALUES (:id, 1, 'all', 'plurality', "
                                  "'agreement', 1, 10, :points, :eq)"),
                             {"id": cid, "points": json.dumps(points), "eq": None if cid == 4 else 1.25})
            for rid, (value, details) in reports.items():
                conn.execute(text("INSERT INTO vendor_report (id, audit_run_id, vendor, n_annotators, n_items, "
                                  "n_annotations, expert_equivalence, details) VALUES (:id, 1, :v, 1, 1, 1, :x, :d)"),
                             {"id": rid, "v": f"v{rid}", "x": value, "d": json.dumps(details)})

        def read():
            with engine.connect() as conn:
                c = {row[0]: row[1:] for row in conn.execute(text(
                    "SELECT id, method, equivalence_mc_error, equivalence_low_note, equivalence_high_note, points "
                    "FROM power_curve"))}
                r = {row[0]: row[1:] for row in conn.execute(text(
                    "SELECT id, expert_equivalence_method, expert_equivalence_mc_error FROM vendor_report"))}
            return ({k: (*v[:4], json.loads(v[4]) if isinstance(v[4], str) else v[4]) for k, v in c.items()}, r)

        migrate.upgrade(engine)
        got, rep = read()
        assert got[1] == ("exact", None, None, None, [point])
        assert got[2] == ("monte_carlo", 0.25, None, None, [point, drawn])
        assert got[3] == ("monte_carlo", None, None, "> 9", [point, drawn])
        assert got[4] == ("monte_carlo", None, None, None, [point, drawn])
        assert rep == {1: (None, None), 2: ("exact", None), 3: ("monte_carlo", 0.125), 4: ("monte_carlo", None)}

        migrate.downgrade(engine, "5c1e9a7d3b20")
        with engine.connect() as conn:
            back = {cid: json.loads(p) if isinstance(p, str) else p
                    for cid, p in conn.execute(text("SELECT id, points FROM power_curve"))}
        assert back == curves
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_delivery_goes_to_a_webhook_or_a_channel_and_a_downgrade_drops_the_channels_ones(backend, request, tmp_path):
    """Each row of the delivery log names exactly one target; downgrading past the alert channels
    keeps the webhooks' deliveries and drops the channels' (they have no webhook)."""
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    pg_database = request.getfixturevalue("pg_database") if backend == "postgresql" else None
    engine = _fresh_engine(backend, pg_database, tmp_path)
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO workspace (id, slug, name) VALUES (1, 'w', 'w')"))
            conn.execute(text("INSERT INTO webhook (id, workspace_id, url, secret, secret_prefix, events) "
                              "VALUES (1, 1, 'https://hooks.example.org/x', 's', 's', '[]')"))
            conn.execute(text("INSERT INTO alert_channel (id, workspace_id, kind, name, recipients) "
                              "VALUES (1, 1, 'email', 'leads', '[\"lead@example.org\"]')"))
            for target in ("webhook_id", "channel_id"):
                conn.execute(text(f"INSERT INTO webhook_delivery ({target}, event, body, status, attempts) "
                                  "VALUES (1, 'e', '{}', 'pending', 0)"))
        for targets in ("NULL, NULL", "1, 1"):
            with pytest.raises(IntegrityError), engine.begin() as conn:
                conn.execute(text("INSERT INTO webhook_delivery (webhook_id, channel_id, event, body, status, attempts) "
                                  f"VALUES ({targets}, 'e', '{{}}', 'pending', 0)"))
        migrate.downgrade(engine, "8e4b2d7f1a63")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT webhook_id FROM webhook_delivery")).scalars().all() == [1]
        migrate.upgrade(engine)
    finally:
        engine.dispose()
