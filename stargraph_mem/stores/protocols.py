"""What the engine needs of a database: four repositories and their owner.

Every backend (SQLite, PostgreSQL) provides these; the engine, the CLI and the
integrations are typed against them, never against a backend's classes. The
specification's :class:`~stargraph_mem.stores.memory.MemoryStore` and
:class:`~stargraph_mem.stores.fact.FactStore` are the contract's subsets of the first two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, overload, runtime_checkable

from stargraph_mem.stores.fact import FactStore
from stargraph_mem.stores.memory import IncrementalMemoryStore

if TYPE_CHECKING:  # annotations only: a store opened to list facts loads none of these
    import numpy.typing as npt

    from stargraph_mem.embedding import Embedder, Matrix
    from stargraph_mem.model.entities import (
        Entity,
        EntityProfile,
        EntityType,
        LineageNeighbours,
    )
    from stargraph_mem.model.facts import Fact, FactAccess, FactHit, StatusChange, StatusEvent
    from stargraph_mem.model.layers import RecallMode
    from stargraph_mem.stores.fact import (
        ApplyResult,
        DeltaInput,
        EngineFact,
        Rejection,
        WatermarkAdvance,
    )
    from stargraph_mem.stores.memory import CheckedRead, EpisodeRecord, QuarantinedRow
    from stargraph_mem.stores.repositories.aggregates import (
        AggregateRow,
        AggregateWindow,
        AggregateWrite,
    )
    from stargraph_mem.stores.repositories.fact_rows import PassBasis, PassWrite
    from stargraph_mem.stores.repositories.pass_time import Deferral
    from stargraph_mem.stores.repositories.schedule_runs import LeaseState, RuleRun, RunState
    from stargraph_mem.stores.repositories.vectors import BackfillReport, Kind
    from stargraph_mem.stores.scope import Partition

__all__ = [
    "ArchivedFactSource",
    "BackgroundCheckpoints",
    "Database",
    "EntityRepository",
    "EpisodeRepository",
    "FactRepository",
    "ScheduleRepository",
    "VectorRepository",
]


class EpisodeRepository(IncrementalMemoryStore, Protocol):
    """Episodes: the contract's store plus the reads a consolidation pass makes."""

    @property
    def location(self) -> str: ...

    @property
    def read_only_reason(self) -> str | None: ...

    async def close(self) -> None: ...

    async def put_many(
        self, episodes: Sequence[Any], *, progress: Callable[[int, int], None] | None = None
    ) -> int: ...

    def writing(self) -> AbstractAsyncContextManager[Any]: ...

    async def since_checked(
        self, partition: Partition, after_seq: int, *, limit: int | None = None
    ) -> CheckedRead: ...

    async def by_ids(self, ids: Sequence[str]) -> list[EpisodeRecord]: ...

    async def record_access(
        self, episode_ids: Sequence[str], *, at: datetime | None = None
    ) -> None: ...

    async def quarantined(self, partition: Partition | None = None) -> list[QuarantinedRow]: ...

    async def max_seq(self, partition: Partition) -> int: ...

    async def count_since(self, partition: Partition, after_seq: int) -> int: ...

    async def partitions(self) -> list[Partition]: ...

    async def since_checked_of(
        self, reads: Sequence[tuple[Partition, int]], *, limit: int | None = None
    ) -> list[CheckedRead]: ...

    async def count_since_of(self, reads: Sequence[tuple[Partition, int]]) -> list[int]: ...

    async def earliest_since_of(
        self, reads: Sequence[tuple[Partition, int]]
    ) -> list[int | None]: ...

    async def earlier_episodes(
        self,
        partition: Partition,
        through_seq: int,
        *,
        limit: int,
        since_us: int | None = None,
        embedder: str | None = None,
    ) -> tuple[list[EpisodeRecord], dict[str, bytes]]: ...


