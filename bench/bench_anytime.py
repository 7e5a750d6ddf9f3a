"""Benchmark: updating the anytime certification after a batch, on a long stream.

Run by hand:  python bench/bench_anytime.py [--items 1000000] [--batch 1000] [--smoke]

Builds the running state of a stream of ``--items`` items (5 labels, 3 classes), then
times adding one more batch of ``--batch`` items and reading the anytime verdict
(both bounds). The update costs in proportion to the batch, not to the stream: the
state is three numbers per sequence. Target: under 50 ms for 1,000 items on
1,000,000. For comparison it also times recomputing the verdict from the start.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np

from auditor.audit.inputs import PreviousResults
from auditor.audit.pipeline import anytime_update
from auditor.simulate import simulate_streams
from auditor.stats import AnytimeState, certify


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.items, args.batch, args.repeat = 20_000, 1_000, 3
    rng = np.random.default_rng(args.seed)
    acc = (0.70, 0.75, 0.80, 0.85, 0.90)
    counts, preds = simulate_streams(rng, 1, args.items + args.batch * args.repeat, acc, 0.95)
    counts, preds = counts[0], preds[0]

    t0 = time.perf_counter()
    state = AnytimeState()
    state.update(counts[: args.items], preds[: args.items])
    build = time.perf_counter() - t0
    print(f"state of a stream of {args.items:,} items built in {build * 1e3:.0f} ms (once)")

    times = []
    start = args.items
    for _ in range(args.repeat):
        batch = slice(start, start + args.batch)
        t0 = time.perf_counter()
        state.update(counts[batch], preds[batch])
        for bound in ("theoretical", "empirical"):
            c = state.confidence(bound)
        times.append(time.perf_counter() - t0)
        start += args.batch
    print(f"update after a batch of {args.batch:,} items on {args.items:,}: median "
          f"{np.median(times) * 1e3:.2f} ms (max {max(times) * 1e3:.2f} ms; target < 50 ms); "
          f"S = {c.score:.4f} with U_e at n = {state.lower.n:,}")

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
    assert out["new_items"]["l"] == args.batch
    print(f"pipeline step (which items are new, among {n1:,}, and the update): median "
          f"{np.median(times) * 1e3:.2f} ms (max {max(times) * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
