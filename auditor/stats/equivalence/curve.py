"""Survey power curves, classifier scores and survey equivalence (Resnick et al.).

Public entry points: :func:`power_curve`, :func:`classifier_score`,
:func:`survey_equivalence` and :func:`expert_equivalence`.
"""

from __future__ import annotations

import numpy as np

from auditor.stats.counts import row_histogram
from auditor.stats.equivalence.combiners import DEFAULT_CLIP
from auditor.stats.equivalence.exact import exact_tables
from auditor.stats.equivalence.problem import _check_options, _fitted, _prepare, _Problem
from auditor.stats.equivalence.resample import _group_items, _item_weights, _resampled_sums
from auditor.stats.equivalence.results import (
    ClassifierScore,
    Equivalence,
    ExpertEquivalence,
    PowerCurve,
    SurveyEquivalence,
)
from auditor.stats.equivalence.sampling import sampling_classifier, sampling_curve
from auditor.stats.equivalence.scorers import expected_item_scores, label_scores
from auditor.stats.validation import StatsInputError, as_predictions, as_rng

__all__ = [
    "ClassifierScore",
    "ExpertEquivalence",
    "PowerCurve",
    "SurveyEquivalence",
    "classifier_score",
    "expert_equivalence",
    "power_curve",
    "survey_equivalence",
]


# ------------------------------------------------------------------------ helpers


def equivalence_values(curves: np.ndarray, scores: np.ndarray, k: np.ndarray | None = None) -> np.ndarray:
    """Algorithm 4, row by row: ``curves`` (B, n_k), ``scores`` (B,) → (B,).

    ``-inf`` where score ≤ c_0 ("< 0"), ``+inf`` where no c_k exceeds the score
    ("> K"), else k − 1 + (score − c_{k−1}) / (c_k − c_{k−1}) at the leftmost k ≥ 1
    with c_k > score. ``k`` gives the curve's numbers of raters when they are not
    0, 1, 2, ... (a grid): the interpolation is then linear between grid points.
    """
    curves = np.atleast_2d(curves)
    scores = np.atleast_1d(np.asarray(scores, dtype=float))
    out = np.full(scores.shape, np.inf)
    with np.errstate(invalid="ignore"):
        above = curves[:, 1:] > scores[:, None]
    has = above.any(axis=1)
    first = np.argmax(above, axis=1) + 1
    rows = np.flatnonzero(has)
    k_at = np.arange(curves.shape[1]) if k is None else np.asarray(k, dtype=float)
    lo, hi = curves[rows, first[rows] - 1], curves[rows, first[rows]]
    # hi = lo only where the score is below c_0 (first = 1, c_1 = c_0): set to −inf below.
    with np.errstate(divide="ignore", invalid="ignore"):
        out[rows] = k_at[first[rows] - 1] + (scores[rows] - lo) / (hi - lo) * (k_at[first[rows]] - k_at[first[rows] - 1])
        out[scores <= curves[:, 0]] = -np.inf
    out[np.isnan(scores)] = np.nan
    return out


#: Moves of the curve's points, in their standard errors, that bound the equivalence's Monte
#: Carlo error (:func:`equivalence_mc_error`).
_MC_Z = 1.959963984540054


def equivalence_mc_error(curve: np.ndarray, score: float, mc_error: np.ndarray, k: np.ndarray | None = None,
                         score_error: float = 0.0) -> float:
    """Monte Carlo standard error of the equivalence read off ``curve`` (:func:`equivalence_values`)
    when the curve's points carry standard errors ``mc_error`` and the score is exact, or
    carries its own standard error ``score_error`` (an expert equivalence reads the pool
    curve's point off the expert curve, and both may be drawn).

    The equivalence never increases when a point of the curve is raised (a raised point
    can only become the leftmost crossing or move it left, and the interpolation between
    the bracketing points decreases in both), so over every curve whose points lie within
    ``z = 1.96`` of their errors it is smallest with all points raised by ``z σ`` and
    largest with all lowered. The error reported is the larger distance from the
    equivalence to those two, divided by ``z``: ``±1.96·mc_error`` spans them, whatever
    the correlation of the points' errors (the points of one curve share their draws).
    The equivalence never decreases when the score rises, so a score error widens both
    ends the same way: the score lowered by ``z σ_s`` with the curve raised, raised with
    the curve lowered.
    Where the bracketing points stay the same this is, to first order, ``Δk [(c_i − s)
    σ_{i−1} + (s − c_{i−1}) σ_i] / (c_i − c_{i−1})²``; where the curve is flat near the
    score the crossing may jump to other points, and the error says so (``inf`` where the
    crossing could leave the curve, or a point's error is not finite). 0 where the
    equivalence is not a number (the score is outside the curve, or not finite, or the
    curve has one point) or no point it depends on carries an error.
    """
    curve = np.asarray(curve, dtype=float)
    errors = np.asarray(mc_error, dtype=float)
    score_error = float(score_error)
    if curve.shape[0] < 2:  # no interval to read a crossing off
        return 0.0
    value = equivalence_values(curve[None, :], np.array([float(score)]), k)[0]
    if not np.isfinite(value) or not (errors.any() or score_error):
        return 0.0
    if not (np.isfinite(errors).all() and np.isfinite(score_error)):  # an unknown error leaves the crossing's unknown
        return float("inf")
    low = equivalence_values((curve + _MC_Z * errors)[None, :], np.array([score - _MC_Z * score_error]), k)[0]
    high = equivalence_values((curve - _MC_Z * errors)[None, :], np.array([score + _MC_Z * score_error]), k)[0]
    return float(max(high - value, value - low) / _MC_Z)


