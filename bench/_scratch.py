"""What the PostgreSQL benches share (bench helper, not a bench): a scratch database on
the server, the options and child processes of the phase-by-phase benches, and stopping
the processes a bench started.

The benches import it as a sibling module: they run as ``python bench/<name>.py``, which
puts this folder first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POSTGRES_URL_ENV = "AUDITOR_BENCH_POSTGRES_URL"
NO_URL = f"No PostgreSQL URL: pass --url or set {POSTGRES_URL_ENV}; nothing measured."


def peak_mb() -> float:
    """This process's peak resident memory so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- a scratch database ----------------------------------------------------------------


@contextmanager
def scratch_database(server_url: str, *, name: str | None = None, keep: bool = False,
                     driver: str = "postgresql", migrate: bool = False) -> Iterator[str]:
    """A database on the server of ``server_url``; yields its URL (with ``driver``).

    Without ``name`` a new ``auditor_bench_<random>`` database is created, and dropped at
    the end (``WITH (FORCE)``) unless ``keep``, which prints its name instead. With
    ``name`` that database is used, created only if it does not exist yet, and kept or
    dropped the same way (without printing: its name is the caller's). ``migrate`` brings
    a database this call created to the current schema before yielding it.
    """
    import psycopg
    from sqlalchemy import make_url

    server = make_url(server_url).set(drivername="postgresql")
    admin = server.render_as_string(hide_password=False)
    given, name = name is not None, name or f"auditor_bench_{uuid.uuid4().hex[:10]}"
    url = server.set(database=name, drivername=driver).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        created = not (given and conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone())
        if created:
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        if migrate and created:
            from auditor.db import make_engine
            from auditor.db import migrate as migrations

            engine = make_engine(url)
            try:
                migrations.upgrade(engine)
            finally:
                engine.dispose()
        yield url
    finally:
        if not keep:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        elif not given:
            print(f"kept database {name}")


def stop_processes(*procs: subprocess.Popen | None, timeout: float = 30) -> None:
    """SIGTERM each started process (its whole group when it leads one), in order; a
    process still running ``timeout`` seconds later is killed. ``None`` entries are skipped."""
    for proc in procs:
        if proc is None or proc.poll() is not None:
            continue
        group = _own_group(proc.pid)
        _signal(proc, signal.SIGTERM, group)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL, group)
            proc.wait()


def _own_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _signal(proc: subprocess.Popen, sig: int, group: bool) -> None:
    if not group:
        proc.send_signal(sig)
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


# --- benches measured phase by phase, each phase in a child process ------------------------


def phase_parser(description: str, phases: dict[str, Callable]) -> argparse.ArgumentParser:
    """A parser with ``--url`` (default ``AUDITOR_BENCH_POSTGRES_URL``) and the hidden
    ``--phase`` a child process is started with."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default=os.environ.get(POSTGRES_URL_ENV),
                        help=f"PostgreSQL server URL (or {POSTGRES_URL_ENV})")
    parser.add_argument("--phase", choices=sorted(phases), help=argparse.SUPPRESS)
    return parser


def child_or_no_url(args: argparse.Namespace, phases: dict[str, Callable]) -> bool:
    """True when the bench's main has nothing more to do: in a child process (``--phase``)
    the phase has run and printed its result as JSON; without a URL the bench says so."""
    if args.phase:
        print(json.dumps(phases[args.phase](args)))
        return True
    if not args.url:
        print(NO_URL)
        return True
    return False


def run_phase(script: str, phase: str, url: str, *options: str) -> dict:
    """``phase`` of ``script`` in a fresh interpreter (its peak memory its own); its JSON result."""
    out = subprocess.run([sys.executable, script, "--phase", phase, "--url", url, *options],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
