"""The demo simulator: its oracle is consistent with its data, and the bounds hold on it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from click.testing import CliRunner

from auditor.cli import main
from auditor.simulate import Scenario, simulate
from auditor.stats import annotations_from_records, certify, group_upper_bounds, upper_bounds


def test_simulated_operation_matches_its_oracle_and_the_bounds_hold():
    data = simulate(Scenario(n_items=3000, seed=11))
    frame = pd.DataFrame(data.annotations)
    ann = annotations_from_records(frame, labels=data.oracle["labels"])
    truth = data.oracle["truth"]
    # the oracle's accuracies are those of the rows written
    acc = (frame["label"] == frame["item_id"].map(truth)).groupby(frame["annotator_id"]).mean()
    for name, value in data.oracle["annotator_accuracy"].items():
        assert acc[name] == value
    ub = upper_bounds(ann.counts())
    assert ub.theoretical >= data.oracle["average_annotator_accuracy"]
    vendors = group_upper_bounds(ann, dict(zip(frame["annotator_id"], frame["vendor"], strict=True)))
    for vendor, true_acc in data.oracle["vendor_accuracy"].items():
        assert vendors[vendor].theoretical >= true_acc
    verdicts = {}
    pos = {item: i for i, item in enumerate(ann.items)}
    for version, rows in data.predictions.items():
        probs = np.zeros((len(rows), len(data.oracle["labels"])))
        for r in rows:
            probs[pos[r["item_id"]]] = [r[lab] for lab in data.oracle["labels"]]
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
        res = certify(ann, probs)
        assert res.l <= data.oracle["release_accuracy"][version] + 0.01
        verdicts[version] = res.certified
    # releases improve, and only the last one crosses into "certified"
    assert list(verdicts.values()) == [False, False, False, True]


def test_simulate_command_writes_files(tmp_path):
    res = CliRunner().invoke(main, ["simulate", "--out", str(tmp_path), "--items", "200", "--seed", "3"])
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["annotations.csv", "gold.csv", "oracle.json", "predictions-1.0.csv", "predictions-1.1.csv",
                     "predictions-2.0.csv", "predictions-2.1.csv"]
    oracle = json.loads((tmp_path / "oracle.json").read_text())
    assert len(oracle["truth"]) == 200
    # the files feed `auditor certify` directly
    res = CliRunner().invoke(main, ["certify", str(tmp_path / "annotations.csv"),
                                    str(tmp_path / "predictions-2.1.csv"), "--gold", str(tmp_path / "gold.csv"),
                                    "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out["vendors"]) == {"acme-labeling", "bolt-annotations", "in-house experts"}
