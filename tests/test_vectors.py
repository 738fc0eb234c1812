"""Vectors and the episodes' full-text index, on both backends: lazy catch-up, partitions
and embedder identities kept apart, closed facts left out, backfill, pending counts, bad
input refused with nothing changed, and SQLite files made before the tables."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vector_helpers import WordEmbedder

from stargraph_mem.embedding import identity
from stargraph_mem.errors import SearchError, StoreError
from stargraph_mem.model.deltas import AddDelta, DeleteDelta
from stargraph_mem.stores import Episode, FactPayload, Partition
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.protocols import Database
from stargraph_mem.stores.repositories.search import query_words
from stargraph_mem.stores.repositories.vectors import BackfillReport, fact_text

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
ALICE = Partition("alice", "a1")
BOB = Partition("bob", "a1")


def episode(eid: str, content: str, user: str = "alice", *, minutes: int = 0) -> Episode:
    return Episode(
        id=eid,
        content=content,
        timestamp=T0 + timedelta(minutes=minutes),
        user=user,
        session="s1",
        agent="a1",
    )


def add(obj: str, src: str = "e1", *, user: str = "alice", predicate: str = "likes") -> AddDelta:
    return AddDelta(
        user=user,
        agent="a1",
        source_episode_ids=[src],
        promotion_ts=T0,
        rule_id="r1",
        confidence=0.7,
        fact=FactPayload(subject=user, predicate=predicate, object=obj),
    )


def delete(fact_id: str, status: str = "deleted") -> DeleteDelta:
    return DeleteDelta(
        user="alice",
        agent="a1",
        replaces=[fact_id],
        status=status,
        source_episode_ids=["e1"],
        promotion_ts=T0 + timedelta(hours=1),
        rule_id="r1",
        confidence=1.0,
    )


@pytest.fixture
async def db(new_location: Callable[[], str]) -> AsyncIterator[Database]:
    async with open_database(new_location()) as database:
        yield database


async def dump(database: Database) -> list[Any]:
    """The vector tables' rows (to compare before and after a refused call)."""
    if database.backend == "sqlite":
        path = database.location.path  # type: ignore[attr-defined]
        with sqlite3.connect(path) as conn:
            return [
                conn.execute("SELECT * FROM vectors ORDER BY seq").fetchall(),
                conn.execute("SELECT * FROM index_marks ORDER BY 1, 2, 3").fetchall(),
            ]
    async with database.connection() as conn:  # type: ignore[attr-defined]
        return [
            await conn.fetch("SELECT * FROM vectors ORDER BY seq"),
            await conn.fetch("SELECT * FROM index_marks ORDER BY 1, 2, 3"),
        ]


async def test_catch_up_after_a_put_finds_the_new_episode(db: Database) -> None:
    embedder = WordEmbedder()
    await db.memory.put_many([episode("e1", "green tea in the morning")])
    assert await db.vectors.pending(embedder) == 1
    assert await db.vectors.catch_up(ALICE.key, embedder) == 1
    assert await db.vectors.catch_up(ALICE.key, embedder) == 0  # nothing pending
    await db.memory.put_many([episode("e2", "black coffee at noon", minutes=1)])
    query = embedder.vector("coffee at noon")
    before = await db.vectors.nearest(ALICE.key, "episode", embedder, query, limit=5)
    assert [i for i, _ in before] == ["e1"]  # not caught up yet: e2 has no vector
    assert await db.vectors.catch_up(ALICE.key, embedder) == 1
    after = await db.vectors.nearest(ALICE.key, "episode", embedder, query, limit=5)
    assert [i for i, _ in after] == ["e2", "e1"]
    assert after[0][1] == pytest.approx(float(query @ embedder.vector("black coffee at noon")))
    assert await db.vectors.pending(embedder) == 0
    hits = await db.vectors.episode_text_hits(ALICE.key, ["coffee"], limit=5)
    assert [i for i, _ in hits] == ["e2"]


