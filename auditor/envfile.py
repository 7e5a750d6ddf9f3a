"""Every environment variable Auditor reads, in one catalog: ``.env.example`` is rendered
from it (``auditor settings env-example``), and the tests check that the file matches,
that every ``AUDITOR_*`` name the code reads is here, and that setting each one changes
what the settings loaders (or its one consumer) see.

``scope`` says who reads a variable: ``settings`` (:func:`auditor.config.load_settings`,
into the field ``field``), ``worker`` (:func:`auditor.config.load_worker_settings`),
``web-app`` (the Flask app factory), ``cli`` (the command line), ``compose``
(docker-compose.yml only) or ``tests`` (the test suite and the benchmarks). ``sample``
is a valid value other than the default, for the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOG", "Section", "Variable", "render_env_example", "variables"]


@dataclass(frozen=True)
class Variable:
    name: str
    value: str
    help: tuple[str, ...] = ()
    scope: str = "settings"
    field: str | None = None
    sample: str | None = None
    #: Set in the file (a required value to fill in) rather than shown commented out with its default.
    required: bool = False
    #: ``value`` is the default (checked by the tests); False where it is an example.
    shows_default: bool = True


@dataclass(frozen=True)
class Section:
    title: str
    variables: tuple[Variable, ...]


PREAMBLE = (
    "Copy to .env and fill in. docker compose refuses to start while a required value is empty.",
    "Every setting Auditor reads is listed here; commented-out lines show the defaults.",
)

CATALOG: tuple[Section, ...] = (
    Section('required in production', (
        Variable('POSTGRES_PASSWORD', '', help=('Password of the PostgreSQL role `auditor` (docker-compose builds AUDITOR_DATABASE_URL from it).',), scope='compose', required=True),
        Variable('AUDITOR_SECRET_KEY', '', help=('Secret for sessions and CSRF tokens; e.g. `python -c "import secrets; print(secrets.token_hex(32))"`.', 'Without it every process would pick its own random key (fine only for one embedded process).'), field='secret_key', sample='s3cret', required=True),
    )),
    Section('where things are (docker-compose sets the URLs itself)', (
        Variable('AUDITOR_PORT', '8000', help=('Host port of the web UI and API.',), scope='compose', required=True, shows_default=False),
        Variable('AUDITOR_INSTANCE_PATH', './instance', help=('Local state: the default SQLite database and the embedded broker live here.',), field='instance_path', sample='/tmp/elsewhere'),
        Variable('AUDITOR_DATABASE_URL', 'postgresql://auditor:secret@postgres:5432/auditor', help=('SQLAlchemy URL; default sqlite:///<instance>/auditor.sqlite3; postgresql:// uses psycopg 3.',), field='database_url', sample='sqlite:////tmp/other.sqlite3', shows_default=False),
        Variable('AUDITOR_BROKER_URL', 'redis://redis:6379/0', help=('Celery broker and result store; default a SQLite-backed broker in the instance folder (no server).',), field='broker_url', sample='redis://127.0.0.1:6379/9', shows_default=False),
        Variable('AUDITOR_RESULT_BACKEND', 'redis://redis:6379/1', field='result_backend', sample='redis://127.0.0.1:6379/10', shows_default=False),
        Variable('AUDITOR_WORKSPACE', 'acme', help=('Workspace the command line (auditor datasets/import/users/tokens/audit) uses without', "--workspace; default 'demo' when the database holds the demo's workspace, else 'default'."), scope='cli', shows_default=False),
    )),
    Section('web', (
        Variable('AUDITOR_MAX_UPLOAD_BYTES', '1073741824', help=('Largest accepted upload, in bytes (larger bodies get 413).',), field='max_upload_bytes', sample='1024'),
        Variable('AUDITOR_RATELIMIT_STORAGE_URL', 'redis://redis:6379/2', help=('Where rate limits are counted (shared by all web processes); default the Redis broker, else memory.',), scope='web-app', shows_default=False),
        Variable('AUDITOR_LOGIN_LIMIT', '10 per minute', help=('Login attempts per client address, and per account (workspace and email) from any address.',), field='login_limit', sample='3 per minute'),
        Variable('AUDITOR_LOGIN_ACCOUNT_LIMIT', '5 per minute; 30 per hour', field='login_account_limit', sample='2 per minute'),
        Variable('AUDITOR_INGEST_LIMIT', '60 per minute', field='ingest_limit', sample='4 per minute'),
        Variable('AUDITOR_SCORE_LIMIT', '60 per minute', field='score_limit', sample='5 per minute'),
        Variable('AUDITOR_SCORE_ANONYMOUS', 'false', help=("/api/score answers signed-in callers only (false), or anyone, as Scoracle's did (true).",), field='score_anonymous', sample='true'),
        Variable('AUDITOR_RESPONSE_CACHE_ENTRIES', '512', help=('Per-process cache of rendered results, invalidated by any new data, audit or alert:', 'how many (0 turns it off) and the largest response kept, in bytes.'), field='response_cache_entries', sample='7'),
        Variable('AUDITOR_RESPONSE_CACHE_MAX_BYTES', '4194304', field='response_cache_max_bytes', sample='99'),
        Variable('AUDITOR_SESSION_COOKIE_SECURE', 'auto', help=('The session cookie is Secure: auto (whenever the request came over HTTPS), true (always)', 'or false. Behind a TLS-terminating reverse proxy set AUDITOR_PROXY_COUNT=1 so that its', 'X-Forwarded-Proto/-For/-Host headers are trusted (never set it without such a proxy).'), field='session_cookie_secure', sample='true'),
        Variable('AUDITOR_PROXY_COUNT', '0', field='proxy_count', sample='1'),
    )),
    Section('workers and audits', (
        Variable('AUDITOR_CELERY_QUEUE', 'auditor', scope='worker', field='queue', sample='other'),
        Variable('AUDITOR_CELERY_CONCURRENCY', '1', help=('Audit processes (default: one per core but one) and their niceness (default 10), so', 'that dashboards on the same machine stay responsive while audits run.'), scope='worker', field='concurrency', sample='3', shows_default=False),
        Variable('AUDITOR_WORKER_NICE', '10', scope='worker', field='nice', sample='5'),
        Variable('AUDITOR_WORKER_BLAS_THREADS', '1', help=('Threads of the linear algebra library in each audit process: one, as the processes', 'already use the cores (more threads per process only contend for them).'), scope='worker', field='blas_threads', sample='2'),
        Variable('AUDITOR_SWEEP_SECONDS', '60', help=('Period of the sweep that enqueues every dataset whose data is newer than its last audit.',), scope='worker', field='sweep_seconds', sample='30'),
        Variable('AUDITOR_AUDIT_SOFT_TIME_LIMIT', '1500', scope='worker', field='soft_time_limit', sample='100'),
        Variable('AUDITOR_AUDIT_TIME_LIMIT', '1800', scope='worker', field='time_limit', sample='3600'),
        Variable('AUDITOR_AUDIT_LEASE_SECONDS', '60', help=("A running audit's worker renews its lease every quarter of this; a run whose worker", 'died (killed outright) is taken over by the next sweep once the lease has passed.'), scope='worker', field='lease_seconds', sample='20'),
        Variable('AUDITOR_AUDIT_MAX_RETRIES', '5', scope='worker', field='max_retries', sample='2'),
        Variable('AUDITOR_AUDIT_RETRY_BACKOFF', '2', scope='worker', field='retry_backoff', sample='7'),
        Variable('AUDITOR_DB_LOCK_TIMEOUT_MS', '10000', scope='worker', field='db_lock_timeout_ms', sample='500'),
        Variable('AUDITOR_AUDIT_BOOTSTRAP', '500', help=('Bootstrap resamples for the intervals of power curves, equivalences and agreement.',), scope='worker', field='n_bootstrap', sample='50'),
        Variable('AUDITOR_AUDIT_PAIRWISE_MAX_ANNOTATIONS', '', help=("Pairwise Cohen's kappa only up to this many annotations (default: always; 0: never), and its resamples.",), scope='worker', field='pairwise_max_annotations', sample='1000'),
        Variable('AUDITOR_AUDIT_PAIRWISE_BOOTSTRAP', '0', scope='worker', field='pairwise_bootstrap', sample='10'),
        Variable('AUDITOR_AUDIT_SEED', '0', scope='worker', field='seed', sample='3'),
        Variable('AUDITOR_FANOUT_MIN_ITEMS', '500000', help=('Items from which an audit fans out as a Celery group across workers.',), scope='worker', field='fanout_min_items', sample='1000'),
        Variable('AUDITOR_CERTIFY_THRESHOLD', '0.95', help=('Confidence a "certified" verdict needs, and the upper bound it uses (theoretical = U_t, empirical = U_e).',), scope='worker', field='certify_threshold', sample='0.9'),
        Variable('AUDITOR_CERTIFY_BOUND', 'theoretical', scope='worker', field='certify_bound', sample='empirical'),
        Variable('AUDITOR_CERTIFY_METHOD', 'anytime', help=('Which verdict the badge and the certification alert use: anytime (valid however often audits', "re-check it; anytime-fan: its earlier, weaker form) or the paper's fixed-sample oms / hms."), scope='worker', field='certify_method', sample='oms'),
        Variable('AUDITOR_PLANS_PER_AUDIT', '5', help=("After each audit, the audit plans of this many of the dataset's releases it did not certify", '(the most recently released first) are computed; 0: only when a page or the API asks for one.'), scope='worker', field='plans_per_audit', sample='0'),
        Variable('AUDITOR_QUALITY_ALPHA', '0.05', help=("Yearly false-alarm rate of the vendor and annotator change alerts: 0.05 means fewer than", "1 in 20 year-long stationary streams alert (all of a dataset's groups together); smaller waits for stronger evidence."), scope='worker', field='quality_alpha', sample='0.01'),
        Variable('AUDITOR_LABELSTUDIO_SYNC_SECONDS', '300', help=('Period of the beat task that pulls every Label Studio connector (backfill, and catching up on', 'events missed while Auditor was down).'), scope='worker', field='labelstudio_sync_seconds', sample='60'),
        Variable('AUDITOR_BASE_URL', 'https://auditor.example.com', help=('Where users reach the web UI; links written outside Auditor (the audit run URL in MLflow model', 'version tags) start with it. Empty: those links are paths only.'), scope='worker', field='base_url', sample='https://auditor.example.com', shows_default=False),
    )),
    Section('operations: logs, metrics, outgoing webhooks', (
        Variable('AUDITOR_LOG_FORMAT', 'plain', help=('Log lines of the web and worker processes: plain text, or json (one object per line, with', 'the request id of a web request and the task id of a worker task).'), field='log_format', sample='json'),
        Variable('AUDITOR_METRICS_TOKEN', '', help=('Bearer token Prometheus sends to GET /metrics (at least 16 characters); empty: /metrics', "answers 404. Several web processes share their counts through prometheus-client's", "PROMETHEUS_MULTIPROC_DIR (set up by the container's gunicorn and by `auditor serve`)."), field='metrics_token', sample='scrape-token-0123456789'),
        Variable('AUDITOR_WEBHOOK_MAX_ATTEMPTS', '8', help=('Attempts per webhook delivery, and the first retry delay in seconds (doubled after each', 'failed attempt, at most 10 minutes).'), scope='worker', field='webhook_max_attempts', sample='3'),
        Variable('AUDITOR_WEBHOOK_RETRY_BACKOFF', '5', scope='worker', field='webhook_retry_backoff', sample='0.5'),
        Variable('AUDITOR_CONNECTOR_ALLOW_PRIVATE', 'false', help=('auditor connect label-studio / mlflow may point at loopback, private and link-local', 'addresses (a Label Studio on this machine); false: refused, as for webhooks. The commands\' --allow-private.'), scope='cli', shows_default=False),
        Variable('AUDITOR_WEBHOOK_ALLOW_PRIVATE', 'false', help=('Let webhooks and alert channels reach loopback, private and link-local addresses (false: such', 'deliveries are refused, so a workspace admin cannot probe the internal network; the SMTP relay too).'), scope='worker', field='webhook_allow_private', sample='true'),
    )),
    Section('alert email (the SMTP relay email alert channels send through)', (
        Variable('AUDITOR_SMTP_HOST', 'smtp.example.com', help=('Host of the relay; empty: email channels cannot send (their deliveries fail and say so).', 'Reached through the outgoing-address filter: a relay on a private address needs', 'AUDITOR_WEBHOOK_ALLOW_PRIVATE=true.'), scope='worker', field='smtp_host', sample='smtp.example.org', shows_default=False),
        Variable('AUDITOR_SMTP_PORT', '587', scope='worker', field='smtp_port', sample='2525'),
        Variable('AUDITOR_SMTP_SECURITY', 'starttls', help=('starttls (upgrade the connection), tls (implicit, port 465) or none.',), scope='worker', field='smtp_security', sample='none'),
        Variable('AUDITOR_SMTP_USER', '', help=('Login at the relay (empty: none) and its password.',), scope='worker', field='smtp_user', sample='auditor'),
        Variable('AUDITOR_SMTP_PASSWORD', '', scope='worker', field='smtp_password', sample='relay-password'),
        Variable('AUDITOR_SMTP_FROM', 'auditor@localhost', help=('Sender address of alert mail.',), scope='worker', field='smtp_from', sample='alerts@example.org'),
    )),
    Section('tests and tools only', (
        Variable('AUDITOR_SHARED_DIR', '../shared', help=('Folder holding datasets/ (the public multi-annotator data the tests and benchmarks use).',), scope='tests'),
        Variable('AUDITOR_CHROMIUM', '/usr/bin/chromium', help=('Chromium for the browser tests.',), scope='tests'),
        Variable('AUDITOR_TEST_POSTGRES_URL', 'postgresql://postgres@127.0.0.1:5432/test', help=('PostgreSQL and Redis the tests use (defaults: 127.0.0.1:5432 user postgres, 127.0.0.1:6379).',), scope='tests'),
        Variable('AUDITOR_TEST_REDIS_URL', 'redis://127.0.0.1:6379', scope='tests'),
        Variable('AUDITOR_BENCH_POSTGRES_URL', 'postgresql://postgres@127.0.0.1:5432/test', help=('The same for the benchmarks in bench/, and the Python of the survey-equivalence reference package.',), scope='tests'),
        Variable('AUDITOR_BENCH_REDIS_URL', 'redis://127.0.0.1:6379', scope='tests'),
        Variable('AUDITOR_SE_PYTHON', '', scope='tests'),
    )),
)


def variables() -> dict[str, Variable]:
    """The catalog by name."""
    return {v.name: v for s in CATALOG for v in s.variables}


def render_env_example() -> str:
    """The text of ``.env.example``."""
    out = [f"# {line}" for line in PREAMBLE]
    for section in CATALOG:
        out.append("")
        out.append(f"# --- {section.title} ".ljust(_RULE, "-"))
        for v in section.variables:
            out.extend(f"# {line}" for line in v.help)
            out.append(f"{v.name}={v.value}" if v.required else f"# {v.name}={v.value}")
    return "\n".join(out) + "\n"


_RULE = 91
