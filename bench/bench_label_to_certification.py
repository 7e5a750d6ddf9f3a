"""Label → updated certification, on one worker process with releases and plans on.

Run by hand:

    python bench/bench_label_to_certification.py --url postgresql://USER@HOST/DB \\
        --redis-url redis://127.0.0.1:6379/13 [--items 3000] [--releases 4] [--rounds 20]

A dataset of ``--items`` items × 5 labels and ``--releases`` releases (probabilities) in a
scratch database; a real ``auditor worker`` with one process (the default single worker),
after-audit plans on (``AUDITOR_PLANS_PER_AUDIT``, default 5). Each round imports a small
batch of new labels, asks for the audit as an import does, and waits until a succeeded
audit covers that data version (its certifications stored): the time from the import's
start. After each audit the worker plans the releases it did not certify, so the next
round's audit arrives while plans run or wait. Prints p50/p95/max over the rounds.
Targets (issue 35): p50 < 2 s, p95 < 5 s. ``--smoke``: tiny sizes, three rounds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from _scratch import scratch_database, stop_processes

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("a", "b", "c")


def _csv(rows) -> bytes:
    return ("item_id,annotator_id,label\n" + "".join(f"{i},{a},{lab}\n" for i, a, lab in rows)).encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("AUDITOR_BENCH_POSTGRES_URL"))
    ap.add_argument("--redis-url", default=os.environ.get("AUDITOR_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument("--items", type=int, default=3000)
    ap.add_argument("--releases", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.items, args.releases, args.rounds = 200, 2, 3
    if not args.url:
        print("No PostgreSQL URL: pass --url or set AUDITOR_BENCH_POSTGRES_URL; nothing measured.")
        return

    from auditor.config import load_settings, load_worker_settings
    from auditor.db import make_engine, make_session_factory, migrate, session_scope
    from auditor.db.models import AuditRun, AuditStatus
    from auditor.ingest import create_dataset, import_annotations, import_predictions

    rng = np.random.default_rng(0)
    n = args.items
    truth = rng.integers(0, 3, n)
    with scratch_database(args.url) as url, tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(url)
        migrate.upgrade(engine)
        factory = make_session_factory(engine)
        with session_scope(factory) as s:
            d = create_dataset(s, "live", list(LABELS)).id
        labels = np.where(rng.random((n, 5)) < 0.8, truth[:, None], rng.integers(0, 3, (n, 5)))
        with session_scope(factory) as s:
            import_annotations(s, "live", _csv((f"i{i}", f"r{r}", LABELS[labels[i, r]])
                                               for i in range(n) for r in range(5)), vendor="acme")
        for k in range(args.releases):
            right = rng.random(n) < 0.75 + 0.05 * k
            pred = np.where(right, truth, (truth + 1) % 3)
            body = "item_id,label\n" + "".join(f"i{i},{LABELS[p]}\n" for i, p in enumerate(pred))
            with session_scope(factory) as s:
                import_predictions(s, "live", body.encode(), model="clf", release=f"1.{k}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITOR_")}
        env.update({"AUDITOR_INSTANCE_PATH": tmp, "AUDITOR_DATABASE_URL": url, "AUDITOR_BROKER_URL": args.redis_url,
                    "AUDITOR_RESULT_BACKEND": args.redis_url,
                    "AUDITOR_CELERY_QUEUE": f"bench-{uuid.uuid4().hex[:8]}", "AUDITOR_CELERY_CONCURRENCY": "1",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
        os.environ.update({k: v for k, v in env.items() if k.startswith("AUDITOR_")})
        from celery import Celery

        from auditor.worker import celery_config

        app = Celery("bench-client")
        app.config_from_object(celery_config(load_settings(env), load_worker_settings(env)))
        app.set_default()
        import auditor.worker.tasks  # noqa: F401 - registers the tasks
        from auditor.worker.dispatch import request_audit

        log = open(Path(tmp) / "worker.log", "wb")
        worker = subprocess.Popen([sys.executable, "-c", "from auditor.cli import main; main()", "worker",
                                   "--loglevel=WARNING"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)

        def covered(version: int, timeout: float) -> bool:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                with session_scope(factory) as s:
                    done = s.query(AuditRun).filter(AuditRun.dataset_id == d, AuditRun.status == AuditStatus.SUCCEEDED,
                                                    AuditRun.data_version >= version).first()
                if done is not None:
                    return True
                time.sleep(0.05)
            return False

        latencies, queued = [], []
        try:
            request_audit(d)
            with session_scope(factory) as s:
                first = s.query(AuditRun).count()
            if not covered(1, 300):
                raise SystemExit(f"the first audit did not finish\n{(Path(tmp) / 'worker.log').read_text()[-3000:]}")
            for r in range(args.rounds):
                start = time.perf_counter()
                rows = [(f"i{(r * 20 + j) % n}", f"live-{r}", LABELS[truth[(r * 20 + j) % n]]) for j in range(20)]
                with session_scope(factory) as s:
                    version = import_annotations(s, "live", _csv(rows), vendor="acme").data_version
                request_audit(d)
                if not covered(version, 300):
                    raise SystemExit(f"round {r}: no audit of version {version}")
                latencies.append(time.perf_counter() - start)
                time.sleep(0.5)  # let the after-audit plans start, as a labeller's pace would
            with session_scope(factory) as s:
                for run in s.query(AuditRun).filter(AuditRun.dataset_id == d).order_by(AuditRun.id).all()[first:]:
                    if run.started_at and run.created_at:
                        queued.append((run.started_at - run.created_at).total_seconds())
        finally:
            stop_processes(worker)
            log.close()
            app.close()
            engine.dispose()
    lat = np.array(latencies)
    print(f"{args.rounds} rounds, {n} items × 5 labels, {args.releases} releases, plans on, one worker process")
    print(f"label → updated certification  p50 {np.percentile(lat, 50):.2f} s  p95 {np.percentile(lat, 95):.2f} s  "
          f"max {lat.max():.2f} s  (targets p50 < 2 s, p95 < 5 s)")
    if queued:
        q = np.array(queued)
        print(f"queued_seconds of those runs    p50 {np.percentile(q, 50):.2f} s  p95 {np.percentile(q, 95):.2f} s")


if __name__ == "__main__":
    main()
