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

import numpy as np

from auditor.stats._validation import StatsInputError
from auditor.stats.best import BEST_METRICS, BestPerformanceWarning, best_performance

__all__ = ["ScoreRequestError", "parse_score_request", "scoracle_score"]


class ScoreRequestError(StatsInputError):
    """A Scoracle request body that cannot be scored.

    ``errors`` holds the Scoracle error objects (``{"error": ..., "message": ...}``),
    the body Scoracle answers with status 400.
    """

    def __init__(self, errors: list[dict[str, str]]):
        self.errors = errors
        super().__init__(" ".join(e["message"] for e in errors))


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


def scoracle_score(body, /, *, rng=0, limits: tuple[int, int, int, int] | None = None,
                   max_f1_draws: int = 200_000) -> list[dict[str, object]]:
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BestPerformanceWarning)
        result = best_performance(counts, metrics=metrics, rng=rng, max_f1_draws=max_f1_draws)
    return [{"metric": name, "score": _json_number(result.scores[name])} for name in metrics]
