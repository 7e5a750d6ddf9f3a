"""The alerts page: the workspace's alerts, filtered, sorted and paged."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import case, or_, select
from sqlalchemy.orm import Session, aliased

from auditor.alerting.lifecycle import is_snoozed
from auditor.alerting.routing import ALERT_KINDS
from auditor.db import (
    Alert,
    AlertSeverity,
    Dataset,
    User,
)
from auditor.web.tables import Column, like_pattern, table_state
from auditor.web.timerange import TimeRange, time_range

ALERT_COLUMNS = (
    Column("created", "raised", first="desc"), Column("severity", "severity", first="desc"),
    Column("kind", "kind"), Column("subject", "subject"), Column("message", "message", sortable=False),
    Column("dataset", "dataset"), Column("run", "run", numeric=True, first="desc"),
    Column("assignee", "assignee"), Column("acknowledged", "status", first="desc"),
)
_SEVERITY_RANK = {AlertSeverity.INFO.value: 0, AlertSeverity.WARNING.value: 1, AlertSeverity.CRITICAL.value: 2}
ALERT_STATUSES = ("open", "snoozed", "acknowledged", "all")


def alerts_page(db: Session, workspace_id: int, args=None, *, user_id: int | None = None,
                period: TimeRange | None = None) -> dict:
    """The workspace's alerts, filtered (open / snoozed / acknowledged / all, severity, kind, dataset,
    assignee, text, raised within ``period``) and paged in SQL; newest first by default, open ones only
    (not acknowledged, not snoozed)."""
    period = period or time_range({}, default="all")
    datasets = db.execute(select(Dataset.id, Dataset.name).where(Dataset.workspace_id == workspace_id)
                          .order_by(Dataset.name)).all()
    table = table_state("alerts", ALERT_COLUMNS, default_sort="created", default_direction="desc", per_page=50,
                        args=args, query_label="text contains",
                        filters={"status": ALERT_STATUSES,
                                 "severity": tuple(s.value for s in AlertSeverity), "kind": ALERT_KINDS,
                                 "dataset_id": tuple(str(d.id) for d in datasets),
                                 "assigned": ("me", "nobody")})
    status = table.filters.get("status", "open")
    assignee, acker = aliased(User), aliased(User)
    stmt = (select(Alert, Dataset.name, assignee.email, acker.email)
            .outerjoin(Dataset, Alert.dataset_id == Dataset.id)
            .outerjoin(assignee, assignee.id == Alert.assigned_to_id)
            .outerjoin(acker, acker.id == Alert.acknowledged_by_id)
            .where(Alert.workspace_id == workspace_id, *period.where(Alert.created_at)))
    now = datetime.now(UTC)
    awake = or_(Alert.snoozed_until.is_(None), Alert.snoozed_until <= now)
    if status == "open":
        stmt = stmt.where(Alert.acknowledged_at.is_(None), awake)
    elif status == "snoozed":
        stmt = stmt.where(Alert.acknowledged_at.is_(None), Alert.snoozed_until > now)
    elif status == "acknowledged":
        stmt = stmt.where(Alert.acknowledged_at.is_not(None))
    if "severity" in table.filters:
        stmt = stmt.where(Alert.severity == AlertSeverity(table.filters["severity"]))
    if "kind" in table.filters:
        stmt = stmt.where(Alert.kind == table.filters["kind"])
    if "dataset_id" in table.filters:
        stmt = stmt.where(Alert.dataset_id == int(table.filters["dataset_id"]))
    if table.filters.get("assigned") == "me":
        stmt = stmt.where(Alert.assigned_to_id == user_id)
    elif table.filters.get("assigned") == "nobody":
        stmt = stmt.where(Alert.assigned_to_id.is_(None))
    if table.q:
        pattern = like_pattern(table.q)
        stmt = stmt.where(or_(Alert.message.ilike(pattern, escape="\\"), Alert.subject.ilike(pattern, escape="\\")))
    severity = case({s: r for s, r in _SEVERITY_RANK.items()}, value=Alert.severity, else_=0)
    stmt = table.sql_order(stmt, {"created": Alert.created_at, "severity": severity, "kind": Alert.kind,
                                  "subject": Alert.subject, "dataset": Dataset.name, "run": Alert.audit_run_id,
                                  "assignee": assignee.email, "acknowledged": Alert.acknowledged_at}, Alert.id)
    table.fetch(db, stmt)
    return {"table": table, "datasets": datasets, "status": status, "statuses": ALERT_STATUSES, "kinds": ALERT_KINDS,
            "severities": [s.value for s in AlertSeverity], "snoozed": lambda a: is_snoozed(a, now),
            "period": period}


# --- audit runs -----------------------------------------------------------------------------------
