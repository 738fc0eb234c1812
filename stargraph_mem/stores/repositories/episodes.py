"""The episode repository, written once for every backend: scoped writes, widening reads,
incremental reads, quarantine.

One ``episodes`` table ordered by an insertion ``seq``; scope keys come from
:mod:`stargraph_mem.stores.scope`, so every read is an index lookup or range scan, never
``LIKE``. Writes take the ``episodes`` lock (PostgreSQL's advisory lock, so seqs commit in
increasing order: a pass that read up to seq n never misses an episode committed later
with a smaller seq; SQLite's ``BEGIN IMMEDIATE`` does the same).

A row that cannot be decoded (written by an older version or by hand) never blocks a read:
reads skip it, note it once in the ``quarantine`` table and report it
(:class:`~stargraph_mem.stores.memory.QuarantinedRow`); the row itself is left as it is.

Every statement is written once in the qmark style and rendered for the backend's
:class:`~stargraph_mem.stores.dialect.Dialect` when the backend's first store is built;
rows are built and checked by :mod:`~stargraph_mem.stores.repositories.episode_rows`, written and
read
by :mod:`~stargraph_mem.stores.repositories.episode_io`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache
from typing import Any, ClassVar, Final, Protocol

from stargraph_mem.errors import StoreError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.limits import DEFAULT_LIMITS, Limits
from stargraph_mem.model.time import from_us, to_us
from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.memory import CheckedRead, EpisodeRecord, QuarantinedRow
from stargraph_mem.stores.repositories.access import Access
from stargraph_mem.stores.repositories.episode_io import (
    Discarded,
    EpisodeStatements,
    EpisodeWriter,
    checked_reads,
    group_reads,
    put_rows,
    read_recent,
    read_since,
)
from stargraph_mem.stores.repositories.episode_rows import (
    NotUtf8,
    Row,
    check_limit,
    check_scope,
    dedupe_batch,
    duplicate_error,
    episode_row,
    key_of_partition,
    partition_of,
    quarantined_row,
    row_differences,
    row_record,
    scope_filter,
    split_rows,
    warn_quarantined,
)
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Conn

__all__ = [
    "READ_COLUMNS",
    "STORED_COLUMNS",
    "WRITE_COLUMNS",
    "EpisodeAccess",
    "Episodes",
    "recent_query",
]

logger = logging.getLogger("stargraph_mem.stores.sqlite_memory")
"""Quarantine warnings keep the logger name they always had."""

_LOCK: Final = "episodes"
WRITE_COLUMNS: Final = (
    'id, scope_key, partition_key, "user", session, agent, ts_us, tz_offset_s, content, '
    "source_node, metadata"
)
READ_COLUMNS: Final = (
    'seq, id, content, ts_us, tz_offset_s, source_node, "user", session, agent, metadata, '
    "last_accessed_us, access_count"
)
STORED_COLUMNS: Final = f"seq, {WRITE_COLUMNS}, last_accessed_us, access_count"
"""Every column of a stored row, as :meth:`Episodes.stored_rows` reads it."""
_FOURTEEN: Final = ", ".join(["?"] * 14)
_ELEVEN: Final = ", ".join(["?"] * 11)
"""One placeholder per written column."""
_QUARANTINE_COLUMNS: Final = "seq, episode_id, partition_key, reason, at_us"
_PARTITIONS: Final = """
    WITH RECURSIVE keys(k) AS (
        SELECT min(partition_key) FROM episodes
        UNION ALL
        SELECT (SELECT min(partition_key) FROM episodes WHERE partition_key > keys.k)
        FROM keys WHERE keys.k IS NOT NULL
    )
    SELECT k FROM keys WHERE k IS NOT NULL"""


@dataclass(frozen=True, slots=True)
class _Statements:
    """The repository's SQL, rendered for one dialect."""

    shared: EpisodeStatements
    stored: str
    since: str
    by_ids: str
    touch: str
    touch_id: str
    note: str
    quarantined: str
    quarantined_of: str
    max_seq: str
    count_since: str
    since_of: str
    count_of: str
    earliest_of: str
    last_seq: str
    schema_version: str
    load: str
    seqs_in: str


