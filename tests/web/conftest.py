"""Web fixtures: one app on the session's PostgreSQL database and a real Redis, workspaces per test module.

Rate limits are counted in Redis (database 15, a key prefix per run). Audits requested by
ingestion go to an in-memory broker, except while seeding: then Celery runs them eagerly,
so the seeded results come from real ingestion and a real audit run.
"""

from __future__ import annotations

import os
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from auditor.config import WorkerSettings
from auditor.db import Role, User, Workspace, make_session_factory
from auditor.simulate import Scenario, simulate
from auditor.web import create_app
from auditor.web.security import hash_password, issue_token

REDIS_URL = os.environ.get("AUDITOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
PASSWORD = "correct horse battery"


def _require_redis() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as exc:  # any connection failure means the same thing here
        message = f"Redis not reachable at {REDIS_URL}: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message} (CI=true: the web tests must run)", pytrace=False)
        pytest.skip(f"{message}; set AUDITOR_TEST_REDIS_URL or start Redis")


def app_config(pg_engine, **overrides) -> dict:
    url = pg_engine.url.render_as_string(hide_password=False)
    config = {
        "TESTING": True,
        "SECRET_KEY": "test-secret-" + uuid.uuid4().hex,
        "DATABASE_URL": url,
        "RATELIMIT_STORAGE_URI": REDIS_URL,
        "RATELIMIT_KEY_PREFIX": "auditor-test-" + uuid.uuid4().hex[:12],
        "AUDITOR_INGEST_LIMIT": "1000 per minute",
        "AUDITOR_LOGIN_LIMIT": "1000 per minute",
        "AUDITOR_LOGIN_ACCOUNT_LIMIT": "1000 per minute",
        "AUDITOR_SCORE_LIMIT": "1000 per minute",
        "CELERY": {"broker_url": "memory://", "result_backend": "cache+memory://",
                   "auditor_database_url": url,
                   # plans are asked for by the pages here (the worker tests plan after audits)
                   "auditor_worker": WorkerSettings(n_bootstrap=40, fanout_min_items=10**9, plans_per_audit=0)},
    }
    config.update(overrides)
    return config


@pytest.fixture(scope="session")
def app(pg_engine):
    _require_redis()
    app = create_app(app_config(pg_engine))
    yield app
    app.extensions["auditor.engine"].dispose()


@pytest.fixture
def client(app):
    return app.test_client()


@contextmanager
def eager_audits(app):
    """Run the audits that ingestion requests inline, as a worker would.

    The app's Celery instance is made the current one first: the shared tasks resolve to
    the current app, and tests elsewhere (the worker tests) create and select their own."""
    capp = app.extensions["celery"]
    capp.set_current()
    capp.set_default()
    conf = capp.conf
    conf.task_always_eager, conf.task_eager_propagates = True, True
    try:
        yield
    finally:
        conf.task_always_eager = False


@dataclass
class Tenant:
    """A workspace with one user and one token per role."""

    slug: str
    workspace_id: int
    tokens: dict[str, str] = field(default_factory=dict)
    emails: dict[str, str] = field(default_factory=dict)
    user_ids: dict[str, int] = field(default_factory=dict)

    def auth(self, role: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}


def make_tenant(app, *, vendor: str = "acme-labeling", extra_vendors: tuple[str, ...] = ("bolt-annotations",)) -> Tenant:
    factory = make_session_factory(app.extensions["auditor.engine"])
    slug = "ws-" + uuid.uuid4().hex[:10]
    with factory() as db:
        ws = Workspace(slug=slug, name=slug)
        db.add(ws)
        db.flush()
        tenant = Tenant(slug, ws.id)
        roles = [("admin", None), ("analyst", None), ("viewer", None), ("vendor", vendor)]
        roles += [(f"vendor:{v}", v) for v in extra_vendors]
        for key, v in roles:
            role = Role.VENDOR if key.startswith("vendor") else Role(key)
            email = f"{key.replace(':', '-')}@{slug}.example"
            user = User(workspace_id=ws.id, email=email, role=role, vendor=v, password_hash=hash_password(PASSWORD))
            db.add(user)
            db.flush()
            tenant.tokens[key] = issue_token(db, user, name="test")[1]
            tenant.emails[key] = email
            tenant.user_ids[key] = user.id
        db.commit()
    return tenant


