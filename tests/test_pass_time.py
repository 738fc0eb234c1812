"""Passes and time: episodes in timestamp order within a pass; a pass at time T consumes only
episodes stamped at or before T (later ones stay pending, deferred, without blocking the
partition, and are consumed exactly once by a later pass); both backends."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import PG_URL, open_backend, pg_schema, raw_execute, raw_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_helpers import (
    PG_UNDO_LAYERS,
    PG_UNDO_VERSION_3,
    PG_UNDO_VERSION_4,
    PG_UNDO_VERSION_5,
    PG_UNDO_VERSION_6,
    PG_UNDO_VERSION_7,
    PG_UNDO_VERSION_8,
    undo_version_4,
)
from typer.testing import CliRunner, Result

from stargraph_mem.cli import app
from stargraph_mem.compiler.sweep_sql import is_sweep
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import StalePassError
from stargraph_mem.ir.loader import load_pack_file
from stargraph_mem.model.episodes import Episode
from stargraph_mem.stores.postgres import PostgresDatabase
from stargraph_mem.stores.postgres.schema import LEDGER_TABLE, MIGRATIONS
from stargraph_mem.stores.repositories.fact_rows import PassBasis, PassWrite
from stargraph_mem.stores.repositories.pass_time import Deferral, PassTime
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_fact import SCHEMA_VERSION, SQLiteFactStore

RULES = Path(__file__).resolve().parents[1] / "rules"
DEFAULT = RULES / "default.yaml"
PACKS = sorted(RULES.glob("*.yaml"))
T0 = datetime(2026, 3, 1, tzinfo=UTC)
U = Partition("u", "a")


def observation(
    eid: str, minute: int, obj: str, *, user: str = "u", subject: str = "s", predicate: str = "p"
) -> Episode:
    return Episode(
        id=eid,
        content=f"{subject} {predicate} {obj}",
        timestamp=T0 + timedelta(minutes=minute),
        user=user,
        session="s",
        agent="a",
        metadata={"subject": subject, "predicate": predicate, "object": obj},
    )


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


Current = list[tuple[str, str, str, str, str, float]]


async def current(mem: Consolidator) -> Current:
    return sorted(
        (f.user, f.agent, f.subject, f.predicate, f.object, f.confidence) for f in await mem.facts()
    )


# --- A. timestamp order within a pass ------------------------------------------------------


async def test_the_latest_observation_wins_whatever_the_insertion_order(
    new_location: Callable[[], str],
) -> None:
    stored = [observation("e0", 0, "a"), observation("e1", 1, "b"), observation("e2", 2, "c")]
    async with Consolidator.open(new_location(), [DEFAULT]) as mem:
        await mem.record_many(list(reversed(stored)))  # newest first
        report = await mem.consolidate(now=T0 + timedelta(hours=1))
        assert [p.episodes for p in report.passes] == [3]
        assert [f.object for f in await mem.facts()] == ["c"]
        (fact,) = await mem.facts()
        assert list((await mem.explain(fact.id)).provenance.source_episode_ids) == ["e2", "e1"]


async def test_dry_runs_and_batches_take_timestamp_order_too(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    async with Consolidator.open(location, [DEFAULT]) as mem:
        for user in ("u1", "u2", "u3"):  # several small partitions: one batch
            await mem.memory.put_many(
                [observation(f"{user}-{m}", m, o, user=user) for m, o in ((2, "c"), (0, "a"))]
            )
        dry = await mem.consolidate(now=T0 + timedelta(hours=1), dry_run=True)
        updates = [d for p in dry.passes for d in p.deltas if d.kind == "update"]
        assert sorted(str(d.bindings["o"]) for d in updates) == ["c", "c", "c"]
        await mem.consolidate(now=T0 + timedelta(hours=1))
        assert [f.object for f in await mem.facts()] == ["c", "c", "c"]


FIXTURE = [HealthCheck.function_scoped_fixture]
items = st.lists(
    st.tuples(
        st.sampled_from(["u1", "u2"]),
        st.sampled_from(["s1", "s2"]),
        st.sampled_from(["p1", "p2"]),
        st.sampled_from(["x", "y", "z"]),
    ),
    min_size=1,
    max_size=12,
)


def _reads_episodes(pack: Path) -> bool:
    """Whether a rule of ``pack`` consumes episodes (a pack of sweeps only reads facts)."""
    rules = load_pack_file(pack)[0].rules
    return any(not is_sweep(rule) for rule in rules)


async def _one_pass(location: str, pack: Path, episodes: Sequence[Episode]) -> Current:
    async with Consolidator.open(location, [pack]) as mem:
        await mem.memory.put_many(list(episodes))
        report = await mem.consolidate(now=T0 + timedelta(days=1))
        consumed = len(episodes) if _reads_episodes(pack) else 0
        assert sum(p.episodes for p in report.passes) == consumed
        return await current(mem)


@asynccontextmanager
async def _location(backend: str, tmp: Path) -> AsyncIterator[str]:
    if backend == "sqlite":
        yield str(tmp / f"{uuid.uuid4().hex[:8]}.db")
        return
    async with pg_schema() as schema:
        yield f"{PG_URL}?schema={schema}"


def _shuffled_gives_the_same_facts(
    tmp_path: Path, backend: str, stream: list[tuple[str, str, str, str]], seed: int
) -> None:
    episodes = [
        observation(f"e{n}", n, obj, user=user, subject=subject, predicate=predicate)
        for n, (user, subject, predicate, obj) in enumerate(stream)
    ]
    shuffled = list(episodes)
    random.Random(seed).shuffle(shuffled)

    async def both(pack: Path) -> tuple[Current, Current]:
        async with _location(backend, tmp_path) as first, _location(backend, tmp_path) as second:
            return (
                await _one_pass(first, pack, episodes),
                await _one_pass(second, pack, shuffled),
            )

    for pack in PACKS:
        in_order, out_of_order = asyncio.run(both(pack))
        assert out_of_order == in_order, pack.name


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stream=items, seed=st.integers(0, 2**32 - 1))
def test_insertion_order_does_not_change_one_pass_sqlite(
    tmp_path: Path, stream: list[tuple[str, str, str, str]], seed: int
) -> None:
    _shuffled_gives_the_same_facts(tmp_path, "sqlite", stream, seed)


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stream=items, seed=st.integers(0, 2**32 - 1))
def test_insertion_order_does_not_change_one_pass_postgresql(
    tmp_path: Path, stream: list[tuple[str, str, str, str]], seed: int
) -> None:
    _shuffled_gives_the_same_facts(tmp_path, "postgresql", stream, seed)


# --- B. the pass time rule ----------------------------------------------------------------


def _jsonl(path: Path, episodes: Sequence[Episode]) -> Path:
    path.write_text("".join(e.model_dump_json() + "\n" for e in episodes))
    return path


def _facts(db: str) -> list[dict[str, Any]]:
    result = invoke("facts", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_consolidate_now_leaves_later_episodes_pending_then_consumes_them_once(
    new_location: Callable[[], str], tmp_path: Path
) -> None:
    db = new_location()
    day = 24 * 60
    data = [
        observation("d1", 0, "one", subject="s1"),
        observation("d3", 2 * day, "three", subject="s3"),
        observation("d2", day, "two", subject="s2"),
    ]
    assert invoke("ingest", str(_jsonl(tmp_path / "e.jsonl", data)), "--db", db).exit_code == 0
    first_night = (T0 + timedelta(hours=12)).isoformat()
    result = invoke("consolidate", "--db", db, "--pack", str(DEFAULT), "--now", first_night)
    assert result.exit_code == 0, result.output
    assert "episodes=1 " in result.stdout and "not_yet_due=2" in result.stdout
    assert f"not yet due: 2 episode(s) stamped after {first_night}" in result.stdout
    assert [f["object"] for f in _facts(db)] == ["one"]
    both = [str(DEFAULT), "--pack", str(DEFAULT.parent / "dedup_against_facts.yaml")]
    twice = invoke("consolidate", "--db", db, "--pack", *both, "--now", first_night, "--json")
    document = json.loads(twice.stdout)  # pending for two packs: each episode counted once
    assert [p["not_yet_due"] for p in document["passes"]] == [2, 2]
    assert document["not_yet_due"] == 2

    again = invoke(
        "consolidate", "--db", db, "--pack", str(DEFAULT), "--now", first_night, "--json"
    )
    document = json.loads(again.stdout)
    assert document["not_yet_due"] == 2 and document["now"] == first_night
    assert [p["episodes"] for p in document["passes"]] == [0]

    second_night = (T0 + timedelta(days=1, hours=12)).isoformat()
    later = invoke(
        "consolidate", "--db", db, "--pack", str(DEFAULT), "--now", second_night, "--json"
    )
    document = json.loads(later.stdout)
    assert [(p["episodes"], p["not_yet_due"]) for p in document["passes"]] == [(1, 1)]
    assert document["not_yet_due"] == 1

    last_night = (T0 + timedelta(days=5)).isoformat()
    for _ in range(2):  # the second run finds nothing left: each episode consumed once
        done = invoke(
            "consolidate", "--db", db, "--pack", str(DEFAULT), "--now", last_night, "--json"
        )
        document = json.loads(done.stdout)
        assert document["not_yet_due"] == 0
    assert [p["episodes"] for p in document["passes"]] == [0]
    facts = _facts(db)
    assert sorted(f["object"] for f in facts) == ["one", "three", "two"]
    sources = [
        json.loads(invoke("explain", fact["id"], "--db", db, "--json").stdout)["provenance"][
            "source_episode_ids"
        ]
        for fact in facts
    ]
    assert sorted(s for ids in sources for s in ids) == ["d1", "d2", "d3"]


async def test_a_future_episode_does_not_block_later_stored_past_ones(
    new_location: Callable[[], str],
) -> None:
    now = T0 + timedelta(hours=1)
    async with Consolidator.open(new_location(), [DEFAULT]) as mem:
        await mem.memory.put_many([observation("past1", 0, "a", subject="s1")])
        await mem.memory.put_many([observation("future", 600, "f", subject="s2")])
        await mem.memory.put_many([observation("past2", 5, "b", subject="s3")])
        report = await mem.consolidate(now=now)
        assert [(p.episodes, p.not_yet_due) for p in report.passes] == [(2, 1)]
        assert sorted(f.object for f in await mem.facts()) == ["a", "b"]
        runner = mem.runners[0]
        assert await runner.pending(U) == 1
        # stored after the deferral, stamped before the pass time: consumed at once
        await mem.memory.put_many([observation("past3", 10, "c", subject="s4")])
        report = await mem.consolidate(now=now)
        assert [(p.episodes, p.not_yet_due) for p in report.passes] == [(1, 1)]
        assert await runner.pending(U) == 1
        report = await mem.consolidate(now=T0 + timedelta(hours=11))
        assert [(p.episodes, p.not_yet_due) for p in report.passes] == [(1, 0)]
        assert sorted(f.object for f in await mem.facts()) == ["a", "b", "c", "f"]
        assert await runner.pending(U) == 0


async def test_a_deferred_episode_joins_its_pass_in_timestamp_order(
    new_location: Callable[[], str],
) -> None:
    async with Consolidator.open(new_location(), [DEFAULT]) as mem:
        await mem.memory.put_many([observation("late", 120, "z")])
        await mem.consolidate(now=T0 + timedelta(minutes=60))  # defers it
        await mem.memory.put_many([observation("early", 90, "y"), observation("last", 150, "x")])
        report = await mem.consolidate(now=T0 + timedelta(minutes=200))
        assert [p.episodes for p in report.passes] == [3]
        # y (90) then z (120) then x (150): the latest is x, whatever the insertion order
        assert [f.object for f in await mem.facts()] == ["x"]


async def test_status_and_count_cadences_see_deferred_episodes(
    new_location: Callable[[], str], tmp_path: Path
) -> None:
    pack = tmp_path / "every.yaml"
    pack.write_text(
        DEFAULT.read_text().replace('cadence: {cron: "0 3 * * *"}', "cadence: {every: 2}")
    )
    clock = [T0]
    async with Consolidator.open(new_location(), [pack], clock=lambda: clock[0]) as mem:
        await mem.record(observation("f1", 30, "a", subject="s1"))  # stamped after the clock
        report = await mem.record(observation("f2", 40, "b", subject="s2"))
        assert report.due and [p.not_yet_due for p in report.passes] == [2]
        assert await mem.facts() == []
        rows = await mem.status()
        assert {(r.pending, r.not_yet_due, r.due) for r in rows} == {(2, 2, False)}
        assert not (await mem.tick()).due
        clock[0] = T0 + timedelta(hours=1)
        rows = await mem.status()
        assert {(r.pending, r.not_yet_due, r.due) for r in rows} == {(2, 0, True)}
        report = await mem.tick()
        assert [p.episodes for p in report.passes] == [2]
        assert sorted(f.object for f in await mem.facts()) == ["a", "b"]
        assert {(r.pending, r.due) for r in await mem.status()} == {(0, False)}


# --- exactly once, at the store ---------------------------------------------------------


@pytest.mark.parametrize("backend_name", ["sqlite", "postgresql"])
async def test_a_deferral_is_resumed_by_one_apply_only(backend_name: str, tmp_path: Path) -> None:
    async with open_backend(backend_name, tmp_path) as backend:
        facts = backend.facts
        later = Deferral("r", 7, "e7", 9_000)
        marks, version = await facts.basis("p", U)
        put = PassWrite(
            PassBasis("p", U, marks, version, time=PassTime(1_000, 7, deferred=(later,)))
        )
        assert await facts.apply_passes([put]) == [version]
        assert await facts.deferred_of("p", [U, Partition("v", "a")]) == [[later], []]
        marks, version = await facts.basis("p", U)
        take = PassTime(10_000, 7, resumed=(later,))
        first = PassWrite(PassBasis("p", U, marks, version, time=take))
        # the same pass twice in one transaction: the second finds the deferral gone
        with pytest.raises(StalePassError, match="another pass consumed deferred episodes"):
            await facts.apply_passes([first, first])
        assert await facts.deferred_of("p", [U]) == [[later]]  # rolled back
        # the same pass computed twice (two racing runs): only one apply consumes it
        assert await facts.apply_passes([first]) == [version]
        assert await facts.deferred_of("p", [U]) == [[]]
        assert await facts.apply_passes([first]) == [None]
        with pytest.raises(StalePassError, match="another pass consumed deferred episodes"):
            await facts.apply_deltas([], basis=PassBasis("p", U, marks, version, time=take))
        times = await raw_rows(
            facts, "SELECT pack, partition_key, now_us, upto_seq FROM pass_times ORDER BY now_us"
        )
        assert [tuple(row) for row in times] == [("p", U.key, 1_000, 7), ("p", U.key, 10_000, 7)]


async def test_racing_runs_consume_a_deferred_episode_once(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    async with Consolidator.open(location, [DEFAULT]) as setup:
        await setup.memory.put_many([observation("f", 60, "a")])
        await setup.consolidate(now=T0)
    later = T0 + timedelta(hours=2)
    async with (
        Consolidator.open(location, [DEFAULT]) as one,
        Consolidator.open(location, [DEFAULT]) as two,
    ):
        reports = await asyncio.gather(one.consolidate(now=later), two.consolidate(now=later))
        consumed = [p.episodes for r in reports for p in r.passes if p.applied]
        assert sum(consumed) == 1
        audit = await one.fact_store.audit_rows()
        assert [row.delta.source_episode_ids for row in audit] == [["f"]]


# --- migrations ---------------------------------------------------------------------------


async def test_a_version_3_sqlite_file_gains_the_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with Consolidator.open(path, [DEFAULT]) as mem:
        await mem.memory.put_many([observation("e", 0, "a")])
        await mem.consolidate(now=T0)
    with closing(sqlite3.connect(path)) as db, db:
        undo_version_4(db)
        db.execute("UPDATE fact_store_meta SET value = '3' WHERE key = 'schema_version'")
    async with SQLiteFactStore(path) as facts:
        assert (await facts.health()).schema_version == SCHEMA_VERSION == 7
        assert await facts.deferred_of("default", [U]) == [[]]
    async with Consolidator.open(path, [DEFAULT]) as mem:
        await mem.memory.put_many([observation("f", 120, "b", subject="t")])
        report = await mem.consolidate(now=T0 + timedelta(hours=1))
        assert [p.not_yet_due for p in report.passes] == [1]


async def test_a_postgresql_database_at_version_1_is_migrated() -> None:
    async with pg_schema() as schema:
        url = f"{PG_URL}?schema={schema}"
        async with PostgresDatabase(url) as db:
            await db.memory.put_many([observation("e", 0, "a")])
            for undo in (
                *PG_UNDO_LAYERS,
                *PG_UNDO_VERSION_8,
                *PG_UNDO_VERSION_7,
                *PG_UNDO_VERSION_6,
                *PG_UNDO_VERSION_5,
                *PG_UNDO_VERSION_4,
                *PG_UNDO_VERSION_3,
                "DROP TABLE deferred_episodes",
                "DROP TABLE pass_times",
                "DROP TABLE aggregates",
                "ALTER TABLE facts DROP COLUMN observed_us",
                "ALTER TABLE reinforcements DROP COLUMN observed_us",
                f"DELETE FROM {LEDGER_TABLE} WHERE version >= 2",
            ):
                await raw_execute(db.memory, undo, ())
        async with PostgresDatabase(url) as db:
            ledger = await raw_rows(db.memory, f"SELECT version FROM {LEDGER_TABLE} ORDER BY 1")
            assert [row[0] for row in ledger] == [version for version, _, _ in MIGRATIONS]
        async with Consolidator.open(url, [DEFAULT]) as mem:
            await mem.memory.put_many([observation("f", 120, "b", subject="t")])
            report = await mem.consolidate(now=T0 + timedelta(hours=1))
            assert [(p.episodes, p.not_yet_due) for p in report.passes] == [(1, 1)]


# --- C. replay at the recorded pass times ---------------------------------------------------

NIGHTLY_PACKS = [RULES / "default.yaml", RULES / "frequency_promotion.yaml"]


def _day(day: int, users: Sequence[str], objects: Sequence[str], *, tag: str) -> list[Episode]:
    """Observations of one day: every user repeats (s, p) with each object, hours apart."""
    return [
        observation(
            f"{tag}-{user}-{n}",
            (day * 24 + 8 + n) * 60,
            obj,
            user=user,
            subject="s" if n % 2 == 0 else "t",
        )
        for user in users
        for n, obj in enumerate(objects)
    ]


def _night(db: str, day: int) -> None:
    at = (T0 + timedelta(days=day, hours=27)).isoformat()  # 03:00 the next morning
    packs = [arg for pack in NIGHTLY_PACKS for arg in ("--pack", str(pack))]
    result = invoke("consolidate", "--db", db, *packs, "--now", at)
    assert result.exit_code == 0, result.output


def test_replaying_the_same_packs_over_nightly_passes_shows_no_difference(
    new_location: Callable[[], str], tmp_path: Path
) -> None:
    db = new_location()
    users = ["ann", "bob", "cy"]
    days = [
        _day(0, users, ["x", "y", "x"], tag="d0"),
        _day(1, users, ["y", "z", "y", "x"], tag="d1"),
        _day(2, users, ["z", "x"], tag="d2"),
    ]
    first = _jsonl(tmp_path / "first.jsonl", [*days[0], *days[1]])
    assert invoke("ingest", str(first), "--db", db).exit_code == 0
    _night(db, 0)  # consumes day 0; day 1 stays pending (stamped after the pass)
    _night(db, 1)
    # day 2 arrives with a late episode stamped on day 0
    late = [*days[2], observation("late", 11 * 60, "late", user="ann")]
    assert invoke("ingest", str(_jsonl(tmp_path / "late.jsonl", late)), "--db", db).exit_code == 0
    _night(db, 2)
    packs = [arg for pack in NIGHTLY_PACKS for arg in ("--pack", str(pack))]
    result = invoke("replay", "--db", db, *packs, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["times"] == {"mode": "recorded", "cadence": None, "pass_times": 3}
    assert document["summary"]["unchanged"] > 0
    assert document["changes"] == [], document["changes"]
    text = invoke("replay", "--db", db, *packs, "--exit-code")
    assert text.exit_code == 0, text.output
    assert "at the 3 pass times the database recorded" in text.stdout
    assert "0 would appear, 0 would disappear, 0 would change" in text.stdout
    # one pass at the last time reads the stream differently: the comparison can fail
    once = invoke(
        "replay", "--db", db, *packs, "--json", "--now", (T0 + timedelta(days=4)).isoformat()
    )
    assert json.loads(once.stdout)["changes"] != []
    # a nightly cadence up to the last night fires three times too
    nightly = invoke(
        "replay",
        "--db",
        db,
        *packs,
        "--json",
        "--cadence",
        "nightly",
        "--now",
        (T0 + timedelta(days=3, hours=4)).isoformat(),
    )
    assert nightly.exit_code == 0, nightly.output
    assert json.loads(nightly.stdout)["times"]["pass_times"] == 3


def test_replay_refuses_a_bad_cadence(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    data = _jsonl(tmp_path / "e.jsonl", [observation("e", 0, "a")])
    assert invoke("ingest", str(data), "--db", db).exit_code == 0
    for cadence, message in (
        ("every day", "not a cron expression or 'nightly'"),
        ("* * * * *", "fires more than 10000 times"),
    ):
        result = invoke(
            "replay",
            "--db",
            db,
            "--pack",
            str(DEFAULT),
            "--cadence",
            cadence,
            "--now",
            (T0 + timedelta(days=30)).isoformat(),
        )
        assert result.exit_code == 1 and message in result.stderr, result.output
