"""The layering the code keeps, checked as contracts (``[tool.importlinter]`` in pyproject.toml).

``lint-imports`` reads every module of ``auditor`` (statically: imports inside functions
count) and checks that the statistics import nothing of the service, that the persistence
layer imports neither the audit, the statistics nor the web app, that the connectors take
only the worker's public entry points, that the command line and the actions import no web
code, that no two packages of ``auditor`` (nor two modules of one package) import each
other, directly or through others, and that a private module (``_name.py``) is imported only
inside its package. A private name (``_name``) is not imported from another package either.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # (the contracts are read from pyproject.toml in the working directory)
    out = subprocess.run([exe, "--no-cache"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_the_layer_contracts_are_kept():
    report = _lint_imports()
    # every contract of the configuration ran, and none was broken
    assert "Contracts: 7 kept, 0 broken." in report, report


def test_the_contracts_name_the_layers_the_docs_describe():
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    by_id = {c["id"]: c for c in contracts}
    assert set(by_id) == {"stats-pure", "db-low", "connectors-public-worker", "cli-not-web", "actions-no-front-end",
                          "no-package-cycles", "private-modules"}
    assert {"auditor.db", "auditor.web", "auditor.worker"} <= set(by_id["stats-pure"]["forbidden_modules"])
    assert set(by_id["db-low"]["forbidden_modules"]) == {"auditor.audit", "auditor.stats", "auditor.web"}
    assert by_id["cli-not-web"]["forbidden_modules"] == ["auditor.web"]
    assert by_id["no-package-cycles"]["ancestors"] == ["auditor"]


#: Private names still imported from another package, each until its move lands (the test
#: fails when one goes, so that the entry goes with it).
PENDING_PRIVATE: set[tuple[str, str]] = set()


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_private_name_is_imported_across_packages():
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted((ROOT / "auditor").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("auditor."):
                names = {a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")}
                if names and _package(node.module) != _package(module):
                    found.setdefault((module, node.module), set()).update(names)
    assert set(found) == PENDING_PRIVATE, found


def test_the_architecture_page_shows_the_real_import_graph():
    """The graph in docs/architecture.md is the code's: package by package, what it imports."""
    import grimp

    graph = grimp.build_graph("auditor", cache_dir=None)
    real: dict[str, set[str]] = {}
    for module in graph.modules:
        a = _package(module)
        for imported in graph.find_modules_directly_imported_by(module):
            b = _package(imported)
            if a != b and "auditor" not in (a, b):
                real.setdefault(a.removeprefix("auditor."), set()).add(b.removeprefix("auditor."))
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("The package import graph", 1)[1].split("```", 2)[1]
    shown = {}
    for line in block.strip().splitlines():
        source, _, targets = line.split("#", 1)[0].partition("->")
        shown[source.strip()] = {t.strip() for t in targets.split(",")}
    printed = "\n".join(f"{a:<16} -> {', '.join(sorted(real[a]))}" for a in sorted(real))
    assert shown == real, f"the code's graph (paste it into docs/architecture.md):\n{printed}"
