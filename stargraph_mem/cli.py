"""Command line: a thin layer that parses arguments, calls one library function and prints.

Known errors become one ``error: …`` line on stderr with exit code 1; usage errors exit 2
(typer's default). Add a command by writing a function that parses its options and hands
one coroutine to :func:`run` (stores are opened with :func:`using_store`).
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import orjson
import typer
from pydantic import JsonValue, ValidationError

from stargraph_mem.errors import StargraphMemError
from stargraph_mem.stores import Episode, SQLiteMemoryStore
from stargraph_mem.stores.models import canonical_json, utc_now

T = TypeVar("T")

app = typer.Typer(
    name="stargraph-mem",
    help="Deterministic, auditable episodic-to-semantic memory consolidation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

KNOWN_ERRORS: tuple[type[Exception], ...] = (
    StargraphMemError,
    ValidationError,
    sqlite3.Error,
    OSError,
)
"""Errors reported as one line and exit code 1; anything else is a bug and keeps its traceback."""

DEFAULT_DB = Path("stargraph_mem.db")

DbOption = Annotated[
    Path, typer.Option("--db", help="SQLite database file.", dir_okay=False, show_default=True)
]
UserOption = Annotated[str, typer.Option("--user", help="User the episodes belong to.")]


# --- helpers shared by every command ----------------------------------------------------


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
    """Print ``error: message`` on stderr and exit with code 1."""
    typer.echo(f"error: {message}", err=True)
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
    with known_errors():
        return asyncio.run(coro)
    raise AssertionError("unreachable")  # pragma: no cover - known_errors always re-raises


async def using_store(db: Path, action: Callable[[SQLiteMemoryStore], Awaitable[T]]) -> T:
    """Open (and bootstrap) the episodic store at ``db``, run ``action``, close it."""
    async with SQLiteMemoryStore(db) as store:
        return await action(store)


def existing(db: Path) -> Path:
    """Read commands refuse to create a database: a missing file is an error."""
    if not db.exists():
        fail(f"{db}: database file does not exist")
    return db


# --- option parsing ---------------------------------------------------------------------


def parse_timestamp(value: str | None) -> datetime:
    """ISO-8601 with a UTC offset (default: now, UTC); a naive value is an error."""
    if value is None:
        return utc_now()
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise typer.BadParameter(f"not an ISO-8601 timestamp: {value!r}") from exc
    if parsed.utcoffset() is None:
        fail(f"--timestamp {value!r} has no UTC offset (write e.g. {value}+00:00)")
    return parsed


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


def default_id(content: str, user: str, session: str, agent: str, timestamp: datetime) -> str:
    """A deterministic id: hash of content, scope and timestamp."""
    body = canonical_json([user, session, agent, timestamp.isoformat(), content])
    return "e" + hashlib.sha256(body).hexdigest()[:24]


def episode_lines(episodes: Sequence[Episode]) -> list[str]:
    """Plain aligned columns with a header (content newlines shown as ``\\n``)."""
    rows = [("TIMESTAMP", "SESSION", "AGENT", "ID", "CONTENT")]
    rows += [
        (e.timestamp.isoformat(), e.session, e.agent, e.id, e.content.replace("\n", "\\n"))
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
) -> None:
    """Store one episode and print its id."""
    when = parse_timestamp(timestamp)
    metadata = parse_meta(meta or [])
    with known_errors():
        episode = Episode(
            id=episode_id or default_id(content, user, session, agent, when),
            content=content,
            timestamp=when,
            user=user,
            session=session,
            agent=agent,
            metadata=metadata,
        )
    run(using_store(db, lambda s: s.put(episode, user=user, session=session, agent=agent)))
    typer.echo(episode.id)


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


def main() -> None:
    """Console-script entry point (``stargraph-mem``)."""
    app()


if __name__ == "__main__":
    main()
