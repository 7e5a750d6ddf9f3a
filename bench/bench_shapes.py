"""Benchmark: every statistic on the data shapes that real datasets have, beside the limit.

Run by hand:

    python bench/bench_shapes.py                      # the whole table
    python bench/bench_shapes.py --rows alpha fleiss  # rows whose id contains a word
    python bench/bench_shapes.py --list               # the row ids
    python bench/bench_shapes.py --smoke              # every row at tiny sizes (seconds)
    python bench/bench_shapes.py --repeat 3           # each row 3 times: the median

Each row is one public statistic (power curve, survey equivalence, Krippendorff's
alpha, Fleiss' kappa, BEST, pairwise Cohen's kappa) at one shape: items × labels per
item × classes. Synthetic rows draw each item's class probabilities from a
Dirichlet(0.5) prior and its labels from them, with ``--seed``; dataset rows read the
public datasets (``AUDITOR_SHARED_DIR``, or a ``shared/`` folder next to the checkout)
and are skipped with a message when those are absent.

Every row runs in its own process (so one slow row cannot stop the others: it is
stopped after ``--timeout`` seconds and reported as such, and its peak memory is its
own; ``--smoke`` runs the tiny rows in one process) and prints:

* the statistic's wall time and the process's peak resident memory;
* the *histogram limit*: in the same process, on the same data, the time to build the
  per-item count matrix from the annotation records and its histogram of distinct count
  vectors (what any statistic of the counts must at least do; the best of two runs),
  with the records' items already numbered 0..N−1 (``limit``, the strict one);
* the same from records whose items carry database ids (``ids``): the ids are numbered
  first (by hashing, ``pandas.factorize``, the fastest way here), which is how the
  issue that asked for this table measured its reference (0.07 s for 1M records at
  100k items, 0.48 s for 10M at 1M);
* the ratio of the time to each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from _datasets import datasets_dir

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- data


@dataclass
class Data:
    """Annotation records (item, label, optional annotator) and, for equivalence, predictions."""

    item: object
    label: object
    n_items: int
    n_labels: int
    annotator: object = None
    predictions: object = None
    note: str = ""

    def counts(self):
        import numpy as np

        flat = np.bincount(self.item * self.n_labels + self.label, minlength=self.n_items * self.n_labels)
        return flat.reshape(self.n_items, self.n_labels)


def _dirichlet_rows(rng, alpha):
    """One Dirichlet draw per row of ``alpha`` (numpy's dirichlet takes one vector)."""
    g = rng.gamma(alpha)
    return g / g.sum(axis=1, keepdims=True)


def _thin(counts, per_item: int, seed: int = 0):
    """Each item's labels subsampled to at most ``per_item`` (for --smoke on real data)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = counts.copy()
    for i, row in enumerate(counts):
        if row.sum() > per_item:
            out[i] = rng.multivariate_hypergeometric(row, per_item)
    return out


def _records_from_counts(counts):
    import numpy as np

    n, L = counts.shape
    item = np.repeat(np.repeat(np.arange(n), L), counts.ravel())
    label = np.repeat(np.tile(np.arange(L), n), counts.ravel())
    return item, label


def synthetic(n_items: int, per_item: int, n_classes: int, seed: int, *, annotators: int = 0,
              predictions: str | None = None) -> Data:
    """Items with ``per_item`` labels each; with ``annotators``, each item's labels come from
    ``per_item`` distinct members of a pool of that size (for pairwise kappa)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n_classes, 0.5), size=n_items)
    counts = rng.multinomial(per_item, p)
    item, label = _records_from_counts(counts)
    data = Data(item, label, n_items, n_classes)
    if annotators:
        # Distinct raters per item: a random start and a step coprime with the pool size.
        steps = np.array([s for s in range(1, annotators) if np.gcd(s, annotators) == 1])
        start = rng.integers(0, annotators, n_items)[item]
        step = rng.choice(steps, n_items)[item]
        pos = np.arange(item.size) - np.repeat(np.arange(n_items) * per_item, per_item)
        data.annotator = (start + step * pos) % annotators
    if predictions == "soft":
        data.predictions = _dirichlet_rows(rng, 1.0 + 5.0 * p.shape[1] * p)  # tracks the true probabilities
    elif predictions == "continuous":
        data.predictions = np.clip(p + rng.normal(0, 0.05, p.shape), 1e-3, None)
        data.predictions /= data.predictions.sum(axis=1, keepdims=True)
    return data


