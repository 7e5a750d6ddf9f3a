"""What the integration tests' real third-party servers share: a virtual environment of
their own per version, installed once under a file lock and cached in
``$XDG_CACHE_HOME/auditor-tests/<name>-<version>`` (``~/.cache`` by default, else the
system temp folder); a free loopback port; and a server process in a process group of its
own, started until a readiness probe answers, stopped with SIGTERM and then SIGKILL.

Outside CI a server that cannot be installed or started skips its tests with the reason;
with ``CI=true`` it fails them. ``suite`` (e.g. "MLflow") names the tests in that message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import pytest

from bench._scratch import stop_processes

INSTALL_TIMEOUT = 1800
#: Written last into a virtual environment whose install (and setup) completed.
MARKER = ".auditor-complete"


def unavailable(message: str, suite: str) -> NoReturn:
    """Skip the test with ``message``; under ``CI=true`` fail it instead."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: the {suite} integration tests must run)", pytrace=False)
    pytest.skip(message)


def cache_root(suite: str) -> Path:
    """The writable folder holding the cached virtual environments."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for root in (base / "auditor-tests", Path(tempfile.gettempdir()) / "auditor-tests"):
        try:
            root.mkdir(parents=True, exist_ok=True)
            if os.access(root, os.W_OK):
                return root
        except OSError:
            continue
    unavailable(f"no writable cache folder for the {suite} server's virtual environment", suite)


def run(cmd: list[str], what: str, suite: str, env: dict[str, str] | None = None,
        timeout: float = INSTALL_TIMEOUT) -> None:
    """Run ``cmd``; a failure or a timeout makes the tests unavailable, naming ``what``."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        unavailable(f"{what} took over {timeout:.0f}s", suite)
    if done.returncode != 0:
        unavailable(f"{what} failed: {(done.stderr or done.stdout)[-1500:]}", suite)


def venv_install(name: str, version: str, packages: Sequence[str], suite: str, *,
                 requires: Sequence[str] = ("bin/python",),
                 setup: Callable[[Path], None] | None = None) -> tuple[Path, float]:
    """The cached virtual environment ``<name>-<version>`` with ``packages`` installed, and
    the seconds the install took (0 when cached). Installed, then prepared by ``setup(venv)``
    if given, under a file lock so that parallel runs install it once; it counts as cached
    when its marker and every path in ``requires`` (relative to it) exist."""
    root = cache_root(suite)
    venv = root / f"{name}-{version}"
    marker = venv / MARKER

    def complete() -> bool:
        return marker.exists() and all((venv / p).exists() for p in requires)

    if complete():
        return venv, 0.0
    with open(root / f"{name}-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete():
            return venv, 0.0
        t0 = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        run([sys.executable, "-m", "venv", str(venv)], f"creating the {suite} server's virtual environment", suite)
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages],
            f"installing {' '.join(packages)} into {venv}", suite)
        if setup is not None:
            setup(venv)
        marker.write_text("".join(f"{p}\n" for p in packages))
        return venv, time.monotonic() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server in a process group of its own, logging to ``log_path``; ``name`` (e.g.
    "mlflow server") names it in messages, and ``stop`` waits ``grace`` seconds after
    SIGTERM before SIGKILL."""

    def __init__(self, name: str, suite: str, log_path: Path, grace: float = 20.0):
        self.name, self.suite, self.log_path, self.grace = name, suite, log_path, grace
        self.proc: subprocess.Popen | None = None
        self.started_in: float | None = None

    def launch(self, cmd: list[str], cwd: Path, env: dict[str, str], ready: Callable[[], bool], timeout: float,
               poll: float = 0.5) -> None:
        """Start ``cmd`` and wait until ``ready()`` is true (an ``OSError`` or ``ValueError``
        from it counts as not yet), every ``poll`` seconds for up to ``timeout`` seconds;
        the server exiting or the deadline passing makes the tests unavailable."""
        log = open(self.log_path, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                unavailable(f"{self.name} exited with {self.proc.returncode}: {self.output()}", self.suite)
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    self.started_in = time.monotonic() - t0
                    return
            time.sleep(poll)
        self.stop()
        unavailable(f"{self.name} not ready after {timeout}s: {self.output()}", self.suite)

    def stop(self) -> None:
        stop_processes(self.proc, timeout=self.grace)
        self.proc = None

    def output(self) -> str:
        """The end of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""
