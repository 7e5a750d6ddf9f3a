"""An audit plan for a real release: BERT on the SNLI dev and test sets, against SNLI's 5 labels.

Run by hand (needs the public datasets: a ``shared/datasets`` folder next to the checkout,
or ``AUDITOR_SHARED_DIR``):

    python bench/bench_plan_snli.py [--simulations 400] [--seed 0] [--smoke]

The items are SNLI 1.0's dev items with their five annotator labels (``annotator_labels``),
the predictions those of Baan et al. (2022)'s ``bert-base-uncased`` run 0 on the dev and
test halves of that set (9,842 items). Prints the verdict now, the label model the planner
chose, the population margin per number of labels per new item and its limit, the
cheapest design reaching 80%, and the time the plan took (docs/planning.md shows it).
"""

from __future__ import annotations

import argparse
import time
import warnings

from _datasets import NOT_FOUND, datasets_dir, snli_bert

from auditor.stats import certify, plan_certification


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--simulations", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="50 simulated futures")
    args = ap.parse_args()
    if args.smoke:
        args.simulations = 50
    base = datasets_dir()
    if base is None:
        print(NOT_FOUND)
        return
    counts, preds = snli_bert(base)
    res = certify(counts, preds)
    print(f"SNLI dev+test halves, BERT (bert-base-uncased run 0): {counts.shape[0]:,} items × "
          f"{counts.sum(axis=1).mean():.2f} labels; L = {res.l:.4f}, U_t = {res.u_t:.4f}, "
          f"margin {res.l - res.u_t:+.4f}")
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    plan = plan_certification(counts, preds, n_simulations=args.simulations, rng=args.seed)
    took = time.perf_counter() - t0
    m = plan.models[0]
    print(f"now: {'certified' if plan.certified_now else 'not certified'} (S = {plan.score_now:.4f}); label model: "
          f"{m.family}" + (f" with {m.difficulty_classes} difficulty classes" if m.family == "latent-class" else "")
          + f" (AIC {m.aic:,.1f})")
    print("population margin L − U_t by labels per new item: "
          + ", ".join(f"{k}: {v:+.4f}" for k, v in plan.margins.items()))
    print(f"certifiable: {plan.certifiable} (posterior probability that some budget could: "
          f"{plan.certifiable_probability:.3f})")
    for name, d in (("to certify with 80% probability", plan.recommended),
                    ("80% even at the low end of the 80% range", plan.assured)):
        if d is None:
            print(f"{name}: no design within the grid")
        else:
            print(f"{name}: {d.new_items:,} new items × {d.labels_per_item} labels: {d.labels:,} labels; "
                  f"P(certified) {d.probability:.3f} ± {d.std_error:.3f} (range "
                  f"{d.probability_low:.2f}–{d.probability_high:.2f})")
    for note in plan.notes:
        print(f"note: {note}")
    print(f"plan: {took:.1f} s ({args.simulations} simulated futures per design)")


if __name__ == "__main__":
    main()
