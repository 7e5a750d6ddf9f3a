"""What starting the command line imports: each command pays only for what it uses.

``auditor --help`` imports no command module and none of the libraries the commands use,
yet lists every command with the same one-line help as when the commands are imported.
(What ``import auditor.stats`` loads is pinned beside the statistics' purity test.)

Each check runs in a fresh interpreter (this test process has imported everything) and
pins the set of modules loaded, not a time.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click
import pytest

from auditor.cli import COMMANDS, main
from auditor.cli._connect import CONNECTORS, connect
from auditor.cli._lazy import LazyCommand

#: Libraries ``auditor --help`` should not pay for.
SERVICE_STACK = {"pandas", "pyarrow", "sqlalchemy", "alembic", "flask", "werkzeug", "jinja2", "celery", "kombu",
                 "redis", "psycopg", "psycopg2", "gunicorn", "requests", "matplotlib", "statsmodels", "sklearn"}
NUMERIC = {"numpy", "scipy"}


def _loaded_after(code: str) -> set[str]:
    """Top-level names of the modules a fresh interpreter has loaded after running ``code``."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def _help_run() -> str:
    return ("from auditor.cli import main\n"
            "try:\n    main(['--help'], prog_name='auditor')\nexcept SystemExit:\n    pass\n")


def test_help_imports_no_command_module_and_no_library_they_use():
    loaded = _loaded_after(_help_run())
    assert not _tops(loaded) & (SERVICE_STACK | NUMERIC), sorted(_tops(loaded) & (SERVICE_STACK | NUMERIC))
    modules = {spec.module for spec in COMMANDS.values()}
    assert not loaded & modules, sorted(loaded & modules)


def test_a_group_help_imports_its_own_module_only():
    loaded = _loaded_after("from auditor.cli import main\n"
                           "try:\n    main(['connect', '--help'], prog_name='auditor')\nexcept SystemExit:\n    pass\n")
    assert "auditor.cli._connect" in loaded
    assert not loaded & {spec.module for spec in CONNECTORS.values()}
    assert not _tops(loaded) & (SERVICE_STACK | NUMERIC)


def _all_commands() -> list[tuple[click.Group, str, LazyCommand]]:
    return [(main, name, spec) for name, spec in COMMANDS.items()] + \
           [(connect, name, spec) for name, spec in CONNECTORS.items()]


@pytest.mark.parametrize(("group", "name", "spec"), _all_commands(), ids=lambda v: getattr(v, "module", None))
def test_each_listed_command_is_registered_by_its_module_with_the_listed_help(group, name, spec):
    importlib.import_module(spec.module)
    command = group.commands[name]
    stand_in = click.Command(name, help=spec.summary)
    for limit in range(10, 240, 3):
        assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit), (name, limit)


def test_every_command_is_in_the_table():
    for spec in [*COMMANDS.values(), *CONNECTORS.values()]:
        importlib.import_module(spec.module)
    assert set(main.commands) == set(COMMANDS)
    assert set(connect.commands) == set(CONNECTORS)
    assert all(main.commands[name].name == name for name in COMMANDS)


def test_help_lists_the_same_commands_and_help_as_with_every_module_imported():
    def help_text(first: str) -> str:
        return subprocess.run([sys.executable, "-c", first + _help_run()], capture_output=True, text=True,
                              timeout=300, check=True).stdout

    modules = sorted({spec.module for spec in COMMANDS.values()})
    lazy = help_text("")
    eager = help_text("".join(f"import {m}\n" for m in modules))
    assert lazy == eager
    assert all(f"  {name} " in lazy for name in COMMANDS)


def test_a_command_runs_from_the_lazy_group():
    out = subprocess.run([sys.executable, "-m", "auditor", "settings", "env-example"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "AUDITOR_DATABASE_URL" in out.stdout
