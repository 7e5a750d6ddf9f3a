"""``auditor connect mlflow`` against a real MLflow tracking server (SQLite backend, local
artifacts; see :mod:`tests.integrations.mlflow_server`), real PostgreSQL, Redis and a
Celery worker: a registered model's versions become releases, and after every audit the
versions' tags show the verdicts, change when the verdict changes, and survive an MLflow
outage without failing the audit."""

from __future__ import annotations

import io
import json
import re
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from auditor.audit import runner
from auditor.audit.pipeline import AuditOptions
from auditor.cli import main
from auditor.connectors import mlflow as connector
from auditor.db import session_scope
from auditor.db.models import (
    AuditRun,
    AuditStatus,
    Certification,
    Dataset,
    ImportBatch,
    ImportKind,
    MlflowConnector,
    Model,
    PowerCurveRecord,
    Prediction,
    Release,
)
from auditor.stats import lower_bound, upper_bounds
from auditor.worker.dispatch import request_audit
from tests.integrations.mlflow_server import mlflow_server  # noqa: F401 (fixture)
from tests.workers._data import import_annotations, make_dataset, synthetic, workspace_of
from tests.workers.conftest import client_app, pg_factory, redis_url, start_worker, worker_env  # noqa: F401 (fixtures)

pytestmark = pytest.mark.services

LABELS = ["negative", "neutral", "positive"]
BASE_URL = "https://auditor.example.test"
P = connector.DEFAULT_TAG_PREFIX


