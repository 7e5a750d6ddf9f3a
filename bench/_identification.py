"""Truths the current data cannot tell apart, and how far apart their plans' outcomes lie.

A plan sees the current items only: their label counts and the model's predictions. Two
truths that give those the same *distribution* get the same plans, in distribution, from
any planner, so a planner's average announcement is the same for both; if the two truths
certify a design with frequencies ``f_a`` and ``f_b``, one of them is missed by at least
``|f_a - f_b| / 2`` on average, whatever the planner does.

Here an item has a *type*: the probability ``p`` that each of its labels is right (the
wrong ones uniform over the other classes, labels independent given the type) and the
probability ``m`` that the model is right (wrong: uniform). With ``k`` labels per item the
data's distribution (label counts with the true class marked, and whether the model is
right) depends on the types only through the moments ``E[p^j]`` and ``E[m p^j]``,
``j <= k``. The model's expected credit with a ``K``-label plurality is
``E[m g_K(p) + (1 - m)(1 - g_K(p)) / (C - 1)]``, ``g_K`` the plurality's tie-credited
accuracy, a polynomial of degree ``K`` in ``p``: for ``K > k`` the data do not decide it.
:func:`twin_truth` finds, by linear programming over a grid of ``p`` (``m`` enters only
through its mean per ``p``), the truth with the same ``k``-label data whose ``K``-label
credit is largest (or smallest). The labels' agreement ``E[X^t]`` depends on ``E[p^2]``
only, so the twins' margins at ``K`` labels differ by the credit's difference.

Used by ``bench/bench_plan_calibration.py --part identification`` and the tests.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from auditor.stats.anytime import _betting_paths


@dataclass(frozen=True)
class ItemTypes:
    """A truth: item types with label accuracy ``p``, model accuracy ``m`` and share ``weight``."""

    p: np.ndarray
    m: np.ndarray
    weight: np.ndarray
    n_classes: int = 3


def _compositions(k: int, n_classes: int) -> np.ndarray:
    """Count vectors of ``k`` labels, column 0 the true class."""
    return np.array([c for c in itertools.product(range(k + 1), repeat=n_classes) if sum(c) == k])


def pattern_probabilities(p: np.ndarray, k: int, n_classes: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """P(count vector | p) for every count vector of ``k`` labels: (len(p), n_patterns), patterns."""
    comps = _compositions(k, n_classes)
    p = np.clip(np.asarray(p, dtype=float), 1e-12, 1.0 - 1e-12)
    q = (1.0 - p) / (n_classes - 1)
    log_coef = special.gammaln(k + 1) - special.gammaln(comps + 1).sum(axis=1)
    log_p = (log_coef[None, :] + comps[None, :, 0] * np.log(p)[:, None]
             + comps[None, :, 1:].sum(axis=2) * np.log(q)[:, None])
    return np.exp(log_p), comps


def plurality_accuracy(p: np.ndarray, k: int, n_classes: int = 3) -> np.ndarray:
    """The true class's tie-credited share of the plurality of ``k`` labels, per ``p``."""
    probs, comps = pattern_probabilities(p, k, n_classes)
    top = comps.max(axis=1)
    credit = (comps[:, 0] == top) / (comps == top[:, None]).sum(axis=1)
    return probs @ credit


def data_distribution(t: ItemTypes, k: int) -> np.ndarray:
    """The joint distribution of (count vector of ``k`` labels, model right) under ``t``."""
    probs, _ = pattern_probabilities(t.p, k, t.n_classes)
    return np.concatenate([(t.weight * t.m) @ probs, (t.weight * (1.0 - t.m)) @ probs])


def expected_credit(t: ItemTypes, k: int) -> float:
    """E[the model's tie credit with the ``k``-label plurality] (the mean behind L)."""
    g = plurality_accuracy(t.p, k, t.n_classes)
    return float(np.sum(t.weight * (t.m * g + (1.0 - t.m) * (1.0 - g) / (t.n_classes - 1))))


def expected_agreement(t: ItemTypes, k: int) -> float:
    """E[X^t] at ``k`` labels: 1/k + (1 - 1/k) P(two labels agree) (the mean behind U_t²)."""
    c = t.n_classes
    pair = t.p ** 2 + (1.0 - t.p) ** 2 / (c - 1)
    return float(np.sum(t.weight * (1.0 / k + (1.0 - 1.0 / k) * pair)))


def twin_truth(t: ItemTypes, data_labels: int, plan_labels: int, *, p_range=(1.0 / 3.0, 1.0),
               grid: int = 201, largest: bool = True) -> ItemTypes:
    """The truth with types' ``p`` in ``p_range`` whose ``data_labels``-label data have the same
    distribution as ``t``'s and whose ``plan_labels``-label credit is largest (or smallest)."""
    ps = np.linspace(p_range[0], p_range[1], grid)
    n = ps.size
    g = plurality_accuracy(ps, plan_labels, t.n_classes)
    wrong = (1.0 - g) / (t.n_classes - 1)
    # variables: w (mass per p) and v = w E[m | p], 0 <= v <= w; credit = w wrong + v (g - wrong)
    cost = np.concatenate([wrong, g - wrong]) * (-1.0 if largest else 1.0)
    rows, rhs = [], []
    for j in range(data_labels + 1):
        rows.append(np.concatenate([ps ** j, np.zeros(n)]))
        rhs.append(float(np.sum(t.weight * t.p ** j)))
        rows.append(np.concatenate([np.zeros(n), ps ** j]))
        rhs.append(float(np.sum(t.weight * t.m * t.p ** j)))
    res = optimize.linprog(cost, A_ub=np.hstack([-np.eye(n), np.eye(n)]), b_ub=np.zeros(n),
                           A_eq=np.array(rows), b_eq=np.array(rhs), bounds=(0, None), method="highs")
    if not res.success:
        raise ValueError(f"no truth with p in {p_range} has the same {data_labels}-label data: {res.message}")
    w, v = res.x[:n], res.x[n:]
    keep = w > 1e-12
    return ItemTypes(ps[keep], np.clip(v[keep] / w[keep], 0.0, 1.0), w[keep] / w[keep].sum(), t.n_classes)


def _draw(rng: np.random.Generator, t: ItemTypes, streams: int, items: int, k: int):
    kind = rng.choice(t.p.size, size=(streams, items), p=t.weight)
    right = rng.binomial(k, t.p[kind])
    wrong = rng.multinomial(k - right, np.full(t.n_classes - 1, 1.0 / (t.n_classes - 1)))
    counts = np.concatenate([right[..., None], wrong], axis=-1)
    model_right = rng.random((streams, items)) < t.m[kind]
    pred = np.where(model_right, 0, 1 + rng.integers(0, t.n_classes - 1, size=(streams, items)))
    top = counts.max(axis=-1)
    credit = (np.take_along_axis(counts, pred[..., None], axis=-1)[..., 0] == top) / (counts == top[..., None]).sum(-1)
    return credit, (counts ** 2).sum(axis=-1) / k ** 2


def certified_share(rng: np.random.Generator, t: ItemTypes, streams: int, *, current=(1000, 3), new=(2000, 10),
                    target: float = 0.95) -> float:
    """The share of ``streams`` in which the anytime verdict (the betting e-process on U_t)
    certifies after ``current`` items (count, labels each) and then ``new`` ones in random order."""
    c0, x0 = _draw(rng, t, streams, *current)
    c1, x1 = _draw(rng, t, streams, *new)
    log_e = _betting_paths(np.concatenate([c0, c1], axis=1), np.concatenate([x0, x1], axis=1))
    return float((log_e[:, -1] >= -np.log(1.0 - target)).mean())
