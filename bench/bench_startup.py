"""Benchmark: the CPU time of starting Auditor — the command line's help and the statistics' import.

Run by hand:

    python bench/bench_startup.py                 # each case 7 times: median, min, max
    python bench/bench_startup.py --repeat 15
    python bench/bench_startup.py --smoke         # each case once (seconds)

Each case runs in a fresh interpreter (``python -c ...`` or ``python -m auditor ...``) and
is measured as user + system CPU seconds of that child (``resource.getrusage``), so a busy
machine stretches the wall time but not this figure. The cases:

* ``python`` — the interpreter alone (the floor);
* ``auditor --help`` and ``auditor <group> --help`` for a few groups — what every
  invocation of the command line pays before its command's own work;
* ``auditor certify --help`` — a command whose module imports the statistics;
* ``import auditor.stats`` — what a notebook pays for the statistics.

The targets (issue 35): ``auditor --help`` under 0.5 s of CPU; ``import auditor.stats``
loads numpy and scipy only (which the tests pin as a set of modules, not a time).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

CASES = {
    "python": ["-c", "pass"],
    "auditor --help": ["-m", "auditor", "--help"],
    "auditor connect --help": ["-m", "auditor", "connect", "--help"],
    "auditor import --help": ["-m", "auditor", "import", "--help"],
    "auditor worker --help": ["-m", "auditor", "worker", "--help"],
    "auditor certify --help": ["-m", "auditor", "certify", "--help"],
    "import auditor.stats": ["-c", "import auditor.stats"],
}


def cpu_seconds(args: list[str]) -> float:
    """User + system CPU seconds of one run of ``python args`` (it must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="Runs of each case (default 7).")
    parser.add_argument("--smoke", action="store_true", help="Each case once.")
    args = parser.parse_args(argv)
    repeat = 1 if args.smoke else max(1, args.repeat)
    print(f"{'case':<28s} {'median':>8s} {'min':>8s} {'max':>8s}   (CPU seconds, {repeat} runs)")
    for name, case in CASES.items():
        runs = [cpu_seconds(case) for _ in range(repeat)]
        print(f"{name:<28s} {statistics.median(runs):8.3f} {min(runs):8.3f} {max(runs):8.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
