"""From Label Studio's JSON to Auditor's terms, for webhooks and the pull sync alike.

One Label Studio annotation becomes one :class:`LSAnnotation`: its task's item (the task
data's ``item_field``, else the task id), its annotator (``completed_by``, an id or a
user object: the same user id either way), and what it says: a label (``vote``), the
item's gold label (``gold``, a ``ground_truth`` annotation), or nothing (``cancelled``,
``empty``: skipped and counted). Every check names the field it failed on, with its path
in the payload (``annotation[2].result[0].value.choices``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from auditor.ingest.labelstudio import CANCELLED, EMPTY, GOLD, VOTE, read_annotation
from auditor.timestamps import out_of_range

__all__ = [
    "CANCELLED",
    "DELETED",
    "EMPTY",
    "GOLD",
    "MAX_ID_LENGTH",
    "VOTE",
    "Errors",
    "FieldError",
    "LSAnnotation",
    "PayloadRejected",
    "ReadSpec",
    "VendorMap",
    "choice_labels",
    "parse_annotation",
    "parse_time",
]

MAX_ID_LENGTH = 512
MAX_REPORTED = 20

DELETED = "deleted"
GOLD_SOURCE = "label-studio ground truth"
"""``item.gold_source`` of a gold label set from a ground-truth annotation."""


@dataclass(frozen=True)
class FieldError:
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class PayloadRejected(Exception):
    """A payload (or a page of the pull) that cannot be applied; nothing of it was written."""

    def __init__(self, errors: Sequence[FieldError]):
        self.errors = list(errors)[:MAX_REPORTED]
        more = f" (and {len(errors) - MAX_REPORTED} more)" if len(errors) > MAX_REPORTED else ""
        super().__init__("; ".join(str(e) for e in self.errors) + more)

    @property
    def field(self) -> str | None:
        return self.errors[0].field if self.errors else None


@dataclass
class Errors:
    items: list[FieldError] = field(default_factory=list)

    def add(self, where: str, reason: str) -> None:
        self.items.append(FieldError(where, reason))

    def raise_if_any(self) -> None:
        if self.items:
            raise PayloadRejected(self.items)


@dataclass(frozen=True)
class ReadSpec:
    """How a connector reads annotations: the dataset's labels, the Label Studio control
    (``from_name``; any single Choices control when None), the choice → label map, the
    task data field holding the item id, the project, and the annotators' namespace."""

    labels: Sequence[str]
    project_id: int
    item_field: str = "item_id"
    from_name: str | None = None
    label_map: Mapping[str, str] | None = None
    namespace: str = ""

    def code(self, choice: str) -> int | None:
        label = (self.label_map or {}).get(choice, choice) if self.label_map else choice
        try:
            return list(self.labels).index(label)
        except ValueError:
            return None

    def annotator(self, user_id: int) -> str:
        return f"{self.namespace}/{user_id}" if self.namespace else str(user_id)


@dataclass(frozen=True)
class LSAnnotation:
    ls_id: int
    task_id: int
    item_ext: str
    ls_user_id: int
    annotator_ext: str
    email: str | None
    state: str
    label: int | None
    updated_at: datetime

    def fingerprint(self) -> tuple:
        return (self.task_id, self.item_ext, self.annotator_ext, self.state, self.label)


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time (Label Studio writes ``...Z``) as an aware datetime; None if it is not one."""
    if isinstance(value, datetime):
        parsed = value
    elif not isinstance(value, str) or not value or len(value) > 64:
        return None
    else:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**63:
        return None
    return value


def _item_id(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value).strip()
    if not text or len(text) > MAX_ID_LENGTH or "\x00" in text:
        return None
    return text


def _email(value: Any) -> str | None:
    if isinstance(value, str) and "@" in value and len(value) <= 320 and "\x00" not in value:
        return value.strip().lower()
    return None


def task_item(task: Mapping[str, Any], mapping: ReadSpec, where: str, errors: Errors) -> str | None:
    """The item id of a task: ``data[item_field]``, else the task's id."""
    data = task.get("data")
    raw = data.get(mapping.item_field) if isinstance(data, dict) else None
    if raw is not None:
        item = _item_id(raw)
        if item is None:
            errors.add(f"{where}.data.{mapping.item_field}",
                       f"expected a non-empty id of at most {MAX_ID_LENGTH} characters, got {str(raw)[:60]!r}")
        return item
    task_id = positive_int(task.get("id"))
    if task_id is None:
        errors.add(f"{where}.id", "the task has neither data."
                   f"{mapping.item_field} nor an integer id")
        return None
    return str(task_id)


def _user(value: Any, where: str, errors: Errors) -> tuple[int | None, str | None]:
    """``completed_by``: a user id, or a user object with an ``id`` (and maybe an ``email``)."""
    if isinstance(value, dict):
        uid = positive_int(value.get("id"))
        if uid is None:
            errors.add(f"{where}.completed_by.id", "expected the annotator's integer user id")
            return None, None
        return uid, _email(value.get("email"))
    uid = positive_int(value)
    if uid is None:
        errors.add(f"{where}.completed_by", f"expected a user id or a user object, got {str(value)[:60]!r}")
    return uid, None


