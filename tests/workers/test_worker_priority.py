"""Audit workers yield the CPU to the web: niceness and the default number of processes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from auditor.config import default_concurrency, load_worker_settings
from auditor.worker import lower_priority


def _nice(pid: int) -> int:
    # /proc/<pid>/stat: the fields after the command name's closing parenthesis; nice is the 19th field.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = task / "children"
        if children.exists():
            found += [int(p) for p in children.read_text().split()]
    return found


def test_default_concurrency_leaves_a_core_to_the_web():
    assert [default_concurrency(c) for c in (None, 1, 2, 4, 16)][1:] == [1, 1, 3, 15]
    assert default_concurrency() >= 1
    w = load_worker_settings({})
    assert w.concurrency == default_concurrency() and w.nice == 10
    assert load_worker_settings({"AUDITOR_CELERY_CONCURRENCY": "3", "AUDITOR_WORKER_NICE": "5"}).nice == 5
    for env, name in (({"AUDITOR_CELERY_CONCURRENCY": "0"}, "AUDITOR_CELERY_CONCURRENCY"),
                      ({"AUDITOR_WORKER_NICE": "20"}, "AUDITOR_WORKER_NICE"),
                      ({"AUDITOR_WORKER_NICE": "-1"}, "AUDITOR_WORKER_NICE"),
                      ({"AUDITOR_WORKER_NICE": "low"}, "AUDITOR_WORKER_NICE")):
        with pytest.raises(ValueError, match=name):
            load_worker_settings(env)


def test_lower_priority_never_raises_it(tmp_path):
    import subprocess
    import sys

    code = ("from auditor.worker import lower_priority; import os; "
            "a = lower_priority(3); b = lower_priority(1); print(a, b, os.nice(0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["3", "3", "3"]
    assert callable(lower_priority)


def test_worker_processes_run_at_the_configured_niceness(pg_factory, redis_url, start_worker, tmp_path):
    from tests.workers.conftest import worker_env

    url, _ = pg_factory
    worker = start_worker(worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_WORKER_NICE="7"))
    deadline = time.monotonic() + 60
    seen: dict[int, int] = {}
    while time.monotonic() < deadline and worker.proc.poll() is None:
        pool = _children(worker.proc.pid)
        seen = {pid: _nice(pid) for pid in [worker.proc.pid, *pool]}
        if len(pool) >= 2 and all(n == 7 for n in seen.values()):  # the main process and its 2 pool processes
            break
        time.sleep(0.2)
    assert len(seen) >= 3 and set(seen.values()) == {7}, f"{seen}\n{worker.output()}"
