"""Benchmark: full audits (every statistic the pipeline computes) of real datasets, in memory.

Run by hand (needs the public datasets: a ``shared/datasets`` folder next to the checkout,
or ``AUDITOR_SHARED_DIR``):

    python bench/bench_real_audits.py [--dataset chaosnli-snli cifar10h] [--bootstrap 500]

* ``chaosnli-snli``: ChaosNLI's 1,514 SNLI items × 100 labels, with the five real model
  runs of Baan et al. (BERT-base ×2, RoBERTa-base ×3) as releases, joined on the item id;
* ``cifar10h``: CIFAR-10H's 10,000 images × 47–63 labels over 10 classes, with its four
  models (DenseNet-BC, PreResNet-110, ResNet-110 and the low-accuracy model).

Neither dataset names its annotators, so label *j* of an item is given to pseudo-annotator
*j* (ChaosNLI) or drawn from a pool of 2,571 (CIFAR-10H's number of raters, spread
uniformly); per-annotator and pairwise statistics therefore run on realistic shapes but say
nothing about real people. The snapshot is built in memory and handed to the same
``compute_inline`` the worker runs (the dataset part, then every release), so the figure is
the audit's compute alone. ``--smoke`` audits the first 30 items of each.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
from _datasets import NOT_FOUND, datasets_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from auditor.audit.inputs import AuditSnapshot, PreviousResults, ReleaseSnapshot  # noqa: E402
from auditor.audit.pipeline import AuditOptions  # noqa: E402
from auditor.audit.runner import compute_inline  # noqa: E402


def _annotations_from_counts(counts: np.ndarray, rng, pool: int | None):
    """One row per label: item position, annotator position, label code."""
    k = counts.sum(axis=1)
    item = np.repeat(np.arange(counts.shape[0]), k)
    label = np.concatenate([np.repeat(np.arange(counts.shape[1]), row) for row in counts])
    if pool is None:  # label j of each item → pseudo-annotator j
        starts = np.repeat(np.cumsum(k) - k, k)
        annotator = np.arange(item.size) - starts
    else:  # distinct annotators per item, drawn from a pool
        annotator = np.concatenate([rng.choice(pool, size=int(n), replace=False) for n in k])
    order = np.argsort(item * (annotator.max() + 1) + annotator, kind="stable")
    return item[order], annotator[order], label[order]


def snapshot(name: str, labels, counts, releases, gold=None, pool=None, seed=0) -> AuditSnapshot:
    rng = np.random.default_rng(seed)
    item, annotator, label = _annotations_from_counts(counts, rng, pool)
    n_ann = int(annotator.max()) + 1
    rel = tuple(
        ReleaseSnapshot(release_id=i + 1, model=model, version=version, item_index=np.arange(counts.shape[0]),
                        labels=hard.astype(np.int64), probabilities=probs)
        for i, (model, version, hard, probs) in enumerate(releases)
    )
    return AuditSnapshot(
        dataset_id=1, workspace_id=1, name=name, labels=tuple(labels), data_version=1,
        item_ids=np.arange(1, counts.shape[0] + 1), counts=counts.astype(np.int64),
        gold=np.full(counts.shape[0], -1, dtype=np.int64) if gold is None else gold.astype(np.int64),
        ann_item=item.astype(np.int64), ann_annotator=annotator.astype(np.int64), ann_label=label.astype(np.int64),
        annotator_ids=np.arange(1, n_ann + 1), annotator_names=tuple(f"rater-{a:04d}" for a in range(n_ann)),
        annotator_vendors=tuple("crowd" for _ in range(n_ann)), annotator_tiers=tuple("crowd" for _ in range(n_ann)),
        releases=rel, previous=PreviousResults(),
    )


def chaosnli_snli(base: Path, limit: int | None) -> AuditSnapshot:
    rows = [json.loads(line) for line in open(base / "chaosnli" / "chaosNLI_snli.jsonl", encoding="utf-8")]
    rows = rows[:limit] if limit else rows
    uid = [r["uid"] for r in rows]
    counts = np.asarray([r["label_count"] for r in rows])  # order e, n, c
    position = {u: i for i, u in enumerate(uid)}
    # Baan et al.: class 0 entailment, 1 contradiction, 2 neutral → our order e, n, c
    remap = np.array([0, 2, 1])
    releases = []
    folder = base / "snli_dev_model_predictions_baan2022"
    for model, runs in (("bert-base-uncased", 2), ("roberta-base", 3)):
        for run in range(runs):
            hard = np.full(len(uid), -1)
            probs = np.zeros((len(uid), 3))
            for half in ("dev", "test"):
                for line in open(folder / f"SNLI_{half}_{model}_{run}.json", encoding="utf-8"):
                    rec = json.loads(line)
                    i = position.get(rec["uid"])
                    if i is not None:
                        hard[i] = remap[rec["pred"]]
                        probs[i, remap] = rec["probs"]
            keep = hard >= 0
            if not keep.all():
                raise SystemExit(f"{model} run {run}: {int((~keep).sum())} ChaosNLI items have no prediction")
            releases.append((model, f"run-{run}", hard, probs / probs.sum(axis=1, keepdims=True)))
    return snapshot("chaosnli-snli", ("entailment", "neutral", "contradiction"), counts, releases)


def cifar10h(base: Path, limit: int | None) -> AuditSnapshot:
    folder = base / "cifar10h"
    counts = np.load(folder / "cifar10h-counts.npy").astype(np.int64)
    n = limit or counts.shape[0]
    releases = []
    for name in ("densenet-bc-L190-k40", "preresnet-110", "resnet-110"):
        table = np.loadtxt(folder / "model_predictions_kerrigan2021" / f"{name}.csv", delimiter=",")
        if not np.array_equal(table[:, 1:11].astype(np.int64), counts):
            raise SystemExit(f"{name}: rows are not in the order of cifar10h-counts.npy")
        probs = table[:n, 11:21]
        releases.append((name, "1", probs.argmax(axis=1), probs / probs.sum(axis=1, keepdims=True)))
    table = np.loadtxt(folder / "model_predictions_kerrigan2021" / "human_model_truth_cifar10h.csv", delimiter=",")
    if not np.array_equal(table[:, 0:10].astype(np.int64), counts):
        raise SystemExit("human_model_truth_cifar10h.csv: rows are not in the order of cifar10h-counts.npy")
    probs = table[:n, 10:20]
    releases.append(("low-accuracy-model", "1", probs.argmax(axis=1), probs / probs.sum(axis=1, keepdims=True)))
    gold = table[:n, 20].astype(np.int64)
    labels = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    return snapshot("cifar10h", labels, counts[:n], releases, gold=gold, pool=2571)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", nargs="+", default=["chaosnli-snli", "cifar10h"], choices=["chaosnli-snli", "cifar10h"])
    p.add_argument("--bootstrap", type=int, default=500)
    p.add_argument("--smoke", action="store_true", help="the first 30 items of each, 10 resamples")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="BLAS threads, as an audit worker process runs (AUDITOR_WORKER_BLAS_THREADS, default 1); "
                        "0: the library's own default (one per core)")
    args = p.parse_args(argv)
    if args.blas_threads > 0:
        from auditor.worker import limit_blas_threads

        limit_blas_threads(args.blas_threads)
    base = datasets_dir()
    if base is None:
        print(NOT_FOUND)
        return
    limit = 30 if args.smoke else None
    options = AuditOptions(n_bootstrap=10 if args.smoke else args.bootstrap)
    for name in args.dataset:
        t0 = time.perf_counter()
        snap = (chaosnli_snli if name == "chaosnli-snli" else cifar10h)(base, limit)
        load = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        result = compute_inline(snap, options)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name}: {snap.counts.shape[0]:,} items, {snap.n_annotations:,} labels, {len(snap.releases)} releases "
              f"(read in {load:.1f} s): audit compute {wall:.2f} s wall, {cpu:.2f} s CPU, peak RSS {rss:.0f} MB")
        for note in result.get("notes", [])[:10]:
            print(f"  note: {note}")


if __name__ == "__main__":
    main()
