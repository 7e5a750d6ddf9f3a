"""How many items make the survey equivalence interval narrow enough."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from auditor.stats.equivalence.combiners import DEFAULT_CLIP
from auditor.stats.equivalence.curve import (
    _bounds,
    _classifier_terms,
    _quantile,
    _validated_predictions,
    equivalence_values,
)
from auditor.stats.equivalence.exact import exact_tables
from auditor.stats.equivalence.problem import _check_options, _fitted
from auditor.stats.equivalence.problem import _prepare as _eq_prepare
from auditor.stats.planning.certification_plan import (
    _REFINE_STEPS,
    MAX_NEW_ITEMS,
    _check_int_grid,
    _nice_grid,
)
from auditor.stats.planning.results import EquivalencePlan
from auditor.stats.validation import StatsInputError, as_rng


def plan_equivalence(ratings, predictions, *, width: float, combiner: str = "plurality",
                     scorer: str = "agreement", confidence: float = 0.95, n_bootstrap: int = 500,
                     max_items: int = MAX_NEW_ITEMS, n_items: Sequence[int] | None = None,
                     rng=None, matrix: str = "auto") -> EquivalencePlan:
    """How many items make the classifier's survey equivalence interval narrower than ``width``.

    The interval of :func:`~auditor.stats.survey_equivalence` is the percentile range of
    the equivalence over bootstrap samples of the items. With :math:`n` items drawn from
    the same population (the current items' histogram of count vectors and classifier
    terms, each new item labelled like a random current one), that range is estimated by
    the same bootstrap with samples of :math:`n` items (an :math:`n`-out-of-:math:`N`
    bootstrap): the expected width at :math:`n`. The smallest :math:`n` on the grid whose
    width is at most ``width`` is refined by bisection. Exact path (agreement or
    cross-entropy scorers, anonymous combiners); where its sums are out of reach the curve
    is drawn by Monte Carlo, as :func:`~auditor.stats.survey_equivalence` draws it, and a
    note says so with the points' largest standard error.

    Parameters
    ----------
    ratings, predictions, combiner, scorer, confidence, n_bootstrap, rng, matrix
        As in :func:`~auditor.stats.survey_equivalence`.
    width : float > 0
        The requested width of the equivalence interval (in raters).
    max_items : int
        The largest number of items considered.
    n_items : sequence of int, optional
        The grid (default 100, 200, 500, ... up to ``max_items``).

    Returns
    -------
    EquivalencePlan
    """
    try:
        width = float(width)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`width` must be a number; got {width!r}.") from exc
    if not math.isfinite(width) or width <= 0:
        raise StatsInputError(f"`width` must be a positive number; got {width!r}.")
    if isinstance(max_items, bool) or not isinstance(max_items, int | np.integer) or max_items < 2:
        raise StatsInputError(f"`max_items` must be an integer of at least 2; got {max_items!r}.")
    _check_options(n_bootstrap, confidence, DEFAULT_CLIP, None, None, "exact")
    if n_bootstrap < 50:
        raise StatsInputError(f"`n_bootstrap` must be at least 50 to estimate a width; got {n_bootstrap}.")
    gen = as_rng(rng)
    problem = _eq_prepare(ratings, combiner=combiner, scorer=scorer, reference=None, n_labels=None, max_k=None,
                       min_labels=None, method="exact", rng=gen, raters="labels", k_values="auto",
                       matrix=matrix)
    pred = _validated_predictions(problem, predictions)
    prior, model = _fitted(problem, combiner)
    t = exact_tables(problem.pool_counts, problem.reference_counts, combiner=problem.combiner or combiner,
                     scorer=problem.scorer, k_max=problem.k_max, prior=prior, model=model, clip=DEFAULT_CLIP,
                     ks=problem.ks, rng=gen)
    terms, ok = _classifier_terms(problem, pred)
    stacked = np.column_stack([t.inverse.astype(float), np.where(ok, terms, 0.0), ok.astype(float)])
    uniq, _, gmult = np.unique(stacked, axis=0, return_inverse=True, return_counts=True)
    key = uniq[:, 0].astype(np.int64)
    g_score, g_ok = uniq[:, 1], uniq[:, 2]
    n_now = int(gmult.sum())
    p_group = gmult / gmult.sum()
    lo_q, hi_q = _bounds(confidence)
    ks = np.asarray(problem.ks)
    notes: list[str] = []
    point_error = t.point_errors(t.multiplicity.astype(float))
    if point_error is not None:
        # Beyond the exact path's reach the tables were drawn (as survey_equivalence draws them):
        # the widths are those of the drawn curve, whose points carry this much error.
        worst = float(point_error.max(initial=0.0))
        notes.append(f"the curve's exact sums are out of reach (many labels per item over many classes): it was "
                     f"drawn by Monte Carlo, its points' standard errors at most {worst:.2g}; the widths are "
                     f"those of the drawn curve")

    # ``uniq`` is sorted by key first: each key's groups are a run.
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])

    def width_at(n: int, sub: np.random.Generator) -> float:
        counts = sub.multinomial(n, p_group, size=n_bootstrap).astype(float)
        w_key = np.zeros((n_bootstrap, t.keys.shape[0]))
        w_key[:, key[starts]] = np.add.reduceat(counts, starts, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            curve = (w_key @ t.expected) / (w_key @ t.eligible)
            clf = (counts @ (g_score * g_ok)) / (counts @ g_ok)
        eq = equivalence_values(curve, clf, ks)
        lo, hi = _quantile(eq, lo_q), _quantile(eq, hi_q)
        return float(hi - lo) if np.isfinite(lo) and np.isfinite(hi) else math.inf

    seed = int(gen.integers(0, 2**63 - 1))
    current = width_at(n_now, np.random.default_rng(seed))
    grid = _check_int_grid(n_items, "n_items", minimum=2) if n_items is not None else \
        tuple(v for v in _nice_grid(100, max_items))
    designs, found = _smallest_n(grid, width, lambda n: width_at(n, np.random.default_rng(seed)))
    if found is None:
        notes.append(f"no number of items up to {grid[-1]:,} makes the interval narrower than {width:g}")
    if current == math.inf:
        notes.append("an end of the current interval is '< 0' or '> K': its width is unbounded")
    return EquivalencePlan(designs=tuple(sorted(designs)), recommended_items=found, current_items=n_now,
                           current_width=current, width=width, confidence=float(confidence),
                           combiner=combiner, scorer=scorer, notes=tuple(notes))


def _smallest_n(grid, width: float, width_at) -> tuple[list[tuple[int, float]], int | None]:
    """The grid's widths up to the first at most ``width``, then bisection (on a log scale)
    between it and the grid point before; every width computed is a design. Common random
    numbers across n (``width_at`` reseeds)."""
    designs: list[tuple[int, float]] = []
    prev = None
    for n in grid:
        w = width_at(n)
        designs.append((int(n), w))
        if w <= width:
            break
        prev = n
    else:
        return designs, None
    lo_n, hi_n = (prev or 1), designs[-1][0]
    for _ in range(2 * _REFINE_STEPS):
        mid = round(math.sqrt(lo_n * hi_n))
        if mid <= lo_n or mid >= hi_n:
            break
        w = width_at(mid)
        designs.append((mid, w))
        if w <= width:
            hi_n = mid
        else:
            lo_n = mid
    return designs, hi_n
