"""The cadence scheduler: keeps counter and clock facts current, asks CLIPS what is due, runs it.

Due-ness is decided by each pack's schedule program (:mod:`stargraph_mem.compiler.cadence`),
never here. This module supplies its facts: per (count rule, partition) the episodes after
the rule's watermark, per (cron rule, partition) the next fire time croniter computes from
the last run (or the anchor: when the partition's cron clock started) in the rule's tz, per
(``idle`` or ``or_after`` rule, partition) the times of the earliest and latest episode the
rule has not consumed. All are judged at the tick's ``now``, so stepped clocks are
deterministic.

Everything that decides is durable: pending counts come from the episodes table and the
watermarks, last runs from ``rule_runs``, written in the same transaction as the pass. A
restart therefore neither loses a pending count nor fires twice; after downtime a cron rule
is due once, and one pass catches it up. Each pass carries a compare-and-set on its rules'
run tokens, so two schedulers that decided on the same state never both apply it; a lease
row additionally lets only one of them tick at a time.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, lru_cache

import clips
import orjson

from stargraph_mem.compiler.cadence import CadenceRule, next_fire, schedule_program
from stargraph_mem.compiler.clips_env import load_constructs, new_environment
from stargraph_mem.compiler.pack import CompiledRule
from stargraph_mem.compiler.select_sql import NowOffset
from stargraph_mem.compiler.sweep_sql import SweepFilter, sweep_filter
from stargraph_mem.engine.passes import observe
from stargraph_mem.engine.passes.batch import run_many
from stargraph_mem.engine.passes.report import ConsolidationReport, Due, ScheduleReport
from stargraph_mem.engine.passes.runner import PassRunner
from stargraph_mem.engine.passes.sweep import Sweeper, SweepOutcome, fire_time, fired, swept
from stargraph_mem.errors import CompileError, PassConflictError, ScheduleError
from stargraph_mem.model.cadence import Cadence, span_due_us
from stargraph_mem.model.time import from_us, to_us, to_utc
from stargraph_mem.stores.protocols import EpisodeRepository, FactRepository, ScheduleRepository
from stargraph_mem.stores.repositories.fact_rows import claim_holder
from stargraph_mem.stores.repositories.schedule_runs import RuleRun, RunState
from stargraph_mem.stores.scope import Partition

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "LEASE_NAME",
    "ConsolidationReport",
    "Due",
    "ScheduleProgram",
    "ScheduleReport",
    "Scheduler",
    "StatusRow",
]

LEASE_BATCH = 2048
"""Due partitions a tick leases at once (then consolidates in batches, then gives up):
several batches, so one batch's commit overlaps the next one's computation as in
``consolidate``. A smaller backlog is leased in quarters (of at least
:data:`LEASE_BATCH_MIN`), so several workers still share it."""
LEASE_BATCH_MIN = 512
LEASE_NAME = "scheduler"
DEFAULT_LEASE_SECONDS = 30.0
"""A tick leases a partition for this long (renewed by each pass it applies); another
scheduler takes it over once it expires."""
RETRIES = 8
"""Times a record's streaming check re-decides after another scheduler applied first."""
KNOWN_TOKENS_MAX = 10_000
"""Partitions whose last record's run tokens a scheduler keeps (see
``Scheduler._decide_known``); the oldest are dropped beyond that."""


@dataclass(frozen=True)
class StatusRow:
    """One (pack, rule, partition): cadence, pending episodes, last and next run."""

    pack: str
    rule_id: str
    cadence: Cadence
    partition: Partition | None
    pending: int
    """Episodes the rule has not consumed: after its watermark, and deferred ones."""
    last_run: datetime | None
    next_run: datetime | None
    """The next cron fire time; for ``idle``, when the partition will have been quiet long
    enough, and for ``or_after``, the duration after the first pending episode (``None``
    for count rules, and for these two while nothing is pending)."""
    due: bool
    not_yet_due: int = 0
    """Of ``pending``, the deferred episodes stamped after the status time (a pass at
    that time would leave them pending)."""
    sweep: bool = False
    """The rule is a sweep: ``pending`` counts its candidates (the current facts of the
    partition its pre-filter selects at its fire time), not episodes, which it never
    consumes; it is due when it has candidates and its latest fire is not applied."""


COUNT_ANSWERS_MAX = 4096
"""How many answers to questions of counts alone a schedule program keeps."""


