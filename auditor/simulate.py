"""A labeling operation with a known oracle, for demos and for checking the numbers.

Items have a hidden true label and a difficulty (easy or hard). Two crowd vendors and
an expert panel label them with per-annotator accuracies that drop on hard items
(which makes annotators positively correlated, as Theorem 1 of Xu et al. assumes);
a wrong label is drawn uniformly from the other classes. A model improves release
after release. Because the oracle is known, every bound Auditor reports can be
compared with the truth it bounds (``oracle.json``).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from scipy import optimize, special

__all__ = [
    "Drift",
    "HistoryDraw",
    "HistoryScenario",
    "PanelDraw",
    "PoolScenario",
    "PopulationValues",
    "Scenario",
    "SimulatedData",
    "StreamScenario",
    "draw_history",
    "draw_panel",
    "draw_phases",
    "least_favourable_model_accuracy",
    "population_values",
    "simulate",
    "simulate_history",
    "simulate_streams",
    "write_scenario",
]


@dataclass(frozen=True)
class Scenario:
    """What to simulate. Accuracies are on easy items; hard items lose ``hard_penalty``."""

    n_items: int = 2000
    labels: tuple[str, ...] = ("negative", "neutral", "positive")
    hard_fraction: float = 0.25
    hard_penalty: float = 0.3
    vendors: dict[str, tuple[float, ...]] = field(default_factory=lambda: {
        "acme-labeling": (0.92, 0.90, 0.88, 0.86, 0.84),
        "bolt-annotations": (0.84, 0.80, 0.78, 0.75, 0.72),
    })
    labels_per_vendor: int = 3
    experts: tuple[float, ...] = (0.98, 0.97, 0.97)
    expert_fraction: float = 0.2
    gold_fraction: float = 0.1
    model: str = "sentiment-classifier"
    releases: dict[str, float] = field(default_factory=lambda: {
        "1.0": 0.70, "1.1": 0.78, "2.0": 0.86, "2.1": 0.95,
    })
    seed: int = 7


@dataclass(frozen=True)
class SimulatedData:
    """Long-format rows ready to import, and the oracle's view of them."""

    annotations: list[dict]
    gold: list[dict]
    predictions: dict[str, list[dict]]
    released_at: dict[str, str]
    oracle: dict


def _noisy(rng, truth, acc, n_labels):
    right = rng.random(truth.shape) < acc
    wrong = (truth + rng.integers(1, n_labels, size=truth.shape)) % n_labels
    return np.where(right, truth, wrong)