class FactRepository(FactStore, Protocol):
    """Facts, lineage, audit, watermarks, rejections and partition claims."""

    @property
    def location(self) -> str: ...

    @property
    def read_only_reason(self) -> str | None: ...

    async def apply_deltas(
        self,
        deltas: Sequence[DeltaInput],
        *,
        pack_hash: str = "",
        watermarks: Sequence[WatermarkAdvance] = (),
        rejections: Sequence[Rejection] = (),
        runs: Sequence[RuleRun] = (),
        version_of: Partition | None = None,
        basis: PassBasis | None = None,
        aggregates: Sequence[AggregateWrite] = (),
    ) -> ApplyResult: ...

    async def claim_partition(
        self, partition: Partition, holder: str, seconds: float
    ) -> str | None: ...

    async def release_partition(self, partition: Partition, holder: str) -> None: ...

    async def claim_partitions(
        self, partitions: Sequence[Partition], holder: str, seconds: float
    ) -> list[Partition]: ...

    async def release_partitions(self, partitions: Sequence[Partition], holder: str) -> None: ...

    async def basis(self, pack: str, partition: Partition) -> tuple[dict[str, int], int]: ...

    async def version(self, partition: Partition) -> int: ...

    async def search(
        self,
        query: str = "",
        *,
        user: str | None = None,
        agent: str | None = None,
        subject: str | None = None,
        predicate: str | None = None,
        min_confidence: float | None = None,
        limit: int = 10,
        touch: bool = True,
        include_history: bool = False,
        include_challenged: bool = False,
        mode: RecallMode = "full_context",
    ) -> list[FactHit]: ...

    async def search_ids(
        self,
        query: str,
        *,
        user: str,
        agent: str,
        limit: int = 10,
        include_history: bool = False,
        include_challenged: bool = False,
        mode: RecallMode = "full_context",
        valid_from_after_us: int | None = None,
        valid_from_before_us: int | None = None,
    ) -> list[str]: ...

    async def get_many(self, fact_ids: Sequence[str]) -> list[Fact]: ...

    async def access(self, fact_id: str) -> FactAccess: ...

    async def record_access(
        self, fact_ids: Sequence[str], *, at: datetime | None = None
    ) -> None: ...

    async def current_facts(self, partition: Partition) -> list[EngineFact]: ...

    async def pass_bases(
        self, pack: str, partitions: Sequence[Partition]
    ) -> list[tuple[dict[str, int], int]]: ...

    async def deferred_of(
        self, pack: str, partitions: Sequence[Partition]
    ) -> list[list[Deferral]]: ...

    async def current_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]: ...

    async def archived_facts_of(
        self, partitions: Sequence[Partition]
    ) -> list[list[EngineFact]]: ...

    async def pin(self, fact: str | Fact, *, reason: str = "") -> bool: ...

    async def unpin(self, fact_id: str, *, reason: str = "") -> bool: ...

    async def restore(self, fact_id: str, *, reason: str = "") -> Fact: ...

    @overload
    async def status_history(
        self, fact_id: str, *, shape: Literal["events"] = "events"
    ) -> list[StatusEvent]: ...
    @overload
    async def status_history(
        self, fact_id: str, *, shape: Literal["spec"]
    ) -> list[StatusChange]: ...

    async def update_status(
        self,
        fact_id: str,
        status: str,
        *,
        reason: str = "",
        merged_into: str | None = None,
        at: datetime | None = None,
        user: str | None = None,
        agent: str | None = None,
    ) -> Fact: ...

    async def aggregates_of(
        self, pack: str, refs: Sequence[str], window: AggregateWindow | None = None
    ) -> list[AggregateRow]: ...

    async def sweep_partitions(
        self, where: str, params: Sequence[Any], *, archived: bool = False
    ) -> list[Partition]: ...

    async def sweep_candidates(
        self, where: str, params: Sequence[Any], *, archived: bool = False
    ) -> dict[Partition, int]: ...

    async def sweep_facts(
        self, where: str, params: Sequence[Any], partitions: Sequence[Partition]
    ) -> list[list[EngineFact]]: ...

    async def ensure_sweep_indexes(self, names: Sequence[str]) -> None: ...

    async def apply_passes(
        self, passes: Sequence[PassWrite], *, pack_hash: str = ""
    ) -> list[int | None]: ...


@runtime_checkable
class BackgroundCheckpoints(Protocol):
    """A fact repository whose commits can leave their checkpoints to a second connection
    during a long run (SQLite's write-ahead log; a server checkpoints by itself)."""

    def background_checkpoints(self) -> AbstractAsyncContextManager[None]:
        """While open, a batch's commit does not wait for the log to be copied."""
        ...


@runtime_checkable
class ArchivedFactSource(Protocol):
    """A fact repository that can list archived facts: asked for by packs whose fact
    patterns admit them (a repository without it is read as having none)."""

    async def archived_facts_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """Per partition, its archived facts (``status`` ``archived``)."""
        ...


class ScheduleRepository(Protocol):
    """Cadence state: registered rules, rule runs, cron anchors and the scheduler lease."""

    @property
    def read_only_reason(self) -> str | None: ...

    async def bootstrap(self) -> None: ...

    async def close(self) -> None: ...

    async def runs(
        self, pack: str, partition: Partition | None = None
    ) -> dict[tuple[str, str], RunState]: ...

    async def runs_of(
        self, pack: str, partitions: Sequence[Partition]
    ) -> dict[tuple[str, str], RunState]: ...

    async def pending(
        self, pack: str, partition: Partition, rule_ids: Sequence[str]
    ) -> dict[str, tuple[int, RunState | None]]: ...

    async def spans_of(
        self, reads: Sequence[tuple[Partition, int]]
    ) -> list[tuple[int, int] | None]: ...

    async def anchor(self, pack: str, anchors: Sequence[tuple[str, Partition, int]]) -> None: ...

    async def register(self, pack: str, rules: Sequence[tuple[str, int, str]]) -> None: ...

    async def registered(self) -> dict[str, list[tuple[str, int, str]]]: ...

    async def take_lease(
        self, name: str, holder: str, now: datetime, ttl_seconds: float
    ) -> LeaseState: ...

    async def release_lease(self, name: str, holder: str) -> None: ...


