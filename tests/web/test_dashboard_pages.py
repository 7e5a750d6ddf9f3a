"""The dashboards' pages, server-side: what each shows against the JSON API and the
statistics library on the same data, one cross-entropy convention, L's interval, "certified
since", the alerts page and its acknowledge form (CSRF), audit runs and their page,
releases side by side, the vendors list, the items pages, the API docs page; tables sorted,
filtered and paged on the server; who may see what; and statements that do not grow with
the history.
"""

from __future__ import annotations

import html
import math
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select

from auditor.db import (
    Alert,
    AlertSeverity,
    Annotator,
    AuditRun,
    AuditStatus,
    BestScore,
    Certification,
    Dataset,
    Item,
    Model,
    PowerCurve,
    QualityWindow,
    Release,
    VendorReport,
    Workspace,
    make_session_factory,
)
from auditor.web import dashboards
from tests.web.conftest import csrf_token, login, make_tenant
from tests.web.statements import statements

pytestmark = pytest.mark.services

HOEFFDING_95 = math.log(2 / 0.05)  # two-sided: each tail 2.5%


def _session(app, tenant, role="admin"):
    client = app.test_client()
    assert login(client, tenant, role).status_code == 302
    return client


def _page(client, path: str, status: int = 200) -> str:
    r = client.get(path)
    assert r.status_code == status, (path, r.status_code)
    return r.get_data(as_text=True)


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _table(page: str, table_id: str) -> str:
    match = re.search(rf'<table class="[^"]*" id="{re.escape(table_id)}">(.*?)</table>', page, re.S)
    assert match, f"no table {table_id}"
    return match.group(1)


def _rows(table: str, attr: str) -> list[str]:
    return [html.unescape(x) for x in re.findall(rf'<tr(?: [^>]*)? {attr}="([^"]+)"', table)]


def _chart(page: str, chart_id: str) -> dict:
    import json

    match = re.search(rf'<script type="application/json" id="{re.escape(chart_id)}">(.*?)</script>', page, re.S)
    assert match, f"no chart {chart_id}"
    return json.loads(match.group(1))


def _api(client, tenant, path):
    r = client.get("/api/v1" + path, headers=tenant.auth("admin"))
    assert r.status_code == 200, (path, r.get_json())
    return r.get_json()


# --- a long history written directly (no audits): many runs, releases, alerts, items ----------------


