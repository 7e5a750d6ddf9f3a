"""A dataset's live feeds (its Label Studio and MLflow connectors) on its page and in the
API: each one's state, its last error, no credentials shown, readers only, and a cached
page that moves when a feed records something."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime

import pytest

from auditor.db import Dataset, make_session_factory
from auditor.db.models import LabelStudioConnector, MlflowConnector
from tests.web.conftest import login, make_tenant

pytestmark = pytest.mark.services


def _session(app, tenant, role="admin"):
    client = app.test_client()
    assert login(client, tenant, role).status_code == 302
    return client


def _feed_rows(page: str) -> dict[str, str]:
    table = re.search(r'<table class="data" id="feed-table">(.*?)</table>', page, re.S)
    assert table, "no feed table"
    rows = re.findall(r'<tr data-feed="([^"]+)">(.*?)</tr>', table.group(1), re.S)
    return {key: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split()) for key, body in rows}


@pytest.fixture()
def fed(app):
    """A dataset with four feeds: Label Studio ok, failing and disabled; MLflow waiting."""
    tenant = make_tenant(app)
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        ds = Dataset(workspace_id=tenant.workspace_id, name="fed", labels=["a", "b"])
        db.add(ds)
        db.flush()
        common = {"workspace_id": tenant.workspace_id, "dataset_id": ds.id, "webhook_secret_hash": "0" * 64}
        ok = LabelStudioConnector(url="https://user:hunter2@ls.example.org:8443/?token=x", project_id=7,
                                  last_event_at=datetime(2026, 11, 20, 9, 30, tzinfo=UTC), **common)
        failing = LabelStudioConnector(url="http://ls.internal:8080", project_id=8,
                                       last_sync_at=datetime(2026, 11, 21, tzinfo=UTC),
                                       last_sync_error="Label Studio answered 401: invalid token", **common)
        off = LabelStudioConnector(url="http://ls.internal:8080", project_id=9, enabled=False, **common)
        registry = MlflowConnector(dataset_id=ds.id, tracking_uri="http://mlflow.internal:5000",
                                   registered_model="sentiment", model_name="sentiment",
                                   artifact_path="predictions.csv")
        db.add_all([ok, failing, off, registry])
        db.commit()
        return tenant, ds.id, {"ok": ok.id, "failing": failing.id, "off": off.id, "mlflow": registry.id}


def test_the_dataset_page_lists_each_feed_with_its_state_and_last_error(app, fed):
    tenant, ds_id, ids = fed
    rows = _feed_rows(_session(app, tenant).get(f"/datasets/{ds_id}").get_data(as_text=True))
    assert set(rows) == {f"labelstudio-{ids['ok']}", f"labelstudio-{ids['failing']}", f"labelstudio-{ids['off']}",
                         f"mlflow-{ids['mlflow']}"}
    ok = rows[f"labelstudio-{ids['ok']}"]
    assert "project 7" in ok and " ok " in f" {ok} " and "2026-11-20 09:30" in ok
    # The server as typed, less what could be a credential.
    assert "https://ls.example.org:8443/" in ok and "hunter2" not in ok and "token" not in ok
    failing = rows[f"labelstudio-{ids['failing']}"]
    assert "error" in failing and "Label Studio answered 401: invalid token" in failing
    assert "disabled" in rows[f"labelstudio-{ids['off']}"]
    registry = rows[f"mlflow-{ids['mlflow']}"]
    assert "registered model sentiment" in registry and "waiting" in registry


def test_the_api_lists_the_feeds_to_readers_only(app, fed):
    tenant, ds_id, ids = fed
    client = app.test_client()
    r = client.get(f"/api/v1/datasets/{ds_id}/feeds", headers=tenant.auth("viewer"))
    assert r.status_code == 200
    items = {(f["kind"], f["id"]): f for f in r.get_json()["items"]}
    assert items[("labelstudio", ids["failing"])]["state"] == "error"
    assert items[("labelstudio", ids["failing"])]["error"] == "Label Studio answered 401: invalid token"
    assert items[("labelstudio", ids["ok"])]["last_event_at"].startswith("2026-11-20T09:30")
    assert items[("labelstudio", ids["ok"])]["source"] == "https://ls.example.org:8443/"
    assert items[("labelstudio", ids["off"])]["state"] == "disabled"
    assert items[("mlflow", ids["mlflow"])]["state"] == "waiting"
    assert all("token" not in key for f in items.values() for key in f)
    # A vendor sees its own annotators' quality, not the workspace's integrations.
    assert client.get(f"/api/v1/datasets/{ds_id}/feeds", headers=tenant.auth("vendor")).status_code in (403, 404)
    # Another workspace's dataset does not exist for this caller.
    other = make_tenant(app)
    assert client.get(f"/api/v1/datasets/{ds_id}/feeds", headers=other.auth("admin")).status_code == 404


def test_a_cached_page_shows_a_feed_error_as_soon_as_it_is_recorded(app, fed):
    tenant, ds_id, ids = fed
    client = _session(app, tenant)
    first = _feed_rows(client.get(f"/datasets/{ds_id}").get_data(as_text=True))
    assert "waiting" in first[f"mlflow-{ids['mlflow']}"]
    assert _feed_rows(client.get(f"/datasets/{ds_id}").get_data(as_text=True)) == first  # served again
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        db.get(MlflowConnector, ids["mlflow"]).last_error = "MLflow answered 503"
        db.commit()
    later = _feed_rows(client.get(f"/datasets/{ds_id}").get_data(as_text=True))
    assert "error" in later[f"mlflow-{ids['mlflow']}"] and "MLflow answered 503" in later[f"mlflow-{ids['mlflow']}"]
    with factory() as db:
        row = db.get(MlflowConnector, ids["mlflow"])
        row.last_error, row.last_written_at, row.last_written_run_id = None, datetime.now(UTC), None
        db.commit()
    now = _feed_rows(client.get(f"/datasets/{ds_id}").get_data(as_text=True))[f"mlflow-{ids['mlflow']}"]
    assert " ok " in f" {now} " and "MLflow answered 503" not in now


def test_a_dataset_without_feeds_says_how_to_connect_one(app):
    tenant = make_tenant(app)
    factory = make_session_factory(app.extensions["auditor.engine"])
    with factory() as db:
        ds = Dataset(workspace_id=tenant.workspace_id, name="quiet", labels=["a", "b"])
        db.add(ds)
        db.commit()
        ds_id = ds.id
    page = _session(app, tenant).get(f"/datasets/{ds_id}").get_data(as_text=True)
    # The commands the page names are the CLI's own.
    from auditor.cli import main

    named = re.findall(r"<code>auditor connect ([\w-]+)</code>", page)
    assert sorted(named) == sorted(main.commands["connect"].commands) == ["label-studio", "mlflow"]
    assert app.test_client().get(f"/api/v1/datasets/{ds_id}/feeds",
                                 headers=tenant.auth("admin")).get_json() == {"items": []}


def test_quarantined_annotations_and_refused_webhooks_show_on_the_page_and_in_the_api(app, fed):
    from sqlalchemy import func, update

    from auditor.db.models import LabelStudioQuarantine

    tenant, ds_id, ids = fed
    client = _session(app, tenant)
    assert "refused" not in _feed_rows(client.get(f"/datasets/{ds_id}").get_data(as_text=True))[
        f"labelstudio-{ids['ok']}"]  # (the page is now cached)
    factory = make_session_factory(app.extensions["auditor.engine"])
    C = LabelStudioConnector
    with factory() as db:  # as the webhook receiver counts a refusal: the settings' updated_at is kept
        db.execute(update(C).where(C.id == ids["ok"]).values(
            webhook_refused=4, last_refusal="HTTP 422: Event rejected, nothing was written: ...",
            last_refused_at=datetime(2026, 11, 21, 8, 0, tzinfo=UTC), updated_at=C.updated_at))
        db.commit()
    row = _feed_rows(client.get(f"/datasets/{ds_id}").get_data(as_text=True))[f"labelstudio-{ids['ok']}"]
    assert "4 webhook(s) refused" in row and "error" in row  # the cached page moved
    api = app.test_client()
    api.get(f"/api/v1/datasets/{ds_id}/feeds", headers=tenant.auth("viewer"))  # (now cached)
    with factory() as db:
        db.execute(update(C).where(C.id == ids["ok"]).values(
            webhook_refused=5, last_refused_at=func.now(), updated_at=C.updated_at))
        db.commit()
    items = api.get(f"/api/v1/datasets/{ds_id}/feeds", headers=tenant.auth("viewer")).get_json()["items"]
    assert next(f for f in items if f["id"] == ids["ok"] and f["kind"] == "labelstudio")["webhook_refused"] == 5
    with factory() as db:
        db.execute(update(C).where(C.id == ids["ok"]).values(webhook_refused=4, updated_at=C.updated_at))
        db.commit()
    with factory() as db:
        ok = db.get(LabelStudioConnector, ids["ok"])
        ok.quarantined = 2
        db.add_all([LabelStudioQuarantine(connector_id=ok.id, ls_id=901, task_id=31,
                                          field="task 31: annotations[0].result[0].value.choices",
                                          reason="'Maybe' is not one of the dataset's labels ['a', 'b']",
                                          hint="choose one of the dataset's labels"),
                    LabelStudioQuarantine(connector_id=ok.id, ls_id=902, task_id=32,
                                          field="task 32: annotations[1].result[0].value.choices",
                                          reason="expected exactly one choice, got ['a', 'b']",
                                          hint="keep exactly one choice")])
        db.commit()
    page = client.get(f"/datasets/{ds_id}").get_data(as_text=True)
    row = _feed_rows(page)[f"labelstudio-{ids['ok']}"]
    assert "error" in row and "4 webhook(s) refused" in row and "2 quarantined" in row
    table = re.search(rf'<table class="data quarantine-table" data-connector="{ids["ok"]}">(.*?)</table>', page, re.S)
    assert table, "no quarantine table"
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", table.group(1))).split())
    assert "'Maybe' is not one of the dataset's labels" in text and "choose one of the dataset's labels" in text
    assert 'data-annotation="901"' in table.group(1) and 'data-annotation="902"' in table.group(1)

    r = app.test_client().get(f"/api/v1/datasets/{ds_id}/feeds", headers=tenant.auth("viewer"))
    item = next(f for f in r.get_json()["items"] if f["kind"] == "labelstudio" and f["id"] == ids["ok"])
    assert item["state"] == "error" and item["webhook_refused"] == 4 and item["quarantined"] == 2
    assert "4 webhook deliveries refused, none accepted since" in item["error"]
    assert [(q["task_id"], q["annotation_id"]) for q in item["quarantine"]] == [(31, 901), (32, 902)]
    assert item["quarantine"][0]["first_seen_at"] and item["quarantine"][0]["hint"]
