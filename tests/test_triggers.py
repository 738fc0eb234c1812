"""The ``idle`` and ``every … or_after`` cadences with a stepped clock, on both backends:
when they fire, once per quiet spell, whichever comes first, concurrent ticks, status."""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from backends import NewLocation
from readme_helpers import check_transcript
from test_scheduler import ALICE, Clock, fired, obs, opened
from test_schema_agreement import yaml_schema_errors
from typer.testing import CliRunner

from stargraph_mem.authoring.lint import lint_analysis
from stargraph_mem.cli import app
from stargraph_mem.compiler.pack import compile_text, validate_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.schedule.scheduler import ConsolidationReport
from stargraph_mem.errors import IRError
from stargraph_mem.ir.checks import check_or_raise
from stargraph_mem.ir.loader import load_pack_text
from stargraph_mem.stores.models import Cadence, ConsolidationRule
from stargraph_mem.stores.postgres.schedule import PostgresScheduleStore
from stargraph_mem.stores.sqlite.schedule import SQLiteScheduleStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

ROOT = Path(__file__).resolve().parents[1]

T0 = datetime(2026, 5, 1, 9, tzinfo=UTC)


async def runs_recorded(mem: Consolidator) -> int:
    """Passes recorded in the memory's run records (both backends' stores count them)."""
    store = mem.schedule_store
    assert isinstance(store, SQLiteScheduleStore | PostgresScheduleStore)
    return await store.total_runs()


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


# --- idle --------------------------------------------------------------------------------


