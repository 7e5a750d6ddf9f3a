"""Applying what Label Studio said to a dataset: one step, all or nothing, never twice.

Both paths, the webhook receiver and the pull sync, hand :func:`apply` a :class:`Changes`
(annotations as :class:`~auditor.connectors.labelstudio.mapping.LSAnnotation`, deleted
annotation and task ids). Under the dataset's row lock it

1. records the event (``labelstudio_event``);
2. updates the connector's mirror of each Label Studio annotation
   (``labelstudio_annotation``), skipping what it already knows: an annotation whose
   ``updated_at`` is not newer than the one recorded (a retried webhook, or the pull
   meeting what a webhook brought), or one already deleted (a tombstone is final);
3. works out, for every (item, annotator) and item it touched, what the dataset should
   hold: the annotator's label from its latest ``vote`` annotation of the item, the item's
   gold label from its latest ``gold`` (ground-truth) annotation (the rule for several
   ground truths of one item: the one updated last wins; the others are neither gold
   nor votes, and counted as ``gold_ignored``); and
4. writes the difference as one import batch: new annotations, re-labels and deletions
   (the replaced row goes to ``annotation_history``, with ``change`` ``relabel`` or
   ``delete``), gold labels, annotators' vendors, ``item.label_counts``; a new
   ``data_version`` and an outbox row, so the dataset is audited as after any import.

The caller owns the transaction: it commits, then asks for the audit
(:func:`auditor.worker.dispatch.request_audit`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import delete, func, insert, select, text, tuple_, update
from sqlalchemy.orm import Session

from auditor.connectors.labelstudio import credentials
from auditor.connectors.labelstudio.mapping import (
    CANCELLED,
    DELETED,
    EMPTY,
    GOLD,
    GOLD_SOURCE,
    VOTE,
    LSAnnotation,
    ReadSpec,
    VendorMap,
)
from auditor.db.models import (
    Annotation,
    AnnotationHistory,
    Annotator,
    AuditOutbox,
    Dataset,
    ImportBatch,
    ImportKind,
    Item,
    LabelStudioAnnotation,
    LabelStudioConnector,
    LabelStudioEvent,
    LabelStudioQuarantine,
    LabelStudioUser,
    Tier,
    Workspace,
)
from auditor.db.partitions import ensure_annotation_partition
from auditor.db.session import WRITE_OPTIONS
from auditor.ingest.errors import IngestError
from auditor.timestamps import out_of_range

__all__ = ["Applied", "Changes", "apply", "begin_write", "configure", "read_spec", "resolve_token"]

log = logging.getLogger(__name__)

_CHUNK = 500


@dataclass
class Changes:
    """What one webhook event or one page of the pull sync says."""

    annotations: list[LSAnnotation] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    deleted_tasks: list[int] = field(default_factory=list)
    #: Label Studio users seen (id → email, or None when the payload gave no email).
    users: dict[int, str | None] = field(default_factory=dict)
    #: Deletions found by the pull (absent from Label Studio): applied only to annotations
    #: no event changed since this event id (the pull's start), so that an annotation a
    #: webhook brought while the pull was listing is not taken for a deleted one.
    unchanged_since_event: int | None = None
    #: Also fill in the vendor of every known user's annotator still without one (the pull).
    refresh_vendors: bool = False
    #: A ground truth here unmarks its task's others (Label Studio's annotation API does so:
    #: the events of one annotation created or updated).
    unique_ground_truth: bool = False


@dataclass
class Applied:
    status: str
    event_id: int
    counts: dict[str, int]
    batch_id: int | None = None
    data_version: int | None = None
    dataset_id: int | None = None
    #: Users whose email (and so vendor) is not known yet.
    unknown_users: set[int] = field(default_factory=set)

    @property
    def changed(self) -> bool:
        return self.batch_id is not None

    @property
    def message(self) -> str:
        c = self.counts
        parts = [f"{c['inserted']} new annotation(s), {c['relabeled']} re-label(s), {c['deleted']} deletion(s), "
                 f"{c['gold_set'] + c['gold_cleared']} gold change(s)"]
        if c["vendors_set"]:
            parts.append(f"{c['vendors_set']} vendor(s) assigned")
        if c["gold_ignored"]:
            parts.append(f"{c['gold_ignored']} ground truth(s) ignored (another ground truth of the same item "
                         "was updated later)")
        if c["duplicates"]:
            parts.append(f"{c['duplicates']} already seen")
        if c["skipped_cancelled"] or c["skipped_empty"]:
            parts.append(f"{c['skipped_cancelled']} cancelled and {c['skipped_empty']} empty annotation(s) skipped")
        head = f"data_version {self.data_version}: " if self.changed else "nothing changed: "
        return head + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "event_id": self.event_id, "batch_id": self.batch_id,
                "data_version": self.data_version, **self.counts, "message": self.message}


_COUNTS = ("annotations", "inserted", "relabeled", "deleted", "gold_set", "gold_cleared", "gold_ignored", "duplicates",
           "skipped_cancelled", "skipped_empty", "unknown_deleted", "new_items", "new_annotators", "vendors_set",
           "vendor_conflicts")


# --- configuration ---------------------------------------------------------------------


def normalize_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise IngestError(f"--url must be the http(s) address of Label Studio, e.g. https://label.example.com; "
                          f"got {url!r}")
    return url.strip().rstrip("/")


def default_namespace(url: str) -> str:
    return urlsplit(url).netloc.lower()


def configure(session: Session, *, workspace: str, dataset: str, url: str, project_id: int,
              token: str | None = None, token_env: str | None = None, item_field: str | None = None,
              from_name: str | None = None, label_map: dict[str, str] | None = None,
              vendor_map: VendorMap | None = None, namespace: str | None = None,
              rotate_secret: bool = False, secret_key: str | None = None) -> tuple[LabelStudioConnector, str | None]:
    """Create the connector of (dataset, Label Studio URL, project) or update its settings.

    Returns it and its webhook secret when one was made (on creation, or with
    ``rotate_secret``): the secret is shown once and kept only as a hash. Options left
    None keep their stored values. ``token`` is stored encrypted (needs
    ``AUDITOR_SECRET_KEY``); ``token_env`` instead names the variable holding it.
    """
    from auditor.ingest.datasets import get_dataset

    url = normalize_url(url)
    if not 0 < project_id < 2**31:
        raise IngestError(f"--project must be a Label Studio project id; got {project_id}")
    ds = get_dataset(session, dataset, workspace=workspace)
    if label_map:
        unknown = sorted({v for v in label_map.values() if v not in ds.labels})
        if unknown:
            raise IngestError(f"--label maps to {unknown}, which are not labels of dataset {ds.name!r} "
                              f"({list(ds.labels)})")
    conn = session.scalar(select(LabelStudioConnector).where(
        LabelStudioConnector.dataset_id == ds.id, LabelStudioConnector.url == url,
        LabelStudioConnector.project_id == project_id))
    secret = None
    if conn is None:
        secret = credentials.new_webhook_secret()
        conn = LabelStudioConnector(workspace_id=ds.workspace_id, dataset_id=ds.id, url=url, project_id=project_id,
                                    annotator_namespace=default_namespace(url) if namespace is None else namespace,
                                    item_field=item_field or "item_id", webhook_secret_hash=credentials.hash_secret(secret))
        session.add(conn)
    else:
        if namespace is not None and namespace != conn.annotator_namespace:
            raise IngestError(f"the connector's annotators are named {conn.annotator_namespace!r}/<user id>; "
                              "their names cannot change once annotations arrived")
        if item_field is not None:
            conn.item_field = item_field
        if rotate_secret:
            secret = credentials.new_webhook_secret()
            conn.webhook_secret_hash = credentials.hash_secret(secret)
    if from_name is not None:
        conn.from_name = from_name or None
    if label_map is not None:
        conn.label_map = dict(label_map) or None
    if vendor_map is not None:
        conn.vendor_map = vendor_map.to_json()
    if token is not None:
        conn.token_encrypted = credentials.encrypt_token(token, secret_key or credentials.configured_secret_key())
        conn.token_env = None
    elif token_env is not None:
        conn.token_env, conn.token_encrypted = token_env, None
    conn.enabled = True
    session.flush()
    return conn, secret


def resolve_token(conn: LabelStudioConnector, environ=None, secret_key: str | None = None) -> str:
    """The connector's Label Studio API token (decrypted, or read from its variable)."""
    import os

    env = os.environ if environ is None else environ
    if conn.token_encrypted:
        return credentials.decrypt_token(conn.token_encrypted, secret_key or credentials.configured_secret_key(env))
    name = conn.token_env or "LABEL_STUDIO_API_KEY"
    token = env.get(name)
    if not token:
        raise credentials.TokenError(f"no Label Studio token: set {name} in the environment of this process, "
                                     "or store one (auditor connect label-studio ... --token)")
    return token


