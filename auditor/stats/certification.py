"""Certification bounds: is a model better than the average human annotator?

Implements Xu, Walder & Xu, "Humanly Certifying Superhuman Classifiers" (2023):
the upper bound on the average annotator's oracle accuracy (Theorem 1 and
Definition 1), the lower bound on a model's oracle accuracy (Theorem 3), and the
finite-sample confidence that the model beats the average annotator (Theorem 7),
with the heuristic (HMS) and optimal (OMS) margin separations; a variance-adaptive
fixed-sample confidence (``"bernstein"``); and an *anytime* confidence that stays
valid when it is recomputed after every batch of items (``"anytime"``: one betting
e-process on the per-item difference of the two bounds; ``"anytime-fan"``: the earlier
pair of mixture sequences, one per bound, kept for comparison).

Which confidence holds when:

- ``"hms"``, ``"oms"`` (the paper's S, Hoeffding) and ``"bernstein"`` (empirical
  Bernstein, Maurer & Pontil 2009) hold for *one* look at a sample whose size was
  fixed in advance. Recomputed after every batch and acted upon the first time it
  crosses the threshold, their error rate grows with the number of looks.
- ``"anytime"`` and ``"anytime-fan"`` hold simultaneously for every prefix of the rows
  (row order is arrival order): the probability that the verdict is ever "certified"
  while the model is not better than the average annotator by ``tau`` is at most
  ``1 - threshold``, however often it is checked.

Everything here depends on the data only through the per-item label counts.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from auditor.jsonable import finite
from auditor.stats._summary import num, table
from auditor.stats.certification_core import (
    AGGREGATIONS,
    ANYTIME_METHODS,
    BOUNDS,
    METHODS,
    PAPER_METHODS,
    Confidence,
    _as_labels,  # noqa: F401 - imported from here by stats.planning
    _check_choice,
    _check_tau,
    _counts_array,
    _weighted_votes,
    tie_credit,
)
from auditor.stats.counts import Annotations
from auditor.stats.hoeffding import hoeffding_delta
from auditor.stats.validation import (
    StatsInputError,
    as_predictions,
    check_probability,
)

__all__ = [
    "CertificationResult",
    "Confidence",
    "LowerBound",
    "UndefinedBoundWarning",
    "UpperBounds",
    "certify",
    "confidence",
    "confidence_score",
    "lower_bound",
    "tie_credit",
    "upper_bounds",
]



class UndefinedBoundWarning(RuntimeWarning):
    """A bound is undefined on this data (reported as NaN); the message says why."""


@dataclass(frozen=True)
class UpperBounds:
    """Upper bounds on the average annotator's oracle accuracy.

    Attributes
    ----------
    theoretical : float
        :math:`U_t = \\sqrt{\\overline{X^t}}`, Theorem 1 (rigorous under its assumption).
    empirical : float
        :math:`U_e = \\sqrt{\\overline{X^e}}`, Definition 1 (tighter, an approximation);
        NaN when no item has two labels.
    n_items : int
        Items behind ``theoretical`` (at least one label): Hoeffding's :math:`N_u`.
    n_items_empirical : int
        Items behind ``empirical`` (at least two labels).
    agreement_theoretical, agreement_empirical : float
        The squared bounds: mean agreement over ordered annotator pairs with and
        without self-pairs.
    """

    theoretical: float
    empirical: float
    n_items: int
    n_items_empirical: int
    agreement_theoretical: float
    agreement_empirical: float

    def value(self, bound: str = "theoretical") -> float:
        """``theoretical`` or ``empirical`` by name."""
        _check_choice(bound, BOUNDS, "bound")
        return self.theoretical if bound == "theoretical" else self.empirical

    def n(self, bound: str = "theoretical") -> int:
        _check_choice(bound, BOUNDS, "bound")
        return self.n_items if bound == "theoretical" else self.n_items_empirical

    def summary(self) -> str:
        """One line: both bounds with the items each rests on ("—" where undefined)."""
        return (f"Average annotator, upper bounds on oracle accuracy: "
                f"U_t = {num(self.theoretical)} (Theorem 1, {self.n_items} items), "
                f"U_e = {num(self.empirical)} (Definition 1, {self.n_items_empirical} items)")


@dataclass(frozen=True)
class LowerBound:
    """Lower bound on a model's oracle accuracy (Theorem 3).

    Attributes
    ----------
    value : float
        :math:`L_N`, agreement of the model with the aggregated human label.
    n_items : int
        Items behind it (at least one human label): Hoeffding's :math:`N_l`.
    aggregation : str
        How the human labels were aggregated.
    """

    value: float
    n_items: int
    aggregation: str




@dataclass(frozen=True)
class CertificationResult:
    """Everything :func:`certify` computes for one model on one dataset.

    ``confidences`` maps ``(bound, method)`` — bound in ``("theoretical",
    "empirical")``, method in ``("hms", "oms")`` (the paper's, always) and the
    verdict's ``method`` — to a :class:`Confidence`. The
    verdict ``certified`` is ``confidences[(bound, method)].score >= threshold``
    for the ``bound`` and ``method`` recorded in the result.
    """

    upper: UpperBounds
    lower: LowerBound
    confidences: Mapping[tuple[str, str], Confidence]
    certified: bool
    bound: str
    method: str
    threshold: float
    tau: float

    @property
    def u_t(self) -> float:
        return self.upper.theoretical

    @property
    def u_e(self) -> float:
        return self.upper.empirical

    @property
    def l(self) -> float:  # noqa: E743 - the paper's name
        return self.lower.value

    @property
    def margin_theoretical(self) -> float:
        """:math:`L_N - U_t`."""
        return self.lower.value - self.upper.theoretical

    @property
    def margin_empirical(self) -> float:
        """:math:`L_N - U_e`."""
        return self.lower.value - self.upper.empirical

    @property
    def score(self) -> float:
        """The confidence the verdict used."""
        return self.confidences[(self.bound, self.method)].score

    def summary(self, name: str = "model") -> str:
        """A plain-text summary: the verdict, the bounds and margins, and one row per
        (bound, method) confidence with its margins ``t_u``, ``t_l``."""
        short = {"theoretical": "U_t", "empirical": "U_e"}
        verdict = "CERTIFIED" if self.certified else "not certified"
        lines = [
            f"{name}: {verdict} (S_{self.method} with {short[self.bound]} = {num(self.score)} ≥ {self.threshold:g}"
            f"{f', tau = {self.tau:g}' if self.tau else ''})",
            f"L = {num(self.l)} ({self.lower.aggregation}, {self.lower.n_items} items), "
            f"U_t = {num(self.u_t)} ({self.upper.n_items} items), U_e = {num(self.u_e)} "
            f"({self.upper.n_items_empirical} items); L-U_t = {num(self.margin_theoretical, sign=True)}, "
            f"L-U_e = {num(self.margin_empirical, sign=True)}",
        ]
        rows = [[short[b], m, num(c.score), num(c.t_u), num(c.t_l)] for (b, m), c in self.confidences.items()]
        lines += table(["bound", "method", "S", "t_u", "t_l"], rows, widths=[7, 12, 8, 10, 10], align="llrrr")
        if any(c.score < 0 for c in self.confidences.values()):
            lines.append("A negative confidence means the margin is too small for this many items: not certified.")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """A JSON-ready dictionary (NaN becomes ``None``)."""

        def clean(x):
            return finite(x) if isinstance(x, float) else x

        return {
            "u_t": clean(self.upper.theoretical),
            "u_e": clean(self.upper.empirical),
            "l": clean(self.lower.value),
            "margin_theoretical": clean(self.margin_theoretical),
            "margin_empirical": clean(self.margin_empirical),
            "n_items_upper": self.upper.n_items,
            "n_items_upper_empirical": self.upper.n_items_empirical,
            "n_items_lower": self.lower.n_items,
            "aggregation": self.lower.aggregation,
            "tau": self.tau,
            "threshold": self.threshold,
            "verdict": {
                "certified": self.certified,
                "bound": self.bound,
                "method": self.method,
                "score": clean(self.score),
            },
            "confidence": {
                f"{bound}/{method}": {
                    "score": clean(c.score),
                    "t_u": clean(c.t_u),
                    "t_l": clean(c.t_l),
                    **({"clamped": True} if c.clamped else {}),
                    **({"evalue": clean(c.evalue)} if c.method in ANYTIME_METHODS else {}),
                    **({"wealth": clean(c.wealth)} if c.method == "anytime" else {}),
                }
                for (bound, method), c in self.confidences.items()
            },
        }






def upper_bounds(counts) -> UpperBounds:
    """Upper bounds on the average annotator's oracle accuracy.

    For item :math:`n` with label counts :math:`m_{nc}` and
    :math:`K_n = \\sum_c m_{nc}` labels, the agreement over ordered annotator
    pairs with self-pairs is :math:`X^t_n = \\sum_c m_{nc}^2 / K_n^2` and without
    them (for :math:`K_n \\ge 2`) :math:`X^e_n = \\sum_c m_{nc}(m_{nc}-1) /
    (K_n(K_n-1))`. Then

    .. math:: U_t = \\sqrt{\\tfrac{1}{N}\\sum_n X^t_n}, \\qquad
              U_e = \\sqrt{\\tfrac{1}{N_e}\\sum_{n: K_n \\ge 2} X^e_n}.

    With every item labeled by the same :math:`K` annotators these are the paper's
    eq. (18) (Theorem 1 / Theorem 5) and Definition 1; the per-item form handles
    items with different numbers of labels. Items without labels are ignored.

    Parameters
    ----------
    counts : array-like of int, shape (N, L)
        Per-item label counts (or :class:`LabelCounts` / :class:`Annotations`).

    Returns
    -------
    UpperBounds

    References
    ----------
    Xu, Walder & Xu, "Humanly Certifying Superhuman Classifiers", ICLR 2023,
    Theorem 1, Definition 1, Theorem 5.

    Examples
    --------
    >>> ub = upper_bounds([[3, 0], [2, 1]])
    >>> round(ub.theoretical, 4), round(ub.empirical, 4)
    (0.8819, 0.8165)
    """
    m = _counts_array(counts)
    k = m.sum(axis=1)
    labeled = k > 0
    if not labeled.any():
        raise StatsInputError("`counts` has no labeled item.")
    m = m[labeled].astype(np.float64)
    k = k[labeled].astype(np.float64)
    sq = np.einsum("ij,ij->i", m, m)
    x_t = sq / (k * k)
    pairs = k >= 2
    n_e = int(pairs.sum())
    if n_e:
        kk = k[pairs]
        x_e = (sq[pairs] - kk) / (kk * (kk - 1.0))
        a_e = float(x_e.mean())
    else:
        a_e = math.nan
        warnings.warn(
            "U_e is undefined (NaN): no item has two or more labels, so there is no pair of annotators "
            "to compare on any item; U_t (which counts self-pairs) is still reported.",
            UndefinedBoundWarning, stacklevel=2,
        )
    a_t = float(x_t.mean())
    return UpperBounds(
        theoretical=math.sqrt(a_t),
        empirical=math.sqrt(a_e) if n_e else math.nan,
        n_items=int(labeled.sum()),
        n_items_empirical=n_e,
        agreement_theoretical=a_t,
        agreement_empirical=a_e,
    )






def lower_bound(counts, predictions, *, aggregation: str = "majority", weights=None) -> LowerBound:
    """Lower bound on the model's oracle accuracy: agreement with the aggregate.

    .. math:: L_N = \\tfrac{1}{N_l} \\sum_n [\\ell_M^{(n)} = \\ell_G^{(n)}]

    where :math:`\\ell_G` is the plurality ("majority") label of the humans; an item
    whose plurality is tied among :math:`T` labels counts :math:`1/T` when the model's
    label is among them (a random tie-break's expectation). Theorem 3: under its
    assumption :math:`L \\le P(\\ell_M = \\ell_\\star)`.

    Parameters
    ----------
    counts : array-like of int, shape (N, L), or Annotations
        Per-item label counts. Must be :class:`Annotations` when ``weights`` is given.
    predictions : array-like, shape (N,) of class indices, or (N, L) probabilities
        The model's labels (probabilities are turned into their argmax).
    aggregation : {"majority", "plurality"}
        Both name the plurality vote with tie credit (majority of two classes).
    weights : mapping annotator → weight, or array (n_annotators,), optional
        Weighted aggregation: the aggregate is the label with the largest summed
        weight (the paper's footnote 2, weighted voting).

    Returns
    -------
    LowerBound

    Examples
    --------
    >>> lower_bound([[3, 0], [1, 1], [0, 2]], [0, 0, 0]).value
    0.5
    """
    _check_choice(aggregation, AGGREGATIONS, "aggregation")
    if weights is not None:
        if not isinstance(counts, Annotations):
            raise StatsInputError("weighted aggregation needs `counts` as Annotations (who gave which label).")
        votes = _weighted_votes(counts, weights)
        n_labels = counts.n_labels
    else:
        votes = _counts_array(counts)
        n_labels = votes.shape[1]
    pred = as_predictions(predictions, votes.shape[0], n_labels)
    credit = tie_credit(votes, pred)
    ok = ~np.isnan(credit)
    if not ok.any():
        raise StatsInputError("`counts` has no labeled item.")
    agg = "weighted " + aggregation if weights is not None else aggregation
    return LowerBound(value=float(credit[ok].mean()), n_items=int(ok.sum()), aggregation=agg)


# ----------------------------------------------------------------------- confidence


def _hoeffding_delta(n):
    return lambda t: hoeffding_delta(n, t)


def _bernstein_delta(n, var):
    """Maurer & Pontil (2009, Theorem 4): for :math:`n \\ge 2` values in [0, 1] with
    unbiased sample variance :math:`V`, :math:`P(\\mu - \\bar x \\ge \\sqrt{2 V y / n} +
    7y / (3(n-1))) \\le 2e^{-y}` (and the same for :math:`\\bar x - \\mu`). Returns the
    :math:`\\delta` of a margin :math:`t` (the root of :math:`7y/(3(n-1)) + \\sqrt{2Vy/n} = t`)."""
    n = np.asarray(n, dtype=float)
    var = np.asarray(var, dtype=float)
    ok = n >= 2
    a = np.sqrt(2.0 * var / np.where(ok, n, 2.0))
    c = 7.0 / (3.0 * (np.where(ok, n, 2.0) - 1.0))

    def delta(t):
        t = np.maximum(np.asarray(t, dtype=float), 0.0)
        den = a + np.sqrt(a * a + 4.0 * c * t)
        root = 2.0 * t / np.where(den > 0, den, 1.0)  # sqrt(y), cancellation-free form; 0 at t = 0
        return np.where(ok, np.minimum(2.0 * np.exp(-root * root), 1.0), 1.0)

    return delta


def _score_of_tu(t_u, lower, upper, tau, delta_u, delta_l):
    t_l = lower - tau - np.sqrt(t_u + upper * upper)
    return 1.0 - delta_u(t_u) - delta_l(t_l), t_l


def _check_var(v, name):
    try:
        v = float(v)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`{name}` must be a number; got {v!r}.") from exc
    if not math.isfinite(v) or v < 0 or v > 0.5:
        raise StatsInputError(f"`{name}` must be the sample variance of values in [0, 1]; got {v!r}.")
    return v




def confidence(lower: float, upper: float, n: int, *, n_lower: int | None = None, tau: float = 0.0,
               method: str = "oms", var_upper: float | None = None, var_lower: float | None = None) -> Confidence:
    """Confidence that the model's oracle accuracy exceeds the average annotator's.

    Theorem 7: for :math:`t_u, t_l \\ge 0` with
    :math:`t_l = L_N - \\tau - \\sqrt{t_u + U_N^2}`, with probability at least

    .. math:: S(t_u) = 1 - \\delta_u(t_u) - \\delta_l(t_l), \\qquad
              \\delta_u(t) = e^{-2 N_u t^2},\\ \\delta_l(t) = e^{-2 N_l t^2}

    the model beats the average annotator by :math:`\\tau`. HMS (Algorithm 1) takes
    :math:`t_u = (L_N - \\tau - U_N)/2` (the paper's :math:`(L_N - U_N)/2` at
    :math:`\\tau = 0`); OMS (Algorithm 2) maximises :math:`S` over the *feasible*
    interval :math:`t_u \\in [0, (L_N - \\tau)^2 - U_N^2]` where :math:`t_l \\ge 0`.
    The paper's unconstrained gradient ascent can leave that interval and report a
    spurious score; this never does. HMS's half margin lies outside the interval
    when :math:`(L_N - \\tau - U_N)/2 > (L_N - \\tau)^2 - U_N^2` (small :math:`U_N`):
    it is then clamped to the interval's end (``clamped=True``), where
    :math:`t_l = 0` and :math:`S \\le 0`. Where :math:`L_N - \\tau \\le U_N` no feasible
    split exists and the score is :math:`-1`, the limit of every method at the
    boundary (:math:`t_u = t_l = 0`): not certified.

    ``method="bernstein"`` is the same optimal split with the empirical-Bernstein
    :math:`\\delta` of Maurer & Pontil (2009) in place of Hoeffding's, which uses the
    sample variances of the per-item values behind :math:`U_N^2` (:math:`X^t_n` or
    :math:`X^e_n`) and :math:`L_N` (the per-item agreement): much tighter when they
    vary little. Like HMS and OMS it holds for one look at a fixed :math:`N`. (All
    three choose the split from the data, as the paper does; see ``"anytime"`` in
    :func:`certify` for a sequential guarantee.)

    Parameters
    ----------
    lower : float
        :math:`L_N` in [0, 1].
    upper : float
        :math:`U_N` in [0, 1] (:math:`U_t` or :math:`U_e`).
    n : int
        :math:`N_u`, items behind ``upper`` (and behind ``lower`` unless ``n_lower``).
    n_lower : int, optional
        :math:`N_l`, items behind ``lower``.
    tau : float, default 0
        Required margin of superiority.
    method : {"oms", "hms", "bernstein"}
    var_upper, var_lower : float
        For ``"bernstein"`` only: sample variances (``ddof=1``) of the per-item values
        behind ``upper**2`` and behind ``lower``.

    Returns
    -------
    Confidence

    References
    ----------
    Xu, Walder & Xu (2023), Theorem 7, eqs. (33)–(38), Table 4.
    Maurer & Pontil, "Empirical Bernstein bounds and sample variance penalization",
    COLT 2009, Theorem 4.

    Examples
    --------
    >>> round(confidence(0.971, 0.939, 1821, method="hms").score, 4)
    0.473
    >>> c = confidence(0.19, 0.175, 80000, method="hms")
    >>> c.clamped, c.score <= 0
    (True, True)
    """
    if method == "anytime":
        raise StatsInputError("method 'anytime' needs the per-item streams: use `certify` or `anytime_confidence`.")
    _check_choice(method, ("hms", "oms", "bernstein"), "method")
    lower = check_probability(lower, name="lower")
    upper = check_probability(upper, name="upper")
    n_u = _check_n(n, "n")
    n_l = n_u if n_lower is None else _check_n(n_lower, "n_lower")
    tau = _check_tau(tau)
    if method == "bernstein":
        if var_upper is None or var_lower is None:
            raise StatsInputError("method 'bernstein' needs `var_upper` and `var_lower`.")
        d_u, d_l = _bernstein_delta(n_u, _check_var(var_upper, "var_upper")), \
            _bernstein_delta(n_l, _check_var(var_lower, "var_lower"))
    else:
        d_u, d_l = _hoeffding_delta(n_u), _hoeffding_delta(n_l)
    common = dict(method=method, lower=lower, upper=upper, n_upper=n_u, n_lower=n_l, tau=tau)
    hi = (lower - tau) ** 2 - upper**2 if lower - tau > 0 else -1.0
    if lower - tau <= upper or hi <= 0:
        return Confidence(score=-1.0, t_u=math.nan, t_l=math.nan, **common)
    clamped = False
    if method == "hms":
        t_u = (lower - tau - upper) / 2.0
        if t_u > hi:
            t_u, clamped = hi, True
    else:
        t_u = _best_split(lambda t: _score_of_tu(t, lower, upper, tau, d_u, d_l)[0], hi)
    s, t_l = _score_of_tu(t_u, lower, upper, tau, d_u, d_l)
    if clamped:
        t_l = max(float(t_l), 0.0)  # exactly 0 at the interval's end (rounding aside)
    return Confidence(score=float(s), t_u=float(t_u), t_l=float(t_l), clamped=clamped, **common)


def _best_split(score, hi) -> float:
    """Maximise score(t_u) on [0, hi]: a grid to find the basin, then bounded Brent."""
    grid = np.linspace(0.0, hi, 513)
    s = score(grid)
    i = int(np.argmax(s))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    res = optimize.minimize_scalar(lambda t: -float(score(t)), bounds=(a, b), method="bounded",
                                   options={"xatol": hi * 1e-12 + 1e-300})
    return float(res.x) if -res.fun >= s[i] else float(grid[i])


def _confidence_many(lower, upper, n_u, n_l, *, tau: float = 0.0, method: str = "oms", var_upper=None,
                     var_lower=None) -> np.ndarray:
    """:func:`confidence`'s score for arrays of inputs at once (simulations, many looks).

    The same maximum over the feasible interval: a 513-point grid, then golden-section
    refinement around its best point (S is unimodal there).
    """
    lower, upper, n_u, n_l = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (lower, upper, n_u, n_l)))
    if method == "bernstein":
        var_upper, var_lower = (np.broadcast_to(np.asarray(v, dtype=float), lower.shape)
                                for v in (var_upper, var_lower))
    margin = lower - tau
    hi = np.where(margin > 0, margin**2 - upper**2, -1.0)
    ok = (margin > upper) & (hi > 0)
    out = np.full(lower.shape, -1.0)
    if not ok.any():
        return out
    lo_, up_, nu, nl, h = (a[ok] for a in (lower, upper, n_u, n_l, hi))
    if method == "bernstein":
        du, dl = _bernstein_delta(nu, var_upper[ok]), _bernstein_delta(nl, var_lower[ok])
        du2 = _bernstein_delta(nu[:, None], var_upper[ok][:, None])
        dl2 = _bernstein_delta(nl[:, None], var_lower[ok][:, None])
    else:
        du, dl = _hoeffding_delta(nu), _hoeffding_delta(nl)
        du2, dl2 = _hoeffding_delta(nu[:, None]), _hoeffding_delta(nl[:, None])
    if method == "hms":
        t = np.minimum((lo_ - tau - up_) / 2.0, h)
        out[ok] = _score_of_tu(t, lo_, up_, tau, du, dl)[0]
        return out
    grid = np.linspace(0.0, 1.0, 513)[None, :] * h[:, None]
    s = _score_of_tu(grid, lo_[:, None], up_[:, None], tau, du2, dl2)[0]
    i = s.argmax(axis=1)
    rows = np.arange(i.size)
    a = grid[rows, np.maximum(i - 1, 0)]
    b = grid[rows, np.minimum(i + 1, grid.shape[1] - 1)]
    best = s[rows, i]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc = _score_of_tu(c, lo_, up_, tau, du, dl)[0]
    fd = _score_of_tu(d, lo_, up_, tau, du, dl)[0]
    for _ in range(60):
        left = fc > fd
        b = np.where(left, d, b)
        a = np.where(left, a, c)
        d_new = np.where(left, c, a + g * (b - a))
        c_new = np.where(left, b - g * (b - a), d)
        fd_new = np.where(left, fc, np.nan)
        fc_new = np.where(left, np.nan, fd)
        c, d = c_new, d_new
        need_c, need_d = np.isnan(fc_new), np.isnan(fd_new)
        fc = np.where(need_c, _score_of_tu(c, lo_, up_, tau, du, dl)[0], fc_new)
        fd = np.where(need_d, _score_of_tu(d, lo_, up_, tau, du, dl)[0], fd_new)
    out[ok] = np.maximum(best, np.maximum(fc, fd))
    return out


def _check_n(n, name) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise StatsInputError(f"`{name}` must be a positive integer; got {n!r}.")
    return int(n)


def confidence_score(lower: float, upper: float, n: int, *, n_lower: int | None = None, tau: float = 0.0,
                     method: str = "oms") -> float:
    """:math:`S` of Theorem 7 as a float; see :func:`confidence`.

    Examples
    --------
    >>> round(confidence_score(0.899, 0.879, 10000, method="hms"), 4)
    0.8482
    >>> round(confidence_score(0.899, 0.879, 10000, method="oms"), 4)
    0.9267
    """
    return confidence(lower, upper, n, n_lower=n_lower, tau=tau, method=method).score


# ----------------------------------------------------------------------- anytime

#: The anytime certification lives in :mod:`auditor.stats.anytime` (which builds on
#: :mod:`auditor.stats.certification_core`, not on this module); its names are still
#: importable from here, loaded on first use.
def __getattr__(name: str):
    if not name.startswith("__"):
        from auditor.stats import anytime

        if hasattr(anytime, name):
            return getattr(anytime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------- certify


def _undefined(method, lb, u, tau):
    return Confidence(math.nan, math.nan, math.nan, method, lb.value, u, 0, lb.n_items, float(tau))


def certify(counts, predictions, *, tau: float = 0.0, threshold: float = 0.95, bound: str = "theoretical",
            method: str = "oms", aggregation: str = "majority", weights=None,
            split: float = 0.5) -> CertificationResult:
    """Upper bounds, lower bound and confidence for one model, and the verdict.

    Computes :math:`U_t`, :math:`U_e` (:func:`upper_bounds`), :math:`L_N`
    (:func:`lower_bound`), and :math:`S` by HMS and OMS with each upper bound
    (:func:`confidence`), and by ``method`` when it is another one. The model is
    *certified* when the confidence for the chosen ``bound`` and ``method`` reaches
    ``threshold``. The default uses the rigorous :math:`U_t` (Theorem 1); the paper's
    own practice is ``bound="empirical"``.

    Methods: ``"hms"``, ``"oms"`` (the paper's, Hoeffding) and ``"bernstein"``
    (empirical Bernstein, variance-adaptive) hold for one look at a fixed number of
    items. ``"anytime"`` (:class:`BettingStream`, one betting e-process on the per-item
    difference) and ``"anytime-fan"`` (:func:`anytime_confidence`, one sequence per bound:
    the earlier verdict, less powerful) read the rows as a stream in arrival order (row
    order) and hold for every prefix at once: P(the verdict on some prefix is
    "certified" while the model is not better by ``tau``) is at most
    ``1 - threshold``. Each row enters with the labels it has here (see
    :class:`AnytimeState` for what arrival means when labels come later).

    Parameters
    ----------
    counts : array-like of int, shape (N, L), or Annotations
        Rows in arrival order (matters for ``"anytime"`` only).
    predictions : array-like, shape (N,) or (N, L)
    tau : float, default 0
        Margin the model must beat the average annotator by.
    threshold : float, default 0.95
        Confidence needed for the verdict.
    bound : {"theoretical", "empirical"}
    method : {"oms", "hms", "bernstein", "anytime", "anytime-fan"}
    aggregation, weights
        As in :func:`lower_bound`.
    split : float in (0, 1), default 0.5
        ``"anytime-fan"``: the share of the error given to the lower bound's sequence.

    Returns
    -------
    CertificationResult
    """
    from auditor.stats.anytime import AnytimeState, item_values  # builds on this module

    _check_choice(bound, BOUNDS, "bound")
    _check_choice(method, METHODS, "method")
    threshold = check_probability(threshold, name="threshold")
    tau = _check_tau(tau)
    ub = upper_bounds(counts)
    lb = lower_bound(counts, predictions, aggregation=aggregation, weights=weights)
    methods = PAPER_METHODS if method in PAPER_METHODS else (*PAPER_METHODS, method)
    confs = {}
    values = item_values(counts, predictions, aggregation=aggregation, weights=weights) \
        if method == "bernstein" else None
    state = None
    if method in ANYTIME_METHODS:
        state = AnytimeState(tau=tau)
        state.update(counts, predictions, aggregation=aggregation, weights=weights)
    for b in BOUNDS:
        u = ub.value(b)
        for m in methods:
            if math.isnan(u):
                confs[(b, m)] = _undefined(m, lb, u, tau)
            elif m in ANYTIME_METHODS:
                confs[(b, m)] = state.confidence(b, method=m, split=split)
            elif m == "bernstein":
                x = values.x_t if b == "theoretical" else values.x_e
                x = x[~np.isnan(x)]
                a = values.agreement[~np.isnan(values.agreement)]
                var_u = float(x.var(ddof=1)) if x.size > 1 else 0.25
                var_l = float(a.var(ddof=1)) if a.size > 1 else 0.25
                confs[(b, m)] = confidence(lb.value, u, ub.n(b), n_lower=lb.n_items, tau=tau, method=m,
                                           var_upper=var_u, var_lower=var_l)
            else:
                confs[(b, m)] = confidence(lb.value, u, ub.n(b), n_lower=lb.n_items, tau=tau, method=m)
    chosen = confs[(bound, method)].score
    if math.isnan(chosen):
        warnings.warn("no item has two labels: the empirical bound is undefined", RuntimeWarning, stacklevel=2)
    certified = bool(chosen >= threshold) if not math.isnan(chosen) else False
    return CertificationResult(
        upper=ub, lower=lb, confidences=confs, certified=certified, bound=bound, method=method,
        threshold=threshold, tau=float(tau),
    )
