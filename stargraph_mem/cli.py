"""Command line: a thin layer that parses arguments, calls one library function and prints.

Known errors become one ``error: …`` line on stderr with exit code 1; usage errors exit 2
(typer's default). Add a command by writing a function that parses its options and hands
one coroutine to :func:`run` (stores are opened with :func:`using_store`).

Commands import the library inside their function (annotation-only types under
``TYPE_CHECKING``), so ``--help`` and the commands that only read a store start without
loading the compiler, the engine or CLIPS.

Human-readable output passes user text through :func:`printable`, so a name cannot split
a row or send terminal escapes; ``--json`` output is exact JSON: one document on stdout,
keys sorted (:func:`echo_json`; ``recent`` and ``facts`` print one object per line), while
errors still go to stderr. Arguments that are not valid UTF-8 are usage errors
(:class:`CommandGroup`).

Conventions every command follows: ``--db`` falls back to ``$STARGRAPH_MEM_DB``, then to
``stargraph_mem.db``; ``--version`` and shell completion (``--install-completion``,
``--show-completion``) are options of the group.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, Literal, NoReturn, TypeVar

import orjson
import typer
from pydantic import ValidationError
from typer._click import Context as ClickContext  # typer vendors click
from typer.core import TyperGroup

from stargraph_mem.authoring.schemas import SCHEMA_DIR
from stargraph_mem.cli_help import HelpTyper, examples_epilog, readable_params
from stargraph_mem.errors import DuplicateEpisodeError, IRIssue, LimitError, StargraphMemError
from stargraph_mem.ir.operators import with_readme_table
from stargraph_mem.model.canonical import default_episode_id
from stargraph_mem.model.limits import (
    DEFAULT_CONTENT_BYTES,
    DEFAULT_FACT_BYTES,
    DEFAULT_LIMITS,
    DEFAULT_METADATA_BYTES,
    LIMIT_MAX,
    TEMPLATE_CHARS_MAX,
    Limits,
)
from stargraph_mem.model.time import NaiveTimestampError, parse_iso, utc_now

if TYPE_CHECKING:
    from pydantic import JsonValue

    from stargraph_mem.engine.reconnect import Outage, Reconnect
    from stargraph_mem.engine.report import PassReport
    from stargraph_mem.engine.scheduler import ConsolidationReport
    from stargraph_mem.model.cadence import Cadence
    from stargraph_mem.model.episodes import Episode
    from stargraph_mem.model.facts import Fact, FactHit
    from stargraph_mem.stores.fact import Explanation
    from stargraph_mem.stores.protocols import Database, EpisodeRepository, FactRepository

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
        return params

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


KNOWN_ERRORS: tuple[type[Exception], ...] = (
    StargraphMemError,
    ValidationError,
    sqlite3.Error,
    OSError,
)
"""Errors reported as one line and exit code 1; anything else is a bug and keeps its traceback."""

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


def describe(exc: Exception) -> str:
    """One line for a known error (pydantic errors as ``field: message; …``)."""
    if isinstance(exc, ValidationError):
        text = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or exc.title}: {error['msg']}"
            for error in exc.errors()
        )
    else:
        text = str(exc)
    return " ".join(text.splitlines())


def fail(message: str) -> NoReturn:
    """Print ``error: message`` (made printable) on stderr and exit with code 1."""
    typer.echo(f"error: {printable(message, backslashes=False)}", err=True)
    raise typer.Exit(1)


@contextmanager
def known_errors() -> Iterator[None]:
    """Turn known errors raised inside the block into :func:`fail`."""
    try:
        yield
    except KNOWN_ERRORS as exc:
        fail(describe(exc))


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one library coroutine to completion, mapping known errors to exit code 1."""
    import asyncio

    quiet_driver_logs()
    with known_errors():
        return asyncio.run(coro)
    raise AssertionError("unreachable")  # pragma: no cover - known_errors always re-raises


def quiet_driver_logs() -> None:
    """Keep the PostgreSQL driver's own log lines (a pool dropping a dead connection) off
    stderr: commands report a lost database themselves, as one line."""
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
    """Read commands refuse to create a database: a missing SQLite file is an error."""
    from stargraph_mem.stores.database import parse_database_url

    with known_errors():
        path = parse_database_url(db).path
    if path is not None and not path.exists():
        fail(f"{path}: database file does not exist")
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
        fail(f"{option} {value!r} has no UTC offset (write e.g. {value}+00:00)")
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


def episode_lines(episodes: Sequence[Episode]) -> list[str]:
    """Plain aligned columns with a header (values made :func:`printable`: a newline in the
    content shows as ``\\n``)."""
    rows: list[tuple[str, ...]] = [("TIMESTAMP", "SESSION", "AGENT", "ID", "CONTENT")]
    rows += [
        tuple(printable(v) for v in (e.timestamp.isoformat(), e.session, e.agent, e.id, e.content))
        for e in episodes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[4]]) for r in rows]


# --- commands ---------------------------------------------------------------------------


@app.command()
def put(
    content: Annotated[str, typer.Argument(help="The episode text.")],
    user: UserOption,
    session: Annotated[str, typer.Option("--session", help="Session the episode belongs to.")],
    agent: Annotated[str, typer.Option("--agent", help="Agent that observed the episode.")],
    db: DbOption = DEFAULT_DB,
    episode_id: Annotated[
        str | None,
        typer.Option("--id", help="Episode id (default: hash of content, scope and timestamp)."),
    ] = None,
    timestamp: Annotated[
        str | None,
        typer.Option("--timestamp", help="ISO-8601 time with UTC offset (default: now, UTC)."),
    ] = None,
    meta: Annotated[
        list[str] | None,
        typer.Option("--meta", help="Metadata KEY=VALUE (VALUE as JSON if it parses); repeatable."),
    ] = None,
    max_content: ContentLimitOption = DEFAULT_CONTENT_BYTES,
    max_metadata: MetadataLimitOption = DEFAULT_METADATA_BYTES,
) -> None:
    """Store one episode and print its id."""
    from stargraph_mem.model.episodes import Episode

    when = parse_timestamp(timestamp)
    metadata = parse_meta(meta or [])
    with known_errors():
        episode = Episode(
            id=episode_id or default_episode_id(content, user, session, agent, when),
            content=content,
            timestamp=when,
            user=user,
            session=session,
            agent=agent,
            metadata=metadata,
        )
    limits = Limits(content_bytes=max_content, metadata_bytes=max_metadata)

    async def put_one(store: EpisodeRepository) -> None:
        await store.put(episode, user=user, session=session, agent=agent)

    run(using_store(db, put_one, limits))
    typer.echo(printable(episode.id))


