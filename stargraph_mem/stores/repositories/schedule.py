"""The scheduler's state, written once for every backend: run records, registered rules, the lease.

``rule_runs`` keeps, per (pack, rule, partition), the time its cron clock started
(``anchor_us``), the last applied pass (``last_run_us``) and the token of the scheduler
run that applied it; a pass records its runs inside the fact store's transaction with
:func:`~stargraph_mem.stores.repositories.schedule_runs.record_runs` (statements:
:func:`run_statements`).
``scheduler_lease`` holds one row per lease name: who holds it and until when. Lease
changes take the ``schedule`` lock (PostgreSQL's advisory lock; SQLite has one writer).

Every statement is written once in the qmark style and rendered for the backend's
dialect once, when its first repository is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Final

from stargraph_mem.model.time import seconds_us, to_us
from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.repositories.access import Access
from stargraph_mem.stores.repositories.schedule_runs import (
    LeaseState,
    RunState,
    RunStatements,
    episode_spans,
    pending_states,
    registered_rules,
    run_states,
    take_lease,
)
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Many

__all__ = ["Schedule", "run_statements"]

_LOCK: Final = "schedule"
_RUN_COLUMNS: Final = "rule_id, partition_key, anchor_us, last_run_us, runs, token"


@dataclass(frozen=True, slots=True)
class _Statements:
    """The schedule's SQL, rendered for one dialect."""

    runs: str
    runs_in_partition: str
    runs_of: str
    pending: str
    """With ``{values}``: one ``(?)`` per rule id (rendered when the count is known)."""
    spans_of: str
    anchor: Many
    stored_rules: str
    delete_rules: str
    insert_rule: str
    registered: str
    release: str
    total: str
    lease: RunStatements


@cache
def run_statements(dialect: Dialect) -> RunStatements:
    """The run record compare-and-set and the lease statements, for ``dialect``."""
    sql = dialect.sql
    return RunStatements(
        record=sql(
            "INSERT INTO rule_runs (pack, rule_id, partition_key, anchor_us, last_run_us, runs, "
            "token) VALUES (?, ?, ?, ?, ?, 1, ?) "
            "ON CONFLICT (pack, rule_id, partition_key) DO UPDATE SET "
            "last_run_us = excluded.last_run_us, runs = rule_runs.runs + "
            "CASE WHEN rule_runs.token <> excluded.token THEN 1 ELSE 0 END, "
            "token = excluded.token "
            "WHERE rule_runs.token = ? OR rule_runs.token = excluded.token"
        ),
        token=sql(
            "SELECT token FROM rule_runs WHERE pack = ? AND rule_id = ? AND partition_key = ?"
        ),
        lease=sql("SELECT holder, expires_us FROM scheduler_lease WHERE name = ?"),
        upsert_lease=sql(
            "INSERT INTO scheduler_lease (name, holder, expires_us) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
            "expires_us = excluded.expires_us"
        ),
        record_many=sql(_RECORD_MANY) if dialect.name == "postgresql" else "",
    )


_RECORD_MANY: Final = (
    # the row-by-row record's compare-and-set for all the runs at once: a stored row is
    # updated when its token is the expected one or ours, a missing one inserted (one
    # inserted meanwhile by another scheduler is left alone, so not counted)
    "WITH c AS (SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::bigint[], "
    "?::text[], ?::text[]) AS c(pack, rule_id, partition_key, at_us, token, expect)), "
    "changed AS (UPDATE rule_runs AS r SET last_run_us = c.at_us, "
    "runs = r.runs + CASE WHEN r.token <> c.token THEN 1 ELSE 0 END, token = c.token "
    "FROM c WHERE r.pack = c.pack AND r.rule_id = c.rule_id "
    "AND r.partition_key = c.partition_key AND (r.token = c.expect OR r.token = c.token) "
    "RETURNING 1), "
    "added AS (INSERT INTO rule_runs (pack, rule_id, partition_key, anchor_us, last_run_us, "
    "runs, token) SELECT c.pack, c.rule_id, c.partition_key, c.at_us, c.at_us, 1, c.token "
    "FROM c WHERE NOT EXISTS (SELECT 1 FROM rule_runs r WHERE r.pack = c.pack "
    "AND r.rule_id = c.rule_id AND r.partition_key = c.partition_key) "
    "ON CONFLICT DO NOTHING RETURNING 1) "
    "SELECT (SELECT count(*) FROM changed) + (SELECT count(*) FROM added)"
)


