"""Checking audit plans against the process they plan for, by simulation.

:func:`~auditor.stats.plan_certification` says "probability p of certifying with design
D". With a labeling operation whose truth is known (:class:`~auditor.simulate.PoolScenario`),
that claim can be checked: draw the current data from the true process, plan, then draw
D's data from the *true* process (not from the plan's fitted model) and run the verdict
the audit pipeline runs (:class:`~auditor.stats.AnytimeState` for the anytime verdict,
:func:`~auditor.stats.certify` for the paper's). Over many repetitions the fraction of
certified outcomes should match the mean announced probability. :func:`relabel_gain`
checks the relabel list the same way: one more true label on each of the top ``B`` items
against ``B`` random items.

Used by ``bench/bench_plan_calibration.py`` (the full study) and the tests (a reduced one); it
lives beside the benches because it reads the planner's internals (its simulated verdict).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from auditor.simulate import PoolScenario
from auditor.stats import AnytimeState, certify
from auditor.stats.anytime import _bet_values, _tangent_points
from auditor.stats.certification import _LOG_E_CAP, _score_of_log_evalue, item_values
from auditor.stats.confseq import betting_log_wealth
from auditor.stats.planning import plan_certification, relabel_priority
from auditor.stats.planning.simulation import (
    _Current,
    _current_sums,
    _value_atoms,
    _values_new,
    _verdict_scores,
)

__all__ = [
    "CalibrationScenario",
    "DesignCheck",
    "RangeCheck",
    "RelabelGain",
    "ScenarioCheck",
    "VendorConfusionScenario",
    "check_scenario",
    "conditional_probability",
    "fixed_truth_error_bound",
    "limit_margin",
    "margin_lower_bound",
    "relabel_gain",
    "true_verdict",
]


@dataclass(frozen=True)
class VendorConfusionScenario:
    """Independent annotators from vendors with their own confusion matrices (Dawid & Skene's
    process), and hard items shared with the model.

    Each label comes from a vendor drawn with ``vendor_share`` and is a draw from that
    vendor's confusion row of the item's true class; on hard items the row is mixed with the
    uniform distribution by ``hard_penalty`` (annotators guess more). The model is right
    with ``model_accuracy`` on easy items and ``model_hard_penalty`` less on hard ones,
    else a uniformly wrong class. The interface of :class:`~auditor.simulate.PoolScenario`.
    """

    confusions: tuple = (((0.88, 0.09, 0.03), (0.15, 0.78, 0.07), (0.03, 0.07, 0.90)),
                         ((0.80, 0.15, 0.05), (0.10, 0.80, 0.10), (0.08, 0.12, 0.80)))
    vendor_share: tuple[float, ...] = (0.6, 0.4)
    class_prior: tuple[float, ...] = (0.4, 0.35, 0.25)
    hard_fraction: float = 0.2
    hard_penalty: float = 0.4
    model_accuracy: float = 0.9
    model_hard_penalty: float = 0.2

    @property
    def n_classes(self) -> int:
        return len(self.class_prior)

    def rows(self, hard: bool) -> np.ndarray:
        """(L, L) confusion of the pooled labels: P(label | true class) on easy or hard items."""
        c = np.einsum("v,vij->ij", np.asarray(self.vendor_share), np.asarray(self.confusions, dtype=float))
        return (1 - self.hard_penalty) * c + self.hard_penalty / self.n_classes if hard else c

    @property
    def average_annotator_accuracy(self) -> float:
        prior = np.asarray(self.class_prior)
        acc = [float(prior @ np.diag(self.rows(h))) for h in (False, True)]
        return (1 - self.hard_fraction) * acc[0] + self.hard_fraction * acc[1]

    @property
    def model_oracle_accuracy(self) -> float:
        return self.model_accuracy - self.hard_fraction * self.model_hard_penalty

    def items(self, rng: np.random.Generator, shape) -> tuple[np.ndarray, np.ndarray]:
        truth = rng.choice(self.n_classes, size=shape, p=np.asarray(self.class_prior))
        return truth, rng.random(shape) < self.hard_fraction

    def labels(self, rng: np.random.Generator, truth: np.ndarray, hard: np.ndarray, k) -> np.ndarray:
        truth = np.asarray(truth)
        k = np.broadcast_to(np.asarray(k, dtype=np.int64), truth.shape)
        shares = np.asarray(self.vendor_share)
        conf = np.asarray(self.confusions, dtype=float)                        # (V, L, L)
        n_labels = self.n_classes
        out = np.zeros((*truth.shape, n_labels), dtype=np.int64)
        for j in range(int(k.max()) if k.size else 0):
            vendor = rng.choice(shares.size, size=truth.shape, p=shares)
            row = conf[vendor, truth]                                          # (..., L)
            row = np.where(hard[..., None], (1 - self.hard_penalty) * row + self.hard_penalty / n_labels, row)
            u = rng.random(truth.shape)[..., None]
            label = np.minimum((u > np.cumsum(row, axis=-1)).sum(axis=-1), n_labels - 1)
            out += np.where((j < k)[..., None], np.eye(n_labels, dtype=np.int64)[label], 0)
        return out

    def predictions(self, rng: np.random.Generator, truth: np.ndarray, hard: np.ndarray) -> np.ndarray:
        p_right = self.model_accuracy - np.where(hard, self.model_hard_penalty, 0.0)
        right = rng.random(np.shape(truth)) < p_right
        wrong = (truth + rng.integers(1, self.n_classes, size=np.shape(truth))) % self.n_classes
        return np.where(right, truth, wrong).astype(np.int64)


def limit_margin(pool) -> float:
    """The population margin θ_L − √θ_U of new items with infinitely many labels (τ = 0):
    θ_L the chance that the model agrees with the item's most likely label (tie-credited),
    θ_U the mean of Σ_c p_c² over items (p the item's label distribution). Exact, for
    :class:`~auditor.simulate.PoolScenario` and :class:`VendorConfusionScenario`."""
    n_labels = pool.n_classes
    if isinstance(pool, VendorConfusionScenario):
        prior = np.asarray(pool.class_prior)
        kinds = [(h, pool.rows(h)) for h in (False, True)]
    else:
        prior = np.full(n_labels, 1.0 / n_labels)
        kinds = []
        for h in (False, True):
            right = float(np.mean(pool.annotator_accuracy)) - (pool.hard_penalty if h else 0.0)
            kinds.append((h, np.full((n_labels, n_labels), (1 - right) / (n_labels - 1)) + np.eye(n_labels)
                          * (right - (1 - right) / (n_labels - 1))))
    theta_l = theta_u = 0.0
    for h, rows in kinds:
        w = pool.hard_fraction if h else 1.0 - pool.hard_fraction
        acc = pool.model_accuracy - (pool.model_hard_penalty if h else 0.0)
        for z in range(n_labels):
            p = rows[z]
            top = p == p.max()
            model = np.full(n_labels, (1 - acc) / (n_labels - 1))
            model[z] = acc
            theta_l += w * prior[z] * float(model @ top) / top.sum()
            theta_u += w * prior[z] * float(p @ p)
    return theta_l - math.sqrt(theta_u)


@dataclass(frozen=True)
class CalibrationScenario:
    """A labeling operation, its current data, and the designs to check."""

    name: str
    pool: PoolScenario | VendorConfusionScenario
    n_items: int
    labels_per_item: int
    new_items: tuple[int, ...] = ()
    labels_per_new_item: tuple[int, ...] = ()
    extra_labels: tuple[int, ...] = ()
    method: str = "anytime"
    bound: str = "theoretical"
    target: float = 0.95
    tau: float = 0.0
    #: Each repetition's model accuracy (on easy items) is drawn uniformly within this much of
    #: the pool's: the planner does not know the true margin, and checking it over a range of
    #: them is what a predictive probability can be calibrated for (see ``check_scenario``).
    model_spread: float = 0.0

    def draw_pool(self, rng: np.random.Generator) -> PoolScenario:
        if not self.model_spread:
            return self.pool
        acc = self.pool.model_accuracy + rng.uniform(-self.model_spread, self.model_spread)
        return replace(self.pool, model_accuracy=float(min(acc, 1.0)))


@dataclass(frozen=True)
class DesignCheck:
    """One design's announced probability (mean over repetitions) and observed frequency."""

    new_items: int
    labels_per_item: int
    extra_labels_on_existing: int
    predicted: float
    observed: float
    repetitions: int

    @property
    def std_error(self) -> float:
        """Binomial standard error of the observed frequency at the announced probability."""
        p = min(max(self.predicted, 1e-9), 1 - 1e-9)
        return math.sqrt(p * (1 - p) / self.repetitions)

    @property
    def difference(self) -> float:
        return self.observed - self.predicted


@dataclass(frozen=True)
class RangeCheck:
    """One design in one repetition: the plan's probability and range, and the truth's.

    ``conditional`` is the probability that the design certifies *given this repetition's
    current data*, under the true process (:func:`conditional_probability`): what the
    range claims to cover.
    """

    new_items: int
    labels_per_item: int
    announced: float
    low: float
    high: float
    conditional: float


@dataclass(frozen=True)
class ScenarioCheck:
    """Every design of a scenario, and the plan's other answers over the repetitions."""

    scenario: CalibrationScenario
    designs: tuple[DesignCheck, ...]
    certifiable: tuple[bool, ...]
    certifiable_probability: tuple[float, ...]
    pairs: tuple[tuple[float, bool], ...] = field(repr=False)  # (announced p, certified) per design × rep
    ranges: tuple[RangeCheck, ...] = field(default=(), repr=False)
    #: each repetition's true infinite-label margin (:func:`limit_margin`)
    limits: tuple[float, ...] = field(default=(), repr=False)

    def range_coverage(self, band=(0.0, 1.0)) -> tuple[float, float, float, int]:
        """Over the designs × repetitions whose conditional probability lies in ``band``: the
        fraction with ``low <= conditional``, with ``conditional <= high``, with both, and
        how many there were."""
        sel = [c for c in self.ranges if band[0] <= c.conditional <= band[1]]
        if not sel:
            return math.nan, math.nan, math.nan, 0
        lo = np.array([c.low <= c.conditional for c in sel])
        hi = np.array([c.conditional <= c.high for c in sel])
        return float(lo.mean()), float(hi.mean()), float((lo & hi).mean()), len(sel)

    def reliability(self, bins=(0.0, 0.2, 0.4, 0.6, 0.8, 0.95, 1.0)) -> list[tuple[float, float, float, int]]:
        """(low, high, mean announced p, observed frequency, count) per bin of announced p."""
        p = np.array([a for a, _ in self.pairs])
        y = np.array([b for _, b in self.pairs], dtype=float)
        out = []
        for lo, hi in itertools.pairwise(bins):
            sel = (p >= lo) & ((p < hi) if hi < 1.0 else (p <= hi))
            if sel.any():
                out.append((lo, hi, float(p[sel].mean()), float(y[sel].mean()), int(sel.sum())))
        return out


def true_verdict(scenario: CalibrationScenario, counts: np.ndarray, preds: np.ndarray, new_counts: np.ndarray,
                 new_preds: np.ndarray) -> bool:
    """The verdict the audit pipeline reaches after the new items (rows in arrival order).

    Anytime: the current rows enter first (in order), then the new ones, as
    :func:`~auditor.audit.pipeline.anytime_update` does; the paper's: :func:`certify` on all.
    """
    if scenario.method in ("anytime", "anytime-fan"):
        st = AnytimeState(tau=scenario.tau)
        st.update(counts, preds)
        if new_counts.shape[0]:
            st.update(new_counts, new_preds)
        return st.confidence(scenario.bound, method=scenario.method).score >= scenario.target
    all_counts = np.vstack([counts, new_counts]) if new_counts.shape[0] else counts
    all_preds = np.concatenate([preds, new_preds]) if new_counts.shape[0] else preds
    res = certify(all_counts, all_preds, tau=scenario.tau, threshold=scenario.target, bound=scenario.bound,
                  method=scenario.method)
    return bool(res.certified)


def _true_values(pool: PoolScenario, rng: np.random.Generator, n: int, k: int) -> dict[str, np.ndarray]:
    """Per-item values (X^t, X^e, credit) of ``n`` new items of the true process with ``k`` labels."""
    truth, hard = pool.items(rng, n)
    v = item_values(pool.labels(rng, truth, hard, k), pool.predictions(rng, truth, hard))
    return {"t": v.x_t, "e": v.x_e, "l": v.agreement, "atoms": _value_atoms(v.agreement, v.x_t, v.x_e)}


def conditional_probability(scenario: CalibrationScenario, counts: np.ndarray, preds: np.ndarray, n_new: int,
                            values: Mapping[str, np.ndarray], simulations: int, rng: np.random.Generator) -> float:
    """P(the verdict certifies after ``n_new`` new items | the current data), under the truth.

    ``values`` are per-item values of a large sample of the true process's new items
    (:func:`_true_values`; a sample much larger than ``n_new``, so resampling it is drawing
    from the process). Each of ``simulations`` futures resamples ``n_new`` of them and runs
    the verdict on the current data plus them: for the betting verdict (``"anytime"``) the
    stream itself, fed each future's items in order (:func:`_stream_certified`); for the
    others the planner's simulated verdict on the items' (credit, X) pairs, which equals the
    real one on actual items (``tests/stats/test_planning.py``).
    """
    m = np.asarray(counts)
    cur = _current_sums(m, preds)
    if scenario.method in ("anytime", "anytime-fan"):
        st = AnytimeState(tau=scenario.tau)
        st.update(m, preds)
        cur = _Current(anytime=st, t=cur.t, e=cur.e, l=cur.l)
    size = values["l"].shape[0]
    idx = rng.integers(0, size, size=(simulations, n_new))
    if scenario.method == "anytime":
        return float(np.mean(_stream_certified(cur.anytime.betting(scenario.bound), values, idx, scenario)))
    new = _values_new(values["l"], values["t"], values["e"], idx, atoms=values.get("atoms"))
    score = _verdict_scores(cur, new, method=scenario.method, bound=scenario.bound, tau=scenario.tau, split=0.5)
    return float(np.mean(np.nan_to_num(score, nan=-1.0) >= scenario.target))


def _stream_certified(stream, values: Mapping[str, np.ndarray], idx: np.ndarray, scenario) -> np.ndarray:
    """The betting stream's verdict after the items ``idx`` (futures × items, in arrival
    order), each future fed to a copy of ``stream`` item by item: the real verdict, with its
    predictable tangent points and its running maximum (not the planner's simulation of it)."""
    x = values["t"] if scenario.bound == "theoretical" else values["e"]
    out = np.empty(idx.shape[0], dtype=bool)
    for lo in range(0, idx.shape[0], 100):
        sel = idx[lo:lo + 100]
        keep = np.isfinite(x[sel]) & np.isfinite(values["l"][sel])
        # items without the bound's value do not enter its stream: move them to the end, unbet
        order = np.argsort(~keep, axis=1, kind="stable")
        xs = np.take_along_axis(np.where(keep, x[sel], 0.0), order, axis=1)
        cs = np.take_along_axis(np.where(keep, values["l"][sel], 0.0), order, axis=1)
        b = _tangent_points(xs, stream.n, stream.s_x)
        xi = np.where(np.take_along_axis(keep, order, axis=1), _bet_values(cs, xs, b, scenario.tau), 0.0)
        log_e, _ = betting_log_wealth(xi, stream.log_wealth)
        log_max = np.maximum(stream.log_max, log_e.max(axis=1)) if xi.shape[1] else np.full(sel.shape[0],
                                                                                             stream.log_max)
        out[lo:lo + 100] = _score_of_log_evalue(np.minimum(log_max, _LOG_E_CAP)) >= scenario.target
    return out


def fixed_truth_error_bound(current_items: int, new_items: int, band=(0.2, 0.95)) -> float:
    r"""How close *any* plan can be, for every fixed truth, to the certification frequency.

    In the normal approximation the verdict on :math:`N = n_0 + n_1` items certifies with
    frequency :math:`\Phi(\theta)`, :math:`\theta` the true margin over its standard error at
    :math:`N` (less the threshold), over repetitions that redraw the current data too. A plan
    sees only the :math:`n_0` current items, whose estimate of :math:`\theta` has variance
    :math:`v = N / n_0`. For any plan :math:`f` with values in [0, 1],
    :math:`E_\theta f(X) = (f * \varphi_v)(\theta)` rises between two truths
    :math:`\theta_1 < \theta_2` by at most :math:`2\Phi((\theta_2 - \theta_1)/(2\sqrt v)) - 1`,
    while the frequency rises by :math:`\Phi(\theta_2) - \Phi(\theta_1)`. With the two truths
    where the frequency is ``band``'s ends, one of them is missed by at least half the
    difference, which this returns (0.065 at :math:`n_1 = n_0`, 0.11 at :math:`2 n_0`, 0.16 at :math:`4 n_0`).
    """
    from scipy import stats

    v = (current_items + new_items) / current_items
    t1, t2 = stats.norm.ppf(band[0]), stats.norm.ppf(band[1])
    reach = 2.0 * stats.norm.cdf((t2 - t1) / (2.0 * math.sqrt(v))) - 1.0
    return max(0.0, ((band[1] - band[0]) - reach) / 2.0)


def check_scenario(scenario: CalibrationScenario, repetitions: int, *, seed: int = 0,
                   n_simulations: int = 400, conditional: int = 0, pool_size: int = 1_000_000) -> ScenarioCheck:
    """Plan and check ``repetitions`` independent datasets of ``scenario``.

    With ``conditional`` > 0, also each grid design's probability of certifying given the
    repetition's current data under the truth (``conditional`` simulations over a sample of
    ``pool_size`` true items per number of labels), against the plan's range.
    """
    rng = np.random.default_rng(seed)
    sums: dict[tuple[int, int, int], list[float]] = {}
    hits: dict[tuple[int, int, int], list[bool]] = {}
    certifiable, cert_p, pairs, ranges, limits = [], [], [], [], []
    true_values: dict[int, dict[str, np.ndarray]] = {}
    for _ in range(repetitions):
        pool = scenario.draw_pool(rng)
        limits.append(limit_margin(pool))
        if conditional and (scenario.model_spread or not true_values):
            true_values = {k: _true_values(pool, rng, pool_size, k) for k in scenario.labels_per_new_item}
        truth, hard = pool.items(rng, scenario.n_items)
        counts = pool.labels(rng, truth, hard, scenario.labels_per_item)
        preds = pool.predictions(rng, truth, hard)
        plan = plan_certification(
            counts, preds, target=scenario.target, tau=scenario.tau, method=scenario.method, bound=scenario.bound,
            new_items=scenario.new_items or None, labels_per_item=scenario.labels_per_new_item or None,
            extra_labels=scenario.extra_labels or None, n_simulations=n_simulations,
            rng=int(rng.integers(0, 2**63 - 1)))
        certifiable.append(plan.certifiable)
        cert_p.append(plan.certifiable_probability)
        rank = None
        for d in plan.designs:
            key = (d.new_items, d.labels_per_item, d.extra_labels_on_existing)
            if key == (0, 0, 0):
                continue
            if d.new_items and (d.new_items not in scenario.new_items or
                                d.labels_per_item not in scenario.labels_per_new_item):
                continue  # a refinement between grid points: it differs from one repetition to the next
            if d.new_items:
                t2, h2 = pool.items(rng, d.new_items)
                ok = true_verdict(scenario, counts, preds, pool.labels(rng, t2, h2, d.labels_per_item),
                                  pool.predictions(rng, t2, h2))
            else:
                if rank is None:
                    rank = relabel_priority(counts, preds, bound=scenario.bound)
                top = rank.top(d.extra_labels_on_existing)
                more = counts.copy()
                more[top] += pool.labels(rng, truth[top], hard[top], 1)
                ok = true_verdict(scenario, more, preds, counts[:0], preds[:0])
            sums.setdefault(key, []).append(d.probability)
            hits.setdefault(key, []).append(bool(ok))
            pairs.append((d.probability, bool(ok)))
            if conditional and d.new_items and d.probability_low is not None:
                pc = conditional_probability(scenario, counts, preds, d.new_items, true_values[d.labels_per_item],
                                             conditional, rng)
                ranges.append(RangeCheck(d.new_items, d.labels_per_item, d.probability, d.probability_low,
                                         d.probability_high, pc))
    designs = tuple(DesignCheck(k[0], k[1], k[2], float(np.mean(sums[k])), float(np.mean(hits[k])), len(hits[k]))
                    for k in sorted(sums))
    return ScenarioCheck(scenario, designs, tuple(certifiable), tuple(cert_p), tuple(pairs), tuple(ranges),
                         tuple(limits))


# --------------------------------------------------------------------------- relabel list


def margin_lower_bound(counts: np.ndarray, preds: np.ndarray, *, confidence_level: float = 0.95,
                       bound: str = "theoretical") -> float:
    r"""The margin's lower confidence bound, Theorem 7's two Hoeffding terms with the error
    split in half: :math:`(L - \epsilon_l) - \sqrt{U^2 + \epsilon_u}`,
    :math:`\epsilon = \sqrt{\ln(2/\delta) / (2N)}`. Below the true margin
    (model accuracy minus the average annotator's) with probability at least
    ``confidence_level`` when the bounds' assumptions hold and the labels were not chosen
    from earlier labels."""
    res = certify(counts, preds, bound=bound, method="hms")
    lower, upper = res.lower.value, res.upper.value(bound)
    n_u, n_l = res.upper.n(bound), res.lower.n_items
    delta = 1.0 - confidence_level
    eps_l = math.sqrt(math.log(2.0 / delta) / (2.0 * n_l))
    eps_u = math.sqrt(math.log(2.0 / delta) / (2.0 * n_u))
    return lower - eps_l - math.sqrt(upper * upper + eps_u)


@dataclass(frozen=True)
class RelabelGain:
    """Mean change of the margin's lower confidence bound from ``budget`` extra labels."""

    budget: int
    gain_top: float
    gain_random: float
    std_error_difference: float
    repetitions: int
    coverage_top: float      # fraction of repetitions whose bound stayed below the true margin
    coverage_random: float

    @property
    def advantage(self) -> float:
        return self.gain_top - self.gain_random


def relabel_gain(pool: PoolScenario, n_items: int, labels_per_item: int, budget: int, repetitions: int, *,
                 seed: int = 0, bound: str = "theoretical") -> RelabelGain:
    """One more true label on each of the top ``budget`` items of :func:`relabel_priority`
    versus on ``budget`` random labelled items: the change of :func:`margin_lower_bound`."""
    rng = np.random.default_rng(seed)
    true_margin = pool.model_oracle_accuracy - pool.average_annotator_accuracy
    g_top, g_rand, cov_top, cov_rand = [], [], [], []
    for _ in range(repetitions):
        truth, hard = pool.items(rng, n_items)
        counts = pool.labels(rng, truth, hard, labels_per_item)
        preds = pool.predictions(rng, truth, hard)
        before = margin_lower_bound(counts, preds, bound=bound)
        top = relabel_priority(counts, preds, bound=bound).top(budget)
        rand = rng.choice(n_items, size=budget, replace=False)
        out = []
        for chosen in (top, rand):
            more = counts.copy()
            more[chosen] += pool.labels(rng, truth[chosen], hard[chosen], 1)
            out.append(margin_lower_bound(more, preds, bound=bound))
        g_top.append(out[0] - before)
        g_rand.append(out[1] - before)
        cov_top.append(out[0] <= true_margin)
        cov_rand.append(out[1] <= true_margin)
    diff = np.asarray(g_top) - np.asarray(g_rand)
    return RelabelGain(budget, float(np.mean(g_top)), float(np.mean(g_rand)),
                       float(diff.std(ddof=1) / math.sqrt(repetitions)), repetitions,
                       float(np.mean(cov_top)), float(np.mean(cov_rand)))