def simulate(scenario: Scenario = Scenario()) -> SimulatedData:
    """Draw one dataset from ``scenario`` (deterministic for a given seed)."""
    rng = np.random.default_rng(scenario.seed)
    n, labels = scenario.n_items, scenario.labels
    n_labels = len(labels)
    truth = rng.integers(0, n_labels, n)
    hard = rng.random(n) < scenario.hard_fraction
    items = [f"item-{i:05d}" for i in range(n)]
    start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    annotations: list[dict] = []
    correct_by_annotator: dict[str, list[int]] = {}
    per_item_correct = np.zeros(n)
    per_item_total = np.zeros(n)

    def emit(idx, annotator, vendor, tier, acc):
        eff = np.where(hard[idx], acc - scenario.hard_penalty, acc)
        given = _noisy(rng, truth[idx], eff, n_labels)
        ok = given == truth[idx]
        correct_by_annotator.setdefault(annotator, []).extend(ok.astype(int).tolist())
        per_item_correct[idx] += ok
        per_item_total[idx] += 1
        for j, g in zip(idx, given, strict=True):
            annotations.append({
                "item_id": items[j], "annotator_id": annotator, "label": labels[g], "vendor": vendor,
                "tier": tier, "timestamp": (start + timedelta(minutes=int(j))).isoformat(),
            })

    for vendor, accs in scenario.vendors.items():
        names = [f"{vendor.split('-')[0]}-{k + 1:02d}" for k in range(len(accs))]
        # each item gets `labels_per_vendor` distinct annotators of this vendor
        picks = np.argsort(rng.random((n, len(accs))), axis=1)[:, : scenario.labels_per_vendor]
        for k, (name, acc) in enumerate(zip(names, accs, strict=True)):
            idx = np.flatnonzero((picks == k).any(axis=1))
            emit(idx, name, vendor, "crowd", acc)
    expert_items = np.flatnonzero(rng.random(n) < scenario.expert_fraction)
    for k, acc in enumerate(scenario.experts):
        emit(expert_items, f"expert-{k + 1:02d}", "in-house experts", "expert", acc)

    gold_idx = np.flatnonzero(rng.random(n) < scenario.gold_fraction)
    gold = [{"item_id": items[j], "label": labels[truth[j]], "source": "adjudicated"} for j in gold_idx]

    predictions: dict[str, list[dict]] = {}
    released_at: dict[str, str] = {}
    model_accuracy: dict[str, float] = {}
    for r, (version, acc) in enumerate(scenario.releases.items()):
        eff = np.where(hard, acc - 0.1, min(acc + 0.1 * scenario.hard_fraction / (1 - scenario.hard_fraction), 1.0))
        pred = _noisy(rng, truth, eff, n_labels)
        conf = rng.uniform(0.5, 0.95, n)
        rows = []
        for j in range(n):
            p = np.full(n_labels, (1 - conf[j]) / (n_labels - 1))
            p[pred[j]] = conf[j]
            row = {"item_id": items[j]}
            row.update({lab: round(float(p[c]), 6) for c, lab in enumerate(labels)})
            # rounding may leave the sum a hair off 1: put the remainder on the predicted class
            row[labels[pred[j]]] = round(1.0 - sum(v for k, v in row.items() if k not in ("item_id", labels[pred[j]])), 6)
            rows.append(row)
        predictions[version] = rows
        released_at[version] = (start + timedelta(days=30 * (r + 1))).isoformat()
        model_accuracy[version] = float((pred == truth).mean())

    annotator_accuracy = {a: float(np.mean(v)) for a, v in correct_by_annotator.items()}
    oracle = {
        "seed": scenario.seed,
        "n_items": n,
        "labels": list(labels),
        "average_annotator_accuracy": float((per_item_correct / per_item_total).mean()),
        "annotator_accuracy": annotator_accuracy,
        "vendor_accuracy": {
            vendor: float(np.mean([annotator_accuracy[f"{vendor.split('-')[0]}-{k + 1:02d}"]
                                   for k in range(len(accs))]))
            for vendor, accs in scenario.vendors.items()
        },
        "model": scenario.model,
        "release_accuracy": model_accuracy,
        "truth": {items[j]: labels[truth[j]] for j in range(n)},
    }
    return SimulatedData(annotations, gold, predictions, released_at, oracle)


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_scenario(data: SimulatedData, out: Path) -> dict[str, Path]:
    """Write annotations.csv, gold.csv, predictions-<version>.csv and oracle.json into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"annotations": out / "annotations.csv", "gold": out / "gold.csv", "oracle": out / "oracle.json"}
    _write_csv(paths["annotations"], data.annotations)
    _write_csv(paths["gold"], data.gold)
    for version, rows in data.predictions.items():
        paths[f"predictions-{version}"] = out / f"predictions-{version}.csv"
        _write_csv(paths[f"predictions-{version}"], rows)
    oracle = dict(data.oracle, released_at=data.released_at)
    paths["oracle"].write_text(json.dumps(oracle, indent=1), encoding="utf-8")
    return paths


# ----------------------------------------------------------------------- many streams


def simulate_streams(rng: np.random.Generator, n_streams: int, n_items: int, annotator_accuracy, model_accuracy: float,
                     n_classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Many independent datasets at once, for calibration and power studies.

    Every item has a uniform true class and is labelled by every annotator (the
    ``k``-th with accuracy ``annotator_accuracy[k]``, a wrong label uniform over the
    other classes, independently); the model is right with probability
    ``model_accuracy``, independently of the annotators, and wrong uniformly
    otherwise. Theorem 1's and Theorem 3's assumptions hold, and the population
    values of the bounds are known exactly (:func:`population_values`).

    Returns
    -------
    counts : ndarray of int8, shape (n_streams, n_items, n_classes)
        Label counts per item, rows in arrival order.
    predictions : ndarray of int8, shape (n_streams, n_items)
    """
    acc = np.asarray(annotator_accuracy, dtype=float)
    shape = (n_streams, n_items)
    truth = rng.integers(0, n_classes, size=shape, dtype=np.int8)
    counts = np.zeros((*shape, n_classes), dtype=np.int8)
    for a in acc:
        right = rng.random(shape) < a
        label = np.where(right, truth, (truth + rng.integers(1, n_classes, size=shape, dtype=np.int8)) % n_classes)
        np.put_along_axis(counts, label[..., None].astype(np.intp),
                          np.take_along_axis(counts, label[..., None].astype(np.intp), axis=-1) + 1, axis=-1)
    right = rng.random(shape) < model_accuracy
    preds = np.where(right, truth, (truth + rng.integers(1, n_classes, size=shape, dtype=np.int8)) % n_classes)
    return counts, preds.astype(np.int8)