def new_dataset(client, headers: dict[str, str], name: str, labels=("a", "b"), **fields) -> int:
    """A dataset created through the API (``POST /api/v1/datasets``); returns its id."""
    r = client.post("/api/v1/datasets", json={"name": name, "labels": list(labels), **fields}, headers=headers)
    assert r.status_code == 201, r.get_json()
    return r.get_json()["id"]


def add_alert(app, tenant: Tenant, *, dataset_id: int | None = None, kind: str = "vendor_quality_changed",
              severity: str = "critical", subject: str = "acme-labeling", message: str | None = None) -> int:
    """An alert stored in the tenant's workspace, as the audit writes one; returns its id."""
    from auditor.db import Alert, AlertSeverity

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        a = Alert(workspace_id=tenant.workspace_id, dataset_id=dataset_id, kind=kind, severity=AlertSeverity(severity),
                  subject=subject, message=message or f"vendor {subject}: agreement dropped")
        db.add(a)
        db.commit()
        return a.id


def grant(app, tenant: Tenant, key: str, dataset_id: int) -> None:
    from auditor.db import DatasetGrant

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        db.add(DatasetGrant(dataset_id=dataset_id, user_id=tenant.user_ids[key]))
        db.commit()


def csrf_token(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "the page has no CSRF token"
    return match.group(1)


def login(client, tenant: Tenant, role: str = "admin"):
    token = csrf_token(client.get("/login").get_data(as_text=True))
    return client.post("/login", data={"csrf_token": token, "workspace": tenant.slug,
                                       "email": tenant.emails[role], "password": PASSWORD})


@dataclass
class Seeded:
    tenant: Tenant
    dataset_id: int
    model_id: int
    release_ids: dict[str, int]
    data: object


# Two vendors, gold on some items, three releases. Binary labels (the audit's majority-vote
# combiner), and no expert panel: the audit's expert-equivalence step is covered by the
# worker tests, and keeping it out keeps these fixtures fast.
SCENARIO = Scenario(n_items=120, labels=("negative", "positive"), experts=(), expert_fraction=0.0,
                    releases={"1.0": 0.70, "2.0": 0.86, "2.1": 0.97})


def seed(app, tenant: Tenant | None = None, *, name: str = "sentiment", scenario: Scenario = SCENARIO) -> Seeded:
    """A dataset filled through the API (annotations, gold, three releases' predictions), audited for real."""
    tenant = tenant or make_tenant(app)
    client = app.test_client()
    admin = tenant.auth("admin")
    data = simulate(scenario)
    r = client.post("/api/v1/datasets", json={"name": name, "labels": list(scenario.labels)}, headers=admin)
    assert r.status_code == 201, r.get_json()
    ds = r.get_json()["id"]
    model = client.post("/api/v1/models", json={"name": scenario.model}, headers=admin).get_json()["id"]
    releases = {}
    with eager_audits(app):
        r = client.post(f"/api/v1/datasets/{ds}/annotations", json={"records": data.annotations}, headers=admin)
        assert r.status_code == 202, r.get_json()
        r = client.post(f"/api/v1/datasets/{ds}/gold", json={"records": data.gold}, headers=admin)
        assert r.status_code == 202, r.get_json()
        for version, rows in data.predictions.items():
            rel = client.post(f"/api/v1/models/{model}/releases",
                              json={"version": version, "released_at": data.released_at[version]}, headers=admin)
            assert rel.status_code == 201, rel.get_json()
            releases[version] = rel.get_json()["id"]
            records = [{"item_id": row["item_id"],
                        "probabilities": {lab: row[lab] for lab in scenario.labels}} for row in rows]
            r = client.post(f"/api/v1/datasets/{ds}/predictions?release_id={releases[version]}",
                            json={"records": records}, headers=tenant.auth("analyst"))
            assert r.status_code == 202, r.get_json()
    grant(app, tenant, "vendor", ds)
    return Seeded(tenant, ds, model, releases, data)


@pytest.fixture(scope="module")
def seeded(app) -> Seeded:
    return seed(app)
