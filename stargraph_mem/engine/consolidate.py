"""Consolidation passes: episodes after the watermarks → CLIPS → deltas → one transaction.

A pass covers one partition and a set of rules. It reads the partition's episodes after
the lowest watermark of those rules (at most ``max_episodes`` of them), works out which
rule may see which episode (its own watermark, ``select``, legacy ``when_filter`` and
salience gate), runs the pack, and applies deltas, rejections and the watermark advance
in one fact-store transaction. Passes repeat until the partition is caught up.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.engine.filters import select_seqs, when_filter_seqs
from stargraph_mem.engine.gating import RuleGate, UnusableImportance
from stargraph_mem.engine.limits import DEFAULT_MAX_EPISODES as DEFAULT_MAX_EPISODES  # re-export
from stargraph_mem.engine.runtime import (
    PackRuntime,
    PassOutput,
    RejectedEpisode,
    Stamp,
)
from stargraph_mem.engine.worker import WorkerProcess
from stargraph_mem.errors import StalePassError
from stargraph_mem.gcpause import gc_paused
from stargraph_mem.model.deltas import DELTA_ADAPTER, MemoryDelta
from stargraph_mem.model.time import seconds_us, to_us, to_utc
from stargraph_mem.salience import RuleBasedScorer, SalienceScorer, gate_scorer
from stargraph_mem.stores.fact import EngineFact, Rejection, WatermarkAdvance
from stargraph_mem.stores.memory import EpisodeRecord, QuarantinedRow
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_fact import PassBasis, SQLiteFactStore, claim_holder
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore
from stargraph_mem.stores.sqlite_schedule import RuleRun

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

KNOWN_PARTITIONS_MAX = 256
KNOWN_FACTS_MAX = 10_000
"""Streaming passes reuse the facts their previous pass left for up to this many recent
partitions (of at most this many facts each) instead of reading them again."""


@dataclass
class PassReport:
    """What one pass did: rules, counts of deltas by kind, rejected and gated episodes."""

    pack: str
    pack_hash: str
    partition: Partition
    now: datetime
    rules: list[str]
    episodes: int = 0
    scanned: int = 0
    """Rows read: the episodes and the quarantined rows (a full page means more may follow)."""
    quarantined: list[QuarantinedRow] = field(default_factory=list)
    """Rows of the partition that could not be decoded: skipped, noted in the quarantine
    table, passed by the watermark."""
    first_seq: int = 0
    last_seq: int = 0
    deltas: list[MemoryDelta] = field(default_factory=list)
    """The pass's deltas, in order (empty when the run was told not to keep them)."""
    matched: list[dict[str, list[str]]] = field(default_factory=list)
    """Per kept delta: the ids each pattern of its rule matched (see ``PassOutput``)."""
    delta_counts: dict[str, int] = field(default_factory=dict)
    rejected: list[RejectedEpisode] = field(default_factory=list)
    gated: list[str] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    applied: bool = False

    @property
    def counts(self) -> dict[str, int]:
        """Deltas of the pass by kind (kept even when the deltas themselves are not)."""
        return {
            kind: self.delta_counts.get(kind, 0) for kind in ("add", "update", "delete", "noop")
        }


def rejections_of(
    rejected: Sequence[RejectedEpisode], pack: str, partition: Partition
) -> list[Rejection]:
    """The fact store's rejection records for a pass's rejected episodes."""
    return [
        Rejection(
            id=r.episode_id or "no-episode",
            pack=pack,
            rule_id=r.rule_id or "episode-metadata",
            partition=partition,
            reason=r.reason,
        )
        for r in rejected
    ]


@dataclass
class _Carry:
    """What the next pass of a run takes from the previous one instead of reading it."""

    marks: dict[str, int]
    facts: list[EngineFact]


