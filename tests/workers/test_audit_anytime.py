"""The anytime verdict in the audit pipeline: state per dataset × release, both verdicts
recorded, the badge and the alert on the configured one (real PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import select

from auditor.audit import runner
from auditor.audit.inputs import PreviousResults
from auditor.audit.pipeline import AuditOptions, _in_ranges, _merged_ranges, _to_ranges, alerts_for
from auditor.config import load_worker_settings
from auditor.db import make_session_factory, session_scope
from auditor.db.models import Alert, Certification
from auditor.stats import AnytimeState
from tests.workers._data import import_annotations, import_predictions, make_dataset

LEASE = timedelta(seconds=60)


def _rows(labels: np.ndarray, items: range, prefix: str = "r"):
    return [(f"i{n}", f"{prefix}{r}", int(labels[n, r])) for n in items for r in range(labels.shape[1])]


def _counts(labels: np.ndarray, items) -> np.ndarray:
    return np.stack([np.bincount(labels[n], minlength=3) for n in items])


def _cert(factory, run_id) -> Certification:
    with session_scope(factory) as s:
        cert = s.execute(select(Certification).where(Certification.audit_run_id == run_id)).scalar_one()
        s.expunge(cert)
        return cert


def _first_audit(factory, name: str, seed: int, n1: int, n2: int):
    """A dataset whose first ``n1`` of ``n1 + n2`` items (4 labels, a model right 97% of the
    time) are labelled and predicted, and its first audit: (dataset, labels, predictions, run id)."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 3, n1 + n2)
    labels = np.where(rng.random((n1 + n2, 4)) < 0.85, truth[:, None], rng.integers(0, 3, (n1 + n2, 4)))
    preds = np.where(rng.random(n1 + n2) < 0.97, truth, (truth + 1) % 3)
    ds = make_dataset(factory, name, ["a", "b", "c"])
    import_annotations(factory, ds, _rows(labels, range(n1)))
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(preds[n]) for n in range(n1)})
    first = runner.run_audit(factory, ds, task_id=f"{name}-1", options=AuditOptions(n_bootstrap=10), lease=LEASE)
    return ds, labels, preds, first.run_id


def test_anytime_state_continues_across_audits_with_frozen_items(pg_factory):
    _, factory = pg_factory
    rng = np.random.default_rng(4)
    n1, n2 = 300, 200
    ds, labels, preds, first_run = _first_audit(factory, "stream", 4, n1, n2)
    opts = AuditOptions(n_bootstrap=10)
    c1 = _cert(factory, first_run)

    expected = AnytimeState()
    expected.update(_counts(labels, range(n1)), preds[:n1])
    assert c1.method == "anytime"
    assert c1.s_anytime_t == pytest.approx(expected.confidence("theoretical").score, abs=1e-9)
    assert c1.s_anytime_e == pytest.approx(expected.confidence("empirical").score, abs=1e-9)
    # the earlier pair of sequences is recorded beside the betting verdict
    fan = c1.details["confidence"]["theoretical/anytime-fan"]["score"]
    assert fan == pytest.approx(expected.confidence("theoretical", method="anytime-fan").score, abs=1e-9)
    assert c1.details["anytime"]["version"] == 2 and c1.details["anytime"]["bet_t"]["n"] == n1
    assert c1.certified == c1.certified_anytime == (c1.s_anytime_t >= 0.95)
    assert c1.certified_paper == (c1.s_oms_t >= 0.95)
    assert c1.details["anytime"]["lower"]["n"] == n1 and c1.details["anytime_new_items"]["l"] == n1

    # A fifth label on the first 100 items (they entered already: their contribution is
    # frozen), and 200 new items with predictions.
    extra = rng.integers(0, 3, (n1 + n2, 1))
    import_annotations(factory, ds, _rows(extra, range(100), prefix="late"))
    import_annotations(factory, ds, _rows(labels, range(n1, n1 + n2)))
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(preds[n]) for n in range(n1, n1 + n2)})
    second = runner.run_audit(factory, ds, task_id="a2", options=opts, lease=LEASE)
    c2 = _cert(factory, second.run_id)
    expected.update(_counts(labels, range(n1, n1 + n2)), preds[n1:])
    assert c2.details["anytime"]["lower"]["n"] == n1 + n2
    assert c2.details["anytime_new_items"] == {"t": n2, "e": n2, "l": n2, "bt": n2, "be": n2}
    assert c2.s_anytime_t == pytest.approx(expected.confidence("theoretical").score, abs=1e-9)
    # Recomputing from the current counts would rewrite the first items' history.
    current = np.concatenate([_counts(np.hstack([labels[:100], extra[:100]]), range(100)),
                              _counts(labels, range(100, n1 + n2))])
    recomputed = AnytimeState()
    recomputed.update(current, preds)
    assert recomputed.upper_t.s != pytest.approx(c2.details["anytime"]["upper_t"]["s"])
    assert recomputed.bet_t.s_x != pytest.approx(c2.details["anytime"]["bet_t"]["s_x"])
    # The paper's verdict uses every current label.
    assert c2.n_items_upper == n1 + n2


