"""Fact statuses, pins and status events, backend-neutral.

A fact is current while ``valid_until_us`` is NULL; closing it stores its status
(``superseded`` for an update, a delete delta's own status otherwise). Pins live in
``fact_pins`` (one row per pinned fact; a pin carried by an update gets a row for the new
fact, the old row stays as history); ``fact_events`` records what is not a delta: pins,
unpins, carried pins and restores. A fact's status history is read from its row, its
lineage, the deltas that made and closed it, and its events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import orjson

from stargraph_mem.errors import FactNotFoundError, FactStatusError
from stargraph_mem.model.base import unicode_problem
from stargraph_mem.model.deltas import DeleteDelta, UpdateDelta
from stargraph_mem.model.facts import Fact, StatusChange, StatusEvent, status_changes
from stargraph_mem.model.lifecycle import (
    ACTIVE,
    ARCHIVED,
    CHALLENGED,
    CLOSING,
    CURRENT,
    REASON_REQUIRED,
    spec_status,
    stored_status,
    transition_problem,
)
from stargraph_mem.model.statuses import SUCCEEDED_STATUSES
from stargraph_mem.model.time import from_us, to_us
from stargraph_mem.stores.repositories.fact_rows import (
    FACT_COLUMN_COUNT,
    audit_from_row,
    fact_from_row,
)
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.sql_conn import Conn

if TYPE_CHECKING:
    from stargraph_mem.stores.repositories.fact_apply import Batch

__all__ = [
    "ARCHIVED",
    "EVENT_COLUMNS",
    "RESTORE_RULE",
    "STATUS_BACKFILL",
    "STATUS_RULE",
    "STATUS_TABLES",
    "STATUS_TABLE_NAMES",
    "UPDATABLE_STATUSES",
    "check_status",
    "fact_status",
    "pin_fact",
    "restore_delta",
    "restore_in",
    "spec_status_history",
    "status_history",
    "unpin_fact",
    "update_status_in",
]

RESTORE_RULE: Final = "restore"
"""The rule id of a restore asked for through the API (not by a pack's rule)."""
STATUS_TABLE_NAMES: Final = ("fact_pins", "fact_events")
EVENT_COLUMNS: Final = (
    "seq",
    "fact_id",
    "event",
    "at_us",
    "rule_id",
    "delta_id",
    "reason",
    "related_id",
)
STATUS_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS fact_pins (
        fact_id TEXT PRIMARY KEY,
        pinned_at_us INTEGER NOT NULL,
        reason TEXT NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS fact_events (
        seq INTEGER PRIMARY KEY,
        fact_id TEXT NOT NULL,
        event TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        rule_id TEXT NOT NULL,
        delta_id TEXT NOT NULL,
        reason TEXT NOT NULL,
        related_id TEXT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS fact_events_fact ON fact_events (fact_id, seq)",
    "CREATE INDEX IF NOT EXISTS facts_archived ON facts (partition_key) "
    "WHERE status = 'archived' AND superseded_by IS NULL",
)
"""The SQLite tables of pins and status events, and the index of archived facts not yet
restored (``IF NOT EXISTS``: idempotent)."""
STATUS_BACKFILL: Final = (
    "UPDATE facts SET status = CASE WHEN superseded_by IS NULL THEN 'deleted' "
    "ELSE 'superseded' END WHERE valid_until_us IS NOT NULL AND status IS NULL"
)
"""Closed facts of a file written before statuses: superseded when a successor is named."""

_EVENT_RANK: Final = {"created": 0, "pinned": 1, "unpinned": 1, "restored": 3}
"""Order of events stamped with the same time (a close ranks 2)."""
_FLAGS: Final = frozenset({CHALLENGED, CURRENT})
"""Events that flag a current fact or clear its flag (the status they name)."""
_SUCCEEDED: Final = frozenset(SUCCEEDED_STATUSES)
"""Closing statuses whose ``superseded_by`` names the fact that took the closed one's place."""
_INTO: Final = {"merged": "into", "superseded": "by"}
"""How a message names the fact that takes a closed one's place."""
STATUS_RULE: Final = "update_status"
"""The rule id of a status change asked for through the API (not by a pack's rule)."""


def fact_status(row_status: str | None) -> str:
    """A fact's status from its ``status`` column (NULL: current)."""
    return "current" if row_status is None else str(row_status)


async def _fact(db: Conn, sql: FactStatements, fact_id: str) -> tuple[Fact, str | None]:
    """The fact and the delta that closed it; :class:`FactNotFoundError` if unknown."""
    rows = await db.fetch(sql.fact_by_id, (fact_id,))
    if not rows:
        raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
    return fact_from_row(rows[0]), rows[0][FACT_COLUMN_COUNT]


def check_status(fact: Fact, action: str, wanted: str = "current") -> None:
    """Raise :class:`FactStatusError` unless ``fact`` has status ``wanted`` (``current``:
    any current fact, a challenged one too)."""
    if fact.status != wanted and not (wanted == CURRENT and fact.is_current):
        raise FactStatusError(
            f"cannot {action} fact {fact.id}: it is {fact.status}, not {wanted}",
            fact_id=fact.id,
            status=fact.status,
        )


def check_reason(action: str, fact_id: str, reason: str) -> None:
    """Raise :class:`FactStatusError` when ``reason`` cannot be stored as text (a lone
    surrogate or a NUL character), before anything is read or written."""
    if not isinstance(reason, str):
        problem: str | None = f"must be a string, not {type(reason).__name__}"
    elif "\x00" in reason:
        problem = "must not contain NUL characters"
    else:
        problem = unicode_problem(reason)
    if problem is not None:
        raise FactStatusError(
            f"cannot {action} fact {fact_id}: its reason {problem}", fact_id=fact_id, status=None
        )


async def _event_row(
    db: Conn, sql: FactStatements, fact_id: str, event: str, at_us: int, reason: str
) -> None:
    seq = int(await db.scalar(sql.last_event_seq) or 0) + 1
    await db.insert_many(sql.insert_event, [(seq, fact_id, event, at_us, "", "", reason, None)])


async def pin_fact(db: Conn, sql: FactStatements, fact_id: str, at_us: int, reason: str) -> bool:
    """Pin a current fact (inside the caller's transaction); False when already pinned."""
    check_reason("pin", fact_id, reason)
    fact, _ = await _fact(db, sql, fact_id)
    check_status(fact, "pin")
    if await db.fetch(sql.pin_of, (fact_id,)):
        return False
    await db.insert_many(sql.insert_pin, [(fact_id, at_us, reason)])
    await _event_row(db, sql, fact_id, "pinned", at_us, reason)
    return True


async def unpin_fact(db: Conn, sql: FactStatements, fact_id: str, at_us: int, reason: str) -> bool:
    """Unpin a current fact (inside the caller's transaction); False when it was not pinned."""
    check_reason("unpin", fact_id, reason)
    fact, _ = await _fact(db, sql, fact_id)
    check_status(fact, "unpin")
    if not await db.execute(sql.delete_pin, (fact_id,)):
        return False
    await _event_row(db, sql, fact_id, "unpinned", at_us, reason)
    return True


async def restore_delta(
    db: Conn, sql: FactStatements, fact_id: str, at_us: int, reason: str
) -> UpdateDelta:
    """The update that restores an archived fact: same statement, payload and confidence,
    its lineage's sources, ``lifecycle: inherit``; :class:`FactStatusError` unless the fact
    is archived and not restored yet."""
    check_reason("restore", fact_id, reason)
    fact, _ = await _fact(db, sql, fact_id)
    check_status(fact, "restore", ARCHIVED)
    if fact.superseded_by is not None:
        raise FactStatusError(
            f"cannot restore fact {fact_id}: it was restored already as {fact.superseded_by}",
            fact_id=fact_id,
            status=fact.status,
        )
    sources = await db.fetch(sql.lineage_of, (fact_id,))
    return UpdateDelta(
        user=fact.user,
        agent=fact.agent,
        replaces=[fact_id],
        lifecycle="inherit",
        source_episode_ids=list(_sources(sources)),
        promotion_ts=from_us(at_us),
        rule_id=RESTORE_RULE,
        confidence=fact.confidence,
        reason=reason or f"restored from {fact_id}",
        fact={
            "subject": fact.subject,
            "predicate": fact.predicate,
            "object": fact.object,
            "payload": fact.payload,
        },
    )


async def restore_in(
    db: Conn, sql: FactStatements, batch: Batch, fact_id: str, reason: str
) -> Fact:
    """Restore an archived fact inside the caller's transaction (see :func:`restore_delta`,
    stamped at the batch's time); the new current fact."""
    delta = await restore_delta(db, sql, fact_id, batch.now_us, reason)
    await batch.apply_chunk(0, [delta])
    fact, _ = await _fact(db, sql, delta.new_fact_id)
    return fact


def _sources(rows: Sequence[Sequence[Any]]) -> list[str]:
    """The source episode ids of a ``lineage_of`` row."""
    return list(orjson.loads(rows[0][3])) if rows else []


async def _closing(db: Conn, sql: FactStatements, closed_by: str) -> tuple[str | None, str]:
    """Rule id and reason of the delta ``closed_by`` (an update is found through the fact
    it made, a delete through its indexed id)."""
    rows = await db.fetch(sql.audit_by_fact_in, (sql.ids(["f" + closed_by[1:]]),))
    rows += await db.fetch(sql.audit_markers_in, (sql.ids([closed_by]),))
    for row in rows:
        if row[1] == closed_by:
            delta = audit_from_row(row).delta
            return delta.rule_id, delta.reason
    return None, ""


async def status_history(db: Conn, sql: FactStatements, fact_id: str) -> list[StatusEvent]:
    """What happened to a fact, oldest first: created, pins, its close, a restore."""
    fact, closed_by = await _fact(db, sql, fact_id)
    lineage = await db.fetch(sql.lineage_of, (fact_id,))
    predecessors = _predecessor_ids(lineage)
    created = StatusEvent(
        fact_id=fact_id,
        event="created",
        status="current",
        at=fact.valid_from,
        rule_id=fact.rule_id,
        delta_id=fact.delta_id,
        reason=str(lineage[0][6]) if lineage else "",
        related_fact_id=predecessors[0] if predecessors else None,
    )
    ranked: list[tuple[int, int, int, StatusEvent]] = []
    for seq, event, at_us, rule_id, delta_id, reason, related in await db.fetch(
        sql.events_of, (fact_id,)
    ):
        item = StatusEvent(
            fact_id=fact_id,
            event=event,
            status="",  # filled in below, in order
            at=from_us(at_us),
            rule_id=rule_id or None,
            delta_id=delta_id or None,
            reason=reason,
            related_fact_id=related,
        )
        ranked.append((int(at_us), _EVENT_RANK.get(str(event), 1), int(seq), item))
    if fact.valid_until is not None:
        ranked.append((_us(fact), 2, 0, await _close_event(db, sql, fact, closed_by)))
    out = [created]
    status = CURRENT
    for *_, item in sorted(ranked, key=lambda r: r[:3]):
        if item.event in _FLAGS or item.event == fact.status:
            status = item.event
        elif item.event == "restored":
            status = fact.status
        out.append(item if item.status == status else item.model_copy(update={"status": status}))
    return out


def _us(fact: Fact) -> int:
    """When ``fact`` was closed, in microseconds (0: it is current)."""
    return 0 if fact.valid_until is None else to_us(fact.valid_until)


async def _close_event(
    db: Conn, sql: FactStatements, fact: Fact, closed_by: str | None
) -> StatusEvent:
    """The event of a closed fact's close: its status, the closing delta and rule."""
    rule_id, reason = (None, "") if closed_by is None else await _closing(db, sql, closed_by)
    successor = fact.superseded_by if fact.status in _SUCCEEDED else None
    assert fact.valid_until is not None
    return StatusEvent(
        fact_id=fact.id,
        event=fact.status,
        status=fact.status,
        at=fact.valid_until,
        rule_id=rule_id,
        delta_id=closed_by,
        reason=reason,
        related_fact_id=successor,
    )


def _predecessor_ids(lineage: Sequence[Sequence[Any]]) -> list[str]:
    """The predecessor ids of a ``lineage_of`` row."""
    return list(orjson.loads(lineage[0][8])) if lineage else []


UPDATABLE_STATUSES: Final = (ACTIVE, CURRENT, CHALLENGED, *sorted(CLOSING))
"""What ``update_status`` may set: ``active`` (or ``current``: clears a challenge),
``challenged``, or a closing status (``merged`` and ``superseded`` name the fact that takes
the closed one's place)."""


async def spec_status_history(db: Conn, sql: FactStatements, fact_id: str) -> list[StatusChange]:
    """The fact's status transitions in specification 004's shape (see
    :func:`~stargraph_mem.model.facts.status_changes`)."""
    return status_changes(await status_history(db, sql, fact_id))


def _refuse(fact_id: str, status: str, why: str, current: str | None = None) -> FactStatusError:
    return FactStatusError(
        f"cannot make fact {fact_id} {spec_status(status)}: {why}", fact_id=fact_id, status=current
    )


def _check_change(fact_id: str, status: object, reason: str, merged_into: str | None) -> str:
    """The stored name of the status asked for, once the request itself is sound."""
    if not isinstance(status, str) or status not in UPDATABLE_STATUSES:
        raise FactStatusError(
            f"cannot update the status of fact {fact_id}: status must be one of "
            f"{', '.join(UPDATABLE_STATUSES)} (got {status!r})",
            fact_id=fact_id,
            status=None,
        )
    new = stored_status(status)
    check_reason(f"make {spec_status(new)}", fact_id, reason)
    if new in REASON_REQUIRED and not reason.strip():
        raise _refuse(fact_id, new, "a reason is required (why it is " + new + ")")
    if new == "merged" and merged_into is None:
        raise _refuse(fact_id, new, "merged_into must name the fact it was merged into")
    if new == "superseded" and merged_into is None:
        raise _refuse(fact_id, new, "merged_into must name the fact that replaces it")
    if new not in SUCCEEDED_STATUSES and merged_into is not None:
        raise _refuse(fact_id, new, "merged_into goes with status merged or superseded only")
    if merged_into == fact_id:
        raise _refuse(fact_id, new, f"a fact cannot be {new} {_INTO[new]} itself")
    return new


def _too_early(at_us: int, fact: Fact, events: Sequence[Sequence[Any]]) -> str | None:
    """Why a status change stamped ``at_us`` cannot be recorded for ``fact`` (whose
    ``events_of`` rows are ``events``): it would come before the fact became valid, or
    before a change already recorded for it, so its history would no longer say what the
    fact's status was (a change stamped earlier than one already made would claim the
    fact had the status it had before that one). None when it can."""
    when = from_us(at_us).isoformat()
    if at_us < to_us(fact.valid_from):
        return f"{when} is before it became valid ({fact.valid_from.isoformat()})"
    last = max((int(row[2]) for row in events), default=None)
    if last is not None and at_us < last:
        return (
            f"{when} is before its last recorded change ({from_us(last).isoformat()}); "
            "status changes are recorded in time order"
        )
    return None


async def update_status_in(
    db: Conn,
    sql: FactStatements,
    batch: Batch,
    fact_id: str,
    status: str,
    reason: str,
    merged_into: str | None,
    partition: tuple[str | None, str | None] = (None, None),
) -> Fact:
    """Move a fact to ``status`` inside the caller's transaction, stamped at the batch's
    time; the fact as it is now. A challenge or a close is a delete delta of rule
    :data:`STATUS_RULE` (in the audit, closing or flagging as a pack's delete does);
    clearing a challenge (``active``) is a status event. Refused with
    :class:`FactStatusError` (nothing written): an unknown status, a missing reason where
    :data:`~stargraph_mem.model.lifecycle.REASON_REQUIRED`, a transition
    :func:`~stargraph_mem.model.lifecycle.transition_problem` refuses, a ``merged_into``
    that is not a current fact of the same (user, agent), a fact of another ``partition``
    (``(user, agent)``, either None: any)."""
    new = _check_change(fact_id, status, reason, merged_into)
    fact, _ = await _fact(db, sql, fact_id)
    user, agent = partition
    if (user is not None and user != fact.user) or (agent is not None and agent != fact.agent):
        raise _refuse(
            fact_id,
            new,
            f"it belongs to user {fact.user!r} agent {fact.agent!r}, not "
            f"user {user!r} agent {agent!r}",
            fact.status,
        )
    into = None if merged_into is None else (await _fact(db, sql, merged_into))[0]
    events = await db.fetch(sql.events_of, (fact_id,))
    problem = transition_problem(fact.status, new)
    if problem is None:
        problem = _too_early(batch.now_us, fact, events)
    if problem is not None:
        raise _refuse(fact_id, new, problem, fact.status)
    if into is not None:
        if (into.user, into.agent) != (fact.user, fact.agent):
            raise _refuse(
                fact_id, new, f"fact {merged_into} belongs to another (user, agent)", fact.status
            )
        if not into.is_current:
            raise _refuse(fact_id, new, f"fact {merged_into} is {into.status}", fact.status)
        if new == "superseded" and into.valid_from < fact.valid_from:
            raise _refuse(
                fact_id,
                new,
                f"fact {merged_into} is older (valid from {into.valid_from.isoformat()}, it "
                f"from {fact.valid_from.isoformat()}): a fact is superseded by a newer one",
                fact.status,
            )
    if new == CURRENT:
        await db.run_many(sql.set_status, [(None, fact_id)])
        seq = int(await db.scalar(sql.last_event_seq) or 0) + 1
        event = (seq, fact_id, CURRENT, batch.now_us, STATUS_RULE, "", reason, None)
        await db.insert_many(sql.insert_event, [event])
    else:
        changes = len(events)
        sources = await db.fetch(sql.lineage_of, (fact_id,))
        delta = DeleteDelta(
            user=fact.user,
            agent=fact.agent,
            replaces=[fact_id],
            status=new,
            merged_into=merged_into,
            source_episode_ids=_sources(sources),
            promotion_ts=from_us(batch.now_us),
            rule_id=STATUS_RULE,
            confidence=fact.confidence,
            reason=reason,
            bindings={"previous": fact.status, "events": changes},
        )
        await batch.apply_chunk(0, [delta])
    found, _ = await _fact(db, sql, fact_id)
    return found
