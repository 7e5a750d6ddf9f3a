"""Checking the bounds' assumptions on items that have gold (oracle) labels.

The bounds of Xu, Walder & Xu rest on two assumptions that cannot be checked without
the oracle. Where some items have gold labels (an expert panel, adjudication, a
known answer), this module computes the quantities of the paper's Table 2 on them,
and the true accuracies beside the bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from auditor.jsonable import finite
from auditor.stats._summary import num
from auditor.stats.certification import UpperBounds, lower_bound, tie_credit, upper_bounds
from auditor.stats.counts import Annotations
from auditor.stats.validation import StatsInputError, as_count_matrix

__all__ = ["AssumptionReport", "Theorem1Check", "Theorem3Check", "check_assumptions"]


@dataclass(frozen=True)
class Theorem1Check:
    """Theorem 1 assumes :math:`P(\\ell_i = \\ell_\\star \\mid \\ell_j = \\ell_\\star) \\ge P(\\ell_i = \\ell_\\star)`, :math:`i \\ne j`.

    Both sides are pooled over ordered pairs of distinct annotators on the same gold
    item: for an item with :math:`K` labels of which :math:`c` are correct,
    ``conditional`` :math:`= \\sum c(c-1) / \\sum c(K-1)` and ``marginal``
    :math:`= \\sum c(K-1) / \\sum K(K-1)` (the plain accuracy when every item has the
    same number of labels).
    """

    conditional: float
    marginal: float
    n_items: int

    @property
    def holds(self) -> bool:
        return bool(self.conditional >= self.marginal)


@dataclass(frozen=True)
class Theorem3Check:
    """Theorem 3 for labeler ``b`` against aggregate ``a`` on gold items.

    Attributes
    ----------
    p_correct_given_a_wrong : float
        :math:`P(\\ell_b = \\ell_\\star \\mid \\ell_a \\ne \\ell_\\star)`.
    p_agree_given_a_wrong : float
        :math:`P(\\ell_b = \\ell_a \\mid \\ell_a \\ne \\ell_\\star)`: the wrong label ``a``
        gave, which is what the proof of Theorem 3 needs to be smaller.
    p_wrong_given_a_wrong : float
        :math:`\\sum_{x \\ne \\star} P(\\ell_b = \\ell_x \\mid \\ell_a \\ne \\ell_\\star)`, the
        paper's conservative Table 2(b) column.
    weight_a_wrong : float
        Expected number of gold items where ``a`` is wrong (ties count fractionally).
    true_accuracy : float
        :math:`P(\\ell_b = \\ell_\\star)` on the gold items.
    lower_bound : float
        :math:`L` computed on the same items, for comparison (should not exceed
        ``true_accuracy`` when the assumption holds).
    """

    p_correct_given_a_wrong: float
    p_agree_given_a_wrong: float
    p_wrong_given_a_wrong: float
    weight_a_wrong: float
    true_accuracy: float
    lower_bound: float
    n_items: int

    @property
    def holds(self) -> bool:
        """What the proof needs: b is right at least as often as it copies a's error."""
        if math.isnan(self.p_correct_given_a_wrong):
            return True  # a is never wrong: the inequality (12) holds trivially
        return bool(self.p_correct_given_a_wrong >= self.p_agree_given_a_wrong)

    @property
    def holds_conservative(self) -> bool:
        """The paper's stricter Table 2(b) check (against all wrong labels together)."""
        if math.isnan(self.p_correct_given_a_wrong):
            return True
        return bool(self.p_correct_given_a_wrong >= self.p_wrong_given_a_wrong)

    @property
    def bound_holds(self) -> bool:
        return bool(self.lower_bound <= self.true_accuracy + 1e-12)


