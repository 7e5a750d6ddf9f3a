"""Audit results: runs, certifications, power curves, vendor reports, per-annotator
bounds, BEST ceilings, alerts, quality over time; and the OpenAPI document itself."""

from __future__ import annotations

from flask import jsonify
from sqlalchemy import Select, func, select

from auditor.audit.store import latest_run
from auditor.db import (
    Agreement,
    Alert,
    AlertSeverity,
    Annotator,
    AuditRun,
    AuditStatus,
    BestScore,
    Certification,
    Model,
    PowerCurveRecord,
    QualityChange,
    QualityWindow,
    Release,
    Role,
    VendorReport,
)
from auditor.jsonable import finite
from auditor.web.api import serializers as s
from auditor.web.api.common import (
    READ_OR_VENDOR,
    get_dataset,
    get_model,
    get_release,
    get_run,
    vendor_scope,
)
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.security import READERS

__all__: list[str] = []  # the operations register themselves with the route table


# --- results ----------------------------------------------------------------------------------


@endpoint("GET", "/datasets/<int:dataset_id>/audit-runs", summary="List audit runs", tag="results",
          roles=READERS, listing=True, response=s.page_of("AuditRun"),
          query=[Param("status", "string", "Only runs in this state.",
                       enum=tuple(x.value for x in AuditStatus))], cache=True)
def list_audit_runs(principal, db, dataset_id, status):
    """Audit runs of a dataset, newest first, with their timings and errors."""
    ds = get_dataset(principal, db, dataset_id)
    stmt = select(AuditRun).where(AuditRun.dataset_id == ds.id).order_by(AuditRun.id.desc())
    if status:
        stmt = stmt.where(AuditRun.status == AuditStatus(status))
    return Listing(stmt, s.audit_run, ["id", "data_version", "status", "created_at", "started_at",
                                       "finished_at", "queued_seconds", "run_seconds", "error"],
                   f"audit-runs-{ds.id}")


@endpoint("GET", "/audit-runs/<int:audit_run_id>", summary="Read an audit run", tag="results", roles=READERS,
          response=s.ref("AuditRunDetail"), cache=True)
def read_audit_run(principal, db, audit_run_id):
    """One audit run with its BEST scores, agreement coefficients and result counts."""
    run = get_run(principal, db, audit_run_id)
    out = s.audit_run(run)
    out["best_scores"] = [s.best_score((b, run)) for b in
                          db.scalars(select(BestScore).where(BestScore.audit_run_id == run.id).order_by(BestScore.metric))]
    out["agreements"] = [{"vendor": a.vendor, "coefficient": a.coefficient, "value": finite(a.value),
                          "ci_low": finite(a.ci_low), "ci_high": finite(a.ci_high), "n_items": a.n_items}
                         for a in db.scalars(select(Agreement).where(Agreement.audit_run_id == run.id)
                                             .order_by(Agreement.vendor.nulls_first(), Agreement.coefficient))]
    for key, table in (("n_certifications", Certification), ("n_power_curves", PowerCurveRecord),
                       ("n_vendor_reports", VendorReport)):
        out[key] = db.scalar(select(func.count()).select_from(table).where(table.audit_run_id == run.id))
    return out


_CERT_COLUMNS = ["audit_run_id", "data_version", "run_finished_at", "model", "version", "released_at", "l",
                 "u_t", "u_e", "tau", "s_hms_t", "s_oms_t", "s_hms_e", "s_oms_e", "s_anytime_t", "s_anytime_e",
                 "certified", "certified_with", "method", "certified_paper", "certified_anytime", "verdict",
                 "n_items_upper", "n_items_lower"]


CERTIFICATION_COLUMNS = (
    Certification.id, Certification.audit_run_id, AuditRun.dataset_id, Certification.data_version,
    Model.id.label("model_id"), Model.name.label("model"), Certification.release_id, Release.version,
    Release.released_at, AuditRun.finished_at.label("run_finished_at"), Certification.n_items_upper,
    Certification.n_items_lower, Certification.u_t, Certification.u_e, Certification.l, Certification.tau,
    Certification.s_hms_t, Certification.s_oms_t, Certification.s_hms_e, Certification.s_oms_e,
    Certification.s_anytime_t, Certification.s_anytime_e, Certification.certified, Certification.certified_with,
    Certification.method, Certification.certified_paper, Certification.certified_anytime, Certification.verdict,
    Certification.created_at,
)


