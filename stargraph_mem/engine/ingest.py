"""Ingest of episode JSON lines: every line validated, the good ones written in one
transaction, the bad ones described in plain words with their line numbers.

The machinery behind ``stargraph-mem ingest`` (the command only parses options and prints):
the input is read and validated in chunks (:func:`read_chunks`), so memory does not grow
with it, and each chunk is inserted while the next one is parsed (:func:`ingest_stream`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pydantic import ValidationError

from stargraph_mem.errors import DuplicateEpisodeError, LimitError, StargraphMemError, describe
from stargraph_mem.model.limits import DEFAULT_LIMITS, Limits

if TYPE_CHECKING:
    from stargraph_mem.model.episodes import Episode

Progress = Callable[[str, int, int | None], None]
"""``progress(phase, done, total)``: how far an ingest got (``total`` is ``None`` while
unknown, e.g. reading standard input)."""

INGEST_CHUNK = 5_000
"""Lines ``ingest`` validates and then inserts at a time (one ``executemany`` each)."""


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
