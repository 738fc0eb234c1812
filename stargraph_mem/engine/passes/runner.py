"""Consolidation passes: episodes after the watermarks → CLIPS → deltas → one transaction.

A pass covers one partition and a set of rules. It reads the partition's episodes after
the lowest watermark of those rules (at most ``max_episodes`` of them), works out which
rule may see which episode (see :mod:`~stargraph_mem.engine.passes.eligibility`), runs the pack,
and applies deltas, rejections and the watermark advance in one fact-store transaction.
Passes repeat until the partition is caught up. Many small partitions are consolidated in
batches (see :mod:`~stargraph_mem.engine.passes.batch`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Final, Literal, Protocol

from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.embedding import Embedder, Matrix, identity
from stargraph_mem.engine.limits import DEFAULT_MAX_EPISODES
from stargraph_mem.engine.passes import observe
from stargraph_mem.engine.passes.aggregates import HistoryInput, HistoryRead, load_history
from stargraph_mem.engine.passes.eligibility import Eligibility
from stargraph_mem.engine.passes.inflight import Behind
from stargraph_mem.engine.passes.near_episodes import EarlierEpisodes, window_of
from stargraph_mem.engine.passes.near_pass import needs_embedder
from stargraph_mem.engine.passes.outputs import Stamp
from stargraph_mem.engine.passes.pass_clock import due, not_yet_due, resumed_records, timed
from stargraph_mem.engine.passes.report import LegacyFilter, PassReport, changes, recorded_runs
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.engine.passes.worker import WorkerProcess
from stargraph_mem.errors import EmbedderError, StalePassError
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.model.deltas import DELTA_ADAPTER, MemoryDelta
from stargraph_mem.model.limits import DEFAULT_FACT_BYTES
from stargraph_mem.model.time import seconds_us, to_us, to_utc
from stargraph_mem.salience import RuleBasedScorer, SalienceScorer, gate_scorer
from stargraph_mem.stores.fact import EngineFact, WatermarkAdvance
from stargraph_mem.stores.memory import CheckedRead, EpisodeRecord
from stargraph_mem.stores.protocols import (
    ArchivedFactSource,
    BackgroundCheckpoints,
    EpisodeRepository,
    FactRepository,
)
from stargraph_mem.stores.repositories.aggregates import AggregateWrite
from stargraph_mem.stores.repositories.fact_rows import PassBasis, PassWrite, claim_holder
from stargraph_mem.stores.repositories.pass_time import Deferral
from stargraph_mem.stores.repositories.schedule_runs import RuleRun
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite.inline import current_scope
from stargraph_mem.telemetry import PassSpan

WORKER_MIN_EPISODES = 50_000
"""With ``worker="auto"``, a run uses a worker process when at least this many episodes
remain after its first (full) pass."""

WorkerMode = Literal["auto", "always", "never"]

CLAIM_SECONDS = 60.0
"""A run that lost a race claims its partition for this long, renewed by every pass it
applies; passes of every pack over that partition wait for it, and an unclaimed pass is
not applied while another holds a claim. A claim whose holder died is taken over once it
expires, or at once when the holder ran on this host."""
STALE_RETRIES = 100
"""How often a run computes a pass again because the partition changed under it (another
writer's apply) before giving up with :class:`StalePassError`."""

INLINE_PASS_EPISODES = 64
"""Inside ``inline_statements`` (a streaming ``record``), a pass over at most this many
episodes runs on the calling thread; a larger one (a backlog) runs on a worker thread."""

KNOWN_PARTITIONS_MAX = 256
KNOWN_FACTS_MAX = 200_000
"""Passes reuse the facts their previous pass left for up to this many recent partitions,
holding at most this many facts in all (the least recent are dropped first; a partition
with more is read again each pass), instead of reading them again."""


STORED_VECTORS_FROM: Final = 32
"""A pass that would embed at least this many fact statements first looks for their stored
vectors (one read); fewer are embedded at once."""


class StoredVectors(Protocol):
    """Where facts' stored vectors are read (the store's vector repository)."""

    async def fact_vectors(
        self, partition_key: str, embedder: Embedder, ids: Sequence[str]
    ) -> tuple[list[str], Matrix]: ...

    async def keep_fact_vectors(
        self, partition_key: str, embedder: Embedder, items: Sequence[tuple[str, Matrix]]
    ) -> int: ...


class PassRunner:
    """Runs passes of one compiled pack against a memory store and a fact store."""

    def __init__(
        self,
        runtime: PackRuntime,
        memory: EpisodeRepository,
        facts: FactRepository,
        *,
        scorer: SalienceScorer | None = None,
        max_episodes: int = DEFAULT_MAX_EPISODES,
        keep_deltas: bool = True,
        worker: WorkerMode = "auto",
        claim_seconds: float = CLAIM_SECONDS,
        fact_bytes: int = DEFAULT_FACT_BYTES,
        embedder: Embedder | None = None,
        vectors: StoredVectors | None = None,
    ) -> None:
        self.runtime = runtime
        if runtime.compiled.similarity and embedder is None:
            raise EmbedderError(needs_embedder(runtime.compiled), pack=runtime.compiled.name)
        self.embedder = embedder
        """What ``near`` tests rank facts with (a pack without them ignores it)."""
        self.vectors = vectors
        """Where a pass of a pack testing ``near`` reads the stored vectors of the facts it
        ranks (those of ``embedder``'s identity, as recall stores them), so that it embeds
        only the statements without one (None: it embeds them all)."""
        self.fact_bytes = fact_bytes
        """The most UTF-8 bytes a delta's rendered text may hold (else its episode is
        rejected)."""
        self.claim_seconds = claim_seconds
        self.leases: dict[str, tuple[str, float]] = {}
        """Partition key → (holder, seconds) of a lease the caller (a scheduler) took on it:
        passes over the partition run under that lease, renew it for that long, and leave
        giving it up to the caller."""
        self.keep_deltas = keep_deltas
        self.memory = memory
        self.facts = facts
        self.scorer: SalienceScorer = scorer or gate_scorer()
        self.max_episodes = max_episodes
        if worker not in ("auto", "always", "never"):
            raise ValueError(f"worker must be 'auto', 'always' or 'never' (got {worker!r})")
        if worker == "always" and type(self.scorer) is not RuleBasedScorer:
            raise ValueError(
                "worker='always' needs the built-in RuleBasedScorer: a worker process "
                f"cannot call a {type(self.scorer).__name__} living in this process"
            )
        self.worker: WorkerMode = worker
        """Whether a run computes its passes in a worker process (see :meth:`run`)."""
        self.eligibility = Eligibility(runtime.compiled, self.scorer)
        self.horizon: int | None = None
        """When set (a replay of recorded passes), passes leave episodes stored after this
        seq for later passes, as if they had not been stored yet (computed in this
        process only: a worker process does not see it)."""
        self.lock = asyncio.Lock()
        """Held by each run (or batch) of this runner: one at a time."""
        self._known: OrderedDict[str, _Known] = OrderedDict()
        """Per partition key: what this object's last pass there left (reused while the
        partition has not moved; every apply checks that it has not)."""
        self._known_facts = 0
        """How many facts ``_known`` holds in all."""
        self.claimer = claim_holder()
        """The holder of the claims this runner's runs take after a lost race (one name
        for all of them: its runs never overlap, and a claim left behind by a run that lost
        its database connection is renewed by the next run, not waited for)."""
        self.applied_passes = 0
        """Passes this runner applied so far (a run that survives an outage measures its
        progress by it)."""

    @property
    def pack(self) -> str:
        return self.runtime.compiled.name

    def rules_of(self, rule_ids: Sequence[str] | None) -> list[CompiledRule]:
        """The pack's rules named by ``rule_ids`` (all of them for None)."""
        rules = self.runtime.compiled.rules
        if rule_ids is None:
            return list(rules)
        wanted = set(rule_ids)
        unknown = wanted - {r.id for r in rules}
        if unknown:
            raise KeyError(f"unknown rule(s) in pack '{self.pack}': {', '.join(sorted(unknown))}")
        return [r for r in rules if r.id in wanted]

    # --- runs ------------------------------------------------------------------------

    async def run(
        self,
        partition: Partition,
        *,
        now: datetime,
        rule_ids: Sequence[str] | None = None,
        dry_run: bool = False,
        legacy: LegacyFilter | None = None,
        stamp: Stamp | None = None,
        runs: Sequence[RuleRun] = (),
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> list[PassReport]:
        """Consolidate ``partition`` until caught up; one report per pass.

        ``runs`` are a scheduler's run records, written with every pass's transaction.
        ``on_pass`` is told of each pass once it is computed (progress display).

        With ``stamp``, every rule shares one watermark stored under ``stamp.rule_id``.

        Pass k+1 is computed while pass k commits. The first pass is computed here; when
        more follow, a worker process (``worker``: "always", or "auto" when at least
        ``WORKER_MIN_EPISODES`` episodes remain) reads and computes the rest while this
        process applies, so the two halves do not share one interpreter lock. Deltas are
        the same either way.
        """
        now = to_utc(now)
        rules = self.rules_of(rule_ids)
        if not rules:  # an empty selection (a pack of sweeps asked for its episode rules)
            return []
        async with self.lock:
            return await self.run_alone(
                partition, now, rules, dry_run, legacy, stamp, runs, on_pass
            )

    async def run_alone(
        self,
        partition: Partition,
        now: datetime,
        rules: list[CompiledRule],
        dry_run: bool = False,
        legacy: LegacyFilter | None = None,
        stamp: Stamp | None = None,
        runs: Sequence[RuleRun] = (),
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> list[PassReport]:
        """:meth:`run` for a caller holding the runner's lock."""
        reports: list[PassReport] = []
        holder: str | None = None
        held = False
        try:
            for attempt in range(STALE_RETRIES):
                # optimistic first: the apply checks nothing moved and nobody else holds a
                # claim; after a lost race, the run claims the partition
                if attempt > 0 and not dry_run:
                    holder = holder or self._leased(partition) or self.claimer
                    await self._claim(partition, holder)
                    held = True
                try:
                    held = not await self._passes(
                        partition,
                        now,
                        rules,
                        dry_run,
                        legacy,
                        stamp,
                        runs,
                        on_pass,
                        holder,
                        reports,
                    )
                    return reports
                except StalePassError:
                    # another writer changed the partition: what was not applied is
                    # computed again from the stored state
                    self.forget(partition)
                    reports[:] = [r for r in reports if r.applied]
                    if attempt == STALE_RETRIES - 1:
                        raise
                    observe.stale_retry(self.pack, partition, attempt + 1)
        finally:
            if holder is not None and held and holder != self._leased(partition):
                with suppress(Exception):
                    await self.facts.release_partition(partition, holder)
        return reports

    async def _claim(self, partition: Partition, holder: str) -> None:
        """Wait until ``partition`` is claimed for ``holder`` (see :data:`CLAIM_SECONDS`)."""
        delay = 0.001
        while await self.facts.claim_partition(partition, holder, self.claim_seconds):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def _passes(
        self,
        partition: Partition,
        now: datetime,
        rules: list[CompiledRule],
        dry_run: bool,
        legacy: LegacyFilter | None,
        stamp: Stamp | None,
        runs: Sequence[RuleRun],
        on_pass: Callable[[PassReport], None] | None,
        holder: str | None,
        reports: list[PassReport],
    ) -> bool:
        """Passes until caught up, appended to ``reports``; True when the last applied
        pass gave the claim up (:class:`StalePassError` when the partition changed)."""
        async with AsyncExitStack() as stack:
            previous: PassReport | None = None
            applying: Behind[int] = Behind()
            worker: WorkerProcess | None = None
            version: int | None = None
            try:
                while True:
                    traced = PassSpan(self.pack, len(rules), 1)
                    try:
                        with traced.current():
                            report = await self._computed(
                                worker, partition, now, rules, legacy, stamp, previous
                            )
                    except BaseException as error:
                        traced.end(error)
                        raise
                    if previous is not None:
                        previous.facts_after = None  # carried into this pass already
                    reports.append(report)
                    if on_pass is not None:
                        on_pass(report)
                    if applying.task is not None:
                        # the previous pass commits while this one is computed
                        version = await applying.wait()
                    last = report.scanned < self.max_episodes or dry_run
                    if dry_run:
                        traced.end()
                    else:
                        if report.read_version is None:  # carried from the previous pass
                            report.read_version = version
                        if last:  # nothing left to compute meanwhile
                            await self._traced_apply(traced, report, runs, holder, last)
                        else:
                            applying.start(self._traced_apply(traced, report, runs, holder, last))
                    if last:
                        break
                    previous = None  # a worker carries its own passes
                    if worker is None:
                        previous = report
                        if len(reports) == 1:
                            worker = await self._worker_for(partition, report.last_seq)
                            if worker is not None:  # a long run: see background_checkpoints
                                await self._checkpoints_in_background(stack)
                                previous = replace(report, deltas=[], matched=[])
                await applying.wait()
            finally:
                await applying.settle()
                if worker is not None:
                    await asyncio.to_thread(worker.close)
                for report in reports:
                    report.facts_after = None
        return not dry_run and holder is not None

    async def _computed(
        self,
        worker: WorkerProcess | None,
        partition: Partition,
        now: datetime,
        rules: list[CompiledRule],
        legacy: LegacyFilter | None,
        stamp: Stamp | None,
        previous: PassReport | None,
    ) -> PassReport:
        """The next pass of a run, computed here or by the run's worker process."""
        if worker is None:
            return await self.compute(partition, now, rules, legacy, stamp, previous)
        job = WorkerPass(partition, now, [r.id for r in rules], legacy, stamp, previous)
        return await asyncio.to_thread(_remote, worker, job)

    async def _traced_apply(
        self,
        traced: PassSpan,
        report: PassReport,
        runs: Sequence[RuleRun],
        holder: str | None,
        last: bool,
    ) -> int:
        """:meth:`_apply` inside the pass's span, which it ends: read and CLIPS run as
        child spans from the pass's timings, the apply as one around the commit."""
        error: BaseException | None = None
        try:
            traced.phases(
                report.timings.get("read", 0.0), report.timings.get("engine", 0.0), report.episodes
            )
            with traced.apply():
                version = await self._apply(report, runs, holder, last)
            timings = report.timings
            traced.timed(timings.get("read", 0.0) + timings.get("engine", 0.0), timings["apply"])
            return version
        except BaseException as exc:
            error = exc
            raise
        finally:
            traced.end(error)

    async def _checkpoints_in_background(self, stack: AsyncExitStack) -> None:
        """For the rest of a long run, commits leave their checkpoints to a second
        connection where the fact repository can (see :class:`BackgroundCheckpoints`)."""
        if isinstance(self.facts, BackgroundCheckpoints):
            await stack.enter_async_context(self.facts.background_checkpoints())

    async def _worker_for(self, partition: Partition, after: int) -> WorkerProcess | None:
        """A started worker process for the rest of a run whose first pass ended at seq
        ``after``, or None to go on in this process."""
        if (
            self.worker == "never"
            or type(self.scorer) is not RuleBasedScorer
            or self.runtime.compiled.similarity  # the embedder lives in this process
        ):
            return None
        if (
            self.worker == "auto"
            and await self.memory.count_since(partition, after) < WORKER_MIN_EPISODES
        ):
            return None
        worker = await asyncio.to_thread(WorkerProcess)
        setup = WorkerSetup(
            location=self.memory.location,
            compiled=replace(self.runtime.compiled, _built=[]),
            max_episodes=self.max_episodes,
            keep_deltas=self.keep_deltas,
            scorer=self.scorer,
            fact_bytes=self.fact_bytes,
        )
        try:
            await worker.call(setup)
        except BaseException:
            await asyncio.to_thread(worker.close)
            raise
        return worker

    async def pending(self, partition: Partition, rule_ids: Sequence[str] | None = None) -> int:
        """Episodes of ``partition`` not consumed yet: those after the lowest watermark and
        those passes deferred (stamped after their pass time), whether due now or not."""
        return (await self.pending_of([partition], rule_ids))[0]

    async def pending_of(
        self, partitions: Sequence[Partition], rule_ids: Sequence[str] | None = None
    ) -> list[int]:
        """:meth:`pending` of each of ``partitions`` (a constant number of reads)."""
        rules = self.rules_of(rule_ids)
        bases = await self.facts.pass_bases(self.pack, partitions)
        lows = [self.low(marks, rules, None) for marks, _ in bases]
        counts = await self.memory.count_since_of(list(zip(partitions, lows, strict=True)))
        deferred = await self.facts.deferred_of(self.pack, partitions)
        keys = {r.id for r in rules}
        return [
            count + len({d.seq for d in found if d.rule_id in keys and d.seq <= low})
            for count, low, found in zip(counts, lows, deferred, strict=True)
        ]

    # --- one pass --------------------------------------------------------------------

    @staticmethod
    def low(marks: dict[str, int], rules: list[CompiledRule], stamp: Stamp | None) -> int:
        """The watermark a pass of ``rules`` reads after: the lowest of theirs."""
        if stamp is not None:
            return marks.get(stamp.rule_id, 0)
        return min((marks.get(r.id, 0) for r in rules), default=0)

    @staticmethod
    def keys(rules: list[CompiledRule], stamp: Stamp | None) -> list[str]:
        """The watermark keys a pass of ``rules`` moves (with ``stamp``, the shared one)."""
        return [stamp.rule_id] if stamp is not None else [r.id for r in rules]

    def due(
        self,
        rules: list[CompiledRule],
        stamp: Stamp | None,
        deferred: list[Deferral],
        now: datetime,
    ) -> list[Deferral]:
        """The deferred episodes a pass of ``rules`` at ``now`` consumes."""
        return due(deferred, self.keys(rules, stamp), to_us(now))

    def started(
        self,
        partition: Partition,
        now: datetime,
        rules: list[CompiledRule],
        stamp: Stamp | None,
        marks: dict[str, int],
        read: CheckedRead,
        deferred: list[Deferral],
        found: dict[str, EpisodeRecord],
    ) -> tuple[PassReport, list[EpisodeRecord]]:
        """The report of a pass that read ``read`` after the stored watermarks ``marks``
        (and ``deferred``, the stored deferrals; ``found``: the episodes of those due), and
        the episodes it consumes: those stamped at or before ``now`` (see
        :mod:`~stargraph_mem.engine.passes.pass_clock`)."""
        low = self.low(marks, rules, stamp)
        keys = self.keys(rules, stamp)
        split = timed(read, low, now, keys, marks, self.due(rules, stamp, deferred, now), found)
        records = split.records
        high = read.last_seq(low)
        report = PassReport(
            pack=self.pack,
            pack_hash=self.runtime.sha256,
            partition=partition,
            now=now,
            rules=[r.id for r in rules],
            episodes=len(records),
            scanned=read.scanned,
            quarantined=read.quarantined,
            first_seq=records[0].seq if records else 0,
            last_seq=high,
            read_marks=marks,
            advances=self._advances(partition, rules, marks, high, stamp),
            time=split.time,
            deferred_read=deferred,
        )
        if split.resumed:
            report.resumed = {
                r.id: split.resumed.get(stamp.rule_id if stamp else r.id, set()) for r in rules
            }
        wanted = set(keys)
        report.not_yet_due_seqs = not_yet_due(
            [d for d in report.deferred_after() if d.rule_id in wanted], split.time.now_us
        )
        report.not_yet_due = len(report.not_yet_due_seqs)
        return report, records

    def effective_marks(
        self, marks: dict[str, int], rules: list[CompiledRule], stamp: Stamp | None
    ) -> dict[str, int]:
        """Each rule's watermark (with ``stamp``, the one they share)."""
        if stamp is None:
            return marks
        shared = marks.get(stamp.rule_id, 0)
        return {r.id: shared for r in rules}

    async def compute(
        self,
        partition: Partition,
        now: datetime,
        rules: list[CompiledRule],
        legacy: LegacyFilter | None,
        stamp: Stamp | None,
        previous: PassReport | None,
    ) -> PassReport:
        """Read, gate and run one pass; nothing is written.

        ``previous`` is the previous pass of the same run (not committed yet): its
        watermarks and resulting facts stand in for reads of the stores.
        """
        t0 = time.perf_counter()
        version: int | None = None
        facts: list[EngineFact] | None = None
        known = self._known.get(partition.key)
        if previous is not None:
            stored, facts = previous.marks_after(), previous.facts_after
            deferred = previous.deferred_after()
        elif known is not None:  # as our last apply left it: the apply checks it still is
            self._known.move_to_end(partition.key)
            stored, version, facts = dict(known.marks), known.version, known.facts
            deferred = list(known.deferred)
        else:  # read before the episodes and facts: the apply checks nothing moved since
            stored, version = await self.facts.basis(self.pack, partition)
            (deferred,) = await self.facts.deferred_of(self.pack, [partition])
        low = self.low(stored, rules, stamp)
        # rows that cannot be decoded are quarantined by the read; the watermark passes them
        read = await self.memory.since_checked(partition, low, limit=self.max_episodes)
        if self.horizon is not None:
            read = below(read, self.horizon)
        found = await resumed_records(self.memory, self.due(rules, stamp, deferred, now))
        report, records = self.started(partition, now, rules, stamp, stored, read, deferred, found)
        report.read_version = version
        marks = self.effective_marks(stored, rules, stamp)
        eligible = await self.eligibility.of(report, rules, records, marks, legacy)
        if facts is None:
            assert version is not None
            facts = self.known_facts(partition, version)
            if facts is None:
                facts = await self.facts.current_facts(partition)
        overlay = [previous.aggregates] if previous is not None and previous.aggregates else []
        read_history = self.history_read(report, records, rules, stamp, marks, overlay)
        if previous is not None:
            read_history = replace(read_history, carried=previous.history_after)
        (history,) = await self.history([read_history], now, rules)
        (archived,) = await self.archived_of([partition])
        unstored = await self.stored_vectors(partition, facts)
        t1 = time.perf_counter()
        run = partial(
            self.runtime.run_pass,
            partition=partition,
            now=now,
            episodes=records,
            facts=facts,
            eligible=eligible,
            stamp=stamp,
            matched=self.keep_deltas,
            history=history,
            archived=archived,
            fact_bytes=self.fact_bytes,
            embedder=self.embedder,
            earlier=await self.earlier_of(partition, records, low),
        )
        # a small pass of a record costs less than the hand-over to a thread
        small = current_scope() is not None and len(records) <= INLINE_PASS_EPISODES
        out = run() if small else await asyncio.to_thread(run)
        if unstored and current_scope() is None:  # not inside a record's transaction
            await self.keep_vectors(partition, unstored)
        t2 = time.perf_counter()
        report.take(out, self.keep_deltas)
        if history is not None:
            report.history_after = history.after(out.aggregates)
        report.timings = {"read": t1 - t0, "engine": t2 - t1, "apply": 0.0, "total": t2 - t0}
        return report

    async def stored_vectors(
        self, partition: Partition, facts: Sequence[EngineFact]
    ) -> list[EngineFact]:
        """Give the runtime the stored vectors of the facts whose statements a pass would
        embed, when there are many: a fact's vector is stored from its statement plus its
        payload, so only facts without a payload have their statement's vector stored.
        Return the facts among them without a stored vector, when many: the pass embeds
        them, and :meth:`keep_vectors` stores what it made."""
        embedder = self.embedder
        if self.vectors is None or embedder is None or not self.runtime.compiled.near:
            return []
        missing = self.runtime.unembedded(partition.key, facts, embedder)
        plain = {f.id: f for f in missing if f.payload is None}
        if len(plain) < STORED_VECTORS_FROM:
            return []
        found, rows = await self.vectors.fact_vectors(partition.key, embedder, list(plain))
        if found:
            self.runtime.seed_vectors(embedder, [plain[i] for i in found], rows)
        for fid in found:
            del plain[fid]
        return list(plain.values()) if len(plain) >= STORED_VECTORS_FROM else []

    async def keep_vectors(self, partition: Partition, facts: Sequence[EngineFact]) -> None:
        """Store the vectors a pass made of the statements of ``facts``, which had none
        stored (see :meth:`stored_vectors`), so the next pass over them, in any process,
        reads them instead of embedding them again (as recall would have stored them)."""
        if not facts or self.vectors is None or self.embedder is None:
            return
        made = self.runtime.statement_vectors(self.embedder, facts)
        if made:
            await self.vectors.keep_fact_vectors(partition.key, self.embedder, made)

    def history_read(
        self,
        report: PassReport,
        records: list[EpisodeRecord],
        rules: list[CompiledRule],
        stamp: Stamp | None,
        marks: dict[str, int],
        overlay: Sequence[AggregateWrite] = (),
    ) -> HistoryRead:
        """What the history patterns of ``report``'s pass read: its episodes, each rule's
        watermark, and the deferred episodes it resumes or leaves for later."""
        deferred: dict[str, set[int]] = {}
        for d in report.deferred_read:
            deferred.setdefault(d.rule_id, set()).add(d.seq)
        pending = {r.id: deferred.get(stamp.rule_id if stamp else r.id, set()) for r in rules}
        return HistoryRead(report.partition, records, marks, overlay, dict(report.resumed), pending)

    async def history(
        self, reads: Sequence[HistoryRead], now: datetime, rules: list[CompiledRule]
    ) -> list[HistoryInput | None]:
        """The stored aggregates of each read's ``over: history`` patterns (None: the pack
        has none)."""
        compiled = self.runtime.compiled
        if not compiled.history:
            return [None] * len(reads)
        loaded = await load_history(
            compiled.history,
            [r.id for r in rules],
            compiled.name,
            self.facts,
            self.memory,
            to_us(to_utc(now)),
            reads,
        )
        return list(loaded)

    async def earlier_of(
        self, partition: Partition, records: Sequence[EpisodeRecord], low: int
    ) -> EarlierEpisodes | None:
        """The episodes earlier passes consumed (``seq <= low``), for a pack with ``earlier``
        patterns testing ``near``: the latest the widest window asks for, and their stored
        vectors under the embedder (None: the pack has none, or the pass no episode)."""
        relations = self.runtime.compiled.episode_near
        if not relations or not records or self.embedder is None:
            return None
        last, back = window_of(relations)
        since = None if back is None else min(to_us(r.timestamp) for r in records) - back
        ident = identity(self.embedder)
        found, vectors = await self.memory.earlier_episodes(
            partition, low, limit=last, since_us=since, embedder=ident
        )
        return EarlierEpisodes(found, vectors, ident)

    async def archived_of(self, partitions: Sequence[Partition]) -> list[list[EngineFact]]:
        """Archived facts of ``partitions``, read only for a pack whose fact patterns admit
        them (a store that cannot list them has none)."""
        if not self.runtime.compiled.needs_archived or not isinstance(
            self.facts, ArchivedFactSource
        ):
            return [[] for _ in partitions]
        return await self.facts.archived_facts_of(partitions)

    def known_facts(self, partition: Partition, version: int) -> list[EngineFact] | None:
        """The facts our last pass over ``partition`` left, while the store's version for
        it (read just before) shows nobody changed them; else None."""
        known = self._known.get(partition.key)
        if known is None or version != known.version:
            return None
        self._known.move_to_end(partition.key)
        return known.facts

    def remember(self, report: PassReport, version: int, facts: list[EngineFact] | None) -> None:
        """Keep what an applied pass left (facts, watermarks, version) for the next one."""
        if facts is None or len(facts) > KNOWN_FACTS_MAX or self.runtime.volatile:
            return
        key = report.partition.key
        self.forget(report.partition)
        self._known[key] = _Known(version, facts, report.marks_after(), report.deferred_after())
        self._known_facts += len(facts)
        while len(self._known) > KNOWN_PARTITIONS_MAX or self._known_facts > KNOWN_FACTS_MAX:
            _, oldest = self._known.popitem(last=False)
            self._known_facts -= len(oldest.facts)

    def forget(self, partition: Partition) -> None:
        """Drop the facts kept for ``partition`` (a pass over it is being applied)."""
        gone = self._known.pop(partition.key, None)
        if gone is not None:
            self._known_facts -= len(gone.facts)

    def forget_all(self) -> None:
        """Drop everything kept from earlier passes (after a lost connection, whose last
        commit may or may not have been applied, passes read the stores again)."""
        self._known.clear()
        self._known_facts = 0

    def _leased(self, partition: Partition) -> str | None:
        """The holder of the caller's lease on ``partition``, if it took one."""
        lease = self.leases.get(partition.key)
        return None if lease is None else lease[0]

    def basis(self, report: PassReport, holder: str | None = None, last: bool = True) -> PassBasis:
        """What the apply of ``report`` checks it read (and the claim it runs under: a
        lease the caller holds on the partition is kept, never given up here)."""
        assert report.read_version is not None
        seconds = self.claim_seconds
        lease = self.leases.get(report.partition.key)
        if lease is not None and holder in (None, lease[0]):
            (holder, seconds), last = lease, False
        now_us = to_us(datetime.now(UTC))
        return PassBasis(
            self.pack,
            report.partition,
            report.read_marks,
            report.read_version,
            holder or "",
            now_us + seconds_us(seconds),
            last,
            now_us,
            report.time if changes(report) else None,
        )

    def decode(self, report: PassReport) -> None:
        """Rebuild a worker's deltas from their bodies (validated again)."""
        if report.bodies is not None:
            with gc_paused():
                report.deltas = [from_body(body) for body in report.bodies]
            report.bodies = None

    def applied(self, report: PassReport, seconds: float) -> None:
        """Mark ``report`` applied; drop its deltas unless they are kept."""
        report.applied = True
        self.applied_passes += 1
        if not self.keep_deltas:
            report.deltas = []
        report.timings["apply"] = seconds
        report.timings["total"] = report.timings.get("total", 0.0) + seconds

    async def _apply(
        self, report: PassReport, runs: Sequence[RuleRun], holder: str | None, last: bool
    ) -> int:
        """Commit one computed pass: deltas, rejections and watermarks in one transaction,
        if the partition is still as the pass read it; the partition's version after it."""
        t0 = time.perf_counter()
        self.decode(report)  # while the store checkpoints the previous pass
        partition, facts = report.partition, report.facts_after
        self.forget(partition)
        basis = self.basis(report, holder, last)
        if holder is None:  # the common case: one statement checks what the pass read
            write = PassWrite(
                basis,
                report.deltas,
                report.advances,
                report.rejections(),
                recorded_runs(report, runs),
                report.aggregates,
            )
            (version,) = await self.facts.apply_passes([write], pack_hash=self.runtime.sha256)
            if version is None:
                raise StalePassError(
                    f"pack '{self.pack}' at {partition.key}: the partition changed while "
                    "the pass was computed, or another run claims it",
                    pack=self.pack,
                    partition=partition.key,
                )
        else:
            result = await self.facts.apply_deltas(
                report.deltas,
                pack_hash=self.runtime.sha256,
                watermarks=report.advances,
                rejections=report.rejections(),
                runs=recorded_runs(report, runs),
                version_of=partition,
                basis=basis,
                aggregates=[report.aggregates] if report.aggregates else [],
            )
            assert result.version is not None
            version = result.version
        self.remember(report, version, facts)
        self.applied(report, time.perf_counter() - t0)
        return version

    def _advances(
        self,
        partition: Partition,
        rules: list[CompiledRule],
        marks: dict[str, int],
        high: int,
        stamp: Stamp | None,
    ) -> list[WatermarkAdvance]:
        keys = [stamp.rule_id] if stamp is not None else [r.id for r in rules]
        marks = self.effective_marks(marks, rules, stamp)
        # the pack's name and rule ids passed the compiler's checks, and the partition the
        # store's read: nothing here to validate again
        return [
            WatermarkAdvance.model_construct(
                pack=self.pack, rule_id=key, partition=partition, last_seq=high
            )
            for key in keys
            if high
            > (marks.get(rules[0].id, 0) if stamp is not None and rules else marks.get(key, 0))
        ]


def below(read: CheckedRead, horizon: int) -> CheckedRead:
    """``read`` without the rows stored after seq ``horizon``."""
    return CheckedRead(
        [r for r in read.records if r.seq <= horizon],
        [q for q in read.quarantined if q.seq <= horizon],
    )


@dataclass(frozen=True, slots=True)
class _Known:
    """What a runner's last applied pass over a partition left there."""

    version: int
    facts: list[EngineFact]
    marks: dict[str, int]
    deferred: list[Deferral]


# --- the worker process's protocol --------------------------------------------------------


def from_body(body: bytes) -> MemoryDelta:
    """A delta rebuilt from its canonical JSON body and validated again.

    The body is the delta's canonical form already (canonical JSON of a validated delta
    dumps back to the same bytes), so it is kept as such and the id is not hashed twice.
    """
    delta = DELTA_ADAPTER.validate_json(body)
    delta.__dict__["_canonical"] = body
    return delta


@dataclass
class WorkerSetup:
    """Tells a worker process which pack and stores its passes use."""

    location: str
    """The database (a SQLite path or a server URL) the worker opens."""
    compiled: CompiledPack
    max_episodes: int
    keep_deltas: bool
    scorer: SalienceScorer
    fact_bytes: int = DEFAULT_FACT_BYTES


@dataclass
class WorkerPass:
    """Asks a worker process for the next pass of a run."""

    partition: Partition
    now: datetime
    rule_ids: list[str]
    legacy: LegacyFilter | None
    stamp: Stamp | None
    previous: PassReport | None = None
    """The previous pass (with the facts it left), when it was computed in the parent (a
    run's first pass)."""


def _remote(worker: WorkerProcess, job: WorkerPass) -> PassReport:
    """Have the worker compute one pass (its deltas come as bodies, decoded when applied)."""
    report: PassReport = worker.request(job)
    return report
