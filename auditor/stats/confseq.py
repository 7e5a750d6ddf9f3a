"""Time-uniform confidence sequences for the mean of a bounded stream.

A confidence sequence (CS) at level :math:`1-\\alpha` is a sequence of intervals
:math:`C_1, C_2, \\ldots` with :math:`P(\\exists n: \\mu \\notin C_n) \\le \\alpha`: it
may be looked at after every observation, and stopped at any data-dependent time,
without losing its coverage. A fixed-sample interval checked after every batch has
no such guarantee.

The sequences here are the empirical-Bernstein sequences of Howard, Ramdas,
McAuliffe & Sekhon (2021, Theorem 4 with the method of mixtures) in the
predictable-centring form of Waudby-Smith & Ramdas (2023). For values
:math:`x_i \\in [0, 1]` with conditional mean :math:`\\mu` given the past, a
predictable centre :math:`\\hat\\mu_{i-1} = (1/2 + \\sum_{j<i} x_j)/i`,
:math:`S_n = \\sum_{i \\le n} x_i` and
:math:`V_n = \\sum_{i \\le n} (x_i - \\hat\\mu_{i-1})^2`, the processes

.. math:: M^{\\pm}_n(\\lambda; \\theta) = \\exp\\bigl(\\pm\\lambda (S_n - n\\theta)
          - \\psi(\\lambda) V_n\\bigr), \\qquad \\psi(\\lambda) = -\\log(1-\\lambda) - \\lambda,

are non-negative supermartingales for every :math:`\\lambda \\in [0, 1)`: ``+`` when
:math:`\\mu \\le \\theta`, ``-`` when :math:`\\mu \\ge \\theta` (Fan, Grama & Liu's
inequality :math:`e^{\\lambda\\xi - \\psi(\\lambda)\\xi^2} \\le 1 + \\lambda\\xi` for
:math:`\\xi \\ge -1`). Their average over a fixed grid of :math:`\\lambda`
(:data:`LAMBDAS`) is again one, an *e-process* :math:`E^{\\pm}_n(\\theta)`; by Ville's
inequality :math:`P(\\exists n: E_n(\\mu) \\ge 1/\\alpha) \\le \\alpha`. The grid spares
choosing one :math:`\\lambda` for one sample size: each :math:`n` is served by the
:math:`\\lambda` near :math:`\\sqrt{2\\log(1/\\alpha)/(n\\sigma^2)}` for a price of
:math:`\\log(\\text{grid size})` added to :math:`\\log(1/\\alpha)`.

The whole state of a stream is three numbers (:math:`n`, :math:`S_n`, :math:`V_n`), so
:class:`MeanStream` updates in time proportional to the new values only.

For values whose range is known before they arrive, exact *betting* wastes less than
these exponential bounds: :func:`betting_log_wealth` multiplies the capital by
:math:`1 + \\eta\\,\\xi_i` per value (:math:`\\xi_i \\ge -1` the value scaled by its
predictable range) for every bet :math:`\\eta` of a fixed grid (:data:`BETS`) and averages
the capitals: the diversified Kelly ("dKelly") mixture of Waudby-Smith & Ramdas (2023,
Section 5.3), an e-process whenever each :math:`\\xi_i` has conditional mean at most 0.

The ``confseq`` package implements these boundaries and more, but it is a pre-1.0 C++
build (Boost headers) whose authors call it not yet stable, and it has no running
state to update batch by batch; the sequences needed here are a few lines of numpy.

References
----------
Howard, Ramdas, McAuliffe & Sekhon, "Time-uniform, nonparametric, nonasymptotic
confidence sequences", Annals of Statistics 49(2), 2021.
Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting",
JRSS-B 86(1), 2023 (predictable plug-in empirical Bernstein, Theorem 2; the
diversified Kelly betting mixture, Section 5.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from auditor.stats.validation import StatsInputError, check_probability

__all__ = ["BETS", "LAMBDAS", "ConfidenceSequence", "MeanStream", "betting_log_wealth", "confidence_sequence",
           "log_evalue"]

#: Bets of the mixture: geometric from 0.005 to 0.9 (ratio about 1.5), equal weights.
LAMBDAS = np.geomspace(0.005, 0.9, 14)
_PSI = -np.log1p(-LAMBDAS) - LAMBDAS
_LOG_K = math.log(LAMBDAS.size)

#: Bets of :func:`betting_log_wealth`, as fractions of the largest bet a value's range
#: allows: geometric from 0.005 to 0.99, equal weights. A dense grid approaches a
#: log-uniform prior over the bet (regret about log log(0.99/0.005) ≈ 1.7 rather than
#: log(grid size)); its top near 1 serves the large margins that certify within a few
#: hundred items, its bottom margins of a few thousandths on a million items.
BETS = np.geomspace(0.005, 0.99, 50)
_LOG_NB = math.log(BETS.size)
#: Values per block of the (values × bets) log-capital matrix: bounds its memory (16 MB).
_BET_BLOCK = 40_000


def log_evalue(theta, n, s, v, *, side: str):
    """Log of the mixture e-process :math:`E_n(\\theta)` (broadcasts over all arguments).

    ``side="above"`` is evidence that the mean exceeds ``theta`` (valid under
    :math:`\\mu \\le \\theta`; large when :math:`S_n/n \\gg \\theta`); ``side="below"``
    is evidence that it is smaller (valid under :math:`\\mu \\ge \\theta`). ``n``,
    ``s``, ``v`` are a stream's count, sum and variance process (see
    :class:`MeanStream`); with ``n = 0`` the value is 0 (:math:`E = 1`).
    """
    theta, n, s, v = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (theta, n, s, v)))
    gap = s - n * theta
    if side == "below":
        gap = -gap
    elif side != "above":
        raise StatsInputError(f"`side` must be 'above' or 'below'; got {side!r}.")
    expo = LAMBDAS * gap[..., None] - _PSI * v[..., None]
    return logsumexp(expo, axis=-1) - _LOG_K


def betting_log_wealth(xi, log_wealth=None) -> tuple[np.ndarray, np.ndarray]:
    """Exact betting on a stream of scaled values: the dKelly mixture's log-capital.

    For each bet :math:`\\eta_j` of :data:`BETS` the capital after value :math:`i` is
    :math:`K_{j,i} = K_{j,0}\\prod_{m \\le i} (1 + \\eta_j \\xi_m)`; with
    :math:`\\xi_m \\ge -1` every factor is at least :math:`1 - \\eta_j > 0`, so no capital
    ever reaches 0. If each :math:`\\xi_m` has conditional mean at most 0 given the values
    before it, every :math:`K_j` is a non-negative supermartingale, and so is their
    average :math:`E_i = \\frac1J\\sum_j K_{j,i}` (Waudby-Smith & Ramdas 2023, dKelly):
    :math:`P(\\exists i: E_i \\ge 1/\\alpha) \\le \\alpha` (Ville).

    Parameters
    ----------
    xi : array-like, shape (..., n)
        The scaled values in arrival order along the last axis (leading axes: independent
        streams), each at least -1 (the caller scales a value by the largest loss its
        predictable range allows).
    log_wealth : array-like, shape (..., len(BETS)), optional
        Each bet's log-capital before these values (0, a capital of 1, by default).

    Returns
    -------
    log_e : ndarray, shape (..., n)
        :math:`\\log E_i` after each value.
    log_wealth : ndarray, shape (..., len(BETS))
        Each bet's log-capital after the last value (the running state).

    Examples
    --------
    >>> log_e, state = betting_log_wealth([0.5, -0.2, 0.4])
    >>> bool(log_e[-1] > 0), state.shape
    (True, (50,))
    """
    xi = np.maximum(np.asarray(xi, dtype=float), -1.0)  # -1 - 1e-16 from rounding is -1
    lead = xi.shape[:-1]
    lw = np.zeros((*lead, BETS.size)) if log_wealth is None else np.array(
        np.broadcast_to(np.asarray(log_wealth, dtype=float), (*lead, BETS.size)))
    log_e = np.empty(xi.shape)
    step = max(1, _BET_BLOCK // max(1, math.prod(lead)))
    for a in range(0, xi.shape[-1], step):
        block = lw[..., None, :] + np.cumsum(np.log1p(xi[..., a:a + step, None] * BETS), axis=-2)
        log_e[..., a:a + block.shape[-2]] = _log_mean_exp(block)
        lw = block[..., -1, :]
    return log_e, lw


def _log_mean_exp(a: np.ndarray) -> np.ndarray:
    """log of the mean of exp(a) over the last axis (finite a): scipy's logsumexp costs
    several times more on many short rows."""
    top = a.max(axis=-1)
    return top + np.log(np.exp(a - top[..., None]).mean(axis=-1))


def _bound(n, s, v, log_level, *, side: str) -> np.ndarray:
    """The end of the CS: the ``theta`` where the e-process crosses ``exp(log_level)``.

    ``side="lower"``: the smallest ``theta`` in [0, 1] not rejected by
    :math:`E^{above}`; ``side="upper"``: the largest not rejected by :math:`E^{below}`.
    The e-process is monotone in ``theta``, so bisection (vectorised) finds it.
    """
    n, s, v = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (n, s, v)))
    if side == "upper":
        # The mirrored stream 1 - x has sum n - s and the same variance process, and its
        # E^{above}(1 - theta) is this stream's E^{below}(theta): its lower end, mirrored.
        return 1.0 - _bound(n, n - s, v, log_level, side="lower")
    if side != "lower":
        raise StatsInputError(f"`side` must be 'lower' or 'upper'; got {side!r}.")
    lo = np.zeros(n.shape)
    hi = np.minimum(1.0, np.where(n > 0, s / np.maximum(n, 1), 0.5))  # the point estimate is never rejected
    # rejected(theta) is True for small theta; find the first theta not rejected.
    lo_ok = log_evalue(lo, n, s, v, side="above") < log_level
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        rej = log_evalue(mid, n, s, v, side="above") >= log_level
        lo = np.where(rej, mid, lo)
        hi = np.where(rej, hi, mid)
    return np.where(lo_ok, 0.0, hi)


def _prefix_sums(x: np.ndarray, n0=0.0, s0=0.0, v0=0.0):
    """(n, S, V) after each value of ``x`` (last axis), continuing from (n0, s0, v0)."""
    s = s0 + np.cumsum(x, axis=-1)
    idx = n0 + np.arange(1, x.shape[-1] + 1, dtype=float)
    s_before = np.concatenate([np.broadcast_to(np.asarray(s0, dtype=float)[..., None], (*x.shape[:-1], 1)),
                               s[..., :-1]], axis=-1)
    centre = (0.5 + s_before) / idx  # predictable: uses the values before i only
    v = v0 + np.cumsum((x - centre) ** 2, axis=-1)
    return np.broadcast_to(idx, x.shape), s, v


def _check_values(values, name="values") -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise StatsInputError(f"`{name}` must be one-dimensional; got shape {x.shape}.")
    bad = np.flatnonzero(~np.isfinite(x) | (x < 0) | (x > 1))
    if bad.size:
        raise StatsInputError(f"`{name}` must lie in [0, 1]; row {int(bad[0])} is {x[bad[0]]!r}.")
    return x


@dataclass(frozen=True)
class ConfidenceSequence:
    """Bounds after each prefix: ``lower[i]``, ``upper[i]`` use the first ``i + 1`` values."""

    lower: np.ndarray
    upper: np.ndarray
    mean: np.ndarray
    alpha: float
    sided: str


def confidence_sequence(values, *, alpha: float = 0.05, sided: str = "two") -> ConfidenceSequence:
    """Time-uniform confidence sequence for the mean of a stream of values in [0, 1].

    With probability at least :math:`1 - \\alpha`, *every* returned interval contains
    the mean :math:`\\mu` (the common conditional mean of each value given the ones
    before it: i.i.d. values, or values in random order). ``sided="two"`` spends
    :math:`\\alpha/2` on each end; ``"lower"`` / ``"upper"`` give a one-sided sequence
    (the other end is 1 or 0) with all of :math:`\\alpha`.

    Parameters
    ----------
    values : array-like, shape (n,)
        The stream in arrival order, each in [0, 1].
    alpha : float in (0, 1)
    sided : {"two", "lower", "upper"}

    Returns
    -------
    ConfidenceSequence

    Examples
    --------
    >>> cs = confidence_sequence([1, 0, 1, 1] * 250, alpha=0.05)
    >>> bool(cs.lower[-1] < 0.75 < cs.upper[-1])
    True
    """
    alpha = check_probability(alpha, name="alpha", open_interval=True)
    if sided not in ("two", "lower", "upper"):
        raise StatsInputError(f"`sided` must be one of ['two', 'lower', 'upper']; got {sided!r}.")
    x = _check_values(values)
    if x.size == 0:
        raise StatsInputError("`values` is empty.")
    n, s, v = _prefix_sums(x)
    a = alpha / 2 if sided == "two" else alpha
    level = math.log(1.0 / a)
    lower = _bound(n, s, v, level, side="lower") if sided != "upper" else np.zeros(x.size)
    upper = _bound(n, s, v, level, side="upper") if sided != "lower" else np.ones(x.size)
    return ConfidenceSequence(lower=lower, upper=upper, mean=s / n, alpha=alpha, sided=sided)


class MeanStream:
    """Running state of one bounded stream: count, sum and variance process.

    ``update`` adds values in arrival order at a cost proportional to their number;
    the e-process and bounds are then read off three numbers.

    Examples
    --------
    >>> st = MeanStream()
    >>> st.update([1.0, 0.0, 1.0])
    >>> st.n, st.s
    (3, 2.0)
    """

    __slots__ = ("n", "s", "v")

    def __init__(self, n: int = 0, s: float = 0.0, v: float = 0.0):
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise StatsInputError(f"`n` must be a non-negative integer; got {n!r}.")
        if not (math.isfinite(s) and math.isfinite(v)) or s < 0 or s > n * (1 + 1e-12) or v < 0:
            raise StatsInputError(f"inconsistent stream state: n={n}, s={s}, v={v}.")
        self.n, self.s, self.v = int(n), float(s), float(v)

    def update(self, values) -> None:
        x = _check_values(values)
        if x.size == 0:
            return
        _, s, v = _prefix_sums(x, self.n, self.s, self.v)
        self.n += int(x.size)
        self.s, self.v = float(s[-1]), float(v[-1])

    @property
    def mean(self) -> float:
        return self.s / self.n if self.n else math.nan

    def lower(self, alpha: float) -> float:
        """One-sided lower confidence-sequence bound at the current time."""
        return float(_bound(self.n, self.s, self.v, math.log(1 / alpha), side="lower"))

    def upper(self, alpha: float) -> float:
        """One-sided upper confidence-sequence bound at the current time."""
        return float(_bound(self.n, self.s, self.v, math.log(1 / alpha), side="upper"))

    def to_dict(self) -> dict:
        return {"n": self.n, "s": self.s, "v": self.v}

    @classmethod
    def from_dict(cls, d) -> MeanStream:
        return cls(int(d["n"]), float(d["s"]), float(d["v"]))

    def __repr__(self) -> str:
        return f"MeanStream(n={self.n}, s={self.s!r}, v={self.v!r})"
