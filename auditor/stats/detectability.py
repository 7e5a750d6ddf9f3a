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


#: Simulated look sequences the detection probability is estimated on (fixed seed: common
#: random numbers, so the probability is smooth in the drop and the answer a constant).
_DRAWS = 2000
_SEED = 20261129
#: Groups simulated at a time (memory: groups × draws × windows).
_CHUNK = 64


@lru_cache(maxsize=8)
def _normals(within: int) -> np.ndarray:
    """(draws, 1 + within) standard normals: the baseline's error, then each window's."""
    return np.random.default_rng(_SEED).standard_normal((_DRAWS, 1 + within))


def minimum_detectable_drop(n_per_window, mean, sd, slope, gamma, alpha, *, k: float = DEFAULT_K,
                            looks: int = LOOKS_PER_YEAR, within: int = 4, power: float = 0.9,
                            baseline_units=None, skewness=0.0):
    """Smallest drop of a group's accuracy detected within ``within`` windows with
    probability ``power`` by the drop CUSUM of a stream whose yearly false-alarm rate is
    ``alpha``, at ``n_per_window`` units a window whose paired differences have ``mean``,
    ``sd`` and ``skewness`` before the drop (over ``baseline_units`` units; default many).
    Arrays (one value per group) or scalars; the result has their broadcast shape.

    A drop ``d`` moves the units' mean by ``-d slope`` and their mean square by
    ``-d gamma`` (:func:`accuracy_response`; for gold accuracy ``slope`` = 1). The chart's
    weekly value after the drop is simulated as the chart computes it: the baseline's error
    (shared by every window after the drop), each window's own noise at the post-drop
    spread, the skewness correction of :func:`auditor.stats.monitoring.skew_terms` and the
    clip; the detection probability is the share of 2,000 fixed draws whose CUSUM crosses
    within ``within`` windows. NaN when no drop up to the whole accuracy is detected so, or
    the inputs say nothing.
    """
    from auditor.stats.monitoring import Z_CLIP

    args = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (
        n_per_window, mean, sd, slope, gamma, alpha, np.inf if baseline_units is None else baseline_units, skewness)))
    shape = args[0].shape
    n, mean, sd, slope, gamma, alpha, N, skew = (a.ravel() for a in args)
    ok = (n > 0) & (sd > 0) & np.isfinite(slope) & (slope > 0) & np.isfinite(gamma)
    out = np.full(n.size, np.nan)
    levels, which = np.unique(alpha, return_inverse=True)
    h_all = np.array([cusum_threshold(float(a) * DROP_SHARE * (1 - SHEWHART_SHARE), k, looks) for a in levels])[which]
    z0 = _normals(within)
    for at in range(0, n.size, _CHUNK):
        idx = np.flatnonzero(ok[at:at + _CHUNK]) + at
        if not idx.size:
            continue
        gn, gm, gs, gsl, gg, gN, gh = n[idx], mean[idx], sd[idx], slope[idx], gamma[idx], N[idx], h_all[idx]
        bias, wskew = skew_terms(skew[idx], gn, gN)
        a = (wskew / 6.0)[:, None]
        se0 = gs * np.sqrt(1.0 / gn + 1.0 / gN)
        base = (gs * np.sqrt(1.0 / gN) / se0)[:, None, None] * z0[None, :, :1]

        def share(d, gn=gn, gm=gm, gs=gs, gsl=gsl, gg=gg, gh=gh, bias=bias, a=a, se0=se0, base=base):
            var1 = np.maximum(gs * gs + gm * gm - d * gg - (gm - d * gsl) ** 2, 1e-12)
            z = ((-d * gsl / se0)[:, None, None] - base + (np.sqrt(var1 / gn) / se0)[:, None, None] * z0[None, :, 1:]
                 - bias[:, None, None])
            c = np.zeros(z.shape[:2])
            hit = np.zeros(z.shape[:2], dtype=bool)
            for w in range(z.shape[2]):
                zw = z[:, :, w]
                zw = np.clip(zw - a * zw * zw + a * a * zw ** 3 / 3.0 + a, -Z_CLIP, Z_CLIP)
                c = np.maximum(0.0, c - zw - k)
                hit |= c > gh[:, None]
            return hit.mean(axis=1)

        lo, hi = np.zeros(idx.size), np.ones(idx.size)
        reach = share(hi) >= power
        for _ in range(14):  # to 1/16384 of the accuracy scale
            mid = (lo + hi) / 2
            below = share(mid) < power
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        out[idx] = np.where(reach, hi, np.nan)
    return out.reshape(shape) if shape else float(out[0])


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
        groups = np.flatnonzero(arr[..., 0].sum(axis=1) > 0)
        params = []
        for gi in groups:
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
            params.append((volume, float(s1 / n), sd, slope, gamma, float(per_group[gi]), float(n), skew, span))
        if not params:
            continue
        volume, mean, sd, slope, gamma, alpha, units, skew, spans = (list(c) for c in zip(*params, strict=True))
        acc = np.atleast_1d(minimum_detectable_drop(volume, mean, sd, slope, gamma, alpha, k=k, looks=looks,
                                                    baseline_units=units, skewness=skew))
        for j, gi in enumerate(groups):
            out.append((int(gi), metric, volume[j], sd[j], float(acc[j] * slope[j]), float(acc[j]), *spans[j]))
    return out
