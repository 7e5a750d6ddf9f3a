"""Label Studio's webhook events (its "Webhook event format reference") as :class:`Changes`.

Every event is ``{"action": ..., "project": {...}, ...}`` sent with the webhook's
``headers``; with "Send payload" on it carries:

``ANNOTATION_CREATED`` / ``ANNOTATION_UPDATED``
    ``annotation`` (one object, ``completed_by`` a user id) and its ``task``.
``ANNOTATIONS_CREATED``
    ``annotation``: a list of annotations, ``task``: the list of their tasks.
``ANNOTATIONS_DELETED``
    ``annotations``: ``[{"id": ...}, ...]``, ids only.
``TASKS_DELETED``
    ``tasks``: ``[{"id": ...}, ...]``: their annotations are gone with them.

Other actions are acknowledged and ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from auditor.connectors.labelstudio.mapping import Errors, ReadSpec, parse_annotation, positive_int
from auditor.connectors.labelstudio.store import Changes

__all__ = ["HANDLED", "MAX_EVENT_ANNOTATIONS", "TooManyAnnotations", "parse_event"]

HANDLED = ("ANNOTATION_CREATED", "ANNOTATIONS_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED", "TASKS_DELETED")
MAX_EVENT_ANNOTATIONS = 5000
"""The most annotations (or deleted ids) one event may carry; Label Studio sends bulk events
in batches of ``WEBHOOK_BATCH_SIZE`` (5,000 by default)."""


class TooManyAnnotations(Exception):
    def __init__(self, field: str, n: int):
        super().__init__(f"{field}: {n} entries; one event may carry at most {MAX_EVENT_ANNOTATIONS} "
                         f"(lower Label Studio's WEBHOOK_BATCH_SIZE, or let the pull sync read them)")
        self.field = field


def _list(body: Mapping[str, Any], keys: tuple[str, ...], errors: Errors) -> tuple[str, list] | None:
    for key in keys:
        if key in body:
            value = body[key]
            if isinstance(value, dict):
                value = [value]
            if not isinstance(value, list):
                errors.add(key, "expected a list")
                return None
            if len(value) > MAX_EVENT_ANNOTATIONS:
                raise TooManyAnnotations(key, len(value))
            return key, value
    errors.add(keys[0], "missing: turn on the webhook's 'Send payload'")
    return None


def _ids(entries: list, key: str, errors: Errors) -> list[int]:
    out = []
    for i, entry in enumerate(entries):
        raw = entry.get("id") if isinstance(entry, dict) else entry
        value = positive_int(raw)
        if value is None:
            errors.add(f"{key}[{i}].id", f"expected an integer id, got {str(raw)[:40]!r}")
        else:
            out.append(value)
    return out


def parse_event(body: Any, spec: ReadSpec) -> tuple[str, Changes | None]:
    """(action, changes) of one webhook body; changes None for an action that is not handled.

    Raises :class:`~auditor.connectors.labelstudio.mapping.PayloadRejected` naming the
    first bad fields, or :class:`TooManyAnnotations`.
    """
    errors = Errors()
    if not isinstance(body, dict):
        errors.add("body", "expected a JSON object")
        errors.raise_if_any()
    action = body.get("action")
    if not isinstance(action, str) or not action or len(action) > 40:
        errors.add("action", "expected the event's action, e.g. ANNOTATION_CREATED")
        errors.raise_if_any()
    if action not in HANDLED:
        return action, None
    project = body.get("project")
    if isinstance(project, dict) and "id" in project and project["id"] != spec.project_id:
        errors.add("project.id", f"an event of project {str(project['id'])[:20]}, but this connector reads "
                   f"project {spec.project_id}")
        errors.raise_if_any()
    changes = Changes()
    if action in ("ANNOTATION_CREATED", "ANNOTATION_UPDATED"):
        changes.unique_ground_truth = True
        ann, task = body.get("annotation"), body.get("task")
        if ann is None:
            errors.add("annotation", "missing: turn on the webhook's 'Send payload'")
        else:
            a = parse_annotation(ann, task if isinstance(task, dict) else None, spec, "annotation", errors)
            if a is not None:
                changes.annotations.append(a)
    elif action == "ANNOTATIONS_CREATED":
        found = _list(body, ("annotation", "annotations"), errors)
        tasks: dict[int, tuple[int, dict]] = {}
        raw_tasks = body.get("task", body.get("tasks"))
        raw_tasks = [raw_tasks] if isinstance(raw_tasks, dict) else raw_tasks
        if isinstance(raw_tasks, list):
            if len(raw_tasks) > MAX_EVENT_ANNOTATIONS:
                raise TooManyAnnotations("task", len(raw_tasks))
            for k, t in enumerate(raw_tasks):
                tid = positive_int(t.get("id")) if isinstance(t, dict) else None
                if tid is not None:
                    tasks[tid] = (k, t)
        if found is not None:
            key, anns = found
            for i, ann in enumerate(anns):
                raw = ann.get("task") if isinstance(ann, dict) else None
                tid = positive_int(raw.get("id") if isinstance(raw, dict) else raw)
                k, task = tasks.get(tid, (None, raw if isinstance(raw, dict) else None))
                a = parse_annotation(ann, task, spec, f"{key}[{i}]", errors,
                                     task_where=f"task[{k}]" if k is not None else f"{key}[{i}].task")
                if a is not None:
                    changes.annotations.append(a)
    elif action == "ANNOTATIONS_DELETED":
        found = _list(body, ("annotations", "annotation"), errors)
        if found is not None:
            changes.deleted = _ids(found[1], found[0], errors)
    else:  # TASKS_DELETED
        found = _list(body, ("tasks",), errors)
        if found is not None:
            changes.deleted_tasks = _ids(found[1], found[0], errors)
    errors.raise_if_any()
    return action, changes
