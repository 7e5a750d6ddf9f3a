"""Confusion matrices of labels against a reference (gold), from (reference, label, count) cells.

A database hands these over already grouped (one row per cell), so the function takes
the cells with their counts; unit counts give the usual matrix of label pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from auditor.stats.validation import StatsInputError

__all__ = ["ConfusionMatrix", "confusion_matrix"]


@dataclass(frozen=True)
class ConfusionMatrix:
    """Labels given against the reference label.

    Attributes
    ----------
    counts : ndarray of int, shape (K, K)
        ``counts[t, p]``: labels ``p`` given on items whose reference label is ``t``.
    n : int
        Labels counted (the sum of ``counts``).
    accuracy : float
        Share of labels equal to the reference (NaN when ``n`` is 0).
    recall : ndarray of float, shape (K,)
        Per reference class, the share of its labels that name it (NaN for a class
        with no labels).
    precision : ndarray of float, shape (K,)
        Per label given, the share that is right (NaN for a label never given).
    """

    counts: np.ndarray
    n: int
    accuracy: float
    recall: np.ndarray
    precision: np.ndarray


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def confusion_matrix(reference, label, counts=None, *, n_classes: int) -> ConfusionMatrix:
    """The confusion matrix of ``label`` against ``reference`` (class codes ``0..n_classes-1``).

    Parameters
    ----------
    reference, label : array_like of int, shape (m,)
        The reference (e.g. gold) and the given label of each cell.
    counts : array_like of int, shape (m,), optional
        How many labels each cell stands for (default: one each).
    n_classes : int
        K, the number of classes.

    Returns
    -------
    ConfusionMatrix

    Raises
    ------
    StatsInputError
        If the arrays differ in length, a code is outside ``0..K-1`` or a count is negative.
    """
    if n_classes < 1:
        raise StatsInputError(f"n_classes must be at least 1, got {n_classes}")
    t = np.asarray(reference, dtype=np.int64).ravel()
    p = np.asarray(label, dtype=np.int64).ravel()
    w = np.ones(t.shape, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64).ravel()
    if not (t.shape == p.shape == w.shape):
        raise StatsInputError(f"reference, label and counts differ in length: {t.size}, {p.size}, {w.size}")
    if t.size and (t.min() < 0 or p.min() < 0 or t.max() >= n_classes or p.max() >= n_classes):
        raise StatsInputError(f"class codes must lie in 0..{n_classes - 1}")
    if w.size and w.min() < 0:
        raise StatsInputError("counts must not be negative")
    k = n_classes
    cells = np.bincount(t * k + p, weights=w, minlength=k * k).round().astype(np.int64).reshape(k, k)
    n = int(cells.sum())
    diagonal = np.diag(cells)
    return ConfusionMatrix(counts=cells, n=n, accuracy=float(diagonal.sum() / n) if n else float("nan"),
                           recall=_ratio(diagonal, cells.sum(axis=1)), precision=_ratio(diagonal, cells.sum(axis=0)))