@dataclass(frozen=True)
class PopulationValues:
    """Exact expectations under :func:`simulate_streams`'s model.

    ``theta_t``, ``theta_e``: :math:`E X^t`, :math:`E X^e` (so :math:`U_t`, :math:`U_e`
    in the population are their square roots); ``credit_right`` / ``credit_wrong``:
    the expected tie credit the plurality gives the true class / one given wrong
    class; ``average_accuracy``: the average annotator's accuracy.
    """

    theta_t: float
    theta_e: float
    credit_right: float
    credit_wrong: float
    average_accuracy: float

    def expected_agreement(self, model_accuracy: float) -> float:
        """:math:`E L` for a model right with probability ``model_accuracy``."""
        return model_accuracy * self.credit_right + (1.0 - model_accuracy) * self.credit_wrong


def population_values(annotator_accuracy, n_classes: int = 3) -> PopulationValues:
    """Exact expectations over the distribution of one item's label counts (true class 0),
    built annotator by annotator (a few hundred count vectors even for 25 annotators)."""
    acc = np.asarray(annotator_accuracy, dtype=float)
    k = acc.size
    dist: dict[tuple[int, ...], float] = {(0,) * n_classes: 1.0}
    for a in acc:
        nxt: dict[tuple[int, ...], float] = {}
        for m, p in dist.items():
            for c in range(n_classes):
                q = p * (a if c == 0 else (1.0 - a) / (n_classes - 1))
                key = (*m[:c], m[c] + 1, *m[c + 1:])
                nxt[key] = nxt.get(key, 0.0) + q
        dist = nxt
    theta_t = theta_e = right = wrong = 0.0
    for m_, p in dist.items():
        m = np.asarray(m_, dtype=float)
        theta_t += p * float((m * m).sum()) / k**2
        theta_e += p * float((m * (m - 1)).sum()) / (k * (k - 1))
        tied = m == m.max()
        right += p * tied[0] / tied.sum()
        wrong += p * tied[1:].sum() / tied.sum() / (n_classes - 1)
    return PopulationValues(float(theta_t), float(theta_e), float(right), float(wrong), float(acc.mean()))


def least_favourable_model_accuracy(annotator_accuracy, n_classes: int = 3, *, bound: str = "theoretical",
                                    tau: float = 0.0) -> float:
    """The model accuracy whose expected agreement with the plurality equals the
    population value of the upper bound plus ``tau`` (:math:`\\sqrt{E X^t}` or
    :math:`\\sqrt{E X^e}`): the boundary of what the bounds can separate, where no
    certification should happen more often than its error rate allows."""
    pop = population_values(annotator_accuracy, n_classes)
    target = tau + np.sqrt(pop.theta_t if bound == "theoretical" else pop.theta_e)
    return float(optimize.brentq(lambda a: pop.expected_agreement(a) - target, 0.0, 1.0, xtol=1e-14))


# --------------------------------------------------------------------------- streams on the null's boundary


def _compositions(k: int, n_classes: int) -> np.ndarray:
    """Every count vector of ``k`` labels over ``n_classes`` classes, shape (V, n_classes)."""
    if n_classes == 1:
        return np.array([[k]])
    return np.array([(first, *rest) for first in range(k, -1, -1)
                     for rest in _compositions(k - first, n_classes - 1)])


