"""Scheduler state over SQLite: per (pack, rule, partition) run records, and a lease row.

``rule_runs`` keeps, per (pack, rule, partition), the time its cron clock started
(``anchor_us``), the last applied pass (``last_run_us``) and the token of the scheduler
run that applied it. A pass records its runs inside the fact store's transaction with
:func:`record_runs`, a compare-and-set on that token: a second scheduler that decided on
the same state finds the token changed and rolls its whole pass back. ``scheduler_lease``
holds one row per lease name: who holds it and until when.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import aiosqlite
import orjson

from stargraph_mem.model.time import seconds_us, to_us
from stargraph_mem.stores.schedule_runs import (
    LeaseState,
    RuleRun,
    RunState,
    RunStatements,
    episode_spans,
    pending_states,
    registered_rules,
    run_states,
    take_lease,
)
from stargraph_mem.stores.schedule_runs import record_runs as record_run_rows
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_base import (
    SQLiteConn,
    SQLiteStoreBase,
    fetch,
    scalar,
    transaction,
)

__all__ = ["LeaseState", "RuleRun", "RunState", "SQLiteScheduleStore", "record_runs"]

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS rule_runs (
        pack TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        anchor_us INTEGER NOT NULL,
        last_run_us INTEGER NULL,
        runs INTEGER NOT NULL DEFAULT 0,
        token TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (pack, rule_id, partition_key)
    )""",
    """CREATE TABLE IF NOT EXISTS scheduler_lease (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_us INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS schedule_rules (
        pack TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        rule_index INTEGER NOT NULL,
        cadence TEXT NOT NULL,
        PRIMARY KEY (pack, rule_id)
    )""",
)
TABLES: Final = ("rule_runs", "scheduler_lease", "schedule_rules")

_ANCHOR: Final = (
    "INSERT OR IGNORE INTO rule_runs (pack, rule_id, partition_key, anchor_us) VALUES (?, ?, ?, ?)"
)
_RECORD: Final = (
    "INSERT INTO rule_runs (pack, rule_id, partition_key, anchor_us, last_run_us, runs, token) "
    "VALUES (?, ?, ?, ?, ?, 1, ?) "
    "ON CONFLICT (pack, rule_id, partition_key) DO UPDATE SET "
    "last_run_us = excluded.last_run_us, "
    "runs = runs + (token <> excluded.token), token = excluded.token "
    "WHERE token = ? OR token = excluded.token"
)
RUNS: Final = RunStatements(
    record=_RECORD,
    token="SELECT token FROM rule_runs WHERE pack = ? AND rule_id = ? AND partition_key = ?",
    lease="SELECT holder, expires_us FROM scheduler_lease WHERE name = ?",
    upsert_lease=(
        "INSERT INTO scheduler_lease (name, holder, expires_us) VALUES (?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
        "expires_us = excluded.expires_us"
    ),
)
_RUN_COLUMNS: Final = "rule_id, partition_key, anchor_us, last_run_us, runs, token"
_SPANS_OF: Final = """
    SELECT j.key, min(e.ts_us), max(e.ts_us) FROM json_each(?) j
    LEFT JOIN episodes e ON e.partition_key = j.value ->> 0 AND e.seq > j.value ->> 1
    GROUP BY j.key"""


_TABLE_NAMES: Final = ("rule_runs", "scheduler_lease", "schedule_rules")
_PRESENT: Final = (
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
    f"({', '.join(repr(name) for name in _TABLE_NAMES)})"
)
_ENSURED: weakref.WeakSet[aiosqlite.Connection] = weakref.WeakSet()
"""Connections that have created the scheduler tables already (once per connection)."""


async def ensure_schema(db: aiosqlite.Connection) -> None:
    """Create the scheduler tables if missing (safe inside an open transaction)."""
    if db in _ENSURED:
        return
    present = await scalar(db, _PRESENT)
    if present != len(_TABLE_NAMES):
        for statement in _SCHEMA:
            await db.execute(statement)
        if db.in_transaction:
            return  # created inside a transaction that may still roll back: check next time
    _ENSURED.add(db)


async def record_runs(db: aiosqlite.Connection, runs: Sequence[RuleRun]) -> None:
    """Record ``runs`` inside the caller's transaction (see :func:`schedule_runs.record_runs`)."""
    if runs:
        await ensure_schema(db)
        await record_run_rows(SQLiteConn(db), RUNS, runs)