@app.command()
def recent(
    user: UserOption,
    session: Annotated[
        str | None, typer.Option("--session", help="Only this session (default: all).")
    ] = None,
    agent: Annotated[
        str | None, typer.Option("--agent", help="Only this agent (default: all).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Most episodes to show.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    db: DbOption = DEFAULT_DB,
) -> None:
    """Show a user's newest episodes; --session/--agent narrow the scope."""
    episodes = run(using_store(existing(db), lambda s: s.recent(user, session, agent, limit=limit)))
    if as_json:
        for episode in episodes:
            typer.echo(episode.model_dump_json())
    else:
        typer.echo("\n".join(episode_lines(episodes)))


# --- rule packs -------------------------------------------------------------------------

PackArg = Annotated[Path, typer.Argument(help="Rule pack YAML file.", dir_okay=False)]


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


@app.command()
def validate(
    packs: Annotated[list[Path], typer.Argument(help="Rule pack YAML files.", dir_okay=False)],
    as_json: JsonOption = False,
) -> None:
    """Check rule packs; print every problem as file:line:col: path: message (exit 1 when
    any). --json prints {"ok", "packs": [{"file", "ok", "problems": [...]}]} instead."""
    from stargraph_mem.compiler.pack import validate_file

    checked = [(pack, validate_file(pack)) for pack in packs]
    failed = any(issues for _, issues in checked)
    if as_json:
        echo_json(
            {
                "ok": not failed,
                "packs": [
                    {
                        "file": str(pack),
                        "ok": not issues,
                        "problems": [issue_document(issue) for issue in issues],
                    }
                    for pack, issues in checked
                ],
            }
        )
    else:
        for pack, issues in checked:
            for issue in issues:
                echo_lines([issue.format()], err=True)
            if not issues:
                typer.echo(f"ok: {printable(str(pack))}")
    if failed:
        raise typer.Exit(1)


@app.command(name="compile")
def compile_cmd(
    pack: PackArg,
    out_dir: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Write <pack>.clp and <pack>.manifest.json here."),
    ] = None,
    show: Annotated[bool, typer.Option("--print", help="Print the CLIPS program.")] = False,
) -> None:
    """Compile a rule pack to CLIPS (byte-identical output for identical input)."""
    from stargraph_mem.compiler.pack import compile_file

    with known_errors():
        compiled = compile_file(pack)
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / f"{compiled.name}.clp").write_text(compiled.clips, encoding="utf-8")
            manifest = orjson.dumps(
                compiled.manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
            )
            (out_dir / f"{compiled.name}.manifest.json").write_bytes(manifest + b"\n")
    if show:
        typer.echo(compiled.clips, nl=False)
        return
    typer.echo(
        f"compiled {printable(compiled.name)} {printable(compiled.pack.version)}: "
        f"{len(compiled.rules)} rules, sha256 {compiled.sha256}"
    )
    if out_dir is not None:
        typer.echo(f"wrote {printable(str(out_dir / (compiled.name + '.clp')))}")
        typer.echo(f"wrote {printable(str(out_dir / (compiled.name + '.manifest.json')))}")


class SchemaKind(StrEnum):
    """Values of ``schema --path``: what the schema describes."""

    pack = "pack"
    tests = "tests"
    episode = "episode"


@app.command()
def schema(
    check: Annotated[
        bool, typer.Option("--check", help="Compare instead of writing; exit 1 on drift.")
    ] = False,
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the schemas live.", file_okay=False)
    ] = SCHEMA_DIR,
    readme: Annotated[
        Path,
        typer.Option(
            "--readme", help="README whose operator table is regenerated.", dir_okay=False
        ),
    ] = Path("README.md"),
    path: Annotated[
        SchemaKind | None,
        typer.Option(
            "--path",
            help="Print where the installed schema of a rule pack, a pack test file or an "
            "episode line is (for an editor's yaml-language-server setting); write nothing.",
        ),
    ] = None,
) -> None:
    """Write (or --check) the JSON Schemas of rule packs, pack test files and episode
    lines, and the README's operator table."""
    from stargraph_mem.authoring.schemas import check_schemas, schema_path, write_schemas

    if path is not None:
        found = schema_path(path.value)
        if not found.exists():
            fail(f"{found}: schema file not found")
        typer.echo(printable(str(found)))
        return
    if check:
        drift = check_schemas(directory)
        for item in drift:
            typer.echo(f"{printable(str(directory / item.name))}: {item.problem}", err=True)
        stale = _readme_table(readme, write=False)
        if drift or stale:
            fail("schemas drifted; run `stargraph-mem schema` and commit the result")
        typer.echo(f"schemas up to date in {printable(str(directory))}")
        return
    for written in write_schemas(directory):
        typer.echo(f"wrote {printable(str(written))}")
    if _readme_table(readme, write=True):
        typer.echo(f"wrote the operator table in {printable(str(readme))}")


def _readme_table(readme: Path, *, write: bool) -> bool:
    """Whether the README's operator table differs from the operator table (rewrite it)."""
    if not readme.is_file():
        typer.echo(f"{printable(str(readme))}: not found; operator table skipped", err=True)
        return False
    text = readme.read_text(encoding="utf-8")
    try:
        fresh = with_readme_table(text)
    except ValueError as exc:
        fail(f"{printable(str(readme))}: {exc}")
    if fresh == text:
        return False
    if write:
        readme.write_text(fresh, encoding="utf-8")
    else:
        typer.echo(f"{printable(str(readme))}: operator table out of date", err=True)
    return True


