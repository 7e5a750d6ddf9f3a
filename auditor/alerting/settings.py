"""Thresholds a workspace's admins may set for their workspace; the environment's values
(:class:`~auditor.config.WorkerSettings`) are the defaults.

They are the ones that decide what an alert says: the confidence a "certified" verdict
needs, which verdict and bound the badge uses, and the false-alarm level of the vendor and
annotator change alerts. The change detectors keep the level they started with (their
guarantee holds over all their looks at that level), so a new level applies to the
monitors of datasets whose monitoring starts after the change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from auditor.db.models import Dataset, WorkspaceSetting

__all__ = ["SETTINGS", "Setting", "audit_options", "effective", "parse", "store"]


@dataclass(frozen=True)
class Setting:
    """One workspace setting: ``field`` of :class:`~auditor.config.WorkerSettings` is its
    default, ``option`` the :class:`~auditor.audit.pipeline.AuditOptions` field it sets."""

    name: str
    label: str
    help: str
    field: str
    option: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def numeric(self) -> bool:
        return not self.choices


SETTINGS: tuple[Setting, ...] = (
    Setting("certify_threshold", "Confidence a certified verdict needs",
            "A release is certified when the confidence that its model beats the annotators reaches this.",
            "certify_threshold", "threshold", low=0.5, high=0.9999),
    Setting("certify_method", "Verdict of the badge and of the certification alerts",
            "anytime stays valid however often audits re-check a release; oms and hms are the paper's "
            "fixed-sample verdicts.", "certify_method", "method", choices=("anytime", "oms", "hms")),
    Setting("certify_bound", "Upper bound the verdict uses",
            "theoretical (U_t) or empirical (U_e).", "certify_bound", "bound", choices=("theoretical", "empirical")),
    Setting("quality_alpha", "Yearly false-alarm rate of vendor and annotator change alerts",
            "0.05: fewer than 1 in 20 year-long stationary streams alert (a dataset's vendors, or annotators, "
            "and its all-vendor level together, checked weekly). Smaller waits for stronger evidence; the "
            "vendor page says which drops the monitor can see at each volume.", "quality_alpha",
            "quality_alpha", low=0.0001, high=0.5),
)
_BY_NAME = {s.name: s for s in SETTINGS}


def parse(name: str, raw: Any) -> Any:
    """``raw`` as a value of setting ``name``, or ValueError saying what is allowed."""
    s = _BY_NAME.get(name)
    if s is None:
        raise ValueError(f"{name!r} is not a workspace setting; settings are {', '.join(_BY_NAME)}")
    if s.choices:
        if raw not in s.choices:
            raise ValueError(f"{name} must be one of {', '.join(s.choices)}; got {str(raw)[:40]!r}")
        return raw
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number; got {str(raw)[:40]!r}") from None
    if isinstance(raw, bool) or not math.isfinite(value) or not s.low <= value <= s.high:
        raise ValueError(f"{name} must be a number from {s.low:g} to {s.high:g}; got {str(raw)[:40]!r}")
    return value


def effective(session: Session, workspace_id: int, defaults) -> list[dict[str, Any]]:
    """Each setting's value for the workspace, its default, and who set it when (None: the default)."""
    rows = {r.name: r for r in session.scalars(select(WorkspaceSetting)
                                               .where(WorkspaceSetting.workspace_id == workspace_id))}
    out = []
    for s in SETTINGS:
        row, default = rows.get(s.name), getattr(defaults, s.field)
        value = default if row is None else row.value
        at = None if row is None else row.updated_at
        out.append({"name": s.name, "label": s.label, "help": s.help, "value": value, "default": default,
                    "overridden": row is not None, "choices": list(s.choices), "low": s.low, "high": s.high,
                    "updated_by": None if row is None else row.updated_by,
                    "updated_at": None if at is None else (at if at.tzinfo else at.replace(tzinfo=UTC))})
    return out


def store(session: Session, workspace_id: int, values: Mapping[str, Any], *, actor: str,
          actor_id: int | None) -> list[str]:
    """Set (a value) or clear (None: back to the default) the given settings, all or none;
    returns the names changed. Raises ValueError naming the first bad one."""
    parsed = {name: None if raw is None else parse(name, raw) for name, raw in values.items()}
    changed = []
    for name, value in parsed.items():
        row = session.get(WorkspaceSetting, (workspace_id, name))
        if value is None:
            if row is not None:
                session.execute(delete(WorkspaceSetting).where(WorkspaceSetting.workspace_id == workspace_id,
                                                               WorkspaceSetting.name == name))
                changed.append(name)
            continue
        if row is None:
            session.add(WorkspaceSetting(workspace_id=workspace_id, name=name, value=value, updated_by=actor[:320],
                                         updated_by_id=actor_id))
        elif row.value != value:
            row.value, row.updated_by, row.updated_by_id = value, actor[:320], actor_id
            row.updated_at = datetime.now(UTC)
        else:
            continue
        changed.append(name)
    session.flush()
    return changed


def audit_options(session: Session, dataset_id: int, options):
    """``options`` with the dataset's workspace's own values of the settings."""
    rows = session.execute(select(WorkspaceSetting.name, WorkspaceSetting.value)
                           .join(Dataset, Dataset.workspace_id == WorkspaceSetting.workspace_id)
                           .where(Dataset.id == dataset_id)).all()
    changes = {}
    for name, value in rows:
        s = _BY_NAME.get(name)
        if s is not None:
            try:
                changes[s.option] = parse(name, value)
            except ValueError:  # a value stored by an older version with other bounds: the default
                continue
    return replace(options, **changes) if changes else options
