"""Fixtures for ingestion tests: a session factory and fresh datasets on either database."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from sqlalchemy import Engine, text

from auditor.db import Base, make_session_factory, session_scope
from auditor.ingest import create_dataset


@pytest.fixture
def factory(db_engine):
    return make_session_factory(db_engine)


@pytest.fixture
def new_dataset(factory):
    """Make a dataset in a workspace of its own; returns (workspace, name)."""

    def make(labels=("a", "b", "c")) -> tuple[str, str]:
        workspace = f"ws-{uuid.uuid4().hex[:8]}"
        name = f"ds-{uuid.uuid4().hex[:8]}"
        with session_scope(factory) as s:
            create_dataset(s, name, list(labels), workspace=workspace)
        return workspace, name

    return make


_REJECTION_RECORDS = {("labelstudio_connector", "webhook_refused"), ("labelstudio_connector", "last_refused_at"),
                      ("labelstudio_connector", "last_refusal")}


def seed_items(conn, prefix: str, n: int) -> int:
    """On a fresh schema (raw SQL, as a bulk load leaves it: nothing analysed), a workspace
    ``w`` with a dataset ``d`` of labels a and b holding ``n`` items ``<prefix>1`` …
    ``<prefix>n``; returns the dataset's id."""
    conn.execute(text("INSERT INTO workspace (slug, name) VALUES ('w', 'w')"))
    ws = conn.execute(text("SELECT id FROM workspace WHERE slug = 'w'")).scalar_one()
    conn.execute(text("INSERT INTO dataset (workspace_id, name, labels) VALUES (:w, 'd', '[\"a\", \"b\"]')"),
                 {"w": ws})
    d = conn.execute(text("SELECT id FROM dataset WHERE name = 'd'")).scalar_one()
    conn.execute(text("INSERT INTO item (dataset_id, external_id) SELECT :d, :p || g "
                      "FROM generate_series(1, :n) g"), {"d": d, "p": prefix, "n": n})
    return d


def fingerprint(engine: Engine) -> str:
    """A hash of every row of every table (tests compare it before and after a rejection), but the
    records of rejected attempts: a rejection writes its own (who, when, its first errors; a
    refused Label Studio webhook, its count on the connector) and nothing else."""
    digest = hashlib.sha256()
    with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            if table.name == "import_attempt":
                continue
            cols = ", ".join(c.name for c in table.columns if (table.name, c.name) not in _REJECTION_RECORDS)
            order = ", ".join(c.name for c in table.primary_key.columns)
            for row in conn.execute(text(f"SELECT {cols} FROM {table.name} ORDER BY {order}")):
                digest.update(repr(tuple(row)).encode())
    return digest.hexdigest()
