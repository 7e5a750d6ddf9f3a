"""The browser libraries served from ``auditor/web/static/vendor``: each file is the pinned one
from its npm package (SHA-256 in ``vendored.json``, checked offline by the refresh script),
its licence is beside it, and nothing else is in the folder."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "auditor" / "web" / "static" / "vendor"


def _script():
    spec = importlib.util.spec_from_file_location("refresh_vendored", ROOT / "scripts" / "refresh_vendored.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_vendored_file_is_the_pinned_one_with_its_licence_beside_it():
    script = _script()
    manifest = script.load()
    assert script.check(manifest) == []
    listed = {pin["to"] for entry in manifest["packages"].values() for pin in entry["files"].values()}
    present = {str(p.relative_to(VENDOR)) for p in VENDOR.rglob("*") if p.is_file()} - {"vendored.json"}
    assert present == listed
    for name, entry in manifest["packages"].items():
        assert entry["integrity"].startswith("sha512-") and entry["version"][0].isdigit(), name
        licences = [pin["to"] for source, pin in entry["files"].items() if source.split("/")[-1] == "LICENSE"]
        assert licences, f"{name} has no licence beside it"
        text = (VENDOR / licences[0]).read_text(encoding="utf-8")
        assert entry["license"].split("-")[0] in text.replace("Apache License", "Apache"), name
    assert manifest["packages"]["uplot"]["license"] == "MIT"


def test_a_changed_file_is_caught(tmp_path, monkeypatch):
    script = _script()
    manifest = json.loads((VENDOR / "vendored.json").read_text(encoding="utf-8"))
    entry = manifest["packages"]["uplot"]
    copy = tmp_path / "vendor"
    for pin in entry["files"].values():
        target = copy / pin["to"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((VENDOR / pin["to"]).read_bytes())
    monkeypatch.setattr(script, "VENDOR", copy)
    only = {"packages": {"uplot": entry}}
    assert script.check(only) == []
    (copy / "uplot" / "uPlot.iife.min.js").write_text("/* not uPlot */", encoding="utf-8")
    assert script.check(only) == ["uplot: uplot/uPlot.iife.min.js does not match its pinned SHA-256"]
