"""Benchmark: dashboards and results endpoints under load (wrk, 20 concurrent clients).

Run by hand:  nice python bench/bench_web.py [--releases 100] [--connections 20] [--duration 10]
                  [--audit-load [--audit-items 100000]] [--smoke]

Builds a workspace whose dataset has ``--releases`` releases of history (one audit run
per release upload, each run certifying every release so far, with its power curves,
vendor reports, BEST scores, agreement and alerts), written through the models in a
new PostgreSQL database (``--server-url``; dropped afterwards unless ``--keep``). Starts
the app under gunicorn (``--workers`` × ``--threads``), logs in through the login form
for the dashboards' session cookie, and drives each endpoint with wrk (``apt-get install
wrk``; the load generator is required). Prints p50/p95/p99 latency and requests/s per
endpoint, the target (p95 < 100 ms), and the peak resident memory of the web workers.

With ``--audit-load`` it measures every endpoint twice: alone, then while a dataset of
``--audit-items`` items × 10 annotations (1M annotations by default, written in SQL) is
re-audited back to back by a real Celery worker (``auditor worker``, its default
concurrency and niceness, Redis at ``--redis-url``): a small batch of new labels, an
audit request, wait for that version's audit, again. The target under that load is
p95 < 250 ms. ``--smoke`` runs everything at tiny sizes in seconds (the Python load
generator stands in when wrk is not installed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from http.cookiejar import CookieJar

import numpy as np
from _scratch import scratch_database, stop_processes

LUA = r"""
wrk.method = "GET"
wrk.headers["Authorization"] = os.getenv("BENCH_AUTH")
wrk.headers["Cookie"] = os.getenv("BENCH_COOKIE")
local errors = 0
response = function(status, headers, body)
  if status ~= 200 then errors = errors + 1 end
end
done = function(summary, latency, requests)
  io.write(string.format("JSON {\"p50\": %d, \"p95\": %d, \"p99\": %d, \"max\": %d, \"requests\": %d, " ..
    "\"non2xx\": %d, \"socket_errors\": %d, \"seconds\": %f}\n",
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency.max,
    summary.requests, summary.errors.status, summary.errors.connect + summary.errors.read +
    summary.errors.write + summary.errors.timeout, summary.duration / 1e6))
