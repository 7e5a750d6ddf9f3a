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

__all__ = ["allow_private_option", "connect_group", "outgoing_destination"]

#: The connectors' opt-in to an address on this machine or the private network.
allow_private_option = click.option(
    "--allow-private", is_flag=True, envvar="AUDITOR_CONNECTOR_ALLOW_PRIVATE",
    help="Allow an address on this machine or the private network (loopback, private and link-local "
         "addresses, cloud metadata among them, are refused otherwise, as for outgoing webhooks).")

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


def outgoing_destination(url: str, allow_private: bool, option: str) -> None:
    """Refuse (as a bad ``option``) a connector's http(s) address that outgoing webhooks would
    refuse: loopback, private, link-local (169.254.169.254) or reserved, literal or resolved,
    unless ``--allow-private`` (``AUDITOR_CONNECTOR_ALLOW_PRIVATE``) opts in."""
    from urllib.parse import urlsplit

    if urlsplit(url).scheme not in ("http", "https"):
        return  # not an address this filter judges (an MLflow "databricks" profile)
    from auditor.webhooks.http import RefusedDestination, check_destination

    try:
        check_destination(url, allow_private=allow_private,
                          opt_in="--allow-private (or AUDITOR_CONNECTOR_ALLOW_PRIVATE=true) is given")
    except RefusedDestination as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