def _quantile(values: np.ndarray, q: float) -> float:
    """Linear-interpolated quantile that keeps ±inf (nearest order statistic next to one)."""
    s = np.sort(values[~np.isnan(values)])
    if s.size == 0:
        return float("nan")
    pos = q * (s.size - 1)
    lo, hi = int(np.floor(pos)), int(np.ceil(pos))
    a, b = s[lo], s[hi]
    if np.isfinite(a) and np.isfinite(b):
        return float(a + (pos - lo) * (b - a))
    return float(a if pos - lo < 0.5 else b)


def _column_quantiles(values: np.ndarray, qs) -> np.ndarray:
    """``np.nanquantile(values, qs, axis=0)``, the same numbers, vectorised: nanquantile
    goes column by column in Python (a curve's 37 columns: 0.4 ms), so columns are
    sorted once (NaN last) and those with the same number of values share one
    ``np.quantile`` of their first rows. Every column holds at least one value."""
    nan = np.isnan(values)
    # (Replicates of ±inf interpolate to NaN between two infinities, as nanquantile's do.)
    with np.errstate(invalid="ignore"):
        if not nan.any():
            return np.quantile(values, qs, axis=0)
        present = values.shape[0] - nan.sum(axis=0)
        ordered = np.sort(values, axis=0)
        out = np.empty((len(qs), values.shape[1]))
        for n_values in np.unique(present):
            cols = present == n_values
            out[:, cols] = np.quantile(ordered[:n_values, cols], qs, axis=0)
    return out


def _report(x: float, k_max: int) -> Equivalence:
    if x == -np.inf:
        return "< 0"
    if x == np.inf:
        return f"> {k_max}"
    return float(x)