async def test_full_text_is_caught_up_before_a_read_and_folds_accents(db: Database) -> None:
    await db.memory.put_many(
        [
            episode("e1", "Crème brûlée for dessert"),
            episode("e2", "creme and more creme", minutes=5),
            episode("b1", "creme brulee too", user="bob"),
        ]
    )
    hits = await db.vectors.episode_text_hits(ALICE.key, query_words("CREME brulee") or [], limit=5)
    assert sorted(i for i, _ in hits) == ["e1", "e2"]
    assert all(score > 0 for _, score in hits)
    assert hits == sorted(hits, key=lambda h: (-h[1], h[0]))
    windowed = await db.vectors.episode_text_hits(
        ALICE.key, ["creme"], limit=5, after_us=T0 + timedelta(minutes=1)
    )
    assert [i for i, _ in windowed] == ["e2"]
    early = await db.vectors.episode_text_hits(
        ALICE.key, ["creme"], limit=5, before_us=T0 + timedelta(minutes=1)
    )
    assert [i for i, _ in early] == ["e1"]
    await db.memory.put_many([episode("e3", "crème again", minutes=9)])
    later = await db.vectors.episode_text_hits(ALICE.key, ["creme"], limit=5)
    assert "e3" in {i for i, _ in later}


async def test_never_another_partition(db: Database) -> None:
    embedder = WordEmbedder()
    await db.memory.put_many(
        [episode("a1", "tea with milk"), episode("b1", "tea with milk", user="bob")]
    )
    await db.facts.apply_deltas([add("tea", "a1"), add("tea", "b1", user="bob")])
    assert await db.vectors.catch_up(ALICE.key, embedder) == 2  # its episode and fact
    assert await db.vectors.pending(embedder) == 2  # bob's are still pending
    query = embedder.vector("tea with milk")
    assert [
        i for i, _ in await db.vectors.nearest(ALICE.key, "episode", embedder, query, limit=9)
    ] == ["a1"]
    facts = await db.vectors.nearest(ALICE.key, "fact", embedder, query, limit=9)
    assert [i for i, _ in facts] == [add("tea", "a1").new_fact_id]
    assert await db.vectors.nearest(BOB.key, "episode", embedder, query, limit=9) == []
    assert await db.vectors.catch_up(BOB.key, embedder) == 2
    # facts made later in one partition are embedded there, not in the other
    await db.facts.apply_deltas([add("jam", "b1", user="bob")])
    assert await db.vectors.catch_up(ALICE.key, embedder) == 0
    assert await db.vectors.catch_up(BOB.key, embedder) == 1
    await db.facts.apply_deltas([add("jam", "a1")])
    assert await db.vectors.catch_up(ALICE.key, embedder) == 1
    assert [
        i for i, _ in await db.vectors.nearest(BOB.key, "episode", embedder, query, limit=9)
    ] == ["b1"]


async def test_never_mixes_embedder_identities(db: Database) -> None:
    old, new = WordEmbedder(version="1"), WordEmbedder(version="2")
    await db.memory.put_many([episode("e1", "walks in the park")])
    await db.vectors.catch_up(ALICE.key, old)
    query = old.vector("park")
    assert [i for i, _ in await db.vectors.nearest(ALICE.key, "episode", old, query, limit=3)] == [
        "e1"
    ]
    assert await db.vectors.nearest(ALICE.key, "episode", new, query, limit=3) == []
    assert await db.vectors.pending(new) == 1 and await db.vectors.pending(old) == 0
    await db.vectors.catch_up(ALICE.key, new)
    assert await db.vectors.drop(identity(old)) == 1
    assert await db.vectors.nearest(ALICE.key, "episode", old, query, limit=3) == []
    assert len(await db.vectors.nearest(ALICE.key, "episode", new, query, limit=3)) == 1
    # a dropped identity is embedded again from the start
    assert await db.vectors.pending(old) == 1
    assert await db.vectors.catch_up(ALICE.key, old) == 1


