"""What the fixed-sample and the anytime certifications share: the method and bound names,
the :class:`Confidence` a verdict reports, the plurality credit and the argument checks.
(:mod:`auditor.stats.certification` and :mod:`auditor.stats.anytime` both build on it, so
neither imports the other's module at start-up.)"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from auditor.stats.counts import Annotations, as_counts
from auditor.stats.validation import StatsInputError, as_predictions, check_nonnegative

__all__ = ["AGGREGATIONS", "ANYTIME_METHODS", "BOUNDS", "METHODS", "PAPER_METHODS", "Confidence", "tie_credit"]

METHODS = ("hms", "oms", "bernstein", "anytime", "anytime-fan")
ANYTIME_METHODS = ("anytime", "anytime-fan")
PAPER_METHODS = ("hms", "oms")
BOUNDS = ("theoretical", "empirical")
AGGREGATIONS = ("majority", "plurality")


@dataclass(frozen=True)
class Confidence:
    """Confidence that the model beats the average annotator by ``tau`` (Theorem 7).

    ``score`` is :math:`S = 1 - \\delta_u(t_u) - \\delta_l(t_l)`: for ``"hms"``/``"oms"``
    :math:`\\delta(t) = e^{-2 N t^2}` (Hoeffding), for ``"bernstein"`` the empirical
    Bernstein :math:`\\delta` (:func:`confidence`); for ``"anytime"`` and ``"anytime-fan"``
    :math:`S = 1 - 1/E` with ``evalue`` :math:`E` (:class:`BettingStream`, where :math:`E` is
    the largest value the e-process has reached, and :func:`anytime_confidence`). A
    negative score means "not certified" and is kept as it is. ``t_u``/``t_l`` are
    the finite-sample margins used (NaN where no feasible split exists, and for
    the anytime methods). ``wealth`` is the betting e-process's current value
    (``"anytime"`` only). ``clamped`` is True when HMS's half-margin
    :math:`t_u = (L - \\tau - U)/2` lay outside the feasible interval (it would make
    :math:`t_l < 0`, for which Theorem 7 says nothing) and was moved to its end.
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
    clamped: bool = False
    evalue: float = math.nan
    wealth: float = math.nan

    @property
    def feasible(self) -> bool:
        """Whether ``lower - tau`` exceeds ``upper`` (some split has t_u, t_l ≥ 0)."""
        return self.lower - self.tau > self.upper


def _check_choice(value, choices, name):
    if value not in choices:
        raise StatsInputError(f"`{name}` must be one of {list(choices)}; got {value!r}.")


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


def _check_tau(tau) -> float:
    return check_nonnegative(tau, name="tau")


#: The coercers live in ``stats.validation``; these names are what ``stats.planning``
#: imports (until its split into a package imports the coercers themselves).
_counts_array = as_counts
_as_labels = as_predictions
