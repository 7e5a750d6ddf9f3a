"""Scoring functions: how well predictions match one reference rater's labels.

Predictions are (N, L) rows of probabilities (a hard prediction is a one-hot row, a tie
of a hard combiner a uniform row over the tied labels). Every scorer here is evaluated
under *item weights* ``w`` of shape (B, N) at once — row b is one bootstrap replicate
(how many times each item was drawn), a row of ones the actual item set — and returns B
scores. Items whose reference label is missing (``-1``) are left out.

Higher is better for every scorer (cross-entropy is the negated log-loss, in bits).
"""

from __future__ import annotations

import numpy as np

from auditor.stats.equivalence.combiners import tie_uniform, tie_uniform_columns


def _onehot(labels: np.ndarray, n_labels: int) -> np.ndarray:
    out = np.zeros((labels.shape[0], n_labels))
    ok = labels >= 0
    out[np.flatnonzero(ok), labels[ok]] = 1.0
    return out


def _mean_over_items(values: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    ok = labels >= 0
    v = np.where(ok, values, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ v) / (w @ ok.astype(float))


def agreement(pred: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Fraction of items whose predicted label equals the reference label.

    A soft prediction counts as its most probable label (ties split evenly).
    """
    hard = tie_uniform(pred)
    v = hard[np.arange(labels.shape[0]), np.maximum(labels, 0)]
    return _mean_over_items(v, labels, w)


def cross_entropy(pred: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mean of log2 p(reference label) (bits; 0 is perfect, lower is worse)."""
    with np.errstate(divide="ignore"):
        v = np.log2(pred[np.arange(labels.shape[0]), np.maximum(labels, 0)])
    return _mean_over_items(v, labels, w)


def _confusion(pred: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(B, L, L) weighted joint counts of predicted class (rows) and reference label."""
    n, n_labels = pred.shape
    stats = (pred[:, :, None] * _onehot(labels, n_labels)[:, None, :]).reshape(n, -1)
    return (w @ stats).reshape(w.shape[0], n_labels, n_labels)


def f1(pred: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    """F1 of the predicted labels: of class 1 with two classes, macro-averaged otherwise.

    A soft prediction counts as its most probable label; ties split evenly (the expected
    confusion matrix of a random tie-break). A class with no predictions and no
    reference labels contributes 0, as in scikit-learn.
    """
    conf = _confusion(tie_uniform(pred), labels, w)
    tp = np.diagonal(conf, axis1=1, axis2=2)
    denom = conf.sum(axis=2) + conf.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_class = np.where(denom > 0, 2.0 * tp / denom, 0.0)
    if pred.shape[1] == 2:
        return per_class[:, 1]
    return per_class.mean(axis=1)


def dmi(pred: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    """|det M| of the normalised joint distribution of prediction and reference label.

    ``M[a, b] = Σ_i w_i p_i(a) [label_i = b] / Σ_i w_i`` (Kong 2020; Resnick et al. §6).
    """
    conf = _confusion(pred, labels, w)
    tot = conf.sum(axis=(1, 2), keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.abs(np.linalg.det(conf / tot))


def pearson(pred: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson correlation of the predicted mean class index Σ_l l p(l) with the label index."""
    ok = labels >= 0
    x = pred @ np.arange(pred.shape[1], dtype=float)
    y = np.where(ok, labels, 0).astype(float)
    mom = np.stack([ok, x * ok, y, x * y, x * x * ok, y * y], axis=1).astype(float)
    s = w @ mom
    n = s[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = s[:, 3] / n - s[:, 1] * s[:, 2] / n**2
        vx = s[:, 4] / n - (s[:, 1] / n) ** 2
        vy = s[:, 5] / n - (s[:, 2] / n) ** 2
        return cov / np.sqrt(vx * vy)


def auc(pred: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Area under the ROC curve of P(class 1) against the reference label (two classes).

    Items are ranked by the probability of the positive class (class 1), ties counting
    one half. (The reference package ranks by the largest class probability instead, so
    a perfect ranking can score 0.5 there.)
    """
    ok = labels >= 0
    score = pred[ok, 1]
    pos = (labels[ok] == 1).astype(float)
    ww = w[:, ok]
    order = np.argsort(score, kind="stable")
    s_sorted = score[order]
    starts = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])
    wp = np.add.reduceat(ww[:, order] * pos[order], starts, axis=1)
    wn = np.add.reduceat(ww[:, order] * (1.0 - pos[order]), starts, axis=1)
    below = np.cumsum(wn, axis=1) - wn
    num = (wp * (below + 0.5 * wn)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / (wp.sum(axis=1) * wn.sum(axis=1))


SCORERS = {
    "agreement": agreement,
    "cross_entropy": cross_entropy,
    "f1": f1,
    "auc": auc,
    "pearson": pearson,
    "dmi": dmi,
}


def label_scores(scorer: str, pred: np.ndarray) -> np.ndarray:
    """(P, L): the score of each prediction row if the reference label were l.

    Only for the item-decomposable scorers (agreement, cross-entropy), whose score over
    items is a mean of such per-item terms.
    """
    return label_scores_columns(scorer, np.ascontiguousarray(pred.T)).T


def label_scores_columns(scorer: str, pred: np.ndarray, *, inplace: bool = False) -> np.ndarray:
    """:func:`label_scores` column-major: ``pred`` and the scores are (L, P); ``inplace``
    may overwrite ``pred`` (a float array the caller no longer needs)."""
    if scorer == "agreement":
        return tie_uniform_columns(pred)
    if scorer == "cross_entropy":
        with np.errstate(divide="ignore"):
            return np.log2(pred, out=pred if inplace else None)
    raise ValueError(scorer)  # pragma: no cover


def expected_item_scores(scorer: str, pred: np.ndarray, ref_dist: np.ndarray) -> np.ndarray:
    """Per-row expected score against a reference label drawn from ``ref_dist`` (P, L)."""
    return np.where(ref_dist > 0, ref_dist * label_scores(scorer, pred), 0.0).sum(axis=1)
