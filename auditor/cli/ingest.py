"""``auditor datasets ...`` and ``auditor import ...``: create datasets, load files into the database."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import click

from auditor.cli import main
from auditor.cli._workspace import resolve_workspace, workspace_option

_URL = click.option("--url", envvar="AUDITOR_DATABASE_URL",
                    help="Database URL (default: AUDITOR_DATABASE_URL or the SQLite file in the instance folder).")
_WORKSPACE = workspace_option()
_PROGRESS_MIN_BYTES = 8 << 20


@contextmanager
def _session(url: str | None):
    from sqlalchemy import inspect

    from auditor.db import make_engine, make_session_factory, session_scope

    engine = make_engine(url)
    try:
        if not inspect(engine).has_table("dataset"):
            raise click.ClickException("the database has no tables yet: run `auditor db upgrade` first")
        with session_scope(make_session_factory(engine)) as session:
            yield session
    finally:
        engine.dispose()


def _field_map(pairs: tuple[str, ...]) -> dict[str, str]:
    """The same mapping as the API's ``field`` query parameter (``auditor.ingest.batch.parse_field_map``)."""
    from auditor.ingest import IngestError
    from auditor.ingest.batch import parse_field_map

    try:
        return parse_field_map(pairs)
    except IngestError as exc:
        raise click.BadParameter(str(exc), param_hint="--field") from None


@contextmanager
def _progress(path: str, enabled: bool | None):
    size = os.path.getsize(path)
    show = enabled if enabled is not None else size >= _PROGRESS_MIN_BYTES
    if not show:
        yield None
        return
    with click.progressbar(length=size, label=f"importing {Path(path).name}", file=sys.stderr) as bar:
        yield bar.update


def _import(fn, path: str, url: str | None, workspace: str | None, progress: bool | None, **kwargs) -> None:
    """Run one import use case, commit, then ask the workers for the audit (as the HTTP import does)."""
    from auditor.ingest import ImportRejected, IngestError, get_dataset

    with _session(url) as session, _progress(path, progress) as update:
        workspace = resolve_workspace(session, workspace)
        try:
            result = fn(session=session, source=path, workspace=workspace, progress=update, **kwargs)
        except ImportRejected as exc:
            raise click.ClickException(str(exc)) from None
        except IngestError as exc:
            raise click.ClickException(f"{path}: {exc}") from None
        dataset_id = get_dataset(session, kwargs["dataset"], workspace=workspace).id if result.changed else None
    # Committed (the session's scope ended): the audit may start now.
    click.echo(f"{path}: {result.status}: {result.message} (workspace {workspace!r})")
    if dataset_id is not None:
        _request_audit(dataset_id, url)


def _request_audit(dataset_id: int, url: str | None) -> None:
    """Enqueue the dataset's audit at once, as the HTTP import does.

    The database already records that the dataset needs an audit; the message only
    makes it start sooner. With the broker unreachable the periodic sweep starts it.
    This environment's workers (AUDITOR_BROKER_URL, AUDITOR_DATABASE_URL) serve one
    database: an import into another one (``--url``) is left to that database's sweep.
    """
    from auditor.config import load_settings

    if url and url != load_settings().database_url:
        click.echo("audit not enqueued: this environment's workers use another database; that database's "
                   "periodic sweep will start it", err=True)
        return
    from celery import Celery, current_app

    from auditor.worker import celery_config
    from auditor.worker.dispatch import request_audit

    # The broker and queue of this environment's workers (AUDITOR_BROKER_URL, AUDITOR_CELERY_QUEUE).
    app = Celery("auditor-cli")
    app.config_from_object(celery_config())
    previous = current_app._get_current_object()
    app.set_current()
    try:
        task_id = request_audit(dataset_id)
    finally:
        previous.set_current()
        app.close()
    if task_id is None:
        click.echo("audit not enqueued: the broker is unreachable; the periodic sweep will start it once the "
                   "worker runs (the import itself is complete)", err=True)
    else:
        click.echo("audit requested")


# --- datasets --------------------------------------------------------------------


@main.group()
def datasets() -> None:
    """Datasets: an ordered label set and its items."""


@datasets.command("create")
@click.argument("name")
@click.option("--labels", required=True, help="The ordered label set, comma-separated: a,b,c.")
@click.option("--description", default="", help="What the annotators were asked.")
@_WORKSPACE
@_URL
def datasets_create(name: str, labels: str, description: str, workspace: str | None, url: str | None) -> None:
    """Create dataset NAME (a no-op when it exists with the same labels)."""
    from auditor.ingest import IngestError, create_dataset

    label_list = [lab.strip() for lab in labels.split(",")]
    with _session(url) as session:
        workspace = resolve_workspace(session, workspace)
        try:
            ds = create_dataset(session, name, label_list, workspace=workspace, description=description)
        except IngestError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"dataset {ds.name!r} in workspace {workspace!r}: labels {list(ds.labels)}, "
                   f"data_version {ds.data_version}")


