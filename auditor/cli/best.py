"""``auditor best``: the BEST performance (the oracle's expected score) of a count matrix."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import click
import numpy as np
import pandas as pd

from auditor.cli import main
from auditor.scoracle import parse_score_request
from auditor.stats import (
    BEST_METRICS,
    BestPerformanceWarning,
    StatsInputError,
    best_performance,
)


def _read_counts(path: Path) -> tuple[np.ndarray, list[str] | None, list[str] | None]:
    """Counts, the request's metrics (JSON bodies only) and class names (CSV header)."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise click.UsageError(f"{path}: not valid JSON: {exc}") from None
        if isinstance(data, list):  # a bare matrix, like the Scoracle demo's presets
            data = {"labelCounts": data, "metrics": list(BEST_METRICS)}
        try:
            counts, metrics = parse_score_request(data)
        except StatsInputError as exc:
            raise click.UsageError(f"{path}: {exc}") from None
        return counts, metrics, None
    sep = "\t" if suffix in (".tsv", ".tab") else ","
    try:
        frame = pd.read_csv(path, sep=sep, header=None, dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as exc:
        raise click.UsageError(f"{path}: cannot be read: {exc}") from None
    if frame.empty:
        raise click.UsageError(f"{path}: no rows.")
    numeric = frame.apply(lambda col: pd.to_numeric(col, errors="coerce"))
    names = None
    if numeric.iloc[0].isna().any():  # a header row
        names = [str(x) for x in frame.iloc[0]]
        frame, numeric = frame.iloc[1:], numeric.iloc[1:]
    if len(frame) and numeric.iloc[:, 0].isna().any():  # a first column of item ids
        frame, numeric = frame.iloc[:, 1:], numeric.iloc[:, 1:]
        names = names[1:] if names else None
    values = numeric.to_numpy(dtype=float)
    bad = ~np.isfinite(values) | (values < 0) | (values != np.round(values))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        line = r + 1 + (names is not None)  # 1-based line of the file
        raise click.UsageError(f"{path}: line {line}, count column {c + 1} is "
                               f"{frame.iat[r, c]!r}, not a non-negative whole count.")
    return values.astype(np.int64), None, names


@main.command("best")
@click.argument("counts_file", metavar="COUNTS", type=click.Path(exists=True, dir_okay=False,
                                                                  path_type=Path))
@click.option("--metric", "metrics", multiple=True, type=click.Choice(BEST_METRICS),
              help="Metric to compute (repeatable; default: the request's, or all four).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the Monte Carlo part of F1 (macro), when one is needed.")
@click.option("--f1-se", type=float, default=1e-4, show_default=True,
              help="Target standard error of that Monte Carlo part.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the Scoracle API response ([{metric, score}, ...]).")
def best_command(counts_file, metrics, seed, f1_se, as_json):
    """BEST performance of the label counts in COUNTS.

    COUNTS is a Scoracle request body ({"labelCounts": [[...]], "metrics": [...]}), a
    bare JSON matrix, or a CSV/TSV with one row per item and one column per class
    (an optional header row and an optional first column of item ids).
    """
    counts, request_metrics, names = _read_counts(counts_file)
    chosen = list(metrics) or request_metrics or list(BEST_METRICS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BestPerformanceWarning)  # reported below
            result = best_performance(counts, metrics=chosen, rng=seed, f1_standard_error=f1_se)
    except StatsInputError as exc:
        raise click.UsageError(f"{counts_file}: {exc}") from None
    if as_json:
        click.echo(json.dumps([{"metric": m, "score": result.scores[m]} for m in chosen]))
    else:
        click.echo(result.summary(classes=names))
    for text in result.warnings:
        click.echo(f"warning: {text}", err=True)