def test_badge_follows_the_configured_method(pg_factory):
    _, factory = pg_factory
    rng = np.random.default_rng(1)
    n = 1500
    truth = rng.integers(0, 3, n)
    labels = np.where(rng.random((n, 5)) < 0.8, truth[:, None], rng.integers(0, 3, (n, 5)))
    ds = make_dataset(factory, "badge", ["a", "b", "c"])
    import_annotations(factory, ds, _rows(labels, range(n)))
    import_predictions(factory, ds, "m", "1", labels={f"i{i}": int(truth[i]) for i in range(n)})
    out = runner.run_audit(factory, ds, task_id="b1", options=AuditOptions(n_bootstrap=10, method="oms"),
                           lease=LEASE)
    c = _cert(factory, out.run_id)
    assert c.method == "oms" and c.certified  # a perfect model on 1,500 items: both verdicts certify
    assert c.certified == c.certified_paper == (c.s_oms_t >= 0.95)
    assert c.certified_anytime == (c.s_anytime_t >= 0.95)
    with session_scope(factory) as s:
        alerts = s.execute(select(Alert).where(Alert.audit_run_id == out.run_id)).scalars().all()
        kinds = [(a.kind, a.details.get("method")) for a in alerts]
    assert ("certification_changed", "oms") in kinds


def test_certification_alert_uses_the_badge_verdict():
    previous = PreviousResults(1, {7: {"certified": False, "verdict": "not certified", "method": "anytime"}}, {})
    cert = {"release_id": 7, "certified": True, "verdict": "certified", "l": 0.99, "u_t": 0.9, "s_oms_t": 0.9,
            "s_anytime_t": 0.97, "method": "anytime", "details": {"model": "m", "version": "2"}}
    (alert,) = alerts_for(previous, {"certifications": [cert], "vendor_reports": []}, AuditOptions())
    assert alert["details"]["method"] == "anytime" and alert["details"]["score"] == 0.97
    assert "anytime verdict" in alert["message"]


def test_stored_state_of_the_fan_pair_alone_restarts_the_betting_streams(db_engine):
    """A state stored before the betting streams (version 1): at the next audit every item
    labelled and predicted enters them, in id order, with its current labels; the fan pair
    goes on from its stored sums (SQLite and PostgreSQL)."""
    factory = make_session_factory(db_engine)
    rng = np.random.default_rng(7)
    n1, n2 = 250, 150
    ds, labels, preds, first_run = _first_audit(factory, "v1-state", 6, n1, n2)
    opts = AuditOptions(n_bootstrap=10)
    with session_scope(factory) as s:
        cert = s.execute(select(Certification).where(Certification.audit_run_id == first_run)).scalar_one()
        stored = cert.details["anytime"]
        v1 = {k: stored[k] for k in ("upper_t", "upper_e", "lower")}
        v1["entered"] = {k: stored["entered"][k] for k in ("t", "e", "l")}
        cert.details = {**cert.details, "anytime": v1}
    extra = rng.integers(0, 3, (n1, 1))
    import_annotations(factory, ds, _rows(extra, range(50), prefix="late"))  # labels after entering
    import_annotations(factory, ds, _rows(labels, range(n1, n1 + n2)))
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(preds[n]) for n in range(n1, n1 + n2)})
    second = _cert(factory, runner.run_audit(factory, ds, task_id="v2", options=opts, lease=LEASE).run_id)

    state = second.details["anytime"]
    assert state["version"] == 2
    assert second.details["anytime_new_items"] == {"t": n2, "e": n2, "l": n2, "bt": n1 + n2, "be": n1 + n2}
    assert state["lower"]["n"] == n1 + n2 and state["upper_t"]["s"] != pytest.approx(v1["upper_t"]["s"])
    current = np.concatenate([_counts(np.hstack([labels[:50], extra[:50]]), range(50)),
                              _counts(labels, range(50, n1 + n2))])
    restarted = AnytimeState()
    restarted.update(current, preds)
    assert state["bet_t"]["n"] == n1 + n2
    assert state["bet_t"]["log_max"] == pytest.approx(restarted.bet_t.log_max, abs=1e-9)
    assert second.s_anytime_t == pytest.approx(restarted.confidence("theoretical").score, abs=1e-9)
    # the restarted streams go on at the next audit (an item without a prediction enters none of them)
    import_annotations(factory, ds, [("unpredicted", "r0", 0)])
    third = _cert(factory, runner.run_audit(factory, ds, task_id="v3", options=opts, lease=LEASE).run_id)
    assert third.details["anytime"]["bet_t"] == state["bet_t"]
    assert third.details["anytime_new_items"] == {"t": 1, "e": 0, "l": 0, "bt": 0, "be": 0}