def read_spec(conn: LabelStudioConnector, dataset: Dataset) -> ReadSpec:
    return ReadSpec(labels=list(dataset.labels), project_id=conn.project_id, item_field=conn.item_field,
                    from_name=conn.from_name, label_map=conn.label_map or None, namespace=conn.annotator_namespace)


# --- applying ------------------------------------------------------------------------------


def _aware(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _chunks(values: Sequence, n: int = _CHUNK) -> Iterable[Sequence]:
    for i in range(0, len(values), n):
        yield values[i:i + n]


def _insert(session: Session):
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    return dialect_insert


def begin_write(session: Session):
    """The session's connection in a writing transaction (SQLite: ``BEGIN IMMEDIATE`` when
    nothing ran yet, so that the write lock is taken up front)."""
    if session.in_transaction():
        return session.connection()
    return session.connection(execution_options=WRITE_OPTIONS)


def _lock_dataset(session: Session, dataset_id: int) -> None:
    """Serialise the writers of the dataset until commit (its row lock, as every import takes)."""
    conn = begin_write(session)
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT id FROM dataset WHERE id = :d FOR UPDATE"), {"d": dataset_id})
    else:  # SQLite: BEGIN IMMEDIATE (above) holds the database's write lock
        conn.execute(text("UPDATE dataset SET data_version = data_version WHERE id = :d"), {"d": dataset_id})


def apply(session: Session, conn: LabelStudioConnector, changes: Changes, *, source: str, action: str) -> Applied:
    """Apply ``changes`` to the connector's dataset (see the module docstring); the caller commits."""
    begin_write(session)  # before ``conn`` (perhaps expired) is read
    _lock_dataset(session, conn.dataset_id)
    ds = session.get(Dataset, conn.dataset_id)
    session.refresh(ds)
    spec = read_spec(conn, ds)
    counts = dict.fromkeys(_COUNTS, 0)
    counts["annotations"] = len(changes.annotations)
    event = LabelStudioEvent(connector_id=conn.id, source=source, action=action[:40], status="unchanged")
    session.add(event)
    session.flush()

    # 1. The users directory: emails decide vendors.
    directory = _update_directory(session, conn.id, _emails(changes))

    # 2. The mirror: newest state of each annotation, tombstones final.
    latest: dict[int, LSAnnotation] = {}
    for a in changes.annotations:  # one payload may name an annotation twice: its latest counts
        if a.ls_id not in latest or a.updated_at >= latest[a.ls_id].updated_at:
            latest[a.ls_id] = a
    counts["duplicates"] += len(changes.annotations) - len(latest)
    known = _known_rows(session, conn, sorted(set(latest) | set(changes.deleted)))
    touched = _Touched(event.id)
    gold_tasks = _mirror_annotations(session, conn, latest, known, touched, counts, source=source)
    session.flush()
    if changes.unique_ground_truth:
        _unmark_other_gold(session, conn, gold_tasks, touched)
    # Otherwise (the pull reads Label Studio's state; an import makes every annotation of a
    # task a ground truth) several ground truths of one item follow one rule: the one updated
    # last is its gold label (_Writer._plan_gold); the others are neither gold nor votes, and
    # counted (``gold_ignored``), never silently a crowd vote.
    _mirror_deletions(session, conn, changes, known, touched, counts)
    session.flush()

    # Annotations read well now (fixed in Label Studio) or gone leave the quarantine.
    _release_quarantine(session, conn, sorted(latest) + sorted(set(changes.deleted)), changes.deleted_tasks)

    # 3.-4. What the dataset should hold, and the difference written as one batch.
    writer = _Writer(session, conn, ds, spec, VendorMap.from_json(conn.vendor_map), directory, counts)
    writer.plan(touched.pairs, touched.items, refresh_vendors=changes.refresh_vendors)
    outcome = Applied("unchanged", event.id, counts, dataset_id=ds.id, unknown_users=writer.unknown_users)
    if writer.has_changes():
        batch_id, version = writer.write(source, action, len(changes.annotations) + len(changes.deleted))
        for row in touched.rows:
            row.batch_id = batch_id
        event.status, event.batch_id, event.data_version = "changed", batch_id, version
        outcome.status, outcome.batch_id, outcome.data_version = "changed", batch_id, version
    event.counts = dict(counts)
    if source == "webhook":
        conn.last_event_at = func.now()
    elif not touched.rows and not outcome.changed and not changes.users:
        # A step of the pull that found everything known: no record of it (a sync every few
        # minutes would otherwise leave a row per thousand annotations each time).
        session.delete(event)
    session.flush()
    return outcome


@dataclass
class _Touched:
    """The mirror rows an apply changed (each stamped with its event), and the items and
    (item, annotator) pairs whose dataset rows must be recomputed."""

    event_id: int
    rows: list[LabelStudioAnnotation] = field(default_factory=list)
    items: set[str] = field(default_factory=set)
    pairs: set[tuple[str, str]] = field(default_factory=set)

    def __call__(self, row: LabelStudioAnnotation) -> None:
        if row.item_ext is not None:
            self.items.add(row.item_ext)
            if row.annotator_ext is not None:
                self.pairs.add((row.item_ext, row.annotator_ext))
        row.event_id = self.event_id
        self.rows.append(row)


def _emails(changes: Changes) -> dict[int, str | None]:
    """Every user's email the changes tell: the users directory, then the annotations' own."""
    emails = dict(changes.users)
    for a in changes.annotations:
        if a.email is not None or a.ls_user_id not in emails:
            emails[a.ls_user_id] = a.email if a.email is not None else emails.get(a.ls_user_id)
    return emails


def _known_rows(session: Session, conn: LabelStudioConnector, ids: list[int]) -> dict[int, LabelStudioAnnotation]:
    M = LabelStudioAnnotation
    known: dict[int, LabelStudioAnnotation] = {}
    for chunk in _chunks(ids):
        for row in session.scalars(select(M).where(M.connector_id == conn.id, M.ls_id.in_(chunk))):
            known[row.ls_id] = row
    return known


def _mirror_annotations(session: Session, conn: LabelStudioConnector, latest: dict[int, LSAnnotation],
                        known: dict[int, LabelStudioAnnotation], touch: _Touched, counts: dict[str, int], *,
                        source: str) -> dict[int, int]:
    """Write the newest state of each annotation into the mirror (an older or, from the pull,
    identical one counts as a duplicate; a deleted one stays deleted); returns the ground
    truths seen, task → annotation."""
    M = LabelStudioAnnotation
    gold_tasks: dict[int, int] = {}
    for a in latest.values():
        row = known.get(a.ls_id)
        if row is not None:
            seen = _aware(row.ls_updated_at)
            if seen is not None and out_of_range(seen) is not None:
                seen = None  # a stamp an older version let in (year 9999) must not freeze the annotation
            if row.state == DELETED or (seen is not None and (
                    a.updated_at < seen or (a.updated_at == seen and (
                        source != "pull" or _fingerprint(row) == a.fingerprint())))):
                counts["duplicates"] += 1
                continue
            touch(row)  # the old item/annotator too, should they differ
        else:
            row = M(connector_id=conn.id, ls_id=a.ls_id, dataset_id=conn.dataset_id)
            session.add(row)
            known[a.ls_id] = row
        row.task_id, row.item_ext, row.ls_user_id, row.annotator_ext = a.task_id, a.item_ext, a.ls_user_id, a.annotator_ext
        row.state, row.label, row.ls_updated_at = a.state, a.label, a.updated_at
        counts["skipped_cancelled"] += a.state == CANCELLED
        counts["skipped_empty"] += a.state == EMPTY
        if a.state == GOLD:
            gold_tasks[a.task_id] = a.ls_id
        touch(row)
    return gold_tasks


def _unmark_other_gold(session: Session, conn: LabelStudioConnector, gold_tasks: dict[int, int],
                       touch: _Touched) -> None:
    """Marking a ground truth through Label Studio's annotation API (one annotation created or
    updated: its ANNOTATION_CREATED / _UPDATED event) unmarks the task's other ground truths,
    without touching their updated_at, so no event says so: they are votes again."""
    M = LabelStudioAnnotation
    for task_id, ls_id in gold_tasks.items():
        for row in session.scalars(select(M).where(M.connector_id == conn.id, M.task_id == task_id,
                                                   M.state == GOLD, M.ls_id != ls_id)):
            row.state = VOTE
            touch(row)


def _mirror_deletions(session: Session, conn: LabelStudioConnector, changes: Changes,
                      known: dict[int, LabelStudioAnnotation], touch: _Touched, counts: dict[str, int]) -> None:
    """Mark the deleted annotations and the annotations of deleted tasks; an unknown one
    becomes a tombstone, so that a late creation event cannot bring it back."""
    M = LabelStudioAnnotation
    for ls_id in changes.deleted:
        row = known.get(ls_id)
        if row is None:
            row = M(connector_id=conn.id, ls_id=ls_id, dataset_id=conn.dataset_id, state=DELETED)
            session.add(row)
            known[ls_id] = row
            counts["unknown_deleted"] += 1
            touch(row)
        elif row.state == DELETED:
            counts["duplicates"] += 1
        elif changes.unchanged_since_event is not None and row.event_id >= changes.unchanged_since_event:
            continue  # changed by an event during the pull: Label Studio has it after all
        else:
            row.state = DELETED
            touch(row)
    for chunk in _chunks(sorted(set(changes.deleted_tasks))):
        for row in session.scalars(select(M).where(M.connector_id == conn.id, M.task_id.in_(chunk),
                                                   M.state != DELETED)):
            row.state = DELETED
            touch(row)


def _release_quarantine(session: Session, conn: LabelStudioConnector, ls_ids: Sequence[int],
                        task_ids: Sequence[int]) -> None:
    Q, released = LabelStudioQuarantine, 0
    for chunk in _chunks(list(ls_ids)):
        released += session.execute(delete(Q).where(Q.connector_id == conn.id, Q.ls_id.in_(chunk))).rowcount or 0
    for chunk in _chunks(sorted(set(task_ids))):
        released += session.execute(delete(Q).where(Q.connector_id == conn.id, Q.task_id.in_(chunk))).rowcount or 0
    if released:
        conn.quarantined = max(0, (conn.quarantined or 0) - released)


def _fingerprint(row: LabelStudioAnnotation) -> tuple:
    return (row.task_id, row.item_ext, row.annotator_ext, row.state, row.label)


def _update_directory(session: Session, connector_id: int, emails: dict[int, str | None]) -> dict[int, str | None]:
    """Record the emails learnt; returns every given user's email as now known (None: unknown)."""
    out: dict[int, str | None] = {}
    uids = sorted(emails)
    for chunk in _chunks(uids):
        for row in session.scalars(select(LabelStudioUser).where(LabelStudioUser.connector_id == connector_id,
                                                                 LabelStudioUser.ls_user_id.in_(chunk))):
            out[row.ls_user_id] = row.email
            new = emails[row.ls_user_id]
            if new is not None and new != row.email:
                row.email, row.updated_at = new, func.now()
                out[row.ls_user_id] = new
    for uid in uids:
        if uid not in out:
            session.add(LabelStudioUser(connector_id=connector_id, ls_user_id=uid, email=emails[uid]))
            out[uid] = emails[uid]
    return out


@dataclass
class _Ann:
    item_id: int
    annotator_id: int
    label: int
    annotated_at: datetime | None
    batch_id: int
    data_version: int
    created_at: datetime


class _Writer:
    """The dataset's side of one step: plan the differences, then write them as one batch."""

    def __init__(self, session: Session, conn: LabelStudioConnector, ds: Dataset, spec: ReadSpec,
                 vendors: VendorMap, directory: dict[int, str | None], counts: dict[str, int]):
        self.session, self.conn, self.ds, self.spec, self.vendors = session, conn, ds, spec, vendors
        self.directory, self.counts = directory, counts
        self.n_labels = len(ds.labels)
        self.inserts: dict[tuple[str, str], tuple[int, datetime | None]] = {}
        self.relabels: dict[tuple[str, str], tuple[_Ann, int, datetime | None]] = {}
        self.deletes: dict[tuple[str, str], _Ann] = {}
        self.gold: dict[str, int | None] = {}
        self.vendor_updates: dict[str, str] = {}
        self.new_annotators: dict[str, str | None] = {}
        self.annotator_users: dict[str, int] = {}
        self.unknown_users: set[int] = set()

    # -- planning --

    def plan(self, pairs: set[tuple[str, str]], items: set[str], *, refresh_vendors: bool) -> None:
        s, d, M = self.session, self.ds.id, LabelStudioAnnotation
        desired: dict[tuple[str, str], tuple[datetime, int, int]] = {}
        pair_list = sorted(pairs)
        for chunk in _chunks(pair_list):
            for item, ann, label, ts, ls_id, uid in s.execute(
                    select(M.item_ext, M.annotator_ext, M.label, M.ls_updated_at, M.ls_id, M.ls_user_id).where(
                        M.dataset_id == d, M.state == VOTE, tuple_(M.item_ext, M.annotator_ext).in_(chunk))):
                key = (_aware(ts), ls_id)
                if (item, ann) not in desired or key > desired[(item, ann)][:2]:
                    desired[(item, ann)] = (*key, label)
                self.annotator_users[ann] = uid
        current = self._current(pair_list)
        for pair in pair_list:
            want, have = desired.get(pair), current.get(pair)
            if want is not None and have is None:
                self.inserts[pair] = (want[2], want[0])
            elif want is not None and have.label != want[2]:
                self.relabels[pair] = (have, want[2], want[0])
            elif want is None and have is not None:
                self.deletes[pair] = have
        self._plan_gold(sorted(items))
        self._plan_vendors(refresh_vendors)

    def _current(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], _Ann]:
        A, out = Annotation, {}
        for chunk in _chunks(pairs):
            for item, ann, *rest in self.session.execute(
                    select(Item.external_id, Annotator.external_id, A.item_id, A.annotator_id, A.label,
                           A.annotated_at, A.batch_id, A.data_version, A.created_at)
                    .select_from(A).join(Item, Item.id == A.item_id).join(Annotator, Annotator.id == A.annotator_id)
                    .where(A.dataset_id == self.ds.id, Item.dataset_id == self.ds.id,
                           Annotator.workspace_id == self.ds.workspace_id,
                           tuple_(Item.external_id, Annotator.external_id).in_(chunk))):
                out[(item, ann)] = _Ann(*rest)
        return out

    def _plan_gold(self, items: list[str]) -> None:
        s, d, M = self.session, self.ds.id, LabelStudioAnnotation
        desired: dict[str, tuple[datetime, int, int]] = {}
        current: dict[str, tuple[int | None, str | None]] = {}
        n_gold: dict[str, int] = {}
        for chunk in _chunks(items):
            for item, label, ts, ls_id in s.execute(select(M.item_ext, M.label, M.ls_updated_at, M.ls_id).where(
                    M.dataset_id == d, M.state == GOLD, M.item_ext.in_(chunk))):
                # The rule for several ground truths: the one updated last wins (ties: the
                # higher annotation id); the others are ignored and counted.
                key = (_aware(ts), ls_id)
                n_gold[item] = n_gold.get(item, 0) + 1
                if item not in desired or key > desired[item][:2]:
                    desired[item] = (*key, label)
            for item, gold, source in s.execute(select(Item.external_id, Item.gold_label, Item.gold_source).where(
                    Item.dataset_id == d, Item.external_id.in_(chunk))):
                current[item] = (gold, source)
        self.counts["gold_ignored"] += sum(n - 1 for n in n_gold.values())
        for item in items:
            want = desired.get(item)
            gold, source = current.get(item, (None, None))
            if want is not None and (gold != want[2] or source != GOLD_SOURCE):
                self.gold[item] = want[2]
            elif want is None and source == GOLD_SOURCE and gold is not None:
                self.gold[item] = None

    def _plan_vendors(self, refresh: bool) -> None:
        """Vendors of the annotators this step writes, and (``refresh``) of every known user's
        annotator still without one."""
        written = {a for _, a in self.inserts} | {a for _, a in self.relabels}
        names = set(written)
        if refresh:
            for uid in self.directory:
                ann = self.spec.annotator(uid)
                self.annotator_users.setdefault(ann, uid)
                names.add(ann)
        existing: dict[str, str | None] = {}
        for chunk in _chunks(sorted(names)):
            existing.update(self.session.execute(select(Annotator.external_id, Annotator.vendor).where(
                Annotator.workspace_id == self.ds.workspace_id, Annotator.external_id.in_(chunk))).all())
        missing = sorted({uid for name in names if (uid := self.annotator_users.get(name)) is not None}
                         - set(self.directory))
        for chunk in _chunks(missing):  # users this step did not name: their emails as last seen
            self.directory.update(self.session.execute(select(LabelStudioUser.ls_user_id, LabelStudioUser.email).where(
                LabelStudioUser.connector_id == self.conn.id, LabelStudioUser.ls_user_id.in_(chunk))).all())
        for name in sorted(names):
            uid = self.annotator_users.get(name)
            if uid is None:
                continue
            email = self.directory.get(uid)
            vendor = self.vendors.vendor(uid, email)
            if email is None and vendor is None and self.vendors.needs_email:
                self.unknown_users.add(uid)
            if name not in existing:
                if name in written:
                    self.new_annotators[name] = vendor
            elif vendor is not None and existing[name] is None:
                self.vendor_updates[name] = vendor
            elif vendor is not None and existing[name] != vendor:
                self.counts["vendor_conflicts"] += 1
                log.warning("Label Studio connector %s: annotator %r is registered with vendor %r; the vendor map "
                            "says %r (kept %r)", self.conn.id, name, existing[name], vendor, existing[name])

    def has_changes(self) -> bool:
        return bool(self.inserts or self.relabels or self.deletes or self.gold or self.vendor_updates)

    # -- writing --

    def write(self, source: str, action: str, n_rows: int) -> tuple[int, int]:
        s, ds, L = self.session, self.ds, self.n_labels
        conn = s.connection()
        pg = conn.dialect.name == "postgresql"
        version = int(s.execute(text("UPDATE dataset SET data_version = data_version + 1, "
                                     "updated_at = CURRENT_TIMESTAMP WHERE id = :d RETURNING data_version"),
                                {"d": ds.id}).scalar_one())
        batch = ImportBatch(workspace_id=ds.workspace_id, dataset_id=ds.id, kind=ImportKind.ANNOTATIONS,
                            format="label-studio", source_name=f"{self.conn.url} project {self.conn.project_id} "
                                                               f"({source} {action})"[-1024:],
                            submitted_by=f"label-studio connector {self.conn.id}", row_count=n_rows,
                            checksum=hashlib.sha256(f"label-studio {self.conn.id} {ds.id} {version}".encode()).hexdigest(),
                            data_version=version)
        s.add(batch)
        s.flush()
        b = batch.id
        c = self.counts

        self._write_annotators_and_items()
        item_ids = self._ids(Item, [i for i, _ in self.inserts] + list(self.gold), Item.dataset_id == ds.id)
        ann_ids = self._ids(Annotator, [a for _, a in self.inserts], Annotator.workspace_id == ds.workspace_id)

        deltas: dict[int, list[int]] = {}

        def bump(item_id: int, label: int, by: int) -> None:
            deltas.setdefault(item_id, [0] * L)[label] += by

        # History first (the rows as they were), then the rows themselves.
        history = []
        for change, old in [("relabel", r[0]) for r in self.relabels.values()] + \
                           [("delete", old) for old in self.deletes.values()]:
            history.append({"dataset_id": ds.id, "item_id": old.item_id, "annotator_id": old.annotator_id,
                            "label": old.label, "annotated_at": old.annotated_at, "batch_id": old.batch_id,
                            "data_version": old.data_version, "created_at": old.created_at,
                            "superseded_by_batch_id": b, "superseded_version": version, "change": change})
        if history:
            s.execute(insert(AnnotationHistory), history)
        if self.inserts:
            if pg:
                ensure_annotation_partition(conn, ds.id)
            rows = []
            for (item, ann), (label, ts) in self.inserts.items():
                rows.append({"dataset_id": ds.id, "item_id": item_ids[item], "annotator_id": ann_ids[ann],
                             "label": label, "annotated_at": ts, "batch_id": b, "data_version": version})
                bump(item_ids[item], label, +1)
            s.execute(insert(Annotation), rows)
            c["inserted"] = len(rows)
        A = Annotation
        for old, label, ts in self.relabels.values():
            s.execute(update(A).where(A.dataset_id == ds.id, A.item_id == old.item_id,
                                      A.annotator_id == old.annotator_id)
                      .values(label=label, annotated_at=ts, batch_id=b, data_version=version))
            bump(old.item_id, old.label, -1)
            bump(old.item_id, label, +1)
        c["relabeled"] = len(self.relabels)
        for old in self.deletes.values():
            s.execute(delete(A).where(A.dataset_id == ds.id, A.item_id == old.item_id,
                                      A.annotator_id == old.annotator_id))
            bump(old.item_id, old.label, -1)
        c["deleted"] = len(self.deletes)
        self._apply_counts(deltas)
        for item, label in self.gold.items():
            s.execute(update(Item).where(Item.id == item_ids[item]).values(
                gold_label=label, gold_source=GOLD_SOURCE if label is not None else None))
            c["gold_set" if label is not None else "gold_cleared"] += 1

        stats = {k: v for k, v in c.items() if k != "annotations"} | {"rows": n_rows}
        batch.stats = stats
        s.add(AuditOutbox(dataset_id=ds.id, data_version=version, batch_id=b, reason=ImportKind.ANNOTATIONS.value))
        s.flush()
        s.expire(ds, ["data_version", "updated_at"])
        return b, version

    def _write_annotators_and_items(self) -> None:
        """The annotators and items the batch needs (new ones added, vendors filled in)."""
        s, ds, c = self.session, self.ds, self.counts
        ins = _insert(s)
        if self.new_annotators:
            rows = [{"workspace_id": ds.workspace_id, "external_id": name, "vendor": vendor, "tier": Tier.CROWD.value}
                    for name, vendor in self.new_annotators.items()]
            c["new_annotators"] = len(s.execute(ins(Annotator).values(rows).on_conflict_do_nothing(
                index_elements=["workspace_id", "external_id"]).returning(Annotator.id)).all())
        for name, vendor in self.vendor_updates.items():
            c["vendors_set"] += s.execute(update(Annotator).where(
                Annotator.workspace_id == ds.workspace_id, Annotator.external_id == name,
                Annotator.vendor.is_(None)).values(vendor=vendor)).rowcount or 0
        needed_items = sorted({i for i, _ in self.inserts} | set(self.gold))
        if needed_items:
            zeros = [0] * self.n_labels
            for chunk in _chunks(needed_items):
                c["new_items"] += len(s.execute(ins(Item).values(
                    [{"dataset_id": ds.id, "external_id": i, "label_counts": zeros} for i in chunk]
                ).on_conflict_do_nothing(index_elements=["dataset_id", "external_id"]).returning(Item.id)).all())

    def _ids(self, model, names: list[str], scope) -> dict[str, int]:
        out: dict[str, int] = {}
        for chunk in _chunks(sorted(set(names))):
            for ext, oid in self.session.execute(select(model.external_id, model.id).where(
                    scope, model.external_id.in_(chunk))):
                out[ext] = oid
        return out

    def _apply_counts(self, deltas: dict[int, list[int]]) -> None:
        s, L = self.session, self.n_labels
        ids = sorted(deltas)
        for chunk in _chunks(ids):
            for item_id, vec in s.execute(select(Item.id, Item.label_counts).where(Item.id.in_(chunk))).all():
                old = list(vec or [])
                old += [0] * (L - len(old))
                new = [int(o) + dv for o, dv in zip(old, deltas[item_id], strict=True)]
                if min(new) < 0:
                    raise RuntimeError(f"item {item_id}: label counts would become negative ({new})")
                s.execute(update(Item).where(Item.id == item_id).values(label_counts=new))


def workspace_slug(session: Session, conn: LabelStudioConnector) -> str:
    return session.scalar(select(Workspace.slug).where(Workspace.id == conn.workspace_id))
