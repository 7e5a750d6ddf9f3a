"""Benchmark: are the reported Monte Carlo errors honest?

Run by hand:

    python bench/bench_mc_error.py                  # 100 repetitions of each study
    python bench/bench_mc_error.py --repetitions 300
    python bench/bench_mc_error.py --smoke          # a few repetitions (seconds)

Three statistics use Monte Carlo where an exact sum would cost too much, and report its
standard error (and a fourth carries it on):

* the survey power curve's rater-subset path (``method="sampling"``, the paper's
  Algorithm 2): where C(K, k) > 200 it averages 200 random k-subsets of the raters and
  reports ``PowerCurve.mc_error``;
* BEST's F1 (macro) with many never-gold classes: a seeded Monte Carlo correction,
  reported in ``BestPerformance.standard_errors``;
* the power curve's exact path beyond ``MAX_SUB_COUNTS`` sub-count vectors
  (``method="monte_carlo"``): each key's sums over its sub-counts drawn from random
  orderings of its labels, with ``PowerCurve.mc_error``. Here the limit is set to 0 so
  that data the exact path can still sum are drawn too;
* the survey equivalence read off either Monte Carlo curve, with
  ``SurveyEquivalence.mc_error`` (the bracketing points' errors carried through the
  interpolation), against the equivalence read off the exact curve, for classifiers of
  random quality (a case per data set whose equivalence is a number).

On shapes where the exact value is also computable (the exact histogram path of the
power curve, which for agreement and cross-entropy equals the mean over all subsets;
BEST's inclusion–exclusion over a few never-gold classes), each repetition draws a new
data set and a new seed and compares. A reported error is honest if
``|Monte Carlo − exact| ≤ 1.96 · error`` in 95% of the cases (and within one error in
about 68%). Each study also reruns one case with the same seed and checks the result is
bit-identical.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from auditor.stats import LabelCounts, best_performance
from auditor.stats.best import f1 as f1_module
from auditor.stats.equivalence import exact as exact_module
from auditor.stats.equivalence import power_curve, survey_equivalence
from auditor.stats.equivalence.curve import equivalence_mc_error, equivalence_values

F1 = "f1 (macro)"


def _ratings(rng, n_items: int, n_raters: int, n_classes: int, concentration: float) -> np.ndarray:
    p = rng.dirichlet(np.full(n_classes, concentration), size=n_items)
    u = rng.random((n_items, n_raters, 1))
    return (u > np.cumsum(p, axis=1)[:, None, :]).sum(axis=2)


def curve_study(repetitions: int, n_items: int, n_raters: int, n_classes: int, seed: int):
    """z = (sampling − exact) / mc_error over every sampled k of every repetition."""
    zs = {("plurality", "agreement"): [], ("frequency", "cross_entropy"): []}
    rng = np.random.default_rng(seed)
    for rep in range(repetitions):
        # Alternate a spread-out and a concentrated prior: the second has skewed subset scores.
        ratings = _ratings(rng, n_items, n_raters, n_classes, 0.7 if rep % 2 == 0 else 0.2)
        for (combiner, scorer), out in zs.items():
            kw = dict(combiner=combiner, scorer=scorer, n_bootstrap=0, n_labels=n_classes)
            exact = power_curve(ratings, method="exact", k_values="all", **kw)
            mc = power_curve(ratings, method="sampling", rng=int(rng.integers(2**31)), **kw)
            sampled = mc.mc_error > 0
            out.extend(((mc.mean - exact.mean)[sampled] / mc.mc_error[sampled]).tolist())
    # Bit-identical for the same seed.
    ratings = _ratings(np.random.default_rng(seed), n_items, n_raters, n_classes, 0.7)
    kw = dict(combiner="plurality", scorer="agreement", n_bootstrap=5, n_labels=n_classes, method="sampling")
    a, b = power_curve(ratings, rng=7, **kw), power_curve(ratings, rng=7, **kw)
    identical = (np.array_equal(a.mean, b.mean) and np.array_equal(a.mc_error, b.mc_error)
                 and np.array_equal(a.replicates, b.replicates))
    return {key: np.array(v) for key, v in zs.items()}, identical


def _on_path(forced: bool, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` on the exact path's Monte Carlo tables (``forced``: its limit set
    to 0, so that data it can still sum are drawn) or on its exact sums, from fresh tables."""
    limit = exact_module.MAX_SUB_COUNTS
    exact_module.MAX_SUB_COUNTS = 0 if forced else limit
    exact_module.clear_table_cache()
    try:
        return fn(*args, **kwargs)
    finally:
        exact_module.MAX_SUB_COUNTS = limit