def wait_for(predicate: Callable[[], object], timeout: float, what: str, worker=None, every: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    detail = f"\n--- worker log ---\n{worker.output()}" if worker is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")


def mlflow_client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def register(client, name: str, files: dict[str, bytes], *, source_subdir: str = "") -> str:
    """A run holding ``files`` as artifacts, and a new version of ``name`` from it."""
    exp = client.get_experiment_by_name("auditor-integration")
    exp_id = exp.experiment_id if exp is not None else client.create_experiment("auditor-integration")
    run = client.create_run(exp_id)
    with tempfile.TemporaryDirectory() as d:
        for rel, data in files.items():
            path = Path(d) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        client.log_artifacts(run.info.run_id, d)
    client.set_terminated(run.info.run_id)
    if not client.search_registered_models(f"name='{name}'"):
        client.create_registered_model(name)
    source = run.info.artifact_uri + (f"/{source_subdir}" if source_subdir else "")
    return str(client.create_model_version(name, source=source, run_id=run.info.run_id).version)


def parquet(columns: dict[str, list]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


def csv_bytes(header: list[str], rows: list[list[object]]) -> bytes:
    return ("\n".join([",".join(header), *(",".join(str(x) for x in r) for r in rows)]) + "\n").encode()


def tags(client, name: str, version: str) -> dict[str, str]:
    return {k: v for k, v in client.get_model_version(name, version).tags.items() if k.startswith(P)}


def connect(env: dict[str, str] | None, uri: str, name: str, dataset: str, workspace: str, *extra: str):
    # the tracking server here listens on 127.0.0.1: the documented opt-in
    return CliRunner().invoke(main, ["connect", "mlflow", "--tracking-uri", uri, "--model", name, "--dataset",
                                     dataset, "--workspace", workspace, "--allow-private", *extra], env=env,
                              catch_exceptions=False)


def small_rated_dataset(factory, name: str, *, seed: int) -> tuple[int, str, list[list[str]]]:
    """60 items rated by 3 simulated annotators (accuracy 0.8): the dataset, its workspace, and
    predictions that copy the first annotator (every label one of the dataset's)."""
    _, ratings = synthetic(60, 3, accuracy=0.8, n_labels=3, seed=seed)
    ds = make_dataset(factory, name, LABELS)
    import_annotations(factory, ds, [(f"i{n}", f"r{r}", int(ratings[n, r])) for n in range(60) for r in range(3)])
    return ds, workspace_of(factory, ds), [[f"i{n}", LABELS[int(ratings[n, 0])]] for n in range(60)]


def latest_run(factory, dataset_id: int) -> AuditRun | None:
    with session_scope(factory) as s:
        return s.scalar(select(AuditRun).where(AuditRun.dataset_id == dataset_id,
                                               AuditRun.status == AuditStatus.SUCCEEDED)
                        .order_by(AuditRun.data_version.desc(), AuditRun.id.desc()).limit(1))


def data_version(factory, dataset_id: int) -> int:
    with session_scope(factory) as s:
        return s.get(Dataset, dataset_id).data_version


def certifications(factory, run_id: int) -> dict[str, tuple[Certification, PowerCurveRecord | None]]:
    """Release version → its certification and hard-label power curve in one audit."""
    with session_scope(factory) as s:
        out = {}
        for cert, version in s.execute(select(Certification, Release.version)
                                       .join(Release, Certification.release_id == Release.id)
                                       .where(Certification.audit_run_id == run_id)):
            curve = s.scalar(select(PowerCurveRecord).where(PowerCurveRecord.audit_run_id == run_id,
                                                      PowerCurveRecord.release_id == cert.release_id,
                                                      PowerCurveRecord.scorer == "agreement"))
            out[version] = (cert, curve)
        s.expunge_all()
        return out


def written_for_current_audit(factory, dataset_id: int, client, name: str, versions: list[str]):
    """The latest audit, once it covers the dataset's current data and every version shows it."""
    run = latest_run(factory, dataset_id)
    if run is None or run.data_version < data_version(factory, dataset_id):
        return None
    shown = {v: tags(client, name, v) for v in versions}
    if all(t.get(P + "audit_run_id") == str(run.id) for t in shown.values()):
        return run, shown
    return None


def check_tags_match_audit(factory, run: AuditRun, shown: dict[str, dict[str, str]], counts: np.ndarray,
                           predictions: dict[str, np.ndarray]) -> None:
    """Every tag is the stored result of that audit, and L and U_t are the statistics'."""
    certs = certifications(factory, run.id)
    u_t = upper_bounds(counts).theoretical
    for version, t in shown.items():
        cert, curve = certs[version]
        assert t[P + "certified"] == ("true" if cert.certified else "false")
        assert cert.method == "anytime" and cert.certified_with == "U_t"
        assert cert.certified == (cert.s_anytime_t >= 0.95)
        assert float(t[P + "S_anytime"]) == pytest.approx(cert.s_anytime_t, rel=1e-5, abs=1e-9)
        assert float(t[P + "U_t"]) == pytest.approx(u_t, rel=1e-5)
        assert float(t[P + "L"]) == pytest.approx(lower_bound(counts, predictions[version]).value, rel=1e-5)
        if curve.equivalence is None:  # beyond the curve: "> K" or "< 0", as stored
            assert t[P + "survey_equivalence"] == curve.equivalence_note
        else:
            assert float(t[P + "survey_equivalence"]) == pytest.approx(curve.equivalence, rel=1e-3)
            # These small curves are computed exactly: no Monte Carlo error.
            assert curve.method == "exact" and t[P + "survey_equivalence_mc_error"] == "0"
        assert t[P + "audit_run_url"] == f"{BASE_URL}/api/v1/audit-runs/{run.id}"
        assert t[P + "data_version"] == str(run.data_version)
        assert t[P + "n_items"] == str(counts.shape[0])


def counts_of(ratings: np.ndarray) -> np.ndarray:
    return np.stack([np.bincount(row[row >= 0], minlength=len(LABELS)) for row in ratings])


# --- registry ⇄ audits through a real worker ---------------------------------------------


def test_versions_become_releases_and_tags_follow_the_verdict(tmp_path, pg_factory, redis_url,  # noqa: F811
                                                              start_worker, mlflow_server):  # noqa: F811
    t_start = time.monotonic()
    url, factory = pg_factory
    # (no sweep during this test: the new version below is imported by connect)
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_BASE_URL=BASE_URL, AUDITOR_MLFLOW_SYNC_SECONDS="3600")
    app = client_app(env)
    worker = start_worker(env)
    client = mlflow_client(mlflow_server.uri)
    name = f"sentiment-{uuid.uuid4().hex[:6]}"

    # 2,000 reviews, five crowd raters right 80% of the time; a model release worse than
    # them (60%) and one better (97%). Labels arrive for 150 items first, the rest later.
    n_items, first, raters = 2000, 150, 5
    truth, ratings = synthetic(n_items, raters, accuracy=0.8, n_labels=3, seed=11)
    rng = np.random.default_rng(12)
    worse = np.where(rng.random(n_items) < 0.6, truth, (truth + rng.integers(1, 3, n_items)) % 3)
    better = np.where(rng.random(n_items) < 0.97, truth, (truth + rng.integers(1, 3, n_items)) % 3)
    ds = make_dataset(factory, "reviews", LABELS)
    ws = workspace_of(factory, ds)
    vendors = {f"r{r}": "acme" for r in range(raters + 1)}
    import_annotations(factory, ds, [(f"i{n}", f"r{r}", int(ratings[n, r])) for n in range(first)
                                     for r in range(raters)], vendors=vendors)
    items = [f"i{n}" for n in range(n_items)]
    # Version 1: hard labels; version 2: one probability column per label (both Parquet).
    v1 = register(client, name, {"eval/predictions.parquet": parquet(
        {"item_id": items, "label": [LABELS[k] for k in worse]})})
    probs = np.full((n_items, 3), 0.05)
    probs[np.arange(n_items), better] = 0.9
    artifact = ["--artifact-path", "eval/predictions.parquet"]

    out = connect(env, mlflow_server.uri, name, "reviews", ws, *artifact)
    assert out.exit_code == 0, out.output
    assert f"version {v1}: imported" in out.output and "audit requested" in out.output

    # The first audit (150 labelled items): the worse release is not certified, L < U_t.
    run, shown = wait_for(lambda: written_for_current_audit(factory, ds, client, name, [v1]), 180,
                          "the verdict of version 1 in MLflow", worker)
    check_tags_match_audit(factory, run, shown, counts_of(ratings[:first]), {v1: worse[:first]})
    assert shown[v1][P + "certified"] == "false"
    assert float(shown[v1][P + "L"]) < float(shown[v1][P + "U_t"])

    # A new version is a new release; version 1 is not imported twice.
    v2 = register(client, name, {"eval/predictions.parquet": parquet(
        {"item_id": items, **{lab: probs[:, k].tolist() for k, lab in enumerate(LABELS)}})})
    out = connect(env, mlflow_server.uri, name, "reviews", ws, *artifact)
    assert out.exit_code == 0, out.output
    assert f"version {v1}: duplicate" in out.output and f"version {v2}: imported" in out.output
    with session_scope(factory) as s:
        assert sorted(s.scalars(select(Release.version).join(Model).where(Model.name == name))) == [v1, v2]
        assert s.scalar(select(func.count()).select_from(ImportBatch).where(
            ImportBatch.dataset_id == ds, ImportBatch.kind == ImportKind.PREDICTIONS)) == 2
        assert s.scalar(select(func.count()).select_from(Prediction).where(Prediction.dataset_id == ds)) \
            == 2 * n_items

    # 150 items: the better release beats the humans' bound on its face, but not yet with
    # the confidence a verdict needs.
    run_b, shown_b = wait_for(lambda: written_for_current_audit(factory, ds, client, name, [v1, v2]), 180,
                              "the verdicts of versions 1 and 2", worker)
    check_tags_match_audit(factory, run_b, shown_b, counts_of(ratings[:first]),
                           {v1: worse[:first], v2: better[:first]})
    assert shown_b[v2][P + "certified"] == "false"
    assert float(shown_b[v2][P + "L"]) > float(shown_b[v2][P + "U_t"])

    # The remaining labels arrive: version 2 is certified, version 1 still is not.
    import_annotations(factory, ds, [(f"i{n}", f"r{r}", int(ratings[n, r])) for n in range(first, n_items)
                                     for r in range(raters)], vendors=vendors)
    assert request_audit(ds) is not None
    run_c, shown_c = wait_for(lambda: written_for_current_audit(factory, ds, client, name, [v1, v2]), 240,
                              "the verdicts after all labels", worker)
    check_tags_match_audit(factory, run_c, shown_c, counts_of(ratings), {v1: worse, v2: better})
    assert shown_c[v2][P + "certified"] == "true" and float(shown_c[v2][P + "S_anytime"]) >= 0.95
    assert shown_c[v1][P + "certified"] == "false"
    assert shown_c[v2][P + "audit_run_id"] != shown_b[v2][P + "audit_run_id"]

    # MLflow goes down: the next audit still succeeds, the failed write-back is recorded and
    # retried, and once MLflow is back the tags show that audit.
    mlflow_server.stop()
    try:
        extra = [(f"i{n}", f"r{raters}", int(truth[n])) for n in range(100)]
        version = import_annotations(factory, ds, extra, vendors=vendors)
        assert request_audit(ds) is not None
        run_d = wait_for(lambda: (r := latest_run(factory, ds)) is not None and r.data_version >= version and r,
                         180, "the audit during the outage", worker)
        assert run_d.status == AuditStatus.SUCCEEDED and run_d.error is None

        def failure_recorded():
            with session_scope(factory) as s:
                return s.scalar(select(MlflowConnector.last_error).where(MlflowConnector.dataset_id == ds))

        error = wait_for(failure_recorded, 120, "the failed write-back to be recorded", worker)
        assert mlflow_server.uri in error
    finally:
        mlflow_server.start()
    run_e, shown_e = wait_for(lambda: written_for_current_audit(factory, ds, client, name, [v1, v2]), 240,
                              "the write-back after the outage", worker)
    assert run_e.id >= run_d.id and run_e.data_version >= version

    # The tags are set before the attempt is recorded on the connector: wait for the record.
    def recorded_success():
        with session_scope(factory) as s:
            row = s.scalar(select(MlflowConnector).where(MlflowConnector.dataset_id == ds))
            return row if row.last_written_run_id == run_e.id else None

    row = wait_for(recorded_success, 60, "the successful write-back to be recorded", worker)
    assert row.last_error is None
    assert shown_e[v2][P + "certified"] == "true"
    app.close()
    print(f"\nregistry round trip with a worker: {time.monotonic() - t_start:.1f}s")


def test_write_back_records_move_forward_by_audit_run(pg_factory):  # noqa: F811
    """Write-back attempts finish out of order (one started during an outage can time out
    after a later one succeeded): a stale error never overwrites the record of a success
    of the same or a newer audit run, nor does an older run's success a newer one's."""
    _url, factory = pg_factory
    ds = make_dataset(factory, "records", LABELS)
    with session_scope(factory) as s:
        target = connector.Target.of("http://127.0.0.1:1", "m")
        conn_id = connector.upsert_connector(s, s.get(Dataset, ds), target).id

    def state():
        with session_scope(factory) as s:
            row = s.get(MlflowConnector, conn_id)
            return row.last_written_run_id, row.last_error

    connector.record_write_back(factory, conn_id, run_id=5, error="refused")
    assert state() == (None, "refused")
    connector.record_write_back(factory, conn_id, run_id=5, error=None)
    assert state() == (5, None)
    connector.record_write_back(factory, conn_id, run_id=5, error="late refusal")  # the stale attempt
    connector.record_write_back(factory, conn_id, run_id=4, error="older run refused")
    connector.record_write_back(factory, conn_id, run_id=4, error=None)
    assert state() == (5, None)
    connector.record_write_back(factory, conn_id, run_id=6, error="refused")
    assert state() == (5, "refused")
    connector.record_write_back(factory, conn_id, run_id=6, error=None)
    assert state() == (6, None)


# --- imports: bad, missing and repeated artifacts; write-back without a worker ----------------


def test_bad_rows_missing_artifacts_and_repeated_connects(tmp_path, pg_factory, mlflow_server,  # noqa: F811
                                                          monkeypatch):
    url, factory = pg_factory
    monkeypatch.setenv("AUDITOR_DATABASE_URL", url)
    monkeypatch.setenv("AUDITOR_BROKER_URL", "redis://127.0.0.1:1/0")  # no broker: the sweep would audit
    monkeypatch.setenv("AUDITOR_INSTANCE_PATH", str(tmp_path))
    client = mlflow_client(mlflow_server.uri)
    name = f"small-{uuid.uuid4().hex[:6]}"
    ds, ws, good = small_rated_dataset(factory, "small", seed=3)
    v1 = register(client, name, {"predictions.csv": csv_bytes(["item_id", "label"], good)})
    bad = [row[:] for row in good]
    bad[2][1] = "great"
    v2 = register(client, name, {"predictions.csv": csv_bytes(["item_id", "label"], bad)})
    v3 = register(client, name, {"other.csv": b"item_id,label\ni1,neutral\n"})

    out = connect(None, mlflow_server.uri, name, "small", ws)
    assert out.exit_code == 1, out.output
    assert f"version {v1}: imported" in out.output
    assert f"version {v2}: rejected" in out.output and "row 3, field 'label'" in out.output
    assert "'great' is not one of the dataset's labels" in out.output
    assert f"version {v3}: skipped: no artifact 'predictions.csv'" in out.output
    assert f"not imported: {v2}" in out.output
    with session_scope(factory) as s:
        releases = dict(s.execute(select(Release.version, Release.id).join(Model).where(Model.name == name)).all())
        assert list(releases) == [v1]  # nothing of the rejected version
        assert s.scalar(select(func.count()).select_from(Prediction).where(Prediction.dataset_id == ds)) == 60
        tags_v1 = s.get(Release, releases[v1]).tags["mlflow"]
        assert tags_v1["registered_model"] == name and tags_v1["version"] == v1
        assert s.scalar(select(func.count()).select_from(MlflowConnector)
                        .where(MlflowConnector.dataset_id == ds)) == 1

    again = connect(None, mlflow_server.uri, name, "small", ws)
    assert f"version {v1}: duplicate" in again.output
    with session_scope(factory) as s:
        assert s.scalar(select(func.count()).select_from(ImportBatch).where(ImportBatch.dataset_id == ds,
                                                                            ImportBatch.kind == ImportKind.PREDICTIONS)) == 1
        assert s.scalar(select(func.count()).select_from(MlflowConnector)
                        .where(MlflowConnector.dataset_id == ds)) == 1

    unknown = connect(None, mlflow_server.uri, name, "small", ws, "--version", "99")
    assert unknown.exit_code == 1 and "has no version(s) 99" in unknown.output
    secret = connect(None, mlflow_server.uri.replace("http://", "http://user:pw@"), name, "small", ws)
    assert secret.exit_code == 2 and "must not hold credentials" in secret.output
    missing = connect(None, mlflow_server.uri, "no-such-model-" + name, "small", ws)
    assert missing.exit_code == 1 and "has no registered model" in missing.output

    # A version whose predictions are in its model files, under other column names (JSONL).
    other = f"{name}-files"
    rows = "".join(f'{{"uid": "i{n}", "probabilities": [0.8, 0.1, 0.1]}}\n' for n in range(60)).encode()
    w1 = register(client, other, {"model/preds.jsonl": rows}, source_subdir="model")
    out = connect(None, mlflow_server.uri, other, "small", ws, "--artifact-root", "model", "--artifact-path",
                  "preds.jsonl", "--field", "item_id=uid", "--auditor-model", "files-model")
    assert out.exit_code == 0 and f"version {w1}: imported" in out.output, out.output

    # Without a worker: audit here, then write back (no base URL: the links are paths).
    done = runner.run_audit(factory, ds, task_id="inline-1", options=AuditOptions(n_bootstrap=10),
                            lease=timedelta(seconds=60))
    assert done.state == "succeeded"
    result = connector.write_back(factory, ds)
    assert result["state"] == "written" and result["run_id"] == done.run_id
    shown = tags(client, name, v1)
    assert shown[P + "audit_run_url"] == f"/api/v1/audit-runs/{done.run_id}"
    assert shown[P + "certified"] in ("true", "false") and shown[P + "dataset"] == "small"
    # The rejected version says why in its own tags; the skipped one (no artifact) has none.
    assert set(tags(client, name, v2)) == {P + "rejected"} and tags(client, name, v3) == {}
    assert "row 3, field 'label'" in tags(client, name, v2)[P + "rejected"]
    assert tags(client, other, w1)[P + "audit_run_id"] == str(done.run_id)
    from auditor.web import create_app

    app = create_app()
    endpoint, args = app.url_map.bind("auditor.test").match(shown[P + "audit_run_url"])
    assert endpoint and args == {"audit_run_id": done.run_id}

    # A late write-back never replaces a newer audit's verdict.
    client.set_model_version_tag(name, v1, P + "audit_run_id", str(done.run_id + 1000))
    client.set_model_version_tag(name, v1, P + "L", "newer")
    result = connector.write_back(factory, ds)
    assert any("newer audit run" in n for n in result["notes"])
    assert tags(client, name, v1)[P + "L"] == "newer"


def test_versions_registered_after_connect_are_swept_in_and_rejected_ones_tagged(
        tmp_path, pg_factory, redis_url, start_worker, mlflow_server):  # noqa: F811
    url, factory = pg_factory
    env = worker_env(tmp_path, url, redis_url, redis_url, AUDITOR_BASE_URL=BASE_URL, AUDITOR_MLFLOW_SYNC_SECONDS="2")
    client = mlflow_client(mlflow_server.uri)
    name = f"swept-{uuid.uuid4().hex[:6]}"
    ds, ws, good = small_rated_dataset(factory, "swept", seed=5)
    v1 = register(client, name, {"predictions.csv": csv_bytes(["item_id", "label"], good)})
    out = connect(env, mlflow_server.uri, name, "swept", ws)
    assert out.exit_code == 0 and f"version {v1}: imported" in out.output, out.output

    # Registered after the connection: the worker's periodic sweep (beat, as embedded) finds them.
    worker = start_worker(env)
    v2 = register(client, name, {"predictions.csv": csv_bytes(["item_id", "label"], good[::-1])})
    bad = [row[:] for row in good]
    bad[4][1] = "great"
    v3 = register(client, name, {"predictions.csv": csv_bytes(["item_id", "label"], bad)})

    def releases() -> list[str]:
        with session_scope(factory) as s:
            return sorted(s.scalars(select(Release.version).join(Model).where(Model.name == name)), key=int)

    wait_for(lambda: releases() == [v1, v2], 120, f"the sweep importing version {v2}", worker)
    reason = wait_for(lambda: tags(client, name, v3).get(P + "rejected"), 60, "the rejected tag", worker)
    assert "row 5, field 'label'" in reason and "'great' is not one of the dataset's labels" in reason
    assert P + "rejected" not in tags(client, name, v2)
    with session_scope(factory) as s:
        by = s.scalar(select(ImportBatch.submitted_by).join(Prediction, Prediction.batch_id == ImportBatch.id)
                      .join(Release, Release.id == Prediction.release_id).join(Model)
                      .where(Model.name == name, Release.version == v2).limit(1))
        assert by.startswith("mlflow connector")
    # The swept version is audited and its verdict written back like any other.
    run, shown = wait_for(lambda: written_for_current_audit(factory, ds, client, name, [v1, v2]), 180,
                          f"the verdicts of versions {v1} and {v2} in MLflow", worker)
    assert shown[v2][P + "audit_run_url"] == f"{BASE_URL}/api/v1/audit-runs/{run.id}"
    # Later sweeps leave it all alone: no second import of a version, no new data version.
    version = data_version(factory, ds)
    time.sleep(5)
    assert releases() == [v1, v2] and data_version(factory, ds) == version


# --- the pieces without a server ------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tracking_uri": "ftp://x"}, "expected http(s)://host[:port] or databricks"),
    ({"tracking_uri": "https://u:p@mlflow.example.com"}, "must not hold credentials"),
    ({"registered_model": " "}, "1 to 500 characters"),
    ({"artifact_path": "../predictions.csv"}, "no '..'"),
    ({"artifact_path": "/etc/predictions.csv"}, "relative path"),
    ({"artifact_path": "predictions.xlsx"}, "must end in .csv"),
    ({"artifact_root": "bucket"}, "expected one of"),
    ({"tag_prefix": "bad prefix!"}, "tag prefix"),
])
def test_a_bad_connection_is_refused_with_the_reason(kwargs, message):
    args = {"tracking_uri": "https://mlflow.example.com", "registered_model": "m", **kwargs}
    with pytest.raises(connector.ConnectorError, match=re.escape(message)):
        connector.Target.of(args.pop("tracking_uri"), args.pop("registered_model"), **args)
    ok = connector.Target.of("https://mlflow.example.com/", "m", artifact_path="eval/p.parquet")
    assert ok.tracking_uri == "https://mlflow.example.com" and ok.model_name == "m"


