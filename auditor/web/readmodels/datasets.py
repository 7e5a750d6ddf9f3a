"""The dataset page and its feeds (connectors)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from auditor.audit.store import latest_runs
from auditor.db import (
    Agreement,
    AuditRun,
    AuditStatus,
    BestScore,
    Dataset,
    Item,
    Model,
    PowerCurveRecord,
    Release,
    VendorReport,
)
from auditor.db.models import LabelStudioConnector, LabelStudioQuarantine, MlflowConnector
from auditor.web.readmodels.common import (
    CE_NOTE,
    _power_chart,
    _recent,
    _upper,
    assumptions_view,
    best_gap,
    best_rows,
    curve_view,
)

#: The most connectors of each kind a dataset's page lists (a dataset has a handful).
MAX_FEEDS = 50


def _source(url: str) -> str:
    """A connector's server as shown: without user info, query or fragment (credentials
    never live in these URLs, but a page shows none even if one was typed in)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


MAX_QUARANTINE_SHOWN = 100


def _quarantine(db: Session, connector_id: int) -> list[dict]:
    """The annotations a Label Studio connector's pull kept aside, oldest first."""
    Q = LabelStudioQuarantine
    return [{"annotation_id": q.ls_id, "task_id": q.task_id, "field": q.field, "reason": q.reason, "hint": q.hint,
             "first_seen_at": q.first_seen_at, "last_seen_at": q.last_seen_at}
            for q in db.scalars(select(Q).where(Q.connector_id == connector_id)
                                .order_by(Q.task_id, Q.ls_id, Q.id).limit(MAX_QUARANTINE_SHOWN))]


def feeds(db: Session, dataset_id: int) -> list[dict]:
    """The dataset's live feeds, Label Studio projects (annotations in) and MLflow registered
    models (predictions in, verdicts back), with each one's state: ``error`` with the last
    error (a failed sync or write-back, or Label Studio webhooks refused since the last one
    accepted), ``disabled``, ``ok``, or ``waiting`` (nothing has happened yet). A Label
    Studio feed also lists the annotations its pull quarantined."""
    out = []
    for c in db.scalars(select(LabelStudioConnector).where(LabelStudioConnector.dataset_id == dataset_id)
                        .order_by(LabelStudioConnector.id).limit(MAX_FEEDS)):
        # Refusals newer than the last event accepted: Label Studio's webhooks are not getting in.
        refusing = c.last_refused_at is not None and (c.last_event_at is None or c.last_refused_at > c.last_event_at)
        error = c.last_sync_error
        if refusing:
            refused = (f"{c.webhook_refused} webhook deliveries refused, none accepted since; the last: "
                       f"{c.last_refusal or 'refused'}")
            error = f"{error}; {refused}" if error else refused
        state = ("disabled" if not c.enabled else "error" if error
                 else "ok" if c.last_event_at or c.last_sync_at else "waiting")
        out.append({"kind": "labelstudio", "id": c.id, "source": _source(c.url), "subject": f"project {c.project_id}",
                    "direction": "annotations in", "state": state, "error": error,
                    "last_event_at": c.last_event_at, "last_sync_at": c.last_sync_at,
                    "last_written_at": None, "last_written_run_id": None, "created_at": c.created_at,
                    "webhook_refused": c.webhook_refused or 0, "last_refused_at": c.last_refused_at,
                    "last_refusal": c.last_refusal, "quarantined": c.quarantined or 0,
                    "quarantine": _quarantine(db, c.id) if c.quarantined else []})
    for c in db.scalars(select(MlflowConnector).where(MlflowConnector.dataset_id == dataset_id)
                        .order_by(MlflowConnector.id).limit(MAX_FEEDS)):
        state = "error" if c.last_error else "ok" if c.last_written_at else "waiting"
        out.append({"kind": "mlflow", "id": c.id, "source": _source(c.tracking_uri),
                    "subject": f"registered model {c.registered_model} → model {c.model_name}",
                    "direction": "predictions in, verdicts back", "state": state, "error": c.last_error,
                    "last_event_at": None, "last_sync_at": None, "last_written_at": c.last_written_at,
                    "last_written_run_id": c.last_written_run_id, "created_at": c.created_at,
                    "webhook_refused": 0, "last_refused_at": None, "last_refusal": None, "quarantined": 0,
                    "quarantine": []})
    return out


