"""docker-compose.yml and .env.example stay consistent with the code."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from auditor.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))


def test_compose_services_health_and_volumes():
    compose = _compose()
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "web", "worker", "beat"}
    for name in ("postgres", "redis", "web", "worker"):
        assert "healthcheck" in services[name], name
    assert set(compose["volumes"]) == {"pgdata", "redisdata"}
    # migrations run once before the application containers start
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["command"] == ["auditor", "db", "upgrade"]


def test_compose_commands_exist():
    services = _compose()["services"]
    commands = {services[s]["command"][1] for s in ("migrate", "worker", "beat")}
    assert commands <= set(main.commands)
    assert "upgrade" in main.commands["db"].commands
    assert "auditor.web:create_app()" in services["web"]["command"]


def test_compose_has_no_default_secret():
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    for var in ("AUDITOR_SECRET_KEY", "POSTGRES_PASSWORD"):
        uses = re.findall(r"\$\{" + var + r"([^}]*)\}", text)
        assert uses and all(u.startswith(":?") for u in uses), var
