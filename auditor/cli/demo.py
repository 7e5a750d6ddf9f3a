"""``auditor demo``: the embedded deployment with a seeded demo workspace, in one command.

Migrates the SQLite database in the instance folder, seeds a workspace from the
simulator (two vendors and an expert panel labeling the same items, gold labels on a
subset, four releases of a model, the last one crossing into "certified"), starts a
Celery worker with the sweep on the server-less broker, and serves the web UI.
"""

from __future__ import annotations

import io
import os
import secrets
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import click

from auditor.cli import main
from auditor.cli._workspace import DEMO_WORKSPACE

WORKSPACE = DEMO_WORKSPACE
DATASET = "product-reviews"
#: A second dataset: four months of weekly batches from three vendors, one of which gets
#: worse in week 11, for the quality-over-time series and their change alert.
WEEKLY_DATASET = "support-tickets-weekly"
ADMIN = "admin@demo.local"


def _csv_bytes(rows: list[dict]) -> bytes:
    import csv

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _password(instance: Path) -> str:
    """The demo admin's password: made once, kept in the instance folder (mode 600)."""
    path = instance / "demo-login.txt"
    if path.is_file():
        return path.read_text(encoding="utf-8").strip()
    password = secrets.token_urlsafe(9)
    path.write_text(password + "\n", encoding="utf-8")
    path.chmod(0o600)
    return password


def seed(session, *, items: int, seed_value: int, password: str) -> tuple[list[int], bool]:
    """Create the demo workspace, its admin and datasets, and import the simulated data.

    Returns the dataset ids and whether anything was imported (a second run changes nothing).
    """
    from sqlalchemy import select

    from auditor.actions.accounts import set_password
    from auditor.db import Role, User
    from auditor.ingest import (
        create_dataset,
        get_workspace,
        import_annotations,
        import_gold,
        import_predictions,
    )
    from auditor.simulate import Drift, HistoryScenario, Scenario, simulate, simulate_history

    ws = get_workspace(session, WORKSPACE, create=True)
    ws.name = "Demo workspace"
    user = session.scalar(select(User).where(User.workspace_id == ws.id, User.email == ADMIN))
    if user is None:
        user = User(workspace_id=ws.id, email=ADMIN, role=Role.ADMIN, display_name="Demo admin")
        session.add(user)
    set_password(user, password)
    scenario = Scenario(n_items=items, seed=seed_value)
    data = simulate(scenario)
    ds = create_dataset(session, DATASET, list(scenario.labels), workspace=WORKSPACE,
                        description="Sentiment of product reviews: two labeling vendors, an in-house expert "
                                    "panel, adjudicated gold on a tenth of the items (simulated, known oracle).")
    results = [
        import_annotations(session, ds, _csv_bytes(data.annotations), workspace=WORKSPACE, format="csv"),
        import_gold(session, ds, _csv_bytes(data.gold), workspace=WORKSPACE, format="csv",
                    gold_source="adjudicated"),
    ]
    for version, rows in data.predictions.items():
        results.append(import_predictions(
            session, ds, _csv_bytes(rows), workspace=WORKSPACE, format="csv", model=scenario.model,
            release=version, released_at=datetime.fromisoformat(data.released_at[version]),
        ))
    history = HistoryScenario(weeks=16, items_per_week=max(150, items // 13), seed=seed_value,
                              labels=("billing", "bug", "feature request"),
                              drift=(Drift("bolt-annotations", 10, -0.08),))
    weekly = create_dataset(session, WEEKLY_DATASET, list(history.labels), workspace=WORKSPACE,
                            description="Support tickets labelled weekly by three vendors since January; "
                                        "one vendor's quality drops in week 11 (simulated).")
    records = [{k: r[k] for k in ("item_id", "annotator_id", "label", "vendor", "tier", "timestamp")}
               for r in simulate_history(history)]
    results.append(import_annotations(session, weekly, _csv_bytes(records), workspace=WORKSPACE, format="csv"))
    changed = any(r.changed for r in results)
    return [ds.id, weekly.id], changed


@main.command("demo")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--items", default=2000, show_default=True, type=click.IntRange(50, 1_000_000),
              help="Items in the simulated dataset.")
@click.option("--seed", "seed_value", default=7, show_default=True, type=int)
@click.option("--no-serve", is_flag=True, help="Seed and audit once, then exit (no worker or web server left running).")
def demo_command(host: str, port: int, items: int, seed_value: int, no_serve: bool) -> None:
    """Set up the embedded deployment with demo data and serve the dashboards."""
    from auditor.config import load_settings
    from auditor.db import make_engine, make_session_factory, session_scope
    from auditor.db.migrate import upgrade

    settings = load_settings()
    instance = settings.instance_path
    instance.mkdir(parents=True, exist_ok=True)
    # One secret shared by the web workers and kept across restarts, so logins survive.
    key_file = instance / "secret-key"
    if "AUDITOR_SECRET_KEY" not in os.environ:
        if not key_file.is_file():
            key_file.write_text(secrets.token_hex(32), encoding="utf-8")
            key_file.chmod(0o600)
        os.environ["AUDITOR_SECRET_KEY"] = key_file.read_text(encoding="utf-8").strip()

    click.echo(f"database: {settings.database_url}")
    engine = make_engine(settings.database_url)
    upgrade(engine)
    password = _password(instance)
    with session_scope(make_session_factory(engine)) as session:
        dataset_ids, changed = seed(session, items=items, seed_value=seed_value, password=password)
    click.echo(f"demo workspace seeded ({'new data imported' if changed else 'already up to date'})")

    if no_serve:
        import uuid

        from auditor.audit import runner
        from auditor.audit.pipeline import AuditOptions
        from auditor.config import load_worker_settings

        w = load_worker_settings()
        for dataset_id in dataset_ids:
            outcome = runner.run_audit(make_session_factory(engine), dataset_id, task_id=f"demo-{uuid.uuid4().hex}",
                                       options=AuditOptions.from_settings(w), lease=w.lease)
            click.echo(f"audit: {outcome.state}")
            if outcome.state not in ("succeeded", "current"):
                raise click.ClickException(f"the audit did not succeed: {outcome.state}")
        return

    env = dict(os.environ)
    cmd = [sys.executable, "-m", "auditor"]
    procs = [
        subprocess.Popen([*cmd, "worker", "--beat", "--pool", "solo", "--loglevel", "WARNING"], env=env),
        subprocess.Popen([*cmd, "serve", "--host", host, "--port", str(port), "--workers", "2"], env=env),
    ]
    from auditor.worker.dispatch import request_audit

    for dataset_id in dataset_ids:
        request_audit(dataset_id)
    url = f"http://{host}:{port}/"
    click.echo("")
    click.echo(f"  Auditor is running at {url}")
    click.echo(f"  workspace: {WORKSPACE}   email: {ADMIN}   password: {password}")
    click.echo("  The first audit takes a few seconds; press Ctrl-C to stop.")
    click.echo("")

    def stop(*_):
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    failed = [p.args[3] for p in procs if p.poll() not in (None, 0)]
    stop()
    if failed:
        raise click.ClickException(f"{', '.join(failed)} stopped unexpectedly")
