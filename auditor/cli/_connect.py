"""The ``auditor connect`` group, shared by every connector's command module.

Each connector (``auditor connect mlflow``, ``auditor connect label-studio``...) lives
in a module of its own, listed below, and adds its command with
``connect_group().command(...)``; a connector's module is imported only when its command
is used.
"""

from __future__ import annotations

import click

from auditor.cli import main
from auditor.cli._lazy import LazyCommand, LazyGroup

__all__ = ["connect_group"]

CONNECTORS = {
    "label-studio": LazyCommand("auditor.cli.connect_labelstudio",
                                "Connect a Label Studio project to a dataset: webhooks in, and a pull sync now "
                                "and on schedule."),
    "mlflow": LazyCommand("auditor.cli.connect_mlflow",
                          "Connect an MLflow registered model to a dataset and import its versions' predictions."),
}


@main.group("connect", cls=LazyGroup, lazy_commands=CONNECTORS)
def connect() -> None:
    """Connect Auditor to the tools a team already runs (model registries, annotation tools)."""


def connect_group() -> click.Group:
    """The ``connect`` group of ``auditor``."""
    return connect
