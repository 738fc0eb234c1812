"""Episode commands: ``put`` one, ``recent`` ones, ``ingest`` a JSON-lines file (the work
is :mod:`stargraph_mem.engine.ingest`'s), ``copy`` a whole memory to another database."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from stargraph_mem.cli.base import (
    DEFAULT_DB,
    ContentLimitOption,
    DbOption,
    JsonOption,
    MetadataLimitOption,
    UserOption,
    aligned,
    app,
    echo_json,
    echo_lines,
    existing,
    fail,
    known_errors,
    parse_meta,
    parse_timestamp,
    printable,
    progress_bar,
    run,
    usage_fail,
    using_store,
)
from stargraph_mem.model.limits import DEFAULT_CONTENT_BYTES, DEFAULT_METADATA_BYTES, Limits

if TYPE_CHECKING:
    from stargraph_mem.model.episodes import Episode
    from stargraph_mem.stores.protocols import EpisodeRepository

STDIN_NAME = "<stdin>"
"""What ``ingest -`` calls its input in messages (``<stdin>:3: …``)."""


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
    from stargraph_mem.model.canonical import default_episode_id
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
    from stargraph_mem.engine.ingest import BadLines, ingest_stream

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
    typer.echo(f"copied {printable(report.source)} → {printable(report.target)}")
    rows = [("TABLE", "ROWS")] + [(name, str(n)) for name, n in report.rows.items()]
    typer.echo("\n".join(aligned(rows)))