@dataclass(frozen=True)
class StreamScenario:
    """Items one by one, with every expectation the anytime certification tests known exactly.

    Every item has a uniform true class, is hard with probability ``hard_fraction`` and gets
    ``K`` labels, ``K`` uniform over ``labels_per_item``. Its labels are independent given its
    class and hardness (annotators drawn from a pool): right with probability
    ``annotator_accuracy`` (``hard_penalty`` less on hard items), else a uniform wrong class.
    With probability ``copy`` the model copies the plurality of the item's labels (one of the
    tied at random); otherwise it is right with ``model_accuracy`` (``model_hard_penalty``
    less on hard items), independently of the labels, and wrong uniformly. ``copy`` and the
    two penalties set how the model's credit and the labels' agreement co-vary per item:
    the variance structure of the certification's per-item values (a negative
    ``model_hard_penalty`` makes the model better on the items where annotators disagree).
    """

    n_classes: int = 3
    annotator_accuracy: float = 0.80
    labels_per_item: tuple[int, ...] = (5,)
    hard_fraction: float = 0.0
    hard_penalty: float = 0.0
    model_accuracy: float = 0.95
    model_hard_penalty: float = 0.0
    copy: float = 0.0

    def _terms(self, bound: str) -> dict[str, float]:
        """Expectations over the items a bound's stream takes (one label; two for U_e):
        ``x`` (E X), ``t`` (E 1/T, T the number of tied plurality classes), and per
        hardness the plurality's credit to the true class (``r0``, ``r1``) and to one
        given wrong class (``w0``, ``w1``), each weighted by that hardness's share."""
        ks = [k for k in self.labels_per_item if k >= (2 if bound == "empirical" else 1)]
        if not ks:
            raise ValueError(f"no item has the labels the {bound} bound needs")
        n = self.n_classes
        out = dict.fromkeys(("x", "t", "r0", "r1", "w0", "w1"), 0.0)
        for h, share in ((0, 1.0 - self.hard_fraction), (1, self.hard_fraction)):
            p = self.annotator_accuracy - h * self.hard_penalty
            for k in ks:
                m = _compositions(k, n)
                logp = (special.gammaln(k + 1) - special.gammaln(m + 1).sum(axis=1)
                        + m[:, 0] * np.log(max(p, 1e-300)) + m[:, 1:].sum(axis=1) * np.log(max((1 - p) / (n - 1), 1e-300)))
                w = np.exp(logp) * share / len(ks)
                sq = (m * m).sum(axis=1)
                x = sq / k**2 if bound == "theoretical" else (sq - k) / (k * (k - 1))
                tied = m == m.max(axis=1, keepdims=True)
                n_tied = tied.sum(axis=1)
                out["x"] += float(w @ x)
                out["t"] += float(w @ (1.0 / n_tied))
                out[f"r{h}"] += float(w @ (tied[:, 0] / n_tied))
                out[f"w{h}"] += float(w @ (tied[:, 1:].sum(axis=1) / n_tied)) / (n - 1)
        return out

    def expectations(self, bound: str = "theoretical") -> tuple[float, float]:
        """(E credit, E X) over the items the bound's stream takes: the means θ_L, θ_U."""
        e = self._terms(bound)
        return self._credit(e, self.model_accuracy), e["x"]

    def _credit(self, e: dict[str, float], accuracy: float) -> float:
        a0, a1 = accuracy, accuracy - self.model_hard_penalty
        own = a0 * e["r0"] + (1 - a0) * e["w0"] + a1 * e["r1"] + (1 - a1) * e["w1"]
        return self.copy * e["t"] + (1.0 - self.copy) * own

    def on_boundary(self, bound: str = "theoretical", tau: float = 0.0) -> StreamScenario:
        """This scenario with the model accuracy whose expected credit is exactly
        ``tau`` + √(E X): the least favourable point of "not better by tau", where the
        bound has no slack."""
        e = self._terms(bound)
        lo, hi = self._credit(e, 0.0), self._credit(e, 1.0)
        acc = (tau + math.sqrt(e["x"]) - lo) / (hi - lo)
        if not (0.0 <= acc <= 1.0 and 0.0 <= acc - self.model_hard_penalty <= 1.0):
            raise ValueError(f"no model accuracy puts the expected credit on the boundary (it would be {acc:.4f})")
        return replace(self, model_accuracy=float(acc))

    def draw(self, rng: np.random.Generator, n_streams: int, n_items: int) -> tuple[np.ndarray, np.ndarray]:
        """``n_streams`` independent streams of ``n_items`` items: counts (S, N, n_classes)
        and predictions (S, N), rows in arrival order."""
        n = self.n_classes
        shape = (n_streams, n_items)
        truth = rng.integers(0, n, size=shape)
        hard = rng.random(shape) < self.hard_fraction
        k = np.asarray(self.labels_per_item)[rng.integers(0, len(self.labels_per_item), size=shape)]
        p = self.annotator_accuracy - np.where(hard, self.hard_penalty, 0.0)
        counts = np.zeros((*shape, n), dtype=np.int16)
        for j in range(int(k.max())):
            right = rng.random(shape) < p
            label = np.where(right, truth, (truth + rng.integers(1, n, size=shape)) % n)
            label = np.where(j < k, label, -1)
            for c in range(n):
                counts[..., c] += label == c
        right = rng.random(shape) < self.model_accuracy - np.where(hard, self.model_hard_penalty, 0.0)
        own = np.where(right, truth, (truth + rng.integers(1, n, size=shape)) % n)
        tied = counts == counts.max(axis=-1, keepdims=True)
        plurality = np.argmax(tied * rng.random((*shape, n)), axis=-1)
        preds = np.where(rng.random(shape) < self.copy, plurality, own)
        return counts, preds.astype(np.int8)


