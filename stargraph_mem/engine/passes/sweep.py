"""Sweeps: cron rules over facts only, run over every partition that has candidate facts.

A sweep is a rule whose ``when`` has no episode pattern. On a cron cadence it does not
wait for a partition's episodes: each tick (or ``consolidate``) finds the partitions whose
current facts its pre-filter selects (see :mod:`~stargraph_mem.compiler.sweep_sql`) and
runs it there, many partitions per CLIPS run and per transaction.

Its pass time is its *fire time*, the cron time at or before ``now``: runs at any ``now``
between two fire times give the same deltas. A fire is applied once per (pack, rule,
partition, fire time): the fire is recorded as the rule's run in the same transaction as
its deltas, with a compare-and-set on the run token read before (a second run that decided
on the same state is rolled back); a run that finds the fire recorded skips it, and a
missed fire is not run late (only the latest fire at or before ``now`` runs).

A sweep with ``every: N`` is no sweep here: it runs in its partition's count-triggered
passes, as any rule of that cadence.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from croniter import croniter

from stargraph_mem.compiler.cadence import CadenceRule, next_fire, zone
from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.compiler.sweep_sql import SweepFilter, is_sweep, sweep_filter
from stargraph_mem.engine.passes import observe
from stargraph_mem.engine.passes.batch import BATCH_PARTITIONS
from stargraph_mem.engine.passes.outputs import PassInput, PassOutput
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.errors import PassConflictError, ScheduleError
from stargraph_mem.model.time import to_us, to_utc
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.protocols import ScheduleRepository
from stargraph_mem.stores.repositories.fact_rows import PassWrite
from stargraph_mem.stores.repositories.schedule_runs import RuleRun, RunState
from stargraph_mem.stores.scope import Partition
from stargraph_mem.telemetry import PassSpan

if TYPE_CHECKING:
    from stargraph_mem.engine.passes.runner import PassRunner

__all__ = ["SweepOutcome", "Sweeper", "fire_time", "sweep_rules"]

SWEEP_RETRIES = 8
"""Times a sweep batch is computed again after partitions changed under it."""


def sweep_rules(compiled: CompiledPack) -> list[CompiledRule]:
    """The pack's sweeps: rules without an episode pattern on a cron cadence."""
    return [r for r in compiled.rules if r.cadence.cron is not None and swept(r)]


def swept(rule: object) -> bool:
    """Whether ``rule`` (a compiled rule, or a rule known by its cadence only) is a sweep."""
    return (
        isinstance(rule, CompiledRule)
        and rule.cadence.cron is not None
        and is_sweep(rule.program.info.rule)
    )


def fire_time(rule: CadenceRule, now: datetime) -> datetime:
    """The rule's latest cron time at or before ``now`` (in its time zone), in UTC."""
    now = to_utc(now)
    at = next_fire(rule.cadence, now - timedelta(microseconds=1), rule.id)
    if at <= now:
        return to_utc(at)
    assert rule.cadence.cron is not None
    try:
        prev: datetime = croniter(
            rule.cadence.cron, now.astimezone(zone(rule.cadence, rule.id))
        ).get_prev(datetime)
    except ValueError as exc:
        raise ScheduleError(
            f"rule '{rule.id}': cron {rule.cadence.cron!r} has no time before {now}: {exc}",
            rule_id=rule.id,
        ) from exc
    return to_utc(prev)


@dataclass
class SweepOutcome:
    """What a sweep call did: passes applied (or computed, dry), fires another run applied
    first (``conflicts``), and partitions another scheduler held (``held``)."""

    passes: list[PassReport] = field(default_factory=list)
    swept: list[tuple[str, Partition]] = field(default_factory=list)
    conflicts: list[tuple[str, Partition]] = field(default_factory=list)
    held: list[tuple[str, Partition]] = field(default_factory=list)


@dataclass(frozen=True)
class _Fire:
    """One sweep rule's fire being applied: its time (``at``), pre-filter, whether it is a
    dry run, and the outcome it adds to."""

    rule: CompiledRule
    at: datetime
    filt: SweepFilter
    dry_run: bool
    out: SweepOutcome


