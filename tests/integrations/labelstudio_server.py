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

import json
import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integrations._servers import ServerProcess, free_port, run, unavailable, venv_install

VERSION = "1.23.2"
START_TIMEOUT = 180
SUITE = "Label Studio"

ADMIN = ("admin@labelers.example.org", "admin-password-123", "auditor-test-admin-token-0123456789")
ANNOTATOR = ("rater@bolt.example.com", "rater-password-123", "auditor-test-rater-token-0123456789")

# Label Studio reads these (with or without the LABEL_STUDIO_ prefix): keep the server to itself.
QUIET = {
    "SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": "", "COLLECT_ANALYTICS": "false", "LATEST_VERSION_CHECK": "false",
    "SSRF_PROTECTION_ENABLED": "false", "WEBHOOK_TIMEOUT": "30", "LOG_LEVEL": "WARNING",
}


def _env(home: Path) -> dict[str, str]:
    # No variable of ours, and none Label Studio would take for its user (USERNAME, PASSWORD).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AUDITOR_", "LABEL_STUDIO_", "HEARTEX_", "DJANGO_"))
           and k not in ("USERNAME", "PASSWORD", "USER_TOKEN", "HOST", "PORT", "DATABASE_NAME")}
    return {**env, **QUIET, "HOME": str(home)}


def _make_users(venv: Path) -> None:
    """Migrate a template data folder once, and make the users: the admin's organization
    accepts the legacy API tokens that LABEL_STUDIO_USER_TOKEN-style tokens are."""
    env = _env(venv)
    for i, (email, password, token) in enumerate((ADMIN, ANNOTATOR)):
        cmd = [str(venv / "bin" / "python"), "-m", "label_studio.server", "init", "--data-dir",
               str(venv / "template-data"), "--quiet", "--username", email, "--password", password,
               "--user-token", token]
        run(cmd + (["--enable-legacy-api-token"] if i == 0 else []), f"label-studio init ({email})", SUITE, env=env,
            timeout=600)


def install(version: str = VERSION) -> tuple[Path, Path, float]:
    """(python of a cached virtual environment with ``label-studio==version``, a migrated data
    folder with the two users, seconds the install took (0 when cached)); installed under a
    file lock, so that parallel runs install once."""
    venv, seconds = venv_install("label-studio", version, [f"label-studio=={version}"], SUITE, setup=_make_users)
    return venv / "bin" / "python", venv / "template-data", seconds


class LabelStudio(ServerProcess):
    """A running Label Studio: its URL and the two users' emails and API tokens."""

    admin_email, admin_token = ADMIN[0], ADMIN[2]
    annotator_email, annotator_token = ANNOTATOR[0], ANNOTATOR[2]

    def __init__(self, python: Path, data: Path, port: int):
        super().__init__("label-studio", SUITE, data.parent / "label-studio.log", grace=20)
        self.python, self.data, self.port = python, data, port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        def ready() -> bool:
            req = urllib.request.Request(f"{self.url}/api/current-user/whoami",
                                         headers={"Authorization": f"Token {self.admin_token}"})
            with urllib.request.urlopen(req, timeout=3) as resp:
                return json.loads(resp.read()).get("email") == self.admin_email

        self.launch([str(self.python), "-m", "label_studio.server", "start", "--data-dir", str(self.data),
                     "--no-browser", "--internal-host", "127.0.0.1", "--port", str(self.port)],
                    cwd=self.data.parent, env=_env(self.data.parent), ready=ready, timeout=START_TIMEOUT, poll=0.5)

    def client(self, token: str):
        from label_studio_sdk import LabelStudio as Client

        return Client(base_url=self.url, api_key=token, timeout=60)


@pytest.fixture(scope="session")
def label_studio(tmp_path_factory) -> Iterator[LabelStudio]:
    """A running Label Studio server (session-wide) with an admin and an annotator."""
    try:
        import label_studio_sdk  # noqa: F401
    except ImportError:
        unavailable("label-studio-sdk is not installed: pip install -e '.[labelstudio]' (or '.[test]')", SUITE)
    python, template, seconds = install()
    work = tmp_path_factory.mktemp("label-studio")
    shutil.copytree(template, work / "data")
    server = LabelStudio(python, work / "data", free_port())
    server.start()
    print(f"\nlabel-studio {VERSION}: installed in {seconds:.0f}s (0: cached), ready in {server.started_in:.1f}s "
          f"at {server.url}")
    yield server
    server.stop()