@dataclass
class _Work:
    """A computed pass waiting to be applied."""

    out: PassOutput
    advances: list[WatermarkAdvance]
    stored_marks: dict[str, int]
    version: int | None
    """The partition's facts version the pass read (None: carried from the previous pass
    of the run, whose apply tells it)."""
    local: bool = True
    """Computed in this process (``out.facts_after`` is filled in)."""
    bodies: list[bytes] | None = None
    """A worker's deltas as canonical JSON, decoded when the pass is applied."""

    def carry(self) -> _Carry:
        marks = dict(self.stored_marks)
        for adv in self.advances:
            marks[adv.rule_id] = adv.last_seq
        return _Carry(marks, self.out.facts_after)


@dataclass
class LegacyFilter:
    """A specification-style ``when_filter`` attached to one pack rule (or all of them)."""

    sql: str
    rule_id: str


class Consolidation:
    """Runs passes of one compiled pack against a memory store and a fact store."""

    def __init__(
        self,
        runtime: PackRuntime,
        memory: SQLiteMemoryStore,
        facts: SQLiteFactStore,
        *,
        scorer: SalienceScorer | None = None,
        max_episodes: int = DEFAULT_MAX_EPISODES,
        keep_deltas: bool = True,
        worker: WorkerMode = "auto",
        claim_seconds: float = CLAIM_SECONDS,
    ) -> None:
        self.runtime = runtime
        self.claim_seconds = claim_seconds
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
        fields = runtime.compiled.pack.fields
        self._gates = {
            r.index: RuleGate.of(r.program.info.rule, fields)
            for r in runtime.compiled.rules
            if r.program.info.rule.salience is not None
        }
        """Per rule index with a salience gate: what its scorer is told about an episode."""
        self._lock = asyncio.Lock()
        self._known: OrderedDict[str, tuple[int, list[EngineFact]]] = OrderedDict()
        """Per partition key: its facts version after this object's last pass there, and
        the facts that pass left current (reused while the version has not moved)."""

    @property
    def pack(self) -> str:
        return self.runtime.compiled.name

    def _rules(self, rule_ids: Sequence[str] | None) -> list[CompiledRule]:
        rules = self.runtime.compiled.rules
        if rule_ids is None:
            return list(rules)
        wanted = set(rule_ids)
        unknown = wanted - {r.id for r in rules}
        if unknown:
            raise KeyError(f"unknown rule(s) in pack '{self.pack}': {', '.join(sorted(unknown))}")
        return [r for r in rules if r.id in wanted]

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
        rules = self._rules(rule_ids)
        reports: list[PassReport] = []
        async with self._lock:
            holder: str | None = None
            held = False
            try:
                for attempt in range(STALE_RETRIES):
                    # optimistic first: the apply checks nothing moved and nobody else
                    # holds a claim; after a lost race, the run claims the partition
                    if attempt > 0 and not dry_run:
                        holder = holder or claim_holder()
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
                        self._known.pop(partition.key, None)
                        reports[:] = [r for r in reports if r.applied]
                        if attempt == STALE_RETRIES - 1:
                            raise
            finally:
                if holder is not None and held:
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
            carried: _Carry | None = None
            applying: asyncio.Task[int] | None = None
            worker: WorkerProcess | None = None
            version: int | None = None
            try:
                while True:
                    if worker is not None:
                        job = _WorkerPass(
                            partition, now, [r.id for r in rules], legacy, stamp, carried
                        )
                        report, work = await asyncio.to_thread(self._remote, worker, job)
                    else:
                        report, work = await self._compute(
                            partition, now, rules, legacy, stamp, carried
                        )
                    reports.append(report)
                    if on_pass is not None:
                        on_pass(report)
                    if dry_run:
                        report.deltas = work.out.deltas
                    if applying is not None:
                        # the previous pass commits while this one is computed
                        version = await applying
                        applying = None
                    last = report.scanned < self.max_episodes or dry_run
                    if not dry_run:
                        if work.version is None:  # computed from the previous pass's result
                            work.version = version
                        applying = asyncio.create_task(
                            self._apply(report, work, runs, holder, last)
                        )
                    if last:
                        break
                    if worker is None:
                        carried = work.carry()
                        if len(reports) == 1:
                            worker = await self._worker_for(partition, report.last_seq)
                            if worker is not None:  # a long run: see background_checkpoints
                                await stack.enter_async_context(self.facts.background_checkpoints())
                    else:
                        carried = None  # the worker carries its own passes
                if applying is not None:
                    await applying
                    applying = None
            finally:
                if applying is not None:
                    await asyncio.gather(applying, return_exceptions=True)
                if worker is not None:
                    await asyncio.to_thread(worker.close)
        return not dry_run and holder is not None

    async def _worker_for(self, partition: Partition, after: int) -> WorkerProcess | None:
        """A started worker process for the rest of a run whose first pass ended at seq
        ``after``, or None to go on in this process."""
        if self.worker == "never" or type(self.scorer) is not RuleBasedScorer:
            return None
        if (
            self.worker == "auto"
            and await self.memory.count_since(partition, after) < WORKER_MIN_EPISODES
        ):
            return None
        worker = await asyncio.to_thread(WorkerProcess)
        setup = _WorkerSetup(
            memory_path=str(self.memory.path),
            facts_path=str(self.facts.path),
            compiled=replace(self.runtime.compiled, _built=[]),
            max_episodes=self.max_episodes,
            keep_deltas=self.keep_deltas,
            scorer=self.scorer,
        )
        try:
            await worker.call(setup)
        except BaseException:
            await asyncio.to_thread(worker.close)
            raise
        return worker

    async def _current_facts(self, partition: Partition, version: int) -> list[EngineFact]:
        """The partition's current facts: those our last pass there left, while the store's
        version for the partition (read just before) shows nobody changed them; else read."""
        known = self._known.get(partition.key)
        if known is not None and version == known[0]:
            self._known.move_to_end(partition.key)
            return known[1]
        return await self.facts.current_facts(partition)

    def _remote(self, worker: WorkerProcess, job: _WorkerPass) -> tuple[PassReport, _Work]:
        """Have the worker compute one pass (its deltas are decoded when applied)."""
        shipped: _Shipped = worker.request(job)
        report = shipped.report
        out = PassOutput(
            rejected=report.rejected,
            fired=report.fired,
            episodes=report.episodes,
            matched=report.matched,
        )
        work = _Work(
            out, shipped.advances, shipped.stored_marks, shipped.version, False, shipped.bodies
        )
        return report, work

    async def pending(self, partition: Partition, rule_ids: Sequence[str] | None = None) -> int:
        """Episodes of ``partition`` a run would read (after the lowest watermark)."""
        marks = await self.facts.watermarks(self.pack, partition)
        low = min((marks.get(r.id, 0) for r in self._rules(rule_ids)), default=0)
        return await self.memory.count_since(partition, low)

    async def _compute(
        self,
        partition: Partition,
        now: datetime,
        rules: list[CompiledRule],
        legacy: LegacyFilter | None,
        stamp: Stamp | None,
        carried: _Carry | None,
    ) -> tuple[PassReport, _Work]:
        """Read, gate and run one pass; nothing is written.

        ``carried`` is the previous pass of the same run (not committed yet): its
        watermarks and resulting facts stand in for reads of the stores.
        """
        t0 = time.perf_counter()
        version: int | None = None
        if carried is not None:
            stored = carried.marks
        else:  # read before the episodes and facts: the apply checks nothing moved since
            stored, version = await self.facts.basis(self.pack, partition)
        marks = stored
        if stamp is not None:
            shared = stored.get(stamp.rule_id, 0)
            marks = {r.id: shared for r in rules}
        low = min((marks.get(r.id, 0) for r in rules), default=0)
        # rows that cannot be decoded are quarantined by the read; the watermark passes them
        read = await self.memory.since_checked(partition, low, limit=self.max_episodes)
        records = read.records
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
        )
        eligible = await self._eligibility(
            partition, rules, records, marks, high, now, legacy, report
        )
        if carried is not None:
            engine_facts = carried.facts
        else:
            assert version is not None
            engine_facts = await self._current_facts(partition, version)
        t1 = time.perf_counter()
        out = await asyncio.to_thread(
            self.runtime.run_pass,
            partition=partition,
            now=now,
            episodes=records,
            facts=engine_facts,
            eligible=eligible,
            stamp=stamp,
            matched=self.keep_deltas,
        )
        t2 = time.perf_counter()
        report.fired = out.fired
        for delta in out.deltas:
            report.delta_counts[delta.kind] = report.delta_counts.get(delta.kind, 0) + 1
        if self.keep_deltas:
            report.deltas = out.deltas
            report.matched = out.matched
        out.rejected[:0] = report.rejected  # the gates' rejections, then the engine's
        report.rejected = out.rejected
        report.timings = {"read": t1 - t0, "engine": t2 - t1, "apply": 0.0, "total": t2 - t0}
        advances = self._advances(partition, rules, marks, high, stamp)
        return report, _Work(out, advances, stored, version)

    async def _apply(
        self,
        report: PassReport,
        work: _Work,
        runs: Sequence[RuleRun],
        holder: str | None,
        last: bool,
    ) -> int:
        """Commit one computed pass: deltas, rejections and watermarks in one transaction,
        if the partition is still as the pass read it; the partition's version after it."""
        t0 = time.perf_counter()
        if work.bodies is not None:
            # rebuilt and validated here, while the store checkpoints the previous pass
            with gc_paused():
                work.out.deltas = [_from_body(body) for body in work.bodies]
            work.bodies = None
            if self.keep_deltas:
                report.deltas = work.out.deltas
        partition = report.partition
        keep = work.local and len(work.out.facts_after) <= KNOWN_FACTS_MAX
        self._known.pop(partition.key, None)
        assert work.version is not None
        now_us = to_us(datetime.now(UTC))
        basis = PassBasis(
            self.pack,
            partition,
            work.stored_marks,
            work.version,
            holder or "",
            now_us + seconds_us(self.claim_seconds),
            last,
            now_us,
        )
        result = await self.facts.apply_deltas(
            work.out.deltas,
            pack_hash=self.runtime.sha256,
            watermarks=work.advances,
            rejections=rejections_of(work.out.rejected, self.pack, partition),
            runs=runs,
            version_of=partition,
            basis=basis,
        )
        assert result.version is not None
        if keep:
            self._known[partition.key] = (result.version, work.out.facts_after)
            while len(self._known) > KNOWN_PARTITIONS_MAX:
                self._known.popitem(last=False)
        report.applied = True
        report.timings["apply"] = time.perf_counter() - t0
        report.timings["total"] += report.timings["apply"]
        return result.version

    def _advances(
        self,
        partition: Partition,
        rules: list[CompiledRule],
        marks: dict[str, int],
        high: int,
        stamp: Stamp | None,
    ) -> list[WatermarkAdvance]:
        keys = [stamp.rule_id] if stamp is not None else [r.id for r in rules]
        return [
            WatermarkAdvance(pack=self.pack, rule_id=key, partition=partition, last_seq=high)
            for key in keys
            if high
            > (marks.get(rules[0].id, 0) if stamp is not None and rules else marks.get(key, 0))
        ]

    async def _eligibility(
        self,
        partition: Partition,
        rules: list[CompiledRule],
        records: list[EpisodeRecord],
        marks: dict[str, int],
        high: int,
        now: datetime,
        legacy: LegacyFilter | None,
        report: PassReport,
    ) -> dict[int, set[int]]:
        path = self.memory.path
        eligible: dict[int, set[int]] = {}
        gated: set[str] = set()
        after_sets: dict[int, set[int]] = {}
        for rule in rules:
            after = marks.get(rule.id, 0)
            if after not in after_sets:
                after_sets[after] = {r.seq for r in records if r.seq > after}
            seqs = set(after_sets[after])
            if rule.select is not None and seqs:
                seqs &= await asyncio.to_thread(
                    select_seqs,
                    path,
                    partition,
                    after,
                    high,
                    rule.select.sql,
                    rule.select.params(to_us(now)),
                    rule_id=rule.id,
                )
            if legacy is not None and seqs and legacy.rule_id in (rule.id, "*"):
                window = [r for r in records if r.seq in seqs]
                seqs &= await asyncio.to_thread(
                    when_filter_seqs, window, partition, legacy.sql, rule_id=rule.id
                )
            gate = self._gates.get(rule.index)
            if gate is not None and seqs:
                seqs, dropped = await self._gate(records, seqs, gate, now, report.rejected)
                gated |= dropped
            eligible[rule.index] = seqs
        report.gated = sorted(gated)
        return eligible

    async def _gate(
        self,
        records: list[EpisodeRecord],
        seqs: set[int],
        gate: RuleGate,
        now: datetime,
        rejected: list[RejectedEpisode],
    ) -> tuple[set[int], set[str]]:
        """Seqs scoring at least the gate's minimum, and ids of those below it.

        An episode whose importance is unusable is neither: it is rejected for the rule.
        """
        kept: set[int] = set()
        dropped: set[str] = set()
        for record in records:
            if record.seq not in seqs:
                continue
            try:
                context = gate.context(record, now)
            except UnusableImportance as exc:
                rejected.append(RejectedEpisode(record.id, gate.rule_id, f"salience: {exc}"))
                continue
            score = await self.scorer.score(record, context)
            if score >= gate.minimum:
                kept.add(record.seq)
            else:
                dropped.add(record.id)
        return kept, dropped