@dataclass(frozen=True)
class AssumptionReport:
    """Assumption checks and true accuracies on the items with gold labels.

    ``annotators`` checks Theorem 3 for single annotators against the leave-one-out
    plurality of the others; ``models`` maps each model name to its check against
    the plurality of all annotators.
    """

    n_gold_items: int
    theorem1: Theorem1Check
    average_annotator_accuracy: float
    upper: UpperBounds
    annotators: Theorem3Check
    models: Mapping[str, Theorem3Check] = field(default_factory=dict)

    @property
    def upper_bound_holds(self) -> bool:
        """Whether the true average annotator accuracy is at most :math:`U_t`."""
        return bool(self.average_annotator_accuracy <= self.upper.theoretical + 1e-12)

    def summary(self) -> str:
        """A plain-text summary: Theorem 1's two sides, the true average accuracy against
        U_t, and Theorem 3 for each model, each with "holds" or "FAILS"."""
        t1 = self.theorem1

        def verdict(ok: bool) -> str:
            return "holds" if ok else "FAILS"

        lines = [f"Assumption checks on {self.n_gold_items} gold items:",
                 f"  Theorem 1: P(l_i=l*|l_j=l*) = {num(t1.conditional)} vs P(l_i=l*) = {num(t1.marginal)}: "
                 f"{verdict(t1.holds)}",
                 f"  true average annotator accuracy {num(self.average_annotator_accuracy)} "
                 f"≤ U_t on those items {num(self.upper.theoretical)}: {verdict(self.upper_bound_holds)}"]
        lines += [f"  Theorem 3 for {name}: P(m=l*|G≠l*) = {num(chk.p_correct_given_a_wrong)} vs "
                  f"P(m=G|G≠l*) = {num(chk.p_agree_given_a_wrong)}: {verdict(chk.holds)}; "
                  f"true accuracy {num(chk.true_accuracy)} vs L {num(chk.lower_bound)}"
                  for name, chk in self.models.items()]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        def num(x):
            return finite(x) if isinstance(x, float) else x

        def t3(c: Theorem3Check) -> dict:
            return {
                "p_correct_given_aggregate_wrong": num(c.p_correct_given_a_wrong),
                "p_agree_given_aggregate_wrong": num(c.p_agree_given_a_wrong),
                "p_wrong_given_aggregate_wrong": num(c.p_wrong_given_a_wrong),
                "true_accuracy": num(c.true_accuracy),
                "lower_bound": num(c.lower_bound),
                "holds": c.holds,
                "holds_conservative": c.holds_conservative,
                "bound_holds": c.bound_holds,
                "n_items": c.n_items,
            }

        return {
            "n_gold_items": self.n_gold_items,
            "theorem1": {
                "conditional": num(self.theorem1.conditional),
                "marginal": num(self.theorem1.marginal),
                "holds": self.theorem1.holds,
            },
            "average_annotator_accuracy": self.average_annotator_accuracy,
            "u_t": self.upper.theoretical,
            "u_e": num(self.upper.empirical),
            "upper_bound_holds": self.upper_bound_holds,
            "annotators_theorem3": t3(self.annotators),
            "models": {name: t3(c) for name, c in self.models.items()},
        }


def _anonymous_annotations(counts) -> Annotations:
    """Expand a count matrix into annotations by anonymous, per-item annotators."""
    m = as_count_matrix(counts)
    n, n_labels = m.shape
    item = np.repeat(np.repeat(np.arange(n), n_labels), m.ravel())
    label = np.repeat(np.tile(np.arange(n_labels), n), m.ravel())
    starts = np.repeat(np.concatenate([[0], np.cumsum(m.sum(axis=1))[:-1]]), m.sum(axis=1))
    annotator = np.arange(item.size) - starts  # position of the label within its item
    # Items without labels stay (so rows keep lining up with `gold`); no check uses them.
    return Annotations(item.astype(np.int64), annotator.astype(np.int64), label.astype(np.int64),
                       tuple(range(n)), tuple(range(int(annotator.max()) + 1)), tuple(range(n_labels)))


def _gold_codes(annotations: Annotations, gold) -> np.ndarray:
    """Gold labels as codes aligned with ``annotations.items``; -1 where unknown."""
    if isinstance(gold, Mapping):
        index = {lab: i for i, lab in enumerate(annotations.labels)}
        str_index = {str(lab): i for i, lab in enumerate(annotations.labels)}
        out = np.full(annotations.n_items, -1, dtype=np.int64)
        pos = {item: n for n, item in enumerate(annotations.items)}
        for item, lab in gold.items():
            if item not in pos:
                continue
            code = index.get(lab, str_index.get(str(lab)))
            if code is None:
                raise StatsInputError(f"`gold` item {item!r}: label {lab!r} is not one of {list(annotations.labels)}.")
            out[pos[item]] = code
        return out
    arr = np.asarray(gold)
    if arr.shape != (annotations.n_items,):
        raise StatsInputError(f"`gold` must have one entry per item ({annotations.n_items}); got shape {arr.shape}.")
    arr = arr.astype(np.int64)
    if ((arr < -1) | (arr >= annotations.n_labels)).any():
        raise StatsInputError("`gold` entries must be class indices, or -1 for unknown.")
    return arr


