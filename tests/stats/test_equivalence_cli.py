"""``auditor equivalence`` and the power-curve figure."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from auditor.cli import main
from auditor.stats import plot_power_curve, power_curve, survey_equivalence


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A wide ratings file, soft and hard predictions, and expert ratings (synthetic)."""
    rng = np.random.default_rng(0)
    n = 300
    state = rng.choice([0.15, 0.85], size=n)
    ratings = np.where(rng.random((n, 6)) < state[:, None], "yes", "no").astype(object)
    ratings[rng.random((n, 6)) < 0.1] = ""
    ratings[:, :2] = np.where(rng.random((n, 2)) < state[:, None], "yes", "no")
    items = [f"item{i}" for i in range(n)]
    d = tmp_path_factory.mktemp("eq")
    wide = pd.DataFrame(ratings, columns=[f"r{j}" for j in range(6)])
    wide.insert(0, "item_id", items)
    wide.to_csv(d / "ratings.csv", index=False)
    p_yes = np.clip(state + rng.normal(0, 0.1, n), 0.05, 0.95)
    pd.DataFrame({"item_id": items, "no": 1 - p_yes, "yes": p_yes}).to_csv(d / "soft.csv", index=False)
    pd.DataFrame({"item_id": items, "label": np.where(p_yes > 0.5, "yes", "no")}).to_csv(d / "hard.csv", index=False)
    expert = np.where(rng.random((n, 3)) < state[:, None], "yes", "no")
    records = [(items[i], f"e{j}", expert[i, j]) for i in range(n) for j in range(3)]
    pd.DataFrame(records, columns=["item_id", "annotator_id", "label"]).to_csv(d / "expert.csv", index=False)
    codes = np.where(ratings == "yes", 1, np.where(ratings == "no", 0, -1)).astype(np.int64)
    return d, codes, np.column_stack([1 - p_yes, p_yes])


