"""One pass's result, from computed to applied, and what a pass is told about its input."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from stargraph_mem.engine.passes.aggregates import HistoryInput
from stargraph_mem.engine.passes.outputs import PassOutput, RejectedEpisode
from stargraph_mem.engine.passes.pass_clock import after_pass
from stargraph_mem.model.deltas import DELTA_KINDS, MemoryDelta
from stargraph_mem.stores.fact import EngineFact, Rejection, WatermarkAdvance
from stargraph_mem.stores.memory import QuarantinedRow
from stargraph_mem.stores.repositories.aggregates import AggregateWrite
from stargraph_mem.stores.repositories.pass_time import Deferral, PassTime
from stargraph_mem.stores.repositories.schedule_runs import RuleRun
from stargraph_mem.stores.scope import Partition

GATED: Final = "salience-gate"
"""The rule id of the rejection recorded for an episode every gate kept out (rule ids
cannot contain hyphens, so it names no rule)."""


@dataclass
class PassReport:
    """What one pass did: rules, counts of deltas by kind, rejected and gated episodes.

    A computed pass also carries what its apply writes and what it read (watermarks and
    facts version, checked again by the apply); the runner keeps the deltas only when
    asked to (``keep_deltas``) once the pass is applied.
    """

    pack: str
    pack_hash: str
    partition: Partition
    now: datetime
    rules: list[str]
    episodes: int = 0
    sweep: bool = False
    """A sweep's pass: its one rule over the partition's facts, no episodes."""
    scanned: int = 0
    """Rows read: the episodes and the quarantined rows (a full page means more may follow)."""
    quarantined: list[QuarantinedRow] = field(default_factory=list)
    """Rows of the partition that could not be decoded: skipped, noted in the quarantine
    table, passed by the watermark."""
    first_seq: int = 0
    last_seq: int = 0
    not_yet_due: int = 0
    """Episodes of the partition stamped after the pass time (``now``) that its rules have
    not consumed: they stay pending (deferred) until a pass whose time reaches them."""
    not_yet_due_seqs: frozenset[int] = frozenset()
    """Their seqs (so a run counts an episode pending for two packs once)."""
    deltas: list[MemoryDelta] = field(default_factory=list)
    """The pass's deltas, in order (empty when the run was told not to keep them)."""
    matched: list[dict[str, list[str]]] = field(default_factory=list)
    """Per kept delta: the ids each pattern of its rule matched (see ``PassOutput``)."""
    delta_counts: dict[str, int] = field(default_factory=dict)
    rejected: list[RejectedEpisode] = field(default_factory=list)
    gated: list[str] = field(default_factory=list)
    gated_out: list[str] = field(default_factory=list)
    """Gated episodes no rule saw (each rule that could see it gated it): the pass
    consumes them, and the fact store records each as a rejection (:data:`GATED`)."""
    fired: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    applied: bool = False
    failed: str | None = None
    """Why the partition's pass failed (``None``: it did not): nothing of it was applied,
    the partition is quarantined for this run and the others went on."""
    advances: list[WatermarkAdvance] = field(default_factory=list, repr=False, compare=False)
    """The watermarks the pass moves forward."""
    read_marks: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    """The pack's stored watermarks for the partition when the pass read it."""
    read_version: int | None = field(default=None, repr=False, compare=False)
    """The partition's facts version the pass read (None: the previous pass of the run was
    not applied yet; its apply tells it)."""
    facts_after: list[EngineFact] | None = field(default=None, repr=False, compare=False)
    aggregates: AggregateWrite | None = field(default=None, repr=False, compare=False)
    """What the pass changes in its partition's durable aggregates (applied with it)."""
    history_after: HistoryInput | None = field(default=None, repr=False, compare=False)
    """The aggregate rows the pass read, its changes applied: the next pass of the same
    run reads those refs from here (dropped once the run is over)."""
    """The partition's current facts once the pass is applied (None: computed elsewhere)."""
    bodies: list[bytes] | None = field(default=None, repr=False, compare=False)
    """Deltas computed by a worker process, as canonical JSON, decoded when applied."""
    time: PassTime | None = field(default=None, repr=False, compare=False)
    """The pass time, the episodes it defers and the deferred ones it consumes."""
    deferred_read: list[Deferral] = field(default_factory=list, repr=False, compare=False)
    """The pack's deferred episodes of the partition stored when the pass read it."""
    resumed: dict[str, set[int]] = field(default_factory=dict, repr=False, compare=False)
    """Rule id → seqs of deferred episodes (now due) the rule consumes in this pass."""

    @property
    def counts(self) -> dict[str, int]:
        """Deltas of the pass by kind (kept even when the deltas themselves are not)."""
        return {kind: self.delta_counts.get(kind, 0) for kind in DELTA_KINDS}

    def marks_after(self) -> dict[str, int]:
        """The stored watermarks once this pass is applied (the next pass's basis)."""
        marks = dict(self.read_marks)
        for adv in self.advances:
            marks[adv.rule_id] = adv.last_seq
        return marks

    def deferred_after(self) -> list[Deferral]:
        """The deferred episodes stored once this pass is applied (the next pass's)."""
        return after_pass(self.deferred_read, self.time)

    def take(self, out: PassOutput, keep_matched: bool) -> None:
        """Record what the pack's run produced (its rejections after the gates' ones)."""
        self.fired = out.fired
        self.deltas = out.deltas
        for delta in out.deltas:
            self.delta_counts[delta.kind] = self.delta_counts.get(delta.kind, 0) + 1
        if keep_matched:
            self.matched = out.matched
        self.rejected += out.rejected
        self.facts_after = out.facts_after
        self.aggregates = out.aggregates

    def rejections(self) -> list[Rejection]:
        """The fact store's rejection records for the pass's rejected episodes, and for
        the episodes every rule's salience gate kept out."""
        gated = [
            RejectedEpisode(eid, GATED, "salience below the gate of every rule that could see it")
            for eid in self.gated_out
        ]
        return rejections_of([*self.rejected, *gated], self.pack, self.partition)


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
class LegacyFilter:
    """A specification-style ``when_filter`` attached to one pack rule (or all of them)."""

    sql: str
    rule_id: str


