"""The episodic ``MemoryStore`` protocol and the record types incremental reads return.

:class:`MemoryStore` is exactly the specification's protocol; our additions (batch
writes, incremental reads after a watermark) are in :class:`IncrementalMemoryStore`.
The delta models are importable from here too, as the specification places them.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

from stargraph_mem.model.deltas import AddDelta, DeleteDelta, MemoryDelta, NoopDelta, UpdateDelta
from stargraph_mem.model.episodes import Episode
from stargraph_mem.stores.models import ConsolidationRule, MigrationPlan, StoreHealth
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

    def to_episode(self, *, validate: bool = True) -> Episode:
        """The public model of this row: validated, or (``validate=False``) built as is."""
        fields: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "timestamp": self.timestamp,
            "source_node": self.source_node,
            "user": self.user,
            "session": self.session,
            "agent": self.agent,
            "metadata": self.metadata,
        }
        return Episode(**fields) if validate else Episode.model_construct(**fields)


@dataclass(frozen=True, slots=True)
class QuarantinedRow:
    """A stored episode row that could not be decoded, so reads skip it.

    The row itself is left as it is; the store notes it once (by ``seq``) in its
    ``quarantine`` table, and every later read that meets it reports the same entry.
    """

    seq: int
    """The row's insertion sequence number (the key of the ``episodes`` row)."""
    episode_id: str | None
    """The row's ``id`` when it is readable text, else ``None``."""
    partition_key: str | None
    """The row's stored partition key (``/user/{u}/agent/{a}/``) when readable, else ``None``."""
    reason: str
    """What is wrong, starting with the column: ``"ts_us: stored time … is outside …"``."""
    at: datetime
    """When the row was first quarantined (UTC); when ``recorded`` is false, when it was seen."""
    recorded: bool = True
    """False when the quarantine table could not be written (e.g. a read-only file): the
    row was skipped and reported all the same."""

    def describe(self) -> str:
        """One line: ``episodes row seq=7 (id 'e3', partition /user/u/agent/a/): reason``."""
        who = "id unreadable" if self.episode_id is None else f"id {self.episode_id!r}"
        where = "" if self.partition_key is None else f", partition {self.partition_key}"
        return f"episodes row seq={self.seq} ({who}{where}): {self.reason}"


class CheckedRead(NamedTuple):
    """What a checked incremental read scanned: the good records and the skipped rows.

    Both lists are in ``seq`` order; together they are every row the read scanned.
    """

    records: list[EpisodeRecord]
    quarantined: list[QuarantinedRow]

    @property
    def scanned(self) -> int:
        """How many rows the read scanned (good and quarantined): compare with the limit."""
        return len(self.records) + len(self.quarantined)

    def last_seq(self, after_seq: int) -> int:
        """The highest ``seq`` scanned (good or quarantined), or ``after_seq`` when the read
        scanned nothing: the watermark a consumer of every scanned row advances to."""
        last = after_seq
        if self.records:
            last = max(last, self.records[-1].seq)
        if self.quarantined:
            last = max(last, self.quarantined[-1].seq)
        return last


@runtime_checkable
class MemoryStore(Protocol):
    """The specification's episodic store: scoped writes, widening reads, ``consolidate``."""

    async def bootstrap(self) -> None: ...

    async def health(self) -> StoreHealth: ...

    async def migrate(self, plan: MigrationPlan) -> None: ...

    async def put(self, episode: Episode, *, user: str, session: str, agent: str) -> None: ...

    async def recent(
        self, user: str, session: str | None = None, agent: str | None = None, *, limit: int
    ) -> list[Episode]: ...

    async def consolidate(self, rule: ConsolidationRule) -> list[MemoryDelta]: ...


@runtime_checkable
class IncrementalMemoryStore(MemoryStore, Protocol):
    """A :class:`MemoryStore` with batch writes and incremental reads after a watermark."""

    async def put_many(self, episodes: Sequence[Episode]) -> int: ...

    async def since(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> list[EpisodeRecord]: ...


__all__ = [
    "DEFAULT_CONSOLIDATION_RUNTIME",
    "AddDelta",
    "CheckedRead",
    "ConsolidateHook",
    "DeleteDelta",
    "EpisodeRecord",
    "IncrementalMemoryStore",
    "MemoryDelta",
    "MemoryStore",
    "NoopDelta",
    "QuarantinedRow",
    "UpdateDelta",
    "consolidation_hook",
    "register_consolidation_hook",
]


ConsolidateHook = Callable[..., Awaitable[list[MemoryDelta]]]
"""Called as ``hook(store, rule, due_only=...)``."""
DEFAULT_CONSOLIDATION_RUNTIME: Final = "stargraph_mem.engine.contract:consolidate_rule"
"""``module:function`` of the runtime behind ``consolidate(rule)`` unless one is installed."""
_HOOKS: list[ConsolidateHook] = []


def register_consolidation_hook(hook: ConsolidateHook) -> None:
    """Install the runtime that implements ``consolidate(rule)`` (replaces the default)."""
    _HOOKS[:] = [hook]


def consolidation_hook() -> ConsolidateHook:
    """The installed consolidation runtime, else the default one, loaded on first use.

    The engine imports the stores, so the stores never import the engine: the default is
    named as text (:data:`DEFAULT_CONSOLIDATION_RUNTIME`) and imported here, when a store's
    ``consolidate(rule)`` first runs. Importing a store therefore loads neither the engine
    nor CLIPS, and nothing has to be imported beforehand for ``consolidate(rule)`` to work.
    """
    if not _HOOKS:
        module, _, name = DEFAULT_CONSOLIDATION_RUNTIME.partition(":")
        hook: ConsolidateHook = getattr(importlib.import_module(module), name)
        _HOOKS.append(hook)
    return _HOOKS[0]
