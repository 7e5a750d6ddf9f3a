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


PHASES = {
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
    parser.add_argument("--smoke", action="store_true", help="20,000 rows, one repetition: seconds")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.annotators, args.repeat = 20_000, 50, 1
    if child_or_no_url(args, PHASES):
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


if __name__ == "__main__":
    main()
