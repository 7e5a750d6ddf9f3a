"""Benchmark: a later batch of new items into a populated dataset, with table statistics absent.

Run by hand:

    python bench/bench_second_batch.py --url postgresql://postgres@127.0.0.1:5432/test \
        [--first-items 200000] [--batches 10000 40000] [--labels-per-item 5]

In a scratch database (dropped at the end) it imports a first batch of
``--first-items`` items (``--labels-per-item`` labels each), then, for each size in
``--batches``, a batch of that many *new* items into the same dataset, timed. Before
each timed batch, autovacuum is off for every table and the planner statistics of
``item``, ``annotation`` (and its partitions) and ``annotator`` are deleted: the plan
cannot lean on an ANALYZE that autovacuum may or may not have run (the case that
turned this import quadratic: 10k new items took 55-70 s, 40k ran for 9.7 minutes).
The staging tables are analysed by the import itself. Also times a re-import of the
largest batch (nothing changes) and a batch that re-labels 10% of existing pairs.

Prints seconds and rows per second for each batch; a linear plan keeps the rate
roughly constant as the batch grows. Needs a superuser (to clear pg_statistic).

After the first batch and after each new-items batch it also times the quality
monitors' update as an audit runs it (``auditor.audit.quality.update_quality``: read the
annotations written since the last update, score them, store the touched windows):
once over the whole first batch, then per batch, after an ANALYZE of the annotations
(as autovacuum would have run; the import timings clear the statistics on purpose).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _scratch import NO_URL, POSTGRES_URL_ENV, scratch_database

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LABELS = ("a", "b", "c")


def write_batch(path: Path, first_item: int, items: int, per_item: int, annotators: int, seed: int,
                relabel: bool = False) -> int:
    import numpy as np

    rng = np.random.default_rng(seed)
    n = np.arange(first_item, first_item + items)
    rows = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("item_id,annotator_id,label\n")
        for k in range(per_item):
            ann = ((n * 7919) + k) % annotators
            lab = rng.integers(0, len(LABELS), size=len(n))
            if relabel:
                keep = rng.random(len(n)) < 0.1
                n_k, ann, lab = n[keep], ann[keep], lab[keep]
            else:
                n_k = n
            fh.write("".join(f"item-{i:09d},w{a:05d},{LABELS[c]}\n" for i, a, c in zip(n_k, ann, lab, strict=True)))
            rows += len(n_k)
    return rows


def forget_statistics(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
            "WHERE s.nspname = 'public' AND c.relkind IN ('r', 'p')")]
        for t in tables:
            try:  # a partitioned parent has no storage options; its partitions do
                conn.execute(f"ALTER TABLE {t} SET (autovacuum_enabled = false)")
            except psycopg.errors.DatabaseError:
                pass
        conn.execute("DELETE FROM pg_statistic WHERE starelid IN (SELECT c.oid FROM pg_class c JOIN pg_namespace s "
                     "ON s.oid = c.relnamespace WHERE s.nspname = 'public')")
        # reltuples/relpages as if never analysed, too
        conn.execute("UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE relnamespace = 'public'::regnamespace "
                     "AND relkind IN ('r', 'p', 'i')")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get(POSTGRES_URL_ENV))
    parser.add_argument("--first-items", type=int, default=200_000)
    parser.add_argument("--batches", type=int, nargs="+", default=[10_000, 40_000])
    parser.add_argument("--labels-per-item", type=int, default=5)
    parser.add_argument("--annotators", type=int, default=2000)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the test suite runs this)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.first_items, args.batches, args.annotators = 2000, [200, 800], 50
    if not args.url:
        print(NO_URL)
        return 0

    from auditor.db import make_engine, make_session_factory, session_scope
    from auditor.ingest import create_dataset, import_annotations

    with scratch_database(args.url, migrate=True) as url:
        engine = make_engine(url)
        try:
            factory = make_session_factory(engine)
            with session_scope(factory) as s:
                create_dataset(s, "bench", list(LABELS))
            with tempfile.TemporaryDirectory() as tmp:
                def timed(path: Path, what: str, rows: int) -> None:
                    forget_statistics(url)
                    t0 = time.perf_counter()
                    with session_scope(factory) as s:
                        result = import_annotations(s, "bench", str(path))
                    dt = time.perf_counter() - t0
                    print(f"{what:<44} {rows:>10,} rows {dt:8.2f} s {rows / dt:12,.0f} rows/s  ({result.status})",
                          flush=True)

                def quality(what: str) -> None:
                    # The monitors read the new rows by the BRIN index on data_version, which the
                    # planner picks once the table has statistics (autovacuum's ANALYZE); the
                    # import timings above clear them on purpose, so restore them first.
                    import psycopg
                    from sqlalchemy import select

                    from auditor.audit.quality import update_quality
                    from auditor.db.models import Dataset

                    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                                         autocommit=True) as conn:
                        conn.execute("ANALYZE annotation")
                    t0 = time.perf_counter()
                    with session_scope(factory) as s:
                        ds = s.execute(select(Dataset).where(Dataset.name == "bench").with_for_update()).scalar_one()
                        update_quality(s, ds, up_to=ds.data_version, run_id=None)
                    print(f"{'quality monitors: ' + what:<44} {'':>10} {'':>4} {time.perf_counter() - t0:8.2f} s",
                          flush=True)

                first = Path(tmp) / "first.csv"
                rows = write_batch(first, 0, args.first_items, args.labels_per_item, args.annotators, 0)
                t0 = time.perf_counter()
                with session_scope(factory) as s:
                    import_annotations(s, "bench", str(first))
                print(f"{'first batch (bulk path)':<44} {rows:>10,} rows {time.perf_counter() - t0:8.2f} s", flush=True)
                quality("the first batch")
                start = args.first_items
                last = None
                for k, size in enumerate(args.batches, 1):
                    path = Path(tmp) / f"batch{k}.csv"
                    rows = write_batch(path, start, size, args.labels_per_item, args.annotators, k)
                    timed(path, f"{size:,} new items, statistics absent", rows)
                    quality(f"after {rows:,} new annotations")
                    start += size
                    last = (path, size, rows)
                if last is not None:
                    # the same rows in another order: not a duplicate file, every row already stored
                    again = Path(tmp) / "again.csv"
                    lines = last[0].read_text().splitlines(keepends=True)
                    again.write_text(lines[0] + "".join(reversed(lines[1:])))
                    timed(again, f"the {last[1]:,}-item batch reordered (no change)", last[2])
                    relabel = Path(tmp) / "relabel.csv"
                    rows = write_batch(relabel, 0, args.first_items, args.labels_per_item, args.annotators, 99,
                                       relabel=True)
                    timed(relabel, "re-labels of ~10% of the first batch's pairs", rows)
        finally:
            engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