def one_long_item(n_items: int, long_labels: int, per_item: int, n_classes: int, seed: int) -> Data:
    """``n_items`` items with ``per_item`` labels, except one with ``long_labels``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n_classes, 0.5), size=n_items)
    k = np.full(n_items, per_item)
    k[0] = long_labels
    counts = np.vstack([rng.multinomial(k[i], p[i]) for i in range(n_items)])
    item, label = _records_from_counts(counts)
    return Data(item, label, n_items, n_classes, predictions=_dirichlet_rows(rng, 1.0 + 10.0 * p))


def chaosnli(name: str, smoke: bool) -> Data | str:
    import numpy as np

    root = datasets_dir()
    path = None if root is None else root / "chaosnli" / f"chaosNLI_{name}.jsonl"
    if path is None or not path.is_file():
        return f"ChaosNLI {name} not found (set AUDITOR_SHARED_DIR)"
    with open(path) as f:
        counts = np.array([json.loads(line)["label_count"] for line in f if line.strip()])
    if smoke:
        counts = _thin(counts[:40], 8)
    item, label = _records_from_counts(counts)
    p = (counts + 1) / (counts + 1).sum(axis=1, keepdims=True)
    preds = _dirichlet_rows(np.random.default_rng(0), 1.0 + 20.0 * p)
    return Data(item, label, counts.shape[0], counts.shape[1], predictions=preds, note="soft predictions synthetic")


def cifar10h(smoke: bool) -> Data | str:
    import numpy as np

    root = datasets_dir()
    folder = None if root is None else root / "cifar10h"
    if folder is None or not (folder / "cifar10h-counts.npy").is_file():
        return "CIFAR-10H not found (set AUDITOR_SHARED_DIR)"
    counts = np.load(folder / "cifar10h-counts.npy").round().astype(np.int64)
    model = np.loadtxt(folder / "model_predictions_kerrigan2021" / "resnet-110.csv", delimiter=",")
    preds = model[:, 11:21]
    if smoke:
        counts, preds = _thin(counts[:40], 8), preds[:40]
    item, label = _records_from_counts(counts)
    return Data(item, label, counts.shape[0], counts.shape[1], predictions=preds, note="resnet-110 softmax")


# ---------------------------------------------------------------------------- rows


def _label_counts(data: Data):
    from auditor.stats import LabelCounts

    counts = data.counts()
    return LabelCounts(counts, tuple(str(c) for c in range(data.n_labels)), tuple(range(data.n_items)))


def _annotations(data: Data):
    from auditor.stats import annotations_from_records

    return annotations_from_records({"item_id": data.item, "annotator_id": data.annotator, "label": data.label})


def _power_curve(combiner, scorer):
    def run(data, args):
        from auditor.stats.equivalence import power_curve

        curve = power_curve(_label_counts(data), combiner=combiner, scorer=scorer, n_bootstrap=args.bootstrap,
                            rng=args.seed)
        drawn = f", drawn: MC error ≤ {curve.mc_error.max():.1e}" if curve.method == "monte_carlo" else ""
        return f"k_max {curve.k_max}, {len(curve.k)} points{drawn}"
    return run


def _equivalence(combiner, scorer, with_curve=False):
    def run(data, args):
        from auditor.stats.equivalence import power_curve, survey_equivalence

        ratings = _label_counts(data)
        if with_curve:
            power_curve(ratings, combiner=combiner, scorer=scorer, n_bootstrap=args.bootstrap, rng=args.seed)
        eq = survey_equivalence(ratings, data.predictions, combiner=combiner, scorer=scorer,
                                n_bootstrap=args.bootstrap, rng=args.seed)
        return f"equivalence {eq.value}"
    return run


def _coefficient(name):
    def run(data, args):
        import auditor.stats as st

        res = getattr(st, name)(data.counts(), n_bootstrap=args.bootstrap, rng=args.seed)
        return f"{res.value:.5f} [{res.ci_low:.5f}, {res.ci_high:.5f}]"
    return run


def _best(data, args):
    from auditor.stats import best_performance

    res = best_performance(data.counts(), rng=args.seed)
    return ", ".join(f"{m} {v:.4f}" for m, v in res.scores.items())


def _pairwise(data, args):
    from auditor.stats import pairwise_cohen_kappa

    res = pairwise_cohen_kappa(_annotations(data), n_bootstrap=args.pairwise_bootstrap, rng=args.seed)
    return f"{res.n_pairs} pairs, mean {res.mean_weighted:.4f}"


# id: (statistic, shape, data builder (args -> Data or a skip message), runner).
# Synthetic shapes: (items, labels per item, classes) at full size and in --smoke mode.
def _syn(full, tiny, annotators=(0, 0), **kw):
    return lambda args: synthetic(*(tiny if args.smoke else full), args.seed,
                                  annotators=annotators[args.smoke], **kw)


ROWS = {
    "power-plurality-20kx100x3": ("power curve, plurality", "20k × 100 × 3",
                                  _syn((20_000, 100, 3), (300, 20, 3)), _power_curve("plurality", "agreement")),
    "power-plurality-100kx10x10": ("power curve, plurality", "100k × 10 × 10",
                                   _syn((100_000, 10, 10), (500, 10, 10)), _power_curve("plurality", "agreement")),
    "power-plurality-2kx100x10": ("power curve, plurality (drawn: beyond exact reach)", "2k × 100 × 10",
                                  _syn((2_000, 100, 10), (100, 30, 10)), _power_curve("plurality", "agreement")),
    "power-abc-equivalence-20kx100x3": ("power curve + equivalence, ABC", "20k × 100 × 3",
                                        _syn((20_000, 100, 3), (100, 8, 3), predictions="soft"),
                                        _equivalence("abc", "cross_entropy", with_curve=True)),
    "power-abc-100kx10x10": ("power curve, ABC", "100k × 10 × 10",
                             _syn((100_000, 10, 10), (100, 6, 10)), _power_curve("abc", "cross_entropy")),
    "power-abc-cifar10h": ("power curve, ABC", "CIFAR-10H 10k × ~50 × 10",
                           lambda args: cifar10h(args.smoke), _power_curve("abc", "cross_entropy")),
    "equivalence-frequency-1Mx10x3": ("equivalence, frequency", "1M × 10 × 3",
                                      _syn((1_000_000, 10, 3), (2000, 10, 3), predictions="soft"),
                                      _equivalence("frequency", "cross_entropy")),
    "equivalence-frequency-20kx100x3": ("equivalence, frequency", "20k × 100 × 3",
                                        _syn((20_000, 100, 3), (300, 20, 3), predictions="soft"),
                                        _equivalence("frequency", "cross_entropy")),
    "alpha-100kx10x10": ("Krippendorff's alpha with CI", "100k × 10 × 10",
                         _syn((100_000, 10, 10), (1000, 10, 10)), _coefficient("krippendorff_alpha")),
    "alpha-100kx10x50": ("Krippendorff's alpha with CI", "100k × 10 × 50",
                         _syn((100_000, 10, 50), (1000, 10, 50)), _coefficient("krippendorff_alpha")),
    "fleiss-100kx10x10": ("Fleiss' kappa with CI", "100k × 10 × 10",
                          _syn((100_000, 10, 10), (1000, 10, 10)), _coefficient("fleiss_kappa")),
    "fleiss-100kx10x50": ("Fleiss' kappa with CI", "100k × 10 × 50",
                          _syn((100_000, 10, 50), (1000, 10, 50)), _coefficient("fleiss_kappa")),
    "best-100kx10x10": ("BEST, 4 metrics", "100k × 10 × 10", _syn((100_000, 10, 10), (300, 10, 10)), _best),
    "best-100kx10x50": ("BEST, 4 metrics", "100k × 10 × 50", _syn((100_000, 10, 50), (20, 5, 50)), _best),
    "best-300x10x50": ("BEST, 4 metrics", "300 × 10 × 50", _syn((300, 10, 50), (10, 5, 50)), _best),
    "pairwise-100kx10x3": ("pairwise Cohen's kappa", "100k × 10 × 3 (1M annotations, 200 raters)",
                           _syn((100_000, 10, 3), (500, 5, 3), annotators=(200, 12)), _pairwise),
    "pairwise-1Mx10x3": ("pairwise Cohen's kappa", "1M × 10 × 3 (10M annotations, 200 raters)",
                         _syn((1_000_000, 10, 3), (500, 5, 3), annotators=(200, 12)), _pairwise),
    "pairwise-20kx100x3": ("pairwise Cohen's kappa", "20k × 100 × 3 (200 raters)",
                           _syn((20_000, 100, 3), (200, 8, 3), annotators=(200, 12)), _pairwise),
    "power-plurality-one-long-item": ("power curve, plurality", "200 items, one with 1,000 labels",
                                      lambda args: one_long_item(200, 40 if args.smoke else 1000, 10, 3, args.seed),
                                      _power_curve("plurality", "agreement")),
    "power-abc-one-long-item": ("power curve, ABC", "200 items, one with 1,000 labels",
                                lambda args: one_long_item(50 if args.smoke else 200, 20 if args.smoke else 1000,
                                                            5 if args.smoke else 10, 3, args.seed),
                                _power_curve("abc", "cross_entropy")),
    "power-abc-chaosnli-mnli": ("power curve, ABC", "ChaosNLI MNLI 1,599 × 100 × 3",
                                lambda args: chaosnli("mnli_m", args.smoke), _power_curve("abc", "cross_entropy")),
    "power-abc-chaosnli-snli": ("power curve, ABC", "ChaosNLI SNLI 1,514 × 100 × 3",
                                lambda args: chaosnli("snli", args.smoke), _power_curve("abc", "cross_entropy")),
    "power-plurality-equivalence-cifar10h": ("plurality curve + equivalence", "CIFAR-10H",
                                             lambda args: cifar10h(args.smoke),
                                             _equivalence("plurality", "agreement", with_curve=True)),
    "equivalence-continuous-1M": ("equivalence, per-item continuous predictions", "1M × 10 × 3",
                                  _syn((1_000_000, 10, 3), (2000, 10, 3), predictions="continuous"),
                                  _equivalence("frequency", "cross_entropy")),
}


# ---------------------------------------------------------------------------- one row


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024
    return float("nan")  # pragma: no cover - not Linux


def histogram_limit(data: Data) -> float:
    """Seconds to build the (N, L) count matrix from the records and its distinct rows."""
    from auditor.stats import row_histogram, tally_counts

    t0 = time.perf_counter()
    # One integer key per row, re-coded densely where many classes would overflow it.
    row_histogram(tally_counts(data.item, data.label, data.n_items, data.n_labels))
    return time.perf_counter() - t0


def histogram_limit_from_ids(data: Data, ids) -> float:
    """The histogram limit from records whose items are database ids (numbered first)."""
    import numpy as np
    import pandas as pd

    t0 = time.perf_counter()
    item, _ = pd.factorize(ids)   # hashing: faster than a sort-based np.unique
    histogram_limit(Data(item.astype(np.int64, copy=False), data.label, data.n_items, data.n_labels))
    return time.perf_counter() - t0


def _item_ids(data: Data):
    """Each record's item as a database id: distinct, unordered 64-bit numbers."""
    import numpy as np

    ids = np.random.default_rng(1).permutation(data.n_items).astype(np.int64) * 7919 + 1_000_003
    return ids[data.item]


