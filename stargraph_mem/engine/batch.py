"""Batched passes: many small partitions per CLIPS call and per transaction.

A batch reads its partitions' watermarks, facts versions, episodes and current facts with
a constant number of statements, runs the pack once per partition (the loaded environment
is reset between partitions, so a partition's rules only ever see its own episodes and
facts) in one trip to a thread, and applies every pass in one transaction (group commit).
Each pass keeps its own basis: a partition that changed meanwhile is computed again alone,
as is one whose backlog needs more than one pass. When the batch's transaction fails, each
of its partitions is run alone, so an error surfaces exactly as without batching.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from stargraph_mem.compiler.pack import CompiledRule
from stargraph_mem.engine.report import LegacyFilter, PassReport
from stargraph_mem.engine.runtime import PassOutput
from stargraph_mem.errors import PassConflictError
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_fact import PassWrite
from stargraph_mem.stores.sqlite_schedule import RuleRun

if TYPE_CHECKING:
    from stargraph_mem.engine.runner import PassRunner

BATCH_PARTITIONS = 512
"""At most this many partitions per batch (and per read of their bases)."""


@dataclass
class _Planned:
    """A partition of a batch: its stored watermarks and facts version, read together."""

    partition: Partition
    marks: dict[str, int]
    version: int
    low: int


@dataclass
class _Job:
    """One partition's pass inside a batch, ready for the pack."""

    report: PassReport
    records: list[EpisodeRecord]
    facts: list[EngineFact]
    eligible: dict[int, set[int]]


@dataclass
class BatchRun:
    """One batched run of a pack's rules over many partitions (see the module)."""

    runner: PassRunner
    now: datetime
    rules: list[CompiledRule]
    dry_run: bool = False
    legacy: LegacyFilter | None = None
    runs: dict[Partition, Sequence[RuleRun]] = field(default_factory=dict)
    on_pass: Callable[[PassReport], None] | None = None
    conflicts: list[Partition] | None = None
    reports: dict[Partition, list[PassReport]] = field(default_factory=dict)

    async def run(self, partitions: Sequence[Partition]) -> list[PassReport]:
        """Consolidate each of ``partitions`` until caught up, many per batch; the reports
        come partition by partition, in the order given."""
        wanted = list(dict.fromkeys(partitions))
        self.reports = {p: [] for p in wanted}
        for start in range(0, len(wanted), BATCH_PARTITIONS):
            for group in await self.plan(wanted[start : start + BATCH_PARTITIONS]):
                await self.batch(group)
        return [report for p in wanted for report in self.reports[p]]

    async def plan(self, partitions: Sequence[Partition]) -> Iterator[list[_Planned]]:
        """Bases and backlogs of ``partitions``; those whose backlog fits one pass are
        grouped into batches of at most ``max_episodes`` episodes, the others run alone."""
        runner = self.runner
        bases = await runner.facts.pass_bases(runner.pack, partitions)
        planned = [
            _Planned(p, marks, version, runner.low(marks, self.rules, None))
            for p, (marks, version) in zip(partitions, bases, strict=True)
        ]
        counts = await runner.memory.count_since_of([(p.partition, p.low) for p in planned])
        return self._groups(planned, counts)

    def _groups(self, planned: list[_Planned], counts: list[int]) -> Iterator[list[_Planned]]:
        limit = self.runner.max_episodes
        group: list[_Planned] = []
        size = 0
        for item, count in zip(planned, counts, strict=True):
            if count >= limit:
                yield [item]
                continue
            if group and size + count > limit:
                yield group
                group, size = [], 0
            group.append(item)
            size += count
        if group:
            yield group

    async def alone(self, partition: Partition) -> None:
        """Run ``partition`` by itself (paging, claims and retries as :meth:`PassRunner.run`)."""
        try:
            self.reports[partition] += await self.runner.run_alone(
                partition,
                self.now,
                self.rules,
                self.dry_run,
                self.legacy,
                None,
                self.runs.get(partition, ()),
                self.on_pass,
            )
        except PassConflictError:
            if self.conflicts is None:
                raise
            self.conflicts.append(partition)

    async def batch(self, group: list[_Planned]) -> None:
        """Compute and apply one batch (a batch of one runs alone)."""
        if len(group) == 1:
            await self.alone(group[0].partition)
            return
        t0 = time.perf_counter()
        jobs = await self._read(group)
        t1 = time.perf_counter()
        outs = await asyncio.to_thread(self._run_pack, jobs)
        runner = self.runner
        share = (t1 - t0) / len(jobs)
        for job, (out, seconds) in zip(jobs, outs, strict=True):
            job.report.take(out, runner.keep_deltas)
            job.report.timings = {"read": share, "engine": seconds, "apply": 0.0}
            job.report.timings["total"] = share + seconds
            if self.on_pass is not None:
                self.on_pass(job.report)
        if self.dry_run:
            for job in jobs:
                job.report.facts_after = None
                self.reports[job.report.partition].append(job.report)
            return
        await self._apply([job.report for job in jobs])

    async def _read(self, group: list[_Planned]) -> list[_Job]:
        runner = self.runner
        reads = await runner.memory.since_checked_of(
            [(p.partition, p.low) for p in group], limit=runner.max_episodes
        )
        known = [runner.known_facts(p.partition, p.version) for p in group]
        missing = [p.partition for p, facts in zip(group, known, strict=True) if facts is None]
        stored = iter(await runner.facts.current_facts_of(missing) if missing else [])
        jobs: list[_Job] = []
        for item, read, facts in zip(group, reads, known, strict=True):
            report = runner.started(item.partition, self.now, self.rules, None, item.marks, read)
            report.read_version = item.version
            eligible = await runner.eligibility.of(
                report, self.rules, read.records, item.marks, self.legacy
            )
            jobs.append(
                _Job(report, read.records, next(stored) if facts is None else facts, eligible)
            )
        return jobs

    def _run_pack(self, jobs: list[_Job]) -> list[tuple[PassOutput, float]]:
        """Each job through the pack, one partition at a time (in a worker thread)."""
        outs: list[tuple[PassOutput, float]] = []
        for job in jobs:
            t0 = time.perf_counter()
            out = self.runner.runtime.run_pass(
                partition=job.report.partition,
                now=self.now,
                episodes=job.records,
                facts=job.facts,
                eligible=job.eligible,
                matched=self.runner.keep_deltas,
            )
            outs.append((out, time.perf_counter() - t0))
        return outs

    async def _apply(self, reports: list[PassReport]) -> None:
        """Apply the batch in one transaction; stale partitions, and every partition when
        the transaction fails, are run again alone."""
        runner = self.runner
        t0 = time.perf_counter()
        facts_after = [r.facts_after for r in reports]
        writes = [
            PassWrite(
                runner.basis(r),
                r.deltas,
                r.advances,
                r.rejections(),
                self.runs.get(r.partition, ()),
            )
            for r in reports
        ]
        for report in reports:
            runner.forget(report.partition)
            report.facts_after = None
        try:
            versions = await runner.facts.apply_passes(writes, pack_hash=runner.runtime.sha256)
        except Exception:
            for report in reports:
                await self.alone(report.partition)
            return
        share = (time.perf_counter() - t0) / len(reports)
        for report, version, facts in zip(reports, versions, facts_after, strict=True):
            if version is None:  # the partition changed since the batch read it
                await self.alone(report.partition)
                continue
            runner.remember(report.partition, version, facts)
            runner.applied(report, share)
            self.reports[report.partition].append(report)
            if report.scanned >= runner.max_episodes:  # written to meanwhile: go on alone
                await self.alone(report.partition)