def test_parquet_rows_become_json_lines(tmp_path):
    src, dst = tmp_path / "p.parquet", tmp_path / "p.jsonl"
    pq.write_table(pa.table({"item_id": ["a", "b"], "probabilities": [[0.25, 0.75], [1.0, 0.0]],
                             "label": [None, "x"]}), src)
    connector._parquet_to_jsonl(src, dst, 1 << 20)
    assert [json.loads(line) for line in dst.read_text().splitlines()] == [
        {"item_id": "a", "probabilities": [0.25, 0.75], "label": None},
        {"item_id": "b", "probabilities": [1.0, 0.0], "label": "x"}]
    with pytest.raises(ValueError, match="expands past 10 bytes"):
        connector._parquet_to_jsonl(src, dst, 10)
    (tmp_path / "bad.parquet").write_bytes(b"item_id,label\na,x\n")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        connector._parquet_to_jsonl(tmp_path / "bad.parquet", dst, 1 << 20)


def test_base_url_setting():
    from auditor.config import load_worker_settings

    assert load_worker_settings({}).base_url is None
    assert load_worker_settings({"AUDITOR_BASE_URL": "https://a.example/x/"}).base_url == "https://a.example/x"
    with pytest.raises(ValueError, match="AUDITOR_BASE_URL"):
        load_worker_settings({"AUDITOR_BASE_URL": "a.example"})
