"""Benchmark: the one row histogram (``auditor.stats.row_histogram``) against numpy's
row-wise ``np.unique(axis=0)``, on count matrices of the shapes the statistics see.

Run by hand:

    python bench/bench_histogram.py            # 1M items x 3 and x 10 classes, 200k x 60 classes
    python bench/bench_histogram.py --smoke    # tiny sizes (seconds)

Each row draws per-item label counts (``--per-item`` labels from a Dirichlet(0.5) mixture of
a tenth as many templates, so that rows repeat as in real data), checks that both give the
same distinct rows and multiplicities, and prints the best of ``--repeat`` wall times. The
60-class row takes the key past 2**62 and exercises the dense re-coding (the overflow rule).
"""

from __future__ import annotations

import argparse
import time


def _counts(rng, n_items: int, n_classes: int, per_item: int):
    import numpy as np

    templates = rng.dirichlet(np.full(n_classes, 0.5), size=max(1, n_items // 10))
    return rng.multinomial(per_item, templates[rng.integers(0, templates.shape[0], n_items)])


def _best(f, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> None:
    import numpy as np

    from auditor.stats import count_histogram

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run each")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--numpy", action="store_true", help="also time np.unique(axis=0) (slow: tens of seconds)")
    args = parser.parse_args(argv)
    shapes = [(2_000, 3, 50), (2_000, 10, 5), (500, 60, 40)] if args.smoke else \
        [(1_000_000, 3, 50), (1_000_000, 10, 5), (200_000, 60, 40)]
    repeat = 1 if args.smoke else args.repeat
    rng = np.random.default_rng(args.seed)
    print(f"{'items':>10} {'classes':>8} {'labels/item':>12} {'distinct':>9} {'row_histogram':>14}"
          + (f" {'np.unique(axis=0)':>18}" if args.numpy or args.smoke else ""))
    for n_items, n_classes, per_item in shapes:
        counts = _counts(rng, n_items, n_classes, per_item)
        hist = count_histogram(counts)
        ref_rows, ref_mult = np.unique(counts, axis=0, return_counts=True)
        if not (np.array_equal(hist.unique, ref_rows) and np.array_equal(hist.multiplicity, ref_mult)):
            raise SystemExit(f"row_histogram differs from np.unique at {n_items} x {n_classes}")
        ours = _best(lambda c=counts: count_histogram(c), repeat)
        line = f"{n_items:>10,} {n_classes:>8} {per_item:>12} {hist.unique.shape[0]:>9,} {ours:>13.3f}s"
        if args.numpy or args.smoke:
            line += f" {_best(lambda c=counts: np.unique(c, axis=0, return_counts=True), 1):>17.3f}s"
        print(line, flush=True)


if __name__ == "__main__":
    main()
