"""A small async facade over the stores and the runtime, for CLIs and workflow graphs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from stargraph_mem.compiler.pack import CompiledPack, compile_file
from stargraph_mem.engine.consolidate import (
    DEFAULT_MAX_EPISODES,
    Consolidation,
    LegacyFilter,
    PassReport,
)
from stargraph_mem.engine.runtime import PackRuntime
from stargraph_mem.stores.fact import Explanation
from stargraph_mem.stores.lifecycle import AsyncResource
from stargraph_mem.stores.models import Episode, Fact, FactPattern, utc_now
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

_RUNTIMES: dict[str, PackRuntime] = {}


def runtime_for(compiled: CompiledPack) -> PackRuntime:
    """One loaded CLIPS environment per pack hash per process (reloaded when the hash changes)."""
    runtime = _RUNTIMES.get(compiled.sha256)
    if runtime is None:
        runtime = _RUNTIMES[compiled.sha256] = PackRuntime(compiled)
    return runtime


class Consolidator(AsyncResource):
    """Episodes in, facts out: ``record`` episodes, ``consolidate`` partitions, read facts."""

    def __init__(
        self,
        path: str | Path,
        packs: Sequence[CompiledPack],
        *,
        max_episodes: int = DEFAULT_MAX_EPISODES,
        keep_deltas: bool = True,
    ) -> None:
        self.path = Path(path)
        self.memory = SQLiteMemoryStore(self.path)
        self.fact_store = SQLiteFactStore(self.path)
        self.packs = list(packs)
        self.max_episodes = max_episodes
        self.keep_deltas = keep_deltas
        """Whether pass reports keep their deltas (counts are always kept); large runs
        turn this off so a million deltas are not held in memory."""

    @classmethod
    def open(
        cls,
        path: str | Path,
        packs: Sequence[str | Path],
        *,
        max_episodes: int = DEFAULT_MAX_EPISODES,
        keep_deltas: bool = True,
    ) -> Consolidator:
        """Compile ``packs`` (YAML files) and prepare stores at ``path``; use ``async with``."""
        return cls(
            path,
            [compile_file(p) for p in packs],
            max_episodes=max_episodes,
            keep_deltas=keep_deltas,
        )

    async def bootstrap(self) -> None:
        """Create both stores' schemas (idempotent)."""
        await self.memory.bootstrap()
        await self.fact_store.bootstrap()

    async def close(self) -> None:
        await self.fact_store.close()
        await self.memory.close()

    async def record(self, episode: Episode) -> None:
        """Store one episode under its own scope."""
        await self.memory.put(
            episode, user=episode.user, session=episode.session, agent=episode.agent
        )

    def _consolidation(self, compiled: CompiledPack) -> Consolidation:
        return Consolidation(
            runtime_for(compiled),
            self.memory,
            self.fact_store,
            max_episodes=self.max_episodes,
            keep_deltas=self.keep_deltas,
        )

    async def consolidate(
        self,
        *,
        user: str | None = None,
        agent: str | None = None,
        now: datetime | None = None,
        dry_run: bool = False,
        rule_ids: Sequence[str] | None = None,
        legacy: LegacyFilter | None = None,
    ) -> list[PassReport]:
        """Run every pack over the selected partitions until caught up."""
        when = now or utc_now()
        partitions = [
            p
            for p in await self.memory.partitions()
            if (user is None or p.user == user) and (agent is None or p.agent == agent)
        ]
        if user is not None and agent is not None and not partitions:
            partitions = [Partition(user, agent)]
        reports: list[PassReport] = []
        for compiled in self.packs:
            consolidation = self._consolidation(compiled)
            for partition in partitions:
                reports += await consolidation.run(
                    partition, now=when, rule_ids=rule_ids, dry_run=dry_run, legacy=legacy
                )
        return reports

    async def facts(
        self, *, user: str | None = None, agent: str | None = None, as_of: datetime | None = None
    ) -> list[Fact]:
        """Current facts (or those current at ``as_of``)."""
        pattern = FactPattern(user=user, agent=agent)
        if as_of is not None:
            return await self.fact_store.as_of(as_of, pattern)
        return await self.fact_store.query(pattern)

    async def explain(self, fact_id: str) -> Explanation:
        """Rule, pack hash, reason, bindings, source episodes and the supersession chain."""
        return await self.fact_store.explain(fact_id)
