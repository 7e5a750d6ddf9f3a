"""Quality over time in the service: every audit feeds the new annotations to the
dataset's quality monitors, stores the windows they touched and the changes found, and
raises ``vendor_quality_changed`` / ``annotator_quality_changed`` alerts.

Weekly batches from the simulator (time-stamped over each week) are imported one by one
and audited after each, as a team's pipeline would; on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import func, select

from auditor import ingest
from auditor.audit import runner
from auditor.audit.pipeline import AuditOptions
from auditor.db import session_scope
from auditor.db.models import Alert, Dataset, QualityChange, QualityState, QualityWindow
from auditor.simulate import Drift, HistoryScenario, simulate_history
from auditor.stats import quality_series
from tests.workers._data import _csv, make_dataset

LEASE = timedelta(seconds=60)
OPTIONS = AuditOptions(n_bootstrap=10)


@pytest.fixture
def factory(db_engine):
    from auditor.db import make_session_factory

    return make_session_factory(db_engine)


def _import_week(factory, dataset_id: int, rows: list[dict]) -> int:
    with session_scope(factory) as s:
        ds = s.get(Dataset, dataset_id)
        body = _csv(["item_id", "annotator_id", "label", "vendor", "tier", "timestamp"],
                    [(r["item_id"], r["annotator_id"], r["label"], r["vendor"], r["tier"], r["timestamp"])
                     for r in rows])
        return ingest.import_annotations(s, ds, body, format="csv").data_version


def _run_history(factory, name: str, scenario: HistoryScenario) -> tuple[int, pd.DataFrame, list]:
    records = simulate_history(scenario)
    frame = pd.DataFrame(records)
    ds = make_dataset(factory, name, list(scenario.labels))
    outcomes = []
    for week in range(scenario.weeks):
        _import_week(factory, ds, [r for r in records if r["batch"] == week])
        outcomes.append(runner.run_audit(factory, ds, task_id=f"{name}-{week}", options=OPTIONS, lease=LEASE))
    return ds, frame, outcomes


def test_a_degrading_vendor_raises_one_alert_with_its_start_and_evidence(factory):
    scenario = HistoryScenario(weeks=10, items_per_week=200, seed=17, drift=(Drift("acme-labeling", 5, -0.25),))
    ds, _, outcomes = _run_history(factory, "drift", scenario)
    assert all(o.state == "succeeded" for o in outcomes)
    with session_scope(factory) as s:
        changes = s.execute(select(QualityChange).where(QualityChange.dataset_id == ds)).scalars().all()
        alerts = s.execute(select(Alert).where(Alert.dataset_id == ds, Alert.kind.like("%quality_changed"))
                           ).scalars().all()
        state = s.get(QualityState, ds)
        version = s.get(Dataset, ds).data_version
        vendor_changes = [c for c in changes if c.grouping == "vendor"]
        assert [(c.group_name, c.direction) for c in vendor_changes] == [("acme-labeling", "drop")]
        change = vendor_changes[0]
        week5 = datetime(2026, 1, 5, tzinfo=UTC) + timedelta(weeks=5)
        assert abs((_aware(change.start) - week5).days) <= 7  # estimated start within a week
        assert change.after_high < change.before_low and 0 < change.evidence <= OPTIONS.quality_alpha
        vendor_alerts = [a for a in alerts if a.kind == "vendor_quality_changed"]
        assert len(vendor_alerts) == 1 and vendor_alerts[0].subject == "acme-labeling"
        assert vendor_alerts[0].severity == "critical" and vendor_alerts[0].audit_run_id == change.audit_run_id
        assert vendor_alerts[0].details["start"] == _aware(change.start).isoformat()
        assert "dropped" in vendor_alerts[0].message
        # The stable vendors raise nothing; the monitors' state is as of the last audit.
        assert not any(a.subject in ("bolt-annotations", "crowdworks") for a in alerts)
        assert state.data_version == version


def test_stored_windows_are_the_series_of_all_the_data(factory):
    """Incremental (one batch per audit, history never recomputed) and offline (all
    records at once) give the same weekly agreement and intervals, for vendors and
    annotators: the simulator labels each item within its week, so every consensus is
    complete when its week is audited."""
    scenario = HistoryScenario(weeks=4, items_per_week=120, seed=3)
    ds, frame, _ = _run_history(factory, "series", scenario)
    with session_scope(factory) as s:
        rows = pd.DataFrame([{c: getattr(w, c) for c in ("grouping", "group_name", "metric", "window_start",
                                                            "n_labels", "value", "low", "high")}
                             for w in s.execute(select(QualityWindow).where(QualityWindow.dataset_id == ds))
                             .scalars()])
    assert set(rows["grouping"]) == {"vendor", "annotator"} and set(rows["metric"]) == {"agreement"}
    for grouping, by in (("vendor", "vendor"), ("annotator", "annotator")):
        offline = quality_series(frame, by=by, window="7D", labels=list(scenario.labels)).to_frame()
        offline["week"] = pd.to_datetime(offline["window_start"], utc=True).dt.floor("D")
        offline["week"] -= pd.to_timedelta(offline["week"].dt.day_of_week, unit="D")
        mine = rows[rows["grouping"] == grouping].copy()
        mine["week"] = pd.to_datetime(mine["window_start"], utc=True)
        merged = mine.merge(offline, left_on=["group_name", "week"], right_on=["group", "week"])
        assert len(merged) == len(mine) == len(offline) > 0
        np.testing.assert_array_equal(merged["n_labels_x"], merged["n_labels_y"])
        np.testing.assert_allclose(merged["value"], merged["agreement"], rtol=1e-9)
        np.testing.assert_allclose(merged["low"], merged["agreement_low"], rtol=1e-9)
        np.testing.assert_allclose(merged["high"], merged["agreement_high"], rtol=1e-9)


def test_an_audit_reads_only_what_arrived_since_the_last(factory):
    scenario = HistoryScenario(weeks=3, items_per_week=60, seed=5)
    ds, _, _ = _run_history(factory, "incremental", scenario)
    with session_scope(factory) as s:
        updated = dict(s.execute(select(QualityWindow.window_start, func.max(QualityWindow.audit_run_id))
                                 .where(QualityWindow.dataset_id == ds).group_by(QualityWindow.window_start)).all())
        runs = sorted(set(updated.values()))
    # Each week's rows were written by the audit after that week's batch, and not again.
    assert len(updated) == 3 and len(runs) == 3
    assert [updated[k] for k in sorted(updated)] == runs


def test_vendors_importing_their_own_files_are_paired_and_a_drop_is_found(factory):
    """The usual order: each vendor delivers its own file, and an audit runs after each
    import. The labels of one item arrive in different audits; the newest week's labels are
    kept and scored again, so they are paired across imports, the stored weekly agreement is
    the offline series of all the data, and the degrading vendor is found."""
    scenario = HistoryScenario(weeks=10, items_per_week=200, seed=17, drift=(Drift("acme-labeling", 5, -0.25),))
    records = simulate_history(scenario)
    frame = pd.DataFrame(records)
    ds = make_dataset(factory, "by-vendor", list(scenario.labels))
    vendors = sorted(frame["vendor"].unique())
    for week in range(scenario.weeks):
        for vendor in vendors:
            _import_week(factory, ds, [r for r in records if r["batch"] == week and r["vendor"] == vendor])
            out = runner.run_audit(factory, ds, task_id=f"by-vendor-{week}-{vendor}", options=OPTIONS, lease=LEASE)
            assert out.state == "succeeded"
    with session_scope(factory) as s:
        changes = s.execute(select(QualityChange).where(QualityChange.dataset_id == ds,
                                                        QualityChange.grouping == "vendor")).scalars().all()
        rows = pd.DataFrame([{c: getattr(w, c) for c in ("group_name", "window_start", "n_labels", "value")}
                             for w in s.execute(select(QualityWindow).where(
                                 QualityWindow.dataset_id == ds, QualityWindow.grouping == "vendor",
                                 QualityWindow.metric == "agreement")).scalars()])
    assert [(c.group_name, c.direction) for c in changes] == [("acme-labeling", "drop")]
    offline = quality_series(frame, by="vendor", window="7D", labels=list(scenario.labels)).to_frame()
    offline["week"] = pd.to_datetime(offline["window_start"], utc=True).dt.floor("D")
    offline["week"] -= pd.to_timedelta(offline["week"].dt.day_of_week, unit="D")
    rows["week"] = pd.to_datetime(rows["window_start"], utc=True)
    merged = rows.merge(offline, left_on=["group_name", "week"], right_on=["group", "week"])
    assert len(merged) == len(rows) == len(offline) == scenario.weeks * len(vendors)
    np.testing.assert_allclose(merged["value"], merged["agreement"], rtol=1e-9)


def _aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def test_snow_rte_low_agreement_workers_in_a_second_import_raise_an_alert(factory, datasets_dir):
    """Real data without time stamps (Snow et al.'s RTE crowd labels), in a dataset whose
    quality windows are its import batches: everyone but the two busiest low-agreement
    workers first, those two in a second import; the audit after it flags the drop."""
    from auditor.stats import annotations_from_records, annotator_lower_bounds

    frame = pd.read_csv(datasets_dir / "snow2008_mturk" / "all_collected_data" / "rte.standardized.tsv", sep="\t")
    records = frame.rename(columns={"orig_id": "item_id", "!amt_worker_ids": "annotator_id", "response": "label"})
    bounds = annotator_lower_bounds(annotations_from_records(records, labels=[0, 1]))
    busy = bounds.n_items >= 500
    worst = [bounds.annotators[i] for i in np.flatnonzero(busy)[np.argsort(bounds.agreement[busy])[:2]]]
    with session_scope(factory) as s:
        ds = ingest.create_dataset(s, "snow-rte", ["0", "1"], workspace=f"ws-snow-{uuid.uuid4().hex[:10]}",
                                   quality_window="batch")
        ds_id, workspace = ds.id, ds.workspace.slug
        gold = frame.drop_duplicates("orig_id")
        ingest.import_gold(s, ds, _csv(["item_id", "label"], zip(gold["orig_id"], gold["gold"], strict=True)),
                           workspace=workspace, format="csv")
    outcomes = []
    for name, part in (("first", records[~records["annotator_id"].isin(worst)]),
                       ("second", records[records["annotator_id"].isin(worst)])):
        with session_scope(factory) as s:
            ds = s.get(Dataset, ds_id)
            body = _csv(["item_id", "annotator_id", "label", "vendor"],
                        zip(part["item_id"], part["annotator_id"], part["label"], ["mturk"] * len(part), strict=True))
            ingest.import_annotations(s, ds, body, workspace=workspace, format="csv")
        outcomes.append(runner.run_audit(factory, ds_id, task_id=f"snow-{name}", options=OPTIONS, lease=LEASE))
    with session_scope(factory) as s:
        changes = s.execute(select(QualityChange).where(QualityChange.dataset_id == ds_id)).scalars().all()
        alerts = s.execute(select(Alert).where(Alert.dataset_id == ds_id, Alert.kind.like("%quality_changed"))
                           ).scalars().all()
        windows = s.execute(select(func.count()).select_from(QualityWindow).where(
            QualityWindow.dataset_id == ds_id, QualityWindow.grouping == "vendor")).scalar_one()
    vendor = sorted((c.metric, c.direction) for c in changes if c.grouping == "vendor")
    assert vendor == [("agreement", "drop"), ("gold_accuracy", "drop")]
    assert all(c.audit_run_id == outcomes[1].run_id for c in changes)
    assert {a.kind for a in alerts} >= {"vendor_quality_changed"} and windows == 4  # 2 imports × 2 metrics
    assert any("since the import of" in a.message for a in alerts)


def test_an_audit_leaves_fresh_planner_statistics_on_the_tables_it_filled(pg_database):
    """The first audit fills the quality windows from nothing: the planner must not go on
    costing the table as empty (a dashboard's one-probe-per-annotator lookup then scanned
    every annotator's windows per probe). Autovacuum is not waited for: the audit analyses
    the tables whose rows it changed by more than autovacuum's own rule."""
    from sqlalchemy import text

    from auditor.db import make_engine, make_session_factory, migrate
    from auditor.db.session import refresh_statistics

    engine = make_engine(pg_database())
    try:
        migrate.upgrade(engine)
        factory = make_session_factory(engine)
        crowd = {"acme-labeling": (0.85,) * 30, "bolt-annotations": (0.8,) * 30}  # 60 annotators
        _run_history(factory, "fresh-stats", HistoryScenario(weeks=1, items_per_week=200, vendors=crowd, seed=11))
        with session_scope(factory) as s:
            stats = dict(s.execute(text(
                "SELECT c.relname, c.reltuples FROM pg_class c WHERE c.relname IN "
                "('quality_window', 'power_curve', 'quality_state')")).all())
            n_windows = s.scalar(select(func.count()).select_from(QualityWindow))
            n_curves = s.scalar(text("SELECT count(*) FROM power_curve"))
        # ANALYZE of a table this small reads every row: its estimate is the count itself.
        assert n_windows > 50 and stats["quality_window"] == n_windows
        # A table that got at most 50 rows is left to autovacuum, as autovacuum's rule says.
        assert stats["power_curve"] == (n_curves if n_curves > 50 else -1)
        # A table the audit did not list keeps its statistics (never analysed: -1).
        assert stats["quality_state"] == -1
        # Below the rule (50 + 10% of the rows known), nothing is analysed; unknown tables are skipped.
        assert refresh_statistics(factory, {"quality_window": 50 + n_windows // 10}) == []
        assert refresh_statistics(factory, {"no_such_table": 10_000}) == []
        assert refresh_statistics(factory, {"quality_window": 51 + n_windows // 10 + 1}) == ["quality_window"]
    finally:
        engine.dispose()


def test_statistics_refresh_is_a_no_op_on_sqlite(sqlite_engine):
    from auditor.db import make_session_factory
    from auditor.db.session import refresh_statistics

    assert refresh_statistics(make_session_factory(sqlite_engine), {"quality_window": 10_000}) == []