class VectorRepository(Protocol):
    """Vectors of episodes and facts per embedder identity, and the episodes' full-text
    index, both filled lazily by catch-ups (see
    :mod:`~stargraph_mem.stores.repositories.vectors`)."""

    async def catch_up(self, partition_key: str, embedder: Embedder) -> int: ...

    async def backfill(
        self,
        embedder: Embedder,
        *,
        batch: int = ...,
        progress: Callable[[int, int], object] | None = None,
    ) -> BackfillReport: ...

    async def pending(self, embedder: Embedder | str) -> int: ...

    async def drop(self, embedder_identity: str) -> int: ...

    async def nearest(
        self,
        partition_key: str,
        kind: Kind,
        embedder: Embedder | str,
        query_vector: npt.ArrayLike,
        *,
        limit: int,
        after_us: int | datetime | None = None,
        before_us: int | datetime | None = None,
        current_only: bool = True,
        statuses: Iterable[str] | None = None,
    ) -> list[tuple[str, float]]: ...

    async def episode_text_hits(
        self,
        partition_key: str,
        words: Sequence[str],
        *,
        limit: int,
        after_us: int | datetime | None = None,
        before_us: int | datetime | None = None,
    ) -> list[tuple[str, float]]: ...

    async def episodes(self, ids: Sequence[str]) -> list[EpisodeRecord]: ...

    async def episode_times(self, ids: Sequence[str]) -> dict[str, tuple[int, str]]: ...

    async def fact_vectors(
        self, partition_key: str, embedder: Embedder | str, ids: Sequence[str]
    ) -> tuple[list[str], Matrix]: ...

    async def keep_fact_vectors(
        self, partition_key: str, embedder: Embedder | str, items: Sequence[tuple[str, Matrix]]
    ) -> int: ...


class EntityRepository(Protocol):
    """Entities of each partition (declared, and named by facts) and the graph reads of
    recall: temporal neighbours of episodes, facts of entities, lineage both ways."""

    async def define(
        self,
        partition_key: str | Partition,
        name: str,
        *,
        aliases: Sequence[str] = (),
        type: EntityType | None = None,
        at: datetime | None = None,
    ) -> Entity: ...

    async def resolve(self, partition_key: str | Partition, text: str) -> Entity | None: ...

    async def get(self, partition_key: str | Partition, text: str) -> Entity | None: ...

    async def entities(self, partition_key: str | Partition) -> list[Entity]: ...

    async def mentioned(self, partition_key: str | Partition, query_text: str) -> list[Entity]: ...

    async def profile(
        self, partition_key: str | Partition, name: str, *, limit: int = 50
    ) -> EntityProfile: ...

    async def facts_of_entities(
        self, partition_key: str | Partition, names: Sequence[str], *, limit: int = 100
    ) -> list[str]: ...

    async def temporal_neighbours(
        self,
        partition_key: str | Partition,
        episode_ids: Sequence[str],
        *,
        depth: int = 2,
        after_us: int | datetime | None = None,
        before_us: int | datetime | None = None,
    ) -> list[tuple[str, int]]: ...

    async def lineage_neighbours(
        self,
        fact_ids: Sequence[str],
        *,
        episode_ids: Sequence[str] = (),
        current_only: bool = True,
    ) -> LineageNeighbours: ...


class Database(Protocol):
    """The owner of one memory's connections and transactions (see
    :func:`~stargraph_mem.stores.database.open_database`)."""

    @property
    def backend(self) -> str: ...

    @property
    def memory(self) -> EpisodeRepository: ...

    @property
    def facts(self) -> FactRepository: ...

    @property
    def schedule(self) -> ScheduleRepository: ...

    @property
    def vectors(self) -> VectorRepository: ...

    @property
    def entities(self) -> EntityRepository: ...

    @property
    def read_only_reason(self) -> str | None: ...

    async def bootstrap(self) -> None: ...

    async def close(self) -> None: ...

    async def reconnect(self) -> None:
        """Open fresh connections after a lost one (raises
        :class:`~stargraph_mem.errors.DatabaseUnavailableError` while the server is away)."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
