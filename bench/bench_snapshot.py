"""Snapshot loading from PostgreSQL, phase by phase, on a dataset built directly in SQL.

Run by hand (never by pytest):

    python bench/bench_snapshot.py --url postgresql://postgres@127.0.0.1:5432/test --items 2000000
    python bench/bench_snapshot.py --url ... --smoke     # tiny sizes, seconds

It creates a scratch database next to the one in ``--url`` and fills it with one dataset
of ``--items`` items × ``--labels-per-item`` annotations from a pool of ``--annotators``
annotators (3 classes), consistent ``item.label_counts``, a little gold, and one model
release with hard labels and class probabilities on every item, written with
``INSERT ... SELECT`` from ``generate_series`` (much faster than the import; the import
has its own benchmark). Then, each in a fresh child process (so peak memory is that
phase's own, including the interpreter and the libraries), it measures:

* ``counts``: :func:`auditor.audit.snapshot.load_snapshot`, counts only (one row per item);
* ``annotations``: the same with every annotation row;
* ``counts_no_predictions``, ``annotations_no_predictions``: the same without reading
  the release's predictions (``releases=[]``);
* ``worker``: the audit worker's loader (:func:`auditor.audit.snapshot.load_audit_snapshot`),
  annotations and predictions, no cache;
* ``worker_cached``: the same loader a second time with its cache, after a small batch
  of new annotations was written (the incremental path).

Each phase warms the server's cache with one untimed load first and reports the best of
``--repeat`` timed loads. ``--database NAME`` reuses (or creates and keeps) a database of
that name instead of a scratch one, so the phases can be rerun without rebuilding;
``--phases`` picks phases. The URL can also come from ``AUDITOR_BENCH_POSTGRES_URL``.
"""

from __future__ import annotations

import json
import time

from _scratch import child_or_no_url, peak_mb, phase_parser, run_phase, scratch_database

LABELS = ("a", "b", "c")


# --- building the dataset ------------------------------------------------------------


