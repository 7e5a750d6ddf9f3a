"""Connectors set from the command line pass the outgoing webhooks' address filter (issue 33,
defect 8): loopback, private, link-local (cloud metadata) and reserved addresses, literal or
resolved, are refused naming the option, unless ``--allow-private`` (or
``AUDITOR_CONNECTOR_ALLOW_PRIVATE=true``) opts in for a Label Studio or MLflow on this
machine or the private network. The refusal comes before anything is stored or contacted."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from auditor.cli import main

INTERNAL = ["http://169.254.169.254/", "http://127.0.0.1:8080", "http://10.1.2.3", "http://localhost:8080",
            "http://[::1]:8080", f"http://{socket.gethostname()}:8080"]


@pytest.fixture
def database(tmp_path, monkeypatch):
    monkeypatch.delenv("AUDITOR_CONNECTOR_ALLOW_PRIVATE", raising=False)
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    assert CliRunner().invoke(main, ["db", "upgrade", "--url", url]).exit_code == 0
    out = CliRunner().invoke(main, ["datasets", "create", "d", "--labels", "a,b", "--url", url, "--workspace", "w"])
    assert out.exit_code == 0, out.output
    return url


def _label_studio(url: str, database: str, *extra: str, env: dict | None = None):
    return CliRunner().invoke(main, ["connect", "label-studio", "--url", url, "--project", "1", "--dataset", "d",
                                     "--workspace", "w", "--token-env", "LS_TOKEN", "--no-sync", "--database-url",
                                     database, *extra], env={"LS_TOKEN": "t", **(env or {})})


def _mlflow(uri: str, database: str, *extra: str):
    return CliRunner().invoke(main, ["connect", "mlflow", "--tracking-uri", uri, "--model", "m", "--dataset", "d",
                                     "--workspace", "w", "--url", database, *extra])


@pytest.mark.parametrize("target", INTERNAL)
def test_an_internal_label_studio_or_mlflow_is_refused_without_the_opt_in(database, target):
    out = _label_studio(target, database)
    assert out.exit_code == 2 and "--url" in out.output, out.output
    assert "refused unless --allow-private" in out.output
    out = _mlflow(target, database)
    assert out.exit_code == 2 and "--tracking-uri" in out.output, out.output
    assert "refused unless --allow-private" in out.output


def test_the_opt_in_allows_a_label_studio_on_this_machine(database):
    """With --allow-private (or the setting) the address is taken: the connector is stored
    (--no-sync: nothing contacted)."""
    out = _label_studio("http://127.0.0.1:8080", database, "--allow-private")
    assert out.exit_code == 0, out.output
    out = _label_studio("http://127.0.0.1:8081", database, env={"AUDITOR_CONNECTOR_ALLOW_PRIVATE": "true"})
    assert out.exit_code == 0, out.output
