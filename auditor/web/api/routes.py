"""The JSON API's operations: resources, results, and the OpenAPI document."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import jsonify
from sqlalchemy import Select, case, func, select
from sqlalchemy.exc import IntegrityError

from auditor import ingest
from auditor.db import (
    AccessEvent,
    Agreement,
    Alert,
    AlertSeverity,
    Annotator,
    ApiToken,
    AuditRun,
    AuditStatus,
    BestScore,
    Certification,
    Dataset,
    ImportBatch,
    Item,
    Model,
    PowerCurve,
    Release,
    Role,
    Tier,
    User,
    VendorReport,
)
from auditor.db.queries_audit import latest_run
from auditor.ingest import IngestError
from auditor.web.api import serializers as s
from auditor.web.api.framework import Listing, Param, endpoint
from auditor.web.errors import ApiError
from auditor.web.security import ALL_ROLES, READERS

ADMIN = frozenset({Role.ADMIN})
WRITERS = frozenset({Role.ADMIN, Role.ANALYST})
READ_OR_VENDOR = READERS | {Role.VENDOR}
B = s.BODIES


# --- lookups that enforce the workspace (another workspace's object is simply not found) ---


def get_dataset(principal, db, dataset_id: int) -> Dataset:
    ds = db.get(Dataset, dataset_id)
    if ds is None or ds.workspace_id != principal.workspace_id:
        raise ApiError(404, f"No dataset with id {dataset_id}.", field="dataset_id")
    if principal.role == Role.VENDOR and ds.id not in principal.grants:
        raise ApiError(404, f"No dataset with id {dataset_id}.", field="dataset_id")
    return ds


def get_model(principal, db, model_id: int) -> Model:
    m = db.get(Model, model_id)
    if m is None or m.workspace_id != principal.workspace_id:
        raise ApiError(404, f"No model with id {model_id}.", field="model_id")
    return m


def get_release(principal, db, release_id: int, *, field: str = "release_id") -> Release:
    row = db.execute(select(Release, Model).join(Model, Release.model_id == Model.id)
                     .where(Release.id == release_id, Model.workspace_id == principal.workspace_id)).first()
    if row is None:
        raise ApiError(404, f"No release with id {release_id}.", field=field)
    return row[0]


def get_run(principal, db, audit_run_id: int) -> AuditRun:
    row = db.execute(select(AuditRun).join(Dataset, AuditRun.dataset_id == Dataset.id)
                     .where(AuditRun.id == audit_run_id, Dataset.workspace_id == principal.workspace_id)).first()
    if row is None:
        raise ApiError(404, f"No audit run with id {audit_run_id}.", field="audit_run_id")
    return row[0]


def _commit(db, what: str):
    try:
        db.commit()
    except IntegrityError:
        db.rollback()
        raise ApiError(409, f"{what} already exists.", field="name") from None


def _vendor_scope(principal, vendor: str | None) -> str | None:
    """A vendor caller sees only its own vendor, whatever it asked for."""
    if principal.role != Role.VENDOR:
        return vendor
    if principal.vendor is None or (vendor is not None and vendor != principal.vendor):
        raise ApiError(404, "No such vendor.", field="vendor")
    return principal.vendor


# --- who am I ---------------------------------------------------------------------------------


@endpoint("GET", "/me", summary="Describe the caller", tag="access", roles=ALL_ROLES, response=s.ref("Me"))
def me(principal, db):
    """The caller's workspace, role, vendor and (for vendors) granted datasets."""
    granted = sorted(principal.grants) if principal.role == Role.VENDOR else None
    return {"user_id": principal.user_id, "workspace": principal.workspace_slug, "email": principal.email,
            "role": principal.role.value, "vendor": principal.vendor, "datasets": granted}


# --- users, tokens and who changed them ------------------------------------------------------
#
# Authentication reads a token's ``revoked_at`` and its user's ``is_active`` on every request,
# before any cached answer: a revoked token or a deactivated user is refused from the next request.


