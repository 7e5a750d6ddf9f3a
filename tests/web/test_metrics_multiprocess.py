"""``auditor serve`` with two gunicorn processes: /metrics sums what both counted.

Whichever process answers the scrape, the request counts are the totals sent to the
server (prometheus-client's multiprocess mode, set up by the gunicorn hooks).
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.web.served import serve

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
    url = pg_database().render_as_string(hide_password=False)
    with serve(url, tmp_path, workers=2, threads=2, AUDITOR_METRICS_TOKEN=TOKEN) as server:
        folder = Path(tempfile.gettempdir()) / f"auditor-prometheus-{server.proc.pid}"
        try:
            # the server's readiness probes (one, or more if one was slow to answer)
            probes = _healthz_count(_get(server.base + "/metrics", {"Authorization": f"Bearer {TOKEN}"})[1].decode())
            yield server.base, folder, int(probes)
        finally:
            server.stop()
            shutil.rmtree(folder, ignore_errors=True)


def test_metrics_sum_the_counts_of_every_web_process(served):
    base, folder, sent = served  # the fixture's readiness probes
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