@dataclass
class Sweeper:
    """Runs one pack's sweeps that are due (see the module)."""

    runner: PassRunner
    schedule: ScheduleRepository
    holder: str | None = None
    """With a holder, partitions are leased for ``lease_seconds`` while swept (a tick)."""
    lease_seconds: float = 30.0

    @property
    def pack(self) -> str:
        return self.runner.pack

    async def sweep(
        self,
        now: datetime,
        *,
        keep: Callable[[Partition], bool] | None = None,
        rule_ids: Sequence[str] | None = None,
        dry_run: bool = False,
    ) -> SweepOutcome:
        """Run each sweep (of ``rule_ids``, or all) at its fire time over the partitions
        (those ``keep`` accepts) with candidates whose fire is not applied yet."""
        out = SweepOutcome()
        for rule in sweep_rules(self.runner.runtime.compiled):
            if rule_ids is not None and rule.id not in rule_ids:
                continue
            await self._rule(rule, fire_time(rule, now), keep, dry_run, out)
        return out

    async def _rule(
        self,
        rule: CompiledRule,
        fire: datetime,
        keep: Callable[[Partition], bool] | None,
        dry_run: bool,
        out: SweepOutcome,
    ) -> None:
        filt = sweep_filter(rule.program.info.rule)
        if not dry_run:  # a dry run writes nothing: without its index it reads more
            await self.runner.facts.ensure_sweep_indexes(filt.indexes)
        params = filt.params(to_us(fire))
        found = await self.runner.facts.sweep_partitions(filt.sql, params, archived=filt.archived)
        wanted = [p for p in found if keep is None or keep(p)]
        observe.sweep_candidates(self.pack, rule.id, len(wanted))
        for start in range(0, len(wanted), BATCH_PARTITIONS):
            chunk = wanted[start : start + BATCH_PARTITIONS]
            todo = await self._unfired(rule, fire, chunk)
            if todo:
                await self._leased(_Fire(rule, fire, filt, dry_run, out), todo)

    async def _unfired(
        self, rule: CompiledRule, fire: datetime, partitions: Sequence[Partition]
    ) -> list[Partition]:
        """Those of ``partitions`` whose fire at ``fire`` is not recorded yet."""
        states = await self.schedule.runs_of(self.pack, partitions)
        return [p for p in partitions if not fired(states.get((rule.id, p.key)), fire)]

    async def _leased(self, fire: _Fire, partitions: list[Partition]) -> None:
        """Sweep ``partitions`` under a lease (when this sweeper has a holder)."""
        if self.holder is None or fire.dry_run:
            await self._settle(fire, partitions)
            return
        facts, leases, out = self.runner.facts, self.runner.leases, fire.out
        mine = await facts.claim_partitions(partitions, self.holder, self.lease_seconds)
        keys = {p.key for p in mine}
        out.held += [(fire.rule.id, p) for p in partitions if p.key not in keys]
        if not mine:
            return
        leases.update(dict.fromkeys(keys, (self.holder, self.lease_seconds)))
        try:
            await self._settle(fire, mine)
        finally:
            for key in keys:
                leases.pop(key, None)
            await facts.release_partitions(mine, self.holder)

    async def _settle(self, fire: _Fire, partitions: list[Partition]) -> None:
        """Compute and apply the fire over ``partitions``, again for those that changed
        meanwhile; those whose fire another run applied first are conflicts."""
        rule, at, out = fire.rule, fire.at, fire.out
        todo = partitions
        for attempt in range(SWEEP_RETRIES):
            states = await self.schedule.runs_of(self.pack, todo)
            if attempt:
                done = [p for p in todo if fired(states.get((rule.id, p.key)), at)]
                out.conflicts += [(rule.id, p) for p in done]
                todo = [p for p in todo if p not in done]
            if not todo:
                return
            traced = PassSpan(self.pack, 1, len(todo), "sweep")
            try:
                t0 = time.perf_counter()
                with traced.current():
                    reports = await self.compute(rule, at, fire.filt, todo, traced)
                if fire.dry_run:
                    out.passes += reports
                    traced.end()
                    return
                runs = {r.partition: self._run(rule, r.partition, at, states) for r in reports}
                t1 = time.perf_counter()
                with traced.apply():
                    todo = await self._apply(reports, runs, out)
                traced.timed(t1 - t0, time.perf_counter() - t1)
            except BaseException as error:
                traced.end(error)
                raise
            traced.end()
        out.conflicts += [(rule.id, p) for p in todo]

    def _run(
        self,
        rule: CompiledRule,
        partition: Partition,
        fire: datetime,
        states: dict[tuple[str, str], RunState],
    ) -> RuleRun:
        state = states.get((rule.id, partition.key))
        expect = "" if state is None else state.token
        return RuleRun(self.pack, rule.id, partition, fire, uuid.uuid4().hex, expect)

    async def compute(
        self,
        rule: CompiledRule,
        fire: datetime,
        filt: SweepFilter,
        partitions: list[Partition],
        traced: PassSpan | None = None,
    ) -> list[PassReport]:
        """One CLIPS run of ``rule`` at ``fire`` over ``partitions``: their candidate facts
        (all their current facts when the rule needs them); nothing is written. Its read
        and CLIPS run become child spans of ``traced``."""
        t0 = time.perf_counter()
        runner = self.runner
        facts = runner.facts
        bases = await facts.pass_bases(self.pack, partitions)  # before the facts: see apply
        loaded: list[list[EngineFact]]
        if filt.alone:
            loaded = await facts.sweep_facts(filt.sql, filt.params(to_us(fire)), partitions)
        else:
            loaded = await facts.current_facts_of(partitions)
        archived = await runner.archived_of(partitions)
        read = time.perf_counter() - t0
        jobs = [
            PassInput(p, [], found, {rule.index: set()}, archived=old)
            for p, found, old in zip(partitions, loaded, archived, strict=True)
        ]
        outs = await asyncio.to_thread(
            runner.runtime.run_passes,
            jobs,
            now=fire,
            matched=runner.keep_deltas,
            fact_bytes=runner.fact_bytes,
            embedder=runner.embedder,
        )
        if traced is not None:
            traced.phases(read, time.perf_counter() - t0 - read, 0)
        reports: list[PassReport] = []
        for p, (marks, version), result in zip(partitions, bases, outs, strict=True):
            report = PassReport(
                pack=self.pack,
                pack_hash=runner.runtime.sha256,
                partition=p,
                now=fire,
                rules=[rule.id],
                sweep=True,
                read_marks=marks,
                read_version=version,
            )
            report.take(_only(result, rule.id), runner.keep_deltas)
            report.facts_after = None
            reports.append(report)
        return reports

    async def _apply(
        self,
        reports: list[PassReport],
        runs: dict[Partition, RuleRun],
        out: SweepOutcome,
    ) -> list[Partition]:
        """Apply ``reports`` in one transaction (each alone when one of them conflicts);
        the partitions that changed since they were read, to compute again."""
        runner = self.runner
        writes = [PassWrite(runner.basis(r), r.deltas, runs=[runs[r.partition]]) for r in reports]
        try:
            versions = await runner.facts.apply_passes(writes, pack_hash=runner.runtime.sha256)
        except PassConflictError:
            if len(reports) == 1:
                return [reports[0].partition]  # checked against the stored fire next time
            again: list[Partition] = []
            for report in reports:
                again += await self._apply([report], runs, out)
            return again
        stale: list[Partition] = []
        for report, version in zip(reports, versions, strict=True):
            if version is None:
                stale.append(report.partition)
                continue
            runner.forget(report.partition)
            runner.applied(report, 0.0)
            out.passes.append(report)
            out.swept.append((report.rules[0], report.partition))
        return stale


def fired(state: RunState | None, fire: datetime) -> bool:
    """Whether the stored run state shows the fire at ``fire`` (or a later one) applied."""
    return state is not None and state.last_run_us is not None and state.last_run_us >= to_us(fire)


def _only(result: PassOutput, rule_id: str) -> PassOutput:
    """``result`` with the deltas of ``rule_id`` only (other sweeps of the pack also fire
    once the episodes are done; theirs are not this fire's)."""
    keep = [i for i, d in enumerate(result.deltas) if d.rule_id == rule_id]
    result.deltas = [result.deltas[i] for i in keep]
    if result.matched:
        result.matched = [result.matched[i] for i in keep]
    result.fired = {k: v for k, v in result.fired.items() if k == rule_id}
    return result
