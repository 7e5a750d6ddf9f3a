"""Bulk import into PostgreSQL and snapshot loading, next to a bare COPY of the same rows.

Run by hand (never by pytest):

    python bench/bench_ingest.py --url postgresql://postgres@127.0.0.1:5432/test --rows 10000000

It writes a long CSV (item_id, annotator_id, label; ``--labels-per-item`` annotators per
item from a pool of ``--annotators``), creates a scratch database next to the one in
``--url`` (dropped at the end), and measures, each in a fresh child process (so peak
memory is that phase's own, each timed write after a CHECKPOINT so that none pays for the
previous one's dirty pages; ``--repeat N`` runs bare COPY A and the import N times each,
alternating, each pair in a scratch database of its own, and counts the best of each):

* bare COPY A: the CSV file into a table of three text columns, no keys;
* Auditor's import (``import_annotations``; into this fresh dataset it takes the bulk
  path: the file read and checked on the client block by block, each block's annotation
  rows streamed by binary COPY into the dataset's new partition on a second connection,
  whose primary key is then built while the importing transaction copies the items in;
  the partition attached, batch and outbox rows written, all or nothing);
* bare COPY B: the stored annotation rows (integer ids) into an empty table with the
  annotation table's columns and primary key;
* snapshot loading: counts only (one row per item), and with every annotation row.

The URL can also come from ``AUDITOR_BENCH_POSTGRES_URL``; without either the benchmark
says so and stops.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from _scratch import child_or_no_url, peak_mb, phase_parser, run_phase, scratch_database

LABELS = ("a", "b", "c")


def write_csv(path: Path, rows: int, per_item: int, annotators: int, seed: int) -> None:
    """The benchmark file, written in chunks so generating it needs little memory."""
    rng = np.random.default_rng(seed)
    items = rows // per_item
    chunk = 200_000
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("item_id,annotator_id,label\n")
        for start in range(0, items, chunk):
            n = np.arange(start, min(items, start + chunk))
            # per_item distinct annotators per item: consecutive offsets from a per-item start.
            first = (n * 7919) % annotators
            for k in range(per_item):
                ann = (first + k) % annotators
                lab = rng.integers(0, len(LABELS), size=len(n))
                lines = "".join(f"item-{i:09d},w{a:05d},{LABELS[c]}\n" for i, a, c in zip(n, ann, lab, strict=True))
                fh.write(lines)


# --- phases (each runs in its own process) -----------------------------------------


def _settle(url: str) -> None:
    """A checkpoint before a timed write, so no phase pays for the previous one's dirty pages.

    Needs a superuser or the pg_checkpoint role; without either the phases run as they are.
    """
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            pass


def _timed_copy(conn, url: str, statement: str, source) -> tuple[int, float]:
    """COPY from ``source`` (a binary file) in one transaction, after a checkpoint: rows, seconds."""
    _settle(url)
    start = time.perf_counter()
    with conn.transaction(), conn.cursor() as cur:
        with cur.copy(statement) as copy:
            while data := source.read(1 << 20):
                copy.write(data)
        rows = cur.rowcount
    return rows, time.perf_counter() - start


def phase_bare_copy(url: str, csv_path: str) -> dict:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_bare")
        conn.execute("CREATE TABLE bench_bare (item_id text, annotator_id text, label text)")
        with open(csv_path, "rb") as fh:
            rows, seconds = _timed_copy(conn, url, "COPY bench_bare FROM STDIN WITH (FORMAT csv, HEADER true)", fh)
        conn.execute("DROP TABLE bench_bare")
    return {"rows": rows, "seconds": seconds, "peak_mb": peak_mb()}


def phase_import(url: str, csv_path: str) -> dict:
    from auditor.db import make_engine, make_session_factory, migrate, session_scope
    from auditor.ingest import create_dataset, import_annotations

    engine = make_engine(url)
    migrate.upgrade(engine)
    factory = make_session_factory(engine)
    with session_scope(factory) as s:
        create_dataset(s, "bench", list(LABELS))
    _settle(url)
    start = time.perf_counter()
    with session_scope(factory) as s:
        result = import_annotations(s, "bench", csv_path)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    with session_scope(factory) as s:
        again = import_annotations(s, "bench", csv_path)
    again_seconds = time.perf_counter() - start
    engine.dispose()
    return {"rows": result.rows, "seconds": seconds, "peak_mb": peak_mb(), "message": result.message,
            "reimport_status": again.status, "reimport_seconds": again_seconds}


def phase_stored_copy(url: str) -> dict:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_stored")
        conn.execute("CREATE TABLE bench_stored (LIKE annotation INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
                     "INCLUDING INDEXES)")
        with tempfile.TemporaryFile() as buf:
            with conn.cursor() as cur, cur.copy("COPY (SELECT * FROM annotation) TO STDOUT (FORMAT binary)") as copy:
                for data in copy:
                    buf.write(data)
            buf.seek(0)
            rows, seconds = _timed_copy(conn, url, "COPY bench_stored FROM STDIN (FORMAT binary)", buf)
        conn.execute("DROP TABLE bench_stored")
    return {"rows": rows, "seconds": seconds, "peak_mb": peak_mb()}


def phase_snapshot(url: str, with_annotations: bool) -> dict:
    from sqlalchemy import text

    from auditor.audit.snapshot import load_snapshot
    from auditor.db import make_engine

    engine = make_engine(url)
    with engine.connect() as conn:
        dataset_id = conn.execute(text("SELECT id FROM dataset WHERE name = 'bench'")).scalar_one()
    load_snapshot(engine, dataset_id)  # warm the connection pool and the server's cache
    start = time.perf_counter()
    snap = load_snapshot(engine, dataset_id, annotations=with_annotations)
    seconds = time.perf_counter() - start
    n_ann = int(snap.counts.counts.sum())
    assert snap.annotations is None or len(snap.annotations) == n_ann
    engine.dispose()
    return {"items": snap.n_items, "annotations": n_ann, "seconds": seconds, "peak_mb": peak_mb()}


# --- import order: the same labels into an empty dataset and onto predicted items -----


def write_order_files(folder: Path, rows: int, items: int, annotators: int, seed: int,
                      gold_items: int | None = None) -> dict[str, str]:
    """Labels (``rows`` over ``items`` items), one release's predictions for the same
    items and gold labels for the first ``gold_items`` of them (all by default): the files
    of the import-order phases."""
    rng = np.random.default_rng(seed)
    per_item = max(1, rows // items)
    paths = {k: str(folder / f"{k}.csv") for k in ("labels", "predictions", "gold")}
    write_csv(Path(paths["labels"]), items * per_item, per_item, annotators, seed)
    with open(paths["predictions"], "w", encoding="utf-8") as fh:
        fh.write("item_id,label\n")
        fh.writelines(f"item-{i:09d},{LABELS[c]}\n" for i, c in enumerate(rng.integers(0, len(LABELS), items)))
    with open(paths["gold"], "w", encoding="utf-8") as fh:
        fh.write("item_id,label\n")
        fh.writelines(f"item-{i:09d},{LABELS[c]}\n"
                      for i, c in enumerate(rng.integers(0, len(LABELS), items if gold_items is None else gold_items)))
    return paths


def phase_order(url: str, folder: str, order: str) -> dict:
    """One import order in a fresh database (statistics never gathered): the timed import
    is the last one of the order; the ones before it only set the scene.

    ``labels_empty``: labels into an empty dataset. ``labels_after_predictions``: the same
    labels once the dataset's items exist (a release's predictions first). ``gold_empty``:
    gold labels into an empty dataset. ``gold_after_labels``: the same gold right after
    the labels' bulk load.
    """
    from auditor.db import make_engine, make_session_factory, migrate, session_scope
    from auditor.ingest import create_dataset, import_annotations, import_gold, import_predictions

    files = {k: str(Path(folder) / f"{k}.csv") for k in ("labels", "predictions", "gold")}
    engine = make_engine(url)
    migrate.upgrade(engine)
    factory = make_session_factory(engine)
    with session_scope(factory) as s:
        create_dataset(s, "bench", list(LABELS))
    before = {"labels_after_predictions": "predictions", "gold_after_labels": "labels"}.get(order)
    timed = "gold" if order.startswith("gold") else "labels"
    steps = {
        "labels": lambda s: import_annotations(s, "bench", files["labels"]),
        "predictions": lambda s: import_predictions(s, "bench", files["predictions"], model="m", release="1"),
        "gold": lambda s: import_gold(s, "bench", files["gold"]),
    }
    setup = 0.0
    if before:
        start = time.perf_counter()
        with session_scope(factory) as s:
            steps[before](s)
        setup = time.perf_counter() - start
    _settle(url)
    start = time.perf_counter()
    with session_scope(factory) as s:
        result = steps[timed](s)
    seconds = time.perf_counter() - start
    engine.dispose()
    return {"rows": result.rows, "seconds": seconds, "setup_seconds": setup, "peak_mb": peak_mb(),
            "message": result.message}


def write_cifar10h_files(folder: Path, limit: int | None) -> bool:
    """CIFAR-10H as files (shared datasets): its four models' predictions (probabilities)
    and its labels, one row per label, each item's labels by distinct raters drawn from a
    pool of 2,571 (the data set names no raters). False when the data set is not here."""
    from bench_real_audits import _annotations_from_counts, cifar10h, datasets_dir

    base = datasets_dir()
    if base is None or not (base / "cifar10h").is_dir():
        return False
    snap = cifar10h(base, limit)
    names = snap.labels
    for k, rel in enumerate(snap.releases):
        with open(folder / f"cifar-pred-{k}.csv", "w", encoding="utf-8") as fh:
            fh.write("item_id," + ",".join(names) + "\n")
            fh.writelines(f"img-{i:05d}," + ",".join(f"{p:.12g}" for p in row / row.sum()) + "\n"
                          for i, row in enumerate(rel.probabilities))
        (folder / f"cifar-pred-{k}.name").write_text(f"{rel.model}\n{rel.version}\n")
    item, annotator, label = _annotations_from_counts(snap.counts, np.random.default_rng(0), 2571)
    with open(folder / "cifar-labels.csv", "w", encoding="utf-8") as fh:
        fh.write("item_id,annotator_id,label\n")
        fh.writelines(f"img-{i:05d},rater-{a:04d},{names[c]}\n" for i, a, c in zip(item, annotator, label, strict=True))
    return True


def phase_cifar10h(url: str, folder: str) -> dict:
    """CIFAR-10H's predictions first (four releases), then its labels, then an audit to a
    stored certification, in a fresh database: the labels' import and the audit timed."""
    from datetime import timedelta

    from sqlalchemy import func, select

    from auditor.audit.pipeline import AuditOptions
    from auditor.audit.runner import run_audit
    from auditor.config import load_worker_settings
    from auditor.db import make_engine, make_session_factory, migrate, session_scope
    from auditor.db.models import Certification
    from auditor.ingest import create_dataset, import_annotations, import_predictions

    engine = make_engine(url)
    migrate.upgrade(engine)
    factory = make_session_factory(engine)
    labels = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    with session_scope(factory) as s:
        d = create_dataset(s, "cifar10h", labels).id
    start = time.perf_counter()
    for k in range(4):
        model, version = (Path(folder) / f"cifar-pred-{k}.name").read_text().split()
        with session_scope(factory) as s:
            import_predictions(s, "cifar10h", str(Path(folder) / f"cifar-pred-{k}.csv"), model=model, release=version)
    predictions = time.perf_counter() - start
    _settle(url)
    start = time.perf_counter()
    with session_scope(factory) as s:
        result = import_annotations(s, "cifar10h", str(Path(folder) / "cifar-labels.csv"))
    labels_seconds = time.perf_counter() - start
    start = time.perf_counter()
    outcome = run_audit(factory, d, task_id="bench", options=AuditOptions.from_settings(load_worker_settings()),
                        lease=timedelta(minutes=30))
    audit_seconds = time.perf_counter() - start
    with session_scope(factory) as s:
        stored = s.scalar(select(func.count()).select_from(Certification)
                          .where(Certification.audit_run_id == outcome.run_id))
    engine.dispose()
    return {"rows": result.rows, "predictions_seconds": predictions, "labels_seconds": labels_seconds,
            "audit_seconds": audit_seconds, "audit_state": outcome.state, "certifications": stored,
            "seconds": labels_seconds + audit_seconds, "peak_mb": peak_mb(), "message": result.message}


