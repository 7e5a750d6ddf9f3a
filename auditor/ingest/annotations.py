"""Importing annotations (every format): staged, checked, merged into the dataset in one step."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from auditor.db.models import Dataset, ImportKind, Tier
from auditor.db.partitions import (
    attach_annotation_partition,
    create_annotation_partition_table,
    has_annotation_partition,
)
from auditor.db.quality import STALE
from auditor.ingest import batch, formats
from auditor.ingest.annotators import _merge_annotators, _stage_annotators
from auditor.ingest.csv_load import _raw_csv_plan, _stage_raw_csv, _try_bulk_first_load
from auditor.ingest.datasets import DEFAULT_WORKSPACE
from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, RowError
from auditor.ingest.formats import (
    AnnotationDefaults,
)
from auditor.ingest.gold import _merge_gold, apply_gold, stage_gold

__all__ = ["existing_items_probe", "import_annotations"]


def _stage_rows(b: batch.Batch, rows: Iterable[tuple]) -> tuple[str, str, int, str]:
    sql = b.sql
    ts_type = "TIMESTAMPTZ" if sql.pg else "TEXT"
    table = sql.temp_table(f"row_no BIGINT, item_ext TEXT, annotator_ext TEXT, label SMALLINT, vendor TEXT, "
                           f"tier TEXT, ts {ts_type}")
    if not sql.pg:
        rows = ((r, i, a, lab, v, t, batch.sqlite_time(ts)) for r, i, a, lab, v, t, ts in rows)
    n = sql.load_rows(table, ["row_no", "item_ext", "annotator_ext", "label", "vendor", "tier", "ts"], rows)
    sql.analyze(table)
    ann = _stage_annotators(b, table, "0")
    return table, table, n, ann


def _duplicate_pairs(b: batch.Batch, src: str) -> list[RowError]:
    rows = b.sql.run(
        f"SELECT item_ext, annotator_ext, min(row_no), max(row_no) FROM {src} s "
        f"GROUP BY item_ext, annotator_ext HAVING count(*) > 1 ORDER BY 3 LIMIT {MAX_REPORTED_ERRORS}").all()
    return [RowError(int(last), "annotator_id",
                     f"annotator {ann!r} already labelled item {item!r} at row {first}; "
                     f"one label per (item, annotator) in a batch")
            for item, ann, first, last in rows]


def import_annotations(session: Session, dataset: str | Dataset, source: str | bytes | IO[bytes], *,
                       workspace: str = DEFAULT_WORKSPACE, format: str | None = None,
                       field_map: Mapping[str, str] | None = None, vendor: str | None = None,
                       tier: str | Tier | None = None, idempotency_key: str | None = None,
                       submitted_by: str | None = None, progress: Callable[[int], None] | None = None,
                       may_set_tier: bool = True) -> batch.ImportResult:
    """Import one batch of annotations (all or nothing); see the module docstring.

    ``vendor``/``tier`` apply to rows that carry none. A re-label of an existing
    (item, annotator) supersedes it and moves the old row to ``annotation_history``.
    With ``may_set_tier=False`` (a vendor's batch) no row may make an annotator
    ``expert``: such a batch is refused, naming the row and the ``tier`` field.
    """
    tier_value = Tier(tier).value if tier is not None else None
    defaults = AnnotationDefaults(vendor=vendor, tier=tier_value)
    options = {"field_map": dict(field_map or {}), "vendor": vendor, "tier": tier_value}
    b, prior = batch.prepare(session, dataset, source, ImportKind.ANNOTATIONS, format, options, workspace=workspace,
                             idempotency_key=idempotency_key, submitted_by=submitted_by,
                             allowed=formats.ANNOTATION_FORMATS)
    if prior is not None:
        return prior
    b.may_set_tier = may_set_tier
    labels = list(b.dataset.labels)
    sql = b.sql
    tables: list[str] = []
    report = formats.LabelStudioReport()
    try:
        with batch.savepoint(session):
            header = _raw_csv_plan(b, field_map)
            if header is not None:
                bulk_result = _try_bulk_first_load(b, header, labels, defaults, progress)
                if bulk_result is not None:
                    return bulk_result
                table, src, n_rows, ann = _stage_raw_csv(b, header, labels, defaults, progress)
            else:
                rows = formats.read_annotations(b.source, b.fmt, labels, field_map=field_map, defaults=defaults,
                                                progress=progress, report=report)
                table, src, n_rows, ann = _stage_rows(b, rows)
            tables.extend([table, ann])
            if report.gold:
                gold_table, _ = stage_gold(b, report.gold, tables, field="ground_truth",
                                           what="ground-truth label")
                if n_rows == 0:  # an export of ground truth only: a gold batch
                    return _with_skipped(_merge_gold(b, gold_table, len(report.gold)), report)
            if n_rows == 0:
                raise ImportRejected([RowError(0, None, "the file holds no annotations" + _skipped_note(report))],
                                     source=b.source.name)
            if not sql.pg:
                # SQLite's upsert would silently merge two rows of one pair; on PostgreSQL
                # the primary key catches them for free in a batch of new items (below).
                dups = _duplicate_pairs(b, src)
                if dups:
                    raise ImportRejected(dups, source=b.source.name)
            try:
                with batch.savepoint(session):
                    result = _merge_annotations(b, src, ann, n_rows, labels, tables)
                    if report.gold:
                        result = _with_gold(b, result, gold_table)
                    if report.cancelled or report.empty:
                        result = _with_skipped(result, report)
            except batch.NoChange as nc:
                if report.gold and nc.result is None:  # the votes are known; the ground truth may be new
                    try:
                        with batch.savepoint(session):
                            return _with_skipped(_merge_gold(b, gold_table, len(report.gold)), report)
                    except batch.NoChange:
                        pass
                return nc.result or batch.ImportResult(
                    status="unchanged", kind="annotations", dataset=b.dataset.name, rows=n_rows,
                    data_version=b.dataset.data_version, unchanged=n_rows, message=str(nc) + _skipped_note(report))
            except DBAPIError as exc:
                # PostgreSQL: a pair twice in the batch violates the primary key (or hits one
                # row twice in the upsert); name the rows. A value the raw path's pattern let
                # through but PostgreSQL refused (e.g. month 13) is a data exception (22xxx).
                dups = _duplicate_pairs(b, src) if sql.pg else []
                if dups:
                    raise ImportRejected(dups, source=b.source.name) from None
                code = getattr(exc.orig, "sqlstate", None) or ""
                if code.startswith("22"):
                    raise ImportRejected([RowError(0, "timestamp", str(exc.orig).splitlines()[0])],
                                         source=b.source.name) from None
                raise
            return result
    finally:
        if sql.conn.in_transaction() and not sql.pg:
            sql.drop(*tables)


def _skipped_note(report: formats.LabelStudioReport) -> str:
    parts = [f"{n} {what} annotation(s)" for n, what in ((report.cancelled, "cancelled"),
                                                         (report.empty, "empty (no choice)")) if n]
    return f" ({' and '.join(parts)} skipped)" if parts else ""


def _with_skipped(result: batch.ImportResult, report: formats.LabelStudioReport) -> batch.ImportResult:
    details = {**result.details, "skipped_cancelled": report.cancelled, "skipped_empty": report.empty}
    return dataclasses.replace(result, message=result.message + _skipped_note(report), details=details)


def _with_gold(b: batch.Batch, result: batch.ImportResult, table: str) -> batch.ImportResult:
    """The batch's ground truth as its items' gold labels, in the same batch and version."""
    sql = b.sql
    gold_only, changed = apply_gold(b, table)  # a task with ground truth and no vote still names an item
    details = {**result.details, "gold": changed, "new_items": result.new_items + gold_only}
    sql.run("UPDATE import_batch SET stats = :s WHERE id = :b", {"s": json.dumps(details), "b": b.batch_id})
    return dataclasses.replace(result, details=details, new_items=details["new_items"],
                               message=result.message + f"; {changed} gold label(s) from ground-truth annotations")


def existing_items_probe(src: str, *, pg: bool) -> str:
    """SQL: 1 if a row of the staged batch ``src`` names an item of dataset ``:d`` with id ``<= :m``.

    Driven from the batch, one index probe per row (a LATERAL with LIMIT is never turned
    into a join): linear whatever the statistics say. Written as ``item ... IN (batch)
    LIMIT 1``, the planner, without statistics of ``item``, walked the whole dataset and
    re-scanned the batch for each of its items: 10k new items took a minute, 40k ten.
    """
    if pg:
        return (f"SELECT 1 FROM {src} s CROSS JOIN LATERAL (SELECT 1 FROM item i WHERE i.dataset_id = :d "
                f"AND i.external_id = s.item_ext AND i.id <= :m LIMIT 1) hit LIMIT 1")
    return (f"SELECT 1 FROM {src} s WHERE EXISTS (SELECT 1 FROM item i WHERE i.dataset_id = :d "
            f"AND i.external_id = s.item_ext AND i.id <= :m) LIMIT 1")


def _put_items(b: batch.Batch, src: str, L: int, *, fresh_partition: bool):
    """Insert the batch's new items with their counts (items that had no annotation take the
    batch's counts). Returns whether the dataset had items, the largest item id before, the
    batch's items as a temporary table ext → id when the insert gave it (else None), and the
    number of new items."""
    sql = b.sql
    d = b.dataset.id
    # Items: new ones arrive with their counts; ids above max_before are this batch's.
    had_items = sql.scalar("SELECT 1 FROM item WHERE dataset_id = :d LIMIT 1", {"d": d}) is not None
    max_before = int(sql.scalar("SELECT coalesce(max(id), 0) FROM item"))
    counts = [f"sum(CASE WHEN label = {c} THEN 1 ELSE 0 END)" for c in range(L)]
    # Into a dataset without items every item is new: skip the speculative-insert work.
    # Items that exist but have no annotation yet (a new partition: predictions or gold
    # came first) take the batch's counts as they are: they had none.
    on_conflict = ""
    if had_items:
        on_conflict = " ON CONFLICT (dataset_id, external_id) DO " + (
            "UPDATE SET label_counts = excluded.label_counts" if fresh_partition else "NOTHING")
    # Ids in order of first appearance: the annotation rows then arrive (nearly) in key
    # order, so their primary-key index grows at its right edge without a sort.
    put_items = (f"INSERT INTO item (dataset_id, external_id, label_counts) "
                 f"SELECT :d, item_ext, {sql.vec(counts)} FROM {src} s WHERE true GROUP BY item_ext "
                 f"ORDER BY min(row_no){on_conflict}")
    items = None  # the batch's items as ids (temporary table ext → id)
    if sql.pg and (not had_items or fresh_partition):
        # Every item of the batch comes back from the insert (inserted or updated): that is the map.
        items = sql.temp_table("ext TEXT, id BIGINT")
        new_items = sql.run(f"WITH put AS ({put_items} RETURNING external_id, id) "
                            f"INSERT INTO {items} (ext, id) SELECT external_id, id FROM put", {"d": d}).rowcount
        sql.analyze(items)
    else:
        new_items = sql.run(put_items, {"d": d}).rowcount
    if had_items and fresh_partition:  # the upsert counted the updated items too
        new_items = int(sql.scalar("SELECT count(*) FROM item WHERE dataset_id = :d AND id > :m",
                                   {"d": d, "m": max_before}))
    return had_items, max_before, items, new_items


def _add_count_deltas(sql, old: str, L: int) -> None:
    """Existing items' label counts moved by the batch's new and changed pairs (table ``old``)."""
    deltas = [f"sum(CASE WHEN new_label = {c} THEN 1 ELSE 0 END) - "
              f"sum(CASE WHEN old_label = {c} THEN 1 ELSE 0 END) AS d{c}" for c in range(L)]
    new_vec = sql.vec([f"{sql.elem('item.label_counts', c)} + g.d{c}" for c in range(L)])
    sql.run(f"UPDATE item SET label_counts = {new_vec} FROM (SELECT item_id, {', '.join(deltas)} FROM {old} "
            f"WHERE old_label IS NULL OR old_label <> new_label GROUP BY item_id) g WHERE item.id = g.item_id")


def _merge_annotations(b: batch.Batch, src: str, ann: str, n_rows: int, labels: Sequence[str],
                       tables: list[str]) -> batch.ImportResult:
    sql = b.sql
    d = b.dataset.id
    w = b.dataset.workspace_id
    batch.lock_for_write(b)
    # Under the dataset's lock. A dataset's first annotations (its items may exist already:
    # predictions or gold first) go into a new table, not yet attached, whose key is then
    # built in one sorted pass and which is then attached as the dataset's partition, as
    # the bulk path does: the same cost as into an empty dataset, not a key probe per row.
    fresh_partition = sql.pg and not has_annotation_partition(sql.conn, d)
    target = create_annotation_partition_table(sql.conn, d) if fresh_partition else "annotation"
    L = len(labels)

    new_annotators = _merge_annotators(b, ann)

    had_items, max_before, items, new_items = _put_items(b, src, L, fresh_partition=fresh_partition)
    # Without a partition before this batch no pair can exist: every row is inserted (a pair
    # twice in the batch fails the new key, and the rows are named below).
    touches_old = (had_items and not fresh_partition
                   and sql.scalar(existing_items_probe(src, pg=sql.pg), {"d": d, "m": max_before}) is not None)

    if touches_old:
        # Rows on existing items are written by pair below (new pairs inserted, changed
        # ones updated), which would let two rows of one pair pass: checked here.
        dups = _duplicate_pairs(b, src)
        if dups:
            raise ImportRejected(dups, source=b.source.name)
    batch.record_batch(b, n_rows)
    params = {"d": d, "w": w, "b": b.batch_id, "v": b.version, "m": max_before}
    # The batch's items and annotators as ids, each through one index probe per distinct
    # name (Sql.key_map): the joins below then touch only analysed temporary tables, at the
    # same cost whether the items were new or already there (predictions first).
    if items is None:
        items = sql.key_map(src, "item_ext", "item", "dataset_id", d)
    annotators = sql.key_map(ann, "annotator_ext", "annotator", "workspace_id", w)
    resolve = f"FROM {src} s JOIN {items} i ON i.ext = s.item_ext JOIN {annotators} an ON an.ext = s.annotator_ext"
    n_old = n_old_new = n_relabel = 0
    if touches_old:
        ts_type = "TIMESTAMPTZ" if sql.pg else "TEXT"
        old = sql.temp_table(f"item_id BIGINT, annotator_id INTEGER, new_label SMALLINT, old_label SMALLINT, "
                             f"ts {ts_type}")
        tables.append(old)
        sql.run(f"INSERT INTO {old} SELECT i.id, an.id, s.label, a.label, s.ts {resolve} "
                f"LEFT JOIN annotation a ON a.dataset_id = :d AND a.item_id = i.id AND a.annotator_id = an.id "
                f"WHERE i.id <= :m", params)
        sql.analyze(old)
        n_old, n_old_new, n_relabel = (int(x or 0) for x in sql.run(
            f"SELECT count(*), sum(CASE WHEN old_label IS NULL THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN old_label <> new_label THEN 1 ELSE 0 END) FROM {old}").one())
        if n_relabel:
            sql.run(f"INSERT INTO annotation_history (dataset_id, item_id, annotator_id, label, annotated_at, "
                    f"batch_id, data_version, created_at, superseded_by_batch_id, superseded_version) "
                    f"SELECT a.dataset_id, a.item_id, a.annotator_id, a.label, a.annotated_at, a.batch_id, "
                    f"a.data_version, a.created_at, :b, :v FROM annotation a JOIN {old} o "
                    f"ON a.dataset_id = :d AND a.item_id = o.item_id AND a.annotator_id = o.annotator_id "
                    f"WHERE o.old_label <> o.new_label", params)
    inserted = n_rows - n_old + n_old_new
    if inserted == 0 and n_relabel == 0:
        raise batch.NoChange(f"all {n_rows} annotations are already present with the same labels; nothing changed")

    # Plain inserts and one update by key, never an upsert: under the dataset's lock each
    # pair's state is known from ``old`` (an upsert's speculative insertion made 300k labels
    # onto predicted items three times slower than the same labels into an empty dataset).
    insert = f"INSERT INTO {target} (dataset_id, item_id, annotator_id, label, annotated_at, batch_id, data_version) "
    if not touches_old:
        sql.run(f"{insert}SELECT :d, i.id, an.id, s.label, s.ts, :b, :v {resolve}", params)
    else:
        if new_items:
            sql.run(f"{insert}SELECT :d, i.id, an.id, s.label, s.ts, :b, :v {resolve} WHERE i.id > :m", params)
        if n_old_new:
            sql.run(f"{insert}SELECT :d, item_id, annotator_id, new_label, ts, :b, :v FROM {old} "
                    f"WHERE old_label IS NULL", params)
        if n_relabel:
            sql.run(f"UPDATE annotation SET label = o.new_label, annotated_at = o.ts, batch_id = :b, "
                    f"data_version = :v FROM {old} o WHERE annotation.dataset_id = :d "
                    f"AND annotation.item_id = o.item_id AND annotation.annotator_id = o.annotator_id "
                    f"AND o.old_label <> o.new_label", params)

    if fresh_partition:
        attach_annotation_partition(sql.conn, d)

    if n_relabel:  # a relabel replaces a label already summed into the quality windows: rebuild them
        sql.run(f"UPDATE quality_state SET data_version = {STALE} WHERE dataset_id = :d", params)
    if touches_old and (n_old_new or n_relabel):
        _add_count_deltas(sql, old, L)

    stats = {"rows": n_rows, "inserted": inserted, "relabeled": n_relabel,
             "unchanged": n_old - n_old_new - n_relabel, "new_items": new_items, "new_annotators": new_annotators}
    batch.finish(b, stats)
    return batch.ImportResult(
        status="imported", kind="annotations", dataset=b.dataset.name, rows=n_rows, data_version=b.version,
        batch_id=b.batch_id, inserted=inserted, updated=n_relabel, unchanged=stats["unchanged"],
        new_items=new_items, new_annotators=new_annotators,
        message=(f"batch {b.batch_id}: {inserted} new annotation(s), {n_relabel} re-label(s), "
                 f"{stats['unchanged']} unchanged; {new_items} new item(s), {new_annotators} new annotator(s); "
                 f"data_version {b.version}"),
        details=stats,
    )
