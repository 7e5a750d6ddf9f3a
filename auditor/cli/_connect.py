"""The ``auditor connect`` group, shared by every connector's command module.

Each connector (``auditor connect mlflow``, ``auditor connect label-studio``...) lives
in a module of its own and adds its command with ``connect_group().command(...)``; the
group is created by whichever module is imported first, so no module replaces another's
commands.
"""

from __future__ import annotations

import click

from auditor.cli import main

__all__ = ["allow_private_option", "connect_group", "outgoing_destination"]

#: The connectors' opt-in to an address on this machine or the private network.
allow_private_option = click.option(
    "--allow-private", is_flag=True, envvar="AUDITOR_CONNECTOR_ALLOW_PRIVATE",
    help="Allow an address on this machine or the private network (loopback, private and link-local "
         "addresses, cloud metadata among them, are refused otherwise, as for outgoing webhooks).")


def connect_group() -> click.Group:
    """The ``connect`` group of ``auditor`` (created on first use)."""
    group = main.commands.get("connect")
    if group is None:

        @main.group("connect")
        def connect() -> None:
            """Connect Auditor to the tools a team already runs (model registries, annotation tools)."""

        group = connect
    assert isinstance(group, click.Group)
    return group


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
