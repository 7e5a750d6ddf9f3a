"""Benchmark: the anytime certification's power, its error at the null's boundary, and its update cost.

Run by hand:  python bench/bench_anytime.py [--streams 1000] [--items 1000000] [--batch 1000] [--smoke]

1. **Power.** Simulated datasets (rows in arrival order) for the issue's cases: model
   0.95 vs annotators 0.80, 5 labels, 3 classes, with U_t; model 0.90 vs annotators 0.85
   with U_e; each under several annotation shapes (a fixed panel of five, a pool, hard
   items, labels per item that vary; 25 labels, where U is nearly known; a model that
   copies the plurality). Share of datasets certified at N items by

   * ``anytime`` — one betting e-process on the per-item difference (the badge's);
   * ``anytime-fan`` — the previous verdict, one mixture sequence per bound;
   * ``betting CS`` — a reference: a betting confidence sequence per bound (Waudby-Smith &
     Ramdas 2023, the same dKelly mixture on the same bet grid), each at half the error,
     certified when the lower end of L's exceeds the square root of the upper end of
     U's (both intersected over looks every 100 items);
   * ``oms`` — the paper's fixed-sample verdict, for scale (it is not valid when re-checked).

2. **Least-favourable null.** The model's expected credit put exactly on the population
   value of the bound (E L = U_t or U_e), several class counts, labels-per-item mixes and
   ways for the credit and the agreement to co-vary (a model that copies the plurality,
   one better on hard items, hard items that grow over time); 6,000 items looked at every
   100 (60 looks): share of streams ever certified (target at most 5%), and the worst.

3. **Update cost.** The running state of a stream of ``--items`` items (5 labels, 3
   classes), then one more batch of ``--batch`` items added and the verdict read (both
   bounds, both anytime methods). Target: under 50 ms for 1,000 items on 1,000,000; the
   audit pipeline's step (which items are new, and the update) is timed too.
"""

from __future__ import annotations

import argparse
import math
import time
from types import SimpleNamespace

import numpy as np
from scipy.special import logsumexp

from auditor.audit.inputs import PreviousResults
from auditor.audit.pipeline import anytime_update
from auditor.simulate import StreamScenario, draw_phases, simulate_streams
from auditor.stats import AnytimeState, BettingStream, certify, item_values
from auditor.stats.certification import (
    _anytime_log_evalue,
    _betting_paths,
    _confidence_many,
    _score_of_log_evalue,
)
from auditor.stats.confseq import BETS, _prefix_sums

THRESHOLD = 0.95
PANEL_80 = (0.70, 0.75, 0.80, 0.85, 0.90)
PANEL_85 = (0.75, 0.80, 0.85, 0.90, 0.95)

# (name, bound, draw(rng, streams, items), sizes N to report)
POWER = [
    ("0.95 vs 0.80, panel of 5, U_t", "theoretical",
     lambda rng, s, n: simulate_streams(rng, s, n, PANEL_80, 0.95), (500, 1000)),
    ("0.95 vs 0.80, pool, 5 labels, U_t", "theoretical",
     StreamScenario(annotator_accuracy=0.80, model_accuracy=0.95).draw, (500, 1000)),
    ("0.95 vs 0.80, pool, 3-7 labels, U_t", "theoretical",
     StreamScenario(labels_per_item=(3, 4, 5, 6, 7), model_accuracy=0.95).draw, (500, 1000)),
    ("0.95 vs 0.80, 10% hard items, U_t", "theoretical",
     StreamScenario(annotator_accuracy=0.83, hard_fraction=0.1, hard_penalty=0.3, model_accuracy=0.96,
                    model_hard_penalty=0.1).draw, (500, 1000, 2000)),
    ("0.86 vs 0.80, 25 labels (U nearly known), U_t", "theoretical",
     StreamScenario(labels_per_item=(25,), model_accuracy=0.86).draw, (1000, 2000)),
    ("model copies the plurality half the time, U_t", "theoretical",
     StreamScenario(labels_per_item=(3,), hard_fraction=0.3, hard_penalty=0.3, annotator_accuracy=0.9, copy=0.5,
                    model_accuracy=0.99, model_hard_penalty=-0.01).draw, (1000, 2000)),
    ("0.90 vs 0.85, panel of 5, U_e", "empirical",
     lambda rng, s, n: simulate_streams(rng, s, n, PANEL_85, 0.90), (1000, 2000)),
    ("0.90 vs 0.85, pool, 5 labels, U_e", "empirical",
     StreamScenario(annotator_accuracy=0.85, model_accuracy=0.90).draw, (1000, 2000)),
    ("0.90 vs 0.85, 10% hard items, U_e", "empirical",
     StreamScenario(annotator_accuracy=0.88, hard_fraction=0.1, hard_penalty=0.3, model_accuracy=0.91,
                    model_hard_penalty=0.1).draw, (1000, 2000)),
]