def cadence_text(cadence: Cadence) -> str:
    """``every 10``, ``every 10 or after 1h``, ``idle 30m`` or ``cron 0 3 * * * (UTC)``."""
    from stargraph_mem.model.cadence import trigger_text

    return trigger_text(cadence) or f"cron {cadence.cron} ({cadence.tz})"


def cadence_document(cadence: Cadence) -> dict[str, Any]:
    """``{"every": 10}``, ``{"every": 10, "or_after": "1h"}``, ``{"idle": "30m"}`` or
    ``{"cron": "0 3 * * *", "tz": "UTC"}``."""
    from stargraph_mem.model.cadence import duration_text

    if cadence.every is not None:
        if cadence.or_after is not None:
            return {"every": cadence.every, "or_after": duration_text(cadence.or_after)}
        return {"every": cadence.every}
    if cadence.idle is not None:
        return {"idle": duration_text(cadence.idle)}
    return {"cron": cadence.cron, "tz": cadence.tz}


@app.command()
def info(pack: PackArg, as_json: JsonOption = False) -> None:
    """Show a pack's rules: priority, cadence, what they emit, whether they claim."""
    from stargraph_mem.compiler.pack import compile_file

    with known_errors():
        compiled = compile_file(pack)
    p = compiled.pack
    if as_json:
        echo_json(
            {
                "pack": p.pack,
                "version": p.version,
                "ir_version": p.ir_version,
                "sha256": compiled.sha256,
                "rules": [
                    {
                        "id": rule.id,
                        "priority": rule.priority,
                        "cadence": cadence_document(rule.cadence or p.defaults.cadence),
                        "emits": rule.emit.kind,
                        "claim": rule.claim,
                        "enabled": rule.enabled,
                    }
                    for rule in p.rules
                ],
            }
        )
        return
    head = f"{printable(p.pack)} {printable(p.version)} (ir_version {p.ir_version})"
    typer.echo(f"{head} sha256 {compiled.sha256}")
    rows = [("RULE", "PRIORITY", "CADENCE", "EMITS", "CLAIM", "ENABLED")]
    for rule in p.rules:
        rows.append(
            (
                rule.id,
                str(rule.priority),
                cadence_text(rule.cadence or p.defaults.cadence),
                rule.emit.kind,
                "yes" if rule.claim else "no",
                "yes" if rule.enabled else "no",
            )
        )
    typer.echo("\n".join(aligned(rows)))


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns separated by two spaces (last column unpadded); every cell is
    made :func:`printable`, so a value cannot split or shift a row."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in rows
    ]


# --- consolidation and facts ------------------------------------------------------------


def pass_document(report: PassReport) -> dict[str, Any]:
    """One pass as JSON-ready data: what :func:`report_line` and the rejected lines say
    (and ``failed``, the reason, for a partition quarantined for this run)."""
    p = report.partition
    document: dict[str, Any] = {
        "pack": report.pack,
        "pack_hash": report.pack_hash,
        "user": p.user,
        "agent": p.agent,
        "now": report.now.isoformat(),
        "rules": list(report.rules),
        "sweep": report.sweep,
        "episodes": report.episodes,
        "not_yet_due": report.not_yet_due,
        "counts": report.counts,
        "rejected": [
            {"episode_id": r.episode_id, "rule_id": r.rule_id, "reason": r.reason}
            for r in report.rejected
        ],
        "gated": list(report.gated),
        "quarantined": [
            {
                "seq": q.seq,
                "episode_id": q.episode_id,
                "partition_key": q.partition_key,
                "reason": q.reason,
            }
            for q in report.quarantined
        ],
        "applied": report.applied,
    }
    if report.failed is not None:
        document["failed"] = report.failed
    return document


def failure_line(report: PassReport) -> str:
    """``error: <pack> user=… agent=…: pass failed, nothing applied: …`` for a partition
    quarantined for this run."""
    p = report.partition
    return (
        f"error: {printable(report.pack)} user={printable(p.user)} agent={printable(p.agent)}: "
        f"{printable(report.failed or '')}"
    )


def exit_if_failed(report: ConsolidationReport) -> None:
    """Exit with code 1 (after everything else was printed) when a partition was
    quarantined: every other partition was consolidated."""
    failed = len({(r.pack, r.partition) for r in report.failed})
    if failed:
        typer.echo(
            f"error: {failed} partition{'s' if failed > 1 else ''} quarantined for this run "
            "(see above); every other partition was consolidated",
            err=True,
        )
        raise typer.Exit(1)


def report_line(report: PassReport) -> str:
    """One summary line per pass."""
    kinds = " ".join(f"{kind}={n}" for kind, n in report.counts.items())
    p = report.partition
    return (
        f"{printable(report.pack)} user={printable(p.user)} agent={printable(p.agent)} "
        f"episodes={report.episodes} {kinds} "
        f"rejected={len(report.rejected)} gated={len(report.gated)}"
        + (f" quarantined={len(report.quarantined)}" if report.quarantined else "")
        + (f" not_yet_due={report.not_yet_due}" if report.not_yet_due else "")
        + (f" sweep={','.join(report.rules)}" if report.sweep else "")
    )


class WorkerChoice(StrEnum):
    """Values of ``consolidate --worker``."""

    auto = "auto"
    always = "always"
    never = "never"


