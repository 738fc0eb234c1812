"""The command group and what every command shares: the Typer ``app`` (commands register
on it when their module is imported, see :mod:`stargraph_mem.cli`), option types, output
helpers and the mapping of known errors to one line and an exit code.

A leaf of the CLI package: it imports no command module, and nothing of the library that
would slow ``--help`` down (commands import the library inside their function).

Human-readable output passes user text through :func:`printable`, so a name cannot split
a row or send terminal escapes; ``--json`` output is exact JSON: one document on stdout,
keys sorted (:func:`echo_json`), while errors still go to stderr. Arguments that are not
valid UTF-8 are usage errors (:class:`CommandGroup`).
"""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TypeVar

import orjson
import typer
from typer._click import Context as ClickContext  # typer vendors click
from typer.core import TyperGroup

from stargraph_mem.cli.help import (
    HelpTyper,
    examples_epilog,
    load_help_formatter,
    readable_params,
)
from stargraph_mem.cli.values import plain_values
from stargraph_mem.errors import IRIssue, StargraphMemError, describe
from stargraph_mem.model.limits import LIMIT_MAX, TEMPLATE_CHARS_MAX, Limits
from stargraph_mem.model.time import NaiveTimestampError, parse_iso, utc_now, with_utc

if TYPE_CHECKING:
    from pydantic import JsonValue

    from stargraph_mem.engine.reconnect import Outage, Reconnect
    from stargraph_mem.stores.protocols import Database, EpisodeRepository

T = TypeVar("T")


# --- what is printed, and what is accepted ----------------------------------------------

_UNSAFE = (
    r"\x00-\x1f\x7f-\x9f"  # C0, DEL, C1
    r"\u2028\u2029"  # line and paragraph separators
    r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides, isolates
    r"\ud800-\udfff"  # lone surrogates
)
_CONTROLS = re.compile(f"[{_UNSAFE}]")
_CONTROLS_AND_BACKSLASH = re.compile(rf"[\\{_UNSAFE}]")
_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, backslashes: bool = True) -> str:
    """``text`` safe for one line of a terminal: control characters (C0, DEL, C1), line and
    paragraph separators, bidi controls and lone surrogates become escapes (``\\n``,
    ``\\x1b``, ``\\u202e``), and a backslash becomes ``\\\\``, so the original can be read back.

    ``backslashes=False`` leaves backslashes alone: for lines the library already rendered
    (their values may carry escapes of their own); it changes nothing in a line already made
    printable, so it is safe to apply to whole lines as well as to the values in them.
    """
    pattern = _CONTROLS_AND_BACKSLASH if backslashes else _CONTROLS
    return pattern.sub(_escape, text)


def echo_lines(lines: Sequence[str], *, err: bool = False) -> None:
    """Print lines rendered by the library, each made printable (backslashes kept)."""
    typer.echo("\n".join(printable(line, backslashes=False) for line in lines), err=err)


def echo_json(document: Any) -> None:
    """Print one JSON document on stdout: indented, keys sorted, exact (no markup, no
    escaping beyond JSON's own)."""
    option = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    typer.echo(orjson.dumps(document, option=option).decode())


def utf8_problem(value: str) -> str | None:
    """Why ``value`` is not valid UTF-8 text (``None`` when it is).

    Python decodes undecodable argv bytes to lone surrogates (U+DC80..U+DCFF).
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        if 0xDC80 <= code <= 0xDCFF:
            return f"byte 0x{code - 0xDC00:02x} at character {exc.start + 1}"
        return f"lone surrogate U+{code:04X} at character {exc.start + 1}"
    return None


def usage_fail(message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with code 2 (a usage error)."""
    typer.echo(f"error: {printable(message, backslashes=False)}", err=True)
    raise typer.Exit(2)


COMPLETION_OPTIONS = ("--install-completion", "--show-completion")
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
"""The shells typer has completion scripts for."""


