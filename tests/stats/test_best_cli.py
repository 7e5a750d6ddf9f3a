"""``auditor best``: Scoracle bodies, bare JSON matrices and CSV counts."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from auditor.cli import main
from auditor.stats import best_performance


@pytest.fixture
def runner():
    return CliRunner()


def test_scoracle_body_answers_the_api_response(runner, tmp_path):
    path = tmp_path / "body.json"
    path.write_text(json.dumps({"metrics": ["accuracy", "f1 (macro)"], "labelCounts": [[1, 3], [4, 0]]}))
    result = runner.invoke(main, ["best", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    expected = best_performance([[1, 3], [4, 0]], rng=0).scores
    assert out == [{"metric": "accuracy", "score": expected["accuracy"]},
                   {"metric": "f1 (macro)", "score": expected["f1 (macro)"]}]


def test_csv_with_header_and_ids_prints_a_table(runner, tmp_path):
    path = tmp_path / "counts.csv"
    path.write_text("item,yes,no\na,1,3\nb,4,0\nc,2,2\n")
    result = runner.invoke(main, ["best", str(path), "--metric", "accuracy"])
    assert result.exit_code == 0, result.output
    assert "alpha: yes=" in result.stdout and ", no=" in result.stdout
    expected = best_performance([[1, 3], [4, 0], [2, 2]], rng=0).scores["accuracy"]
    assert f"{expected:.4f}" in result.stdout
    assert "f1 (macro)" not in result.stdout


def test_bare_matrix_scores_all_four_metrics_and_reports_warnings(runner, tmp_path):
    path = tmp_path / "counts.json"
    path.write_text(json.dumps([[3, 0], [0, 0], [2, 0]]))
    result = runner.invoke(main, ["best", str(path)])
    assert result.exit_code == 0, result.output
    for name in ("accuracy", "balanced accuracy", "f1 (macro)", "cross entropy (soft labels)"):
        assert name in result.stdout
    assert "warning: 1 item(s) with no annotation excluded" in result.stderr


@pytest.mark.parametrize(("content", "suffix", "message"), [
    ("1,2\n3,-1\n", ".csv", "line 2, count column 2"),
    ("a,b\n1,2\n3,x\n", ".csv", "line 3, count column 2"),
    ('{"labelCounts": [[1, 2]], "metrics": ["auc"]}', ".json", "metrics[0]"),
    ("[[0, 0]]", ".json", "at least one annotation"),
    ("{not json", ".json", "not valid JSON"),
])
def test_bad_files_fail_with_a_usage_error(runner, tmp_path, content, suffix, message):
    path = tmp_path / f"bad{suffix}"
    path.write_text(content)
    result = runner.invoke(main, ["best", str(path)])
    assert result.exit_code == 2
    assert message in result.output
