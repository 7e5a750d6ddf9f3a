"""Audit planning: what to label next, and how much, to settle a release's certification.

A release shows "not certified" and the team has a labeling budget. :func:`plan_certification`
answers, for a grid of *designs* (so many new items with so many labels each, or so many
more labels on items already labelled), the probability that the verdict certifies the
release once that data has arrived, what it costs, and the cheapest design that reaches a
requested probability; or that no budget can certify it. :func:`relabel_priority` ranks
the labelled items by how much one more label is expected to tighten the certification
margin, and :func:`plan_equivalence` says how many items make a classifier's survey
equivalence interval narrower than a requested width.

**The generative model.** Future data are simulated from a model fitted to the current
data, as Homan et al. (2024) do by bootstrap for significance tests:

* A new item is drawn as a *template*, one of the current items (count vector :math:`m`,
  prediction :math:`d`), so the model's agreement with every label-count pattern is the
  observed one. Its :math:`k` labels are :math:`k` of the template's own labels drawn
  without replacement when :math:`k \\le K_m`: no model at all.
* More labels than an item has (:math:`k > K_m`, relabeling, and the limit of infinitely
  many) come from a label model: a mixture of BEST's Dirichlet-multinomials
  (:func:`~auditor.stats.fit_dirichlet_multinomial`, fitted with item weights), two per
  class (items that mostly agree and items that do not), each with the model's
  confusion on its items, fitted by EM. Given an item's labels and prediction, its class
  and then its label distribution :math:`p \\sim \\mathrm{Dir}(\alpha_t + m)` are drawn
  from their posterior, and the further labels from :math:`p`. One Dirichlet-multinomial
  alone extrapolates badly: it takes every item's label distribution from one smooth
  prior and ignores what the model's prediction says about the item, and underestimated
  the model's agreement with a 10-label plurality by 0.035 on simulated data where the
  mixture is within 0.005 (tests/stats/test_planning.py).
* Parameter uncertainty: every simulated future draws its own population, a Bayesian
  bootstrap (Dirichlet weights) over the templates (Rubin 1981). So the probabilities are
  posterior predictive ones: they include how unsure the current data leave the
  population margin, not only the sampling noise of the new data. (Calibrated, in
  simulation, over scenarios whose true margin the planner does not know; for one fixed
  truth no function of the current data can match the frequency of certification near
  the threshold, see ``bench/bench_plan_calibration.py`` and
  :func:`auditor.plan_calibration.fixed_truth_error_bound`.)
* What holds for one fixed truth is each design's *range*: the probability of certifying
  if the population margin is at either end of its ``confidence`` interval (the Bayesian
  bootstrap's), read off a logistic fit of the simulated verdicts against the simulated
  populations' margins. Given the current data, the chance of certifying grows with the
  true margin, so the range covers it whenever the interval covers the margin.

**The verdict simulated** is the one the badge uses: ``method="anytime"`` (default), or
the paper's fixed-sample ``"oms"`` / ``"hms"`` (and ``"bernstein"``), with the same bound,
threshold (``target``) and margin ``tau``. Under the anytime verdict an item's values are
frozen when it enters the stream (:class:`~auditor.stats.AnytimeState`): more labels on
items already counted cannot change it, so the anytime plan buys new items only and says
so; relabeling designs are planned for the fixed-sample verdicts. New items are assumed to
enter with all their labels (one audit after the whole batch arrives), and to be predicted
by the release.

Everything depends on the data only through the histogram of (count vector, prediction)
rows, so the cost of a plan grows with the number of distinct rows and designs, not with
the number of items: 100,000 items × 5 labels plan in a few seconds (``bench/bench_plan.py``).

References
----------
Xu, Walder & Xu, "Humanly Certifying Superhuman Classifiers", ICLR 2023 (the bounds).
Homan, Korn, Pandita & Welty, "How many ratings per item are necessary for reliable
significance testing?", 2024 (items × labels per item decides the outcome).
Lourie, Le Bras & Choi, "Scruples", AAAI 2021 (the Dirichlet-multinomial fit).
Rubin, "The Bayesian bootstrap", Annals of Statistics 9(1), 1981.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse, special

from auditor.stats._validation import StatsInputError, as_rng, check_nonnegative, check_probability
from auditor.stats.best.fit import _fit, _Objective
from auditor.stats.best.quadrature import _argmax_probabilities
from auditor.stats.certification import (
    BOUNDS,
    AnytimeState,
    _anytime_log_evalue,
    _as_labels,
    _check_choice,
    _check_tau,
    _confidence_many,
    _counts_array,
    _score_of_log_evalue,
    tie_credit,
)
from auditor.stats.counts import count_histogram
from auditor.stats.equivalence.combiners import DEFAULT_CLIP
from auditor.stats.equivalence.curve import (
    _bounds,
    _check_options,
    _classifier_terms,
    _fitted,
    _quantile,
    _validated_predictions,
    equivalence_values,
)
from auditor.stats.equivalence.curve import _prepare as _eq_prepare
from auditor.stats.equivalence.exact import exact_tables

__all__ = [
    "CertificationPlan",
    "Design",
    "EquivalencePlan",
    "LabelModel",
    "RelabelPriority",
    "plan_certification",
    "plan_equivalence",
    "relabel_priority",
]

PLAN_METHODS = ("anytime", "oms", "hms", "bernstein")
#: Labels per new item tried when none are given (plus the data's own median).
DEFAULT_LABELS_PER_ITEM = (2, 3, 5, 7, 10, 15, 20)
#: Extra labels on existing items tried (fixed-sample verdicts), as fractions of the items.
DEFAULT_RELABEL_FRACTIONS = (0.05, 0.1, 0.25, 0.5, 1.0)
#: The largest number of new items a default grid goes to.
MAX_NEW_ITEMS = 10_000_000
#: Template × composition cells computed exactly; beyond, each template's k-label
#: distribution is estimated from draws.
_EXACT_CELLS = 4_000_000
_SAMPLED_CELLS = 2_000_000
#: Bisection steps that refine the smallest number of new items reaching the probability.
_REFINE_STEPS = 4


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Design:
    """One way of spending a labeling budget, and what it buys.

    Attributes
    ----------
    new_items : int
        New items, each labelled ``labels_per_item`` times (and predicted by the release).
    labels_per_item : int
        Labels per new item (0 when ``new_items`` is 0).
    extra_labels_on_existing : int
        One more label on each of this many existing items, the top of
        :func:`relabel_priority`.
    probability : float
        Estimated probability that the verdict certifies the release once the data arrive.
    std_error : float
        Its Monte Carlo standard error, :math:`\\sqrt{p(1-p)/R}` over ``R`` simulations.
    labels : int
        Labels bought.
    cost : float or None
        ``labels`` times the price per label (None without prices).
    vendor : str or None
        The vendor whose labels (and price) the design assumes; None for the pooled labels.
    probability_low, probability_high : float or None
        The probability of certifying if the population's true margin lies at the lower
        (upper) end of its confidence interval at the plan's ``confidence`` (see
        :func:`plan_certification`). ``probability`` averages over how unsure the current
        data leave the margin; this range says how much it depends on it, and, unlike
        ``probability``, holds for one fixed truth: with that confidence, the probability
        that the design certifies, given the current data, lies in it. None for designs that
        only relabel existing items.
    """

    new_items: int
    labels_per_item: int
    extra_labels_on_existing: int
    probability: float
    std_error: float
    labels: int
    cost: float | None
    vendor: str | None = None
    probability_low: float | None = None
    probability_high: float | None = None

    def to_dict(self) -> dict:
        return {"new_items": self.new_items, "labels_per_item": self.labels_per_item,
                "extra_labels_on_existing": self.extra_labels_on_existing,
                "probability": self.probability, "std_error": self.std_error, "labels": self.labels,
                "cost": self.cost, "vendor": self.vendor, "probability_low": self.probability_low,
                "probability_high": self.probability_high}


@dataclass(frozen=True)
class LabelModel:
    """The fitted generative model of one pool of labels (all, or one vendor's).

    A mixture of BEST's Dirichlet-multinomials, one component per latent class: component
    ``t`` has weight ``weights[t]`` and prior ``alpha[t]`` (``regimes[t]`` as in
    :class:`~auditor.stats.DirichletMultinomialFit`: ``inf`` entries for the α → ∞ limit),
    and the model predicts class ``c`` on its items with probability
    ``model_confusion[t][c]``. New items are drawn from ``n_templates`` distinct (count
    vector, prediction) rows of ``n_items`` items.
    """

    weights: tuple[float, ...]
    alpha: tuple[tuple[float, ...], ...]
    regimes: tuple[str, ...]
    model_confusion: tuple[tuple[float, ...], ...]
    n_items: int
    n_templates: int
    vendor: str | None = None

    def to_dict(self) -> dict:
        return {"vendor": self.vendor, "weights": list(self.weights),
                "alpha": [[_finite(a) for a in row] for row in self.alpha], "regimes": list(self.regimes),
                "model_confusion": [list(r) for r in self.model_confusion], "n_items": self.n_items,
                "n_templates": self.n_templates}


@dataclass(frozen=True)
class CertificationPlan:
    """What :func:`plan_certification` found.

    Attributes
    ----------
    designs : tuple of Design
        Every design simulated, cheapest first (the first is "no more labels").
    recommended : Design or None
        The cheapest design whose probability reaches ``probability``; None when none
        of the designs within the budget does.
    assured : Design or None
        The cheapest design whose ``probability_low`` reaches ``probability``: it certifies
        with at least that probability even if the true margin is at the lower end of its
        confidence interval (with ``confidence``, whatever the truth). None when none does.
    confidence : float
        The confidence of the designs' probability ranges.
    certifiable : bool
        False is the answer "cannot be certified at any budget": the population margin
        :math:`\\theta_L - \\tau - \\sqrt{\\theta_U}` of new items, with the best number of labels
        per item (up to infinitely many), is negative with posterior probability at least
        ``1 - rule_out``.
    certifiable_probability : float
        The posterior probability that it is positive (how sure either answer is).
    margins : dict
        The estimated population margin per number of labels per new item (``"inf"``: the
        limit), for the pooled labels (and ``"<vendor>:k"`` per vendor).
    certified_now : bool
        The verdict on the current data.
    score_now : float
        Its confidence score.
    probability, target, tau, method, bound : as passed.
    n_simulations : int
    models : tuple of LabelModel
    notes : tuple of str
        What the plan assumed or could not do, in words.
    """

    designs: tuple[Design, ...]
    recommended: Design | None
    certifiable: bool
    certifiable_probability: float
    margins: Mapping[str, float]
    certified_now: bool
    score_now: float
    probability: float
    target: float
    tau: float
    method: str
    bound: str
    n_simulations: int
    models: tuple[LabelModel, ...]
    notes: tuple[str, ...] = ()
    assured: Design | None = None
    confidence: float = 0.8

    def to_dict(self) -> dict:
        """A JSON-ready dictionary (NaN becomes None)."""
        return {
            "designs": [d.to_dict() for d in self.designs],
            "recommended": None if self.recommended is None else self.recommended.to_dict(),
            "assured": None if self.assured is None else self.assured.to_dict(),
            "confidence": self.confidence,
            "certifiable": self.certifiable, "certifiable_probability": self.certifiable_probability,
            "margins": {k: _finite(v) for k, v in self.margins.items()},
            "certified_now": self.certified_now, "score_now": _finite(self.score_now),
            "probability": self.probability, "target": self.target, "tau": self.tau,
            "method": self.method, "bound": self.bound, "n_simulations": self.n_simulations,
            "models": [m.to_dict() for m in self.models],
            "notes": list(self.notes),
        }


@dataclass(frozen=True, eq=False)
class RelabelPriority:
    """Labelled items ranked by how much one more label is expected to tighten the margin.

    ``indices`` are row indices into the ``counts`` passed (best first); ``expected_gain``
    the expected change of the margin :math:`L - U` (``bound``'s :math:`U`) from one more
    label on that item alone, in the margin's units; ``labels`` how many labels the item
    has now. Items without labels are not ranked.
    """

    indices: np.ndarray
    expected_gain: np.ndarray
    labels: np.ndarray
    bound: str

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def top(self, n: int) -> np.ndarray:
        """The first ``n`` row indices."""
        return self.indices[: max(0, int(n))]


@dataclass(frozen=True)
class EquivalencePlan:
    """How many items make the survey equivalence interval narrower than ``width``.

    ``designs`` are ``(n_items, expected_width)`` pairs; ``recommended_items`` the
    smallest number of items (from the grid, refined) whose expected width is at most
    ``width`` (None if none within ``max_items``); ``current_width`` the interval's width
    on the current items (``inf`` when an end is "< 0" or "> K").
    """

    designs: tuple[tuple[int, float], ...]
    recommended_items: int | None
    current_items: int
    current_width: float
    width: float
    confidence: float
    combiner: str
    scorer: str
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"designs": [{"n_items": n, "expected_width": _finite(w)} for n, w in self.designs],
                "recommended_items": self.recommended_items, "current_items": self.current_items,
                "current_width": _finite(self.current_width), "width": self.width,
                "confidence": self.confidence, "combiner": self.combiner, "scorer": self.scorer,
                "notes": list(self.notes)}


def _finite(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


# --------------------------------------------------------------------------- the fitted population


_FINITE, _ZERO, _INFINITE = 0, 1, 2
_REGIMES = {"finite": _FINITE, "zero": _ZERO, "infinite": _INFINITE}
#: EM stops when an iteration improves the log-likelihood by less than this per item.
_EM_TOL = 1e-6
_EM_MAX_ITER = 200
_PER_CLASS = 2


@dataclass(eq=False)
class _Population:
    """Templates (distinct count vector × prediction rows) and the fitted label model.

    The label model is a mixture of BEST's Dirichlet-multinomials, one component per
    latent class ``t`` (weight ``weight[t]``, prior ``alpha[t]`` of kind
    ``kind[t]``: finite, or BEST's α → 0 / α → ∞ limits with mean ``mean[t]``), and the
    model's prediction given the class, ``confusion[t, c]``; ``resp[u, t]`` is the
    posterior probability of class ``t`` for template ``u``.
    """

    rows: np.ndarray          # (U, L) int counts
    pred: np.ndarray          # (U,) int predictions
    mult: np.ndarray          # (U,) float multiplicities
    alpha: np.ndarray         # (T, L) (0 for the α → 0 limit, inf for α → ∞)
    kind: np.ndarray          # (T,) _FINITE, _ZERO or _INFINITE
    mean: np.ndarray          # (T, L) prior means
    weight: np.ndarray        # (T,)
    confusion: np.ndarray     # (T, L)
    resp: np.ndarray          # (U, T)
    log_likelihood: float
    vendor: str | None = None
    cache: dict = field(default_factory=dict)

    @property
    def n_labels(self) -> int:
        return self.rows.shape[1]

    @property
    def k(self) -> np.ndarray:
        return self.rows.sum(axis=1)

    def beta(self, rows: np.ndarray | None = None) -> np.ndarray:
        """(n, T, L) posterior Dirichlet parameters given each component (α + m; the
        α → ∞ components' entries are unused)."""
        rows = self.rows if rows is None else rows
        a = np.where(self.kind[:, None] == _INFINITE, 0.0, self.alpha)
        return a[None, :, :] + rows.astype(float)[:, None, :]

    def responsibilities(self, rows: np.ndarray, pred: np.ndarray) -> np.ndarray:
        """P(class t | counts, prediction) for any rows: (n, T)."""
        ll = _component_log_lik(rows, self) + np.log(self.weight)[None, :] + np.log(self.confusion[:, pred]).T
        ll -= ll.max(axis=1, keepdims=True)
        p = np.exp(ll)
        return p / p.sum(axis=1, keepdims=True)

    def predictive(self, rows: np.ndarray | None = None, pred: np.ndarray | None = None) -> np.ndarray:
        """P(the item's next label is c): (n, L), the templates' by default."""
        if rows is None:
            rows, resp = self.rows, self.resp
        else:
            resp = self.responsibilities(rows, pred)
        b = self.beta(rows)
        tot = b.sum(axis=2, keepdims=True)
        post = np.divide(b, tot, out=np.zeros_like(b), where=tot > 0)
        post = np.where((self.kind == _INFINITE)[None, :, None], self.mean[None, :, :], post)
        return np.einsum("nt,ntc->nc", resp, post)

    def model(self) -> LabelModel:
        names = {v: k for k, v in _REGIMES.items()}
        return LabelModel(
            weights=tuple(float(w) for w in self.weight),
            alpha=tuple(tuple(float(a) for a in row) for row in self.alpha),
            regimes=tuple(names[int(k)] for k in self.kind),
            model_confusion=tuple(tuple(float(c) for c in row) for row in self.confusion),
            n_items=int(self.mult.sum()), n_templates=int(self.rows.shape[0]), vendor=self.vendor)


def _distinct(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct rows of a non-negative int matrix, multiplicities and each row's group."""
    return count_histogram(rows)


def _component_log_lik(rows: np.ndarray, comps) -> np.ndarray:
    """log P(one sequence of labels with counts ``rows`` | component): (n, T)."""
    m = rows.astype(float)
    k = m.sum(axis=1)
    n, t = m.shape[0], comps.kind.shape[0]
    out = np.empty((n, t))
    with np.errstate(divide="ignore", invalid="ignore"):
        logmean = np.log(comps.mean)
    for j in range(t):
        kind = comps.kind[j]
        if kind == _FINITE:
            a = comps.alpha[j]
            pos = a > 0
            terms = np.where(pos[None, :], special.gammaln(a[None, :] + m) - special.gammaln(np.where(pos, a, 1.0)),
                             np.where(m > 0, -np.inf, 0.0))
            out[:, j] = special.gammaln(a.sum()) - special.gammaln(a.sum() + k) + terms.sum(axis=1)
        elif kind == _ZERO:
            unanimous = (m > 0).sum(axis=1) == 1
            out[:, j] = np.where(unanimous, logmean[j][m.argmax(axis=1)], -np.inf)
        else:
            out[:, j] = np.where(m > 0, m * logmean[j][None, :], 0.0).sum(axis=1)
    return out


def _em_step(rows, pred, mult, resp, prev: _Population | None, full: bool, vendor) -> tuple[_Population, list]:
    """One EM step of the label model: M-step from ``resp``, then the E-step."""
    n_labels = rows.shape[1]
    n_total = float(mult.sum())
    wt = mult[:, None] * resp
    tot = wt.sum(axis=0)
    keep = tot > 1e-9 * n_total
    wt, tot = wt[:, keep], tot[keep]
    alpha, kind, mean = [], [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for j in range(wt.shape[1]):
            sel = wt[:, j] > 1e-12 * n_total
            step = None
            if prev is not None and not full and keep.all():
                step = _warm_m_step(rows[sel], wt[sel, j], prev.alpha[j], prev.kind[j])
            if step is None:
                fit = _fit(rows[sel], wt[sel, j], (), n_labels, [])
                step = (np.asarray(fit.alpha, dtype=float), _REGIMES[fit.regime],
                        np.asarray(fit.prior_mean, dtype=float))
            alpha.append(step[0])
            kind.append(step[1])
            mean.append(step[2])
    conf = np.stack([np.bincount(pred, weights=wt[:, j], minlength=n_labels) for j in range(wt.shape[1])])
    conf = (conf + 1e-9) / (conf.sum(axis=1, keepdims=True) + n_labels * 1e-9)
    comps = _Population(rows=rows, pred=pred, mult=mult, alpha=np.stack(alpha), kind=np.asarray(kind),
                        mean=np.stack(mean), weight=tot / tot.sum(), confusion=conf,
                        resp=np.zeros((rows.shape[0], wt.shape[1])), log_likelihood=-math.inf, vendor=vendor)
    ll = _component_log_lik(rows, comps) + np.log(comps.weight)[None, :] + np.log(conf[:, pred]).T
    top = ll.max(axis=1, keepdims=True)
    new = np.exp(ll - top)
    norm = new.sum(axis=1, keepdims=True)
    comps.resp = new / norm
    comps.log_likelihood = float(mult @ (top[:, 0] + np.log(norm[:, 0])))
    return comps, [str(w.message) for w in caught]


def _fit_population(rows: np.ndarray, pred: np.ndarray, mult: np.ndarray, vendor: str | None,
                    notes: list[str]) -> _Population:
    """EM for the mixture of Dirichlet-multinomials with the model's confusion: two
    components per class (started from the items whose plurality is that class, split by
    whether it holds at least 80% of the labels), accelerated by SQUAREM (Varadhan &
    Roland 2008) on the responsibilities."""
    n_total = float(mult.sum())
    code = _credit_code(rows)
    resp = (code > 0) / (code > 0).sum(axis=1, keepdims=True)
    if _PER_CLASS == 2:
        share = rows.max(axis=1) / rows.sum(axis=1)
        easy = (share >= 0.8)[:, None]
        resp = np.concatenate([resp * easy, resp * ~easy], axis=1)
    comps, caught = _em_step(rows, pred, mult, resp, None, True, vendor)
    for it in range(_EM_MAX_ITER):
        full = it % 25 == 0
        c1, _ = _em_step(rows, pred, mult, comps.resp, comps, full, vendor)
        c2, caught = _em_step(rows, pred, mult, c1.resp, c1, False, vendor)
        best = c2
        if comps.resp.shape == c1.resp.shape == c2.resp.shape:
            r = c1.resp - comps.resp
            v = c2.resp - 2.0 * c1.resp + comps.resp
            nv = float(np.sqrt((v * v).sum()))
            if nv > 0:
                a = min(-1.0, -float(np.sqrt((r * r).sum())) / nv)
                x = np.clip(comps.resp - 2.0 * a * r + a * a * v, 0.0, None)
                x /= np.where(x.sum(axis=1, keepdims=True) > 0, x.sum(axis=1, keepdims=True), 1.0)
                if np.isfinite(x).all() and (x.sum(axis=1) > 0).all():
                    c3, caught3 = _em_step(rows, pred, mult, x, c2, False, vendor)
                    if c3.log_likelihood > c2.log_likelihood:
                        best, caught = c3, caught3
        done = best.log_likelihood - comps.log_likelihood < _EM_TOL * n_total
        comps = best
        if done:
            break
    name = "" if vendor is None else f" of {vendor}"
    if (rows.sum(axis=1) == 1).all():
        notes.append(f"label model{name}: every item has one label, so the annotators' disagreement is not "
                     "identified; the model assumes (BEST's limit) that more labels would agree")
    del caught
    return comps


def _warm_m_step(rows: np.ndarray, w: np.ndarray, alpha: np.ndarray, kind: int):
    """A generalised-EM M-step for one component: a few Newton steps on BEST's objective
    from the last α (same regime), or None when a full fit is needed."""
    totals = w @ rows
    used = totals > 0
    if kind == _INFINITE:
        if not np.array_equal(used, np.isinf(alpha)):
            return None
        mean = totals / totals.sum()
        return alpha, kind, mean
    if kind == _ZERO:
        if not ((rows > 0).sum(axis=1) == 1).all():
            return None
        gold = rows.argmax(axis=1)
        mean = np.bincount(gold, weights=w, minlength=rows.shape[1]) / w.sum()
        return alpha, kind, mean
    if not np.array_equal(used, alpha > 0) or ((rows[:, used] > 0).sum(axis=1) == 1).all():
        return None
    obj = _Objective(rows[:, used], w)
    theta = np.log(alpha[used])
    f = obj.theta_value(theta)
    for _ in range(3):
        g = obj.theta_grad(theta)
        h = obj.theta_hess(theta)
        try:
            chol = np.linalg.cholesky(h)
        except np.linalg.LinAlgError:
            return None
        step = np.linalg.solve(chol.T, np.linalg.solve(chol, g))
        for _ in range(20):
            f_new = obj.theta_value(theta - step)
            if f_new <= f:
                break
            step = step / 2.0
        else:
            return None
        theta, f = theta - step, f_new
        if float(np.max(np.abs(step))) < 1e-10:
            break
    if not np.all(np.isfinite(theta)) or np.exp(theta).sum() > 1e10:
        return None
    out = np.zeros_like(alpha)
    out[used] = np.exp(theta)
    return out, kind, out / out.sum()


def _population(counts: np.ndarray, pred: np.ndarray, vendor: str | None, notes: list[str]) -> _Population | None:
    labelled = counts.sum(axis=1) > 0
    if not labelled.any():
        return None
    uniq, mult, _ = _distinct(np.column_stack([counts[labelled], pred[labelled]]))
    return _fit_population(uniq[:, :-1].astype(np.int64), uniq[:, -1].astype(np.int64), mult.astype(float),
                           vendor, notes)


# --------------------------------------------------------------------------- k-label items of a template


def _compositions(k: int, n_labels: int) -> np.ndarray:
    """All count vectors of ``k`` labels over ``n_labels`` classes, (V, n_labels)."""
    if n_labels == 1:
        return np.array([[k]], dtype=np.int64)
    rows = [np.array([[k]], dtype=np.int64)]
    # stars and bars, column by column: the first c columns hold some of the k labels
    out = np.zeros((1, 0), dtype=np.int64)
    remaining = np.array([k], dtype=np.int64)
    for _ in range(n_labels - 1):
        reps = remaining + 1
        first = np.repeat(out, reps, axis=0)
        values = np.concatenate([np.arange(r) for r in reps])
        out = np.column_stack([first, values])
        remaining = np.repeat(remaining, reps) - values
    del rows
    return np.column_stack([out, remaining])


def _credit_code(comps: np.ndarray) -> np.ndarray:
    """(V, L): 0 where the class is not among the plurality, else the number of tied classes."""
    top = comps.max(axis=1, keepdims=True)
    tied = comps == top
    return np.where(tied, tied.sum(axis=1, keepdims=True), 0)


def _log_pmf(pop: _Population, comps: np.ndarray, k: int, rows_idx: np.ndarray) -> np.ndarray:
    """log P(the template's k-label item has counts ``comps``): (len(rows_idx), V)."""
    m = pop.rows[rows_idx].astype(float)                       # (u, L)
    km = m.sum(axis=1)                                         # (u,)
    v = comps.astype(float)[None, :, :]                         # (1, V, L)
    out = np.full((m.shape[0], comps.shape[0]), -np.inf)
    sub = km >= k
    if sub.any():
        mm = m[sub][:, None, :]
        ok = (v <= mm).all(axis=2)
        with np.errstate(invalid="ignore"):
            lp = (special.gammaln(mm + 1) - special.gammaln(v + 1) - special.gammaln(np.maximum(mm - v, 0) + 1)).sum(2)
        lp -= (special.gammaln(km[sub] + 1) - special.gammaln(k + 1) - special.gammaln(km[sub] - k + 1))[:, None]
        out[sub] = np.where(ok, lp, -np.inf)
    ext = ~sub
    if ext.any():
        mm = m[ext][:, None, :]
        w = v - mm                                               # labels still to draw
        ok = (w >= 0).all(axis=2)
        j = (k - km[ext])[:, None]
        wpos = np.maximum(w, 0.0)
        base = special.gammaln(j + 1) - special.gammaln(wpos + 1).sum(axis=2)
        beta = pop.beta(pop.rows[rows_idx][ext])                  # (u, T, L)
        resp = pop.resp[rows_idx][ext]
        acc = np.full(base.shape, -np.inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            for t in range(beta.shape[1]):
                if pop.kind[t] == _INFINITE:
                    logp = np.log(pop.mean[t])
                    lp = np.where(wpos > 0, wpos * logp[None, None, :], 0.0).sum(axis=2)
                else:
                    bt = beta[:, t, None, :]
                    b0 = bt.sum(axis=2)
                    pos = bt > 0
                    terms = np.where(pos, special.gammaln(bt + wpos) - special.gammaln(np.where(pos, bt, 1.0)),
                                     np.where(wpos > 0, -np.inf, 0.0))
                    lp = special.gammaln(b0) - special.gammaln(b0 + j) + terms.sum(axis=2)
                acc = np.logaddexp(acc, np.log(resp[:, t])[:, None] + lp)
        out[ext] = np.where(ok, base + acc, -np.inf)
    return out


@dataclass(frozen=True, eq=False)
class _Atoms:
    """Per-item values a new k-label item can take, and each template's distribution over them."""

    x_t: np.ndarray      # (A,)
    x_e: np.ndarray      # (A,) NaN when k < 2
    credit: np.ndarray   # (A,)
    q: np.ndarray        # (U, A) rows sum to 1
    k: int


def _atom_index(sq: np.ndarray, code: np.ndarray, n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (Σz², credit code) keys, sorted, and each entry's index among them."""
    key = sq.astype(np.int64) * (n_labels + 1) + code.astype(np.int64)
    top = int(key.max()) + 1 if key.size else 1
    if top > 4 * key.size + 1_000_000:
        uniq, inv = np.unique(key, return_inverse=True)
        return uniq, inv.reshape(key.shape)
    # keys are small integers (Σz² ≤ k²): a lookup table instead of a sort
    present = np.zeros(top, dtype=bool)
    present[key.ravel()] = True
    uniq = np.flatnonzero(present)
    lookup = np.cumsum(present) - 1
    return uniq, lookup[key]


def _atom_values(keys: np.ndarray, k: int, n_labels: int):
    sq = (keys // (n_labels + 1)).astype(float)
    code = (keys % (n_labels + 1)).astype(float)
    x_t = sq / (k * k)
    x_e = (sq - k) / (k * (k - 1.0)) if k >= 2 else np.full(sq.shape, np.nan)
    credit = np.divide(1.0, code, out=np.zeros_like(code), where=code > 0)
    return x_t, x_e, credit


def _atoms(pop: _Population, k: int, rng: np.random.Generator) -> _Atoms:
    """The distribution of a new k-label item's (X^t, X^e, credit) under each template."""
    if k in pop.cache:
        return pop.cache[k]
    n_labels = pop.n_labels
    u = pop.rows.shape[0]
    n_comps = math.comb(k + n_labels - 1, n_labels - 1)
    if u * n_comps <= _EXACT_CELLS:
        comps = _compositions(k, n_labels)
        sq = (comps * comps).sum(axis=1)
        code = _credit_code(comps)                                      # (V, L)
        keys, inv = _atom_index(np.repeat(sq[:, None], n_labels, axis=1), code, n_labels)   # inv (V, L)
        q = np.zeros((u, keys.shape[0]))
        step = max(1, _EXACT_CELLS // max(1, n_comps * 4))
        for start in range(0, u, step):
            idx = np.arange(start, min(u, start + step))
            lp = _log_pmf(pop, comps, k, idx)
            pmf = np.exp(lp - lp.max(axis=1, keepdims=True))
            pmf /= pmf.sum(axis=1, keepdims=True)
            cols = inv[:, pop.pred[idx]].T                               # (u, V) atom of each composition
            rows = np.repeat(np.arange(idx.size), n_comps)
            block = sparse.coo_matrix((pmf.ravel(), (rows, cols.ravel())), shape=(idx.size, keys.shape[0]))
            q[idx] = block.toarray()
    else:
        # Too many count vectors to enumerate: draw each template's k-label items.
        s = int(min(1000, max(32, _SAMPLED_CELLS // max(1, u))))
        draws = _draw_items(pop, k, s, rng)                               # (u, s, L)
        sq = np.einsum("usl,usl->us", draws, draws)
        # the credit code of the prediction's class only: number of tied classes if it is among them
        top = draws.max(axis=2)
        mine = np.take_along_axis(draws, np.broadcast_to(pop.pred[:, None, None], (u, s, 1)), axis=2)[..., 0]
        code = np.where(mine == top, (draws == top[..., None]).sum(axis=2), 0)
        keys, inv = _atom_index(sq, code, n_labels)
        cells = (np.arange(u)[:, None] * keys.shape[0] + inv).ravel()
        q = np.bincount(cells, minlength=u * keys.shape[0]).reshape(u, keys.shape[0]) / s
    x_t, x_e, credit = _atom_values(keys, k, n_labels)
    atoms = _Atoms(x_t=x_t, x_e=x_e, credit=credit, q=q, k=k)
    pop.cache[k] = atoms
    return atoms


def _draw_items(pop: _Population, k: int, s: int, rng: np.random.Generator) -> np.ndarray:
    """``s`` draws of each template's k-label count vector: (U, s, L).

    Templates with at least ``k`` labels give ``k`` of their own labels drawn without
    replacement (a multivariate hypergeometric draw); the others all of theirs plus labels
    from the Pólya urn of their posterior (each drawn label joins it), which is a
    Dirichlet-multinomial: label proportions from the posterior Dirichlet of the item's
    class, then a multinomial; the pooled proportions in the ``"infinite"`` regime.
    """
    u, n_labels = pop.rows.shape
    km = pop.k
    out = np.zeros((u, s, n_labels), dtype=np.int64)
    for t in np.flatnonzero(km >= k):
        # "count" is the faster method up to a few thousand labels; "marginals" costs O(L) per draw
        out[t] = rng.multivariate_hypergeometric(pop.rows[t], k, size=s,
                                                 method="count" if km[t] <= 1000 else "marginals")
    ext = np.flatnonzero(km < k)
    if ext.size:
        # the item's class, then label proportions from its posterior (fixed for α → ∞)
        cum = np.cumsum(pop.resp[ext], axis=1)
        x = rng.random((ext.size, s, 1)) * cum[:, None, -1:]
        comp = np.minimum((x >= cum[:, None, :]).sum(axis=2), cum.shape[1] - 1)      # (u, s)
        beta = pop.beta(pop.rows[ext])                                                # (u, T, L)
        shape = beta[np.arange(ext.size)[:, None], comp]                              # (u, s, L)
        fixed = (pop.kind[comp] == _INFINITE)[..., None]
        g = rng.standard_gamma(np.where(fixed, 1.0, shape))
        tot = g.sum(axis=2, keepdims=True)
        p = np.where(fixed, pop.mean[comp], g / np.where(tot > 0, tot, 1.0))
        p /= p.sum(axis=2, keepdims=True)
        todo = np.broadcast_to((k - km[ext])[:, None], (ext.size, s))
        out[ext] = pop.rows[ext][:, None, :] + rng.multinomial(todo, p)
    return out


# --------------------------------------------------------------------------- streams and verdicts


@dataclass(frozen=True)
class _Sums:
    """Count, sum and sum of squares of one stream's values (arrays over simulations)."""

    n: np.ndarray
    s: np.ndarray
    ss: np.ndarray


def _anytime_v(n0, s0, v0, n, s_new, ss_new):
    """The variance process after ``n`` new values appended in random order, in expectation.

    With the stream's state before them (``n0``, ``s0``, ``v0``), the new values' mean
    :math:`\\bar x` and variance :math:`\\sigma^2`, and the predictable centre
    :math:`c_j = (1/2 + s_0 + T_{j-1}) / (n_0 + j)` (:mod:`~auditor.stats.confseq`), a
    uniformly random order gives

    .. math:: E\\sum_j (x_j - c_j)^2 = (\\bar x (n_0+1) - a)^2 H_2
              + \\sigma^2 \\Bigl[n + \\tfrac{2 (n - b H_1)}{n-1}
              + \\tfrac{(n + 2b) H_1 - n - b(n+b) H_2}{n-1}\\Bigr]

    with :math:`a = 1/2 + s_0`, :math:`b = n_0 + 1`, :math:`H_1 = \\sum_j 1/(n_0+j)`,
    :math:`H_2 = \\sum_j 1/(n_0+j)^2` (sampling without replacement from the new values).
    The order's own randomness moves :math:`V` by far less than the e-process can see.
    """
    n = np.asarray(n, dtype=float)
    n0 = np.asarray(n0, dtype=float)
    safe_n = np.maximum(n, 1.0)
    mean = s_new / safe_n
    var = np.maximum(ss_new / safe_n - mean * mean, 0.0)
    a = 0.5 + s0
    b = n0 + 1.0
    h1 = special.digamma(n0 + n + 1.0) - special.digamma(n0 + 1.0)
    h2 = special.polygamma(1, n0 + 1.0) - special.polygamma(1, n0 + n + 1.0)
    nm1 = np.maximum(n - 1.0, 1.0)
    spread = n + 2.0 * (n - b * h1) / nm1 + ((n + 2.0 * b) * h1 - n - b * (n + b) * h2) / nm1
    spread = np.where(n > 1, spread, n)
    out = v0 + (mean * b - a) ** 2 * h2 + var * spread
    return np.where(n > 0, out, v0)


@dataclass(frozen=True, eq=False)
class _Current:
    """The current data as the verdict sees it."""

    anytime: AnytimeState | None
    t: _Sums            # per-item X^t of labelled items (scalars)
    e: _Sums            # X^e of items with two labels
    l: _Sums  # noqa: E741 - the streams are named t, e, l throughout: credit of labelled, predicted items


def _sums_of(x: np.ndarray) -> _Sums:
    x = x[~np.isnan(x)]
    return _Sums(np.asarray(float(x.size)), np.asarray(float(x.sum())), np.asarray(float((x * x).sum())))


def _verdict_scores(cur: _Current, new: dict, *, method: str, bound: str, tau: float, split: float) -> np.ndarray:
    """Scores of the verdict after adding ``new`` (per stream: n, s, ss arrays) to the current data."""
    up = "t" if bound == "theoretical" else "e"
    if method == "anytime":
        st = cur.anytime
        ustream = st.upper_t if up == "t" else st.upper_e
        un, us, uss = new[up]
        ln_, ls, lss = new["l"]
        uv = _anytime_v(ustream.n, ustream.s, ustream.v, un, us, uss)
        lv = _anytime_v(st.lower.n, st.lower.s, st.lower.v, ln_, ls, lss)
        n_u, n_l = ustream.n + un, st.lower.n + ln_
        s_u, s_l = ustream.s + us, st.lower.s + ls
        n_u, n_l, s_u, s_l, uv, lv = np.broadcast_arrays(n_u, n_l, s_u, s_l, uv, lv)
        score = np.full(n_u.shape, -1.0)
        # Where the stream means lie in H0 (L̄ ≤ τ + √Ū), E* ≤ 1 at that point (each bet's gap
        # is 0), so S ≤ 0: not certified, and the search is skipped.
        with np.errstate(invalid="ignore", divide="ignore"):
            live = (n_u > 0) & (n_l > 0) & (s_l / n_l > tau + np.sqrt(np.clip(s_u / n_u, 0.0, None)))
        if live.any():
            log_e = _anytime_log_evalue(n_u[live], s_u[live], uv[live], n_l[live], s_l[live], lv[live],
                                        tau=tau, split=split)
            score[live] = _score_of_log_evalue(log_e)
        return np.where((n_u > 0) & (n_l > 0), score, np.nan)
    cu = cur.t if up == "t" else cur.e
    un, us, uss = (cu.n + new[up][0], cu.s + new[up][1], cu.ss + new[up][2])
    ln_, ls, lss = (cur.l.n + new["l"][0], cur.l.s + new["l"][1], cur.l.ss + new["l"][2])
    ok = (un > 0) & (ln_ > 0)
    un1, ln1 = np.maximum(un, 1.0), np.maximum(ln_, 1.0)
    upper = np.sqrt(np.clip(us / un1, 0.0, 1.0))
    lower = np.clip(ls / ln1, 0.0, 1.0)
    kw = {}
    if method == "bernstein":
        def var(n, s, ss):
            return np.clip((ss - s * s / np.maximum(n, 1.0)) / np.maximum(n - 1.0, 1.0), 0.0, 0.25)
        kw = dict(var_upper=np.where(un > 1, var(un, us, uss), 0.25), var_lower=np.where(ln_ > 1, var(ln_, ls, lss), 0.25))
    score = _confidence_many(lower, upper, un1, ln1, tau=tau, method=method, **kw)
    return np.where(ok, score, np.nan)


# --------------------------------------------------------------------------- relabel priority


def _item_gains(counts: np.ndarray, pred: np.ndarray, predictive: np.ndarray, *, bound: str,
                n_u: float, s_u: float, n_l: float) -> np.ndarray:
    """Expected change of L − U from one more label on each item (rows with a label)."""
    m = counts.astype(float)
    k = m.sum(axis=1)
    n_labels = m.shape[1]
    sq = (m * m).sum(axis=1)
    rows = np.arange(m.shape[0])
    cur_credit = tie_credit(m, pred)
    upper = math.sqrt(max(s_u / max(n_u, 1.0), 1e-12))
    gain = np.zeros(m.shape[0])
    for c in range(n_labels):
        after = m.copy()
        after[:, c] += 1.0
        credit = tie_credit(after, pred)
        sq_after = sq + 2.0 * m[:, c] + 1.0
        if bound == "theoretical":
            dx = sq_after / (k + 1.0) ** 2 - sq / k**2
            d_upper = dx / (2.0 * upper * n_u)
        else:
            x_after = (sq_after - (k + 1.0)) / ((k + 1.0) * k)
            with np.errstate(invalid="ignore", divide="ignore"):
                x_now = np.where(k >= 2, (sq - k) / (k * (k - 1.0)), np.nan)
            mean = s_u / max(n_u, 1.0)
            # an item with one label enters the U_e stream: the mean moves by (x − mean)/(n + 1)
            d_mean = np.where(k >= 2, (x_after - x_now) / max(n_u, 1.0), (x_after - mean) / (n_u + 1.0))
            d_upper = d_mean / (2.0 * math.sqrt(max(mean, 1e-12)))
        gain += predictive[rows, c] * ((credit - cur_credit) / n_l - d_upper)
    return gain


def _item_predictive(pop: _Population, counts: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """P(next label = c) for each item: the posterior predictive of its own counts and prediction."""
    out = np.zeros(counts.shape)
    has = counts.sum(axis=1) > 0
    if has.any():
        out[has] = pop.predictive(counts[has], pred[has])
    return out


def _prepare(counts, predictions):
    m = _counts_array(counts)
    pred = _as_labels(predictions, m.shape[0], m.shape[1])
    return m, pred


def relabel_priority(counts, predictions, *, bound: str = "theoretical") -> RelabelPriority:
    """Labelled items ranked by how much one more label is expected to tighten the margin.

    For item :math:`n` with counts :math:`m_n` (:math:`K_n` labels) and prediction
    :math:`d_n`, the next label is :math:`c` with the posterior predictive probability
    :math:`q_{nc} = \\sum_t P(t \\mid m_n, d_n)\\,(\\alpha_{tc} + m_{nc}) / (A_t + K_n)` of the fitted
    label model (see :mod:`auditor.stats.planning`). Its expected effect on the margin
    :math:`L - U` is

    .. math:: g_n = \\sum_c q_{nc}\\Bigl[\\frac{\\mathrm{cr}(m_n + e_c, d_n) - \\mathrm{cr}(m_n, d_n)}{N_l}
              - \\frac{X(m_n + e_c) - X(m_n)}{2 U N_u}\\Bigr]

    (:math:`\\mathrm{cr}` the tie credit behind :math:`L`, :math:`X` the per-item value behind
    :math:`U^2`, to first order in :math:`U`). Items rank by :math:`g_n`, largest first (ties:
    fewer labels first, then row order): items with one label (their :math:`X^t = 1` falls
    most), items whose plurality a label could move onto or off the model's label.

    Caveat: the ranking reads the items' labels, so labels bought this way depend on earlier
    labels of the same items; the bounds assume they do not (see
    :class:`~auditor.stats.AnytimeState`), and the anytime verdict ignores labels that reach
    an item after it entered its stream. The list serves the fixed-sample verdicts and the
    point estimates.

    Parameters
    ----------
    counts : array-like of int, shape (N, L), LabelCounts or Annotations
    predictions : array-like, shape (N,) class indices or (N, L) probabilities
    bound : {"theoretical", "empirical"}
        Which :math:`U` the margin uses.

    Returns
    -------
    RelabelPriority

    Examples
    --------
    Unanimous items the model agrees with come first here: a dissenting label would lower
    :math:`U` and cannot move their plurality, whereas on ``[2, 1]`` and ``[1, 0]`` it
    could make a tie and cost :math:`L` credit.

    >>> r = relabel_priority([[3, 0], [2, 1], [1, 0], [0, 3]] * 25, [0, 0, 0, 1] * 25)
    >>> len(r), r.indices[:3].tolist()
    (100, [0, 4, 8])
    """
    _check_choice(bound, BOUNDS, "bound")
    m, pred = _prepare(counts, predictions)
    pop = _population(m, pred, None, [])
    if pop is None:
        raise StatsInputError("`counts` has no labelled item.")
    return _relabel_rank(pop, m, pred, bound, _current_sums(m, pred))


def _relabel_rank(pop: _Population, m: np.ndarray, pred: np.ndarray, bound: str, cur: _Current) -> RelabelPriority:
    """:func:`relabel_priority` with the fitted model and current sums at hand; the gains are
    computed once per distinct (count vector, prediction) row."""
    su = cur.t if bound == "theoretical" else cur.e
    if float(su.n) == 0:
        raise StatsInputError("the empirical bound needs an item with two labels.")
    labelled = np.flatnonzero(m.sum(axis=1) > 0)
    uniq, _, inv = _distinct(np.column_stack([m[labelled], pred[labelled]]))
    rows, rpred = uniq[:, :-1], uniq[:, -1]
    q = _item_predictive(pop, rows, rpred)
    gain = _item_gains(rows, rpred, q, bound=bound, n_u=float(su.n), s_u=float(su.s), n_l=float(cur.l.n))[inv]
    k = m[labelled].sum(axis=1)
    order = np.lexsort((labelled, k, -np.round(gain, 15)))
    return RelabelPriority(indices=labelled[order], expected_gain=gain[order], labels=k[order], bound=bound)


def _current_sums(m: np.ndarray, pred: np.ndarray) -> _Current:
    mf = m.astype(float)
    k = mf.sum(axis=1)
    sq = (mf * mf).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        x_t = np.where(k > 0, sq / (k * k), np.nan)
        x_e = np.where(k >= 2, (sq - k) / (k * (k - 1.0)), np.nan)
    cr = tie_credit(mf, pred)
    cr[k == 0] = np.nan
    return _Current(anytime=None, t=_sums_of(x_t), e=_sums_of(x_e), l=_sums_of(cr))


# --------------------------------------------------------------------------- the plan


def _check_int_grid(values, name, *, minimum: int) -> tuple[int, ...]:
    try:
        out = sorted({int(v) for v in values})
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`{name}` must be a sequence of integers; got {values!r}.") from exc
    if any(float(v) != int(v) for v in values):
        raise StatsInputError(f"`{name}` must hold whole numbers; got {values!r}.")
    if not out or out[0] < minimum:
        raise StatsInputError(f"`{name}` must hold integers of at least {minimum}; got {values!r}.")
    return tuple(out)


def _nice_grid(lo: int, hi: int) -> list[int]:
    out, base = [], 1
    while base <= hi:
        for f in (1, 2, 5):
            v = f * base
            if lo <= v <= hi:
                out.append(v)
        base *= 10
    return out


def _prices(label_cost, vendors: Sequence[str | None]) -> dict:
    if label_cost is None:
        return {v: None for v in vendors}
    if isinstance(label_cost, Mapping):
        out = {}
        for v in vendors:
            if v is None:
                continue
            if v not in label_cost:
                raise StatsInputError(f"`label_cost` has no price for vendor {v!r}.")
            out[v] = _price(label_cost[v], f"label_cost[{v!r}]")
        return out
    p = _price(label_cost, "label_cost")
    return {v: p for v in vendors}


def _price(value, name) -> float:
    return check_nonnegative(value, name=name)


def _gamma_weights(pop: _Population, r: int, rng: np.random.Generator) -> np.ndarray:
    """(R, U) Bayesian-bootstrap weights of the templates: Dirichlet(multiplicities)."""
    g = rng.standard_gamma(np.broadcast_to(pop.mult, (r, pop.mult.size)))
    tot = g.sum(axis=1, keepdims=True)
    return g / np.where(tot > 0, tot, 1.0)


def _new_sums(atoms: _Atoms, h: np.ndarray) -> dict:
    """Stream sums (n, s, ss) of new items with atom counts ``h`` (R, A)."""
    n = h.sum(axis=1).astype(float)
    out = {"t": (n, h @ atoms.x_t, h @ (atoms.x_t ** 2)), "l": (n, h @ atoms.credit, h @ (atoms.credit ** 2))}
    if atoms.k >= 2:
        out["e"] = (n, h @ atoms.x_e, h @ (atoms.x_e ** 2))
    else:
        z = np.zeros_like(n)
        out["e"] = (z, z, z)
    return out


def _limit_values(pop: _Population) -> tuple[np.ndarray, np.ndarray]:
    """Per template, E Σp² and P(argmax p = prediction) under its posterior (k → ∞)."""
    u, t_n, n_labels = pop.rows.shape[0], pop.kind.shape[0], pop.n_labels
    b = pop.beta()                                             # (U, T, L)
    b0 = b.sum(axis=2)
    sq = (b * (b + 1.0)).sum(axis=2) / (b0 * (b0 + 1.0))
    arg = _argmax_probabilities(b.reshape(-1, n_labels)).reshape(u, t_n, n_labels)
    cr = arg[np.arange(u), :, pop.pred]                        # (U, T)
    for j in np.flatnonzero(pop.kind == _INFINITE):
        mm = pop.mean[j]
        sq[:, j] = float(mm @ mm)
        cr[:, j] = tie_credit(np.broadcast_to(mm, (u, n_labels)), pop.pred)
    return (pop.resp * sq).sum(axis=1), (pop.resp * cr).sum(axis=1)


#: Ridge on the slope of the probability-vs-margin fit (standardised margin units): keeps the
#: fit finite when the simulated futures separate perfectly at some margin.
_RANGE_RIDGE = 1.0


def _population_margins(pop: _Population, atoms: _Atoms, g: np.ndarray, *, bound: str, tau: float) -> np.ndarray | None:
    """Each simulated population's margin for new k-label items, θ_L − τ − √θ_U: (R,), or None
    when the bound has no value for such items (the empirical bound with one label)."""
    x = atoms.x_t if bound == "theoretical" else atoms.x_e
    if not np.isfinite(x).all():
        return None
    return g @ (atoms.q @ atoms.credit) - tau - np.sqrt(np.maximum(g @ (atoms.q @ x), 0.0))


def _probability_range(theta: np.ndarray | None, cert: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """The probability of certifying at the ends of the margin's confidence interval.

    ``theta`` (R,) are the simulated populations' margins, ``cert`` (D, R) whether each of
    D designs certified in each simulated future. P(certified | margin) is fitted per design
    as a logistic curve in the margin (maximum likelihood, a small ridge on the slope), and
    read at the ``(1 ∓ confidence)/2`` quantiles of ``theta``: the Bayesian bootstrap's
    equal-tailed interval of the margin, whose frequentist coverage is the bootstrap's.
    Given the current data, the chance that the design certifies grows with the true margin,
    so when the interval covers the true margin the range covers that chance.
    """
    y = np.asarray(cert, dtype=float)
    mean = y.mean(axis=1)
    if theta is None or y.shape[1] < 2:
        return mean.copy(), mean.copy()
    sd = float(np.std(theta))
    if not np.isfinite(sd) or sd <= 0.0:
        return mean.copy(), mean.copy()
    z = (theta - theta.mean()) / sd
    q_lo, q_hi = np.quantile(z, [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    a = special.logit(np.clip(mean, 0.5 / y.shape[1], 1.0 - 0.5 / y.shape[1]))
    b = np.zeros_like(a)
    for _ in range(100):
        p = special.expit(a[:, None] + b[:, None] * z[None, :])
        w = p * (1.0 - p)
        r = y - p
        g_a, g_b = r.sum(axis=1), (r * z).sum(axis=1) - _RANGE_RIDGE * b
        h_aa, h_ab, h_bb = w.sum(axis=1), (w * z).sum(axis=1), (w * z * z).sum(axis=1) + _RANGE_RIDGE
        det = h_aa * h_bb - h_ab * h_ab
        safe = det > 1e-12
        da = np.where(safe, (h_bb * g_a - h_ab * g_b) / np.where(safe, det, 1.0), 0.0)
        db = np.where(safe, (h_aa * g_b - h_ab * g_a) / np.where(safe, det, 1.0), 0.0)
        step = np.maximum(1.0, np.maximum(np.abs(da), np.abs(db)) / 5.0)
        a += da / step
        b += db / step
        if max(np.abs(da).max(), np.abs(db).max()) < 1e-9:
            break
    at_lo, at_hi = special.expit(a + b * q_lo), special.expit(a + b * q_hi)
    # the fit is monotone either way; a slope of the wrong sign is noise, the range is still its ends
    low, high = np.minimum(at_lo, at_hi), np.maximum(at_lo, at_hi)
    constant = (mean == 0.0) | (mean == 1.0)
    return np.where(constant, mean, np.minimum(low, mean)), np.where(constant, mean, np.maximum(high, mean))


def plan_certification(counts, predictions, *, target: float = 0.95, tau: float = 0.0, method: str = "anytime",
                       bound: str = "theoretical", probability: float = 0.8, confidence: float = 0.8, label_cost=None,
                       vendor_counts: Mapping[str, object] | None = None, max_budget: float | None = None,
                       new_items: Sequence[int] | None = None, labels_per_item: Sequence[int] | None = None,
                       extra_labels: Sequence[int] | None = None, state: AnytimeState | None = None,
                       split: float = 0.5, n_simulations: int = 400, rule_out: float = 0.05,
                       rng=None) -> CertificationPlan:
    """Which labeling designs would get the release certified, with what probability, at what cost.

    Fits the generative model of :mod:`auditor.stats.planning` to the current data and,
    for every design on the grid, simulates ``n_simulations`` futures: a population (a
    Bayesian bootstrap of the templates), the design's data from it, and the verdict on
    the current data plus the new data. A design's probability is the fraction of
    futures in which the verdict certifies, with its Monte Carlo standard error. Designs:
    ``new_items`` × ``labels_per_item`` (per vendor when ``vendor_counts`` is given), and
    for the fixed-sample verdicts one more label on each of the ``extra_labels`` top items
    of :func:`relabel_priority`. Where the grid crosses ``probability``, the smallest
    number of new items is refined by bisection.

    "Cannot be certified at any budget" (``certifiable=False``) is the answer when the
    population margin :math:`\\theta_L - \\tau - \\sqrt{\\theta_U}` of new items is negative for
    every number of labels per item, the limit of infinitely many included (however many
    such items are added, the stream means tend to these values), with posterior
    probability at least ``1 - rule_out``. An estimated margin below 0 that the data cannot
    rule out is said in the notes. The limit rests on the label model's extrapolation, hence
    the caution: a "cannot" is a strong claim.

    Parameters
    ----------
    counts : array-like of int, shape (N, L), LabelCounts or Annotations
        The release's items' label counts (rows in arrival order for ``"anytime"``).
    predictions : array-like, shape (N,) or (N, L)
        The release's predictions.
    target : float, default 0.95
        The confidence the verdict needs (``AUDITOR_CERTIFY_THRESHOLD``).
    tau : float, default 0
        The margin the model must beat the average annotator by.
    method : {"anytime", "oms", "hms", "bernstein"}
        The verdict (the badge's is ``"anytime"`` by default).
    bound : {"theoretical", "empirical"}
    probability : float in (0, 1), default 0.8
        The probability of certifying the recommended design must reach.
    confidence : float in (0, 1), default 0.8
        The confidence of each design's ``probability_low``–``probability_high`` range: the
        probability of certifying at the ends of the population margin's equal-tailed
        interval at this confidence (see :class:`Design`), and of ``assured``.
    label_cost : float or mapping vendor → float, optional
        Price per label, flat or per vendor (per-vendor prices need ``vendor_counts``).
    vendor_counts : mapping vendor → (N, L) counts, optional
        Each vendor's labels on the same rows: new items are then planned per vendor,
        from that vendor's own label model.
    max_budget : float, optional
        Designs costing more (in price units, or in labels without prices) are left out.
    new_items, labels_per_item, extra_labels : sequences of int, optional
        The grid (defaults: 100, 200, 500, ... up to 10,000,000 or the budget; 2, 3, 5, 7,
        10, 15, 20 and the data's median; 5% to 100% of the items).
    state : AnytimeState, optional
        The release's stored anytime state (what the audit pipeline keeps); by default the
        rows of ``counts`` enter in order, as in :func:`~auditor.stats.certify`.
    split : float, default 0.5
        The anytime verdict's split of the error.
    n_simulations : int, default 400
        Simulated futures per design (standard error at most 0.025).
    rule_out : float, default 0.05
        "Cannot be certified" needs the posterior probability that some budget could below this.
    rng : None, int or numpy Generator
        Seeds everything: the same seed gives the same plan, bit for bit.

    Returns
    -------
    CertificationPlan

    Examples
    --------
    >>> import numpy as np
    >>> from auditor.simulate import PoolScenario
    >>> sc = PoolScenario(hard_fraction=0.0, model_accuracy=0.95)
    >>> g = np.random.default_rng(0)
    >>> truth, hard = sc.items(g, 300)
    >>> plan = plan_certification(sc.labels(g, truth, hard, 5), sc.predictions(g, truth, hard), rng=1,
    ...                           labels_per_item=[5], new_items=[100, 1000, 10000])
    >>> plan.certifiable, plan.recommended.labels_per_item
    (True, 5)
    """
    _check_choice(method, PLAN_METHODS, "method")
    _check_choice(bound, BOUNDS, "bound")
    target = check_probability(target, name="target")
    probability = check_probability(probability, name="probability", open_interval=True)
    split = check_probability(split, name="split", open_interval=True)
    confidence = check_probability(confidence, name="confidence", open_interval=True)
    rule_out = check_probability(rule_out, name="rule_out", open_interval=True)
    tau = _check_tau(tau)
    if isinstance(n_simulations, bool) or not isinstance(n_simulations, int | np.integer) or n_simulations < 10:
        raise StatsInputError(f"`n_simulations` must be an integer of at least 10; got {n_simulations!r}.")
    r = int(n_simulations)
    if max_budget is not None:
        max_budget = _price(max_budget, "max_budget")
    gen = as_rng(rng)
    m, pred = _prepare(counts, predictions)
    k_items = m.sum(axis=1)
    if not (k_items > 0).any():
        raise StatsInputError("`counts` has no labelled item: there is nothing to plan from.")
    notes: list[str] = []

    # --- the populations new items are drawn from
    pops: list[_Population] = []
    if vendor_counts is not None:
        if not isinstance(vendor_counts, Mapping) or not vendor_counts:
            raise StatsInputError("`vendor_counts` must map vendor names to count matrices.")
        for name in sorted(vendor_counts, key=str):
            vc = as_vendor_counts(vendor_counts[name], m.shape, name)
            p = _population(vc, pred, str(name), notes)
            if p is None:
                notes.append(f"vendor {name} has no labels on these items: left out")
                continue
            pops.append(p)
        if not pops:
            raise StatsInputError("no vendor in `vendor_counts` has a label on these items.")
        pooled = None  # fitted below if relabeling designs need it
    else:
        if isinstance(label_cost, Mapping):
            raise StatsInputError("per-vendor prices (`label_cost` as a mapping) need `vendor_counts`.")
        pooled = _population(m, pred, None, notes)
        pops.append(pooled)
    prices = _prices(label_cost, [p.vendor for p in pops])

    # --- the current verdict
    cur = _current_sums(m, pred)
    if method == "anytime":
        if state is None:
            state = AnytimeState()
            state.update(m, pred)
        elif not isinstance(state, AnytimeState):
            raise StatsInputError("`state` must be an AnytimeState.")
        cur = _Current(anytime=state, t=cur.t, e=cur.e, l=cur.l)
    if method == "anytime":
        ustream = state.upper_t if bound == "theoretical" else state.upper_e
        score_now = state.confidence(bound, tau=tau, split=split).score \
            if ustream.n and state.lower.n else math.nan
    else:
        zero = {s: (np.zeros(1), np.zeros(1), np.zeros(1)) for s in ("t", "e", "l")}
        score_now = float(_verdict_scores(cur, zero, method=method, bound=bound, tau=tau, split=split)[0])
    certified_now = bool(np.isfinite(score_now) and score_now >= target)

    # --- grids
    med_k = int(np.median(k_items[k_items > 0]))
    ks = _check_int_grid(labels_per_item, "labels_per_item", minimum=1) if labels_per_item is not None \
        else tuple(sorted(set(DEFAULT_LABELS_PER_ITEM) | {max(2, min(med_k, 50))}))
    cheapest = min((v for v in prices.values() if v is not None), default=None)
    if new_items is not None:
        n_grid = _check_int_grid(new_items, "new_items", minimum=1)
    else:
        hi = MAX_NEW_ITEMS
        if max_budget is not None:
            per_item = min(ks) * (cheapest if cheapest is not None else 1.0)
            if per_item > 0:
                hi = int(min(hi, max_budget // per_item))
        n_grid = tuple(_nice_grid(100, hi)) or ((hi,) if hi >= 1 else ())

    def cost_of(labels: int, vendor) -> float | None:
        price = prices.get(vendor)
        return None if price is None else labels * price

    def affordable(labels: int, vendor) -> bool:
        if max_budget is None:
            return True
        c = cost_of(labels, vendor)
        return (c if c is not None else labels) <= max_budget + 1e-9

    designs: list[Design] = [Design(0, 0, 0, float(certified_now), 0.0, 0, 0.0 if cheapest is not None else None,
                                    probability_low=float(certified_now), probability_high=float(certified_now))]

    def design(n, k, e, cert, vendor, theta=None, ranged=True):
        p = float(np.mean(cert))
        labels = n * k + e
        low = high = None
        if ranged:
            lo, hi = _probability_range(theta, np.asarray(cert)[None, :], confidence)
            low, high = float(lo[0]), float(hi[0])
        return Design(new_items=int(n), labels_per_item=int(k) if n else 0, extra_labels_on_existing=int(e),
                      probability=p, std_error=math.sqrt(p * (1.0 - p) / r), labels=int(labels),
                      cost=cost_of(labels, vendor), vendor=vendor, probability_low=low, probability_high=high)

    def certified(new) -> np.ndarray:
        s = _verdict_scores(cur, new, method=method, bound=bound, tau=tau, split=split)
        return np.nan_to_num(s, nan=-1.0) >= target

    def certified_many(news: list[dict]) -> list[np.ndarray]:
        """``certified`` of many designs in one vectorised verdict call."""
        if not news:
            return []
        joined = {key: tuple(np.concatenate([nw[key][i] for nw in news]) for i in range(3)) for key in news[0]}
        flat = certified(joined)
        return np.split(flat, len(news))

    # --- new items, per population and labels per item. All designs' data are drawn
    # first (nested along the number of items), then every verdict is computed at once.
    weights = {id(p): _gamma_weights(p, r, gen) for p in pops}
    seeds = gen.integers(0, 2**63 - 1, size=len(pops) * len(ks) + 2)
    paths = []
    for i, (pop, k) in enumerate((p, k) for p in pops for k in ks):
        sub = np.random.default_rng(int(seeds[i]))
        atoms = _atoms(pop, k, sub)
        pvals = weights[id(pop)] @ atoms.q
        pvals /= pvals.sum(axis=1, keepdims=True)
        h = np.zeros(pvals.shape, dtype=np.int64)
        done, steps = 0, []
        for n in n_grid:
            if not affordable(n * k, pop.vendor):
                break
            h = h + sub.multinomial(n - done, pvals)
            done = n
            steps.append((n, h))
        paths.append({"pop": pop, "k": k, "atoms": atoms, "pvals": pvals, "rng": sub, "steps": steps,
                      "theta": _population_margins(pop, atoms, weights[id(pop)], bound=bound, tau=tau)})
    grid_cert = certified_many([_new_sums(pt["atoms"], h) for pt in paths for _, h in pt["steps"]])
    pos = 0
    for pt in paths:
        pt["p"] = []
        for n, _ in pt["steps"]:
            designs.append(design(n, pt["k"], 0, grid_cert[pos], pt["pop"].vendor, pt["theta"]))
            pt["p"].append(designs[-1].probability)
            pos += 1
        # bisection between the last grid point below the probability and the first above
        first = next((j for j, p in enumerate(pt["p"]) if p >= probability), None)
        pt["active"] = first is not None
        if first is not None:
            pt["lo"] = pt["steps"][first - 1] if first else (0, np.zeros_like(pt["pvals"], dtype=np.int64))
            pt["hi"] = pt["steps"][first][0]
    for _ in range(_REFINE_STEPS):
        todo = []
        for pt in paths:
            if not pt["active"]:
                continue
            lo_n, lo_h = pt["lo"]
            mid = round(math.sqrt(max(lo_n, 1) * pt["hi"]))
            if mid <= lo_n or mid >= pt["hi"]:
                pt["active"] = False
                continue
            hm = lo_h + pt["rng"].multinomial(mid - lo_n, pt["pvals"])
            todo.append((pt, mid, hm))
        if not todo:
            break
        for (pt, mid, hm), cert in zip(todo, certified_many([_new_sums(pt["atoms"], hm) for pt, _, hm in todo]),
                                       strict=True):
            d = design(mid, pt["k"], 0, cert, pt["pop"].vendor, pt["theta"])
            designs.append(d)
            if d.probability >= probability:
                pt["hi"] = mid
            else:
                pt["lo"] = (mid, hm)

    # --- more labels on existing items (fixed-sample verdicts)
    if method == "anytime":
        notes.append("the anytime verdict freezes an item's values when it enters its stream: more labels on "
                     "items already counted cannot change it, so only new items are planned")
    else:
        n_lab = int((k_items > 0).sum())
        e_grid = _check_int_grid(extra_labels, "extra_labels", minimum=1) if extra_labels is not None else \
            tuple(sorted({max(1, round(f * n_lab)) for f in DEFAULT_RELABEL_FRACTIONS}))
        e_grid = tuple(e for e in e_grid if e <= n_lab)
        if e_grid:
            if pooled is None:
                pooled = _population(m, pred, None, notes)
            rank = _relabel_rank(pooled, m, pred, bound, cur)
            sub = np.random.default_rng(int(seeds[-1]))
            for e in e_grid:
                if not any(affordable(e, p.vendor) for p in pops):
                    break
                chosen = rank.top(e)
                new = _relabel_sums(m[chosen], pred[chosen], pooled, r, sub)
                cert = certified(new)
                for pop in pops:
                    if affordable(e, pop.vendor):
                        designs.append(design(0, 0, e, cert, pop.vendor, ranged=False))
            notes.append("extra labels on existing items go one each to the top of the relabel list; they are "
                         "drawn from each item's posterior predictive (the pooled label model)")

    # --- can any budget certify?
    margins: dict[str, float] = {}
    best_draws = np.full(r, -np.inf)
    best_est = -math.inf
    for pop in pops:
        g = weights[id(pop)]
        g_mean = pop.mult / pop.mult.sum()
        prefix = "" if pop.vendor is None else f"{pop.vendor}:"
        sq_inf, cr_inf = _limit_values(pop)
        cases = [(str(k), _atoms(pop, k, np.random.default_rng(0))) for k in ks]
        for key, atoms in cases:
            x = atoms.x_t if bound == "theoretical" else atoms.x_e
            if atoms.k < 2 and bound == "empirical":
                continue
            ex, ec = atoms.q @ x, atoms.q @ atoms.credit
            est = float(g_mean @ ec) - tau - math.sqrt(max(float(g_mean @ ex), 0.0))
            draws = g @ ec - tau - np.sqrt(np.maximum(g @ ex, 0.0))
            margins[prefix + key] = est
            best_est = max(best_est, est)
            best_draws = np.maximum(best_draws, draws)
        est = float(g_mean @ cr_inf) - tau - math.sqrt(max(float(g_mean @ sq_inf), 0.0))
        margins[prefix + "inf"] = est
        best_est = max(best_est, est)
        best_draws = np.maximum(best_draws, g @ cr_inf - tau - np.sqrt(np.maximum(g @ sq_inf, 0.0)))
    certifiable_probability = 1.0 if certified_now else float(np.mean(best_draws > 0))
    certifiable = certified_now or certifiable_probability >= rule_out
    if not certifiable:
        notes.append(f"cannot be certified at any budget: the estimated L stays below U (by {-best_est:.4f} at "
                     "best) however many items and labels per item are added; posterior probability that some "
                     f"budget could: {certifiable_probability:.3f}")
    elif best_est <= 0 and not certified_now:
        notes.append(f"the estimated L stays below U (by {-best_est:.4f} at best) however many items and labels "
                     "per item are added, so probably no budget certifies this release; the data do not rule it "
                     f"out (posterior probability {certifiable_probability:.3f} that some budget could)")
    # --- order, recommend
    def sort_key(d: Design):
        return (d.cost if d.cost is not None else d.labels, d.labels, d.new_items, d.vendor or "")

    designs = sorted(designs, key=sort_key)
    reach = [d for d in designs if d.probability >= probability]
    recommended = reach[0] if reach else None
    assured = next((d for d in designs if d.probability_low is not None and d.probability_low >= probability), None)
    if recommended is None and certifiable:
        notes.append(f"no design within the grid and budget reaches probability {probability:g}")
    return CertificationPlan(
        designs=tuple(designs), recommended=recommended, certifiable=certifiable,
        certifiable_probability=certifiable_probability, margins=margins, certified_now=certified_now,
        score_now=score_now, probability=probability, target=target, tau=tau, method=method, bound=bound,
        n_simulations=r, models=tuple(p.model() for p in pops), notes=tuple(dict.fromkeys(notes)), assured=assured,
        confidence=confidence)


def as_vendor_counts(counts, shape, name) -> np.ndarray:
    arr = _counts_array(counts)
    if arr.shape != tuple(shape):
        raise StatsInputError(f"`vendor_counts[{name!r}]` has shape {arr.shape}; the counts have {tuple(shape)}.")
    return arr


def _relabel_sums(m: np.ndarray, pred: np.ndarray, pop: _Population, r: int, rng: np.random.Generator) -> dict:
    """Changes of the stream sums from one more label on each of the items ``m``, per simulation:
    each label from the item's posterior predictive, one multinomial per distinct row."""
    n_labels = m.shape[1]
    uniq, mult, _ = _distinct(np.column_stack([m, pred]))
    g_m = uniq[:, :-1].astype(float)
    g_pred = uniq[:, -1]
    g_q = _item_predictive(pop, uniq[:, :-1], g_pred)
    g_q /= g_q.sum(axis=1, keepdims=True)
    draws = rng.multinomial(mult, g_q, size=(r, uniq.shape[0])).astype(float)   # (R, G, L)
    g_k = g_m.sum(axis=1)
    sq = (g_m * g_m).sum(axis=1)
    cr0 = tie_credit(g_m, g_pred)
    xt0 = sq / g_k**2
    with np.errstate(invalid="ignore", divide="ignore"):
        xe0 = np.where(g_k >= 2, (sq - g_k) / (g_k * (g_k - 1.0)), np.nan)
    d = {s: np.zeros((uniq.shape[0], n_labels)) for s in ("t", "tt", "e", "ee", "l", "ll")}
    for c in range(n_labels):
        after = g_m.copy()
        after[:, c] += 1.0
        sq1 = sq + 2.0 * g_m[:, c] + 1.0
        xt1 = sq1 / (g_k + 1.0) ** 2
        xe1 = (sq1 - (g_k + 1.0)) / ((g_k + 1.0) * g_k)
        cr1 = tie_credit(after, g_pred)
        d["t"][:, c], d["tt"][:, c] = xt1 - xt0, xt1**2 - xt0**2
        d["e"][:, c] = xe1 - np.nan_to_num(xe0)
        d["ee"][:, c] = xe1**2 - np.nan_to_num(xe0) ** 2
        d["l"][:, c], d["ll"][:, c] = cr1 - cr0, cr1**2 - cr0**2

    def total(key):
        return np.einsum("rgc,gc->r", draws, d[key])

    n_enter_e = float(mult[g_k == 1].sum())
    z = np.zeros(r)
    return {"t": (z, total("t"), total("tt")), "e": (z + n_enter_e, total("e"), total("ee")),
            "l": (z, total("l"), total("ll"))}


# --------------------------------------------------------------------------- survey equivalence


def plan_equivalence(ratings, predictions, *, width: float, combiner: str = "plurality",
                     scorer: str = "agreement", confidence: float = 0.95, n_bootstrap: int = 500,
                     max_items: int = MAX_NEW_ITEMS, n_items: Sequence[int] | None = None,
                     rng=None, matrix: str = "auto") -> EquivalencePlan:
    """How many items make the classifier's survey equivalence interval narrower than ``width``.

    The interval of :func:`~auditor.stats.survey_equivalence` is the percentile range of
    the equivalence over bootstrap samples of the items. With :math:`n` items drawn from
    the same population (the current items' histogram of count vectors and classifier
    terms, each new item labelled like a random current one), that range is estimated by
    the same bootstrap with samples of :math:`n` items (an :math:`n`-out-of-:math:`N`
    bootstrap): the expected width at :math:`n`. The smallest :math:`n` on the grid whose
    width is at most ``width`` is refined by bisection. Exact path (agreement or
    cross-entropy scorers, anonymous combiners); where its sums are out of reach the curve
    is drawn by Monte Carlo, as :func:`~auditor.stats.survey_equivalence` draws it, and a
    note says so with the points' largest standard error.

    Parameters
    ----------
    ratings, predictions, combiner, scorer, confidence, n_bootstrap, rng, matrix
        As in :func:`~auditor.stats.survey_equivalence`.
    width : float > 0
        The requested width of the equivalence interval (in raters).
    max_items : int
        The largest number of items considered.
    n_items : sequence of int, optional
        The grid (default 100, 200, 500, ... up to ``max_items``).

    Returns
    -------
    EquivalencePlan
    """
    try:
        width = float(width)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`width` must be a number; got {width!r}.") from exc
    if not math.isfinite(width) or width <= 0:
        raise StatsInputError(f"`width` must be a positive number; got {width!r}.")
    if isinstance(max_items, bool) or not isinstance(max_items, int | np.integer) or max_items < 2:
        raise StatsInputError(f"`max_items` must be an integer of at least 2; got {max_items!r}.")
    _check_options(n_bootstrap, confidence, DEFAULT_CLIP, None, None, "exact")
    if n_bootstrap < 50:
        raise StatsInputError(f"`n_bootstrap` must be at least 50 to estimate a width; got {n_bootstrap}.")
    gen = as_rng(rng)
    problem = _eq_prepare(ratings, combiner=combiner, scorer=scorer, reference=None, n_labels=None, max_k=None,
                       min_labels=None, method="exact", rng=gen, raters="labels", k_values="auto",
                       matrix=matrix)
    pred = _validated_predictions(problem, predictions)
    prior, model = _fitted(problem, combiner)
    t = exact_tables(problem.pool_counts, problem.reference_counts, combiner=problem.combiner or combiner,
                     scorer=problem.scorer, k_max=problem.k_max, prior=prior, model=model, clip=DEFAULT_CLIP,
                     ks=problem.ks, rng=gen)
    terms, ok = _classifier_terms(problem, pred)
    stacked = np.column_stack([t.inverse.astype(float), np.where(ok, terms, 0.0), ok.astype(float)])
    uniq, _, gmult = np.unique(stacked, axis=0, return_inverse=True, return_counts=True)
    key = uniq[:, 0].astype(np.int64)
    g_score, g_ok = uniq[:, 1], uniq[:, 2]
    n_now = int(gmult.sum())
    p_group = gmult / gmult.sum()
    lo_q, hi_q = _bounds(confidence)
    ks = np.asarray(problem.ks)
    notes: list[str] = []
    point_error = t.point_errors(t.multiplicity.astype(float))
    if point_error is not None:
        # Beyond the exact path's reach the tables were drawn (as survey_equivalence draws them):
        # the widths are those of the drawn curve, whose points carry this much error.
        worst = float(point_error.max(initial=0.0))
        notes.append(f"the curve's exact sums are out of reach (many labels per item over many classes): it was "
                     f"drawn by Monte Carlo, its points' standard errors at most {worst:.2g}; the widths are "
                     f"those of the drawn curve")

    # ``uniq`` is sorted by key first: each key's groups are a run.
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])

    def width_at(n: int, sub: np.random.Generator) -> float:
        counts = sub.multinomial(n, p_group, size=n_bootstrap).astype(float)
        w_key = np.zeros((n_bootstrap, t.keys.shape[0]))
        w_key[:, key[starts]] = np.add.reduceat(counts, starts, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            curve = (w_key @ t.expected) / (w_key @ t.eligible)
            clf = (counts @ (g_score * g_ok)) / (counts @ g_ok)
        eq = equivalence_values(curve, clf, ks)
        lo, hi = _quantile(eq, lo_q), _quantile(eq, hi_q)
        return float(hi - lo) if np.isfinite(lo) and np.isfinite(hi) else math.inf

    seed = int(gen.integers(0, 2**63 - 1))
    current = width_at(n_now, np.random.default_rng(seed))
    grid = _check_int_grid(n_items, "n_items", minimum=2) if n_items is not None else \
        tuple(v for v in _nice_grid(100, max_items))
    designs: list[tuple[int, float]] = []
    found = None
    prev = None
    for n in grid:
        w = width_at(n, np.random.default_rng(seed))   # common random numbers across n
        designs.append((int(n), w))
        if w <= width:
            found = n
            break
        prev = n
    if found is not None:
        lo_n, hi_n = (prev or 1), found
        for _ in range(2 * _REFINE_STEPS):
            mid = round(math.sqrt(lo_n * hi_n))
            if mid <= lo_n or mid >= hi_n:
                break
            w = width_at(mid, np.random.default_rng(seed))
            designs.append((mid, w))
            if w <= width:
                hi_n = mid
            else:
                lo_n = mid
        found = hi_n
    else:
        notes.append(f"no number of items up to {grid[-1]:,} makes the interval narrower than {width:g}")
    if current == math.inf:
        notes.append("an end of the current interval is '< 0' or '> K': its width is unbounded")
    return EquivalencePlan(designs=tuple(sorted(designs)), recommended_items=found, current_items=n_now,
                           current_width=current, width=width, confidence=float(confidence),
                           combiner=combiner, scorer=scorer, notes=tuple(notes))