class SQLiteScheduleStore(SQLiteStoreBase):
    """Run records and the scheduler lease, in the same file as the other stores."""

    _tables = TABLES
    _added_later = ("schedule_rules",)
    _store_name = "schedule"

    async def _bootstrap(self, db: aiosqlite.Connection) -> None:
        async with transaction(db):
            await ensure_schema(db)
            await self._stamp_if_complete(db)

    async def _figures(self, db: aiosqlite.Connection) -> dict[str, Any]:
        return {}

    async def runs(
        self, pack: str, partition: Partition | None = None
    ) -> dict[tuple[str, str], RunState]:
        """Stored run states of ``pack`` by (rule id, partition key), for one partition or all."""
        sql = f"SELECT {_RUN_COLUMNS} FROM rule_runs WHERE pack = ?"
        params: tuple[str, ...] = (pack,)
        if partition is not None:
            sql += " AND partition_key = ?"
            params = (pack, partition.key)
        async with self._read() as db:
            return run_states(await fetch(db, sql, params))

    async def runs_of(
        self, pack: str, partitions: Sequence[Partition]
    ) -> dict[tuple[str, str], RunState]:
        """:meth:`runs` of the given partitions only (one statement)."""
        sql = (
            f"SELECT {_RUN_COLUMNS} FROM rule_runs WHERE pack = ? "
            "AND partition_key IN (SELECT value FROM json_each(?))"
        )
        keys = orjson.dumps([p.key for p in partitions]).decode()
        async with self._read() as db:
            return run_states(await fetch(db, sql, (pack, keys)))

    async def pending(
        self, pack: str, partition: Partition, rule_ids: Sequence[str]
    ) -> dict[str, tuple[int, RunState | None]]:
        """Per rule: episodes of ``partition`` after the rule's watermark, and its run state.

        One statement over the episodes and watermarks tables of the same file (the
        memory and fact stores' tables; a missing watermark counts from seq 0).
        """
        values = ", ".join("(?)" for _ in rule_ids)
        sql = (
            f"WITH wanted(rule_id) AS (VALUES {values}) "
            "SELECT wanted.rule_id, r.anchor_us, r.last_run_us, r.runs, r.token, "
            "(SELECT count(*) FROM episodes e WHERE e.partition_key = ? "
            "AND e.seq > coalesce(w.last_seq, 0)) "
            "FROM wanted LEFT JOIN rule_runs r ON r.pack = ? AND r.rule_id = wanted.rule_id "
            "AND r.partition_key = ? "
            "LEFT JOIN watermarks w ON w.pack = ? AND w.rule_id = wanted.rule_id "
            "AND w.partition_key = ?"
        )
        key = partition.key
        async with self._read() as db:
            rows = await fetch(db, sql, (*rule_ids, key, pack, key, pack, key))
        return pending_states(rows)

    async def spans_of(
        self, reads: Sequence[tuple[Partition, int]]
    ) -> list[tuple[int, int] | None]:
        """Per ``(partition, after_seq)`` read: the earliest and latest timestamp (µs) of
        the partition's episodes after ``after_seq``, or ``None`` when there is none (one
        statement; what ``idle`` and ``or_after`` cadences are judged on)."""
        wanted = orjson.dumps([[p.key, after] for p, after in reads]).decode()
        async with self._read() as db:
            rows = await fetch(db, _SPANS_OF, (wanted,))
        return episode_spans(rows, len(reads))

    async def anchor(self, pack: str, anchors: Sequence[tuple[str, Partition, int]]) -> None:
        """Start the cron clocks of (rule id, partition, anchor µs) that have none yet."""
        if not anchors:
            return
        rows = [(pack, rule_id, partition.key, at_us) for rule_id, partition, at_us in anchors]
        async with self._write() as db:
            await db.executemany(_ANCHOR, rows)

    async def register(self, pack: str, rules: Sequence[tuple[str, int, str]]) -> None:
        """Replace ``pack``'s registered (rule id, rule index, cadence JSON) rows."""
        rows = [(pack, rule_id, index, cadence) for rule_id, index, cadence in rules]
        async with self._read() as db:
            stored = await fetch(
                db,
                "SELECT rule_id, rule_index, cadence FROM schedule_rules WHERE pack = ? "
                "ORDER BY rule_index",
                (pack,),
            )
        if [tuple(r) for r in stored] == [row[1:] for row in sorted(rows, key=lambda r: r[2])]:
            return
        async with self._write() as db:
            await db.execute("DELETE FROM schedule_rules WHERE pack = ?", (pack,))
            await db.executemany(
                "INSERT INTO schedule_rules (pack, rule_id, rule_index, cadence) "
                "VALUES (?, ?, ?, ?)",
                rows,
            )

    async def registered(self) -> dict[str, list[tuple[str, int, str]]]:
        """Registered packs: name → (rule id, rule index, cadence JSON), by rule index."""
        async with self._read() as db:
            rows = await fetch(
                db,
                "SELECT pack, rule_id, rule_index, cadence FROM schedule_rules "
                "ORDER BY pack, rule_index",
            )
        return registered_rules(rows)

    async def take_lease(
        self, name: str, holder: str, now: datetime, ttl_seconds: float
    ) -> LeaseState:
        """Take or renew lease ``name`` for ``holder`` unless someone else holds it unexpired."""
        now_us = to_us(now, "lease time")
        expires = now_us + seconds_us(ttl_seconds)
        async with self._write() as db:
            return await take_lease(SQLiteConn(db), RUNS, name, holder, now_us, expires)

    async def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up if ``holder`` holds it."""
        async with self._write() as db:
            await db.execute(
                "DELETE FROM scheduler_lease WHERE name = ? AND holder = ?", (name, holder)
            )

    async def lease(self, name: str) -> LeaseState | None:
        """The lease row as stored (``ours`` is False: no holder is asking)."""
        async with self._read() as db:
            rows = await fetch(db, RUNS.lease, (name,))
        return LeaseState(str(rows[0][0]), int(rows[0][1]), ours=False) if rows else None

    async def total_runs(self) -> int:
        """How many passes have been recorded, over every rule and partition."""
        async with self._read() as db:
            return int(await scalar(db, "SELECT coalesce(sum(runs), 0) FROM rule_runs") or 0)
