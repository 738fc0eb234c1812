"""Command line: a thin layer that parses arguments, calls one library function and prints.

Known errors become one ``error: …`` line on stderr with exit code 1; usage errors exit 2
(typer's default). The group and what commands share live in :mod:`~.base`; each command
module registers its commands on :data:`~.base.app` when imported, and this package
imports them in the order ``--help`` lists them. Add a command by writing a function in
one of them that parses its options and hands one coroutine to :func:`~.base.run` (stores
are opened with :func:`~.base.using_store` or :func:`~.base.opened`).

Commands import the library inside their function (annotation-only types under
``TYPE_CHECKING``), so ``--help`` and the commands that only read a store start without
loading the compiler, the engine or CLIPS.

Conventions every command follows: ``--db`` falls back to ``$STARGRAPH_MEM_DB``, then to
``stargraph_mem.db``; ``--version`` and shell completion (``--install-completion``,
``--show-completion``) are options of the group; ``--json`` prints one exact JSON document
(``recent`` and ``facts`` print one object per line).
"""

from __future__ import annotations

# isort: off
# Each registers its commands on ``app``; ``--help`` lists them in this order.
from stargraph_mem.cli import memory, facts, packs, consolidate, scheduler  # noqa: F401
from stargraph_mem.cli import recall, authoring, review, mcp  # noqa: F401

# isort: on
import copy
import inspect
import os
import sys
from collections.abc import Callable
from typing import Final

import typer
from typer.models import CommandInfo

from stargraph_mem.cli.base import app

__all__ = ["app", "listed", "main", "narrowed"]


HELP_ARGS: Final[tuple[list[str], ...]] = ([], ["--help"])
"""Command lines that print the group's help (no arguments: ``no_args_is_help``)."""


def narrowed(args: list[str]) -> typer.Typer:
    """The app to run for the command line ``args``: when the first names a command, an
    app holding only that command (typer builds every registered command's parameters
    before parsing, so building one saves most of a command's start-up); for the group's
    help, an app whose commands are listed but not built (:func:`listed`); otherwise, and
    while shell completion asks, the whole app. A command runs, and its help and errors
    read, the same either way."""
    if any(name.endswith("_COMPLETE") for name in os.environ):
        return app
    if args in HELP_ARGS:
        return listed()
    for info in app.registered_commands:
        name = info.name or typer.main.get_command_name(getattr(info.callback, "__name__", ""))
        if name == args[0]:
            alone = copy.copy(app)
            alone.registered_commands = [info]
            return alone
    return app


def _listed_only() -> None:
    """The callback of a command that is only listed (never run: see :func:`listed`)."""


def listed() -> typer.Typer:
    """The app with each command in place, its name, help and panel as registered, but
    without parameters: what the group's help shows of a command is those, so the help
    reads the same while typer reads no command's signature."""
    alone = copy.copy(app)
    alone.registered_commands = [
        replace_callback(info, _listed_only) for info in app.registered_commands
    ]
    return alone


def replace_callback(info: CommandInfo, callback: Callable[[], None]) -> CommandInfo:
    """``info`` with ``callback`` instead of its own (its name and help kept)."""
    own = info.callback
    name = info.name or typer.main.get_command_name(getattr(own, "__name__", ""))
    stub = copy.copy(info)
    stub.name = name
    stub.help = info.help if info.help is not None else inspect.getdoc(own)
    stub.callback = callback
    return stub


def main() -> None:
    """Console-script entry point (``stargraph-mem``)."""
    narrowed(sys.argv[1:])()
