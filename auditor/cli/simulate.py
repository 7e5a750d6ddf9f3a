"""``auditor simulate``: write a labeling operation with a known oracle to CSV files."""

from __future__ import annotations

import json
from pathlib import Path

import click

from auditor.cli import main
from auditor.simulate import Scenario, simulate, write_scenario


@main.command("simulate")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write annotations.csv, gold.csv, predictions-<release>.csv and oracle.json into.")
@click.option("--items", type=click.IntRange(10, 10_000_000), default=2000, show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
def simulate_command(out: Path, items: int, seed: int) -> None:
    """Simulate two vendors, an expert panel, gold labels and four model releases.

    The true label of every item is known (oracle.json), so the bounds Auditor
    reports can be checked against the accuracies they bound.
    """
    data = simulate(Scenario(n_items=items, seed=seed))
    paths = write_scenario(data, out)
    for name, path in paths.items():
        click.echo(f"{name:<18} {path}")
    summary = {k: data.oracle[k] for k in ("average_annotator_accuracy", "vendor_accuracy", "release_accuracy")}
    click.echo(json.dumps(summary, indent=1))
