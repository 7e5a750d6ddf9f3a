"""Real services for the worker tests: a PostgreSQL database, a Redis db and queue of
this session's own, and ``auditor worker`` subprocesses (no eager mode).

With ``CI=true`` an unreachable Redis fails the tests; elsewhere they skip, saying why.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from celery import Celery

from auditor.config import load_settings, load_worker_settings
from auditor.db import make_engine, make_session_factory, migrate
from bench._scratch import stop_processes

REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
CLI = "from auditor.cli import main; main()"


def _redis_up(port: int) -> bool:
    try:
        with socket.create_connection((REDIS_HOST, port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A Redis database number of this session's own on the shared server."""
    if not _redis_up(REDIS_PORT):
        message = f"Redis not reachable at {REDIS_HOST}:{REDIS_PORT}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message} (CI=true: the worker tests must run)", pytrace=False)
        pytest.skip(f"{message}; start redis-server")
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{int(uuid.uuid4().int % 14) + 1}"


def worker_env(tmp: Path, database_url: str, broker_url: str, backend_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITOR_")}
    env.update({
        "AUDITOR_INSTANCE_PATH": str(tmp),
        "AUDITOR_DATABASE_URL": database_url,
        "AUDITOR_BROKER_URL": broker_url,
        "AUDITOR_RESULT_BACKEND": backend_url,
        "AUDITOR_CELERY_QUEUE": f"auditor-test-{uuid.uuid4().hex[:8]}",
        "AUDITOR_SWEEP_SECONDS": "1",
        "AUDITOR_AUDIT_BOOTSTRAP": "50",
        "AUDITOR_AUDIT_SOFT_TIME_LIMIT": "50",
        "AUDITOR_AUDIT_TIME_LIMIT": "60",
        "AUDITOR_AUDIT_RETRY_BACKOFF": "1",
        "AUDITOR_DB_LOCK_TIMEOUT_MS": "1000",
        "AUDITOR_CELERY_CONCURRENCY": "2",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    })
    env.update(extra)
    return env


class Worker:
    """An ``auditor worker --beat`` subprocess in its own process group."""

    def __init__(self, env: dict[str, str], log: Path, pool: str = "prefork"):
        self.env, self.log_path = env, log
        self.log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLI, "worker", "--beat", f"--pool={pool}", "--loglevel=INFO",
             f"--hostname=w{uuid.uuid4().hex[:6]}@%h"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the worker and its children: no chance to acknowledge or clean up."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        stop_processes(self.proc, timeout=5)
        self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture
def start_worker(tmp_path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(env: dict[str, str], pool: str = "prefork") -> Worker:
        w = Worker(env, tmp_path / f"worker-{len(started)}.log", pool)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


def client_app(env: dict[str, str]) -> Celery:
    """The test process's Celery app (what the web app does), made the default app."""
    from auditor.worker import celery_config

    app = Celery("auditor-test-client")
    app.config_from_object(celery_config(load_settings(env), load_worker_settings(env)))
    app.set_default()
    import auditor.worker.tasks  # noqa: F401 - registers the shared tasks

    return app


@pytest.fixture
def pg_factory(pg_database):
    """A migrated PostgreSQL database of this test's own, and a session factory on it."""
    url = pg_database()
    engine = make_engine(url)
    migrate.upgrade(engine)
    yield url.render_as_string(hide_password=False), make_session_factory(engine)
    engine.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((REDIS_HOST, 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server of the test's own, to stop and restart (never the shared one)."""

    def __init__(self, port: int, tmp: Path):
        self.port, self.tmp, self.proc = port, tmp, None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed") if os.environ.get("CI") == "true" else pytest.skip(
                "redis-server is not installed")
        self.proc = subprocess.Popen([exe, "--port", str(self.port), "--bind", REDIS_HOST, "--save", "",
                                      "--appendonly", "no", "--dir", str(self.tmp)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if _redis_up(self.port):
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
