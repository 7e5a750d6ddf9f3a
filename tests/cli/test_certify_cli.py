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
        ("item_id,label\n1,pos\n2,maybe\n3,pos\n", "field 'label': 'maybe' is not one of"),
        ("item_id,label\n7,pos\n8,neg\n", "predicts none of the 3 annotated items"),
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
    # Rows count from 1 after the header, as an import of the same file says (the tenth row).
    assert "row 10" in res.output and "'meh'" in res.output


@pytest.mark.parametrize("method", ["bernstein", "anytime", "anytime-fan"])
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


def test_certify_takes_predictions_on_part_of_the_items_by_the_services_rule(tmp_path):
    """U on every annotated item, L on the predicted ones, the confidence with each side's count: as an audit does."""
    import numpy as np

    from auditor.audit.pipeline import AuditOptions, release_arrays
    from auditor.stats import upper_bounds

    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, 80)
    rows = ["item_id,annotator_id,label"]
    for n, t in enumerate(truth):
        for a in range(3):
            label = t if rng.random() < 0.8 else 1 - t
            rows.append(f"i{n},a{a},{'pos' if label else 'neg'}")
    (tmp_path / "ann.csv").write_text("\n".join(rows) + "\n")
    predicted = sorted(rng.choice(80, 50, replace=False).tolist())
    guess = {n: truth[n] if rng.random() < 0.9 else 1 - truth[n] for n in predicted}
    lines = ["item_id,label"] + [f"i{n},{'pos' if g else 'neg'}" for n, g in guess.items()]
    lines += ["x1,pos", "x2,neg"]  # items without annotations: ignored, and counted
    (tmp_path / "part.csv").write_text("\n".join(lines) + "\n")

    res = CliRunner().invoke(main, ["certify", str(tmp_path / "ann.csv"), str(tmp_path / "part.csv"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    model = out["models"]["part"]
    assert (model["n_predicted"], model["n_ignored"], model["n_items_lower"]) == (50, 2, 50)
    assert model["n_items_upper"] == out["upper"]["n_items"] == 80

    # The audit's computation on the same data (the service's rule).
    counts = np.zeros((80, 2), dtype=np.int64)
    for row in rows[1:]:
        item, _, label = row.split(",")
        counts[int(item[1:]), int(label == "pos")] += 1
    ub = upper_bounds(counts)
    upper = {"u_t": ub.theoretical, "u_e": ub.empirical, "n_t": ub.n_items, "n_e": ub.n_items_empirical}
    info = {"release_id": 1, "model": "m", "version": "1", "labels": ["neg", "pos"], "n_predictions": 50}
    service = release_arrays(info, counts[predicted], np.array([guess[n] for n in predicted]), None, upper,
                             AuditOptions(n_bootstrap=20))["certifications"][0]
    assert model["l"] == pytest.approx(service["l"], abs=1e-12)
    assert model["n_items_lower"] == service["n_items_lower"]
    for bound, b in (("theoretical", "t"), ("empirical", "e")):
        for method in ("hms", "oms"):
            assert model["confidence"][f"{bound}/{method}"]["score"] == pytest.approx(service[f"s_{method}_{b}"],
                                                                                      abs=1e-12), (bound, method)
    assert model["verdict"]["certified"] == service["certified"]

    table = CliRunner().invoke(main, ["certify", str(tmp_path / "ann.csv"), str(tmp_path / "part.csv")])
    assert table.exit_code == 0, table.output
    assert "predicts 50 of the 80 annotated items; L rests on 50 of them, U_t on all 80" in table.output
    assert "2 prediction(s) for items without annotations ignored" in table.output


def test_certify_reads_every_format_an_import_reads(files):
    """The statistics commands read files with the service's readers: the same
    annotations as gzip, a JSONL ``labels`` list, a wide CSV and a Label Studio export
    give the bounds of the long CSV."""
    import gzip

    rows = [line.split(",") for line in ANNOTATIONS.strip().splitlines()[1:]]
    by_item: dict[str, dict[str, str]] = {}
    for item, annotator, label, _vendor in rows:
        by_item.setdefault(item, {})[annotator] = label
    (files / "ann.csv.gz").write_bytes(gzip.compress(ANNOTATIONS.encode()))
    (files / "wide.csv").write_text("item,a,b,c\n" + "".join(
        f"{i},{v.get('a', '')},{v.get('b', '')},{v.get('c', '')}\n" for i, v in by_item.items()))
    (files / "studio.json").write_text(json.dumps([
        {"id": int(i), "data": {"item_id": i}, "annotations": [
            {"completed_by": a, "result": [{"type": "choices", "value": {"choices": [lab]}}]} for a, lab in v.items()]}
        for i, v in by_item.items()]))

    def u_t(path):
        res = CliRunner().invoke(main, ["certify", str(path), str(files / "hard.csv"), "--json"])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)["upper"]["u_t"]

    want = u_t(files / "ann.csv")
    assert [u_t(files / name) for name in ("ann.csv.gz", "wide.csv", "studio.json")] == [want] * 3
    # The same file an import refuses is refused here, naming the row and the field.
    (files / "bad.csv").write_text("item_id,annotator_id,label\n1,a,pos\n,b,neg\n")
    res = CliRunner().invoke(main, ["certify", str(files / "bad.csv")])
    assert res.exit_code == 2 and "row 2, field 'item_id': missing" in res.output