def _get_user(principal, db, user_id: int) -> User:
    u = db.get(User, user_id)
    if u is None or u.workspace_id != principal.workspace_id:
        raise ApiError(404, f"No user with id {user_id}.", field="user_id")
    return u


@endpoint("GET", "/users", summary="List users", tag="access", roles=ADMIN, listing=True,
          query=[Param("active", "boolean", "Only active (true) or deactivated (false) users.")],
          response=s.page_of("User"))
def list_users(principal, db, active):
    """Users of the workspace with their role, vendor and whether they may sign in."""
    stmt = select(User).where(User.workspace_id == principal.workspace_id).order_by(User.email)
    if active is not None:
        stmt = stmt.where(User.is_active.is_(active))
    return Listing(stmt, s.user, ["id", "email", "display_name", "role", "vendor", "is_active", "created_at"],
                   "users")


def _set_active(principal, db, user_id: int, active: bool) -> dict:
    from auditor.web.access import set_user_active

    u = _get_user(principal, db, user_id)
    if not active and u.id == principal.user_id:
        raise ApiError(409, "An admin cannot deactivate itself; ask another admin.", field="user_id")
    set_user_active(db, u, active, actor=principal.email, actor_id=principal.user_id)
    _commit(db, f"User {user_id}")
    return s.user(u)


@endpoint("POST", "/users/<int:user_id>/deactivate", summary="Deactivate a user", tag="access", roles=ADMIN,
          response=s.ref("User"))
def deactivate_user(principal, db, user_id):
    """Refuse the user's sessions and tokens from the next request on; recorded as an access event."""
    return _set_active(principal, db, user_id, False)


@endpoint("POST", "/users/<int:user_id>/reactivate", summary="Reactivate a user", tag="access", roles=ADMIN,
          response=s.ref("User"))
def reactivate_user(principal, db, user_id):
    """Let a deactivated user in again (its tokens work again unless revoked); recorded as an access event."""
    return _set_active(principal, db, user_id, True)


@endpoint("GET", "/users/<int:user_id>/tokens", summary="List a user's tokens", tag="access", roles=ALL_ROLES,
          listing=True, response=s.page_of("Token"))
def list_tokens(principal, db, user_id):
    """A user's API tokens, never the tokens themselves (an admin sees anyone's, others their own)."""
    if principal.role != Role.ADMIN and user_id != principal.user_id:
        raise ApiError(404, f"No user with id {user_id}.", field="user_id")
    u = _get_user(principal, db, user_id)
    stmt = select(ApiToken).where(ApiToken.user_id == u.id).order_by(ApiToken.id)
    return Listing(stmt, s.token, ["id", "user_id", "name", "prefix", "role", "created_at", "expires_at",
                                   "revoked_at"], f"tokens-{u.id}")


@endpoint("POST", "/tokens/<int:token_id>/revoke", summary="Revoke a token", tag="access", roles=ALL_ROLES,
          response=s.ref("Token"))
def revoke_token(principal, db, token_id):
    """Revoke a token at once (an admin any token of the workspace, others their own); revoking again changes nothing."""
    from auditor.web.access import revoke_token as revoke

    row = db.execute(select(ApiToken).join(User, ApiToken.user_id == User.id)
                     .where(ApiToken.id == token_id, User.workspace_id == principal.workspace_id)
                     .with_for_update(of=ApiToken)).first()
    if row is None or (principal.role != Role.ADMIN and row[0].user_id != principal.user_id):
        raise ApiError(404, f"No token with id {token_id}.", field="token_id")
    revoke(db, row[0], actor=principal.email, actor_id=principal.user_id)
    _commit(db, f"Token {token_id}")
    return s.token(row[0])


@endpoint("GET", "/access-events", summary="List access events", tag="access", roles=ADMIN, listing=True,
          query=[Param("user_id", "integer", "Only events about this user.")], response=s.page_of("AccessEvent"))
