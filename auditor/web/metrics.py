"""Prometheus metrics at ``GET /metrics`` (prometheus-client).

Two kinds of series:

- **Counted by the web processes**: request latency (a histogram by Flask URL rule, method
  and status, so a raw path never becomes a label) and imports over HTTP, accepted or
  rejected, with their rows. With several web processes (gunicorn) they are counted
  through prometheus-client's multiprocess mode: each process writes its counts to files
  in ``PROMETHEUS_MULTIPROC_DIR`` and any process answers the scrape with their sum.
- **Read at scrape time** from the database and the broker, so they cover every worker,
  process and machine and survive restarts: audit duration (a histogram over succeeded
  runs) and runs by status, each dataset's audit lag (data version minus the last
  audited one), alerts raised, webhook deliveries waiting or failed, and the depth of
  the task queue. These reads are a handful of aggregate statements under a 2-second
  statement timeout, at most :data:`MAX_DATASETS` per-dataset rows (the most lagging
  first), and cached for :data:`CACHE_SECONDS` per process.

``/metrics`` answers only a bearer token equal to ``AUDITOR_METRICS_TOKEN``; without
that setting it answers 404.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Iterable
from datetime import UTC

from flask import Blueprint, Flask, Response, abort, current_app, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from sqlalchemy import Engine, case, func, select, text
from sqlalchemy.orm import aliased

from auditor.db.models import (
    Alert,
    AuditRun,
    AuditStatus,
    Dataset,
    DeliveryStatus,
    WebhookDelivery,
    Workspace,
)

__all__ = ["MAX_DATASETS", "bp", "database_families", "init_app", "observe_request", "record_import"]

log = logging.getLogger(__name__)

bp = Blueprint("metrics", __name__)

MAX_DATASETS = 500
"""Per-dataset series (audit lag and last audit) cover at most this many datasets, the most lagging first."""
CACHE_SECONDS = 5.0
"""How long a process reuses what it read at scrape time (app config ``METRICS_CACHE_SECONDS``)."""
STATEMENT_TIMEOUT_MS = 2000
AUDIT_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
QUEUED_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
"""Buckets of ``auditor_audit_queued_seconds`` (request to start; the target is a few seconds)."""

# --- counted by this process (one registry of its own, never the global default) -------------

if _MULTIPROC_DIR := os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(_MULTIPROC_DIR, exist_ok=True)  # prometheus-client writes there from the first count

# The series are the ones documented, without prometheus-client's *_created companions.
disable_created_metrics()
REGISTRY = CollectorRegistry(auto_describe=True)
HTTP_LATENCY = Histogram(
    "auditor_http_request_duration_seconds", "Time to answer a web request, by URL rule (not raw path).",
    ["method", "endpoint", "status"], registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
IMPORTS = Counter("auditor_imports", "Import batches received over HTTP, by kind and outcome "
                  "(accepted, duplicate, unchanged, rejected).", ["kind", "outcome"], registry=REGISTRY)
IMPORT_ROWS = Counter("auditor_import_rows", "Rows of the import batches received over HTTP: the rows "
                      "of accepted batches, and the rows found invalid in rejected ones.",
                      ["kind", "outcome"], registry=REGISTRY)


def record_import(kind: str, outcome: str, rows: int) -> None:
    """Count one import batch (``outcome``: accepted, duplicate, unchanged or rejected) and its rows."""
    IMPORTS.labels(kind, outcome).inc()
    if rows:
        IMPORT_ROWS.labels(kind, outcome).inc(rows)


def observe_request(method: str, endpoint: str, status: int, seconds: float) -> None:
    HTTP_LATENCY.labels(method, endpoint, str(status)).observe(seconds)


def _multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir"))


class _Local:
    """This process's own metrics (single-process mode)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


# --- read at scrape time -----------------------------------------------------------------------


def _seconds(later, earlier, dialect: str):
    if dialect == "postgresql":
        return func.extract("epoch", later - earlier)
    return (func.julianday(later) - func.julianday(earlier)) * 86400.0


