"""The dashboards' quality read models on both databases (the embedded deployment serves
them from SQLite): hand-written windows and changes, read back as the pages show them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from auditor.db import (
    Annotator,
    AuditRun,
    AuditStatus,
    Dataset,
    QualityChange,
    QualityWindow,
    VendorReport,
    Workspace,
    make_session_factory,
)
from auditor.web import readmodels

pytestmark = pytest.mark.services

MONDAY = datetime(2026, 3, 2, tzinfo=UTC)


def _window(ds, grouping, group, metric, week, value, run_id):
    start = MONDAY + timedelta(weeks=week)
    return QualityWindow(dataset_id=ds, grouping=grouping, group_name=group, metric=metric, window_key=week,
                         window_start=start,
                         window_end=start + timedelta(weeks=1), n_items=50, n_labels=60 + week, value=value,
                         low=value - 0.05, high=value + 0.05, audit_run_id=run_id)


@pytest.fixture
def db(db_engine):
    with make_session_factory(db_engine)() as session:
        yield session


@pytest.fixture
def world(db):
    ws = Workspace(slug="rm-" + uuid.uuid4().hex[:12], name="read models")
    db.add(ws)
    db.flush()
    ds = Dataset(workspace_id=ws.id, name="weekly", labels=["a", "b"], data_version=3)
    db.add(ds)
    db.flush()
    run = AuditRun(dataset_id=ds.id, data_version=3, status=AuditStatus.SUCCEEDED,
                   finished_at=MONDAY + timedelta(weeks=6))
    db.add(run)
    db.flush()
    db.add(VendorReport(audit_run_id=run.id, vendor="v", n_annotators=3, n_items=100, n_annotations=300,
                        u_t=0.9, u_e=0.85, agreement=0.4,
                        annotators=[{"annotator": "v-01", "n_items": 90, "agreement": 0.8, "lower_confidence": 0.7},
                                    {"annotator": "v-03", "n_items": 5, "agreement": None,
                                     "lower_confidence": None}]))
    db.add_all([Annotator(workspace_id=ws.id, external_id=f"v-0{i}", vendor="v") for i in (1, 2, 3)])
    db.add(Annotator(workspace_id=ws.id, external_id="w-01", vendor="w"))
    # Vendor v: agreement in weeks 0..5, gold in weeks 2 and 4 only; a drop from week 3.
    values = [0.9, 0.88, 0.91, 0.7, 0.72, 0.69]
    db.add_all(_window(ds.id, "vendor", "v", "agreement", k, x, run.id) for k, x in enumerate(values))
    db.add_all(_window(ds.id, "vendor", "v", "gold_accuracy", k, 0.8, run.id) for k in (2, 4))
    # Annotators: v-01 in every week, v-02 up to week 2 only, w-01 (another vendor) too.
    db.add_all(_window(ds.id, "annotator", "v-01", "agreement", k, 0.6 + k / 100, run.id) for k in range(6))
    db.add_all(_window(ds.id, "annotator", "v-02", "agreement", k, 0.5, run.id) for k in range(3))
    db.add(_window(ds.id, "annotator", "v-02", "gold_accuracy", 1, 0.55, run.id))
    db.add_all(_window(ds.id, "annotator", "w-01", "agreement", k, 0.9, run.id) for k in range(6))
    for detected, start in ((4, 3), (5, 3)):
        db.add(QualityChange(dataset_id=ds.id, audit_run_id=run.id, grouping="vendor", group_name="v",
                             metric="agreement", direction="drop", detected_at=MONDAY + timedelta(weeks=detected),
                             start=MONDAY + timedelta(weeks=start), before=0.9, before_low=0.85, before_high=0.95,
                             after=0.7, after_low=0.65, after_high=0.75, evidence=0.01))
    db.add(QualityChange(dataset_id=ds.id, audit_run_id=run.id, grouping="annotator", group_name="v-02",
                         metric="agreement", direction="rise", detected_at=MONDAY + timedelta(weeks=2),
                         start=MONDAY + timedelta(weeks=1), before=0.4, before_low=0.3, before_high=0.5,
                         after=0.5, after_low=0.45, after_high=0.55, evidence=0.03))
    db.commit()
    return ws, ds


def _utc(when):
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def test_overview_reads_each_vendors_newest_two_weeks_and_newest_change(db, world):
    ws, _ = world
    (row,) = readmodels.overview(db, ws.id)["vendors"]
    assert _utc(row["week"].window_start) == MONDAY + timedelta(weeks=5)
    assert _utc(row["previous_week"].window_start) == MONDAY + timedelta(weeks=4)
    assert row["week"].metric == "agreement" and row["delta"] == pytest.approx(0.69 - 0.72)
    assert _utc(row["change"].detected_at) == MONDAY + timedelta(weeks=5)  # the newer of the two


def test_vendor_page_reads_the_series_changes_and_its_annotators_newest_windows(db, world):
    ws, _ = world
    (entry,) = readmodels.vendor_page(db, ws.id, "v")["datasets"]
    chart = entry["quality_chart"]
    agreement, gold = chart["series"]
    assert agreement["metric"] == "agreement" and len(agreement["points"]) == 6
    assert gold["metric"] == "gold_accuracy" and [p[0] for p in gold["points"]] == [
        int((MONDAY + timedelta(weeks=k)).timestamp() * 1000) for k in (2, 4)]
    assert [v["x"] for v in chart["vlines"]] == [int((MONDAY + timedelta(weeks=3)).timestamp() * 1000)] * 2
    assert len(entry["changes"]) == 2
    people = {a["annotator"]: a for a in entry["annotators"]}
    assert list(people) == ["v-01", "v-02", "v-03"]  # w-01 is another vendor's
    assert _utc(people["v-01"]["agreement"].window_start) == MONDAY + timedelta(weeks=5)
    assert people["v-01"]["gold"] is None and people["v-01"]["audit"]["n_items"] == 90
    assert _utc(people["v-02"]["agreement"].window_start) == MONDAY + timedelta(weeks=2)
    assert _utc(people["v-02"]["gold"].window_start) == MONDAY + timedelta(weeks=1)
    assert people["v-02"]["change"].direction == "rise" and people["v-02"]["audit"] is None
    assert people["v-03"]["agreement"] is None and people["v-03"]["audit"]["n_items"] == 5


def test_annotator_page_reads_its_weeks_and_changes(db, world):
    ws, ds = world
    person = db.query(Annotator).filter_by(workspace_id=ws.id, external_id="v-02").one()
    page = readmodels.annotator_page(db, ds, person)
    assert [(_utc(w["start"]), w["n_labels"]) for w in page["weeks"]] == [
        (MONDAY + timedelta(weeks=k), 60 + k) for k in (2, 1, 0)]
    assert page["weeks"][1]["gold_accuracy"].value == 0.55 and page["weeks"][0]["gold_accuracy"] is None
    assert [c.direction for c in page["changes"]] == ["rise"]
    assert page["n_items"] == 0 and page["n_labels"] == 60 + 61 + 62
    assert page["chart"]["vlines"][0]["label"] == "rise from 2026-03-09"


def test_a_vendor_without_windows_has_no_chart(db, world):
    ws, ds = world
    db.add(VendorReport(audit_run_id=db.query(AuditRun).filter_by(dataset_id=ds.id).one().id, vendor="quiet",
                        n_annotators=1, n_items=1, n_annotations=1))
    db.commit()
    rows = {r["vendor"]: r for r in readmodels.overview(db, ws.id)["vendors"]}
    assert rows["quiet"]["week"] is None and rows["quiet"]["delta"] is None and rows["quiet"]["change"] is None
    (entry,) = readmodels.vendor_page(db, ws.id, "quiet")["datasets"]
    assert entry["quality_chart"] is None and entry["annotators"] == [] and entry["changes"] == []
