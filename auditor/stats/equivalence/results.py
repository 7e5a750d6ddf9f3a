"""The results of survey power curves and survey equivalence: :class:`PowerCurve`,
:class:`ClassifierScore`, :class:`SurveyEquivalence` and :class:`ExpertEquivalence`
(plain data with ``to_dict`` and ``summary``), computed by :mod:`auditor.stats.equivalence.curve`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from auditor.jsonable import finite
from auditor.stats._summary import num, table


@dataclass(frozen=True, eq=False)
class PowerCurve:
    """A survey power curve c_k with bootstrap percentile intervals.

    Attributes
    ----------
    k : ndarray of int, shape (n_k,)
        Numbers of raters: 0, 1, ..., k_max, or on long curves a grid of them (every
        small k, then geometrically spaced; see ``k_values`` of :func:`power_curve`).
    mean : ndarray, shape (n_k,)
        c_k on the actual items: the mean score, over rater subsets and reference
        raters, of the combiner's predictions from k raters.
    ci_low, ci_high : ndarray, shape (n_k,)
        Percentile bootstrap interval (level ``confidence``) over resampled items.
    n_items : ndarray of int, shape (n_k,)
        How many items c_k rests on (items with at least k + 1 labels; with reference
        raters, at least k pool labels and one reference label).
    replicates : ndarray, shape (n_bootstrap, n_k)
        c_k on each bootstrap sample of items.
    combiner, scorer, method : str
        ``method`` is ``"exact"`` (histogram of count vectors), ``"sampling"``
        (rater subsets, Algorithms 2–3) or ``"monte_carlo"``: the exact path's sums drawn
        at random where they are out of reach (more than ``MAX_SUB_COUNTS`` sub-count
        vectors, e.g. 100 labels per item spread over 10 classes; plurality, majority and
        frequency combiners).
    mc_error : ndarray, shape (n_k,)
        Monte Carlo standard error of ``mean``: 0 where c_k is exact (the exact path,
        and k whose rater subsets are all enumerated); where the sampling path draws
        200 of the C(K, k) subsets, the standard error of that draw, so that
        ``mean ± 1.96 · mc_error`` covers the all-subsets value in 95% of draws; on the
        ``"monte_carlo"`` path, the standard error of the drawn sums against the exact ones.
    """

    k: np.ndarray
    mean: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n_items: np.ndarray
    replicates: np.ndarray = field(repr=False)
    combiner: str
    scorer: str
    method: str
    confidence: float
    mc_error: np.ndarray | None = None

    def __post_init__(self):
        if self.mc_error is None:
            object.__setattr__(self, "mc_error", np.zeros(self.mean.shape))

    @property
    def k_max(self) -> int:
        return int(self.k[-1])

    def to_dict(self) -> dict:
        return {
            "combiner": self.combiner, "scorer": self.scorer, "method": self.method,
            "confidence": self.confidence, "n_bootstrap": int(self.replicates.shape[0]),
            "k": self.k.tolist(), "mean": self.mean.tolist(), "ci_low": self.ci_low.tolist(),
            "ci_high": self.ci_high.tolist(), "n_items": self.n_items.tolist(),
            "mc_error": self.mc_error.tolist(),
        }

    def summary(self) -> str:
        """A plain-text table of c_k with its interval and items (and its Monte Carlo
        standard error where a point was drawn), with a note on what that error is."""
        sampled = bool(np.any(self.mc_error > 0))
        header = ["k", "c_k", "low", "high", "items"] + (["MC s.e."] if sampled else [])
        rows = [[f"{k:>3}", f"{self.mean[i]:.4f}", f"{self.ci_low[i]:.4f}", f"{self.ci_high[i]:.4f}",
                 str(self.n_items[i])] + ([f"{self.mc_error[i]:.1e}"] if sampled else [])
                for i, k in enumerate(self.k)]
        lines = table([f"{'k':>3}", *header[1:]], rows, widths=[3, 11, 11, 11, 8, 10][:len(header)])
        if sampled and self.method == "monte_carlo":
            lines.append("MC s.e.: Monte Carlo standard error of c_k, whose exact sums over sub-count vectors are "
                         "out of reach and were drawn at random (0: nothing to draw)")
        elif sampled:
            lines.append("MC s.e.: Monte Carlo standard error of c_k where 200 random rater subsets stand for all "
                         "C(K, k) (0: every subset used)")
        return "\n".join(lines)


@dataclass(frozen=True, eq=False)
class ClassifierScore:
    """A classifier's score against one held-out reference rater (Algorithm 1)."""

    value: float
    ci_low: float
    ci_high: float
    scorer: str
    n_items: int
    replicates: np.ndarray = field(repr=False)

    def to_dict(self) -> dict:
        return {"scorer": self.scorer, "value": self.value, "ci_low": self.ci_low,
                "ci_high": self.ci_high, "n_items": self.n_items}

    def summary(self) -> str:
        return f"classifier score: {self.value:.4f} [{self.ci_low:.4f}, {self.ci_high:.4f}]"


Equivalence = float | str


