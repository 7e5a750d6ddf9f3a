"""The audit pipeline without a broker: claims and leases, snapshots (and their cache),
the atomic write, the sweep's choice, alerts, and the dispatcher with no broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select, update

from auditor.audit import runner
from auditor.audit.inputs import PreviousResults
from auditor.audit.pipeline import (
    AuditOptions,
    _distinct_rows,
    alerts_for,
    release_part,
    release_payload,
)
from auditor.audit.snapshot import SnapshotCache
from auditor.audit.snapshot import load_audit_snapshot as load_snapshot
from auditor.audit.store import claim_audit, stale_datasets
from auditor.config import load_worker_settings
from auditor.db import session_scope
from auditor.db.models import AuditOutbox, AuditRun, AuditStatus, Certification
from auditor.stats import confidence, lower_bound, upper_bounds
from tests.workers._data import import_annotations, import_predictions, make_dataset, synthetic

LEASE = timedelta(seconds=60)
OPTIONS = AuditOptions(n_bootstrap=20)


@pytest.fixture
def factory(db_engine):
    from auditor.db import make_session_factory

    return make_session_factory(db_engine)


def _dataset(factory, name, n_items=40, raters=4, seed=0, vendors=None):
    truth, R = synthetic(n_items, raters, seed=seed)
    ds = make_dataset(factory, name, ["a", "b"])
    rows = [(f"i{n}", f"{name}-r{r}", int(R[n, r])) for n in range(n_items) for r in range(raters)]
    v = import_annotations(factory, ds, rows, vendors=vendors or {}, gold={f"i{n}": int(truth[n]) for n in range(n_items)})
    return ds, v, truth, R


def test_audit_writes_bounds_of_the_library_and_marks_outbox(factory):
    ds, _, truth, R = _dataset(factory, "one")
    v = import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(t) for n, t in enumerate(truth)})
    out = runner.run_audit(factory, ds, task_id="t", options=OPTIONS, lease=LEASE)
    assert out.state == "succeeded" and out.data_version == v
    counts = np.stack([np.bincount(r, minlength=2) for r in R])
    ub, lb = upper_bounds(counts), lower_bound(counts, truth)
    with session_scope(factory) as s:
        cert = s.execute(select(Certification).where(Certification.audit_run_id == out.run_id)).scalar_one()
        pending = s.execute(select(func.count()).select_from(AuditOutbox).where(
            AuditOutbox.dataset_id == ds, AuditOutbox.processed_at.is_(None))).scalar_one()
    assert cert.u_t == pytest.approx(ub.theoretical) and cert.u_e == pytest.approx(ub.empirical)
    assert cert.l == pytest.approx(lb.value)
    assert cert.s_hms_e == pytest.approx(confidence(lb.value, ub.empirical, ub.n_items_empirical,
                                                    n_lower=lb.n_items, method="hms").score)
    assert cert.data_version == v and pending == 0
    with session_scope(factory) as s:
        summary = s.get(AuditRun, out.run_id).summary
    # Gold exists for every item: Table 2's checks, with the true accuracies beside the bounds.
    checks = summary["assumptions"]
    assert checks["n_gold_items"] == 40 and checks["u_t"] == pytest.approx(ub.theoretical)
    assert checks["average_annotator_accuracy"] == pytest.approx(float((R == truth[:, None]).mean()))
    assert checks["models"]["m 1"]["true_accuracy"] == 1.0
    # The same data again: nothing to do, no second run.
    assert runner.run_audit(factory, ds, task_id="t2", options=OPTIONS, lease=LEASE).state == "current"


def test_one_running_audit_per_dataset_and_lease_takeover(factory):
    ds, _, _, _ = _dataset(factory, "lease")
    with session_scope(factory) as s:
        first = claim_audit(s, ds, task_id="a", lease=LEASE)
    with session_scope(factory) as s:
        assert claim_audit(s, ds, task_id="b", lease=LEASE).state == "busy"
    with session_scope(factory) as s:  # the first run's worker died long ago
        s.execute(update(AuditRun).where(AuditRun.id == first.run_id)
                  .values(started_at=datetime.now(UTC) - timedelta(minutes=5),
                          heartbeat_at=datetime.now(UTC) - timedelta(minutes=5)))
    with session_scope(factory) as s:
        again = claim_audit(s, ds, task_id="b", lease=LEASE)
    assert again.state == "claimed" and again.run_id == first.run_id and again.took_over
    # The dead owner can no longer write; the new one can.
    snap = runner.snapshot(factory, ds)
    merged = runner.compute_inline(snap, OPTIONS)
    lost = runner.finish(factory, first.run_id, task_id="a", data_version=snap.data_version, merged=merged,
                         previous=snap.previous, options=OPTIONS, timings={})
    done = runner.finish(factory, first.run_id, task_id="b", data_version=snap.data_version, merged=merged,
                         previous=snap.previous, options=OPTIONS, timings={})
    assert not lost.written and done.written
    with session_scope(factory) as s:
        assert s.execute(select(func.count()).select_from(AuditRun).where(AuditRun.dataset_id == ds)).scalar_one() == 1


def test_heartbeat_keeps_a_long_audit_live_and_a_silent_one_is_taken_over_after_the_lease(factory):
    """The lease is short (here 1 s) and renewed by the worker's heartbeat: a run older
    than the lease but beating is live (busy to others, not swept); once the beats stop
    (its worker was killed), the next claim takes it over and the old owner's beats fail."""
    import time

    lease = timedelta(seconds=1)
    ds, _, _, _ = _dataset(factory, "heartbeat")
    with session_scope(factory) as s:
        first = claim_audit(s, ds, task_id="a", lease=lease)
    with runner.Heartbeat(factory, first.run_id, task_id="a", every=0.2) as hb:
        time.sleep(1.6)
        with session_scope(factory) as s:
            assert claim_audit(s, ds, task_id="b", lease=lease).state == "busy"
        with session_scope(factory) as s:
            assert ds not in stale_datasets(s, lease=lease, retry_backoff=0)
    assert hb.beats >= 4
    time.sleep(1.2)  # the worker "died": no beats for longer than the lease
    with session_scope(factory) as s:
        assert ds in stale_datasets(s, lease=lease, retry_backoff=0)
    with session_scope(factory) as s:
        again = claim_audit(s, ds, task_id="b", lease=lease)
    assert again.state == "claimed" and again.run_id == first.run_id and again.took_over
    assert not runner.Heartbeat(factory, first.run_id, task_id="a", every=1).beat()
    assert runner.Heartbeat(factory, first.run_id, task_id="b", every=1).beat()