end
"""


def seed(url: str, n_releases: int, *, n_items: int = 2000, n_vendors: int = 3, seed_: int = 0) -> dict:
    """A workspace with one dataset, one model and ``n_releases`` audited releases."""
    from auditor.db import (
        Agreement,
        Alert,
        Annotator,
        AuditRun,
        BestScore,
        Certification,
        Dataset,
        Item,
        Model,
        PowerCurveRecord,
        Release,
        Role,
        User,
        VendorReport,
        Workspace,
        make_engine,
        make_session_factory,
    )
    from auditor.web.security import hash_password, issue_token

    rng = np.random.default_rng(seed_)
    engine = make_engine(url)
    t0 = time.perf_counter()
    with make_session_factory(engine)() as db:
        ws = Workspace(slug="web", name="web")
        db.add(ws)
        db.flush()
        admin = User(workspace_id=ws.id, email="admin@bench.example", role=Role.ADMIN,
                     password_hash=hash_password("bench password"))
        db.add(admin)
        db.flush()
        token = issue_token(db, admin, name="bench")[1]
        ds = Dataset(workspace_id=ws.id, name="audit-set", labels=["negative", "neutral", "positive"],
                     data_version=2 * n_releases)
        db.add(ds)
        db.flush()
        counts = rng.multinomial(5, [0.2, 0.3, 0.5], size=n_items)
        db.add_all([Item(dataset_id=ds.id, external_id=f"item-{i:06d}", label_counts=[int(x) for x in c])
                    for i, c in enumerate(counts)])
        vendors = [f"vendor-{v}" for v in range(n_vendors)]
        db.add_all([Annotator(workspace_id=ws.id, external_id=f"{v}-{a:02d}", vendor=v)
                    for v in vendors for a in range(15)])
        model = Model(workspace_id=ws.id, name="classifier")
        db.add(model)
        db.flush()
        start = datetime(2025, 1, 1, tzinfo=UTC)
        releases = []
        for r in range(n_releases):
            rel = Release(model_id=model.id, version=f"{r // 10}.{r % 10}", released_at=start + timedelta(days=3 * r))
            db.add(rel)
            releases.append(rel)
        db.flush()
        k = np.arange(6)
        streak: dict[int, int | None] = {}  # release → first run of its current certified streak
        for run_no in range(n_releases):
            when = start + timedelta(days=3 * run_no, hours=1)
            u_t, u_e = 0.90 + 0.01 * rng.standard_normal(), 0.87 + 0.01 * rng.standard_normal()
            run = AuditRun(dataset_id=ds.id, data_version=2 * (run_no + 1), status="succeeded", created_at=when,
                           started_at=when + timedelta(seconds=2), finished_at=when + timedelta(seconds=9),
                           summary={"upper": {"u_t": u_t, "u_e": u_e}, "n_items": n_items})
            db.add(run)
            db.flush()
            curve = (0.55 + 0.3 * (1 - np.exp(-k / 2))).round(4)
            db.add(PowerCurveRecord(audit_run_id=run.id, combiner="plurality", scorer="agreement", max_k=5,
                              n_bootstrap=500, method="exact", points=[{"k": int(i), "mean": float(m), "ci_low": float(m) - 0.02,
                                                        "ci_high": float(m) + 0.02, "n_items": n_items}
                                                       for i, m in zip(k, curve, strict=True)]))
            for r, rel in enumerate(releases[: run_no + 1]):
                ell = min(0.99, 0.70 + 0.0025 * r + 0.005 * rng.standard_normal())
                certified = ell > u_t + 0.02
                streak[rel.id] = (streak.get(rel.id) or run.id) if certified else None
                db.add(Certification(audit_run_id=run.id, release_id=rel.id, data_version=run.data_version,
                                     certified_since_run_id=streak[rel.id],
                                     n_items_upper=n_items, n_items_lower=n_items, u_t=u_t, u_e=u_e, l=ell,
                                     s_hms_t=0.97 if certified else -1.0, s_oms_t=0.98 if certified else -1.0,
                                     s_hms_e=0.5, s_oms_e=0.6, certified=certified, certified_with="U_t",
                                     verdict="certified" if certified else "not certified"))
                score = float(np.interp(min(r, 99) / 99 * 5, k, curve))
                db.add(PowerCurveRecord(audit_run_id=run.id, release_id=rel.id, combiner="plurality", scorer="agreement",
                                  max_k=5, n_bootstrap=500, method="exact", points=[], classifier_score=score,
                                  equivalence=min(r, 99) / 99 * 5, equivalence_low=max(0, r / 99 * 5 - 0.5),
                                  equivalence_high=min(5, r / 99 * 5 + 0.5)))
            for v in vendors:
                db.add(VendorReport(audit_run_id=run.id, vendor=v, n_annotators=15, n_items=n_items,
                                    n_annotations=5 * n_items, u_t=u_t - 0.02, u_e=u_e - 0.02, agreement=0.4,
                                    expert_equivalence=1.5, expert_equivalence_method="exact",
                                    annotators=[{"annotator": f"{v}-{a:02d}", "agreement": 0.8, "n_items": 600,
                                                 "lower_confidence": 0.75} for a in range(15)]))
            for metric in ("accuracy", "balanced accuracy", "f1 (macro)", "cross entropy (soft labels)"):
                db.add(BestScore(audit_run_id=run.id, metric=metric, value=0.8, std_error=0.0, n_items=n_items,
                                 alpha=[0.5, 0.7, 1.1]))
            for coef in ("krippendorff_alpha", "fleiss_kappa"):
                db.add(Agreement(audit_run_id=run.id, coefficient=coef, value=0.4, ci_low=0.38, ci_high=0.42,
                                 n_items=n_items))
            if run_no % 10 == 0:
                db.add(Alert(workspace_id=ws.id, dataset_id=ds.id, audit_run_id=run.id, kind="vendor_drop",
                             subject=vendors[0], message=f"{vendors[0]}: U_t fell by 0.03", created_at=when))
        db.commit()
        ids = {"dataset": ds.id, "model": model.id, "token": token, "vendor": vendors[0], "run": run.id,
               "releases": [releases[-2].id if n_releases > 1 else releases[-1].id, releases[-1].id]}
    engine.dispose()
    print(f"seeded {n_releases} releases, {n_releases * (n_releases + 1) // 2} certifications, "
          f"{n_releases * (n_releases + 3)} power curves in {time.perf_counter() - t0:.1f} s")
    return ids


def python_load(base: str, path: str, headers: dict, connections: int, duration: float) -> dict:
    """The wrk measurement done with threads and keep-alive connections (when wrk is absent).

    Slower than wrk as a load generator (it shares this interpreter), so use it for
    --smoke, not for the figures.
    """
    import http.client
    import threading

    parsed = urllib.parse.urlsplit(base)
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.perf_counter() + duration

    def client():
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
        mine, bad = [], 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                resp.read()
                bad += resp.status != 200
            except OSError:
                bad += 1
                conn.close()
                conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
            mine.append(time.perf_counter() - t0)
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    us = np.asarray(latencies) * 1e6
    p50, p95, p99 = np.percentile(us, [50, 95, 99]) if us.size else (np.nan,) * 3
    return {"p50": p50, "p95": p95, "p99": p99, "max": us.max() if us.size else np.nan, "requests": us.size,
            "non2xx": errors[0], "socket_errors": 0, "seconds": time.perf_counter() - t0}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(base: str, proc) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit("gunicorn exited; see its output above")
        try:
            urllib.request.urlopen(base + "/api/v1/openapi.json", timeout=2).read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the server did not come up")


def login_cookie(base: str) -> str:
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    html = opener.open(base + "/login").read().decode()
    token = re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)
    data = urllib.parse.urlencode({"csrf_token": token, "workspace": "web", "email": "admin@bench.example",
                                   "password": "bench password"}).encode()
    opener.open(base + "/login", data=data).read()
    return "; ".join(f"{c.name}={c.value}" for c in jar)


def rss_peak_kb(pids) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
        except (OSError, StopIteration):
            pass
    return total


def children(pid: int) -> list[int]:
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    return [int(p) for p in out.split()]


class AuditLoop:
    """Re-audits one large dataset back to back in the background: a small batch of new
    labels, an audit request to a real Celery worker, wait until that version is audited,
    again. Runs in a thread of this script; the audits run in the worker's processes."""

    def __init__(self, url: str, dataset_id: int, env: dict):
        import threading

        self.url, self.dataset_id, self.env = url, dataset_id, env
        self.stop = threading.Event()
        self.durations: list[float] = []
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _finished(self, version: int) -> bool:
        import psycopg

        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT count(*) FROM audit_run WHERE dataset_id = %s AND data_version >= %s "
                               "AND status IN ('succeeded', 'failed')", (self.dataset_id, version)).fetchone()
        return bool(row[0])

    def _run(self) -> None:
        from bench_snapshot import add_batch

        from auditor.worker.dispatch import request_audit

        while not self.stop.is_set():
            version = add_batch(self.url, 1000)
            t0 = time.perf_counter()
            if request_audit(self.dataset_id) is None:
                self.errors.append("broker unreachable")
                return
            while not self.stop.is_set() and not self._finished(version):
                time.sleep(0.2)
            if not self.stop.is_set():
                self.durations.append(time.perf_counter() - t0)


