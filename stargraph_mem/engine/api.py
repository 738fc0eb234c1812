"""A small async facade over the stores and the runtime, for CLIs and workflow graphs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Literal, overload

from stargraph_mem import telemetry
from stargraph_mem.compiler.pack import CompiledPack, compile_file
from stargraph_mem.embedding import DEFAULT_EMBEDDER_SPEC, Embedder, load_embedder
from stargraph_mem.engine.entities import register_pack_entities
from stargraph_mem.engine.limits import DEFAULT_MAX_EPISODES
from stargraph_mem.engine.passes import observe
from stargraph_mem.engine.passes.batch import run_many
from stargraph_mem.engine.passes.report import LegacyFilter, PassReport
from stargraph_mem.engine.passes.runner import PassRunner, WorkerMode
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.engine.passes.sweep import Sweeper, swept
from stargraph_mem.engine.recall.fusion import RecallWeights
from stargraph_mem.engine.recall.models import RecallKinds, RecallResult, RecallSettings
from stargraph_mem.engine.recall.service import Recall, StrategyTimes
from stargraph_mem.engine.reconnect import OnOutage, Reconnect, Survivor
from stargraph_mem.engine.schedule.scheduler import (
    DEFAULT_LEASE_SECONDS,
    RETRIES,
    ConsolidationReport,
    Scheduler,
    StatusRow,
    merge_sweep,
)
from stargraph_mem.errors import DatabaseUnavailableError, EmbedderError
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.model.entities import Entity, EntityProfile, EntityType
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import (
    Fact,
    FactAccess,
    FactHit,
    FactPattern,
    StatusChange,
    StatusEvent,
    StatusFilter,
)
from stargraph_mem.model.layers import RecallMode
from stargraph_mem.model.limits import DEFAULT_LIMITS, Limits
from stargraph_mem.model.time import to_utc, utc_now
from stargraph_mem.salience import SalienceScorer
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.fact import Explanation
from stargraph_mem.stores.repositories.episode_rows import check_scope
from stargraph_mem.stores.repositories.schedule_runs import RuleRun, RunState
from stargraph_mem.stores.repositories.vectors import BackfillReport
from stargraph_mem.stores.resources import AsyncResource, closed_on_failure
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite.inline import inline_statements

_RUNTIMES: dict[str, PackRuntime] = {}

RECORD_SPAN = telemetry.RECORD_SPAN
RECALL_SPAN = "stargraph_mem.recall"


def runtime_for(compiled: CompiledPack) -> PackRuntime:
    """One loaded CLIPS environment per pack hash per process (reloaded when the hash changes)."""
    runtime = _RUNTIMES.get(compiled.sha256)
    if runtime is None:
        runtime = _RUNTIMES[compiled.sha256] = PackRuntime(compiled)
    return runtime


class Consolidator(AsyncResource):
    """Episodes in, facts out: ``record`` episodes (streaming rules fire at once), ``tick``
    whatever is due, ``consolidate`` on demand, read facts and explanations.

    ``record``, ``record_many``, ``tick`` and ``consolidate`` each return one
    :class:`~stargraph_mem.engine.schedule.scheduler.ConsolidationReport`.

    ``clock`` (tz-aware) is the scheduler's notion of now, injectable for tests. Every
    method is safe to call concurrently from many tasks of one event loop.

    ``read_only`` (default ``None``: when the file cannot be written) opens the stores
    read-only: reads work on a current schema, writes raise ``DB is read-only …``.

    ``tick`` and ``consolidate`` survive a database restart or failover: when the
    connection is lost they reconnect as ``reconnect`` says (by default for up to 60 s
    without progress), redo the interrupted work from a fresh read and go on; each outage
    is reported to ``on_outage`` (default: a warning logged on ``stargraph_mem.reconnect``).
    A database that stays away longer raises
    :class:`~stargraph_mem.errors.DatabaseUnavailableError`.

    ``limits`` (default :data:`~stargraph_mem.model.limits.DEFAULT_LIMITS`) bound an
    episode's content and metadata (``record`` raises :class:`~stargraph_mem.errors.
    LimitError`) and a delta's rendered text (its episode is rejected in the pass).
    """

    def __init__(
        self,
        path: str | Path,
        packs: Sequence[CompiledPack],
        *,
        max_episodes: int = DEFAULT_MAX_EPISODES,
        keep_deltas: bool = True,
        clock: Callable[[], datetime] = utc_now,
        scorer: SalienceScorer | None = None,
        holder: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        worker: WorkerMode = "auto",
        read_only: bool | None = None,
        reconnect: Reconnect | None = None,
        on_outage: OnOutage | None = None,
        limits: Limits | None = None,
        embedder: Embedder | str | None = DEFAULT_EMBEDDER_SPEC,
        recall_settings: RecallSettings | None = None,
    ) -> None:
        self.limits = limits or DEFAULT_LIMITS
        """Size limits: episodes' content and metadata at ``record``, deltas' rendered text
        in passes (see :mod:`stargraph_mem.model.limits`)."""
        self.database = open_database(path, clock=clock, read_only=read_only, limits=self.limits)
        """The owner of the connections; ``memory``, ``fact_store`` and ``schedule_store``
        are its repositories. They stamp what they record by ``clock`` too: a status change,
        pin, restore or read without an explicit time happens at the memory's now."""
        self.location = self.database.memory.location
        """Where the memory lives: a SQLite file's path or a server URL."""
        self.memory = self.database.memory
        self.fact_store = self.database.facts
        self.schedule_store = self.database.schedule
        self.packs = list(packs)
        self.max_episodes = max_episodes
        self.keep_deltas = keep_deltas
        """Whether pass reports keep their deltas (counts are always kept); large runs
        turn this off so a million deltas are not held in memory."""
        self.clock = clock
        self.embedder: Embedder | None = (
            load_embedder(embedder) if isinstance(embedder, str) else embedder
        )
        """What episodes, facts and queries are embedded with for :meth:`recall` and what
        packs' ``near`` tests rank facts with (``None``: recall without the vector strategy,
        and a pack testing ``near`` is refused); a spec string is read by
        :func:`~stargraph_mem.embedding.load_embedder`."""
        if self.embedder is not None and not isinstance(self.embedder, Embedder):
            raise EmbedderError(f"embedder must be an Embedder or a spec string (got {embedder!r})")
        self.runners = [
            PassRunner(
                runtime_for(compiled),
                self.memory,
                self.fact_store,
                scorer=scorer,
                max_episodes=max_episodes,
                keep_deltas=keep_deltas,
                worker=worker,
                fact_bytes=self.limits.fact_bytes,
                embedder=self.embedder,
                vectors=self.database.vectors,
            )
            for compiled in self.packs
        ]
        """One per pack, shared by ``record``, ``tick`` and ``consolidate`` (passes of a
        pack are serialised: they share one CLIPS environment)."""
        self._joined_record = not any(r.select is not None for p in self.packs for r in p.rules)
        """Whether a record's put may leave its commit to its pass's (see
        :func:`~stargraph_mem.stores.sqlite.inline.inline_statements`): not when a rule has a
        ``select``, whose record commits its put before the pass, as it always did (the
        clause now reads the pass's episodes, so joining would be safe too)."""
        self.scheduler = Scheduler(
            self.runners,
            self.memory,
            self.fact_store,
            self.schedule_store,
            holder=holder,
            lease_seconds=lease_seconds,
        )
        self._ticked = False
        self.survivor = Survivor(
            self.database, reconnect or Reconnect(), on_outage=on_outage, forget=self._forget
        )
        """Runs ``tick`` and ``consolidate`` again after a lost connection."""
        self._entities_of: set[str] = set()
        """Partitions whose pack-declared entities are registered (by this process)."""
        self._recall = Recall(
            self.database,
            self.embedder,
            settings=recall_settings,
            clock=self.clock,
            on_partition=self._pack_entities,
        )

    def _forget(self) -> None:
        """Drop what passes and records kept from before an outage: they read again."""
        for runner in self.runners:
            runner.forget_all()
        self.scheduler.forget()

    def _applied(self) -> int:
        """Passes applied so far by every pack (the progress an outage's bound sees)."""
        return sum(runner.applied_passes for runner in self.runners)

    @classmethod
    def open(
        cls,
        path: str | Path,
        packs: Sequence[str | Path],
        *,
        max_episodes: int = DEFAULT_MAX_EPISODES,
        keep_deltas: bool = True,
        clock: Callable[[], datetime] = utc_now,
        scorer: SalienceScorer | None = None,
        holder: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        worker: WorkerMode = "auto",
        read_only: bool | None = None,
        reconnect: Reconnect | None = None,
        on_outage: OnOutage | None = None,
        limits: Limits | None = None,
        embedder: Embedder | str | None = DEFAULT_EMBEDDER_SPEC,
        recall_settings: RecallSettings | None = None,
    ) -> Consolidator:
        """Compile ``packs`` (YAML files) and prepare stores at ``path``; use ``async with``.

        Nothing is opened until ``async with`` (or :meth:`bootstrap`)."""
        return cls(
            path,
            [compile_file(p) for p in packs],
            max_episodes=max_episodes,
            keep_deltas=keep_deltas,
            clock=clock,
            scorer=scorer,
            holder=holder,
            lease_seconds=lease_seconds,
            worker=worker,
            read_only=read_only,
            reconnect=reconnect,
            on_outage=on_outage,
            limits=limits,
            embedder=embedder,
            recall_settings=recall_settings,
        )

    @property
    def read_only_reason(self) -> str | None:
        """Why the open stores are read-only (``None`` when writable or not open)."""
        return self.database.read_only_reason

    async def bootstrap(self) -> None:
        """Create the stores' schemas (idempotent) and register the packs' cadences.

        If any step fails, every store is closed before the error propagates (an open
        connection would otherwise keep the process alive). A read-only file is checked,
        not changed, and the packs are not registered.
        """
        async with closed_on_failure(self._close_stores):
            await self.database.bootstrap()
            if self.schedule_store.read_only_reason is None:
                await self.scheduler.register()

    async def close(self) -> None:
        """Give the scheduler lease up if this instance ticked, then close the stores (a
        lease that cannot be given back, the database being away, expires by itself)."""
        try:
            if self._ticked and self.schedule_store.read_only_reason is None:
                with suppress(DatabaseUnavailableError):
                    await self.scheduler.release()
        finally:
            await self._close_stores()

    async def _close_stores(self) -> None:
        """Close the database (every repository's connection)."""
        await self.database.close()

    async def record(self, episode: Episode) -> ConsolidationReport:
        """Store one episode under its own scope, then check the partition's count
        cadences: ``every: 1`` rules (and ``every: N`` ones that just reached N, or whose
        ``or_after`` time passed) fire now. ``idle`` and cron rules never fire on a record:
        a put ends a quiet spell, and ``tick`` runs them at their time.

        On SQLite the put and the first pass it fires commit together, unless a rule has a
        ``select`` clause. A pass that fails still leaves the episode stored (the put is
        done again on its own); a process killed before the commit has stored neither."""
        # a record's objects are short-lived: the cycle search waits until it returns
        with (
            telemetry.record_span(),
            inline_statements(defer_commit=self._joined_record),
            gc_paused(),
        ):
            check_scope(episode, episode.user, episode.session, episode.agent)  # as put does
            stored = await self.memory.put_many([episode])
            partition = Partition(episode.user, episode.agent)
            report = await self.scheduler.on_record(partition, self.clock(), stored=stored > 0)
        observe.report(report)
        return report

    async def record_many(self, episodes: Sequence[Episode]) -> ConsolidationReport:
        """Store a batch in one transaction (a bad episode stores none of them), then check
        the count cadences of every partition it touched, once each, in order of first
        appearance; one report covers them all."""
        with telemetry.record_span({telemetry.EPISODE_COUNT: len(episodes)}, fold=False):
            await self.memory.put_many(episodes)
            now = self.clock()
            report = ConsolidationReport(now=to_utc(now))
            for partition in dict.fromkeys(Partition(e.user, e.agent) for e in episodes):
                report.merge(await self.scheduler.on_record(partition, now))
        observe.report(report)
        return report

    async def tick(self, now: datetime | None = None) -> ConsolidationReport:
        """Run whatever is due (cron times reached, ``every: N`` counts reached, ``or_after``
        times passed, partitions quiet for their ``idle`` duration), once.

        A tick that loses the database ticks again once it is back (leases and due-ness
        are decided again from the stores)."""
        self._ticked = True
        with telemetry.span("stargraph_mem.tick"):
            report = await self.survivor.run(
                lambda: self.scheduler.tick(now or self.clock()), self._applied
            )
        observe.report(report)
        return report

    async def status(
        self,
        now: datetime | None = None,
        *,
        registered: bool = False,
        user: str | None = None,
        agent: str | None = None,
        rule_ids: Sequence[str] | None = None,
    ) -> list[StatusRow]:
        """Each rule's cadence, pending count (a sweep's: its candidate facts), last and
        next run per partition; with ``registered``, also the packs other schedulers
        registered in the file; ``user``, ``agent`` and ``rule_ids`` narrow the rows."""
        return await self.scheduler.status(
            now or self.clock(), registered=registered, user=user, agent=agent, rule_ids=rule_ids
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
        progress: Callable[[int, int], None] | None = None,
    ) -> ConsolidationReport:
        """Run every pack over the selected partitions until caught up, then its sweeps
        due at ``now`` over every partition (of ``user`` / ``agent``) with candidates.

        ``progress(done, total)`` counts episodes read by passes, summed over packs.

        A run that loses the database goes on from a fresh read once it is back (see the
        class); the report keeps the passes applied before the outage.
        """
        t0 = time.perf_counter()
        when = to_utc(now or utc_now())
        kept: list[PassReport] = []
        """Passes applied by attempts that lost the database."""

        async def attempt() -> ConsolidationReport:
            report = ConsolidationReport(now=when)
            seen: list[PassReport] = []
            try:
                await self._consolidate(
                    report, seen, user, agent, dry_run, rule_ids, legacy, progress, kept
                )
            except DatabaseUnavailableError:
                known = {id(r) for r in kept}
                for done in (*report.passes, *seen):
                    if done.applied and id(done) not in known:
                        known.add(id(done))
                        kept.append(done)
                raise
            return report

        with telemetry.span("stargraph_mem.consolidate"):
            report = await self.survivor.run(attempt, self._applied)
        report.passes[:0] = kept
        report.timings["total"] = time.perf_counter() - t0
        observe.report(report)
        return report

    async def _consolidate(
        self,
        report: ConsolidationReport,
        seen: list[PassReport],
        user: str | None,
        agent: str | None,
        dry_run: bool,
        rule_ids: Sequence[str] | None,
        legacy: LegacyFilter | None,
        progress: Callable[[int, int], None] | None,
        kept: Sequence[PassReport],
    ) -> None:
        """One attempt of :meth:`consolidate` into ``report``; every pass computed is
        added to ``seen``, and progress counts on from the ``kept`` passes of earlier
        attempts."""
        when = report.now
        partitions = [
            p
            for p in await self.memory.partitions()
            if (user is None or p.user == user) and (agent is None or p.agent == agent)
        ]
        if user is not None and agent is not None and not partitions:
            partitions = [Partition(user, agent)]
        done = sum(r.episodes for r in kept)
        total = done
        if progress is not None:
            for runner in self.runners:
                total += sum(await runner.pending_of(partitions, rule_ids))
            progress(done, total)

        def on_pass(done_pass: PassReport) -> None:
            nonlocal done
            seen.append(done_pass)
            done += done_pass.episodes
            if progress is not None:
                progress(done, max(total, done))

        for runner in self.runners:
            episode_rules = [r.id for r in runner.rules_of(rule_ids) if not swept(r)]
            todo = partitions
            for _ in range(RETRIES if episode_rules else 0):
                conflicts: list[Partition] = []
                runs = {} if dry_run else await self._runs(runner.pack, todo, episode_rules, when)
                report.passes += await run_many(
                    runner,
                    todo,
                    now=when,
                    rule_ids=episode_rules,
                    dry_run=dry_run,
                    legacy=legacy,
                    on_pass=on_pass,
                    runs=runs,
                    conflicts=conflicts,
                )
                todo = conflicts  # a scheduler ran them meanwhile: again, from its state
                if not todo:
                    break
        for runner in self.runners:  # then sweeps, at their fire times, over their candidates
            sweeper = Sweeper(runner, self.scheduler.schedule)
            outcome = await sweeper.sweep(
                when, keep=_named(user, agent), rule_ids=rule_ids, dry_run=dry_run
            )
            merge_sweep(report, runner.pack, outcome)

    async def _runs(
        self, pack: str, partitions: Sequence[Partition], rule_ids: Sequence[str], now: datetime
    ) -> dict[Partition, Sequence[RuleRun]]:
        """The run records of a ``consolidate`` over ``partitions``: each pass records its
        rules' last run as a scheduler's does (``status`` shows it, and cron clocks run
        from it), with a compare-and-set on the run tokens read here; only a pass that
        changes something records them, so a consolidate over nothing new writes nothing."""
        states = await self.schedule_store.runs_of(pack, partitions)
        token = uuid.uuid4().hex
        return {
            p: [
                RuleRun(
                    pack,
                    rule_id,
                    p,
                    now,
                    token,
                    _token(states.get((rule_id, p.key))),
                    if_consumed=True,
                )
                for rule_id in rule_ids
            ]
            for p in partitions
        }

    async def facts(
        self,
        *,
        user: str | None = None,
        agent: str | None = None,
        as_of: datetime | None = None,
        status: StatusFilter | None = None,
    ) -> list[Fact]:
        """Current facts (or those current at ``as_of``, or those with ``status``: a fact
        status or ``all``). Reads without recording access (see :meth:`search`)."""
        pattern = FactPattern(user=user, agent=agent, status=status)
        if as_of is not None:
            return await self.fact_store.as_of(as_of, pattern)
        return await self.fact_store.query(pattern)

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
    ) -> list[FactHit]:
        """Current facts ranked for ``query`` (any of its words), within the filters:
        challenged facts too with ``include_challenged``, every fact (closed ones too) with
        ``include_history``.

        Records each returned fact's access unless ``touch=False``; see
        :meth:`SQLiteFactStore.search <stargraph_mem.stores.sqlite_fact.SQLiteFactStore.search>`.
        """
        t0 = time.perf_counter()
        with telemetry.span(RECALL_SPAN, {telemetry.RECALL_STRATEGY: observe.FULL_TEXT}) as span:
            hits = await self.fact_store.search(
                query,
                user=user,
                agent=agent,
                subject=subject,
                predicate=predicate,
                min_confidence=min_confidence,
                limit=limit,
                touch=touch,
                include_history=include_history,
                include_challenged=include_challenged,
                mode=mode,
            )
            span.set_attribute("stargraph_mem.recall.hits", len(hits))
        observe.recall(time.perf_counter() - t0)
        return hits

    async def recall(
        self,
        query: str,
        *,
        user: str,
        agent: str,
        kinds: RecallKinds = "both",
        after: str | datetime | None = None,
        before: str | datetime | None = None,
        limit: int | None = None,
        include_history: bool = False,
        entity: str | None = None,
        weights: RecallWeights | Mapping[str, float] | None = None,
        k: int | None = None,
        touch: bool = True,
        include_challenged: bool = False,
        mode: RecallMode = "full_context",
    ) -> RecallResult:
        """Facts and episodes of the partition ``(user, agent)`` relevant to ``query``,
        best first: full-text, vector and graph strategies fused by Reciprocal Rank Fusion
        (``k`` default 60, ``weights`` default 1.0 each: see
        :mod:`~stargraph_mem.engine.recall.service`).

        ``kinds``: ``facts``, ``episodes`` or ``both``. ``after``/``before``: ``last_week``,
        ``last_month``, ``today``, ``yesterday``, ``YYYY-MM-DD`` or an aware datetime
        (episodes by their time, facts by ``valid_from``). ``limit`` defaults by the
        query's complexity (5, or 20 for a complex query). Only current facts that are not
        challenged, unless ``include_challenged`` (challenged ones too) or
        ``include_history`` (every fact). ``entity`` restricts facts to one entity's and
        names it in the context. Each hit says which strategies ranked it and where;
        ``.context(...)`` of the result is a markdown block within a token budget.
        Returned facts' and episodes' access is recorded unless ``touch=False``. ``mode``
        (specification 004): ``facts_only`` keeps facts of type ``fact``,
        ``facts_plus_rules`` those and ``procedure`` ones (neither returns episodes),
        ``full_context`` everything (the default).
        """
        t0 = time.perf_counter()
        times = StrategyTimes()
        with (
            telemetry.span(RECALL_SPAN, {telemetry.RECALL_STRATEGY: observe.HYBRID}) as span,
            # SQLite: a recall's statements are short, so they run on this thread rather
            # than the connection's (two thread switches each cost more than a read)
            inline_statements(),
        ):
            result = await self._recall.recall(
                query,
                user=user,
                agent=agent,
                kinds=kinds,
                after=after,
                before=before,
                limit=limit,
                include_history=include_history,
                include_challenged=include_challenged,
                entity=entity,
                weights=weights,
                k=k,
                touch=touch,
                times=times,
                mode=mode,
            )
            span.set_attribute("stargraph_mem.recall.hits", len(result.hits))
            span.set_attribute("stargraph_mem.recall.intent", result.intent)
        for strategy, seconds in times.seconds.items():
            observe.recall(seconds, strategy)
        observe.recall(time.perf_counter() - t0, observe.HYBRID)
        return result

    async def _pack_entities(self, partition: Partition) -> None:
        """Register the packs' declared entities in ``partition`` (once per process)."""
        if partition.key in self._entities_of:
            return
        if self.fact_store.read_only_reason is None:
            for compiled in self.packs:
                if compiled.pack.entities:
                    await register_pack_entities(self.database.entities, partition, compiled)
        self._entities_of.add(partition.key)

    async def entity(self, name: str, *, user: str, agent: str, limit: int = 50) -> EntityProfile:
        """What the partition ``(user, agent)`` holds on the entity ``name`` names (its
        canonical name or an alias, case and accents ignored; or a fact's subject or
        object): aliases, current facts, timeline.
        :class:`~stargraph_mem.errors.EntityNotFoundError` when nothing has that name."""
        partition = Partition(user, agent)
        await self._pack_entities(partition)
        return await self.database.entities.profile(partition, name, limit=limit)

    async def define_entity(
        self,
        name: str,
        *,
        user: str,
        agent: str,
        aliases: Sequence[str] = (),
        type: EntityType | None = None,
    ) -> Entity:
        """Declare the entity ``name`` in the partition ``(user, agent)``, or add
        ``aliases`` to it (an alias another entity has is refused)."""
        partition = Partition(user, agent)
        await self._pack_entities(partition)
        return await self.database.entities.define(
            partition, name, aliases=aliases, type=type, at=self.clock()
        )

    async def embed_backfill(
        self,
        *,
        batch: int = 512,
        progress: Callable[[int, int], object] | None = None,
    ) -> BackfillReport:
        """Embed every episode and current fact without a vector of :attr:`embedder`
        (all of them, after the embedder changed), reporting ``progress(done, total)``."""
        if self.embedder is None:
            raise EmbedderError("this memory was opened without an embedder (embedder=None)")
        return await self.database.vectors.backfill(self.embedder, batch=batch, progress=progress)

    async def embedding_backlog(self) -> int:
        """Episodes and current facts not embedded yet with :attr:`embedder` (they are
        embedded by the next recall of their partition, or by :meth:`embed_backfill`)."""
        if self.embedder is None:
            return 0
        pending = await self.database.vectors.pending(self.embedder)
        telemetry.set_embedding_backlog(pending)
        return pending

    async def access(self, fact_id: str) -> FactAccess:
        """How often ``fact_id`` was returned by access-recording reads, and when last."""
        return await self.fact_store.access(fact_id)

    async def record_access(self, fact_ids: Sequence[str], *, at: datetime | None = None) -> None:
        """Count one read of each fact (at ``at``, default now) for reads made outside
        :meth:`search`: rules see it as ``access_count`` and ``last_access``."""
        if at is not None:
            at = to_utc(at)
        await self.fact_store.record_access(fact_ids, at=at)

    async def explain(self, fact_id: str) -> Explanation:
        """Rule, pack hash, reason, bindings, source episodes, the supersession chain and
        the status history."""
        return await self.fact_store.explain(fact_id)

    async def pin(self, fact_id: str, *, reason: str = "") -> bool:
        """Pin a current fact: sweeps leave it alone unless a rule tests ``pinned``, and the
        pin carries to the facts that replace it. False when it was pinned already
        (nothing changes); a closed fact raises :class:`FactStatusError`."""
        return await self.fact_store.pin(fact_id, reason=reason)

    async def unpin(self, fact_id: str, *, reason: str = "") -> bool:
        """Take the pin off a current fact; False when it was not pinned."""
        return await self.fact_store.unpin(fact_id, reason=reason)

    async def restore(self, fact_id: str, *, reason: str = "") -> Fact:
        """Make an archived fact current again: a new fact with the same statement, payload
        and confidence whose predecessor is the archived one (which stays archived)."""
        return await self.fact_store.restore(fact_id, reason=reason)

    @overload
    async def status_history(
        self, fact_id: str, *, shape: Literal["events"] = "events"
    ) -> list[StatusEvent]: ...
    @overload
    async def status_history(
        self, fact_id: str, *, shape: Literal["spec"]
    ) -> list[StatusChange]: ...
    async def status_history(
        self, fact_id: str, *, shape: Literal["events", "spec"] = "events"
    ) -> list[StatusEvent] | list[StatusChange]:
        """What happened to a fact, oldest first: created, pins, challenges, its close, a
        restore; with ``shape="spec"``, its status transitions as specification 004 writes
        them, ``{old, new, reason, changed_at}``."""
        if shape == "spec":
            return await self.fact_store.status_history(fact_id, shape="spec")
        return await self.fact_store.status_history(fact_id, shape=shape)

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
    ) -> Fact:
        """Move a fact to ``status`` (specification 004's ``update_status``): ``challenged``
        flags it (still current, left out of search and recall), ``active`` clears the
        flag, ``merged`` (into ``merged_into``, a current fact of the same user and agent),
        ``superseded`` (by ``merged_into``, such a fact and not older), ``invalidated``,
        ``deleted``, ``expired`` or ``archived`` close it. ``challenged``
        and ``invalidated`` need a ``reason``. Audited, and in :meth:`status_history`;
        anything refused raises :class:`FactStatusError` or :class:`FactNotFoundError` and
        changes nothing (``user``/``agent``, when given, must be the fact's). Returns the
        fact as it is now."""
        return await self.fact_store.update_status(
            fact_id, status, reason=reason, merged_into=merged_into, at=at, user=user, agent=agent
        )


def _token(state: RunState | None) -> str:
    return "" if state is None else state.token


def _named(user: str | None, agent: str | None) -> Callable[[Partition], bool] | None:
    """Accepts the partitions of ``user`` and ``agent`` (None: any); None when both are."""
    if user is None and agent is None:
        return None
    return lambda p: (user is None or p.user == user) and (agent is None or p.agent == agent)