def test_certify_method_setting():
    assert load_worker_settings({}).certify_method == "anytime"
    w = load_worker_settings({"AUDITOR_CERTIFY_METHOD": "oms"})
    assert AuditOptions.from_settings(w).method == "oms"
    assert load_worker_settings({"AUDITOR_CERTIFY_METHOD": "anytime-fan"}).certify_method == "anytime-fan"
    with pytest.raises(ValueError, match="AUDITOR_CERTIFY_METHOD"):
        load_worker_settings({"AUDITOR_CERTIFY_METHOD": "bonferroni"})


def test_entered_item_ranges_round_trip():
    ids = np.array([3, 5, 8, 9, 12, 40, 41])
    mask = np.array([True, True, False, True, True, False, True])
    ranges = _to_ranges(ids, mask)
    assert ranges == [[3, 5], [9, 12], [41, 41]]
    assert (_in_ranges(ids, ranges) == mask).all()
    # items created later have larger ids and are outside every stored range
    assert not _in_ranges(np.array([42, 100]), ranges).any()
    # merging new items into stored ranges gives the ranges of the union
    rng = np.random.default_rng(0)
    many = np.sort(rng.choice(10_000, 500, replace=False)) + 1
    for _ in range(50):
        old, add = rng.random(500) < 0.5, rng.random(500) < 0.1
        assert _merged_ranges(many, _to_ranges(many, old), np.flatnonzero(add & ~old)) == \
            _to_ranges(many, old | add)
    # unsorted ids take the general path, with the same answer
    perm = np.array([6, 0, 3, 1, 5, 2, 4])
    assert (_in_ranges(ids[perm], ranges) == mask[perm]).all()


def test_fanned_out_release_part_carries_the_same_anytime_state(pg_factory):
    import json

    from auditor.audit.pipeline import dataset_part, release_part, release_payload

    _, factory = pg_factory
    rng = np.random.default_rng(9)
    truth = rng.integers(0, 3, 200)
    labels = np.where(rng.random((200, 3)) < 0.8, truth[:, None], rng.integers(0, 3, (200, 3)))
    ds = make_dataset(factory, "fan", ["a", "b", "c"])
    import_annotations(factory, ds, _rows(labels, range(200)))
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(truth[n]) for n in range(200)})
    opts = AuditOptions(n_bootstrap=10)
    snap = runner.snapshot(factory, ds)
    inline = runner.compute_inline(snap, opts)["results"]["certifications"][0]
    payload = json.loads(json.dumps(runner.plain(release_payload(snap, snap.releases[0]))))
    via_message = release_part(payload, dataset_part(snap, opts)["upper"], opts)["certifications"][0]
    for key in ("s_anytime_t", "s_anytime_e", "certified_anytime", "certified", "method"):
        assert via_message[key] == inline[key]
    assert via_message["details"]["anytime"] == inline["details"]["anytime"]
    assert inline["details"]["anytime"]["lower"]["n"] == 200