NULL = [
    ("3 classes, 5 labels, independent model", StreamScenario(), ("theoretical", "empirical")),
    ("2 classes, 1-3 labels, copies plurality 30%", StreamScenario(n_classes=2, labels_per_item=(1, 2, 3), copy=0.3),
     ("empirical",)),
    ("2 classes, 2-3 labels, annotators 0.75, copies 60%",
     StreamScenario(n_classes=2, labels_per_item=(2, 3), annotator_accuracy=0.75, copy=0.6), ("empirical",)),
    ("5 classes, 2-5 labels, 25% hard, copies 30%",
     StreamScenario(n_classes=5, labels_per_item=(2, 3, 4, 5), annotator_accuracy=0.75, hard_fraction=0.25,
                    hard_penalty=0.3, copy=0.3), ("theoretical", "empirical")),
    ("3 classes, 1-5 labels, copies plurality 50%", StreamScenario(labels_per_item=(1, 2, 3, 4, 5), copy=0.5),
     ("theoretical", "empirical")),
    ("3 classes, 3 labels, 30% hard, model better on hard",
     StreamScenario(labels_per_item=(3,), hard_fraction=0.3, hard_penalty=0.3, annotator_accuracy=0.9,
                    model_hard_penalty=-0.05, copy=0.2), ("empirical",)),
    ("3 classes, 3 labels, 30% hard, model better on hard, copies 40%",
     StreamScenario(labels_per_item=(3,), hard_fraction=0.3, hard_penalty=0.3, annotator_accuracy=0.9,
                    model_hard_penalty=-0.05, copy=0.4), ("theoretical",)),
    ("3 classes, 25 labels (U nearly known)", StreamScenario(labels_per_item=(25,)), ("theoretical", "empirical")),
    ("4 classes, 2 labels, copies plurality 80%", StreamScenario(n_classes=4, labels_per_item=(2,), copy=0.8),
     ("empirical",)),
]
#: Hard items grow from 5% to 50% over the stream; each phase's model is on the boundary.
DRIFT = tuple(StreamScenario(hard_fraction=h, hard_penalty=0.3, annotator_accuracy=0.85, labels_per_item=(3, 5),
                             copy=0.3) for h in (0.05, 0.25, 0.5))


