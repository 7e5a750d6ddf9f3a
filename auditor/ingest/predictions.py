"""Importing a model release's predictions on a dataset."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import IO, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.db.models import Dataset, ImportKind, Model, Release
from auditor.ingest import batch, formats
from auditor.ingest.datasets import DEFAULT_WORKSPACE
from auditor.ingest.errors import MAX_REPORTED_ERRORS, ImportRejected, RowError

__all__ = ["import_predictions"]


# --- predictions ------------------------------------------------------------------


def _release(session: Session, workspace_id: int, model: str, version: str, *, released_at: datetime | None,
             alias: str | None, tags: Any) -> Release:
    m = session.scalar(select(Model).where(Model.workspace_id == workspace_id, Model.name == model))
    if m is None:
        m = Model(workspace_id=workspace_id, name=model)
        session.add(m)
        session.flush()
    rel = session.scalar(select(Release).where(Release.model_id == m.id, Release.version == version))
    if rel is None:
        rel = Release(model_id=m.id, version=version, released_at=released_at, alias=alias, tags=tags)
        session.add(rel)
        session.flush()
    else:
        for attr, value in (("released_at", released_at), ("alias", alias), ("tags", tags)):
            if value is not None:
                setattr(rel, attr, value)
        session.flush()
    return rel


def import_predictions(session: Session, dataset: str | Dataset, source: str | bytes | IO[bytes], *, model: str,
                       release: str, workspace: str = DEFAULT_WORKSPACE, format: str | None = None,
                       field_map: Mapping[str, str] | None = None, released_at: datetime | None = None,
                       alias: str | None = None, tags: Any = None, idempotency_key: str | None = None,
                       submitted_by: str | None = None, progress: Callable[[int], None] | None = None
                       ) -> batch.ImportResult:
    """Import one release's predictions (all or nothing); model and release are created if new."""
    options = {"field_map": dict(field_map or {}), "model": model, "release": release}
    b, prior = batch.prepare(session, dataset, source, ImportKind.PREDICTIONS, format, options, workspace=workspace,
                             idempotency_key=idempotency_key, submitted_by=submitted_by,
                             allowed=formats.PREDICTION_FORMATS)
    if prior is not None:
        return prior
    labels = [str(lab) for lab in b.dataset.labels]
    sql = b.sql

    def stage(tables: list[str]) -> tuple[str, int]:
        rows = formats.read_predictions(b.source, b.fmt, labels, field_map=field_map, release=release,
                                        progress=progress)
        table = sql.temp_table(f"row_no BIGINT, item_ext TEXT, label SMALLINT, "
                               f"probs {'DOUBLE PRECISION[]' if sql.pg else 'TEXT'}")
        tables.append(table)
        if not sql.pg:
            rows = ((r, i, lab, None if p is None else json.dumps(p)) for r, i, lab, p in rows)
        n_rows = sql.load_rows(table, ["row_no", "item_ext", "label", "probs"], rows)
        sql.analyze(table)
        if n_rows == 0:
            raise ImportRejected([RowError(0, None, "the file holds no predictions")], source=b.source.name)
        dups = sql.run(f"SELECT item_ext, min(row_no), max(row_no) FROM {table} GROUP BY item_ext "
                       f"HAVING count(*) > 1 ORDER BY 2 LIMIT {MAX_REPORTED_ERRORS}").all()
        if dups:
            raise ImportRejected([RowError(int(last), "item_id", f"item {item!r} already has a prediction at "
                                                                 f"row {first} of this batch")
                                  for item, first, last in dups], source=b.source.name)
        return table, n_rows

    return batch.run_batch(b, stage, lambda table, n_rows: _merge_predictions(b, table, n_rows, model, release,
                                                                         released_at, alias, tags))


def _merge_predictions(b: batch.Batch, table: str, n_rows: int, model: str, release: str,
                       released_at: datetime | None, alias: str | None, tags: Any) -> batch.ImportResult:
    sql = b.sql
    d = b.dataset.id
    batch.lock_for_write(b)
    rel = _release(b.session, b.dataset.workspace_id, model, release, released_at=released_at, alias=alias, tags=tags)
    b.release_id = rel.id
    new_items = sql.run(f"INSERT INTO item (dataset_id, external_id) SELECT DISTINCT :d, item_ext FROM {table} s "
                        f"WHERE true ON CONFLICT (dataset_id, external_id) DO NOTHING", {"d": d}).rowcount
    batch.record_batch(b, n_rows)
    params = {"d": d, "r": rel.id, "b": b.batch_id, "v": b.version}
    items = sql.key_map(table, "item_ext", "item", "dataset_id", d)  # the batch's items as ids, probed once each
    resolve = f"FROM {table} s JOIN {items} i ON i.ext = s.item_ext"
    existing = int(sql.scalar(f"SELECT count(*) {resolve} JOIN prediction p ON p.release_id = :r "
                              f"AND p.item_id = i.id", params))
    written = sql.run(
        f"INSERT INTO prediction (release_id, item_id, dataset_id, label, probabilities, batch_id, data_version) "
        f"SELECT :r, i.id, :d, s.label, s.probs, :b, :v {resolve} WHERE true "
        f"ON CONFLICT (release_id, item_id) DO UPDATE SET label = excluded.label, "
        f"probabilities = excluded.probabilities, batch_id = excluded.batch_id, "
        f"data_version = excluded.data_version WHERE prediction.label {sql.distinct} excluded.label "
        f"OR prediction.probabilities {sql.distinct} excluded.probabilities", params).rowcount
    inserted = n_rows - existing
    updated = written - inserted
    if written == 0:
        raise batch.NoChange(f"all {n_rows} predictions of {model} {release} are already present; nothing changed")
    stats = {"rows": n_rows, "inserted": inserted, "updated": updated, "unchanged": existing - updated,
             "new_items": new_items, "release_id": rel.id}
    batch.finish(b, stats)
    return batch.ImportResult(
        status="imported", kind="predictions", dataset=b.dataset.name, rows=n_rows, data_version=b.version,
        batch_id=b.batch_id, inserted=inserted, updated=updated, unchanged=existing - updated, new_items=new_items,
        message=(f"batch {b.batch_id}: {model} {release}: {inserted} new prediction(s), {updated} updated, "
                 f"{existing - updated} unchanged; {new_items} new item(s); data_version {b.version}"),
        details=stats,
    )
