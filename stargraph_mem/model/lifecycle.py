"""The fact lifecycle: what a delta does to its partition's facts, as plain data.

Pure (no I/O, no SQL, no CLIPS). The runtime's view of a pass
(:mod:`stargraph_mem.engine.passes.runtime`) and the fact stores' apply
(:mod:`stargraph_mem.stores.repositories.fact_apply`) both ask this module, so each rule is coded
once:
which facts a delta may name, how it closes them (or restores an archived one, or flags a
current one), what the fact it makes keeps of those it replaces, and how a confirmation
reinforces a fact. The callers execute the answer: the runtime on its in-memory facts, the
store as rows.

**Statuses** (specification 004's set, and ours). A fact is *current* while it is valid
(``valid_until`` unset); a current fact is ``current`` (the specification's ``active``) or
``challenged`` (flagged for review: still current, read by ``get``/``query``/``as_of``
and matched by rules, but left out of search and recall unless asked for). Every other
status closes the fact, for good: ``superseded`` (an update made its successor),
``merged`` (absorbed into another current fact of its partition, named as its successor),
``invalidated`` (confirmed wrong), ``deleted``, ``expired`` and ``archived`` (the one closed
status a later fact can restore, see :func:`refusal`). :data:`TRANSITIONS` says which
changes :func:`transition_problem` allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from stargraph_mem.model.deltas import Delta, Lifecycle

__all__ = [
    "ACTIVE",
    "ARCHIVED",
    "CHALLENGED",
    "CLOSING",
    "CURRENT",
    "REASON_REQUIRED",
    "TRANSITIONS",
    "Carried",
    "Close",
    "Event",
    "FactState",
    "Lived",
    "carried_pin",
    "carry",
    "closes",
    "pin_event",
    "refusal",
    "reinforced",
    "restore_event",
    "spec_status",
    "stored_status",
    "transition_problem",
]

ARCHIVED: Final = "archived"
"""The closing status a replacing delta may still name: it restores the fact."""
CURRENT: Final = "current"
"""A valid fact that is not flagged (the specification's ``active``)."""
ACTIVE: Final = "active"
"""The specification's name of :data:`CURRENT` (accepted wherever a status is asked for)."""
CHALLENGED: Final = "challenged"
"""A current fact flagged for review: it stays current, left out of search and recall."""
CLOSING: Final = frozenset({"superseded", "merged", "invalidated", "deleted", "expired", ARCHIVED})
"""The statuses that close a fact (its ``valid_until`` is set)."""
TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    CURRENT: frozenset({CHALLENGED, *CLOSING}),
    CHALLENGED: frozenset({CURRENT, *CLOSING}),
}
"""From a current status, the statuses a fact may move to; a closed fact moves no more
(an archived one is restored as a new fact, not revived)."""
REASON_REQUIRED: Final = frozenset({CHALLENGED, "invalidated"})
"""Statuses a change asked for by hand (``update_status``) must give a reason for: a
judgement about the fact, which its history must explain."""


def stored_status(status: str) -> str:
    """Our name of a status written the specification's way (``active`` → ``current``)."""
    return CURRENT if status == ACTIVE else status


def spec_status(status: str) -> str:
    """The specification's name of a status (``current`` → ``active``)."""
    return ACTIVE if status == CURRENT else status


def transition_problem(old: str, new: str) -> str | None:
    """Why a fact of status ``old`` cannot move to ``new`` (None: it can)."""
    new = stored_status(new)
    allowed = TRANSITIONS.get(old)
    if allowed is None:
        revive = " (restore it instead: a new fact)" if old == ARCHIVED else ""
        return f"it is {old}: a closed fact keeps its status{revive}"
    if new == old:
        return f"it is {spec_status(old)} already"
    if new not in allowed:
        return f"{spec_status(old)} cannot become {spec_status(new)}"
    return None


class Lived(Protocol):
    """What the lifecycle reads of a fact (an engine fact, or the store's mirror of one)."""

    @property
    def valid_from_us(self) -> int: ...
    @property
    def reinforced_at_us(self) -> int: ...
    @property
    def reinforcement_count(self) -> int: ...
    @property
    def observed_us(self) -> int: ...
    @property
    def access_count(self) -> int: ...
    @property
    def last_access_us(self) -> int: ...
    @property
    def pinned(self) -> bool: ...