@datasets.command("list")
@_WORKSPACE
@_URL
def datasets_list(workspace: str | None, url: str | None) -> None:
    """The workspace's datasets with their labels and data_version."""
    from sqlalchemy import func, select

    from auditor.db import Dataset, Item, Workspace

    with _session(url) as session:
        workspace = resolve_workspace(session, workspace)
        click.echo(f"workspace {workspace!r}:", err=True)
        rows = session.execute(
            select(Dataset.name, Dataset.labels, Dataset.data_version, func.count(Item.id))
            .join(Workspace).outerjoin(Item, Item.dataset_id == Dataset.id)
            .where(Workspace.slug == workspace).group_by(Dataset.id).order_by(Dataset.name)).all()
        for name, labels, version, n_items in rows:
            click.echo(f"{name}\tlabels={','.join(labels)}\titems={n_items}\tdata_version={version}")


# --- imports ---------------------------------------------------------------------


@main.group("import")
def import_() -> None:
    """Import annotations, predictions or gold labels (all or nothing per file)."""


def _common(fn):
    for option in reversed([
        click.argument("file", type=click.Path(exists=True, dir_okay=False)),
        click.option("--dataset", required=True, help="Dataset name."),
        click.option("--format", "fmt", default=None,
                     type=click.Choice(["csv", "tsv", "wide", "jsonl", "label-studio"]),
                     help="File format (default: from the name and content)."),
        click.option("--field", "fields", multiple=True, metavar="FIELD=COLUMN",
                     help="Read FIELD (item_id, annotator_id, label, labels, probabilities, vendor, tier, "
                          "timestamp, source) from COLUMN. Repeatable."),
        click.option("--idempotency-key", default=None, help="Re-sending a batch with the same key is a no-op."),
        click.option("--progress/--no-progress", default=None, help="Progress bar (default: for files over 8 MB)."),
        _WORKSPACE,
        _URL,
    ]):
        fn = option(fn)
    return fn


def _who() -> str:
    try:
        return f"cli:{os.getlogin()}"
    except OSError:
        return "cli"


@import_.command("annotations")
@_common
@click.option("--vendor", default=None, help="Vendor of annotators whose rows name none.")
@click.option("--tier", type=click.Choice(["crowd", "expert"]), default=None,
              help="Tier of annotators whose rows name none (new annotators default to crowd).")
def import_annotations_cmd(file: str, dataset: str, fmt: str | None, fields: tuple[str, ...],
                           idempotency_key: str | None, progress: bool | None, workspace: str | None,
                           url: str | None,
                           vendor: str | None, tier: str | None) -> None:
    """Import the annotations in FILE into a dataset."""
    from auditor.ingest import import_annotations

    _import(import_annotations, file, url, workspace, progress, dataset=dataset, format=fmt,
            field_map=_field_map(fields), vendor=vendor, tier=tier, idempotency_key=idempotency_key,
            submitted_by=_who())


@import_.command("predictions")
@_common
@click.option("--model", required=True, help="Model name (created if new).")
@click.option("--release", required=True, help="Release version (created if new).")
@click.option("--released-at", type=click.DateTime(), default=None, help="When the release shipped.")
@click.option("--alias", default=None, help="A free-form alias for the release (e.g. 'prod').")
def import_predictions_cmd(file: str, dataset: str, fmt: str | None, fields: tuple[str, ...],
                           idempotency_key: str | None, progress: bool | None, workspace: str | None,
                           url: str | None,
                           model: str, release: str, released_at: datetime | None, alias: str | None) -> None:
    """Import one release's predictions in FILE."""
    from auditor.ingest import import_predictions

    _import(import_predictions, file, url, workspace, progress, dataset=dataset, format=fmt,
            field_map=_field_map(fields), model=model, release=release, released_at=released_at, alias=alias,
            idempotency_key=idempotency_key, submitted_by=_who())


@import_.command("gold")
@_common
@click.option("--source", "gold_source", default=None, help="Where the gold labels come from (e.g. 'expert').")
def import_gold_cmd(file: str, dataset: str, fmt: str | None, fields: tuple[str, ...], idempotency_key: str | None,
                    progress: bool | None, workspace: str | None, url: str | None, gold_source: str | None) -> None:
    """Import gold labels in FILE (item_id, label)."""
    from auditor.ingest import import_gold

    _import(import_gold, file, url, workspace, progress, dataset=dataset, format=fmt, field_map=_field_map(fields),
            gold_source=gold_source, idempotency_key=idempotency_key, submitted_by=_who())
