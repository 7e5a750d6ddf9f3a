"""Benchmark: one dataset of 1,000,000 annotations and 5 releases on PostgreSQL.

Measures
1. the audit itself, in this process: wall time per stage (claim, snapshot, compute,
   write) and peak memory (traced allocations and the process's peak RSS);
2. label-arrival → updated-certification latency through a real ``auditor worker``
   (Redis broker): a small batch of labels is committed (rows + counts + data_version
   + outbox, one transaction), ``request_audit`` is called, and the clock stops when
   a certification of that data version is in the database. p50 and p95 over trials.

Run by hand (PostgreSQL and Redis on 127.0.0.1 by default):

    python bench/bench_audit.py [--items 100000] [--raters-per-item 10] [--releases 5]
        [--trials 20] [--postgres-url postgresql://postgres@127.0.0.1:5432/test]
        [--redis-url redis://127.0.0.1:6379/13] [--bootstrap 500] [--keep]

A database named ``auditor_bench_<random>`` is created on the server and dropped at the
end (unless ``--keep``).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import time
import tracemalloc
import uuid
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np
import psycopg
from _scratch import peak_mb, scratch_database, stop_processes
from sqlalchemy import make_url, select, update

from auditor.audit import runner
from auditor.audit.pipeline import AuditOptions
from auditor.audit.snapshot import SnapshotCache
from auditor.db import WRITE_OPTIONS, make_engine, make_session_factory, session_scope
from auditor.db.models import (
    Annotation,
    AuditOutbox,
    AuditRun,
    Certification,
    Dataset,
    ImportBatch,
    ImportKind,
    Item,
)
from auditor.db.partitions import ensure_annotation_partition

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout: the workers package sits beside auditor


def _copy(conn: psycopg.Connection, table: str, columns: str, rows: np.ndarray) -> None:
    buf = io.StringIO()
    np.savetxt(buf, rows, fmt="%d", delimiter="\t")
    with conn.cursor().copy(f"COPY {table} ({columns}) FROM STDIN") as cp:
        cp.write(buf.getvalue())


def seed(url: str, *, n_items: int, per_item: int, n_annotators: int, n_vendors: int, n_releases: int,
         n_labels: int, rng: np.random.Generator) -> int:
    """Bulk-load the dataset with COPY (what a large import leaves behind); returns its id."""
    truth = rng.integers(0, n_labels, n_items)
    skill = rng.uniform(0.6, 0.95, n_annotators)
    ann = np.stack([rng.choice(n_annotators, per_item, replace=False) for _ in range(n_items)])
    right = rng.random((n_items, per_item)) < skill[ann]
    labels = np.where(right, truth[:, None], (truth[:, None] + rng.integers(1, n_labels, ann.shape)) % n_labels)
    counts = np.stack([np.bincount(row, minlength=n_labels) for row in labels])
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                         dbname=u.database) as conn:
        cur = conn.cursor()
        cur.execute("INSERT INTO workspace (slug, name) VALUES ('bench', 'bench') RETURNING id")
        ws = cur.fetchone()[0]
        cur.execute("INSERT INTO dataset (workspace_id, name, labels, data_version) VALUES (%s, 'bench', %s, 1) "
                    "RETURNING id", (ws, psycopg.types.json.Jsonb([f"c{c}" for c in range(n_labels)])))
        ds = cur.fetchone()[0]
        conn.commit()
        # Annotation is partitioned by dataset on PostgreSQL: give the dataset its partition
        # the way the import does before copying rows into the parent table.
        engine = make_engine(url)
        try:
            with engine.begin() as sa_conn:
                ensure_annotation_partition(sa_conn, ds)
        finally:
            engine.dispose()
        cur.execute("INSERT INTO import_batch (workspace_id, dataset_id, kind, format, row_count, checksum, "
                    "data_version) VALUES (%s, %s, 'annotations', 'bench', %s, 'seed', 1) RETURNING id",
                    (ws, ds, n_items * per_item))
        batch = cur.fetchone()[0]
        with cur.copy("COPY item (dataset_id, external_id, label_counts) FROM STDIN") as cp:
            for n in range(n_items):
                cp.write_row((ds, f"item{n}", counts[n].tolist()))
        cur.execute("SELECT id FROM item WHERE dataset_id = %s ORDER BY id", (ds,))
        item_ids = np.array([r[0] for r in cur.fetchall()], dtype=np.int64)
        with cur.copy("COPY annotator (workspace_id, external_id, vendor, tier) FROM STDIN") as cp:
            for a in range(n_annotators):
                cp.write_row((ws, f"rater{a}", f"vendor{a % n_vendors}", "crowd"))
        cur.execute("SELECT id FROM annotator WHERE workspace_id = %s ORDER BY id", (ws,))
        ann_ids = np.array([r[0] for r in cur.fetchall()], dtype=np.int64)
        rows = np.column_stack([np.full(ann.size, ds), np.repeat(item_ids, per_item), ann_ids[ann.ravel()],
                                labels.ravel(), np.full(ann.size, batch), np.ones(ann.size, dtype=np.int64)])
        _copy(conn, "annotation", "dataset_id, item_id, annotator_id, label, batch_id, data_version", rows)
        cur.execute("INSERT INTO model (workspace_id, name) VALUES (%s, 'model') RETURNING id", (ws,))
        model = cur.fetchone()[0]
        for r in range(n_releases):
            cur.execute("INSERT INTO release (model_id, version) VALUES (%s, %s) RETURNING id", (model, f"v{r}"))
            rel = cur.fetchone()[0]
            acc = 0.80 + 0.03 * r
            pred = np.where(rng.random(n_items) < acc, truth, (truth + 1) % n_labels)
            _copy(conn, "prediction", "release_id, item_id, dataset_id, label, batch_id, data_version",
                  np.column_stack([np.full(n_items, rel), item_ids, np.full(n_items, ds), pred,
                                   np.full(n_items, batch), np.ones(n_items, dtype=np.int64)]))
        cur.execute("ANALYZE")
        conn.commit()
    return ds


def add_labels(factory, dataset_id: int, rng: np.random.Generator, n_rows: int, trial: int) -> int:
    """One small accepted import: new labels by a new rater, counts, version bump, outbox."""
    from auditor.db.models import Annotator

    with session_scope(factory) as s:
        s.connection(execution_options=WRITE_OPTIONS)
        ds = s.execute(select(Dataset).where(Dataset.id == dataset_id).with_for_update()).scalar_one()
        version = ds.data_version + 1
        s.execute(update(Dataset).where(Dataset.id == dataset_id).values(data_version=version))
        batch = ImportBatch(workspace_id=ds.workspace_id, dataset_id=dataset_id, kind=ImportKind.ANNOTATIONS,
                            format="bench", row_count=n_rows, checksum=uuid.uuid4().hex, data_version=version)
        rater = Annotator(workspace_id=ds.workspace_id, external_id=f"late{trial}-{uuid.uuid4().hex[:6]}",
                          vendor="vendor0")
        s.add_all([batch, rater])
        s.flush()
        offset = int(rng.integers(0, 1000))
        items = list(s.execute(select(Item).where(Item.dataset_id == dataset_id).order_by(Item.id)
                               .offset(offset).limit(n_rows)).scalars())
        for it in items:
            lab = int(rng.integers(0, len(ds.labels)))
            s.add(Annotation(dataset_id=dataset_id, item_id=it.id, annotator_id=rater.id, label=lab,
                             batch_id=batch.id, data_version=version))
            vec = list(it.label_counts)
            vec[lab] += 1
            it.label_counts = vec
        s.add(AuditOutbox(dataset_id=dataset_id, data_version=version, batch_id=batch.id, reason="annotations"))
        return version


def certified_at(factory, dataset_id: int, version: int) -> bool:
    with session_scope(factory) as s:
        return s.execute(select(Certification.id).join(AuditRun, AuditRun.id == Certification.audit_run_id)
                         .where(AuditRun.dataset_id == dataset_id, Certification.data_version >= version)
                         .limit(1)).first() is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--raters-per-item", type=int, default=10)
    ap.add_argument("--annotators", type=int, default=200)
    ap.add_argument("--vendors", type=int, default=4)
    ap.add_argument("--releases", type=int, default=5)
    ap.add_argument("--labels", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--batch-rows", type=int, default=100)
    ap.add_argument("--bootstrap", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--postgres-url", default=os.environ.get("AUDITOR_BENCH_POSTGRES_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--redis-url", default=os.environ.get("AUDITOR_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument("--pairwise-max-annotations", type=int, default=250_000,
                    help="AUDITOR_AUDIT_PAIRWISE_MAX_ANNOTATIONS for the audits (pairwise Cohen's kappa).")
    ap.add_argument("--fanout-min-items", type=int, default=500_000,
                    help="AUDITOR_FANOUT_MIN_ITEMS of the worker (a huge value keeps every audit in one task).")
    ap.add_argument("--keep", action="store_true", help="Keep the benchmark database.")
    ap.add_argument("--smoke", action="store_true", help="2,000 items, 2 releases, 2 trials: seconds")
    args = ap.parse_args()
    if args.smoke:
        args.items, args.raters_per_item, args.annotators, args.releases = 2000, 5, 50, 2
        args.trials, args.bootstrap, args.batch_rows = 2, 20, 20
    rng = np.random.default_rng(0)

    with scratch_database(args.postgres_url, keep=args.keep, driver="postgresql+psycopg", migrate=True) as url:
        measure(url, args, rng)


def measure(url: str, args: argparse.Namespace, rng: np.random.Generator) -> None:
    """Seed the database at ``url``, then time the audits in this process and through a worker."""
    engine = make_engine(url)
    worker = None
    try:
        factory = make_session_factory(engine)
        t0 = time.perf_counter()
        ds = seed(url, n_items=args.items, per_item=args.raters_per_item, n_annotators=args.annotators,
                  n_vendors=args.vendors, n_releases=args.releases, n_labels=args.labels, rng=rng)
        n_ann = args.items * args.raters_per_item
        print(f"seeded {args.items:,} items × {args.raters_per_item} labels = {n_ann:,} annotations, "
              f"{args.annotators} annotators in {args.vendors} vendors, {args.releases} releases "
              f"in {time.perf_counter() - t0:.1f} s")

        # 1. The audit in this process.
        options = AuditOptions(n_bootstrap=args.bootstrap, pairwise_max_annotations=args.pairwise_max_annotations)
        cache = SnapshotCache()
        for label in ("cold (full read)", "warm (after a 100-label import)"):
            if label.startswith("warm"):
                add_labels(factory, ds, rng, args.batch_rows, -1)
            t0, c0 = time.perf_counter(), time.process_time()
            out = runner.run_audit(factory, ds, task_id=f"bench-inline-{uuid.uuid4().hex[:6]}", options=options,
                                   lease=timedelta(hours=1), cache=cache)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            stages = "  ".join(f"{k} {v:.2f} s" for k, v in out.timings.items())
            # CPU time beside wall time: on a shared machine the difference is other processes' load.
            print(f"audit in process, {label}, {args.bootstrap} bootstrap resamples: {out.state}, {wall:.2f} s wall, "
                  f"{cpu:.2f} s CPU of this process  [{stages}]; peak RSS so far {peak_mb():.0f} MB")
        # Memory on its own run: tracing allocations slows numpy code several times over.
        add_labels(factory, ds, rng, args.batch_rows, -2)
        tracemalloc.start()
        runner.run_audit(factory, ds, task_id=f"bench-inline-{uuid.uuid4().hex[:6]}", options=options,
                         lease=timedelta(hours=1))
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"  peak traced allocations of a cold audit {traced_peak / 2**20:.0f} MB; peak RSS of this process "
              f"{peak_mb():.0f} MB")

        # 2. Label arrival → updated certification, through a real worker.
        with TemporaryDirectory() as tmp:
            env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITOR_")}
            env.update({"AUDITOR_INSTANCE_PATH": tmp, "AUDITOR_DATABASE_URL": url,
                        "AUDITOR_BROKER_URL": args.redis_url, "AUDITOR_RESULT_BACKEND": args.redis_url,
                        "AUDITOR_CELERY_QUEUE": f"bench-{uuid.uuid4().hex[:6]}",
                        "AUDITOR_AUDIT_BOOTSTRAP": str(args.bootstrap),
                        "AUDITOR_AUDIT_PAIRWISE_MAX_ANNOTATIONS": str(args.pairwise_max_annotations),
                        "AUDITOR_FANOUT_MIN_ITEMS": str(args.fanout_min_items),
                        "AUDITOR_CELERY_CONCURRENCY": str(args.concurrency),
                        "PYTHONPATH": str(ROOT)})
            os.environ.update({k: v for k, v in env.items() if k.startswith("AUDITOR_")})
            from auditor.worker import celery_app
            from auditor.worker.dispatch import request_audit

            celery_app.conf.update({"broker_url": args.redis_url, "result_backend": args.redis_url})
            log = open(Path(tmp) / "worker.log", "wb")
            worker = subprocess.Popen([sys.executable, "-c", "from auditor.cli import main; main()", "worker",
                                       "--loglevel=WARNING"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
            time.sleep(3)  # worker start-up is not part of the latency
            lat = []
            for trial in range(args.trials):
                version = add_labels(factory, ds, rng, args.batch_rows, trial)
                t0 = time.perf_counter()
                request_audit(ds)
                while not certified_at(factory, ds, version):
                    if time.perf_counter() - t0 > 300:
                        raise SystemExit("no certification within 300 s; see the worker log")
                    time.sleep(0.02)
                lat.append(time.perf_counter() - t0)
            lat = np.array(lat)
            print(f"label arrival → updated certification over {args.trials} imports of {args.batch_rows} labels: "
                  f"p50 {np.percentile(lat, 50):.2f} s, p95 {np.percentile(lat, 95):.2f} s "
                  f"(min {lat.min():.2f}, max {lat.max():.2f})")
            with session_scope(factory) as s:
                timings = [r.summary["timings"] for r in s.execute(
                    select(AuditRun).where(AuditRun.dataset_id == ds, ~AuditRun.task_id.startswith("bench-inline"),
                                           AuditRun.summary.is_not(None))).scalars()]
            for key in sorted({k for t in timings for k in t}):
                values = [t[key] for t in timings if key in t]
                print(f"  worker audit stage {key}: median {np.median(values):.2f} s over {len(values)} runs")
    finally:
        stop_processes(worker)
        engine.dispose()


if __name__ == "__main__":
    main()
