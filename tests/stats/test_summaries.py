"""``summary()`` on the main results: the plain text the CLI prints, pinned to the
numbers of the result it summarises (each figure is the result's own, rounded)."""

from __future__ import annotations

import numpy as np
import pytest

from auditor.stats import (
    annotations_from_records,
    annotator_lower_bounds,
    best_performance,
    certify,
    check_assumptions,
    expert_equivalence,
    group_upper_bounds,
    grouped_bounds_summary,
    survey_equivalence,
    upper_bounds,
)


def _data(seed: int = 0, n: int = 300):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 3, n)
    counts = np.stack([rng.multinomial(5, np.where(np.arange(3) == t, 0.8, 0.1)) for t in truth])
    pred = np.where(rng.random(n) < 0.95, truth, (truth + 1) % 3)
    raters = np.stack([np.where(rng.random(n) < 0.8, truth, rng.integers(0, 3, n)) for _ in range(5)], axis=1)
    return counts, pred, raters


@pytest.mark.parametrize("method", ["oms", "anytime"])
def test_certification_summary_states_the_verdict_bounds_and_every_confidence(method):
    counts, pred, _ = _data()
    res = certify(counts, pred, method=method)
    lines = res.summary("mymodel").splitlines()
    verdict = "CERTIFIED" if res.certified else "not certified"
    assert lines[0] == f"mymodel: {verdict} (S_{method} with U_t = {res.score:.4f} ≥ 0.95)"
    assert f"L = {res.l:.4f} (majority, {res.lower.n_items} items)" in lines[1]
    assert f"U_t = {res.u_t:.4f} ({res.upper.n_items} items)" in lines[1]
    assert f"L-U_t = {res.margin_theoretical:+.4f}" in lines[1]
    rows = lines[3:3 + len(res.confidences)]
    for ((bound, m), c), row in zip(res.confidences.items(), rows, strict=True):
        cells = row.split()
        assert cells[:3] == [{"theoretical": "U_t", "empirical": "U_e"}[bound], m, f"{c.score:.4f}"]
    negative = any(c.score < 0 for c in res.confidences.values())
    assert ("A negative confidence" in lines[-1]) == negative


def test_a_negative_confidence_is_explained_and_undefined_margins_are_dashes():
    counts, pred, _ = _data(1, n=30)
    res = certify(counts, (pred + 1) % 3)  # a poor model: L far below U
    text = res.summary()
    assert "not certified" in text and text.endswith("not certified.")
    assert any(c.score < 0 for c in res.confidences.values())


def test_upper_bounds_summary():
    counts, _, _ = _data()
    ub = upper_bounds(counts)
    assert ub.summary() == (f"Average annotator, upper bounds on oracle accuracy: U_t = {ub.theoretical:.4f} "
                            f"(Theorem 1, {ub.n_items} items), U_e = {ub.empirical:.4f} "
                            f"(Definition 1, {ub.n_items_empirical} items)")


def test_best_summary_has_one_row_per_metric_with_its_score_error_and_method():
    counts, _, _ = _data()
    res = best_performance(counts, metrics=["f1 (macro)", "accuracy"])
    lines = res.summary(classes=["x", "y", "z"]).splitlines()
    assert lines[0] == f"{res.n_items} items ({res.n_distinct} distinct count vectors), 3 classes; prior: {res.fit.regime}"
    assert lines[1] == "alpha: " + ", ".join(f"{c}={a:.6g}" for c, a in zip("xyz", res.alpha, strict=True))
    assert [row[:30].strip() for row in lines[3:]] == ["f1 (macro)", "accuracy"]
    for row, m in zip(lines[3:], ["f1 (macro)", "accuracy"], strict=True):
        assert row.split()[-len(res.methods[m].split()) - 2:] == [
            f"{res.scores[m]:.4f}", f"{res.standard_errors[m]:.1e}", *res.methods[m].split()]


def test_survey_equivalence_summary_has_the_curve_the_score_and_the_crossing():
    _, pred, raters = _data()
    res = survey_equivalence(raters, pred, combiner="plurality", scorer="agreement", n_bootstrap=40, rng=0,
                             n_labels=3, matrix="raters")
    lines = res.summary().splitlines()
    curve = res.curve
    assert len(lines) == 1 + len(curve.k) + 2
    for i, k in enumerate(curve.k):
        assert lines[1 + i].split() == [str(k), f"{curve.mean[i]:.4f}", f"{curve.ci_low[i]:.4f}",
                                        f"{curve.ci_high[i]:.4f}", str(curve.n_items[i])]
    s = res.classifier_score
    assert lines[-2] == f"classifier score: {s.value:.4f} [{s.ci_low:.4f}, {s.ci_high:.4f}]"

    def fmt(x):
        return x if isinstance(x, str) else f"{x:.4f}"

    assert lines[-1] == f"survey equivalence: {fmt(res.value)} [{fmt(res.ci_low)}, {fmt(res.ci_high)}]"


def test_expert_equivalence_summary_has_a_row_per_k():
    _, _, raters = _data()
    res = expert_equivalence(raters[:, :3], raters[:, 3:], combiner="plurality", scorer="agreement",
                             n_bootstrap=20, rng=0, n_labels=3, matrix="raters")
    lines = res.summary().splitlines()
    assert len(lines) == 1 + len(res.pool_curve.k)
    for i, k in enumerate(res.pool_curve.k.tolist()):
        assert lines[1 + i].split()[:2] == [str(k), f"{res.pool_curve.mean[i]:.4f}"]


def _annotations(seed: int = 3):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 2, 60)
    records = [{"item": i, "annotator": a, "label": int(t if rng.random() < acc else 1 - t)}
               for i, t in enumerate(truth) for a, acc in (("a", 0.9), ("b", 0.8), ("c", 0.7))]
    return annotations_from_records(records, item="item", annotator="annotator", label="label"), truth


def test_annotator_and_grouped_bounds_summaries_list_each_row_with_its_numbers():
    ann, _ = _annotations()
    bounds = annotator_lower_bounds(ann)
    lines = bounds.summary().splitlines()
    records = sorted(bounds.to_records(), key=lambda r: -(r["agreement"] or 0))
    assert lines[0].split() == ["Annotator", "agreement", "lower", "95%", "items"]
    for line, r in zip(lines[1:], records, strict=True):
        assert line.split() == [r["annotator"], f"{r['agreement']:.4f}", f"{r['lower_confidence']:.4f}",
                                str(r["n_items"])]
    groups = group_upper_bounds(ann, {"a": "acme", "b": "acme", "c": "beta"})
    rows = grouped_bounds_summary(groups).splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["acme", "beta"]
    assert rows[0].split()[1:] == [f"{groups['acme'].theoretical:.4f}", f"{groups['acme'].empirical:.4f}",
                                   str(groups["acme"].n_items)]


def test_assumption_summary_states_each_check_and_its_verdict():
    ann, truth = _annotations()
    gold = {item: int(t) for item, t in zip(ann.items, truth, strict=True)}
    report = check_assumptions(ann, gold, predictions={"m": truth.copy()})
    lines = report.summary().splitlines()
    t1 = report.theorem1
    assert lines[0] == f"Assumption checks on {report.n_gold_items} gold items:"
    assert f"= {t1.conditional:.4f} vs P(l_i=l*) = {t1.marginal:.4f}: {'holds' if t1.holds else 'FAILS'}" in lines[1]
    assert f"{report.average_annotator_accuracy:.4f}" in lines[2]
    chk = report.models["m"]
    assert lines[3].startswith("  Theorem 3 for m:") and f"true accuracy {chk.true_accuracy:.4f}" in lines[3]
