"""One JSON shape per resource: the serializer and its JSON Schema side by side."""

from __future__ import annotations

from datetime import datetime

from auditor.db import (
    AccessEvent,
    Alert,
    Annotator,
    ApiToken,
    AuditRun,
    Dataset,
    ImportAttempt,
    ImportBatch,
    Item,
    Model,
    PowerCurveRecord,
    Release,
    User,
)
from auditor.jsonable import finite, plain

__all__ = ["BODIES", "SCHEMAS", "page_of", "ref"]


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def page_of(name: str) -> dict:
    return {"type": "object", "required": ["items", "page", "per_page", "total"],
            "properties": {"items": {"type": "array", "items": ref(name)},
                           "page": {"type": "integer"}, "per_page": {"type": "integer"},
                           "total": {"type": "integer"}}}


def _n(t: str | dict, description: str | None = None) -> dict:
    out = {"anyOf": [t, {"type": "null"}]} if isinstance(t, dict) else {"type": [t, "null"]}
    if description:
        out["description"] = description
    return out


def _obj(required: list[str], **props) -> dict:
    return {"type": "object", "required": required, "properties": props}


INT, NUM, STR, BOOL = {"type": "integer"}, {"type": "number"}, {"type": "string"}, {"type": "boolean"}
TIME = {"type": "string", "format": "date-time"}
ANY_JSON: dict = {}


