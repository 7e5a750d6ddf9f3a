"""Test data through the ingestion use cases, as an upload writes it (rows, per-item counts,
the data_version bump and the outbox row in one transaction); the audit request follows."""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterable, Sequence

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from auditor import ingest
from auditor.db import session_scope
from auditor.db.models import Dataset, Workspace


def make_dataset(factory: sessionmaker[Session], name: str, labels: Sequence[str]) -> int:
    """A new dataset in a workspace of its own (tests share one database)."""
    with session_scope(factory) as s:
        return ingest.create_dataset(s, name, list(labels), workspace=f"ws-{name}-{uuid.uuid4().hex[:8]}").id


def workspace_of(factory: sessionmaker[Session], dataset_id: int) -> str:
    """The slug of the dataset's workspace (what ``--workspace`` takes)."""
    with session_scope(factory) as s:
        return s.scalar(select(Workspace.slug).join(Dataset).where(Dataset.id == dataset_id))


def _csv(header: Sequence[str], rows: Iterable[Sequence[object]]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue().encode()


def import_annotations(factory: sessionmaker[Session], dataset_id: int, rows: Sequence[tuple[str, str, int]],
                       *, vendors: dict[str, str] | None = None, tiers: dict[str, str] | None = None,
                       gold: dict[str, int] | None = None, key: str | None = None) -> int:
    """(item, annotator, label code) rows through the ingestion use case; returns the new data_version.

    With ``gold``, the gold labels are a second import (one more version).
    """
    vendors, tiers = vendors or {}, tiers or {}
    with session_scope(factory) as s:
        ds = s.get(Dataset, dataset_id)
        names = list(ds.labels)
        body = _csv(["item_id", "annotator_id", "label", "vendor", "tier"],
                    [(i, a, names[int(lab)], vendors.get(a, ""), tiers.get(a, "crowd")) for i, a, lab in rows])
        result = ingest.import_annotations(s, ds, body, format="csv", idempotency_key=key)
        version = result.data_version
    if gold:
        with session_scope(factory) as s:
            ds = s.get(Dataset, dataset_id)
            body = _csv(["item_id", "label"], [(i, list(ds.labels)[g]) for i, g in gold.items()])
            version = ingest.import_gold(s, ds, body, format="csv").data_version
    return version


def import_predictions(factory: sessionmaker[Session], dataset_id: int, model: str, version: str,
                       labels: dict[str, int] | None = None, probabilities: dict[str, Sequence[float]] | None = None,
                       key: str | None = None) -> int:
    """A release's predictions on existing items through the ingestion use case; returns the new data_version."""
    with session_scope(factory) as s:
        ds = s.get(Dataset, dataset_id)
        names = list(ds.labels)
        if probabilities:
            body = _csv(["item_id", *names], [(i, *(repr(float(p)) for p in ps)) for i, ps in probabilities.items()])
        else:
            body = _csv(["item_id", "label"], [(i, names[int(lab)]) for i, lab in (labels or {}).items()])
        result = ingest.import_predictions(s, ds, body, model=model, release=version, format="csv",
                                           idempotency_key=key)
        return result.data_version


def synthetic(n_items: int, n_raters: int, *, accuracy: float = 0.75, n_labels: int = 2,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Truth (N,) and an (N, R) rating matrix of raters right with probability ``accuracy``."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, n_labels, n_items)
    wrong = (truth[:, None] + rng.integers(1, n_labels, (n_items, n_raters))) % n_labels
    ratings = np.where(rng.random((n_items, n_raters)) < accuracy, truth[:, None], wrong)
    return truth, ratings