def parse_annotation(ann: Any, task: Mapping[str, Any] | None, mapping: ReadSpec, where: str,
                     errors: Errors, *, task_where: str = "task") -> LSAnnotation | None:
    """One Label Studio annotation (a webhook's or an export's) as an :class:`LSAnnotation`,
    or None with the reasons added to ``errors``. ``task`` is its task (for the item id),
    found at ``task_where`` in the payload."""
    if not isinstance(ann, dict):
        errors.add(where, "expected an annotation object")
        return None
    n_before = len(errors.items)
    ls_id = positive_int(ann.get("id"))
    if ls_id is None:
        errors.add(f"{where}.id", "expected the annotation's integer id")
    raw_task = ann.get("task")
    task_id = positive_int(raw_task.get("id") if isinstance(raw_task, dict) else raw_task)
    if task_id is None and task is not None:
        task_id = positive_int(task.get("id"))
    if task_id is None:
        errors.add(f"{where}.task", "expected the annotation's task id")
    project = ann.get("project")
    if project is not None and project != mapping.project_id:
        errors.add(f"{where}.project", f"annotation of project {str(project)[:20]}, but this connector reads "
                   f"project {mapping.project_id}")
    uid, email = _user(ann.get("completed_by"), where, errors)
    updated = parse_time(ann.get("updated_at")) or parse_time(ann.get("created_at"))
    if updated is None:
        errors.add(f"{where}.updated_at", "expected an ISO 8601 time (updated_at or created_at)")
    item = None
    if task is not None:
        item = task_item(task, mapping, task_where, errors)
    elif not errors.items[n_before:]:
        errors.add(task_where, f"missing: the payload holds no task {task_id} for this annotation")
    content = read_annotation(ann, from_name=mapping.from_name)
    for problem in content.problems:
        errors.add(f"{where}.{problem.where}", problem.reason)
    state, code = content.state, None
    if content.choice is not None:
        code = mapping.code(content.choice)
        if code is None:
            target = (mapping.label_map or {}).get(content.choice)
            shown = f"{content.choice!r} (mapped to {target!r})" if target is not None else repr(content.choice)
            errors.add(f"{where}.{content.choice_at}", f"{shown} is not one of the dataset's labels "
                       f"{list(mapping.labels)}")
    far = out_of_range(updated) if updated is not None else None
    if far is not None:
        # A stamp far in the future would also make every later, real update look older.
        errors.add(f"{where}.updated_at" if parse_time(ann.get("updated_at")) else f"{where}.created_at", far)
    if errors.items[n_before:]:
        return None
    assert ls_id is not None and task_id is not None and uid is not None and updated is not None
    assert item is not None
    return LSAnnotation(ls_id, task_id, item, uid, mapping.annotator(uid), email, state, code, updated)


def choice_labels(parsed_label_config: Any, from_name: str | None) -> tuple[str, list[str]]:
    """The Choices control of a project (``parsed_label_config`` of Label Studio's API) and its
    values: the one named ``from_name``, else the project's only Choices control.
    Raises ValueError saying what is wrong."""
    if not isinstance(parsed_label_config, dict):
        raise ValueError("the project has no labeling configuration")
    controls = {name: spec for name, spec in parsed_label_config.items()
                if isinstance(spec, dict) and str(spec.get("type", "")).lower() == "choices"}
    if from_name is not None:
        if from_name not in controls:
            raise ValueError(f"the project has no Choices control named {from_name!r} "
                             f"(its Choices controls: {sorted(controls)})")
        name = from_name
    elif len(controls) == 1:
        name = next(iter(controls))
    elif not controls:
        raise ValueError("the project's labeling configuration has no Choices control; Auditor reads "
                         "single-choice classification")
    else:
        raise ValueError(f"the project has several Choices controls {sorted(controls)}: choose one with --from-name")
    labels = [str(v) for v in controls[name].get("labels") or []]
    return name, labels


# --- vendors -----------------------------------------------------------------------


@dataclass(frozen=True)
class VendorMap:
    """An annotator's vendor: by Label Studio user id or email (``users``), else by the
    email's domain (``domains``; a domain also matches its subdomains), else ``default``.

    Without the user's email only ``users`` by id can answer (and ``default`` when no rule
    needs an email); the connector then leaves the vendor open until it learns the email.
    """

    users: Mapping[str, str] = field(default_factory=dict)
    domains: Mapping[str, str] = field(default_factory=dict)
    default: str | None = None

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> VendorMap:
        value = value or {}
        return cls({str(k).lower(): str(v) for k, v in (value.get("users") or {}).items()},
                   {str(k).lower().lstrip("@"): str(v) for k, v in (value.get("domains") or {}).items()},
                   value.get("default"))

    def to_json(self) -> dict[str, Any]:
        return {"users": dict(self.users), "domains": dict(self.domains), "default": self.default}

    @property
    def needs_email(self) -> bool:
        return bool(self.domains) or any("@" in k for k in self.users)

    def vendor(self, user_id: int, email: str | None) -> str | None:
        by_id = self.users.get(str(user_id))
        if by_id is not None:
            return by_id
        if email is None:
            return None if self.needs_email else self.default
        email = email.lower()
        if email in self.users:
            return self.users[email]
        domain = email.rsplit("@", 1)[-1]
        while domain:
            if domain in self.domains:
                return self.domains[domain]
            domain = domain.partition(".")[2]
        return self.default