@app.command()
def consolidate(
    packs: Annotated[
        list[Path], typer.Option("--pack", help="Rule pack YAML (repeatable).", dir_okay=False)
    ],
    db: DbOption = DEFAULT_DB,
    user: Annotated[str | None, typer.Option("--user", help="Only this user.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    now: Annotated[
        str | None, typer.Option("--now", help="Pass time, ISO-8601 with offset (default: now).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the deltas as JSON lines; apply nothing.")
    ] = False,
    trace: Annotated[
        bool, typer.Option("--trace", help="Show each delta's rule, bindings, episodes, facts.")
    ] = False,
    coverage: Annotated[
        bool, typer.Option("--coverage", help="Show how often each rule fired.")
    ] = False,
    worker: Annotated[
        WorkerChoice,
        typer.Option(
            "--worker",
            help="Compute passes in a worker process while this one commits: auto (for a "
            "backlog of several passes), always or never.",
        ),
    ] = WorkerChoice.auto,
    reconnect_seconds: ReconnectOption = DEFAULT_RECONNECT_SECONDS,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON document: the passes (with their deltas under --dry-run, "
            "trace lines under --trace) and the coverage under --coverage.",
        ),
    ] = False,
    max_fact: FactLimitOption = DEFAULT_FACT_BYTES,
) -> None:
    """Consolidate new episodes into facts with the given packs.

    A pass at time T (--now, default: the current time) consumes only episodes stamped at
    or before T, in timestamp order; episodes stamped later stay pending ("not yet due",
    counted in the output and as not_yet_due under --json) and are consumed by the first
    later pass whose time reaches them.

    A progress bar (episodes read by passes) shows on stderr when it is a terminal.

    When the database server goes away mid-run (a restart, a failover), the run waits for
    it (--reconnect-seconds), says so on stderr and goes on; no pass is applied twice.
    """
    from stargraph_mem.engine.api import Consolidator

    when = parse_aware(now, "--now")
    policy, warn = reconnecting(reconnect_seconds)

    async def action(
        bar: Progress | None,
    ) -> tuple[ConsolidationReport, cli_authoring.Extras]:
        def progress(done: int, total: int) -> None:
            if bar is not None:
                bar("consolidate", done, total)

        async with Consolidator.open(
            existing(db),
            packs,
            keep_deltas=dry_run or trace,
            worker=worker.value,
            reconnect=policy,
            on_outage=warn,
            limits=Limits(fact_bytes=max_fact),
        ) as mem:
            report = await mem.consolidate(
                user=user, agent=agent, now=when, dry_run=dry_run, progress=progress
            )
            return report, await cli_authoring.extras(mem, report.passes, trace, coverage)

    with progress_bar() as bar:
        result, extra = run(action(bar))
    reports = result.passes
    if as_json:
        passes = []
        for report, traced in zip(reports, extra.traces, strict=True):
            doc = pass_document(report)
            if dry_run:
                doc["deltas"] = [delta.model_dump(mode="json") for delta in report.deltas]
            if trace:
                doc["trace"] = traced
            passes.append(doc)
        document: dict[str, Any] = {
            "dry_run": dry_run,
            "now": result.now.isoformat(),
            "not_yet_due": result.not_yet_due,
            "passes": passes,
        }
        if coverage:
            document["coverage"] = [cli_authoring.coverage_document(c) for c in extra.coverages]
        echo_json(document)
        exit_if_failed(result)
        return
    for report, traced in zip(reports, extra.traces, strict=True):
        if report.failed is not None:
            typer.echo(failure_line(report), err=True)
            continue
        if dry_run:
            for delta in report.deltas:
                typer.echo(delta.model_dump_json())
        for line in traced:
            echo_lines([line], err=dry_run)
        for rejected in report.rejected:
            typer.echo(
                f"rejected {printable(rejected.episode_id or '-')} "
                f"({printable(rejected.rule_id or 'metadata')}): {printable(rejected.reason)}",
                err=True,
            )
        suffix = " (dry run: nothing applied)" if dry_run else ""
        typer.echo(report_line(report) + suffix, err=dry_run)
    for line in extra.coverage:
        echo_lines([line], err=dry_run)
    if result.not_yet_due:
        typer.echo(
            f"not yet due: {result.not_yet_due} episode(s) stamped after "
            f"{result.now.isoformat()} stay pending for a later pass",
            err=dry_run,
        )
    exit_if_failed(result)


def parse_confidence(value: float | None) -> float | None:
    """``--min-confidence``: a number from 0 to 1 (NaN and infinities are refused)."""
    if value is not None and not 0.0 <= value <= 1.0:  # False for NaN as well
        raise typer.BadParameter(f"must be a number from 0 to 1, got {value:g}")
    return value


def parse_limit(value: int) -> int:
    """``--limit``: an integer from 1 to the most hits a search returns (1000)."""
    from stargraph_mem.stores.sqlite_search import MAX_LIMIT

    if not 1 <= value <= MAX_LIMIT:
        raise typer.BadParameter(f"must be an integer from 1 to {MAX_LIMIT}, got {value}")
    return value


def fact_order(fact: Fact) -> tuple[str, str, str, str, str, str]:
    """How ``facts`` sorts: user, agent, subject, predicate, object, then id."""
    return (fact.user, fact.agent, fact.subject, fact.predicate, fact.object, fact.id)