def list_access_events(principal, db, user_id):
    """Who revoked which token or (de)activated which user, and when; newest first."""
    stmt = (select(AccessEvent).where(AccessEvent.workspace_id == principal.workspace_id)
            .order_by(AccessEvent.created_at.desc(), AccessEvent.id.desc()))
    if user_id is not None:
        stmt = stmt.where(AccessEvent.user_id == user_id)
    return Listing(stmt, s.access_event, ["id", "created_at", "action", "actor", "actor_id", "user_id",
                                          "token_id", "subject"], "access-events")


# --- datasets and items -----------------------------------------------------------------------


@endpoint("GET", "/datasets", summary="List datasets", tag="datasets", roles=READ_OR_VENDOR, listing=True,
          query=[Param("name", "string", "Only datasets whose name contains this text.", max_length=200)],
          response=s.page_of("Dataset"))
def list_datasets(principal, db, name):
    """Datasets of the workspace (a vendor sees the datasets it is granted)."""
    stmt = select(Dataset).where(Dataset.workspace_id == principal.workspace_id).order_by(Dataset.name)
    if name:
        stmt = stmt.where(Dataset.name.contains(name, autoescape=True))
    if principal.role == Role.VENDOR:
        stmt = stmt.where(Dataset.id.in_(principal.grants or [-1]))
    return Listing(stmt, s.dataset, ["id", "name", "description", "labels", "data_version", "created_at"],
                   "datasets")


@endpoint("POST", "/datasets", summary="Create a dataset", tag="datasets", roles=ADMIN,
          body=B["DatasetCreate"], body_name="DatasetCreate", response=s.ref("Dataset"), status=201)
def create_dataset(principal, db, body):
    """A dataset with its ordered label set."""
    exists = db.scalar(select(Dataset.id).where(Dataset.workspace_id == principal.workspace_id,
                                                Dataset.name == body["name"].strip()))
    if exists is not None:
        raise ApiError(409, f"A dataset named {body['name']!r} already exists (id {exists}).", field="name")
    try:
        ds = ingest.create_dataset(db, body["name"], body["labels"], workspace=principal.workspace_slug,
                            description=body.get("description", ""))
    except IngestError as exc:
        raise ApiError(400, str(exc), field="labels") from None
    _commit(db, f"A dataset named {body['name']!r}")
    return s.dataset(ds)


@endpoint("GET", "/datasets/<int:dataset_id>", summary="Read a dataset", tag="datasets", roles=READ_OR_VENDOR,
          response=s.ref("Dataset"))
def read_dataset(principal, db, dataset_id):
    """One dataset."""
    return s.dataset(get_dataset(principal, db, dataset_id))


@endpoint("GET", "/datasets/<int:dataset_id>/items", summary="List items", tag="datasets", roles=READERS,
          listing=True, response=s.page_of("Item"),
          query=[Param("external_id", "string", "Only the item with this external id."),
                 Param("has_gold", "boolean", "Only items with (true) or without (false) a gold label."),
                 Param("min_labels", "integer", "Only items with at least this many labels.", minimum=0,
                       maximum=1_000_000)])
def list_items(principal, db, dataset_id, external_id, has_gold, min_labels):
    """Items of a dataset with their current label counts and gold labels."""
    ds = get_dataset(principal, db, dataset_id)
    stmt = select(Item).where(Item.dataset_id == ds.id).order_by(Item.id)
    if external_id is not None:
        stmt = stmt.where(Item.external_id == external_id)
    if has_gold is not None:
        stmt = stmt.where(Item.gold_label.is_not(None) if has_gold else Item.gold_label.is_(None))
    labels = list(ds.labels)
    rows = None
    if min_labels:
        # label_counts is an array (PostgreSQL) or JSON (SQLite): filter in Python, per page.
        rows = [i for i in db.scalars(stmt) if sum(i.label_counts or []) >= min_labels]
    return Listing(rows if rows is not None else stmt, lambda i: s.item(i, labels),
                   ["id", "external_id", "gold_label", "gold_source", "label_counts", "n_labels"],
                   f"items-{ds.id}")