def changes(report: PassReport) -> bool:
    """Whether applying ``report`` changes anything (only such passes record their time:
    a pass that changes nothing leaves the stores as they were)."""
    time = report.time
    return bool(
        any(report.delta_counts.values())
        or report.advances
        or report.rejected
        or (time is not None and (time.deferred or time.resumed))
    )


def recorded_runs(report: PassReport, runs: Sequence[RuleRun]) -> Sequence[RuleRun]:
    """The run records the apply of ``report`` writes: those marked ``if_consumed`` only
    when the pass changes something."""
    if not runs or changes(report):
        return runs
    return [r for r in runs if not r.if_consumed]


@dataclass(frozen=True, order=True)
class Due:
    """One rule of one pack due for one partition."""

    pack: str
    rule_id: str
    partition: Partition = field(compare=False)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.pack, self.rule_id, self.partition.user, self.partition.agent)


@dataclass
class ConsolidationReport:
    """What one call of the Consolidator did: ``record``, ``record_many``, ``tick`` or
    ``consolidate``.

    ``passes`` are the pass reports in the order they ran (rules fired per partition,
    deltas by kind, rejected and gated episodes, timings); ``counts``, ``fired``,
    ``rejected`` and ``gated`` sum them up. Scheduled calls (``record*``, ``tick``) also
    say which (rule, partition) pairs were ``due``; ``held`` lists the due ones a tick left
    to another worker holding their partition's lease; ``conflicts`` are passes another
    scheduler applied first.
    """

    now: datetime
    due: list[Due] = field(default_factory=list)
    passes: list[PassReport] = field(default_factory=list)
    conflicts: list[Due] = field(default_factory=list)
    held: list[Due] = field(default_factory=list)
    lease_holder: str | None = None
    """Kept for compatibility: ticks no longer wait for a database-wide lease (``None``)."""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        """Whether the call ran (always, since ticks lease partitions, not the database)."""
        return self.lease_holder is None

    @property
    def failed(self) -> list[PassReport]:
        """The reports of partitions quarantined for this call: their pass failed and
        nothing of it was applied (``PassReport.failed`` says why)."""
        return [report for report in self.passes if report.failed is not None]

    @property
    def episodes(self) -> int:
        """Episodes read by the passes (an episode read by two packs counts twice)."""
        return sum(report.episodes for report in self.passes)

    @property
    def not_yet_due(self) -> int:
        """Episodes stamped after the pass time that stay pending: per pack and partition,
        what its last pass left, each episode counted once (pending for two packs, too)."""
        last: dict[tuple[str, str], frozenset[int]] = {}
        for report in self.passes:
            last[(report.pack, report.partition.key)] = report.not_yet_due_seqs
        pending: dict[str, set[int]] = defaultdict(set)
        for (_, key), seqs in last.items():
            pending[key] |= seqs
        return sum(len(seqs) for seqs in pending.values())

    @property
    def fired(self) -> dict[str, list[Partition]]:
        """``pack/rule`` → partitions it ran for (in order, each once)."""
        out: dict[str, list[Partition]] = defaultdict(list)
        for report in self.passes:
            for rule_id in report.rules:
                parts = out[f"{report.pack}/{rule_id}"]
                if report.partition not in parts:
                    parts.append(report.partition)
        return dict(out)

    @property
    def counts(self) -> dict[str, int]:
        """Deltas of every pass by kind."""
        out: dict[str, int] = dict.fromkeys(DELTA_KINDS, 0)
        for report in self.passes:
            for kind, n in report.counts.items():
                out[kind] += n
        return out

    @property
    def rejected(self) -> list[RejectedEpisode]:
        return [r for report in self.passes for r in report.rejected]

    @property
    def gated(self) -> list[str]:
        return [g for report in self.passes for g in report.gated]

    def merge(self, other: ConsolidationReport) -> None:
        """Add another report's passes, due pairs, conflicts and timings to this one."""
        self.due += other.due
        self.passes += other.passes
        self.conflicts += other.conflicts
        self.held += other.held
        for name, seconds in other.timings.items():
            self.timings[name] = self.timings.get(name, 0.0) + seconds


ScheduleReport = ConsolidationReport
"""The report's earlier name (``record`` and ``tick`` returned it before ``consolidate``
did too)."""
