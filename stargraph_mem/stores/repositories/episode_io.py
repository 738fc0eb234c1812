"""Episode writes and reads over a :class:`~stargraph_mem.stores.sql_conn.Conn`,
backend-neutral: batched inserts, the streaming writer, reads that refill past
undecodable rows, and reads of many partitions at once (the repository,
:mod:`~stargraph_mem.stores.repositories.episodes`, quarantines what does not decode).

The repository hands its rendered SQL in an :class:`EpisodeStatements`; rows are built
and checked by :mod:`~stargraph_mem.stores.repositories.episode_rows`.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from stargraph_mem.errors import DuplicateEpisodeError, LimitError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.limits import DEFAULT_LIMITS, Limits
from stargraph_mem.stores.memory import CheckedRead, EpisodeRecord, QuarantinedRow
from stargraph_mem.stores.repositories.episode_rows import (
    Row,
    check_limit,
    duplicate_error,
    episode_row,
    not_utf8_error,
    row_differences,
    row_record,
    seq_episode,
    split_rows,
    warn_quarantined,
)
from stargraph_mem.stores.sql_conn import Conn

__all__ = [
    "Discarded",
    "EpisodeStatements",
    "EpisodeWriter",
    "checked_reads",
    "group_reads",
    "put_rows",
    "read_recent",
    "read_since",
]


@dataclass(frozen=True, slots=True)
class EpisodeStatements:
    """The episode repository's SQL as one backend takes it (``?`` or ``%s`` placeholders)."""

    ids: Callable[[Sequence[Any]], Any]
    """Encodes a list of ids or seqs as the one parameter the ``*_in`` statements take."""
    insert: str
    """Insert one ``Row`` unless its id is stored (``ON CONFLICT (id) DO NOTHING``)."""
    new_seqs: str
    """Seqs above a given one, in order."""
    stored_seq_in: str
    """``seq`` and the ``Row`` columns of the stored episodes among the given ids."""
    noted_in: str
    """``quarantine`` rows of the given seqs."""
    row_keys_in: str
    """``seq, partition_key`` of the ``episodes`` rows of the given seqs."""


PROGRESS_STEP: Final = 10_000
"""Rows per ``executemany`` in ``put_many`` (one transaction; progress is told per step)."""


