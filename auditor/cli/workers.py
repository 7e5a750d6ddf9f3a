"""``auditor worker``, ``auditor beat`` and ``auditor audit``: background audits."""

from __future__ import annotations

import json
import sys
import time
import uuid
from datetime import datetime

import click

from auditor.cli import main


def _app():
    from auditor.config import load_settings
    from auditor.worker import celery_app

    # The embedded broker, result store and beat schedule are files in the instance directory.
    load_settings().instance_path.mkdir(parents=True, exist_ok=True)
    return celery_app


@main.command("worker")
@click.option("--beat", "with_beat", is_flag=True,
              help="Also run the periodic sweep in this process (the embedded deployment).")
@click.option("--concurrency", "-c", type=int, help="Worker processes (default: AUDITOR_CELERY_CONCURRENCY, or one per core but one).")
@click.option("--pool", default="prefork", show_default=True, type=click.Choice(["prefork", "solo", "threads"]))
@click.option("--loglevel", "-l", default="INFO", show_default=True)
@click.option("--hostname", "-n", help="Node name (default: Celery's).")
def worker_command(with_beat: bool, concurrency: int | None, pool: str, loglevel: str, hostname: str | None) -> None:
    """Run a Celery worker that executes audits (configured from AUDITOR_* variables)."""
    app = _app()
    # No gossip or mingle: Auditor's workers share nothing but the queue and the database
    # (no revoked tasks to sync at start, no events to follow), and Celery's gossip step
    # raised on every reconnect after a broker outage.
    from auditor.worker import worker_queues

    # Audits first: the worker polls the audits queue before the default one.
    argv = ["worker", f"--loglevel={loglevel}", f"--pool={pool}", "-Q", ",".join(worker_queues(app.conf.task_default_queue)),
            "--without-gossip", "--without-mingle"]
    if concurrency:
        argv.append(f"--concurrency={concurrency}")
    if hostname:
        argv.append(f"--hostname={hostname}")
    if with_beat:
        argv += ["--beat", f"--schedule={app.conf.beat_schedule_filename}"]
    app.worker_main(argv)


@main.command("beat")
@click.option("--loglevel", "-l", default="INFO", show_default=True)
def beat_command(loglevel: str) -> None:
    """Run Celery beat: the periodic sweep that enqueues every stale dataset's audit."""
    app = _app()
    app.start(["beat", f"--loglevel={loglevel}", f"--schedule={app.conf.beat_schedule_filename}"])


def _json_default(x):
    if isinstance(x, datetime):
        return x.isoformat()
    return str(x)


def _factory():
    from auditor.config import load_settings
    from auditor.db import make_engine, make_session_factory

    return make_session_factory(make_engine(load_settings().database_url))


def _results(factory, run_id: int) -> dict:
    from auditor.audit.store import run_results
    from auditor.db.models import AuditRun
    from auditor.db.session import session_scope

    with session_scope(factory) as session:
        run = session.get(AuditRun, run_id)
        rows = run_results(session, run_id)
        summary = run.summary or {}
        return {
            "audit_run": {"id": run.id, "dataset_id": run.dataset_id, "data_version": run.data_version,
                          "status": str(run.status), "started_at": run.started_at, "finished_at": run.finished_at,
                          "parameters": run.parameters, "error": run.error},
            "bounds": summary.get("upper"),
            "summary": summary,
            "certifications": rows["certifications"],
            "equivalence": [c for c in rows["power_curves"] if c["release_id"] is not None],
            "power_curves": [c for c in rows["power_curves"] if c["release_id"] is None],
            "best": rows["best_scores"],
            "vendor_reports": rows["vendor_reports"],
            "agreement": rows["agreements"],
            "alerts": rows["alerts"],
        }