def certifications_stmt(workspace_id: int) -> Select:
    # Plain columns, not four ORM entities per row: the history of 100 releases is thousands of rows.
    return (select(*CERTIFICATION_COLUMNS).select_from(Certification)
            .join(Release, Certification.release_id == Release.id)
            .join(Model, Release.model_id == Model.id)
            .join(AuditRun, Certification.audit_run_id == AuditRun.id)
            .where(Model.workspace_id == workspace_id))


@endpoint("GET", "/datasets/<int:dataset_id>/certifications", summary="List certifications of a dataset",
          tag="results", roles=READERS, listing=True, response=s.page_of("Certification"),
          query=[Param("model_id", "integer", "Only this model's releases."),
                 Param("release_id", "integer", "Only this release."),
                 Param("latest", "boolean", "Only the latest audit run's certifications.")], cache=True)
def list_dataset_certifications(principal, db, dataset_id, model_id, release_id, latest):
    """Certification history: every release in every audit run, newest run first."""
    ds = get_dataset(principal, db, dataset_id)
    stmt = certifications_stmt(principal.workspace_id).where(AuditRun.dataset_id == ds.id)
    if model_id is not None:
        stmt = stmt.where(Model.id == get_model(principal, db, model_id).id)
    if release_id is not None:
        stmt = stmt.where(Release.id == get_release(principal, db, release_id).id)
    if latest:
        run = latest_run(db, ds.id)
        stmt = stmt.where(AuditRun.id == (run.id if run else -1))
    stmt = stmt.order_by(AuditRun.id.desc(), Release.released_at.asc().nulls_last(), Release.id)
    return Listing(stmt, s.certification, _CERT_COLUMNS, f"certifications-{ds.id}", mapping=True)


@endpoint("GET", "/models/<int:model_id>/certifications", summary="List certifications of a model",
          tag="results", roles=READERS, listing=True, response=s.page_of("Certification"),
          query=[Param("dataset_id", "integer", "Only this dataset's audits.")], cache=True)
def list_model_certifications(principal, db, model_id, dataset_id):
    """Certification history of every release of a model, newest run first."""
    m = get_model(principal, db, model_id)
    stmt = certifications_stmt(principal.workspace_id).where(Model.id == m.id)
    if dataset_id is not None:
        stmt = stmt.where(AuditRun.dataset_id == get_dataset(principal, db, dataset_id).id)
    stmt = stmt.order_by(AuditRun.id.desc(), Release.released_at.asc().nulls_last(), Release.id)
    return Listing(stmt, s.certification, ["dataset_id", *_CERT_COLUMNS], f"certifications-model-{m.id}",
                   mapping=True)


@endpoint("GET", "/datasets/<int:dataset_id>/power-curves", summary="List power curves", tag="results",
          roles=READERS, listing=True, response=s.page_of("PowerCurve"),
          query=[Param("audit_run_id", "integer", "This audit run (default: the latest successful one)."),
                 Param("release_id", "integer", "Only the curves scoring this release."),
                 Param("vendor", "string", "Only this vendor's pool.", max_length=200),
                 Param("all_runs", "boolean", "Every audit run's curves, not only one run's.")], cache=True)
def list_power_curves(principal, db, dataset_id, audit_run_id, release_id, vendor, all_runs):
    """Survey power curves with intervals, and each release's survey equivalence."""
    ds = get_dataset(principal, db, dataset_id)
    stmt = (select(PowerCurveRecord).join(AuditRun, PowerCurveRecord.audit_run_id == AuditRun.id)
            .where(AuditRun.dataset_id == ds.id).order_by(AuditRun.id.desc(), PowerCurveRecord.id))
    if audit_run_id is not None:
        stmt = stmt.where(AuditRun.id == get_run(principal, db, audit_run_id, dataset=ds).id)
    elif not all_runs:
        run = latest_run(db, ds.id)
        stmt = stmt.where(AuditRun.id == (run.id if run else -1))
    if release_id is not None:
        stmt = stmt.where(PowerCurveRecord.release_id == get_release(principal, db, release_id).id)
    if vendor is not None:
        stmt = stmt.where(PowerCurveRecord.vendor == vendor)
    columns = ["id", "audit_run_id", "release_id", "vendor", "reference", "combiner", "scorer",
               "classifier_score", "classifier_low", "classifier_high", "equivalence", "equivalence_low",
               "equivalence_high", "equivalence_note", "equivalence_low_note", "equivalence_high_note", "method",
               "equivalence_mc_error", "point_k", "point_mean", "point_ci_low", "point_ci_high",
               "point_n_items", "point_mc_error"]
    return Listing(stmt, s.power_curve, columns, f"power-curves-{ds.id}", csv_rows=s.power_curve_points)


