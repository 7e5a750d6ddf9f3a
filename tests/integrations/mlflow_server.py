"""A real MLflow tracking server for the integration tests.

The full ``mlflow`` package (the server; the project itself depends only on the
``mlflow-skinny`` client) is installed into a virtual environment of its own, cached in
``$XDG_CACHE_HOME/auditor-tests/mlflow-server-<version>`` (``~/.cache`` by default) so
that later runs start at once; the version is the installed client's. The server keeps
its registry in SQLite and its artifacts in a local folder, served through its own
artifact proxy, on a free port.

Outside CI a server that cannot be installed or started skips the tests with the reason;
with ``CI=true`` it fails them.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL_TIMEOUT = 1800
START_TIMEOUT = 120


def _unavailable(message: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: the MLflow integration tests must run)", pytrace=False)
    pytest.skip(message)


def client_version() -> str:
    try:
        return importlib.metadata.version("mlflow-skinny")
    except importlib.metadata.PackageNotFoundError:
        _unavailable("the MLflow client is not installed: pip install -e '.[mlflow]' (or '.[test]')")
        raise  # unreachable: _unavailable raises


def _cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for root in (base / "auditor-tests", Path(tempfile.gettempdir()) / "auditor-tests"):
        try:
            root.mkdir(parents=True, exist_ok=True)
            if os.access(root, os.W_OK):
                return root
        except OSError:
            continue
    _unavailable("no writable cache folder for the MLflow server's virtual environment")
    raise AssertionError("unreachable")


def install(version: str) -> tuple[Path, float]:
    """The ``mlflow`` executable of a cached virtual environment with ``mlflow==version``
    (installed now if needed, under a file lock so that parallel runs install it once),
    and the seconds the install took (0 when cached)."""
    root = _cache_root()
    venv = root / f"mlflow-server-{version}"
    exe, marker = venv / "bin" / "mlflow", venv / ".auditor-complete"
    if marker.exists() and exe.exists():
        return exe, 0.0
    with open(root / f"mlflow-server-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and exe.exists():
            return exe, 0.0
        t0 = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        steps = ([sys.executable, "-m", "venv", str(venv)],
                 [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  f"mlflow=={version}"])
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
            except subprocess.TimeoutExpired:
                _unavailable(f"installing mlflow=={version} took over {INSTALL_TIMEOUT}s")
            if done.returncode != 0:
                _unavailable(f"could not install the MLflow server (mlflow=={version}) into {venv}: "
                             f"{(done.stderr or done.stdout)[-1500:]}")
        marker.write_text(f"mlflow=={version}\n")
        return exe, time.monotonic() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """``mlflow server`` with a SQLite backend store and local artifacts, stoppable and
    restartable on the same port and store (to test an outage)."""

    def __init__(self, exe: Path, workdir: Path):
        self.exe, self.workdir = exe, workdir
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / "server.log"
        self.started_in: float | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AUDITOR_"))}
        # The registry needs no background job runner (it serves GenAI evaluation jobs).
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
        log = open(self.log_path, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [str(self.exe), "server", "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
             "--artifacts-destination", str(self.workdir / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                _unavailable(f"mlflow server exited with {self.proc.returncode}: {self.output()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as resp:
                    if resp.status == 200:
                        self.started_in = time.monotonic() - t0
                        return
            time.sleep(0.25)
        self.stop()
        _unavailable(f"mlflow server not ready after {START_TIMEOUT}s: {self.output()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> Iterator[MlflowServer]:
    """A running MLflow tracking server (session-wide); ``.uri`` is its tracking URI."""
    version = client_version()
    exe, seconds = install(version)
    server = MlflowServer(exe, tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    print(f"\nmlflow server {version}: installed in {seconds:.0f}s (0: cached), ready in "
          f"{server.started_in:.1f}s at {server.uri}")
    yield server
    server.stop()
