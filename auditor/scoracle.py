"""The Scoracle API (Lourie, Le Bras & Choi, AI2's Scoracle): its ``POST /api/score``
request body checked in Scoracle's order and wording, scored by
:func:`auditor.stats.best_performance`, and answered in its response shape.

Shared by the web endpoint (:mod:`auditor.web.score`) and ``auditor best``; the
statistics themselves stay in :mod:`auditor.stats`, which knows nothing of request bodies.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from auditor.stats.best import BEST_METRICS, BestPerformanceWarning, best_performance
from auditor.stats.validation import StatsInputError

__all__ = ["ScoreRequestError", "ScoreWork", "parse_score_request", "scoracle_score", "score_work"]


class ScoreRequestError(StatsInputError):
    """A Scoracle request body that cannot be scored.

    ``errors`` holds the Scoracle error objects (``{"error": ..., "message": ...}``),
    the body Scoracle answers with status 400.
    """

    def __init__(self, errors: list[dict[str, str]]):
        self.errors = errors
        super().__init__(" ".join(e["message"] for e in errors))

    def __reduce__(self):
        # raised in the web process's scoring process, it travels back pickled
        return type(self), (self.errors,)


def _request_errors(body, limits: tuple[int, int, int, int] | None = None
                    ) -> tuple[list[dict[str, str]], list | None, list | None]:
    """Scoracle's checks, in its order and wording, plus where the problem is; with
    ``limits`` = (rows, classes, largest count, metrics), sizes beyond them too, each
    checked before the entries are scanned."""
    max_rows, max_classes, max_count, max_metrics = limits or (None, None, None, None)
    if body is None:
        return [{"error": "No JSON",
                 "message": "Requests to this API endpoint must contain JSON."}], None, None
    if not isinstance(body, Mapping):
        return [{"error": "Wrong Type",
                 "message": "The request body must be a JSON object with the \"labelCounts\" "
                            f"and \"metrics\" keys; got {type(body).__name__}."}], None, None
    errors: list[dict[str, str]] = []
    unexpected = sorted(set(body) - {"labelCounts", "metrics"})
    if unexpected:
        errors.append({"error": "Unexpected Key",
                       "message": "The request object only accepts the \"labelCounts\" and "
                                  f"\"metrics\" keys (unexpected: {', '.join(map(str, unexpected))})."})

    def bad(kind, message):
        errors.append({"error": kind, "message": message})

    counts = body.get("labelCounts")
    if "labelCounts" not in body:
        bad("Missing Key", "Please include \"labelCounts\" in your request.")
    elif not isinstance(counts, list):
        bad("Wrong Type", "labelCounts must be an array.")
    elif max_rows is not None and len(counts) > max_rows:
        bad("Too Large", f"labelCounts may have at most {max_rows} rows; it has {len(counts)}.")
    elif (i := next((i for i, r in enumerate(counts) if not isinstance(r, list)), None)) is not None:
        bad("Wrong Type", f"labelCounts must be an array of arrays (labelCounts[{i}] is not).")
    elif max_classes is not None and (i := next((i for i, r in enumerate(counts) if len(r) > max_classes),
                                                None)) is not None:
        bad("Too Large", f"The arrays in labelCounts may have at most {max_classes} entries "
                         f"(labelCounts[{i}] has {len(counts[i])}).")
    elif (ij := next(((i, j) for i, r in enumerate(counts) for j, x in enumerate(r)
                      if isinstance(x, bool) or not isinstance(x, int)), None)) is not None:
        i, j = ij
        bad("Wrong Type", "labelCounts must be an array of arrays of integers "
                          f"(labelCounts[{i}][{j}] is {counts[i][j]!r}).")
    elif (ij := next(((i, j) for i, r in enumerate(counts) for j, x in enumerate(r) if x < 0),
                     None)) is not None:
        i, j = ij
        bad("Wrong Value", "labelCounts must have only nonnegative entries "
                           f"(labelCounts[{i}][{j}] is {counts[i][j]}).")
    elif max_count is not None and (ij := next(((i, j) for i, r in enumerate(counts) for j, x in enumerate(r)
                                                if x > max_count), None)) is not None:
        i, j = ij
        bad("Too Large", f"labelCounts entries may be at most {max_count} "
                         f"(labelCounts[{i}][{j}] is {counts[i][j]}).")
    elif len(counts) == 0:
        bad("Bad List Length", "labelCounts must be non-empty.")
    elif len(counts[0]) == 0:
        bad("Bad List Length", "The arrays in labelCounts must be non-empty.")
    elif (i := next((i for i, r in enumerate(counts) if len(r) != len(counts[0])), None)) is not None:
        bad("Bad List Length", "Each array in labelCounts must have the same length "
                               f"(labelCounts[{i}] has {len(counts[i])}, labelCounts[0] has "
                               f"{len(counts[0])}).")
    elif not any(x for r in counts for x in r):
        bad("Wrong Value", "labelCounts must contain at least one annotation (every entry is 0).")

    metrics = body.get("metrics")
    if "metrics" not in body:
        bad("Missing Key", "Please include \"metrics\" in your request.")
    elif not isinstance(metrics, list):
        bad("Wrong Type", "metrics must be an array.")
    elif max_metrics is not None and len(metrics) > max_metrics:
        bad("Too Large", f"metrics may name at most {max_metrics} metrics; it has {len(metrics)}.")
    elif (k := next((k for k, s in enumerate(metrics) if not isinstance(s, str)), None)) is not None:
        bad("Wrong Type", f"metrics must be an array of strings (metrics[{k}] is {metrics[k]!r}).")
    elif (k := next((k for k, s in enumerate(metrics) if s not in BEST_METRICS), None)) is not None:
        bad("Bad Metric", f"Unsupported metric found in metrics (metrics[{k}] is {metrics[k]!r}; "
                          f"supported: {', '.join(BEST_METRICS)}).")
    return errors, counts, metrics


def _json_number(x: float) -> float | str:
    # JSON has no NaN or infinities: Scoracle sends these strings instead.
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinite" if x > 0 else "-Infinite"
    return float(x)


def parse_score_request(body, /, *, limits: tuple[int, int, int, int] | None = None
                        ) -> tuple[np.ndarray, list[str]]:
    """Validate a Scoracle request body; return its count matrix and metric names.

    Applies Scoracle's checks in its order and with its wording (extended with the
    offending entry), and also refuses booleans (which Scoracle would take for
    integers) and counts with no annotation at all. ``limits`` = ``(rows, classes,
    largest count, metrics)`` also refuses larger requests ("Too Large"), checked
    before the entries are scanned.

    Raises
    ------
    ScoreRequestError
        With ``errors``, Scoracle's list of ``{"error": ..., "message": ...}``.
    """
    errors, counts, metrics = _request_errors(body, limits)
    if errors:
        raise ScoreRequestError(errors)
    return np.array(counts, dtype=np.int64), list(metrics)


#: Draws of F1 (macro)'s Monte Carlo correction answering one request: Scoracle's own
#: estimate draws 10,000 at most; fewer when the (distinct count vector, class) cells of
#: one draw are many, so that the draws' cells stay within :data:`F1_DRAW_CELLS`.
F1_MAX_DRAWS = 10_000
F1_MIN_DRAWS = 1_000
F1_DRAW_CELLS = 2e7
#: Work units of one convolution term of F1 (macro)'s exact part, in Monte Carlo cells
#: (measured: a term costs about as much as 20 cells; kept with a margin).
_EXACT_TERM_CELLS = 32
#: Work units of one (count vector, class) cell of the posteriors every metric shares (a
#: gamma integral; measured up to about 1,400 cells with counts near 1,000).
_POSTERIOR_CELLS = 1_500
#: Never-gold classes F1 (macro) treats exactly (2^n convolutions; beyond, Monte Carlo).
_EXACT_NEVER_GOLD = 6


@dataclass(frozen=True)
class ScoreWork:
    """What scoring a request will cost, estimated from its counts before any is done:
    ``cells`` in units of one Monte Carlo cell (about 10 ns of CPU here), and the F1
    (macro) draws it will use."""

    cells: float
    f1_draws: int


def score_work(counts: np.ndarray, metrics: list[str]) -> ScoreWork:
    """Estimate the work of :func:`best_performance` on ``counts`` for ``metrics``.

    Everything is computed per distinct count vector (``R`` of them, ``K`` classes): the
    posteriors of each cost ``K`` gamma integrals, shared by the metrics. F1 (macro) also convolves one term per
    (trial, class), where a vector shared by at most 32 items is one trial per item, for
    each of the ``2^d`` subsets of the ``d ≤ 6`` never-gold classes it treats exactly
    (``d`` is at most the classes no row's plurality names); beyond 6, once, with a Monte
    Carlo correction of two batches of draws of ``R × K`` cells each.
    """
    rows = counts[counts.sum(axis=1) > 0]
    vectors, weights = np.unique(rows, axis=0, return_counts=True)
    n_vectors, n_classes = vectors.shape
    cells = float(n_vectors * n_classes * _POSTERIOR_CELLS)
    draws = int(min(F1_MAX_DRAWS, max(F1_MIN_DRAWS, F1_DRAW_CELLS // (n_vectors * n_classes))))
    if "f1 (macro)" in metrics:
        never_gold = n_classes - np.unique(vectors.argmax(axis=1)).size
        trials = float(np.where(weights <= 32, weights, 1).sum())
        if never_gold > _EXACT_NEVER_GOLD:  # the exact part once, and the pilot batch and the estimate
            cells += _EXACT_TERM_CELLS * trials * n_classes + 2.0 * draws * n_vectors * n_classes
        else:
            cells += _EXACT_TERM_CELLS * trials * n_classes * 2 ** never_gold
    return ScoreWork(cells, draws)


def scoracle_score(body, /, *, rng=0, limits: tuple[int, int, int, int] | None = None,
                   max_f1_draws: int = 200_000, max_cells: float | None = None) -> list[dict[str, object]]:
    """Answer a Scoracle ``POST /api/score`` request body.

    Parameters
    ----------
    body : object
        The parsed JSON request: ``{"labelCounts": [[int, ...], ...], "metrics":
        [str, ...]}``, metric names from :data:`BEST_METRICS`.
    rng : None, int or numpy.random.Generator, optional
        Seed of the (rarely needed) Monte Carlo part of F1 (macro); the default 0
        makes the answer reproducible.
    limits : (int, int, int, int), optional
        Largest (rows, classes, count, metrics) accepted; see :func:`parse_score_request`.
    max_f1_draws : int, optional
        Bound on the Monte Carlo draws of F1 (macro)'s correction, which bounds the
        work of one request (200,000 draws: a standard error of a few 1e-4 at worst,
        where Scoracle's own estimate draws 10,000 at most).
    max_cells : float, optional
        Refuse ("Too Costly") a request whose estimated work (:func:`score_work`) is
        larger, before computing; with it, F1 (macro) draws what :func:`score_work`
        says (at most ``max_f1_draws``). The web endpoint bounds every request's CPU so.

    Returns
    -------
    list of dict
        Scoracle's response body: ``[{"metric": name, "score": float}, ...]`` in the
        order of ``metrics`` (repeats answered again, an empty list answered with an
        empty list); a NaN or infinite score is sent as ``"NaN"``, ``"Infinite"`` or
        ``"-Infinite"`` as Scoracle does.

    Raises
    ------
    ScoreRequestError
        A body :func:`parse_score_request` refuses; ``errors`` holds Scoracle's
        error objects, each message naming the field and, where it applies, the
        entry.

    Examples
    --------
    >>> scoracle_score({"metrics": ["accuracy"], "labelCounts": [[3, 2], [0, 5]]})
    [{'metric': 'accuracy', 'score': 0.76229...}]
    """
    counts, metrics = parse_score_request(body, limits=limits)
    if not metrics:
        return []
    if max_cells is not None:
        work = score_work(counts, metrics)
        if work.cells > max_cells:
            raise ScoreRequestError([{"error": "Too Costly", "message": (
                f"Scoring these counts would take about {work.cells / max_cells:.1f} times the work one request may "
                "use (F1 (macro) on many distinct rows whose pluralities leave several classes never gold is the "
                "costly case): send fewer distinct rows, or ask for the other metrics.")}])
        max_f1_draws = min(max_f1_draws, work.f1_draws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BestPerformanceWarning)
        result = best_performance(counts, metrics=metrics, rng=rng, max_f1_draws=max_f1_draws)
    return [{"metric": name, "score": _json_number(result.scores[name])} for name in metrics]