class CommandGroup(TyperGroup):
    """The command group: an argument that is not valid UTF-8 text is a usage error naming
    its option, before any command runs (stored text and printed text are UTF-8).

    ``--show-completion SHELL`` and ``--install-completion SHELL`` use the shell named:
    typer's options are flags that detect the running shell and would ignore it.
    """

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        for index, arg in enumerate(args):
            problem = utf8_problem(arg)
            if problem is not None:
                usage_fail(
                    f"{self._argument_name(ctx, args, index)} is not valid UTF-8 ({problem})"
                )
        if len(args) == 2 and args[0] in COMPLETION_OPTIONS:
            self._named_shell_completion(ctx, args[0], args[1])
        return super().parse_args(ctx, args)

    def get_params(self, ctx: ClickContext) -> list[Any]:
        params = super().get_params(ctx)
        readable_params(params)
        plain_values(params)
        return params

    def format_help(self, ctx: ClickContext, formatter: Any) -> None:
        load_help_formatter()
        super().format_help(ctx, formatter)

    def _named_shell_completion(self, ctx: ClickContext, option: str, shell: str) -> None:
        """Show or install the completion script of ``shell`` (exits), as typer's options do
        for the shell they detect; an unknown shell is a usage error."""
        from typer.completion import install_callback, show_callback

        if shell not in SHELLS:
            usage_fail(f"{option}: unknown shell {shell!r} (one of {', '.join(SHELLS)})")
        name = option.removeprefix("--").replace("-", "_")
        param = next(p for p in self.params if p.name == name)
        callback = show_callback if option == "--show-completion" else install_callback
        callback(ctx, param, shell)

    def _argument_name(self, ctx: ClickContext, args: list[str], index: int) -> str:
        """The option (``--user``) or argument (``CONTENT``) ``args[index]`` is a value of."""
        command = self.get_command(ctx, args[0]) if index > 0 else None
        if command is not None:
            sub = typer.Context(command, info_name=args[0], parent=ctx, resilient_parsing=True)
            values, _, _ = command.make_parser(sub).parse_args(args=list(args[1:]))
            for param in command.get_params(sub):
                given = values.get(param.name or "")
                items = given if isinstance(given, list | tuple) else [given]
                if any(isinstance(v, str) and utf8_problem(v) for v in items):
                    if param.param_type_name == "option":
                        return max(param.opts, key=len)
                    return (param.name or "argument").upper()
        return "command" if index == 0 else f"argument {index + 1}"


