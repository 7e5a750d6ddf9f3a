"""``auditor certify``: bounds, confidence and verdict for models on annotation files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import numpy as np

from auditor.cli import main
from auditor.cli._io import (
    read_annotations_and_vendors,
    read_gold,
    read_predictions,
)
from auditor.jsonable import finite
from auditor.stats import (
    StatsInputError,
    annotator_lower_bounds,
    check_assumptions,
    group_upper_bounds,
    grouped_bounds_summary,
    upper_bounds,
)
from auditor.stats.certification import (
    BOUNDS,
    PAPER_METHODS,
    CertificationResult,
    Confidence,
    UpperBounds,
    certify,
    confidence,
    lower_bound,
)
from auditor.stats.validation import check_probability


def _certify_on_covered(counts, ub: UpperBounds, positions, hard, *, tau: float, threshold: float, bound: str,
                        method: str) -> CertificationResult:
    """The service's rule: U on every annotated item, L on the items the model predicts that have labels.

    ``counts`` (N, L) are all items' label counts; ``positions`` the items predicted,
    ``hard`` their predicted classes. The confidence uses each bound's own item count
    and L's (``n_lower``), as the audit does.
    """
    covered = counts[positions]
    labeled = covered.sum(axis=1) > 0
    if not labeled.any():
        raise StatsInputError("none of the items it predicts has a human label.")
    if method not in PAPER_METHODS:
        # The variance-adaptive verdicts pair each item's X with its agreement: U and L on
        # the predicted items that have labels, in the order they first appear in the file.
        order = np.argsort(positions[labeled], kind="stable")
        return certify(covered[labeled][order], hard[labeled][order], tau=tau, threshold=threshold, bound=bound,
                       method=method)
    lb = lower_bound(covered[labeled], hard[labeled])
    confs = {}
    for b in BOUNDS:
        u = ub.value(b)
        for m in PAPER_METHODS:
            confs[(b, m)] = (Confidence(math.nan, math.nan, math.nan, m, lb.value, u, 0, lb.n_items, float(tau))
                             if math.isnan(u) else confidence(lb.value, u, ub.n(b), n_lower=lb.n_items, tau=tau,
                                                              method=m))
    chosen = confs[(bound, method)].score
    return CertificationResult(upper=ub, lower=lb, confidences=confs,
                               certified=bool(chosen >= threshold) if not math.isnan(chosen) else False,
                               bound=bound, method=method, threshold=threshold, tau=float(tau))


@main.command("certify")
@click.argument("annotations", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("predictions", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--labels", help="Ordered label set, comma-separated (default: the labels seen, sorted).")
@click.option("--tau", type=float, default=0.0, show_default=True, help="Margin the model must win by.")
@click.option("--threshold", type=float, default=0.95, show_default=True, help="Confidence for the verdict.")
@click.option("--bound", type=click.Choice(["theoretical", "empirical"]), default="theoretical", show_default=True,
              help="Upper bound the verdict uses: U_t (rigorous) or U_e (the paper's practice).")
@click.option("--method", type=click.Choice(["oms", "hms", "bernstein", "anytime", "anytime-fan"]), default="oms",
              show_default=True,
              help="oms/hms: the paper's Theorem 7; bernstein: its variance-adaptive form (both for one look "
                   "at a fixed number of items); anytime: valid at every prefix, items in the order they "
                   "first appear in ANNOTATIONS (anytime-fan: its earlier, weaker form).")
@click.option("--gold", "gold_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Gold labels (item_id,label) to check the bounds' assumptions on.")
@click.option("--annotators", "show_annotators", is_flag=True, help="Also list per-annotator lower bounds.")
@click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON.")
def certify_command(annotations, predictions, labels, tau, threshold, bound, method, gold_path, show_annotators,
                    as_json):
    """Certify models against the annotators of ANNOTATIONS.

    ANNOTATIONS is a long file (item_id, annotator_id, label[, vendor]) or a wide CSV
    (item_id, then one column per rater). Each PREDICTIONS file (item_id and label, or
    one probability column per label) is one model, named after the file.

    A model need not predict every item (the service's rule): the upper bounds use
    every annotated item, L the items the model predicts that have labels, and the
    output says how many items each L rests on. Predictions for items without
    annotations are ignored (and counted).
    """
    label_list = [x.strip() for x in labels.split(",")] if labels else None
    ann, groups = read_annotations_and_vendors(annotations, labels=label_list)
    try:
        threshold = check_probability(threshold, name="threshold")
        counts = ann.counts()
        ub = upper_bounds(counts)
        all_counts = np.asarray(counts.counts)
        models = {}
        hard = {}
        coverage = {}
        for path in predictions:
            preds = read_predictions(path, items=tuple(map(str, ann.items)), labels=ann.labels, partial=True)
            try:
                models[path.stem] = _certify_on_covered(all_counts, ub, preds.positions, preds.labels_hard, tau=tau,
                                                        threshold=threshold, bound=bound, method=method)
            except StatsInputError as exc:
                raise StatsInputError(f"{path}: {exc}") from None
            coverage[path.stem] = {"n_predicted": int(preds.positions.size), "n_ignored": preds.n_ignored}
            if preds.positions.size == ann.n_items:
                hard[path.stem] = preds.labels_hard
        vendors = group_upper_bounds(ann, groups) if groups else {}
        per_annotator = annotator_lower_bounds(ann) if (show_annotators or as_json) else None
        assumptions = None
        if gold_path is not None:
            gold = read_gold(gold_path, [str(x) for x in ann.labels])
            gold = {item: gold[str(item)] for item in ann.items if str(item) in gold}
            assumptions = check_assumptions(ann, gold, predictions=hard)
    except StatsInputError as exc:
        raise click.UsageError(str(exc)) from None

    if as_json:
        out = {
            "labels": [str(x) for x in ann.labels],
            "n_items": ann.n_items,
            "n_annotators": ann.n_annotators,
            "n_annotations": len(ann),
            "upper": {"u_t": ub.theoretical, "u_e": finite(ub.empirical),
                      "n_items": ub.n_items, "n_items_empirical": ub.n_items_empirical},
            "models": {name: {**res.to_dict(), **coverage[name]} for name, res in models.items()},
            "vendors": {str(v): {"u_t": u.theoretical, "u_e": finite(u.empirical),
                                 "n_items": u.n_items} for v, u in vendors.items()},
            "annotators": [dict(r, annotator=str(r["annotator"])) for r in per_annotator.to_records()],
            "assumptions": assumptions.to_dict() if assumptions else None,
        }
        click.echo(json.dumps(out, indent=2))
        return

    click.echo(f"{ann.n_items} items, {ann.n_annotators} annotators, {len(ann)} labels; "
               f"classes: {', '.join(map(str, ann.labels))}")
    click.echo(ub.summary())
    if vendors:
        click.echo("\n" + grouped_bounds_summary(vendors))
    for name, res in models.items():
        click.echo("\n" + res.summary(name))
    if models:
        for name, cov in coverage.items():
            if cov["n_predicted"] < ann.n_items or cov["n_ignored"]:
                click.echo(f"{name}: predicts {cov['n_predicted']} of the {ann.n_items} annotated items; L rests on "
                           f"{models[name].lower.n_items} of them, U_t on all {ub.n_items}"
                           + (f"; {cov['n_ignored']} prediction(s) for items without annotations ignored"
                              if cov["n_ignored"] else ""))
    if show_annotators and per_annotator is not None:
        click.echo("\n" + per_annotator.summary())
    if assumptions is not None:
        click.echo("\n" + assumptions.summary())