ORDERS = ("labels_empty", "labels_after_predictions", "gold_empty", "gold_after_labels")

PHASES = {
    **{order: (lambda a, order=order: phase_order(a.url, a.order_dir, order)) for order in ORDERS},
    "cifar10h": lambda a: phase_cifar10h(a.url, a.order_dir),
    "bare_copy": lambda a: phase_bare_copy(a.url, a.csv),
    "import": lambda a: phase_import(a.url, a.csv),
    "stored_copy": lambda a: phase_stored_copy(a.url),
    "snapshot_counts": lambda a: phase_snapshot(a.url, False),
    "snapshot_annotations": lambda a: phase_snapshot(a.url, True),
}


def main() -> None:
    parser = phase_parser(__doc__.split("\n\n")[0], PHASES)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--labels-per-item", type=int, default=5)
    parser.add_argument("--annotators", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="bare COPY A and import this many times each (alternating); the best of each counts")
    parser.add_argument("--csv", help="(internal / reuse) path of the generated CSV")
    parser.add_argument("--order-rows", type=int, default=300_000,
                        help="labels of the import-order rows (predictions first, gold after)")
    parser.add_argument("--order-items", type=int, default=10_000, help="items of the import-order rows")
    parser.add_argument("--gold-items", type=int, help="items given gold in the gold rows (default: all)")
    parser.add_argument("--cifar10h", action="store_true",
                        help="also CIFAR-10H's labels after its predictions, to a stored certification")
    parser.add_argument("--cifar10h-items", type=int, help="only the first N images of CIFAR-10H")
    parser.add_argument("--orders-only", action="store_true", help="only the import-order rows")
    parser.add_argument("--order-dir", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="20,000 rows, one repetition: seconds")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.annotators, args.repeat = 20_000, 50, 1
        args.order_rows, args.order_items = 6_000, 500
        args.cifar10h, args.cifar10h_items = True, 100
    if child_or_no_url(args, PHASES):
        return
    orders(args)
    if args.orders_only:
        return

    with tempfile.TemporaryDirectory() as tmp:
        csv_path = args.csv or str(Path(tmp) / "annotations.csv")
        if not args.csv or not Path(csv_path).exists():
            start = time.perf_counter()
            write_csv(Path(csv_path), args.rows, args.labels_per_item, args.annotators, args.seed)
            print(f"wrote {args.rows:,} rows ({Path(csv_path).stat().st_size / 1e6:.0f} MB) "
                  f"in {time.perf_counter() - start:.1f} s")
        runs: dict[str, list[dict]] = {"bare_copy": [], "import": []}
        results = {}
        for k in range(args.repeat):
            # Each repetition in a scratch database of its own; the last one goes on to the
            # stored-rows COPY and the snapshots.
            with scratch_database(args.url) as url:
                phases = ["bare_copy", "import"]
                if k == args.repeat - 1:
                    phases += ["stored_copy", "snapshot_counts", "snapshot_annotations"]
                for phase in phases:
                    results[phase] = r = run_phase(__file__, phase, url, "--csv", csv_path)
                    runs.setdefault(phase, []).append(r)
                    print(f"{phase:22s} {json.dumps(r)}", flush=True)
        for phase in ("bare_copy", "import"):  # the best of the repetitions, for both alike
            results[phase] = min(runs[phase], key=lambda r: r["seconds"])

    bare, imp, stored = results["bare_copy"], results["import"], results["stored_copy"]
    rate = {k: results[k]["rows"] / results[k]["seconds"] for k in ("bare_copy", "import", "stored_copy")}
    print()
    print(f"annotations                      {imp['rows']:,}")
    if args.repeat > 1:
        for phase in ("bare_copy", "import"):
            times = ", ".join(f"{r['seconds']:.1f}" for r in runs[phase])
            print(f"  {phase} runs: {times} s (the best counts)")
    print(f"bare COPY A (CSV → text table)   {bare['seconds']:8.1f} s  {rate['bare_copy']:12,.0f} rows/s")
    print(f"bare COPY B (rows → annotation)  {stored['seconds']:8.1f} s  {rate['stored_copy']:12,.0f} rows/s")
    print(f"Auditor import                   {imp['seconds']:8.1f} s  {rate['import']:12,.0f} rows/s  "
          f"peak {imp['peak_mb']:.0f} MB")
    print(f"  ratio to bare COPY A           {rate['import'] / rate['bare_copy']:8.1%}")
    print(f"  ratio to bare COPY B           {rate['import'] / rate['stored_copy']:8.1%}")
    print(f"  re-import (no-op)              {imp['reimport_seconds']:8.1f} s  ({imp['reimport_status']})")
    for key, label in (("snapshot_counts", "counts only"), ("snapshot_annotations", "with annotations")):
        r = results[key]
        rows = r["items"] if key == "snapshot_counts" else r["annotations"]
        print(f"snapshot, {label:22s} {r['seconds']:8.2f} s  {rows / r['seconds']:12,.0f} rows/s  "
              f"peak {r['peak_mb']:.0f} MB  ({r['items']:,} items, {r['annotations']:,} annotations)")


