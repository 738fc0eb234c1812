"""The store side of a fact's lifecycle, on both backends: closing statuses, what an update
carries (reinforcement per ``lifecycle``, access statistics, pins), pins, restores, status
history, the engine's view of facts, and the schema migration that brought them."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from backends import Backend, NewLocation, open_backend, raw_execute, raw_rows, snapshot
from readme_helpers import readme_section_example, run_example
from schema_helpers import (
    PG_UNDO_LAYERS,
    PG_UNDO_VERSION_3,
    PG_UNDO_VERSION_4,
    PG_UNDO_VERSION_5,
    PG_UNDO_VERSION_6,
    PG_UNDO_VERSION_7,
    PG_UNDO_VERSION_8,
    undo_version_5,
)
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import FactConflictError, FactNotFoundError, FactStatusError
from stargraph_mem.model.facts import Fact, StatusEvent
from stargraph_mem.model.time import to_us
from stargraph_mem.stores import (
    AddDelta,
    DeleteDelta,
    FactPattern,
    FactPayload,
    NoopDelta,
    Partition,
    SQLiteFactStore,
    UpdateDelta,
)
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.postgres import PostgresDatabase, PostgresFactStore
from stargraph_mem.stores.postgres.schema import LEDGER_TABLE
from stargraph_mem.stores.postgres.schema import SCHEMA_VERSION as PG_SCHEMA_VERSION

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
ALICE = Partition("alice", "a1")
NOW = T0 + 100 * HOUR


def add(obj: str, src: str = "e1", *, ts: datetime = T0, **payload: Any) -> AddDelta:
    return AddDelta(
        user="alice",
        agent="a1",
        source_episode_ids=[src],
        promotion_ts=ts,
        rule_id="r1",
        confidence=0.7,
        fact=FactPayload(subject="alice", predicate="likes", object=obj, payload=payload),
    )


def update(replaces: list[str], obj: str, *, ts: datetime, lifecycle: str = "new") -> UpdateDelta:
    return UpdateDelta(
        user="alice",
        agent="a1",
        replaces=replaces,
        lifecycle=lifecycle,
        source_episode_ids=["e9"],
        promotion_ts=ts,
        rule_id="r2",
        confidence=0.5,
        reason=f"now {obj}",
        fact=FactPayload(subject="alice", predicate="likes", object=obj),
    )


def delete(replaces: list[str], *, ts: datetime, status: str = "deleted") -> DeleteDelta:
    return DeleteDelta(
        user="alice",
        agent="a1",
        replaces=replaces,
        status=status,
        source_episode_ids=["e9"],
        promotion_ts=ts,
        rule_id="r3",
        confidence=1.0,
        reason=f"{status} by r3",
    )


def noop(reinforces: list[str], *, ts: datetime) -> NoopDelta:
    return NoopDelta(
        user="alice",
        agent="a1",
        reinforces=reinforces,
        source_episode_ids=["e5"],
        promotion_ts=ts,
        rule_id="r4",
        confidence=1.0,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
async def clocked(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Fresh stores of each backend whose clock reads ``NOW``."""
    async with open_backend(request.param, tmp_path, clock=lambda: NOW) as opened:
        yield opened


async def _engine(backend: Backend) -> dict[str, Any]:
    """The partition's current engine facts by object."""
    [facts] = await backend.facts.current_facts_of([ALICE])
    assert facts == await backend.facts.current_facts(ALICE)
    return {f.object: f for f in facts}


# --- closing statuses ---------------------------------------------------------------------