async def put_rows(
    db: Conn,
    sql: EpisodeStatements,
    rows: Sequence[Row],
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Insert ``rows`` step by step inside the caller's transaction; how many were new."""
    inserted = 0
    for start in range(0, len(rows), PROGRESS_STEP):
        inserted += await insert_rows(db, sql, rows[start : start + PROGRESS_STEP])
        if progress is not None:
            progress(min(start + PROGRESS_STEP, len(rows)), len(rows))
    return inserted


async def insert_rows(db: Conn, sql: EpisodeStatements, rows: Sequence[Row]) -> int:
    """Insert ``rows`` (ids already stored are left alone); how many were new."""
    try:
        return await db.executemany(sql.insert, rows)
    except UnicodeEncodeError as exc:  # models built without validation
        raise not_utf8_error(rows) from exc


class Discarded(Exception):
    """Raised inside :meth:`SQLiteMemoryStore.writing` to roll its transaction back."""


class EpisodeWriter:
    """Writes chunks of episodes inside one open write transaction (see
    :meth:`SQLiteMemoryStore.writing`); memory stays bounded by the chunk, not the stream.

    Every chunk is inserted with one ``executemany``; the ``episodes`` table's unique id
    index finds repeats, in the store and earlier in the stream alike, so the stream keeps
    no set of ids. For each episode written it keeps its ``seq`` and the caller's tag (16
    bytes), to name where a conflicting id first appeared.
    """

    def __init__(
        self, db: Conn, sql: EpisodeStatements, start_seq: int, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self._db = db
        self._sql = sql
        self._limits = limits
        self._start = start_seq
        """The highest ``seq`` before the stream: rows above it were written by this stream."""
        self._last = start_seq
        self._seqs = array("q")
        self._tags = array("q")
        self._given = 0
        self.written = 0
        """How many new rows the stream has written so far."""
        self.discarded = False

    def discard(self) -> None:
        """Roll the whole stream back when the ``writing`` block ends (nothing is stored)."""
        self.discarded = True

    async def write(
        self, episodes: Sequence[Episode], tags: Sequence[int] | None = None
    ) -> list[DuplicateEpisodeError | LimitError]:
        """Insert one chunk; return the episodes whose id is taken by a different episode,
        and those over the store's size limits (:class:`LimitError`, ``context["tag"]``).

        ``tags`` (one int per episode, e.g. line numbers; default: the position in the
        stream, from 1) name the episodes in the conflicts: ``context["tag"]`` is the
        conflicting episode's, ``context["first_tag"]`` the first one's with that id when
        it came earlier in this stream (``None`` when it was stored before). As in
        :meth:`SQLiteMemoryStore.put_many`, an identical repeat is no conflict and is
        stored once. Conflicting episodes are not written; the caller decides whether to
        :meth:`discard` the stream. Returned in the chunk's order of first detection:
        repeats inside the chunk, then ids stored before it.
        """
        if tags is None:
            tags = range(self._given + 1, self._given + 1 + len(episodes))
        elif len(tags) != len(episodes):
            raise ValueError(f"{len(tags)} tags for {len(episodes)} episodes")
        self._given += len(episodes)
        conflicts: list[DuplicateEpisodeError | LimitError] = []
        index: dict[str, int] = {}
        rows: list[Row] = []
        row_tags: list[int] = []
        for episode, tag in zip(episodes, tags, strict=True):
            try:
                row = episode_row(episode, self._limits)
            except LimitError as error:
                error.context["tag"] = tag
                conflicts.append(error)
                continue
            at = index.get(row[0])
            if at is None:
                index[row[0]] = len(rows)
                rows.append(row)
                row_tags.append(tag)
                continue
            fields = row_differences(rows[at], row)
            if fields:
                conflicts.append(stream_duplicate(row[0], fields, tag, row_tags[at], earlier=True))
        if not rows:
            return conflicts
        db, sql = self._db, self._sql
        inserted = await insert_rows(db, sql, rows)
        if inserted == len(rows):
            # every row is new; seqs grow with each insert, so the n-th row has the n-th seq
            seqs = [row[0] for row in await db.fetch(sql.new_seqs, (self._last,))]
            pairs = list(zip(seqs, row_tags, strict=True))
        else:
            pairs = []
            stored = await db.fetch(sql.stored_seq_in, (sql.ids(list(index)),))
            for seq, *old in stored:
                at = index[old[0]]
                if seq > self._last:  # written by this chunk
                    pairs.append((seq, row_tags[at]))
                    continue
                fields = row_differences(old, rows[at])
                if fields:
                    earlier = seq > self._start
                    first = self._tag_of(seq) if earlier else None
                    conflicts.append(
                        stream_duplicate(old[0], fields, row_tags[at], first, earlier=earlier)
                    )
            pairs.sort()
        for seq, tag in pairs:
            self._seqs.append(seq)
            self._tags.append(tag)
        if pairs:
            self._last = pairs[-1][0]
        self.written += inserted
        return conflicts

    def _tag_of(self, seq: int) -> int | None:
        """The tag of the row this stream wrote as ``seq``."""
        at = bisect_left(self._seqs, seq)
        return self._tags[at] if at < len(self._seqs) and self._seqs[at] == seq else None


def stream_duplicate(
    episode_id: str, fields: list[str], tag: int, first_tag: int | None, *, earlier: bool
) -> DuplicateEpisodeError:
    """A conflict of :meth:`EpisodeWriter.write`, with the tags in its context."""
    where = "appears twice in the batch" if earlier else "already exists"
    error = duplicate_error(episode_id, fields, where)
    error.context.update(tag=tag, first_tag=first_tag)
    return error


async def read_recent(
    db: Conn, sql: str, params: tuple[Any, ...], limit: int, mark: str
) -> tuple[list[tuple[int, Episode]], list[tuple[Any, str]]]:
    """Run a ``recent`` query (last parameter: its limit) and, while undecodable rows took
    places, read further (``OFFSET``) until ``limit`` good episodes or no more rows:
    ``(seq, episode)`` pairs and ``(row, reason)`` for the rows that do not decode."""
    rows = await db.fetch(sql, params)
    found, bad = split_rows(rows, seq_episode)
    offset, wanted = len(rows), limit
    while len(rows) == wanted and len(found) < limit:
        wanted = limit - len(found)
        rows = await db.fetch(f"{sql} OFFSET {mark}", (*params[:-1], wanted, offset))
        good, worse = split_rows(rows, seq_episode)
        found += good
        bad += worse
        offset += len(rows)
    return found, bad


async def read_since(
    read: Callable[[int, int | None], Awaitable[CheckedRead]], after_seq: int, limit: int | None
) -> list[EpisodeRecord]:
    """The first ``limit`` decodable episodes after ``after_seq`` through ``read(after,
    limit)`` (a ``since_checked``), reading past quarantined rows and logging them."""
    check_limit(limit, optional=True)
    records: list[EpisodeRecord] = []
    after = after_seq
    while True:
        want = None if limit is None else limit - len(records)
        checked = await read(after, want)
        records += checked.records
        warn_quarantined(checked.quarantined)
        if not checked.quarantined or want is None or checked.scanned < want:
            return records
        after = checked.last_seq(after)


Split = list[tuple[list[EpisodeRecord], list[tuple[Any, str]]]]
"""Per read: the records that decode and ``(row, reason)`` for those that do not."""


def group_reads(rows: Sequence[Sequence[Any]], count: int) -> tuple[Split, list[tuple[Any, str]]]:
    """Rows of ``count`` reads (each row: the read's index, then the read columns) decoded
    per read, and every undecodable row in order (to quarantine at once)."""
    found: list[list[Any]] = [[] for _ in range(count)]
    for row in rows:
        found[row[0]].append(row[1:])
    split = [split_rows(part, row_record) for part in found]
    return split, [entry for _, worse in split for entry in worse]


def checked_reads(split: Split, noted: Sequence[QuarantinedRow]) -> list[CheckedRead]:
    """One :class:`CheckedRead` per read, its quarantine entries taken from ``noted`` (the
    entries of every read's bad rows, in order)."""
    entries = iter(noted)
    return [CheckedRead(good, [next(entries) for _ in worse]) for good, worse in split]
