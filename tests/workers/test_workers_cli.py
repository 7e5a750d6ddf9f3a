"""``auditor audit --json`` and the worker commands' wiring."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import main
from auditor.db import make_session_factory
from auditor.stats import upper_bounds
from tests.workers._data import import_annotations, import_predictions, make_dataset, synthetic


def test_audit_json_has_bounds_certification_equivalence_best_and_vendors(sqlite_engine, monkeypatch):
    factory = make_session_factory(sqlite_engine)
    truth, R = synthetic(80, 5, seed=2)
    ds = make_dataset(factory, "cli", ["no", "yes"])
    import_annotations(factory, ds, [(f"i{n}", f"r{r}", int(R[n, r])) for n in range(80) for r in range(5)],
                       vendors={f"r{r}": "acme" for r in range(5)})
    import_predictions(factory, ds, "m", "1", labels={f"i{n}": int(t) for n, t in enumerate(truth)})
    monkeypatch.setenv("AUDITOR_DATABASE_URL", sqlite_engine.url.render_as_string())
    monkeypatch.setenv("AUDITOR_AUDIT_BOOTSTRAP", "30")
    result = CliRunner().invoke(main, ["audit", "--dataset", "cli", "--inline", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    counts = np.stack([np.bincount(r, minlength=2) for r in R])
    assert out["bounds"]["u_t"] == pytest.approx(upper_bounds(counts).theoretical)
    [cert] = out["certifications"]
    assert (cert["model"], cert["version"]) == ("m", "1") and cert["verdict"] in ("certified", "not certified")
    assert {e["scorer"] for e in out["equivalence"]} == {"agreement"}
    assert {b["metric"] for b in out["best"]} == {"accuracy", "balanced accuracy", "f1 (macro)",
                                                  "cross entropy (soft labels)"}
    assert [v["vendor"] for v in out["vendor_reports"]] == ["acme"]
    assert out["audit_run"]["data_version"] == 2 and out["audit_run"]["status"] == "succeeded"
    # Without --json, a table naming the verdict.
    table = CliRunner().invoke(main, ["audit", "--dataset", "cli", "--inline"])
    assert table.exit_code == 0 and "m 1: L=" in table.output


def test_audit_unknown_dataset_is_an_error(sqlite_engine, monkeypatch):
    monkeypatch.setenv("AUDITOR_DATABASE_URL", sqlite_engine.url.render_as_string())
    result = CliRunner().invoke(main, ["audit", "--dataset", "nope", "--inline"])
    assert result.exit_code != 0 and "no dataset named 'nope'" in result.output


def test_worker_and_beat_commands_are_registered():
    for name in ("worker", "beat", "audit"):
        assert name in main.commands
    assert "--beat" in CliRunner().invoke(main, ["worker", "--help"]).output