def test_lease_setting_is_read_and_checked():
    assert load_worker_settings({}).lease == timedelta(seconds=60)
    assert load_worker_settings({"AUDITOR_AUDIT_LEASE_SECONDS": "15"}).lease == timedelta(seconds=15)
    with pytest.raises(ValueError, match="AUDITOR_AUDIT_LEASE_SECONDS"):
        load_worker_settings({"AUDITOR_AUDIT_LEASE_SECONDS": "0.5"})
    with pytest.raises(ValueError, match="AUDITOR_AUDIT_LEASE_SECONDS"):
        load_worker_settings({"AUDITOR_AUDIT_LEASE_SECONDS": "4000"})


def test_sweep_picks_stale_datasets_and_backs_off_after_failures(factory):
    fresh, _, _, _ = _dataset(factory, "fresh")
    stale, _, _, _ = _dataset(factory, "stale", seed=1)
    runner.run_audit(factory, fresh, task_id="f", options=OPTIONS, lease=LEASE)
    with session_scope(factory) as s:
        found = stale_datasets(s, lease=LEASE, retry_backoff=60)
    assert stale in found and fresh not in found
    with session_scope(factory) as s:
        c = claim_audit(s, stale, task_id="x", lease=LEASE)
    lost = sa_exc.OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))
    runner.fail(factory, c.run_id, task_id="x", exc=lost)
    with session_scope(factory) as s:
        run = s.get(AuditRun, c.run_id)
        assert run.status == AuditStatus.FAILED and "server closed the connection" in run.error and run.retryable
        assert stale not in stale_datasets(s, lease=LEASE, retry_backoff=60)  # backing off
        assert stale in stale_datasets(s, lease=LEASE, retry_backoff=0)