async def test_closed_facts_are_left_out_when_current_only(db: Database) -> None:
    embedder = WordEmbedder()
    await db.memory.put_many([episode("e1", "tea")])
    tea, coffee, juice = add("tea"), add("coffee"), add("juice")
    await db.facts.apply_deltas([tea, coffee, juice])
    await db.vectors.catch_up(ALICE.key, embedder)
    query = embedder.vector("alice likes tea")
    ranked = await db.vectors.nearest(ALICE.key, "fact", embedder, query, limit=3)
    assert ranked[0][0] == tea.new_fact_id and len(ranked) == 3
    # closed after the cache read it: checked at query time
    await db.facts.apply_deltas([delete(tea.new_fact_id), delete(coffee.new_fact_id, "archived")])
    ranked = await db.vectors.nearest(ALICE.key, "fact", embedder, query, limit=3)
    assert [i for i, _ in ranked] == [juice.new_fact_id]
    every = await db.vectors.nearest(
        ALICE.key, "fact", embedder, query, limit=3, current_only=False
    )
    assert {i for i, _ in every} == {tea.new_fact_id, coffee.new_fact_id, juice.new_fact_id}
    archived = await db.vectors.nearest(
        ALICE.key, "fact", embedder, query, limit=3, current_only=False, statuses=["archived"]
    )
    assert [i for i, _ in archived] == [coffee.new_fact_id]
    # a fact closed before it was embedded never gets a vector
    milk = add("milk")
    await db.facts.apply_deltas([milk])
    await db.facts.apply_deltas([delete(milk.new_fact_id)])
    assert await db.vectors.catch_up(ALICE.key, embedder) == 0
    assert await db.vectors.pending(embedder) == 0


async def test_ranking_is_deterministic_with_ties_by_id(db: Database) -> None:
    embedder = WordEmbedder()
    await db.memory.put_many(
        [episode(eid, "same words here", minutes=n) for n, eid in enumerate(["e3", "e1", "e2"])]
        + [episode("e0", "other", minutes=9)]
    )
    await db.vectors.catch_up(ALICE.key, embedder)
    query = embedder.vector("same words here")
    ranked = await db.vectors.nearest(ALICE.key, "episode", embedder, query, limit=4)
    assert [i for i, _ in ranked] == ["e1", "e2", "e3", "e0"]
    assert ranked[0][1] == ranked[1][1] == ranked[2][1] > ranked[3][1]
    assert await db.vectors.nearest(ALICE.key, "episode", embedder, query, limit=2) == ranked[:2]
    windowed = await db.vectors.nearest(
        ALICE.key,
        "episode",
        embedder,
        query,
        limit=4,
        after_us=T0 + timedelta(minutes=1),
        before_us=T0 + timedelta(minutes=9),
    )
    assert [i for i, _ in windowed] == ["e1", "e2"]
    await db.memory.put_many([episode("e9", "same words", minutes=-5)])  # stored last
    await db.vectors.catch_up(ALICE.key, embedder)
    apart = await db.vectors.nearest(
        ALICE.key, "episode", embedder, query, limit=4, before_us=T0 + timedelta(minutes=1)
    )
    assert [i for i, _ in apart] == ["e3", "e9"]


async def test_backfill_reports_progress_and_counts(db: Database) -> None:
    embedder = WordEmbedder()
    await db.memory.put_many(
        [episode(f"a{n}", f"alice note {n}", minutes=n) for n in range(7)]
        + [episode(f"b{n}", f"bob note {n}", user="bob", minutes=n) for n in range(4)]
    )
    await db.facts.apply_deltas([add("tea", "a0"), add("jam", "b0", user="bob")])
    assert await db.vectors.pending(embedder) == 13
    seen: list[tuple[int, int]] = []
    report = await db.vectors.backfill(embedder, batch=3, progress=lambda d, t: seen.append((d, t)))
    assert report == BackfillReport(identity(embedder), 2, 11, 2)
    assert report.embedded == 13
    assert seen[0] == (0, 13) and seen[-1] == (13, 13)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert max(embedder.calls) <= 3
    assert await db.vectors.pending(embedder) == 0
    again = await db.vectors.backfill(embedder)
    assert again.embedded == 0
    other = WordEmbedder(name="other")
    assert (await db.vectors.backfill(other)).embedded == 13  # a new identity: everything


