"""Benchmark: what the vendor and annotator change detector finds, and what it raises for nothing.

Run by hand:

    python bench/bench_monitoring.py [--streams 200] [--seed 0] [--rows all]

Every row simulates ``--streams`` independent year-long histories on a simulator with
item-difficulty mixtures (3 classes; easy items labelled right with probability 0.95,
hard ones 0.5; a hard share of 0.222 gives an accuracy of 0.85; each vendor labels each
item once) and runs the detector of :func:`auditor.stats.quality.detect_changes` (paired
differences against the other vendors, self-starting CUSUM, a yearly false-alarm rate of
0.05 shared by the vendors and the dataset level) on them:

* ``stationary``: nothing changes, 52 weeks × 3 vendors × 150 items: any alert (vendor or
  dataset level); also with the hard share drawn anew each week, and stepping from 0.7 to
  0.3 at week 26 (the items get easier: one dataset change, no vendor alert).
* ``drop``: one vendor 0.85 → 0.75 at week 10 and at week 40 (150 items a week), and 0.85 →
  0.80 at 400 items a week: the share found within 8 weeks, the median delay, the share
  whose estimated start is within 2 weeks, and the median delay of an oracle CUSUM (the
  pre- and post-change means and the spread known, same false-alarm rate) in the same run.
* ``annotator``: 20 annotators, 3 of them on each of 200 items a week (30 labels each), one
  going from 0.85 to 0.60 at week 10: the share found within 4 weeks (and the oracle's).
* ``mdd``: the minimum detectable drop the detector reports for a vendor at 150 items a
  week (and for one of the 20 annotators of ``annotator``), injected at week 20: the share
  found within 4 weeks (it promises 90%).

``--smoke`` runs 8 streams of every row in seconds (the test suite runs it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from auditor.simulate import draw_panel
from auditor.stats.detectability import accuracy_response, minimum_detectable_drop
from auditor.stats.monitoring import (
    DEFAULT_K,
    DROP_SHARE,
    GUARD,
    LOOKS_PER_YEAR,
    _dense_credit,
    crossing_probability,
    cusum_scan,
    cusum_threshold,
    dense_paired_sums,
)

ALPHA = 0.05
WEEKS = 52
CHUNK = 50


def scan(rng, streams, *, per_week=150, n_groups=3, slots=None, hard_share=0.222, shift=None, weeks=WEEKS):
    """Per stream: the group changes (list per group) and the dataset-level changes."""
    out_groups, out_level, sums = [], [], []
    for c in range(0, streams, CHUNK):
        S = min(CHUNK, streams - c)
        share = hard_share(rng, S) if callable(hard_share) else hard_share
        d = draw_panel(rng, S, weeks, per_week, n_groups=n_groups, slots=slots, hard_share=share, shift=shift)
        ps = dense_paired_sums(d.label, d.who, n_groups, 3)
        alpha_g = ALPHA / (n_groups + 1)
        R = S * n_groups
        found = cusum_scan(ps.n.reshape(R, weeks), ps.s1.reshape(R, weeks), ps.s2.reshape(R, weeks),
                           alpha=alpha_g, max_changes=1, s3=ps.s3.reshape(R, weeks),
                           pool=np.repeat(np.arange(S), n_groups))
        level = cusum_scan(ps.level_n, ps.level_s1, ps.level_s2, alpha=alpha_g, max_changes=1, between=True)
        out_groups += [found[i * n_groups:(i + 1) * n_groups] for i in range(S)]
        out_level += level
        sums.append(ps)
    return out_groups, out_level, sums


def first_drop(changes, week):
    """Delay (windows after the change week) of the first drop found at or after it, and its start."""
    for ch in changes:
        if ch["direction"] < 0 and ch["detected"] >= week:
            return ch["detected"] - week, ch["start"]
    return None, None


def _oracle_z(n, s1, mu0, sd):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num((mu0 - s1 / n) / (sd / np.sqrt(n)))  # drops positive


def oracle_delays(sums, target, week, n_groups, weeks=WEEKS, null=None):
    """Delays of a CUSUM that knows the target's pre/post weekly mean and unit spread. Its
    threshold: from the chain of normal increments, or with ``null`` (the sums of stationary
    streams of the same design) the quantile of the same CUSUM's yearly maxima on every
    group of them, so that skewed units do not buy the oracle false alarms."""
    n = np.concatenate([p.n[:, target] for p in sums])
    s1 = np.concatenate([p.s1[:, target] for p in sums])
    s2 = np.concatenate([p.s2[:, target] for p in sums])
    pre, post = slice(0, week), slice(week, weeks)
    mu0 = s1[:, pre].sum() / n[:, pre].sum()
    mu1 = s1[:, post].sum() / n[:, post].sum()
    sd = np.sqrt(s2[:, pre].sum() / n[:, pre].sum() - mu0 ** 2)
    z = _oracle_z(n, s1, mu0, sd)
    delta = (mu0 - mu1) * np.sqrt(n.mean()) / sd
    k = delta / 2
    level = ALPHA / (n_groups + 1) * DROP_SHARE
    if null is None:
        h = cusum_threshold(level, k, LOOKS_PER_YEAR)
    else:
        nn = np.concatenate([p.n.reshape(-1, weeks) for p in null])
        n1 = np.concatenate([p.s1.reshape(-1, weeks) for p in null])
        n2 = np.concatenate([p.s2.reshape(-1, weeks) for p in null])
        m0 = n1.sum() / nn.sum()
        zn = _oracle_z(nn, n1, m0, np.sqrt(n2.sum() / nn.sum() - m0 ** 2))
        c, best = np.zeros(zn.shape[0]), np.zeros(zn.shape[0])
        for w in range(weeks):
            c = np.maximum(0.0, c + zn[:, w] - k)
            np.maximum(best, c, out=best)
        h = float(np.quantile(best, 1 - level))
    out = []
    for row in z:
        c = 0.0
        d = None
        for w in range(weeks):
            c = max(0.0, c + row[w] - k)
            if c > h:
                if w >= week:
                    d = w - week
                    break
                c = 0.0  # a false alarm before the change: restart (a deployed chart would too)
        out.append(d)
    return out


def summarise(delays, within):
    found = [d for d in delays if d is not None and d < within]
    return len(found) / len(delays), (float(np.median([d for d in delays if d is not None]))
                                      if any(d is not None for d in delays) else float("nan"))


def row_stationary(rng, streams):
    results = {}
    for name, share in (("fixed hard share 0.222", 0.222),
                        ("hard share redrawn weekly U(0.1, 0.5)", lambda r, S: r.uniform(0.1, 0.5, (S, WEEKS))),
                        ("hard share stepping 0.7 -> 0.3 at week 26",
                         np.where(np.arange(WEEKS) < 26, 0.7, 0.3)[None, :])):
        groups, level, _ = scan(rng, streams, hard_share=share)
        vendor_any = np.mean([any(bool(g) for g in s) for s in groups])
        level_any = np.mean([bool(lv) for lv in level])
        any_alert = np.mean([any(bool(g) for g in s) or bool(lv) for s, lv in zip(groups, level, strict=True)])
        results[name] = (any_alert, vendor_any, level_any)
        print(f"stationary vendors, {name}: any alert {any_alert:.1%} (vendor {vendor_any:.1%}, "
              f"dataset level {level_any:.1%}) of {streams} streams")
    return results


def row_drop(rng, streams, *, week, drop, per_week):
    shift = np.zeros((WEEKS, 3))
    shift[week:, 0] = -drop
    groups, _, sums = scan(rng, streams, per_week=per_week, shift=shift)
    res = [first_drop(s[0], week) for s in groups]
    delays = [d for d, _ in res]
    share8, med = summarise(delays, 8)
    start_ok = np.mean([st is not None and abs(st - week) <= 2 for _, st in res])
    odel = oracle_delays(sums, 0, week, 3)
    o8, omed = summarise(odel, 8)
    others = np.mean([any(ch["direction"] < 0 for g in s[1:] for ch in g) for s in groups])
    print(f"vendor 0.85 -> {0.85 - drop:.2f} at week {week}, {per_week} items/week: found within 8 weeks "
          f"{share8:.1%}, median delay {med:.1f} wk (oracle CUSUM {omed:.1f} wk, {o8:.1%} within 8; "
          f"ratio {med / max(omed, 1e-9):.2f}), start within ±2 wk {start_ok:.1%}; "
          f"a vendor that did not change flagged as dropping in {others:.1%}")
    return share8, med, omed, start_ok


def row_annotator(rng, streams):
    """One of 20 annotators degrading, and the same design stationary (its false alarms, and
    the oracle's threshold calibrated on it)."""
    groups, level, null = scan(rng, streams, per_week=200, n_groups=20, slots=3)
    any_alert = np.mean([any(bool(g) for g in s) or bool(lv) for s, lv in zip(groups, level, strict=True)])
    print(f"stationary annotators (20, 3 on each of 200 items a week): any alert {any_alert:.1%} of {streams} streams")
    shift = np.zeros((WEEKS, 20))
    shift[10:, 0] = -0.25
    groups, _, sums = scan(rng, streams, per_week=200, n_groups=20, slots=3, shift=shift)
    delays = [first_drop(s[0], 10)[0] for s in groups]
    share4, med = summarise(delays, 4)
    o4, omed = summarise(oracle_delays(sums, 0, 10, 20, null=null), 4)
    print(f"one of 20 annotators 0.85 -> 0.60 at 30 labels/week: found within 4 weeks {share4:.1%} "
          f"(median delay {med:.1f} wk); oracle CUSUM {o4:.1%} within 4 weeks (median {omed:.1f} wk; "
          f"its threshold from the stationary streams' maxima)")
    return any_alert, share4, o4


def row_mdd(rng, streams, hard_share=0.222, *, per_week=150, n_groups=3, slots=None):
    """The minimum detectable drop reported for group 0 (a vendor at 150 items a week; with
    ``slots``, an annotator of a team) from a stationary year, as the service computes it,
    injected at week 20: the share found within 4 weeks."""
    d = draw_panel(rng, 20, WEEKS, per_week, n_groups=n_groups, slots=slots, hard_share=hard_share)
    ps = dense_paired_sums(d.label, d.who, n_groups, 3)
    n, s1, s2 = ps.n[:, 0].sum(), ps.s1[:, 0].sum(), ps.s2[:, 0].sum()
    mean, sd = s1 / n, np.sqrt(s2 / n - (s1 / n) ** 2)
    credit = np.where(d.who == 0, _dense_credit(d.label, 3), np.nan)
    resp = accuracy_response(3, d.label.shape[-1], float(np.nanmean(credit)), float(np.nanmean(credit ** 2)))
    volume = ps.n[:, 0].sum() / (20 * WEEKS)
    baseline = ps.n[0, 0].sum() * (20 - GUARD) / WEEKS  # the units before the change the chart compares with
    skew = (ps.s3[:, 0].sum() / n - 3 * mean * s2 / n + 2 * mean ** 3) / sd ** 3
    drop = minimum_detectable_drop(volume, mean, sd, resp.slope, resp.gamma, ALPHA / (n_groups + 1),
                                   baseline_units=baseline, skewness=skew)
    shift = np.zeros((WEEKS, n_groups))
    shift[20:, 0] = -drop
    groups, _, _ = scan(rng, streams, per_week=per_week, n_groups=n_groups, slots=slots, shift=shift,
                        hard_share=hard_share)
    share4, _ = summarise([first_drop(s[0], 20)[0] for s in groups], 4)
    who = f"one of {n_groups} annotators ({volume:.0f} labels/week)" if slots else f"a vendor ({per_week} items/week)"
    print(f"minimum detectable drop of {who}, hard share {hard_share}: {drop:.3f} in accuracy "
          f"(slope {resp.slope:.3f}, unit skewness {skew:.2f}; the others' mean accuracy {resp.accuracy_low:.3f}-{resp.accuracy_high:.3f} "
          f"by the agreement data); injected at week 20: found within 4 weeks in {share4:.1%} (promised 90%)")
    return drop, share4


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", default="all", help="comma-separated: stationary,drop,annotator,mdd (default all)")
    p.add_argument("--smoke", action="store_true", help="8 streams a row, a few seconds")
    args = p.parse_args(argv)
    if args.smoke:
        args.streams = 8
    rows = {"stationary", "drop", "annotator", "mdd"} if args.rows == "all" else set(args.rows.split(","))
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print(f"k = {DEFAULT_K}, yearly false-alarm rate {ALPHA} shared by the vendors and the dataset level; "
          f"drop threshold h = {cusum_threshold(ALPHA / 4 * DROP_SHARE):.2f} "
          f"(P(cross in 52 | N(0,1)) = {crossing_probability(cusum_threshold(ALPHA / 4 * DROP_SHARE), DEFAULT_K, 52):.4f})")
    if "stationary" in rows:
        row_stationary(rng, args.streams)
    if "drop" in rows:
        row_drop(rng, args.streams, week=10, drop=0.10, per_week=150)
        row_drop(rng, args.streams, week=40, drop=0.10, per_week=150)
        row_drop(rng, args.streams, week=10, drop=0.05, per_week=400)
    if "annotator" in rows:
        row_annotator(rng, args.streams)
    if "mdd" in rows:
        for share in (0.222, 0.0, 0.5):
            row_mdd(rng, args.streams, share)
        row_mdd(rng, args.streams, per_week=200, n_groups=20, slots=3)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
