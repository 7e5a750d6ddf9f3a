"""Benchmark: BEST performance against the reference implementation, side by side.

Run by hand:

    python bench/bench_best.py [--sizes 10000 100000] [--presets DIR] \
        [--reference-utils PATH/TO/scruples/utils.py --reference-python PATH/TO/python]

The reference is ``src/scruples/utils.py`` of allenai/scruples, run under its own
interpreter (a virtual environment with numpy, scipy, scikit-learn, autograd and
regex) and imported by path, never installed into Auditor's environment. Give its
location with the options or the ``SCRUPLES_UTILS`` / ``SCRUPLES_PYTHON`` environment
variables; without them only Auditor is timed. The reference is driven as the
Scoracle demo drives it: 625 posterior draws per metric, redone with 10,000 when
``2·SE/score > 1e-2``, numpy's global generator seeded before each call.

Data: ``N`` items × ``K`` classes × ``n`` annotators drawn from a Dirichlet-multinomial
(default prior close to the fit on SNLI dev). ``--presets DIR`` also scores every
``*label-counts.json`` file in DIR (the Scoracle demo's presets), and ``--counts FILE``
any count matrix saved as ``.npy`` or ``.json`` (e.g. CIFAR-10H's
``cifar10h-counts.npy``). ``--sizes`` with no value skips the synthetic data.

Prints wall times, peak memory, both sets of scores with the reference's Monte Carlo
standard errors, and the speed ratio. This same file is the reference runner
(``--reference-runner``), executed by the reference interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METRICS = ("accuracy", "balanced accuracy", "f1 (macro)", "cross entropy (soft labels)")


# ----------------------------------------------------------------- reference side


def _load_reference(utils_path: str):
    """Import the reference module by path; its package ``__init__`` needs torch et al."""
    import importlib.util
    import types

    package = types.ModuleType("scruples")
    package.__path__ = [str(Path(utils_path).parent)]
    settings = types.ModuleType("scruples.settings")
    settings.LOG_FORMAT = "%(message)s"  # the only setting utils.py reads
    sys.modules["scruples"] = package
    sys.modules["scruples.settings"] = settings
    spec = importlib.util.spec_from_file_location("scruples.utils", utils_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["scruples.utils"] = module
    spec.loader.exec_module(module)
    return module


def reference_runner(utils_path: str, counts_path: str, seed: int) -> None:
    """Score one count matrix as the Scoracle demo does; print one JSON object."""
    import warnings

    import numpy as np
    from sklearn import metrics

    warnings.simplefilter("ignore")  # sklearn's undefined-metric warnings, per draw
    utils = _load_reference(utils_path)
    argmax = lambda ys: np.argmax(ys, axis=-1)  # noqa: E731 - the demo's own definition
    supported = {
        "accuracy": (metrics.accuracy_score, {}, argmax),
        "balanced accuracy": (metrics.balanced_accuracy_score, {}, argmax),
        "f1 (macro)": (metrics.f1_score, {"average": "macro"}, argmax),
        "cross entropy (soft labels)": (utils.xentropy, {}, None),
    }
    ys = np.load(counts_path)
    t0 = time.perf_counter()
    alpha = utils.estimate_dirichlet_multinomial_parameters(ys)
    fit_time = time.perf_counter() - t0
    out = {"alpha": [float(a) for a in alpha], "fit_seconds": fit_time, "scores": {},
           "standard_errors": {}, "draws": {}}
    t0 = time.perf_counter()
    c0 = time.process_time()
    for name in METRICS:
        metric, kwargs, make_predictions = supported[name]

        def score(y_true, y_pred, metric=metric, kwargs=kwargs):
            return metric(y_true=y_true, y_pred=y_pred, **kwargs)

        np.random.seed(seed)  # noqa: NPY002 - the reference draws from the global generator
        value, se = utils.oracle_performance(ys=ys, metric=score,
                                             make_predictions=make_predictions, n_samples=625)
        draws = 625
        if (2 * se) / value > 1e-2:
            np.random.seed(seed)  # noqa: NPY002
            value, se = utils.oracle_performance(ys=ys, metric=score,
                                                 make_predictions=make_predictions,
                                                 n_samples=10_000)
            draws = 10_000
        out["scores"][name] = float(value)
        out["standard_errors"][name] = float(se)
        out["draws"][name] = draws
    out["seconds"] = time.perf_counter() - t0
    out["cpu_seconds"] = time.process_time() - c0
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out))


# ------------------------------------------------------------------ Auditor side


def run_reference(python: str, utils_path: str, counts, seed: int) -> dict:
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "counts.npy"
        np.save(path, np.asarray(counts, dtype=np.int64))
        t0 = time.perf_counter()
        proc = subprocess.run(
            [python, __file__, "--reference-runner", utils_path, str(path), "--seed", str(seed)],
            capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"reference runner failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_seconds"] = wall
    return out


def time_auditor(counts, repeat: int, seed: int):
    import tracemalloc
    import warnings

    import numpy as np

    from auditor.stats import best_performance

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = best_performance(counts, rng=seed)   # warm-up (imports, caches)
        times, cpu = [], []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            result = best_performance(counts, rng=seed)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        tracemalloc.start()
        best_performance(counts, rng=seed)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return result, float(np.median(times)), min(times), float(np.median(cpu)), peak / 2**20


def report(label: str, counts, args) -> None:
    import numpy as np

    counts = np.asarray(counts, dtype=np.int64)
    result, median, fastest, cpu, peak_mb = time_auditor(counts, args.repeat, args.seed)
    print(f"\n== {label}: {counts.shape[0]:,} items × {counts.shape[1]} classes, "
          f"{result.n_distinct} distinct count vectors")
    print(f"auditor  : median {median * 1e3:.2f} ms wall (min {fastest * 1e3:.2f} ms; median "
          f"{cpu * 1e3:.2f} ms CPU) for all four "
          f"metrics; peak traced memory {peak_mb:.1f} MB; α̂ = {np.round(result.alpha, 5).tolist()} "
          f"({result.fit.regime})")
    ref = None
    if args.reference_utils and args.reference_python:
        ref = run_reference(args.reference_python, args.reference_utils, counts, args.seed)
        print(f"reference: {ref['seconds']:.2f} s wall ({ref['cpu_seconds']:.2f} s CPU) for the four "
              f"metrics (+ {ref['fit_seconds']:.2f} s "
              f"for its own α fit; {ref['wall_seconds']:.2f} s wall with interpreter start); peak "
              f"RSS {ref['peak_rss_mb']:.0f} MB; α̂ = {np.round(ref['alpha'], 5).tolist()}")
        print(f"ratio    : reference / auditor = {ref['seconds'] / median:,.0f}× wall, "
              f"{ref['cpu_seconds'] / cpu:,.0f}× CPU")
    print(f"{'metric':<30}{'auditor':>12}{'SE':>9}  {'method':<42}", end="")
    print(f"{'reference':>12}{'ref SE':>9}{'draws':>7}{'z':>7}" if ref else "")
    for name in METRICS:
        line = (f"{name:<30}{result.scores[name]:>12.6f}{result.standard_errors[name]:>9.1e}  "
                f"{result.methods[name][:42]:<42}")
        if ref:
            r, se = ref["scores"][name], ref["standard_errors"][name]
            z = (result.scores[name] - r) / se if se > 0 else float("nan")
            line += f"{r:>12.6f}{se:>9.1e}{ref['draws'][name]:>7}{z:>7.2f}"
        print(line)
    for text in result.warnings:
        print(f"warning  : {text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--annotators", type=int, default=5)
    ap.add_argument("--alpha", type=float, nargs="*", default=None,
                    help="Dirichlet prior of the synthetic data (default 0.18 0.19 0.16 for 3 "
                         "classes, else 0.2 each)")
    ap.add_argument("--presets", type=Path, default=None,
                    help="a folder of *label-counts.json files to score as well")
    ap.add_argument("--counts", type=Path, nargs="*", default=[],
                    help="count matrices (.npy or .json, items × classes) to score as well")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference-utils", default=os.environ.get("SCRUPLES_UTILS"),
                    help="path to the reference's src/scruples/utils.py (or SCRUPLES_UTILS)")
    ap.add_argument("--reference-python", default=os.environ.get("SCRUPLES_PYTHON"),
                    help="the reference environment's python (or SCRUPLES_PYTHON)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat, seconds")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.repeat = [200], 1

    import numpy as np

    if not (args.reference_utils and args.reference_python):
        print("reference implementation not configured (--reference-utils/--reference-python or "
              "SCRUPLES_UTILS/SCRUPLES_PYTHON): timing Auditor only.")
    elif not (Path(args.reference_utils).is_file() and Path(args.reference_python).exists()):
        print(f"reference not found at {args.reference_utils} / {args.reference_python}: "
              "timing Auditor only.")
        args.reference_utils = args.reference_python = None

    alpha = args.alpha or ([0.18, 0.19, 0.16] if args.classes == 3 else [0.2] * args.classes)
    if len(alpha) != args.classes:
        ap.error("--alpha needs one value per class")
    rng = np.random.default_rng(args.seed)
    for n in args.sizes:
        p = rng.dirichlet(alpha, size=n)
        counts = np.stack([rng.multinomial(args.annotators, row) for row in p])
        report(f"synthetic Dirichlet{tuple(alpha)}", counts, args)
    if args.presets:
        for path in sorted(args.presets.glob("*label-counts.json")):
            with open(path, encoding="utf-8") as fh:
                report(path.name, json.load(fh), args)
    for path in args.counts:
        if path.suffix == ".npy":
            counts = np.load(path).round().astype(np.int64)
        else:
            with open(path, encoding="utf-8") as fh:
                counts = json.load(fh)
        report(path.name, counts, args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--reference-runner":
        runner = argparse.ArgumentParser()
        runner.add_argument("utils")
        runner.add_argument("counts")
        runner.add_argument("--seed", type=int, default=0)
        opts = runner.parse_args(sys.argv[2:])
        reference_runner(opts.utils, opts.counts, opts.seed)
    else:
        main()
