"""Benchmark: ``POST /api/score`` at and beyond its documented bounds, over real HTTP, alone and under load.

Run by hand:

    python bench/bench_score.py [--repeat 3] [--duration 20] [--smoke]

Serves the web application with ``auditor serve`` (gunicorn, 2 processes × 4 threads) on
an empty SQLite instance in a temporary directory, with 22 users (one token each, rate
limits lifted), and measures:

* each body alone, in turn: its wall time from the client and the CPU time the web
  processes spent on it (from ``/proc``). The accepted bodies are the largest legal
  ones (1000 rows × 20 classes, counts up to 1000, all four metrics) with the count
  matrices that cost most (uniform counts; counts of 0 or 1000, where many classes tie;
  Dirichlet-multinomial; sparse), and F1 (macro) alone on 14 to 1000 rows of 0 or 1000
  and of small counts leaving 7 to 12 classes never gold (its Monte Carlo case). Bodies
  beyond the bounds must be refused (4xx) before any work. Targets: under 1 s of CPU for
  every accepted body, under 100 ms for every refusal;
* under load: 20 users each sending the costliest F1 body back to back (after a 503 or
  429, again after its Retry-After) for ``--duration`` seconds, while another user reads ``/healthz`` every 100 ms and a
  dashboard page and an API page every 250 ms (first without the load: the machine's own
  baseline). Targets: ``/healthz`` under 100 ms and the other user's pages under 500 ms
  (95th percentile; the maximum is printed too); the costly requests
  are answered (200, or 503/429 with Retry-After while the process's scoring slot is
  taken), never left waiting.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

METRICS = ["accuracy", "balanced accuracy", "f1 (macro)", "cross entropy (soft labels)"]
PASSWORD = "bench password"


def accepted_bodies(rows: int, classes: int, seed: int = 0) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    dirichlet = np.stack([rng.multinomial(1000, p) for p in rng.dirichlet(np.full(classes, 0.3), size=rows)])
    shapes = {
        "uniform 0..1000": rng.integers(0, 1001, size=(rows, classes)),
        "0 or 1000 (ties)": np.where(rng.random((rows, classes)) < 0.5, 0, 1000),
        "Dirichlet-multinomial": dirichlet,
        "sparse": (rng.random((rows, classes)) < 0.15) * rng.integers(0, 1001, size=(rows, classes)),
        # few rows, many never-gold classes: F1 (macro)'s Monte Carlo correction
        "14 rows of 0 or 10 (F1 MC)": np.where(rng.random((14, classes)) < 0.3, 0, 10),
    }
    out = {k: json.dumps({"labelCounts": v.tolist(), "metrics": METRICS}).encode() for k, v in shapes.items()}
    return out | f1_bodies(rows, classes, seed)


def f1_bodies(rows: int, classes: int, seed: int = 0) -> dict[str, bytes]:
    """F1 (macro) alone on the count matrices where it costs most (measured)."""
    rng = np.random.default_rng(seed + 1)
    out = {}
    for n in sorted({min(n, rows) for n in (14, 80, 200, 1000)}):
        out[f"F1: {n} rows of 0 or 1000"] = np.where(rng.random((n, classes)) < 0.5, 0, 1000)
        out[f"F1: {n} rows of 0 or 10"] = np.where(rng.random((n, classes)) < 0.3, 0, 10)
        for never in (7, 12):
            gold = max(1, classes - never)
            c = np.zeros((n, classes), dtype=np.int64)
            c[np.arange(n), rng.integers(0, gold, size=n)] = 3
            c[:, gold:] = rng.integers(0, 3, size=(n, classes - gold))
            out[f"F1: {n} rows, {classes - gold} never gold"] = c
    return {k: json.dumps({"labelCounts": v.tolist(), "metrics": ["f1 (macro)"]}).encode() for k, v in out.items()}


def refused_bodies(huge_rows: int) -> dict[str, bytes]:
    one = [1, 2]
    return {
        "1001 rows": json.dumps({"labelCounts": [one] * 1001, "metrics": ["accuracy"]}).encode(),
        "21 classes": json.dumps({"labelCounts": [[1] * 21], "metrics": ["accuracy"]}).encode(),
        "a count of 1001": json.dumps({"labelCounts": [[1, 1001]] * 1000, "metrics": METRICS}).encode(),
        "a count of 2**70": json.dumps({"labelCounts": [[1, 2 ** 70]], "metrics": ["accuracy"]}).encode(),
        "9 metrics": json.dumps({"labelCounts": [one], "metrics": ["accuracy"] * 9}).encode(),
        f"{huge_rows:,} rows": b'{"metrics": ["accuracy"], "labelCounts": [' + b",".join([b"[1,2]"] * huge_rows) + b"]}",
    }


def setup(instance: Path, n_users: int) -> tuple[str, list[str]]:
    """Migrate the instance's SQLite database and add a workspace with ``n_users`` admins; their tokens."""
    os.environ["AUDITOR_INSTANCE_PATH"] = str(instance)
    from auditor.config import load_settings
    from auditor.db import Role, User, Workspace, make_engine, make_session_factory, migrate
    from auditor.web.security import hash_password, issue_token

    url = load_settings().database_url
    engine = make_engine(url)
    migrate.upgrade(engine)
    tokens = []
    with make_session_factory(engine)() as db:
        ws = Workspace(slug="bench", name="bench")
        db.add(ws)
        db.flush()
        password = hash_password(PASSWORD)
        for k in range(n_users):
            user = User(workspace_id=ws.id, email=f"user{k}@bench.example", role=Role.ADMIN, password_hash=password)
            db.add(user)
            db.flush()
            tokens.append(issue_token(db, user, name="bench")[1])
        db.commit()
    engine.dispose()
    return url, tokens