@endpoint("GET", "/datasets/<int:dataset_id>/vendor-reports", summary="List vendor reports", tag="results",
          roles=READ_OR_VENDOR, listing=True, response=s.page_of("VendorReport"),
          query=[Param("vendor", "string", "Only this vendor.", max_length=200)], cache=True)
def list_vendor_reports(principal, db, dataset_id, vendor):
    """Each vendor's quality in each audit run, oldest first (a vendor sees only its own)."""
    ds = get_dataset(principal, db, dataset_id)
    vendor = vendor_scope(principal, vendor)
    # Plain columns: the per-annotator lists (``annotators``) are another endpoint's, and large.
    stmt = (select(VendorReport.id, VendorReport.audit_run_id, AuditRun.dataset_id, AuditRun.data_version,
                   AuditRun.finished_at.label("run_finished_at"), VendorReport.vendor, VendorReport.n_annotators,
                   VendorReport.n_items, VendorReport.n_annotations, VendorReport.u_t, VendorReport.u_e,
                   VendorReport.agreement, VendorReport.expert_equivalence, VendorReport.expert_equivalence_method,
                   VendorReport.expert_equivalence_mc_error, VendorReport.created_at)
            .select_from(VendorReport).join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
            .where(AuditRun.dataset_id == ds.id).order_by(AuditRun.id, VendorReport.vendor))
    if vendor is not None:
        stmt = stmt.where(VendorReport.vendor == vendor)
    return Listing(stmt, s.vendor_report, ["audit_run_id", "data_version", "run_finished_at", "vendor",
                                           "n_annotators", "n_items", "n_annotations", "u_t", "u_e",
                                           "agreement", "expert_equivalence", "expert_equivalence_method",
                                           "expert_equivalence_mc_error"], f"vendor-reports-{ds.id}",
                   mapping=True)


@endpoint("GET", "/datasets/<int:dataset_id>/annotator-bounds", summary="List per-annotator bounds",
          tag="results", roles=READ_OR_VENDOR, listing=True, response=s.page_of("AnnotatorBound"),
          query=[Param("vendor", "string", "Only this vendor's annotators.", max_length=200),
                 Param("audit_run_id", "integer", "This audit run (default: the latest successful one).")], cache=True)
def list_annotator_bounds(principal, db, dataset_id, vendor, audit_run_id):
    """Each annotator's lower bound (Theorem 3) from one audit run's vendor reports."""
    ds = get_dataset(principal, db, dataset_id)
    vendor = vendor_scope(principal, vendor)
    # A run named in the query must be this dataset's: another's (of any workspace) is not found.
    run = get_run(principal, db, audit_run_id, dataset=ds) if audit_run_id is not None else latest_run(db, ds.id)
    run_id = run.id if run is not None else -1
    stmt = (select(VendorReport).join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
            .where(AuditRun.dataset_id == ds.id, AuditRun.id == run_id).order_by(VendorReport.vendor))
    if vendor is not None:
        stmt = stmt.where(VendorReport.vendor == vendor)
    rows = [{"vendor": v.vendor, "audit_run_id": v.audit_run_id, **a}
            for v in db.scalars(stmt) for a in (v.annotators or [])]
    if vendor is None and run is not None:
        # Annotators without a vendor are in no vendor report; the run's summary keeps their bounds.
        rows += [{"vendor": None, "audit_run_id": run_id, **a}
                 for a in ((run.summary or {}).get("annotators_without_vendor") or [])]
    columns = ["vendor", "audit_run_id", *dict.fromkeys(k for r in rows for k in r if k not in ("vendor", "audit_run_id"))]
    return Listing(rows, s.annotator_bound, columns, f"annotator-bounds-{ds.id}")