class ScheduleProgram:
    """A pack's schedule program loaded into its own silent CLIPS environment."""

    def __init__(self, pack: str, text: str) -> None:
        self.pack = pack
        self.env = new_environment()
        try:
            load_constructs(self.env, text)
        except CompileError as exc:
            raise ScheduleError(
                f"pack '{pack}': schedule program rejected: {exc.message}", pack=pack
            ) from exc
        self._clock = self.env.find_template("sm-sched-clock")
        self._count = self.env.find_template("sm-sched-count")
        self._next = self.env.find_template("sm-sched-next")
        self._due = self.env.find_template("sm-sched-due")
        self._first = self.env.find_template("sm-sched-first")
        self._last = self.env.find_template("sm-sched-last")
        self._by_counts: dict[tuple[tuple[int, int, int], ...], tuple[tuple[int, int], ...]] = {}
        """Answers to questions of counts alone (see :meth:`due`)."""

    def due(
        self,
        now_us: int,
        counts: Iterable[tuple[int, int, int]] = (),
        nexts: Iterable[tuple[int, int, int]] = (),
        spans: Iterable[tuple[int, int, int, int]] = (),
    ) -> list[tuple[int, int]]:
        """(rule index, partition index) pairs due, given (rule, part, pending) counts,
        (rule, part, next fire µs) clocks and (rule, part, first µs, last µs) spans of the
        episodes a rule has not consumed.

        Given counts alone, no rule can read the clock (cron, ``idle`` and ``or_after``
        rules need a clock or span fact to fire), so the answer depends on the counts only:
        it is kept per count list (a streaming ``record`` asks the same question each time).
        """
        key: tuple[tuple[int, int, int], ...] | None = None
        if not nexts and not spans:
            key = tuple(counts)
            known = self._by_counts.get(key)
            if known is not None:
                return list(known)
            counts = key
        found = self._distinct(now_us, counts, nexts, spans)
        if key is not None:
            if len(self._by_counts) >= COUNT_ANSWERS_MAX:
                self._by_counts.clear()
            self._by_counts[key] = tuple(found)
        return found

    def _distinct(
        self,
        now_us: int,
        counts: Iterable[tuple[int, int, int]],
        nexts: Iterable[tuple[int, int, int]],
        spans: Iterable[tuple[int, int, int, int]],
    ) -> list[tuple[int, int]]:
        """:meth:`_run`, asked once per distinct partition: every defrule joins the facts
        of one partition (and the clock), so partitions whose facts are the same but for
        their index are due for the same rules. A tick over many partitions asks few
        distinct questions (their next fire times and counts repeat)."""
        facts: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        for rule, part, pending in counts:
            facts[part].append((0, rule, pending))
        for rule, part, at in nexts:
            facts[part].append((1, rule, at))
        for rule, part, first, last in spans:
            facts[part].append((2, rule, first, last))
        kinds: dict[tuple[tuple[int, ...], ...], int] = {}
        members: list[list[int]] = []
        for part, mine in facts.items():
            shape = tuple(sorted(mine))
            kind = kinds.setdefault(shape, len(kinds))
            if kind == len(members):
                members.append([])
            members[kind].append(part)
        if len(kinds) == len(facts):
            return self._run(now_us, counts, nexts, spans)
        asked: tuple[list[tuple[int, int, int]], ...] = ([], [])
        spanned: list[tuple[int, int, int, int]] = []
        for shape, kind in kinds.items():
            for fact in shape:
                if fact[0] == 2:
                    spanned.append((fact[1], kind, fact[2], fact[3]))
                else:
                    asked[fact[0]].append((fact[1], kind, fact[2]))
        found = self._run(now_us, asked[0], asked[1], spanned)
        return sorted((rule, part) for rule, kind in found for part in members[kind])

    def _run(
        self,
        now_us: int,
        counts: Iterable[tuple[int, int, int]],
        nexts: Iterable[tuple[int, int, int]],
        spans: Iterable[tuple[int, int, int, int]],
    ) -> list[tuple[int, int]]:
        env = self.env
        env.reset()
        try:
            self._clock.assert_fact(now=now_us)
            for rule, part, pending in counts:
                self._count.assert_fact(rule=rule, part=part, pending=pending)
            for rule, part, at in nexts:
                self._next.assert_fact(rule=rule, part=part, at=at)
            for rule, part, first, last in spans:
                self._first.assert_fact(rule=rule, part=part, at=first)
                self._last.assert_fact(rule=rule, part=part, at=last)
            env.run()
            return sorted((int(f["rule"]), int(f["part"])) for f in self._due.facts())
        except clips.CLIPSError as exc:
            raise ScheduleError(f"pack '{self.pack}': schedule program: {exc}") from exc
        finally:
            env.reset()


@lru_cache(maxsize=65536)
def _next_fire_us(cadence: Cadence, since_us: int, rule_id: str) -> int:
    """Cached: many partitions share a last-run time (they ran in the same tick)."""
    return to_us(next_fire(cadence, from_us(since_us), rule_id))


@dataclass(frozen=True)
class ScheduledRule:
    """A rule as the schedule sees it (what :class:`CadenceRule` asks for)."""

    id: str
    index: int
    cadence: Cadence


