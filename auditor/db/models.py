"""Auditor's tables: SQLAlchemy 2.x typed models (no behaviour beyond columns and keys).

Label values are stored as ``SmallInteger`` codes into the dataset's ordered label set
(``Dataset.labels``); a dataset's label set may grow at the end but never reorders, so
codes stay valid. Timestamps are timezone-aware and default on the server.

Per-item label counts (``Item.label_counts``, one int per label) are kept current in
the same transaction as the annotation rows, so an audit reads one row per item.

The high-volume tables, ``annotation``, ``annotation_history`` and ``item``, carry no
foreign keys: PostgreSQL checks a foreign key with one trigger call per inserted row,
which made a 2-million-row import six times slower. Their ids are resolved set-wise
by the ingestion use cases (the only writers) inside the importing transaction, and
``auditor.ingest.delete_dataset`` removes their rows with the dataset.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    func,
    true,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "NAMING_CONVENTION",
    "AccessAction",
    "AccessEvent",
    "Agreement",
    "Alert",
    "AlertChannel",
    "AlertEvent",
    "AlertRule",
    "AlertRuleChannel",
    "AlertSeverity",
    "Annotation",
    "AnnotationHistory",
    "Annotator",
    "ApiToken",
    "AuditOutbox",
    "AuditRun",
    "AuditStatus",
    "Base",
    "BestScore",
    "Certification",
    "ChannelKind",
    "Dataset",
    "DatasetGrant",
    "DeliveryStatus",
    "ImportAttempt",
    "ImportBatch",
    "ImportKind",
    "Item",
    "LabelStudioAnnotation",
    "LabelStudioConnector",
    "LabelStudioEvent",
    "LabelStudioQuarantine",
    "LabelStudioUser",
    "MlflowConnector",
    "Model",
    "PowerCurveRecord",
    "Prediction",
    "QualityChange",
    "QualityState",
    "QualityWindow",
    "Release",
    "ReleasePlan",
    "Role",
    "Tier",
    "User",
    "VendorPrice",
    "VendorReport",
    "Webhook",
    "WebhookDelivery",
    "Workspace",
    "WorkspaceSetting",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# External ids compare byte-wise on PostgreSQL: a linguistic collation made every
# index insertion of an imported id call strcoll (2 s per 100,000 items).
ExternalId = String(512).with_variant(String(512, collation="C"), "postgresql")
# JSON documents: JSONB on PostgreSQL (indexable, compact), JSON text elsewhere.
JSONDoc = JSON().with_variant(postgresql.JSONB(), "postgresql")
# Fixed-length numeric vectors: native arrays on PostgreSQL, JSON lists on SQLite.
IntVector = JSON().with_variant(postgresql.ARRAY(Integer()), "postgresql")
FloatVector = JSON().with_variant(postgresql.ARRAY(Double()), "postgresql")


def _created() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


def _enum(cls: type[enum.Enum], name: str) -> Enum:
    # VARCHAR + named CHECK constraint: portable, and adding a member needs no ALTER TYPE.
    return Enum(cls, name=name, native_enum=False, create_constraint=True, length=24,
                values_callable=lambda e: [m.value for m in e], validate_strings=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Role(enum.StrEnum):
    ADMIN = "admin"
    ANALYST = "analyst"
    VENDOR = "vendor"
    VIEWER = "viewer"


class Tier(enum.StrEnum):
    CROWD = "crowd"
    EXPERT = "expert"


class ImportKind(enum.StrEnum):
    ANNOTATIONS = "annotations"
    PREDICTIONS = "predictions"
    GOLD = "gold"


class AccessAction(enum.StrEnum):
    TOKEN_REVOKED = "token_revoked"
    USER_DEACTIVATED = "user_deactivated"
    USER_REACTIVATED = "user_reactivated"


class AuditStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class AlertSeverity(enum.StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class ChannelKind(enum.StrEnum):
    EMAIL = "email"
    SLACK = "slack"


# --- tenants and access ---------------------------------------------------------


class Workspace(Base):
    """A tenant; everything else belongs to exactly one workspace."""

    __tablename__ = "workspace"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    slug: Mapped[str] = mapped_column(String(100), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    #: The currency the workspace's costs are shown in (ISO 4217 code; USD unless set).
    currency: Mapped[str] = mapped_column(String(8), default="USD", server_default="USD")
    created_at: Mapped[datetime] = _created()

    datasets: Mapped[list[Dataset]] = relationship(back_populates="workspace", passive_deletes=True)


class WorkspaceSetting(Base):
    """A workspace's own value of a setting whose default is the deployment's environment
    (:mod:`auditor.alerting.settings`), and who set it when."""

    __tablename__ = "workspace_setting"

    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(JSONDoc)
    updated_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    updated_by: Mapped[str] = mapped_column(String(320))
    updated_at: Mapped[datetime] = _created()


class User(Base):
    """A person or service account; ``vendor`` ties a vendor-role user to its vendor."""

    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("workspace_id", "email"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"), index=True)
    email: Mapped[str] = mapped_column(String(320))
    display_name: Mapped[str | None] = mapped_column(String(200))
    role: Mapped[Role] = mapped_column(_enum(Role, "role"), default=Role.VIEWER)
    vendor: Mapped[str | None] = mapped_column(String(200))
    password_hash: Mapped[str | None] = mapped_column(String(255))
    is_active: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    #: When the user last opened a page (written at most every few minutes; "since my last visit").
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Every session cookie carries the generation it was issued at; logout, deactivation and
    # a new password bump it, which ends every session issued before.
    session_generation: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = _created()

    workspace: Mapped[Workspace] = relationship()
    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user", passive_deletes=True)


class ApiToken(Base):
    """An API token, stored only as a hash; ``role`` may narrow the user's role."""

    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    role: Mapped[Role | None] = mapped_column(_enum(Role, "token_role"))
    created_at: Mapped[datetime] = _created()
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    user: Mapped[User] = relationship(back_populates="tokens")