@cache
def _statements(dialect: Dialect) -> _Statements:
    sql = dialect.sql
    runs = f"SELECT {_RUN_COLUMNS} FROM rule_runs WHERE pack = ?"
    return _Statements(
        runs=sql(runs),
        runs_in_partition=sql(f"{runs} AND partition_key = ?"),
        runs_of=sql(f"{runs} AND partition_key {dialect.in_ids()}"),
        pending=sql(
            "WITH wanted(rule_id) AS (VALUES {values}) "
            "SELECT wanted.rule_id, r.anchor_us, r.last_run_us, r.runs, r.token, "
            "(SELECT count(*) FROM episodes e WHERE e.partition_key = ? "
            "AND e.seq > coalesce(w.last_seq, 0)) "
            "FROM wanted LEFT JOIN rule_runs r ON r.pack = ? AND r.rule_id = wanted.rule_id "
            "AND r.partition_key = ? "
            "LEFT JOIN watermarks w ON w.pack = ? AND w.rule_id = wanted.rule_id "
            "AND w.partition_key = ?"
        ),
        spans_of=sql(
            f"SELECT r.i, min(e.ts_us), max(e.ts_us) FROM {dialect.read_rows()} "
            "LEFT JOIN episodes e ON e.partition_key = r.k AND e.seq > r.after GROUP BY r.i"
        ),
        anchor=dialect.insert_many(
            "rule_runs",
            (
                ("pack", "text"),
                ("rule_id", "text"),
                ("partition_key", "text"),
                ("anchor_us", "bigint"),
            ),
            "ON CONFLICT DO NOTHING",
        ),
        stored_rules=sql(
            "SELECT rule_id, rule_index, cadence FROM schedule_rules WHERE pack = ? "
            "ORDER BY rule_index"
        ),
        delete_rules=sql("DELETE FROM schedule_rules WHERE pack = ?"),
        insert_rule=sql(
            "INSERT INTO schedule_rules (pack, rule_id, rule_index, cadence) VALUES (?, ?, ?, ?)"
        ),
        registered=sql(
            "SELECT pack, rule_id, rule_index, cadence FROM schedule_rules "
            "ORDER BY pack, rule_index"
        ),
        release=sql("DELETE FROM scheduler_lease WHERE name = ? AND holder = ?"),
        total=sql("SELECT coalesce(sum(runs), 0) FROM rule_runs"),
        lease=run_statements(dialect),
    )


