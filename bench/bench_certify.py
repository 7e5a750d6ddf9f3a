"""Benchmark: counts → bounds → confidence at scale, and building counts from long records.

Run by hand:  python bench/bench_certify.py [--items 1000000] [--labels-per-item 10] [--smoke]

Prints wall time and peak memory (resident set size) for each stage.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from auditor.stats import annotations_from_records, certify, confidence, lower_bound, upper_bounds


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


REPEAT = 5


def timed(label: str, fn, repeat: int | None = None):
    repeat = REPEAT if repeat is None else min(repeat, REPEAT)
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    print(f"{label:<48} median {np.median(times) * 1e3:9.1f} ms  (min {min(times) * 1e3:.1f}, "
          f"max {max(times) * 1e3:.1f}; peak RSS so far {peak_rss_mb():.0f} MB)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--labels-per-item", type=int, default=10)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=5, help="Timed runs of each stage (the median is shown).")
    ap.add_argument("--smoke", action="store_true", help="Tiny sizes (2,000 items, one run each): seconds.")
    args = ap.parse_args()
    if args.smoke:
        args.items, args.repeat = 2000, 1
    global REPEAT
    REPEAT = args.repeat
    rng = np.random.default_rng(args.seed)
    n, k, c = args.items, args.labels_per_item, args.classes

    truth = rng.integers(0, c, n)
    right = rng.random((n, k)) < 0.8
    labels = np.where(right, truth[:, None], (truth[:, None] + rng.integers(1, c, (n, k))) % c)
    preds = np.where(rng.random(n) < 0.9, truth, (truth + 1) % c)
    print(f"{n:,} items × {k} labels ({n * k:,} annotations), {c} classes; "
          f"peak RSS after generating data {peak_rss_mb():.0f} MB")

    # Long records → counts (the ingestion-side path; the service keeps counts current in SQL)
    item = np.repeat(np.arange(n), k)
    annotator = np.tile(np.arange(k), n)
    lab = labels.ravel()
    del labels
    ann = timed("long records → Annotations (validated)",
                lambda: annotations_from_records({"item_id": item, "annotator_id": annotator, "label": lab},
                                                 labels=list(range(c))), repeat=3)

    def build_counts():
        ann._cache.clear()  # measure the bincount, not the cached result
        return ann.counts().counts

    counts = timed("Annotations → (N, L) counts", build_counts, repeat=3)

    t0 = time.perf_counter()
    timed("upper_bounds (U_t, U_e)", lambda: upper_bounds(counts))
    timed("lower_bound (L, tie credit)", lambda: lower_bound(counts, preds))
    timed("confidence (OMS, feasible interval)", lambda: confidence(0.95, 0.9, n))
    res = timed("certify (all of the above, 4 confidences)", lambda: certify(counts, preds))
    print(f"U_t={res.u_t:.4f} U_e={res.u_e:.4f} L={res.l:.4f} S_oms(U_t)={res.score:.6f} "
          f"certified={res.certified}")
    print(f"total statistics wall time incl. repeats {time.perf_counter() - t0:.2f} s; "
          f"peak RSS {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