def orders(args) -> None:
    """The import-order rows: each order in a fresh scratch database of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        write_order_files(Path(tmp), args.order_rows, args.order_items, min(args.annotators, 2000), args.seed,
                          args.gold_items)
        r = {}
        for order in ORDERS:
            with scratch_database(args.url) as url:
                r[order] = run_phase(__file__, order, url, "--order-dir", tmp)
            print(f"{order:26s} {json.dumps(r[order])}", flush=True)
        if args.cifar10h:
            if write_cifar10h_files(Path(tmp), args.cifar10h_items):
                with scratch_database(args.url) as url:
                    c = run_phase(__file__, "cifar10h", url, "--order-dir", tmp)
                print(f"{'cifar10h':26s} {json.dumps(c)}", flush=True)
            else:
                c = None
                print("cifar10h: skipped (no shared datasets: set AUDITOR_SHARED_DIR)")
    print()
    for what, empty, after, label in (("labels", "labels_empty", "labels_after_predictions", "predictions first"),
                                      ("gold", "gold_empty", "gold_after_labels", "after the labels")):
        e, a = r[empty], r[after]
        limit = 1.5 * e["seconds"] + 3
        print(f"{what:6s} into an empty dataset     {e['seconds']:8.2f} s  {e['rows'] / e['seconds']:12,.0f} rows/s")
        print(f"{what:6s} {label:22s} {a['seconds']:8.2f} s  {a['rows'] / a['seconds']:12,.0f} rows/s  "
              f"(target ≤ 1.5× + 3 s = {limit:.1f} s: {'met' if a['seconds'] <= limit else 'NOT met'})")
    if args.cifar10h and c is not None:
        print(f"CIFAR-10H labels after its predictions {c['labels_seconds']:8.2f} s  ({c['rows']:,} labels; "
              f"predictions {c['predictions_seconds']:.1f} s before), audit to {c['certifications']} stored "
              f"certification(s) {c['audit_seconds']:.1f} s ({c['audit_state']}): end to end {c['seconds']:.1f} s")
    print()


if __name__ == "__main__":
    main()
