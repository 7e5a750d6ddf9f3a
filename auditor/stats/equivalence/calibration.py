"""Calibrating a soft classifier against the raters before cross-entropy scoring."""

from __future__ import annotations

import numpy as np
from scipy import optimize

from auditor.stats.equivalence._inputs import as_counts_input, counts_of, n_labels_of
from auditor.stats.validation import StatsInputError, as_probabilities

__all__ = ["calibrate_probabilities"]


def _isotonic_fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The increasing weighted least-squares fit of ``y`` on ``x`` at the distinct ``x``,
    within [0, 1]. Scores closer than float64's resolution (1e-15) are one score, their
    targets pooled to the weighted mean first (rows renormalised to sum to 1 tie only up
    to rounding), as scikit-learn does."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.concatenate([[True], np.diff(xs) >= np.finfo(np.float64).resolution])
    group = np.cumsum(starts) - 1
    w = np.bincount(group, weights=weight[order])
    wy = np.bincount(group, weights=weight[order] * y[order])
    fitted = optimize.isotonic_regression(wy / w, weights=w, increasing=True).x
    return xs[starts], np.clip(fitted, 0.0, 1.0)


def calibrate_probabilities(ratings, predictions, *, n_labels: int | None = None,
                            apply_to=None, matrix: str = "auto") -> np.ndarray:
    """Isotonic calibration of class probabilities to the raters' label frequencies.

    For each class l, an increasing isotonic regression (pool-adjacent-violators,
    ``scipy.optimize.isotonic_regression``, interpolated linearly between the fitted
    points and held constant beyond them, as scikit-learn's ``IsotonicRegression``
    with ``out_of_bounds="clip"``) maps the predicted P(l) to the fraction of the item's
    ratings that are l, weighting each item by its number of ratings; the mapped rows
    are renormalised to sum to 1 (two classes: one regression on class 1,
    P(0) = 1 − P(1)). The paper calibrates its classifiers this way before scoring them
    with cross-entropy (Resnick et al. §7, the Jigsaw "calibrated" classifier).

    Calibrating on the items that are then scored is optimistic; hold items out (fit
    on some, pass the others as ``apply_to``) where that matters.

    Parameters
    ----------
    ratings : array-like (N, K), Annotations or LabelCounts
        Item × rater class indices (``-1``/NaN missing) or label counts.
    predictions : array-like (N, L)
        The classifier's probabilities on the same items.
    n_labels : int, optional
        Number of classes (default: the predictions' columns).
    apply_to : array-like (M, L), optional
        Probabilities to transform with the fitted map (default: ``predictions``).
    matrix : {"auto", "raters", "counts"}, default "auto"
        What a bare ``ratings`` is, as in :func:`~auditor.stats.equivalence.power_curve`.

    Returns
    -------
    ndarray, shape (M, L)
        Calibrated probabilities.
    """
    probs = as_probabilities(predictions, None, n_labels)
    codes, counts = as_counts_input(ratings, name="ratings", n_labels=probs.shape[1], matrix=matrix)
    if counts is None:
        n_lab = n_labels_of(codes, n_labels=probs.shape[1])
        counts = counts_of(codes, n_lab)
    if counts.shape[0] != probs.shape[0]:
        raise StatsInputError(f"`predictions` has {probs.shape[0]} rows but `ratings` has {counts.shape[0]} items.")
    if counts.shape[1] != probs.shape[1]:
        raise StatsInputError(f"`predictions` has {probs.shape[1]} classes but `ratings` has {counts.shape[1]}.")
    target = as_probabilities(apply_to, None, probs.shape[1], name="apply_to") if apply_to is not None else probs
    n = counts.sum(axis=1)
    keep = n > 0
    if not keep.any():
        raise StatsInputError("`ratings` has no labels to calibrate against.")
    freq = counts[keep] / n[keep, None]
    classes = [1] if probs.shape[1] == 2 else range(probs.shape[1])
    out = np.zeros_like(target)
    for lab in classes:
        x, y = _isotonic_fit(probs[keep, lab], freq[:, lab], n[keep].astype(float))
        out[:, lab] = np.interp(target[:, lab], x, y)
    if probs.shape[1] == 2:
        out[:, 0] = 1.0 - out[:, 1]
        return out
    total = out.sum(axis=1, keepdims=True)
    empty = total[:, 0] <= 0
    out[empty] = 1.0 / probs.shape[1]
    total[empty] = 1.0
    return out / total
