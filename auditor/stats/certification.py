"""Certification bounds: is a model better than the average human annotator?

Implements Xu, Walder & Xu, "Humanly Certifying Superhuman Classifiers" (2023):
the upper bound on the average annotator's oracle accuracy (Theorem 1 and
Definition 1), the lower bound on a model's oracle accuracy (Theorem 3), and the
finite-sample confidence that the model beats the average annotator (Theorem 7),
with the heuristic (HMS) and optimal (OMS) margin separations.

Everything here depends on the data only through the per-item label counts.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from auditor.stats._validation import (
    StatsInputError,
    as_count_matrix,
    as_hard_predictions,
    as_probabilities,
    check_probability,
)
from auditor.stats.counts import Annotations, LabelCounts

__all__ = [
    "CertificationResult",
    "Confidence",
    "LowerBound",
    "UpperBounds",
    "certify",
    "confidence",
    "confidence_score",
    "lower_bound",
    "tie_credit",
    "upper_bounds",
]

METHODS = ("hms", "oms")
BOUNDS = ("theoretical", "empirical")
AGGREGATIONS = ("majority", "plurality")


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
class Confidence:
    """Confidence that the model beats the average annotator by ``tau`` (Theorem 7).

    ``score`` is :math:`S = 1 - e^{-2 N_u t_u^2} - e^{-2 N_l t_l^2}`; a negative
    score means "not certified" and is kept as it is. ``t_u``/``t_l`` are the
    finite-sample margins used (NaN where no feasible split exists).
    """

    score: float
    t_u: float
    t_l: float
    method: str
    lower: float
    upper: float
    n_upper: int
    n_lower: int
    tau: float

    @property
    def feasible(self) -> bool:
        """Whether ``lower - tau`` exceeds ``upper`` (some split has t_u, t_l ≥ 0)."""
        return self.lower - self.tau > self.upper


@dataclass(frozen=True)
class CertificationResult:
    """Everything :func:`certify` computes for one model on one dataset.

    ``confidences`` maps ``(bound, method)`` — bound in ``("theoretical",
    "empirical")``, method in ``("hms", "oms")`` — to a :class:`Confidence`. The
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

    def to_dict(self) -> dict:
        """A JSON-ready dictionary (NaN becomes ``None``)."""

        def clean(x):
            if isinstance(x, float) and not math.isfinite(x):
                return None
            return x

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
                }
                for (bound, method), c in self.confidences.items()
            },
        }


def _check_choice(value, choices, name):
    if value not in choices:
        raise StatsInputError(f"`{name}` must be one of {list(choices)}; got {value!r}.")


def _counts_array(counts) -> np.ndarray:
    if isinstance(counts, Annotations):
        counts = counts.counts()
    if isinstance(counts, LabelCounts):
        counts = counts.counts
    return as_count_matrix(counts)


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
    a_t = float(x_t.mean())
    return UpperBounds(
        theoretical=math.sqrt(a_t),
        empirical=math.sqrt(a_e) if n_e else math.nan,
        n_items=int(labeled.sum()),
        n_items_empirical=n_e,
        agreement_theoretical=a_t,
        agreement_empirical=a_e,
    )


def _weighted_votes(annotations: Annotations, weights) -> np.ndarray:
    """(N, L) sum of annotator weights per item and label."""
    if isinstance(weights, Mapping):
        unknown = set(weights) - set(annotations.annotators)
        if unknown:
            raise StatsInputError(f"`weights` names unknown annotator(s): {sorted(map(str, unknown))[:5]}.")
        w = np.array([float(weights.get(a, 1.0)) for a in annotations.annotators])
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (annotations.n_annotators,):
            raise StatsInputError(
                f"`weights` must have one entry per annotator ({annotations.n_annotators}); got shape {w.shape}."
            )
    if not np.isfinite(w).all() or (w < 0).any():
        raise StatsInputError("`weights` must be finite and non-negative.")
    flat = np.bincount(
        annotations.item * annotations.n_labels + annotations.label,
        weights=w[annotations.annotator],
        minlength=annotations.n_items * annotations.n_labels,
    )
    return flat.reshape(annotations.n_items, annotations.n_labels)