def database_families(engine: Engine) -> list[Metric]:
    """The series read from the database (one read-only transaction, each statement bounded)."""
    dialect = engine.dialect.name
    succeeded = AuditStatus.SUCCEEDED.value
    with engine.connect() as conn, conn.begin():
        if dialect == "postgresql":
            conn.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
        # Each dataset's newest data version against its last succeeded audit: one statement.
        last = (select(func.max(AuditRun.id)).where(AuditRun.dataset_id == Dataset.id,
                                                     AuditRun.status == succeeded)
                .correlate(Dataset).scalar_subquery())
        run = aliased(AuditRun)
        lag = (Dataset.data_version - func.coalesce(run.data_version, 0)).label("lag")
        rows = conn.execute(
            select(Dataset.id, Workspace.slug, Dataset.name, lag, run.data_version,
                   _seconds(run.finished_at, run.started_at, dialect).label("duration"),
                   run.finished_at.label("at"),
                   func.count().over().label("total"))
            .join(Workspace, Workspace.id == Dataset.workspace_id)
            .outerjoin(run, run.id == last)
            .order_by(lag.desc(), Dataset.id).limit(MAX_DATASETS)).all()
        cases = [func.sum(case((_seconds(AuditRun.finished_at, AuditRun.started_at, dialect) <= b, 1), else_=0))
                 for b in AUDIT_BUCKETS]
        durations = conn.execute(
            select(func.count(), func.sum(_seconds(AuditRun.finished_at, AuditRun.started_at, dialect)), *cases)
            .where(AuditRun.status == succeeded, AuditRun.started_at.is_not(None),
                   AuditRun.finished_at.is_not(None))).one()
        queued_cases = [func.sum(case((_seconds(AuditRun.started_at, AuditRun.created_at, dialect) <= b, 1),
                                      else_=0)) for b in QUEUED_BUCKETS]
        queued = conn.execute(
            select(func.count(), func.sum(_seconds(AuditRun.started_at, AuditRun.created_at, dialect)),
                   *queued_cases).where(AuditRun.started_at.is_not(None))).one()
        runs = conn.execute(select(AuditRun.status, func.count()).group_by(AuditRun.status)).all()
        alerts = conn.execute(select(Alert.kind, Alert.severity, func.count())
                              .group_by(Alert.kind, Alert.severity)).all()
        deliveries = conn.execute(
            select(WebhookDelivery.status, func.count())
            .where(WebhookDelivery.status.in_([DeliveryStatus.PENDING.value, DeliveryStatus.FAILED.value]))
            .group_by(WebhookDelivery.status)).all()

    dataset_families = _dataset_families(rows)
    histogram = _histogram("auditor_audit_duration_seconds", "Duration of succeeded audits "
                           "(claim to result write), over every worker.", AUDIT_BUCKETS, durations)
    queued_histogram = _histogram(
        "auditor_audit_queued_seconds", "Time from an audit's request (the write that asked for it) to a worker "
        "starting it, over every run that started.", QUEUED_BUCKETS, queued)
    runs_family = GaugeMetricFamily("auditor_audit_runs", "Audit runs in each status now.", labels=["status"])
    for status in AuditStatus:
        runs_family.add_metric([status.value], float(dict((str(s), n) for s, n in runs).get(status.value, 0)))
    alert_family = CounterMetricFamily("auditor_alerts", "Alerts raised, by kind and severity.",
                                       labels=["kind", "severity"])
    for kind, severity, n in alerts:
        alert_family.add_metric([kind, str(severity)], float(n))
    delivery_family = GaugeMetricFamily("auditor_webhook_deliveries", "Outgoing webhook deliveries still "
                                        "being retried (pending) or given up (failed).", labels=["status"])
    by_status = {str(s): n for s, n in deliveries}
    for status in (DeliveryStatus.PENDING.value, DeliveryStatus.FAILED.value):
        delivery_family.add_metric([status], float(by_status.get(status, 0)))
    return [*dataset_families, histogram, queued_histogram, runs_family, alert_family, delivery_family]


def _dataset_families(rows) -> list[Metric]:
    """Per dataset (the most lagging first): its audit lag, its last audit's duration and
    time, and how many datasets the series leave out."""
    labels = ["workspace", "dataset_id", "dataset"]
    lag_family = GaugeMetricFamily("auditor_audit_lag_versions", "Data versions a dataset's last succeeded "
                                   "audit is behind its newest data (0: current).", labels=labels)
    last_duration = GaugeMetricFamily("auditor_audit_last_duration_seconds",
                                      "How long the dataset's last succeeded audit took.", labels=labels)
    last_time = GaugeMetricFamily("auditor_audit_last_success_timestamp_seconds",
                                  "When the dataset's last succeeded audit finished (Unix time).", labels=labels)
    for r in rows:
        values = [r.slug, str(r.id), r.name]
        lag_family.add_metric(values, float(r.lag))
        if r.duration is not None:
            last_duration.add_metric(values, float(r.duration))
        if r.at is not None:
            at = r.at if r.at.tzinfo is not None else r.at.replace(tzinfo=UTC)  # SQLite keeps no zone; we store UTC
            last_time.add_metric(values, at.timestamp())
    total = rows[0].total if rows else 0
    omitted = GaugeMetricFamily("auditor_metrics_datasets_omitted", "Datasets left out of the per-dataset "
                                f"series (at most {MAX_DATASETS} are listed, the most lagging first).",
                                value=max(0, total - len(rows)))
    return [lag_family, last_duration, last_time, omitted]


def _histogram(name: str, documentation: str, bounds, row) -> HistogramMetricFamily:
    """A histogram from one row of (count, sum, cumulative count per bucket bound)."""
    count, total_seconds, *cumulative = row
    buckets = [(str(float(b)), float(c or 0)) for b, c in zip(bounds, cumulative, strict=True)]
    buckets.append(("+Inf", float(count or 0)))
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=float(total_seconds or 0.0))


