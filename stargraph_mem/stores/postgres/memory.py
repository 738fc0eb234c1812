"""Episodic memory over PostgreSQL: the same behaviour as the SQLite memory store.

Rows, checks, scope filters, the streaming writer and quarantine bookkeeping are the shared
code of :mod:`~stargraph_mem.stores.episode_rows`; this module holds the SQL and the
transactions. Episode writes hold the schema's ``episodes`` advisory lock, so seqs (an
identity column) commit in increasing order: a pass that read up to seq n never misses an
episode committed later with a smaller seq.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import psycopg

from stargraph_mem.errors import StoreError
from stargraph_mem.model.deltas import MemoryDelta
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.limits import DEFAULT_LIMITS, Limits
from stargraph_mem.stores.episode_io import (
    Discarded,
    EpisodeWriter,
    checked_reads,
    group_reads,
    put_rows,
    quarantine,
    read_recent,
    read_since,
)
from stargraph_mem.stores.episode_rows import (
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
from stargraph_mem.stores.memory import (
    CheckedRead,
    EpisodeRecord,
    QuarantinedRow,
)
from stargraph_mem.stores.models import ConsolidationRule, MigrationPlan, StoreHealth
from stargraph_mem.stores.plan_migration import Ledger, apply_plan, check_plan
from stargraph_mem.stores.postgres.connection import PgConn
from stargraph_mem.stores.postgres.repository import PostgresRepository
from stargraph_mem.stores.postgres.statements import (
    COUNT_OF,
    EPISODES,
    PLANS,
    READ_COLUMNS,
    SINCE_OF,
)
from stargraph_mem.stores.scope import Partition

if TYPE_CHECKING:
    pass

__all__ = ["PostgresMemoryStore", "recent_query"]

logger = logging.getLogger(__name__)

_LOCK: Final = "episodes"
_LEDGER: Final = Ledger(
    "schema_migrations",
    "INSERT INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES ((SELECT max(version) + 1 FROM schema_migrations), %s, %s, %s)",
    applied="SELECT plan FROM schema_migrations WHERE name = %s",
)
_STORED_SQL: Final = (
    'SELECT id, scope_key, partition_key, "user", session, agent, ts_us, tz_offset_s, '
    "content, source_node, metadata FROM episodes WHERE id = ANY(%s)"
)
_SINCE_SQL: Final = (
    f"SELECT {READ_COLUMNS} FROM episodes WHERE partition_key = %s AND seq > %s "
    "ORDER BY seq LIMIT %s"
)
_BY_IDS_SQL: Final = f"SELECT {READ_COLUMNS} FROM episodes WHERE id = ANY(%s) ORDER BY seq"
_TOUCH_SQL: Final = (
    "UPDATE episodes SET last_accessed_us = %s, access_count = access_count + 1 WHERE seq = %s"
)
_NOTE_SQL: Final = (
    "INSERT INTO quarantine (seq, episode_id, partition_key, reason, at_us) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (seq) DO NOTHING"
)
_PARTITIONS_SQL: Final = """
    WITH RECURSIVE keys(k) AS (
        SELECT min(partition_key) FROM episodes
        UNION ALL
        SELECT (SELECT min(partition_key) FROM episodes WHERE partition_key > keys.k)
        FROM keys WHERE keys.k IS NOT NULL
    )
    SELECT k FROM keys WHERE k IS NOT NULL"""


def recent_query(
    user: str, session: str | None, agent: str | None, limit: int
) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and parameters ``recent()`` runs on PostgreSQL."""
    check_limit(limit)
    where, params = scope_filter(user, session, agent, "%s")
    sql = (
        f"SELECT {READ_COLUMNS} FROM episodes WHERE {where} ORDER BY ts_us DESC, seq DESC LIMIT %s"
    )
    return sql, (*params, limit)


