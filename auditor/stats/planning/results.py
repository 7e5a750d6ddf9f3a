"""What the planner returns: designs, plans, the fitted label model, the relabel list."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


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

    ``family`` says which of the candidates had the smallest AIC (``aic``):

    * ``"mixture"``: a mixture of BEST's Dirichlet-multinomials, one component per latent
      class: component ``t`` has weight ``weights[t]`` and prior ``alpha[t]``
      (``regimes[t]`` as in :class:`~auditor.stats.DirichletMultinomialFit`: ``inf``
      entries for the α → ∞ limit);
    * ``"latent-class"``: Dawid & Skene's (1979) model with ``difficulty_classes`` classes
      of items: component ``t = d·L + z`` (difficulty ``d``, true class ``z``) has weight
      ``weights[t]`` and labels drawn independently from ``label_distributions[t]`` (the
      annotator pool's confusion row; ``regimes`` all ``"infinite"``).

    In both the model predicts class ``c`` on a component's items with probability
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
    family: str = "mixture"
    difficulty_classes: int = 0
    aic: float | None = None
    label_distributions: tuple[tuple[float, ...], ...] = ()

    def to_dict(self) -> dict:
        return {"vendor": self.vendor, "weights": list(self.weights),
                "alpha": [[_finite(a) for a in row] for row in self.alpha], "regimes": list(self.regimes),
                "model_confusion": [list(r) for r in self.model_confusion], "n_items": self.n_items,
                "n_templates": self.n_templates, "family": self.family,
                "difficulty_classes": self.difficulty_classes, "aic": _finite(self.aic),
                "label_distributions": [list(r) for r in self.label_distributions]}


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
