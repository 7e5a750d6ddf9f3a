"""The OpenAPI document: valid, complete, and a property-based fuzz run against it finds no 5xx."""

from __future__ import annotations

import re

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.web.conftest import make_tenant, seed

pytestmark = pytest.mark.services


def test_document_validates_against_the_openapi_specification(client):
    doc = client.get("/api/v1/openapi.json").get_json()
    validate(doc)
    assert doc["openapi"] == "3.1.0"


def test_every_api_route_is_documented_and_nothing_else(app, client):
    doc = client.get("/api/v1/openapi.json").get_json()
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    routed = set()
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/") or rule.endpoint == "ui.api_docs":  # the docs page (HTML) itself
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        routed |= {(path, m) for m in rule.methods - {"HEAD", "OPTIONS"}}
    assert documented == routed
    ops = [op for ops in doc["paths"].values() for op in ops.values()]
    assert len({op["operationId"] for op in ops}) == len(ops)
    assert all(op.get("summary") for op in ops)


@pytest.fixture(scope="module")
def fuzz_target(app):
    """A seeded workspace; the fuzzer acts as its admin."""
    return seed(app, make_tenant(app), name="fuzzed")



def _fuzz(operation, mode, path_parameters, headers, failures):
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

    @given(case=strategy)
    @settings(max_examples=8, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def run(case):
        try:
            case.call_and_validate(headers=headers, checks=CHECKS)
        except (AssertionError, FailureGroup) as exc:  # the checks raise one (grouped) failure per case
            failures.append(f"{operation.label} [{mode.value}]: {exc}"[:2000])

    run()


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def test_fuzz_finds_no_server_errors(app, fuzz_target):
    """Hypothesis-generated requests, valid and invalid, on every operation: no 5xx, answers as documented."""
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)
    ids = {"dataset_id": fuzz_target.dataset_id, "model_id": fuzz_target.model_id,
           "release_id": fuzz_target.release_ids["2.0"], "vendor": "acme-labeling"}
    client = app.test_client()
    auth = {"Authorization": f"Bearer {fuzz_target.tenant.tokens['admin']}"}
    ids["audit_run_id"] = client.get(f"/api/v1/datasets/{ids['dataset_id']}/audit-runs",
                                     headers=auth).get_json()["items"][0]["id"]
    ids["item_id"] = client.get(f"/api/v1/datasets/{ids['dataset_id']}/items", headers=auth).get_json()["items"][0]["id"]
    ids["annotator_id"] = client.get("/api/v1/annotators", headers=auth).get_json()["items"][0]["id"]
    # Users and tokens: the viewer's (revoking or deactivating the fuzzing admin would end the run).
    ids["user_id"] = fuzz_target.tenant.user_ids["viewer"]
    ids["token_id"] = client.get(f"/api/v1/users/{ids['user_id']}/tokens", headers=auth).get_json()["items"][0]["id"]
    ids["webhook_id"] = client.post("/api/v1/webhooks", json={"url": "https://hooks.example.com/fuzzed"},
                                    headers=auth).get_json()["id"]
    ids["channel_id"] = client.post("/api/v1/alert-channels", json={"kind": "email", "name": "fuzzed",
                                                                    "recipients": ["fuzz@example.com"]},
                                    headers=auth).get_json()["id"]
    ids["rule_id"] = client.post("/api/v1/alert-rules", json={"name": "fuzzed", "channel_ids": [ids["channel_id"]]},
                                 headers=auth).get_json()["id"]
    from auditor.db import Alert, make_session_factory

    with make_session_factory(app.extensions["auditor.engine"])() as db:
        alert = Alert(workspace_id=fuzz_target.tenant.workspace_id, dataset_id=fuzz_target.dataset_id,
                      kind="vendor_drop", subject="acme-labeling", message="fuzzed")
        db.add(alert)
        db.commit()
        ids["alert_id"] = alert.id
    failures: list[str] = []
    n_operations = 0
    # The WSGI client reads bodies as they are sent: ask for them uncompressed (compression has its tests).
    auth = {**auth, "Accept-Encoding": "identity"}
    for result in schema.get_all_operations():
        operation = result.ok()
        n_operations += 1
        names = [p.name for p in operation.path_parameters]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(operation, mode, None, auth, failures)
            if names and mode is GenerationMode.POSITIVE:
                # Also on objects that exist, to reach past the lookups.
                _fuzz(operation, mode, {n: ids[n] for n in names}, auth, failures)
    assert n_operations >= 30
    assert not failures, "\n\n".join(failures[:10])