@app.command()
def facts(
    db: DbOption = DEFAULT_DB,
    user: Annotated[str | None, typer.Option("--user", help="Only this user.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this agent.")] = None,
    subject: Annotated[str | None, typer.Option("--subject", help="Only this subject.")] = None,
    predicate: Annotated[
        str | None, typer.Option("--predicate", help="Only this predicate.")
    ] = None,
    min_confidence: Annotated[
        float | None,
        typer.Option(
            "--min-confidence",
            callback=parse_confidence,
            metavar="0..1",
            help="Only facts with at least this confidence (a number from 0 to 1).",
        ),
    ] = None,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="What was believed at this ISO-8601 time.")
    ] = None,
    search: Annotated[
        str | None,
        typer.Option(
            "--search",
            metavar="WORDS",
            help="Rank current facts by these words (any of them, in subject, predicate, "
            "object or payload; case and accents ignored), best first, with a SCORE column.",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            metavar="1..1000",
            callback=parse_limit,
            help="With --search: at most this many facts.",
        ),
    ] = 10,
    touch: Annotated[
        bool,
        typer.Option(
            "--touch",
            help="With --search: count an access to each fact shown, as an agent's search "
            "does (by default this command reads without a trace).",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="One JSON object per line (with --search: {fact, score} per line)."
        ),
    ] = False,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help="Facts with this status instead of the current ones: current, superseded, "
            "deleted, expired, archived, invalidated, or all.",
        ),
    ] = None,
) -> None:
    """List current facts (or those current at --as-of, or those with --status), sorted by
    user, agent, subject, predicate, object and id; or search them with --search."""
    from stargraph_mem.model.deltas import FACT_STATUSES
    from stargraph_mem.model.facts import FactPattern

    when = parse_aware(as_of, "--as-of")
    if search is None and (touch or limit != 10):
        usage_fail("--limit and --touch go with --search")
    if search is not None and when is not None:
        usage_fail("--search finds current facts; it cannot be combined with --as-of")
    if status is not None and (search is not None or when is not None):
        usage_fail("--status cannot be combined with --search or --as-of")
    if status is not None and status not in (*FACT_STATUSES, "all"):
        usage_fail(f"--status must be one of {', '.join(FACT_STATUSES)} or all, got {status!r}")
    if search is not None:
        search_facts(
            db, search, user, agent, subject, predicate, min_confidence, limit, touch, as_json
        )
        return

    async def action() -> list[Fact]:
        async with opened(db, "facts") as database:
            store = database.facts
            pattern = FactPattern(
                user=user,
                agent=agent,
                subject=subject,
                predicate=predicate,
                min_confidence=min_confidence,
                status=status,
            )
            if when is not None:
                return await store.as_of(when, pattern)
            return await store.query(pattern)

    found = sorted(run(action()), key=fact_order)
    if as_json:
        for fact in found:
            typer.echo(fact.model_dump_json())
        return
    head = ["ID", "USER", "AGENT", "SUBJECT", "PREDICATE", "CONFIDENCE", "OBJECT"]
    shown = status not in (None, "current")
    rows: list[list[str]] = [[*head[:-1], "STATUS", "OBJECT"] if shown else head]
    for f in found:
        what = object_column(f)
        row = [f.id, f.user, f.agent, f.subject, f.predicate, f"{f.confidence:g}", what]
        rows.append([*row[:-1], f.status, what] if shown else row)
    typer.echo("\n".join(aligned(rows)))


def object_column(fact: Fact) -> str:
    """A table's OBJECT cell: the object, or a payload-only fact's payload as JSON."""
    if fact.has_triple:
        return fact.object
    return orjson.dumps(fact.payload).decode()


def search_facts(
    db: str,
    query: str,
    user: str | None,
    agent: str | None,
    subject: str | None,
    predicate: str | None,
    min_confidence: float | None,
    limit: int,
    touch: bool,
    as_json: bool,
) -> None:
    """``facts --search``: ranked hits as a table (with SCORE) or JSON lines."""

    async def action() -> list[FactHit]:
        async with opened(db, "facts") as database:
            return await database.facts.search(
                query,
                user=user,
                agent=agent,
                subject=subject,
                predicate=predicate,
                min_confidence=min_confidence,
                limit=limit,
                touch=touch,
            )

    hits = run(action())
    if as_json:
        for hit in hits:
            typer.echo(hit.model_dump_json())
        return
    rows = [("ID", "USER", "AGENT", "SUBJECT", "PREDICATE", "CONFIDENCE", "SCORE", "OBJECT")]
    rows += [
        (
            h.fact.id,
            h.fact.user,
            h.fact.agent,
            h.fact.subject,
            h.fact.predicate,
            f"{h.fact.confidence:g}",
            f"{h.score:.3f}",
            object_column(h.fact),
        )
        for h in hits
    ]
    typer.echo("\n".join(aligned(rows)))


@app.command("copy")
def copy_command(
    source: Annotated[
        str,
        typer.Option(
            "--from",
            help="The memory to copy: a SQLite file (path or sqlite:///path) or postgresql://…",
            show_default=False,
        ),
    ],
    target: Annotated[
        str,
        typer.Option(
            "--to",
            help="An empty database to copy it into (a new SQLite file is created).",
            show_default=False,
        ),
    ],
    as_json: JsonOption = False,
) -> None:
    """Copy a whole memory into an empty database, SQLite to PostgreSQL or back: episodes,
    facts with their history and lineage, audit, watermarks, rejections and schedule.

    All or nothing: the rows go in one transaction of the target, and every table is
    compared with the source (row counts and a digest of its rows) before it commits.
    """
    from stargraph_mem.stores.copy import copy_database

    report = run(copy_database(source, target))
    if as_json:
        echo_json({"source": report.source, "target": report.target, "rows": report.rows})
        return
    typer.echo(f"copied {report.source} → {report.target}")
    rows = [("TABLE", "ROWS")] + [(name, str(n)) for name, n in report.rows.items()]
    typer.echo("\n".join(aligned(rows)))


@app.command()
def explain(
    fact_id: Annotated[str, typer.Argument(help="Fact id (from `facts`).")],
    db: DbOption = DEFAULT_DB,
    as_json: Annotated[
        bool, typer.Option("--json", help="The whole explanation as one JSON document.")
    ] = False,
) -> None:
    """Why a fact exists: rule, bindings, source episodes, what it replaced and what followed."""
    from stargraph_mem.authoring.trace import explanation_lines

    async def action() -> Explanation:
        async with opened(db, "facts") as database:
            return await database.facts.explain(fact_id)

    why = run(action())
    if as_json:
        echo_json(why.model_dump(mode="json"))
        return
    echo_lines(explanation_lines(why))


FactIdArg = Annotated[str, typer.Argument(help="Fact id (from `facts`).")]
ReasonOption = Annotated[
    str, typer.Option("--reason", help="Why, kept in the fact's status history.")
]


