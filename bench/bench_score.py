"""Benchmark: ``POST /api/score`` at and beyond its documented bounds, over real HTTP.

Run by hand:

    python bench/bench_score.py [--repeat 5] [--smoke]

Serves the web application (an empty SQLite instance in a temporary directory,
``AUDITOR_SCORE_ANONYMOUS=true``, rate limits lifted) on a local port with Werkzeug's
threaded server and times, from the client, requests of these shapes:

* the largest accepted bodies: 1000 rows × 20 classes, counts up to 1000, all four
  metrics, with the count matrices that cost most (uniform counts; counts of 0 or 1000,
  where many classes tie with hundreds of labels; Dirichlet-multinomial; sparse), and
  14 rows of 0 or 10, where F1 (macro) needs its Monte Carlo correction;
* bodies beyond the bounds, which must be refused (4xx) before any work: one row too
  many, 21 classes, a count of 1001, 2**70, nine metrics, 9.4 million rows (a 66 MB
  body, refused on its Content-Length), and 2 MB sent chunked without a length.

Prints the minimum, median and maximum wall time of each and its status; targets:
under 2 s for every accepted body, under 100 ms for every refusal.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METRICS = ["accuracy", "balanced accuracy", "f1 (macro)", "cross entropy (soft labels)"]


def accepted_bodies(rows: int, classes: int, seed: int = 0) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    dirichlet = np.stack([rng.multinomial(1000, p) for p in rng.dirichlet(np.full(classes, 0.3), size=rows)])
    shapes = {
        "uniform 0..1000": rng.integers(0, 1001, size=(rows, classes)),
        "0 or 1000 (ties)": np.where(rng.random((rows, classes)) < 0.5, 0, 1000),
        "Dirichlet-multinomial": dirichlet,
        "sparse": (rng.random((rows, classes)) < 0.15) * rng.integers(0, 1001, size=(rows, classes)),
        # few rows, many never-gold classes: F1 (macro)'s Monte Carlo correction, at its draw bound
        "14 rows of 0 or 10 (F1 MC)": np.where(rng.random((14, classes)) < 0.3, 0, 10),
    }
    return {k: json.dumps({"labelCounts": v.tolist(), "metrics": METRICS}).encode() for k, v in shapes.items()}


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


def serve(instance: Path):
    os.environ.update({"AUDITOR_INSTANCE_PATH": str(instance), "AUDITOR_SCORE_ANONYMOUS": "true",
                       "AUDITOR_SCORE_LIMIT": "1000000 per minute", "AUDITOR_BROKER_URL": "memory://",
                       "AUDITOR_RATELIMIT_STORAGE_URL": "memory://"})
    import logging

    from werkzeug.serving import make_server

    from auditor.web import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = make_server("127.0.0.1", 0, create_app(), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def post(port: int, body: bytes, *, chunked: bool = False) -> tuple[int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    if chunked:
        conn.putrequest("POST", "/api/score")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        try:
            for k in range(0, len(body), 65536):
                piece = body[k:k + 65536]
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed before the rest was sent
    else:
        conn.request("POST", "/api/score", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    elapsed = time.perf_counter() - t0
    conn.close()
    return response.status, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat (the test suite runs this)")
    args = parser.parse_args(argv)
    repeat = 1 if args.smoke else args.repeat
    rows, classes, huge = (30, 5, 2000) if args.smoke else (1000, 20, 9_400_000)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        server = serve(Path(tmp))
        port = server.server_port
        print(f"{'request':<36} {'status':>6} {'min s':>8} {'median s':>9} {'max s':>8}")
        cases = [(f"accepted: {k}", v, False, 2.0, 200) for k, v in accepted_bodies(rows, classes).items()]
        cases += [(f"refused: {k}", v, False, 0.1, 400) for k, v in refused_bodies(huge).items()]
        cases.append(("refused: 2 MB chunked", b"[" + b" " * (2 << 20) + b"]", True, 0.1, 413))
        for name, body, chunked, target, expected in cases:
            results = [post(port, body, chunked=chunked) for _ in range(repeat)]
            statuses = {s for s, _ in results}
            times = [t for _, t in results]
            ok = statuses <= ({expected} if expected == 200 else set(range(400, 500)))
            slow = not args.smoke and max(times) > target
            failures += (not ok) + slow
            flag = "" if ok and not slow else ("  <-- over target" if ok else "  <-- unexpected status")
            print(f"{name:<36} {'/'.join(map(str, sorted(statuses))):>6} {min(times):8.3f} "
                  f"{statistics.median(times):9.3f} {max(times):8.3f}{flag}", flush=True)
        server.shutdown()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
