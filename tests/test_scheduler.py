"""Cadences with an injected clock: every N (per partition), every 1, cron times, catch-up,
time zones and DST as croniter defines them, restart durability, leases, compare-and-set."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from backends import Backend, NewLocation
from croniter import croniter
from e2e_helpers import episode, spo

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.schedule.scheduler import ConsolidationReport, ScheduleProgram
from stargraph_mem.errors import PassConflictError, ScheduleError, StoreError
from stargraph_mem.stores.fact import WatermarkAdvance
from stargraph_mem.stores.models import Cadence, Episode
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite.schedule import RuleRun, SQLiteScheduleStore
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore

ALICE = Partition("alice", "rag")
BOB = Partition("bob", "rag")


def pack_text(cadence: str, name: str = "sched") -> str:
    """A one-rule pack adding one fact per episode, with the given cadence (YAML flow)."""
    return f"""\
ir_version: 1
pack: {name}
version: "1.0.0"
fields: {{subject: string, predicate: string, object: string}}
defaults: {{cadence: {cadence}, confidence: 0.8}}
rules:
  - id: add_all
    when:
      - episode: {{subject: {{bind: s}}, predicate: {{bind: p}}, object: {{bind: o}}}}
    emit: {{kind: add, subject: "{{s}}", predicate: "{{p}}", object: "{{o}}"}}
"""


class Clock:
    """A settable clock for the scheduler."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def opened(db: str, cadence: str, clock: Callable[[], datetime], **kw: object) -> Consolidator:
    return Consolidator(db, [compile_text(pack_text(cadence))], clock=clock, **kw)  # type: ignore[arg-type]


def obs(n: int, user: str = "alice", at: datetime | None = None) -> Episode:
    return episode(f"{user}-{n}", n, user=user, at=at, **spo(f"{user}{n}", "p", "o"))


def fired(report: ConsolidationReport) -> list[tuple[str, int]]:
    """(user, episodes) of every applied pass."""
    return [(p.partition.user, p.episodes) for p in report.passes if p.applied]


# --- every N / every 1 -------------------------------------------------------------------


async def test_every_100_fires_at_exactly_the_100th_episode_per_partition(
    new_location: NewLocation,
) -> None:
    clock = Clock(datetime(2026, 5, 1, tzinfo=UTC))
    async with opened(new_location(), "{every: 100}", clock) as mem:
        for n in range(1, 100):
            assert fired(await mem.record(obs(n))) == []
            if n <= 60:
                assert fired(await mem.record(obs(n, "bob"))) == []
        assert fired(await mem.tick()) == []
        assert await mem.facts() == []
        report = await mem.record(obs(100))
        assert fired(report) == [("alice", 100)]
        assert report.fired == {"sched/add_all": [ALICE]}
        assert report.counts == {"add": 100, "update": 0, "delete": 0, "noop": 0}
        assert len(await mem.facts(user="alice")) == 100
        assert await mem.facts(user="bob") == []
        for n in range(101, 200):
            assert fired(await mem.record(obs(n))) == []
        for n in range(61, 100):
            assert fired(await mem.record(obs(n, "bob"))) == []
        assert fired(await mem.record(obs(100, "bob"))) == [("bob", 100)]
        assert fired(await mem.record(obs(200))) == [("alice", 100)]


async def test_every_n_counts_episodes_put_by_other_means_at_the_next_tick(
    new_location: NewLocation,
) -> None:
    clock = Clock(datetime(2026, 5, 1, tzinfo=UTC))
    async with opened(new_location(), "{every: 3}", clock) as mem:
        await mem.memory.put_many([obs(1), obs(2)])
        assert fired(await mem.tick()) == []
        await mem.memory.put_many([obs(3), obs(4)])
        assert fired(await mem.tick()) == [("alice", 4)]
        assert fired(await mem.tick()) == []


