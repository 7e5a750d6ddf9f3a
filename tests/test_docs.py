"""The documentation: the README a newcomer reads first, and the site built from docs/.

``mkdocs build --strict`` fails on a broken link between pages, a page left out of the
navigation, or a link to a missing file; the README stays short, keeps the commands CI and
the demo test run verbatim, and links only to pages that exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: The README's two commands: the demo (tests/test_demo.py runs it) and the test suite (.ci/run runs it).
DEMO = "python3 -m venv .venv && .venv/bin/pip install -c requirements.lock -e . && .venv/bin/auditor demo"
TESTS = ("python3 -m venv .venv && .venv/bin/pip install -c requirements-test.lock -e '.[test]' && "
         ".venv/bin/python -m pytest")


def test_the_site_builds_strictly(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
                          "--config-file", str(ROOT / "mkdocs.yml")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    built = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    for page in ("statistics", "integrations", "operations", "python-api", "architecture", "decisions"):
        assert f"{page}/index.html" in built


def test_the_readme_is_short_and_keeps_its_two_commands():
    assert len(README.splitlines()) <= 250
    assert DEMO in README and TESTS in README
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert TESTS in ci  # CI runs the README's test command, verbatim


def test_the_readme_links_to_files_that_exist():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert any(link.startswith("docs/") for link in local)
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing


def test_every_docs_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert pages and all(f": {p}" in nav for p in pages), [p for p in pages if f": {p}" not in nav]