def draw_phases(rng: np.random.Generator, phases, n_streams: int) -> tuple[np.ndarray, np.ndarray]:
    """Streams whose items come from ``phases`` in turn (``(StreamScenario, n_items)`` pairs):
    a population that shifts, e.g. harder items later."""
    parts = [sc.draw(rng, n_streams, n) for sc, n in phases]
    return np.concatenate([c for c, _ in parts], axis=1), np.concatenate([p for _, p in parts], axis=1)


# --------------------------------------------------------------------------- history with drift


@dataclass(frozen=True)
class Drift:
    """From ``week`` on, ``target`` (a vendor name or an annotator id) is ``change`` more accurate."""

    target: str
    week: int
    change: float


@dataclass(frozen=True)
class HistoryScenario:
    """Weekly labeling batches over months, optionally with vendors or annotators drifting.

    Every week ``items_per_week`` new items arrive; each vendor labels each item with
    ``labels_per_vendor`` of its annotators (drawn per item). Accuracies are on easy
    items; hard items lose ``hard_penalty``. Annotator ids are ``<vendor prefix>-NN``.
    """

    weeks: int = 26
    items_per_week: int = 300
    labels: tuple[str, ...] = ("negative", "neutral", "positive")
    vendors: dict[str, tuple[float, ...]] = field(default_factory=lambda: {
        "acme-labeling": (0.92, 0.90, 0.88, 0.86, 0.84),
        "bolt-annotations": (0.84, 0.80, 0.78, 0.75, 0.72),
        "crowdworks": (0.86, 0.84, 0.82, 0.80, 0.78),
    })
    labels_per_vendor: int = 3
    hard_fraction: float = 0.25
    hard_penalty: float = 0.3
    drift: tuple[Drift, ...] = ()
    start: str = "2026-01-05T09:00:00+00:00"
    seed: int = 11

    def annotators(self) -> tuple[list[str], list[str], np.ndarray]:
        """Annotator ids, their vendors, and their base accuracies (in slot order)."""
        names, vendors, accs = [], [], []
        for vendor, va in self.vendors.items():
            for k, acc in enumerate(va):
                names.append(f"{vendor.split('-')[0]}-{k + 1:02d}")
                vendors.append(vendor)
                accs.append(acc)
        return names, vendors, np.asarray(accs, dtype=float)


@dataclass(frozen=True)
class HistoryDraw:
    """Dense draws of ``n_streams`` independent histories.

    ``label`` and ``annotator`` have shape (streams, weeks, items_per_week, slots): slot
    ``j`` of an item belongs to vendor ``slot_vendor[j]``; ``truth`` is (streams, weeks, items).
    ``accuracy`` is each annotator's accuracy on easy items per week (weeks, annotators).
    """

    label: np.ndarray
    annotator: np.ndarray
    truth: np.ndarray
    slot_vendor: np.ndarray
    names: list[str]
    vendor_of: list[str]
    accuracy: np.ndarray