async def test_updates_supersede_and_deletes_close_with_their_status(backend: Backend) -> None:
    store = backend.facts
    tea, gin, rum = add("tea"), add("gin"), add("rum")
    water = update([tea.new_fact_id], "water", ts=T0 + HOUR)
    await store.apply_deltas([tea, gin, rum, water])
    await store.apply_deltas(
        [
            delete([gin.new_fact_id], ts=T0 + HOUR, status="archived"),
            delete([rum.new_fact_id], ts=T0 + HOUR),
        ]
    )
    statuses = {f.object: f.status for f in await store.query(FactPattern(status="all"))}
    assert statuses == {
        "tea": "superseded",
        "gin": "archived",
        "rum": "deleted",
        "water": "current",
    }
    assert [f.object for f in await store.query(FactPattern())] == ["water"]
    assert [f.object for f in await store.query(FactPattern(status="archived"))] == ["gin"]
    assert [
        f.object for f in await store.query(FactPattern(include_history=True, status="deleted"))
    ] == ["rum"]
    assert (await store.get(tea.new_fact_id)).superseded_by == water.new_fact_id
    hits = await store.search("gin tea water", touch=False)
    assert [h.fact.object for h in hits] == ["water"]
    before = await store.as_of(T0 + HOUR / 2, FactPattern(user="alice", agent="a1"))
    assert sorted(f.object for f in before) == ["gin", "rum", "tea"]


# --- what an update carries ---------------------------------------------------------------


async def test_lifecycle_inherit_keeps_reinforcement_and_reinforce_adds_one(
    backend: Backend,
) -> None:
    store = backend.facts
    tea = add("tea")
    await store.apply_deltas([tea, noop([tea.new_fact_id], ts=T0 + HOUR)])
    await store.apply_deltas([noop([tea.new_fact_id], ts=T0 + 2 * HOUR)])
    first = (await _engine(backend))["tea"]
    assert (first.reinforcement_count, first.reinforced_at_us) == (2, to_us(T0 + 2 * HOUR))
    decayed = update([tea.new_fact_id], "tea2", ts=T0 + 5 * HOUR, lifecycle="inherit")
    await store.apply_deltas([decayed])
    kept = (await _engine(backend))["tea2"]
    assert (kept.reinforcement_count, kept.reinforced_at_us) == (2, to_us(T0 + 2 * HOUR))
    assert kept.observed_us == first.observed_us == to_us(T0)
    assert kept.valid_from_us == to_us(T0 + 5 * HOUR)
    confirmed = update([decayed.new_fact_id], "tea3", ts=T0 + 6 * HOUR, lifecycle="reinforce")
    fresh = update([confirmed.new_fact_id], "tea4", ts=T0 + 7 * HOUR)
    await store.apply_deltas([confirmed])
    again = (await _engine(backend))["tea3"]
    assert (again.reinforcement_count, again.reinforced_at_us) == (3, to_us(T0 + 6 * HOUR))
    assert again.observed_us == to_us(T0 + 6 * HOUR)
    await store.apply_deltas([fresh, noop([fresh.new_fact_id], ts=T0 + 8 * HOUR)])
    last = (await _engine(backend))["tea4"]
    assert (last.reinforcement_count, last.reinforced_at_us) == (1, to_us(T0 + 8 * HOUR))


async def test_a_chain_within_one_batch_carries_like_separate_batches(backend: Backend) -> None:
    """Reinforcements and updates of facts made earlier in the same batch."""
    store = backend.facts
    tea = add("tea")
    r1, r2 = noop([tea.new_fact_id], ts=T0 + HOUR), noop([tea.new_fact_id], ts=T0 + 2 * HOUR)
    keep = update([tea.new_fact_id], "tea2", ts=T0 + 3 * HOUR, lifecycle="inherit")
    plus = update([keep.new_fact_id], "tea3", ts=T0 + 4 * HOUR, lifecycle="reinforce")
    await store.apply_deltas([tea, r1, r2, keep, plus])
    fact = (await _engine(backend))["tea3"]
    assert (fact.reinforcement_count, fact.reinforced_at_us) == (3, to_us(T0 + 4 * HOUR))