def build(url: str, items: int, per_item: int, annotators: int) -> dict:
    """One dataset at data_version 1 (gold and predictions at 2), rows written in SQL."""
    import psycopg

    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT count(*) FROM dataset WHERE name = 'bench'").fetchone()[0]:
            return {"built": False}
        with conn.transaction():
            conn.execute("SET LOCAL work_mem = '256MB'")
            ws = conn.execute("INSERT INTO workspace (slug, name) VALUES ('bench', 'bench') RETURNING id").fetchone()[0]
            ds = conn.execute("INSERT INTO dataset (workspace_id, name, labels, data_version) "
                              "VALUES (%s, 'bench', %s, 2) RETURNING id", (ws, json.dumps(LABELS))).fetchone()[0]
            batch = conn.execute(
                "INSERT INTO import_batch (workspace_id, dataset_id, kind, format, row_count, checksum, data_version) "
                "VALUES (%s, %s, 'annotations', 'csv', %s, 'bench', 1) RETURNING id",
                (ws, ds, items * per_item)).fetchone()[0]
            first_ann = conn.execute(
                "INSERT INTO annotator (workspace_id, external_id, vendor, tier) "
                "SELECT %s, 'w' || lpad(a::text, 5, '0'), 'vendor-' || (a %% 4), "
                "CASE WHEN a %% 50 = 0 THEN 'expert' ELSE 'crowd' END "
                "FROM generate_series(0, %s - 1) a RETURNING id", (ws, annotators)).fetchone()[0]
            first_item = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM item").fetchone()[0]
            # Labels drawn per (item, k) in a temporary table; items and counts follow from it.
            conn.execute("CREATE TEMP TABLE g ON COMMIT DROP AS "
                         "SELECT n, k, floor(random() * 3)::int2 AS label "
                         "FROM generate_series(0, %s - 1) n, generate_series(0, %s - 1) k",
                         (items, per_item))
            conn.execute(
                "INSERT INTO item (id, dataset_id, external_id, gold_label, gold_source, label_counts) "
                "SELECT %s + n, %s, 'item-' || lpad(n::text, 9, '0'), "
                "CASE WHEN n %% 100 = 0 THEN (n %% 3)::int2 END, CASE WHEN n %% 100 = 0 THEN 'bench' END, "
                "ARRAY[count(*) FILTER (WHERE label = 0), count(*) FILTER (WHERE label = 1), "
                "count(*) FILTER (WHERE label = 2)]::int[] FROM g GROUP BY n ORDER BY n",
                (first_item, ds))
            conn.execute("SELECT setval(pg_get_serial_sequence('item', 'id'), (SELECT max(id) FROM item))")
            # The dataset's own partition where annotation is partitioned by dataset (as the import does).
            partitioned = conn.execute("SELECT relkind = 'p' FROM pg_class WHERE relname = 'annotation'").fetchone()[0]
            target = f"annotation_p{int(ds)}" if partitioned else "annotation"
            if partitioned:
                conn.execute(f"CREATE TABLE {target} (LIKE annotation INCLUDING DEFAULTS, "
                             f"CONSTRAINT ck_{target}_dataset CHECK (dataset_id = {int(ds)}))")
            # per_item distinct annotators per item: consecutive offsets from a per-item start.
            conn.execute(
                f"INSERT INTO {target} (dataset_id, item_id, annotator_id, label, batch_id, data_version) "
                "SELECT %s, %s + n, %s + ((n::int8 * 7919 + k) %% %s)::int4, label, %s, 1 FROM g ORDER BY n, k",
                (ds, first_item, first_ann, annotators, batch))
            if partitioned:
                conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
                from auditor.db.partitions import KEY_COLUMNS

                conn.execute(f"ALTER TABLE {target} ADD CONSTRAINT {target}_pkey PRIMARY KEY ({KEY_COLUMNS})")
                conn.execute(f"ALTER TABLE annotation ATTACH PARTITION {target} FOR VALUES IN ({int(ds)})")
            model = conn.execute("INSERT INTO model (workspace_id, name) VALUES (%s, 'bench-model') RETURNING id",
                                 (ws,)).fetchone()[0]
            release = conn.execute("INSERT INTO release (model_id, version) VALUES (%s, 'v1') RETURNING id",
                                   (model,)).fetchone()[0]
            pbatch = conn.execute(
                "INSERT INTO import_batch (workspace_id, dataset_id, kind, format, row_count, checksum, "
                "data_version, release_id) VALUES (%s, %s, 'predictions', 'csv', %s, 'bench-p', 2, %s) RETURNING id",
                (ws, ds, items, release)).fetchone()[0]
            conn.execute(
                "INSERT INTO prediction (release_id, item_id, dataset_id, label, probabilities, batch_id, data_version) "
                "SELECT %s, %s + n, %s, (n %% 3)::int2, "
                "ARRAY[0.8 - 0.1 * (n %% 3), 0.1 + 0.05 * (n %% 3), 0.1 + 0.05 * (n %% 3)]::float8[], %s, 2 "
                "FROM generate_series(0, %s - 1) n", (release, first_item, ds, pbatch, items))
        conn.execute("VACUUM ANALYZE item")
        conn.execute("VACUUM ANALYZE annotation")
        if partitioned:
            conn.execute(f"VACUUM ANALYZE {target}")
        conn.execute("VACUUM ANALYZE prediction")
    return {"built": True, "seconds": time.perf_counter() - start}


def add_batch(url: str, rows: int) -> int:
    """A small new batch: ``rows`` re-labels of existing annotations, the way an import writes them."""
    import psycopg

    with psycopg.connect(url) as conn, conn.transaction():
        ds, version = conn.execute("SELECT id, data_version FROM dataset WHERE name = 'bench' FOR UPDATE").fetchone()
        version += 1
        conn.execute("CREATE TEMP TABLE changed ON COMMIT DROP AS "
                     "SELECT item_id, annotator_id, label AS old, ((label + 1) %% 3)::int2 AS new FROM annotation "
                     "WHERE dataset_id = %s ORDER BY item_id DESC LIMIT %s", (ds, rows))
        conn.execute("UPDATE annotation a SET label = c.new, data_version = %s FROM changed c "
                     "WHERE a.dataset_id = %s AND a.item_id = c.item_id AND a.annotator_id = c.annotator_id",
                     (version, ds))
        conn.execute("UPDATE item i SET label_counts = (SELECT ARRAY[count(*) FILTER (WHERE label = 0), "
                     "count(*) FILTER (WHERE label = 1), count(*) FILTER (WHERE label = 2)]::int[] "
                     "FROM annotation a WHERE a.dataset_id = %s AND a.item_id = i.id) "
                     "WHERE i.id IN (SELECT item_id FROM changed)", (ds,))
        conn.execute("UPDATE dataset SET data_version = %s WHERE id = %s", (version, ds))
    return version


# --- phases (each runs in its own process) -----------------------------------------