def draw_history(scenario: HistoryScenario = HistoryScenario(), n_streams: int = 1,
                 rng: np.random.Generator | None = None) -> HistoryDraw:
    """Draw ``n_streams`` histories at once (vectorised; deterministic for a seed)."""
    rng = np.random.default_rng(scenario.seed) if rng is None else rng
    names, vendor_of, base = scenario.annotators()
    W, n_items, L = scenario.weeks, scenario.items_per_week, len(scenario.labels)
    acc = np.tile(base, (W, 1))
    vendor_names = list(scenario.vendors)
    for d in scenario.drift:
        if d.target in scenario.vendors:
            cols = [i for i, v in enumerate(vendor_of) if v == d.target]
        elif d.target in names:
            cols = [names.index(d.target)]
        else:
            raise ValueError(f"drift target {d.target!r} is neither a vendor nor an annotator")
        acc[d.week:, cols] += d.change
    acc = np.clip(acc, 0.0, 1.0)
    truth = rng.integers(0, L, size=(n_streams, W, n_items))
    hard = rng.random((n_streams, W, n_items)) < scenario.hard_fraction
    slots, slot_vendor = [], []
    offset = 0
    for v_index, vendor in enumerate(vendor_names):
        size = len(scenario.vendors[vendor])
        k = scenario.labels_per_vendor
        picks = np.argsort(rng.random((n_streams, W, n_items, size)), axis=-1)[..., :k] + offset
        slots.append(picks)
        slot_vendor += [v_index] * k
        offset += size
    annotator = np.concatenate(slots, axis=-1)
    week = np.arange(W)[None, :, None, None]
    eff = acc[week, annotator] - np.where(hard[..., None], scenario.hard_penalty, 0.0)
    right = rng.random(annotator.shape) < eff
    wrong = (truth[..., None] + rng.integers(1, L, size=annotator.shape)) % L
    label = np.where(right, truth[..., None], wrong).astype(np.int8)
    return HistoryDraw(label, annotator, truth, np.asarray(slot_vendor), names, vendor_of, acc)


def simulate_history(scenario: HistoryScenario = HistoryScenario()) -> list[dict]:
    """One history as import records, with time stamps spread over each week and ``batch``."""
    draw = draw_history(scenario)
    rng = np.random.default_rng(scenario.seed + 1)
    start = datetime.fromisoformat(scenario.start)
    W, n_items, S = draw.label.shape[1:]
    offsets = rng.uniform(0, 5 * 24 * 3600, size=(W, n_items))  # items arrive over the working week
    rows: list[dict] = []
    for w in range(W):
        for i in range(n_items):
            item = f"w{w:03d}-item-{i:05d}"
            for s in range(S):
                a = int(draw.annotator[0, w, i, s])
                when = start + timedelta(weeks=w, seconds=float(offsets[w, i]) + 60 * s)
                rows.append({
                    "item_id": item, "annotator_id": draw.names[a], "label": scenario.labels[draw.label[0, w, i, s]],
                    "vendor": draw.vendor_of[a], "tier": "crowd", "timestamp": when.isoformat(), "batch": w,
                })
    return rows


# --------------------------------------------------------------------------- a vendor pool, item by item


