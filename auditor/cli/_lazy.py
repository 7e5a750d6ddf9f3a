"""Click groups whose commands' modules are imported when a command is used, not before.

Every command module imports what its command needs (numpy and scipy for the statistics,
SQLAlchemy for the database, Flask, Celery...): importing them all made every ``auditor``
invocation, ``--help`` included, pay seconds of CPU for the whole stack. A
:class:`LazyGroup` knows each command's module and one-line summary from a table, lists
them in its help from that table, and imports a module the first time one of its commands
is looked up (to run it, or to show its own help).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass

import click

__all__ = ["LazyCommand", "LazyGroup"]


@dataclass(frozen=True)
class LazyCommand:
    """Where a command is defined and what ``--help`` says of it before it is imported.

    ``module`` is the module that registers the command on the group when imported;
    ``summary`` the first sentence of the command's docstring (click shortens it to the
    terminal's width the same way as the docstring itself; a test keeps the two equal).
    """

    module: str
    summary: str


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name: those registered, and those whose module is not yet
    imported (looking one of these up imports its module, which registers it).

    Names, membership and iteration never import anything, so ``name in group.commands``
    and ``sorted(group.commands)`` stay cheap."""

    def __init__(self, lazy: Mapping[str, LazyCommand]):
        self._lazy = dict(lazy)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded and name in self._lazy:
            importlib.import_module(self._lazy[name].module)
            if name not in self._loaded:
                raise LookupError(f"{self._lazy[name].module} did not register the command {name!r}")
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._loaded.pop(name, None)
        self._lazy.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._lazy, *self._loaded]))

    def __len__(self) -> int:
        return len(self._lazy.keys() | self._loaded.keys())

    def listed(self, name: str) -> click.Command:
        """The command as ``--help`` lists it: itself once imported, otherwise a stand-in
        carrying its summary (nothing is imported)."""
        if name in self._loaded:
            return self._loaded[name]
        return click.Command(name, help=self._lazy[name].summary)


class LazyGroup(click.Group):
    """A :class:`click.Group` whose commands are given as ``lazy_commands`` (name →
    :class:`LazyCommand`) and imported on first use; commands may also be added as usual."""

    def __init__(self, *args, lazy_commands: Mapping[str, LazyCommand] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        commands = LazyCommands(lazy_commands or {})
        for name, command in self.commands.items():
            commands[name] = command
        self.commands = commands

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's own listing, from the stand-ins of the commands not imported yet."""
        assert isinstance(self.commands, LazyCommands)
        listed = [(name, self.commands.listed(name)) for name in self.list_commands(ctx)]
        listed = [(name, cmd) for name, cmd in listed if not cmd.hidden]
        if not listed:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in listed)
        with formatter.section("Commands"):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in listed])