def dataset_page(db: Session, ds: Dataset) -> dict:
    run = latest_runs(db, [ds.id]).get(ds.id)
    # The newest failed audit, when no audit has succeeded since: the page says why it failed.
    failed = db.scalars(select(AuditRun).where(AuditRun.dataset_id == ds.id, AuditRun.status == AuditStatus.FAILED,
                                               AuditRun.id > (run.id if run is not None else 0))
                        .order_by(AuditRun.id.desc()).limit(1)).first()
    n_items, n_gold = db.execute(select(func.count(), func.count(Item.gold_label)).where(Item.dataset_id == ds.id)).one()
    out: dict = {"dataset": ds, "run": run, **_upper(run), "agreements": [], "best": [], "curve": None, "charts": [],
                 "releases": [], "vendors": [], "failed_run": failed, "n_items": n_items, "n_gold": n_gold,
                 "assumptions": None, "assumption_notes": [], "ce_note": CE_NOTE, "feeds": feeds(db, ds.id)}
    if run is None:
        return out
    summary = run.summary or {}
    out["assumptions"] = assumptions_view(summary.get("assumptions"))
    out["assumption_notes"] = [n for n in summary.get("notes") or [] if n.startswith("assumption checks")]
    out["agreements"] = list(db.scalars(select(Agreement).where(Agreement.audit_run_id == run.id,
                                                                Agreement.vendor.is_(None))
                                        .order_by(Agreement.coefficient)))
    out["best"] = best_rows(db.scalars(select(BestScore).where(BestScore.audit_run_id == run.id)
                                       .order_by(BestScore.metric)))
    best = {b["metric"]: b for b in out["best"]}
    curves = list(db.scalars(select(PowerCurveRecord).where(PowerCurveRecord.audit_run_id == run.id).order_by(PowerCurveRecord.id)))
    base = next((c for c in curves if c.release_id is None and c.vendor is None), None)
    rel_curves = [c for c in curves if c.release_id is not None]
    rel_names = {r.id: (m.name, r.version, m.id) for r, m in db.execute(
        select(Release, Model).join(Model, Release.model_id == Model.id)
        .where(Release.id.in_([c.release_id for c in rel_curves] or [-1])))}
    out["releases"] = [{"model": rel_names.get(c.release_id, ("?", "?", None))[0],
                        "version": rel_names.get(c.release_id, ("?", "?", None))[1],
                        "model_id": rel_names.get(c.release_id, ("?", "?", None))[2], "release_id": c.release_id,
                        "curve": c, "view": curve_view(c), "gap": best_gap(curve_view(c), best)} for c in rel_curves]
    charts = []
    # One chart per (combiner, scorer): the humans' curve with its band, and each release's
    # classifier score placed at its survey equivalence.
    pairs = list(dict.fromkeys((c.combiner, c.scorer) for c in ([base] if base else []) + rel_curves))
    for combiner, scorer in pairs:
        human = base if base is not None and (base.combiner, base.scorer) == (combiner, scorer) else next(
            c for c in rel_curves if (c.combiner, c.scorer) == (combiner, scorer))
        marked = [(f"{r['model']} {r['version']}", r["curve"]) for r in out["releases"]
                  if (r["curve"].combiner, r["curve"].scorer) == (combiner, scorer)]
        charts.append(_power_chart(human, marked, best))
    out["curve"] = base
    out["charts"] = charts
    reports = list(db.scalars(select(VendorReport).options(defer(VendorReport.annotators))
                              .where(VendorReport.audit_run_id == run.id).order_by(VendorReport.vendor)))
    keys = select(VendorReport.vendor.label("group_name"), AuditRun.dataset_id.label("dataset_id")).join(
        AuditRun, VendorReport.audit_run_id == AuditRun.id).where(VendorReport.audit_run_id == run.id)
    windows, found = _recent(db, keys, "vendor")
    out["vendors"] = [{"report": v, "vendor": v.vendor, "n_annotators": v.n_annotators, "n_items": v.n_items,
                       "n_annotations": v.n_annotations, "u_t": v.u_t, "u_e": v.u_e, "agreement": v.agreement,
                       "expert_equivalence": v.expert_equivalence,
                       "week": (windows.get((ds.id, v.vendor, "agreement")) or [None])[0],
                       "gold": (windows.get((ds.id, v.vendor, "gold_accuracy")) or [None])[0],
                       "change": found.get((ds.id, v.vendor))} for v in reports]
    return out


# --- models and releases ------------------------------------------------------------------------
