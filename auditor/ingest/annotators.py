"""Annotators named by a batch: staged, checked (a vendor names no new expert) and created."""

from __future__ import annotations

from auditor.db.models import Tier
from auditor.ingest import batch
from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, RowError

__all__ = []


def _stage_annotators(b: batch.Batch, table: str, bad: str, *, annotator: str = "annotator_ext",
                      vendor: str = "vendor", tier: str = "tier") -> str | None:
    """One row per annotator of the batch; None when ``bad`` flags any row of the batch."""
    ann = b.sql.temp_table("annotator_ext TEXT, first_row BIGINT, vendor TEXT, vendor2 TEXT, tier TEXT, "
                           "tier2 TEXT, bad BIGINT")
    b.sql.run(f"INSERT INTO {ann} SELECT {annotator}, min(row_no), min({vendor}), max({vendor}), min({tier}), "
              f"max({tier}), sum({bad}) FROM {table} GROUP BY {annotator}")
    b.sql.analyze(ann)
    if b.sql.scalar(f"SELECT 1 FROM {ann} WHERE bad > 0 LIMIT 1") is not None:
        return None
    return ann


def _refuse_expert_tier(b: batch.Batch, ann: str) -> None:
    """A caller that may not set tiers (a vendor) names no annotator ``expert`` that is not one already.

    The expert tier makes an annotator part of every vendor's expert panel in the audit,
    so only admins and analysts decide it; naming ``crowd``, or ``expert`` for an
    annotator an admin registered as expert, changes nothing and is allowed.
    """
    if b.may_set_tier:
        return
    expert = Tier.EXPERT.value
    errors = [RowError(int(r), "tier", f"annotator {a!r}: a vendor cannot set the tier {expert!r} "
                                       f"(only admins and analysts register experts)")
              for a, r in b.sql.run(
                  f"SELECT x.annotator_ext, x.first_row FROM {ann} x WHERE (x.tier = :e OR x.tier2 = :e) "
                  f"AND NOT EXISTS (SELECT 1 FROM annotator a WHERE a.workspace_id = :w "
                  f"AND a.external_id = x.annotator_ext AND a.tier = :e) "
                  f"ORDER BY x.first_row LIMIT {MAX_REPORTED_ERRORS}",
                  {"e": expert, "w": b.dataset.workspace_id})]
    if errors:
        raise ImportRejected(errors, source=b.source.name)


def _merge_annotators(b: batch.Batch, ann: str) -> int:
    """Check the batch's annotators (one staged row each) against each other and the database; add new ones."""
    sql = b.sql
    w = b.dataset.workspace_id
    _refuse_expert_tier(b, ann)
    # Annotators (one staged row per distinct id), checked against each other and the database.
    errors = [RowError(int(r), "vendor" if v1 != v2 else "tier",
                       f"annotator {a!r} is given both {(v1 if v1 != v2 else t1)!r} and "
                       f"{(v2 if v1 != v2 else t2)!r} in this batch")
              for a, r, v1, v2, t1, t2 in sql.run(
                  f"SELECT annotator_ext, first_row, vendor, vendor2, tier, tier2 FROM {ann} "
                  f"WHERE vendor <> vendor2 OR tier <> tier2 ORDER BY first_row LIMIT {MAX_REPORTED_ERRORS}")]
    for a, r, old_v, new_v, old_t, new_t in sql.run(
            f"SELECT x.annotator_ext, x.first_row, a.vendor, x.vendor, a.tier, x.tier FROM {ann} x "
            f"JOIN annotator a ON a.workspace_id = :w AND a.external_id = x.annotator_ext "
            f"WHERE (x.vendor IS NOT NULL AND (a.vendor IS NULL OR a.vendor <> x.vendor)) "
            f"OR (x.tier IS NOT NULL AND a.tier <> x.tier) ORDER BY x.first_row LIMIT {MAX_REPORTED_ERRORS}",
            {"w": w}):
        if new_v is not None and old_v != new_v:
            errors.append(RowError(int(r), "vendor", f"annotator {a!r} is registered with vendor {old_v!r}, "
                                                     f"not {new_v!r}"))
        else:
            errors.append(RowError(int(r), "tier", f"annotator {a!r} is registered as {old_t!r}, not {new_t!r}"))
    if errors:
        raise ImportRejected(errors, source=b.source.name)
    return sql.run(
        f"INSERT INTO annotator (workspace_id, external_id, vendor, tier) "
        f"SELECT :w, annotator_ext, vendor, coalesce(tier, :crowd) FROM {ann} WHERE true "
        f"ON CONFLICT (workspace_id, external_id) DO NOTHING", {"w": w, "crowd": Tier.CROWD.value}).rowcount