class Schedule:
    """Run records and the scheduler lease (mixed into a backend's store, which supplies
    :class:`~stargraph_mem.stores.repositories.access.Access`)."""

    __slots__ = ()

    async def runs(
        self: Access, pack: str, partition: Partition | None = None
    ) -> dict[tuple[str, str], RunState]:
        """Stored run states of ``pack`` by (rule id, partition key), for one partition or all."""
        sql = _statements(self.dialect)
        async with self._reading() as db:
            if partition is None:
                return run_states(await db.fetch(sql.runs, (pack,)))
            return run_states(await db.fetch(sql.runs_in_partition, (pack, partition.key)))

    async def runs_of(
        self: Access, pack: str, partitions: Sequence[Partition]
    ) -> dict[tuple[str, str], RunState]:
        """:meth:`runs` of the given partitions only (one statement)."""
        keys = self.dialect.ids([p.key for p in partitions])
        async with self._reading() as db:
            return run_states(await db.fetch(_statements(self.dialect).runs_of, (pack, keys)))

    async def pending(
        self: Access, pack: str, partition: Partition, rule_ids: Sequence[str]
    ) -> dict[str, tuple[int, RunState | None]]:
        """Per rule: episodes of ``partition`` after the rule's watermark, and its run state.

        One statement over the episodes and watermarks tables of the same database (the
        memory and fact stores' tables; a missing watermark counts from seq 0).
        """
        values = ", ".join([f"({self.dialect.mark})"] * len(rule_ids))
        sql = _statements(self.dialect).pending.replace("{values}", values)
        key = partition.key
        async with self._reading() as db:
            rows = await db.fetch(sql, (*rule_ids, key, pack, key, pack, key))
        return pending_states(rows)

    async def spans_of(
        self: Access, reads: Sequence[tuple[Partition, int]]
    ) -> list[tuple[int, int] | None]:
        """Per ``(partition, after_seq)`` read: the earliest and latest timestamp (µs) of
        the partition's episodes after ``after_seq``, or ``None`` when there is none (one
        statement; what ``idle`` and ``or_after`` cadences are judged on)."""
        params = self.dialect.reads([p.key for p, _ in reads], [after for _, after in reads])
        async with self._reading() as db:
            rows = await db.fetch(_statements(self.dialect).spans_of, params)
        return episode_spans(rows, len(reads))

    async def anchor(
        self: Access, pack: str, anchors: Sequence[tuple[str, Partition, int]]
    ) -> None:
        """Start the cron clocks of (rule id, partition, anchor µs) that have none yet."""
        if not anchors:
            return
        rows = [(pack, rule_id, partition.key, at_us) for rule_id, partition, at_us in anchors]
        async with self._writing() as db:
            await db.run_many(_statements(self.dialect).anchor, list(dict.fromkeys(rows)))

    async def register(self: Access, pack: str, rules: Sequence[tuple[str, int, str]]) -> None:
        """Replace ``pack``'s registered (rule id, rule index, cadence JSON) rows."""
        sql = _statements(self.dialect)
        rows = [(pack, rule_id, index, cadence) for rule_id, index, cadence in rules]
        wanted = [row[1:] for row in sorted(rows, key=lambda r: r[2])]
        async with self._reading() as db:
            stored = await db.fetch(sql.stored_rules, (pack,))
        if [tuple(r) for r in stored] == wanted:
            return
        async with self._writing(_LOCK) as db:
            await db.execute(sql.delete_rules, (pack,))
            if rows:
                await db.executemany(sql.insert_rule, rows)

    async def registered(self: Access) -> dict[str, list[tuple[str, int, str]]]:
        """Registered packs: name → (rule id, rule index, cadence JSON), by rule index."""
        async with self._reading() as db:
            return registered_rules(await db.fetch(_statements(self.dialect).registered))

    async def take_lease(
        self: Access, name: str, holder: str, now: datetime, ttl_seconds: float
    ) -> LeaseState:
        """Take or renew lease ``name`` for ``holder`` unless someone else holds it unexpired."""
        now_us = to_us(now, "lease time")
        expires = now_us + seconds_us(ttl_seconds)
        async with self._writing(_LOCK) as db:
            return await take_lease(
                db, _statements(self.dialect).lease, name, holder, now_us, expires
            )

    async def release_lease(self: Access, name: str, holder: str) -> None:
        """Give the lease up if ``holder`` holds it."""
        async with self._writing(_LOCK) as db:
            await db.execute(_statements(self.dialect).release, (name, holder))

    async def lease(self: Access, name: str) -> LeaseState | None:
        """The lease row as stored (``ours`` is False: no holder is asking)."""
        async with self._reading() as db:
            rows = await db.fetch(_statements(self.dialect).lease.lease, (name,))
        return LeaseState(str(rows[0][0]), int(rows[0][1]), ours=False) if rows else None

    async def total_runs(self: Access) -> int:
        """How many passes have been recorded, over every rule and partition."""
        async with self._reading() as db:
            return int(await db.scalar(_statements(self.dialect).total) or 0)