def fact_write(db: str, call: Callable[[FactRepository], Awaitable[T]]) -> T:
    """Run one fact-store call on the existing database at ``db``."""

    async def action() -> T:
        async with opened(db, "facts") as database:
            return await call(database.facts)

    return run(action())


@app.command()
def pin(fact_id: FactIdArg, db: DbOption = DEFAULT_DB, reason: ReasonOption = "") -> None:
    """Pin a current fact: sweeps leave pinned facts alone (unless a rule tests pinned);
    the pin carries to the facts that replace it."""
    changed = fact_write(db, lambda store: store.pin(fact_id, reason=reason))
    typer.echo(f"pinned {fact_id}" if changed else f"{fact_id} is already pinned")


@app.command()
def unpin(fact_id: FactIdArg, db: DbOption = DEFAULT_DB, reason: ReasonOption = "") -> None:
    """Take the pin off a current fact."""
    changed = fact_write(db, lambda store: store.unpin(fact_id, reason=reason))
    typer.echo(f"unpinned {fact_id}" if changed else f"{fact_id} is not pinned")


@app.command()
def restore(fact_id: FactIdArg, db: DbOption = DEFAULT_DB, reason: ReasonOption = "") -> None:
    """Make an archived fact current again: a new fact with the same statement, payload
    and confidence, whose predecessor is the archived one (which stays archived)."""
    fact = fact_write(db, lambda store: store.restore(fact_id, reason=reason))
    typer.echo(f"restored {fact_id} as {fact.id}")


@app.command()
def history(fact_id: FactIdArg, db: DbOption = DEFAULT_DB, as_json: JsonOption = False) -> None:
    """A fact's status history, oldest first: created, pinned, unpinned, its closing status
    (superseded, deleted, expired, archived, invalidated), restored."""
    from stargraph_mem.authoring.trace import status_event_text

    events = fact_write(db, lambda store: store.status_history(fact_id))
    if as_json:
        echo_json([event.model_dump(mode="json") for event in events])
        return
    echo_lines([status_event_text(event) for event in events])


INGEST_CHUNK = 5_000
"""Lines ``ingest`` validates and then inserts at a time (one ``executemany`` each)."""
STDIN_NAME = "<stdin>"
"""What ``ingest -`` calls its input in messages (``<stdin>:3: …``)."""


def episode_line(line: bytes) -> Episode | str:
    """The episode one JSON line holds, or what is wrong with it (one line of text): a line
    that is not JSON at all is described in plain words (:func:`json_problem`)."""
    from stargraph_mem.model.episodes import Episode

    try:
        return Episode.model_validate_json(line)
    except ValidationError as exc:
        if any(error["type"] == "json_invalid" for error in exc.errors()):
            return json_problem(line, exc)
        return describe(exc)
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text ({exc.reason} at byte {exc.start})"


_JSON_EXPECTED = {
    "Expecting value": "a value",
    "Expecting property name enclosed in double quotes": 'a property name in "double quotes"',
    "Expecting ':' delimiter": "':' after a property name",
    "Expecting ',' delimiter": "',' or a closing bracket",
}
"""What the standard library's JSON messages say was expected, in plain words."""


def json_problem(line: bytes, exc: ValidationError) -> str:
    """``not valid JSON: …`` in plain words for a line the JSON parser refused: where it
    stops and why (``the line ends in the middle of a string (truncated?)``, ``unexpected
    character 'x' at column 12``), columns counted in characters from 1."""
    try:
        text = line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as bad:
        return f"not UTF-8 text ({bad.reason} at byte {bad.start})"
    import json

    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return f"not valid JSON: {_json_reason(error, text)}"
    except RecursionError:
        return "not valid JSON: nested too deeply"
    # the standard library accepts what the episode parser does not (lone surrogates): its
    # own words, with the column only (the line is the input's)
    first = exc.errors()[0]
    detail = str((first.get("ctx") or {}).get("error", ""))
    detail = re.sub(r" at line \d+ column (\d+)$", r" at column \1", detail)
    return f"not valid JSON: {detail}" if detail else "not valid JSON"


def _json_reason(error: Any, text: str) -> str:
    """Plain words for one :class:`json.JSONDecodeError` of the one-line ``text``."""
    pos, column = error.pos, error.pos + 1
    found = text[pos] if pos < len(text) else None
    shown = f"{found!r}" if found is not None and found.isprintable() else None
    message: str = error.msg
    if message.startswith("Unterminated string"):
        return "the line ends in the middle of a string (truncated?)"
    if found is None and message in _JSON_EXPECTED:
        return "the line ends before the JSON value is complete (truncated?)"
    if message.startswith("Invalid control character"):
        return f"control character U+{ord(text[pos]):04X} inside a string at column {column}"
    if message.startswith("Invalid \\"):
        return f"invalid escape sequence in a string at column {column}"
    if message == "Extra data":
        return f"unexpected text after the JSON value at column {column}"
    what = shown or f"U+{ord(text[pos]):04X}" if found is not None else "the end of the line"
    if message == "Expecting value":
        return f"unexpected character {what} at column {column}"
    expected = _JSON_EXPECTED.get(message)
    if expected is not None:
        return f"expected {expected} at column {column}, found {what}"
    return f"{message[:1].lower()}{message[1:]} at column {column}"


@dataclass
class Chunk:
    """Up to :data:`INGEST_CHUNK` lines of input: the good episodes with their line numbers
    (and the lines themselves), the bad lines' numbers, problems and text, and the input's
    bytes read so far."""

    episodes: list[Episode] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)
    texts: dict[int, bytes] = field(default_factory=dict)
    """Line number → the line as read, for every line of the chunk that is not blank."""
    read: int = 0


def line_bytes(limits: Limits) -> int:
    """The longest JSON line ``ingest`` reads whole: an episode at ``limits`` whose content
    is all escaped (``\\u0001`` is 6 bytes for 1), plus its metadata and 64 KiB of fields."""
    return 6 * limits.content_bytes + limits.metadata_bytes + (64 << 10)


