"""Every script in bench/ runs in its ``--smoke`` mode (tiny sizes), so none can rot unnoticed.

The benches are parametrized from the folder's contents: a new ``bench/bench_*.py`` is
covered without touching this file. Benches that need PostgreSQL or Redis get this
session's test server (``AUDITOR_BENCH_POSTGRES_URL``, on which they create and drop
their own scratch databases) and Redis database (``AUDITOR_BENCH_REDIS_URL``); with
``CI=true`` an unreachable service fails these tests instead of skipping them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED
from tests.workers.conftest import redis_url  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted(p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_"))


def test_every_bench_is_collected():
    assert "bench_shapes.py" in BENCHES and len(BENCHES) >= 9


@pytest.mark.parametrize("bench", BENCHES)
def test_bench_smoke(bench, pg_database, redis_url, tmp_path):  # noqa: F811 (the fixture)
    server = pg_database().set(drivername="postgresql").render_as_string(hide_password=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITOR_")}
    env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "AUDITOR_BENCH_POSTGRES_URL": server,
        "AUDITOR_BENCH_REDIS_URL": redis_url,
        "AUDITOR_INSTANCE_PATH": str(tmp_path),
    })
    if SHARED is not None:
        env["AUDITOR_SHARED_DIR"] = str(SHARED)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / bench), "--smoke"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{bench} --smoke exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert out.stdout.strip(), f"{bench} --smoke printed nothing"