# --- the worker process's side -----------------------------------------------------------


def _from_body(body: bytes) -> MemoryDelta:
    """A delta rebuilt from its canonical JSON body and validated again.

    The body is the delta's canonical form already (canonical JSON of a validated delta
    dumps back to the same bytes), so it is kept as such and the id is not hashed twice.
    """
    delta = DELTA_ADAPTER.validate_json(body)
    delta.__dict__["_canonical"] = body
    return delta


@dataclass
class _WorkerSetup:
    memory_path: str
    facts_path: str
    compiled: CompiledPack
    max_episodes: int
    keep_deltas: bool
    scorer: SalienceScorer


@dataclass
class _WorkerPass:
    partition: Partition
    now: datetime
    rule_ids: list[str]
    legacy: LegacyFilter | None
    stamp: Stamp | None
    carried: _Carry | None = None
    """The previous pass's state, when it was computed in the parent (a run's first pass)."""


@dataclass
class _Shipped:
    """A computed pass on its way to the parent: deltas as canonical JSON bodies."""

    report: PassReport
    advances: list[WatermarkAdvance]
    stored_marks: dict[str, int]
    version: int | None
    bodies: list[bytes]


class PassServer:
    """The worker process's side: one pack's passes, each carrying state to the next."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.consolidation: Consolidation | None = None
        self.carried: _Carry | None = None

    def handle(self, message: object) -> object:
        return self.loop.run_until_complete(self._handle(message))

    async def _handle(self, message: object) -> object:
        if isinstance(message, _WorkerSetup):
            await self._close()
            self.consolidation = Consolidation(
                PackRuntime(message.compiled),
                SQLiteMemoryStore(Path(message.memory_path)),
                SQLiteFactStore(Path(message.facts_path)),
                scorer=message.scorer,
                max_episodes=message.max_episodes,
                keep_deltas=message.keep_deltas,
                worker="never",
            )
            return None
        if not isinstance(message, _WorkerPass):
            raise TypeError(f"unexpected request: {type(message).__name__}")
        consolidation = self.consolidation
        if consolidation is None:
            raise RuntimeError("a pass was requested before the worker was set up")
        if message.carried is not None:
            self.carried = message.carried
        report, work = await consolidation._compute(
            message.partition,
            message.now,
            consolidation._rules(message.rule_ids),
            message.legacy,
            message.stamp,
            self.carried,
        )
        self.carried = work.carry()
        bodies = [delta.canonical_body() for delta in work.out.deltas]
        report.deltas = []
        return _Shipped(report, work.advances, work.stored_marks, work.version, bodies)

    async def _close(self) -> None:
        consolidation, self.consolidation = self.consolidation, None
        if consolidation is not None:
            await consolidation.facts.close()
            await consolidation.memory.close()
            consolidation.runtime.close()

    def close(self) -> None:
        self.loop.run_until_complete(self._close())
        self.loop.close()