@endpoint("POST", "/datasets/<int:dataset_id>/items", summary="Create items", tag="datasets", roles=ADMIN,
          body=B["ItemsCreate"], body_name="ItemsCreate", status=201,
          response={"type": "object", "required": ["created", "existing"],
                    "properties": {"created": {"type": "integer"}, "existing": {"type": "integer"}}})
def create_items(principal, db, dataset_id, body):
    """Register items by external id before they are labeled (existing ids are left as they are)."""
    ds = get_dataset(principal, db, dataset_id)
    wanted = list(dict.fromkeys(i["external_id"] for i in body["items"]))
    existing = set()
    for start in range(0, len(wanted), 5000):
        chunk = wanted[start:start + 5000]
        existing.update(db.scalars(select(Item.external_id).where(Item.dataset_id == ds.id,
                                                                  Item.external_id.in_(chunk))))
    new = [w for w in wanted if w not in existing]
    zeros = [0] * len(ds.labels)
    db.add_all([Item(dataset_id=ds.id, external_id=w, label_counts=list(zeros)) for w in new])
    if new:
        ds.updated_at = func.now()  # the dataset changed (its cached pages must go)
    _commit(db, "An item with one of these external ids")
    return {"created": len(new), "existing": len(existing)}


@endpoint("GET", "/datasets/<int:dataset_id>/items/<int:item_id>", summary="Read an item", tag="datasets",
          roles=READERS, response=s.ref("Item"))
def read_item(principal, db, dataset_id, item_id):
    """One item."""
    ds = get_dataset(principal, db, dataset_id)
    it = db.get(Item, item_id)
    if it is None or it.dataset_id != ds.id:
        raise ApiError(404, f"No item with id {item_id} in dataset {dataset_id}.", field="item_id")
    return s.item(it, list(ds.labels))


@endpoint("GET", "/datasets/<int:dataset_id>/batches", summary="List import batches", tag="ingestion",
          roles=READ_OR_VENDOR, listing=True, response=s.page_of("Batch"),
          query=[Param("kind", "string", "Only batches of this kind.", enum=("annotations", "gold", "predictions"))])
def list_batches(principal, db, dataset_id, kind):
    """Accepted uploads, newest first (a vendor sees only its own submissions)."""
    ds = get_dataset(principal, db, dataset_id)
    stmt = select(ImportBatch).where(ImportBatch.dataset_id == ds.id).order_by(ImportBatch.id.desc())
    if kind:
        stmt = stmt.where(ImportBatch.kind == kind)
    if principal.role == Role.VENDOR:
        stmt = stmt.where(ImportBatch.submitted_by_id == principal.user_id)
    return Listing(stmt, s.batch, ["id", "kind", "format", "source_name", "release_id", "submitted_by",
                                   "row_count", "data_version", "created_at"], f"batches-{ds.id}")


# --- annotators and vendors -------------------------------------------------------------------


@endpoint("GET", "/annotators", summary="List annotators", tag="annotators", roles=READ_OR_VENDOR,
          listing=True, response=s.page_of("Annotator"),
          query=[Param("vendor", "string", "Only this vendor's annotators.", max_length=200),
                 Param("tier", "string", "Only this tier.", enum=("crowd", "expert")),
                 Param("external_id", "string", "Only the annotator with this external id.")])
def list_annotators(principal, db, vendor, tier, external_id):
    """Annotators of the workspace (a vendor sees its own)."""
    vendor = _vendor_scope(principal, vendor)
    stmt = select(Annotator).where(Annotator.workspace_id == principal.workspace_id).order_by(Annotator.id)
    if vendor is not None:
        stmt = stmt.where(Annotator.vendor == vendor)
    if tier:
        stmt = stmt.where(Annotator.tier == Tier(tier))
    if external_id is not None:
        stmt = stmt.where(Annotator.external_id == external_id)
    return Listing(stmt, s.annotator, ["id", "external_id", "vendor", "tier", "created_at"], "annotators")