class AccessEvent(Base):
    """Who revoked a token or (de)activated a user, and when (kept after the token or user goes).

    ``actor`` names the caller as it was at the time: a user's email, or ``cli:<login>``
    for the command line; ``actor_id`` is the acting user when there is one.
    """

    __tablename__ = "access_event"
    __table_args__ = (Index(None, "workspace_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"))
    action: Mapped[AccessAction] = mapped_column(_enum(AccessAction, "access_action"))
    actor: Mapped[str] = mapped_column(String(320))
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_token.id", ondelete="SET NULL"))
    subject: Mapped[str] = mapped_column(String(400))
    created_at: Mapped[datetime] = _created()


# --- datasets, items, annotators, annotations ----------------------------------


class Dataset(Base):
    """An ordered label set and its items; ``data_version`` grows with every accepted write."""

    __tablename__ = "dataset"
    __table_args__ = (
        UniqueConstraint("workspace_id", "name"),
        CheckConstraint("data_version >= 0", name="data_version_nonnegative"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    labels: Mapped[list[str]] = mapped_column(JSONDoc)
    data_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The quality monitors' windows: calendar weeks of the annotations' time stamps, or
    # one window per import batch (for data without time stamps).
    quality_window: Mapped[str] = mapped_column(String(8), default="week", server_default="week")
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(),
                                                 onupdate=func.now())

    workspace: Mapped[Workspace] = relationship(back_populates="datasets")


class DatasetGrant(Base):
    """A vendor-role user may submit annotations to the datasets it is granted."""

    __tablename__ = "dataset_grant"

    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True,
                                         index=True)
    created_at: Mapped[datetime] = _created()


