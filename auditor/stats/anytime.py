"""Anytime certification: confidences that stay valid when they are recomputed after
every batch of items.

``"anytime"``: one betting e-process on the per-item difference of the two bounds
(:class:`BettingStream`); ``"anytime-fan"``: the earlier pair of mixture confidence
sequences, one per bound (:func:`anytime_confidence`). :class:`AnytimeState` carries both
from one audit to the next; :func:`item_values` gives the per-item values they stream.
The fixed-sample bounds and confidences they build on are in
:mod:`auditor.stats.certification`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy.special import logsumexp

from auditor.stats.certification_core import (
    AGGREGATIONS,
    ANYTIME_METHODS,
    BOUNDS,
    Confidence,
    _check_choice,
    _check_tau,
    _counts_array,
    _weighted_votes,
    tie_credit,
)
from auditor.stats.confseq import BETS, MeanStream, _check_values, betting_log_wealth, log_evalue
from auditor.stats.counts import Annotations
from auditor.stats.validation import (
    StatsInputError,
    as_predictions,
    check_probability,
)

__all__ = ["AnytimeState", "BettingStream", "ItemValues", "anytime_confidence", "item_values"]


@dataclass(frozen=True)
class ItemValues:
    """Per-item values behind the bounds, in row order (NaN where undefined).

    ``x_t`` (items with a label), ``x_e`` (items with two labels): each item's
    agreement over ordered annotator pairs with and without self-pairs, so that
    :math:`U_t^2` and :math:`U_e^2` are their means; ``agreement`` (items with a
    label, when predictions are given): the model's tie-credited agreement with the
    aggregate, whose mean is :math:`L_N`. All lie in [0, 1].
    """

    x_t: np.ndarray
    x_e: np.ndarray
    agreement: np.ndarray | None


def item_values(counts, predictions=None, *, aggregation: str = "majority", weights=None) -> ItemValues:
    """The per-item values whose means are :math:`U_t^2`, :math:`U_e^2` and :math:`L_N`.

    Examples
    --------
    >>> v = item_values([[3, 0], [1, 1], [0, 0]], [0, 0, 1])
    >>> v.x_t.round(3).tolist(), v.agreement.tolist()
    ([1.0, 0.5, nan], [1.0, 0.5, nan])
    """
    m = _counts_array(counts).astype(np.float64)
    k = m.sum(axis=1)
    sq = np.einsum("ij,ij->i", m, m)
    with np.errstate(invalid="ignore", divide="ignore"):
        x_t = np.where(k > 0, sq / (k * k), np.nan)
        x_e = np.where(k >= 2, (sq - k) / (k * (k - 1.0)), np.nan)
    agree = None
    if predictions is not None:
        _check_choice(aggregation, AGGREGATIONS, "aggregation")
        if weights is not None:
            if not isinstance(counts, Annotations):
                raise StatsInputError("weighted aggregation needs `counts` as Annotations (who gave which label).")
            votes = _weighted_votes(counts, weights)
        else:
            votes = m
        agree = tie_credit(votes, as_predictions(predictions, votes.shape[0], votes.shape[1]))
        agree[k == 0] = np.nan
    return ItemValues(x_t=x_t, x_e=x_e, agreement=agree)


def _anytime_log_evalue(upper_n, upper_s, upper_v, lower_n, lower_s, lower_v, *, tau: float = 0.0,
                        split: float = 0.5) -> np.ndarray:
    """log of :math:`E^*` (see :func:`anytime_confidence`), vectorised over streams."""
    args = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in
                                 (upper_n, upper_s, upper_v, lower_n, lower_s, lower_v)))
    un, us, uv, ln_, ls, lv = args
    log_w, log_1w = math.log(split), math.log1p(-split)

    def f(b):
        a = np.minimum(1.0, tau + np.sqrt(b))
        el = log_evalue(a, ln_, ls, lv, side="above")
        eu = log_evalue(b, un, us, uv, side="below")
        return np.logaddexp(log_w + el, log_1w + eu)

    # f is a sum of two convex functions of b (before the log): golden-section search.
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = np.zeros(un.shape), np.ones(un.shape)
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(64):
        left = fc < fd
        b = np.where(left, d, b)
        a = np.where(left, a, c)
        c_new = np.where(left, b - g * (b - a), d)
        d_new = np.where(left, c, a + g * (b - a))
        f_both = f(np.where(left, c_new, d_new))
        fc, fd = np.where(left, f_both, fd), np.where(left, fc, f_both)
        c, d = c_new, d_new
    return np.minimum.reduce([fc, fd, f(np.zeros(un.shape)), f(np.ones(un.shape))])


def _anytime_log_evalue_scalar(upper: MeanStream, lower: MeanStream, tau: float, split: float) -> float:
    """:func:`_anytime_log_evalue` for one pair of streams: bounded Brent instead of a
    fixed number of golden-section steps (a few times fewer evaluations)."""
    log_w, log_1w = math.log(split), math.log1p(-split)

    def f(b):
        a = min(1.0, tau + math.sqrt(b))
        el = float(log_evalue(a, lower.n, lower.s, lower.v, side="above"))
        eu = float(log_evalue(b, upper.n, upper.s, upper.v, side="below"))
        return float(np.logaddexp(log_w + el, log_1w + eu))

    res = optimize.minimize_scalar(f, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-12})
    return min(float(res.fun), f(0.0), f(1.0))


def _score_of_log_evalue(log_e):
    return np.maximum(1.0 - np.exp(-np.asarray(log_e, dtype=float)), -1.0)


def anytime_confidence(upper: MeanStream, lower: MeanStream, *, tau: float = 0.0, split: float = 0.5) -> Confidence:
    """Confidence that holds at every look, from one sequence per bound (``"anytime-fan"``):
    :math:`S_n = 1 - 1/E^*_n`.

    The earlier anytime verdict, kept for comparison: :class:`BettingStream` (``"anytime"``)
    tests the same hypothesis with one e-process on the per-item difference and needs
    about half the items (README, certification).

    ``upper`` is the stream of per-item :math:`X^t_n` (or :math:`X^e_n`), whose mean
    :math:`\\theta_U` bounds the average annotator's accuracy by
    :math:`\\sqrt{\\theta_U}` (Theorem 1); ``lower`` the stream of per-item agreements
    of the model with the aggregate, whose mean :math:`\\theta_L` is below the model's
    accuracy (Theorem 3). If the model is *not* better by :math:`\\tau`, then
    :math:`\\theta_L \\le \\tau + \\sqrt{\\theta_U}`: the pair lies in
    :math:`H_0 = \\{(a, b): a \\le \\tau + \\sqrt b\\}`. With the mixture e-processes of
    :mod:`auditor.stats.confseq` (:math:`E^L_n(a)`: evidence that
    :math:`\\theta_L > a`; :math:`E^U_n(b)`: that :math:`\\theta_U < b`),

    .. math:: E^*_n = \\inf_{(a, b) \\in H_0} \\; w E^L_n(a) + (1 - w) E^U_n(b)

    is at most :math:`w E^L_n(\\theta_L) + (1 - w) E^U_n(\\theta_U)` under :math:`H_0`, a
    non-negative supermartingale that starts at 1 (both e-processes are
    supermartingales in the one filtration of item arrivals, whatever their
    dependence). Ville's inequality gives
    :math:`P(\\exists n: E^*_n \\ge 1/\\alpha) \\le \\alpha`, so "certified when
    :math:`S_n \\ge 1 - \\alpha`" errs with probability at most :math:`\\alpha` over all
    looks at once. The infimum lies on the boundary :math:`a = \\min(1, \\tau + \\sqrt
    b)`, where :math:`E^L` falls and :math:`E^U` rises with :math:`b`; it is found by
    golden-section search.

    ``split`` (:math:`w`) divides the error between the two sequences, as OMS's
    :math:`t_u` does for Theorem 7, but it is fixed in advance: a split chosen from
    the data at each look (OMS's way) would void the guarantee. The sum does not pay
    for the fixed split the way a fixed split of two intervals does: the infimum lets
    whichever stream has the evidence carry it, and a stream alone needs at most
    :math:`\\log(1/w)` more evidence than with all of :math:`\\alpha`.

    Returns
    -------
    Confidence
        ``score`` :math:`S_n` (clipped at -1), ``evalue`` :math:`E^*_n`, ``lower`` /
        ``upper`` the point estimates :math:`L_n`, :math:`\\sqrt{\\bar X_n}`.
    """
    tau = _check_tau(tau)
    split = check_probability(split, name="split", open_interval=True)
    if upper.n == 0 or lower.n == 0:
        raise StatsInputError("both streams need at least one item.")
    log_e = _anytime_log_evalue_scalar(upper, lower, tau, split)
    return Confidence(
        score=float(_score_of_log_evalue(log_e)), t_u=math.nan, t_l=math.nan, method="anytime-fan",
        lower=lower.mean, upper=math.sqrt(upper.mean), n_upper=upper.n, n_lower=lower.n, tau=tau,
        evalue=math.exp(min(log_e, 700.0)),
    )


#: The tangent point of the first item (a prior item with X = 1), and the smallest one
#: used: any b > 0 keeps the test valid; a small b only widens the value's range.
_B_PRIOR, _B_MIN = 1.0, 0.05
#: The betting score's cap, 1 - 1e-6 (an e-value of a million): beyond it the bounds' own
#: assumptions (Theorems 1 and 3), not the sampling error, decide what can be trusted.
_LOG_E_CAP = math.log(1e6)


def _tangent_points(x: np.ndarray, n0=0, s0=0.0) -> np.ndarray:
    """:math:`b_i = \\sqrt{(1 + s_0 + \\sum_{j<i} x_j) / (1 + n_0 + i - 1)}` in [0.05, 1]:
    the running estimate of :math:`\\sqrt{\\theta_U}` before each value (predictable; along
    the last axis)."""
    s = np.cumsum(x, axis=-1)
    before = np.asarray(s0, dtype=float)[..., None] + np.concatenate([np.zeros((*x.shape[:-1], 1)), s[..., :-1]],
                                                                      axis=-1)
    seen = np.asarray(n0, dtype=float)[..., None] + np.arange(x.shape[-1], dtype=float)
    return np.clip(np.sqrt((_B_PRIOR + before) / (1.0 + seen)), _B_MIN, 1.0)


def _betting_paths(credit, x, *, tau: float = 0.0) -> np.ndarray:
    """log of :math:`\\max_{m \\le i} E_m` after each item, for many streams at once
    (shape (..., n), arrival order along the last axis): what a :class:`BettingStream`
    fed the same items reports after each one (simulations use it)."""
    credit, x = np.asarray(credit, dtype=float), np.asarray(x, dtype=float)
    xi = _bet_values(credit, x, _tangent_points(x), tau)
    log_e, _ = betting_log_wealth(xi)
    return np.maximum.accumulate(np.maximum(log_e, 0.0), axis=-1)


def _bet_values(credit, x, b, tau: float):
    """The per-item value :math:`v = c - x/(2b) - b/2` less ``tau``, scaled by the largest
    loss its range allows (:math:`c = 0`, :math:`x = 1`): :math:`\\xi \\in [-1, 1)`."""
    loss = tau + 0.5 / b + 0.5 * b
    return (credit - x * (0.5 / b) - 0.5 * b - tau) / loss


class BettingStream:
    """The anytime certification as one betting e-process, for one upper bound.

    Items arrive with two values: the model's credit :math:`c_i` (tie-credited agreement
    with the aggregate; mean :math:`\\theta_L \\le` the model's accuracy, Theorem 3) and
    the labels' agreement :math:`x_i` (:math:`X^t_i` or :math:`X^e_i`; the average
    annotator's accuracy is at most :math:`\\sqrt{\\theta_U}`, Theorem 1). If the model is
    not better by :math:`\\tau`, then :math:`\\theta_L \\le \\tau + \\sqrt{\\theta_U}`. For any
    :math:`b > 0`, :math:`\\sqrt{\\theta_U} \\le \\theta_U/(2b) + b/2` (the tangent of the
    square root at :math:`b^2`), so with :math:`b_i` fixed before item :math:`i` the value

    .. math:: v_i = c_i - \\frac{x_i}{2 b_i} - \\frac{b_i}{2}

    has conditional mean at most :math:`\\theta_L - \\sqrt{\\theta_U} \\le \\tau`: one
    hypothesis on one stream, whose per-item variance is that of the *difference* of two
    strongly correlated values. :math:`b_i` is the square root of the running mean of the
    earlier :math:`x` (a prior item with :math:`x = 1` first), kept in [0.05, 1]; the
    tangent loses :math:`(\\sqrt{\\theta_U} - b_i)^2 / (2 b_i)` per item, which vanishes as the
    estimate settles. Since :math:`c, x \\in [0, 1]`, :math:`v_i \\ge -1/(2b_i) - b_i/2`, a
    bound known before the item: the bets of :func:`~auditor.stats.confseq.betting_log_wealth`
    on :math:`\\xi_i = (v_i - \\tau) / (\\tau + 1/(2b_i) + b_i/2) \\ge -1` never take the
    capital to zero, and their average :math:`E_n` is a non-negative supermartingale under
    "not better by :math:`\\tau`" (for every arrival population whose means satisfy it, so
    also when the items' difficulty shifts). By Ville's inequality
    :math:`P(\\exists n: E_n \\ge 1/\\alpha) \\le \\alpha`.

    **The score.** :math:`S_n = 1 - 1/\\max_{m \\le n} E_m`, the largest capital over every
    item so far (also between audits): the first time it reaches :math:`1 - \\alpha` the
    test rejects, with the error above however often it is looked at, and a rejection
    stands (the score never falls). :math:`S_n \\in [0, 0.999999]`: 0 means no evidence yet,
    and it is capped at :math:`1 - 10^{-6}` (beyond, the bounds' assumptions decide, not
    the sampling error); ``evalue`` is the uncapped :math:`\\max_m E_m`, ``wealth`` the
    current capital :math:`E_n`.

    The state is a few numbers and one log-capital per bet, whatever the stream's length;
    :meth:`update` costs in proportion to the new items. ``tau`` is part of the bets, so a
    stream serves one margin.

    Examples
    --------
    >>> st = BettingStream()
    >>> st.update([1.0, 1.0, 0.5], [1.0, 0.68, 0.52])
    >>> st.n, round(st.confidence().upper, 4)
    (3, 0.8563)
    """

    __slots__ = ("log_max", "log_wealth", "n", "s_credit", "s_x", "tau")

    def __init__(self, n: int = 0, s_credit: float = 0.0, s_x: float = 0.0, log_wealth=None,
                 log_max: float = 0.0, *, tau: float = 0.0):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise StatsInputError(f"`n` must be a non-negative integer; got {n!r}.")
        lw = np.zeros(BETS.size) if log_wealth is None else np.asarray(log_wealth, dtype=float)
        sums_ok = all(math.isfinite(v) and -1e-9 <= v <= n * (1 + 1e-12) + 1e-9 for v in (s_credit, s_x))
        if lw.shape != BETS.shape or not np.isfinite(lw).all() or not math.isfinite(log_max) or log_max < 0 \
                or not sums_ok:
            raise StatsInputError(f"inconsistent betting state: n={n}, {len(lw.ravel())} bets (expected "
                                  f"{BETS.size}), log_max={log_max!r}.")
        self.n, self.s_credit, self.s_x = int(n), float(s_credit), float(s_x)
        self.log_wealth, self.log_max, self.tau = lw, float(log_max), _check_tau(tau)

    def update(self, credit, x) -> None:
        """Add items (pairs of credit and agreement, in arrival order)."""
        c = _check_values(credit, "credit")
        x = _check_values(x, "x")
        if c.shape != x.shape:
            raise StatsInputError(f"`credit` and `x` must have one value per item; got {c.size} and {x.size}.")
        if c.size == 0:
            return
        b = _tangent_points(x, self.n, self.s_x)
        log_e, self.log_wealth = betting_log_wealth(_bet_values(c, x, b, self.tau), self.log_wealth)
        self.log_max = max(self.log_max, float(log_e.max()))
        self.n += int(c.size)
        self.s_credit += float(c.sum())
        self.s_x += float(x.sum())

    @property
    def log_evalue(self) -> float:
        """log of the current capital :math:`E_n` (0 before any item)."""
        return float(logsumexp(self.log_wealth)) - math.log(BETS.size)

    def confidence(self) -> Confidence:
        """:math:`S_n = 1 - 1/\\max_{m \\le n} E_m` and the current capital."""
        if self.n == 0:
            raise StatsInputError("the stream needs at least one item.")
        return Confidence(
            score=float(_score_of_log_evalue(min(self.log_max, _LOG_E_CAP))), t_u=math.nan, t_l=math.nan,
            method="anytime",
            lower=self.s_credit / self.n, upper=math.sqrt(self.s_x / self.n), n_upper=self.n, n_lower=self.n,
            tau=self.tau, evalue=math.exp(min(self.log_max, 700.0)), wealth=math.exp(min(self.log_evalue, 700.0)),
        )

    def log_evalue_after(self, credit, x, counts) -> np.ndarray:
        """The e-process's log :math:`\\max E` once new items arrive, vectorised over futures.

        ``credit`` and ``x`` (shape (A,)) are the distinct values a new item can have (as
        pairs), ``counts`` (shape (..., A)) how many new items take each pair in each
        simulated future. The capital after them does not depend on their order once the
        tangent point is fixed; it is held at the square root of the mean of every
        :math:`x`, old and new (where the running estimate settles). The result is
        :math:`\\log \\max(\\max_{m \\le n} E_m, E_{\\text{end}})`: the path's maximum between
        is not seen, so the probability of certifying it implies is slightly low. This is
        what a planner simulates the verdict with.
        """
        credit = np.asarray(credit, dtype=float)
        x = np.asarray(x, dtype=float)
        counts = np.asarray(counts, dtype=float)
        n_new = counts.sum(axis=-1)
        b = np.clip(np.sqrt((_B_PRIOR + self.s_x + counts @ x) / (1.0 + self.n + n_new)), _B_MIN, 1.0)
        xi = np.maximum(_bet_values(credit, x, b[..., None], self.tau), -1.0)         # (..., A)
        gain = np.einsum("...a,...aj->...j", counts, np.log1p(xi[..., None] * BETS))  # (..., bets)
        log_end = logsumexp(self.log_wealth + gain, axis=-1) - math.log(BETS.size)
        return np.maximum(self.log_max, log_end)

    def to_dict(self) -> dict:
        return {"n": self.n, "s_credit": self.s_credit, "s_x": self.s_x,
                "log_wealth": self.log_wealth.tolist(), "log_max": self.log_max}

    @classmethod
    def from_dict(cls, d, *, tau: float = 0.0) -> BettingStream:
        return cls(int(d["n"]), float(d["s_credit"]), float(d["s_x"]), d["log_wealth"], float(d["log_max"]), tau=tau)

    def __repr__(self) -> str:
        return f"BettingStream(n={self.n}, log_evalue={self.log_evalue!r}, log_max={self.log_max!r}, tau={self.tau})"


class AnytimeState:
    """The running state an anytime verdict needs, for one model on one dataset.

    Two :class:`BettingStream` for ``"anytime"``: items with a label (``bet_t``, with
    :math:`X^t`) and with two labels (``bet_e``, with :math:`X^e`), each item entering with
    its credit and its agreement; and, for ``"anytime-fan"``, three
    :class:`~auditor.stats.confseq.MeanStream`: the per-item :math:`X^t` (``upper_t``),
    :math:`X^e` (``upper_e``, items with two labels) and agreement with the aggregate
    (``lower``). :meth:`update` adds a batch of *new* items (rows in arrival order) at a
    cost proportional to the batch, never to the stream. ``tau`` is the margin the
    betting streams test (the fan pair takes any margin when read).

    **Arrival.** An item enters the stream once, when it is first passed to
    :meth:`update`, with the labels and prediction it has then; labels added to it
    later do not change what it contributed. The guarantee needs each entering
    item's values to have the population means :math:`\\theta_U`, :math:`\\theta_L`
    given everything before it, which holds when items are drawn independently of the
    past and *when* an item enters does not depend on its labels' values (e.g. items
    enter when first labelled, or in batches). Freezing is what keeps the past of the
    supermartingale fixed: recomputing an old item's :math:`X` after new labels would
    rewrite history. Items entering with fewer labels are conservative for
    :math:`U_t` (:math:`E X^t` falls as labels are added) and unbiased for :math:`U_e`.
    Do not let labelling depend on earlier labels of the same item before it enters
    (e.g. "add a label where the first two disagree") — that biases every bound here,
    the paper's included.

    Examples
    --------
    **Stored states.** :meth:`to_dict` writes ``version`` 2. A version-1 state (the fan
    pair alone) or one stored for another ``tau`` reads back with empty betting streams:
    they restart, and the caller decides which items enter them (the audit pipeline
    enters every item it has, in id order, with its current labels).

    >>> st = AnytimeState()
    >>> st.update([[3, 0], [2, 1]], [0, 0])
    >>> st.upper_t.n, st.lower.n, st.bet_t.n, st.bet_e.n
    (2, 2, 2, 2)
    """

    VERSION = 2

    def __init__(self, upper_t: MeanStream | None = None, upper_e: MeanStream | None = None,
                 lower: MeanStream | None = None, bet_t: BettingStream | None = None,
                 bet_e: BettingStream | None = None, *, tau: float = 0.0):
        self.tau = _check_tau(tau)
        self.upper_t = upper_t if upper_t is not None else MeanStream()
        self.upper_e = upper_e if upper_e is not None else MeanStream()
        self.lower = lower if lower is not None else MeanStream()
        self.bet_t = bet_t if bet_t is not None else BettingStream(tau=self.tau)
        self.bet_e = bet_e if bet_e is not None else BettingStream(tau=self.tau)
        if self.bet_t.tau != self.tau or self.bet_e.tau != self.tau:
            raise StatsInputError("the betting streams must test the state's `tau`.")

    def update(self, counts, predictions, *, aggregation: str = "majority", weights=None) -> None:
        """Add new items (rows, in arrival order); unlabelled rows are skipped."""
        v = item_values(counts, predictions, aggregation=aggregation, weights=weights)
        t, e = ~np.isnan(v.x_t), ~np.isnan(v.x_e)
        self.upper_t.update(v.x_t[t])
        self.upper_e.update(v.x_e[e])
        self.lower.update(v.agreement[t])
        self.bet_t.update(v.agreement[t], v.x_t[t])
        self.bet_e.update(v.agreement[e], v.x_e[e])

    def betting(self, bound: str = "theoretical") -> BettingStream:
        """The betting stream of ``bound``."""
        _check_choice(bound, BOUNDS, "bound")
        return self.bet_t if bound == "theoretical" else self.bet_e

    def confidence(self, bound: str = "theoretical", *, method: str = "anytime", tau: float | None = None,
                   split: float = 0.5) -> Confidence:
        """The anytime confidence by ``method``: ``"anytime"`` (betting; ``tau`` must be the
        state's) or ``"anytime-fan"`` (any ``tau``, the state's by default; ``split``)."""
        _check_choice(bound, BOUNDS, "bound")
        _check_choice(method, ANYTIME_METHODS, "method")
        tau = self.tau if tau is None else _check_tau(tau)
        if method == "anytime":
            if tau != self.tau:
                raise StatsInputError(f"the betting streams test tau={self.tau}; got tau={tau} (restart them).")
            return self.betting(bound).confidence()
        up = self.upper_t if bound == "theoretical" else self.upper_e
        return anytime_confidence(up, self.lower, tau=tau, split=split)

    def to_dict(self) -> dict:
        return {"version": self.VERSION, "tau": self.tau, "upper_t": self.upper_t.to_dict(),
                "upper_e": self.upper_e.to_dict(), "lower": self.lower.to_dict(),
                "bet_t": self.bet_t.to_dict(), "bet_e": self.bet_e.to_dict()}

    @classmethod
    def from_dict(cls, d, *, tau: float | None = None) -> AnytimeState:
        """A stored state; ``tau`` (the stored one by default) different from the stored one,
        or a version-1 state, gives empty betting streams (see the class notes)."""
        stored = float(d.get("tau", 0.0))
        tau = stored if tau is None else _check_tau(tau)
        fan = (MeanStream.from_dict(d[k]) for k in ("upper_t", "upper_e", "lower"))
        if "bet_t" not in d or tau != stored:
            return cls(*fan, tau=tau)
        return cls(*fan, BettingStream.from_dict(d["bet_t"], tau=tau), BettingStream.from_dict(d["bet_e"], tau=tau),
                   tau=tau)

    @staticmethod
    def restarts_betting(d, tau: float) -> bool:
        """Whether :meth:`from_dict` gives ``d`` empty betting streams for ``tau``."""
        return "bet_t" not in d or float(d.get("tau", 0.0)) != float(tau)
