"""``auditor db``: create or migrate the configured database."""

from __future__ import annotations

import click

from auditor.cli import main


@main.group()
def db() -> None:
    """Database schema (migrations)."""


def _url(url: str | None) -> str | None:
    from auditor.db.session import normalize_url

    return None if url is None else normalize_url(url).render_as_string(hide_password=False)


@db.command()
@click.argument("revision", default="head")
@click.option("--url", envvar="AUDITOR_DATABASE_URL", help="Database URL (default: AUDITOR_DATABASE_URL or the SQLite file).")
def upgrade(revision: str, url: str | None) -> None:
    """Migrate the database up to REVISION (default: the latest)."""
    from auditor.db import migrate

    migrate.upgrade(revision=revision, url=_url(url))
    click.echo(f"database at {revision}")


@db.command()
@click.argument("revision")
@click.option("--url", envvar="AUDITOR_DATABASE_URL", help="Database URL.")
@click.confirmation_option(prompt="Downgrading drops tables and their data. Continue?")
def downgrade(revision: str, url: str | None) -> None:
    """Migrate the database down to REVISION (``base`` = empty)."""
    from auditor.db import migrate

    migrate.downgrade(revision=revision, url=_url(url))
    click.echo(f"database at {revision}")
