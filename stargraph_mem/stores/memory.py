"""The episodic ``MemoryStore`` protocol and the record type incremental reads return."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from stargraph_mem.stores.models import (
    ConsolidationRule,
    Episode,
    MemoryDelta,
    MigrationPlan,
    StoreHealth,
)
from stargraph_mem.stores.scope import Partition


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """A stored episode plus its store-side bookkeeping (insertion seq, access stats).

    A plain slotted dataclass rather than a pydantic model: the consolidation runtime reads
    these by the hundred thousand, and the rows were validated when they were written.
    """

    seq: int
    id: str
    content: str
    timestamp: datetime
    source_node: str | None
    user: str
    session: str
    agent: str
    metadata: dict[str, Any] = field(default_factory=dict)
    last_accessed: datetime | None = None
    access_count: int = 0

    def to_episode(self) -> Episode:
        """The validated public model of this row."""
        return Episode(
            id=self.id,
            content=self.content,
            timestamp=self.timestamp,
            source_node=self.source_node,
            user=self.user,
            session=self.session,
            agent=self.agent,
            metadata=self.metadata,
        )


@runtime_checkable
class MemoryStore(Protocol):
    """Episodic storage: scoped writes, widening reads, incremental consolidation reads."""

    async def bootstrap(self) -> None: ...

    async def health(self) -> StoreHealth: ...

    async def migrate(self, plan: MigrationPlan) -> None: ...

    async def put(self, episode: Episode, *, user: str, session: str, agent: str) -> None: ...

    async def put_many(self, episodes: Sequence[Episode]) -> int: ...

    async def recent(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> list[Episode]: ...

    async def since(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> list[EpisodeRecord]: ...

    async def consolidate(self, rule: ConsolidationRule) -> list[MemoryDelta]: ...


ConsolidateHook = Callable[[Any, ConsolidationRule], Awaitable[list[MemoryDelta]]]
_HOOKS: list[ConsolidateHook] = []


def register_consolidation_hook(hook: ConsolidateHook) -> None:
    """Install the runtime that implements ``consolidate(rule)`` (the engine registers it;
    stores never import the engine)."""
    _HOOKS[:] = [hook]


def consolidation_hook() -> ConsolidateHook | None:
    """The registered consolidation runtime, if any."""
    return _HOOKS[0] if _HOOKS else None