async def test_every_1_fires_on_each_put(new_location: NewLocation) -> None:
    clock = Clock(datetime(2026, 5, 1, tzinfo=UTC))
    async with opened(new_location(), "{every: 1}", clock) as mem:
        for n in range(1, 6):
            report = await mem.record(obs(n, "alice" if n % 2 else "bob"))
            assert fired(report) == [("alice" if n % 2 else "bob", 1)]
            assert report.passes[0].first_seq == report.passes[0].last_seq == n
            assert len(await mem.facts()) == n
        again = await mem.record(obs(5))  # an identical re-put stores nothing new
        assert fired(again) == []


async def run_counts(mem: Consolidator, pack: str = "sched") -> dict[str, int]:
    return {key: state.runs for (_, key), state in (await mem.schedule_store.runs(pack)).items()}


async def test_records_from_two_schedulers_take_turns_without_conflicts(
    new_location: NewLocation,
) -> None:
    """Each scheduler keeps the run tokens its last record stored and decides the next
    record without reading them; the other scheduler's records change them, which the
    apply notices: the record decides again from the stores, and the report shows no
    conflict. Every episode is consolidated once, and every run is counted."""
    clock = Clock(datetime(2026, 5, 1, tzinfo=UTC))
    where = new_location()
    async with opened(where, "{every: 1}", clock) as a, opened(where, "{every: 1}", clock) as b:
        for n in range(1, 9):
            mem = a if n % 3 else b  # a, a, b, a, a, b, a, a
            report = await mem.record(obs(n))
            assert fired(report) == [("alice", 1)]
            assert report.conflicts == []
            assert [d.rule_id for d in report.due] == ["add_all"]
        subjects = sorted(f.subject for f in await a.facts())
        assert subjects == sorted(f"alice{n}" for n in range(1, 9))
        assert await run_counts(a) == {ALICE.key: 8}


async def test_a_record_after_another_run_consumed_the_pending_episodes(
    new_location: NewLocation,
) -> None:
    """Between two records of one scheduler, another process consolidates the partition
    (watermarks and run records move: a consolidate records its run as well): the record's
    pass is decided again from the stores and consumes only the new episode; each of the
    three runs is counted."""
    clock = Clock(datetime(2026, 5, 1, tzinfo=UTC))
    where = new_location()
    async with opened(where, "{every: 1}", clock) as a, opened(where, "{every: 1}", clock) as b:
        assert fired(await a.record(obs(1))) == [("alice", 1)]
        await b.memory.put_many([obs(2), obs(3)])
        assert [p.episodes for p in (await b.consolidate(now=clock())).passes] == [2]
        report = await a.record(obs(4))
        assert fired(report) == [("alice", 1)]
        assert report.passes[0].first_seq == report.passes[0].last_seq == 4
        assert report.conflicts == []
        assert len(await a.facts()) == 4
        assert await run_counts(a) == {ALICE.key: 3}


async def test_a_cron_clock_starts_at_the_earliest_episode_whatever_was_stored_first(
    new_location: NewLocation,
) -> None:
    """A partition's first episode stored may be stamped after the tick: its cron clock
    still starts at the earliest episode's time, so the fire due at the tick runs (it
    started at the tick, and skipped the fire, when the first one stored was the later)."""
    night = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
    late = obs(1, at=night + timedelta(hours=1))
    early = obs(2, at=night - timedelta(hours=18))
    clock = Clock(night)
    async with opened(new_location(), '{cron: "0 3 * * *"}', clock) as mem:
        await mem.memory.put_many([late, early])
        assert fired(await mem.tick()) == [("alice", 1)]
        assert [f.subject for f in await mem.facts()] == ["alice2"]
        clock.at = night + timedelta(days=1)
        assert fired(await mem.tick()) == [("alice", 1)]
        assert sorted(f.subject for f in await mem.facts()) == ["alice1", "alice2"]


async def test_cron_rules_do_not_fire_on_record(new_location: NewLocation) -> None:
    clock = Clock(datetime(2026, 5, 1, 10, tzinfo=UTC))
    async with opened(new_location(), '{cron: "* * * * *"}', clock) as mem:
        assert fired(await mem.record(obs(1))) == []
        assert fired(await mem.tick(clock.at + timedelta(minutes=1))) == [("alice", 1)]


