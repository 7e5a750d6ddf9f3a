"""One catalog of settings (:mod:`auditor.envfile`): ``.env.example`` is rendered from it,
every ``AUDITOR_*`` name the code reads is in it, and setting each variable changes what
its reader sees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from auditor.config import load_settings, load_worker_settings
from auditor.envfile import render_env_example, variables

ROOT = Path(__file__).resolve().parents[1]
CATALOG = variables()


def test_env_example_is_rendered_from_the_catalog():
    assert (ROOT / ".env.example").read_text(encoding="utf-8") == render_env_example(), (
        "regenerate it: auditor settings env-example > .env.example")


def test_every_variable_the_code_reads_is_in_the_catalog():
    used = set()
    for folder in ("auditor", "workers", "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"AUDITOR_[A-Z_]*[A-Z]", path.read_text(encoding="utf-8")))
    for path in (ROOT / "docker-compose.yml", ROOT / "Dockerfile"):
        used |= set(re.findall(r"AUDITOR_[A-Z_]*[A-Z]", path.read_text(encoding="utf-8")))
    assert used - set(CATALOG) == set()


def _by_scope(scope):
    return [v for v in CATALOG.values() if v.scope == scope]


@pytest.mark.parametrize("var", _by_scope("settings"), ids=lambda v: v.name)
def test_each_deployment_setting_reaches_its_field(var, tmp_path):
    env = {"AUDITOR_INSTANCE_PATH": str(tmp_path)} if var.name != "AUDITOR_INSTANCE_PATH" else {}
    default = getattr(load_settings(env), var.field)
    changed = getattr(load_settings({**env, var.name: var.sample}), var.field)
    if var.name == "AUDITOR_SECRET_KEY":  # the default is a new random key each time
        assert changed == var.sample
    else:
        assert changed != default
    if var.shows_default and var.value:  # the value .env.example shows is the real default
        assert getattr(load_settings({**env, var.name: var.value}), var.field) == default


@pytest.mark.parametrize("var", _by_scope("worker"), ids=lambda v: v.name)
def test_each_worker_setting_reaches_its_field(var):
    default = getattr(load_worker_settings({}), var.field)
    assert getattr(load_worker_settings({var.name: var.sample}), var.field) != default
    if var.shows_default and var.value:
        assert getattr(load_worker_settings({var.name: var.value}), var.field) == default


def test_the_rate_limit_storage_reaches_the_app(monkeypatch, tmp_path):
    from auditor.web import create_app

    var = CATALOG["AUDITOR_RATELIMIT_STORAGE_URL"]
    assert var.scope == "web-app"
    monkeypatch.setenv("AUDITOR_INSTANCE_PATH", str(tmp_path))
    monkeypatch.setenv("AUDITOR_RATELIMIT_STORAGE_URL", "memory://")
    assert create_app().config["RATELIMIT_STORAGE_URI"] == "memory://"
    monkeypatch.setenv("AUDITOR_BROKER_URL", "redis://127.0.0.1:6379/3")
    monkeypatch.delenv("AUDITOR_RATELIMIT_STORAGE_URL")
    assert create_app().config["RATELIMIT_STORAGE_URI"] == "redis://127.0.0.1:6379/3"


def test_the_cli_workspace_setting_is_the_default_workspace(monkeypatch):
    from click.testing import CliRunner

    from auditor.cli import main

    assert CATALOG["AUDITOR_WORKSPACE"].scope == "cli"
    seen = {}

    @main.command("probe-workspace", hidden=True)
    @__import__("auditor.cli._workspace", fromlist=["workspace_option"]).workspace_option()
    def probe(workspace):
        seen["workspace"] = workspace

    try:
        result = CliRunner().invoke(main, ["probe-workspace"], env={"AUDITOR_WORKSPACE": "acme"})
        assert result.exit_code == 0 and seen["workspace"] == "acme"
    finally:
        main.commands.pop("probe-workspace", None)


@pytest.mark.parametrize("var", _by_scope("compose"), ids=lambda v: v.name)
def test_each_compose_variable_is_used_by_the_compose_file(var):
    assert "${" + var.name in (ROOT / "docker-compose.yml").read_text(encoding="utf-8")


@pytest.mark.parametrize("var", _by_scope("tests"), ids=lambda v: v.name)
def test_each_tool_variable_has_a_reader(var):
    texts = [p.read_text(encoding="utf-8") for folder in ("tests", "bench") for p in (ROOT / folder).rglob("*.py")
             if p.name != "test_settings_catalog.py"]
    assert any(var.name in t for t in texts)
