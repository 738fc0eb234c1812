"""Scheduler state over SQLite: the schedule tables and the file's connection.

The reads and writes are the shared :class:`~stargraph_mem.stores.repositories.schedule.Schedule`;
this module creates its tables (on open, or inside a pass's transaction:
:func:`record_runs`).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Final

import aiosqlite

from stargraph_mem.stores.repositories.schedule import Schedule, run_statements
from stargraph_mem.stores.repositories.schedule_runs import LeaseState, RuleRun, RunState
from stargraph_mem.stores.repositories.schedule_runs import record_runs as record_run_rows
from stargraph_mem.stores.sqlite.connection import SQLiteConn, SQLiteStoreBase, scalar, transaction
from stargraph_mem.stores.sqlite.dialect import SQLITE

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

RUNS: Final = run_statements(SQLITE)
"""The run record and lease statements, rendered for SQLite."""


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


class SQLiteScheduleStore(Schedule, SQLiteStoreBase):
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
