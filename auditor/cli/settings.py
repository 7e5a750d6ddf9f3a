"""``auditor settings``: the environment variables Auditor reads, and their current values."""

from __future__ import annotations

import os

import click

from auditor.cli import main


@main.group()
def settings() -> None:
    """Environment variables (the catalog .env.example is rendered from)."""


@settings.command("env-example")
def env_example() -> None:
    """Print .env.example: every variable, its default and what it does."""
    from auditor.envfile import render_env_example

    click.echo(render_env_example(), nl=False)


@settings.command("show")
def show() -> None:
    """Print each variable that is set in this environment (secrets masked)."""
    from auditor.envfile import variables

    for name, var in variables().items():
        if name in os.environ:
            value = os.environ[name]
            if "SECRET" in name or "PASSWORD" in name or "TOKEN" in name:
                value = "***"
            click.echo(f"{name}={value}    # {var.scope}")