@dataclass
class _Pack:
    """One pack as the scheduler sees it: program, rules by cadence, and (when it can run
    passes) its runner."""

    name: str
    program: ScheduleProgram
    all_rules: list[CadenceRule]
    runner: PassRunner | None = None
    sweeps: dict[str, SweepFilter] = field(default_factory=dict)
    """The pre-filters of the pack's sweeps, by rule id."""
    watermarks: str = ""
    """The pack name its passes keep watermarks under (its own, when empty)."""

    @property
    def marks(self) -> str:
        """The pack name to read the watermarks and deferred episodes of its passes by."""
        return self.watermarks or self.name

    @cached_property
    def count_rules(self) -> list[CadenceRule]:
        return [r for r in self.all_rules if r.cadence.every is not None]

    @cached_property
    def cron_rules(self) -> list[CadenceRule]:
        """Cron rules over episodes (sweeps run apart: see
        :mod:`~stargraph_mem.engine.passes.sweep`)."""
        return [r for r in self.all_rules if r.cadence.cron is not None and not swept(r)]

    @cached_property
    def span_rules(self) -> list[CadenceRule]:
        """Rules judged on the times of their pending episodes: ``idle`` and ``or_after``."""
        return [r for r in self.all_rules if r.cadence.idle or r.cadence.or_after]

    @cached_property
    def rules(self) -> dict[int, CadenceRule]:
        return {r.index: r for r in self.all_rules}

    @classmethod
    def registered(
        cls, name: str, rules: Sequence[ScheduledRule], sweeps: dict[str, SweepFilter]
    ) -> _Pack:
        """A pack known only by its registered cadences and sweep filters (for status)."""
        program = ScheduleProgram(name, schedule_program(rules))
        return cls(name, program, list(rules), sweeps=sweeps)


_JSON_PARAM = (str, int, float, bool, dict, type(None))
"""Sweep filter parameters that read back from JSON as they were written."""


def registered_cadence(rule: CadenceRule) -> str:
    """What is registered of a rule: its cadence as JSON, with a sweep's pre-filter under
    ``"sweep"`` (its SQL, parameters, pass-time offsets as ``{"now_minus_us": µs}``), so
    ``status`` can count a sweep's candidates without the pack file."""
    document = orjson.loads(rule.cadence.model_dump_json())
    if swept(rule):
        assert isinstance(rule, CompiledRule)
        filt = sweep_filter(rule.program.info.rule)
        params = [
            {"now_minus_us": p.micros} if isinstance(p, NowOffset) else p for p in filt.raw_params
        ]
        if not all(isinstance(p, _JSON_PARAM) for p in params):
            return orjson.dumps(document).decode()  # not kept: status cannot count them
        document["sweep"] = {"sql": filt.sql, "params": params, "archived": filt.archived}
    return orjson.dumps(document).decode()


def registered_cadence_text(cadence: Cadence, *, watermarks: str) -> str:
    """What is registered of a rule whose passes keep their watermarks under another
    pack's name (``"watermarks"``): the specification's ``consolidate(rule)``."""
    document = orjson.loads(cadence.model_dump_json())
    document["watermarks"] = watermarks
    return orjson.dumps(document).decode()


def read_registered(text: str) -> tuple[Cadence, SweepFilter | None, str | None]:
    """A registered rule's cadence, for a sweep its pre-filter (see
    :func:`registered_cadence`), and the pack whose watermarks its passes keep, when
    another's (see :func:`registered_cadence_text`)."""
    document = orjson.loads(text)
    sweep = document.pop("sweep", None) if isinstance(document, dict) else None
    marks = document.pop("watermarks", None) if isinstance(document, dict) else None
    watermarks = marks if isinstance(marks, str) else None
    cadence = Cadence.model_validate_json(orjson.dumps(document))
    if not isinstance(sweep, dict):
        return cadence, None, watermarks
    params = tuple(
        NowOffset(int(p["now_minus_us"])) if isinstance(p, dict) else p for p in sweep["params"]
    )
    filt = SweepFilter(str(sweep["sql"]), params, False, bool(sweep["archived"]))
    return cadence, filt, watermarks