def test_a_failure_the_data_reproduces_is_recorded_once_and_waits_for_new_data(factory):
    ds, _, _, _ = _dataset(factory, "deterministic")
    with session_scope(factory) as s:
        c = claim_audit(s, ds, task_id="x", lease=LEASE)
    # what psycopg says of a statement with too many parameters: no SQLSTATE, not a lost connection
    too_many = sa_exc.OperationalError("SELECT ...", {}, Exception("number of parameters must be between 0 and 65535"))
    for exc in (RuntimeError("boom"), too_many):
        assert not runner.is_transient(exc)
    runner.fail(factory, c.run_id, task_id="x", exc=too_many)
    with session_scope(factory) as s:
        run = s.get(AuditRun, c.run_id)
        assert run.status == AuditStatus.FAILED and "65535" in run.error and run.retryable is False
        assert ds not in stale_datasets(s, lease=LEASE, retry_backoff=0)  # not retried for this version
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": 0 for n in range(40)})  # a new data version
    with session_scope(factory) as s:
        assert ds in stale_datasets(s, lease=LEASE, retry_backoff=0)


@pytest.mark.parametrize("relabel", [False, True])
def test_snapshot_cache_equals_a_full_read(factory, relabel):
    ds, _, _, _ = _dataset(factory, "cache")
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": 0 for n in range(40)})
    cache = SnapshotCache()
    with session_scope(factory) as s:
        load_snapshot(s, ds, cache=cache)
    rows = [("i0", "late", 1), ("i39", "late", 0), ("new-item", "late", 1)]
    if relabel:
        rows.append(("i5", "cache-r0", 1))  # a re-label replaces the (item, annotator) row
    import_annotations(factory, ds, rows, key="late")
    import_predictions(factory, ds, "m", "2", probabilities={f"i{n}": [0.3, 0.7] for n in range(40)})
    with session_scope(factory) as s:
        cached = load_snapshot(s, ds, cache=cache)
    with session_scope(factory) as s:
        full = load_snapshot(s, ds)

    def table(snap):
        return sorted(zip(snap.item_ids[snap.ann_item].tolist(), snap.annotator_ids[snap.ann_annotator].tolist(),
                          snap.ann_label.tolist(), strict=True))

    assert table(cached) == table(full)
    assert cached.data_version == full.data_version
    assert [r.release_id for r in cached.releases] == [r.release_id for r in full.releases]
    for a, b in zip(cached.releases, full.releases, strict=True):
        assert np.array_equal(a.item_index, b.item_index) and np.array_equal(a.labels, b.labels)
        assert (a.probabilities is None) == (b.probabilities is None)


def test_release_payload_round_trip_gives_the_inline_result(factory):
    ds, _, truth, _ = _dataset(factory, "payload")
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(t) for n, t in enumerate(truth)})
    snap = runner.snapshot(factory, ds)
    inline = runner.compute_inline(snap, OPTIONS)["results"]["certifications"][0]
    from auditor.audit.pipeline import dataset_part

    upper = dataset_part(snap, OPTIONS)["upper"]
    via_message = release_part(runner.plain(release_payload(snap, snap.releases[0])), upper, OPTIONS)
    assert via_message["certifications"][0]["l"] == pytest.approx(inline["l"])
    assert via_message["certifications"][0]["s_oms_t"] == pytest.approx(inline["s_oms_t"])


def test_distinct_rows_matches_numpy_unique():
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 4, (500, 3))
    got, mult = _distinct_rows(rows)
    want, want_mult = np.unique(rows, axis=0, return_counts=True)
    assert np.array_equal(got, want) and np.array_equal(mult, want_mult)


def test_alerts_on_verdict_change():
    options = AuditOptions()
    previous = PreviousResults(1, {7: {"certified": False, "verdict": "not certified", "l": 0.9, "u_t": 0.95}},
                               {"acme": {"u_t": 0.90}})
    cert = {"release_id": 7, "certified": True, "verdict": "certified", "l": 0.99, "u_t": 0.9, "s_oms_t": 0.97,
            "details": {"model": "m", "version": "2"}}
    # A vendor's upper bound moving is no alert by itself any more: the quality monitors
    # (tests/workers/test_quality_monitoring.py) decide on the evidence.
    vendors = [{"vendor": "acme", "u_t": 0.80}]
    alerts = alerts_for(previous, {"certifications": [cert], "vendor_reports": vendors}, options)
    assert [(a["kind"], a["subject"]) for a in alerts] == [("certification_changed", "m 2")]
    # No change, no alert.
    same = PreviousResults(1, {7: {"certified": True, "verdict": "certified"}}, {})
    assert alerts_for(same, {"certifications": [cert], "vendor_reports": []}, options) == []