@endpoint("GET", "/datasets/<int:dataset_id>/best-scores", summary="List BEST ceilings", tag="results",
          roles=READERS, listing=True, response=s.page_of("BestScore"),
          query=[Param("metric", "string", "Only this metric.", max_length=50)], cache=True)
def list_best_scores(principal, db, dataset_id, metric):
    """The dataset's BEST ceiling per metric in each audit run, newest first."""
    ds = get_dataset(principal, db, dataset_id)
    stmt = (select(BestScore, AuditRun).join(AuditRun, BestScore.audit_run_id == AuditRun.id)
            .where(AuditRun.dataset_id == ds.id).order_by(AuditRun.id.desc(), BestScore.metric))
    if metric:
        stmt = stmt.where(BestScore.metric == metric)
    return Listing(stmt, s.best_score, ["audit_run_id", "data_version", "metric", "value", "std_error",
                                        "n_items", "alpha"], f"best-scores-{ds.id}")


@endpoint("GET", "/alerts", summary="List alerts", tag="results", roles=READERS, listing=True,
          response=s.page_of("Alert"),
          query=[Param("dataset_id", "integer", "Only this dataset's alerts."),
                 Param("severity", "string", "Only this severity.", enum=tuple(x.value for x in AlertSeverity)),
                 Param("unacknowledged", "boolean", "Only alerts nobody acknowledged yet.")], cache=True)
def list_alerts(principal, db, dataset_id, severity, unacknowledged):
    """Alerts of the workspace, newest first."""
    stmt = select(Alert).where(Alert.workspace_id == principal.workspace_id).order_by(Alert.created_at.desc(),
                                                                                      Alert.id.desc())
    if dataset_id is not None:
        stmt = stmt.where(Alert.dataset_id == get_dataset(principal, db, dataset_id).id)
    if severity:
        stmt = stmt.where(Alert.severity == AlertSeverity(severity))
    if unacknowledged:
        stmt = stmt.where(Alert.acknowledged_at.is_(None))
    return Listing(stmt, s.alert, ["id", "created_at", "severity", "kind", "subject", "message", "dataset_id",
                                   "audit_run_id", "acknowledged_at"], "alerts")


# --- the document itself ------------------------------------------------------------------------


@endpoint("GET", "/openapi.json", summary="The OpenAPI document", tag="meta", public=True,
          response={"type": "object"})
def openapi_document(principal, db):
    """This API's OpenAPI 3.1 document, generated from the route table."""
    from auditor.web.api.openapi import build_document

    return jsonify(build_document())


# --- quality over time ------------------------------------------------------------------------

_GROUPING = Param("grouping", "string", "Vendors (default) or annotators.", enum=("vendor", "annotator"),
                  default="vendor")
_GROUP = Param("group", "string", "Only this vendor or annotator (its external id).", max_length=512)


def _quality_scope(principal, db, stmt, table, grouping: str, group: str | None, workspace_id: int):
    """Filter by group; a vendor caller sees its own vendor and its own annotators only."""
    if group:
        stmt = stmt.where(table.group_name == group)
    if principal.role == Role.VENDOR:
        own = vendor_scope(principal, None)
        if grouping == "vendor":
            stmt = stmt.where(table.group_name == own)
        else:
            mine = select(Annotator.external_id).where(Annotator.workspace_id == workspace_id,
                                                       Annotator.vendor == own)
            stmt = stmt.where(table.group_name.in_(mine))
    return stmt


@endpoint("GET", "/datasets/<int:dataset_id>/quality", summary="List quality windows", tag="results",
          roles=READ_OR_VENDOR, listing=True, response=s.page_of("QualityWindow"),
          query=[_GROUPING, _GROUP, Param("metric", "string", "Only this metric.",
                                          enum=("agreement", "gold_accuracy"))], cache=True)