class PostgresMemoryStore(PostgresRepository):
    """The episodic memory store of a :class:`PostgresDatabase` (its pool, its schema)."""

    limits: Limits = DEFAULT_LIMITS
    """The size limits every write checks (``open_database(limits=…)`` sets them)."""

    def _now_us(self) -> int:
        return self.database.now_us()

    # --- lifecycle ----------------------------------------------------------------------

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations in one transaction and record the plan."""
        check_plan(plan, store="memory")
        now_us = self._now_us()
        async with self.database.transaction("schema") as db:
            await apply_plan(db, plan, store="memory", ledger=_LEDGER, now_us=now_us, dialect=PLANS)

    async def health(self) -> StoreHealth:
        """Figures from the server; ``schema_version`` is the highest applied migration
        plan of this store, as SQLite's memory store reports it."""
        found = await super().health()
        if not found.ok:
            return found
        return found.model_copy(update={"schema_version": await self.schema_version()})

    async def schema_version(self) -> int:
        """The highest applied migration version."""
        async with self.database.connection() as db:
            return int(await db.scalar("SELECT max(version) FROM schema_migrations"))

    # --- writes -------------------------------------------------------------------------

    async def put(self, episode: Episode, *, user: str, session: str, agent: str) -> None:
        """Store one episode under its own scope (which the caller must restate)."""
        check_scope(episode, user, session, agent)
        await self.put_many([episode])

    async def put_many(
        self, episodes: Sequence[Episode], *, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Store a batch in one transaction; return how many rows were new (see
        :meth:`SQLiteMemoryStore.put_many`)."""
        rows = dedupe_batch([episode_row(episode, self.limits) for episode in episodes])
        if not rows:
            return 0
        async with self.database.transaction(_LOCK) as db:
            inserted = await put_rows(db, EPISODES, rows, progress)
            if inserted != len(rows):
                await self._check_conflicts(db, rows)
        return inserted

    @asynccontextmanager
    async def writing(self) -> AsyncIterator[EpisodeWriter]:
        """One write transaction for a stream of chunks (see :meth:`SQLiteMemoryStore.writing`)."""
        try:
            async with self.database.transaction(_LOCK) as db:
                start = await db.scalar("SELECT coalesce(max(seq), 0) FROM episodes")
                writer = EpisodeWriter(db, EPISODES, int(start), self.limits)
                yield writer
                if writer.discarded:
                    raise Discarded
        except Discarded:
            pass

    @staticmethod
    async def _check_conflicts(db: PgConn, rows: list[Row]) -> None:
        by_id = {row[0]: row for row in rows}
        for old in await db.fetch(_STORED_SQL, (list(by_id),)):
            fields = row_differences(old, by_id[old[0]])
            if fields:
                raise duplicate_error(old[0], fields, "already exists")

    # --- reads --------------------------------------------------------------------------

    async def recent(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> list[Episode]:
        """Newest first (by UTC time, then insertion); widens as session/agent are omitted."""
        episodes, quarantined = await self.recent_checked(user, session, agent, limit=limit)
        warn_quarantined(quarantined)
        return episodes

    async def recent_checked(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> tuple[list[Episode], list[QuarantinedRow]]:
        """:meth:`recent`, and the undecodable rows met on the way (not logged)."""
        sql, params = recent_query(user, session, agent, limit)
        now_us = self._now_us()
        async with self.database.transaction() as db:
            found, bad = await read_recent(db, sql, params, limit, "%s")
            if found:
                await db.executemany(_TOUCH_SQL, [(now_us, seq) for seq, _ in found])
        quarantined = await self._quarantine(bad)
        return [episode for _, episode in found], quarantined

    async def since(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> list[EpisodeRecord]:
        """Episodes of one partition with ``seq > after_seq``, in ``seq`` order; undecodable
        rows are skipped, quarantined and logged (see :meth:`since_checked`)."""

        async def read(after: int, want: int | None) -> CheckedRead:
            return await self.since_checked(partition, after, limit=want)

        return await read_since(read, after_seq, limit)

    async def since_checked(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> CheckedRead:
        """The rows of one partition with ``seq > after_seq``, decoded, and those that do
        not decode (see :meth:`SQLiteMemoryStore.since_checked`)."""
        check_limit(limit, optional=True)
        params = (key_of_partition(partition), after_seq, limit)
        async with self.database.connection() as db:
            rows = await db.fetch(_SINCE_SQL, params)
        records, bad = split_rows(rows, row_record)
        return CheckedRead(records, await self._quarantine(bad))

    async def by_ids(self, ids: Sequence[str]) -> list[EpisodeRecord]:
        """The stored episodes among ``ids``, in ``seq`` order (undecodable ones skipped)."""
        async with self.database.connection() as db:
            rows = await db.fetch(_BY_IDS_SQL, (list(ids),))
        records, bad = split_rows(rows, row_record)
        warn_quarantined(await self._quarantine(bad))
        return records

    async def quarantined(self, partition: Partition | None = None) -> list[QuarantinedRow]:
        """The rows reads have quarantined (of one partition, or all), in ``seq`` order."""
        sql = "SELECT seq, episode_id, partition_key, reason, at_us FROM quarantine"
        params: tuple[str, ...] = ()
        if partition is not None:
            sql += " WHERE partition_key = %s"
            params = (key_of_partition(partition),)
        async with self.database.connection() as db:
            rows = await db.fetch(sql + " ORDER BY seq", params)
        return [quarantined_row(row) for row in rows]

    async def _quarantine(self, bad: list[tuple[Any, str]]) -> list[QuarantinedRow]:
        """Note undecodable rows once per seq; never raises for a table it cannot write."""
        if not bad:
            return []

        async def note(entries: list[QuarantinedRow], at_us: int) -> bool:
            params = [(e.seq, e.episode_id, e.partition_key, e.reason, at_us) for e in entries]
            try:
                async with self.database.transaction() as db:
                    await db.executemany(_NOTE_SQL, params)
            except psycopg.Error as exc:
                logger.warning(
                    "could not record %d quarantined episodes row(s): %s", len(params), exc
                )
                return False
            return True

        async with self.database.connection() as db:
            return await quarantine(db, EPISODES, bad, self._now_us(), note, psycopg.Error)

    async def max_seq(self, partition: Partition) -> int:
        """The partition's highest ``seq`` (0 when it has no episodes)."""
        async with self.database.connection() as db:
            seq = await db.scalar(
                "SELECT seq FROM episodes WHERE partition_key = %s ORDER BY seq DESC LIMIT 1",
                (key_of_partition(partition),),
            )
        return 0 if seq is None else int(seq)

    async def count_since(self, partition: Partition, after_seq: int) -> int:
        """How many rows of the partition have ``seq > after_seq`` (quarantined ones too)."""
        async with self.database.connection() as db:
            count = await db.scalar(
                "SELECT count(*) FROM episodes WHERE partition_key = %s AND seq > %s",
                (key_of_partition(partition), after_seq),
            )
        return int(count)

    async def partitions(self) -> list[Partition]:
        """Every distinct ``(user, agent)`` pair with episodes, sorted by (user, agent)."""
        async with self.database.connection() as db:
            rows = await db.fetch(_PARTITIONS_SQL)
        found: list[Partition] = []
        for (key,) in rows:
            partition = partition_of(key)
            if partition is None:
                logger.warning("skipped malformed episodes partition key %r", key)
            else:
                found.append(partition)
        return sorted(found, key=lambda p: (p.user, p.agent))

    async def consolidate(
        self, rule: ConsolidationRule, *, due_only: bool = False
    ) -> list[MemoryDelta]:
        """Not available: this legacy entry point opens SQLite stores by path (use
        ``Consolidator.open(url, packs)``).

        Raises :class:`StoreError` (nothing read or written) instead of letting it create a
        SQLite file named after this database's URL.
        """
        raise StoreError(
            f"consolidate() of rule {rule.id!r} runs on SQLite files only; consolidate "
            f"{self.database.where} with Consolidator.open(url, packs)",
            rule_id=rule.id,
        )

    # --- many partitions at once (batched passes) ----------------------------------------

    async def since_checked_of(
        self, reads: Sequence[tuple[Partition, int]], *, limit: int | None = None
    ) -> list[CheckedRead]:
        """:meth:`since_checked` of many ``(partition, after_seq)`` pairs (results in the
        order given), in one statement; ``limit`` applies to each partition."""
        check_limit(limit, optional=True)
        keys, afters = _reads(reads)
        async with self.database.connection() as db:
            rows = await db.fetch(SINCE_OF, (keys, afters, limit))
        split, bad = group_reads(rows, len(reads))
        return checked_reads(split, await self._quarantine(bad))

    async def count_since_of(self, reads: Sequence[tuple[Partition, int]]) -> list[int]:
        """:meth:`count_since` of many ``(partition, after_seq)`` pairs, in one statement."""
        async with self.database.connection() as db:
            rows = await db.fetch(COUNT_OF, _reads(reads))
        return [int(count) for (count,) in rows]


def _reads(reads: Sequence[tuple[Partition, int]]) -> tuple[list[str], list[int]]:
    """The partition keys and seqs of ``(partition, after_seq)`` reads, as two arrays."""
    return [key_of_partition(p) for p, _ in reads], [after for _, after in reads]
