"""What the change detector can see: the smallest accuracy drop it finds in time.

A group's paired agreement difference ``x`` (see :mod:`auditor.stats.monitoring`) falls
when its accuracy falls, by ``slope`` per unit of accuracy, and its spread changes too
(the second moment moves by ``gamma`` per unit). Both depend on how accurate the *other*
labels on the same items are, item by item, which agreement data without gold do not pin
down: two labels per item more or less, a dataset of uniformly moderate items and one of
easy items mixed with coin flips can give the same agreement. What the data do fix, from
the first two moments of the leave-one-out credit, is an interval for the mean accuracy:

* at one end every item is equally hard (one accuracy ``p``, matched on the mean credit);
* at the other the hard items are pure guesses (accuracy ``1/L``) mixed with easy ones,
  the mixture matched on both moments: the most heterogeneous difficulty the data allow
  (with one other label per item the credit is 0 or 1, its square adds nothing, and the
  easy items are taken as certain).

The homogeneous end gives the largest slope (it over-promises on a mixed dataset), the
guessing end the smallest. The response used is the midpoint of the two ends; the
simulation benchmark checks what it promises on difficulty mixtures between them.

With gold, the slope is 1 and nothing is unidentified.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from auditor.stats.monitoring import (
    DEFAULT_K,
    DROP_SHARE,
    LOOKS_PER_YEAR,
    SHEWHART_SHARE,
    crossing_probability,
    cusum_threshold,
    skew_terms,
)

__all__ = ["AccuracyResponse", "accuracy_response", "minimum_detectable_drop", "sensitivity_rows"]

#: Points of the accuracy grid the symmetric model is tabulated on.
_GRID = 201
#: Label configurations enumerated at most (the other labels are capped to stay below).
_MAX_CONFIGS = 50_000


def _others_for(n_classes: int, labels_per_item: float) -> int:
    others = max(1, min(round(float(labels_per_item)) - 1, 6))
    while others > 1 and n_classes ** (others + 1) > _MAX_CONFIGS:
        others -= 1
    return others


def _tie_credit(votes: np.ndarray, mine: np.ndarray) -> np.ndarray:
    rows = np.arange(votes.shape[0])
    top = votes.max(axis=1)
    tied = votes == top[:, None]
    return np.where(top > 0, tied[rows, mine] / tied.sum(axis=1), 0.0)


@lru_cache(maxsize=64)
def _table(n_classes: int, others: int) -> tuple[np.ndarray, ...]:
    """On a grid of item accuracies ``p`` (every label right with probability ``p``, wrong
    uniformly otherwise; truth = class 0): the mean and mean square of a label's
    leave-one-out credit, and ``E[x | right] - E[x | wrong]`` and the same for ``x²``,
    ``x`` one group's paired difference against ``others`` groups of one label each."""
    L, K = n_classes, others + 1
    p = np.linspace(1.0 / L, 1.0, _GRID)
    labels = np.array(np.meshgrid(*[np.arange(L)] * K, indexing="ij")).reshape(K, -1).T  # (C, K)
    counts = np.stack([(labels == c).sum(axis=1) for c in range(L)], axis=1)
    credit = np.empty(labels.shape)
    for j in range(K):
        votes = counts.copy()
        votes[np.arange(labels.shape[0]), labels[:, j]] -= 1
        credit[:, j] = _tie_credit(votes, labels[:, j])
    x = credit[:, 0] - credit[:, 1:].mean(axis=1)
    right = labels == 0  # (C, K)
    n_right = right.sum(axis=1)
    # probability of each configuration at each p: (P, C)
    prob = (p[:, None] ** n_right[None, :]) * (((1 - p) / (L - 1))[:, None] ** (K - n_right)[None, :])
    c_mean = prob @ credit[:, 0]
    c_sq = prob @ credit[:, 0] ** 2
    # the others' labels' probability (the first label's own factor left out)
    r_oth = right[:, 1:].sum(axis=1)
    p_oth = (p[:, None] ** r_oth[None, :]) * (((1 - p) / (L - 1))[:, None] ** (others - r_oth)[None, :])
    mine_right = right[:, 0]
    p_r = np.where(mine_right[None, :], p_oth, 0.0)  # P(config | first label right)
    p_w = np.where(~mine_right[None, :], p_oth / (L - 1), 0.0)  # P(config | first label wrong)
    slope = p_r @ x - p_w @ x
    gamma = p_r @ x ** 2 - p_w @ x ** 2
    return p, c_mean, c_sq, slope, gamma


