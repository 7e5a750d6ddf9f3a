"""Benchmark: updating vendor/annotator quality series and change detectors after one batch.

Run by hand:

    python bench/bench_quality.py [--annotations 10000000] [--per-item 5] [--weeks 100] \
        [--annotators 2000] [--batch 10000] [--repeat 5]

Builds a dataset of ``--annotations`` labels (``--per-item`` per item, three vendors and
``--annotators`` annotators, spread over ``--weeks`` weekly batches), feeds its history to
two monitors (by vendor and by annotator) batch by batch, then times what the service
does when one more batch of ``--batch`` annotations arrives: score the batch against its
items' current counts, add it to the current window, and evaluate the detectors' look,
for both groupings. Prints the median and maximum over ``--repeat`` batches, and the time
the history took to feed. ``--smoke`` runs tiny sizes in seconds (the test suite runs it).
"""

from __future__ import annotations

import argparse
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


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--annotations", type=int, default=10_000_000)
    p.add_argument("--per-item", type=int, default=5)
    p.add_argument("--weeks", type=int, default=100)
    p.add_argument("--annotators", type=int, default=2000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = p.parse_args(argv)
    if args.smoke:
        args.annotations, args.weeks, args.annotators, args.batch, args.repeat = 50_000, 10, 50, 1000, 2

    t0 = time.perf_counter()
    counts, annotator, label, week, vendor_of, names = build(args.annotations, args.per_item, args.weeks,
                                                             args.annotators)
    n_items = counts.shape[0]
    print(f"data: {args.annotations:,} annotations on {n_items:,} items, {args.annotators} annotators, "
          f"{args.weeks} weeks ({time.perf_counter() - t0:.1f} s to build)")
    monitors = {"vendor": QualityMonitor(), "annotator": QualityMonitor()}
    t0 = time.perf_counter()
    bounds = np.searchsorted(week, np.arange(args.weeks + 1))
    for w in range(args.weeks - 1):
        rows = np.arange(bounds[w], bounds[w + 1])
        item = np.repeat(rows, args.per_item)
        a = annotator[rows].ravel()
        monitors["vendor"].add_batch(w, item=item, group=vendor_of[a], label=label[rows].ravel(), counts=counts)
        monitors["annotator"].add_batch(w, item=item, group=names[a], label=label[rows].ravel(), counts=counts)
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
                                    counts=counts)
        times.append(time.perf_counter() - t0)
    times = np.asarray(times)
    print(f"one batch of {per_batch * args.per_item:,} annotations into {args.annotations:,}: "
          f"median {np.median(times) * 1000:.1f} ms, max {times.max() * 1000:.1f} ms "
          f"(both groupings, {len(times)} batches)")
    print(f"changes found: vendor {len(monitors['vendor'].changes())}, "
          f"annotator {len(monitors['annotator'].changes())}")


if __name__ == "__main__":
    main()