async def test_pins_and_access_carry_to_the_fact_that_replaces_them(clocked: Backend) -> None:
    store = clocked.facts
    tea, gin = add("tea", note="hot"), add("gin")
    await store.apply_deltas([tea, gin])
    assert await store.pin(gin.new_fact_id, reason="keep gin") is True
    await store.search("tea gin", touch=True)
    await store.search("tea", touch=True)
    view = await _engine(clocked)
    assert (view["tea"].access_count, view["gin"].access_count) == (2, 1)
    assert (view["tea"].pinned, view["gin"].pinned) == (False, True)
    assert view["tea"].payload == {"note": "hot"} and view["gin"].payload is None
    assert view["tea"].last_access_us == to_us(NOW)
    both = update([tea.new_fact_id, gin.new_fact_id], "water", ts=T0 + HOUR)
    await store.apply_deltas([both])
    water = (await _engine(clocked))["water"]
    assert (water.access_count, water.last_access_us, water.pinned) == (3, to_us(NOW), True)
    access = await store.access(both.new_fact_id)
    assert access.count == 3
    history = await store.status_history(both.new_fact_id)
    assert [(e.event, e.related_fact_id, e.reason) for e in history] == [
        ("created", tea.new_fact_id, "now water"),
        ("pinned", gin.new_fact_id, "keep gin"),
    ]


# --- pins -----------------------------------------------------------------------------------


async def test_pin_and_unpin_record_events_and_refuse_closed_or_unknown_facts(
    clocked: Backend,
) -> None:
    store = clocked.facts
    tea, gin = add("tea"), add("gin")
    await store.apply_deltas([tea, gin, delete([gin.new_fact_id], ts=T0 + HOUR)])
    assert await store.pin(tea.new_fact_id, reason="user said so") is True
    before = await snapshot(store)
    assert await store.pin(tea.new_fact_id, reason="again") is False
    with pytest.raises(FactStatusError, match=f"cannot pin fact {gin.new_fact_id}: it is deleted"):
        await store.pin(gin.new_fact_id)
    with pytest.raises(FactStatusError, match=r"cannot unpin fact .*: it is deleted, not current"):
        await store.unpin(gin.new_fact_id)
    with pytest.raises(FactNotFoundError, match="no fact with id 'fnope'"):
        await store.pin("fnope")
    assert await snapshot(store) == before
    assert await store.unpin(tea.new_fact_id) is True
    assert await store.unpin(tea.new_fact_id) is False
    assert not (await _engine(clocked))["tea"].pinned
    history = await store.status_history(tea.new_fact_id)
    assert [(e.event, e.status, e.reason) for e in history] == [
        ("created", "current", ""),
        ("pinned", "current", "user said so"),
        ("unpinned", "current", ""),
    ]
    assert history[1].at == NOW


# --- archived facts and restores --------------------------------------------------------------


async def test_archived_facts_are_listed_and_restored_as_new_facts(clocked: Backend) -> None:
    store = clocked.facts
    tea, gin = add("tea", cup="big"), add("gin")
    archive = delete([tea.new_fact_id], ts=T0 + HOUR, status="archived")
    await store.apply_deltas([tea, gin, noop([tea.new_fact_id], ts=T0 + HOUR / 2), archive])
    await store.pin(gin.new_fact_id)
    [archived] = await store.archived_facts_of([ALICE])
    assert [(f.object, f.status, f.reinforcement_count) for f in archived] == [
        ("tea", "archived", 1)
    ]
    assert archived[0].payload == {"cup": "big"}
    assert await store.archived_facts_of([Partition("bob", "a1")]) == [[]]
    restored = await store.restore(tea.new_fact_id, reason="asked for again")
    assert (restored.object, restored.payload, restored.confidence) == ("tea", {"cup": "big"}, 0.7)
    assert (restored.status, restored.valid_from) == ("current", NOW)
    assert (await store.lineage(restored.id)).predecessor_ids == (tea.new_fact_id,)
    old = await store.get(tea.new_fact_id)
    assert (old.status, old.valid_until, old.superseded_by) == ("archived", T0 + HOUR, restored.id)
    assert await store.archived_facts_of([ALICE]) == [[]]
    view = (await _engine(clocked))["tea"]
    assert (view.reinforcement_count, view.reinforced_at_us) == (1, to_us(T0 + HOUR / 2))
    before = await snapshot(store)
    with pytest.raises(FactStatusError, match=f"restored already as {restored.id}"):
        await store.restore(tea.new_fact_id)
    with pytest.raises(
        FactStatusError, match=r"cannot restore fact .*: it is current, not archived"
    ):
        await store.restore(gin.new_fact_id)
    with pytest.raises(FactNotFoundError):
        await store.restore("fnope")
    assert await snapshot(store) == before
    history = await store.status_history(tea.new_fact_id)
    assert [(e.event, e.status, e.rule_id, e.related_fact_id) for e in history] == [
        ("created", "current", "r1", None),
        ("archived", "archived", "r3", None),
        ("restored", "archived", "restore", restored.id),
    ]
    assert history[1].delta_id == archive.delta_id and history[1].reason == "archived by r3"
    explained = await store.explain(tea.new_fact_id)
    assert explained.status_history == tuple(history)


