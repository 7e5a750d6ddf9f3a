"""/readyz follows a PostgreSQL server that stops and comes back.

The test starts a PostgreSQL server of its own (``initdb`` into a temporary folder with
the machine's PostgreSQL binaries, on a free port; as the ``postgres`` system user when
the tests run as root, since PostgreSQL refuses to run as root), points an app at it,
stops it and starts it again. The machine's own server is never touched.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from auditor.db import make_engine, migrate
from auditor.web import create_app
from tests.web.conftest import app_config
from tests.workers.conftest import free_port

pytestmark = pytest.mark.services


def _bindir() -> Path | None:
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False).stdout.strip()
        if out and (Path(out) / "initdb").is_file():
            return Path(out)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(candidates[-1]).parent if candidates else None


def _unavailable(message: str) -> None:
    """Skip outside CI; under ``CI=true`` the outage test must run, so fail instead."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: the /readyz outage test must run)", pytrace=False)
    pytest.skip(message)


class PrivatePostgres:
    """A PostgreSQL server in a temporary folder, on a free port, to stop and start at will."""

    def __init__(self):
        self.bin = _bindir()
        if self.bin is None:
            _unavailable("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="auditor-private-pg-"))
        self.data = self.root / "data"
        self.user = None
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            try:
                self.user = pwd.getpwnam("postgres")
            except KeyError:
                _unavailable("running as root and there is no 'postgres' user to run a PostgreSQL server as")
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run(self.bin / "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv, check: bool = True) -> subprocess.CompletedProcess:
        kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid} if self.user is not None else {}
        result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, cwd=self.root,
                                check=False, **kwargs)
        if check and result.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({result.returncode}): {result.stdout}\n{result.stderr}")
        return result

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c full_page_writes=off -c shared_buffers=16MB")
        self._run(self.bin / "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"),
                  "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._run(self.bin / "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        self._run(self.bin / "pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def private_postgres():
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


def _ready(client) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    r = client.get("/readyz")
    return r.status_code, r.get_json(), time.monotonic() - t0


def test_readyz_fails_while_postgres_is_stopped_and_recovers(private_postgres, pg_engine):
    engine = make_engine(private_postgres.url)
    migrate.upgrade(engine)
    engine.dispose()
    app = create_app({**app_config(pg_engine), "DATABASE_URL": private_postgres.url})
    client = app.test_client()
    # The app's own pool holds a connection to the server, as a serving process would.
    with app.extensions["auditor.engine"].connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1

    status, body, _ = _ready(client)
    assert status == 200, body
    assert body["checks"]["database"]["ok"] and body["checks"]["migrations"]["ok"]

    private_postgres.stop()
    status, body, elapsed = _ready(client)
    assert status == 503 and body["status"] == "unavailable"
    assert body["checks"]["database"]["ok"] is False and body["checks"]["database"]["error"].startswith("unreachable")
    assert body["checks"]["migrations"]["ok"] is False
    assert body["checks"]["broker"]["ok"] is True
    assert elapsed < 5, f"/readyz took {elapsed:.1f} s with the database down"
    assert client.get("/healthz").status_code == 200  # the process is still up

    private_postgres.start()
    deadline = time.monotonic() + 30
    while True:
        status, body, _ = _ready(client)
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 200, body
    assert all(c["ok"] for c in body["checks"].values())
    # And the app serves from the restarted server again (its pool replaced the dead connections).
    with app.extensions["auditor.engine"].connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1
    app.extensions["auditor.engine"].dispose()
