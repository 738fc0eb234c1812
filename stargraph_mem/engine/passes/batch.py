"""Batched passes: many small partitions per CLIPS call and per transaction.

A batch reads its partitions' watermarks, facts versions, episodes and current facts with
a constant number of statements, runs the pack once per partition (the loaded environment
is reset between partitions, so a partition's rules only ever see its own episodes and
facts) in one trip to a thread, and applies every pass in one transaction (group commit).
Each pass keeps its own basis: a partition that changed meanwhile is computed again alone,
as is one whose backlog needs more than one pass. When the batch's transaction fails, each
of its partitions is run alone, so an error surfaces exactly as without batching.

A partition whose run alone still fails (the database or CLIPS refused something while
computing or applying its pass) is **quarantined for this run**: nothing of the failed
pass was applied (it is one transaction), its report says why (``PassReport.failed``),
and the other partitions go on. Errors that concern the pack or the database as a whole
(an invalid rule, a read-only file) still raise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from stargraph_mem.compiler.pack import CompiledRule
from stargraph_mem.engine.passes.aggregates import HistoryInput
from stargraph_mem.engine.passes.inflight import Behind
from stargraph_mem.engine.passes.near_episodes import EarlierEpisodes
from stargraph_mem.engine.passes.outputs import PassInput, PassOutput
from stargraph_mem.engine.passes.pass_clock import resumed_records
from stargraph_mem.engine.passes.report import LegacyFilter, PassReport, recorded_runs
from stargraph_mem.engine.passes.runner import PassRunner
from stargraph_mem.errors import (
    CompileError,
    ConsolidationRuleError,
    DatabaseUnavailableError,
    IRError,
    PassConflictError,
    StargraphMemError,
)
from stargraph_mem.model.time import to_utc
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.repositories.fact_rows import PassWrite
from stargraph_mem.stores.repositories.pass_time import Deferral
from stargraph_mem.stores.repositories.schedule_runs import RuleRun
from stargraph_mem.stores.scope import Partition
from stargraph_mem.telemetry import PassSpan

logger = logging.getLogger(__name__)

FAILURE_CHARS = 500
"""The most characters of an error's message a quarantined partition's reason keeps."""


def whole_run(error: Exception) -> bool:
    """Whether ``error`` concerns the pack or the database as a whole (so it is raised):
    an invalid pack or rule, a database that cannot be written, or a lost connection (the
    run reconnects and redoes its work: see :mod:`stargraph_mem.engine.reconnect`)."""
    if isinstance(error, CompileError | IRError | ConsolidationRuleError):
        return True
    if isinstance(error, DatabaseUnavailableError):
        return True
    return isinstance(error, StargraphMemError) and "read_only" in error.context


def failure_reason(error: Exception) -> str:
    """``pass failed, nothing applied: <error type>: <message>`` (one line, bounded)."""
    text = " ".join(str(error).split())
    if len(text) > FAILURE_CHARS:
        text = text[:FAILURE_CHARS] + "…"
    return f"pass failed, nothing applied: {type(error).__name__}: {text}"


BATCH_PARTITIONS = 512
"""Partitions whose bases, backlogs and facts are read together (then batched)."""
BATCH_EPISODES = 5_000
"""A batch holds partitions until their backlogs reach this many episodes (or
``max_episodes``): small enough that one batch commits while the next is computed."""


@dataclass
class _Planned:
    """A partition of a batch: its stored watermarks, facts version and current facts."""

    partition: Partition
    marks: dict[str, int]
    version: int
    low: int
    deferred: list[Deferral]
    facts: list[EngineFact] | None = None


@dataclass
class _Job:
    """One partition's pass inside a batch, ready for the pack."""

    report: PassReport
    records: list[EpisodeRecord]
    facts: list[EngineFact]
    eligible: dict[int, set[int]]
    history: HistoryInput | None = None
    archived: list[EngineFact] = field(default_factory=list)
    earlier: EarlierEpisodes | None = None


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
        come partition by partition, in the order given.

        Batch k+1 is read and run through the pack while batch k commits.
        """
        wanted = list(dict.fromkeys(partitions))
        self.reports = {p: [] for p in wanted}
        applying: Behind[None] = Behind()
        try:
            for start in range(0, len(wanted), BATCH_PARTITIONS):
                for group in await self.plan(wanted[start : start + BATCH_PARTITIONS]):
                    if len(group) == 1:
                        await self.alone(group[0].partition)
                        continue
                    traced = PassSpan(self.runner.pack, len(self.rules), len(group))
                    try:
                        with traced.current():
                            reports = await self.compute(group)
                    except Exception as error:
                        traced.end(error)
                        if whole_run(error):
                            raise
                        for item in group:  # find the partition at fault: each alone
                            await self.alone(item.partition)
                        continue
                    await applying.wait()
                    if self.dry_run:
                        self.phases(traced, reports)
                        traced.end()
                    else:
                        applying.start(self._traced_apply(traced, reports))
            await applying.wait()
        finally:
            await applying.settle()
        return [report for p in wanted for report in self.reports[p]]

    async def plan(self, partitions: Sequence[Partition]) -> list[list[_Planned]]:
        """Bases, backlogs and current facts of ``partitions``; those whose backlog fits
        one pass are grouped into batches, the others run alone (groups of one)."""
        runner = self.runner
        bases = await runner.facts.pass_bases(runner.pack, partitions)
        deferred = await runner.facts.deferred_of(runner.pack, partitions)
        planned = [
            _Planned(p, marks, version, runner.low(marks, self.rules, None), found)
            for p, (marks, version), found in zip(partitions, bases, deferred, strict=True)
        ]
        counts = await runner.memory.count_since_of([(p.partition, p.low) for p in planned])
        groups = self._groups(planned, counts)
        batched = [item for group in groups if len(group) > 1 for item in group]
        for item in batched:
            item.facts = runner.known_facts(item.partition, item.version)
        missing = [item for item in batched if item.facts is None]
        if missing:
            stored = await runner.facts.current_facts_of([item.partition for item in missing])
            for item, facts in zip(missing, stored, strict=True):
                item.facts = facts
        return groups

    def _groups(self, planned: list[_Planned], counts: list[int]) -> list[list[_Planned]]:
        limit = self.runner.max_episodes
        budget = min(limit, BATCH_EPISODES)
        groups: list[list[_Planned]] = []
        group: list[_Planned] = []
        size = 0
        for item, count in zip(planned, counts, strict=True):
            if count >= limit:
                groups.append([item])
                continue
            if group and size + count > budget:
                groups.append(group)
                group, size = [], 0
            group.append(item)
            size += count
        if group:
            groups.append(group)
        return groups

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
        except Exception as error:
            if whole_run(error):
                raise
            self.reports[partition].append(self.quarantined(partition, error))

    def quarantined(self, partition: Partition, error: Exception) -> PassReport:
        """The report of a partition whose pass failed (nothing of it applied)."""
        runner = self.runner
        reason = failure_reason(error)
        logger.error(
            "pack %s: partition user=%r agent=%r quarantined for this run: %s",
            runner.pack,
            partition.user,
            partition.agent,
            reason,
        )
        return PassReport(
            pack=runner.pack,
            pack_hash=runner.runtime.sha256,
            partition=partition,
            now=self.now,
            rules=[r.id for r in self.rules],
            failed=reason,
        )

    async def compute(self, group: list[_Planned]) -> list[PassReport]:
        """Read and run one batch through the pack; nothing is written."""
        t0 = time.perf_counter()
        jobs = await self._read(group)
        t1 = time.perf_counter()
        outs = await asyncio.to_thread(self._run_pack, jobs)
        runner = self.runner
        read, engine = (t1 - t0) / len(jobs), (time.perf_counter() - t1) / len(jobs)
        for job, out in zip(jobs, outs, strict=True):
            job.report.take(out, runner.keep_deltas)
            job.report.timings = {"read": read, "engine": engine, "apply": 0.0}
            job.report.timings["total"] = read + engine
            if self.on_pass is not None:
                self.on_pass(job.report)
        reports = [job.report for job in jobs]
        if self.dry_run:
            for report in reports:
                report.facts_after = None
                self.reports[report.partition].append(report)
        return reports

    async def _read(self, group: list[_Planned]) -> list[_Job]:
        runner = self.runner
        reads = await runner.memory.since_checked_of(
            [(p.partition, p.low) for p in group], limit=runner.max_episodes
        )
        found = await resumed_records(
            runner.memory,
            [d for p in group for d in runner.due(self.rules, None, p.deferred, self.now)],
        )
        jobs: list[_Job] = []
        for item, read in zip(group, reads, strict=True):
            report, records = runner.started(
                item.partition, self.now, self.rules, None, item.marks, read, item.deferred, found
            )
            report.read_version = item.version
            eligible = await runner.eligibility.of(
                report, self.rules, records, item.marks, self.legacy
            )
            assert item.facts is not None
            jobs.append(_Job(report, records, item.facts, eligible))
        loaded = await runner.history(
            [
                runner.history_read(j.report, j.records, self.rules, None, i.marks)
                for j, i in zip(jobs, group, strict=True)
            ],
            self.now,
            self.rules,
        )
        archived = await runner.archived_of([j.report.partition for j in jobs])
        for job, history, facts in zip(jobs, loaded, archived, strict=True):
            job.history, job.archived = history, facts
        for job, item in zip(jobs, group, strict=True):
            job.earlier = await runner.earlier_of(job.report.partition, job.records, item.low)
        return jobs

    def _run_pack(self, jobs: list[_Job]) -> list[PassOutput]:
        """Every job through the pack, one partition after the other (in a worker thread)."""
        return self.runner.runtime.run_passes(
            [
                PassInput(
                    j.report.partition,
                    j.records,
                    j.facts,
                    j.eligible,
                    j.history,
                    j.archived,
                    j.earlier,
                )
                for j in jobs
            ],
            now=self.now,
            matched=self.runner.keep_deltas,
            fact_bytes=self.runner.fact_bytes,
            embedder=self.runner.embedder,
        )

    @staticmethod
    def phases(traced: PassSpan, reports: list[PassReport]) -> float:
        """The batch's read and CLIPS run as child spans of its pass span; their seconds."""
        read = sum(r.timings.get("read", 0.0) for r in reports)
        engine = sum(r.timings.get("engine", 0.0) for r in reports)
        traced.phases(read, engine, sum(r.episodes for r in reports))
        return read + engine

    async def _traced_apply(self, traced: PassSpan, reports: list[PassReport]) -> None:
        """:meth:`_apply` inside the batch's pass span, which it ends."""
        error: BaseException | None = None
        try:
            compute = self.phases(traced, reports)
            t0 = time.perf_counter()
            with traced.apply():
                await self._apply(reports)
            traced.timed(compute, time.perf_counter() - t0)
        except BaseException as exc:
            error = exc
            raise
        finally:
            traced.end(error)

    async def _apply(self, reports: list[PassReport]) -> None:
        """Apply the batch in one transaction; stale partitions, and every partition when
        the transaction fails, are run again alone (a lost connection is not a failure of
        the batch: it ends the run, which starts again from a fresh read once the
        database is back)."""
        runner = self.runner
        t0 = time.perf_counter()
        facts_after = [r.facts_after for r in reports]
        writes = [
            PassWrite(
                runner.basis(r),
                r.deltas,
                r.advances,
                r.rejections(),
                recorded_runs(r, self.runs.get(r.partition, ())),
                r.aggregates,
            )
            for r in reports
        ]
        for report in reports:
            runner.forget(report.partition)
            report.facts_after = None
        try:
            versions = await runner.facts.apply_passes(writes, pack_hash=runner.runtime.sha256)
        except DatabaseUnavailableError:
            raise
        except Exception:
            for report in reports:
                await self.alone(report.partition)
            return
        share = (time.perf_counter() - t0) / len(reports)
        for report, version, facts in zip(reports, versions, facts_after, strict=True):
            if version is None:  # the partition changed since the batch read it
                await self.alone(report.partition)
                continue
            runner.remember(report, version, facts)
            runner.applied(report, share)
            self.reports[report.partition].append(report)
            if report.scanned >= runner.max_episodes:  # written to meanwhile: go on alone
                await self.alone(report.partition)


async def run_many(
    runner: PassRunner,
    partitions: Sequence[Partition],
    *,
    now: datetime,
    rule_ids: Sequence[str] | None = None,
    dry_run: bool = False,
    legacy: LegacyFilter | None = None,
    runs: dict[Partition, Sequence[RuleRun]] | None = None,
    on_pass: Callable[[PassReport], None] | None = None,
    conflicts: list[Partition] | None = None,
) -> list[PassReport]:
    """``runner``'s :meth:`~PassRunner.run` over each of ``partitions``, the small ones many
    per CLIPS call and per transaction; the reports come partition by partition, in the
    order given.

    ``runs`` maps a partition to its scheduler run records; with ``conflicts``, a
    partition another scheduler applied first is noted there instead of raising
    :class:`~stargraph_mem.errors.PassConflictError`.
    """
    now = to_utc(now)
    rules = runner.rules_of(rule_ids)
    async with runner.lock:
        batch = BatchRun(runner, now, rules, dry_run, legacy, runs or {}, on_pass, conflicts)
        return await batch.run(partitions)