def tables_study(repetitions: int, n_items: int, n_labels_per_item: int, n_classes: int, seed: int):
    """z = (Monte Carlo tables − exact tables) / mc_error over every drawn k of every repetition,
    for each anonymous combiner the path serves, on the item's own labels and against reference
    raters."""
    pairs = [("plurality", "agreement", False), ("frequency", "cross_entropy", False),
             ("plurality", "agreement", True), ("frequency", "cross_entropy", True)]
    zs = {p: [] for p in pairs}
    rng = np.random.default_rng(seed)
    names = tuple(str(c) for c in range(n_classes))

    def curve(lc, ref, combiner, scorer, s, forced):
        return _on_path(forced, power_curve, lc, combiner=combiner, scorer=scorer, reference=ref,
                        n_bootstrap=0, rng=s)

    for rep in range(repetitions):
        conc = 0.7 if rep % 2 == 0 else 0.2
        pool = rng.multinomial(n_labels_per_item, rng.dirichlet(np.full(n_classes, conc)), size=n_items)
        ref = rng.multinomial(3, rng.dirichlet(np.full(n_classes, conc)), size=n_items)
        lc = LabelCounts(pool, names, tuple(range(n_items)))
        ref_lc = LabelCounts(ref, names, tuple(range(n_items)))
        for (combiner, scorer, with_ref), out in zs.items():
            r = ref_lc if with_ref else None
            s = int(rng.integers(2**31))
            ex, mc = curve(lc, r, combiner, scorer, s, False), curve(lc, r, combiner, scorer, s, True)
            assert ex.method == "exact" and mc.method == "monte_carlo"
            drawn = mc.mc_error > 0
            out.extend(((mc.mean - ex.mean)[drawn] / mc.mc_error[drawn]).tolist())
    lc = LabelCounts(rng.multinomial(n_labels_per_item, np.full(n_classes, 1 / n_classes), size=n_items),
                     names, tuple(range(n_items)))
    a, b = (curve(lc, None, "plurality", "agreement", 7, True) for _ in range(2))
    identical = np.array_equal(a.mean, b.mean) and np.array_equal(a.mc_error, b.mc_error)
    return {p: np.array(v) for p, v in zs.items()}, identical


def _classifier(rng, p: np.ndarray, scorer: str) -> np.ndarray:
    """Predictions of a classifier between the curve's ends: the true label distribution's
    argmax (agreement) or the distribution itself (cross-entropy), mixed with noise of a
    random strength."""
    n_items, n_classes = p.shape
    q = rng.uniform(0.0, 0.6)
    if scorer == "agreement":
        return np.where(rng.random(n_items) < q, rng.integers(0, n_classes, n_items), p.argmax(axis=1))
    return (1.0 - q) * p + q / n_classes


