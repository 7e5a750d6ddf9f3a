"""Benchmark: an audit plan for a large release.

Run by hand:  python bench/bench_plan.py [--items 100000] [--labels-per-item 5] [--smoke]

Simulates a release's data (``--items`` items × ``--labels-per-item`` labels from a
vendor pool, a model somewhat better than the annotators), then times
``plan_certification`` with its default grid (new items from 100 to 10,000,000 × 2, 3, 5,
7, 10 labels per item, 400 simulated futures each) under the anytime verdict, and under
the paper's OMS verdict (which adds relabeling designs), and ``relabel_priority``.
Target: the anytime plan for 100,000 items × 5 labels in under 5 s.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from auditor.simulate import PoolScenario
from auditor.stats import plan_certification, relabel_priority


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--labels-per-item", type=int, default=5)
    ap.add_argument("--simulations", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.items, args.simulations = 2_000, 50
    rng = np.random.default_rng(args.seed)
    pool = PoolScenario(hard_fraction=0.1, hard_penalty=0.2, model_accuracy=0.88)
    truth, hard = pool.items(rng, args.items)
    counts = pool.labels(rng, truth, hard, args.labels_per_item)
    preds = pool.predictions(rng, truth, hard)
    print(f"{args.items:,} items × {args.labels_per_item} labels, 3 classes; model accuracy "
          f"{pool.model_oracle_accuracy:.3f}, average annotator {pool.average_annotator_accuracy:.3f}")
    for method in ("anytime", "oms"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            plan = plan_certification(counts, preds, method=method, label_cost=0.05,
                                      n_simulations=args.simulations, rng=args.seed)
            took = time.perf_counter() - t0
        rec = plan.recommended
        what = ("none within the grid" if rec is None else
                f"{rec.new_items:,} new items × {rec.labels_per_item} labels + {rec.extra_labels_on_existing:,} "
                f"relabels, p = {rec.probability:.3f} ± {rec.std_error:.3f}, cost {rec.cost:,.2f}")
        target = " (target < 5 s)" if method == "anytime" else ""
        print(f"plan ({method}): {took:.2f} s{target}; {len(plan.designs)} designs × {plan.n_simulations} futures; "
              f"recommended: {what}; certifiable {plan.certifiable} "
              f"(posterior probability {plan.certifiable_probability:.3f})")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rank = relabel_priority(counts, preds)
    print(f"relabel_priority: {time.perf_counter() - t0:.2f} s for {len(rank):,} items; top expected gain "
          f"{rank.expected_gain[0]:.3g}")


if __name__ == "__main__":
    main()