def _bounds(confidence: float) -> tuple[float, float]:
    return (1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0


def _columns_run(problem: _Problem, *, combiner: str, clip: float, n_bootstrap: int,
                 rng: np.random.Generator, pred: np.ndarray | None):
    """``raters="columns"``: Algorithms 1 and 3 on the literal column layout.

    Every score is a mean over the rater columns of a mean over the items labelled in
    that column (the reference package's non-anonymous scoring), so the item's term
    depends on which label sits in which column; the expectation over the k chosen
    columns is exact (``ExactTables.per_label``). The work is proportional to
    items × columns × k per replicate, so this compatibility mode does not scale like
    the histogram path.
    """
    prior, model = _fitted(problem, combiner)
    t = exact_tables(problem.pool_counts, None, combiner=combiner, scorer=problem.scorer,
                     k_max=problem.k_max, prior=prior, model=model, clip=clip, slots=problem.slots)
    has = problem.pool >= 0
    labels = np.maximum(problem.pool, 0)
    n, n_cols = has.shape
    n_k = problem.k_max + 1
    g = t.per_label[t.inverse[:, None], :, labels]            # (N, K, n_k)
    g = np.where(has[:, :, None], g, 0.0).reshape(n, n_cols * n_k)
    clf_terms = None
    if pred is not None:
        per = label_scores(problem.scorer, pred)
        clf_terms = np.where(has, np.take_along_axis(per, labels, axis=1), 0.0)
    hasf = has.astype(float)

    def evaluate(w: np.ndarray):
        den = w @ hasf                                           # (b, K)
        with np.errstate(invalid="ignore", divide="ignore"):
            col = (w @ g).reshape(-1, n_cols, n_k) / den[:, :, None]
            curve = np.nanmean(np.where(den[:, :, None] > 0, col, np.nan), axis=1)
            clf = None
            if clf_terms is not None:
                clf = np.nanmean(np.where(den > 0, (w @ clf_terms) / den, np.nan), axis=1)
        return curve, clf

    chunks = _item_weights(n, n_bootstrap, rng)()
    curves, clfs = zip(*(evaluate(w) for w in chunks), strict=True)
    curve_rows = np.concatenate(curves)
    clf_rows = np.concatenate(clfs) if clf_terms is not None else np.zeros(curve_rows.shape[0])
    n_items = np.full(n_k, int(has.any(axis=1).sum()))
    return curve_rows[0], curve_rows[1:], n_items, float(clf_rows[0]), clf_rows[1:]


def _exact_run(problem: _Problem, *, combiner: str, clip: float, n_bootstrap: int,
               rng: np.random.Generator, item_scores: np.ndarray | None = None,
               item_ok: np.ndarray | None = None):
    """Point curve, curve replicates, n_items, classifier point and replicates.

    Items that are interchangeable — same key (count vector) and same classifier term —
    form one group; a bootstrap sample is a multinomial draw of the group sizes, so the
    work per replicate is proportional to the number of groups (or, with very many
    groups, to the number of items: see :func:`_resampled_sums`).
    """
    prior, model = _fitted(problem, combiner)
    t = exact_tables(problem.pool_counts, problem.reference_counts, combiner=problem.combiner or combiner,
                     scorer=problem.scorer, k_max=problem.k_max, prior=prior, model=model, clip=clip,
                     ks=problem.ks, rng=rng)
    # Keys with the same rows of the tables (permutations of each other, for the
    # label-symmetric combiners) are one key to the bootstrap: fewer categories to draw,
    # the same law (the curve depends on the sample only through these rows).
    expected, eligible, inverse, multiplicity = t.expected, t.eligible, t.inverse, t.multiplicity
    if t.groups is not None:
        first = np.zeros(int(t.groups.max(initial=-1)) + 1, dtype=np.int64)
        first[t.groups[::-1]] = np.arange(t.groups.shape[0] - 1, -1, -1)
        expected, eligible = t.expected.take(first, axis=0), t.eligible.take(first, axis=0)
        inverse = t.groups.take(t.inverse)
        multiplicity = np.bincount(t.groups, weights=t.multiplicity, minlength=first.shape[0]).astype(np.int64)
    if item_scores is None:
        group_of_key = np.arange(expected.shape[0])
        item_group, gmult = inverse, multiplicity
        g_score = g_ok = np.zeros(expected.shape[0])
    else:
        terms = np.where(item_ok, item_scores, 0.0)
        if not _group_items(terms):
            # So many distinct terms that items are drawn one by one anyway: each item
            # is its own group, and grouping them would only cost time.
            group_of_key, item_group = inverse, np.arange(terms.shape[0])
            gmult = np.ones(terms.shape[0], dtype=np.int64)
            g_score, g_ok = terms, item_ok.astype(float)
        else:
            stacked = np.column_stack([inverse.astype(float), terms, item_ok.astype(float)])
            uniq, gmult, item_group = row_histogram(stacked)
            group_of_key = uniq[:, 0].astype(np.int64)
            g_score, g_ok = uniq[:, 1], uniq[:, 2]
    n_keys = expected.shape[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        def evaluate(w_key: np.ndarray, sums: np.ndarray):
            return (w_key @ expected) / (w_key @ eligible), sums[:, 0] / sums[:, 1]

        w_point = np.bincount(group_of_key, weights=gmult.astype(float), minlength=n_keys)
        point, clf_point = evaluate(w_point[None, :], np.array([[gmult @ (g_score * g_ok), gmult @ g_ok]]))
        n_items = np.rint(w_point @ eligible).astype(np.int64)
        reps = np.empty((n_bootstrap, point.shape[1]))
        clf = np.empty(n_bootstrap)
        for rows, (w_key,), sums in _resampled_sums(gmult, item_group, n_bootstrap, rng,
                                                    keys=[(group_of_key, n_keys)],
                                                    columns=np.column_stack([g_score * g_ok, g_ok])):
            reps[rows], clf[rows] = evaluate(w_key, sums)
    # Monte Carlo tables (beyond the exact path's reach) have no groups: w_point is per key.
    mc_error = t.point_errors(w_point)
    return point[0], reps, n_items, float(clf_point[0]), clf, mc_error


def _curve(problem: _Problem, point, reps, n_items, confidence, mc_error=None) -> PowerCurve:
    # Exact tables out of reach were drawn by Monte Carlo (they come with an error).
    method = "monte_carlo" if problem.method == "exact" and mc_error is not None else problem.method
    lo, hi = _bounds(confidence)
    ci_low = np.full_like(point, np.nan)
    ci_high = np.full_like(point, np.nan)
    # A c_k can be undefined on every replicate (e.g. a correlation with constant
    # predictions at k = 0); its interval stays NaN.
    cols = np.isfinite(reps).any(axis=0) if reps.shape[0] else np.zeros(point.shape, dtype=bool)
    if cols.any():
        ends = _column_quantiles(reps[:, cols], [lo, hi])
        ci_low[cols], ci_high[cols] = ends[0], ends[1]
    return PowerCurve(np.asarray(problem.ks), point, ci_low, ci_high, np.asarray(n_items, dtype=np.int64),
                      reps, problem.combiner, problem.scorer, method, float(confidence), mc_error)


def _sampling_n_items(problem: _Problem) -> np.ndarray:
    n = problem.pool.shape[0]
    if problem.reference is None:
        return np.full(problem.k_max + 1, n)
    has_ref = (problem.reference >= 0).any(axis=1)
    return np.full(problem.k_max + 1, int(has_ref.sum()))


# --------------------------------------------------------------------------- public


def power_curve(ratings, *, combiner: str, scorer: str, n_bootstrap: int = 500,
                confidence: float = 0.95, rng=None, reference=None, n_labels: int | None = None,
                max_k: int | None = None, min_labels: int | None = None, clip: float = DEFAULT_CLIP,
                method: str = "auto", raters: str = "labels", k_values: str = "auto",
                matrix: str = "auto") -> PowerCurve:
    r"""Survey power curve c_k, k = 0..K−1 (Resnick et al., Algorithm 3), with intervals.

    c_k is the expected score of the combined labels of k raters against the label of
    one more, held-out reference rater, averaged over the items that have at least
    k + 1 labels:

    .. math:: c_k = \frac{1}{|I_k|}\sum_{i \in I_k} \mathbb{E}_{S, r}\,
              \mathrm{score}\big(\mathrm{Comb}(W_{i,S}),\, W_{i,r}\big),

    S a uniformly random k-subset of the item's labels and r one of the others.

    Parameters
    ----------
    ratings : array-like (N, K), Annotations or LabelCounts
        Item × rater matrix of class indices with missing entries as ``-1`` or NaN; or
        per-item label counts (:class:`~auditor.stats.counts.LabelCounts`) where the
        exact path applies. "k raters" means k of the item's own labels.
    combiner : {"majority", "plurality", "frequency", "abc"}
        Majority/plurality vote (ties broken at random: the exact path takes the
        expectation), label frequencies (k = 0: the overall label frequencies), or the
        Anonymous Bayesian Combiner (Algorithms 5–6), fitted once on all items and
        leaving the predicted item out.
    scorer : {"agreement", "cross_entropy", "f1", "auc", "pearson", "dmi"}
        Cross-entropy is in bits (negated: higher is better) and needs a soft combiner.
    n_bootstrap : int, default 500
        Bootstrap samples of items for the intervals (0 for none).
    confidence : float, default 0.95
        Level of the percentile intervals.
    rng : None, int or numpy.random.Generator
        Source of every random choice (bootstrap draws, rater subsets, ``min_labels``).
    reference : array-like (N, R), optional
        Other raters of the same items to score against (amateur vs expert, §7): the
        curve combines k of ``ratings``' labels (k = 0..K) and scores them against one
        label of ``reference``.
    n_labels : int, optional
        Number of classes (default: largest class index + 1, at least 2).
    max_k : int, optional
        Last k of the curve (default K − 1, or K with ``reference``).
    min_labels : int, optional
        The reference package's alternative for ragged data: keep the items with at
        least ``min_labels`` labels and ``min_labels`` of each, chosen at random.
    raters : {"labels", "columns"}, default "labels"
        What "k raters" means on a matrix with missing entries: k of the item's own
        labels (items with fewer than k + 1 labels leave c_k), or k of the matrix's
        columns as in the paper's package (see Notes).
    clip : float, default 0.02
        Soft combiner outputs are clipped to [clip, 1 − clip] and renormalised, as in
        the paper's implementation (log 0 would be infinite).
    method : {"auto", "exact", "sampling"}
        "exact" sums over the histogram of count vectors (multivariate hypergeometric
        sub-counts; agreement and cross-entropy only; ragged data allowed) and
        bootstraps by multinomial draws on the histogram's multiplicities, in memory
        independent of ``n_bootstrap``; "sampling" is the paper's rater-subset path
        (all k-subsets when C(K, k) ≤ 200, else 200 random ones) and needs a full
        matrix. "auto" picks "exact" whenever it applies.
    k_values : {"auto", "all"}, default "auto"
        Which k the exact path computes: "all" is every k = 0..``max_k``; "auto" is
        every k up to 40 raters and, on longer curves (items with very many labels),
        every k ≤ 20 and then 16 k spaced geometrically up to the last one (the
        result's ``k`` says which; :func:`~auditor.stats.equivalence.exact.k_grid`).
        The rater-subset path and ``raters="columns"`` compute every k.
    matrix : {"auto", "raters", "counts"}, default "auto"
        What a bare array or DataFrame ``ratings`` (and ``reference``) is: item × rater
        class indices, or per-item label counts (as a :class:`~auditor.stats.counts.LabelCounts`).
        "auto" reads it as raters, and refuses one that reads as counts as well (no missing
        entry, and a value at least its number of columns: read as raters, more classes
        than raters, as counts of items with more labels than classes have) with an error
        naming both readings. Annotations and LabelCounts say what they are.

    Returns
    -------
    PowerCurve

    Notes
    -----
    The combiner is fitted once, on all items (the ABC's learner and the frequency
    combiner's prior), and each bootstrap sample re-weights the items' expected scores,
    as the paper's package does. Re-fitting the ABC on a bootstrap sample would let an
    item's duplicates leak its own labels into what the leave-one-out combiner learns.

    Memory: the exact path works on the histogram of count vectors (for the bootstrap,
    on groups of interchangeable items) in chunks of bounded size, so it does not grow
    with ``n_bootstrap`` beyond the (n_bootstrap, n_k) replicates it returns. The
    rater-subset path and ``raters="columns"`` keep per-item weights for every
    bootstrap sample (n_bootstrap × N numbers).

    ``raters="columns"`` reads "k raters" as k columns of the matrix, empty cells
    included, and scores by column (the mean over a column's labelled items, then over
    columns), which is what the paper's package computed for its case studies with
    ragged data; it is exact (all column subsets) and reproduces the package's
    classifier scores.

    References
    ----------
    P. Resnick, Y. Kong, G. Schoenebeck, T. Weninger. *Survey Equivalence: A Procedure
    for Measuring Classifier Accuracy Against Human Labels*, Algorithms 2–6.

    Examples
    --------
    >>> import numpy as np
    >>> from auditor.stats import power_curve
    >>> W = np.array([[0, 0, 1], [1, 1, 1], [0, 0, 0], [0, 1, 1]])
    >>> curve = power_curve(W, combiner="frequency", scorer="agreement", n_bootstrap=0)
    >>> curve.k.tolist(), curve.mean.round(3).tolist()
    ([0, 1, 2], [0.5, 0.667, 0.667])
    """
    _check_options(n_bootstrap, confidence, clip, max_k, min_labels, method)
    gen = as_rng(rng)
    problem = _prepare(ratings, combiner=combiner, scorer=scorer, reference=reference,
                       n_labels=n_labels, max_k=max_k, min_labels=min_labels, method=method, rng=gen,
                       raters=raters, k_values=k_values, matrix=matrix)
    if problem.slots is not None:
        point, reps, n_items, _, _ = _columns_run(problem, combiner=combiner, clip=clip,
                                                  n_bootstrap=n_bootstrap, rng=gen, pred=None)
        return _curve(problem, point, reps, n_items, confidence)
    if problem.method == "exact":
        point, reps, n_items, _, _, mc_error = _exact_run(problem, combiner=combiner, clip=clip,
                                                          n_bootstrap=n_bootstrap, rng=gen)
        return _curve(problem, point, reps, n_items, confidence, mc_error)
    prior, model = _fitted(problem, combiner)
    weights = _item_weights(problem.pool.shape[0], n_bootstrap, gen)
    all_rows, mc_error = sampling_curve(problem.pool, problem.reference, combiner=combiner, scorer=scorer,
                                        k_max=problem.k_max, prior=prior, model=model, clip=clip, rng=gen,
                                        weights=weights, n_labels=problem.n_labels)
    return _curve(problem, all_rows[0], all_rows[1:], _sampling_n_items(problem), confidence, mc_error)


def _classifier_terms(problem: _Problem, pred: np.ndarray):
    counts = problem.reference_counts if problem.reference_counts is not None else problem.pool_counts
    n = counts.sum(axis=1)
    ok = n >= 1
    dist = counts / np.maximum(n, 1)[:, None]
    return expected_item_scores(problem.scorer, pred, dist), ok


def _validated_predictions(problem: _Problem, predictions) -> np.ndarray:
    pred = as_predictions(predictions, problem.n_total, problem.n_labels, soft=True)
    if problem.rows is not None:
        pred = pred[problem.rows]
    if problem.scorer == "cross_entropy" and np.asarray(predictions).ndim == 1:
        raise StatsInputError(
            "`predictions` are hard labels: cross-entropy needs (N, L) probabilities "
            "(calibrate the classifier first, e.g. with calibrate_probabilities)."
        )
    return pred


def classifier_score(ratings, predictions, *, scorer: str, n_bootstrap: int = 500,
                     confidence: float = 0.95, rng=None, n_labels: int | None = None,
                     min_labels: int | None = None, matrix: str = "auto") -> ClassifierScore:
    """A classifier's score against one held-out reference rater (Algorithm 1).

    The mean, over reference raters, of the score of ``predictions`` against that
    rater's labels. For agreement and cross-entropy this is the per-item expectation
    over the item's labels, Σ_l (m_l / n) s(p, l), averaged over items with a label
    (ragged data allowed); other scorers need a full matrix and use its columns.

    Parameters
    ----------
    ratings : array-like (N, K), Annotations or LabelCounts
        The reference raters (missing entries ``-1`` or NaN).
    predictions : array-like
        Hard ``(N,)`` class indices or soft ``(N, L)`` probabilities.
    scorer : str
        One of "agreement", "cross_entropy", "f1", "auc", "pearson", "dmi".
    n_bootstrap, confidence, rng, n_labels, min_labels, matrix
        As in :func:`power_curve`.

    Returns
    -------
    ClassifierScore
    """
    _check_options(n_bootstrap, confidence, 0.0, None, min_labels, "auto")
    gen = as_rng(rng)
    problem = _prepare(ratings, combiner=None, scorer=scorer, reference=None, n_labels=n_labels,
                       max_k=None, min_labels=min_labels, method="auto", rng=gen, matrix=matrix)
    pred = _validated_predictions(problem, predictions)
    return _score_classifier(problem, pred, n_bootstrap, confidence, gen)


def _score_classifier(problem: _Problem, pred, n_bootstrap, confidence, gen) -> ClassifierScore:
    lo, hi = _bounds(confidence)
    if problem.method == "exact":
        terms, ok = _classifier_terms(problem, pred)
        values = np.where(ok, terms, 0.0)
        if not _group_items(values):
            item_group, gmult = np.arange(values.shape[0]), np.ones(values.shape[0], dtype=np.int64)
            columns = np.column_stack([values, ok])
        else:
            uniq, gmult, item_group = row_histogram(np.column_stack([values, ok]))
            columns = np.column_stack([uniq[:, 0] * uniq[:, 1], uniq[:, 1]])
        reps = np.empty(n_bootstrap)
        for rows, _, sums in _resampled_sums(gmult, item_group, n_bootstrap, gen, columns=columns):
            reps[rows] = sums[:, 0] / sums[:, 1]
        return ClassifierScore(float(terms[ok].mean()), _quantile(reps, lo), _quantile(reps, hi),
                               problem.scorer, int(ok.sum()), reps)
    ref = problem.reference if problem.reference is not None else problem.pool
    weights = _item_weights(ref.shape[0], n_bootstrap, gen)
    rows = sampling_classifier(pred, ref, scorer=problem.scorer, weights=weights)
    reps = rows[1:]
    n_items = int((ref >= 0).any(axis=1).sum())
    return ClassifierScore(float(rows[0]), _quantile(reps, lo), _quantile(reps, hi),
                           problem.scorer, n_items, reps)


def survey_equivalence(ratings, predictions, *, combiner: str, scorer: str, n_bootstrap: int = 500,
                       confidence: float = 0.95, rng=None, reference=None,
                       n_labels: int | None = None, max_k: int | None = None,
                       min_labels: int | None = None, clip: float = DEFAULT_CLIP,
                       method: str = "auto", raters: str = "labels", k_values: str = "auto",
                       matrix: str = "auto") -> SurveyEquivalence:
    """Survey equivalence of a classifier: how many raters its predictions are worth.

    Algorithm 4 of Resnick et al.: with h the classifier's score (Algorithm 1) and c the
    power curve (Algorithm 3), the equivalence is "< 0" if h ≤ c_0; otherwise, at the
    leftmost k ≥ 1 with c_k > h,

        v = k − 1 + (h − c_{k−1}) / (c_k − c_{k−1});

    and "> K" (K the curve's last k) if no c_k exceeds h. Each bootstrap sample of
    items gives a curve, a classifier score and an equivalence; the interval is their
    percentile range.

    Parameters
    ----------
    ratings : array-like (N, K), Annotations or LabelCounts
        As in :func:`power_curve`.
    predictions : array-like
        Hard ``(N,)`` class indices or soft ``(N, L)`` probabilities (cross-entropy
        needs soft ones, see :func:`calibrate_probabilities`).
    combiner, scorer, n_bootstrap, confidence, rng, reference, n_labels, max_k,
    min_labels, clip, method, raters, k_values, matrix
        As in :func:`power_curve`. With ``reference``, the classifier is scored against
        the reference raters too.

    Returns
    -------
    SurveyEquivalence

    Examples
    --------
    >>> import numpy as np
    >>> from auditor.stats import survey_equivalence
    >>> rng = np.random.default_rng(0)
    >>> p = rng.choice([0.2, 0.8], size=400)
    >>> W = (rng.random((400, 6)) < p[:, None]).astype(int)
    >>> eq = survey_equivalence(W, (p > 0.5).astype(int), combiner="majority",
    ...                         scorer="agreement", n_bootstrap=50, rng=1)
    >>> eq.position
    'above'
    """
    _check_options(n_bootstrap, confidence, clip, max_k, min_labels, method)
    gen = as_rng(rng)
    problem = _prepare(ratings, combiner=combiner, scorer=scorer, reference=reference,
                       n_labels=n_labels, max_k=max_k, min_labels=min_labels, method=method, rng=gen,
                       raters=raters, k_values=k_values, matrix=matrix)
    pred = _validated_predictions(problem, predictions)
    lo, hi = _bounds(confidence)
    mc_error = None
    if problem.slots is not None:
        point, reps, n_items, clf_value, clf_reps = _columns_run(
            problem, combiner=combiner, clip=clip, n_bootstrap=n_bootstrap, rng=gen, pred=pred)
        clf = ClassifierScore(clf_value, _quantile(clf_reps, lo), _quantile(clf_reps, hi),
                              scorer, int((problem.pool >= 0).any(axis=1).sum()), clf_reps)
    elif problem.method == "exact":
        terms, ok = _classifier_terms(problem, pred)
        point, reps, n_items, clf_value, clf_reps, mc_error = _exact_run(
            problem, combiner=combiner, clip=clip, n_bootstrap=n_bootstrap, rng=gen,
            item_scores=terms, item_ok=ok)
        clf = ClassifierScore(clf_value, _quantile(clf_reps, lo), _quantile(clf_reps, hi),
                              scorer, int(ok.sum()), clf_reps)
    else:
        prior, model = _fitted(problem, combiner)
        weights = _item_weights(problem.pool.shape[0], n_bootstrap, gen)
        all_rows, mc_error = sampling_curve(problem.pool, problem.reference, combiner=combiner,
                                            scorer=scorer, k_max=problem.k_max, prior=prior, model=model,
                                            clip=clip, rng=gen, weights=weights, n_labels=problem.n_labels)
        ref = problem.reference if problem.reference is not None else problem.pool
        clf_rows = sampling_classifier(pred, ref, scorer=scorer, weights=weights)
        point, reps, n_items = all_rows[0], all_rows[1:], _sampling_n_items(problem)
        clf_reps = clf_rows[1:]
        clf = ClassifierScore(float(clf_rows[0]), _quantile(clf_reps, lo), _quantile(clf_reps, hi),
                              scorer, int((ref >= 0).any(axis=1).sum()), clf_reps)
    curve = _curve(problem, point, reps, n_items, confidence, mc_error)
    value = equivalence_values(point[None, :], np.array([clf.value]), curve.k)[0]
    eq_reps = equivalence_values(reps, clf_reps, curve.k) if n_bootstrap else np.empty(0)
    k_last = curve.k_max
    if n_bootstrap:
        low, high = _report(_quantile(eq_reps, lo), k_last), _report(_quantile(eq_reps, hi), k_last)
    else:
        low = high = float("nan")
    return SurveyEquivalence(_report(value, k_last), low, high, clf, curve, eq_reps,
                             equivalence_mc_error(point, clf.value, curve.mc_error, curve.k))


def expert_equivalence(ratings, reference, *, combiner: str, scorer: str, n_bootstrap: int = 500,
                       confidence: float = 0.95, rng=None, n_labels: int | None = None,
                       clip: float = DEFAULT_CLIP, matrix: str = "auto") -> ExpertEquivalence:
    """Expert equivalence of k pool raters (Resnick et al. §7), for every k.

    The pool ("amateur", e.g. a labeling vendor) curve combines k of ``ratings``'
    labels and scores them against one ``reference`` ("expert") label; the expert curve
    combines k expert labels and scores them against another expert. The equivalence
    of k pool raters is where the expert curve reaches the pool curve's value at k
    (Algorithm 4): "k vendor raters are worth x experts". Both curves are computed on
    the same bootstrap samples of items. Exact path (agreement or cross-entropy); where
    its sums are out of reach (many labels per item over many classes) the curves are drawn
    by Monte Carlo, as :func:`power_curve` draws them, and ``mc_error`` reports the error.

    Parameters
    ----------
    ratings : array-like (N, A), Annotations or LabelCounts
        The pool's item × rater class indices (``-1``/NaN missing), or its label counts.
    reference : array-like (N, E), Annotations or LabelCounts
        The experts' ratings of the same items.
    combiner, scorer, n_bootstrap, confidence, rng, n_labels, clip, matrix
        As in :func:`power_curve`.

    Returns
    -------
    ExpertEquivalence
    """
    _check_options(n_bootstrap, confidence, clip, None, None, "exact")
    gen = as_rng(rng)
    pool_p = _prepare(ratings, combiner=combiner, scorer=scorer, reference=reference, n_labels=n_labels,
                      max_k=None, min_labels=None, method="exact", rng=gen, matrix=matrix)
    exp_p = _prepare(reference, combiner=combiner, scorer=scorer, reference=None, n_labels=pool_p.n_labels,
                     max_k=None, min_labels=None, method="exact", rng=gen, matrix=matrix)
    tables = []
    for prob in (pool_p, exp_p):
        prior, model = _fitted(prob, combiner)
        tables.append(exact_tables(prob.pool_counts, prob.reference_counts, combiner=combiner,
                                   scorer=scorer, k_max=prob.k_max, prior=prior, model=model, clip=clip,
                                   ks=prob.ks, rng=gen))
    # Resample items once for both curves: group items by their pair of keys.
    uniq, gmult, item_group = row_histogram(np.column_stack([tables[0].inverse, tables[1].inverse]))

    keys = [(uniq[:, j].astype(np.intp), t.keys.shape[0]) for j, t in enumerate(tables)]

    def evaluate(per_key: list[np.ndarray]) -> list[np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return [(w @ t.expected) / (w @ t.eligible) for w, t in zip(per_key, tables, strict=True)]

    w_points = [np.bincount(key, weights=gmult.astype(float), minlength=n_keys)[None, :] for key, n_keys in keys]
    points = evaluate(w_points)
    reps = [np.empty((n_bootstrap, t.expected.shape[1])) for t in tables]
    for rows, per_key, _ in _resampled_sums(gmult, item_group, n_bootstrap, gen, keys=keys):
        for r, part in zip(reps, evaluate(per_key), strict=True):
            r[rows] = part
    # Tables beyond the exact path's reach were drawn by Monte Carlo (as in power_curve).
    errors = [t.point_errors(w[0]) for w, t in zip(w_points, tables, strict=True)]
    curves = [_curve(prob, p[0], r, np.rint(t.multiplicity @ t.eligible), confidence, err)
              for prob, p, r, t, err in zip((pool_p, exp_p), points, reps, tables, errors, strict=True)]
    pool_curve, expert_curve = curves
    lo, hi = _bounds(confidence)
    k_last = expert_curve.k_max
    values, lows, highs, mc = [], [], [], []
    for k in range(pool_curve.k.shape[0]):
        v = equivalence_values(expert_curve.mean[None, :], np.array([pool_curve.mean[k]]), expert_curve.k)[0]
        values.append(_report(v, k_last))
        mc.append(equivalence_mc_error(expert_curve.mean, pool_curve.mean[k], expert_curve.mc_error, expert_curve.k,
                                       score_error=pool_curve.mc_error[k]))
        if n_bootstrap:
            eq = equivalence_values(reps[1], reps[0][:, k], expert_curve.k)
            lows.append(_report(_quantile(eq, lo), k_last))
            highs.append(_report(_quantile(eq, hi), k_last))
        else:
            lows.append(float("nan"))
            highs.append(float("nan"))
    return ExpertEquivalence(values, lows, highs, pool_curve, expert_curve, mc)