async def test_an_update_naming_an_archived_fact_restores_it_without_closing_it(
    backend: Backend,
) -> None:
    store = backend.facts
    tea = add("tea")
    await store.apply_deltas([tea, delete([tea.new_fact_id], ts=T0 + HOUR, status="archived")])
    back = update([tea.new_fact_id], "tea", ts=T0 + 2 * HOUR, lifecycle="inherit")
    result = await store.apply_deltas([back])
    assert (result.created_fact_ids, result.closed_fact_ids) == ((back.new_fact_id,), ())
    old = await store.get(tea.new_fact_id)
    assert (old.status, old.valid_until, old.superseded_by) == (
        "archived",
        T0 + HOUR,
        back.new_fact_id,
    )
    twice = update([tea.new_fact_id], "tea again", ts=T0 + 3 * HOUR)
    with pytest.raises(FactConflictError, match="archived fact already restored"):
        await store.apply_deltas([twice])
    with pytest.raises(FactConflictError, match="fact is already closed"):
        await store.apply_deltas([delete([tea.new_fact_id], ts=T0 + 3 * HOUR)])


async def test_status_history_of_a_superseded_fact_names_its_successor(backend: Backend) -> None:
    store = backend.facts
    tea = add("tea")
    water = update([tea.new_fact_id], "water", ts=T0 + HOUR)
    await store.apply_deltas([tea, water])
    history = await store.status_history(tea.new_fact_id)
    assert [(e.event, e.at, e.rule_id, e.delta_id, e.related_fact_id) for e in history] == [
        ("created", T0, "r1", tea.delta_id, None),
        ("superseded", T0 + HOUR, "r2", water.delta_id, water.new_fact_id),
    ]
    with pytest.raises(FactNotFoundError):
        await store.status_history("fnope")


# --- migrations ------------------------------------------------------------------------------


