"""``auditor users create``, ``auditor tokens create`` and ``auditor serve`` against the real database."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from click.testing import CliRunner

from auditor.cli import main

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def env(pg_engine):
    return {"AUDITOR_DATABASE_URL": pg_engine.url.render_as_string(hide_password=False)}


def run(env, *args):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_users_and_tokens(app, client, env):
    ws = "cli-" + uuid.uuid4().hex[:8]
    r = run(env, "users", "create", "--workspace", ws, "--email", "Boss@Example.org", "--role", "admin",
            "--password", "long enough secret")
    assert r.exit_code == 0, r.output
    r = run(env, "tokens", "create", "--workspace", ws, "--user", "boss@example.org")
    assert r.exit_code == 0, r.output
    admin = {"Authorization": f"Bearer {r.output.strip()}"}
    me = client.get("/api/v1/me", headers=admin).get_json()
    assert (me["workspace"], me["email"], me["role"]) == (ws, "boss@example.org", "admin")
    ds = client.post("/api/v1/datasets", json={"name": "cli-set", "labels": ["a", "b"]}, headers=admin).get_json()

    r = run(env, "users", "create", "--workspace", ws, "--email", "v@acme.example", "--role", "vendor",
            "--vendor", "acme", "--password", "another secret")
    assert r.exit_code == 0, r.output
    r = run(env, "tokens", "create", "--workspace", ws, "--user", "v@acme.example", "--role", "vendor",
            "--dataset", "cli-set")
    assert r.exit_code == 0, r.output
    me = client.get("/api/v1/me", headers={"Authorization": f"Bearer {r.output.strip()}"}).get_json()
    assert me["role"] == "vendor" and me["vendor"] == "acme" and me["datasets"] == [ds["id"]]

    # A token may narrow a role, never widen it.
    r = run(env, "tokens", "create", "--workspace", ws, "--user", "boss@example.org", "--role", "viewer")
    viewer = {"Authorization": f"Bearer {r.output.strip()}"}
    assert client.get("/api/v1/me", headers=viewer).get_json()["role"] == "viewer"
    assert client.post("/api/v1/models", json={"name": "x"}, headers=viewer).status_code == 403


@pytest.mark.parametrize("args", [
    ("users", "create", "--email", "x@y.z", "--role", "vendor", "--password", "long enough"),
    ("users", "create", "--email", "x@y.z", "--password", "short"),
    ("tokens", "create", "--workspace", "nowhere", "--user", "nobody@y.z"),
])
def test_bad_invocations_say_why(env, args):
    r = run(env, *args)
    assert r.exit_code == 2
    assert "Error" in r.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_runs_the_app_under_gunicorn(env):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c",
                             "from auditor.cli import main; main()", "serve", "--port", str(port), "--workers", "1"],
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        body = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/openapi.json", timeout=2) as resp:
                    body = resp.read()
                    server = resp.headers.get("Server", "")
                break
            except OSError:
                time.sleep(0.1)
        assert body is not None, "the server did not answer"
        assert b'"openapi"' in body and "gunicorn" in server
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_web_processes_run_their_blas_on_one_thread(tmp_path):
    """The gunicorn hooks (the container's ``-c python:auditor.web.gunicorn_conf`` and
    ``auditor serve``) limit each web process's BLAS to one thread once it has forked:
    its request threads are its parallelism."""
    import json

    from gunicorn.app.base import Application
    from gunicorn.config import Config

    from auditor.web import gunicorn_conf

    # The container's command reads the hooks from the module, by their setting names.
    app = Application.__new__(Application)
    app.cfg = Config()
    app.load_config_from_module_name_or_filename("python:auditor.web.gunicorn_conf")
    assert app.cfg.post_fork is gunicorn_conf.post_fork
    probe = (
        "import json\n"
        "from threadpoolctl import threadpool_info\n"
        "import numpy  # noqa: F401 - loads its BLAS\n"
        "def blas(): return [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "before = blas()\n"
        "from auditor.web import gunicorn_conf\n"
        "gunicorn_conf.post_fork(None, None)\n"
        "print(json.dumps({'before': before, 'after': blas()}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUDITOR_", "OPENBLAS_", "OMP_", "MKL_"))}
    env["AUDITOR_INSTANCE_PATH"] = str(tmp_path)
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "2"  # two threads to start from
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    if min(seen["before"] or [0]) < 2:
        pytest.skip(f"BLAS runs {seen['before']} thread(s) here (one core): no limit to observe")
    assert seen["after"] and all(n == 1 for n in seen["after"]), seen
