"""`auditor certify` on small files."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from auditor.cli import main

ANNOTATIONS = """item_id,annotator_id,label,vendor
1,a,pos,acme
1,b,pos,acme
1,c,neg,beta
2,a,neg,acme
2,b,neg,acme
2,c,neg,beta
3,a,pos,acme
3,c,pos,beta
3,b,neg,acme
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "ann.csv").write_text(ANNOTATIONS)
    (tmp_path / "hard.csv").write_text("item_id,label\n1,pos\n2,neg\n3,pos\n")
    (tmp_path / "soft.jsonl").write_text(
        "\n".join(json.dumps({"item_id": i, "neg": p, "pos": 1 - p}) for i, p in [(1, 0.2), (2, 0.6), (3, 0.9)])
    )
    (tmp_path / "gold.csv").write_text("item_id,label\n1,pos\n3,pos\n")
    return tmp_path


def test_certify_json(files):
    res = CliRunner().invoke(main, ["certify", str(files / "ann.csv"), str(files / "hard.csv"),
                                    str(files / "soft.jsonl"), "--gold", str(files / "gold.csv"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["n_items"] == 3 and out["labels"] == ["neg", "pos"]
    # per-item X^t: (4+1)/9, 9/9, (4+1)/9
    assert out["upper"]["u_t"] == pytest.approx(((5 / 9 + 1 + 5 / 9) / 3) ** 0.5)
    assert out["models"]["hard"]["l"] == pytest.approx(1.0)
    assert out["models"]["soft"]["l"] == pytest.approx(2 / 3)  # soft says neg on item 3
    assert set(out["vendors"]) == {"acme", "beta"}
    assert {a["annotator"] for a in out["annotators"]} == {"a", "b", "c"}
    assert out["assumptions"]["n_gold_items"] == 2


def test_certify_table(files):
    res = CliRunner().invoke(main, ["certify", str(files / "ann.csv"), str(files / "hard.csv"), "--annotators"])
    assert res.exit_code == 0, res.output
    assert "U_t = 0.8389" in res.output and "not certified" in res.output and "acme" in res.output


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("item_id,label\n1,pos\n2,maybe\n3,pos\n", "label 'maybe' is not one of"),
        ("item_id,label\n1,pos\n2,neg\n", "no prediction for item '3'"),
        ("item_id,label\n1,pos\n1,neg\n2,neg\n3,pos\n", "appears twice"),
        ("item_id,neg,pos\n1,0.5,0.6\n2,1,0\n3,0,1\n", "sum to 1"),
        ("item_id,neg,pos\n1,nan,0.6\n2,1,0\n3,0,1\n", "not a number"),
    ],
)
def test_certify_rejects_bad_predictions(files, content, match):
    (files / "bad.csv").write_text(content)
    res = CliRunner().invoke(main, ["certify", str(files / "ann.csv"), str(files / "bad.csv")])
    assert res.exit_code == 2
    assert match in res.output


def test_certify_rejects_unknown_label_with_row(files):
    (files / "bad_ann.csv").write_text(ANNOTATIONS + "4,a,meh,acme\n")
    res = CliRunner().invoke(main, ["certify", str(files / "bad_ann.csv"), "--labels", "neg,pos"])
    assert res.exit_code == 2
    assert "row 9" in res.output and "'meh'" in res.output


@pytest.mark.parametrize("method", ["bernstein", "anytime"])
def test_certify_with_the_variance_adaptive_methods(tmp_path, method):
    import numpy as np

    from auditor.stats import certify

    rng = np.random.default_rng(3)
    n = 400
    truth = rng.integers(0, 2, n)
    labels = np.where(rng.random((n, 5)) < 0.85, truth[:, None], 1 - truth[:, None])
    order = rng.permutation(n)  # the file lists items in this order
    rows = [f"it{j},r{r},{'pos' if labels[j, r] else 'neg'}" for j in order for r in range(5)]
    (tmp_path / "ann.csv").write_text("item_id,annotator_id,label\n" + "\n".join(rows) + "\n")
    (tmp_path / "m.csv").write_text("item_id,label\n" + "".join(f"it{j},{'pos' if truth[j] else 'neg'}\n"
                                                               for j in range(n)))
    res = CliRunner().invoke(main, ["certify", str(tmp_path / "ann.csv"), str(tmp_path / "m.csv"), "--method",
                                    method, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["models"]["m"]
    assert out["verdict"]["method"] == method
    counts = np.stack([(labels == 0).sum(axis=1), (labels == 1).sum(axis=1)], axis=1)
    direct = certify(counts[order], truth[order], method=method)
    assert -1 < direct.score and out["verdict"]["score"] == pytest.approx(direct.score, abs=1e-9)
    table = CliRunner().invoke(main, ["certify", str(tmp_path / "ann.csv"), str(tmp_path / "m.csv"), "--method",
                                      method])
    assert table.exit_code == 0 and f"S_{method}" in table.output
