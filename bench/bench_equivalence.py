"""Benchmark: survey power curves and equivalence, Auditor vs the reference package.

Run by hand (never by pytest):

    python bench/bench_equivalence.py [--datasets DIR] [--reference-python PY]
        [--reference-bootstrap 500] [--reference-results FILE.json] [--bootstrap 500]

* Running example of Resnick et al. (1000 items × 10 raters): time and peak memory of
  `survey_equivalence` for ABC + cross-entropy, majority + agreement and frequency +
  cross-entropy with 500 bootstrap samples.
* The reference package `surveyequivalence` 0.1.3 on the same data in the same run,
  through its own interpreter (``--reference-python`` or ``AUDITOR_SE_PYTHON``; it pins
  old numpy/pandas, so it lives in its own virtual environment): its time, the ratio,
  the largest difference in c_k, and that difference in units of the Monte-Carlo
  error of the package's 200-subset sampling (estimated by repeating Auditor's own
  subset path with different seeds). ``--reference-results`` reuses the JSON printed
  by an earlier reference run (``bench/_se_reference.py``), since the package needs
  about 50 minutes for 500 bootstrap samples.
* Scale: 1,000,000 items × 10 raters drawn from the running example's model, ABC +
  cross-entropy, with 50 / 500 / 5000 bootstrap samples: time and peak memory.

Datasets are found with ``--datasets`` or ``AUDITOR_SHARED_DIR``/datasets.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from math import comb
from pathlib import Path

import numpy as np
import pandas as pd

from auditor.stats import power_curve, survey_equivalence

HELPER = Path(__file__).with_name("_se_reference.py")
CODES = {"pos": 0, "neg": 1}  # the package's probability vectors are [pos, neg]


def measure(fn, *args, **kwargs):
    """(result, seconds, peak MB): timed without tracing, memory traced in a second run."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    fn(*args, **kwargs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, seconds, peak / 1e6


def load_running_example(datasets: Path):
    base = datasets / "surveyequivalence_resnick" / "data" / "running_example"
    ratings = pd.read_csv(base / "ref_rater_labels.csv", index_col=0)
    preds = pd.read_csv(base / "predictions.csv", index_col=0)
    matrix = ratings.replace(CODES).to_numpy(dtype=np.int64)
    hard = preds["mock hard classifier"].str.split(": ").str[1].map(CODES).to_numpy()
    soft = np.array([[float(x) for x in s.split(": ", 1)[1].strip("[]").split(",")]
                     for s in preds["calibrated hard classifier"]])
    return base, matrix, hard, soft


PAIRS = {
    "abc:cross_entropy": ("abc", "cross_entropy", "calibrated hard classifier"),
    "plurality:agreement": ("majority", "agreement", "mock hard classifier"),
    "frequency:cross_entropy": ("frequency", "cross_entropy", "calibrated hard classifier"),
}