def _dataset_id(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT id FROM dataset WHERE name = 'bench'").fetchone()[0]


def phase_snapshot(url: str, with_annotations: bool, repeat: int, releases: bool = True) -> dict:
    from auditor.audit.snapshot import load_snapshot
    from auditor.db import make_engine

    engine = make_engine(url)
    dataset_id = _dataset_id(url)
    wanted = None if releases else []
    load_snapshot(engine, dataset_id, releases=wanted)  # warm the connection pool and the server's cache
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        snap = load_snapshot(engine, dataset_id, annotations=with_annotations, releases=wanted)
        times.append(time.perf_counter() - start)
        n_items, n_ann = snap.n_items, int(snap.counts.counts.sum())
        assert snap.annotations is None or len(snap.annotations) == n_ann
        del snap
    engine.dispose()
    return {"items": n_items, "annotations": n_ann, "seconds": min(times), "all": times, "peak_mb": peak_mb()}


def phase_worker(url: str, repeat: int, cached: bool) -> dict:
    from auditor.audit.snapshot import SnapshotCache
    from auditor.audit.snapshot import load_audit_snapshot as load_snapshot
    from auditor.db import make_engine, make_session_factory

    engine = make_engine(url)
    factory = make_session_factory(engine)
    dataset_id = _dataset_id(url)

    def once(cache=None):
        with factory() as s, s.begin():
            start = time.perf_counter()
            snap = load_snapshot(s, dataset_id, cache=cache)
            return time.perf_counter() - start, snap

    times = []
    cache = None
    if cached:
        for _ in range(repeat):
            cache = SnapshotCache()
            once(cache)  # fills the cache (the cache holds the rows: its memory is part of the peak)
            add_batch(url, 1000)
            seconds, snap = once(cache)
            times.append(seconds)
            assert snap.n_annotations == int(snap.counts.sum())  # (tests compare it with a full read)
            del snap
    else:
        once()[1]  # warm
        for _ in range(repeat):
            seconds, snap = once()
            times.append(seconds)
            del snap
    _, snap = once(cache if cached else None)
    out = {"items": int(snap.item_ids.size), "annotations": snap.n_annotations, "seconds": min(times),
           "all": times, "releases": len(snap.releases), "peak_mb": peak_mb()}
    engine.dispose()
    return out


PHASES = {
    "counts": lambda a: phase_snapshot(a.url, False, a.repeat),
    "annotations": lambda a: phase_snapshot(a.url, True, a.repeat),
    "counts_no_predictions": lambda a: phase_snapshot(a.url, False, a.repeat, releases=False),
    "annotations_no_predictions": lambda a: phase_snapshot(a.url, True, a.repeat, releases=False),
    "worker": lambda a: phase_worker(a.url, a.repeat, cached=False),
    "worker_cached": lambda a: phase_worker(a.url, a.repeat, cached=True),
}


def main() -> None:
    parser = phase_parser(__doc__.split("\n\n")[0], PHASES)
    parser.add_argument("--items", type=int, default=2_000_000)
    parser.add_argument("--labels-per-item", type=int, default=5)
    parser.add_argument("--annotators", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database", help="use (and keep) this database instead of a scratch one")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated, of: " + ", ".join(PHASES))
    parser.add_argument("--smoke", action="store_true",
                        help="Tiny sizes (2,000 items × 5 from 50 annotators, one timed load per phase).")
    args = parser.parse_args()
    if args.smoke:
        args.items, args.annotators, args.repeat = 2000, 50, 1
    if child_or_no_url(args, PHASES):
        return

    # --database: that database, created (and migrated) only when missing, and kept.
    with scratch_database(args.url, name=args.database, keep=bool(args.database), migrate=True) as url:
        built = build(url, args.items, args.labels_per_item, args.annotators)
        if built["built"]:
            print(f"built {args.items:,} items × {args.labels_per_item} annotations in {built['seconds']:.1f} s",
                  flush=True)
        results = {}
        for phase in args.phases.split(","):
            results[phase] = r = run_phase(__file__, phase, url, "--repeat", str(args.repeat))
            print(f"{phase:26s} {json.dumps(r)}", flush=True)

    print()
    for phase, r in results.items():
        rows = r["annotations"] if not phase.startswith("counts") else r["items"]
        what = "items" if phase.startswith("counts") else "annotations"
        print(f"{phase:26s} {r['seconds']:7.2f} s  {rows / r['seconds']:12,.0f} {what}/s  "
              f"peak {r['peak_mb']:5.0f} MB  (runs: {', '.join(f'{t:.2f}' for t in r['all'])})")


if __name__ == "__main__":
    main()