# --- cron ------------------------------------------------------------------------------


async def test_cron_fires_at_the_declared_times(new_location: NewLocation) -> None:
    day = datetime(2026, 5, 1, tzinfo=UTC)
    clock = Clock(day + timedelta(hours=10))
    async with opened(new_location(), '{cron: "0 3 * * *"}', clock) as mem:
        await mem.record(obs(1, at=clock.at))
        assert fired(await mem.tick()) == []
        next_day = day + timedelta(days=1)
        assert fired(await mem.tick(next_day + timedelta(hours=2, minutes=59, seconds=59))) == []
        report = await mem.tick(next_day + timedelta(hours=3))
        assert fired(report) == [("alice", 1)]
        assert report.passes[0].now == next_day + timedelta(hours=3)
        assert fired(await mem.tick(next_day + timedelta(hours=3, seconds=30))) == []
        await mem.record(obs(2, at=next_day + timedelta(hours=4)))
        assert fired(await mem.tick(next_day + timedelta(hours=23))) == []
        assert fired(await mem.tick(next_day + timedelta(days=1, hours=3))) == [("alice", 1)]


async def test_cron_catches_up_with_one_pass_after_downtime(new_location: NewLocation) -> None:
    day = datetime(2026, 5, 1, tzinfo=UTC)
    clock = Clock(day + timedelta(hours=1))
    async with opened(new_location(), '{cron: "0 * * * *"}', clock) as mem:
        await mem.record(obs(1, at=clock.at))
        await mem.tick()
        assert fired(await mem.tick(day + timedelta(hours=2))) == [("alice", 1)]
        for n in range(2, 5):
            await mem.record(obs(n, at=day + timedelta(hours=2, minutes=n)))
        # down from 02:00 to 09:30: seven hourly slots missed, one pass catches up
        report = await mem.tick(day + timedelta(hours=9, minutes=30))
        assert fired(report) == [("alice", 3)]
        assert fired(await mem.tick(day + timedelta(hours=9, minutes=31))) == []
        assert fired(await mem.tick(day + timedelta(hours=9, minutes=59))) == []
        assert fired(await mem.tick(day + timedelta(hours=10))) == [("alice", 0)]
        rows = {r.rule_id: r for r in await mem.status(day + timedelta(hours=10, minutes=5))}
        assert rows["add_all"].last_run == day + timedelta(hours=10)
        assert rows["add_all"].next_run == day + timedelta(hours=11)


async def test_a_cron_clock_starts_at_the_first_unconsolidated_episode(
    new_location: NewLocation,
) -> None:
    """Episodes put before the scheduler ever ran fire at the first slot after them."""
    day = datetime(2026, 5, 1, tzinfo=UTC)
    clock = Clock(day + timedelta(days=3))
    async with opened(new_location(), '{cron: "0 3 * * *"}', clock) as mem:
        await mem.memory.put_many([obs(1, at=day + timedelta(hours=20))])
        assert fired(await mem.tick()) == [("alice", 1)]
        assert fired(await mem.tick(clock.at + timedelta(hours=1))) == []


async def test_cron_honours_the_rule_time_zone(new_location: NewLocation) -> None:
    # 09:00 in Tokyo (UTC+9, no DST) is 00:00 UTC
    clock = Clock(datetime(2026, 5, 1, 12, tzinfo=UTC))
    cadence = '{cron: "0 9 * * *", tz: "Asia/Tokyo"}'
    async with opened(new_location(), cadence, clock) as mem:
        await mem.record(obs(1, at=clock.at))
        assert fired(await mem.tick()) == []
        assert fired(await mem.tick(datetime(2026, 5, 1, 23, 59, 59, tzinfo=UTC))) == []
        assert fired(await mem.tick(datetime(2026, 5, 2, 0, 0, tzinfo=UTC))) == [("alice", 1)]


def croniter_times(cron: str, tz: str, start: datetime, n: int) -> list[datetime]:
    it = croniter(cron, start.astimezone(ZoneInfo(tz)))
    return [it.get_next(datetime).astimezone(UTC) for _ in range(n)]


