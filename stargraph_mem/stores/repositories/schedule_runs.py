"""Scheduler run records, backend-neutral: the records, and the compare-and-set that writes them.

A pass records its runs inside the fact store's transaction with :func:`record_runs`, a
compare-and-set on the token of the scheduler run that applied the previous pass: a second
scheduler that decided on the same state finds the token changed and rolls its whole pass
back. The backend gives the two statements (see :class:`RunStatements`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stargraph_mem.errors import PassConflictError
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Conn

__all__ = [
    "LeaseState",
    "RuleRun",
    "RunState",
    "RunStatements",
    "episode_spans",
    "pending_states",
    "record_runs",
    "registered_rules",
    "run_states",
    "take_lease",
]


@dataclass(frozen=True, slots=True)
class RunStatements:
    """``record``: the upsert ``(pack, rule, key, anchor, at, token, expect)`` that changes
    a row only when its token is ``expect`` or ours; ``token``: a row's token by
    ``(pack, rule, key)``."""

    record: str
    token: str
    lease: str
    """A lease's ``holder, expires_us`` by name."""
    upsert_lease: str
    """Set a lease's ``(name, holder, expires_us)``."""
    record_many: str = ""
    """When the backend has one: ``record`` for many runs in one statement, given one
    array per column ``(pack, rule, key, at, token, expect)``, selecting how many rows it
    wrote."""


@dataclass(frozen=True, slots=True)
class RuleRun:
    """A pass of ``rule_id`` over ``partition`` applied at ``at`` by the scheduler run
    ``token``, decided on the state whose token was ``expect`` ('' when none)."""

    pack: str
    rule_id: str
    partition: Partition
    at: datetime
    token: str
    expect: str = ""
    if_consumed: bool = False
    """Recorded only by a pass that changes something (a ``consolidate``'s record: running
    it again over nothing new leaves the stores exactly as they were)."""


@dataclass(frozen=True, slots=True)
class RunState:
    """What is stored for one (pack, rule, partition)."""

    anchor_us: int
    last_run_us: int | None
    runs: int
    token: str

    @property
    def since_us(self) -> int:
        """Where the cron clock runs from: the last run, else the anchor."""
        return self.anchor_us if self.last_run_us is None else self.last_run_us


@dataclass(frozen=True, slots=True)
class LeaseState:
    """The outcome of a lease attempt: who holds it now, until when, and whether we do."""

    holder: str
    expires_us: int
    ours: bool


async def record_runs(db: Conn, sql: RunStatements, runs: Sequence[RuleRun]) -> None:
    """Record ``runs`` inside the caller's transaction; a changed token raises
    :class:`PassConflictError` (the caller's transaction then rolls back)."""
    if not runs:
        return
    rows = []
    for run in runs:
        at_us = to_us(run.at, "run time")
        rows.append((run.pack, run.rule_id, run.partition.key, at_us, at_us, run.token, run.expect))
    keys = {(run.pack, run.rule_id, run.partition.key) for run in runs}
    if sql.record_many and len(rows) > 1 and len(keys) == len(rows):
        columns = [list(column) for column in zip(*rows, strict=True)]
        del columns[4]  # the run time is both the anchor and the last run
        if int(await db.scalar(sql.record_many, columns) or 0) == len(rows):
            return
    elif await db.executemany(sql.record, rows) == len(rows):
        return
    for run in runs:  # a row another scheduler changed was left alone: name its rule
        token = await db.scalar(sql.token, (run.pack, run.rule_id, run.partition.key))
        if token != run.token:
            raise PassConflictError(
                f"rule '{run.rule_id}' of pack '{run.pack}' for user={run.partition.user} "
                f"agent={run.partition.agent} was applied by another scheduler first",
                rule_id=run.rule_id,
                pack=run.pack,
            )
    raise PassConflictError(
        f"pack '{runs[0].pack}': a run record was changed by another scheduler",
        pack=runs[0].pack,
    )


def run_states(rows: Iterable[Any]) -> dict[tuple[str, str], RunState]:
    return {
        (str(rule_id), str(key)): RunState(int(anchor), last, int(runs), str(token))
        for rule_id, key, anchor, last, runs, token in rows
    }


def pending_states(rows: Iterable[Any]) -> dict[str, tuple[int, RunState | None]]:
    """``pending`` rows (rule id, run columns, pending count) by rule id."""
    return {
        str(rule_id): (
            int(count),
            None if anchor is None else RunState(int(anchor), last, int(runs), str(token)),
        )
        for rule_id, anchor, last, runs, token, count in rows
    }


def episode_spans(rows: Iterable[Any], size: int) -> list[tuple[int, int] | None]:
    """``spans_of`` rows (read index, earliest µs, latest µs) as one entry per read, in
    order: ``None`` where the read found no episode."""
    found: list[tuple[int, int] | None] = [None] * size
    for index, first, last in rows:
        if first is not None:
            found[int(index)] = (int(first), int(last))
    return found


def registered_rules(rows: Iterable[Any]) -> dict[str, list[tuple[str, int, str]]]:
    """``schedule_rules`` rows (pack, rule id, index, cadence) grouped by pack, in order."""
    out: dict[str, list[tuple[str, int, str]]] = {}
    for pack, rule_id, index, cadence in rows:
        out.setdefault(str(pack), []).append((str(rule_id), int(index), str(cadence)))
    return out


async def take_lease(
    db: Conn, sql: RunStatements, name: str, holder: str, now_us: int, expires_us: int
) -> LeaseState:
    """Take or renew lease ``name`` for ``holder`` (inside the caller's write transaction)
    unless someone else holds it unexpired at ``now_us``."""
    rows = await db.fetch(sql.lease, (name,))
    if rows and rows[0][0] != holder and rows[0][1] > now_us:
        return LeaseState(str(rows[0][0]), int(rows[0][1]), ours=False)
    await db.execute(sql.upsert_lease, (name, holder, expires_us))
    return LeaseState(holder, expires_us, ours=True)
