"""The paper's rater-subset path (Algorithms 2–3), vectorised over items and replicates.

For each k, take every k-subset of the K rater columns when C(K, k) ≤ 200, else 200
distinct random ones (Algorithm 2); combine each item's labels in the subset; score the
predictions against each unused column (Algorithm 1) and average. Needed for scorers that
are not a mean of per-item terms (F1, AUC, Pearson, DMI); for agreement and cross-entropy
it agrees with the exact path wherever all subsets are enumerated.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from math import comb

import numpy as np

from auditor.stats.equivalence._inputs import counts_of
from auditor.stats.equivalence.combiners import ABCModel, predict
from auditor.stats.equivalence.scorers import SCORERS

MAX_SUBSETS = 200


def rater_subsets(n_raters: int, k: int, rng: np.random.Generator,
                  max_subsets: int = MAX_SUBSETS) -> list[tuple[int, ...]]:
    """Algorithm 2: all k-subsets of ``range(n_raters)``, or ``max_subsets`` distinct random ones."""
    if comb(n_raters, k) <= max_subsets:
        return list(combinations(range(n_raters), k))
    chosen: set[tuple[int, ...]] = set()
    out: list[tuple[int, ...]] = []
    while len(out) < max_subsets:
        draws = np.sort(np.argsort(rng.random((2 * max_subsets, n_raters)), axis=1)[:, :k], axis=1)
        for row in map(tuple, draws.tolist()):
            if row not in chosen:
                chosen.add(row)
                out.append(row)
                if len(out) == max_subsets:
                    break
    return out


def sampling_curve(pool: np.ndarray, reference: np.ndarray | None, *, combiner: str, scorer: str,
                   k_max: int, prior: np.ndarray, model: ABCModel | None, clip: float,
                   rng: np.random.Generator, weights: Callable[[], list[np.ndarray]],
                   n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """c_k for k = 0..k_max under every weight row, (B + 1, k_max + 1), and the Monte
    Carlo standard error of the actual items' c_k, (k_max + 1,).

    Where the k-subsets are sampled (C(K, k) > 200), c_k is the mean over S distinct
    subsets drawn at random from the M = C(K, k), an unbiased estimate of the mean over
    all of them; its standard error is that of a sample mean drawn without replacement,
    ``sd / √S · √((M − S) / (M − 1))`` with ``sd`` the spread of the S subsets' scores.
    Where every subset is used it is 0.

    ``pool`` is a full (N, K) code matrix (no missing entries); ``reference`` an (N, R)
    code matrix of reference raters (may have missing entries) or None to score against
    the pool's unused columns. ``weights()`` yields the item-weight chunks (the same ones
    on every call), the first row of the first chunk being the actual item set.
    """
    score_fn = SCORERS[scorer]
    own = counts_of(pool, n_labels)
    n_rows = weights.n_rows
    out = np.empty((n_rows, k_max + 1))
    mc_error = np.zeros(k_max + 1)
    n_pool = pool.shape[1]
    for k in range(k_max + 1):
        subsets = rater_subsets(n_pool, k, rng)
        total = np.zeros(n_rows)
        actual = []  # each subset's score on the actual items (the first weight row)
        for subset in subsets:
            y = counts_of(pool[:, list(subset)], n_labels) if k else np.zeros_like(own)
            pred = predict(combiner, y, own, prior=prior, model=model, clip=clip)
            if reference is None:
                refs = [pool[:, j] for j in range(n_pool) if j not in subset]
            else:
                refs = [reference[:, j] for j in range(reference.shape[1])]
            row = 0
            for w in weights():
                acc = np.zeros(w.shape[0])
                n_ok = np.zeros(w.shape[0])
                for labels in refs:
                    s = score_fn(pred, labels, w)
                    good = np.isfinite(s) | np.isneginf(s)
                    acc += np.where(good, s, 0.0)
                    n_ok += good
                with np.errstate(invalid="ignore"):
                    part = acc / n_ok
                if row == 0:
                    actual.append(part[0])
                total[row:row + w.shape[0]] += part
                row += w.shape[0]
        out[:, k] = total / len(subsets)
        n_all, n_drawn = comb(n_pool, k), len(subsets)
        if n_drawn < n_all and n_drawn > 1:
            fpc = (n_all - n_drawn) / (n_all - 1)
            with np.errstate(invalid="ignore"):
                mc_error[k] = np.std(actual, ddof=1) / np.sqrt(n_drawn) * np.sqrt(fpc)
    return out, mc_error


def sampling_classifier(pred: np.ndarray, reference: np.ndarray, *, scorer: str,
                        weights: Callable[[], list[np.ndarray]]) -> np.ndarray:
    """Algorithm 1 under every weight row: mean over reference columns of the score."""
    score_fn = SCORERS[scorer]
    parts = []
    for w in weights():
        acc = np.zeros(w.shape[0])
        n_ok = np.zeros(w.shape[0])
        for j in range(reference.shape[1]):
            s = score_fn(pred, reference[:, j], w)
            good = np.isfinite(s) | np.isneginf(s)
            acc += np.where(good, s, 0.0)
            n_ok += good
        with np.errstate(invalid="ignore"):
            parts.append(acc / n_ok)
    return np.concatenate(parts)
