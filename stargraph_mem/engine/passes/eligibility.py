"""Which rule may see which episode of a pass: its watermark, ``select``, legacy
``when_filter`` and salience gate."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime

from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.engine.passes.filters import episode_copy, select_seqs_on, when_filter_seqs
from stargraph_mem.engine.passes.gating import RuleGate, UnusableImportance
from stargraph_mem.engine.passes.outputs import RejectedEpisode
from stargraph_mem.engine.passes.report import LegacyFilter, PassReport
from stargraph_mem.model.time import to_us
from stargraph_mem.salience import SalienceScorer
from stargraph_mem.stores.memory import EpisodeRecord


class Eligibility:
    """Works out, per rule, the seqs of a pass's episodes the rule may see."""

    def __init__(self, compiled: CompiledPack, scorer: SalienceScorer) -> None:
        self.scorer = scorer
        fields = compiled.pack.fields
        self.gates = {
            r.index: RuleGate.of(r.program.info.rule, fields)
            for r in compiled.rules
            if r.program.info.rule.salience is not None
        }
        """Per rule index with a salience gate: what its scorer is told about an episode."""

    async def of(
        self,
        report: PassReport,
        rules: list[CompiledRule],
        records: list[EpisodeRecord],
        marks: dict[str, int],
        legacy: LegacyFilter | None,
    ) -> dict[int, set[int]]:
        """Per rule index, the seqs it may see; gated ids and rejections go to ``report``.

        A rule sees the episodes after its watermark and the deferred ones the pass
        consumes under it (``report.resumed``), as far as its ``select`` and gates allow.
        ``select`` clauses run over one in-memory copy of the pass's episodes, made when
        the first one runs (whatever the backend).
        """
        copy: list[sqlite3.Connection] = []
        try:
            return await self._of(report, rules, records, marks, legacy, copy)
        finally:
            for conn in copy:
                conn.close()

    async def _of(
        self,
        report: PassReport,
        rules: list[CompiledRule],
        records: list[EpisodeRecord],
        marks: dict[str, int],
        legacy: LegacyFilter | None,
        copy: list[sqlite3.Connection],
    ) -> dict[int, set[int]]:
        partition, now, high = report.partition, report.now, report.last_seq
        eligible: dict[int, set[int]] = {}
        gated: set[str] = set()
        after_sets: dict[int, set[int]] = {}
        for rule in rules:
            after = marks.get(rule.id, 0)
            if after not in after_sets:
                after_sets[after] = {r.seq for r in records if r.seq > after}
            seqs = set(after_sets[after])
            resumed = report.resumed.get(rule.id)
            low, top = after, high
            if resumed:
                seqs |= resumed
                low, top = min(after, min(resumed) - 1), max(high, max(resumed))
            if rule.select is not None and seqs:
                if not copy:
                    copy.append(await asyncio.to_thread(episode_copy, records))
                args = (partition, low, top, rule.select.sql, rule.select.params(to_us(now)))
                seqs &= await asyncio.to_thread(select_seqs_on, copy[0], *args, rule.id)
            if legacy is not None and seqs and legacy.rule_id in (rule.id, "*"):
                window = [r for r in records if r.seq in seqs]
                seqs &= await asyncio.to_thread(
                    when_filter_seqs, window, partition, legacy.sql, rule_id=rule.id
                )
            gate = self.gates.get(rule.index)
            if gate is not None and seqs:
                seqs, dropped = await self._gate(records, seqs, gate, now, report.rejected)
                gated |= dropped
            eligible[rule.index] = seqs
        report.gated = sorted(gated)
        if gated:  # gated by every rule that could see it: recorded, never silent
            seen = set().union(*eligible.values())
            report.gated_out = [r.id for r in records if r.id in gated and r.seq not in seen]
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