def test_request_audit_never_raises_without_a_broker(tmp_path):
    from celery import Celery

    from auditor.worker import celery_config
    from auditor.worker.dispatch import request_audit

    app = Celery("no-broker")
    conf = celery_config(worker=load_worker_settings({}))
    conf.update(broker_url="redis://127.0.0.1:1/0", result_backend="redis://127.0.0.1:1/0")
    app.config_from_object(conf)
    app.set_default()
    import auditor.worker.tasks  # noqa: F401 - registers the shared tasks

    assert request_audit(1) is None


def test_worker_settings_from_environment():
    w = load_worker_settings({"AUDITOR_QUALITY_ALPHA": "0.01", "AUDITOR_SWEEP_SECONDS": "5"})
    assert w.quality_alpha == 0.01 and AuditOptions.from_settings(w).quality_alpha == 0.01
    with pytest.raises(ValueError, match="AUDITOR_QUALITY_ALPHA"):
        load_worker_settings({"AUDITOR_QUALITY_ALPHA": "1.5"})
    assert w.sweep_seconds == 5.0
    with pytest.raises(ValueError, match="AUDITOR_AUDIT_BOOTSTRAP"):
        load_worker_settings({"AUDITOR_AUDIT_BOOTSTRAP": "many"})
    with pytest.raises(ValueError, match="SOFT_TIME_LIMIT"):
        load_worker_settings({"AUDITOR_AUDIT_SOFT_TIME_LIMIT": "10", "AUDITOR_AUDIT_TIME_LIMIT": "5"})


def test_pairwise_kappa_can_be_left_out(factory):
    ds, _, _, _ = _dataset(factory, "kappa", n_items=60, raters=4,
                           vendors={f"kappa-r{r}": "acme" for r in range(4)})
    snap = runner.snapshot(factory, ds)
    on = runner.compute_inline(snap, AuditOptions(n_bootstrap=20, pairwise_max_annotations=240))["results"]["agreements"]
    off_run = runner.compute_inline(snap, AuditOptions(n_bootstrap=20, pairwise_max_annotations=239))
    off = off_run["results"]["agreements"]
    assert {(r["vendor"], r["coefficient"]) for r in on} == {
        (v, c) for v in (None, "acme") for c in ("krippendorff_alpha", "fleiss_kappa", "cohen_kappa_pairwise_mean")}
    assert {r["coefficient"] for r in off} == {"krippendorff_alpha", "fleiss_kappa"}
    # Alpha and Fleiss' kappa do not depend on the choice.
    assert [r for r in on if r["coefficient"] != "cohen_kappa_pairwise_mean"] == off
    assert any("240 annotations > 239" in n for n in off_run["summary"]["notes"])
    assert load_worker_settings({"AUDITOR_AUDIT_PAIRWISE_MAX_ANNOTATIONS": "0"}).pairwise_max_annotations == 0


def test_pairwise_kappa_is_computed_whatever_the_size_by_default():
    # Its memory grows with the annotator pairs sharing items, not with annotations²:
    # no default cap (the old one left it out above 250,000 annotations).
    assert AuditOptions().pairwise_max_annotations is None
    assert load_worker_settings({}).pairwise_max_annotations is None
    assert AuditOptions.from_settings(load_worker_settings({})).pairwise_max_annotations is None


def test_an_audit_whose_attempts_keep_dying_is_abandoned(factory):
    ds, _, _, _ = _dataset(factory, "doomed")
    with session_scope(factory) as s:
        first = claim_audit(s, ds, task_id="same", lease=LEASE, max_attempts=2)
    with session_scope(factory) as s:  # its message redelivered after the process died
        again = claim_audit(s, ds, task_id="same", lease=LEASE, max_attempts=2)
    with session_scope(factory) as s:
        last = claim_audit(s, ds, task_id="same", lease=LEASE, max_attempts=2)
    assert (first.state, again.state, last.state) == ("claimed", "claimed", "abandoned")
    with session_scope(factory) as s:
        run = s.get(AuditRun, first.run_id)
        assert run.status == AuditStatus.FAILED and "abandoned after 2 attempts" in run.error