def input_lines(source: BinaryIO, most: int) -> Iterator[bytes | int]:
    """The lines of ``source``; a line longer than ``most`` bytes is read in pieces and
    given as its length (never held whole)."""
    while line := source.readline(most + 1):
        if len(line) <= most or line.endswith(b"\n"):
            yield line
            continue
        length = len(line)
        while piece := source.readline(1 << 20):
            length += len(piece)
            if piece.endswith(b"\n"):
                break
        yield length


def read_chunks(
    source: BinaryIO, size: int | None = None, limits: Limits = DEFAULT_LIMITS
) -> Iterator[Chunk]:
    """Validate JSON lines ``size`` (default :data:`INGEST_CHUNK`) at a time; blank lines
    are skipped. Only one chunk is held at a time, so memory does not grow with the input;
    a line no episode within ``limits`` could fill is refused unread (:func:`line_bytes`)."""
    size = size or INGEST_CHUNK
    most = line_bytes(limits)
    chunk, read = Chunk(), 0
    for number, line in enumerate(input_lines(source, most), start=1):
        if isinstance(line, int):
            read += line
            chunk.problems.append(
                (
                    number,
                    f"line is {line:,} bytes, longer than any episode within the limits "
                    f"can be ({most:,} bytes: content_bytes {limits.content_bytes:,}, "
                    f"metadata_bytes {limits.metadata_bytes:,})",
                )
            )
        else:
            read += len(line)
        if isinstance(line, bytes) and line.strip():
            chunk.texts[number] = line
            parsed = episode_line(line)
            if isinstance(parsed, str):
                chunk.problems.append((number, parsed))
            else:
                chunk.episodes.append(parsed)
                chunk.numbers.append(number)
        if number % size == 0:
            chunk.read = read
            yield chunk
            chunk = Chunk()
    chunk.read = read
    yield chunk


@dataclass
class BadLines:
    """The bad lines of an input: the first ``limit`` by line number, and how many; with
    ``rejects``, every one of them as a :func:`reject_document` as well."""

    name: str
    limit: int
    shown: list[tuple[int, str]] = field(default_factory=list)
    count: int = 0
    rejects: list[dict[str, Any]] | None = None

    def add(self, found: Sequence[tuple[int, str]], texts: dict[int, bytes] | None = None) -> None:
        """Add one chunk's bad lines (any order; chunks come in input order) and, when
        rejects are kept, the text of each (from ``texts``, the chunk's lines)."""
        self.count += len(found)
        ordered = sorted(found)
        if self.rejects is not None:
            lines = texts or {}
            self.rejects += [reject_document(n, why, lines.get(n, b"")) for n, why in ordered]
        room = self.limit - len(self.shown)
        if room > 0:
            self.shown += ordered[:room]

    def lines(self, prefix: str = "") -> list[str]:
        """``{prefix}name:line: problem`` for each shown, then ``… and N more bad lines``."""
        out = [f"{prefix}{self.name}:{number}: {problem}" for number, problem in self.shown]
        rest = self.count - len(self.shown)
        if rest:
            out.append(f"… and {rest} more bad line{'s' if rest > 1 else ''}")
        return out


def reject_document(number: int, reason: str, line: bytes) -> dict[str, Any]:
    """One line of a ``--rejects`` file: ``{"line", "reason", "text"}``, the text being the
    line without its line ending (bytes that are not UTF-8 read as U+FFFD)."""
    text = line.decode("utf-8", errors="replace").rstrip("\r\n")
    return {"line": number, "reason": reason, "text": text}


def conflict_problem(conflict: StargraphMemError) -> tuple[int, str]:
    """``(line, problem)`` for an episode whose id another episode took, or one over a
    size limit."""
    first = conflict.context.get("first_tag")
    where = f" (first on line {first})" if first is not None else ""
    return int(conflict.context["tag"]), f"{describe(conflict)}{where}"


async def ingest_stream(
    source: BinaryIO,
    db: str,
    bad: BadLines,
    total: int | None,
    progress: Progress | None,
    limits: Limits | None = None,
    skip_invalid: bool = False,
) -> tuple[int, int]:
    """Store every episode line of ``source`` in one transaction; ``(new rows, episode
    lines)``. Every line is validated and inserted (ids repeated with other fields are
    bad lines too); when ``bad`` holds any line at the end, the transaction is rolled back,
    unless ``skip_invalid``: then the good lines are committed and the bad ones are only
    reported (the episode lines counted are the good ones).

    Chunks are pipelined: while SQLite's thread inserts one, this thread parses the next.
    The store opens with the first chunk that has episodes. When a bad line came before
    it and a SQLite ``db`` does not exist yet, a scratch database in a temporary folder
    takes its place (repeats are still checked across chunks); a file this ingest created
    is removed when it fails, so a failed ingest leaves no file behind. On a server the
    rolled-back transaction leaves nothing either.
    """
    import asyncio
    import tempfile
    from contextlib import AsyncExitStack

    from stargraph_mem.stores.database import open_database, parse_database_url

    Inserting = tuple[
        asyncio.Task[list[DuplicateEpisodeError | LimitError]],
        list[tuple[int, str]],
        dict[int, bytes],
    ]
    pending: Inserting | None = None
    lines = repeats = 0

    async def settle() -> None:
        """Wait for the chunk being inserted; record its bad lines and repeated ids."""
        nonlocal pending, repeats
        if pending is not None:
            task, found, texts = pending
            pending = None
            conflicts = [conflict_problem(c) for c in await task]
            repeats += len(conflicts)
            bad.add(found + conflicts, texts)

    created = False
    path = parse_database_url(db).path
    async with AsyncExitStack() as stack:
        writer: Any = None
        try:
            # parses while the last chunk is inserted
            for chunk in read_chunks(source, limits=limits or DEFAULT_LIMITS):
                await settle()
                lines += len(chunk.episodes)
                if not chunk.episodes:
                    bad.add(chunk.problems, chunk.texts)
                else:
                    if writer is None:
                        target = db
                        if path is not None and not path.exists():
                            if not skip_invalid and (bad.count or chunk.problems):
                                scratch = stack.enter_context(tempfile.TemporaryDirectory())
                                target = str(Path(scratch) / "check.db")
                            else:
                                created = True
                        database = await stack.enter_async_context(
                            open_database(target, limits=limits)
                        )
                        writer = await stack.enter_async_context(database.memory.writing())
                    write = writer.write(chunk.episodes, chunk.numbers)
                    pending = (asyncio.create_task(write), chunk.problems, chunk.texts)
                    await asyncio.sleep(0)  # the task hands its rows to SQLite's thread
                if progress is not None:
                    progress("read bytes", chunk.read, total)
                    progress("write", lines, None)
            await settle()
        finally:
            if pending is not None:  # reading failed: let the insert finish, then unwind
                await asyncio.gather(pending[0], return_exceptions=True)
        if progress is not None:
            progress("write", lines, lines)
        if writer is None:
            return 0, lines
        if skip_invalid:
            return writer.written, lines - repeats
        if not bad.count:
            return writer.written, lines
        writer.discard()
    if created:  # the failed ingest made the file (its first bad line came late): remove it
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    return 0, lines


