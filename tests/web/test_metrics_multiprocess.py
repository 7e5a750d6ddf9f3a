"""``auditor serve`` with two gunicorn processes: /metrics sums what both counted.

Whichever process answers the scrape, the request counts are the totals sent to the
server (prometheus-client's multiprocess mode, set up by the gunicorn hooks).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from auditor.db import make_engine, migrate
from tests.workers.conftest import CLI, free_port

pytestmark = pytest.mark.services

TOKEN = "multi-" + uuid.uuid4().hex


def _get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _healthz_count(text: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == "auditor_http_request_duration_seconds":
            return sum(s.value for s in family.samples
                       if s.name.endswith("_count") and s.labels.get("endpoint") == "/healthz")
    return 0.0


@pytest.fixture
def served(pg_database, tmp_path):
    url = pg_database()
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITOR_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update({"AUDITOR_DATABASE_URL": url.render_as_string(hide_password=False),
                "AUDITOR_INSTANCE_PATH": str(tmp_path), "AUDITOR_METRICS_TOKEN": TOKEN,
                "AUDITOR_RATELIMIT_STORAGE_URL": "memory://",
                "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", CLI, "serve", "--port", str(port), "--workers", "2",
                             "--threads", "2"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    folder = Path(tempfile.gettempdir()) / f"auditor-prometheus-{proc.pid}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _get(base + "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError((tmp_path / "serve.log").read_text(errors="replace")[-3000:])
            time.sleep(0.2)
        yield base, folder
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_metrics_sum_the_counts_of_every_web_process(served):
    base, folder = served
    sent = 1  # the fixture's readiness probe
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with ThreadPoolExecutor(8) as pool:
        for _ in range(20):
            statuses = list(pool.map(lambda _: _get(base + "/healthz")[0], range(40)))
            assert set(statuses) == {200}
            sent += len(statuses)
            writers = {p.stem.rsplit("_", 1)[-1] for p in folder.glob("*.db")}
            if len(writers) >= 2:
                break
    assert folder.is_dir(), "the server did not set up PROMETHEUS_MULTIPROC_DIR"
    assert len(writers) >= 2, f"only {writers} wrote counts after {sent} requests"
    for _ in range(8):  # answered by either process: always the total
        status, body = _get(base + "/metrics", auth)
        assert status == 200
        assert _healthz_count(body.decode()) == sent
    assert _get(base + "/metrics")[0] == 401