@endpoint("POST", "/annotators", summary="Create an annotator", tag="annotators", roles=ADMIN,
          body=B["AnnotatorCreate"], body_name="AnnotatorCreate", response=s.ref("Annotator"), status=201)
def create_annotator(principal, db, body):
    """An annotator with its vendor and tier."""
    a = Annotator(workspace_id=principal.workspace_id, external_id=body["external_id"],
                  vendor=body.get("vendor"), tier=Tier(body.get("tier", "crowd")))
    db.add(a)
    _commit(db, f"An annotator {body['external_id']!r}")
    return s.annotator(a)


@endpoint("GET", "/annotators/<int:annotator_id>", summary="Read an annotator", tag="annotators",
          roles=READ_OR_VENDOR, response=s.ref("Annotator"))
def read_annotator(principal, db, annotator_id):
    """One annotator."""
    a = db.get(Annotator, annotator_id)
    if (a is None or a.workspace_id != principal.workspace_id
            or (principal.role == Role.VENDOR and a.vendor != principal.vendor)):
        raise ApiError(404, f"No annotator with id {annotator_id}.", field="annotator_id")
    return s.annotator(a)


def _vendors_stmt(principal) -> Select:
    return (select(Annotator.vendor, func.count(Annotator.id),
                   func.sum(case((Annotator.tier == Tier.EXPERT, 1), else_=0)))
            .where(Annotator.workspace_id == principal.workspace_id, Annotator.vendor.is_not(None))
            .group_by(Annotator.vendor).order_by(Annotator.vendor))


@endpoint("GET", "/vendors", summary="List vendors", tag="annotators", roles=READ_OR_VENDOR, listing=True,
          response=s.page_of("Vendor"))
def list_vendors(principal, db):
    """Vendors (the ``vendor`` of the workspace's annotators) with their annotator counts."""
    stmt = _vendors_stmt(principal)
    if principal.role == Role.VENDOR:
        stmt = stmt.where(Annotator.vendor == (principal.vendor or ""))
    return Listing(stmt, s.vendor, ["name", "n_annotators", "n_experts"], "vendors")


@endpoint("GET", "/vendors/<path:vendor>", summary="Read a vendor", tag="annotators", roles=READ_OR_VENDOR,
          response=s.ref("Vendor"))
def read_vendor(principal, db, vendor):
    """One vendor."""
    _vendor_scope(principal, vendor)
    row = db.execute(_vendors_stmt(principal).where(Annotator.vendor == vendor)).first()
    if row is None:
        raise ApiError(404, f"No vendor named {vendor!r}.", field="vendor")
    return s.vendor(row)


# --- models and releases ----------------------------------------------------------------------


@endpoint("GET", "/models", summary="List models", tag="models", roles=READERS, listing=True,
          query=[Param("name", "string", "Only models whose name contains this text.", max_length=200)],
          response=s.page_of("Model"))
def list_models(principal, db, name):
    """Models of the workspace."""
    stmt = select(Model).where(Model.workspace_id == principal.workspace_id).order_by(Model.name)
    if name:
        stmt = stmt.where(Model.name.contains(name, autoescape=True))
    return Listing(stmt, s.model, ["id", "name", "description", "created_at"], "models")


@endpoint("POST", "/models", summary="Create a model", tag="models", roles=WRITERS, body=B["ModelCreate"],
          body_name="ModelCreate", response=s.ref("Model"), status=201)
def create_model(principal, db, body):
    """A model family."""
    m = Model(workspace_id=principal.workspace_id, name=body["name"], description=body.get("description"))
    db.add(m)
    _commit(db, f"A model named {body['name']!r}")
    return s.model(m)


@endpoint("GET", "/models/<int:model_id>", summary="Read a model", tag="models", roles=READERS,
          response=s.ref("Model"))
def read_model(principal, db, model_id):
    """One model."""
    return s.model(get_model(principal, db, model_id))