def package_subsets(k_raters: int, k: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """The package's choice of rater subsets (surveyequivalence 0.1.3, rater_subsets):
    all when C(K, k) <= 200; 200 distinct random ones when C(K, k) > 1000; otherwise
    200 draws *with* replacement among all subsets, duplicates dropped."""
    from itertools import combinations

    total = comb(k_raters, k)
    if total <= 200:
        return list(combinations(range(k_raters), k))
    if total > 1000:
        chosen: set = set()
        while len(chosen) < 200:
            chosen.add(tuple(rng.choice(k_raters, k, replace=False)))
        return list(chosen)
    every = list(combinations(range(k_raters), k))
    return [every[i] for i in sorted(set(rng.choice(total, 200).tolist()))]


def package_like_curve(matrix: np.ndarray, combiner: str, scorer: str, rng: np.random.Generator) -> np.ndarray:
    """The package's estimator, for its Monte-Carlo spread: its subset choice and, for a
    vote, a coin flip at every tie (per item and subset), scored against every unused
    column with Auditor's combiners and scorers."""
    from auditor.stats.equivalence.combiners import ABCModel, predict
    from auditor.stats.equivalence.scorers import SCORERS

    n, k_raters = matrix.shape
    counts = np.stack([(matrix == lab).sum(axis=1) for lab in (0, 1)], axis=1)
    prior = counts.sum(axis=0) / counts.sum()
    uniq, mult = np.unique(counts, axis=0, return_counts=True)
    model = ABCModel(uniq, mult)
    ones = np.ones((1, n))
    out = []
    for k in range(k_raters):
        scores = []
        for subset in package_subsets(k_raters, k, rng):
            sub = matrix[:, list(subset)]
            y = np.stack([(sub == lab).sum(axis=1) for lab in (0, 1)], axis=1)
            if combiner == "majority":
                pick = np.where(y[:, 1] > y[:, 0], 1, np.where(y[:, 0] > y[:, 1], 0, rng.integers(0, 2, n)))
                pred = np.eye(2)[pick]
            else:
                pred = predict(combiner, y, counts, prior=prior, model=model, clip=0.02)
            others = [j for j in range(k_raters) if j not in subset]
            scores.append(np.mean([SCORERS[scorer](pred, matrix[:, j], ones)[0] for j in others]))
        out.append(np.mean(scores))
    return np.array(out)


def fmt_eq(v) -> str:
    return v if isinstance(v, str) else f"{v:.3f}"


def run_reference(python: str, base: Path, pair: str, bootstrap: int) -> dict:
    combiner, scorer = pair.split(":")
    column = PAIRS[pair][2]
    cmd = [python, str(HELPER), str(base / "ref_rater_labels.csv"), str(base / "predictions.csv"),
           "--combiner", combiner, "--scorer", scorer, "--bootstrap", str(bootstrap),
           "--labels", "pos", "neg", "--columns", column]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=Path, default=None)
    parser.add_argument("--reference-python", default=os.environ.get("AUDITOR_SE_PYTHON"))
    parser.add_argument("--reference-bootstrap", type=int, default=500)
    parser.add_argument("--reference-pairs", nargs="*", default=["abc:cross_entropy"], choices=sorted(PAIRS))
    parser.add_argument("--reference-results", type=Path, nargs="*", default=[],
                        help="JSON output(s) of bench/_se_reference.py to reuse, as PAIR=FILE")
    parser.add_argument("--bootstrap", type=int, default=500)
    parser.add_argument("--mc-repeats", type=int, default=20)
    parser.add_argument("--scale-items", type=int, default=1_000_000)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes: 20 resamples, no reference, a 2,000-item scale run")
    args = parser.parse_args()
    if args.smoke:
        args.bootstrap, args.reference_pairs, args.scale_items, args.mc_repeats = 20, [], 2000, 2

    datasets = args.datasets
    if datasets is None and os.environ.get("AUDITOR_SHARED_DIR"):
        datasets = Path(os.environ["AUDITOR_SHARED_DIR"]) / "datasets"
    ours = {}
    if datasets is None or not (datasets / "surveyequivalence_resnick").is_dir():
        print("running example: skipped (no datasets: pass --datasets or set AUDITOR_SHARED_DIR)")
    else:
        base, matrix, hard, soft = load_running_example(datasets)
        print(f"== running example: {matrix.shape[0]} items x {matrix.shape[1]} raters, "
              f"{args.bootstrap} bootstrap samples")
        for pair, (combiner, scorer, column) in PAIRS.items():
            preds = hard if column == "mock hard classifier" else soft
            eq, sec, mb = measure(survey_equivalence, matrix, preds, combiner=combiner, scorer=scorer,
                                  n_bootstrap=args.bootstrap, rng=0)
            ours[pair] = (eq, sec)
            print(f"auditor {pair:<24} {sec * 1000:8.1f} ms  peak {mb:6.1f} MB  equivalence "
                  f"{fmt_eq(eq.value)} [{fmt_eq(eq.ci_low)}, {fmt_eq(eq.ci_high)}]  "
                  f"classifier {eq.classifier_score.value:.4f}")

        saved = {}
        for item in args.reference_results:
            pair, _, file = str(item).partition("=")
            saved[pair] = json.loads(Path(file).read_text())
        for pair in args.reference_pairs:
            if pair in saved:
                ref = saved[pair]
                print(f"\n-- reference {pair}: loaded from an earlier run of bench/_se_reference.py")
            elif args.reference_python:
                print(f"\n-- reference {pair}: running surveyequivalence with {args.reference_bootstrap} "
                      "bootstrap samples (about 6 s per sample)...", flush=True)
                ref = run_reference(args.reference_python, base, pair, args.reference_bootstrap)
            else:
                print(f"\n-- reference {pair}: skipped (surveyequivalence not available: pass "
                      "--reference-python or set AUDITOR_SE_PYTHON to an interpreter with "
                      "surveyequivalence==0.1.3)")
                continue
            combiner, scorer, column = PAIRS[pair]
            eq, sec = ours[pair]
            ref_b = ref["n_bootstrap"]
            if ref_b != args.bootstrap:
                # Same work per sample on our side: time ours with the reference's count too.
                _, sec_b, _ = measure(survey_equivalence, matrix, hard if column.startswith("mock") else soft,
                                         combiner=combiner, scorer=scorer, n_bootstrap=ref_b, rng=0)
            else:
                sec_b = sec
            ref_curve = np.array(ref["curve_actual"])
            diff = np.abs(ref_curve - eq.curve.mean)
            # k where the package's c_k is exact: it enumerates every subset and, for a
            # vote, no tie can occur (odd k with two classes); elsewhere it is Monte Carlo.
            enumerated = np.array([comb(matrix.shape[1], k) <= 200 for k in eq.curve.k])
            no_ties = (eq.curve.k % 2 == 1) if combiner == "majority" else np.ones(len(eq.curve.k), bool)
            exact_k = enumerated & no_ties
            gen = np.random.default_rng(0)
            reps = np.array([package_like_curve(matrix, combiner, scorer, gen) for _ in range(args.mc_repeats)])
            mc_sd = reps.std(axis=0, ddof=1)
            mc = ~exact_k
            ref_eq = ref["equivalence_actual"][column]
            ref_reps = np.array(ref["equivalence_replicates"][column])
            print(f"reference time {ref['seconds']:.1f} s ({ref_b} bootstrap samples); auditor "
                  f"{sec_b * 1000:.1f} ms on the same count: {ref['seconds'] / sec_b:,.0f}x faster")
            print(f"largest |c_k difference| {diff.max():.2e}; where the package's c_k is exact "
                  f"(k = {eq.curve.k[exact_k].tolist()}) {diff[exact_k].max():.1e}; elsewhere (k = "
                  f"{eq.curve.k[mc].tolist()}) at most {np.max(diff[mc] / mc_sd[mc]):.1f} x the package's "
                  f"Monte-Carlo s.d. (estimated over {args.mc_repeats} runs of its estimator: "
                  f"{mc_sd[mc].min():.1e} to {mc_sd[mc].max():.1e})")
            for k in eq.curve.k:
                print(f"   k={k}: auditor {eq.curve.mean[k]:.6f}  reference {ref_curve[k]:.6f}  "
                      f"diff {ref_curve[k] - eq.curve.mean[k]:+.1e}  MC s.d. {mc_sd[k]:.1e}"
                      f"{'  (exact in the package)' if exact_k[k] else ''}")
            if ref_reps.size:
                lo, hi = np.quantile(ref_reps, [0.025, 0.975])
                print(f"equivalence: reference {ref_eq:.3f} [{lo:.3f}, {hi:.3f}]; auditor "
                      f"{fmt_eq(eq.value)} [{fmt_eq(eq.ci_low)}, {fmt_eq(eq.ci_high)}]")
            else:
                print(f"equivalence: reference {ref_eq:.3f}; auditor {fmt_eq(eq.value)}")

    if args.skip_scale:
        return
    n = args.scale_items
    rng = np.random.default_rng(0)
    state = rng.choice([0.8, 0.1, 0.5], size=n, p=[0.7, 0.2, 0.1])
    ratings = (rng.random((n, 10)) < state[:, None]).astype(np.int64)
    print(f"\n== scale: {n:,} items x 10 raters (running-example model), ABC + cross-entropy "
          f"(input matrix {ratings.nbytes / 1e6:.0f} MB)")
    for b in (50, 500, 5000):
        curve, sec, mb = measure(power_curve, ratings, combiner="abc", scorer="cross_entropy",
                                 n_bootstrap=b, rng=1)
        print(f"power_curve  {b:>5} bootstrap samples: {sec:6.2f} s  peak {mb:7.1f} MB  "
              f"c_9 - c_0 = {curve.mean[9] - curve.mean[0]:.4f} [{curve.ci_low[9] - curve.mean[0]:.4f}, "
              f"{curve.ci_high[9] - curve.mean[0]:.4f}]")
    # The paper's mock classifier: says "class 1" w.p. 0.9 / 0.05 / 0.5 in the three
    # states, calibrated to P(class 1) = 0.7681 when it does and 0.3226 when it does not.
    says = rng.random(n) < np.select([state == 0.8, state == 0.1], [0.9, 0.05], 0.5)
    probs = np.where(says[:, None], [0.2319, 0.7681], [0.6774, 0.3226])
    for b in (500,):
        eq, sec, mb = measure(survey_equivalence, ratings, probs, combiner="abc", scorer="cross_entropy",
                              n_bootstrap=b, rng=1)
        print(f"survey_equivalence {b} bootstrap samples: {sec:6.2f} s  peak {mb:7.1f} MB  "
              f"equivalence {fmt_eq(eq.value)} [{fmt_eq(eq.ci_low)}, {fmt_eq(eq.ci_high)}]")


if __name__ == "__main__":
    sys.exit(main())