def _t(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# --- resources ---------------------------------------------------------------------


def dataset(d: Dataset) -> dict:
    return {"id": d.id, "name": d.name, "description": d.description, "labels": list(d.labels),
            "data_version": d.data_version, "quality_window": d.quality_window, "created_at": _t(d.created_at), "updated_at": _t(d.updated_at)}


def item(i: Item, labels: list[str] | None = None) -> dict:
    gold = i.gold_label
    return {"id": i.id, "dataset_id": i.dataset_id, "external_id": i.external_id,
            "gold_label": labels[gold] if labels is not None and gold is not None and gold < len(labels) else gold,
            "gold_source": i.gold_source, "label_counts": list(i.label_counts or []),
            "n_labels": sum(i.label_counts or []), "created_at": _t(i.created_at)}


def annotator(a: Annotator) -> dict:
    return {"id": a.id, "external_id": a.external_id, "vendor": a.vendor, "tier": str(a.tier),
            "created_at": _t(a.created_at)}


def vendor(row) -> dict:
    name, n_annotators, n_experts = row
    return {"name": name, "n_annotators": int(n_annotators), "n_experts": int(n_experts or 0)}


def model(m: Model) -> dict:
    return {"id": m.id, "name": m.name, "description": m.description, "created_at": _t(m.created_at)}


def release(r: Release) -> dict:
    return {"id": r.id, "model_id": r.model_id, "version": r.version, "alias": r.alias, "tags": r.tags,
            "released_at": _t(r.released_at), "created_at": _t(r.created_at)}


def batch(b: ImportBatch) -> dict:
    return {"id": b.id, "dataset_id": b.dataset_id, "kind": str(b.kind), "format": b.format,
            "source_name": b.source_name, "release_id": b.release_id, "submitted_by": b.submitted_by,
            "row_count": b.row_count, "data_version": b.data_version, "checksum": b.checksum,
            "idempotency_key": b.idempotency_key, "stats": b.stats, "created_at": _t(b.created_at)}


def import_attempt(a: ImportAttempt) -> dict:
    return {"id": a.id, "dataset_id": a.dataset_id, "kind": a.kind, "format": a.format,
            "source_name": a.source_name, "submitted_by": a.submitted_by, "status_code": a.status_code,
            "bad_rows": a.bad_rows, "message": a.message, "errors": list(a.errors or []),
            "created_at": _t(a.created_at)}


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else (b - a).total_seconds()


def audit_run(r: AuditRun) -> dict:
    return {"id": r.id, "dataset_id": r.dataset_id, "data_version": r.data_version, "status": str(r.status),
            "error": r.error, "created_at": _t(r.created_at), "started_at": _t(r.started_at),
            "finished_at": _t(r.finished_at), "queued_seconds": _seconds(r.created_at, r.started_at),
            "run_seconds": _seconds(r.started_at, r.finished_at), "summary": plain(r.summary),
            "parameters": r.parameters}


_CERT_FLOATS = ("u_t", "u_e", "l", "tau", "s_hms_t", "s_oms_t", "s_hms_e", "s_oms_e", "s_anytime_t", "s_anytime_e")
_CERT_TIMES = ("released_at", "run_finished_at", "created_at")


def certification(m) -> dict:
    """A row of ``routes.CERTIFICATION_COLUMNS`` (a mapping)."""
    out = dict(m)
    for k in _CERT_FLOATS:
        out[k] = finite(out[k])
    for k in _CERT_TIMES:
        out[k] = _t(out[k])
    return out


def power_curve(p: PowerCurveRecord) -> dict:
    return {"id": p.id, "audit_run_id": p.audit_run_id, "release_id": p.release_id, "vendor": p.vendor,
            "reference": p.reference, "combiner": p.combiner, "scorer": p.scorer, "max_k": p.max_k,
            "n_bootstrap": p.n_bootstrap, "seed": p.seed, "points": plain(p.points or []),
            "classifier_score": finite(p.classifier_score), "classifier_low": finite(p.classifier_low),
            "classifier_high": finite(p.classifier_high), "equivalence": finite(p.equivalence),
            "equivalence_low": finite(p.equivalence_low), "equivalence_high": finite(p.equivalence_high),
            "equivalence_note": p.equivalence_note, "equivalence_low_note": p.equivalence_low_note,
            "equivalence_high_note": p.equivalence_high_note, "method": p.method,
            "equivalence_mc_error": finite(p.equivalence_mc_error), "created_at": _t(p.created_at)}


def power_curve_points(curve: dict):
    """CSV: one row per point k of the curve."""
    for pt in curve["points"] or [{}]:
        yield {**curve, **{f"point_{k}": v for k, v in pt.items()}}


def feed(f: dict) -> dict:
    """One live feed of a dataset (``auditor.web.readmodels.feeds``)."""
    return {**f, **{k: _t(f[k]) for k in ("last_event_at", "last_sync_at", "last_written_at", "created_at",
                                          "last_refused_at")},
            "quarantine": [{**q, "first_seen_at": _t(q["first_seen_at"]), "last_seen_at": _t(q["last_seen_at"])}
                           for q in f.get("quarantine", [])]}


def vendor_report(m) -> dict:
    """A row of the vendor-report columns (a mapping)."""
    out = dict(m)
    for k in ("u_t", "u_e", "agreement", "expert_equivalence", "expert_equivalence_mc_error"):
        out[k] = finite(out[k])
    for k in ("run_finished_at", "created_at"):
        out[k] = _t(out[k])
    return out


def quality_window(m) -> dict:
    """A row of the quality-window columns (a mapping)."""
    out = dict(m)
    for k in ("value", "low", "high", "n_items"):
        out[k] = finite(out[k])
    for k in ("window_start", "window_end", "updated_at"):
        out[k] = _t(out[k])
    return out


def quality_change(m) -> dict:
    """A row of the quality-change columns (a mapping)."""
    out = dict(m)
    for k in ("before", "before_low", "before_high", "after", "after_low", "after_high", "evidence"):
        out[k] = finite(out[k])
    for k in ("detected_at", "start", "created_at"):
        out[k] = _t(out[k])
    return out


def annotator_bound(row: dict) -> dict:
    return plain(row)


def best_score(row) -> dict:
    b, run = row
    return {"id": b.id, "audit_run_id": b.audit_run_id, "data_version": run.data_version, "metric": b.metric,
            "value": finite(b.value), "std_error": finite(b.std_error), "n_items": b.n_items,
            "alpha": plain(list(b.alpha) if b.alpha is not None else None), "created_at": _t(b.created_at)}


def alert(a: Alert) -> dict:
    return {"id": a.id, "dataset_id": a.dataset_id, "audit_run_id": a.audit_run_id, "kind": a.kind,
            "severity": str(a.severity), "subject": a.subject, "message": a.message,
            "details": plain(a.details), "created_at": _t(a.created_at),
            "acknowledged_at": _t(a.acknowledged_at), "acknowledged_by_id": a.acknowledged_by_id,
            "assigned_to_id": a.assigned_to_id, "assigned_at": _t(a.assigned_at),
            "snoozed_until": _t(a.snoozed_until), "updated_at": _t(a.updated_at)}


def user(u: User) -> dict:
    return {"id": u.id, "email": u.email, "display_name": u.display_name, "role": str(u.role),
            "vendor": u.vendor, "is_active": bool(u.is_active), "created_at": _t(u.created_at)}


def token(t: ApiToken) -> dict:
    """A token's description; the token itself is shown once, when made, and never stored."""
    return {"id": t.id, "user_id": t.user_id, "name": t.name, "prefix": t.prefix,
            "role": str(t.role) if t.role is not None else None, "created_at": _t(t.created_at),
            "expires_at": _t(t.expires_at), "revoked_at": _t(t.revoked_at)}


def access_event(e: AccessEvent) -> dict:
    return {"id": e.id, "action": str(e.action), "actor": e.actor, "actor_id": e.actor_id, "user_id": e.user_id,
            "token_id": e.token_id, "subject": e.subject, "created_at": _t(e.created_at)}


# --- JSON Schemas ---------------------------------------------------------------------

_LABEL = {"type": "string", "minLength": 1, "maxLength": 200}
_NAME = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"}
_EXTERNAL_ID = {"type": "string", "minLength": 1, "maxLength": 512}

SCHEMAS: dict[str, dict] = {
    "Feed": _obj(["kind", "id", "source", "state"],
                 kind={"type": "string", "enum": ["labelstudio", "mlflow"]}, id=INT,
                 source={"type": "string", "description": "The connected server (without user info or query)."},
                 subject=STR, direction=STR,
                 state={"type": "string", "enum": ["ok", "error", "waiting", "disabled"],
                        "description": "error: the last sync or write-back failed (see error); waiting: nothing "
                                       "received or written yet; disabled: a Label Studio connector switched off."},
                 error=_n("string"), last_event_at=_n(TIME), last_sync_at=_n(TIME), last_written_at=_n(TIME),
                 last_written_run_id=_n("integer"), created_at=_n(TIME),
                 webhook_refused={"type": "integer", "description": "Label Studio webhook deliveries this "
                                  "connector refused (401, 409, 413, 422, 500...) since it was created."},
                 last_refused_at=_n(TIME), last_refusal=_n("string", "The last refusal: HTTP status and message."),
                 quarantined={"type": "integer", "description": "Annotations the last Label Studio pull kept "
                              "aside (they could not be read); everything else synced."},
                 quarantine={"type": "array", "description": "The quarantined annotations (at most 100), by task.",
                             "items": {"$ref": "#/components/schemas/QuarantinedAnnotation"}}),
    "QuarantinedAnnotation": _obj(["task_id", "annotation_id", "field", "reason", "hint"],
                                  task_id=_n("integer"), annotation_id=_n("integer"),
                                  field={"type": "string", "description": "Where in the annotation."},
                                  reason=STR, hint={"type": "string", "description": "How to fix it."},
                                  first_seen_at=_n(TIME), last_seen_at=_n(TIME)),
    "FeedList": _obj(["items"], items={"type": "array", "items": {"$ref": "#/components/schemas/Feed"}}),
    "Error": _obj(["error", "message"], error=STR, message=STR, field=_n("string"),
                  errors={"type": "array", "items": _obj(["message"], row=INT, field=_n("string"),
                                                         message=STR)}),
    "Me": _obj(["user_id", "workspace", "email", "role"], user_id=INT, workspace=STR, email=STR, role=STR,
               vendor=_n("string"), datasets=_n({"type": "array", "items": INT})),
    "Dataset": _obj(["id", "name", "labels", "data_version"], id=INT, name=STR, description=STR,
                    labels={"type": "array", "items": STR}, data_version=INT,
                    quality_window={"type": "string", "enum": ["week", "batch"]}, created_at=_n(TIME),
                    updated_at=_n(TIME)),
    "Item": _obj(["id", "dataset_id", "external_id", "label_counts"], id=INT, dataset_id=INT,
                 external_id=STR, gold_label=_n("string"), gold_source=_n("string"),
                 label_counts={"type": "array", "items": INT}, n_labels=INT, created_at=_n(TIME)),
    "Annotator": _obj(["id", "external_id", "tier"], id=INT, external_id=STR, vendor=_n("string"),
                      tier={"type": "string", "enum": ["crowd", "expert"]}, created_at=_n(TIME)),
    "Vendor": _obj(["name", "n_annotators"], name=STR, n_annotators=INT, n_experts=INT),
    "User": _obj(["id", "email", "role", "is_active"], id=INT, email=STR, display_name=_n("string"),
                 role={"type": "string", "enum": ["admin", "analyst", "vendor", "viewer"]}, vendor=_n("string"),
                 is_active=BOOL, created_at=_n(TIME)),
    "Token": _obj(["id", "user_id", "name", "prefix"], id=INT, user_id=INT, name=STR, prefix=STR,
                  role=_n("string"), created_at=_n(TIME), expires_at=_n(TIME), revoked_at=_n(TIME)),
    "AccessEvent": _obj(["id", "action", "actor", "subject", "created_at"], id=INT,
                        action={"type": "string", "enum": ["token_revoked", "user_deactivated",
                                                           "user_reactivated"]},
                        actor=STR, actor_id=_n("integer"), user_id=_n("integer"), token_id=_n("integer"),
                        subject=STR, created_at=TIME),
    "Model": _obj(["id", "name"], id=INT, name=STR, description=_n("string"), created_at=_n(TIME)),
    "Release": _obj(["id", "model_id", "version"], id=INT, model_id=INT, version=STR, alias=_n("string"),
                    tags=ANY_JSON, released_at=_n(TIME), created_at=_n(TIME)),
    "Batch": _obj(["id", "dataset_id", "kind", "row_count", "data_version"], id=INT, dataset_id=INT,
                  kind=STR, format=STR, source_name=_n("string"), release_id=_n("integer"),
                  submitted_by=_n("string"), row_count=INT, data_version=INT, checksum=STR,
                  idempotency_key=_n("string"), stats=ANY_JSON, created_at=_n(TIME)),
    "ImportAttempt": _obj(["id", "dataset_id", "kind", "status_code", "message", "errors"], id=INT, dataset_id=INT,
                          kind=STR, format=_n("string"), source_name=_n("string"), submitted_by=_n("string"),
                          status_code={"type": "integer", "description": "The answer's HTTP status."},
                          bad_rows={"type": "integer", "description": "Bad rows in all (0: the file as a whole)."},
                          message=STR, errors={"type": "array", "items": _obj(
                              ["row", "message"], row=_n("integer"), field=_n("string"), message=STR)},
                          created_at=_n(TIME)),
    "Accepted": _obj(["batch_id", "data_version", "dataset_id"], batch_id=INT, data_version=INT,
                     dataset_id=INT, kind=STR, row_count=INT, duplicate=BOOL),
    "AuditRun": _obj(["id", "dataset_id", "data_version", "status"], id=INT, dataset_id=INT,
                     data_version=INT, status={"type": "string", "enum": ["queued", "running", "succeeded", "failed"]},
                     error=_n("string"), created_at=_n(TIME), started_at=_n(TIME), finished_at=_n(TIME),
                     queued_seconds=_n("number"), run_seconds=_n("number"), summary=ANY_JSON,
                     parameters=ANY_JSON),
    "AuditRunDetail": {"allOf": [ref("AuditRun"), _obj(
        [], best_scores={"type": "array", "items": ref("BestScore")},
        agreements={"type": "array", "items": _obj(["coefficient"], vendor=_n("string"), coefficient=STR,
                                                   value=_n("number"), ci_low=_n("number"),
                                                   ci_high=_n("number"), n_items=INT)},
        n_certifications=INT, n_power_curves=INT, n_vendor_reports=INT)]},
    "Certification": _obj(["id", "audit_run_id", "release_id", "l", "u_t", "certified"], id=INT,
                          audit_run_id=INT, dataset_id=INT, data_version=INT, model_id=INT, model=STR,
                          release_id=INT, version=STR, released_at=_n(TIME), run_finished_at=_n(TIME),
                          n_items_upper=INT, n_items_lower=INT, u_t=_n("number"), u_e=_n("number"),
                          l=_n("number"), tau=_n("number"), s_hms_t=_n("number"), s_oms_t=_n("number"),
                          s_hms_e=_n("number"), s_oms_e=_n("number"), s_anytime_t=_n("number"),
                          s_anytime_e=_n("number"), certified=BOOL, certified_with=STR,
                          certified_paper=_n("boolean"), certified_anytime=_n("boolean"), method=STR,
                          verdict=STR, created_at=_n(TIME)),
    "PowerCurve": _obj(["id", "audit_run_id", "points"], id=INT, audit_run_id=INT, release_id=_n("integer"),
                       vendor=_n("string"), reference=STR, combiner=STR, scorer=STR, max_k=INT,
                       n_bootstrap=INT, seed=_n("integer"),
                       points={"type": "array", "items": {"type": "object"}},
                       classifier_score=_n("number"), classifier_low=_n("number"),
                       classifier_high=_n("number"), equivalence=_n("number"), equivalence_low=_n("number"),
                       equivalence_high=_n("number"), equivalence_note=_n("string"),
                       equivalence_low_note=_n("string", "An interval end that is not a number (e.g. \"> 9\")."),
                       equivalence_high_note=_n("string", "An interval end that is not a number."),
                       method=_n("string", "How the points were computed: exact, monte_carlo (the exact sums "
                                           "drawn; each point then has its mc_error) or sampling."),
                       equivalence_mc_error=_n("number", "Monte Carlo standard error of the equivalence (raters) "
                                                         "when the curve was drawn; null on a drawn curve: "
                                                         "undetermined."),
                       created_at=_n(TIME)),
    "VendorReport": _obj(["id", "audit_run_id", "vendor"], id=INT, audit_run_id=INT, dataset_id=INT,
                         data_version=INT, run_finished_at=_n(TIME), vendor=STR, n_annotators=INT, n_items=INT,
                         n_annotations=INT, u_t=_n("number"), u_e=_n("number"), agreement=_n("number"),
                         expert_equivalence=_n("number"),
                         expert_equivalence_method=_n("string", "exact, or monte_carlo when the expert "
                                                                "equivalence's curves were drawn."),
                         expert_equivalence_mc_error=_n("number", "Its Monte Carlo standard error (raters) when "
                                                                  "drawn; null then: undetermined."),
                         created_at=_n(TIME)),
    "QualityWindow": _obj(["grouping", "group", "metric", "window_start", "window_end", "value"],
                          id=INT, dataset_id=INT, grouping={"type": "string", "enum": ["vendor", "annotator"]},
                          group=STR, metric={"type": "string", "enum": ["agreement", "gold_accuracy"]},
                          window_key={"type": "integer", "description": "The window's key, in time order: "
                                  "weeks since Monday 1970-01-05, or the import's data version (batch windows)."},
                          window_start=TIME, window_end=TIME, n_items=_n("number"), n_labels=INT,
                          value=_n("number"), low=_n("number"), high=_n("number"), audit_run_id=_n("integer"),
                          updated_at=_n(TIME)),
    "QualitySensitivity": _obj(
        ["grouping", "group", "metric", "units_per_window", "min_drop"],
        grouping={"type": "string", "enum": ["vendor", "annotator"]}, group=STR,
        metric={"type": "string", "enum": ["agreement", "gold_accuracy"]},
        units_per_window=_n("number", "Items a window the group labelled (mean of its last 4 windows with data)."),
        unit_sd=_n("number", "Spread of the group's per-item differences against the other groups."),
        min_drop=_n("number", "Smallest drop of the group's mean difference against the other groups that "
                              "the detector finds within 4 windows with 90% probability at this volume."),
        min_drop_accuracy=_n("number", "The same drop in accuracy (on gold: the same number; on agreement: "
                                       "through the paired difference's response to accuracy, at the midpoint "
                                       "of the interval below)."),
        others_accuracy_low=_n("number", "Low end of the other labels' mean accuracy the data allow (agreement: "
                                         "the hard items pure guesses; gold: the measured accuracy)."),
        others_accuracy_high=_n("number", "High end (agreement: every item equally hard)."),
        within_windows=INT, power=NUM),
    "QualityChange": _obj(["grouping", "group", "metric", "direction", "detected_at", "start"],
                          id=INT, dataset_id=INT, audit_run_id=_n("integer"),
                          grouping={"type": "string", "enum": ["vendor", "annotator", "dataset"],
                                    "description": "dataset: a change all vendors share (the items got "
                                                   "harder or easier), group 'all items'."}, group=STR,
                          metric={"type": "string", "enum": ["agreement", "gold_accuracy"]},
                          direction={"type": "string", "enum": ["drop", "rise"]}, detected_at=TIME, start=TIME,
                          before=_n("number"), before_low=_n("number"), before_high=_n("number"),
                          after=_n("number"), after_low=_n("number"), after_high=_n("number"),
                          evidence=_n("number"), created_at=_n(TIME)),
    "AnnotatorBound": _obj(["vendor", "annotator"], vendor=_n("string"), audit_run_id=INT, annotator=STR,
                           agreement=_n("number"), n_items=INT, lower_confidence=_n("number")),
    "BestScore": _obj(["metric", "value"], id=INT, audit_run_id=INT, data_version=INT, metric=STR,
                      value=_n("number"), std_error=_n("number"), n_items=INT,
                      alpha=_n({"type": "array", "items": _n("number")}), created_at=_n(TIME)),
    "Alert": _obj(["id", "kind", "severity", "message"], id=INT, dataset_id=_n("integer"),
                  audit_run_id=_n("integer"), kind=STR, severity=STR, subject=_n("string"), message=STR,
                  details=ANY_JSON, created_at=_n(TIME), acknowledged_at=_n(TIME),
                  acknowledged_by_id=_n("integer", "Who acknowledged it (a user id)."),
                  assigned_to_id=_n("integer", "Who should act on it (a user id)."), assigned_at=_n(TIME),
                  snoozed_until=_n(TIME, "Off the open list until then."), updated_at=_n(TIME)),
}

_RECORD_LIMIT = 1_000_000


def _ingest(description: str, **options) -> dict:
    # Field-level checks are the ingestion use cases' (the same as for files): here only the shape.
    return {"type": "object", "required": ["records"], "additionalProperties": False,
            "properties": {"records": {"type": "array", "minItems": 1, "maxItems": _RECORD_LIMIT,
                                       "description": description, "items": {"type": "object"}},
                           "idempotency_key": {"type": "string", "minLength": 1, "maxLength": 200},
                           **options}}

BODIES: dict[str, dict] = {
    "DatasetCreate": {"type": "object", "required": ["name", "labels"], "additionalProperties": False,
                      "properties": {"name": _NAME, "description": {"type": "string", "maxLength": 10_000},
                                     "quality_window": {"type": "string", "enum": ["week", "batch"],
                                                        "description": "Quality series per calendar week of "
                                                                       "the annotations' time stamps (default) "
                                                                       "or per import batch."},
                                     "labels": {"type": "array", "items": _LABEL, "minItems": 2,
                                                "maxItems": 1000, "uniqueItems": True}}},
    "ItemsCreate": {"type": "object", "required": ["items"], "additionalProperties": False,
                    "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 100_000,
                                             "items": {"type": "object", "required": ["external_id"],
                                                       "additionalProperties": False,
                                                       "properties": {"external_id": _EXTERNAL_ID}}}}},
    "AnnotatorCreate": {"type": "object", "required": ["external_id"], "additionalProperties": False,
                        "properties": {"external_id": _EXTERNAL_ID,
                                       "vendor": {"type": ["string", "null"], "minLength": 1, "maxLength": 200},
                                       "tier": {"type": "string", "enum": ["crowd", "expert"]}}},
    "ModelCreate": {"type": "object", "required": ["name"], "additionalProperties": False,
                    "properties": {"name": _NAME, "description": {"type": ["string", "null"], "maxLength": 10_000}}},
    "ReleaseCreate": {"type": "object", "required": ["version"], "additionalProperties": False,
                      "properties": {"version": {"type": "string", "minLength": 1, "maxLength": 100, "pattern": r"\S"},
                                     "alias": {"type": ["string", "null"], "maxLength": 100},
                                     "released_at": {"type": ["string", "null"], "format": "date-time",
                                                     "maxLength": 64},
                                     "tags": {}}},
    "AnnotationsIngest": _ingest(
        "Records as in a JSONL file: item_id, annotator_id, label, and optionally vendor, tier, timestamp.",
        vendor={"type": "string", "minLength": 1, "maxLength": 200},
        tier={"type": "string", "enum": ["crowd", "expert"]}),
    "GoldIngest": _ingest("Records as in a JSONL file: item_id, label, and optionally source.",
                          source={"type": "string", "minLength": 1, "maxLength": 200}),
    "PredictionsIngest": _ingest(
        "Records as in a JSONL file: item_id, and label and/or probabilities (a list in the dataset's "
        "label order, or an object label → probability)."),
}
