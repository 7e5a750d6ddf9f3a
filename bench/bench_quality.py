"""Benchmark: updating vendor/annotator quality series and change detectors after one batch.

Run by hand:

    python bench/bench_quality.py [--annotations 10000000] [--per-item 5] [--weeks 100] \
        [--annotators 2000] [--batch 10000] [--repeat 5]

Builds a dataset of ``--annotations`` labels (``--per-item`` per item, three vendors and
``--annotators`` annotators, spread over ``--weeks`` weekly batches), feeds its history to
two monitors (by vendor and by annotator) batch by batch, then times what the service
does when one more batch of ``--batch`` annotations arrives: score the newest window's
labels (the batch and those kept from earlier batches of the window) against their items'
current counts, replace the window's sums, and evaluate the detectors' look, for both
groupings. Prints the median and maximum over ``--repeat`` batches, and the time
the history took to feed. ``--smoke`` runs tiny sizes in seconds (the test suite runs it).

``--offline 100000,1000000,10000000`` instead times :func:`auditor.stats.quality.detect_changes`
(which computes the windowed series too) on that many records (five labels per item, three
vendors, a year of weekly time stamps), each size in a fresh process: wall time and peak
resident memory.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from auditor.stats.quality import QualityMonitor


def build(n_annotations: int, per_item: int, weeks: int, n_annotators: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_items = n_annotations // per_item
    truth = rng.integers(0, 3, n_items)
    annotator = (rng.integers(0, n_annotators, size=(n_items, 1)) + np.arange(per_item)[None, :]) % n_annotators
    accuracy = rng.uniform(0.7, 0.95, n_annotators)
    right = rng.random((n_items, per_item)) < accuracy[annotator]
    label = np.where(right, truth[:, None], (truth[:, None] + rng.integers(1, 3, size=(n_items, per_item))) % 3)
    counts = np.zeros((n_items, 3), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(n_items), per_item), label.ravel()), 1)
    week = np.arange(n_items) * weeks // n_items
    vendor_of = np.asarray([f"vendor-{a % 3}" for a in range(n_annotators)], dtype=object)
    names = np.asarray([f"annotator-{a:05d}" for a in range(n_annotators)], dtype=object)
    return counts, annotator, label, week, vendor_of, names


def offline(n_records: int) -> None:
    """Time detect_changes on ``n_records`` records (run in a fresh process)."""
    import pandas as pd

    from auditor.stats.quality import detect_changes

    rng = np.random.default_rng(0)
    per_item = 5
    n_items = n_records // per_item
    counts, annotator, label, week, vendor_of, _ = build(n_records, per_item, 52, 300)
    stamp = (np.datetime64("2026-01-05T00:00:00", "s") + (week * 7 * 86400).astype("timedelta64[s]")
             + rng.integers(0, 5 * 86400, n_items).astype("timedelta64[s]"))
    frame = pd.DataFrame({"item_id": np.repeat(np.arange(n_items), per_item), "annotator_id": annotator.ravel(),
                          "label": label.ravel(), "vendor": vendor_of[annotator.ravel()],
                          "timestamp": np.repeat(stamp, per_item)})
    del counts
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    report = detect_changes(frame, by="vendor", window="7D", labels=[0, 1, 2])
    elapsed = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"detect_changes (series included) on {n_records:,} records: {elapsed:.2f} s, peak RSS {peak / 1024:.0f} MB "
          f"({(peak - base) / 1024:.0f} MB above the records' frame), {len(report.series.frame)} windows, "
          f"{len(report.changes)} changes")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--annotations", type=int, default=10_000_000)
    p.add_argument("--per-item", type=int, default=5)
    p.add_argument("--weeks", type=int, default=100)
    p.add_argument("--annotators", type=int, default=2000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    p.add_argument("--offline", default=None, help="comma-separated record counts: time detect_changes instead")
    p.add_argument("--offline-one", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.offline_one:
        offline(args.offline_one)
        return
    if args.smoke and args.offline is None:
        args.offline = "20000"
    if args.offline:
        for n in (int(x) for x in args.offline.split(",")):
            subprocess.run([sys.executable, __file__, "--offline-one", str(n)], check=True)
        if not args.smoke:
            return
    if args.smoke:
        args.annotations, args.weeks, args.annotators, args.batch, args.repeat = 50_000, 10, 50, 1000, 2

    t0 = time.perf_counter()
    counts, annotator, label, week, vendor_of, names = build(args.annotations, args.per_item, args.weeks,
                                                             args.annotators)
    n_items = counts.shape[0]
    print(f"data: {args.annotations:,} annotations on {n_items:,} items, {args.annotators} annotators, "
          f"{args.weeks} weeks ({time.perf_counter() - t0:.1f} s to build)")
    monitors = {"vendor": QualityMonitor(), "annotator": QualityMonitor()}
    keys = np.arange(n_items)  # the items' ids: the service keeps the newest window's labels
    t0 = time.perf_counter()
    bounds = np.searchsorted(week, np.arange(args.weeks + 1))
    for w in range(args.weeks - 1):
        rows = np.arange(bounds[w], bounds[w + 1])
        item = np.repeat(rows, args.per_item)
        a = annotator[rows].ravel()
        monitors["vendor"].add_batch(w, item=item, group=vendor_of[a], label=label[rows].ravel(), counts=counts,
                                     keys=keys)
        monitors["annotator"].add_batch(w, item=item, group=names[a], label=label[rows].ravel(), counts=counts,
                                        keys=keys)
    print(f"history fed batch by batch: {time.perf_counter() - t0:.1f} s")

    last = np.arange(bounds[args.weeks - 1], bounds[args.weeks])
    per_batch = max(args.batch // args.per_item, 1)
    times = []
    for r in range(args.repeat):
        rows = last[r * per_batch:(r + 1) * per_batch]
        if rows.size == 0:
            break
        item = np.repeat(rows, args.per_item)
        a = annotator[rows].ravel()
        t0 = time.perf_counter()
        for key, group in (("vendor", vendor_of[a]), ("annotator", names[a])):
            monitors[key].add_batch(args.weeks - 1, item=item, group=group, label=label[rows].ravel(),
                                    counts=counts, keys=keys)
        times.append(time.perf_counter() - t0)
    times = np.asarray(times)
    print(f"one batch of {per_batch * args.per_item:,} annotations into {args.annotations:,}: "
          f"median {np.median(times) * 1000:.1f} ms, max {times.max() * 1000:.1f} ms "
          f"(both groupings, {len(times)} batches)")
    print(f"changes found: vendor {len(monitors['vendor'].changes())}, "
          f"annotator {len(monitors['annotator'].changes())}")


if __name__ == "__main__":
    main()