def test_cli_json_matches_the_library(files):
    d, codes, probs = files
    result = CliRunner().invoke(main, ["equivalence", str(d / "ratings.csv"), str(d / "soft.csv"),
                                       "--bootstrap", "100", "--seed", "3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    lib = survey_equivalence(codes, probs, combiner="abc", scorer="cross_entropy", n_bootstrap=100, rng=3)
    assert out["labels"] == ["no", "yes"]
    assert out["value"] == pytest.approx(lib.value)
    assert out["curve"]["mean"] == pytest.approx(lib.curve.mean.tolist())
    assert out["classifier_score"]["value"] == pytest.approx(lib.classifier_score.value)


def test_cli_table_hard_predictions_reference_raters_and_plot(files, tmp_path):
    d, _, _ = files
    png = tmp_path / "curve.png"
    result = CliRunner().invoke(main, ["equivalence", str(d / "ratings.csv"), str(d / "hard.csv"),
                                       "--combiner", "majority", "--scorer", "agreement",
                                       "--reference", str(d / "expert.csv"), "--bootstrap", "50",
                                       "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "survey equivalence:" in result.output
    assert "classifier score:" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_curve_only_and_errors(files):
    d, _, _ = files
    runner = CliRunner()
    ok = runner.invoke(main, ["equivalence", str(d / "ratings.csv"), "--bootstrap", "0",
                              "--combiner", "frequency", "--scorer", "agreement"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.count("\n") == 2 + 6  # header lines and k = 0..5
    bad = runner.invoke(main, ["equivalence", str(d / "ratings.csv"), str(d / "hard.csv")])
    assert bad.exit_code != 0
    assert "cross-entropy needs (N, L) probabilities" in bad.output
    ragged = runner.invoke(main, ["equivalence", str(d / "ratings.csv"), "--scorer", "f1",
                                  "--combiner", "plurality"])
    assert ragged.exit_code != 0 and "min_labels" in ragged.output


def test_plot_draws_without_pyplot_and_saves_svg(files, tmp_path):
    _, codes, probs = files
    eq = survey_equivalence(codes, probs, combiner="abc", scorer="cross_entropy", n_bootstrap=30, rng=0)
    had_pyplot = "matplotlib.pyplot" in sys.modules
    import matplotlib

    backend = matplotlib.get_backend() if had_pyplot else None
    fig = plot_power_curve(eq.curve, equivalence=eq, center=True, path=tmp_path / "curve.svg")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "number of raters k"
    assert len(ax.lines) >= 2  # the curve and the classifier's line
    assert (tmp_path / "curve.svg").read_text().lstrip().startswith("<?xml")
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot
    if had_pyplot:
        assert matplotlib.get_backend() == backend
    curve = power_curve(codes, combiner="frequency", scorer="agreement", n_bootstrap=0)
    assert plot_power_curve(curve).axes[0].get_title() == "frequency + agreement"


def test_cli_expert_equivalence(files):
    d, _, _ = files
    result = CliRunner().invoke(main, ["equivalence", str(d / "ratings.csv"), "--reference",
                                       str(d / "expert.csv"), "--bootstrap", "30", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out["value"]) == len(out["pool_curve"]["k"]) == 7
    assert out["expert_curve"]["k"] == [0, 1, 2]
    table = CliRunner().invoke(main, ["equivalence", str(d / "ratings.csv"), "--reference",
                                      str(d / "expert.csv"), "--bootstrap", "0"])
    assert table.exit_code == 0, table.output
    assert "expert equivalence" in table.output


def _twelve_raters(tmp_path, flip_every: int = 0):
    """60 yes/no items rated by 12 raters (ratings.csv) and a classifier's labels (hard.csv): the
    items' states, every ``flip_every``-th one flipped."""
    rng = np.random.default_rng(5)
    n = 60
    state = rng.random(n) < 0.5
    ratings = np.where(rng.random((n, 12)) < np.where(state, 0.8, 0.2)[:, None], "yes", "no")
    wide = pd.DataFrame(ratings, columns=[f"r{j}" for j in range(12)])
    wide.insert(0, "item_id", [f"i{i}" for i in range(n)])
    wide.to_csv(tmp_path / "ratings.csv", index=False)
    labels = state.copy()
    if flip_every:
        labels[::flip_every] = ~labels[::flip_every]
    pd.DataFrame({"item_id": wide["item_id"], "label": np.where(labels, "yes", "no")}).to_csv(
        tmp_path / "hard.csv", index=False)


def test_cli_table_shows_the_monte_carlo_error_of_sampled_rater_subsets(tmp_path):
    # F1 is not a mean of per-item terms: the rater-subset path; with 12 raters C(12, k)
    # exceeds 200 for k = 3..9, where 200 random subsets stand for all of them.
    _twelve_raters(tmp_path)
    args = ["equivalence", str(tmp_path / "ratings.csv"), str(tmp_path / "hard.csv"), "--combiner", "majority",
            "--scorer", "f1", "--bootstrap", "0", "--seed", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["k", "c_k"])
    assert header.split()[-2:] == ["MC", "s.e."]
    rows = {int(line.split()[0]): float(line.split()[-1]) for line in lines[lines.index(header) + 1:]
            if line.split() and line.split()[0].isdigit()}
    assert [k for k, se in rows.items() if se > 0] == list(range(3, 10))
    payload = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert np.count_nonzero(payload["curve"]["mc_error"]) == 7


def test_cli_shows_the_monte_carlo_error_of_an_equivalence_read_off_sampled_points(tmp_path):
    """A classifier crossing the curve between an exact point (k = 2) and a sampled one (k = 3):
    the equivalence line gives its Monte Carlo error, and the JSON carries the same number."""
    _twelve_raters(tmp_path, flip_every=5)
    args = ["equivalence", str(tmp_path / "ratings.csv"), str(tmp_path / "hard.csv"), "--combiner", "majority",
            "--scorer", "f1", "--bootstrap", "0", "--seed", "1"]
    payload = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert 2 < payload["value"] < 3 and payload["mc_error"] > 0
    line = next(x for x in CliRunner().invoke(main, args).output.splitlines() if x.startswith("survey equivalence"))
    assert line.endswith(f"(MC s.e. {payload['mc_error']:.2g} raters)")