def equivalence_study(repetitions: int, n_items: int, n_labels_per_item: int, n_classes: int, seed: int):
    """z = (Monte Carlo equivalence − exact equivalence) / its mc_error.

    * Drawn sub-counts (the exact path's limit set to 0): :func:`survey_equivalence` end to
      end, for a classifier of random quality, one case per data set whose equivalence is a
      number on either path.
    * Rater subsets (12 raters): the curve's points are exact where every subset is
      enumerated (k ≤ 2 and k ≥ 10), so three scores per data set are drawn uniformly
      between c_2 and the curve's top, and the equivalences read off the exact and the
      sampled curves (:func:`equivalence_values`, :func:`equivalence_mc_error`, as
      :func:`survey_equivalence` does).

    A case where one path gives a number and the other not counts as outside (z = ∞), and
    so does one with a zero error whose two equivalences differ."""
    keys = [(path, combiner, scorer) for path in ("drawn sub-counts", "rater subsets")
            for combiner, scorer in (("plurality", "agreement"), ("frequency", "cross_entropy"))]
    zs = {key: [] for key in keys}
    rng = np.random.default_rng(seed)
    names = tuple(str(c) for c in range(n_classes))

    def drawn(lc, pred, combiner, scorer, s, forced):
        return _on_path(forced, survey_equivalence, lc, pred, combiner=combiner, scorer=scorer,
                        n_bootstrap=0, rng=s)

    def z_of(ex_value, mc_value, error):
        if np.isfinite(ex_value) != np.isfinite(mc_value):
            return math.inf
        if not np.isfinite(ex_value):
            return None
        if error > 0:
            return (mc_value - ex_value) / error
        return 0.0 if abs(mc_value - ex_value) <= 1e-9 * max(1.0, abs(ex_value)) else math.inf

    def number(v):
        return -math.inf if isinstance(v, str) else float(v)

    for rep in range(repetitions):
        p = rng.dirichlet(np.full(n_classes, 0.7 if rep % 2 == 0 else 0.2), size=n_items)
        lc = LabelCounts(rng.multinomial(n_labels_per_item, p), names, tuple(range(n_items)))
        u = rng.random((n_items, 12, 1))
        ratings = (u > np.cumsum(p, axis=1)[:, None, :]).sum(axis=2)
        for (path, combiner, scorer), out in zs.items():
            s = int(rng.integers(2**31))
            if path == "drawn sub-counts":
                pred = _classifier(rng, p, scorer)
                ex, mc = drawn(lc, pred, combiner, scorer, s, False), drawn(lc, pred, combiner, scorer, s, True)
                z = z_of(number(ex.value), number(mc.value), mc.mc_error)
                if z is not None:
                    out.append(z)
                continue
            kw = dict(combiner=combiner, scorer=scorer, n_bootstrap=0, n_labels=n_classes)
            ex = power_curve(ratings, method="exact", k_values="all", **kw)
            mc = power_curve(ratings, method="sampling", rng=s, **kw)
            for score in rng.uniform(ex.mean[2], ex.mean.max(), size=3):
                e = equivalence_values(ex.mean[None, :], np.array([score]))[0]
                m = equivalence_values(mc.mean[None, :], np.array([score]))[0]
                z = z_of(e, m, equivalence_mc_error(mc.mean, score, mc.mc_error))
                if z is not None:
                    out.append(z)
    return {key: np.array(v) for key, v in zs.items()}


def _never_gold_counts(rng, n_items: int, n_never: int, labels: int) -> np.ndarray:
    """Two gold classes (each item's plurality among them) and ``n_never`` classes that
    receive at most one label per item, so they are never anybody's plurality."""
    base = rng.multinomial(labels, rng.dirichlet([0.8, 0.8], size=n_items))
    extra = np.zeros((n_items, n_never), dtype=np.int64)
    who = rng.random(n_items) < 0.4
    extra[np.flatnonzero(who), rng.integers(0, n_never, who.sum())] = 1
    return np.hstack([base, extra])


