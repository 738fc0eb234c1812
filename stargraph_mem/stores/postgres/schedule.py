"""Scheduler state over PostgreSQL: run records, registered rules and the lease row.

The same behaviour as :class:`~stargraph_mem.stores.sqlite_schedule.SQLiteScheduleStore`;
the run record compare-and-set is the shared :func:`~stargraph_mem.stores.schedule_runs.record_runs`
(run by the fact store inside a pass's transaction). Lease changes hold the schema's
``schedule`` advisory lock, so two schedulers never both take a lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final

from stargraph_mem.model.time import seconds_us, to_us
from stargraph_mem.stores.postgres.repository import PostgresRepository
from stargraph_mem.stores.postgres.statements import RUNS
from stargraph_mem.stores.schedule_runs import (
    LeaseState,
    RunState,
    episode_spans,
    pending_states,
    registered_rules,
    run_states,
    take_lease,
)
from stargraph_mem.stores.scope import Partition

if TYPE_CHECKING:
    pass

__all__ = ["PostgresScheduleStore"]

_LOCK: Final = "schedule"
_RUN_COLUMNS: Final = "rule_id, partition_key, anchor_us, last_run_us, runs, token"
_SPANS_OF: Final = """
    SELECT r.i - 1, min(e.ts_us), max(e.ts_us)
    FROM unnest(%s::text[], %s::bigint[]) WITH ORDINALITY AS r(k, after, i)
    LEFT JOIN episodes e ON e.partition_key = r.k AND e.seq > r.after
    GROUP BY r.i"""
_ANCHOR: Final = (
    "INSERT INTO rule_runs (pack, rule_id, partition_key, anchor_us) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT DO NOTHING"
)


class PostgresScheduleStore(PostgresRepository):
    """Run records and the scheduler lease of a :class:`PostgresDatabase`."""

    async def runs(
        self, pack: str, partition: Partition | None = None
    ) -> dict[tuple[str, str], RunState]:
        """Stored run states of ``pack`` by (rule id, partition key), for one partition or all."""
        sql = f"SELECT {_RUN_COLUMNS} FROM rule_runs WHERE pack = %s"
        params: tuple[str, ...] = (pack,)
        if partition is not None:
            sql += " AND partition_key = %s"
            params = (pack, partition.key)
        async with self.database.connection() as db:
            return run_states(await db.fetch(sql, params))

    async def runs_of(
        self, pack: str, partitions: Sequence[Partition]
    ) -> dict[tuple[str, str], RunState]:
        """:meth:`runs` of the given partitions only (one statement)."""
        sql = (
            f"SELECT {_RUN_COLUMNS} FROM rule_runs WHERE pack = %s "
            "AND partition_key = ANY(%s::text[])"
        )
        async with self.database.connection() as db:
            return run_states(await db.fetch(sql, (pack, [p.key for p in partitions])))

    async def pending(
        self, pack: str, partition: Partition, rule_ids: Sequence[str]
    ) -> dict[str, tuple[int, RunState | None]]:
        """Per rule: episodes of ``partition`` after the rule's watermark, and its run state."""
        sql = (
            "SELECT wanted.rule_id, r.anchor_us, r.last_run_us, r.runs, r.token, "
            "(SELECT count(*) FROM episodes e WHERE e.partition_key = %s "
            "AND e.seq > coalesce(w.last_seq, 0)) "
            "FROM unnest(%s::text[]) AS wanted(rule_id) "
            "LEFT JOIN rule_runs r ON r.pack = %s AND r.rule_id = wanted.rule_id "
            "AND r.partition_key = %s "
            "LEFT JOIN watermarks w ON w.pack = %s AND w.rule_id = wanted.rule_id "
            "AND w.partition_key = %s"
        )
        key = partition.key
        async with self.database.connection() as db:
            rows = await db.fetch(sql, (key, list(rule_ids), pack, key, pack, key))
        return pending_states(rows)

    async def spans_of(
        self, reads: Sequence[tuple[Partition, int]]
    ) -> list[tuple[int, int] | None]:
        """Per ``(partition, after_seq)`` read: the earliest and latest timestamp (µs) of
        the partition's episodes after ``after_seq``, or ``None`` (one statement)."""
        keys = [p.key for p, _ in reads]
        afters = [after for _, after in reads]
        async with self.database.connection() as db:
            rows = await db.fetch(_SPANS_OF, (keys, afters))
        return episode_spans(rows, len(reads))

    async def anchor(self, pack: str, anchors: Sequence[tuple[str, Partition, int]]) -> None:
        """Start the cron clocks of (rule id, partition, anchor µs) that have none yet."""
        if not anchors:
            return
        rows = [(pack, rule_id, partition.key, at_us) for rule_id, partition, at_us in anchors]
        async with self.database.transaction() as db:
            await db.executemany(_ANCHOR, rows)

    async def register(self, pack: str, rules: Sequence[tuple[str, int, str]]) -> None:
        """Replace ``pack``'s registered (rule id, rule index, cadence JSON) rows."""
        rows = [(pack, rule_id, index, cadence) for rule_id, index, cadence in rules]
        async with self.database.transaction(_LOCK) as db:
            stored = await db.fetch(
                "SELECT rule_id, rule_index, cadence FROM schedule_rules WHERE pack = %s "
                "ORDER BY rule_index",
                (pack,),
            )
            if [tuple(r) for r in stored] == [row[1:] for row in sorted(rows, key=lambda r: r[2])]:
                return
            await db.execute("DELETE FROM schedule_rules WHERE pack = %s", (pack,))
            if rows:
                await db.executemany(
                    "INSERT INTO schedule_rules (pack, rule_id, rule_index, cadence) "
                    "VALUES (%s, %s, %s, %s)",
                    rows,
                )

    async def registered(self) -> dict[str, list[tuple[str, int, str]]]:
        """Registered packs: name → (rule id, rule index, cadence JSON), by rule index."""
        async with self.database.connection() as db:
            rows = await db.fetch(
                "SELECT pack, rule_id, rule_index, cadence FROM schedule_rules "
                "ORDER BY pack, rule_index"
            )
        return registered_rules(rows)

    async def take_lease(
        self, name: str, holder: str, now: datetime, ttl_seconds: float
    ) -> LeaseState:
        """Take or renew lease ``name`` for ``holder`` unless someone else holds it unexpired."""
        now_us = to_us(now, "lease time")
        expires = now_us + seconds_us(ttl_seconds)
        async with self.database.transaction(_LOCK) as db:
            return await take_lease(db, RUNS, name, holder, now_us, expires)

    async def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up if ``holder`` holds it."""
        async with self.database.transaction(_LOCK) as db:
            await db.execute(
                "DELETE FROM scheduler_lease WHERE name = %s AND holder = %s", (name, holder)
            )

    async def lease(self, name: str) -> LeaseState | None:
        """The lease row as stored (``ours`` is False: no holder is asking)."""
        async with self.database.connection() as db:
            rows = await db.fetch(RUNS.lease, (name,))
        return LeaseState(str(rows[0][0]), int(rows[0][1]), ours=False) if rows else None

    async def total_runs(self) -> int:
        """How many passes have been recorded, over every rule and partition."""
        async with self.database.connection() as db:
            return int(await db.scalar("SELECT coalesce(sum(runs), 0) FROM rule_runs") or 0)