# Messages of a Redis queue live in one list per priority step (kombu's redis transport).
_REDIS_PRIORITY_SEP = "\x06\x16"
_REDIS_PRIORITY_STEPS = (3, 6, 9)


def _queue_depths(broker_url: str, queues: list[str]) -> dict[str, int] | None:
    """Messages waiting in each queue; None when the broker keeps them where we cannot count
    (an in-memory broker lives in its own process)."""
    if broker_url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(broker_url, socket_connect_timeout=1, socket_timeout=1)
        try:
            pipe = client.pipeline(transaction=False)
            for q in queues:
                pipe.llen(q)
                for step in _REDIS_PRIORITY_STEPS:
                    pipe.llen(f"{q}{_REDIS_PRIORITY_SEP}{step}")
            counts = pipe.execute()
        finally:
            client.close()
        per = 1 + len(_REDIS_PRIORITY_STEPS)
        return {q: int(sum(counts[i * per:(i + 1) * per])) for i, q in enumerate(queues)}
    if broker_url.startswith("sqla+"):
        # The embedded broker: kombu's SQLAlchemy transport keeps messages in kombu_message.
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        engine = create_engine(broker_url[len("sqla+"):], poolclass=NullPool)
        try:
            with engine.connect() as conn:
                names = {r[0] for r in conn.execute(text(
                    "SELECT name FROM sqlite_master WHERE type = 'table'" if engine.dialect.name == "sqlite"
                    else "SELECT table_name FROM information_schema.tables"))}
                if "kombu_message" not in names:
                    return dict.fromkeys(queues, 0)
                rows = conn.execute(text(
                    "SELECT q.name, count(m.id) FROM kombu_queue q JOIN kombu_message m ON m.queue_id = q.id "
                    "WHERE m.visible GROUP BY q.name")).all()
        finally:
            engine.dispose()
        found = {name: int(n) for name, n in rows}
        return {q: found.get(q, 0) for q in queues}
    return None


class _ScrapeCollector:
    """The series read at scrape time, cached for a few seconds per process."""

    def __init__(self, app: Flask):
        self.app = app
        self.lock = threading.Lock()
        self.cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterable[Metric]:
        with self.lock:
            ttl = float(self.app.config.get("METRICS_CACHE_SECONDS", CACHE_SECONDS))
            if self.cached is not None and time.monotonic() - self.cached[0] < ttl:
                return list(self.cached[1])
            families = self._read()
            self.cached = (time.monotonic(), families)
            return list(families)

    def _read(self) -> list[Metric]:
        out: list[Metric] = []
        try:
            out += database_families(self.app.extensions["auditor.engine"])
            up = 1.0
        except Exception as exc:  # the scrape still answers, saying the database could not be read
            log.warning("metrics: could not read the database (%s)", exc.__class__.__name__)
            up = 0.0
        out.append(GaugeMetricFamily("auditor_metrics_database_up", "1 if this scrape could read the "
                                     "database-derived series.", value=up))
        capp = self.app.extensions.get("celery")
        from auditor.worker import worker_queues  # (the audits queue, then the default one)

        queues = worker_queues(capp.conf.task_default_queue) if capp is not None else []
        depth_family = GaugeMetricFamily("auditor_queue_messages", "Task messages waiting in the broker's "
                                         "queue (not yet taken by a worker).", labels=["queue"])
        broker_up = GaugeMetricFamily("auditor_broker_up", "1 if this scrape could read the broker's queues.",
                                      labels=["transport"])
        url = str(capp.conf.broker_url) if capp is not None else ""
        transport = url.split("://", 1)[0] if "://" in url else "unknown"
        try:
            depths = _queue_depths(url, queues)
        except Exception as exc:  # any broker failure: reported as broker_up 0
            log.warning("metrics: could not read the broker's queues (%s)", exc.__class__.__name__)
            broker_up.add_metric([transport], 0.0)
        else:
            if depths is not None:
                for q, n in depths.items():
                    depth_family.add_metric([q], float(n))
                broker_up.add_metric([transport], 1.0)
        out += [depth_family, broker_up]
        return out


def _authorized(token: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


@bp.get("/metrics")
def metrics() -> Response:
    token = current_app.config.get("AUDITOR_METRICS_TOKEN") or ""
    if not token:
        abort(404)
    if not _authorized(token):
        return Response("a bearer token is required\n", status=401, mimetype="text/plain",
                        headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
    registry = CollectorRegistry()
    if _multiprocess():
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_Local())
    registry.register(current_app.extensions["auditor.metrics"])
    response = Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
    response.headers["Cache-Control"] = "no-store"
    return response


def init_app(app: Flask) -> None:
    app.extensions["auditor.metrics"] = _ScrapeCollector(app)
    app.register_blueprint(bp)