def _long_history(app, *, runs: int, releases: int, alerts: int, items: int, annotators: int):
    """A workspace whose dataset has ``runs`` audits, each certifying every release so far, with
    power curves, BEST, vendor reports and quality windows, plus ``alerts`` alerts and ``items`` items."""
    tenant = make_tenant(app, vendor="v-big", extra_vendors=())
    factory = make_session_factory(app.extensions["auditor.engine"])
    start = datetime(2026, 1, 5, tzinfo=UTC)
    with factory() as db:
        ds = Dataset(workspace_id=tenant.workspace_id, name="long", labels=["a", "b", "c"], data_version=runs)
        db.add(ds)
        db.flush()
        db.add_all(Item(dataset_id=ds.id, external_id=f"item-{i:05d}", label_counts=[i % 3, 1, 2],
                        gold_label=(i % 3 if i % 4 == 0 else None)) for i in range(items))
        db.add_all(Annotator(workspace_id=tenant.workspace_id, external_id=f"v-big-{a:03d}", vendor="v-big")
                   for a in range(annotators))
        model = Model(workspace_id=tenant.workspace_id, name="clf")
        db.add(model)
        db.flush()
        rels = [Release(model_id=model.id, version=f"{r}.0", released_at=start + timedelta(days=r)) for r in range(releases)]
        db.add_all(rels)
        db.flush()
        points = [{"k": k, "mean": -1.6 + 0.1 * k, "ci_low": -1.65 + 0.1 * k, "ci_high": -1.55 + 0.1 * k,
                   "n_items": 100} for k in range(6)]
        for n in range(runs):
            when = start + timedelta(days=n, hours=1)
            run = AuditRun(dataset_id=ds.id, data_version=n + 1, status=AuditStatus.SUCCEEDED, created_at=when,
                           started_at=when + timedelta(seconds=1), finished_at=when + timedelta(seconds=3),
                           summary={"upper": {"u_t": 0.9, "u_e": 0.88, "n_items": items},
                                    "timings": {"claim": 0.01, "snapshot": 0.2, "compute": 1.5, "write": 0.1},
                                    "notes": [f"note {n}"]})
            db.add(run)
            db.flush()
            db.add(BestScore(audit_run_id=run.id, metric=dashboards.CE_METRIC, value=0.7, n_items=items))
            db.add(PowerCurve(audit_run_id=run.id, combiner="abc", scorer="cross_entropy", max_k=5, n_bootstrap=10,
                              points=points))
            for r, rel in enumerate(rels[: 1 + n * releases // runs]):
                ok = (n + r) % 5 != 0
                db.add(Certification(audit_run_id=run.id, release_id=rel.id, data_version=run.data_version,
                                     n_items_upper=items, n_items_lower=items, u_t=0.9, u_e=0.88,
                                     l=0.93 if ok else 0.89, s_oms_t=0.97 if ok else -0.2, s_anytime_t=0.96 if ok else 0.1,
                                     certified=ok, certified_with="U_t", method="anytime",
                                     verdict="certified" if ok else "not certified",
                                     details={"threshold": 0.95, "paper_method": "oms"}))
                # The first release's curves were drawn by Monte Carlo: their equivalence carries its error.
                db.add(PowerCurve(audit_run_id=run.id, release_id=rel.id, combiner="abc", scorer="cross_entropy",
                                  max_k=5, n_bootstrap=10, points=points,
                                  method="monte_carlo" if r == 0 else "exact",
                                  equivalence_mc_error=0.0314 if r == 0 else None,
                                  classifier_score=-1.3, classifier_low=-1.35,
                                  classifier_high=-1.25, equivalence=1.5, equivalence_low=1.2, equivalence_high=1.8))
            db.add(VendorReport(audit_run_id=run.id, vendor="v-big", n_annotators=annotators, n_items=items,
                                n_annotations=3 * items, u_t=0.9, u_e=0.88, agreement=0.5,
                                # Its expert equivalence was drawn by Monte Carlo (beyond exact reach).
                                expert_equivalence=2.4, expert_equivalence_method="monte_carlo",
                                expert_equivalence_mc_error=0.07,
                                annotators=[{"annotator": f"v-big-{a:03d}", "agreement": 0.5 + a / (4 * annotators),
                                             "n_items": 10 + a, "lower_confidence": 0.4} for a in range(annotators)]))
            for a in range(annotators):
                db.add(QualityWindow(dataset_id=ds.id, grouping="annotator", group_name=f"v-big-{a:03d}",
                                     metric="agreement", window_key=n, window_start=start + timedelta(weeks=n),
                                     window_end=start + timedelta(weeks=n + 1), n_items=20, n_labels=20,
                                     value=0.9 - ((a * 37) % annotators) / (2 * annotators), low=0.3, high=0.99,
                                     audit_run_id=run.id))
        db.add_all(Alert(workspace_id=tenant.workspace_id, dataset_id=ds.id, kind=dashboards.ALERT_KINDS[k % 3],
                         severity=list(AlertSeverity)[k % 3], subject=f"subject {k}", message=f"message number {k}",
                         created_at=start + timedelta(hours=k)) for k in range(alerts))
        db.commit()
        release_ids = [r.id for r in rels]
        return tenant, ds.id, model.id, release_ids


@pytest.fixture(scope="module")
def long(app):
    return _long_history(app, runs=40, releases=6, alerts=70, items=300, annotators=120)


@pytest.fixture(scope="module")
def short(app):
    return _long_history(app, runs=3, releases=2, alerts=2, items=20, annotators=3)


# --- conventions --------------------------------------------------------------------------------


def test_cross_entropy_is_in_bits_and_lower_is_better_on_the_tile_and_the_curve_alike(app, seeded):
    client = _session(app, seeded.tenant)
    page = _page(client, f"/datasets/{seeded.dataset_id}")
    best = {b["metric"]: b["value"] for b in _api(client, seeded.tenant, f"/datasets/{seeded.dataset_id}/best-scores")["items"]}
    nats = best[dashboards.CE_METRIC]
    tile = re.search(r'<div class="card best" data-metric="cross entropy \(soft labels\)">(.*?)</div>', page, re.S).group(1)
    assert f"{nats / math.log(2):.3f} bits per label" in _text(tile) and "lower is better" in _text(tile)
    assert "Cross-entropy is in bits per label and lower is better" in page
    curves = _api(client, seeded.tenant, f"/datasets/{seeded.dataset_id}/power-curves?per_page=200")["items"]
    soft = [c for c in curves if c["scorer"] == "cross_entropy"]
    assert soft
    specs = [s for s in (_chart(page, f"chart-power-{i}") for i in range(1, 4) if f"chart-power-{i}" in page)
             if s["scorer"] == "cross_entropy"]
    (spec,) = specs
    human = [p for p in soft[0]["points"] if "k" in p]
    assert [p[1] for p in spec["series"][0]["points"]] == pytest.approx([-p["mean"] for p in human])
    assert all(lo <= y <= hi for (_, y), (_, lo, hi) in zip(spec["series"][0]["points"], spec["series"][0]["band"],
                                                           strict=True) if lo is not None)
    assert "lower is better" in spec["y_label"]
    (floor,) = spec["hlines"]
    assert floor["y"] == pytest.approx(nats / math.log(2))
    scores = sorted(-c["classifier_score"] for c in soft)
    assert sorted(m["y"] for m in spec["markers"]) == pytest.approx(scores)
    # The agreement curve reads against BEST's accuracy ceiling, unconverted.
    agreement = next(s for s in (_chart(page, f"chart-power-{i}") for i in (1, 2)) if s["scorer"] == "agreement")
    assert agreement["hlines"][0]["y"] == pytest.approx(best["accuracy"])


@given(st.floats(0, 1), st.integers(1, 10**6))
def test_l_interval_is_the_two_sided_95_percent_hoeffding_interval(value, n):
    low, high = dashboards.l_interval(value, n)
    half = math.sqrt(HOEFFDING_95 / (2 * n))
    assert 0 <= low <= value <= high <= 1
    assert low == pytest.approx(max(0.0, value - half)) and high == pytest.approx(min(1.0, value + half))


def test_the_model_page_shows_l_with_its_interval_the_badges_s_and_its_threshold(app, seeded):
    client = _session(app, seeded.tenant)
    page = _page(client, f"/models/{seeded.model_id}?dataset_id={seeded.dataset_id}")
    latest = {c["version"]: c for c in _api(client, seeded.tenant,
                                            f"/datasets/{seeded.dataset_id}/certifications?latest=true")["items"]}
    table = _table(page, "timeline")
    for version, c in latest.items():
        row = re.search(rf'<tr data-release="{re.escape(version)}">(.*?)</tr>', table, re.S).group(1)
        cells = [_text(x) for x in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        half = math.sqrt(HOEFFDING_95 / (2 * c["n_items_lower"]))
        assert cells[2] == f"{c['l']:.3f} [{max(0, c['l'] - half):.3f}, {min(1, c['l'] + half):.3f}]"
        s = c["s_anytime_t"]
        assert cells[4] == ("< 0, needs ≥ 0.95" if s < 0 else f"{s:.4f} {'≥' if s >= 0.95 else '<'} 0.95")


def test_certified_since_is_the_first_audit_of_the_current_run_of_certified_verdicts(db_engine):
    """Each audit's certifications, written by ``finish_audit``, carry the first run of their
    release's current certified streak on the dataset (a release absent from a run keeps
    its streak; another dataset's verdicts count apart); a page reads it in one statement."""
    from auditor.audit.store import finish_audit

    factory = make_session_factory(db_engine)
    with factory() as db:
        ws = Workspace(slug="since-" + uuid.uuid4().hex[:10], name="since")
        db.add(ws)
        db.flush()
        ds = Dataset(workspace_id=ws.id, name="d", labels=["a", "b"])
        other = Dataset(workspace_id=ws.id, name="e", labels=["a", "b"])
        model = Model(workspace_id=ws.id, name="m")
        db.add_all([ds, other, model])
        db.flush()
        streak, lapsed, steady, gap = (Release(model_id=model.id, version=v)
                                       for v in ("streak", "lapsed", "steady", "gap"))
        db.add_all([streak, lapsed, steady, gap])
        db.commit()
        # None: the release is not in that audit.
        verdicts = {streak.id: [False, True, True, False, True, True, True],
                    lapsed.id: [True, True, True, True, True, True, False],
                    steady.id: [True] * 7,
                    gap.id: [False, True, None, None, True, True, True]}

        def audit(dataset, n, releases):
            run = AuditRun(dataset_id=dataset.id, data_version=n, status=AuditStatus.RUNNING, task_id="t",
                           started_at=datetime(2026, 2, 1 + n, tzinfo=UTC))
            db.add(run)
            db.commit()
            rows = [{"release_id": rid, "n_items_upper": 1, "n_items_lower": 1, "u_t": 0.5, "l": 0.6,
                     "certified": v, "certified_with": "U_t", "verdict": "certified" if v else "not certified"}
                    for rid, v in releases.items() if v is not None]
            assert finish_audit(db, run.id, task_id="t", data_version=n, results={"certifications": rows},
                                summary={}, quality_alpha=None).written
            db.commit()
            return run

        runs = [audit(ds, n, {rid: v[n] for rid, v in verdicts.items()}) for n in range(7)]
        # The same release on another dataset, certified there since its only audit: counted apart.
        run_e = audit(other, 1, {streak.id: True})
        latest = [(c, d) for c, d in db.execute(
            select(Certification, AuditRun.dataset_id).join(AuditRun, AuditRun.id == Certification.audit_run_id)
            .where(Certification.audit_run_id.in_([runs[-1].id, run_e.id])))]
        with statements(db_engine) as seen:
            since = dashboards.certified_since(db, latest)
        assert len([x for x in seen if x.lstrip().upper().startswith("SELECT")]) == 1
        assert since[(streak.id, ds.id)]["run_id"] == runs[4].id
        assert since[(steady.id, ds.id)]["run_id"] == runs[0].id
        assert since[(gap.id, ds.id)]["run_id"] == runs[1].id  # runs 2 and 3 left it out: no break
        assert (lapsed.id, ds.id) not in since  # not certified now
        assert since[(streak.id, other.id)]["run_id"] == run_e.id
        at, want = since[(streak.id, ds.id)]["at"], runs[4].finished_at
        assert (at if at.tzinfo else at.replace(tzinfo=UTC)) == (want if want.tzinfo else want.replace(tzinfo=UTC))
        assert since[(streak.id, ds.id)]["data_version"] == 4


def test_the_overview_explains_each_verdict_and_says_since_when_it_holds(app, seeded):
    client = _session(app, seeded.tenant)
    page = _page(client, "/")
    latest = _api(client, seeded.tenant, f"/datasets/{seeded.dataset_id}/certifications?latest=true")["items"]
    newest = next(c for c in latest if c["version"] == "2.1")
    row = _text(re.search(rf'<tr data-release="{seeded.release_ids["2.1"]}">(.*?)</tr>', page, re.S).group(1))
    s = newest["s_anytime_t"]
    assert (f"{s:.4f} ≥ 0.95" if newest["certified"] else "0.95") in row
    assert f"{newest['l']:.3f} [" in row
    history = _api(client, seeded.tenant, f"/models/{seeded.model_id}/certifications?per_page=500")["items"]
    mine = sorted((c for c in history if c["version"] == "2.1"), key=lambda c: c["audit_run_id"])
    if newest["certified"]:
        failed = [c["audit_run_id"] for c in mine if not c["certified"]]
        first = min(c["audit_run_id"] for c in mine if c["certified"] and c["audit_run_id"] > max(failed or [0]))
        assert f"(run {first})" in row
    assert "compare with 2.0" in row


# --- the dataset page's assumption checks ----------------------------------------------------------


def test_the_dataset_page_shows_the_assumption_checks_on_the_gold_items(app, seeded):
    from auditor.stats import annotations_from_records, check_assumptions

    page = _page(_session(app, seeded.tenant), f"/datasets/{seeded.dataset_id}")
    labels = ["negative", "positive"]
    ann = annotations_from_records([(r["item_id"], r["annotator_id"], r["label"]) for r in seeded.data.annotations],
                                   labels=labels)
    gold = {r["item_id"]: r["label"] for r in seeded.data.gold}
    report = check_assumptions(ann, gold)
    checks = _text(_table(page, "assumption-checks"))
    t1 = report.theorem1
    assert f"{t1.conditional:.3f} {t1.marginal:.3f} {'holds' if t1.holds else 'fails'}" in checks
    assert f"{report.average_annotator_accuracy:.3f} {report.upper.theoretical:.3f}" in checks
    theorem3 = _text(_table(page, "theorem3-checks"))
    a = report.annotators
    assert (f"single annotators vs. the others' plurality {a.p_correct_given_a_wrong:.3f} {a.p_agree_given_a_wrong:.3f} "
            f"{a.p_wrong_given_a_wrong:.3f}") in theorem3
    assert theorem3.count("sentiment-classifier") == len(seeded.release_ids)


def test_a_dataset_without_gold_says_how_to_get_the_checks(app, long):
    tenant, *_ = long
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        empty = Dataset(workspace_id=tenant.workspace_id, name="no-gold", labels=["a", "b"])
        db.add(empty)
        db.commit()
        empty_id = empty.id
    page = _page(_session(app, tenant), f"/datasets/{empty_id}")
    assert "No audit yet" in page


def test_an_equivalence_read_off_a_drawn_curve_shows_its_monte_carlo_error(app, long):
    tenant, ds_id, _model, _releases = long
    page = _page(_session(app, tenant), f"/datasets/{ds_id}")
    rows = [_text(r) for r in re.findall(r"<tr>(.*?)</tr>", _table(page, "equivalences"), re.S) if "<th" not in r]
    first = [r for r in rows if r.startswith("clf 0.0 ")]
    assert first and all("1.50 [1.20, 1.80] MC ±0.031" in r for r in first)
    assert all("MC" not in r for r in rows if r not in first)
    # The audit run's page says it too, from the curves' own columns (their points are not loaded).
    client = _session(app, tenant)
    run_id = _api(client, tenant, f"/datasets/{ds_id}/audit-runs?per_page=1")["items"][0]["id"]
    curves = _table(_page(client, f"/audit-runs/{run_id}"), "run-curves")
    assert "1.50 [1.20, 1.80] MC ±0.031" in _text(curves)
    # The API gives the curve's method and the error beside the equivalence; points hold points only.
    listed = _api(client, tenant, f"/datasets/{ds_id}/power-curves?audit_run_id={run_id}")["items"]
    drawn = [c for c in listed if c["method"] == "monte_carlo"]
    assert drawn and all(c["equivalence_mc_error"] == 0.0314 for c in drawn)
    assert all(c["equivalence_mc_error"] is None for c in listed if c not in drawn)
    assert all("k" in p for c in listed for p in c["points"])


def test_a_drawn_expert_equivalence_shows_its_monte_carlo_error_on_every_vendor_table(app, long):
    tenant, ds_id, _model, _releases = long
    client = _session(app, tenant)
    run_id = _api(client, tenant, f"/datasets/{ds_id}/audit-runs?per_page=1")["items"][0]["id"]
    for path, table in [(f"/datasets/{ds_id}", "vendor-table"), ("/vendors", "vendors-index"),
                        (f"/vendors/v-big?dataset_id={ds_id}", "vendor-datasets"), (f"/audit-runs/{run_id}", "run-vendors")]:
        assert "2.40 MC ±0.07" in _text(_table(_page(client, path), table)), path
    reports = _api(client, tenant, f"/datasets/{ds_id}/vendor-reports")["items"]
    assert reports and all(r["expert_equivalence_method"] == "monte_carlo" and r["expert_equivalence_mc_error"] == 0.07
                           for r in reports)


def test_the_equivalence_filter_says_when_the_draws_cannot_pin_the_value():
    from types import SimpleNamespace

    from auditor.web.formatting import equivalence

    def curve(method="exact", error=None):
        return SimpleNamespace(equivalence_note=None, equivalence=2.5, equivalence_low=2.0, equivalence_high=3.0,
                               method=method, equivalence_mc_error=error)

    assert str(equivalence(curve())) == "2.50 <small>[2.00, 3.00]</small>"
    assert "MC ±0.0048" in str(equivalence(curve("monte_carlo", 0.0048)))
    undetermined = str(equivalence(curve("monte_carlo", None)))
    assert "MC error undetermined" in undetermined and "±" not in undetermined
    # An exact curve has no Monte Carlo error, whatever the column holds.
    assert "MC" not in str(equivalence(curve("exact", 0.01)))


def test_the_expert_equivalence_filter_gives_the_error_of_drawn_curves():
    from types import SimpleNamespace

    from auditor.web.formatting import expert_equivalence

    def report(value, method=None, error=None):
        return SimpleNamespace(expert_equivalence=value, expert_equivalence_method=method,
                               expert_equivalence_mc_error=error)

    assert "–" in str(expert_equivalence(None)) and "–" in str(expert_equivalence(report(None)))
    assert str(expert_equivalence(report(3.14159, "exact"))) == "3.14"
    assert "3.14" in str(expert_equivalence(report(3.14159, "monte_carlo", 0.021)))
    assert "MC ±0.021" in str(expert_equivalence(report(3.14159, "monte_carlo", 0.021)))
    assert "MC error undetermined" in str(expert_equivalence(report(3.14159, "monte_carlo", None)))
    # Rows as dictionaries (the vendors' listing) read the same.
    assert "MC ±0.5" in str(expert_equivalence({"expert_equivalence": 2.0, "expert_equivalence_method": "monte_carlo",
                                               "expert_equivalence_mc_error": 0.5}))


# --- alerts ---------------------------------------------------------------------------------------


def test_the_alerts_page_filters_and_pages_on_the_server(app, long):
    tenant, *_ = long
    client = _session(app, tenant, "viewer")
    page = _page(client, "/alerts")
    table = _table(page, "alerts")
    ids = [int(x) for x in _rows(table, "data-alert")]
    assert len(ids) == 50 and "1–50 of 70" in _text(page)
    assert "Acknowledge" not in table  # a viewer sees no button
    with make_session_factory(app.extensions["auditor.engine"])() as db:
        newest = [a.id for a in db.scalars(select(Alert).where(Alert.workspace_id == tenant.workspace_id)
                                           .order_by(Alert.created_at.desc(), Alert.id.desc()))]
    assert ids == newest[:50]
    assert [int(x) for x in _rows(_table(_page(client, "/alerts?page=2"), "alerts"), "data-alert")] == newest[50:]
    critical = _table(_page(client, "/alerts?severity=critical"), "alerts")
    assert critical.count('class="sev-critical"') == len(_rows(critical, "data-alert")) == 23
    kinds = _text(_table(_page(client, "/alerts?kind=vendor_quality_changed&per_page=100"), "alerts"))
    assert kinds.count("vendor quality changed") == 23 and "certification changed" not in kinds
    found = _rows(_table(_page(client, "/alerts?q=number+6"), "alerts"), "data-alert")
    assert len(found) == 1 + 10  # 6 and 60..69
    oldest = _rows(_table(_page(client, "/alerts?sort=created&dir=asc&per_page=10"), "alerts"), "data-alert")
    assert [int(x) for x in oldest] == newest[::-1][:10]
    # Nothing a query string holds makes it fail.
    for query in ("sort=nope&dir=sideways&page=-4&per_page=100000", "page=99999999999999999999",
                  "q=" + "%25_" * 300, "severity=panic&kind=%00&dataset_id=abc&status=maybe"):
        r = client.get("/alerts?" + query)
        assert r.status_code in (200, 400), (query, r.status_code)


def test_acknowledging_an_alert_needs_a_writer_and_the_forms_csrf_token(app, long):
    tenant, *_ = long
    with make_session_factory(app.extensions["auditor.engine"])() as db:
        alert_id = db.scalar(select(Alert.id).where(Alert.workspace_id == tenant.workspace_id,
                                                    Alert.acknowledged_at.is_(None)).order_by(Alert.id))
    viewer = _session(app, tenant, "viewer")
    token = csrf_token(_page(viewer, "/alerts"))
    assert viewer.post(f"/alerts/{alert_id}/acknowledge", data={"csrf_token": token}).status_code == 403
    analyst = _session(app, tenant, "analyst")
    assert analyst.post(f"/alerts/{alert_id}/acknowledge", data={}).status_code == 400  # no CSRF token
    token = csrf_token(_page(analyst, "/alerts"))
    r = analyst.post(f"/alerts/{alert_id}/acknowledge", data={"csrf_token": token, "next": "//evil.example/x"})
    assert r.status_code == 302 and r.headers["Location"] == "/alerts"
    api = {a["id"]: a for a in _api(analyst, tenant, "/alerts?unacknowledged=true&per_page=500")["items"]}
    assert alert_id not in api
    assert str(alert_id) not in _rows(_table(_page(analyst, "/alerts"), "alerts"), "data-alert")
    acknowledged = _page(analyst, "/alerts?status=acknowledged")
    assert _rows(_table(acknowledged, "alerts"), "data-alert") == [str(alert_id)]
    # Again: nothing changes; another workspace's alert is not found; a vendor user is sent away.
    r = analyst.post(f"/alerts/{alert_id}/acknowledge", data={"csrf_token": token, "next": "/alerts?status=all"})
    assert r.status_code == 302 and r.headers["Location"] == "/alerts?status=all"
    other = make_tenant(app)
    stranger = _session(app, other, "analyst")
    token = csrf_token(_page(stranger, "/alerts"))
    assert stranger.post(f"/alerts/{alert_id}/acknowledge", data={"csrf_token": token}).status_code == 404
    assert stranger.post(f"/alerts/{10**12}/acknowledge", data={"csrf_token": token}).status_code == 404


# --- audit runs -----------------------------------------------------------------------------------


def test_every_run_id_links_to_its_page_which_shows_what_it_computed(app, seeded):
    client = _session(app, seeded.tenant)
    listing = _page(client, "/audit-runs")
    run_ids = [int(x) for x in _rows(_table(listing, "runs"), "data-run")]
    api_runs = _api(client, seeded.tenant, f"/datasets/{seeded.dataset_id}/audit-runs")["items"]
    assert run_ids == [r["id"] for r in api_runs]
    for run_id in run_ids:
        assert f'href="/audit-runs/{run_id}"' in listing
    run = next(r for r in api_runs if r["status"] == "succeeded")
    detail = _api(client, seeded.tenant, f"/audit-runs/{run['id']}")
    page = _page(client, f"/audit-runs/{run['id']}")
    assert f"data version {run['data_version']}" in _text(page)
    timings = _text(_table(page, "timings"))
    for step in run["summary"]["timings"]:
        assert dashboards._TIMING_WORDS.get(step, step.replace("_", " ")) in timings
    assert _table(page, "run-certifications").count("<tr><td") == detail["n_certifications"]
    assert _table(page, "run-curves").count("<tr><td") == detail["n_power_curves"]
    for b in detail["best_scores"]:
        shown = b["value"] / math.log(2) if b["metric"] == dashboards.CE_METRIC else b["value"]
        assert f"{shown:.3f}" in page
    _page(client, f"/audit-runs/{10**12}", 404)
    _page(_session(app, make_tenant(app)), f"/audit-runs/{run['id']}", 404)


def test_audit_runs_filter_by_dataset_and_status(app, long, seeded):
    tenant, ds, *_ = long
    client = _session(app, tenant)
    page = _page(client, f"/audit-runs?dataset_id={ds}&status=succeeded&per_page=25")
    assert len(_rows(_table(page, "runs"), "data-run")) == 25 and "1–25 of 40" in _text(page)
    assert "No audit" not in _page(client, "/audit-runs?status=failed")
    assert _rows(_table(_page(client, "/audit-runs?status=failed"), "runs"), "data-run") == []
    page = _page(client, "/audit-runs?sort=run&dir=asc&per_page=10&page=2")
    assert [int(x) for x in _rows(_table(page, "runs"), "data-run")] == sorted(
        int(x) for x in _rows(_table(_page(client, "/audit-runs?per_page=100"), "runs"), "data-run"))[10:20]


# --- releases ------------------------------------------------------------------------------------


def test_the_release_page_and_two_releases_side_by_side(app, seeded):
    client = _session(app, seeded.tenant)
    latest = {c["version"]: c for c in _api(client, seeded.tenant,
                                            f"/datasets/{seeded.dataset_id}/certifications?latest=true")["items"]}
    page = _page(client, f"/releases/{seeded.release_ids['2.1']}")
    c = latest["2.1"]
    assert f"{c['l']:.3f} [" in _text(re.search(r"<h3>L \(95%\)</h3>(.*?)</div>", page, re.S).group(1))
    assert ("Certified since" if c["certified"] else "Not certified") in page
    assert len(_chart(page, "chart-release-1")["series"][0]["band"]) >= 1
    s_chart = _chart(page, "chart-release-2")
    assert s_chart["hlines"][0]["y"] == 0.95
    a, b = seeded.release_ids["2.0"], seeded.release_ids["2.1"]
    page = _page(client, f"/compare?a={a}&b={b}")
    table = _table(page, "comparison")
    row = _text(re.search(r'<tr data-row="l">(.*?)</tr>', table, re.S).group(1))
    assert f"{latest['2.0']['l']:.3f}" in row and f"{latest['2.1']['l']:.3f}" in row
    diff = latest["2.1"]["l"] - latest["2.0"]["l"]
    assert f"{'+' if diff > 0 else '−'}{abs(diff):.3f}" in row
    for scorer in ("agreement", "cross_entropy"):
        assert f'data-row="equivalence-{scorer}"' in table and f'data-row="gap-{scorer}"' in table
    chart = _chart(page, "chart-compare")
    assert chart["x_ticks"] == ["2.0", "2.1"] and len(chart["badges"]) == 2
    # Unknown or foreign releases are not found; the picker needs no pair.
    _page(client, f"/compare?a={a}&b={10**12}", 404)
    _page(client, f"/compare?a=x&b={b}", 404)
    assert "choose…" in _page(client, "/compare")
    other = make_tenant(app)
    _page(_session(app, other), f"/releases/{a}", 404)
    _page(_session(app, other), f"/compare?a={a}&b={b}", 404)


def test_releases_never_audited_together_say_so(app, seeded, long):
    tenant, _ds, model_id, releases = long
    client = _session(app, tenant)
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        fresh = Release(model_id=model_id, version="unaudited")
        db.add(fresh)
        db.commit()
        fresh_id = fresh.id
    assert "No dataset in common" in _page(client, f"/compare?a={releases[0]}&b={fresh_id}")
    assert "Not audited yet" in _page(client, f"/releases/{fresh_id}")


# --- vendors and annotators -------------------------------------------------------------------------


def test_a_large_vendor_ranks_its_annotators_by_their_lower_bound_in_pages(app, long):
    tenant, ds, *_ = long
    client = _session(app, tenant)
    page = _page(client, f"/vendors/v-big?dataset_id={ds}")
    table = _table(page, "annotators-1")
    shown = _rows(table, "data-annotator")
    # Five sortable figures per row; the fifth is the 95% lower bound of the latest audit.
    lower = [float(v) for v in re.findall(r'<td class="n" data-sort-value="([^"]*)"', table)[4::5]]
    assert len(shown) == 50 and "1–50 of 120" in _text(page)
    assert lower == sorted(lower, reverse=True)  # the ranking: the surest first
    rest = _rows(_table(_page(client, f"/vendors/v-big?dataset_id={ds}&page=3"), "annotators-1"), "data-annotator")
    assert len(rest) == 20 and not set(rest) & set(shown)
    everyone = _rows(_table(_page(client, f"/vendors/v-big?dataset_id={ds}&per_page=100&sort=annotator"),
                            "annotators-1"), "data-annotator")
    assert everyone == sorted(everyone) and len(everyone) == 100
    found = _rows(_table(_page(client, f"/vendors/v-big?dataset_id={ds}&q=v-big-01"), "annotators-1"),
                  "data-annotator")
    assert sorted(found) == [f"v-big-{a:03d}" for a in range(10, 20)]
    listing = _page(client, "/vendors")
    assert _rows(_table(listing, "vendors-index"), "data-vendor") == ["v-big"]


def test_the_vendor_page_shows_its_accuracy_against_gold(app):
    from tests.web.quality_history import seed_history

    history = seed_history(app)
    client = _session(app, history.tenant)
    windows = _api(client, history.tenant, f"/datasets/{history.dataset_id}/quality?per_page=500")["items"]
    gold = [w for w in windows if w["group"] == "acme-labeling" and w["metric"] == "gold_accuracy"]
    pooled = sum(w["value"] * w["n_items"] for w in gold) / sum(w["n_items"] for w in gold)
    row = _text(re.search(r'<tr data-dataset="weekly">(.*?)</tr>', _page(client, "/vendors/acme-labeling"), re.S).group(1))
    newest = max(gold, key=lambda w: w["window_start"])
    assert f"{newest['value']:.3f} [{newest['low']:.3f}, {newest['high']:.3f}]" in row
    assert f"{pooled:.3f} {round(sum(w['n_items'] for w in gold))} gold items" in row
    annotator = _page(client, f"/datasets/{history.dataset_id}/annotators/acme-01")
    mine = [w for w in windows if w["metric"] == "gold_accuracy"]
    assert mine and re.search(r'id="gold-accuracy"><h3>Accuracy on gold</h3><p class="big">[\d.]+</p>', annotator)


# --- items ----------------------------------------------------------------------------------------


def test_the_items_pages_walk_every_item_once_both_ways(app, seeded):
    client = _session(app, seeded.tenant)
    base = f"/datasets/{seeded.dataset_id}/items?per_page=25"
    path, forward = base, []
    for _ in range(20):
        page = _page(client, path)
        forward += _rows(_table(page, "items"), "data-item")
        nxt = re.search(r'<a rel="next" href="([^"]+)"', page)
        if not nxt:
            break
        path = html.unescape(nxt.group(1))
    expected = sorted({r["item_id"] for r in seeded.data.annotations} | {r["item_id"] for r in seeded.data.gold})
    assert forward == expected
    backward: list[str] = []
    for _ in range(20):
        page = _page(client, path)
        backward = _rows(_table(page, "items"), "data-item") + backward
        prev = re.search(r'<a rel="prev" href="([^"]+)"', page)
        if not prev:
            break
        path = html.unescape(prev.group(1))
    assert backward == expected
    descending = _rows(_table(_page(client, base + "&dir=desc"), "items"), "data-item")
    assert descending == expected[::-1][:25]
    gold = _rows(_table(_page(client, f"/datasets/{seeded.dataset_id}/items?gold=1&per_page=100"), "items"),
                 "data-item")
    assert gold == sorted(r["item_id"] for r in seeded.data.gold)[:100]
    prefix = expected[0][:-1]
    found = _rows(_table(_page(client, f"/datasets/{seeded.dataset_id}/items?q={prefix}"), "items"), "data-item")
    assert found and all(x.startswith(prefix) for x in found)
    assert "No item matches" in _page(client, f"/datasets/{seeded.dataset_id}/items?q=%25nothing_")


# --- who may see what, the docs page, and bounded statements ------------------------------------------


@pytest.mark.parametrize("path", ["/alerts", "/audit-runs", "/vendors", "/compare", "/releases/{release}",
                                  "/audit-runs/{run}", "/datasets/{ds}/items"])
def test_vendor_users_are_sent_to_their_own_page(app, seeded, path):
    run = _api(app.test_client(), seeded.tenant, f"/datasets/{seeded.dataset_id}/audit-runs")["items"][0]["id"]
    client = _session(app, seeded.tenant, "vendor")
    r = client.get(path.format(release=seeded.release_ids["2.1"], run=run, ds=seeded.dataset_id))
    assert r.status_code == 302 and r.headers["Location"].endswith("/vendors/acme-labeling")


def test_the_api_docs_page_serves_swagger_ui_from_this_site(app, client):
    from auditor.web.security import CONTENT_SECURITY_POLICY

    r = client.get("/api/v1/docs")
    assert r.status_code == 200 and r.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    body = r.get_data(as_text=True)
    scripts = re.findall(r'<script src="([^"]+)"', body)
    assert scripts == ["/static/charts.js", "/static/tables.js", "/static/vendor/swagger-ui/swagger-ui-bundle.js",
                       "/static/api_docs.js"]
    assert 'data-spec-url="/api/v1/openapi.json"' in body
    assert not re.search(r'(src|href)="(https?:)?//', body)
    for path in [*scripts, "/static/vendor/swagger-ui/swagger-ui.css"]:
        assert client.get(path).status_code == 200, path


@pytest.mark.parametrize("name", ["overview", "alerts", "audit-runs", "run", "vendors", "vendor", "release",
                                  "compare", "model", "dataset", "items", "items-disagreement", "item",
                                  "leaderboard", "overview-90-days", "alerts-custom"])
def test_statements_per_page_do_not_grow_with_the_history(app, long, short, name):
    counts = []
    for tenant, ds, model, releases in (short, long):
        with make_session_factory(app.extensions["auditor.engine"])() as db:
            run = db.scalar(select(AuditRun.id).where(AuditRun.dataset_id == ds).order_by(AuditRun.id.desc()))
        path = {"overview": "/", "alerts": "/alerts", "audit-runs": "/audit-runs", "run": f"/audit-runs/{run}",
                "vendors": "/vendors", "vendor": f"/vendors/v-big?dataset_id={ds}",
                "release": f"/releases/{releases[0]}", "compare": f"/compare?a={releases[0]}&b={releases[1]}",
                "model": f"/models/{model}", "dataset": f"/datasets/{ds}", "items": f"/datasets/{ds}/items",
                "items-disagreement": f"/datasets/{ds}/items?show=disagreement",
                "item": f"/datasets/{ds}/items/item-00001", "leaderboard": f"/datasets/{ds}/leaderboard",
                "overview-90-days": "/?range=90d", "alerts-custom": "/alerts?range=custom&from=2026-01-05&to=2026-01-06",
                }[name]
        client = _session(app, tenant)
        # A first view may do one-off work (the release page's plan panel asks a worker for a plan):
        # count it, and a later view under another URL (not served from the response cache).
        with statements(app.extensions["auditor.engine"]) as first:
            _page(client, path + ("&" if "?" in path else "?") + "first=1")
        with statements(app.extensions["auditor.engine"]) as seen:
            _page(client, path)
        counts.append((len(first), len(seen)))
    assert counts[0] == counts[1], counts


def test_snow_rte_vendor_page_ranks_its_164_workers_by_lower_bound(app, datasets_dir):
    """Snow et al.'s RTE labels (164 Mechanical Turk workers) imported through the API as one
    vendor, gold included: its page lists the workers 50 at a time, weakest agreement first."""
    import pandas as pd

    from tests.web.conftest import eager_audits

    frame = pd.read_csv(datasets_dir / "snow2008_mturk" / "all_collected_data" / "rte.standardized.tsv", sep="\t")
    tenant = make_tenant(app, vendor="mturk", extra_vendors=())
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "snow-rte", "labels": ["0", "1"], "quality_window": "batch"},
                     headers=tenant.auth()).get_json()["id"]
    records = [{"item_id": str(i), "annotator_id": w, "label": str(r), "vendor": "mturk"}
               for i, w, r in zip(frame["orig_id"], frame["!amt_worker_ids"], frame["response"], strict=True)]
    gold = [{"item_id": str(i), "label": str(g)} for i, g in frame.groupby("orig_id")["gold"].first().items()]
    with eager_audits(app):
        assert client.post(f"/api/v1/datasets/{ds}/gold", json={"records": gold}, headers=tenant.auth()).status_code == 202
        assert client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": records},
                           headers=tenant.auth()).status_code == 202
    session = _session(app, tenant)
    page = _page(session, "/vendors/mturk")
    workers = frame["!amt_worker_ids"].nunique()
    assert workers == 164 and f"1–50 of {workers}" in _text(page)
    table = _table(page, "annotators-1")
    cells = [float(v) if v else None for v in re.findall(r'<td class="n" data-sort-value="([^"]*)"', table)]
    items, agreement, lower = cells[2::5], cells[3::5], cells[4::5]
    assert len(lower) == 50 and lower == sorted(lower, reverse=True)
    # Ranked by the lower bound, not the point estimate: workers with a higher agreement over
    # fewer items (RTE's many 20-item workers) rank below the surest one.
    assert any(a > agreement[0] and n < items[0] for a, n in zip(agreement, items, strict=True))
    last = _rows(_table(_page(session, "/vendors/mturk?page=4"), "annotators-1"), "data-annotator")
    assert len(last) == workers - 150
    summary = _text(re.search(r'<tr data-dataset="snow-rte">(.*?)</tr>', page, re.S).group(1))
    truth = dict(zip(frame["orig_id"], frame["gold"], strict=True))
    accuracy = float((frame["response"] == frame["orig_id"].map(truth)).mean())
    assert f"{accuracy:.3f}" in summary  # one import: the vendor's accuracy against gold over every label