class AccuracyResponse(tuple):
    """``(slope, gamma, accuracy_low, accuracy_high)``: the paired mean's fall and its second
    moment's fall per unit of accuracy lost (the midpoint of the two ends), and the
    interval of the others' mean accuracy the agreement data allow."""

    __slots__ = ()

    def __new__(cls, slope, gamma, low, high):
        return super().__new__(cls, (float(slope), float(gamma), float(low), float(high)))

    slope = property(lambda self: self[0])
    gamma = property(lambda self: self[1])
    accuracy_low = property(lambda self: self[2])
    accuracy_high = property(lambda self: self[3])


def accuracy_response(n_classes: int, labels_per_item: float, credit_mean: float,
                      credit_square: float | None = None) -> AccuracyResponse:
    """How a group's paired agreement difference responds to a drop in its accuracy.

    ``credit_mean`` and ``credit_square`` are the mean and mean square of the units'
    leave-one-out agreement credit (one label per group and item). Without the mean
    square only the homogeneous end is known and is used (see the module docstring).
    NaN fields where the data say nothing.
    """
    L = int(n_classes)
    nan = AccuracyResponse(np.nan, np.nan, np.nan, np.nan)
    if L < 2 or not np.isfinite(credit_mean):
        return nan
    p, c_mean, c_sq, slope, gamma = _table(L, _others_for(L, labels_per_item))
    # homogeneous end: c_mean is increasing in p
    ph = float(np.interp(credit_mean, c_mean, p))
    hom = (float(np.interp(ph, p, slope)), float(np.interp(ph, p, gamma)), ph)
    het = hom
    if credit_square is not None and np.isfinite(credit_square):
        # guesses (p = 1/L, grid point 0) with weight w, easy items at p_e: both moments matched
        with np.errstate(invalid="ignore", divide="ignore"):
            w = (credit_mean - c_mean) / (c_mean[0] - c_mean)
            resid = w * c_sq[0] + (1 - w) * c_sq - credit_square
        ok = np.flatnonzero((w >= 0) & (w <= 1) & np.isfinite(resid))
        cross = ok[:-1][np.sign(resid[ok[:-1]]) != np.sign(resid[ok[1:]])] if ok.size > 1 else ok[:0]
        if ok.size and np.allclose(resid[ok], 0.0, atol=1e-12) and w[-1] > 0:
            # one other label: the credit is 0 or 1 and its square says nothing; the most
            # heterogeneous mixture the mean allows is guesses and certainties
            het = (w[-1] * slope[0] + (1 - w[-1]) * slope[-1], w[-1] * gamma[0] + (1 - w[-1]) * gamma[-1],
                   w[-1] / L + (1 - w[-1]))
        elif cross.size:
            i = int(cross[-1])
            t = resid[i] / (resid[i] - resid[i + 1])
            ww = float(w[i] + t * (w[i + 1] - w[i]))
            pe = float(p[i] + t * (p[i + 1] - p[i]))
            if ww > 0:
                het = (ww * slope[0] + (1 - ww) * float(np.interp(pe, p, slope)),
                       ww * gamma[0] + (1 - ww) * float(np.interp(pe, p, gamma)), ww / L + (1 - ww) * pe)
    return AccuracyResponse((hom[0] + het[0]) / 2, (hom[1] + het[1]) / 2, min(hom[2], het[2]), max(hom[2], het[2]))