def start_audit_load(url: str, args, instance: str) -> tuple:
    """A dataset of ``--audit-items`` × 10 annotations, a Celery worker, and the audit loop."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_snapshot import _dataset_id, build

    t0 = time.perf_counter()
    build(url, args.audit_items, 10, 2000)
    dataset_id = _dataset_id(url)
    if args.audit_workspace == "same":
        # Into the dashboards' workspace: each audit's progress then changes what they show
        # (and their cache's fingerprint), as it does for a team watching its own audits.
        import psycopg

        with psycopg.connect(url) as conn, conn.transaction():
            web = conn.execute("SELECT id FROM workspace WHERE slug = 'web'").fetchone()[0]
            bench = conn.execute("SELECT workspace_id FROM dataset WHERE id = %s", (dataset_id,)).fetchone()[0]
            for table in ("dataset", "annotator", "model", "import_batch"):
                conn.execute(f"UPDATE {table} SET workspace_id = %s WHERE workspace_id = %s", (web, bench))
    queue = f"auditor-bench-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "AUDITOR_DATABASE_URL": url, "AUDITOR_BROKER_URL": args.redis_url,
           "AUDITOR_RESULT_BACKEND": args.redis_url, "AUDITOR_CELERY_QUEUE": queue,
           "AUDITOR_INSTANCE_PATH": instance, "AUDITOR_SWEEP_SECONDS": "3600"}
    os.environ.update({k: env[k] for k in ("AUDITOR_BROKER_URL", "AUDITOR_RESULT_BACKEND", "AUDITOR_CELERY_QUEUE",
                                           "AUDITOR_DATABASE_URL")})
    worker = subprocess.Popen([sys.executable, "-m", "auditor", "worker", "--loglevel", "WARNING"], env=env)
    loop = AuditLoop(url, dataset_id, env)
    loop.thread.start()
    # Measure once the audits are in their steady state: the first one has finished.
    while not loop.durations and worker.poll() is None and not loop.errors:
        time.sleep(0.5)
    if worker.poll() is not None or loop.errors:
        raise SystemExit(f"the audit worker or its loop stopped: {loop.errors}")
    print(f"audit load: {args.audit_items:,} items × 10 annotations re-audited back to back "
          f"(first audit {loop.durations[0]:.1f} s; set up in {time.perf_counter() - t0:.1f} s)")
    return worker, loop


def measure(endpoints, base, args, script, wenv, wrk) -> float:
    print(f"{'endpoint':<44}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'req/s':>9}{'non-2xx':>9}")
    worst = 0.0
    headers = {"Authorization": wenv["BENCH_AUTH"], "Cookie": wenv["BENCH_COOKIE"]}
    for label, path in endpoints:
        # One request first: a page's first view may do one-off work (e.g. ask for a release's plan).
        try:
            urllib.request.urlopen(urllib.request.Request(base + path, headers=headers), timeout=30).read()
        except OSError:
            pass
        if wrk:
            if not args.smoke:
                # Steady state: each worker has answered this URL before the measured run starts.
                subprocess.run([wrk, "-t2", f"-c{args.connections}", "-d1s", "-s", script, base + path], env=wenv,
                               capture_output=True, check=True)
            out = subprocess.run([wrk, "-t2", f"-c{args.connections}", f"-d{args.duration}s", "--timeout", "30s",
                                  "-s", script, base + path], env=wenv, capture_output=True, text=True, check=True)
            stats = json.loads(next(line[5:] for line in out.stdout.splitlines() if line.startswith("JSON ")))
        else:
            stats = python_load(base, path, headers, args.connections, args.duration)
        p50, p95, p99 = (stats[k] / 1000 for k in ("p50", "p95", "p99"))
        if not label.startswith("csv"):
            worst = max(worst, p95)
        print(f"{label:<44}{p50:9.1f}{p95:9.1f}{p99:9.1f}{stats['requests'] / stats['seconds']:9.0f}"
              f"{stats['non2xx'] + stats['socket_errors']:9d}")
        if stats["non2xx"] + stats["socket_errors"]:
            raise SystemExit(f"{label}: {stats['non2xx']} non-2xx responses, {stats['socket_errors']} socket errors")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--releases", type=int, default=100)
    ap.add_argument("--connections", type=int, default=20)
    ap.add_argument("--duration", type=int, default=10, help="seconds per endpoint")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--server-url", default=os.environ.get("AUDITOR_BENCH_POSTGRES_URL",
                                                           "postgresql://postgres@127.0.0.1:5432/postgres"),
                    help="a PostgreSQL server (a database named auditor_bench_* is created on it)")
    ap.add_argument("--client", choices=("auto", "wrk", "python"), default="auto",
                    help="load generator: wrk (the figures), a Python thread pool, or wrk when installed")
    ap.add_argument("--audit-load", action="store_true",
                    help="measure twice: without, then with a dataset of --audit-items × 10 annotations "
                         "re-audited back to back by a Celery worker (needs Redis, --redis-url)")
    ap.add_argument("--audit-items", type=int, default=100_000)
    ap.add_argument("--audit-workspace", choices=("same", "other"), default="same",
                    help="the audited dataset in the dashboards' workspace (its audits change what they show "
                         "and invalidate their cache) or in another one (only CPU and database shared)")
    ap.add_argument("--redis-url", default=os.environ.get("AUDITOR_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    ap.add_argument("--smoke", action="store_true",
                    help="tiny: 3 releases, 2 clients, 1 s per endpoint (and 2,000 audit items): seconds")
    ap.add_argument("--keep", action="store_true", help="keep the bench database")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="measure only the endpoints whose label contains TEXT (repeatable)")
    args = ap.parse_args()
    if args.smoke:
        args.releases, args.connections, args.duration, args.audit_items = 3, 2, 1, 2000

    wrk = shutil.which("wrk") if args.client != "python" else None
    if wrk is None and args.client == "wrk":
        raise SystemExit("wrk not found: install the load generator (Debian: apt-get install wrk)")
    with scratch_database(args.server_url, keep=args.keep, migrate=True) as url:
        serve_and_measure(url, args, wrk)


#: The endpoint measured under audit load only: the vendor page of the dataset being audited.
_AUDITED_LABEL = "dashboard: vendor, dataset being audited"


def serve_and_measure(url: str, args: argparse.Namespace, wrk: str | None) -> None:
    """Seed the database at ``url``, serve it with gunicorn and measure every endpoint."""
    import psycopg

    proc = worker = loop = None
    try:
        ids = seed(url, args.releases)
        # As autovacuum would have by now: plans need table statistics.
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        instance = tempfile.mkdtemp(prefix="auditor-bench-")
        env = {**os.environ, "AUDITOR_DATABASE_URL": url, "AUDITOR_SECRET_KEY": uuid.uuid4().hex,
               "AUDITOR_INSTANCE_PATH": instance, "AUDITOR_BROKER_URL": "memory://"}
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}",
                                 "--workers", str(args.workers), "--threads", str(args.threads),
                                 "--worker-class", "gthread", "--log-level", "warning",
                                 "auditor.web:create_app()"], env=env)
        wait_up(base, proc)
        cookie = login_cookie(base)
        ds, model = ids["dataset"], ids["model"]
        endpoints = [
            ("dashboard: overview", "/"),
            ("dashboard: dataset", f"/datasets/{ds}"),
            ("dashboard: model (100-release timeline)", f"/models/{model}"),
            ("dashboard: vendor", f"/vendors/{ids['vendor']}"),
            ("dashboard: audit runs", "/audit-runs"),
            ("dashboard: audit run (newest)", f"/audit-runs/{ids['run']}"),
            ("dashboard: alerts (all)", "/alerts?status=all"),
            ("dashboard: vendors", "/vendors"),
            ("dashboard: release (100-audit history)", f"/releases/{ids['releases'][1]}"),
            ("dashboard: compare two releases", f"/compare?a={ids['releases'][0]}&b={ids['releases'][1]}"),
            ("dashboard: compare three releases", "/compare?" + "&".join(f"r={r}" for r in ids["releases"][:3])),
            ("dashboard: items, page 1", f"/datasets/{ds}/items"),
            ("dashboard: items annotators disagree on", f"/datasets/{ds}/items?show=disagreement"),
            ("dashboard: item", f"/datasets/{ds}/items/item-000001"),
            ("dashboard: leaderboard", f"/datasets/{ds}/leaderboard"),
            ("dashboard: overview, last 90 days", "/?range=90d"),
            ("dashboard: API docs", "/api/v1/docs"),
            ("api: dataset certifications, page 1", f"/api/v1/datasets/{ds}/certifications"),
            ("api: latest certifications", f"/api/v1/datasets/{ds}/certifications?latest=true&per_page=100"),
            ("api: model certifications, 500 rows", f"/api/v1/models/{model}/certifications?per_page=500"),
            ("api: power curves (latest run)", f"/api/v1/datasets/{ds}/power-curves?per_page=200"),
            ("api: vendor reports over time", f"/api/v1/datasets/{ds}/vendor-reports?per_page=300"),
            ("api: annotator bounds", f"/api/v1/datasets/{ds}/annotator-bounds"),
            ("api: audit runs", f"/api/v1/datasets/{ds}/audit-runs"),
            ("api: BEST history", f"/api/v1/datasets/{ds}/best-scores"),
            ("api: alerts", "/api/v1/alerts"),
            ("csv: every certification", f"/api/v1/datasets/{ds}/certifications?format=csv"),
        ]
        if args.only:
            endpoints = [(label, path) for label, path in endpoints if any(t in label for t in args.only)]
            if not endpoints and not (args.audit_load and any(t in _AUDITED_LABEL for t in args.only)):
                raise SystemExit(f"no endpoint label contains any of {args.only}")
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
            fh.write(LUA)
            script = fh.name
        wenv = {**os.environ, "BENCH_AUTH": f"Bearer {ids['token']}", "BENCH_COOKIE": cookie}
        print(f"\n{args.connections} concurrent clients, {args.duration} s per endpoint, gunicorn "
              f"{args.workers} workers × {args.threads} threads, {os.cpu_count()} cores, "
              f"load generator {'wrk' if wrk else 'python threads'}\n")
        worst = measure(endpoints, base, args, script, wenv, wrk) if endpoints else float("nan")
        print(f"\nworst p95 over dashboards and JSON results: {worst:.1f} ms (target < 100 ms: "
              f"{'met' if worst < 100 else 'NOT met'})")
        if args.audit_load:
            worker, loop = start_audit_load(url, args, instance)
            print()
            # The dataset being audited, on its vendor's page: its 500 annotators' newest windows
            # are rewritten by every audit (in the dashboards' workspace only).
            audited = [] if args.audit_workspace != "same" else [
                (_AUDITED_LABEL, f"/vendors/vendor-0?dataset_id={loop.dataset_id}")]
            if args.only:
                audited = [(label, path) for label, path in audited if any(t in label for t in args.only)]
            loaded = measure(endpoints + audited, base, args, script, wenv, wrk)
            n_audits, mean = len(loop.durations), float(np.mean(loop.durations)) if loop.durations else float("nan")
            print(f"\nwith audits running ({n_audits} audits finished, {mean:.1f} s each on average): worst p95 "
                  f"{loaded:.1f} ms (target < 250 ms: {'met' if loaded < 250 else 'NOT met'}); without: {worst:.1f} ms")
        workers = children(proc.pid)
        print(f"peak RSS: web workers {rss_peak_kb(workers) / 1024:.0f} MB in total ({len(workers)} workers), "
              f"this script {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        os.unlink(script)
    finally:
        if loop is not None:
            loop.stop.set()
            loop.thread.join(timeout=60)
        stop_processes(worker, proc)


if __name__ == "__main__":
    main()
