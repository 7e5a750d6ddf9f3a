"""Hoeffding's inequality for means of [0, 1] values: the one home of its margin, its
tail probability and the confidence bounds built from them.

For n independent values in [0, 1] with mean :math:`\\bar X`,
:math:`P(\\mu - \\bar X \\ge t) \\le e^{-2nt^2}` (and the same for :math:`\\bar X - \\mu`),
so :math:`\\bar X - \\sqrt{\\ln(1/\\delta)/(2n)}` is below :math:`\\mu` with probability at
least :math:`1 - \\delta` (Hoeffding 1963, Theorem 1).
"""

from __future__ import annotations

import numpy as np

from auditor.stats.validation import check_probability

__all__ = ["hoeffding_delta", "hoeffding_interval", "hoeffding_lower", "hoeffding_margin"]


def hoeffding_delta(n, t):
    """The one-sided tail :math:`e^{-2nt^2}`: the probability bound of a margin ``t``."""
    return np.exp(-2.0 * np.asarray(n, dtype=float) * np.asarray(t, dtype=float) ** 2)


def hoeffding_margin(n, delta):
    """The one-sided margin :math:`\\sqrt{\\ln(1/\\delta)/(2n)}` whose tail is ``delta``
    (the inverse of :func:`hoeffding_delta`); infinite where ``n`` is 0."""
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(np.log(1.0 / np.asarray(delta, dtype=float)) / (2.0 * n))


def hoeffding_lower(mean, n, *, confidence: float = 0.95):
    """One-sided Hoeffding lower confidence bound for a mean of [0, 1] variables.

    .. math:: \\bar X - \\sqrt{\\ln(1/\\delta) / (2n)}, \\quad \\delta = 1 - \\text{confidence}

    clipped at 0; NaN where ``n`` is 0.
    """
    confidence = check_probability(confidence, name="confidence", open_interval=True)
    mean = np.asarray(mean, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        lo = mean - hoeffding_margin(n, 1.0 - confidence)
    return np.where(n > 0, np.maximum(lo, 0.0), np.nan)


def hoeffding_interval(mean, n, *, confidence: float = 0.95):
    """Two-sided Hoeffding interval ``(low, high)`` for a mean of [0, 1] variables: each
    side at level ``1 - (1 - confidence) / 2``, clipped to [0, 1]; NaN where ``n`` is 0."""
    confidence = check_probability(confidence, name="confidence", open_interval=True)
    side = 1.0 - (1.0 - confidence) / 2.0
    mean = np.asarray(mean, dtype=float)
    return hoeffding_lower(mean, n, confidence=side), 1.0 - hoeffding_lower(1.0 - mean, n, confidence=side)