def _theorem3(votes: np.ndarray, b: np.ndarray, star: np.ndarray) -> tuple[float, float, float, float]:
    """Pooled Theorem 3 quantities for labels ``b`` against the plurality of ``votes``."""
    top = votes.max(axis=1, keepdims=True)
    tied = (votes == top) & (top > 0)
    p_g = tied / np.maximum(tied.sum(axis=1, keepdims=True), 1)  # P(G = x), random tie-break
    rows = np.arange(votes.shape[0])
    w = 1.0 - p_g[rows, star]  # P(G != *)
    p_agree_wrong = p_g[rows, b] * (b != star)  # P(G = b, G != *)
    total = w.sum()
    if total <= 0:
        return math.nan, math.nan, math.nan, 0.0
    correct = float((w * (b == star)).sum() / total)
    agree = float(p_agree_wrong.sum() / total)
    return correct, agree, 1.0 - correct, float(total)


def check_assumptions(annotations: Annotations, gold, *, predictions: Mapping | None = None) -> AssumptionReport:
    """Table 2 of Xu, Walder & Xu on the items that have gold labels.

    Parameters
    ----------
    annotations : Annotations, or array-like (N, L) of label counts
        With counts only (no annotator identities, e.g. CIFAR-10H), every check is
        still defined: each depends on the data through per-item counts.
    gold : mapping item → label, or array (N,) of class indices with -1 for unknown
        The oracle labels where they are known.
    predictions : mapping model name → array (N,) of class indices, optional
        Models to check Theorem 3 for, aligned with ``annotations.items``.

    Returns
    -------
    AssumptionReport

    Raises
    ------
    StatsInputError
        When no labeled item has a gold label.
    """
    if not isinstance(annotations, Annotations):
        annotations = _anonymous_annotations(annotations)
    star_all = _gold_codes(annotations, gold)
    counts_all = annotations.counts().counts
    has_gold = (star_all >= 0) & (counts_all.sum(axis=1) > 0)
    if not has_gold.any():
        raise StatsInputError("no labeled item has a gold label.")
    idx = np.flatnonzero(has_gold)
    counts = counts_all[idx]
    star = star_all[idx]
    k = counts.sum(axis=1).astype(float)
    c = counts[np.arange(idx.size), star].astype(float)

    pairs = k >= 2
    den_c = (c * (k - 1))[pairs].sum()
    t1 = Theorem1Check(
        conditional=float((c * (c - 1))[pairs].sum() / den_c) if den_c > 0 else math.nan,
        marginal=float(den_c / (k * (k - 1))[pairs].sum()) if pairs.any() else math.nan,
        n_items=int(pairs.sum()),
    )
    avg_acc = float((c / k).mean())
    ub = upper_bounds(counts)

    # Theorem 3 for single annotators: b = the annotation, a = plurality of the others.
    on_gold = has_gold[annotations.item]
    items, labs = annotations.item[on_gold], annotations.label[on_gold]
    others = counts_all[items].copy()
    others[np.arange(items.size), labs] -= 1
    keep = others.sum(axis=1) > 0
    others, labs, items = others[keep], labs[keep], items[keep]
    stars = star_all[items]
    ann = _theorem3(others, labs, stars)
    loo = tie_credit(others, labs)
    ann_check = Theorem3Check(*ann, true_accuracy=float((labs == stars).mean()) if labs.size else math.nan,
                              lower_bound=float(np.nanmean(loo)) if labs.size else math.nan,
                              n_items=int(np.unique(items).size))
    models = {}
    for name, pred in (predictions or {}).items():
        p = np.asarray(pred)
        if p.shape != (annotations.n_items,):
            raise StatsInputError(
                f"`predictions[{name!r}]` must have one entry per item ({annotations.n_items}); got {p.shape}."
            )
        p = p.astype(np.int64)[idx]
        vals = _theorem3(counts, p, star)
        models[name] = Theorem3Check(
            *vals,
            true_accuracy=float((p == star).mean()),
            lower_bound=lower_bound(counts, p).value,
            n_items=int(idx.size),
        )
    return AssumptionReport(
        n_gold_items=int(idx.size), theorem1=t1, average_annotator_accuracy=avg_acc, upper=ub,
        annotators=ann_check, models=models,
    )