@cache
def _statements(dialect: Dialect) -> _Statements:
    sql, in_ids = dialect.sql, dialect.in_ids()
    quarantined = f"SELECT {_QUARANTINE_COLUMNS} FROM quarantine"
    read = ", ".join(f"e.{column.strip()}" for column in READ_COLUMNS.split(","))
    return _Statements(
        shared=EpisodeStatements(
            ids=dialect.ids,
            insert=sql(
                f"INSERT INTO episodes ({WRITE_COLUMNS}) VALUES ({_ELEVEN}) "
                "ON CONFLICT (id) DO NOTHING"
            ),
            new_seqs=sql("SELECT seq FROM episodes WHERE seq > ? ORDER BY seq"),
            stored_seq_in=sql(f"SELECT seq, {WRITE_COLUMNS} FROM episodes WHERE id {in_ids}"),
            noted_in=sql(f"{quarantined} WHERE seq {in_ids} ORDER BY seq"),
            row_keys_in=sql(f"SELECT seq, partition_key FROM episodes WHERE seq {in_ids}"),
        ),
        stored=sql(f"SELECT {WRITE_COLUMNS} FROM episodes WHERE id {in_ids}"),
        since=sql(
            f"SELECT {READ_COLUMNS} FROM episodes WHERE partition_key = ? AND seq > ? "
            "ORDER BY seq LIMIT ?"
        ),
        by_ids=sql(f"SELECT {READ_COLUMNS} FROM episodes WHERE id {in_ids} ORDER BY seq"),
        touch=sql(
            "UPDATE episodes SET last_accessed_us = ?, access_count = access_count + 1 "
            "WHERE seq = ?"
        ),
        touch_id=sql(
            "UPDATE episodes SET last_accessed_us = ?, access_count = access_count + 1 WHERE id = ?"
        ),
        note=sql(
            f"INSERT INTO quarantine ({_QUARANTINE_COLUMNS}) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (seq) DO NOTHING"
        ),
        quarantined=sql(f"{quarantined} ORDER BY seq"),
        quarantined_of=sql(f"{quarantined} WHERE partition_key = ? ORDER BY seq"),
        max_seq=sql("SELECT seq FROM episodes WHERE partition_key = ? ORDER BY seq DESC LIMIT 1"),
        count_since=sql("SELECT count(*) FROM episodes WHERE partition_key = ? AND seq > ?"),
        since_of=sql(dialect.since_of(read)),
        count_of=sql(
            "SELECT r.i, (SELECT count(*) FROM episodes e "
            f"WHERE e.partition_key = r.k AND e.seq > r.after) FROM {dialect.read_rows()} "
            "ORDER BY r.i"
        ),
        earliest_of=sql(
            "SELECT r.i, (SELECT min(e.ts_us) FROM episodes e "
            f"WHERE e.partition_key = r.k AND e.seq > r.after) FROM {dialect.read_rows()} "
            "ORDER BY r.i"
        ),
        last_seq=sql("SELECT coalesce(max(seq), 0) FROM episodes"),
        schema_version=sql("SELECT max(version) FROM schema_migrations"),
        load=sql(
            f"INSERT INTO episodes ({STORED_COLUMNS}) VALUES ({_FOURTEEN}) ON CONFLICT DO NOTHING"
        ),
        seqs_in=sql(f"SELECT seq FROM episodes WHERE seq {in_ids}"),
    )


def _selection(
    user: str | None, agent: str | None, until_us: int | None
) -> tuple[str, tuple[Any, ...]]:
    """The qmark-style condition choosing the rows of one user (and agent), or of one
    agent, stamped at or before ``until_us`` (``None``: no bound); ``1 = 1`` for all."""
    where: list[str] = []
    params: list[Any] = []
    if user is not None:
        condition, values = scope_filter(user, None, agent)
        where.append(condition)
        params += values
    elif agent is not None:
        where.append("agent = ?")
        params.append(agent)
    if until_us is not None:
        where.append("ts_us <= ?")
        params.append(until_us)
    return " AND ".join(where) or "1 = 1", tuple(params)