def run_row(row_id: str, args) -> dict:
    _, _, build, runner = ROWS[row_id]
    data = build(args)
    if isinstance(data, str):
        return {"id": row_id, "skipped": data}
    import warnings

    # Lazy imports of the statistics are paid here, not in the timed call.
    import scipy.sparse  # noqa: F401
    import statsmodels.stats.inter_rater  # noqa: F401

    import auditor.stats.equivalence  # noqa: F401

    limit = histogram_limit(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        summary = runner(data, args)
        seconds = time.perf_counter() - t0
    limit = min(limit, histogram_limit(data))
    ids = _item_ids(data)
    limit_ids = min(histogram_limit_from_ids(data, ids) for _ in range(2))
    return {"id": row_id, "seconds": seconds, "limit": limit, "limit_ids": limit_ids, "peak_mib": _peak_rss_mib(),
            "summary": summary, "note": data.note, "distinct": int(_distinct(data))}


def _distinct(data: Data) -> int:
    from auditor.stats import count_histogram

    return count_histogram(data.counts())[0].shape[0]


# ---------------------------------------------------------------------------- driver


def _selected(patterns) -> list[str]:
    if not patterns:
        return list(ROWS)
    return [r for r in ROWS if any(p in r for p in patterns)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", metavar="WORD", help="Run only rows whose id contains one of these.")
    parser.add_argument("--list", action="store_true", help="List the row ids and exit.")
    parser.add_argument("--smoke", action="store_true", help="Tiny sizes: every row in seconds.")
    parser.add_argument("--bootstrap", type=int, default=None, help="Resamples (default 500; 20 with --smoke).")
    parser.add_argument("--pairwise-bootstrap", type=int, default=0,
                        help="Resamples of pairwise kappa (default 0, as an audit runs it).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300.0, help="Seconds before a row is stopped.")
    parser.add_argument("--repeat", type=int, default=1,
                        help="Runs of each row, each in its own process: the median time is printed, "
                             "with the fastest and slowest (shared machines drift by tens of percent).")
    parser.add_argument("--run-row", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bootstrap is None:
        args.bootstrap = 20 if args.smoke else 500
    if args.run_row:
        print(json.dumps(run_row(args.run_row, args)))
        return 0
    rows = _selected(args.rows)
    if args.list:
        for r in rows:
            print(f"{r:<40s} {ROWS[r][0]}, {ROWS[r][1]}")
        return 0
    if not rows:
        print(f"no row matches {args.rows}; see --list", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    passthrough = ["--bootstrap", str(args.bootstrap), "--pairwise-bootstrap", str(args.pairwise_bootstrap),
                   "--seed", str(args.seed)] + (["--smoke"] if args.smoke else [])
    print(f"{'row':<40s} {'time':>9s} {'limit':>8s} {'ratio':>7s} {'ids':>8s} {'ratio':>7s} {'peak':>9s}  result")
    failed = 0
    for r in rows:
        runs = []
        for _ in range(max(1, args.repeat)):
            if args.smoke:
                # Tiny rows run in this process: starting one interpreter per row would
                # take longer than the rows (peak memory is then the whole run's).
                res = run_row(r, args)
            else:
                cmd = [sys.executable, __file__, "--run-row", r, *passthrough]
                try:
                    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
                except subprocess.TimeoutExpired:
                    res = {"timeout": True}
                    break
                if out.returncode != 0:
                    res = {"failed": out.stderr.strip()}
                    break
                res = json.loads(out.stdout.strip().splitlines()[-1])
            if "skipped" in res:
                break
            runs.append(res)
        if "timeout" in res:
            print(f"{r:<40s} did not finish in {args.timeout:.0f} s")
            continue
        if "failed" in res:
            failed += 1
            print(f"{r:<40s} FAILED\n{res['failed']}")
            continue
        if "skipped" in res:
            print(f"{r:<40s} skipped: {res['skipped']}")
            continue
        res = _combined(runs)
        ratio = res["seconds"] / res["limit"] if res["limit"] > 0 else float("inf")
        ratio_ids = res["seconds"] / res["limit_ids"] if res["limit_ids"] > 0 else float("inf")
        note = f" ({res['note']})" if res["note"] else ""
        spread = (f"; {len(runs)} runs, {min(x['seconds'] for x in runs):.2f}–{max(x['seconds'] for x in runs):.2f} s"
                  if len(runs) > 1 else "")
        print(f"{r:<40s} {res['seconds']:8.2f}s {res['limit']:7.3f}s {ratio:6.0f}× {res['limit_ids']:7.3f}s "
              f"{ratio_ids:6.0f}× {res['peak_mib']:7.0f}MiB  {res['distinct']:,} distinct; {res['summary']}{note}"
              f"{spread}")
    return 1 if failed else 0


def _combined(runs: list[dict]) -> dict:
    """Several runs of one row: the median time, the fastest histogram limits (the limit is a
    floor), the largest peak memory."""
    import statistics

    out = dict(runs[0])
    out["seconds"] = statistics.median(x["seconds"] for x in runs)
    out["limit"] = min(x["limit"] for x in runs)
    out["limit_ids"] = min(x["limit_ids"] for x in runs)
    out["peak_mib"] = max(x["peak_mib"] for x in runs)
    return out


if __name__ == "__main__":
    sys.exit(main())