def stream_values(counts: np.ndarray, preds: np.ndarray, bound: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-item credit and X of the bound's stream, (streams, items): items without the
    labels the bound needs are left out, each stream cut to the shortest."""
    s, n, c = counts.shape
    v = item_values(counts.reshape(-1, c), preds.reshape(-1))
    x = (v.x_t if bound == "theoretical" else v.x_e).reshape(s, n)
    credit = v.agreement.reshape(s, n)
    keep = ~np.isnan(x)
    if keep.all():
        return credit, x
    m = int(keep.sum(axis=1).min())
    return (np.stack([credit[i][keep[i]][:m] for i in range(s)]), np.stack([x[i][keep[i]][:m] for i in range(s)]))


def betting_certified(credit, x, looks) -> np.ndarray:
    """The anytime verdict at each look (streams, looks)."""
    return _betting_paths(credit, x)[:, np.asarray(looks) - 1] >= -math.log1p(-THRESHOLD)


def fan_certified(credit, x, looks) -> np.ndarray:
    idx = np.asarray(looks) - 1
    n, su, vu = (q[:, idx] for q in _prefix_sums(x))
    _, sl, vl = (q[:, idx] for q in _prefix_sums(credit))
    return _score_of_log_evalue(_anytime_log_evalue(n, su, vu, n, sl, vl)) >= THRESHOLD


def oms_certified(credit, x, looks) -> np.ndarray:
    idx = np.asarray(looks) - 1
    n = np.broadcast_to(idx + 1.0, (credit.shape[0], idx.size))
    lo, up = np.cumsum(credit, axis=1)[:, idx] / n, np.sqrt(np.cumsum(x, axis=1)[:, idx] / n)
    return _confidence_many(lo, up, n, n, method="oms") >= THRESHOLD


def _cs_end(counts_at, values, alpha: float, side: str) -> np.ndarray:
    """One end of the dKelly betting CS at each look, from the counts of each distinct value.

    ``side="lower"``: the smallest mean m not rejected by bets on x > m (ξ = (x − m)/m);
    ``"upper"``: the largest not rejected by bets on x < m (ξ = (m − x)/(1 − m)). The
    mixture's capital is monotone in m, so the end is read off a grid of 400 means."""
    grid = np.linspace(0.0025, 0.9975, 400)
    xi = (values[:, None] - grid) / grid if side == "lower" else (grid - values[:, None]) / (1.0 - grid)
    table = np.log1p(np.maximum(xi, -1.0)[..., None] * BETS).reshape(values.size, -1)     # (V, grid × bets)
    rows = counts_at.reshape(-1, values.size)
    out = np.empty(rows.shape[0])
    for a in range(0, rows.shape[0], 500):
        cap = logsumexp((rows[a:a + 500] @ table).reshape(-1, grid.size, BETS.size), axis=2) - math.log(BETS.size)
        kept = cap < math.log(1.0 / alpha)
        if side == "lower":
            out[a:a + 500] = np.where(kept.any(axis=1), grid[np.argmax(kept, axis=1)], 1.0)
        else:
            last = grid.size - 1 - np.argmax(kept[:, ::-1], axis=1)
            out[a:a + 500] = np.where(kept.any(axis=1), grid[last], 0.0)
    return out.reshape(counts_at.shape[:-1])


def _counts_at(v: np.ndarray, looks) -> tuple[np.ndarray, np.ndarray]:
    values, codes = np.unique(np.round(v, 12), return_inverse=True)
    codes = codes.reshape(v.shape)
    every = np.arange(100, v.shape[1] + 1, 100)
    bins = np.searchsorted(every, np.arange(1, v.shape[1] + 1), side="left")    # look window of each item
    keep = bins < every.size
    flat = (np.arange(v.shape[0])[:, None] * every.size + bins)[:, keep] * values.size + codes[:, keep]
    counts = np.bincount(flat.ravel(), minlength=v.shape[0] * every.size * values.size)
    return values, np.cumsum(counts.reshape(v.shape[0], every.size, values.size), axis=1)


def reference_certified(credit, x, looks) -> np.ndarray:
    """The betting-CS reference at each look (intersected over looks every 100 items)."""
    every = np.arange(100, credit.shape[1] + 1, 100)
    cv, cc = _counts_at(credit, looks)
    xv, xc = _counts_at(x, looks)
    lower = np.maximum.accumulate(_cs_end(cc, cv, (1 - THRESHOLD) / 2, "lower"), axis=1)
    upper = np.minimum.accumulate(_cs_end(xc, xv, (1 - THRESHOLD) / 2, "upper"), axis=1)
    ok = lower > np.sqrt(upper)
    return ok[:, np.searchsorted(every, np.asarray(looks))]


def power(args) -> None:
    print(f"\n1. Power: share of {args.streams:,} simulated datasets certified at N items (threshold {THRESHOLD})")
    print(f"{'case':46s} {'N':>6s} {'anytime':>8s} {'anytime-fan':>12s} {'betting CS':>11s} {'oms*':>6s}")
    rng = np.random.default_rng(args.seed)
    for name, bound, draw, sizes in POWER:
        sizes = tuple(n for n in sizes if n <= args.max_items)
        if not sizes:
            continue
        counts, preds = draw(rng, args.streams, int(max(sizes) * (1.2 if bound == "empirical" else 1)))
        credit, x = stream_values(counts, preds, bound)
        credit, x = credit[:, :max(sizes)], x[:, :max(sizes)]
        rates = [f(credit, x, sizes).mean(axis=0)
                 for f in (betting_certified, fan_certified, reference_certified, oms_certified)]
        for j, n in enumerate(sizes):
            print(f"{name:46s} {n:>6,d} " + " ".join(f"{r[j]:>{w}.1%}" for r, w in zip(rates, (8, 12, 11, 6),
                                                                                          strict=True)))
    print("* the paper's fixed-sample S at that one N (not valid when re-checked)")


def null(args) -> None:
    looks = np.arange(100, args.null_items + 1, 100)
    print(f"\n2. Least-favourable null (E L = population U), {args.streams:,} streams, {looks.size} looks every "
          f"100 items: share ever certified (target <= 5%)")
    print(f"{'scenario':72s} {'bound':5s} {'anytime':>8s} {'anytime-fan':>12s}")
    rng = np.random.default_rng(args.seed + 1)

    def row(name, bound, credit, x):
        lk = looks[looks <= credit.shape[1]]
        bet, fan = (f(credit, x, lk).any(axis=1).mean() for f in (betting_certified, fan_certified))
        print(f"{name:72s} U_{bound[0]:3s} {bet:>8.1%} {fan:>12.1%}", flush=True)
        return bet

    worst = []
    for name, sc, bounds in NULL:
        for bound in bounds:
            lf = sc.on_boundary(bound)
            credit, x = stream_values(*lf.draw(rng, args.streams, int(args.null_items * 1.5)), bound)
            worst.append(row(f"{name} (model {lf.model_accuracy:.3f})", bound, credit[:, :args.null_items],
                             x[:, :args.null_items]))
    credit, x = stream_values(*draw_phases(rng, [(p.on_boundary(), args.null_items // 3) for p in DRIFT],
                                           args.streams), "theoretical")
    worst.append(row("hard items 5% -> 25% -> 50%, each phase on the boundary", "theoretical", credit, x))
    print(f"worst of {len(worst)}: {max(worst):.1%} ever certified")


def latency(args) -> None:
    print("\n3. Update cost")
    rng = np.random.default_rng(args.seed)
    counts, preds = simulate_streams(rng, 1, args.items + args.batch * args.repeat, PANEL_80, 0.95)
    counts, preds = counts[0], preds[0]

    t0 = time.perf_counter()
    state = AnytimeState()
    state.update(counts[: args.items], preds[: args.items])
    build = time.perf_counter() - t0
    print(f"state of a stream of {args.items:,} items built in {build * 1e3:.0f} ms (once)")

    times, betting = [], []
    start = args.items
    for _ in range(args.repeat):
        batch = slice(start, start + args.batch)
        t0 = time.perf_counter()
        state.update(counts[batch], preds[batch])
        for bound in ("theoretical", "empirical"):
            c = state.confidence(bound)
            state.confidence(bound, method="anytime-fan")
        times.append(time.perf_counter() - t0)
        # the badge's verdict alone: the items' values, both betting streams, both reads
        t0 = time.perf_counter()
        v = item_values(counts[batch], preds[batch])
        for stream, x in ((BettingStream.from_dict(state.bet_t.to_dict()), v.x_t),
                          (BettingStream.from_dict(state.bet_e.to_dict()), v.x_e)):
            stream.update(v.agreement, x)
            stream.confidence()
        betting.append(time.perf_counter() - t0)
        start += args.batch
    print(f"update after a batch of {args.batch:,} items on {args.items:,} (both anytime methods): median "
          f"{np.median(times) * 1e3:.2f} ms (max {max(times) * 1e3:.2f} ms; target < 50 ms); "
          f"S = {c.score:.4f} with U_e at n = {state.bet_e.n:,}")
    print(f"  of which the betting verdict alone (values, both streams, both reads): median "
          f"{np.median(betting) * 1e3:.2f} ms")

    t0 = time.perf_counter()
    certify(counts[:start], preds[:start], method="anytime")
    print(f"recomputing from the start instead: {(time.perf_counter() - t0) * 1e3:.0f} ms")
    pipeline(counts, preds, args)


def pipeline(counts, preds, args) -> None:
    """The audit pipeline's step: find the items that arrived since the last audit (id
    ranges over the snapshot), freeze their values, update the release's state."""
    n0, n1 = args.items, args.items + args.batch
    ids = np.arange(1, n1 + 1, dtype=np.int64) * 3  # database ids: increasing, with gaps

    def snapshot(n, previous):
        snap = SimpleNamespace(item_ids=ids[:n], counts=counts[:n].astype(np.int64),
                               previous=PreviousResults(1, {1: {"anytime": previous}} if previous else {}, {}))
        release = SimpleNamespace(release_id=1, item_index=np.arange(n), labels=preds[:n].astype(np.int64))
        return snap, release

    state = anytime_update(*snapshot(n0, None))
    snap, release = snapshot(n1, {k: v for k, v in state.items() if k != "new_items"})
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = anytime_update(snap, release)
        times.append(time.perf_counter() - t0)
    assert out["new_items"]["l"] == out["new_items"]["bt"] == args.batch
    print(f"pipeline step (which items are new, among {n1:,}, and the update): median "
          f"{np.median(times) * 1e3:.2f} ms (max {max(times) * 1e3:.2f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000, help="simulated datasets per case")
    ap.add_argument("--max-items", type=int, default=2000, help="largest N of the power table")
    ap.add_argument("--null-items", type=int, default=6000, help="items per null stream (looks every 100)")
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("power", "null", "latency"), help="run one part")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.streams, args.max_items, args.null_items = 20, 500, 300
        args.items, args.batch, args.repeat = 20_000, 1_000, 3
    for part in (power, null, latency):
        if args.only in (None, part.__name__):
            part(args)


if __name__ == "__main__":
    main()