@dataclass(frozen=True, eq=False)
class SurveyEquivalence:
    """How many raters a classifier is worth (Algorithm 4).

    Attributes
    ----------
    value : float or str
        The leftmost crossing of the classifier's score with the power curve, linearly
        interpolated between integers; ``"< 0"`` when the score is at most c_0 and
        ``"> K"`` (K = the curve's last k) when no c_k exceeds it. Never a number in
        those two cases.
    ci_low, ci_high : float or str
        Percentile bootstrap interval of the equivalence over resampled items (the same
        resamples for the curve and the classifier), in the same representation.
    classifier_score : ClassifierScore
    curve : PowerCurve
    replicates : ndarray, shape (n_bootstrap,)
        Equivalence on each bootstrap sample; ``-inf`` for "< 0", ``+inf`` for "> K".
    mc_error : float
        Monte Carlo standard error of ``value`` where the curve's points are Monte Carlo
        estimates (``curve.method`` ``"sampling"`` or ``"monte_carlo"``): ``value ±
        1.96·mc_error`` spans the equivalences of every curve whose points lie within 1.96
        of their errors (:func:`equivalence_mc_error`); ``inf`` where such a curve would put
        the crossing outside it (None in :meth:`to_dict`). 0 where the points are exact or
        the value is not a number.
    """

    value: Equivalence
    ci_low: Equivalence
    ci_high: Equivalence
    classifier_score: ClassifierScore
    curve: PowerCurve
    replicates: np.ndarray = field(repr=False)
    mc_error: float = 0.0

    @property
    def position(self) -> str:
        """``"below"`` (< 0), ``"within"`` the curve, or ``"above"`` (> K)."""
        if isinstance(self.value, str):
            return "below" if self.value.startswith("<") else "above"
        return "within"

    def to_dict(self) -> dict:
        return {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "position": self.position,
                # JSON has no infinity: an undetermined crossing's error is None.
                "mc_error": finite(self.mc_error),
                "classifier_score": self.classifier_score.to_dict(), "curve": self.curve.to_dict()}

    def summary(self) -> str:
        """The power curve's table (:meth:`PowerCurve.summary`), the classifier's score and
        the equivalence with its interval and Monte Carlo error."""
        mc = ("" if self.mc_error == 0 else f" (MC s.e. {self.mc_error:.2g} raters)" if np.isfinite(self.mc_error)
              else " (MC s.e. undetermined: within the points' errors the crossing could leave the curve)")
        return "\n".join([self.curve.summary(), self.classifier_score.summary(),
                          f"survey equivalence: {num(self.value)} [{num(self.ci_low)}, {num(self.ci_high)}]{mc}"])


@dataclass(frozen=True, eq=False)
class ExpertEquivalence:
    """Expert equivalence of k pool raters, for every k (Resnick et al. §7).

    Attributes
    ----------
    value, ci_low, ci_high : list of float or str
        One entry per k of ``pool_curve``: the x where the expert curve reaches the
        pool curve's value at k (Algorithm 4, "< 0" / "> K" as in
        :class:`SurveyEquivalence`), with its bootstrap interval.
    pool_curve : PowerCurve
        k pool raters scored against one expert label.
    expert_curve : PowerCurve
        k experts scored against another expert.
    mc_error : list of float
        One entry per k: the Monte Carlo standard error of ``value`` where either curve
        was drawn (its exact sums out of reach; ``curve.method == "monte_carlo"``), from
        both curves' point errors (:func:`equivalence_mc_error`); ``inf`` where the draws
        leave the crossing undetermined (None in :meth:`to_dict`), 0 where both curves
        are exact or the value is not a number.
    """

    value: list
    ci_low: list
    ci_high: list
    pool_curve: PowerCurve
    expert_curve: PowerCurve
    mc_error: list = field(default_factory=list)

    def __iter__(self):
        # Unpacks as (value, ci_low, ci_high, pool_curve, expert_curve), the order callers
        # of the first version of expert_equivalence (a plain tuple) rely on.
        return iter((self.value, self.ci_low, self.ci_high, self.pool_curve, self.expert_curve))

    def to_dict(self) -> dict:
        return {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high,
                # JSON has no infinity: an undetermined crossing's error is None.
                "mc_error": [finite(e) for e in self.mc_error],
                "pool_curve": self.pool_curve.to_dict(), "expert_curve": self.expert_curve.to_dict()}

    def summary(self) -> str:
        """One row per k: the pool's c_k, the expert curve's c_k, and the expert
        equivalence of k pool raters with its interval (and Monte Carlo error)."""
        pool, expert = self.pool_curve, self.expert_curve
        lines = [f"{'k':>3}{'pool c_k':>11}{'expert c_k':>12}  expert equivalence of k pool raters"]
        expert_at = dict(zip(expert.k.tolist(), expert.mean.tolist(), strict=True))
        for i, k in enumerate(pool.k.tolist()):
            e = f"{expert_at[k]:>12.4f}" if k in expert_at else " " * 12
            err = self.mc_error[i] if self.mc_error else 0.0
            mc = "" if err == 0 else f" (MC s.e. {err:.2g} raters)" if np.isfinite(err) else " (MC error undetermined)"
            lines.append(f"{k:>3}{pool.mean[i]:>11.4f}{e}  {num(self.value[i])} "
                         f"[{num(self.ci_low[i])}, {num(self.ci_high[i])}]{mc}")
        if any(c.method == "monte_carlo" for c in (pool, expert)):
            lines.append("The exact sums are out of reach (many labels per item over many classes): the curves were "
                         "drawn by Monte Carlo.")
        return "\n".join(lines)