async def test_a_version_4_sqlite_file_is_migrated_with_its_facts(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    tea, gin = add("tea"), add("gin")
    water = update([tea.new_fact_id], "water", ts=T0 + HOUR)
    async with SQLiteFactStore(path) as store:
        await store.apply_deltas([tea, gin, water, delete([gin.new_fact_id], ts=T0 + HOUR)])
        await store.apply_deltas([noop([water.new_fact_id], ts=T0 + 2 * HOUR)])
        facts = await store.query(FactPattern(status="all"))
        engine = await store.current_facts(ALICE)
    with closing(sqlite3.connect(path)) as db, db:
        undo_version_5(db)
        db.execute("UPDATE fact_store_meta SET value = '4' WHERE key = 'schema_version'")
    async with SQLiteFactStore(path) as store:
        assert (await store.health()).schema_version == 7
        assert await store.query(FactPattern(status="all")) == facts
        assert await store.current_facts(ALICE) == engine
        assert {f.object: f.status for f in facts} == {
            "tea": "superseded",
            "gin": "deleted",
            "water": "current",
        }


async def test_a_postgresql_schema_at_version_2_is_migrated_with_its_facts(
    tmp_path: Path,
) -> None:
    tea, gin = add("tea"), add("gin")
    water = update([tea.new_fact_id], "water", ts=T0 + HOUR)
    async with open_backend("postgresql", tmp_path) as backend:
        store = backend.facts
        await store.apply_deltas([tea, gin, water, delete([gin.new_fact_id], ts=T0 + HOUR)])
        facts = await store.query(FactPattern(status="all"))
        undo = (
            *PG_UNDO_LAYERS,
            *PG_UNDO_VERSION_8,
            *PG_UNDO_VERSION_7,
            *PG_UNDO_VERSION_6,
            *PG_UNDO_VERSION_5,
            *PG_UNDO_VERSION_4,
            *PG_UNDO_VERSION_3,
        )
        for statement in undo:
            await raw_execute(store, statement, ())
        assert await raw_rows(store, f"SELECT max(version) FROM {LEDGER_TABLE}") == [(2,)]
        assert isinstance(store, PostgresFactStore)
        async with PostgresDatabase(store.database.url) as again:
            assert (await again.health()).schema_version == PG_SCHEMA_VERSION
            assert await again.facts.query(FactPattern(status="all")) == facts
        assert {f.object: f.status for f in facts} == {
            "tea": "superseded",
            "gin": "deleted",
            "water": "current",
        }


# --- the command line ------------------------------------------------------------------------


async def _cli_memory(location: str) -> tuple[AddDelta, AddDelta, AddDelta]:
    """A memory at ``location`` holding a current fact (tea), a deleted one (gin) and an
    archived one (rum)."""
    tea, gin, rum = add("tea"), add("gin"), add("rum")
    async with open_database(location) as database:
        await database.facts.apply_deltas(
            [
                tea,
                gin,
                rum,
                delete([gin.new_fact_id], ts=T0 + HOUR),
                delete([rum.new_fact_id], ts=T0 + 2 * HOUR, status="archived"),
            ]
        )
    return tea, gin, rum


async def _history(location: str, fact_id: str) -> list[StatusEvent]:
    async with open_database(location) as database:
        return await database.facts.status_history(fact_id)


async def _current(location: str, obj: str) -> list[Fact]:
    async with open_database(location) as database:
        return await database.facts.query(FactPattern(object=obj))


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_cli_pin_unpin_and_their_errors(new_location: NewLocation) -> None:
    db = new_location()
    tea, gin, _ = asyncio.run(_cli_memory(db))
    t, g = tea.new_fact_id, gin.new_fact_id
    assert _cli("pin", t, "--db", db, "--reason", "keep it") == (0, f"pinned {t}\n", "")
    assert _cli("pin", t, "--db", db) == (0, f"{t} is already pinned\n", "")
    assert _cli("unpin", t, "--db", db) == (0, f"unpinned {t}\n", "")
    assert _cli("unpin", t, "--db", db) == (0, f"{t} is not pinned\n", "")
    refused = f"error: cannot pin fact {g}: it is deleted, not current\n"
    assert _cli("pin", g, "--db", db) == (1, "", refused)
    assert _cli("pin", "fnope", "--db", db) == (1, "", "error: no fact with id 'fnope'\n")
    assert [(e.event, e.reason) for e in asyncio.run(_history(db, t))] == [
        ("created", ""),
        ("pinned", "keep it"),
        ("unpinned", ""),
    ]


def test_cli_restore_history_and_facts_by_status(new_location: NewLocation) -> None:
    db = new_location()
    tea, gin, rum = asyncio.run(_cli_memory(db))
    r, g = rum.new_fact_id, gin.new_fact_id
    code, out, err = _cli("facts", "--db", db, "--status", "archived")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "ID                                USER   AGENT  SUBJECT  PREDICATE  CONFIDENCE  STATUS"
        "    OBJECT",
        f"{r}  alice  a1     alice    likes      0.7         archived  rum",
    ]
    assert _cli("history", g, "--db", db) == (
        0,
        f"2026-05-01T09:00:00+00:00 created rule=r1 delta={gin.delta_id}\n"
        f"2026-05-01T10:00:00+00:00 deleted rule=r3 delta={_delete_id(g, HOUR)} "
        "reason=deleted by r3\n",
        "",
    )
    code, out, err = _cli("restore", r, "--db", db)
    [back] = asyncio.run(_current(db, "rum"))
    assert (code, out, err) == (0, f"restored {r} as {back.id}\n", "")
    code, out, _ = _cli("history", r, "--db", db, "--json")
    document = orjson.loads(out)
    assert [(e["event"], e["status"], e["related_fact_id"]) for e in document] == [
        ("created", "current", None),
        ("archived", "archived", None),
        ("restored", "archived", back.id),
    ]
    again = f"error: cannot restore fact {r}: it was restored already as {back.id}\n"
    assert _cli("restore", r, "--db", db) == (1, "", again)
    not_archived = f"error: cannot restore fact {tea.new_fact_id}: it is current, not archived\n"
    assert _cli("restore", tea.new_fact_id, "--db", db) == (1, "", not_archived)
    bad = _cli("facts", "--db", db, "--status", "gone")
    assert bad[0] == 2 and bad[2] == (
        "error: --status must be one of current, challenged, superseded, deleted, expired, "
        "archived, invalidated, merged, active or all, got 'gone'\n"
    )
    code, out, _ = _cli("explain", r, "--db", db, "--json")
    assert [e["event"] for e in orjson.loads(out)["status_history"]] == [
        "created",
        "archived",
        "restored",
    ]
    code, out, _ = _cli("explain", g, "--db", db)
    assert out.splitlines()[-4:] == [
        "  status     deleted",
        f"  history    2026-05-01T09:00:00+00:00 created rule=r1 delta={gin.delta_id}",
        f"  history    2026-05-01T10:00:00+00:00 deleted rule=r3 delta={_delete_id(g, HOUR)} "
        "reason=deleted by r3",
        "  change     2026-05-01T10:00:00+00:00 active -> deleted reason=deleted by r3",
    ]


