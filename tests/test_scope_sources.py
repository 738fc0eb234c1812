"""A fact's sources belong to its own (user, agent): a delta citing another scope's
episode is refused with the store unchanged, and ``explain`` never shows another scope's
episode content."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stargraph_mem.errors import DeltaValidationError
from stargraph_mem.stores import (
    AddDelta,
    Episode,
    FactPayload,
    Partition,
    SQLiteFactStore,
    SQLiteMemoryStore,
)
from stargraph_mem.stores.sqlite_fact import PassBasis

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def episode(eid: str, user: str, content: str) -> Episode:
    return Episode(
        id=eid, content=content, timestamp=T0, user=user, session="s1", agent="a1", metadata={}
    )


def add(user: str, sources: list[str], obj: str = "tea") -> AddDelta:
    return AddDelta(
        fact=FactPayload(subject=user, predicate="drinks", object=obj),
        user=user,
        agent="a1",
        source_episode_ids=sources,
        promotion_ts=T0,
        rule_id="r1",
        confidence=0.8,
    )


def dump(path: Path) -> str:
    with closing(sqlite3.connect(path)) as db:
        return "\n".join(db.iterdump())


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[Path, SQLiteFactStore]]:
    path = tmp_path / "m.db"
    async with SQLiteMemoryStore(path) as memory, SQLiteFactStore(path) as facts:
        await memory.put_many(
            [episode("a1", "alice", "alice said tea"), episode("b1", "bob", "bob's secret")]
        )
        yield path, facts


async def test_a_delta_citing_another_users_episode_is_refused(
    stores: tuple[Path, SQLiteFactStore],
) -> None:
    path, facts = stores
    await facts.bootstrap()
    before = dump(path)
    good = add("alice", ["a1"])
    with pytest.raises(DeltaValidationError) as caught:
        await facts.apply_deltas([good, add("alice", ["a1", "b1"], "coffee")])
    message = str(caught.value)
    assert "deltas[1].source_episode_ids[1]" in message
    assert "'b1' belongs to another (user, agent)" in message
    assert dump(path) == before  # the good delta before it was rolled back too


async def test_own_and_unknown_sources_pass(stores: tuple[Path, SQLiteFactStore]) -> None:
    _, facts = stores
    result = await facts.apply_deltas([add("alice", ["a1", "not-stored-here"])])
    assert result.added == 1


async def test_explain_shows_only_the_facts_own_scope(
    stores: tuple[Path, SQLiteFactStore],
) -> None:
    path, facts = stores
    delta = add("alice", ["a1", "later"])
    await facts.apply_deltas([delta])
    # an episode of bob's arrives later under an id the fact cites
    async with SQLiteMemoryStore(path) as memory:
        await memory.put_many([episode("later", "bob", "bob's later secret")])
    explained = await facts.explain(delta.new_fact_id)
    by_id = {e.id: e for e in explained.source_episodes}
    assert by_id["a1"].content == "alice said tea"
    assert by_id["later"].content is None  # named, but not shown


async def test_a_pass_writes_only_its_own_partition(
    stores: tuple[Path, SQLiteFactStore],
) -> None:
    path, facts = stores
    await facts.bootstrap()
    before = dump(path)
    basis = PassBasis("p", Partition("alice", "a1"), {}, 0)
    with pytest.raises(DeltaValidationError, match=r"deltas\[0\]: a pass over .* for \('bob'"):
        await facts.apply_deltas([add("bob", ["b1"])], basis=basis)
    assert dump(path) == before