@dataclass(slots=True)
class FactState:
    """A fact as the store's apply mirrors it: its scope, whether and why it is closed,
    and its lifecycle state, so later deltas of a batch see earlier ones' effects."""

    user: str
    agent: str
    valid_from_us: int
    closed: bool
    status: str | None = None
    """The closing status (None while current)."""
    restored: bool = False
    """An archived fact some fact restores already."""
    reinforced_at_us: int = 0
    reinforcement_count: int = 0
    observed_us: int = 0
    access_count: int = 0
    last_access_us: int = 0
    pin: tuple[int, str] | None = None
    """``(pinned_at_us, reason)`` when pinned."""

    @property
    def pinned(self) -> bool:
        return self.pin is not None


@dataclass(frozen=True, slots=True)
class Carried:
    """The lifecycle state of the fact a delta makes."""

    reinforced_at_us: int
    reinforcement_count: int
    observed_us: int
    access_count: int = 0
    last_access_us: int = 0
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class Close:
    """One fact a delta names to close: closed at ``at_us`` with ``status``, or (an
    archived fact a replacing delta names) restored: it stays closed, naming the new fact."""

    fact_id: str
    at_us: int
    status: str
    restore: bool = False
    flag: bool = False
    """The fact stays current, flagged with ``status`` (``challenged``)."""


@dataclass(frozen=True, slots=True)
class Event:
    """A status event to record (what is not a delta's own row): a carried pin, a restore,
    a flag (``challenged``) or its clearing (``current``)."""

    fact_id: str
    event: str
    at_us: int
    reason: str
    related_id: str | None


def refusal(status: str | None, restored: bool, delta: Delta) -> str | None:
    """Why ``delta`` cannot name a closed fact of ``status`` (None: it can): only a delta
    that replaces a fact by a new one may name an archived fact, once, to restore it."""
    if status != ARCHIVED or not delta.restores:
        return "fact is already closed"
    return "archived fact already restored" if restored else None


def carry(lifecycle: Lifecycle, made: Carried, before: Sequence[Lived]) -> Carried:
    """What a new fact (``made``: its own state) keeps of the facts it replaces: pins and
    access statistics always (summed, latest); its reinforcement state by ``lifecycle``
    (``inherit``: the latest of theirs; ``reinforce``: one more than their largest count)."""
    if not before:
        return made
    reinforced_us, count, observed_us = (
        made.reinforced_at_us,
        made.reinforcement_count,
        made.observed_us,
    )
    if lifecycle == "inherit":
        reinforced_us = max(f.reinforced_at_us for f in before)
        count = max(f.reinforcement_count for f in before)
        observed_us = max(f.observed_us for f in before)
    elif lifecycle == "reinforce":
        count = 1 + max(f.reinforcement_count for f in before)
    return Carried(
        reinforced_us,
        count,
        observed_us,
        sum(f.access_count for f in before),
        max(f.last_access_us for f in before),
        any(f.pinned for f in before),
    )


def carried_pin(
    before: Sequence[FactState], ids: Sequence[str]
) -> tuple[tuple[int, str], str] | None:
    """The pin a new fact takes over (the earliest, then the lowest fact id) and the id
    of the fact it came from; None when none of those it replaces is pinned."""
    pins = [(s.pin, fid) for s, fid in zip(before, ids, strict=True) if s.pin is not None]
    if not pins:
        return None
    return min(pins)


def pin_event(fact_id: str, at_us: int, pin: tuple[tuple[int, str], str]) -> Event:
    """The ``pinned`` event of a pin carried to ``fact_id`` (made at ``at_us``)."""
    (_, reason), origin = pin
    return Event(fact_id, "pinned", at_us, reason, origin)


def closes(delta: Delta, named: Sequence[FactState], at_us: int) -> list[Close]:
    """What ``delta`` (stamped ``at_us``) does to each fact it closes: a closed fact it
    may name (an archived one it restores) is restored, the others close with the
    delta's status, never before they became valid; a flagging delta (``challenged``)
    flags them instead (they stay current)."""
    status = delta.close_status
    if delta.flags:
        return [Close(fid, at_us, status, flag=True) for fid in delta.closed_ids]
    return [
        Close(fid, at_us, ARCHIVED, True)
        if state.closed
        else Close(fid, max(at_us, state.valid_from_us), status)
        for fid, state in zip(delta.closed_ids, named, strict=True)
    ]


def restore_event(close: Close, reason: str, successor: str) -> Event:
    """The ``restored`` event of an archived fact the fact ``successor`` restores."""
    return Event(close.fact_id, "restored", close.at_us, reason, successor)


def reinforced(fact: Lived, at_us: int, seen_us: int | None) -> tuple[int, int, int]:
    """A fact confirmed at ``at_us`` by episodes last observed at ``seen_us`` (None: not
    known): its reinforcement time, count and observation time."""
    observed = fact.observed_us if seen_us is None else max(fact.observed_us, seen_us)
    return max(fact.reinforced_at_us, at_us), fact.reinforcement_count + 1, observed
