"""The ``auditor`` command line: one click group, one module per family of commands."""

from __future__ import annotations

import click

from auditor import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="auditor")
def main() -> None:
    """Audit human annotations and certify model releases."""


# Each module below adds its commands to ``main`` when imported; one line per family.
_COMMAND_MODULES = [
    "certify",
    "simulate",
    "db",
    "ingest",
    "best",
    "workers",
    "web",
    "equivalence",
    "demo",
    "settings",
    "connect_mlflow",
    "connect_labelstudio",
    "plan",
]


def _register() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(f"auditor.cli.{name}")


_register()
