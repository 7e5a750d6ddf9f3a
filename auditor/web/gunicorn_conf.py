"""gunicorn settings for several web processes sharing their Prometheus counts.

prometheus-client's multiprocess mode: every process writes its counts to files in
``PROMETHEUS_MULTIPROC_DIR`` and ``/metrics`` sums them. With these hooks (``gunicorn -c
python:auditor.web.gunicorn_conf``, as the container runs it, and ``auditor serve``) the
server, as it starts and before any web process does, sets that variable when unset to a
folder of its own in the temporary directory (removed when the server exits) and empties
the folder (left-over files would count twice); a web process that exits is marked dead.

Each web process also runs its linear algebra library (BLAS) on one thread: its request
threads are its parallelism, and BLAS's own threads (one per core by default) would only
contend with them, with the other web processes and with the audits for the same cores.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["child_exit", "on_exit", "on_starting", "post_fork", "prepare_multiprocess_dir"]

#: The folder this server made for itself (removed when it exits), if it made one.
_made: Path | None = None


def prepare_multiprocess_dir(default: Path | None = None) -> Path | None:
    """Empty (and create) ``PROMETHEUS_MULTIPROC_DIR``; set it to ``default`` first when unset.

    Call before the web processes start, in the process that starts them.
    """
    raw = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not raw:
        if default is None:
            return None
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = raw = str(default)
    path = Path(raw)
    if path.is_dir():
        for child in path.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _default_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"auditor-prometheus-{os.getpid()}"


def on_starting(server) -> None:
    global _made
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        _made = _default_dir()
    prepare_multiprocess_dir(_default_dir())


def on_exit(server) -> None:
    if _made is not None:
        shutil.rmtree(_made, ignore_errors=True)


def child_exit(server, worker) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def post_fork(server, worker) -> None:
    from auditor.worker import limit_blas_threads

    limit_blas_threads(1)
