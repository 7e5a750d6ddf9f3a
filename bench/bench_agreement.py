"""Benchmark: agreement coefficients at scale, and against Gwet's irrCAC side by side.

Run by hand:

    python bench/bench_agreement.py [--items 1000000] [--per-item 10] [--classes 3 10] \
        [--bootstrap 1000] [--pairwise-items 100000] [--irrcac-python PATH/TO/python] [--smoke]

1. Krippendorff's alpha and Fleiss' kappa on ``--items`` items with ``--per-item``
   labels each, over each number of classes in ``--classes`` (items draw class
   probabilities from a Dirichlet(0.5) prior): point estimate alone, then with
   ``--bootstrap`` resamples. Prints wall time, peak traced memory and the number of
   distinct count vectors (what the bootstrap cost grows with).
2. Pairwise Cohen's kappa on ``--pairwise-items`` items, each labeled by
   ``--per-item`` of ``--raters`` annotators, with ``--pairwise-bootstrap`` resamples.
3. With ``--irrcac-python`` (or ``IRRCAC_PYTHON``): the interpreter of a virtual
   environment holding ``irrCAC`` (Gwet's package, installed there, never into
   Auditor's environment) computes Fleiss' generalised kappa and Krippendorff's
   alpha on data with a varying number of raters per item; both results are printed
   side by side. Without it that comparison is skipped with a message. This same
   file is the runner the reference interpreter executes (``--reference-runner``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc


def reference_runner(csv_path: str) -> None:
    """Run irrCAC on an items × raters CSV (empty = missing); print one JSON object."""
    import pandas as pd
    from irrCAC.raw import CAC

    frame = pd.read_csv(csv_path, index_col=0)
    t0 = time.perf_counter()
    cac = CAC(frame)
    fleiss = cac.fleiss()["est"]
    alpha = cac.krippendorff()["est"]
    print(json.dumps({
        "seconds": time.perf_counter() - t0,
        "fleiss": fleiss["coefficient_value"], "fleiss_pa": fleiss["pa"], "fleiss_pe": fleiss["pe"],
        "alpha": alpha["coefficient_value"],
    }))


def _timed(label: str, func, *args, **kwargs):
    tracemalloc.start()
    t0 = time.perf_counter()
    out = func(*args, **kwargs)
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"  {label:<44s} {seconds:8.3f} s   peak {peak / 2**20:8.1f} MiB")
    return out


def _synthetic_counts(rng, n_items: int, per_item: int, n_classes: int):
    import numpy as np

    p = rng.dirichlet(np.full(n_classes, 0.5), size=n_items)
    return rng.multinomial(per_item, p)


def bench_counts(args) -> None:
    import numpy as np

    from auditor.stats import count_histogram, fleiss_kappa, krippendorff_alpha

    for n_classes in args.classes:
        rng = np.random.default_rng(args.seed)
        counts = _synthetic_counts(rng, args.items, args.per_item, n_classes)
        n_distinct = count_histogram(counts).unique.shape[0]
        print(f"\n{args.items:,} items × {args.per_item} labels, {n_classes} classes "
              f"({n_distinct:,} distinct count vectors)")
        # The first Fleiss call pays the statsmodels import: warm it up untimed.
        fleiss_kappa(counts[:10], n_bootstrap=0)
        for func in (krippendorff_alpha, fleiss_kappa):
            point = _timed(f"{func.__name__}, point estimate", func, counts, n_bootstrap=0)
            boot = _timed(f"{func.__name__}, {args.bootstrap} resamples", func, counts,
                          n_bootstrap=args.bootstrap, rng=args.seed)
            print(f"    value {point.value:.6f}  95% CI [{boot.ci_low:.6f}, {boot.ci_high:.6f}]")


def bench_pairwise(args) -> None:
    import numpy as np

    from auditor.stats import annotations_from_records, pairwise_cohen_kappa

    rng = np.random.default_rng(args.seed)
    n, r, k = args.pairwise_items, args.raters, args.per_item
    truth = rng.integers(0, 3, size=n)
    raters = np.argsort(rng.random((n, r)), axis=1)[:, :k]  # k distinct raters per item
    skill = rng.uniform(0.5, 0.95, size=r)
    correct = rng.random((n, k)) < skill[raters]
    labels = np.where(correct, truth[:, None], rng.integers(0, 3, size=(n, k)))
    ann = annotations_from_records({
        "item_id": np.repeat(np.arange(n), k), "annotator_id": raters.ravel(), "label": labels.ravel(),
    })
    print(f"\npairwise Cohen's kappa: {n:,} items × {k} of {r} annotators")
    for interval in ("percentile", "basic"):
        res = _timed(f"pairwise_cohen_kappa, {args.pairwise_bootstrap} resamples, {interval}",
                     pairwise_cohen_kappa, ann, n_bootstrap=args.pairwise_bootstrap, interval=interval, rng=args.seed)
        print(f"    {res.n_pairs:,} pairs; mean (overlap-weighted) {res.mean_weighted:.4f} "
              f"[{res.weighted_ci_low:.4f}, {res.weighted_ci_high:.4f}]; "
              f"unweighted {res.mean_unweighted:.4f} [{res.unweighted_ci_low:.4f}, {res.unweighted_ci_high:.4f}]")
    # Each annotator labels correctly with probability `skill`, else uniformly at
    # random, on uniform classes: the population kappa of a pair is known exactly.
    s = skill[np.asarray(res.annotators)]
    q, w = s + (1 - s) / 3, (1 - s) / 3
    true = (np.outer(q, q) + 2 * np.outer(w, w) - 1 / 3) / (2 / 3)
    ok = np.isfinite(res.kappa)
    print(f"    population mean kappa over the same pairs: overlap-weighted "
          f"{np.average(true[ok], weights=res.overlap[ok]):.4f}, unweighted {true[ok].mean():.4f}")


def bench_reference(args) -> None:
    import numpy as np
    import pandas as pd

    from auditor.stats import annotations_from_wide, fleiss_kappa, krippendorff_alpha

    print("\nvarying raters per item, against irrCAC (Gwet)")
    if not args.irrcac_python:
        print("  skipped: no irrCAC interpreter given (--irrcac-python or IRRCAC_PYTHON)")
        return
    rng = np.random.default_rng(args.seed)
    n, r = 2000, 12
    truth = rng.integers(0, 4, size=n)
    matrix = np.where(rng.random((n, r)) < 0.7, truth[:, None], rng.integers(0, 4, size=(n, r))).astype(float)
    matrix[rng.random((n, r)) < 0.35] = np.nan  # 0 to 12 labels per item
    frame = pd.DataFrame(matrix, columns=[f"r{j}" for j in range(r)])
    ann = annotations_from_wide(frame)  # NaN = missing
    ours_f = fleiss_kappa(ann, n_bootstrap=0)
    ours_a = krippendorff_alpha(ann, n_bootstrap=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ratings.csv")
        frame.to_csv(path)
        out = subprocess.run([args.irrcac_python, __file__, "--reference-runner", path],
                             capture_output=True, text=True, check=True)
    ref = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"  {n} items × up to {r} raters, 4 classes; irrCAC took {ref['seconds']:.2f} s")
    print(f"  Fleiss (generalised)  auditor {ours_f.value:.5f}  irrCAC {ref['fleiss']:.5f}  "
          f"(P_a {ours_f.observed_agreement:.5f} vs {ref['fleiss_pa']:.5f}, "
          f"P_e {ours_f.expected_agreement:.5f} vs {ref['fleiss_pe']:.5f})")
    print(f"  Krippendorff alpha    auditor {ours_a.value:.5f}  irrCAC {ref['alpha']:.5f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--per-item", type=int, default=10)
    parser.add_argument("--classes", type=int, nargs="+", default=[3, 10])
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--pairwise-items", type=int, default=100_000)
    parser.add_argument("--pairwise-bootstrap", type=int, default=200)
    parser.add_argument("--raters", type=int, default=200, help="Annotator pool of the pairwise benchmark.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--irrcac-python", default=os.environ.get("IRRCAC_PYTHON"))
    parser.add_argument("--reference-runner", metavar="CSV", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true",
                        help="Tiny sizes (2,000 items, 50 resamples, 500 pairwise items): runs in seconds.")
    args = parser.parse_args()
    if args.smoke:
        args.items, args.bootstrap, args.pairwise_items, args.raters = 2000, 50, 500, 20
    if args.reference_runner:
        reference_runner(args.reference_runner)
        return
    bench_counts(args)
    bench_pairwise(args)
    bench_reference(args)
    print(f"\nprocess peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
