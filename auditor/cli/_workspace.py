"""Which workspace a command reads and writes when ``--workspace`` is not given.

In order: the ``--workspace`` option; the ``AUDITOR_WORKSPACE`` setting; the demo's
workspace when the database holds it (what ``auditor demo`` made, and what its admin
sees); otherwise ``default``. Every writing command names the workspace it wrote to.
"""

from __future__ import annotations

import click

DEMO_WORKSPACE = "demo"

WORKSPACE_HELP = ("Workspace slug (default: AUDITOR_WORKSPACE; else 'demo' when the database holds the demo "
                  "workspace; else 'default').")


def workspace_option(help_text: str = WORKSPACE_HELP):
    return click.option("--workspace", envvar="AUDITOR_WORKSPACE", default=None, show_envvar=True, help=help_text)


def resolve_workspace(session, given: str | None) -> str:
    """The workspace slug to use: ``given`` (option or setting) or the database's demo workspace or 'default'."""
    from sqlalchemy import select

    from auditor.db import Workspace
    from auditor.ingest import DEFAULT_WORKSPACE

    if given:
        return given
    if session.scalar(select(Workspace.id).where(Workspace.slug == DEMO_WORKSPACE)) is not None:
        return DEMO_WORKSPACE
    return DEFAULT_WORKSPACE