def best_study(repetitions: int, n_items: int, seed: int, target_se: float):
    """z = (Monte Carlo F1 − inclusion–exclusion F1) / standard error."""
    rng = np.random.default_rng(seed)
    zs = []
    saved = f1_module._MAX_EXACT_NEVER_GOLD
    for rep in range(repetitions):
        counts = _never_gold_counts(rng, n_items, 1 + rep % 3, 5)
        f1_module._MAX_EXACT_NEVER_GOLD = saved
        exact = best_performance(counts, metrics=[F1], rng=0)
        assert "inclusion-exclusion" in exact.methods[F1], exact.methods[F1]
        try:
            f1_module._MAX_EXACT_NEVER_GOLD = 0
            mc = best_performance(counts, metrics=[F1], rng=int(rng.integers(2**31)), f1_standard_error=target_se)
        finally:
            f1_module._MAX_EXACT_NEVER_GOLD = saved
        assert "Monte Carlo" in mc.methods[F1], mc.methods[F1]
        zs.append((mc.scores[F1] - exact.scores[F1]) / mc.standard_errors[F1])
    counts = _never_gold_counts(np.random.default_rng(seed), n_items, 2, 5)
    try:
        f1_module._MAX_EXACT_NEVER_GOLD = 0
        a = best_performance(counts, metrics=[F1], rng=5, f1_standard_error=target_se)
        b = best_performance(counts, metrics=[F1], rng=5, f1_standard_error=target_se)
    finally:
        f1_module._MAX_EXACT_NEVER_GOLD = saved
    identical = a.scores[F1] == b.scores[F1] and a.standard_errors[F1] == b.standard_errors[F1]
    return np.array(zs), identical


def _row(name: str, z: np.ndarray) -> str:
    if z.size == 0:
        return f"{name:<66s} {0:>6d}   (no case)"
    inside = np.mean(np.abs(z) <= 1.96)
    # Monte Carlo error of the coverage itself (cases within a repetition are correlated,
    # so this is a floor).
    se = math.sqrt(0.95 * 0.05 / max(1, z.size))
    return (f"{name:<66s} {z.size:>6d} {inside:>9.3f} {np.mean(np.abs(z) <= 1):>8.3f} {np.std(z):>8.2f}"
            f"   (±{1.96 * se:.3f})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=None, help="Data sets per study (default 100).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--f1-standard-error", type=float, default=1e-3,
                        help="BEST's F1 Monte Carlo target (default 1e-3; the library's default 1e-4 "
                             "takes up to 2M draws, minutes per data set).")
    parser.add_argument("--smoke", action="store_true", help="A few repetitions: seconds.")
    args = parser.parse_args(argv)
    reps = args.repetitions or (2 if args.smoke else 100)
    n_items = 60 if args.smoke else 200
    t0 = time.perf_counter()
    curve_z, curve_same = curve_study(reps, n_items, 12, 3, args.seed)
    t1 = time.perf_counter()
    best_z, best_same = best_study(reps, 30 if args.smoke else 120, args.seed, args.f1_standard_error)
    t2 = time.perf_counter()
    tables_z, tables_same = tables_study(reps, 40 if args.smoke else 150, 24, 4, args.seed)
    t3 = time.perf_counter()
    eq_z = equivalence_study(reps, 40 if args.smoke else 150, 24, 4, args.seed)
    t4 = time.perf_counter()
    print(f"{reps} data sets per study; a case is a (data set, k) or a data set")
    print(f"{'study':<66s} {'cases':>6s} {'≤1.96·SE':>9s} {'≤1·SE':>8s} {'sd(z)':>8s}")
    for (combiner, scorer), z in curve_z.items():
        print(_row(f"power curve, rater subsets, {combiner}/{scorer}", z))
    print(_row("BEST F1 (macro), Monte Carlo correction", best_z))
    for (combiner, scorer, with_ref), z in tables_z.items():
        print(_row(f"power curve, drawn sub-counts, {combiner}/{scorer}{', reference' if with_ref else ''}", z))
    for (path, combiner, scorer), z in eq_z.items():
        print(_row(f"survey equivalence, {path}, {combiner}/{scorer}", z))
    print(f"bit-identical for the same seed: power curve {'yes' if curve_same else 'NO'}, "
          f"BEST {'yes' if best_same else 'NO'}, drawn sub-counts {'yes' if tables_same else 'NO'}")
    print(f"time: power curves {t1 - t0:.1f} s, BEST {t2 - t1:.1f} s, drawn sub-counts {t3 - t2:.1f} s, "
          f"equivalences {t4 - t3:.1f} s")
    return 0 if (curve_same and best_same and tables_same) else 1


if __name__ == "__main__":
    raise SystemExit(main())