@dataclass(frozen=True)
class PoolScenario:
    """Items labelled by annotators drawn at random from a pool, and a model, with a known oracle.

    Every item has a uniform true class and is hard with probability ``hard_fraction``.
    Each label comes from an annotator drawn uniformly (with replacement) from the pool:
    right with the annotator's accuracy (``hard_penalty`` less on hard items), else a
    uniform wrong class. So an item's labels are exchangeable given its class and
    difficulty, and more labels can be bought for any item at any time from the same
    process (:meth:`labels`). The model is right with ``model_accuracy`` on easy items
    and ``model_hard_penalty`` less on hard ones, independently of the annotators.
    """

    n_classes: int = 3
    annotator_accuracy: tuple[float, ...] = (0.92, 0.88, 0.84, 0.80, 0.76)
    hard_fraction: float = 0.25
    hard_penalty: float = 0.3
    model_accuracy: float = 0.9
    model_hard_penalty: float = 0.2

    @property
    def average_annotator_accuracy(self) -> float:
        """The oracle accuracy of the average annotator (what U_t bounds from above)."""
        return float(np.mean(self.annotator_accuracy)) - self.hard_fraction * self.hard_penalty

    @property
    def model_oracle_accuracy(self) -> float:
        """The model's oracle accuracy (what L bounds from below)."""
        return self.model_accuracy - self.hard_fraction * self.model_hard_penalty

    def items(self, rng: np.random.Generator, shape) -> tuple[np.ndarray, np.ndarray]:
        """True classes and hardness of ``shape`` new items."""
        truth = rng.integers(0, self.n_classes, size=shape)
        hard = rng.random(shape) < self.hard_fraction
        return truth, hard

    def labels(self, rng: np.random.Generator, truth: np.ndarray, hard: np.ndarray, k) -> np.ndarray:
        """Label counts of ``k`` new labels on each item (``k`` an int or an array like ``truth``);
        shape ``truth.shape + (n_classes,)``."""
        truth = np.asarray(truth)
        k = np.broadcast_to(np.asarray(k, dtype=np.int64), truth.shape)
        acc = np.asarray(self.annotator_accuracy, dtype=float)
        k_max = int(k.max()) if k.size else 0
        flat = np.zeros(truth.size * self.n_classes, dtype=np.int64)
        base = np.arange(truth.size) * self.n_classes
        for j in range(k_max):
            who = rng.integers(0, acc.size, size=truth.shape)
            p_right = acc[who] - np.where(hard, self.hard_penalty, 0.0)
            right = rng.random(truth.shape) < p_right
            wrong = (truth + rng.integers(1, self.n_classes, size=truth.shape)) % self.n_classes
            label = np.where(right, truth, wrong).reshape(-1)
            use = (j < k).reshape(-1)
            flat += np.bincount(base[use] + label[use], minlength=flat.size)
        counts = flat.reshape(*truth.shape, self.n_classes)
        return counts

    def predictions(self, rng: np.random.Generator, truth: np.ndarray, hard: np.ndarray) -> np.ndarray:
        """The model's label of each item."""
        p_right = self.model_accuracy - np.where(hard, self.model_hard_penalty, 0.0)
        right = rng.random(np.shape(truth)) < p_right
        wrong = (truth + rng.integers(1, self.n_classes, size=np.shape(truth))) % self.n_classes
        return np.where(right, truth, wrong).astype(np.int64)



# --------------------------------------------------------------------------- monitoring panels


@dataclass(frozen=True)
class PanelDraw:
    """Dense labelling panels: ``label`` and ``who`` have shape (streams, weeks, items, slots);
    slot ``j`` of an item was labelled by group ``who[..., j]`` (a vendor or an annotator)."""

    label: np.ndarray
    who: np.ndarray
    truth: np.ndarray
    hard: np.ndarray


def draw_panel(rng: np.random.Generator, n_streams: int, weeks: int, items_per_week: int, *,
               n_groups: int = 3, slots: int | None = None, n_classes: int = 3, easy: float = 0.95,
               hard: float = 0.5, hard_share=0.222, shift=None) -> PanelDraw:
    """Weekly items of mixed difficulty labelled once by each of ``slots`` groups.

    An item is hard with probability ``hard_share`` (a number, or an array broadcast to
    (streams, weeks): redrawn or stepping per week); a label is right with probability
    ``easy`` on easy items and ``hard`` on hard ones (0.95 and 0.5: an overall accuracy of
    0.85 at the default hard share), plus ``shift[week, group]`` (e.g. -0.10 from the
    week a vendor degrades), else a uniform wrong class. With ``slots`` equal to
    ``n_groups`` (the default) every group labels every item (vendors); with fewer, the
    slots of each item go to distinct groups drawn at random (annotators of a team).
    """
    slots = n_groups if slots is None else slots
    shape = (n_streams, weeks, items_per_week)
    truth = rng.integers(0, n_classes, size=shape)
    share = np.broadcast_to(np.asarray(hard_share, dtype=float), (n_streams, weeks))
    is_hard = rng.random(shape) < share[..., None]
    if slots == n_groups:
        who = np.broadcast_to(np.arange(n_groups), (*shape, slots))
    else:
        who = np.argsort(rng.random((*shape, n_groups)), axis=-1)[..., :slots]
    acc = np.where(is_hard[..., None], hard, easy)
    if shift is not None:
        shift = np.asarray(shift, dtype=float).reshape(weeks, n_groups)
        acc = acc + shift[np.arange(weeks)[None, :, None, None], who]
    right = rng.random(who.shape) < np.clip(acc, 0.0, 1.0)
    wrong = (truth[..., None] + rng.integers(1, n_classes, size=who.shape)) % n_classes
    label = np.where(right, truth[..., None], wrong).astype(np.int8)
    return PanelDraw(label, np.ascontiguousarray(who), truth, is_hard)