def test_arrivals_during_a_run_cause_one_follow_up(factory):
    ds, v1, _, _ = _dataset(factory, "arrivals")
    with session_scope(factory) as s:
        c = claim_audit(s, ds, task_id="run-1", lease=LEASE)
    snap = runner.snapshot(factory, ds)
    # Three imports land while run 1 computes; their audit requests find it busy.
    for k in range(3):
        import_annotations(factory, ds, [(f"i{k}", f"late{k}", 1)], key=f"late{k}")
        with session_scope(factory) as s:
            assert claim_audit(s, ds, task_id=f"request-{k}", lease=LEASE).state == "busy"
    done = runner.finish(factory, c.run_id, task_id="run-1", data_version=snap.data_version,
                         merged=runner.compute_inline(snap, OPTIONS), previous=snap.previous, options=OPTIONS,
                         timings={})
    outcome = runner.Outcome("succeeded", c.run_id, snap.data_version, done.current_version)
    assert outcome.needs_follow_up and done.current_version == v1 + 3
    follow = runner.run_audit(factory, ds, task_id="follow-up", options=OPTIONS, lease=LEASE)
    assert follow.state == "succeeded" and follow.data_version == v1 + 3 and not follow.needs_follow_up
    assert runner.run_audit(factory, ds, task_id="straggler", options=OPTIONS, lease=LEASE).state == "current"
    with session_scope(factory) as s:
        versions = s.execute(select(AuditRun.data_version).where(AuditRun.dataset_id == ds)
                             .order_by(AuditRun.id)).scalars().all()
    assert versions == [v1, v1 + 3]


def test_a_dataset_with_100000_annotators_is_audited(pg_engine):
    """Past 65,535 annotators the snapshot's annotator query once needed one parameter each
    (PostgreSQL's limit): every audit of such a dataset failed, and was retried forever."""
    from auditor.db import make_session_factory

    factory = make_session_factory(pg_engine)
    ds = make_dataset(factory, "crowd-100k", ["a", "b"])
    rng = np.random.default_rng(0)
    rows = [(f"i{n // 2}", f"r{n}", int(rng.integers(0, 2))) for n in range(100_000)]
    import_annotations(factory, ds, rows)
    out = runner.run_audit(factory, ds, task_id="big", options=OPTIONS, lease=LEASE)
    assert out.state == "succeeded"
    with session_scope(factory) as s:
        run = s.get(AuditRun, out.run_id)
        assert run.status == AuditStatus.SUCCEEDED
        assert any("pairwise Cohen's kappa left out: 100000 annotators" in n for n in run.summary["notes"])
    with session_scope(factory) as s:
        snap = load_snapshot(s, ds)
    assert len(snap.annotator_names) == 100_000 and snap.n_annotations == 100_000
    from auditor.audit.snapshot import load_snapshot as load_public

    with pg_engine.connect() as conn:
        public = load_public(conn, ds, annotations=True)
    assert public.annotations.n_annotators == 100_000


def test_curves_too_costly_to_compute_exactly_are_drawn_or_left_out_with_a_note(factory, monkeypatch):
    """Items with very many labels over many classes would need 10¹¹ sub-count vectors and
    hours. Majority and plurality curves are then drawn by Monte Carlo (each point with its
    standard error, and a note); the ABC, whose model is those sums, is left out with a note.
    The rest of the audit stands as it is."""
    from auditor.stats.equivalence import exact

    ds, _, truth, _ = _dataset(factory, "costly", n_items=40, raters=4)
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(t) for n, t in enumerate(truth)})
    import_predictions(factory, ds, "p", "1",
                       probabilities={f"i{n}": (0.8, 0.2) if t == 0 else (0.3, 0.7) for n, t in enumerate(truth)})
    # A weak classifier (every third label flipped): its equivalence falls within the curve.
    import_predictions(factory, ds, "w", "1",
                       labels={f"i{n}": int(t) ^ (n % 3 == 0) for n, t in enumerate(truth)})
    snap = runner.snapshot(factory, ds)
    full = runner.compute_inline(snap, OPTIONS)
    assert {(c["combiner"], c["release_id"] is None) for c in full["results"]["power_curves"]} == {
        ("majority", True), ("majority", False), ("abc", False)}
    assert all(c["method"] == "exact" and c.get("equivalence_mc_error") is None for c in full["results"]["power_curves"])
    assert all("k" in p and "mc_error" not in p for c in full["results"]["power_curves"] for p in c["points"])
    monkeypatch.setattr(exact, "MAX_SUB_COUNTS", 10)  # these 40 items × 4 labels need more
    exact.clear_table_cache()
    cut = runner.compute_inline(snap, OPTIONS)
    curves = cut["results"]["power_curves"]
    assert sorted(c["combiner"] for c in curves) == ["majority"] * 4  # the dataset's and each release's
    for c in curves:
        errors = [p["mc_error"] for p in c["points"] if "mc_error" in p]
        assert len(errors) >= 2 and min(errors) > 0
        assert c["method"] == "monte_carlo" and all("k" in p for p in c["points"])
    notes = cut["summary"]["notes"]
    # The weak classifier's equivalence is a number read off a drawn curve: its own error is stored.
    weak = [c for c in curves if c["release_id"] is not None and c["equivalence"] is not None]
    assert weak
    for c in weak:
        assert c["equivalence_mc_error"] > 0
        assert any(f"release {c['release_id']}: survey equivalence (majority, agreement)" in n
                   and "Monte Carlo standard error of" in n for n in notes)
    assert any(n.startswith("power curve (majority, agreement): its exact sums are out of reach") for n in notes)
    assert any("survey equivalence (abc, cross_entropy) not computed: the exact abc curve would sum over" in n
               and "no Monte Carlo path" in n for n in notes)
    assert cut["results"]["certifications"] == full["results"]["certifications"]
    assert cut["results"]["agreements"] == full["results"]["agreements"]