async def test_idle_fires_after_the_quiet_spell_and_not_before(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{idle: 30m}", clock) as mem:
        for n in range(1, 4):
            report = await mem.record(obs(n, at=at(n)))
            assert fired(report) == [] and report.due == []
        assert fired(await mem.tick(at(3))) == []
        assert fired(await mem.tick(at(32))) == []
        assert fired(await mem.tick(at(33) - timedelta(microseconds=1))) == []
        assert await mem.facts() == []
        report = await mem.tick(at(33))
        assert fired(report) == [("alice", 3)]
        assert report.fired == {"sched/add_all": [ALICE]}
        assert len(await mem.facts()) == 3


async def test_a_new_episode_during_the_wait_postpones_idle(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{idle: 30m}", clock) as mem:
        await mem.record(obs(1, at=at(0)))
        assert fired(await mem.tick(at(20))) == []
        await mem.record(obs(2, at=at(20)))
        assert fired(await mem.tick(at(30))) == []  # 30 min after the first, 10 after the last
        assert fired(await mem.tick(at(49))) == []
        assert fired(await mem.tick(at(50))) == [("alice", 2)]


async def test_idle_fires_once_per_quiet_spell(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{idle: 1h}", clock) as mem:
        await mem.record(obs(1, at=at(0)))
        await mem.record(obs(1, "bob", at=at(30)))
        assert fired(await mem.tick(at(60))) == [("alice", 1)]
        for minutes in (61, 89, 120, 600):  # alice stays quiet; bob's spell ends at 90
            expected = [("bob", 1)] if minutes == 120 else []
            assert fired(await mem.tick(at(minutes))) == expected
        await mem.record(obs(2, at=at(601)))  # a new spell starts
        assert fired(await mem.tick(at(660))) == []
        assert fired(await mem.tick(at(661))) == [("alice", 1)]
        assert fired(await mem.tick(at(2000))) == []
        assert len(await mem.facts()) == 3


async def test_idle_state_is_durable_across_processes(new_location: NewLocation) -> None:
    db = new_location()
    clock = Clock(at(0))
    async with opened(db, "{idle: 10m}", clock) as mem:
        await mem.record(obs(1, at=at(0)))
        assert fired(await mem.tick(at(9))) == []
    async with opened(db, "{idle: 10m}", clock) as mem:
        assert fired(await mem.tick(at(10))) == [("alice", 1)]
    async with opened(db, "{idle: 10m}", clock) as mem:
        assert fired(await mem.tick(at(100))) == []


async def test_record_never_consolidates_an_idle_rule(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{idle: 5m}", clock) as mem:
        await mem.record(obs(1, at=at(0)))
        clock.at = at(60)  # long quiet: still, a put only starts a new spell
        report = await mem.record(obs(2, at=at(1)))
        assert (fired(report), report.due) == ([], [])
        assert fired(await mem.tick(at(60))) == [("alice", 2)]


async def test_consolidate_ends_the_quiet_spell_it_consumed(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{idle: 30m}", clock) as mem:
        await mem.record(obs(1, at=at(0)))
        forced = await mem.consolidate(now=at(5))  # whatever the cadence
        assert fired(forced) == [("alice", 1)]
        assert fired(await mem.tick(at(60))) == []
        await mem.record(obs(2, at=at(61)))
        assert fired(await mem.tick(at(91))) == [("alice", 1)]


async def test_two_concurrent_ticks_fire_an_idle_spell_once(new_location: NewLocation) -> None:
    db = new_location()
    clock = Clock(at(0))
    a = opened(db, "{idle: 30m}", clock, holder="a")
    b = opened(db, "{idle: 30m}", clock, holder="b")
    async with a, b:
        await a.memory.put_many([obs(n, u, at=at(n)) for n in (1, 2) for u in ("alice", "bob")])
        reports: list[ConsolidationReport] = []
        for _ in range(3):
            reports += await asyncio.gather(a.tick(at(40)), b.tick(at(40)))
        assert sorted(run for report in reports for run in fired(report)) == [
            ("alice", 2),
            ("bob", 2),
        ]
        assert len(await a.facts()) == 4
        assert await runs_recorded(a) == 2


# --- every N or after T ----------------------------------------------------------------------


async def test_or_after_fires_at_n_episodes_first(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{every: 3, or_after: 1h}", clock) as mem:
        assert fired(await mem.record(obs(1, at=at(0)))) == []
        clock.at = at(5)
        assert fired(await mem.record(obs(2, at=at(5)))) == []
        clock.at = at(10)
        assert fired(await mem.record(obs(3, at=at(10)))) == [("alice", 3)]
        assert fired(await mem.tick(at(60))) == []  # nothing pending: no timer


async def test_or_after_fires_after_t_when_fewer_than_n_arrive(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{every: 3, or_after: 1h}", clock) as mem:
        await mem.record(obs(1, at=at(0)))
        clock.at = at(50)
        await mem.record(obs(2, at=at(50)))  # later episodes do not restart the timer
        assert fired(await mem.tick(at(59))) == []
        assert fired(await mem.tick(at(60))) == [("alice", 2)]
        clock.at = at(70)
        await mem.record(obs(3, at=at(70)))  # the next batch times from its own first episode
        assert fired(await mem.tick(at(129))) == []
        assert fired(await mem.tick(at(130))) == [("alice", 1)]


async def test_or_after_timer_fires_on_record_once_t_passed(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{every: 10, or_after: 30m}", clock) as mem:
        await mem.record(obs(1, at=at(0)))
        clock.at = at(45)
        report = await mem.record(obs(2, at=at(45)))
        assert fired(report) == [("alice", 2)]


async def test_or_after_per_partition(new_location: NewLocation) -> None:
    clock = Clock(at(0))
    async with opened(new_location(), "{every: 2, or_after: 10m}", clock) as mem:
        await mem.memory.put_many(
            [obs(1, at=at(0)), obs(1, "bob", at=at(5)), obs(2, "bob", at=at(6))]
        )
        assert fired(await mem.tick(at(6))) == [("bob", 2)]
        assert fired(await mem.tick(at(10))) == [("alice", 1)]
        assert fired(await mem.tick(at(30))) == []
        assert {f.user for f in await mem.facts()} == {"alice", "bob"}


# --- CLI: the README's worked example, verbatim -------------------------------------------


def test_readme_idle_example_runs_verbatim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "idle_dedup.yaml", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    check_transcript("A partition going quiet, step by step", 7)


# --- durations and combinations: positioned errors ----------------------------------------

BAD_CADENCES = [
    (
        "{idle: 0m}",
        "8:21: rules[0].cadence.idle: duration '0m' is zero: a duration must be positive",
    ),
    (
        "{idle: -90s}",
        "8:21: rules[0].cadence.idle: duration '-90s' is negative: a duration must be positive",
    ),
    (
        "{idle: 30 minutes}",
        "8:21: rules[0].cadence.idle: invalid duration '30 minutes': write a number and a unit "
        "per part, in the order d, h, m, s, such as 30m, 2h, 1d, 90s or 1h30m "
        "(or {minutes: 30})",
    ),
    (
        "{idle: 30m1h}",
        "8:21: rules[0].cadence.idle: invalid duration '30m1h': write a number and a unit "
        "per part, in the order d, h, m, s, such as 30m, 2h, 1d, 90s or 1h30m "
        "(or {minutes: 30})",
    ),
    (
        "{idle: 30}",
        "8:21: rules[0].cadence.idle: expected a duration such as 30m, 2h, 1d, 90s or 1h30m "
        "(or {minutes: 30}), got 30",
    ),
    (
        "{idle: 40000d}",
        "8:21: rules[0].cadence.idle: duration '40000d' is longer than 100 years",
    ),
    (
        "{idle: {minutes: -5}}",
        "8:15: rules[0].cadence.idle: duration part 'minutes' is negative: "
        "a duration must be positive",
    ),
    (
        "{idle: {hours: 2, minutes: -30}}",
        "8:15: rules[0].cadence.idle: duration part 'minutes' is negative: "
        "a duration must be positive",
    ),
    (
        "{idle: 1e400s}",
        "8:21: rules[0].cadence.idle: invalid duration '1e400s': write a number and a unit "
        "per part, in the order d, h, m, s, such as 30m, 2h, 1d, 90s or 1h30m "
        "(or {minutes: 30})",
    ),
    (
        "{idle: 99999999999999999999999d}",
        "8:21: rules[0].cadence.idle: duration '99999999999999999999999d' is longer than 100 years",
    ),
    (
        "{idle: {weeks: 1}}",
        "8:15: rules[0].cadence.idle: unknown duration part 'weeks' "
        "(use days, hours, minutes, seconds, or text such as 1h30m)",
    ),
    (
        "{every: 5, or_after: 0s}",
        "8:35: rules[0].cadence.or_after: duration '0s' is zero: a duration must be positive",
    ),
    (
        '{idle: 30m, cron: "0 3 * * *"}',
        "8:5: rules[0].cadence: cadence needs exactly one of 'every', 'cron' or 'idle', "
        "not 'cron' and 'idle'",
    ),
    (
        "{every: 5, idle: 30m}",
        "8:5: rules[0].cadence: cadence needs exactly one of 'every', 'cron' or 'idle', "
        "not 'every' and 'idle'",
    ),
    (
        "{or_after: 1h}",
        "8:5: rules[0].cadence: 'or_after' goes with 'every' ({every: N, or_after: 2h})",
    ),
    (
        "{idle: 30m, or_after: 1h}",
        "8:5: rules[0].cadence: 'or_after' goes with 'every' ({every: N, or_after: 2h}), "
        "not with 'idle'",
    ),
    (
        '{cron: "0 3 * * *", or_after: 1h}',
        "8:5: rules[0].cadence: 'or_after' goes with 'every' ({every: N, or_after: 2h}), "
        "not with 'cron'",
    ),
]


def one_rule_pack(cadence: str) -> str:
    """A valid one-rule pack but for its cadence, written on line 8 at column 5."""
    return PACK_HEAD + f"    cadence: {cadence}\n" + BODY


PACK_HEAD = """\
ir_version: 1
pack: base
version: "1"
fields: {subject: string, predicate: string, object: string}
rules:
  - id: r
    description: one rule
"""
BODY = """\
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""


@pytest.mark.parametrize(("cadence", "expected"), BAD_CADENCES, ids=[c for c, _ in BAD_CADENCES])
def test_bad_durations_and_combinations_are_positioned(cadence: str, expected: str) -> None:
    with pytest.raises(IRError) as info:
        compile_text(one_rule_pack(cadence), "rules/x.yaml")
    assert str(info.value) == f"rules/x.yaml:{expected}"


@pytest.mark.parametrize(
    ("cadence", "idle", "or_after"),
    [
        ("{idle: 90s}", "1m30s", None),
        ("{idle: 1h30m}", "1h30m", None),
        ("{idle: 1.5h}", "1h30m", None),
        ("{idle: 1d}", "1d", None),
        ("{idle: {minutes: 30}}", "30m", None),
        ("{every: 20, or_after: 2h}", None, "2h"),
        ("{every: 20, or_after: {hours: 1, minutes: 30}}", None, "1h30m"),
    ],
)
def test_durations_in_their_written_forms(
    cadence: str, idle: str | None, or_after: str | None, tmp_path: Path
) -> None:
    pack = compile_text(one_rule_pack(cadence))
    written = pack.rules[0].cadence
    shown = written.model_dump()
    assert (shown.get("idle"), shown.get("or_after")) == (idle, or_after)
    path = tmp_path / "p.yaml"
    path.write_text(one_rule_pack(cadence), encoding="utf-8")
    assert validate_file(path) == []
    assert yaml_schema_errors("pack", path) == []


def test_a_pack_without_triggers_keeps_its_dump_and_hash() -> None:
    assert Cadence(every=3).model_dump() == {"every": 3, "cron": None, "tz": "UTC"}
    pack = compile_text(one_rule_pack("{every: 3}"))
    assert "idle" not in pack.manifest["rules"][0]["cadence"]
    assert pack.sha256 == compile_text(one_rule_pack("{every: 3}  # same")).sha256
    idle = compile_text(one_rule_pack("{idle: 30m}"))
    assert idle.sha256 == compile_text(one_rule_pack("{idle: {minutes: 30}}")).sha256


# --- status ------------------------------------------------------------------------------


async def test_status_shows_when_each_partition_is_next_due(new_location: NewLocation) -> None:
    db = new_location()
    clock = Clock(at(0))
    async with opened(db, "{idle: 30m}", clock) as mem:
        await mem.memory.put_many([obs(1, at=at(0)), obs(2, at=at(10)), obs(1, "bob", at=at(5))])
        rows = await mem.status(at(36))
        assert [(r.partition and r.partition.user, r.pending, r.next_run, r.due) for r in rows] == [
            ("alice", 2, at(40), False),
            ("bob", 1, at(35), True),
        ]
        await mem.tick(at(36))
        rows = await mem.status(at(36))
        assert [(r.pending, r.last_run, r.next_run) for r in rows] == [
            (2, None, at(40)),
            (0, at(36), None),
        ]
    async with opened(db, "{every: 5, or_after: 1h}", clock) as mem:
        await mem.memory.put_many([obs(3, at=at(20)), obs(2, "bob", at=at(50))])
        rows = await mem.status(at(50))
        assert [(r.pending, r.next_run, r.due) for r in rows] == [
            (3, at(60), False),  # the earliest pending episode is at minute 0
            (1, at(110), False),
        ]
        assert [r.due for r in await mem.status(at(60))] == [True, False]


def test_status_and_info_cli_show_the_triggers(tmp_path: Path) -> None:
    pack = tmp_path / "batch.yaml"
    pack.write_text(
        one_rule_pack("{every: 3, or_after: 1h}").replace("pack: base", "pack: batch"),
        encoding="utf-8",
    )
    db = str(tmp_path / "m.db")
    put = ["put", "--db", db, "--user", "alice", "--session", "s", "--agent", "rag"]
    meta = ["--meta", "subject=alice", "--meta", "predicate=likes", "--meta", "object=tea"]
    result = CliRunner().invoke(
        app, [*put, "--id", "e1", "--timestamp", "2026-11-01T09:00:00+00:00", *meta, "tea"]
    )
    assert result.exit_code == 0, result.stderr
    run = ["run", "--db", db, "--pack", str(pack), "--once"]
    assert CliRunner().invoke(app, [*run, "--now", "2026-11-01T09:30:00+00:00"]).stdout == (
        "nothing due\n"
    )
    status = CliRunner().invoke(app, ["status", "--db", db, "--now", "2026-11-01T09:30:00+00:00"])
    assert status.stdout.splitlines() == [
        "PACK   RULE  CADENCE              USER   AGENT  PENDING  LAST RUN  NEXT RUN",
        "batch  r     every 3 or after 1h  alice  rag    1        -         "
        "after 2 more or at 2026-11-01T10:00:00+00:00",
    ]
    as_json = CliRunner().invoke(
        app, ["status", "--db", db, "--now", "2026-11-01T10:00:00+00:00", "--json"]
    )
    (row,) = json.loads(as_json.stdout)["rules"]
    assert (row["cadence"], row["next_run"], row["due"]) == (
        {"every": 3, "or_after": "1h"},
        "2026-11-01T10:00:00+00:00",
        True,
    )
    info = CliRunner().invoke(app, ["info", str(pack)])
    assert info.stdout.splitlines()[1:] == [
        "RULE  PRIORITY  CADENCE              EMITS  CLAIM  ENABLED",
        "r     0         every 3 or after 1h  add    yes    yes",
    ]
    fired = CliRunner().invoke(app, [*run, "--now", "2026-11-01T10:00:00+00:00"])
    assert fired.stdout.splitlines()[-1] == "1 pass run"


# --- exactly once ------------------------------------------------------------------------


async def test_two_schedulers_deciding_the_same_idle_spell_apply_it_once(
    new_location: NewLocation,
) -> None:
    """Both decide on the same state; the second pass finds the run token changed and
    rolls back whole: no second set of facts, one recorded run."""
    db = new_location()
    clock = Clock(at(0))
    async with (
        opened(db, "{idle: 30m}", clock, holder="a") as a,
        opened(db, "{idle: 30m}", clock, holder="b") as b,
    ):
        await a.memory.put_many([obs(1, at=at(0)), obs(2, at=at(1))])
        decisions = []
        for mem in (a, b):
            (pack,) = mem.scheduler.packs
            due, facts = await mem.scheduler._decide(pack, [ALICE], at(40))
            decisions.append((mem, pack, due, facts))
        reports = []
        for mem, pack, due, facts in decisions:
            report = ConsolidationReport(now=at(40))
            applied = await mem.scheduler._run(
                pack, ALICE, due[ALICE], facts.states, at(40), report
            )
            reports.append((applied, fired(report), len(report.conflicts)))
        assert reports == [(True, [("alice", 2)], 0), (False, [], 1)]
        assert len(await a.facts()) == 2
        assert await runs_recorded(a) == 1


# --- the specification's consolidate(rule) ----------------------------------------------


async def test_consolidate_rule_honours_idle(tmp_path: Path) -> None:
    store = SQLiteMemoryStore(path=tmp_path / "m.db")
    await store.bootstrap()
    recent = datetime.now(UTC) - timedelta(minutes=5)
    await store.put(obs(1, at=recent), user="alice", session="s1", agent="rag")
    rule = ConsolidationRule(id="quiet", cadence=Cadence(idle="10m"))
    assert await store.consolidate(rule, due_only=True) == []
    quiet = ConsolidationRule(id="quiet", cadence=Cadence(idle="1m"))
    assert [d.kind for d in await store.consolidate(quiet, due_only=True)] == ["add"]
    assert await store.consolidate(quiet, due_only=True) == []


# --- lint ----------------------------------------------------------------------------------


def test_lint_tells_trigger_cadences_apart() -> None:
    def rule(rid: str, cadence: str, test: str = "") -> str:
        return (
            f"  - id: {rid}\n    cadence: {cadence}\n    when:\n"
            f"      - episode: {{subject: {{bind: s}}, object: {{bind: o}}{test}}}\n"
            '    emit: {kind: add, subject: "{s}", predicate: p, object: "{o}"}\n'
        )

    def warnings(first: str, second: str) -> list[str]:
        head = PACK_HEAD.split("rules:")[0] + "rules:\n"
        pack, source = load_pack_text(
            head + rule("a", first, ", predicate: q") + rule("b", second, ", predicate: r"),
            "p.yaml",
        )
        return [w.format() for w in lint_analysis(check_or_raise(pack, source), source)]

    assert warnings("{idle: 30m}", "{idle: {minutes: 30}}") == []
    assert warnings("{every: 3, or_after: 1h}", "{every: 3, or_after: 60m}") == []
    assert warnings("{idle: 30m}", "{idle: 1h}") == [
        "p.yaml:12:5: rules[1].cadence: warning: rules 'a' (idle 30m) and 'b' (idle 1h) both "
        "write (*, p) facts on different cadences: they fight over the same facts "
        "[cadence-overlap]"
    ]
    assert warnings("{every: 3}", "{every: 3, or_after: 1h30m}")[0].split(": warning: ")[1] == (
        "rules 'a' (every 3) and 'b' (every 3 or after 1h30m) both write (*, p) facts on "
        "different cadences: they fight over the same facts [cadence-overlap]"
    )
