"""Change detection for vendor and annotator quality: paired statistics and a calibrated CUSUM.

The statistic
-------------
A vendor's agreement with the others falls when the *items* get harder, whatever the
vendor does. So each group (vendor or annotator) is measured against the other groups
*on the same items*: for an item labelled by groups ``G_i`` (at least two), group ``g``'s
unit value is ``u_gi`` (the mean of its per-label scores on the item: leave-one-out
agreement credit, or correctness against gold) and its *paired difference* is

    x_gi = u_gi - mean(u_hi for h in G_i, h != g).

A week in which every group does worse moves every ``u`` together and leaves ``x``
unchanged; a vendor that degrades lowers its own ``x``. What all groups share is watched
once, on the dataset level: the mean over each item's labels.

The detector
------------
Per group and window, ``n`` units with sum ``s1`` and sum of squares ``s2`` of ``x``.
Self-starting (Hawkins 1987): window ``w`` is standardised against everything before it
since the last restart, ``z_w = (mean_w - mean_<w) / (sd_<w sqrt(1/n_w + 1/N_<w))``,
mapped from Student's t on the baseline's degrees of freedom to the normal scale; under
stationarity the ``z_w`` are close to independent standard normals, however old the
stream. Two one-sided CUSUMs, ``D_w = max(0, D_{w-1} - z_w - k)`` for drops and
``U_w = max(0, U_{w-1} + z_w - k)`` for rises, alarm above ``h``. The threshold is the
one at which a CUSUM of independent standard normal increments crosses within ``looks``
steps (52: a year of weekly windows) with probability ``alpha`` (computed with the
Markov chain of Brook & Evans, 1972, corrected by simulating the chart itself, see
:func:`cusum_threshold`); a single window beyond a Bonferroni limit alarms on its own
(``SHEWHART_SHARE`` of the budget: a collapse is reported at its first window). The false-alarm control is a rate per group per
year, and the delay to detect a change depends on the change and the weekly volume,
not on the age of the stream. The estimated start is the split of the windows since the
last restart whose means differ most (the likelihood-ratio estimate of a step); after an
alarm the group restarts from that start.

What it can see
---------------
:func:`minimum_detectable_shift` inverts the same chain with a shifted mean: the
smallest drop of the weekly mean detected within ``within`` windows with probability
``power`` at a weekly volume and unit spread, from a CUSUM at zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from auditor.stats.validation import StatsInputError

__all__ = [
    "DEFAULT_K",
    "LOOKS_PER_YEAR",
    "MIN_BASELINE_UNITS",
    "PairedSums",
    "accuracy_slope",
    "crossing_probability",
    "cusum_scan",
    "cusum_threshold",
    "dense_paired_sums",
    "false_alarm_rate",
    "minimum_detectable_shift",
    "paired_sums",
    "skew_terms",
]

#: Reference value of the CUSUMs (half the standardised weekly shift they are tuned to).
DEFAULT_K = 1.0
#: Looks per false-alarm period: a year of weekly windows.
LOOKS_PER_YEAR = 52
#: Units a baseline needs (over at least two windows) before its group is looked at.
MIN_BASELINE_UNITS = 20
#: Standardised weekly values are clipped here: one extreme week (the units' skew puts
#: more weeks out there than a normal law would) cannot raise an alarm on its own.
Z_CLIP = 5.0
#: The skewness of a window's standardised mean is corrected up to this size (beyond it the
#: window has too few units for a correction to mean anything).
SKEW_LIMIT = 1.0
#: Baseline units needed before their skewness is used.
SKEW_MIN_UNITS = 200
#: Windows the dataset level's baseline needs (its spread is estimated from their means).
BETWEEN_MIN_WINDOWS = 6
#: Share of a stream's false-alarm budget for single windows far out (the rest: the CUSUM).
SHEWHART_SHARE = 0.2
#: The single-window limit is never nearer than this many standard errors.
SHEWHART_FLOOR = 6.0
#: Windows held out of the self-starting baseline: a change's first windows are compared
#: with pre-change data only (the minimum detectable drop is computed within 4 windows).
GUARD = 3
#: Windows a baseline needs before the latest ``GUARD`` are held out of it.
MATURE = 6
#: Share of a stream's false-alarm budget spent on drops (the rest on rises).
DROP_SHARE = 0.8
_STATES = 120


# --------------------------------------------------------------------------- the chain


def _transitions(h: float, k: float, shift: float) -> np.ndarray:
    """Brook–Evans sub-stochastic matrix of a CUSUM ``max(0, C + z - k)``, z ~ N(shift, 1)
    clipped to ±``Z_CLIP`` as the chart clips it, on [0, h) in ``_STATES`` cells (cell 0
    holds C = 0)."""
    m = _STATES
    w = 2.0 * h / (2 * m - 1)
    centre = np.arange(m) * w
    upper = (np.arange(m) + 0.5) * w
    lower = np.concatenate([[-np.inf], upper[:-1]])

    def cdf(x):  # P(clipped z < x)
        return np.where(x > Z_CLIP, 1.0, np.where(x <= -Z_CLIP, 0.0, special.ndtr(x - shift)))

    return cdf(upper[None, :] - centre[:, None] + k) - cdf(lower[None, :] - centre[:, None] + k)


def crossing_probability(h: float, k: float, looks: int, shift: float = 0.0, start: float = 0.0) -> float:
    """P(a CUSUM of N(shift, 1) increments starting at ``start`` exceeds ``h`` within ``looks`` steps)."""
    q = _transitions(h, k, shift)
    m = q.shape[0]
    w = 2.0 * h / (2 * m - 1)
    v = np.zeros(m)
    v[min(round(start / w), m - 1)] = 1.0
    for _ in range(int(looks)):
        v = v @ q
    return float(1.0 - v.sum())


@lru_cache(maxsize=256)
def _chain_threshold(alpha: float, k: float, looks: int) -> float:
    """The ``h`` at which a CUSUM of independent N(0, 1) increments crosses within ``looks``
    steps with probability ``alpha`` (Brook–Evans)."""
    lo, hi = 0.0, 40.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if crossing_probability(mid, k, looks) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


def _t_to_z(t, df):
    """Student's t on ``df`` degrees of freedom to the normal scale (the approximation of
    Abramowitz & Stegun 26.7.8 family: t (1 - 1/(4 df)) / sqrt(1 + t²/(2 df)); cheap, and the
    thresholds are calibrated on the same mapping)."""
    df = np.asarray(df, dtype=float)
    return t * (1.0 - 1.0 / (4.0 * df)) / np.sqrt(1.0 + t * t / (2.0 * df))


_MC_STREAMS = 60_000
_MC_SEED = 20230417


@lru_cache(maxsize=16)
def _null_maxima(k: float, looks: int, guard: int, mature: int, between: bool = False) -> np.ndarray:
    """Sorted maxima over ``looks`` windows of the drop CUSUM of the self-starting chart as
    :func:`cusum_scan` runs it, on stationary windows of equal volume (both sides:
    ``2 × _MC_STREAMS`` draws, a fixed seed, so the thresholds are constants). With
    ``between`` the spread is estimated from the baseline's window means, as the dataset
    level's chart does; otherwise it is known (a baseline of many units).

    The held-out windows make successive standardised values share their baseline's
    error (positively correlated), and an estimated spread is shared too, which a chain
    of independent increments does not know: the threshold is taken from these maxima.
    """
    rng = np.random.default_rng(_MC_SEED)
    draws = rng.standard_normal((_MC_STREAMS, looks + 1))
    best = np.empty(2 * _MC_STREAMS)
    block = 1 << 14  # streams at a time, laid out window by window: contiguous rows, small arrays
    for half in (0, 1):  # the draws, then their mirror images
        for at in range(0, _MC_STREAMS, block):
            x = np.ascontiguousarray(draws[at:at + block].T)
            if half:
                np.negative(x, out=x)
            best[half * _MC_STREAMS + at:][:x.shape[1]] = _block_maxima(x, k, looks, guard, mature, between)
    return np.sort(best)


def _block_maxima(x: np.ndarray, k: float, looks: int, guard: int, mature: int, between: bool) -> np.ndarray:
    """:func:`_null_maxima` of the streams in the columns of ``x`` (windows, streams)."""
    cum = np.zeros((x.shape[0] + 1, x.shape[1]))
    np.cumsum(x, axis=0, out=cum[1:])
    cum2 = None
    if between:
        cum2 = np.zeros_like(cum)
        np.cumsum(x * x, axis=0, out=cum2[1:])
    c = np.zeros(x.shape[1])
    best = np.zeros(x.shape[1])
    for w in range(1, looks + 1):
        nb = w - guard if w - guard >= mature else w
        mean = cum[nb] / nb
        if between:
            if nb < BETWEEN_MIN_WINDOWS:
                continue
            var = np.maximum((cum2[nb] - nb * mean * mean) / (nb - 1), 1e-12)
            t = (x[w] - mean) / np.sqrt(var * (1.0 + 1.0 / nb))
            z = _t_to_z(t, nb - 1)
        else:
            z = (x[w] - mean) / np.sqrt(1.0 + 1.0 / nb)
        z = np.clip(z, -Z_CLIP, Z_CLIP)
        c = np.maximum(0.0, c - z - k)
        np.maximum(best, c, out=best)
    return best


def _maxima(k: float, looks: int, between: bool) -> np.ndarray:
    return _null_maxima(float(k), int(looks), GUARD, MATURE, bool(between))


def _sorted_quantile(values: np.ndarray, q: float) -> float:
    """``np.quantile`` (linear) of already sorted values, without a partition."""
    pos = q * (values.size - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, values.size - 1)
    return float(values[lo] + (pos - lo) * (values[hi] - values[lo]))


@lru_cache(maxsize=4096)
def cusum_threshold(alpha: float, k: float = DEFAULT_K, looks: int = LOOKS_PER_YEAR, *,
                    between: bool = False) -> float:
    """The ``h`` at which the self-starting chart of :func:`cusum_scan` raises a false alarm
    within ``looks`` windows with probability ``alpha`` (from the chart's simulated null
    maxima; below the smallest ``alpha`` the simulation resolves, the Brook–Evans
    threshold of independent increments scaled by their ratio there)."""
    if not 0 < alpha < 1:
        raise StatsInputError(f"`alpha` must lie in (0, 1); got {alpha!r}.")
    maxima = _maxima(k, looks, between)
    floor = 200 / maxima.size
    if alpha >= floor:
        return _sorted_quantile(maxima, 1 - alpha)
    ratio = _sorted_quantile(maxima, 1 - floor) / _chain_threshold(floor, float(k), int(looks))
    return _chain_threshold(float(alpha), float(k), int(looks)) * ratio


def false_alarm_rate(h: float, k: float = DEFAULT_K, looks: int = LOOKS_PER_YEAR, *,
                     between: bool = False) -> float:
    """P(the stationary chart's CUSUM exceeds ``h`` within ``looks`` windows): the yearly
    false-alarm rate at which an alarm at ``h`` would still fire."""
    maxima = _maxima(k, looks, between)
    p = 1.0 - np.searchsorted(maxima, h, side="right") / maxima.size
    if p * maxima.size >= 200:
        return float(p)
    floor = 200 / maxima.size
    ratio = _sorted_quantile(maxima, 1 - floor) / _chain_threshold(floor, float(k), int(looks))
    return float(min(crossing_probability(h / ratio, k, looks), floor))


def minimum_detectable_shift(n_per_window, sd, alpha: float, *, k: float = DEFAULT_K,
                             looks: int = LOOKS_PER_YEAR, within: int = 4, power: float = 0.9,
                             baseline_units=None) -> np.ndarray:
    """Smallest drop of the weekly mean of the units detected within ``within`` windows
    with probability ``power``, at ``n_per_window`` units a window of spread ``sd``, by the
    drop CUSUM of a stream whose yearly false-alarm rate is ``alpha`` (as :func:`cusum_scan`
    spends it), started at zero.

    The standardised shift per window is ``delta / (sd sqrt(1/n + 1/N))`` with ``N`` the
    baseline's units (``baseline_units``; default: many, i.e. 1/N = 0). NaN where there are
    no units or no spread.
    """
    n = np.atleast_1d(np.asarray(n_per_window, dtype=float))
    sd = np.broadcast_to(np.asarray(sd, dtype=float), n.shape)
    base = np.inf if baseline_units is None else np.asarray(baseline_units, dtype=float)
    base = np.broadcast_to(base, n.shape)
    h = cusum_threshold(alpha * DROP_SHARE * (1 - SHEWHART_SHARE), k, looks)
    lo, hi = 0.0, 20.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if crossing_probability(h, k, within, shift=mid) < power:
            lo = mid
        else:
            hi = mid
    with np.errstate(invalid="ignore", divide="ignore"):
        out = hi * sd * np.sqrt(1.0 / n + 1.0 / base)
    return np.where((n > 0) & (sd > 0), out, np.nan)


@lru_cache(maxsize=64)
def _slope(n_classes: int, others: int, p: float) -> float:
    """E[x | the group's label is right] - E[x | it is wrong], one label per group, every
    group right with probability ``p`` and wrong uniformly otherwise (see :func:`accuracy_slope`)."""
    L, K = n_classes, others + 1
    # Enumerate the others' labels (truth = class 0): each right w.p. p, else uniform wrong.
    probs = np.array([p] + [(1 - p) / (L - 1)] * (L - 1))
    configs = np.array(np.meshgrid(*[np.arange(L)] * others, indexing="ij")).reshape(others, -1).T
    weight = probs[configs].prod(axis=1)

    def x_of(mine: int) -> float:
        labels = np.concatenate([np.full((configs.shape[0], 1), mine), configs], axis=1)
        counts = np.stack([(labels == c).sum(axis=1) for c in range(L)], axis=1)
        credit = np.empty(labels.shape)
        for j in range(K):
            votes = counts.copy()
            votes[np.arange(labels.shape[0]), labels[:, j]] -= 1
            top = votes.max(axis=1)
            tied = votes == top[:, None]
            credit[:, j] = np.where(top > 0, tied[np.arange(labels.shape[0]), labels[:, j]] / tied.sum(axis=1), 0)
        x = credit[:, 0] - credit[:, 1:].mean(axis=1)
        return float((weight * x).sum())

    wrong = np.mean([x_of(c) for c in range(1, L)])
    return x_of(0) - wrong


def accuracy_slope(n_classes: int, labels_per_item: float, agreement: float) -> float:
    """How much a group's paired agreement difference falls per unit of accuracy lost.

    Under a symmetric model (one label per group on an item, every group right with the
    same probability ``p``, wrong labels uniform over the other classes), a group whose
    accuracy falls by ``d`` lowers its expected paired agreement difference by about
    ``slope × d``; ``p`` is the one whose expected agreement credit equals the observed
    ``agreement``. For gold accuracy the slope is 1. Used to express the minimum
    detectable drop in accuracy; the benchmark checks it by simulation.
    """
    L = int(n_classes)
    others = max(1, min(round(labels_per_item) - 1, 6))
    if not np.isfinite(agreement) or L < 2:
        return float("nan")

    def credit_at(p: float) -> float:
        # expected credit of a group against the others when everyone is right w.p. p
        probs = np.array([p] + [(1 - p) / (L - 1)] * (L - 1))
        configs = np.array(np.meshgrid(*[np.arange(L)] * (others + 1), indexing="ij")).reshape(others + 1, -1).T
        weight = probs[configs].prod(axis=1)
        votes = np.stack([(configs[:, 1:] == c).sum(axis=1) for c in range(L)], axis=1)
        top = votes.max(axis=1)
        tied = votes == top[:, None]
        credit = tied[np.arange(configs.shape[0]), configs[:, 0]] / tied.sum(axis=1)
        return float((weight * credit).sum())

    lo, hi = 1.0 / L, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        if credit_at(mid) < agreement:
            lo = mid
        else:
            hi = mid
    return _slope(L, others, round((lo + hi) / 2, 3))


# --------------------------------------------------------------------------- paired units


@dataclass(frozen=True)
class PairedSums:
    """Per (group, window) units of paired differences (``n``, ``s1``, ``s2``, and ``s3`` the
    sum of cubes, for the skewness), and per window the dataset level (``level_n``,
    ``level_s1``, ``level_s2``: one unit per item, the mean score of all its labels)."""

    n: np.ndarray
    s1: np.ndarray
    s2: np.ndarray
    level_n: np.ndarray
    level_s1: np.ndarray
    level_s2: np.ndarray
    s3: np.ndarray | None = None


def paired_sums(item: np.ndarray, group: np.ndarray, window: np.ndarray, score: np.ndarray,
                n_groups: int, n_windows: int) -> PairedSums:
    """Paired differences of per-label ``score`` (NaN: left out), summed per (group, window).

    ``item`` codes identify an item within a window together with ``window``; a group's
    labels of one item in one window form one unit (their mean).
    """
    ok = ~np.isnan(score)
    item, group, window, score = item[ok], group[ok], window[ok], score[ok]
    size = n_groups * n_windows
    empty = np.zeros((n_groups, n_windows))
    if item.size == 0:
        z = np.zeros(n_windows)
        return PairedSums(empty, empty.copy(), empty.copy(), z, z.copy(), z.copy(), empty.copy())
    n_items = int(item.max()) + 1
    # one packed integer key per (window, item, group): a single 1-D sort
    key = (window.astype(np.int64) * n_items + item) * n_groups + group
    order = np.argsort(key, kind="stable")
    key = key[order]
    head = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    cnt = np.diff(np.r_[head, key.size])
    unit = np.add.reduceat(score[order], head) / cnt
    ukey = key[head]
    u_group = ukey % n_groups
    iw = ukey // n_groups
    u_window = iw // n_items
    # units of one (window, item) are contiguous
    ihead = np.flatnonzero(np.r_[True, iw[1:] != iw[:-1]])
    icnt = np.diff(np.r_[ihead, iw.size])
    isum = np.add.reduceat(unit, ihead)
    per_unit_cnt = np.repeat(icnt, icnt)
    per_unit_sum = np.repeat(isum, icnt)
    paired = per_unit_cnt >= 2
    with np.errstate(invalid="ignore", divide="ignore"):
        x = unit - (per_unit_sum - unit) / (per_unit_cnt - 1)
    cell = (u_group * n_windows + u_window)[paired]
    x = x[paired]
    n = np.bincount(cell, minlength=size).reshape(n_groups, n_windows).astype(float)
    s1 = np.bincount(cell, weights=x, minlength=size).reshape(n_groups, n_windows)
    s2 = np.bincount(cell, weights=x * x, minlength=size).reshape(n_groups, n_windows)
    s3 = np.bincount(cell, weights=x * x * x, minlength=size).reshape(n_groups, n_windows)
    # dataset level: per item, the mean of all its labels' scores
    lab_sum = np.add.reduceat(score[order], head)
    item_mean = np.add.reduceat(lab_sum, ihead) / np.add.reduceat(cnt, ihead)
    iwin = u_window[ihead]
    level_n = np.bincount(iwin, minlength=n_windows).astype(float)
    level_s1 = np.bincount(iwin, weights=item_mean, minlength=n_windows)
    level_s2 = np.bincount(iwin, weights=item_mean ** 2, minlength=n_windows)
    return PairedSums(n, s1, s2, level_n, level_s1, level_s2, s3)


def _dense_credit(label: np.ndarray, n_classes: int) -> np.ndarray:
    """Leave-one-out tie credit of every slot's label against the other slots of its item."""
    onehot = np.eye(n_classes, dtype=np.int16)[label]
    others = onehot.sum(-2, keepdims=True) - onehot
    top = others.max(-1, keepdims=True)
    tied = others == top
    hit = np.take_along_axis(tied, label[..., None].astype(np.int64), -1)[..., 0]
    return np.where(top[..., 0] > 0, hit / tied.sum(-1), np.nan)


def dense_paired_sums(label: np.ndarray, who: np.ndarray, n_groups: int, n_classes: int,
                      gold: np.ndarray | None = None) -> PairedSums:
    """:func:`paired_sums` for panels stored densely: ``label`` and ``who`` (streams, windows,
    items, slots), one label per slot from distinct groups; ``gold`` (streams, windows,
    items) scores correctness instead of agreement. Arrays get a leading streams axis:
    ``n`` is (streams, groups, windows), ``level_n`` (streams, windows)."""
    if gold is None:
        score = _dense_credit(label, n_classes)
    else:
        score = (label == gold[..., None]).astype(float)
    S, W, _, K = label.shape
    x = score - (score.sum(-1, keepdims=True) - score) / (K - 1)
    key = ((np.arange(S)[:, None, None, None] * n_groups + who) * W + np.arange(W)[None, :, None, None]).ravel()
    size = S * n_groups * W
    n = np.bincount(key, minlength=size).reshape(S, n_groups, W).astype(float)
    s1 = np.bincount(key, weights=x.ravel(), minlength=size).reshape(S, n_groups, W)
    s2 = np.bincount(key, weights=(x * x).ravel(), minlength=size).reshape(S, n_groups, W)
    s3 = np.bincount(key, weights=(x ** 3).ravel(), minlength=size).reshape(S, n_groups, W)
    level = score.mean(-1)
    return PairedSums(n, s1, s2, np.full((S, W), float(label.shape[2])), level.sum(-1), (level ** 2).sum(-1), s3)


# --------------------------------------------------------------------------- the scan


def _standardised(n, s1, s2, cn, c1, c2, skewness=None):
    """Self-starting z of one window against its baseline sums (arrays of streams), mapped
    from Student's t on the baseline's degrees of freedom to the normal scale (:func:`_t_to_z`).

    With the units' ``skewness`` (per stream) it is removed: a window
    mean of a few dozen skewed units (an annotator's, or gold correctness near 1) has a
    long tail on one side, which a normal threshold takes for changes (see
    :func:`skew_terms` for the statistic's mean and skewness); Hall's (1992) monotone
    transformation ``z - (g/6) z² + (g²/108) z³ + g/6`` of the centred value maps a variable
    of skewness ``g`` to one whose skewness is zero to that order.

    (Weighing a window by its own spread instead of the baseline's was tried: it tamed a
    weekly redrawn item mix a little but cost most of the power against a degrading
    annotator, whose own spread grows as it degrades.)
    """
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        base_mean = c1 / cn
        var = np.maximum((c2 - cn * base_mean ** 2) / np.maximum(cn - 1, 1), 0.0)
        diff = s1 / n - base_mean
        t = diff / np.sqrt(var * (1.0 / n + 1.0 / cn))
        z = _t_to_z(t, np.maximum(cn - 1, 1))
        if skewness is not None:
            bias, skew = skew_terms(skewness, n, cn)
            a = skew / 6.0
            z = z - bias
            z = z - a * z * z + a * a * z ** 3 / 3.0 + a
        # no spread in the baseline: rounding differences are no change, real ones are large
        flat = var <= 1e-12
        z = np.where(flat, np.where(np.abs(diff) <= 1e-9, 0.0, Z_CLIP * np.sign(diff)), z)
    return np.clip(np.nan_to_num(z, nan=0.0), -40.0, 40.0)


def _pooled_skewness(cn, c1, c2, c3, pool) -> np.ndarray:
    """Per stream, the skewness of the units of all baselines of its pool (central moments
    about each stream's own mean), zero while the pool holds fewer than ``SKEW_MIN_UNITS``."""
    pool = np.zeros(cn.shape[0], dtype=np.int64) if pool is None else np.asarray(pool, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(cn > 0, c1 / np.where(cn > 0, cn, 1), 0.0)
        m2 = np.where(cn > 0, c2 - cn * mean ** 2, 0.0)
        m3 = np.where(cn > 0, c3 - 3.0 * mean * c2 + 2.0 * cn * mean ** 3, 0.0)
        units = np.bincount(pool, weights=cn)
        v2 = np.bincount(pool, weights=m2) / units
        v3 = np.bincount(pool, weights=m3) / units
        g = np.where((units >= SKEW_MIN_UNITS) & (v2 > 0), v3 / v2 ** 1.5, 0.0)
    return np.nan_to_num(g)[pool]


def skew_terms(unit_skewness, n, baseline_units):
    """First-order mean and skewness of the self-starting value
    ``T = (mean_w - mean_b) / (s_b sqrt(1/n + 1/N))`` for units of skewness ``gamma``:
    the difference of means has skewness ``gamma (1/n² - 1/N²) / (1/n + 1/N)^(3/2)``, and
    the baseline's spread moves with its mean (cov(mean_b, s_b²) = kappa3 / N), which adds
    ``3 gamma / (N sqrt(1/n + 1/N))`` to the skewness and ``gamma / (2 N sqrt(1/n + 1/N))``
    to the mean (the two-sample form of the one-sample t's ``-2 gamma / sqrt(n)``). The
    skewness is clipped to ±``SKEW_LIMIT``; NaN gives zeros."""
    with np.errstate(invalid="ignore", divide="ignore"):
        g = np.nan_to_num(np.asarray(unit_skewness, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
        inv_n, inv_b = 1.0 / np.asarray(n, dtype=float), 1.0 / np.asarray(baseline_units, dtype=float)
        rel = np.sqrt(inv_n + inv_b)
        skew = g * ((inv_n ** 2 - inv_b ** 2) / rel ** 3 + 3.0 * inv_b / rel)
        bias = g * inv_b / (2.0 * rel)
    return (np.nan_to_num(bias), np.clip(np.nan_to_num(skew), -SKEW_LIMIT, SKEW_LIMIT))


def _rate(c: float, z: float, direction: int, k: float, looks: int, between: bool = False) -> float:
    """The per-stream yearly false-alarm rate at which an alarm with CUSUM ``c`` and
    window value ``z`` would still fire (the smaller of its two routes)."""
    side = DROP_SHARE if direction < 0 else 1 - DROP_SHARE
    by_cusum = false_alarm_rate(c, k, looks, between=between) / (side * (1 - SHEWHART_SHARE))
    by_window = looks * float(special.ndtr(-abs(z))) / (side * SHEWHART_SHARE) if abs(z) > SHEWHART_FLOOR else 1.0
    return float(min(1.0, by_cusum, by_window))


def _start(n: np.ndarray, s1: np.ndarray, first: int, detected: int, fallback: int, direction: int) -> int:
    """Estimated first window after the change: the split of windows ``first..detected`` whose
    two means differ most in the alarm's direction (the likelihood-ratio estimate for a
    step in a normal mean), the window the CUSUM last left zero when no split qualifies."""
    cn = np.cumsum(n[first:detected + 1])
    c1 = np.cumsum(s1[first:detected + 1])
    tn, t1 = cn[-1], c1[-1]
    bn, b1 = cn[:-1], c1[:-1]  # before: windows first..first+j; after: the rest
    an, a1 = tn - bn, t1 - b1
    ok = (bn > 0) & (an > 0)
    if not ok.any():
        return fallback
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = (a1 / an - b1 / bn) * direction
        score = np.where(ok & (diff > 0), diff * diff * bn * an / tn, -np.inf)
    j = int(np.argmax(score))
    return first + j + 1 if np.isfinite(score[j]) else fallback


def cusum_scan(n, s1, s2, *, alpha, k: float = DEFAULT_K, looks: int = LOOKS_PER_YEAR,
               max_changes: int = 10, min_baseline: int = MIN_BASELINE_UNITS,
               between: bool = False, s3=None, pool=None) -> list[list[dict]]:
    """Self-starting two-sided CUSUM on streams of per-window unit sums.

    Parameters
    ----------
    n, s1, s2 : arrays (R, W)
        Units, their sum and sum of squares per stream and window (time order).
    alpha : float or array (R,)
        Per stream, the probability of any false alarm within ``looks`` windows of a
        stationary stream (``DROP_SHARE`` of it for drops, the rest for rises).
    k : float
        Reference value (the CUSUM is tuned to standardised weekly shifts near ``2 k``).
    max_changes : int
        Changes per stream at most; after one the stream restarts at its estimated start.
    min_baseline : int
        Units a baseline needs before the next window is looked at.
    between : bool
        Standardise by the spread *between* windows (each window's mean one observation,
        at least six windows of baseline) instead of the units' spread: for a level that
        moves from week to week with the mix of items (the dataset level), so that weekly
        noise in the mix is not taken for a change.
    s3 : array (R, W), optional
        Sum of cubes of the units: the units' skewness is removed from each window's
        standardised value (see :func:`_standardised`). It is estimated from the baselines
        of all streams of one ``pool`` together (the groups of one dataset have units of
        one kind, and a skewness from a few hundred units of one group is noise: the rare
        long-tail units are often missing), once they hold ``SKEW_MIN_UNITS``.
    pool : int array (R,), optional
        Which streams share a skewness (default: all).

    Returns
    -------
    list (per stream) of dicts: ``detected`` (window of the alarm), ``start`` (estimated
    first window after the change), ``direction`` (-1 drop, +1 rise), ``before`` and
    ``after`` (mean of the units from the restart point to ``start`` and from ``start``
    to ``detected``), ``rate`` (the per-stream yearly false-alarm rate at which this alarm
    would still fire: smaller is stronger evidence).
    """
    n = np.asarray(n, dtype=float)
    s1 = np.asarray(s1, dtype=float)
    s2 = np.asarray(s2, dtype=float)
    if n.ndim != 2 or n.shape != s1.shape or n.shape != s2.shape:
        raise StatsInputError("`n`, `s1` and `s2` must be arrays of the same shape (streams, windows).")
    R, W = n.shape
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), (R,))
    if not ((alpha > 0) & (alpha < 1)).all():
        raise StatsInputError("`alpha` must lie in (0, 1).")
    cus = 1 - SHEWHART_SHARE
    levels, which = np.unique(alpha, return_inverse=True)
    h_drop = np.array([cusum_threshold(float(a) * DROP_SHARE * cus, float(k), int(looks), between=between)
                       for a in levels])[which]
    h_rise = np.array([cusum_threshold(float(a) * (1 - DROP_SHARE) * cus, float(k), int(looks), between=between)
                       for a in levels])[which]
    # one window far out alarms on its own (Bonferroni over the looks of a year)
    # (no nearer than SHEWHART_FLOOR: the weekly means of skewed units reach four or five
    # standard errors far more often than a normal law says)
    c_drop = np.maximum(-special.ndtri(alpha * DROP_SHARE * SHEWHART_SHARE / looks), SHEWHART_FLOOR)
    c_rise = np.maximum(-special.ndtri(alpha * (1 - DROP_SHARE) * SHEWHART_SHARE / looks), SHEWHART_FLOOR)
    found: list[list[dict]] = [[] for _ in range(R)]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_w = np.where(n > 0, s1 / np.where(n > 0, n, 1), 0.0)
    # cumulative sums with a leading zero column: the sum over windows a..b is cum[b + 1] - cum[a]
    cubes = np.zeros_like(n) if s3 is None or between else np.asarray(s3, dtype=float)
    cums = [np.pad(np.cumsum(x, axis=1), ((0, 0), (1, 0)))
            for x in (n, s1, s2, (n > 0).astype(float), mean_w, mean_w ** 2, cubes)]
    first = np.zeros(R, dtype=np.int64)
    at_first = [np.zeros(R) for _ in cums]  # each cumulative sum at the stream's first window
    down, up = np.zeros(R), np.zeros(R)
    down_since, up_since = np.zeros(R, dtype=np.int64), np.zeros(R, dtype=np.int64)
    rows = np.arange(R)
    for w in range(W):
        has = n[:, w] > 0
        # the baseline: windows first .. w - guard - 1 (the latest ``guard`` windows are held
        # out, so that a change's first windows are compared with pre-change data only)
        # (once the baseline has ``mature`` windows without them; before, all earlier windows)
        def base(end: int):
            return [np.where(end >= first, c[:, end] - a, 0.0) for c, a in zip(cums, at_first, strict=True)]

        full = base(w)
        held = base(max(w - GUARD, 0))
        use_held = held[3] >= MATURE
        cn, c1, c2, nwin, b1, b2, c3 = (np.where(use_held, h_, f_) for h_, f_ in zip(held, full, strict=True))
        if between:
            ready = has & (nwin >= BETWEEN_MIN_WINDOWS)
        else:
            ready = has & (cn >= min_baseline) & (nwin >= 1)
        if not ready.any():
            continue
        if between:
            z = _standardised(np.ones(R), mean_w[:, w], mean_w[:, w] ** 2, nwin, b1, b2)
        else:
            skew = None if s3 is None else _pooled_skewness(cn, c1, c2, c3, pool)
            z = _standardised(n[:, w], s1[:, w], s2[:, w], cn, c1, c2, skew)
        z_raw = np.where(ready, z, 0.0)
        z = np.clip(z_raw, -Z_CLIP, Z_CLIP)
        new_down = np.maximum(0.0, down - z - k)
        new_up = np.maximum(0.0, up + z - k)
        down_since = np.where(ready & (down <= 0) & (new_down > 0), w, down_since)
        up_since = np.where(ready & (up <= 0) & (new_up > 0), w, up_since)
        down = np.where(ready, new_down, down)
        up = np.where(ready, new_up, up)
        alarm_d = ready & ((down > h_drop) | (z_raw < -c_drop))
        alarm_u = ready & ((up > h_rise) | (z_raw > c_rise)) & ~alarm_d
        for r in rows[alarm_d | alarm_u]:
            if len(found[r]) >= max_changes:
                continue
            d = -1 if alarm_d[r] else 1
            f = int(first[r])
            st = _start(n[r], s1[r], f, w, int(down_since[r] if d < 0 else up_since[r]), d)

            def mean(a, b, r=r):
                tot_n = cums[0][r, b + 1] - cums[0][r, a]
                return float((cums[1][r, b + 1] - cums[1][r, a]) / tot_n) if tot_n > 0 else float("nan")

            found[r].append({"detected": w, "start": st, "direction": d,
                             "before": mean(f, st - 1) if st > f else float("nan"), "after": mean(st, w),
                             "rate": _rate(float(down[r] if d < 0 else up[r]), float(z_raw[r]), d, k, looks,
                                           between)})
            # restart from the estimated start: the post-change windows are the new baseline
            first[r] = st
            for a, c in zip(at_first, cums, strict=True):
                a[r] = c[r, st]
            down[r] = up[r] = 0.0
    return found
