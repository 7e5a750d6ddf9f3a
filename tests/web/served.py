"""``auditor serve`` (gunicorn, gthread workers) on a migrated PostgreSQL database of its own, for
tests that need the real HTTP stack and a web process to measure (its peak memory, its
answers under load)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from auditor.db import make_engine, migrate
from bench._scratch import stop_processes
from tests.workers.conftest import CLI, free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    base: str
    port: int
    proc: subprocess.Popen
    database_url: str
    log: Path

    def workers(self) -> list[int]:
        """The gunicorn worker processes (children of the server)."""
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    out.append(int(entry.name))
        return out

    def peak_rss_mb(self) -> float:
        """The largest peak resident memory (VmHWM) of any of its web processes, in MB."""
        peaks = []
        for pid in self.workers():
            try:
                text = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            peaks += [int(line.split()[1]) / 1024 for line in text.splitlines() if line.startswith("VmHWM")]
        return max(peaks, default=0.0)

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                timeout: float = 120) -> tuple[int, bytes, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read(), dict(r.getheaders())
        finally:
            conn.close()

    def json(self, method: str, path: str, payload, headers: dict | None = None) -> tuple[int, object]:
        status, data, _ = self.request(method, path, json.dumps(payload).encode(),
                                       {"Content-Type": "application/json", **(headers or {})})
        return status, json.loads(data) if data else None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """SIGTERM the server's process group (SIGKILL if it has not exited within 15 s)."""
        stop_processes(self.proc, timeout=15)


@contextmanager
def serve(database_url: str, tmp: Path, *, workers: int = 1, threads: int = 4, **settings: str) -> Iterator[Served]:
    """Migrate ``database_url`` and serve it until the block ends (``settings``: AUDITOR_* variables)."""
    engine = make_engine(database_url)
    migrate.upgrade(engine)
    engine.dispose()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITOR_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update({"AUDITOR_DATABASE_URL": database_url, "AUDITOR_INSTANCE_PATH": str(tmp),
                "AUDITOR_RATELIMIT_STORAGE_URL": "memory://", "AUDITOR_BROKER_URL": "memory://",
                "AUDITOR_SECRET_KEY": "served-" + str(port), "PYTHONPATH": str(ROOT), **settings})
    log = tmp / f"serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", CLI, "serve", "--port", str(port), "--workers", str(workers),
                                 "--threads", str(threads)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    served = Served(f"http://127.0.0.1:{port}", port, proc, database_url, log)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if served.request("GET", "/healthz", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError(f"the server did not start:\n{served.output()}")
            time.sleep(0.2)
        yield served
    finally:
        served.stop()
