"""The feeds' layering, read from the source: connectors call ingestion and the database,
never the worker, the web app or the CLI (the worker's feed tasks call them, with the
worker's public session factory); ingestion knows no connector (the Label Studio
annotation reading they share lives in ``auditor.ingest.labelstudio``); and none of them
imports another package's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "auditor"


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every import in the file, function-level ones included."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, a.name) for a in node.names]
    return out


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(("package", "forbidden"), [
    ("connectors", ("auditor.worker", "auditor.web", "auditor.cli")),
    ("ingest", ("auditor.connectors", "auditor.worker", "auditor.web", "auditor.cli")),
])
def test_a_lower_layer_imports_no_upper_one(package, forbidden):
    found = [f"{path.relative_to(ROOT.parent)}: {module}" for path in _files(package)
             for module, _ in _imports(path) if module.startswith(forbidden)]
    assert found == []


@pytest.mark.parametrize("path", [*_files("connectors"), ROOT / "worker" / "feeds.py", ROOT / "web" / "labelstudio.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_is_imported_across_packages(path):
    own = path.relative_to(ROOT).parts[0]
    found = [f"{module}.{name}" for module, name in _imports(path)
             if name and name.startswith("_") and module.startswith("auditor.")
             and module.split(".")[1] != own]
    assert found == []
