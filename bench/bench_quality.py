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
vendors, a year of weekly time stamps), each size in a fresh process: wall and CPU time
(on a shared machine the CPU time moves less) and the peak resident memory of the whole
process. The records are a pandas frame as a user would pass it (int64 ``item_id``,
``annotator_id`` and ``label``, ``vendor`` strings, ``timestamp`` datetime64[s]), built
with a lower peak than the call's, so that the peak is the call's; the line also gives the
resident memory just before the call.
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


def offline_records(n_records: int, per_item: int = 5, weeks: int = 52, n_annotators: int = 300):
    """The records :func:`build` draws (same seed, same values), as a user's frame: int64
    ``item_id``, ``annotator_id`` and ``label``, ``vendor`` strings, ``timestamp``
    datetime64[s]. Drawn with few full-length temporaries (no label counts), so that
    building the frame does not set the process's peak memory."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n_items = n_records // per_item
    truth = rng.integers(0, 3, n_items)
    annotator = rng.integers(0, n_annotators, size=(n_items, 1)) + np.arange(per_item)[None, :]
    annotator %= n_annotators
    accuracy = rng.uniform(0.7, 0.95, n_annotators)
    right = rng.random((n_items, per_item))
    right = right < accuracy[annotator]
    label = rng.integers(1, 3, size=(n_items, per_item))
    label += truth[:, None]
    label %= 3
    np.copyto(label, np.broadcast_to(truth[:, None], label.shape), where=right)
    del right, truth
    week = np.arange(n_items) * weeks // n_items
    stamp = (np.datetime64("2026-01-05T00:00:00", "s") + (week * 7 * 86400).astype("timedelta64[s]")
             + np.random.default_rng(0).integers(0, 5 * 86400, n_items).astype("timedelta64[s]"))
    del week
    vendor_of = np.asarray([f"vendor-{a % 3}" for a in range(n_annotators)], dtype=object)
    frame = pd.DataFrame({"item_id": np.repeat(np.arange(n_items), per_item)}, copy=False)
    frame["annotator_id"] = annotator.ravel()
    frame["label"] = label.ravel()
    del label
    frame["vendor"] = pd.array(vendor_of[annotator.ravel()], dtype="str")
    del annotator
    frame["timestamp"] = np.repeat(stamp, per_item)
    return frame


def _rss_mb() -> float:
    """Resident memory now (Linux), in MB; NaN elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:
        return float("nan")


def offline(n_records: int) -> None:
    """Time detect_changes on ``n_records`` records (run in a fresh process)."""
    from auditor.stats.quality import detect_changes

    frame = offline_records(n_records)
    frame_mb = frame.memory_usage(deep=True).sum() / 2**20
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    before = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    report = detect_changes(frame, by="vendor", window="7D", labels=[0, 1, 2])
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"detect_changes (series included) on {n_records:,} records: {elapsed:.2f} s ({cpu:.2f} s CPU), "
          f"peak RSS {peak:.0f} MB "
          f"({peak - before:.0f} MB above the {before:.0f} MB before the call; records frame {frame_mb:.0f} MB, "
          f"building it peaked at {built:.0f} MB), {len(report.series.frame)} windows, {len(report.changes)} changes")


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
