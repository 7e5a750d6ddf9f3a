"""The ``auditor connect`` group, shared by every connector's command module.

Each connector (``auditor connect mlflow``, ``auditor connect label-studio``...) lives
in a module of its own and adds its command with ``connect_group().command(...)``; the
group is created by whichever module is imported first, so no module replaces another's
commands.
"""

from __future__ import annotations

import click

from auditor.cli import main

__all__ = ["connect_group"]


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
