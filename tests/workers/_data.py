"""Writing test data the way an accepted import does: rows, per-item counts, the
data_version bump and an outbox row, in one transaction; then the audit request."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence

import numpy as np
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from auditor.db import WRITE_OPTIONS, session_scope
from auditor.db.models import (
    Annotation,
    AnnotationHistory,
    Annotator,
    AuditOutbox,
    Dataset,
    ImportBatch,
    ImportKind,
    Item,
    Model,
    Prediction,
    Release,
    Workspace,
)


def make_dataset(factory: sessionmaker[Session], name: str, labels: Sequence[str]) -> int:
    with session_scope(factory) as s:
        ws = Workspace(slug=f"ws-{name}-{uuid.uuid4().hex[:8]}", name=name)
        s.add(ws)
        s.flush()
        ds = Dataset(workspace_id=ws.id, name=name, labels=list(labels), data_version=0)
        s.add(ds)
        s.flush()
        return ds.id


def _begin(s: Session, dataset_id: int, kind: ImportKind, n_rows: int, key: str,
           release_id: int | None = None) -> tuple[Dataset, ImportBatch]:
    if not s.get_transaction() or not s.get_transaction().connections:
        s.connection(execution_options=WRITE_OPTIONS)
    ds = s.execute(select(Dataset).where(Dataset.id == dataset_id).with_for_update()).scalar_one()
    version = ds.data_version + 1
    s.execute(update(Dataset).where(Dataset.id == dataset_id).values(data_version=version))
    batch = ImportBatch(workspace_id=ds.workspace_id, dataset_id=dataset_id, kind=kind, format="test",
                        row_count=n_rows, checksum=hashlib.sha256(key.encode()).hexdigest(),
                        data_version=version, release_id=release_id)
    s.add(batch)
    s.flush()
    s.add(AuditOutbox(dataset_id=dataset_id, data_version=version, batch_id=batch.id, reason=kind.value))
    return ds, batch


def import_annotations(factory: sessionmaker[Session], dataset_id: int, rows: Sequence[tuple[str, str, int]],
                       *, vendors: dict[str, str] | None = None, tiers: dict[str, str] | None = None,
                       gold: dict[str, int] | None = None, key: str | None = None) -> int:
    """(item, annotator, label code) rows; returns the new data_version."""
    vendors, tiers, gold = vendors or {}, tiers or {}, gold or {}
    with session_scope(factory) as s:
        ds, batch = _begin(s, dataset_id, ImportKind.ANNOTATIONS, len(rows), key or repr(rows))
        L = len(ds.labels)
        items = {i.external_id: i for i in s.execute(select(Item).where(Item.dataset_id == dataset_id)).scalars()}
        anns = {a.external_id: a for a in s.execute(
            select(Annotator).where(Annotator.workspace_id == ds.workspace_id)).scalars()}
        for item, ann, _ in rows:
            if item not in items:
                items[item] = Item(dataset_id=dataset_id, external_id=item, label_counts=[0] * L,
                                   gold_label=gold.get(item))
                s.add(items[item])
            if ann not in anns:
                anns[ann] = Annotator(workspace_id=ds.workspace_id, external_id=ann, vendor=vendors.get(ann),
                                      tier=tiers.get(ann, "crowd"))
                s.add(anns[ann])
        s.flush()
        counts = {k: list(v.label_counts or [0] * L) for k, v in items.items()}
        existing = {(r.item_id, r.annotator_id): r for r in s.execute(
            select(Annotation).where(Annotation.dataset_id == dataset_id,
                                     Annotation.annotator_id.in_({anns[a].id for _, a, _ in rows}))).scalars()}
        for i, a, lab in rows:
            old = existing.get((items[i].id, anns[a].id))
            if old is None:
                s.add(Annotation(dataset_id=dataset_id, item_id=items[i].id, annotator_id=anns[a].id, label=int(lab),
                                 batch_id=batch.id, data_version=batch.data_version))
            else:  # a re-label: the old row goes to the history, the count moves
                s.add(AnnotationHistory(dataset_id=dataset_id, item_id=old.item_id, annotator_id=old.annotator_id,
                                        label=old.label, batch_id=old.batch_id, data_version=old.data_version,
                                        created_at=old.created_at, superseded_by_batch_id=batch.id,
                                        superseded_version=batch.data_version))
                counts[i][old.label] -= 1
                old.label, old.batch_id, old.data_version = int(lab), batch.id, batch.data_version
            counts[i][int(lab)] += 1
        for k in {i for i, _, _ in rows}:
            items[k].label_counts = counts[k]
        return batch.data_version


def import_predictions(factory: sessionmaker[Session], dataset_id: int, model: str, version: str,
                       labels: dict[str, int] | None = None, probabilities: dict[str, Sequence[float]] | None = None,
                       key: str | None = None) -> int:
    """A release's predictions on existing items; returns the new data_version."""
    labels = labels or {}
    probabilities = probabilities or {}
    names = sorted(set(labels) | set(probabilities))
    with session_scope(factory) as s:
        s.connection(execution_options=WRITE_OPTIONS)
        ds = s.get(Dataset, dataset_id)
        m = s.execute(select(Model).where(Model.workspace_id == ds.workspace_id, Model.name == model)).scalar_one_or_none()
        if m is None:
            m = Model(workspace_id=ds.workspace_id, name=model)
            s.add(m)
            s.flush()
        rel = Release(model_id=m.id, version=version)
        s.add(rel)
        s.flush()
        _, batch = _begin(s, dataset_id, ImportKind.PREDICTIONS, len(names), key or f"{model}/{version}",
                          release_id=rel.id)
        items = {i.external_id: i.id for i in s.execute(select(Item).where(Item.dataset_id == dataset_id)).scalars()}
        s.add_all(Prediction(release_id=rel.id, item_id=items[n], dataset_id=dataset_id, label=labels.get(n),
                             probabilities=None if n not in probabilities else [float(p) for p in probabilities[n]],
                             batch_id=batch.id, data_version=batch.data_version) for n in names)
        return batch.data_version


def synthetic(n_items: int, n_raters: int, *, accuracy: float = 0.75, n_labels: int = 2,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Truth (N,) and an (N, R) rating matrix of raters right with probability ``accuracy``."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, n_labels, n_items)
    wrong = (truth[:, None] + rng.integers(1, n_labels, (n_items, n_raters))) % n_labels
    ratings = np.where(rng.random((n_items, n_raters)) < accuracy, truth[:, None], wrong)
    return truth, ratings
