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

import importlib.metadata
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integrations._servers import ServerProcess, free_port, unavailable, venv_install

START_TIMEOUT = 120
SUITE = "MLflow"


def client_version() -> str:
    try:
        return importlib.metadata.version("mlflow-skinny")
    except importlib.metadata.PackageNotFoundError:
        unavailable("the MLflow client is not installed: pip install -e '.[mlflow]' (or '.[test]')", SUITE)


def install(version: str) -> tuple[Path, float]:
    """The ``mlflow`` executable of a cached virtual environment with ``mlflow==version``
    (installed now if needed, under a file lock so that parallel runs install it once),
    and the seconds the install took (0 when cached)."""
    venv, seconds = venv_install("mlflow-server", version, [f"mlflow=={version}"], SUITE, requires=("bin/mlflow",))
    return venv / "bin" / "mlflow", seconds


class MlflowServer(ServerProcess):
    """``mlflow server`` with a SQLite backend store and local artifacts, stoppable and
    restartable on the same port and store (to test an outage)."""

    def __init__(self, exe: Path, workdir: Path):
        super().__init__("mlflow server", SUITE, workdir / "server.log", grace=5)
        self.exe, self.workdir = exe, workdir
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AUDITOR_"))}
        # The registry needs no background job runner (it serves GenAI evaluation jobs).
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"

        def ready() -> bool:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as resp:
                return resp.status == 200

        self.launch([str(self.exe), "server", "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
                     "--artifacts-destination", str(self.workdir / "artifacts"), "--host", "127.0.0.1",
                     "--port", str(self.port), "--workers", "1"],
                    cwd=self.workdir, env=env, ready=ready, timeout=START_TIMEOUT, poll=0.25)


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