async def fire_times(mem: Consolidator, probes: list[datetime]) -> list[datetime]:
    """Tick at each probe time; the probe times at which a pass ran."""
    out = []
    for at in probes:
        if (await mem.tick(at)).passes:
            out.append(at)
    return out


@pytest.mark.parametrize(
    ("cron", "start", "expected"),
    [
        # spring forward: 02:30 does not exist on 2026-03-08 in New York; croniter fires
        # at 03:00 EDT (07:00 UTC) that day, then 02:30 EDT (06:30 UTC)
        (
            "30 2 * * *",
            datetime(2026, 3, 7, 12, tzinfo=UTC),
            [
                datetime(2026, 3, 8, 7, 0, tzinfo=UTC),
                datetime(2026, 3, 9, 6, 30, tzinfo=UTC),
            ],
        ),
        # fall back: 01:30 happens twice on 2026-11-01; croniter fires at both
        (
            "30 1 * * *",
            datetime(2026, 10, 31, 12, tzinfo=UTC),
            [
                datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
                datetime(2026, 11, 1, 6, 30, tzinfo=UTC),
                datetime(2026, 11, 2, 6, 30, tzinfo=UTC),
            ],
        ),
    ],
)
async def test_dst_transitions_follow_croniter(
    new_location: NewLocation, cron: str, start: datetime, expected: list[datetime]
) -> None:
    tz = "America/New_York"
    assert croniter_times(cron, tz, start, len(expected)) == expected
    clock = Clock(start)
    async with opened(new_location(), f'{{cron: "{cron}", tz: "{tz}"}}', clock) as mem:
        await mem.record(obs(1, at=start))
        await mem.tick()
        probes = sorted(
            {t + timedelta(minutes=d) for t in expected for d in (-30, -1, 0, 1)}
            | {start + timedelta(hours=h) for h in range(0, 60, 2)}
        )
        assert await fire_times(mem, probes) == expected


async def test_an_impossible_cron_date_names_the_rule(new_location: NewLocation) -> None:
    clock = Clock(datetime(2026, 5, 1, tzinfo=UTC))
    async with opened(new_location(), '{cron: "0 0 31 2 *"}', clock) as mem:
        await mem.record(obs(1))
        with pytest.raises(ScheduleError, match="rule 'add_all': cron '0 0 31 2 \\*'"):
            await mem.tick()


# --- durability ----------------------------------------------------------------------


async def test_pending_counts_and_last_runs_survive_reopening(new_location: NewLocation) -> None:
    db = new_location()
    clock = Clock(datetime(2026, 5, 1, 10, tzinfo=UTC))
    async with opened(db, "{every: 10}", clock) as mem:
        for n in range(1, 8):
            await mem.record(obs(n))
    async with opened(db, "{every: 10}", clock) as mem:
        assert [r.pending for r in await mem.status()] == [7]
        assert fired(await mem.record(obs(8))) == []
        assert fired(await mem.record(obs(9))) == []
        assert fired(await mem.record(obs(10))) == [("alice", 10)]
    async with opened(db, "{every: 10}", clock) as mem:
        (row,) = await mem.status()
        assert (row.pending, row.last_run, row.due) == (0, clock.at, False)


# --- two schedulers ------------------------------------------------------------------


async def test_a_partition_leased_elsewhere_waits_for_its_lease(new_location: NewLocation) -> None:
    """Schedulers lease partitions, not the database: b consolidates what a does not hold,
    and a partition a holds (as if a died mid-pass on another machine) once it expires."""
    db = new_location()
    clock = Clock(datetime(2026, 5, 1, tzinfo=UTC))
    bob = Partition("bob", "rag")
    a = opened(db, "{every: 1}", clock, holder="a", lease_seconds=0.5)
    b = opened(db, "{every: 1}", clock, holder="b", lease_seconds=0.5)
    async with a, b:
        await a.memory.put_many([obs(1), obs(2, user="bob")])
        assert await a.fact_store.claim_partitions([ALICE, bob], "a", 0.5) == [ALICE, bob]
        await a.fact_store.release_partitions([bob], "a")
        first = await b.tick()
        assert fired(first) == [("bob", 1)]
        assert [(d.partition.user, d.rule_id) for d in first.held] == [("alice", "add_all")]
        assert first.ran and first.lease_holder is None
        await asyncio.sleep(0.6)
        second = await b.tick()
        assert (fired(second), second.held) == ([("alice", 1)], [])
        assert await a.fact_store.claim_partitions([ALICE, bob], "a", 5) == [ALICE, bob]


