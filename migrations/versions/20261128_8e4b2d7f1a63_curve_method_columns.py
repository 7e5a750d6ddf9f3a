"""How each stored curve was computed, and the Monte Carlo errors of equivalences read off
drawn curves, as columns of their own.

Until now a survey equivalence's Monte Carlo error and the notes of its interval ends
("> 9" when an end lies beyond the curve) were appended to the curve's ``points`` as
entries without a ``k``, and a vendor's expert-equivalence error sat only in its report's
details. This moves them into ``power_curve.method``, ``equivalence_mc_error``,
``equivalence_low_note``, ``equivalence_high_note`` and ``vendor_report.
expert_equivalence_method``, ``expert_equivalence_mc_error``, and leaves ``points``
holding points only. The downgrade puts the entries back.

Revision ID: 8e4b2d7f1a63
Revises: 5c1e9a7d3b20
Create Date: 2026-11-28 09:00:00
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "8e4b2d7f1a63"
down_revision: str | Sequence[str] | None = "5c1e9a7d3b20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 2_000
_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

_curves = sa.table(
    "power_curve", sa.column("id", sa.Integer), sa.column("points", _JSON), sa.column("equivalence", sa.Double),
    sa.column("method", sa.String), sa.column("equivalence_mc_error", sa.Double),
    sa.column("equivalence_low_note", sa.String), sa.column("equivalence_high_note", sa.String))
_reports = sa.table(
    "vendor_report", sa.column("id", sa.Integer), sa.column("expert_equivalence", sa.Double),
    sa.column("details", _JSON), sa.column("expert_equivalence_method", sa.String),
    sa.column("expert_equivalence_mc_error", sa.Double))


def _doc(value):
    return json.loads(value) if isinstance(value, str) else value


def _batches(conn, table, *columns):
    """The table's rows in batches of ``_BATCH``, by id (memory bounded by the batch)."""
    last = 0
    while True:
        rows = conn.execute(sa.select(table.c.id, *columns).where(table.c.id > last)
                            .order_by(table.c.id).limit(_BATCH)).all()
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def _curve_columns(points) -> dict:
    """The columns of one stored curve, from its points and the entries after them."""
    points = _doc(points) or []
    kept = [p for p in points if isinstance(p, dict) and "k" in p]
    out = {"points": kept, "method": "exact", "equivalence_mc_error": None,
           "equivalence_low_note": None, "equivalence_high_note": None}
    if any("mc_error" in p for p in kept):
        out["method"] = "monte_carlo"
    for p in points:
        if not isinstance(p, dict) or "k" in p:
            continue
        if "equivalence_mc_error" in p:
            out["method"] = "monte_carlo"
            x = p["equivalence_mc_error"]
            out["equivalence_mc_error"] = float(x) if isinstance(x, int | float) else None
        notes = p.get("interval_notes")
        if isinstance(notes, dict):
            out["equivalence_low_note"] = notes.get("low")
            out["equivalence_high_note"] = notes.get("high")
    out["changed"] = len(kept) != len(points)
    return out


def upgrade() -> None:
    with op.batch_alter_table("power_curve") as batch:
        batch.add_column(sa.Column("equivalence_low_note", sa.String(16), nullable=True))
        batch.add_column(sa.Column("equivalence_high_note", sa.String(16), nullable=True))
        batch.add_column(sa.Column("method", sa.String(16), nullable=True))
        batch.add_column(sa.Column("equivalence_mc_error", sa.Double(), nullable=True))
    with op.batch_alter_table("vendor_report") as batch:
        batch.add_column(sa.Column("expert_equivalence_method", sa.String(16), nullable=True))
        batch.add_column(sa.Column("expert_equivalence_mc_error", sa.Double(), nullable=True))
    conn = op.get_bind()

    by_id = _curves.c.id == sa.bindparam("b_id")
    for rows in _batches(conn, _curves, _curves.c.points):
        rewritten, drawn = [], []
        for curve_id, points in rows:
            cols = _curve_columns(points)
            if cols.pop("changed"):
                rewritten.append({"b_id": curve_id, **cols})
            elif cols["method"] == "monte_carlo":
                drawn.append({"b_id": curve_id})
        if rewritten:
            conn.execute(_curves.update().where(by_id), rewritten)
        if drawn:
            conn.execute(_curves.update().where(by_id).values(method="monte_carlo"), drawn)
    conn.execute(_curves.update().where(_curves.c.method.is_(None)).values(method="exact"))

    updates = []
    for rows in _batches(conn, _reports, _reports.c.expert_equivalence, _reports.c.details):
        for report_id, value, details in rows:
            if value is None:
                continue
            detail = (_doc(details) or {}).get("expert_equivalence") or []
            detail = [d for d in detail if isinstance(d, dict)]
            if any("mc_error" in d for d in detail):
                last = detail[-1] if detail else {}
                x = last.get("mc_error", 0.0)
                updates.append({"b_id": report_id, "expert_equivalence_method": "monte_carlo",
                                "expert_equivalence_mc_error": float(x) if isinstance(x, int | float) else None})
            else:
                updates.append({"b_id": report_id, "expert_equivalence_method": "exact",
                                "expert_equivalence_mc_error": None})
        if updates:
            conn.execute(_reports.update().where(_reports.c.id == sa.bindparam("b_id")), updates)
            updates = []


def downgrade() -> None:
    conn = op.get_bind()
    updates = []
    for rows in _batches(conn, _curves, _curves.c.points, _curves.c.equivalence, _curves.c.method,
                         _curves.c.equivalence_mc_error, _curves.c.equivalence_low_note,
                         _curves.c.equivalence_high_note):
        for curve_id, points, value, method, mc, low, high in rows:
            extra = []
            if low is not None or high is not None:
                extra.append({"interval_notes": {"low": low, "high": high}})
            if method == "monte_carlo" and value is not None:
                extra.append({"equivalence_mc_error": mc})
            if extra:
                updates.append({"b_id": curve_id, "points": [*(_doc(points) or []), *extra]})
        if updates:
            conn.execute(_curves.update().where(_curves.c.id == sa.bindparam("b_id")), updates)
            updates = []
    with op.batch_alter_table("vendor_report") as batch:
        batch.drop_column("expert_equivalence_mc_error")
        batch.drop_column("expert_equivalence_method")
    with op.batch_alter_table("power_curve") as batch:
        batch.drop_column("equivalence_mc_error")
        batch.drop_column("method")
        batch.drop_column("equivalence_high_note")
        batch.drop_column("equivalence_low_note")
