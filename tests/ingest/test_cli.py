"""The import commands: exit codes, messages, progress bar, migrations from the CLI."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from auditor.cli import main


def _run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_creates_imports_rejects_and_reports(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    assert "the database has no tables yet" in _run("datasets", "create", "d", "--labels", "x,y", "--url", url).output
    assert _run("db", "upgrade", "--url", url).exit_code == 0
    assert "labels ['x', 'y']" in _run("datasets", "create", "d", "--labels", "x,y", "--url", url).output

    good = tmp_path / "good.csv"
    good.write_text("item_id,annotator_id,label\ni1,w1,x\ni1,w2,y\n")
    out = _run("import", "annotations", str(good), "--dataset", "d", "--progress", "--url", url)
    assert out.exit_code == 0 and "imported: batch 1: 2 new annotation(s)" in out.output
    assert "importing good.csv" in out.stderr  # the progress bar, on stderr

    bad = tmp_path / "bad.csv"
    bad.write_text("item_id,annotator_id,label\ni2,w1,x\ni2,w3,maybe\n")
    out = _run("import", "annotations", str(bad), "--dataset", "d", "--url", url)
    assert out.exit_code == 1
    assert "row 2, field 'label': 'maybe' is not one of the dataset's labels ['x', 'y']" in out.output

    out = _run("import", "annotations", str(good), "--dataset", "nope", "--url", url)
    assert out.exit_code == 1 and "unknown dataset 'nope'" in out.output
    out = _run("import", "annotations", str(good), "--dataset", "d", "--field", "item_id", "--url", url)
    assert out.exit_code == 2 and "expected FIELD=COLUMN" in out.output
    assert "d\tlabels=x,y\titems=1\tdata_version=1" in _run("datasets", "list", "--url", url).output


def _upgraded(tmp_path, monkeypatch, **env) -> str:
    """A migrated SQLite database that this environment's settings (and workers) use."""
    url = f"sqlite:///{tmp_path / 'env.sqlite3'}"
    monkeypatch.setenv("AUDITOR_INSTANCE_PATH", str(tmp_path))
    monkeypatch.setenv("AUDITOR_DATABASE_URL", url)
    monkeypatch.delenv("AUDITOR_WORKSPACE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _run("db", "upgrade").exit_code == 0
    return url


def test_cli_commands_use_the_demo_workspace_or_the_setting_and_say_which(tmp_path, monkeypatch):
    from auditor.db import Dataset, Workspace, make_engine, make_session_factory
    from auditor.ingest import get_workspace

    url = _upgraded(tmp_path, monkeypatch, AUDITOR_BROKER_URL="redis://127.0.0.1:1/0")
    good = tmp_path / "a.csv"
    good.write_text("item_id,annotator_id,label\ni1,w1,x\ni1,w2,y\n")
    # No demo workspace: 'default', and the output says so.
    out = _run("datasets", "create", "first", "--labels", "x,y")
    assert "dataset 'first' in workspace 'default'" in out.output
    # The demo's database: its workspace (the one its admin sees) is the default.
    engine = make_engine(url)
    factory = make_session_factory(engine)
    with factory() as s:
        get_workspace(s, "demo", create=True)
        s.commit()
    out = _run("datasets", "create", "rte", "--labels", "x,y")
    assert "dataset 'rte' in workspace 'demo'" in out.output
    out = _run("import", "annotations", str(good), "--dataset", "rte")
    assert out.exit_code == 0 and "(workspace 'demo')" in out.output
    assert "rte\tlabels=x,y\titems=1\tdata_version=1" in _run("datasets", "list").output
    # AUDITOR_WORKSPACE, then --workspace, win.
    monkeypatch.setenv("AUDITOR_WORKSPACE", "acme")
    assert "in workspace 'acme'" in _run("datasets", "create", "rte", "--labels", "x,y").output
    assert "in workspace 'other'" in _run("datasets", "create", "rte", "--labels", "x,y",
                                          "--workspace", "other").output
    out = _run("import", "annotations", str(good), "--dataset", "rte")
    assert out.exit_code == 0 and "(workspace 'acme')" in out.output
    with factory() as s:
        from sqlalchemy import select

        where = set(s.execute(select(Dataset.name, Workspace.slug).join(Workspace)).all())
    engine.dispose()
    assert where == {("first", "default"), ("rte", "demo"), ("rte", "acme"), ("rte", "other")}


def _redis_or_skip() -> str:
    import os
    import socket
    import uuid

    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
    except OSError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("Redis not reachable at 127.0.0.1:6379 (CI=true: the test must run)", pytrace=False)
        pytest.skip("Redis not reachable at 127.0.0.1:6379")
    return f"redis://127.0.0.1:6379/{int(uuid.uuid4().int % 14) + 1}"


@pytest.mark.services
def test_cli_import_enqueues_its_audit_after_commit(tmp_path, monkeypatch):
    """The CLI asks the workers for the audit at once, as the HTTP import does (not at the next sweep)."""
    import json
    import uuid

    import redis

    broker = _redis_or_skip()
    from auditor.worker import audit_queue

    default = f"auditor-test-{uuid.uuid4().hex[:8]}"
    queue = audit_queue(default)  # audits have a queue of their own, served first
    _upgraded(tmp_path, monkeypatch, AUDITOR_BROKER_URL=broker, AUDITOR_CELERY_QUEUE=default)
    r = redis.Redis.from_url(broker)
    try:
        assert _run("datasets", "create", "d", "--labels", "x,y").exit_code == 0
        good = tmp_path / "good.csv"
        good.write_text("item_id,annotator_id,label\ni1,w1,x\ni1,w2,y\n")
        out = _run("import", "annotations", str(good), "--dataset", "d")
        assert out.exit_code == 0 and "audit requested" in out.output, out.output
        [message] = [json.loads(m) for m in r.lrange(queue, 0, -1)]
        assert message["headers"]["task"] == "workers.tasks.audit_dataset"
        assert message["headers"]["argsrepr"] == "(1,)"
        # The same file again changes nothing and asks for nothing.
        out = _run("import", "annotations", str(good), "--dataset", "d")
        assert "duplicate" in out.output and r.llen(queue) == 1
        # Broker down: the import still succeeds, and says the sweep will start the audit.
        monkeypatch.setenv("AUDITOR_BROKER_URL", "redis://127.0.0.1:1/0")
        good.write_text("item_id,annotator_id,label\ni2,w1,x\n")
        out = _run("import", "annotations", str(good), "--dataset", "d")
        assert out.exit_code == 0 and "imported: batch 2" in out.output
        assert "broker is unreachable; the periodic sweep will start it" in out.output
    finally:
        r.delete(queue, default)
        r.close()