class Item(Base):
    """One thing to label. ``label_counts[c]`` = current annotations with label code ``c``."""

    __tablename__ = "item"
    __table_args__ = (UniqueConstraint("dataset_id", "external_id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    # No foreign key: an import creates items by the million (see the module docstring).
    dataset_id: Mapped[int] = mapped_column(Integer)
    external_id: Mapped[str] = mapped_column(ExternalId)
    gold_label: Mapped[int | None] = mapped_column(SmallInteger)
    gold_source: Mapped[str | None] = mapped_column(String(200))
    label_counts: Mapped[list[int] | None] = mapped_column(IntVector)
    created_at: Mapped[datetime] = _created()


class Annotator(Base):
    """A rater, identified by an external id within a workspace."""

    __tablename__ = "annotator"
    __table_args__ = (UniqueConstraint("workspace_id", "external_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(ExternalId)
    vendor: Mapped[str | None] = mapped_column(String(200), index=True)
    tier: Mapped[Tier] = mapped_column(_enum(Tier, "tier"), default=Tier.CROWD,
                                       server_default=Tier.CROWD.value)
    created_at: Mapped[datetime] = _created()


class Annotation(Base):
    """The current label of one (item, annotator); earlier labels are in the history table.

    On PostgreSQL the table is partitioned by dataset (``LIST (dataset_id)``), one
    partition per dataset (:func:`auditor.db.partitions.annotation_partition`), so a
    first bulk load fills a fresh table and builds its key index once, sorted, instead
    of one index insertion per row. SQLite has the plain table.
    """

    __tablename__ = "annotation"
    # PostgreSQL's key order (migration c3f1d8a2b6e4); SQLite's table keeps dataset_id first.
    __table_args__: ClassVar[tuple] = (PrimaryKeyConstraint("item_id", "annotator_id", "dataset_id"),
                                       # What arrived after a data version (the quality monitors' reads):
                                       # versions grow with insertion order, so a BRIN index stays tiny.
                                       Index("ix_annotation_data_version", "data_version", postgresql_using="brin"),
                                       {"postgresql_partition_by": "LIST (dataset_id)"})

    dataset_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    annotator_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    label: Mapped[int] = mapped_column(SmallInteger)
    annotated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    batch_id: Mapped[int] = mapped_column(BigInteger)
    data_version: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = _created()


# An annotator's labels on a dataset by time, newest first (its latest disagreements).
Index("ix_annotation_annotator_time", Annotation.dataset_id, Annotation.annotator_id,
      func.coalesce(Annotation.annotated_at, Annotation.created_at))


class AnnotationHistory(Base):
    """A superseded label: the row as it was, and the batch and version that replaced it."""

    __tablename__ = "annotation_history"
    __table_args__ = (Index(None, "dataset_id", "item_id", "annotator_id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    dataset_id: Mapped[int] = mapped_column(Integer)
    item_id: Mapped[int] = mapped_column(BigInteger)
    annotator_id: Mapped[int] = mapped_column(Integer)
    label: Mapped[int] = mapped_column(SmallInteger)
    annotated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    batch_id: Mapped[int] = mapped_column(BigInteger)
    data_version: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    superseded_by_batch_id: Mapped[int] = mapped_column(BigInteger)
    superseded_version: Mapped[int] = mapped_column(BigInteger)
    superseded_at: Mapped[datetime] = _created()
    #: ``relabel`` (a new label replaced it) or ``delete`` (the annotation was withdrawn at the
    #: source, e.g. deleted in Label Studio: a tombstone, the row as it was last).
    change: Mapped[str] = mapped_column(String(8), default="relabel", server_default="relabel")


class ImportBatch(Base):
    """One accepted upload. Rejected uploads leave no row (all-or-nothing)."""

    __tablename__ = "import_batch"
    __table_args__ = (
        UniqueConstraint("dataset_id", "idempotency_key"),
        UniqueConstraint("dataset_id", "checksum"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"), index=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"))
    kind: Mapped[ImportKind] = mapped_column(_enum(ImportKind, "import_kind"))
    format: Mapped[str] = mapped_column(String(32))
    source_name: Mapped[str | None] = mapped_column(String(1024))
    release_id: Mapped[int | None] = mapped_column(ForeignKey("release.id", ondelete="CASCADE"), index=True)
    submitted_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    submitted_by: Mapped[str | None] = mapped_column(String(200))
    row_count: Mapped[int] = mapped_column(BigInteger)
    checksum: Mapped[str] = mapped_column(String(64))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    data_version: Mapped[int] = mapped_column(BigInteger)
    stats: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = _created()


class ImportAttempt(Base):
    """A rejected upload: who sent it, when, in what format, and its first errors (at most
    :data:`auditor.ingest.errors.MAX_REPORTED_ERRORS`). Its rows are never kept; a dataset
    keeps its latest attempts only (:func:`auditor.ingest.attempts.record_rejected`)."""

    __tablename__ = "import_attempt"
    __table_args__ = (Index(None, "dataset_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    format: Mapped[str | None] = mapped_column(String(32))
    source_name: Mapped[str | None] = mapped_column(String(1024))
    submitted_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    submitted_by: Mapped[str | None] = mapped_column(String(320))
    #: The answer's HTTP status (400: invalid rows or file, 413: too large).
    status_code: Mapped[int] = mapped_column(Integer)
    #: Rows found bad in all (the errors list the first ones); 0 when the file as a whole was refused.
    bad_rows: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    message: Mapped[str] = mapped_column(Text)
    #: ``[{"row", "field", "message"}, ...]``, the first errors in file order.
    errors: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = _created()


class AuditOutbox(Base):
    """"This dataset needs an audit": written in the same transaction as each accepted write."""

    __tablename__ = "audit_outbox"
    __table_args__ = (Index(None, "processed_at", "id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"), index=True)
    data_version: Mapped[int] = mapped_column(BigInteger)
    batch_id: Mapped[int | None] = mapped_column(ForeignKey("import_batch.id", ondelete="CASCADE"))
    reason: Mapped[str] = mapped_column(String(50))
    created_at: Mapped[datetime] = _created()
    processed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


# --- models and predictions ------------------------------------------------------


class Model(Base):
    """A model family whose releases upload predictions."""

    __tablename__ = "model"
    __table_args__ = (UniqueConstraint("workspace_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created()

    releases: Mapped[list[Release]] = relationship(back_populates="model", passive_deletes=True)


class Release(Base):
    """One version of a model; ``tags`` is free-form (JSON object or list)."""

    __tablename__ = "release"
    __table_args__ = (UniqueConstraint("model_id", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("model.id", ondelete="CASCADE"))
    version: Mapped[str] = mapped_column(String(100))
    released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    alias: Mapped[str | None] = mapped_column(String(100))
    tags: Mapped[Any | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = _created()

    model: Mapped[Model] = relationship(back_populates="releases")


class Prediction(Base):
    """A release's prediction on one item: a hard label code and/or class probabilities."""

    __tablename__ = "prediction"
    __table_args__ = (
        CheckConstraint("label IS NOT NULL OR probabilities IS NOT NULL", name="label_or_probabilities"),
        Index(None, "dataset_id", "release_id"),
    )

    release_id: Mapped[int] = mapped_column(ForeignKey("release.id", ondelete="CASCADE"), primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("item.id", ondelete="CASCADE"), primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"))
    label: Mapped[int | None] = mapped_column(SmallInteger)
    probabilities: Mapped[list[float] | None] = mapped_column(FloatVector)
    batch_id: Mapped[int] = mapped_column(ForeignKey("import_batch.id", ondelete="CASCADE"), index=True)
    data_version: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = _created()


# --- audits and their results ------------------------------------------------------


class AuditRun(Base):
    """One audit of one dataset at one ``data_version``; every result row points to one."""

    __tablename__ = "audit_run"
    __table_args__ = (Index(None, "dataset_id", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"))
    data_version: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[AuditStatus] = mapped_column(_enum(AuditStatus, "audit_status"), default=AuditStatus.QUEUED,
                                                server_default=AuditStatus.QUEUED.value)
    task_id: Mapped[str | None] = mapped_column(String(200))
    parameters: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    error: Mapped[str | None] = mapped_column(Text)
    #: For a failed run: may the same data succeed if tried again? (False: not retried for this version.)
    retryable: Mapped[bool | None] = mapped_column(Boolean)
    created_at: Mapped[datetime] = _created()
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: Renewed by the running audit's worker; a run whose heartbeat is older than the lease is dead.
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Certification(Base):
    """Xu et al. bounds for one release in one audit: U (both forms), L, S (HMS/OMS), and
    the anytime confidence (valid at every audit).

    ``certified`` / ``verdict`` are the badge's, by ``method`` (``anytime``, or the
    paper's ``oms`` / ``hms``); ``certified_paper`` and ``certified_anytime`` keep both
    verdicts. ``details["anytime"]`` is the state the next audit continues from.
    """

    __tablename__ = "certification"
    __table_args__ = (UniqueConstraint("audit_run_id", "release_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    audit_run_id: Mapped[int] = mapped_column(ForeignKey("audit_run.id", ondelete="CASCADE"))
    release_id: Mapped[int] = mapped_column(ForeignKey("release.id", ondelete="CASCADE"), index=True)
    data_version: Mapped[int] = mapped_column(BigInteger)
    n_items_upper: Mapped[int] = mapped_column(Integer)
    n_items_lower: Mapped[int] = mapped_column(Integer)
    u_t: Mapped[float] = mapped_column(Double)
    u_e: Mapped[float | None] = mapped_column(Double)
    l: Mapped[float] = mapped_column(Double)  # noqa: E741 - the paper's name
    tau: Mapped[float] = mapped_column(Double, default=0.0, server_default="0")
    s_hms_t: Mapped[float | None] = mapped_column(Double)
    s_oms_t: Mapped[float | None] = mapped_column(Double)
    s_hms_e: Mapped[float | None] = mapped_column(Double)
    s_oms_e: Mapped[float | None] = mapped_column(Double)
    s_anytime_t: Mapped[float | None] = mapped_column(Double)
    s_anytime_e: Mapped[float | None] = mapped_column(Double)
    certified_paper: Mapped[bool | None] = mapped_column(Boolean)
    certified_anytime: Mapped[bool | None] = mapped_column(Boolean)
    method: Mapped[str] = mapped_column(String(16), default="oms", server_default="oms")
    certified: Mapped[bool] = mapped_column(Boolean)
    certified_with: Mapped[str] = mapped_column(String(8))
    verdict: Mapped[str] = mapped_column(String(32))
    #: When certified: the first audit run of the release's current unbroken run of certified
    #: verdicts on this dataset (this run, when its previous verdict there was not certified
    #: or it had none); None when not certified. Written with the audit, so that a page's
    #: "certified since" is one lookup, however long the history.
    certified_since_run_id: Mapped[int | None] = mapped_column(Integer)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = _created()


class PowerCurveRecord(Base):
    """A survey power curve (JSON list of points) and, for a release, its equivalence."""

    __tablename__ = "power_curve"
    __table_args__ = (Index(None, "audit_run_id", "release_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    audit_run_id: Mapped[int] = mapped_column(ForeignKey("audit_run.id", ondelete="CASCADE"))
    release_id: Mapped[int | None] = mapped_column(ForeignKey("release.id", ondelete="CASCADE"))
    vendor: Mapped[str | None] = mapped_column(String(200))
    reference: Mapped[str] = mapped_column(String(50), default="all")
    combiner: Mapped[str] = mapped_column(String(50))
    scorer: Mapped[str] = mapped_column(String(50))
    max_k: Mapped[int] = mapped_column(Integer)
    n_bootstrap: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int | None] = mapped_column(BigInteger)
    points: Mapped[list[dict[str, Any]]] = mapped_column(JSONDoc)
    classifier_score: Mapped[float | None] = mapped_column(Double)
    classifier_low: Mapped[float | None] = mapped_column(Double)
    classifier_high: Mapped[float | None] = mapped_column(Double)
    equivalence: Mapped[float | None] = mapped_column(Double)
    equivalence_low: Mapped[float | None] = mapped_column(Double)
    equivalence_high: Mapped[float | None] = mapped_column(Double)
    equivalence_note: Mapped[str | None] = mapped_column(String(16))
    #: What an interval end is when it is not a number (e.g. "> 9": beyond the curve).
    equivalence_low_note: Mapped[str | None] = mapped_column(String(16))
    equivalence_high_note: Mapped[str | None] = mapped_column(String(16))
    #: How the curve's points were computed: "exact" (expectations over every sub-count
    #: vector), "monte_carlo" (those sums drawn: each point carries its ``mc_error``) or
    #: "sampling" (rater subsets).
    method: Mapped[str | None] = mapped_column(String(16))
    #: The Monte Carlo standard error of ``equivalence`` (in raters) when the curve was
    #: drawn; NULL on a drawn curve means the draws leave the crossing undetermined.
    equivalence_mc_error: Mapped[float | None] = mapped_column(Double)
    created_at: Mapped[datetime] = _created()


class VendorReport(Base):
    """One vendor's pool in one audit: bounds, agreement, expert equivalence, per-annotator rows."""

    __tablename__ = "vendor_report"
    __table_args__ = (UniqueConstraint("audit_run_id", "vendor"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    audit_run_id: Mapped[int] = mapped_column(ForeignKey("audit_run.id", ondelete="CASCADE"))
    vendor: Mapped[str] = mapped_column(String(200))
    n_annotators: Mapped[int] = mapped_column(Integer)
    n_items: Mapped[int] = mapped_column(Integer)
    n_annotations: Mapped[int] = mapped_column(BigInteger)
    u_t: Mapped[float | None] = mapped_column(Double)
    u_e: Mapped[float | None] = mapped_column(Double)
    agreement: Mapped[float | None] = mapped_column(Double)
    expert_equivalence: Mapped[float | None] = mapped_column(Double)
    #: "exact" or "monte_carlo" (the expert equivalence's curves drawn, beyond exact reach).
    expert_equivalence_method: Mapped[str | None] = mapped_column(String(16))
    #: Its Monte Carlo standard error (raters) when drawn; NULL then means undetermined.
    expert_equivalence_mc_error: Mapped[float | None] = mapped_column(Double)
    annotators: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONDoc)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = _created()


class BestScore(Base):
    """The BEST ceiling of one metric (Lourie et al.) in one audit."""

    __tablename__ = "best_score"
    __table_args__ = (UniqueConstraint("audit_run_id", "metric"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    audit_run_id: Mapped[int] = mapped_column(ForeignKey("audit_run.id", ondelete="CASCADE"))
    metric: Mapped[str] = mapped_column(String(50))
    value: Mapped[float] = mapped_column(Double)
    std_error: Mapped[float | None] = mapped_column(Double)
    n_items: Mapped[int] = mapped_column(Integer)
    alpha: Mapped[list[float] | None] = mapped_column(FloatVector)
    created_at: Mapped[datetime] = _created()


class Agreement(Base):
    """An agreement coefficient over the dataset (``vendor`` NULL) or one vendor's pool."""

    __tablename__ = "agreement"
    __table_args__ = (Index(None, "audit_run_id", "vendor"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    audit_run_id: Mapped[int] = mapped_column(ForeignKey("audit_run.id", ondelete="CASCADE"))
    vendor: Mapped[str | None] = mapped_column(String(200))
    coefficient: Mapped[str] = mapped_column(String(50))
    value: Mapped[float | None] = mapped_column(Double)
    ci_low: Mapped[float | None] = mapped_column(Double)
    ci_high: Mapped[float | None] = mapped_column(Double)
    n_items: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = _created()


class Alert(Base):
    """Something a person should look at (a vendor's bound dropped, a release certified...)."""

    __tablename__ = "alert"
    __table_args__ = (Index(None, "workspace_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"))
    dataset_id: Mapped[int | None] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"), index=True)
    audit_run_id: Mapped[int | None] = mapped_column(ForeignKey("audit_run.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(50))
    severity: Mapped[AlertSeverity] = mapped_column(_enum(AlertSeverity, "alert_severity"),
                                                    default=AlertSeverity.WARNING)
    subject: Mapped[str | None] = mapped_column(String(200))
    message: Mapped[str] = mapped_column(Text)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = _created()
    acknowledged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    acknowledged_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    #: Who should act on it (a user of the workspace), since when.
    assigned_to_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), index=True)
    assigned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: Off the open list until then (open again after it, unless acknowledged meanwhile).
    snoozed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: Moves with every change of its lifecycle (the dashboards' cache reads it).
    updated_at: Mapped[datetime] = _created()


class AlertEvent(Base):
    """One step of an alert's lifecycle, in order: acknowledged, reopened, assigned, unassigned,
    snoozed, unsnoozed, or a comment (``body``). ``actor`` names the user as they were then."""

    __tablename__ = "alert_event"
    __table_args__ = (Index(None, "alert_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alert.id", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(16))
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    actor: Mapped[str] = mapped_column(String(320))
    assignee_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    body: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created()


# --- alert routing --------------------------------------------------------------------


class AlertChannel(Base):
    """Where a workspace's alerts may be sent: an email list (through the deployment's SMTP
    relay) or a Slack-compatible incoming webhook (``url``, a secret: shown only in part)."""

    __tablename__ = "alert_channel"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"), index=True)
    kind: Mapped[ChannelKind] = mapped_column(_enum(ChannelKind, "channel_kind"))
    name: Mapped[str] = mapped_column(String(200))
    #: Email addresses (``email`` channels).
    recipients: Mapped[list[str] | None] = mapped_column(JSONDoc)
    #: The incoming webhook's URL (``slack`` channels).
    url: Mapped[str | None] = mapped_column(String(2000))
    active: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = _created()


class AlertRuleChannel(Base):
    """A rule sends to these channels."""

    __tablename__ = "alert_rule_channel"

    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rule.id", ondelete="CASCADE"), primary_key=True)
    channel_id: Mapped[int] = mapped_column(ForeignKey("alert_channel.id", ondelete="CASCADE"), primary_key=True,
                                            index=True)


class AlertRule(Base):
    """Which alerts go to which channels: alerts of these kinds, severities and datasets (an
    empty list: any). An alert matching several rules of one channel is sent there once."""

    __tablename__ = "alert_rule"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    kinds: Mapped[list[str]] = mapped_column(JSONDoc)
    severities: Mapped[list[str]] = mapped_column(JSONDoc)
    dataset_ids: Mapped[list[int]] = mapped_column(JSONDoc)
    active: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(),
                                                 onupdate=func.now(), nullable=False)

    channels: Mapped[list[AlertChannel]] = relationship(secondary="alert_rule_channel", order_by="AlertChannel.id")


# --- quality over time ------------------------------------------------------------


class QualityState(Base):
    """The dataset's quality monitors (one per grouping) as of ``data_version``: the
    running (group, window) sums and the detectors' state, resumed by the next audit."""

    __tablename__ = "quality_state"

    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"), primary_key=True)
    data_version: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    updated_at: Mapped[datetime] = _created()


class QualityWindow(Base):
    """A vendor's or annotator's quality in one time window: agreement with the other
    annotators' consensus, or accuracy against gold, with its interval."""

    __tablename__ = "quality_window"
    __table_args__ = (UniqueConstraint("dataset_id", "grouping", "group_name", "metric", "window_key",
                                       name="uq_quality_window_key"),
                      Index("ix_quality_window_series", "dataset_id", "grouping", "window_key"))

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"))
    grouping: Mapped[str] = mapped_column(String(16))  # "vendor" or "annotator"
    group_name: Mapped[str] = mapped_column(String(512))
    metric: Mapped[str] = mapped_column(String(32))     # "agreement" or "gold_accuracy"
    # The window's key, in time order: weeks since Monday 5 January 1970, or the import's
    # data version (a dataset with batch windows, whose imports may share a time stamp).
    window_key: Mapped[int] = mapped_column(BigInteger)
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    window_end: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    n_items: Mapped[float] = mapped_column(Double)
    n_labels: Mapped[int] = mapped_column(Integer)
    value: Mapped[float | None] = mapped_column(Double)
    low: Mapped[float | None] = mapped_column(Double)
    high: Mapped[float | None] = mapped_column(Double)
    audit_run_id: Mapped[int | None] = mapped_column(ForeignKey("audit_run.id", ondelete="SET NULL"))
    updated_at: Mapped[datetime] = _created()


class QualityChange(Base):
    """A change in a vendor's or annotator's quality, found by the sequential detector."""

    __tablename__ = "quality_change"
    __table_args__ = (Index("ix_quality_change_series", "dataset_id", "grouping", "detected_at"),
                      # the newest change of one group (a vendor's, an annotator's)
                      Index("ix_quality_change_group", "dataset_id", "grouping", "group_name", "detected_at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"))
    audit_run_id: Mapped[int | None] = mapped_column(ForeignKey("audit_run.id", ondelete="SET NULL"))
    grouping: Mapped[str] = mapped_column(String(16))
    group_name: Mapped[str] = mapped_column(String(512))
    metric: Mapped[str] = mapped_column(String(32))
    direction: Mapped[str] = mapped_column(String(8))  # "drop" or "rise"
    detected_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))  # end of the window that flagged
    start: Mapped[datetime] = mapped_column(DateTime(timezone=True))        # estimated start of the change
    before: Mapped[float] = mapped_column(Double)
    before_low: Mapped[float] = mapped_column(Double)
    before_high: Mapped[float] = mapped_column(Double)
    after: Mapped[float] = mapped_column(Double)
    after_low: Mapped[float] = mapped_column(Double)
    after_high: Mapped[float] = mapped_column(Double)
    evidence: Mapped[float | None] = mapped_column(Double)
    created_at: Mapped[datetime] = _created()



# --- connectors -------------------------------------------------------------------


class MlflowConnector(Base):
    """A registered model of an MLflow tracking server connected to a dataset.

    Its versions' prediction artifacts are imported as releases of the Auditor model
    ``model_name`` (release version = MLflow version), and after every audit of the
    dataset the verdicts are written back as model version tags starting with
    ``tag_prefix``. Credentials never live here: the MLflow client reads them from the
    environment of the process that calls the server.
    """

    __tablename__ = "mlflow_connector"
    __table_args__ = (UniqueConstraint("dataset_id", "tracking_uri", "registered_model"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"))
    tracking_uri: Mapped[str] = mapped_column(String(1000))
    registered_model: Mapped[str] = mapped_column(String(500))
    model_name: Mapped[str] = mapped_column(String(200))
    artifact_path: Mapped[str] = mapped_column(String(1000))
    #: Where ``artifact_path`` is resolved: ``run`` (the version's run) or ``model`` (its model files).
    artifact_root: Mapped[str] = mapped_column(String(8), default="run", server_default="run")
    tag_prefix: Mapped[str] = mapped_column(String(64), default="auditor.", server_default="auditor.")
    #: Column names of the artifact as the CLI's ``--field`` (``{"item_id": "uid"}``); None: the standard names.
    field_map: Mapped[dict[str, str] | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(),
                                                 onupdate=func.now())
    #: The last audit whose verdicts reached the registry, when, and the last write-back error.
    last_written_run_id: Mapped[int | None] = mapped_column(Integer)
    last_written_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)

# --- outgoing webhooks ------------------------------------------------------------


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Webhook(Base):
    """An outgoing webhook of a workspace: its events are POSTed to ``url``, signed with ``secret``.

    The secret is kept as given (an HMAC needs the key itself, so it cannot be hashed); it
    is shown once, when the webhook is created, and never returned again (only its prefix).
    """

    __tablename__ = "webhook"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(2000))
    description: Mapped[str] = mapped_column(String(200), default="", server_default="")
    secret: Mapped[str] = mapped_column(String(200))
    secret_prefix: Mapped[str] = mapped_column(String(16))
    #: Event names this webhook receives; empty: every event.
    events: Mapped[list[str]] = mapped_column(JSONDoc)
    active: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = _created()


class WebhookDelivery(Base):
    """One event sent (or to send) to one webhook or one alert channel (exactly one of the
    two): the exact body, and every attempt's outcome."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (Index(None, "webhook_id", "created_at"), Index(None, "status", "next_attempt_at"),
                      Index(None, "channel_id", "created_at"),
                      CheckConstraint("(webhook_id IS NULL) <> (channel_id IS NULL)", name="one_target"))

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    webhook_id: Mapped[int | None] = mapped_column(ForeignKey("webhook.id", ondelete="CASCADE"))
    channel_id: Mapped[int | None] = mapped_column(ForeignKey("alert_channel.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(50))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[DeliveryStatus] = mapped_column(_enum(DeliveryStatus, "delivery_status"),
                                                   default=DeliveryStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    response_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    #: Every attempt: ``{"at", "response_code", "error", "duration_ms"}``, oldest first.
    history: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = _created()
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    next_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: A worker sending this delivery holds it until then (no two send it at once).
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


# --- Label Studio connector ----------------------------------------------------------


class LabelStudioConnector(Base):
    """A Label Studio project feeding a dataset, by webhooks and by a pull sync
    (:mod:`auditor.connectors.labelstudio`).

    ``webhook_secret_hash`` is the SHA-256 of the webhook's secret (256 random bits, shown
    once). The API token of the pull sync is either kept encrypted (``token_encrypted``:
    Fernet, with a key derived from ``AUDITOR_SECRET_KEY``) or not kept at all
    (``token_env`` names the environment variable the syncing process reads it from).
    ``label_map`` maps Label Studio choice values to the dataset's labels (identity when
    empty); ``vendor_map`` gives annotators' vendors (``users``, ``domains``, ``default``).
    """

    __tablename__ = "labelstudio_connector"
    __table_args__ = (UniqueConstraint("dataset_id", "url", "project_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"), index=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(String(1000))
    project_id: Mapped[int] = mapped_column(Integer)
    #: Annotator ids are ``<namespace>:<Label Studio user id>`` (the bare user id when empty).
    annotator_namespace: Mapped[str] = mapped_column(String(200), default="", server_default="")
    item_field: Mapped[str] = mapped_column(String(200), default="item_id", server_default="item_id")
    from_name: Mapped[str | None] = mapped_column(String(200))
    label_map: Mapped[dict[str, str] | None] = mapped_column(JSONDoc)
    vendor_map: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    webhook_secret_hash: Mapped[str] = mapped_column(String(64))
    token_encrypted: Mapped[str | None] = mapped_column(Text)
    token_env: Mapped[str | None] = mapped_column(String(200))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(),
                                                 onupdate=func.now())
    last_event_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_sync_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_sync_error: Mapped[str | None] = mapped_column(Text)
    #: Webhook deliveries refused (401, 409, 413, 422, 500...): how many, the last one's time,
    #: HTTP status and message. The feed is not "ok" while the last refusal is newer than
    #: the last event accepted.
    webhook_refused: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_refused_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_refusal: Mapped[str | None] = mapped_column(Text)
    #: Annotations the last complete pull kept aside (all of them, also those beyond the
    #: rows stored in ``labelstudio_quarantine``).
    quarantined: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class LabelStudioAnnotation(Base):
    """The last known state of one Label Studio annotation: what its events and the pull
    sync said, kept so that retries and the two paths never count it twice, and so that a
    deletion (whose event carries only the id) finds its item and annotator.

    ``state``: ``vote`` (a label), ``gold`` (a ground-truth annotation: the item's gold
    label), ``cancelled`` or ``empty`` (skipped), ``deleted`` (a tombstone; final).
    ``event_id`` is the connector event that last changed the row.
    """

    __tablename__ = "labelstudio_annotation"
    __table_args__ = (PrimaryKeyConstraint("connector_id", "ls_id"),
                      Index(None, "dataset_id", "item_ext", "annotator_ext"),
                      Index(None, "connector_id", "task_id"))

    connector_id: Mapped[int] = mapped_column(ForeignKey("labelstudio_connector.id", ondelete="CASCADE"))
    ls_id: Mapped[int] = mapped_column(BigInteger)
    dataset_id: Mapped[int] = mapped_column(Integer)
    task_id: Mapped[int | None] = mapped_column(BigInteger)
    item_ext: Mapped[str | None] = mapped_column(ExternalId)
    ls_user_id: Mapped[int | None] = mapped_column(BigInteger)
    annotator_ext: Mapped[str | None] = mapped_column(ExternalId)
    state: Mapped[str] = mapped_column(String(12))
    label: Mapped[int | None] = mapped_column(SmallInteger)
    ls_updated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    event_id: Mapped[int] = mapped_column(BigInteger)
    batch_id: Mapped[int | None] = mapped_column(BigInteger)


class LabelStudioQuarantine(Base):
    """A Label Studio annotation the pull sync could not read (a choice outside the dataset's
    labels, a result of the wrong shape...), kept aside while everything else synced: the
    task, the annotation, the field, the reason and how to fix it. The next sync that reads
    it (once fixed in Label Studio), or a webhook that brings it fixed, removes the entry;
    so does its deletion in Label Studio."""

    __tablename__ = "labelstudio_quarantine"
    __table_args__ = (Index(None, "connector_id", "ls_id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    connector_id: Mapped[int] = mapped_column(ForeignKey("labelstudio_connector.id", ondelete="CASCADE"))
    #: The annotation's id (None when the annotation has no readable id) and its task's.
    ls_id: Mapped[int | None] = mapped_column(BigInteger)
    task_id: Mapped[int | None] = mapped_column(BigInteger)
    field: Mapped[str] = mapped_column(String(300))
    reason: Mapped[str] = mapped_column(Text)
    hint: Mapped[str] = mapped_column(Text)
    first_seen_at: Mapped[datetime] = _created()
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class LabelStudioUser(Base):
    """A Label Studio user as the connector last saw it: its email decides its vendor."""

    __tablename__ = "labelstudio_user"
    __table_args__ = (PrimaryKeyConstraint("connector_id", "ls_user_id"),)

    connector_id: Mapped[int] = mapped_column(ForeignKey("labelstudio_connector.id", ondelete="CASCADE"))
    ls_user_id: Mapped[int] = mapped_column(BigInteger)
    email: Mapped[str | None] = mapped_column(String(320))
    updated_at: Mapped[datetime] = _created()


class LabelStudioEvent(Base):
    """One webhook event or pull-sync step a connector applied: what it held and what it changed."""

    __tablename__ = "labelstudio_event"
    __table_args__ = (Index(None, "connector_id", "created_at"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    connector_id: Mapped[int] = mapped_column(ForeignKey("labelstudio_connector.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(8))     # "webhook" or "pull"
    action: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(16))    # "changed", "unchanged"
    counts: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    batch_id: Mapped[int | None] = mapped_column(BigInteger)
    data_version: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = _created()


class VendorPrice(Base):
    """What a labeling vendor charges per label, in a workspace (vendors are names on annotators)."""

    __tablename__ = "vendor_price"
    __table_args__ = (UniqueConstraint("workspace_id", "vendor"),
                      CheckConstraint("price_per_label >= 0", name="price_not_negative"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(ForeignKey("workspace.id", ondelete="CASCADE"))
    vendor: Mapped[str] = mapped_column(String(200))
    price_per_label: Mapped[float] = mapped_column(Double)
    currency: Mapped[str] = mapped_column(String(8), default="USD", server_default="USD")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now(),
                                                 onupdate=func.now(), nullable=False)


class ReleasePlan(Base):
    """A release's audit plan on a dataset (:func:`auditor.stats.plan_certification`), computed
    by a worker from one audit run; one row per release × dataset, replaced by the next plan.

    ``status``: ``pending`` (asked for, a worker will compute it), ``succeeded`` or
    ``failed`` (``error`` says why). ``relabel`` holds the top of the relabel list as
    ``[[item_id, expected_gain], ...]``.
    """

    __tablename__ = "release_plan"
    __table_args__ = (UniqueConstraint("release_id", "dataset_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    release_id: Mapped[int] = mapped_column(ForeignKey("release.id", ondelete="CASCADE"))
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id", ondelete="CASCADE"), index=True)
    audit_run_id: Mapped[int | None] = mapped_column(ForeignKey("audit_run.id", ondelete="SET NULL"), index=True)
    data_version: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    relabel: Mapped[list[Any] | None] = mapped_column(JSONDoc)
    error: Mapped[str | None] = mapped_column(Text)
    requested_at: Mapped[datetime] = _created()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

