"""``auditor equivalence``: survey power curve and a classifier's survey equivalence."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from auditor.cli import main
from auditor.cli._io import read_annotations, read_predictions
from auditor.stats import (
    StatsInputError,
    calibrate_probabilities,
    expert_equivalence,
    plot_power_curve,
    power_curve,
    survey_equivalence,
)
from auditor.stats.equivalence import COMBINERS, SCORERS


def _aligned_reference(path: Path, items: tuple, labels: tuple) -> np.ndarray:
    """The reference raters' matrix in the item order of the ratings (-1 where absent)."""
    ref = read_annotations(path, labels=[str(x) for x in labels])
    row_of = {str(item): n for n, item in enumerate(items)}
    unknown = [i for i in ref.items if str(i) not in row_of]
    if unknown:
        raise click.UsageError(f"{path}: item {unknown[0]!r} is not in the ratings file.")
    out = np.full((len(items), ref.n_annotators), -1, dtype=np.int64)
    rows = np.array([row_of[str(i)] for i in ref.items], dtype=np.int64)
    out[rows[ref.item], ref.annotator] = ref.label
    return out


@main.command("equivalence")
@click.argument("ratings", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("predictions", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--combiner", type=click.Choice(COMBINERS), default="abc", show_default=True)
@click.option("--scorer", type=click.Choice(SCORERS), default="cross_entropy", show_default=True)
@click.option("--labels", help="Ordered label set, comma-separated (default: sorted labels of RATINGS).")
@click.option("--reference", "reference_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Expert ratings of the same items to score against (amateur vs expert).")
@click.option("--bootstrap", "n_bootstrap", type=click.IntRange(min=0), default=500, show_default=True)
@click.option("--confidence", type=float, default=0.95, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--max-k", type=click.IntRange(min=0), help="Last k of the power curve.")
@click.option("--min-labels", type=click.IntRange(min=2),
              help="Keep items with at least this many labels, and that many of each.")
@click.option("--raters", type=click.Choice(["labels", "columns"]), default="labels", show_default=True,
              help="'k raters' = k of the item's labels, or k columns of the matrix (the paper's package).")
@click.option("--calibrate", is_flag=True, help="Isotonic-calibrate soft predictions to the ratings first.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Save a figure of the curve (PNG, SVG or PDF by suffix).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def equivalence_command(ratings, predictions, combiner, scorer, labels, reference_path, n_bootstrap,
                        confidence, seed, max_k, min_labels, raters, calibrate, plot_path, as_json):
    """Power curve of RATINGS and, with PREDICTIONS, the classifier's survey equivalence.

    RATINGS: long (item_id, annotator_id, label) or wide (item id, then one column per
    rater) CSV/TSV/JSONL. PREDICTIONS: item_id plus a `label` column (hard) or one
    probability column per label (soft). With --reference and no PREDICTIONS: the
    expert equivalence of k RATINGS raters (how many reference raters they are worth).
    """
    label_list = [x.strip() for x in labels.split(",")] if labels else None
    ann = read_annotations(ratings, labels=label_list)
    matrix = ann.matrix()
    reference = _aligned_reference(reference_path, ann.items, ann.labels) if reference_path else None
    # The matrices are the files' raters' class codes (-1 missing), whatever they look like.
    options = dict(combiner=combiner, scorer=scorer, n_bootstrap=n_bootstrap, confidence=confidence,
                   rng=seed, reference=reference, n_labels=ann.n_labels, max_k=max_k,
                   min_labels=min_labels, raters=raters, matrix="raters")
    if reference is not None and predictions is None:
        _expert(matrix, reference, options, as_json, [str(x) for x in ann.labels])
        return
    try:
        if predictions is None:
            result = power_curve(matrix, **options)
            curve, eq = result, None
        else:
            pred = read_predictions(predictions, items=ann.items, labels=ann.labels)
            values = pred.probabilities if pred.probabilities is not None else pred.hard
            if calibrate:
                if pred.probabilities is None:
                    raise click.UsageError("--calibrate needs probability predictions, not hard labels.")
                values = calibrate_probabilities(reference if reference is not None else matrix, values,
                                                 n_labels=ann.n_labels, matrix="raters")
            result = survey_equivalence(matrix, values, **options)
            curve, eq = result.curve, result
    except StatsInputError as exc:
        raise click.UsageError(str(exc)) from None
    if plot_path is not None:
        plot_power_curve(curve, equivalence=eq, center=scorer == "cross_entropy", path=plot_path)
    if as_json:
        payload = result.to_dict()
        payload["labels"] = [str(x) for x in ann.labels]
        click.echo(json.dumps(payload))
        return
    click.echo(f"{ann.n_items} items, {ann.n_annotators} raters, labels {list(map(str, ann.labels))}; "
               f"{combiner} + {scorer} ({curve.method}), {n_bootstrap} bootstrap samples, "
               f"{confidence:.0%} intervals")
    click.echo(result.summary())


def _expert(matrix, reference, options, as_json, labels) -> None:
    """Expert equivalence of k pool raters, printed as a table or JSON."""
    unsupported = [f"--{k.replace('_', '-')}" for k in ("max_k", "min_labels") if options[k] is not None]
    if options["raters"] != "labels":
        unsupported.append("--raters columns")
    if unsupported:
        raise click.UsageError(f"{', '.join(unsupported)} cannot be used for an expert equivalence.")
    try:
        result = expert_equivalence(matrix, reference, combiner=options["combiner"], scorer=options["scorer"],
                                    n_bootstrap=options["n_bootstrap"], confidence=options["confidence"],
                                    rng=options["rng"], n_labels=options["n_labels"], matrix="raters")
    except StatsInputError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        payload = result.to_dict()
        payload["labels"] = labels
        click.echo(json.dumps(payload))
        return
    click.echo(result.summary())