def recent_query(
    dialect: Dialect, user: str, session: str | None, agent: str | None, limit: int
) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and parameters ``recent()`` runs on ``dialect``'s backend."""
    check_limit(limit)
    where, params = scope_filter(user, session, agent)
    sql = f"SELECT {READ_COLUMNS} FROM episodes WHERE {where} ORDER BY ts_us DESC, seq DESC LIMIT ?"
    return dialect.sql(sql), (*params, limit)


class EpisodeAccess(Access, Protocol):
    """What the episode repository needs of its backend besides connections."""

    _note_errors: ClassVar[tuple[type[Exception], ...]]
    """What failing to write the quarantine table raises (it is then only logged)."""
    _unreadable: ClassVar[type[Exception]]
    """What reading a table that is not there raises (an older file opened read-only)."""
    limits: Limits


class Episodes:
    """The episodic :class:`~stargraph_mem.stores.memory.MemoryStore` and the reads a
    consolidation pass makes, mixed into a backend's store (which supplies
    :class:`EpisodeAccess`)."""

    __slots__ = ()

    limits: Limits = DEFAULT_LIMITS
    """The size limits every write checks (``open_database(limits=…)`` sets them)."""

    # --- writes -------------------------------------------------------------------------

    async def put(
        self: EpisodeAccess, episode: Episode, *, user: str, session: str, agent: str
    ) -> None:
        """Store one episode under its own scope (which the caller must restate)."""
        check_scope(episode, user, session, agent)
        await Episodes.put_many(self, [episode])

    async def put_many(
        self: EpisodeAccess,
        episodes: Sequence[Episode],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Store a batch in one transaction; return how many rows were new.

        Identical re-puts are no-ops; an id repeated with different fields (in the store or
        within the batch) raises :class:`DuplicateEpisodeError` and nothing is written.
        ``progress(done, total)`` is called as rows are written (still one transaction).
        """
        rows = dedupe_batch([episode_row(episode, self.limits) for episode in episodes])
        if not rows:
            return 0
        sql = _statements(self.dialect)

        async def again(db: Conn) -> int:
            return await put_rows(db, sql.shared, rows)

        # a record's put may leave its commit to its pass, and be redone if that fails
        async with self._writing(_LOCK, again) as db:
            inserted = await put_rows(db, sql.shared, rows, progress)
            if inserted != len(rows):
                await _check_conflicts(db, sql.stored, self.dialect, rows)
        return inserted

    @asynccontextmanager
    async def writing(self: EpisodeAccess) -> AsyncIterator[EpisodeWriter]:
        """One write transaction for a stream of chunks: ``await writer.write(chunk)`` as
        often as needed; the block's end commits everything, or nothing when the block
        raises or called :meth:`EpisodeWriter.discard`.

        For inputs too large to hold at once (``stargraph-mem ingest``): duplicate ids are
        handled as :meth:`put_many` handles them within one batch, across the whole
        stream, but are returned by ``write`` instead of raised, so every one can be
        reported. The transaction holds the write lock until the block ends.
        """
        sql = _statements(self.dialect)
        try:
            async with self._writing(_LOCK) as db:
                start = await db.scalar(sql.last_seq)
                writer = EpisodeWriter(db, sql.shared, int(start), self.limits)
                yield writer
                if writer.discarded:
                    raise Discarded
        except Discarded:
            pass

    # --- reads --------------------------------------------------------------------------

    async def schema_version(self: EpisodeAccess) -> int:
        """The highest applied migration version."""
        async with self._reading() as db:
            return int(await db.scalar(_statements(self.dialect).schema_version))

    async def recent(
        self: EpisodeAccess,
        user: str,
        session: str | None = None,
        agent: str | None = None,
        *,
        limit: int,
    ) -> list[Episode]:
        """Newest first (by UTC time, then insertion); widens as session/agent are omitted.

        The rows returned get ``last_accessed`` = now and ``access_count`` + 1 (not on a
        file opened read-only: there the read records no access); rules see them as the
        episode's ``last_access`` and ``access_count``. Rows that
        cannot be decoded are skipped (up to ``limit`` good ones are still returned),
        quarantined, and logged as one warning each (:meth:`recent_checked` returns them).
        """
        episodes, quarantined = await Episodes.recent_checked(
            self, user, session, agent, limit=limit
        )
        warn_quarantined(quarantined)
        return episodes

    async def recent_checked(
        self: EpisodeAccess,
        user: str,
        session: str | None = None,
        agent: str | None = None,
        *,
        limit: int,
    ) -> tuple[list[Episode], list[QuarantinedRow]]:
        """:meth:`recent`, and the undecodable rows met on the way, newest first (not logged).

        The good episodes are the newest ``limit`` decodable ones of the scope; the
        quarantined rows are those ranked among them that were skipped.
        """
        sql, params = recent_query(self.dialect, user, session, agent, limit)
        mark = self.dialect.mark
        now_us = self._now_us()
        if self.read_only_reason is not None:  # the accesses cannot be recorded
            async with self._reading() as db:
                found, bad = await read_recent(db, sql, params, limit, mark)
        else:
            async with self._writing() as db:
                found, bad = await read_recent(db, sql, params, limit, mark)
                if found:
                    touch = _statements(self.dialect).touch
                    await db.executemany(touch, [(now_us, seq) for seq, _ in found])
        quarantined = await _quarantine(self, bad)
        return [episode for _, episode in found], quarantined

    async def record_access(
        self: EpisodeAccess, episode_ids: Sequence[str], *, at: datetime | None = None
    ) -> None:
        """Count one read of each episode of ``episode_ids`` at ``at`` (default: now), as
        :meth:`recent` counts the episodes it returns (recall counts its episode hits
        this way): rules see it as the episode's ``access_count`` and ``last_access``. An
        id no episode has is left alone; a read-only file records nothing."""
        if isinstance(episode_ids, str) or not all(isinstance(i, str) for i in episode_ids):
            raise StoreError("episode_ids must be a sequence of episode id strings")
        if not episode_ids or self.read_only_reason is not None:
            return
        at_us = self._now_us() if at is None else to_us(at, "at")
        touch = _statements(self.dialect).touch_id
        async with self._writing() as db:
            await db.executemany(touch, [(at_us, eid) for eid in episode_ids])

    async def since(
        self: EpisodeAccess, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> list[EpisodeRecord]:
        """Episodes of one partition with ``seq > after_seq``, in ``seq`` order (read-only).

        Rows that cannot be decoded are skipped: the result is the first ``limit``
        decodable episodes after ``after_seq`` (fewer only when there are no more). Skipped
        rows are quarantined and logged as one warning each; a consumer that keeps a
        watermark should use :meth:`since_checked`, which also returns them.
        """

        async def read(after: int, want: int | None) -> CheckedRead:
            return await Episodes.since_checked(self, partition, after, limit=want)

        return await read_since(read, after_seq, limit)

    async def since_checked(
        self: EpisodeAccess, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> CheckedRead:
        """The rows of one partition with ``seq > after_seq``, in ``seq`` order, decoded.

        Reads the first ``limit`` rows (all when ``None``) with ``seq > after_seq``, good or
        not, and returns ``CheckedRead(records, quarantined)`` (a named 2-tuple): the rows
        that decode, as :class:`EpisodeRecord`, and those that do not, as
        :class:`QuarantinedRow` (each noted once in the ``quarantine`` table; nothing is
        logged). Both lists are in ``seq`` order and together are every row scanned, so:

        - ``read.scanned`` (``len(records) + len(quarantined)``) ``<= limit``, and
          ``read.scanned < limit`` means the partition has no rows after those scanned;
        - ``read.last_seq(after_seq)`` is the highest ``seq`` scanned (``after_seq`` when
          none was): the watermark that consumes every scanned row, bad ones included, so
          the next call starts after them.

        When the quarantine table cannot be written (a read-only file, a lock held too
        long), the bad rows are still skipped and returned, with ``recorded=False``.
        Raises ``ValueError`` for a limit < 1.
        """
        check_limit(limit, optional=True)
        cap = self.dialect.no_limit if limit is None else limit
        params = (key_of_partition(partition), after_seq, cap)
        async with self._reading() as db:
            rows = await db.fetch(_statements(self.dialect).since, params)
        records, bad = split_rows(rows, row_record)
        return CheckedRead(records, await _quarantine(self, bad) if bad else [])

    async def by_ids(self: EpisodeAccess, ids: Sequence[str]) -> list[EpisodeRecord]:
        """The stored episodes among ``ids``, in ``seq`` order; unknown ids are left out, and
        rows that cannot be decoded are skipped, quarantined and logged."""
        async with self._reading() as db:
            rows = await db.fetch(_statements(self.dialect).by_ids, (self.dialect.ids(ids),))
        records, bad = split_rows(rows, row_record)
        if bad:
            warn_quarantined(await _quarantine(self, bad))
        return records

    async def quarantined(
        self: EpisodeAccess, partition: Partition | None = None
    ) -> list[QuarantinedRow]:
        """The rows reads have quarantined (of one partition, or all), in ``seq`` order."""
        sql = _statements(self.dialect)
        async with self._reading() as db:
            try:
                if partition is None:
                    rows = await db.fetch(sql.quarantined)
                else:
                    rows = await db.fetch(sql.quarantined_of, (key_of_partition(partition),))
            except self._unreadable as exc:
                if "no such table" not in str(exc):
                    raise
                return []  # an older file opened read-only: nothing was ever noted
        return [quarantined_row(row) for row in rows]

    async def earlier_episodes(
        self: EpisodeAccess,
        partition: Partition,
        through_seq: int,
        *,
        limit: int,
        since_us: int | None = None,
        embedder: str | None = None,
    ) -> tuple[list[EpisodeRecord], dict[str, bytes]]:
        """The latest ``limit`` episodes of ``partition`` with ``seq <= through_seq`` (those
        earlier passes read), stamped at or after ``since_us`` when given, oldest first
        (timestamp, then seq); and the stored vectors of those that have one under embedder
        identity ``embedder`` (``{id: float32 bytes}``). Rows that cannot be decoded are
        left out (the pass that read them quarantined them)."""
        check_limit(limit)
        where = "partition_key = ? AND seq <= ?"
        params: tuple[Any, ...] = (key_of_partition(partition), through_seq)
        if since_us is not None:
            where += " AND ts_us >= ?"
            params += (since_us,)
        sql = self.dialect.sql(
            f"SELECT {READ_COLUMNS} FROM episodes WHERE {where} "
            "ORDER BY ts_us DESC, seq DESC LIMIT ?"
        )
        async with self._reading() as db:
            rows = await db.fetch(sql, (*params, limit))
        records, _ = split_rows(list(reversed(rows)), row_record)
        if embedder is None or not records:
            return records, {}
        found = self.dialect.sql(
            "SELECT item_id, vector FROM vectors WHERE kind = 'episode' AND embedder = ? "
            f"AND item_id {self.dialect.in_ids()}"
        )
        ids = self.dialect.ids([r.id for r in records])
        async with self._reading() as db:
            try:
                stored = await db.fetch(found, (embedder, ids))
            except self._unreadable as exc:
                if "no such table" not in str(exc):
                    raise
                stored = []  # an older file opened read-only: no vector was ever stored
        return records, {str(row[0]): bytes(row[1]) for row in stored}

    async def max_seq(self: EpisodeAccess, partition: Partition) -> int:
        """The partition's highest ``seq`` (0 when it has no episodes)."""
        async with self._reading() as db:
            seq = await db.scalar(_statements(self.dialect).max_seq, (key_of_partition(partition),))
        return 0 if seq is None else int(seq)

    async def count_since(self: EpisodeAccess, partition: Partition, after_seq: int) -> int:
        """How many rows of the partition have ``seq > after_seq`` (quarantined ones too)."""
        params = (key_of_partition(partition), after_seq)
        async with self._reading() as db:
            return int(await db.scalar(_statements(self.dialect).count_since, params))

    async def partitions(self: EpisodeAccess) -> list[Partition]:
        """Every distinct ``(user, agent)`` pair with episodes, sorted by (user, agent).

        A stored key that is not a well-formed partition key (a hand-edited row) is left
        out with a warning: no partition read could reach its rows.
        """
        async with self._reading() as db:
            rows = await db.fetch(_PARTITIONS)
        found: list[Partition] = []
        for (key,) in rows:
            partition = partition_of(key)
            if partition is None:
                logger.warning("skipped malformed episodes partition key %r", key)
            else:
                found.append(partition)
        return sorted(found, key=lambda p: (p.user, p.agent))

    # --- whole stored rows (replay's copies) --------------------------------------------

    async def stored_span(
        self: EpisodeAccess,
        *,
        user: str | None = None,
        agent: str | None = None,
        until_us: int | None = None,
    ) -> tuple[int, int | None]:
        """How many rows :meth:`stored_rows` would read, and their earliest ``ts_us``."""
        where, params = _selection(user, agent, until_us)
        sql = self.dialect.sql(f"SELECT count(*), min(ts_us) FROM episodes WHERE {where}")
        async with self._reading() as db:
            [(count, first)] = await db.fetch(sql, params)
        return int(count), None if first is None else int(first)

    async def stored_rows(
        self: EpisodeAccess,
        after_seq: int,
        limit: int,
        *,
        user: str | None = None,
        agent: str | None = None,
        until_us: int | None = None,
    ) -> list[Sequence[Any]]:
        """The first ``limit`` rows after ``after_seq`` (of one user, and agent, or one
        agent; stamped at or before ``until_us``), whole and as stored (columns
        :data:`STORED_COLUMNS`): nothing decoded, checked or quarantined."""
        where, params = _selection(user, agent, until_us)
        sql = self.dialect.sql(
            f"SELECT {STORED_COLUMNS} FROM episodes WHERE seq > ? AND {where} ORDER BY seq LIMIT ?"
        )
        async with self._reading() as db:
            return await db.fetch(sql, (after_seq, *params, limit))

    async def load_rows(self: EpisodeAccess, rows: Sequence[Sequence[Any]]) -> list[int]:
        """Insert whole rows as :meth:`stored_rows` read them (their seqs kept), in one
        transaction; the seqs of the rows left out (their id or seq taken), in order.

        A value read as :class:`~stargraph_mem.stores.repositories.episode_rows.NotUtf8` is written
        back as the TEXT it was, so the copy reads as the original does."""
        if not rows:
            return []
        sql = _statements(self.dialect)
        seqs = [row[0] for row in rows]
        async with self._writing(_LOCK) as db:
            inserted = await db.executemany(sql.load, rows)
            for row in rows:
                if NotUtf8 in map(type, row):  # rare: rows written by hand
                    await _as_text(db, self.dialect, row)
            if inserted == len(rows):
                return []
            kept = {seq for (seq,) in await db.fetch(sql.seqs_in, (self.dialect.ids(seqs),))}
        return [seq for seq in seqs if seq not in kept]

    # --- many partitions at once (batched passes) ----------------------------------------

    async def since_checked_of(
        self: EpisodeAccess,
        reads: Sequence[tuple[Partition, int]],
        *,
        limit: int | None = None,
    ) -> list[CheckedRead]:
        """:meth:`since_checked` of many ``(partition, after_seq)`` pairs (results in the
        order given), in one statement; ``limit`` applies to each partition."""
        check_limit(limit, optional=True)
        cap = self.dialect.no_limit if limit is None else limit
        params = (*_reads(self.dialect, reads), cap)
        async with self._reading() as db:
            rows = await db.fetch(_statements(self.dialect).since_of, params)
        split, bad = group_reads(rows, len(reads))
        return checked_reads(split, await _quarantine(self, bad) if bad else [])

    async def count_since_of(
        self: EpisodeAccess, reads: Sequence[tuple[Partition, int]]
    ) -> list[int]:
        """:meth:`count_since` of many ``(partition, after_seq)`` pairs, in one statement."""
        async with self._reading() as db:
            rows = await db.fetch(_statements(self.dialect).count_of, _reads(self.dialect, reads))
        return [int(count) for _, count in rows]

    async def earliest_since_of(
        self: EpisodeAccess, reads: Sequence[tuple[Partition, int]]
    ) -> list[int | None]:
        """The earliest timestamp (UTC µs) of the episodes stored after each
        ``(partition, after_seq)`` pair, whatever order they were stored in, in one
        statement; None when there are none (or, SQLite, only rows whose ``ts_us`` is not
        an integer: corrupt rows, which reads quarantine)."""
        async with self._reading() as db:
            rows = await db.fetch(
                _statements(self.dialect).earliest_of, _reads(self.dialect, reads)
            )
        return [first if type(first) is int else None for _, first in rows]


_STORED: Final = tuple(column.strip().strip('"') for column in STORED_COLUMNS.split(","))


async def _as_text(db: Conn, dialect: Dialect, row: Sequence[Any]) -> None:
    """Write the :class:`NotUtf8` values of a loaded row back as TEXT (a BLOB otherwise)."""
    for column, value in zip(_STORED, row, strict=True):
        if isinstance(value, NotUtf8):
            name = f'"{column}"'
            sql = f"UPDATE episodes SET {name} = CAST({name} AS TEXT) WHERE seq = ?"
            await db.execute(dialect.sql(sql), (row[0],))


def _reads(dialect: Dialect, reads: Sequence[tuple[Partition, int]]) -> tuple[Any, ...]:
    """``(partition, after_seq)`` reads as the parameters of ``dialect.read_rows()``."""
    return dialect.reads([key_of_partition(p) for p, _ in reads], [after for _, after in reads])


async def _check_conflicts(db: Conn, stored: str, dialect: Dialect, rows: list[Row]) -> None:
    """Some ids already existed: fine if identical, else raise (the caller rolls back)."""
    by_id = {row[0]: row for row in rows}
    for old in await db.fetch(stored, (dialect.ids(list(by_id)),)):
        fields = row_differences(old, by_id[old[0]])
        if fields:
            raise duplicate_error(old[0], fields, "already exists")


async def _quarantine(store: EpisodeAccess, bad: list[tuple[Any, str]]) -> list[QuarantinedRow]:
    """The quarantine entries of undecodable rows ``(row, reason)``, in the order given:
    those noted before as they were, the others noted now (``recorded=False`` when the
    table could not be written); never raises for a table it cannot read or write."""
    if not bad:
        return []
    sql = _statements(store.dialect).shared
    seqs = sql.ids([row[0] for row, _ in bad])
    at_us = store._now_us()
    async with store._reading() as db:
        try:
            noted = {
                entry.seq: entry
                for entry in map(quarantined_row, await db.fetch(sql.noted_in, (seqs,)))
            }
        except store._unreadable:
            noted = {}
        keys = {row[0]: row[1] for row in await db.fetch(sql.row_keys_in, (seqs,))}
    at = from_us(at_us)
    fresh = [
        QuarantinedRow(
            row[0],
            row[1] if type(row[1]) is str else None,
            key if type(key := keys.get(row[0])) is str else None,
            reason,
            at,
        )
        for row, reason in bad
        if row[0] not in noted
    ]
    if fresh and not await _note(store, fresh, at_us):
        fresh = [replace(entry, recorded=False) for entry in fresh]
    noted.update((entry.seq, entry) for entry in fresh)
    return [noted[row[0]] for row, _ in bad]


async def _note(store: EpisodeAccess, entries: list[QuarantinedRow], at_us: int) -> bool:
    """Insert quarantine entries (existing seqs are kept) in a transaction of their own;
    False when the table cannot be written (a read-only file, a lock held too long, …)."""
    params = [(e.seq, e.episode_id, e.partition_key, e.reason, at_us) for e in entries]
    try:
        async with store._writing() as db:
            await db.executemany(_statements(store.dialect).note, params)
    except store._note_errors as exc:
        logger.warning("could not record %d quarantined episodes row(s): %s", len(params), exc)
        return False
    return True