def minimum_detectable_drop(n_per_window: float, mean: float, sd: float, slope: float, gamma: float,
                            alpha: float, *, k: float = DEFAULT_K, looks: int = LOOKS_PER_YEAR, within: int = 4,
                            power: float = 0.9, baseline_units: float | None = None, skewness: float = 0.0) -> float:
    """Smallest drop of a group's accuracy detected within ``within`` windows with
    probability ``power`` by the drop CUSUM of a stream whose yearly false-alarm rate is
    ``alpha``, at ``n_per_window`` units a window whose paired differences have ``mean``
    and ``sd`` before the drop (over ``baseline_units`` units; default many).

    A drop ``d`` moves the units' mean by ``-d slope`` and their mean square by
    ``-d gamma`` (:func:`accuracy_response`; for gold accuracy ``slope`` = 1): the
    standardised weekly shift is ``d slope / (sd sqrt(1/n + 1/N))`` and the weekly value's
    spread grows with the post-drop variance, which the chain of
    :func:`auditor.stats.monitoring.crossing_probability` is given, with the correction the
    chart makes for the units' ``skewness`` (before the drop). NaN when no drop up to
    the whole accuracy is detected so, or the inputs say nothing.
    """
    n, N = float(n_per_window), (np.inf if baseline_units is None else float(baseline_units))
    if not (n > 0 and sd > 0 and np.isfinite(slope) and slope > 0 and np.isfinite(gamma)):
        return float("nan")
    h = cusum_threshold(alpha * DROP_SHARE * (1 - SHEWHART_SHARE), k, looks)
    se0 = sd * np.sqrt(1.0 / n + 1.0 / N)
    m2 = sd * sd + mean * mean
    inv_base = 0.0 if not np.isfinite(N) else 1.0 / N
    bias, window_skew = (float(v) for v in skew_terms(skewness, n, N))

    # the baseline's error is shared by every window after the drop: integrate over it
    # (Gauss–Hermite) rather than counting it into each window's independent noise
    nodes, weights = np.polynomial.hermite_e.hermegauss(9)
    weights = weights / weights.sum()
    base_sd = sd * np.sqrt(inv_base)

    def detected(d: float) -> float:
        var1 = max(m2 - d * gamma - (mean - d * slope) ** 2, 1e-12)
        scale = float(np.sqrt(var1 / n) / se0)
        return float(sum(w * crossing_probability(h, k, within, shift=(d * slope + e * base_sd) / se0 + bias,
                                                  scale=scale,
                                                  skew=-window_skew)
                         for e, w in zip(nodes, weights, strict=True)))

    if detected(1.0) < power:
        return float("nan")
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if detected(mid) < power:
            lo = mid
        else:
            hi = mid
    return hi


def sensitivity_rows(paired, raw, per_group, *, metrics, n_classes: int, labels_per_item: float, k: float,
                     looks: int, recent: int = 4) -> list[tuple]:
    """Per group with paired units and metric: ``(group index, metric, units per window (mean
    of its last ``recent`` windows with data), the paired units' spread, the smallest drop
    detected within 4 windows with 90% probability on the paired scale and in accuracy, and
    the others' accuracy interval)``, from (G, W, 3 or 4) paired sums, (G, W, 3) raw unit
    sums and each group's yearly false-alarm rate ``per_group``."""
    out = []
    for metric in metrics:
        arr = paired[metric]
        r_all = raw[metric].sum(axis=(0, 1))
        for gi in np.flatnonzero(arr[..., 0].sum(axis=1) > 0):
            tot = arr[gi].sum(axis=0)
            n, s1, s2 = tot[:3]
            sd = float(np.sqrt(max((s2 - s1 * s1 / n) / max(n - 1, 1), 0.0)))
            skew = 0.0
            if tot.size > 3 and sd > 0:
                mu = s1 / n
                skew = float((tot[3] / n - 3 * mu * s2 / n + 2 * mu ** 3) / (s2 / n - mu * mu) ** 1.5)
            with_data = arr[gi, :, 0][arr[gi, :, 0] > 0]
            volume = float(with_data[-recent:].mean())
            if metric == "gold_accuracy":
                # x = own correctness - the others' mean: E[x²] falls by 1 - 2 (their accuracy)
                slope, gamma = 1.0, 1.0 - 2.0 * float(r_all[1] / r_all[0])
                span = (float(r_all[1] / r_all[0]),) * 2
            else:
                r = raw[metric][gi].sum(axis=0)
                resp = accuracy_response(n_classes, labels_per_item, r[1] / r[0], r[2] / r[0]) if r[0] > 0 else None
                slope, gamma = (resp.slope, resp.gamma) if resp is not None else (float("nan"), float("nan"))
                span = (resp.accuracy_low, resp.accuracy_high) if resp is not None else (float("nan"),) * 2
            acc = minimum_detectable_drop(volume, float(s1 / n), sd, slope, gamma, float(per_group[gi]), k=k,
                                          looks=looks, baseline_units=n, skewness=skew)
            out.append((int(gi), metric, volume, sd, acc * slope, acc, *span))
    return out