app = HelpTyper(
    name="stargraph-mem",
    help="Deterministic, auditable episodic-to-semantic memory consolidation.",
    epilog=examples_epilog(""),
    cls=CommandGroup,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        from stargraph_mem import __version__

        typer.echo(f"stargraph-mem {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Options of the group itself (the commands have their own)."""


KNOWN_ERRORS: tuple[type[Exception], ...] = (StargraphMemError, sqlite3.Error, OSError)
"""Errors reported as one line and exit code 1, with pydantic's ``ValidationError`` (see
:func:`is_known`); anything else is a bug and keeps its traceback."""


def is_known(exc: BaseException) -> bool:
    """Whether ``exc`` is reported as one line (pydantic is looked at only when it is
    loaded: a ``ValidationError`` cannot come from a process that never imported it)."""
    if isinstance(exc, KNOWN_ERRORS):
        return True
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(exc, pydantic.ValidationError)


ContentLimitOption = Annotated[
    int,
    typer.Option(
        "--max-content-bytes",
        min=1,
        max=LIMIT_MAX,
        help="Refuse an episode whose content is longer (UTF-8 bytes).",
    ),
]
MetadataLimitOption = Annotated[
    int,
    typer.Option(
        "--max-metadata-bytes",
        min=1,
        max=LIMIT_MAX,
        help="Refuse an episode whose metadata JSON is longer (bytes).",
    ),
]
FactLimitOption = Annotated[
    int,
    typer.Option(
        "--max-fact-bytes",
        min=1,
        max=TEMPLATE_CHARS_MAX,
        help="Reject an episode whose delta's rendered text (reason, subject, predicate, "
        "object, payload) would be longer (UTF-8 bytes).",
    ),
]

DEFAULT_DB = "stargraph_mem.db"
DB_ENV = "STARGRAPH_MEM_DB"
"""The environment variable ``--db`` falls back to (before :data:`DEFAULT_DB`)."""

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        help=(
            "Where the memory lives: a SQLite file (a path, or sqlite:///path) or a "
            "PostgreSQL server (a postgresql:// URL)."
        ),
        envvar=DB_ENV,
        show_envvar=True,
        show_default=True,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the result as one JSON document (keys sorted).")
]
UserOption = Annotated[str, typer.Option("--user", help="User the episodes belong to.")]
ReconnectOption = Annotated[
    float,
    typer.Option(
        "--reconnect-seconds",
        min=0.0,
        help="How long to wait for a database server that went away (a restart, a "
        "failover) before giving up; the work it interrupted is redone once it is back "
        "(0: give up at once).",
    ),
]
DEFAULT_RECONNECT_SECONDS = 60.0


# --- helpers shared by every command ----------------------------------------------------


Progress = Callable[[str, int, int | None], None]
"""``progress(phase, done, total)``: what long commands report to the progress bar
(``total`` is ``None`` while unknown, e.g. reading standard input)."""


@contextmanager
def progress_bar() -> Iterator[Progress | None]:
    """A progress bar on stderr when stderr is a terminal (one row per phase); otherwise
    ``None``, so piped and captured output stays exactly as documented."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    columns = (
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with RichProgress(*columns, console=Console(stderr=True), transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield update


def fail(message: str) -> NoReturn:
    """Print ``error: message`` (made printable) on stderr and exit with code 1."""
    typer.echo(f"error: {printable(message, backslashes=False)}", err=True)
    raise typer.Exit(1)


@contextmanager
def known_errors() -> Iterator[None]:
    """Turn known errors raised inside the block into :func:`fail`."""
    try:
        yield
    except Exception as exc:
        if not is_known(exc):
            raise
        fail(describe(exc))


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one library coroutine to completion, mapping known errors to exit code 1."""
    import asyncio

    quiet_driver_logs()
    box: list[T] = []

    async def kept() -> None:
        # asyncio.run's main task returns nothing: Python 3.11 formats the finished task
        # (its result included) when it puts the SIGINT handler back, which for a report
        # of thousands of passes took seconds.
        box.append(await coro)

    with known_errors():
        asyncio.run(kept())
        return box[0]
    raise AssertionError("unreachable")  # pragma: no cover - known_errors always re-raises


def quiet_driver_logs() -> None:
    """Keep the PostgreSQL driver's own log lines (a pool dropping a dead connection) off
    stderr: commands report a lost database themselves, as one line."""
    import logging

    logger = logging.getLogger("psycopg")
    if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        logger.addHandler(logging.NullHandler())


def reconnecting(seconds: float) -> tuple[Reconnect, Callable[[Outage], None]]:
    """The reconnect policy of ``--reconnect-seconds`` and the outage report for it: one
    ``warning: database connection lost (…); reconnected after N s`` line on stderr."""
    from stargraph_mem.engine.reconnect import Reconnect

    def warn(outage: Outage) -> None:
        typer.echo(f"warning: {printable(outage.describe(), backslashes=False)}", err=True)

    return Reconnect(seconds=seconds), warn


async def using_store(
    db: str, action: Callable[[EpisodeRepository], Awaitable[T]], limits: Limits | None = None
) -> T:
    """Open the database at ``db`` with its episodes bootstrapped, run ``action``, close it."""
    async with opened(db, "memory", create=True, limits=limits) as database:
        return await action(database.memory)


@asynccontextmanager
async def opened(
    db: str,
    part: Literal["memory", "facts"],
    *,
    create: bool = False,
    limits: Limits | None = None,
) -> AsyncIterator[Database]:
    """The database at ``db`` with one repository's schema bootstrapped (the others are
    created by the first command that needs them, and a read changes nothing); unless
    ``create``, a SQLite file must exist already."""
    from stargraph_mem.stores.database import open_database

    database = open_database(db if create else existing(db), limits=limits)
    try:
        await getattr(database, part).bootstrap()
        yield database
    finally:
        await database.close()


def existing(db: str) -> str:
    """Read commands refuse to create a database: a missing SQLite file, or a PostgreSQL
    schema without a memory, is an error."""
    from stargraph_mem.stores.database import parse_database_url

    with known_errors():
        where = parse_database_url(db)
    if where.path is not None and not where.path.exists():
        fail(f"{where.path}: database file does not exist")
    if where.backend == "postgresql":
        from stargraph_mem.stores.postgres.database import holds_memory, split_url

        with known_errors():
            schema = split_url(where.url)[1]
            held = holds_memory(where.url)
        if held is False:
            fail(
                f"{where}: PostgreSQL schema {schema!r} holds no memory (put or ingest creates one)"
            )
    return db


# --- option parsing ---------------------------------------------------------------------


def parse_timestamp(value: str | None) -> datetime:
    """ISO-8601 with a UTC offset (default: now, UTC); a naive value is an error."""
    return parse_aware(value, "--timestamp") or utc_now()


def parse_aware(value: str | None, option: str) -> datetime | None:
    """An optional ISO-8601 option value that must carry a UTC offset."""
    if value is None:
        return None
    try:
        return parse_iso(value)
    except NaiveTimestampError:
        fail(f"{option} {value!r} has no UTC offset (write e.g. {with_utc(value)})")
    except ValueError as exc:
        raise typer.BadParameter(f"not an ISO-8601 timestamp: {value!r}") from exc


def parse_meta(items: Sequence[str]) -> dict[str, JsonValue]:
    """``KEY=VALUE`` pairs; VALUE is JSON when it parses as JSON, else a plain string."""
    metadata: dict[str, JsonValue] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--meta")
        try:
            metadata[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            metadata[key] = raw
    return metadata


PackArg = Annotated[Path, typer.Argument(help="Rule pack YAML file.", dir_okay=False)]
PacksOption = Annotated[
    list[Path], typer.Option("--pack", help="Rule pack YAML (repeatable).", dir_okay=False)
]


def issue_document(issue: IRIssue) -> dict[str, Any]:
    """A pack problem as JSON-ready data (position parts are ``null`` when unknown)."""
    return {
        "file": issue.file,
        "line": issue.line,
        "col": issue.col,
        "path": issue.path,
        "rule_id": issue.rule_id,
        "severity": issue.severity,
        "message": issue.message,
    }


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns separated by two spaces (last column unpadded); every cell is
    made :func:`printable`, so a value cannot split or shift a row."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in rows
    ]