@endpoint("GET", "/models/<int:model_id>/releases", summary="List releases", tag="models", roles=READERS,
          listing=True, response=s.page_of("Release"))
def list_releases(principal, db, model_id):
    """Releases of a model, oldest first."""
    m = get_model(principal, db, model_id)
    stmt = (select(Release).where(Release.model_id == m.id)
            .order_by(Release.released_at.asc().nulls_last(), Release.id))
    return Listing(stmt, s.release, ["id", "version", "alias", "released_at", "tags", "created_at"],
                   f"releases-{m.id}")


@endpoint("POST", "/models/<int:model_id>/releases", summary="Create a release", tag="models", roles=WRITERS,
          body=B["ReleaseCreate"], body_name="ReleaseCreate", response=s.ref("Release"), status=201)
def create_release(principal, db, model_id, body):
    """A release (version) of a model."""
    m = get_model(principal, db, model_id)
    released_at = None
    if body.get("released_at"):
        try:
            released_at = datetime.fromisoformat(body["released_at"])
        except ValueError:
            raise ApiError(400, "released_at must be an ISO 8601 date-time.", field="released_at") from None
        if released_at.tzinfo is None:
            raise ApiError(400, "released_at must include a time zone (e.g. 'Z').", field="released_at")
    r = Release(model_id=m.id, version=body["version"], alias=body.get("alias"), tags=body.get("tags"),
                released_at=released_at)
    db.add(r)
    _commit(db, f"A release {body['version']!r} of this model")
    return s.release(r)


@endpoint("GET", "/releases/<int:release_id>", summary="Read a release", tag="models", roles=READERS,
          response=s.ref("Release"))