def test_an_expert_equivalence_out_of_exact_reach_is_drawn_with_its_error(monkeypatch):
    """A vendor's expert equivalence whose exact sums are out of reach is drawn by Monte Carlo
    (not left out): each value carries its mc_error in the vendor report, and a note says so."""
    from auditor.audit.inputs import AuditSnapshot
    from auditor.stats.equivalence import exact

    rng = np.random.default_rng(4)
    n_items, crowd, experts = 80, 6, 4
    truth = rng.integers(0, 3, n_items)
    item, annotator, label = [], [], []
    for i, t in enumerate(truth):
        for a in range(crowd + experts):
            right = rng.random() < (0.6 if a < crowd else 0.9)
            item.append(i)
            annotator.append(a)
            label.append(int(t) if right else int(rng.integers(0, 3)))
    item, annotator, label = np.array(item), np.array(annotator), np.array(label)
    counts = np.zeros((n_items, 3), dtype=np.int64)
    np.add.at(counts, (item, label), 1)
    n_ann = crowd + experts
    snap = AuditSnapshot(
        dataset_id=1, workspace_id=1, name="experts", labels=("a", "b", "c"), data_version=1,
        item_ids=np.arange(1, n_items + 1), counts=counts, gold=np.full(n_items, -1, dtype=np.int64),
        ann_item=item, ann_annotator=annotator, ann_label=label, annotator_ids=np.arange(1, n_ann + 1),
        annotator_names=tuple(f"r{a}" for a in range(n_ann)),
        annotator_vendors=tuple("acme" if a < crowd else "panel" for a in range(n_ann)),
        annotator_tiers=tuple("crowd" if a < crowd else "expert" for a in range(n_ann)),
        releases=(), previous=PreviousResults())
    exact.clear_table_cache()
    full = runner.compute_inline(snap, OPTIONS)
    acme = next(v for v in full["results"]["vendor_reports"] if v["vendor"] == "acme")
    assert acme["expert_equivalence"] is not None
    assert acme["expert_equivalence_method"] == "exact" and acme["expert_equivalence_mc_error"] is None
    assert not any("mc_error" in d for d in acme["details"]["expert_equivalence"])
    monkeypatch.setattr(exact, "MAX_SUB_COUNTS", 0)
    exact.clear_table_cache()
    cut = runner.compute_inline(snap, OPTIONS)
    exact.clear_table_cache()
    acme = next(v for v in cut["results"]["vendor_reports"] if v["vendor"] == "acme")
    detail = acme["details"]["expert_equivalence"]
    drawn = [d for d in detail if "mc_error" in d]
    assert drawn and all(d["mc_error"] is None or d["mc_error"] > 0 for d in drawn)
    # The headline (the last value) keeps its method and error in columns of the report.
    assert acme["expert_equivalence"] == detail[-1]["value"]
    assert acme["expert_equivalence_method"] == "monte_carlo"
    assert acme["expert_equivalence_mc_error"] == detail[-1].get("mc_error", 0.0)
    assert any(n.startswith("expert equivalence of acme: its exact sums are out of reach")
               for n in cut["summary"]["notes"])
    assert not any("expert equivalence of acme: the exact" in n for n in cut["summary"]["notes"])
