"""Importing gold labels (the truth of some items)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import IO

from sqlalchemy.orm import Session

from auditor.db.models import Dataset, ImportKind
from auditor.db.quality import STALE
from auditor.ingest import batch, formats
from auditor.ingest.datasets import DEFAULT_WORKSPACE
from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, RowError

__all__ = ["apply_gold", "import_gold", "stage_gold"]


# --- gold --------------------------------------------------------------------------


def import_gold(session: Session, dataset: str | Dataset, source: str | bytes | IO[bytes], *,
                workspace: str = DEFAULT_WORKSPACE, format: str | None = None,
                field_map: Mapping[str, str] | None = None, gold_source: str | None = None,
                idempotency_key: str | None = None, submitted_by: str | None = None,
                progress: Callable[[int], None] | None = None) -> batch.ImportResult:
    """Import gold labels (all or nothing). Repeated rows for one item must agree."""
    options = {"field_map": dict(field_map or {}), "gold_source": gold_source}
    b, prior = batch.prepare(session, dataset, source, ImportKind.GOLD, format, options, workspace=workspace,
                             idempotency_key=idempotency_key, submitted_by=submitted_by, allowed=("csv", "tsv", "jsonl"))
    if prior is not None:
        return prior
    labels = [str(lab) for lab in b.dataset.labels]

    def stage(tables: list[str]) -> tuple[str, int]:
        rows = formats.read_gold(b.source, b.fmt, labels, field_map=field_map, default_source=gold_source,
                                 progress=progress)
        table, n_rows = stage_gold(b, rows, tables)
        if n_rows == 0:
            raise ImportRejected([RowError(0, None, "the file holds no gold labels")], source=b.source.name)
        return table, n_rows

    return batch.run_batch(b, stage, lambda table, n_rows: _merge_gold(b, table, n_rows))


def stage_gold(b: batch.Batch, rows: Iterable[tuple], tables: list[str], *, field: str = "label",
               what: str = "gold label (or source)") -> tuple[str, int]:
    """Gold rows ``(row, item id, label code, source)`` in a temporary table (added to
    ``tables``), and how many; two rows giving one item different labels (or sources)
    reject the batch, the later row named with ``field``."""
    sql = b.sql
    table = sql.temp_table("row_no BIGINT, item_ext TEXT, label SMALLINT, source TEXT")
    tables.append(table)
    n_rows = sql.load_rows(table, ["row_no", "item_ext", "label", "source"], rows)
    sql.analyze(table)
    conflicts = sql.run(
        f"SELECT item_ext, min(row_no), max(row_no) FROM {table} GROUP BY item_ext "
        f"HAVING min(label) <> max(label) OR min(coalesce(source, '')) <> max(coalesce(source, '')) "
        f"ORDER BY 2 LIMIT {MAX_REPORTED_ERRORS}").all()
    if conflicts:
        raise ImportRejected([RowError(int(last), field, f"item {item!r} was given another {what} at row {first}")
                              for item, first, last in conflicts], source=b.source.name)
    return table, n_rows


def apply_gold(b: batch.Batch, table: str) -> tuple[int, int]:
    """Set the staged gold labels on the dataset's items (creating items not seen yet);
    returns (new items, items whose gold changed)."""
    sql = b.sql
    d = b.dataset.id
    new_items = sql.run(f"INSERT INTO item (dataset_id, external_id) SELECT DISTINCT :d, item_ext FROM {table} s "
                        f"WHERE true ON CONFLICT (dataset_id, external_id) DO NOTHING", {"d": d}).rowcount
    # Matched by id through the batch's own analysed map (Sql.key_map), never by a join of
    # the batch to ``item`` on its name: right after a bulk load the planner, without
    # statistics of ``item``, looped over the staged gold once per item (16k gold rows
    # after 1M annotations held the dataset's lock for 13 minutes).
    items = sql.key_map(table, "item_ext", "item", "dataset_id", d)
    gold = sql.temp_table("id BIGINT, label SMALLINT, source TEXT")
    sql.run(f"INSERT INTO {gold} (id, label, source) SELECT m.id, min(s.label), min(s.source) FROM {table} s "
            f"JOIN {items} m ON m.ext = s.item_ext GROUP BY m.id")
    sql.analyze(gold)
    changed = sql.run(
        f"UPDATE item SET gold_label = g.label, gold_source = g.source FROM {gold} g WHERE item.id = g.id "
        f"AND (item.gold_label {sql.distinct} g.label OR item.gold_source {sql.distinct} g.source)").rowcount
    return new_items, changed


def _merge_gold(b: batch.Batch, table: str, n_rows: int) -> batch.ImportResult:
    sql = b.sql
    batch.lock_for_write(b)
    new_items, changed = apply_gold(b, table)
    if changed == 0:
        raise batch.NoChange(f"all {n_rows} gold labels are already present; nothing changed")
    batch.record_batch(b, n_rows)
    # gold judges annotations already summed into the quality windows: the next audit rebuilds them
    sql.run(f"UPDATE quality_state SET data_version = {STALE} WHERE dataset_id = :d", {"d": b.dataset.id})
    n_items = int(sql.scalar(f"SELECT count(DISTINCT item_ext) FROM {table}"))
    stats = {"rows": n_rows, "items": n_items, "updated": changed, "unchanged": n_items - changed,
             "new_items": new_items}
    batch.finish(b, stats)
    return batch.ImportResult(
        status="imported", kind="gold", dataset=b.dataset.name, rows=n_rows, data_version=b.version,
        batch_id=b.batch_id, updated=changed, unchanged=n_items - changed, new_items=new_items,
        message=(f"batch {b.batch_id}: gold labels set on {changed} item(s), {n_items - changed} unchanged; "
                 f"{new_items} new item(s); data_version {b.version}"),
        details=stats,
    )