async def test_a_pass_decided_on_stale_run_state_rolls_back(backend: Backend) -> None:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    runs, facts = backend.schedule, backend.facts
    advance = [WatermarkAdvance(pack="p", rule_id="r", partition=ALICE, last_seq=3)]
    first = RuleRun("p", "r", ALICE, at, token="t1", expect="")
    await facts.apply_deltas([], watermarks=advance, runs=[first])
    again = RuleRun("p", "r", ALICE, at + timedelta(seconds=1), token="t1", expect="")
    await facts.apply_deltas([], runs=[again])  # the same run's next pass: fine
    stale = RuleRun("p", "r", ALICE, at, token="t2", expect="")
    later = [WatermarkAdvance(pack="p", rule_id="r", partition=ALICE, last_seq=9)]
    with pytest.raises(PassConflictError, match="applied by another scheduler first"):
        await facts.apply_deltas([], watermarks=later, runs=[stale])
    assert await facts.watermark("p", "r", ALICE) == 3
    state = (await runs.runs("p"))[("r", ALICE.key)]
    assert (state.token, state.runs, state.last_run_us) == ("t1", 1, 1777593601000000)
    fresh = RuleRun("p", "r", ALICE, at, token="t3", expect="t1")
    await facts.apply_deltas([], watermarks=later, runs=[fresh])
    assert await facts.watermark("p", "r", ALICE) == 9
    assert (await runs.runs("p"))[("r", ALICE.key)].runs == 2


async def test_a_conflict_among_several_runs_names_its_rule(backend: Backend) -> None:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    runs, facts = backend.schedule, backend.facts
    await facts.apply_deltas([], runs=[RuleRun("p", r, ALICE, at, token="t1") for r in "abc"])
    other = [RuleRun("p", "b", ALICE, at, token="t9", expect="t1")]
    await facts.apply_deltas([], runs=other)  # another scheduler ran b
    stale = [RuleRun("p", r, ALICE, at, token="t2", expect="t1") for r in "abc"]
    with pytest.raises(PassConflictError, match="rule 'b' of pack 'p'") as caught:
        await facts.apply_deltas([], runs=stale)
    assert caught.value.context["rule_id"] == "b"
    tokens = {rule: state.token for (rule, _), state in (await runs.runs("p")).items()}
    assert tokens == {"a": "t1", "b": "t9", "c": "t1"}  # the whole pass rolled back


async def test_scheduler_tables_made_in_a_rolled_back_pass_are_made_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "m.db"
    at = datetime(2026, 5, 1, tzinfo=UTC)
    bad = [WatermarkAdvance(pack="p", rule_id="r", partition=ALICE, last_seq=2)]
    async with SQLiteFactStore(db) as facts:
        await facts.apply_deltas(
            [], watermarks=[WatermarkAdvance(pack="p", rule_id="r", partition=ALICE, last_seq=5)]
        )
        with pytest.raises(StoreError, match="backwards"):
            await facts.apply_deltas([], watermarks=bad, runs=[RuleRun("p", "r", ALICE, at, "t1")])
        await facts.apply_deltas([], runs=[RuleRun("p", "r", ALICE, at, "t1")])
    async with SQLiteScheduleStore(db) as runs:
        assert (await runs.runs("p"))[("r", ALICE.key)].token == "t1"


def test_cadence_model_rejects_bad_cron_and_zone() -> None:
    with pytest.raises(ValueError, match="invalid cron expression"):
        Cadence(cron="61 * * * *")
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Base'"):
        Cadence(cron="0 3 * * *", tz="Mars/Base")