def _delete_id(fact_id: str, after: timedelta) -> str:
    return delete([fact_id], ts=T0 + after).delta_id


def test_cli_help_of_the_new_commands() -> None:
    for command, words in (
        ("pin", "Pin a current fact"),
        ("unpin", "Take the pin off"),
        ("restore", "Make an archived fact current again"),
        ("history", "A fact's status history"),
    ):
        code, out, _ = _cli(command, "--help")
        assert code == 0 and words in out


def test_the_readme_statuses_example_runs_verbatim(tmp_path: Path) -> None:
    code, output = readme_section_example("Fact statuses and pins")
    done = run_example(code, tmp_path, "examples/streaming_dedup.yaml", timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == output


async def test_the_consolidator_api_on_both_backends(new_location: NewLocation) -> None:
    tea = add("tea")
    async with Consolidator(new_location(), [], clock=lambda: NOW) as mem:
        await mem.fact_store.apply_deltas(
            [tea, delete([tea.new_fact_id], ts=T0 + HOUR, status="archived")]
        )
        assert [f.id for f in await mem.facts(status="archived")] == [tea.new_fact_id]
        assert await mem.facts() == []
        back = await mem.restore(tea.new_fact_id, reason="again")
        assert await mem.pin(back.id, reason="keep") is True
        assert await mem.pin(back.id) is False
        assert [f.id for f in await mem.facts()] == [back.id]
        assert [(f.id, f.status) for f in await mem.facts(status="all")] == [
            (tea.new_fact_id, "archived"),
            (back.id, "current"),
        ]
        assert [e.event for e in await mem.status_history(back.id)] == ["created", "pinned"]
        assert await mem.unpin(back.id) is True
        why = await mem.explain(tea.new_fact_id)
        assert [e.event for e in why.status_history] == ["created", "archived", "restored"]
        with pytest.raises(FactStatusError):
            await mem.restore(back.id)
