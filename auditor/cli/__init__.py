"""The ``auditor`` command line: one click group, one module per family of commands.

A command's module is imported only when the command runs or shows its own help, so
``auditor --help`` and each command pay only for what they use (see :mod:`auditor.cli._lazy`).
"""

from __future__ import annotations

import click

from auditor import __version__
from auditor.cli._lazy import LazyCommand, LazyGroup


def _lazy(module: str, summary: str) -> LazyCommand:
    return LazyCommand(f"auditor.cli.{module}", summary)


# Each command: the module that adds it to ``main`` when imported, and the first sentence of
# its docstring (what ``auditor --help`` shows before the module is imported).
COMMANDS = {
    "audit": _lazy("workers", "Request an audit of a dataset and show the latest finished audit."),
    "beat": _lazy("workers", "Run Celery beat: the periodic sweep that enqueues every stale dataset's audit."),
    "best": _lazy("best", "BEST performance of the label counts in COUNTS."),
    "certify": _lazy("certify", "Certify models against the annotators of ANNOTATIONS."),
    "connect": _lazy("_connect", "Connect Auditor to the tools a team already runs (model registries, "
                                 "annotation tools)."),
    "datasets": _lazy("ingest", "Datasets: an ordered label set and its items."),
    "db": _lazy("db", "Database schema (migrations)."),
    "demo": _lazy("demo", "Set up the embedded deployment with demo data and serve the dashboards."),
    "equivalence": _lazy("equivalence", "Power curve of RATINGS and, with PREDICTIONS, the classifier's "
                                        "survey equivalence."),
    "import": _lazy("ingest", "Import annotations, predictions or gold labels (all or nothing per file)."),
    "plan": _lazy("plan", "Plan how to settle a release's verdict: the probability of certifying it with more "
                          "items, more labels per item or more labels on existing items, their cost at the "
                          "vendors' prices, and which items to relabel first."),
    "serve": _lazy("web", "Run the web app (JSON API and dashboards) with gunicorn."),
    "settings": _lazy("settings", "Environment variables (the catalog .env.example is rendered from)."),
    "simulate": _lazy("simulate", "Simulate two vendors, an expert panel, gold labels and four model releases."),
    "tokens": _lazy("web", "API tokens (stored hashed; shown once)."),
    "users": _lazy("web", "User accounts of the web UI and API."),
    "vendors": _lazy("plan", "Vendors (the names on annotators): their prices per label."),
    "worker": _lazy("workers", "Run a Celery worker that executes audits (configured from AUDITOR_* variables)."),
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="auditor")
def main() -> None:
    """Audit human annotations and certify model releases."""