def tie_credit(votes: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-item expected agreement of ``labels`` with the plurality of ``votes``.

    An item whose plurality is tied among :math:`T` labels gives credit
    :math:`1/T` when ``labels`` is one of them (the expectation of a random
    tie-break) and 0 otherwise. Items without votes get NaN.

    Parameters
    ----------
    votes : ndarray, shape (N, L)
        Counts or weighted votes.
    labels : ndarray of int, shape (N,)
        Class indices to score.
    """
    votes = np.asarray(votes, dtype=float)
    top = votes.max(axis=1)
    if np.issubdtype(votes.dtype, np.integer):
        tied = votes == top[:, None]
    else:
        tied = np.isclose(votes, top[:, None], rtol=1e-12, atol=1e-12)
    n_tied = tied.sum(axis=1)
    hit = tied[np.arange(votes.shape[0]), labels]
    out = hit / n_tied
    out[top <= 0] = np.nan
    return out


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
    pred = _as_labels(predictions, votes.shape[0], n_labels)
    credit = tie_credit(votes, pred)
    ok = ~np.isnan(credit)
    if not ok.any():
        raise StatsInputError("`counts` has no labeled item.")
    agg = "weighted " + aggregation if weights is not None else aggregation
    return LowerBound(value=float(credit[ok].mean()), n_items=int(ok.sum()), aggregation=agg)


def _as_labels(predictions, n_items: int, n_labels: int) -> np.ndarray:
    if hasattr(predictions, "to_numpy"):
        predictions = predictions.to_numpy()
    arr = np.asarray(predictions)
    if arr.ndim == 2:
        return as_probabilities(arr, n_items, n_labels).argmax(axis=1)
    return as_hard_predictions(arr, n_items, n_labels)


def _s_of_tu(t_u, lower, upper, n_u, n_l, tau):
    t_l = lower - tau - np.sqrt(t_u + upper * upper)
    return 1.0 - np.exp(-2.0 * n_u * t_u * t_u) - np.exp(-2.0 * n_l * t_l * t_l), t_l


def confidence(lower: float, upper: float, n: int, *, n_lower: int | None = None, tau: float = 0.0,
               method: str = "oms") -> Confidence:
    """Confidence that the model's oracle accuracy exceeds the average annotator's.

    Theorem 7: for :math:`t_u, t_l \\ge 0` with
    :math:`t_l = L_N - \\tau - \\sqrt{t_u + U_N^2}`, with probability at least

    .. math:: S(t_u) = 1 - e^{-2 N_u t_u^2} - e^{-2 N_l t_l^2}

    the model beats the average annotator by :math:`\\tau`. HMS (Algorithm 1) takes
    :math:`t_u = (L_N - \\tau - U_N)/2` (the paper's :math:`(L_N - U_N)/2` at
    :math:`\\tau = 0`); OMS (Algorithm 2) maximises :math:`S` over the *feasible*
    interval :math:`t_u \\in [0, (L_N - \\tau)^2 - U_N^2]` where :math:`t_l \\ge 0`.
    The paper's unconstrained gradient ascent can leave that interval and report a
    spurious score; this never does. Where :math:`L_N - \\tau \\le U_N` no feasible
    split exists and the score is :math:`-1`, the limit of both methods at the
    boundary (:math:`t_u = t_l = 0`): not certified.

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
    method : {"oms", "hms"}

    Returns
    -------
    Confidence

    References
    ----------
    Xu, Walder & Xu (2023), Theorem 7, eqs. (33)–(38), Table 4.

    Examples
    --------
    >>> round(confidence(0.971, 0.939, 1821, method="hms").score, 4)
    0.473
    """
    _check_choice(method, METHODS, "method")
    lower = check_probability(lower, name="lower")
    upper = check_probability(upper, name="upper")
    n_u = _check_n(n, "n")
    n_l = n_u if n_lower is None else _check_n(n_lower, "n_lower")
    try:
        tau = float(tau)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`tau` must be a number; got {tau!r}.") from exc
    if not math.isfinite(tau) or tau < 0:
        raise StatsInputError(f"`tau` must be finite and non-negative; got {tau!r}.")
    common = dict(method=method, lower=lower, upper=upper, n_upper=n_u, n_lower=n_l, tau=tau)
    hi = (lower - tau) ** 2 - upper**2 if lower - tau > 0 else -1.0
    if lower - tau <= upper or hi <= 0:
        return Confidence(score=-1.0, t_u=math.nan, t_l=math.nan, **common)
    if method == "hms":
        t_u = (lower - tau - upper) / 2.0
    else:
        t_u = _oms_argmax(lower, upper, n_u, n_l, tau, hi)
    s, t_l = _s_of_tu(t_u, lower, upper, n_u, n_l, tau)
    return Confidence(score=float(s), t_u=float(t_u), t_l=float(t_l), **common)


def _oms_argmax(lower, upper, n_u, n_l, tau, hi) -> float:
    """Maximise S(t_u) on [0, hi]: a grid to find the basin, then bounded Brent."""
    grid = np.linspace(0.0, hi, 513)
    s, _ = _s_of_tu(grid, lower, upper, n_u, n_l, tau)
    i = int(np.argmax(s))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    res = optimize.minimize_scalar(
        lambda t: -_s_of_tu(t, lower, upper, n_u, n_l, tau)[0],
        bounds=(a, b), method="bounded", options={"xatol": hi * 1e-12 + 1e-300},
    )
    best = float(res.x) if -res.fun >= s[i] else float(grid[i])
    return best


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


def certify(counts, predictions, *, tau: float = 0.0, threshold: float = 0.95, bound: str = "theoretical",
            method: str = "oms", aggregation: str = "majority", weights=None) -> CertificationResult:
    """Upper bounds, lower bound and confidence for one model, and the verdict.

    Computes :math:`U_t`, :math:`U_e` (:func:`upper_bounds`), :math:`L_N`
    (:func:`lower_bound`), and :math:`S` by HMS and OMS with each upper bound
    (:func:`confidence`). The model is *certified* when the confidence for the chosen
    ``bound`` and ``method`` reaches ``threshold``. The default uses the rigorous
    :math:`U_t` (Theorem 1); the paper's own practice is ``bound="empirical"``.

    Parameters
    ----------
    counts : array-like of int, shape (N, L), or Annotations
    predictions : array-like, shape (N,) or (N, L)
    tau : float, default 0
        Margin the model must beat the average annotator by.
    threshold : float, default 0.95
        Confidence needed for the verdict.
    bound : {"theoretical", "empirical"}
    method : {"oms", "hms"}
    aggregation, weights
        As in :func:`lower_bound`.

    Returns
    -------
    CertificationResult
    """
    _check_choice(bound, BOUNDS, "bound")
    _check_choice(method, METHODS, "method")
    threshold = check_probability(threshold, name="threshold")
    ub = upper_bounds(counts)
    lb = lower_bound(counts, predictions, aggregation=aggregation, weights=weights)
    confs = {}
    for b in BOUNDS:
        u = ub.value(b)
        for m in METHODS:
            if math.isnan(u):
                confs[(b, m)] = Confidence(math.nan, math.nan, math.nan, m, lb.value, u, 0, lb.n_items, float(tau))
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
