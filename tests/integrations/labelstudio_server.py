"""A real Label Studio server for the integration tests.

The ``label-studio`` package is installed into a virtual environment of its own, cached in
``$XDG_CACHE_HOME/auditor-tests/label-studio-<version>`` (``~/.cache`` by default, else the
system temp folder) with a data folder already migrated and holding two users (an admin
and an annotator, each with a known API token), so that later runs start in seconds. Each
test session copies that data folder and starts ``label-studio start --no-browser`` on a
free port. The server is told to send webhooks to loopback addresses
(``SSRF_PROTECTION_ENABLED=false``), to wait for them (``WEBHOOK_TIMEOUT``), and to send
nothing anywhere else (no error reports, no analytics, no version check).

Outside CI a server that cannot be installed or started skips the tests with the reason;
with ``CI=true`` it fails them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
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
from dataclasses import dataclass
from pathlib import Path

import pytest

VERSION = "1.23.2"
INSTALL_TIMEOUT = 1800
START_TIMEOUT = 180

ADMIN = ("admin@labelers.example.org", "admin-password-123", "auditor-test-admin-token-0123456789")
ANNOTATOR = ("rater@bolt.example.com", "rater-password-123", "auditor-test-rater-token-0123456789")

# Label Studio reads these (with or without the LABEL_STUDIO_ prefix): keep the server to itself.
QUIET = {
    "SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": "", "COLLECT_ANALYTICS": "false", "LATEST_VERSION_CHECK": "false",
    "SSRF_PROTECTION_ENABLED": "false", "WEBHOOK_TIMEOUT": "30", "LOG_LEVEL": "WARNING",
}


def _unavailable(message: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: the Label Studio integration tests must run)", pytrace=False)
    pytest.skip(message)


def _cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for root in (base / "auditor-tests", Path(tempfile.gettempdir()) / "auditor-tests"):
        try:
            root.mkdir(parents=True, exist_ok=True)
            if os.access(root, os.W_OK):
                return root
        except OSError:
            continue
    _unavailable("no writable cache folder for Label Studio's virtual environment")
    raise AssertionError("unreachable")


def _env(home: Path) -> dict[str, str]:
    # No variable of ours, and none Label Studio would take for its user (USERNAME, PASSWORD).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AUDITOR_", "LABEL_STUDIO_", "HEARTEX_", "DJANGO_"))
           and k not in ("USERNAME", "PASSWORD", "USER_TOKEN", "HOST", "PORT", "DATABASE_NAME")}
    return {**env, **QUIET, "HOME": str(home)}


def _run(cmd: list[str], what: str, env: dict[str, str] | None = None, timeout: float = INSTALL_TIMEOUT) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        _unavailable(f"{what} took over {timeout:.0f}s")
        raise AssertionError("unreachable") from None
    if done.returncode != 0:
        _unavailable(f"{what} failed: {(done.stderr or done.stdout)[-1500:]}")


def install(version: str = VERSION) -> tuple[Path, Path, float]:
    """(python of a cached virtual environment with ``label-studio==version``, a migrated data
    folder with the two users, seconds the install took (0 when cached)); installed under a
    file lock, so that parallel runs install once."""
    root = _cache_root()
    venv = root / f"label-studio-{version}"
    python, template, marker = venv / "bin" / "python", venv / "template-data", venv / ".auditor-complete"
    if marker.exists() and python.exists():
        return python, template, 0.0
    with open(root / f"label-studio-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and python.exists():
            return python, template, 0.0
        t0 = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], "creating Label Studio's virtual environment")
        _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"label-studio=={version}"],
             f"installing label-studio=={version} into {venv}")
        # Migrate once, and make the users: the admin's organization accepts the legacy
        # API tokens that LABEL_STUDIO_USER_TOKEN-style tokens are.
        env = _env(venv)
        for i, (email, password, token) in enumerate((ADMIN, ANNOTATOR)):
            cmd = [str(python), "-m", "label_studio.server", "init", "--data-dir", str(template), "--quiet",
                   "--username", email, "--password", password, "--user-token", token]
            _run(cmd + (["--enable-legacy-api-token"] if i == 0 else []), f"label-studio init ({email})", env=env,
                 timeout=600)
        marker.write_text(f"label-studio=={version}\n")
        return python, template, time.monotonic() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LabelStudio:
    """A running Label Studio: its URL and the two users' emails and API tokens."""

    python: Path
    data: Path
    port: int
    proc: subprocess.Popen | None = None
    started_in: float | None = None

    admin_email, admin_token = ADMIN[0], ADMIN[2]
    annotator_email, annotator_token = ANNOTATOR[0], ANNOTATOR[2]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data.parent / "label-studio.log"

    def start(self) -> None:
        log = open(self.log_path, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [str(self.python), "-m", "label_studio.server", "start", "--data-dir", str(self.data), "--no-browser",
             "--internal-host", "127.0.0.1", "--port", str(self.port)],
            cwd=self.data.parent, env=_env(self.data.parent), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                _unavailable(f"label-studio exited with {self.proc.returncode}: {self.output()}")
            with contextlib.suppress(OSError, ValueError):
                req = urllib.request.Request(f"{self.url}/api/current-user/whoami",
                                             headers={"Authorization": f"Token {self.admin_token}"})
                with urllib.request.urlopen(req, timeout=3) as resp:
                    if json.loads(resp.read()).get("email") == self.admin_email:
                        self.started_in = time.monotonic() - t0
                        return
            time.sleep(0.5)
        self.stop()
        _unavailable(f"label-studio not ready after {START_TIMEOUT}s: {self.output()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def client(self, token: str):
        from label_studio_sdk import LabelStudio as Client

        return Client(base_url=self.url, api_key=token, timeout=60)


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory) -> Iterator[LabelStudio]:
    """A running Label Studio server (session-wide) with an admin and an annotator."""
    try:
        import label_studio_sdk  # noqa: F401
    except ImportError:
        _unavailable("label-studio-sdk is not installed: pip install -e '.[labelstudio]' (or '.[test]')")
    python, template, seconds = install()
    work = tmp_path_factory.mktemp("label-studio")
    shutil.copytree(template, work / "data")
    server = LabelStudio(python, work / "data", free_port())
    server.start()
    print(f"\nlabel-studio {VERSION}: installed in {seconds:.0f}s (0: cached), ready in {server.started_in:.1f}s "
          f"at {server.url}")
    yield server
    server.stop()