async def test_episodes_and_their_times_in_the_order_asked(db: Database) -> None:
    await db.memory.put_many([episode(f"e{n}", f"note {n}", minutes=n) for n in range(3)])
    got = await db.vectors.episodes(["e2", "missing", "e0"])
    assert [e.id for e in got] == ["e2", "e0"]
    assert got[0].content == "note 2"
    times = await db.vectors.episode_times(["e1", "zz"])
    assert times == {"e1": (int((T0 + timedelta(minutes=1)).timestamp() * 1_000_000), "s1")}
    assert await db.vectors.episodes([]) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda v, e, q: v.nearest(ALICE.key, "facts", e, q, limit=3), "kind must be"),
        (lambda v, e, q: v.nearest(ALICE.key, "episode", e, q, limit=0), "limit"),
        (lambda v, e, q: v.nearest(ALICE.key, "episode", e, q, limit=True), "limit"),
        (lambda v, e, q: v.nearest(ALICE.key, "episode", e, q[:3], limit=3), "shape"),
        (
            lambda v, e, q: v.nearest(ALICE.key, "episode", e, q * np.nan, limit=3),
            "NaN",
        ),
        (
            lambda v, e, q: v.nearest(
                ALICE.key, "episode", e, q, limit=3, after_us=datetime(2026, 1, 1)
            ),
            "naive",
        ),
        (
            lambda v, e, q: v.nearest(ALICE.key, "fact", e, q, limit=3, statuses=["gone"]),
            "statuses",
        ),
        (lambda v, e, q: v.nearest("", "episode", e, q, limit=3), "partition_key"),
        (lambda v, e, q: v.nearest(ALICE.key, "episode", "no-slash", q, limit=3), "identity"),
        (
            lambda v, e, q: v.episode_text_hits(
                ALICE.key, ["tea"], limit=3, before_us=datetime(2026, 1, 1)
            ),
            "naive",
        ),
        (lambda v, e, q: v.episode_text_hits(ALICE.key, ["tea OR x"], limit=3), "one word"),
        (lambda v, e, q: v.episode_text_hits(ALICE.key, "tea", limit=3), "list of words"),
        (lambda v, e, q: v.episode_text_hits(ALICE.key, ["tea"], limit=5000), "limit"),
        (lambda v, e, q: v.backfill(e, batch=513), "batch"),
        (lambda v, e, q: v.catch_up(ALICE.key, object()), "Embedder"),
        (lambda v, e, q: v.drop(""), "identity"),
    ],
)
async def test_bad_input_raises_and_changes_nothing(
    db: Database, call: Callable[..., Any], message: str
) -> None:
    embedder = WordEmbedder()
    await db.memory.put_many([episode("e1", "tea")])
    await db.vectors.catch_up(ALICE.key, embedder)
    before = await dump(db)
    with pytest.raises((StoreError, SearchError), match=message):
        await call(db.vectors, embedder, embedder.vector("tea"))
    assert await dump(db) == before


async def test_a_failing_embedder_stores_nothing_for_its_batch(db: Database) -> None:
    class Broken(WordEmbedder):
        def embed(self, texts: Any) -> Any:
            return np.zeros((len(texts), 3), dtype=np.float32)

    await db.memory.put_many([episode("e1", "tea")])
    before = await dump(db)
    with pytest.raises(StoreError, match="returned shape"):
        await db.vectors.catch_up(ALICE.key, Broken())
    assert (await dump(db))[0] == before[0]
    assert await db.vectors.pending(Broken()) == 1


def test_fact_text_joins_the_fields_and_a_payload() -> None:
    assert fact_text("alice", "likes", "tea") == "alice likes tea"
    assert fact_text("alice", "likes", "tea", b"{}") == "alice likes tea"
    assert fact_text("a", "b", "c", b'{"note":"hot"}') == 'a b c {"note":"hot"}'


async def test_a_sqlite_file_made_before_the_tables_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with open_database(path) as database:
        await database.memory.put_many([episode("e1", "tea at five")])
    with sqlite3.connect(path) as conn:  # as a file written before vectors existed
        for name in ("vectors", "index_marks", "episode_text"):
            conn.execute(f"DROP TABLE {name}")
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'vectors'")
    async with open_database(path) as database:
        embedder = WordEmbedder()
        assert await database.vectors.catch_up(ALICE.key, embedder) == 1
        hits = await database.vectors.episode_text_hits(ALICE.key, ["tea"], limit=3)
        assert [i for i, _ in hits] == ["e1"]
    with sqlite3.connect(path) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"vectors", "index_marks", "episode_text"} <= names
