"""The pull sync: read a Label Studio project through ``label-studio-sdk`` and apply it with
the webhooks' mapping and bookkeeping, so the two never count an annotation twice.

One sync (``auditor connect label-studio``, the beat task) reads the project's users
(their emails decide vendors), then every task with its annotations, page by page, and
applies them in steps of at most ``chunk`` annotations, each one transaction. An
annotation that cannot be read (a choice outside the dataset's labels, a result of the
wrong shape, a bad time stamp...) is quarantined: kept aside in ``labelstudio_quarantine``
with its task, its id, the field, the reason and a fix hint, while everything else syncs;
once fixed in Label Studio, the next sync (or its webhook) takes it and the entry goes.
Only after a complete listing are the annotations it no longer holds recorded as deleted
(those missed while Auditor was down), except any that an event changed since the sync
began; a quarantined annotation is still held by Label Studio, so it is not one of them
(its last good state, if any, stays). It backfills a new connector and catches up after
downtime alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session, sessionmaker

from auditor.connectors.errors import ConnectorError
from auditor.connectors.labelstudio.mapping import (
    DELETED,
    Errors,
    FieldError,
    ReadSpec,
    parse_annotation,
    positive_int,
)
from auditor.connectors.labelstudio.store import (
    Applied,
    Changes,
    apply,
    begin_write,
    read_spec,
    resolve_token,
)
from auditor.db.models import (
    Dataset,
    LabelStudioAnnotation,
    LabelStudioConnector,
    LabelStudioQuarantine,
)

__all__ = ["MAX_QUARANTINE", "Quarantined", "SyncResult", "fix_hint", "make_client", "sync_connector"]

log = logging.getLogger(__name__)


#: Quarantined annotations stored per connector (the feed lists them); the count covers all.
MAX_QUARANTINE = 1000


@dataclass(frozen=True)
class Quarantined:
    """An annotation the sync kept aside: where, why, and how to fix it."""

    ls_id: int | None
    task_id: int | None
    field: str
    reason: str
    hint: str

    def to_json(self) -> dict[str, Any]:
        return {"annotation_id": self.ls_id, "task_id": self.task_id, "field": self.field, "reason": self.reason,
                "hint": self.hint}


def fix_hint(errors: list[FieldError], spec: ReadSpec) -> str:
    """What to do in Label Studio (or in the connector) about an annotation that cannot be read."""
    text = " ".join(e.reason for e in errors)
    if "is not one of the dataset's labels" in text:
        return (f"choose one of the dataset's labels {list(spec.labels)} in Label Studio (the next sync takes the "
                "annotation), or map the choice to one: auditor connect label-studio ... --label <choice>=<label>")
    if "expected exactly one choice" in text:
        return "keep exactly one choice in the annotation (Auditor reads single-choice classification)"
    if "a second choices result" in text:
        return "name the Choices control to read: auditor connect label-studio ... --from-name <control>"
    if any(e.field.endswith((".updated_at", ".created_at")) for e in errors):
        return "save the annotation again in Label Studio so that it gets a current time stamp"
    if any(".data." in e.field for e in errors):
        return f"give the task a valid item id in its data field {spec.item_field!r}"
    return "fix or delete the annotation in Label Studio; the next sync takes it"


@dataclass
class SyncResult:
    connector_id: int
    dataset_id: int
    tasks: int = 0
    steps: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    data_version: int | None = None
    changed: bool = False
    quarantine: list[Quarantined] = field(default_factory=list)

    def add(self, outcome: Applied) -> None:
        self.steps += 1
        for k, v in outcome.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        if outcome.changed:
            self.changed, self.data_version = True, outcome.data_version

    @property
    def message(self) -> str:
        c = self.counts
        head = f"{self.tasks} task(s), {c.get('annotations', 0)} annotation(s) read: "
        return head + (f"{c.get('inserted', 0)} new, {c.get('relabeled', 0)} re-labelled, {c.get('deleted', 0)} "
                       f"deleted, {c.get('gold_set', 0) + c.get('gold_cleared', 0)} gold change(s), "
                       f"{c.get('vendors_set', 0)} vendor(s) assigned; {c.get('duplicates', 0)} already known; "
                       f"{c.get('skipped_cancelled', 0)} cancelled and {c.get('skipped_empty', 0)} empty skipped"
                       + (f"; {c.get('gold_ignored', 0)} ground truth(s) ignored: on an item with several, the "
                          "one updated last is the gold label" if c.get("gold_ignored") else "")
                       + (f"; {len(self.quarantine)} annotation(s) quarantined (listed on the feed)"
                          if self.quarantine else "")
                       + (f"; data_version {self.data_version}" if self.changed else "; nothing changed"))

    def to_json(self) -> dict[str, Any]:
        return {"connector_id": self.connector_id, "dataset_id": self.dataset_id, "tasks": self.tasks,
                "steps": self.steps, "changed": self.changed, "data_version": self.data_version, **self.counts,
                "quarantined": len(self.quarantine),
                "quarantine": [q.to_json() for q in self.quarantine[:MAX_QUARANTINE]], "message": self.message}


def make_client(url: str, token: str, *, timeout: float = 60.0):
    try:
        from label_studio_sdk import LabelStudio
    except ImportError:
        raise ConnectorError("the pull sync needs label-studio-sdk: pip install 'auditor[labelstudio]'") from None
    return LabelStudio(base_url=url, api_key=token, timeout=timeout)


def _plain(obj: Any) -> Any:
    if obj is None or isinstance(obj, dict | list | str | int | float | bool):
        return obj
    dump = getattr(obj, "model_dump", None) or getattr(obj, "dict", None)
    return dump() if dump is not None else obj


def _users(client) -> dict[int, str | None]:
    out: dict[int, str | None] = {}
    for user in client.users.list():
        uid = getattr(user, "id", None)
        if isinstance(uid, int):
            email = getattr(user, "email", None)
            out[uid] = email.strip().lower() if isinstance(email, str) and "@" in email else None
    return out


def _tasks(client, project_id: int, page_size: int) -> Iterable[tuple[dict, list]]:
    for task in client.tasks.list(project=project_id, fields="all", page_size=page_size):
        anns = getattr(task, "annotations", None) or []
        yield {"id": getattr(task, "id", None), "data": _plain(getattr(task, "data", None))}, [_plain(a) for a in anns]


def sync_connector(factory: sessionmaker[Session], connector_id: int, *, client=None, environ=None,
                   page_size: int = 100, chunk: int = 1000,
                   on_change: Callable[[int], None] | None = None) -> SyncResult:
    """Backfill / catch up one connector from Label Studio (see the module docstring).

    ``on_change(dataset_id)`` is called after the sync if it changed the dataset (the
    callers ask for an audit there). Raises :class:`ConnectorError` (also recorded as the
    connector's ``last_sync_error``); annotations that cannot be read are quarantined, not raised.
    """
    with factory() as s:
        conn = s.get(LabelStudioConnector, connector_id)
        if conn is None:
            raise ConnectorError(f"no Label Studio connector {connector_id}")
        spec = read_spec(conn, s.get(Dataset, conn.dataset_id))
        result = SyncResult(connector_id, conn.dataset_id)
        url, project_id = conn.url, conn.project_id
        try:
            token = resolve_token(conn, environ) if client is None else None
        except Exception as exc:
            _record(factory, connector_id, str(exc))
            raise ConnectorError(str(exc)) from exc
    try:
        if client is None:
            client = make_client(url, token)
        users = _users(client)
        # The first step records the users (and fills in vendors); its event id marks the
        # sync's start for the deletion pass.
        start = _step(factory, connector_id, Changes(users=users, refresh_vendors=True), result)
        seen: set[int] = set()
        pending: list = []
        for task, anns in _tasks(client, project_id, page_size):
            result.tasks += 1
            for j, ann in enumerate(anns):
                where = f"task {task.get('id')}: annotations[{j}]"
                errors = Errors()
                a = parse_annotation(ann, task, spec, where, errors, task_where=f"task {task.get('id')}")
                ls_id = positive_int(ann.get("id")) if isinstance(ann, dict) else None
                if ls_id is not None:
                    seen.add(ls_id)
                if a is not None:
                    pending.append(a)
                else:
                    result.quarantine.append(Quarantined(ls_id, positive_int(task.get("id")), errors.items[0].field,
                                                         "; ".join(str(e) for e in errors.items)[:4000],
                                                         fix_hint(errors.items, spec)))
            if len(pending) >= chunk:
                _step(factory, connector_id, Changes(annotations=pending), result)
                pending = []
        if pending:
            _step(factory, connector_id, Changes(annotations=pending), result)
        _store_quarantine(factory, connector_id, result.quarantine)
        with factory() as s:
            M = LabelStudioAnnotation
            gone = sorted(set(s.scalars(select(M.ls_id).where(M.connector_id == connector_id,
                                                              M.state != DELETED))) - seen)
        for i in range(0, len(gone), chunk):
            _step(factory, connector_id, Changes(deleted=gone[i:i + chunk], unchanged_since_event=start.event_id),
                  result)
    except ConnectorError as exc:
        _record(factory, connector_id, str(exc))
        raise
    except Exception as exc:
        if type(exc).__module__.startswith(("label_studio_sdk", "httpx", "httpcore")):
            message = f"Label Studio at {url} (project {project_id}): {type(exc).__name__}: {str(exc)[:500]}"
            _record(factory, connector_id, message)
            raise ConnectorError(message) from exc
        raise
    _record(factory, connector_id, None)
    if result.changed and on_change is not None:
        on_change(result.dataset_id)
    log.info("Label Studio connector %s: %s", connector_id, result.message)
    return result


def _step(factory: sessionmaker[Session], connector_id: int, changes: Changes, result: SyncResult) -> Applied:
    with factory() as s:
        begin_write(s)
        conn = s.get(LabelStudioConnector, connector_id)
        outcome = apply(s, conn, changes, source="pull", action="SYNC")
        s.commit()
    result.add(outcome)
    return outcome


def _store_quarantine(factory: sessionmaker[Session], connector_id: int, found: list[Quarantined]) -> None:
    """The quarantine as this complete listing found it: entries still bad keep their first
    sighting, fixed ones go, new ones come (at most :data:`MAX_QUARANTINE` stored)."""
    Q = LabelStudioQuarantine
    with factory() as s:
        begin_write(s)
        conn = s.get(LabelStudioConnector, connector_id, with_for_update=True)
        first = {(ls_id, task_id, fld): at for ls_id, task_id, fld, at in s.execute(
            select(Q.ls_id, Q.task_id, Q.field, Q.first_seen_at).where(Q.connector_id == connector_id))}
        s.execute(delete(Q).where(Q.connector_id == connector_id))
        rows = [{"connector_id": connector_id, "ls_id": q.ls_id, "task_id": q.task_id, "field": q.field[:300],
                 "reason": q.reason, "hint": q.hint, "last_seen_at": func.now(),
                 **({"first_seen_at": at} if (at := first.get((q.ls_id, q.task_id, q.field[:300]))) else {})}
                for q in found[:MAX_QUARANTINE]]
        for row in rows:
            s.execute(insert(Q).values(**row))
        conn.quarantined = len(found)
        s.commit()
    if found:
        log.warning("Label Studio connector %s: %d annotation(s) quarantined, e.g. task %s annotation %s: %s",
                    connector_id, len(found), found[0].task_id, found[0].ls_id, found[0].reason)


def _record(factory: sessionmaker[Session], connector_id: int, error: str | None) -> None:
    with factory() as s:
        conn = s.get(LabelStudioConnector, connector_id)
        if conn is not None:
            conn.last_sync_at = func.now()
            conn.last_sync_error = error[:4000] if error else None
            s.commit()