def read_release(principal, db, release_id):
    """One release."""
    return s.release(get_release(principal, db, release_id))


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
    out["agreements"] = [{"vendor": a.vendor, "coefficient": a.coefficient, "value": s._f(a.value),
                          "ci_low": s._f(a.ci_low), "ci_high": s._f(a.ci_high), "n_items": a.n_items}
                         for a in db.scalars(select(Agreement).where(Agreement.audit_run_id == run.id)
                                             .order_by(Agreement.vendor.nulls_first(), Agreement.coefficient))]
    for key, table in (("n_certifications", Certification), ("n_power_curves", PowerCurve),
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
        stmt = stmt.where(Model.id == model_id)
    if release_id is not None:
        stmt = stmt.where(Release.id == release_id)
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
    stmt = (select(PowerCurve).join(AuditRun, PowerCurve.audit_run_id == AuditRun.id)
            .where(AuditRun.dataset_id == ds.id).order_by(AuditRun.id.desc(), PowerCurve.id))
    if audit_run_id is not None:
        stmt = stmt.where(AuditRun.id == audit_run_id)
    elif not all_runs:
        run = latest_run(db, ds.id)
        stmt = stmt.where(AuditRun.id == (run.id if run else -1))
    if release_id is not None:
        stmt = stmt.where(PowerCurve.release_id == release_id)
    if vendor is not None:
        stmt = stmt.where(PowerCurve.vendor == vendor)
    columns = ["id", "audit_run_id", "release_id", "vendor", "reference", "combiner", "scorer",
               "classifier_score", "classifier_low", "classifier_high", "equivalence", "equivalence_low",
               "equivalence_high", "equivalence_note", "point_k", "point_mean", "point_ci_low", "point_ci_high",
               "point_n_items"]
    return Listing(stmt, s.power_curve, columns, f"power-curves-{ds.id}", csv_rows=s.power_curve_points)


@endpoint("GET", "/datasets/<int:dataset_id>/vendor-reports", summary="List vendor reports", tag="results",
          roles=READ_OR_VENDOR, listing=True, response=s.page_of("VendorReport"),
          query=[Param("vendor", "string", "Only this vendor.", max_length=200)], cache=True)
def list_vendor_reports(principal, db, dataset_id, vendor):
    """Each vendor's quality in each audit run, oldest first (a vendor sees only its own)."""
    ds = get_dataset(principal, db, dataset_id)
    vendor = _vendor_scope(principal, vendor)
    # Plain columns: the per-annotator lists (``annotators``) are another endpoint's, and large.
    stmt = (select(VendorReport.id, VendorReport.audit_run_id, AuditRun.dataset_id, AuditRun.data_version,
                   AuditRun.finished_at.label("run_finished_at"), VendorReport.vendor, VendorReport.n_annotators,
                   VendorReport.n_items, VendorReport.n_annotations, VendorReport.u_t, VendorReport.u_e,
                   VendorReport.agreement, VendorReport.expert_equivalence, VendorReport.created_at)
            .select_from(VendorReport).join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
            .where(AuditRun.dataset_id == ds.id).order_by(AuditRun.id, VendorReport.vendor))
    if vendor is not None:
        stmt = stmt.where(VendorReport.vendor == vendor)
    return Listing(stmt, s.vendor_report, ["audit_run_id", "data_version", "run_finished_at", "vendor",
                                           "n_annotators", "n_items", "n_annotations", "u_t", "u_e",
                                           "agreement", "expert_equivalence"], f"vendor-reports-{ds.id}",
                   mapping=True)


@endpoint("GET", "/datasets/<int:dataset_id>/annotator-bounds", summary="List per-annotator bounds",
          tag="results", roles=READ_OR_VENDOR, listing=True, response=s.page_of("AnnotatorBound"),
          query=[Param("vendor", "string", "Only this vendor's annotators.", max_length=200),
                 Param("audit_run_id", "integer", "This audit run (default: the latest successful one).")], cache=True)
def list_annotator_bounds(principal, db, dataset_id, vendor, audit_run_id):
    """Each annotator's lower bound (Theorem 3) from one audit run's vendor reports."""
    ds = get_dataset(principal, db, dataset_id)
    vendor = _vendor_scope(principal, vendor)
    run_id = audit_run_id if audit_run_id is not None else getattr(latest_run(db, ds.id), "id", -1)
    stmt = (select(VendorReport).join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
            .where(AuditRun.dataset_id == ds.id, AuditRun.id == run_id).order_by(VendorReport.vendor))
    if vendor is not None:
        stmt = stmt.where(VendorReport.vendor == vendor)
    rows = [{"vendor": v.vendor, "audit_run_id": v.audit_run_id, **a}
            for v in db.scalars(stmt) for a in (v.annotators or [])]
    if vendor is None and run_id != -1:
        # Annotators without a vendor are in no vendor report; the run's summary keeps their bounds.
        run = db.get(AuditRun, run_id)
        rows += [{"vendor": None, "audit_run_id": run_id, **a}
                 for a in ((run.summary or {}).get("annotators_without_vendor") or [])] if run else []
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


@endpoint("POST", "/alerts/<int:alert_id>/acknowledge", summary="Acknowledge an alert", tag="results",
          roles=WRITERS, response=s.ref("Alert"))
def acknowledge_alert(principal, db, alert_id):
    """Mark an alert as seen (it leaves the unacknowledged list); acknowledging again changes nothing."""
    a = db.scalar(select(Alert).where(Alert.id == alert_id, Alert.workspace_id == principal.workspace_id)
                  .with_for_update())
    if a is None:
        raise ApiError(404, f"No alert with id {alert_id}.", field="alert_id")
    if a.acknowledged_at is None:
        a.acknowledged_at = datetime.now(UTC)
        a.acknowledged_by_id = principal.user_id
        _commit(db, f"Alert {alert_id}")
    return s.alert(a)


# --- the document itself ------------------------------------------------------------------------


@endpoint("GET", "/openapi.json", summary="The OpenAPI document", tag="meta", public=True,
          response={"type": "object"})
def openapi_document(principal, db):
    """This API's OpenAPI 3.1 document, generated from the route table."""
    from auditor.web.api.openapi import build_document

    return jsonify(build_document())