@dataclass
class _Facts:
    """The counter and clock facts of one decision, and the states they came from."""

    counts: list[tuple[int, int, int]] = field(default_factory=list)
    nexts: list[tuple[int, int, int]] = field(default_factory=list)
    pending: dict[tuple[str, int], int] = field(default_factory=dict)
    later: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per (rule, partition): deferred episodes not due yet (included in ``pending``)."""
    states: dict[tuple[str, str], RunState] = field(default_factory=dict)
    spans: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    """Per (rule index, partition): the first and last µs of the episodes a span rule has
    not consumed, where it has some."""

    def span_facts(self) -> list[tuple[int, int, int, int]]:
        """:attr:`spans` as (rule, part, first µs, last µs) facts for the schedule program."""
        return [(rule, part, first, last) for (rule, part), (first, last) in self.spans.items()]


class Scheduler:
    """Runs whatever the packs' schedule programs say is due, exactly once per decision."""

    def __init__(
        self,
        runners: Sequence[PassRunner],
        memory: EpisodeRepository,
        facts: FactRepository,
        schedule: ScheduleRepository,
        *,
        holder: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.memory = memory
        self.facts = facts
        self.schedule = schedule
        self.holder = holder or claim_holder()
        """Who this scheduler's partition leases name: ``host/pid/token`` by default (a
        lease of a process of this host that died is taken over at once; one from
        elsewhere once it expires)."""
        self.lease_seconds = lease_seconds
        self.lease_batch = LEASE_BATCH
        """Due partitions a tick leases at once."""
        self.packs = [self._pack(c) for c in runners]
        self._locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._tokens: OrderedDict[tuple[str, str], dict[str, str]] = OrderedDict()
        """Per (pack, partition key): the run tokens our last record there stored, for
        count rules a put always makes due (see :meth:`_decide_known`)."""
        self._held: OrderedDict[tuple[str, str], dict[str, str]] = OrderedDict()
        """Per (pack, partition key): the due rules' run tokens when another worker held
        the partition's lease at a tick (see :meth:`_note_takeovers`)."""

    @staticmethod
    def _pack(runner: PassRunner) -> _Pack:
        compiled = runner.runtime.compiled
        program = ScheduleProgram(compiled.name, compiled.schedule)
        sweeps = {r.id: sweep_filter(r.program.info.rule) for r in compiled.rules if swept(r)}
        return _Pack(compiled.name, program, list(compiled.rules), runner, sweeps)

    async def register(self) -> None:
        """Record each pack's rule cadences, so ``status`` can run without the pack files."""
        for pack in self.packs:
            rules = [(r.id, r.index, registered_cadence(r)) for r in pack.all_rules]
            await self.schedule.register(pack.name, rules)

    async def registered_packs(self, skip: Sequence[str] = ()) -> list[_Pack]:
        """Packs registered in the file by earlier schedulers (except ``skip``)."""
        found = await self.schedule.registered()
        packs: list[_Pack] = []
        for name, rules in sorted(found.items()):
            if name in skip:
                continue
            scheduled, sweeps, marks = [], {}, None
            for rid, index, text in rules:
                cadence, filt, watermarks = read_registered(text)
                scheduled.append(ScheduledRule(rid, index, cadence))
                marks = marks or watermarks
                if filt is not None:
                    sweeps[rid] = filt
            pack = _Pack.registered(name, scheduled, sweeps)
            pack.watermarks = marks or name
            packs.append(pack)
        return packs

    # --- facts for the schedule program ------------------------------------------------

    async def _pending(
        self,
        pack: _Pack,
        partitions: Sequence[Partition],
        facts: _Facts,
        rules: Sequence[CadenceRule],
        now_us: int,
    ) -> None:
        """Episodes after each rule's watermark in every partition and those its passes
        deferred (one count per distinct watermark, all in three statements); count rules
        also get their counter fact, which counts deferred episodes once they are due
        (stamped at or before ``now_us``)."""
        if not rules or not partitions:
            return
        bases = await self.facts.pass_bases(pack.marks, partitions)
        deferred = await self.facts.deferred_of(pack.marks, partitions)
        wanted = {
            (part, marks.get(rule.id, 0)) for part, (marks, _) in enumerate(bases) for rule in rules
        }
        pairs = sorted(wanted)
        counts = await self.memory.count_since_of([(partitions[p], mark) for p, mark in pairs])
        by_mark = dict(zip(pairs, counts, strict=True))
        for part, (marks, _) in enumerate(bases):
            for rule in rules:
                count = by_mark[(part, marks.get(rule.id, 0))]
                mine = [d for d in deferred[part] if d.rule_id == rule.id]
                later = sum(1 for d in mine if d.ts_us > now_us)
                facts.pending[(rule.id, part)] = count + len(mine)
                facts.later[(rule.id, part)] = later
                if rule.cadence.every is not None:
                    facts.counts.append((rule.index, part, count + len(mine) - later))

    async def _spans(
        self,
        pack: _Pack,
        partitions: Sequence[Partition],
        facts: _Facts,
        rules: Sequence[CadenceRule],
    ) -> None:
        """The earliest and latest time of the episodes each ``idle`` / ``or_after`` rule has
        not consumed in every partition: after its watermark (one read per distinct
        watermark, in one statement), and those its passes deferred."""
        if not rules or not partitions:
            return
        bases = await self.facts.pass_bases(pack.marks, partitions)
        deferred = await self.facts.deferred_of(pack.marks, partitions)
        pairs = sorted(
            {
                (part, marks.get(rule.id, 0))
                for part, (marks, _) in enumerate(bases)
                for rule in rules
            }
        )
        found = await self.schedule.spans_of([(partitions[p], mark) for p, mark in pairs])
        by_mark = dict(zip(pairs, found, strict=True))
        for part, (marks, _) in enumerate(bases):
            for rule in rules:
                times = [d.ts_us for d in deferred[part] if d.rule_id == rule.id]
                span = by_mark[(part, marks.get(rule.id, 0))]
                times += span if span is not None else ()
                if times:
                    facts.spans[(rule.index, part)] = (min(times), max(times))

    async def _anchor_missing(
        self, pack: _Pack, partitions: Sequence[Partition], now: datetime, facts: _Facts
    ) -> None:
        """Start the cron clocks of (rule, partition) pairs never seen: at the earliest
        unconsolidated episode's time, whatever order the episodes were stored in (never
        later than now), else now."""
        now_us = to_us(now)
        missing = [
            (rule, partition)
            for partition in partitions
            for rule in pack.cron_rules
            if (rule.id, partition.key) not in facts.states
        ]
        anchors = await self._anchors_us(pack, missing, now_us)
        if anchors:
            await self.schedule.anchor(pack.name, anchors)
            anchored = list(dict.fromkeys(partition for _, partition, _ in anchors))
            facts.states.update(await self.schedule.runs_of(pack.name, anchored))

    async def _anchors_us(
        self, pack: _Pack, missing: Sequence[tuple[CadenceRule, Partition]], now_us: int
    ) -> list[tuple[str, Partition, int]]:
        """Each pair's anchor: the earliest time of its unconsolidated episodes (never later
        than now), else now; read for all pairs at once. The earliest by time, not the first
        stored: an episode stored first but stamped after now must not start the clock at
        now, past the fire due for the earlier ones."""
        if not missing:
            return []
        parts = list(dict.fromkeys(partition for _, partition in missing))
        marks = dict(zip(parts, await self.facts.pass_bases(pack.marks, parts), strict=True))
        after = [(p, marks[p][0].get(rule.id, 0)) for rule, p in missing]
        wanted = list(dict.fromkeys(after))  # rules of one partition share a watermark
        earliest = await self.memory.earliest_since_of(wanted)
        firsts: dict[tuple[Partition, int], int] = {
            read: now_us if first is None else min(now_us, first)
            for read, first in zip(wanted, earliest, strict=True)
        }
        return [
            (rule.id, partition, firsts[read])
            for (rule, partition), read in zip(missing, after, strict=True)
        ]

    def _clocks(self, pack: _Pack, partitions: Sequence[Partition], facts: _Facts) -> None:
        known: dict[tuple[int, int], int] = {}  # many partitions share a last run
        for part, partition in enumerate(partitions):
            for rule in pack.cron_rules:
                state = facts.states.get((rule.id, partition.key))
                if state is not None:
                    since = state.since_us
                    at = known.get((rule.index, since))
                    if at is None:
                        at = _next_fire_us(rule.cadence, since, rule.id)
                        known[(rule.index, since)] = at
                    facts.nexts.append((rule.index, part, at))

    async def _decide(
        self, pack: _Pack, partitions: Sequence[Partition], now: datetime
    ) -> tuple[dict[Partition, list[CadenceRule]], _Facts]:
        """Gather every partition's counter and clock facts, run the schedule program,
        group the due rules by partition."""
        facts = _Facts()
        facts.states = await self.schedule.runs_of(pack.name, partitions)
        await self._pending(pack, partitions, facts, pack.count_rules, to_us(now))
        await self._spans(pack, partitions, facts, pack.span_rules)
        if pack.cron_rules:
            await self._anchor_missing(pack, partitions, now, facts)
            self._clocks(pack, partitions, facts)
        due: dict[Partition, list[CadenceRule]] = defaultdict(list)
        rules = pack.rules
        for index, part in pack.program.due(
            to_us(now), facts.counts, facts.nexts, facts.span_facts()
        ):
            due[partitions[part]].append(rules[index])
        # in rule order, so partitions due for the same rules run as one batch
        return {p: sorted(found, key=lambda r: r.index) for p, found in due.items()}, facts

    # --- running ---------------------------------------------------------------------

    def _runs(
        self,
        pack: _Pack,
        partition: Partition,
        rules: Sequence[CadenceRule],
        states: dict[tuple[str, str], RunState],
        now: datetime,
    ) -> list[RuleRun]:
        """The run records of one scheduled run (compare-and-set on the tokens seen)."""
        token = uuid.uuid4().hex
        return [
            RuleRun(
                pack.name,
                rule.id,
                partition,
                now,
                token,
                states[(rule.id, partition.key)].token
                if (rule.id, partition.key) in states
                else "",
            )
            for rule in rules
        ]

    async def _run(
        self,
        pack: _Pack,
        partition: Partition,
        rules: list[CadenceRule],
        states: dict[tuple[str, str], RunState],
        now: datetime,
        report: ConsolidationReport,
        guessed: bool = False,
    ) -> bool:
        """One scheduled run of ``rules`` over ``partition``; False if another scheduler
        applied it first (nothing of ours was applied). A ``guessed`` run (decided by
        :meth:`_decide_known`) that finds the run records changed leaves no trace in
        ``report``: the caller decides again from the stores."""
        runs = self._runs(pack, partition, rules, states, now)
        dues = [Due(pack.name, rule.id, partition) for rule in rules]
        key = (pack.name, partition.key)
        self._tokens.pop(key, None)
        try:
            assert pack.runner is not None
            passes = await pack.runner.run(
                partition, now=now, rule_ids=[r.id for r in rules], runs=runs
            )
        except PassConflictError:
            if not guessed:
                report.due += dues
                report.conflicts += dues
            return False
        report.due += dues
        report.passes += passes
        if any(p.applied for p in passes):  # the run records hold our token now
            self._tokens[key] = {run.rule_id: run.token for run in runs}
            while len(self._tokens) > KNOWN_TOKENS_MAX:
                self._tokens.popitem(last=False)
        return True

    def _decide_known(
        self, pack: _Pack, partition: Partition
    ) -> tuple[list[CadenceRule], dict[tuple[str, str], RunState]] | None:
        """The count rules due after a put that stored a new episode, without reading the
        stores, when such a put makes every one of them due (each is due at one pending
        episode, and none waits for time) and our last record in ``partition`` stored the
        run records: their tokens are those. None otherwise.

        The new episode is pending for each rule, unless another process consolidated it
        meanwhile; then it also changed the run records or the watermarks,
        and the apply refuses the pass (run records: :class:`PassConflictError`; watermarks:
        the pass is computed again from the stores)."""
        tokens = self._tokens.get((pack.name, partition.key))
        if tokens is None:
            return None
        rules = pack.count_rules
        if any(r.cadence.or_after is not None for r in rules) or set(tokens) != {
            r.id for r in rules
        }:
            return None
        due = pack.program.due(0, [(r.index, 0, 1) for r in rules])
        if len(due) != len(rules):
            return None
        self._tokens.move_to_end((pack.name, partition.key))
        due_rules = [pack.rules[index] for index, _ in due]
        return due_rules, {
            (r.id, partition.key): RunState(0, None, 0, tokens[r.id]) for r in due_rules
        }

    async def _run_many(
        self,
        pack: _Pack,
        partitions: list[Partition],
        rules: list[CadenceRule],
        states: dict[tuple[str, str], RunState],
        now: datetime,
        report: ConsolidationReport,
    ) -> None:
        """Scheduled runs of the same ``rules`` over many partitions, in batches; those
        another scheduler applied first are noted as conflicts."""
        assert pack.runner is not None
        runs = {p: self._runs(pack, p, rules, states, now) for p in partitions}
        for p in partitions:  # their run records change: a record reads them again
            self._tokens.pop((pack.name, p.key), None)
        dues = {p: [Due(pack.name, rule.id, p) for rule in rules] for p in partitions}
        report.due += [due for p in partitions for due in dues[p]]
        conflicts: list[Partition] = []
        async with AsyncExitStack() as stack:
            for key in sorted({p.key for p in partitions}):
                await stack.enter_async_context(self._locks[key])
            report.passes += await run_many(
                pack.runner,
                partitions,
                now=now,
                rule_ids=[r.id for r in rules],
                runs=dict(runs),
                conflicts=conflicts,
            )
        report.conflicts += [due for p in conflicts for due in dues[p]]

    async def _decide_counts(
        self, pack: _Pack, partition: Partition, now: datetime
    ) -> tuple[list[CadenceRule], dict[tuple[str, str], RunState]]:
        """The count rules due for one partition, from one read of counts and run states."""
        rules = pack.count_rules
        found = await self.schedule.pending(pack.name, partition, [r.id for r in rules])
        states = {
            (rule_id, partition.key): state
            for rule_id, (_, state) in found.items()
            if state is not None
        }
        counts = [(r.index, 0, found[r.id][0]) for r in rules]
        by_index = pack.rules
        due = pack.program.due(to_us(now), counts)
        return [by_index[index] for index, _ in due], states

    async def _decide_record(
        self, pack: _Pack, partition: Partition, now: datetime
    ) -> tuple[list[CadenceRule], dict[tuple[str, str], RunState]]:
        """The count rules due for one partition after a put: by count, and for
        ``or_after`` rules also by the time of their first pending episode."""
        timed = [r for r in pack.count_rules if r.cadence.or_after is not None]
        if not timed:
            return await self._decide_counts(pack, partition, now)
        facts = _Facts()
        facts.states = await self.schedule.runs_of(pack.name, [partition])
        await self._pending(pack, [partition], facts, pack.count_rules, to_us(now))
        await self._spans(pack, [partition], facts, timed)
        due = pack.program.due(to_us(now), facts.counts, (), facts.span_facts())
        by_index = pack.rules
        return [by_index[index] for index, _ in due], facts.states

    async def on_record(
        self, partition: Partition, now: datetime, *, stored: bool = False
    ) -> ConsolidationReport:
        """The cadence check after a put: run the partition's count rules that are due
        (``every: 1`` rules on every put; ``or_after`` ones also once their first pending
        episode is old enough). ``idle`` and cron rules wait for a tick: a put is what
        ends an idle spell, never what completes one. Re-decides when another scheduler
        got there first. ``stored``: the put stored a new episode in ``partition`` (then
        rules every put makes due may be decided without a read, see
        :meth:`_decide_known`)."""
        now = to_utc(now)
        report = ConsolidationReport(now=now)
        t0 = time.perf_counter()
        async with self._locks[partition.key]:
            for pack in self.packs:
                if not pack.count_rules:
                    continue
                for attempt in range(RETRIES):
                    guess = stored and attempt == 0
                    known = self._decide_known(pack, partition) if guess else None
                    if known is None:
                        rules, states = await self._decide_record(pack, partition, now)
                    else:
                        rules, states = known
                    if not rules:
                        break
                    if await self._run(
                        pack, partition, rules, states, now, report, guessed=known is not None
                    ):
                        break
        report.timings["total"] = time.perf_counter() - t0
        return report

    async def tick(self, now: datetime) -> ConsolidationReport:
        """Run every due (rule, partition) of every pack whose partition this scheduler can
        lease: any number of schedulers, in any number of processes or machines, share the
        work, each partition consolidated by one of them at a time.

        Due partitions are leased :data:`LEASE_BATCH` at a time for ``lease_seconds``
        (renewed by each pass applied, given up when they are done); those another
        scheduler holds are left to it (``report.held``). A scheduler that dies keeps its
        leases until they expire, or until another process of its host sees it is gone.
        Then each pack's due sweeps run over every partition with candidate facts (see
        :mod:`~stargraph_mem.engine.passes.sweep`), leased the same way.
        """
        now = to_utc(now)
        report = ConsolidationReport(now=now)
        t0 = time.perf_counter()
        partitions = await self.memory.partitions()
        t1 = time.perf_counter()
        decide = 0.0
        for pack in self.packs:
            if not partitions:
                break
            d0 = time.perf_counter()
            due, decided = await self._decide(pack, partitions, now)
            decide += time.perf_counter() - d0
            wanted = list(due)
            size = min(self.lease_batch, max(LEASE_BATCH_MIN, -(-len(wanted) // 4)))
            for start in range(0, len(wanted), size):
                chunk = wanted[start : start + size]
                await self._leased(pack, chunk, due, now, report, decided.states)
        for pack in self.packs:
            await self.sweep(pack, now, report)
        t2 = time.perf_counter()
        report.timings = {"partitions": t1 - t0, "decide": decide, "total": t2 - t0}
        return report

    async def sweep(
        self,
        pack: _Pack,
        now: datetime,
        report: ConsolidationReport,
        keep: Callable[[Partition], bool] | None = None,
    ) -> None:
        """Run the pack's due sweeps over every partition with candidate facts (leased as a
        tick's partitions are), into ``report``."""
        if pack.runner is None:
            return
        sweeper = Sweeper(pack.runner, self.schedule, self.holder, self.lease_seconds)
        merge_sweep(report, pack.name, await sweeper.sweep(now, keep=keep))

    async def _leased(
        self,
        pack: _Pack,
        partitions: list[Partition],
        due: dict[Partition, list[CadenceRule]],
        now: datetime,
        report: ConsolidationReport,
        states: dict[tuple[str, str], RunState] | None = None,
    ) -> None:
        """Lease ``partitions``, decide again for those leased (another scheduler may have
        run them since the tick decided), run what is still due, give the leases up."""
        runner = pack.runner
        assert runner is not None
        mine = await self.facts.claim_partitions(partitions, self.holder, self.lease_seconds)
        leased = {p.key for p in mine}
        self._note_takeovers(pack.name, partitions, leased, due, states or {})
        report.held += [
            Due(pack.name, rule.id, p) for p in partitions if p.key not in leased for rule in due[p]
        ]
        if not mine:
            return
        runner.leases.update(dict.fromkeys(leased, (self.holder, self.lease_seconds)))
        try:
            still, facts = await self._decide(pack, mine, now)
            for rules, group in _same_rules(still):
                await self._run_many(pack, group, rules, facts.states, now, report)
        finally:
            for key in leased:
                runner.leases.pop(key, None)
            await self.facts.release_partitions(mine, self.holder)

    def _note_takeovers(
        self,
        pack: str,
        partitions: Sequence[Partition],
        leased: set[str],
        due: dict[Partition, list[CadenceRule]],
        states: dict[tuple[str, str], RunState],
    ) -> None:
        """Remember the run tokens of the due partitions another worker holds; one this
        worker now leases whose due rules' tokens did not change since is a takeover (its
        holder applied no pass while it held the lease: it died, or its lease expired)."""
        for partition in partitions:
            key = (pack, partition.key)
            tokens = {r.id: _token_of(states.get((r.id, partition.key))) for r in due[partition]}
            seen = self._held.pop(key, None)
            if partition.key not in leased:
                self._held[key] = tokens
            elif seen is not None and all(tokens.get(r) == t for r, t in seen.items()):
                observe.takeover(pack, partition)
        while len(self._held) > KNOWN_TOKENS_MAX:
            self._held.popitem(last=False)

    def forget(self) -> None:
        """Drop the run tokens kept from earlier records (after a lost connection, the
        next record reads the run records again)."""
        self._tokens.clear()

    async def release(self) -> None:
        """Give up the lease (on shutdown) so another scheduler can take over at once."""
        await self.schedule.release_lease(LEASE_NAME, self.holder)

    # --- status ----------------------------------------------------------------------

    async def status(
        self,
        now: datetime,
        *,
        registered: bool = False,
        user: str | None = None,
        agent: str | None = None,
        rule_ids: Sequence[str] | None = None,
    ) -> list[StatusRow]:
        """Each rule's cadence, pending count, last and next run per partition (reads only).

        With ``registered``, packs other schedulers registered in the file are shown too.
        ``user``, ``agent`` and ``rule_ids`` keep the rows of those partitions and rules.
        A sweep's row counts its candidate facts and is due as a tick would run it.
        """
        now = to_utc(now)
        now_us = to_us(now)
        partitions = [
            p
            for p in await self.memory.partitions()
            if (user is None or p.user == user) and (agent is None or p.agent == agent)
        ]
        packs = list(self.packs)
        if registered:
            packs += await self.registered_packs(skip=[p.name for p in self.packs])
        rows: list[StatusRow] = []
        for pack in packs:
            rules = [r for r in pack.all_rules if rule_ids is None or r.id in rule_ids]
            if not rules:
                continue
            facts = _Facts()
            facts.states = await self.schedule.runs(pack.name)
            counted = [r for r in rules if r.id not in pack.sweeps]
            await self._pending(pack, partitions, facts, counted, now_us)
            await self._spans(pack, partitions, facts, [r for r in pack.span_rules if r in rules])
            for rule in rules:
                if not partitions:  # a rule with no partition yet (none that was asked for)
                    if user is None and agent is None:
                        rows.append(
                            StatusRow(pack.name, rule.id, rule.cadence, None, 0, None, None, False)
                        )
                    continue
                filt = pack.sweeps.get(rule.id)
                if filt is not None:
                    rows += await self._sweep_rows(pack, rule, filt, partitions, facts, now)
                    continue
                for part, partition in enumerate(partitions):
                    rows.append(await self._status_row(pack, rule, partition, part, facts, now_us))
        return rows

    async def _sweep_rows(
        self,
        pack: _Pack,
        rule: CadenceRule,
        filt: SweepFilter,
        partitions: Sequence[Partition],
        facts: _Facts,
        now: datetime,
    ) -> list[StatusRow]:
        """A sweep's rows: per partition its candidates at its latest fire time, due (as
        a tick would run it) when it has some and that fire is not applied yet; the next
        run is that fire while due, else the one after ``now``."""
        fire = fire_time(rule, now)
        found = await self.facts.sweep_candidates(
            filt.sql, filt.params(to_us(fire)), archived=filt.archived
        )
        after = to_utc(next_fire(rule.cadence, now, rule.id))
        rows: list[StatusRow] = []
        for partition in partitions:
            state = facts.states.get((rule.id, partition.key))
            last = (
                None if state is None or state.last_run_us is None else from_us(state.last_run_us)
            )
            candidates = found.get(partition, 0)
            due = candidates > 0 and not fired(state, fire)
            rows.append(
                StatusRow(
                    pack.name,
                    rule.id,
                    rule.cadence,
                    partition,
                    candidates,
                    last,
                    fire if due else after,
                    due,
                    sweep=True,
                )
            )
        return rows

    async def _status_row(
        self,
        pack: _Pack,
        rule: CadenceRule,
        partition: Partition,
        part: int,
        facts: _Facts,
        now_us: int,
    ) -> StatusRow:
        state = facts.states.get((rule.id, partition.key))
        pending = facts.pending.get((rule.id, part), 0)
        later = facts.later.get((rule.id, part), 0)
        last = None if state is None or state.last_run_us is None else from_us(state.last_run_us)
        nxt: int | None = None
        if rule.cadence.cron is not None:
            since = (
                state.since_us
                if state is not None
                else (await self._anchors_us(pack, [(rule, partition)], now_us))[0][2]
            )
            nxt = _next_fire_us(rule.cadence, since, rule.id)
            counts: list[tuple[int, int, int]] = []
            nexts = [(rule.index, 0, nxt)]
        else:
            counts, nexts = [(rule.index, 0, pending - later)], []
        span = facts.spans.get((rule.index, part))
        spans = [] if span is None else [(rule.index, 0, *span)]
        if span is not None:
            nxt = span_due_us(rule.cadence, *span)
        due = bool(pack.program.due(now_us, counts, nexts, spans))
        return StatusRow(
            pack.name,
            rule.id,
            rule.cadence,
            partition,
            pending,
            last,
            None if nxt is None else from_us(nxt),
            due,
            later,
        )


def _token_of(state: RunState | None) -> str:
    return "" if state is None else state.token


def merge_sweep(report: ConsolidationReport, pack: str, outcome: SweepOutcome) -> None:
    """Add what a sweep call did to ``report`` (a swept partition's fire counts as due)."""
    report.passes += outcome.passes
    report.due += [Due(pack, rule_id, p) for rule_id, p in outcome.swept]
    report.conflicts += [Due(pack, rule_id, p) for rule_id, p in outcome.conflicts]
    report.held += [Due(pack, rule_id, p) for rule_id, p in outcome.held]


def _same_rules(
    due: dict[Partition, list[CadenceRule]],
) -> list[tuple[list[CadenceRule], list[Partition]]]:
    """Runs of consecutive partitions due for the same rules (their order kept)."""
    groups: list[tuple[list[CadenceRule], list[Partition]]] = []
    for partition, rules in due.items():
        ids = [r.id for r in rules]
        if groups and [r.id for r in groups[-1][0]] == ids:
            groups[-1][1].append(partition)
        else:
            groups.append((rules, [partition]))
    return groups
