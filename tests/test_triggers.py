"""The ``idle`` and ``every … or_after`` cadences with a stepped clock, on both backends:
when they fire, once per quiet spell, whichever comes first, concurrent ticks, status."""

from __future__ import annotations

import asyncio
import shlex
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from backends import NewLocation
from test_scheduler import ALICE, Clock, fired, obs, opened
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.engine.scheduler import ConsolidationReport

ROOT = Path(__file__).resolve().parents[1]

T0 = datetime(2026, 5, 1, 9, tzinfo=UTC)


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
        assert await a.schedule_store.total_runs() == 2


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


def readme_transcript(marker: str) -> list[tuple[list[str], str]]:
    """The ``$ command`` / output pairs of the README's first shell block after ``marker``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split(marker, 1)[1].split("```\n", 1)[1].split("```\n", 1)[0]
    steps: list[tuple[list[str], str]] = []
    command = ""
    for line in block.splitlines():
        if line.startswith("$ ") or command.endswith("\\"):
            start = "" if line.startswith("$ ") else command.removesuffix("\\")
            command = (start + " " + line.removeprefix("$ ")).strip()
            if not command.endswith("\\"):
                steps.append((shlex.split(command), ""))
        else:
            args, out = steps[-1]
            steps[-1] = (args, out + line + "\n")
    return steps


def test_readme_idle_example_runs_verbatim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "idle_dedup.yaml", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    steps = readme_transcript("A partition going quiet, step by step")
    assert len(steps) == 7
    for args, expected in steps:
        assert args[0] == "stargraph-mem"
        result = CliRunner().invoke(app, args[1:])
        assert (result.exit_code, result.stdout) == (0, expected), args