def input_file(value: str) -> str:
    """``ingest``'s FILE: ``-`` (standard input), or a file or pipe that exists."""
    path = Path(value)
    if value != "-" and (not path.exists() or path.is_dir()):
        what = "is a directory" if path.exists() else "does not exist"
        raise typer.BadParameter(f"{what}: {value!r}")  # the problem first: long paths wrap
    return value


def writable(path: Path) -> None:
    """Fail (exit code 1) unless ``path`` can be written: its folder exists and may be
    written, and the file, if it exists, too."""
    folder = path.parent
    if not folder.is_dir():
        fail(f"{path}: folder does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        fail(f"{path}: permission denied")


@app.command()
def ingest(
    file: Annotated[
        str,
        typer.Argument(
            help="Episodes, one JSON object per line; - reads them from standard input.",
            callback=input_file,
            show_default=False,
        ),
    ],
    db: DbOption = DEFAULT_DB,
    max_errors: Annotated[
        int,
        typer.Option(
            "--max-errors", min=1, help="List at most this many bad lines (then count the rest)."
        ),
    ] = 20,
    max_content: ContentLimitOption = DEFAULT_CONTENT_BYTES,
    max_metadata: MetadataLimitOption = DEFAULT_METADATA_BYTES,
    skip_invalid: Annotated[
        bool,
        typer.Option(
            "--skip-invalid",
            help="Store the good lines (in one transaction) and skip the bad ones, instead "
            "of storing nothing: each bad line is listed on stderr, or written to --rejects.",
        ),
    ] = False,
    rejects: Annotated[
        Path | None,
        typer.Option(
            "--rejects",
            metavar="FILE",
            dir_okay=False,
            help="With --skip-invalid: write the bad lines to FILE as JSON lines, "
            '{"line": N, "reason": "...", "text": "<the line>"}, instead of listing them.',
        ),
    ] = None,
) -> None:
    """Store every episode of a JSON-lines file (or of standard input: -) in one
    transaction: all or nothing, unless --skip-invalid.

    The input is read, validated and written in chunks, so memory does not grow with it.
    Every line is checked: each bad one is listed as FILE:LINE: problem (up to
    --max-errors), an id repeated with other fields counts as bad (the later line), and
    when any line is bad nothing is stored and the exit code is 1. With --skip-invalid
    the good lines are stored, the bad ones are skipped and reported (exit code 0). A
    progress bar shows on stderr when it is a terminal.
    """
    if rejects is not None and not skip_invalid:
        usage_fail("--rejects goes with --skip-invalid")
    stdin = file == "-"
    bad = BadLines(STDIN_NAME if stdin else file, max_errors)
    limits = Limits(content_bytes=max_content, metadata_bytes=max_metadata)
    if rejects is not None:
        writable(rejects)  # checked before the ingest commits anything
        bad.rejects = []
    with progress_bar() as progress:
        if stdin:
            source = typer.get_binary_stream("stdin")
            written, lines = run(
                ingest_stream(source, db, bad, None, progress, limits, skip_invalid)
            )
        else:
            with known_errors(), open(file, "rb") as fh:
                info = os.fstat(fh.fileno())
                total = info.st_size if stat.S_ISREG(info.st_mode) else None  # not a pipe
                written, lines = run(
                    ingest_stream(fh, db, bad, total, progress, limits, skip_invalid)
                )
    if bad.count and not skip_invalid:
        echo_lines([f"error: {line}" for line in bad.lines()], err=True)
        raise typer.Exit(1)
    summary = f"ingested {written} new episodes ({lines} lines) into {printable(str(db))}"
    if not skip_invalid:
        typer.echo(summary)
        return
    if rejects is not None:
        with known_errors():
            rejects.write_bytes(b"".join(orjson.dumps(doc) + b"\n" for doc in bad.rejects or []))
    elif bad.count:
        echo_lines(bad.lines(prefix="skipped "), err=True)
    where = f", written to {printable(str(rejects))}" if rejects is not None else ""
    noun = "line" if bad.count == 1 else "lines"
    typer.echo(f"{summary}; skipped {bad.count} invalid {noun}{where}")


# Commands defined in sibling modules register themselves on ``app`` when imported.
from stargraph_mem import cli_authoring, cli_mcp, cli_review, cli_scheduler  # noqa: E402

__all__ = ["app", "cli_authoring", "cli_mcp", "cli_review", "cli_scheduler", "main"]


def main() -> None:
    """Console-script entry point (``stargraph-mem``)."""
    app()


if __name__ == "__main__":
    # ``python -m stargraph_mem.cli``: sibling modules register their commands on the
    # imported module's ``app``, not on this ``__main__`` copy, so run that one.
    from stargraph_mem.cli import main as imported_main

    imported_main()