ALL_CADENCES = """\
ir_version: 1
pack: cadences
version: "1"
fields: {subject: string}
rules:
  - id: every_one
    cadence: {every: 1}
    when: [{episode: {subject: {bind: s}}}]
    emit: {kind: noop, reason: "{s}"}
  - id: every_three
    cadence: {every: 3}
    when: [{episode: {subject: {bind: s}}}]
    emit: {kind: noop, reason: "{s}"}
  - id: or_after
    cadence: {every: 5, or_after: {hours: 1}}
    when: [{episode: {subject: {bind: s}}}]
    emit: {kind: noop, reason: "{s}"}
  - id: idle
    cadence: {idle: {minutes: 30}}
    when: [{episode: {subject: {bind: s}}}]
    emit: {kind: noop, reason: "{s}"}
  - id: nightly
    cadence: {cron: "0 3 * * *"}
    when: [{episode: {subject: {bind: s}}}]
    emit: {kind: noop, reason: "{s}"}
"""


def test_a_count_only_question_has_one_answer_whatever_the_clock() -> None:
    """The schedule program keeps its answers to questions of counts alone: sound only if
    no cadence's rule reads the clock without a clock or span fact. Asked of every
    cadence kind at far apart times, directly (nothing kept), the answers agree."""
    compiled = compile_text(ALL_CADENCES)
    program = ScheduleProgram(compiled.name, compiled.schedule)
    indexes = [r.index for r in compiled.rules]
    times = [0, 10**15, 2 * 10**15, 4 * 10**15]
    for pending in range(7):
        counts = [(index, part, pending) for index in indexes for part in (0, 1)]
        answers = {tuple(program._run(now, counts, (), ())) for now in times}
        assert len(answers) == 1
        (answer,) = answers
        assert program.due(times[0], counts) == list(answer)
        assert program.due(times[-1], counts) == list(answer)  # kept, same
        due_rules = {compiled.by_index()[i].id for i, _ in answer}
        expected = {"every_one"} if pending >= 1 else set()
        expected |= {"every_three"} if pending >= 3 else set()
        expected |= {"or_after"} if pending >= 5 else set()
        assert due_rules == expected


def test_partitions_in_the_same_state_are_asked_once_with_the_same_answer() -> None:
    """The schedule program is asked once per distinct partition state (every defrule
    joins one partition's facts): over many partitions whose counts, clocks and spans
    repeat, the answer is the one each partition gets asked alone."""
    compiled = compile_text(ALL_CADENCES)
    program = ScheduleProgram(compiled.name, compiled.schedule)
    rules = {r.id: r.index for r in compiled.rules}
    hour = 3_600_000_000
    now = 100 * hour
    counts, nexts, spans = [], [], []
    for part in range(60):
        state = part % 12  # five partitions in each of twelve states
        pending = state % 7 if state != 11 else 0  # 11: nothing due
        for rule in ("every_one", "every_three", "or_after"):
            counts.append((rules[rule], part, pending))
        nexts.append((rules["nightly"], part, now + hour * (state % 3 - 1)))
        if state % 4 and state != 11:
            first, last = now - hour * (state % 4), now - hour * (state % 2)
            spans += [(rules["or_after"], part, first, last), (rules["idle"], part, first, last)]
    runs: list[int] = []
    ask = program._run

    def counted(*args: Any) -> list[tuple[int, int]]:
        runs.append(1)
        return ask(*args)

    program._run = counted  # type: ignore[method-assign,assignment]
    asked = program.due(now, counts, nexts, spans)
    program._run = ask  # type: ignore[method-assign]
    assert len(runs) == 1
    alone = sorted(
        (rule, part)
        for part in range(60)
        for rule, _ in program._run(
            now,
            [(r, 0, n) for r, p, n in counts if p == part],
            [(r, 0, at) for r, p, at in nexts if p == part],
            [(r, 0, f, la) for r, p, f, la in spans if p == part],
        )
    )
    assert asked == alone
    assert {rule for rule, _ in asked} == set(rules.values())  # every kind was due somewhere
    assert len({part for _, part in asked}) < 60  # and some partitions were not