def test_sort_and_page_links_keep_a_vendor_name_with_url_characters(app):
    from tests.web.conftest import eager_audits

    vendor = "odd ?&#% name"
    tenant = make_tenant(app, vendor=vendor, extra_vendors=())
    client = app.test_client()
    ds = client.post("/api/v1/datasets", json={"name": "odd", "labels": ["a", "b"]}, headers=tenant.auth()).get_json()
    records = [{"item_id": f"i{i}", "annotator_id": f"w{j}", "label": "ab"[(i * j) % 2], "vendor": vendor}
               for i in range(12) for j in range(4)]
    with eager_audits(app):
        assert client.post(f"/api/v1/datasets/{ds['id']}/annotations", json={"records": records},
                           headers=tenant.auth()).status_code == 202
    session = _session(app, tenant)
    from urllib.parse import quote

    page = _page(session, "/vendors/" + quote(vendor, safe="") + "?per_page=10")
    link = html.unescape(re.search(r'<th[^>]*data-column="annotator"><a class="sort" href="([^"]+)"', page).group(1))
    assert link.startswith("/vendors/odd%20%3F%26%23%25%20name?") and "sort=annotator" in link
    sorted_page = _page(session, link)
    assert f"<h1>Vendor {html.escape(vendor)}</h1>" in sorted_page
    assert _rows(_table(sorted_page, "annotators-1"), "data-annotator") == ["w0", "w1", "w2", "w3"]