def _print_table(res: dict) -> None:
    run = res["audit_run"]
    click.echo(f"audit run {run['id']} (data version {run['data_version']}): {run['status']}")
    if run["error"]:
        click.echo(f"  error: {run['error']}")
    b = res["bounds"] or {}
    if b:
        click.echo(f"  upper bounds: U_t={b.get('u_t')}  U_e={b.get('u_e')}  (items {b.get('n_items')})")
    for c in res["certifications"]:
        d = c["details"] or {}
        click.echo(f"  {d.get('model')} {d.get('version')}: L={c['l']:.4f}  S_oms(U_t)={c['s_oms_t']}  "
                   f"S_oms(U_e)={c['s_oms_e']}  S_anytime(U_t)={c.get('s_anytime_t')}  → {c['verdict']} "
                   f"(with {c['certified_with']}, {c.get('method', 'oms')} verdict)")
    for e in res["equivalence"]:
        value = e["equivalence"] if e["equivalence"] is not None else e["equivalence_note"]
        click.echo(f"  release {e['release_id']} survey equivalence ({e['combiner']}, {e['scorer']}): {value} "
                   f"[{e['equivalence_low']}, {e['equivalence_high']}]")
    for s in res["best"]:
        click.echo(f"  BEST {s['metric']}: {s['value']:.4f}")
    for v in res["vendor_reports"]:
        click.echo(f"  vendor {v['vendor']}: {v['n_annotators']} annotators, U_t={v['u_t']}, alpha={v['agreement']}")


@main.command("audit")
@click.option("--dataset", "dataset_name", required=True, help="Dataset name.")
@click.option("--workspace", envvar="AUDITOR_WORKSPACE", show_envvar=True,
              help="Workspace slug (default: AUDITOR_WORKSPACE; needed when several workspaces have the dataset).")
@click.option("--wait", is_flag=True, help="Wait until an audit covering the current data has finished.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds --wait waits at most.")
@click.option("--inline", is_flag=True, help="Run the audit in this process instead of a worker.")
@click.option("--json", "as_json", is_flag=True, help="Print the finished audit's results as JSON.")
def audit_command(dataset_name: str, workspace: str | None, wait: bool, timeout: float, inline: bool,
                  as_json: bool) -> None:
    """Request an audit of a dataset and show the latest finished audit."""
    from auditor.audit.store import find_datasets, latest_run
    from auditor.config import load_worker_settings
    from auditor.db.models import AuditStatus
    from auditor.db.session import session_scope

    factory = _factory()
    with session_scope(factory) as session:
        found = find_datasets(session, dataset_name, workspace=workspace)
    if not found:
        raise click.ClickException(f"no dataset named {dataset_name!r}" + (f" in {workspace!r}" if workspace else ""))
    if len(found) > 1:
        raise click.ClickException(f"{len(found)} datasets are named {dataset_name!r}: pass --workspace "
                                   f"({', '.join(ws for _, ws, _ in found)})")
    dataset_id, found_in, version = found[0]
    if inline:
        from auditor.audit import runner
        from auditor.audit.pipeline import AuditOptions

        w = load_worker_settings()
        outcome = runner.run_audit(factory, dataset_id, task_id=f"inline-{uuid.uuid4().hex}", options=AuditOptions.from_settings(w),
                                   lease=w.lease)
        if outcome.state not in ("succeeded", "current"):
            raise click.ClickException(f"audit not run: {outcome.state}")
    else:
        from auditor.worker.dispatch import request_audit

        _app().set_default()
        if request_audit(dataset_id) is None:
            click.echo("broker unreachable: the periodic sweep will run the audit", err=True)
    run = None
    deadline = time.monotonic() + timeout
    while True:
        with session_scope(factory) as session:
            run = latest_run(session, dataset_id, status=AuditStatus.SUCCEEDED)
            last = latest_run(session, dataset_id, status=None)
        if not wait or (run is not None and run.data_version >= version):
            break
        if time.monotonic() > deadline:
            msg = f"no audit of data version {version} finished within {timeout:g}s"
            if last is not None and last.status == AuditStatus.FAILED:
                msg += f"; last run {last.id} failed: {last.error}"
            raise click.ClickException(msg)
        time.sleep(0.2)
    if run is None:
        click.echo("no finished audit yet", err=True)
        sys.exit(0 if not wait else 1)
    res = {"workspace": found_in, **_results(factory, run.id)}
    if as_json:
        click.echo(json.dumps(res, default=_json_default, indent=2))
    else:
        click.echo(f"dataset {dataset_name!r} in workspace {found_in!r}")
        _print_table(res)
