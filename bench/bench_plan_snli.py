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
import gzip
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

from auditor.stats import certify, plan_certification

ROOT = Path(__file__).resolve().parents[1]
ORDER = {"entailment": 0, "contradiction": 1, "neutral": 2}


def datasets_dir() -> Path | None:
    env = os.environ.get("AUDITOR_SHARED_DIR")
    for base in ([Path(env)] if env else []) + [ROOT.parent / "shared", ROOT / "shared"]:
        if (base / "datasets").is_dir():
            return base / "datasets"
    return None


def snli_bert(base: Path) -> tuple[np.ndarray, np.ndarray]:
    counts_by_uid = {}
    with gzip.open(base / "snli_1.0_full_dev_test" / "snli_1.0_dev.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            c = [0, 0, 0]
            for lab in row["annotator_labels"]:
                if lab in ORDER:
                    c[ORDER[lab]] += 1
            counts_by_uid[row["pairID"]] = c
    uids, preds = [], []
    folder = base / "snli_dev_model_predictions_baan2022"
    for half in ("dev", "test"):
        with open(folder / f"SNLI_{half}_bert-base-uncased_0.json", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                uids.append(row["uid"])
                preds.append(row["pred"])
    return np.array([counts_by_uid[u] for u in uids]), np.array(preds)


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
        print("public datasets not found (shared/datasets next to the checkout, or AUDITOR_SHARED_DIR): nothing to do")
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