def list_quality_windows(principal, db, dataset_id, grouping, group, metric):
    """Each vendor's (or annotator's) weekly quality: agreement with the other annotators'
    leave-one-out consensus and accuracy on gold items, with 95% intervals, oldest first."""
    ds = get_dataset(principal, db, dataset_id)
    q = QualityWindow
    stmt = (select(q.id, q.dataset_id, q.grouping, q.group_name.label("group"), q.metric, q.window_key, q.window_start,
                   q.window_end, q.n_items, q.n_labels, q.value, q.low, q.high, q.audit_run_id, q.updated_at)
            .where(q.dataset_id == ds.id, q.grouping == grouping)
            .order_by(q.window_key, q.group_name, q.metric))
    if metric:
        stmt = stmt.where(q.metric == metric)
    stmt = _quality_scope(principal, db, stmt, q, grouping, group, ds.workspace_id)
    return Listing(stmt, s.quality_window, ["grouping", "group", "metric", "window_key", "window_start", "window_end",
                                            "n_items",
                                            "n_labels", "value", "low", "high", "audit_run_id"],
                   f"quality-{grouping}-{ds.id}", mapping=True)


@endpoint("GET", "/datasets/<int:dataset_id>/quality/changes", summary="List quality changes", tag="results",
          roles=READ_OR_VENDOR, listing=True, response=s.page_of("QualityChange"),
          query=[Param("grouping", "string", "Vendors (default), annotators, or the dataset level (a change all "
                       "vendors share: the items got harder or easier).", enum=("vendor", "annotator", "dataset"),
                       default="vendor"), _GROUP], cache=True)
def list_quality_changes(principal, db, dataset_id, grouping, group):
    """Changes in a vendor's (or annotator's) quality found by the change detector (each
    group against the other groups on the same items), newest first: when it started,
    quality before and after with intervals, and the evidence (the yearly false-alarm
    rate at which it would still be reported)."""
    ds = get_dataset(principal, db, dataset_id)
    c = QualityChange
    stmt = (select(c.id, c.dataset_id, c.audit_run_id, c.grouping, c.group_name.label("group"), c.metric,
                   c.direction, c.detected_at, c.start, c.before, c.before_low, c.before_high, c.after,
                   c.after_low, c.after_high, c.evidence, c.created_at)
            .where(c.dataset_id == ds.id, c.grouping == grouping).order_by(c.detected_at.desc(), c.id.desc()))
    stmt = _quality_scope(principal, db, stmt, c, grouping, group, ds.workspace_id)
    return Listing(stmt, s.quality_change, ["grouping", "group", "metric", "direction", "start", "detected_at",
                                            "before", "before_low", "before_high", "after", "after_low",
                                            "after_high", "evidence", "audit_run_id"],
                   f"quality-changes-{grouping}-{ds.id}", mapping=True)


@endpoint("GET", "/datasets/<int:dataset_id>/quality/sensitivity", summary="What the quality monitor can see",
          tag="results", roles=READ_OR_VENDOR, query=[_GROUPING, _GROUP],
          response={"type": "object", "required": ["items"],
                    "properties": {"items": {"type": "array", "items": s.ref("QualitySensitivity")}}})
def quality_sensitivity(principal, db, dataset_id, grouping, group):
    """For each vendor (or annotator) and metric, the smallest drop the change detector finds
    within 4 weeks with 90% probability at the group's current weekly volume ("at 150
    labels a week: drops of 0.07 and more within 4 weeks"): silence about a group means no
    drop of that size, not no drop at all. Empty before the dataset's first audit."""
    from auditor.audit.quality import sensitivity

    ds = get_dataset(principal, db, dataset_id)
    rows = sensitivity(db, ds.id)[grouping]
    if group:
        rows = [r for r in rows if str(r["group"]) == group]
    if principal.role == Role.VENDOR:
        own = vendor_scope(principal, None)
        if grouping == "vendor":
            rows = [r for r in rows if str(r["group"]) == own]
        else:
            mine = set(db.scalars(select(Annotator.external_id).where(Annotator.workspace_id == ds.workspace_id,
                                                                      Annotator.vendor == own)))
            rows = [r for r in rows if str(r["group"]) in mine]
    return {"items": [{"grouping": grouping, "group": str(r["group"]), "metric": r["metric"],
                       "units_per_window": finite(r["units_per_window"]), "unit_sd": finite(r["unit_sd"]),
                       "min_drop": finite(r["min_drop"]), "min_drop_accuracy": finite(r["min_drop_accuracy"]),
                       "others_accuracy_low": finite(r.get("others_accuracy_low")),
                       "others_accuracy_high": finite(r.get("others_accuracy_high")),
                       "within_windows": 4, "power": 0.9} for r in rows]}