def start_server(instance: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDITOR_")}
    env.update({"AUDITOR_INSTANCE_PATH": str(instance), "AUDITOR_SCORE_LIMIT": "1000000 per minute",
                "AUDITOR_BROKER_URL": "memory://", "AUDITOR_RATELIMIT_STORAGE_URL": "memory://",
                "PYTHONPATH": str(ROOT)})
    proc = subprocess.Popen([sys.executable, "-m", "auditor", "serve", "--port", str(port), "--workers", "2",
                             "--threads", "4"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit("the server exited")
        try:
            if request(port, "GET", "/healthz")[0] == 200:
                return proc
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not come up")


def request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
            *, chunked: bool = False) -> tuple[int, float, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    if chunked:
        conn.putrequest(method, path)
        for k, v in {"Content-Type": "application/json", "Transfer-Encoding": "chunked", **(headers or {})}.items():
            conn.putheader(k, v)
        conn.endheaders()
        try:
            for k in range(0, len(body or b""), 65536):
                piece = body[k:k + 65536]
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed before the rest was sent
    else:
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused on its Content-Length: the answer came before the body was sent
    response = conn.getresponse()
    data = response.read()
    elapsed = time.perf_counter() - t0
    conn.close()
    return response.status, elapsed, data


def descendants(pid: int) -> list[int]:
    """The server's processes below it: gunicorn's web processes and their scoring processes."""
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                pass
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / tick


def login_cookie(port: int) -> str:
    """The session cookie of user0, logged in through the form (its CSRF token first)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/login")
    first = conn.getresponse()
    html = first.read()
    cookie = first.getheader("Set-Cookie", "").split(";")[0]
    token = re.search(rb'name="csrf_token" value="([^"]+)"', html).group(1).decode()
    form = urllib.parse.urlencode({"csrf_token": token, "workspace": "bench", "email": "user0@bench.example",
                                   "password": PASSWORD}).encode()
    conn.request("POST", "/login", body=form, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                        "Cookie": cookie})
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer.getheader("Set-Cookie", cookie).split(";")[0]


def alone(port: int, pid: int, cases, repeat: int, smoke: bool) -> int:
    """Each body in turn: statuses, wall time and the web processes' CPU time."""
    failures = 0
    print(f"{'request':<40} {'status':>7} {'wall s':>7} {'max wall':>8} {'max CPU s':>9}")
    for name, body, chunked, cpu_target, wall_target, expected, auth in cases:
        walls, cpus, statuses = [], [], set()
        for _ in range(repeat):
            before = cpu_seconds(descendants(pid))
            status, wall, _ = request(port, "POST", "/api/score", body, auth, chunked=chunked)
            time.sleep(0.05)  # the answer is sent before the thread's last CPU tick is counted
            cpus.append(cpu_seconds(descendants(pid)) - before)
            walls.append(wall)
            statuses.add(status)
        ok = statuses <= ({expected} if expected == 200 else set(range(400, 500)))
        slow = not smoke and (max(cpus) > cpu_target or max(walls) > wall_target)
        failures += (not ok) + slow
        flag = "" if ok and not slow else ("  <-- over target" if ok else "  <-- unexpected status")
        print(f"{name:<40} {'/'.join(map(str, sorted(statuses))):>7} {statistics.median(walls):7.3f} "
              f"{max(walls):8.3f} {max(cpus):9.2f}{flag}", flush=True)
    return failures


def under_load(port: int, tokens: list[str], body: bytes | None, duration: float, smoke: bool) -> int:
    """``len(tokens) - 2`` users send ``body`` back to back (none: no load, the baseline of
    this machine); another user reads meanwhile."""
    stop = time.monotonic() + duration
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    costly = tokens[2:]

    def attacker(token: str) -> None:
        while time.monotonic() < stop:
            status, _, _ = request(port, "POST", "/api/score", body, {"Authorization": f"Bearer {token}"})
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
            if status in (429, 503):
                time.sleep(1.0)  # Retry-After

    cookie = login_cookie(port)
    probes = {"/healthz": ({}, 0.1, 0.1), "/ (dashboard page)": ({"Cookie": cookie}, 0.25, 0.5),
              "/api/v1/datasets (API page)": ({"Authorization": f"Bearer {tokens[1]}"}, 0.25, 0.5)}
    times: dict[str, list[float]] = {k: [] for k in probes}
    bad: dict[str, set[int]] = {k: set() for k in probes}

    def probe(name: str) -> None:
        headers, every, _ = probes[name]
        path = name.split(" ")[0]
        time.sleep(0.5)  # the load is on
        while time.monotonic() < stop:
            status, wall, _ = request(port, "GET", path, headers=headers)
            times[name].append(wall)
            if status != 200:
                bad[name].add(status)
            time.sleep(every)

    threads = [threading.Thread(target=attacker, args=(t,)) for t in costly] if body is not None else []
    threads += [threading.Thread(target=probe, args=(n,)) for n in probes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failures = 0
    if body is None:
        print(f"\nno load, {duration:g} s (this machine's baseline)")
    else:
        print(f"\n{len(costly)} users sending the costliest F1 body for {duration:g} s: answers "
              + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())))
    print(f"{'another user reads':<32} {'n':>4} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'target':>7}")
    for name, (_, _, target) in probes.items():
        xs = sorted(times[name]) or [float("nan")]
        p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
        over = not smoke and body is not None and p95 > target
        failures += over + bool(bad[name])
        print(f"{name:<32} {len(times[name]):4d} {1000 * statistics.median(xs):7.1f} {1000 * p95:7.1f} "
              f"{1000 * xs[-1]:7.1f} {1000 * target:7.0f}{'  <-- over target' if over else ''}"
              f"{'  <-- statuses ' + str(sorted(bad[name])) if bad[name] else ''}", flush=True)
    unanswered = sum(v for k, v in statuses.items() if k not in (200, 429, 503))
    failures += body is not None and (unanswered > 0 or statuses.get(200, 0) == 0)
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat (the test suite runs this)")
    args = parser.parse_args(argv)
    repeat = 1 if args.smoke else args.repeat
    rows, classes, huge = (30, 5, 2000) if args.smoke else (1000, 20, 9_400_000)
    n_users = 5 if args.smoke else 22
    with tempfile.TemporaryDirectory() as tmp:
        _, tokens = setup(Path(tmp), n_users)
        port = free_port()
        proc = start_server(Path(tmp), port)
        try:
            auth = {"Authorization": f"Bearer {tokens[0]}"}
            cases = [(f"accepted: {k}", v, False, 1.0, 2.0, 200, auth)
                     for k, v in accepted_bodies(rows, classes).items()]
            cases += [(f"refused: {k}", v, False, 0.1, 0.1, 400, auth) for k, v in refused_bodies(huge).items()]
            cases.append(("refused: 2 MB chunked", b"[" + b" " * (2 << 20) + b"]", True, 0.1, 0.1, 413, auth))
            for token in tokens[:8]:  # each web process starts its scoring process on its first score
                request(port, "POST", "/api/score", accepted_bodies(3, 2)["sparse"],
                        {"Authorization": f"Bearer {token}"})
            failures = alone(port, proc.pid, cases, repeat, args.smoke)
            costliest = f1_bodies(rows, classes)[f"F1: {min(200, rows)} rows, {min(12, classes - 1)} never gold"]
            duration = 3.0 if args.smoke else args.duration
            failures += under_load(port, tokens, None, duration / 2, args.smoke)
            failures += under_load(port, tokens, costliest, duration, args.smoke)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    return 1 if failures else 0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    raise SystemExit(main())
