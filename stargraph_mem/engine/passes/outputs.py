"""What a pass is given and what it gives back: the input of one pass, its output (deltas,
rejections, the facts after it), the episodes it rejects with their reasons, and the stamp
a claimed rule's deltas carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from stargraph_mem.engine.passes.aggregates import HistoryInput
from stargraph_mem.engine.passes.near_episodes import EarlierEpisodes
from stargraph_mem.model.deltas import (
    DELTA_KINDS,
    MemoryDelta,
)
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.repositories.aggregates import AggregateWrite
from stargraph_mem.stores.scope import Partition

UNMATCHED: Final = "no-rule-matched"
"""The rule id of a rejection for an episode that several rules saw and none matched (rule
ids cannot contain hyphens, so it names no rule)."""


@dataclass(frozen=True, slots=True)
class RejectedEpisode:
    """An episode (or the delta a rule made from it) that could not be used, and why."""

    episode_id: str | None
    rule_id: str | None
    reason: str
    unmatched: bool = False
    """True when no rule used the episode (see ``PackRuntime._account``), False when a
    rule or the episode's own data refused it."""


@dataclass
class PassOutput:
    """What one pass produced, before it is applied."""

    deltas: list[MemoryDelta] = field(default_factory=list)
    rejected: list[RejectedEpisode] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=dict)
    episodes: int = 0
    matched: list[dict[str, list[str]]] = field(default_factory=list)
    """With ``run_pass(matched=True)``: per delta (same order), what each pattern of its
    rule matched: ``episode`` → the anchor episode, fact aliases → fact ids, ``earlier``
    and ``count`` aliases → episode ids."""
    facts_after: list[EngineFact] | None = field(default_factory=list)
    """The partition's current facts once these deltas are applied, in the order the fact
    store lists them (``valid_from``, then id): the next pass's input without a read.
    ``None`` when rules read access statistics, which reads change outside passes."""
    aggregates: AggregateWrite | None = None
    """What the pass changes in the partition's durable aggregates (``over: history``)."""
    kept: list[str] = field(default_factory=list)
    """Ids of consumed episodes no delta cites yet that a durable aggregate (``over:
    history``) holds as evidence for later passes."""


def _time_key(record: EpisodeRecord) -> tuple[datetime, int]:
    return record.timestamp, record.seq


def in_time_order(episodes: Sequence[EpisodeRecord]) -> Sequence[EpisodeRecord]:
    """``episodes`` in timestamp order, insertion ``seq`` breaking ties (the order every
    pass consumes its episodes in); the same sequence when it is in that order already."""
    previous: tuple[datetime, int] | None = None
    for record in episodes:
        key = (record.timestamp, record.seq)
        if previous is not None and key < previous:
            return sorted(episodes, key=_time_key)
        previous = key
    return episodes


@dataclass(frozen=True, slots=True)
class PassInput:
    """One partition's input to :meth:`PackRuntime.run_passes`."""

    partition: Partition
    episodes: Sequence[EpisodeRecord]
    facts: list[EngineFact]
    eligible: Mapping[int, Iterable[int]] | None = None
    history: HistoryInput | None = None
    """The partition's stored aggregates for ``over: history`` patterns (None: none kept,
    as in a pass over a fresh partition)."""
    archived: Sequence[EngineFact] = ()
    """The partition's archived facts, for a pack whose patterns admit them."""
    earlier: EarlierEpisodes | None = None
    """The episodes earlier passes consumed, for ``earlier`` patterns with ``near``."""


@dataclass(frozen=True)
class Stamp:
    """The specification's contract: stamp a consolidation rule's id on every delta and
    keep only the kinds it emits (the pack rule that decided is kept in the reason)."""

    rule_id: str
    kinds: tuple[str, ...] = DELTA_KINDS
