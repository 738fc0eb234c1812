"""Entities and the graph reads of recall, on SQLite and PostgreSQL alike: folding, aliases
and their clashes, implicit entities from facts, profiles after a real consolidation,
temporal neighbours, mentions, lineage, and hostile input."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import PG_URL, pg_schema
from e2e_helpers import DEFAULT, T0, episode, spo

from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import EntityError, EntityNotFoundError
from stargraph_mem.model.entities import Entity, fold_entity_name
from stargraph_mem.stores import AddDelta, DeleteDelta, FactPayload, Partition
from stargraph_mem.stores.copy import copy_database
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.protocols import Database
from stargraph_mem.stores.repositories.entities import MAX_SEEDS, fold_name

P = Partition("alice", "rag")
KEY = P.key
OTHER = Partition("bob", "rag").key


@pytest.fixture
async def db(new_location: Callable[[], str]) -> AsyncIterator[Database]:
    async with open_database(new_location()) as database:
        yield database


async def state(db: Database, key: str = KEY) -> list[tuple[Any, ...]]:
    """What the registry holds for a partition (to check that a refusal changed nothing)."""
    return [
        (e.id, e.canonical_name, e.type, e.aliases, e.updated_at)
        for e in await db.entities.entities(key)
    ]


async def put(db: Database, *episodes: Episode) -> None:
    await db.memory.put_many(list(episodes))


def add(subject: str, obj: str, src: str, *, predicate: str = "likes") -> AddDelta:
    return AddDelta(
        user="alice",
        agent="rag",
        source_episode_ids=[src],
        promotion_ts=T0,
        rule_id="r1",
        confidence=0.7,
        fact=FactPayload(subject=subject, predicate=predicate, object=obj),
    )


# --- folding and the registry ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "folded"),
    [
        ("Zoë", "zoe"),
        ("BERLIN", "berlin"),
        ("  New\tYork \n City ", "new york city"),
        ("Crème", "creme"),
    ],
)
def test_names_fold_case_accents_and_whitespace(given: str, folded: str) -> None:
    assert fold_name(given) == folded
    assert fold_entity_name(given) == folded  # the compiler folds the same way


async def test_lookups_fold_case_accents_and_whitespace(db: Database) -> None:
    zoe = await db.entities.define(KEY, "Zoë", type="person")
    berlin = await db.entities.define(P, "Berlin", aliases=["Berlin DE", "BER"], type="place")
    assert zoe.type == "person" and zoe.declared and zoe.aliases == ()
    for text in ("zoe", "ZOE", " Zoë ", "zoë"):
        assert await db.entities.resolve(KEY, text) == zoe
    for text in ("BERLIN", "berlin", "berlin   de", "Ber"):
        found = await db.entities.get(KEY, text)
        assert found is not None and found.id == berlin.id
    assert berlin.aliases == ("Berlin DE", "BER")
    assert await db.entities.resolve(KEY, "Munich") is None
    assert await db.entities.resolve(OTHER, "berlin") is None  # one partition's registry


async def test_define_merges_aliases_and_is_idempotent(db: Database) -> None:
    first = await db.entities.define(KEY, "Berlin", aliases=["BER"], type="place")
    again = await db.entities.define(KEY, "berlin", aliases=["ber", "Bärlin", "Berlin DE"])
    assert again.id == first.id and again.canonical_name == "Berlin"
    assert again.aliases == ("BER", "Bärlin", "Berlin DE")
    assert again.type == "place"  # kept when not given
    before = await state(db)
    same = await db.entities.define(KEY, "BER", aliases=["Berlin DE"])  # by an alias
    assert same.id == first.id and await state(db) == before  # nothing new: nothing written
    typed = await db.entities.define(KEY, "Berlin", type="organization")
    assert typed.type == "organization" and typed.aliases == again.aliases


async def test_an_alias_of_another_entity_is_refused_and_nothing_changes(db: Database) -> None:
    await db.entities.define(KEY, "Berlin", aliases=["BER"], type="place")
    await db.entities.define(KEY, "Munich", aliases=["MUC"], type="place")
    before = await state(db)
    with pytest.raises(
        EntityError, match=r"alias 'ber' of 'Munich' already names the entity 'Berlin'"
    ):
        await db.entities.define(KEY, "Munich", aliases=["Monaco", "ber"])
    with pytest.raises(EntityError, match="already names the entity 'Munich'"):
        await db.entities.define(KEY, "Bavaria", aliases=["MÜNICH"])
    assert await state(db) == before
    assert await db.entities.resolve(KEY, "Monaco") is None
    assert await db.entities.resolve(KEY, "Bavaria") is None
    # the same alias in another partition is another entity's
    other = await db.entities.define(OTHER, "Bern", aliases=["BER"])
    assert other.partition_key == OTHER


# --- implicit entities, facts of entities, lineage --------------------------------------------


async def test_fact_subjects_and_objects_are_entities(db: Database) -> None:
    await put(db, episode("e1", user="alice", agent="rag"))
    result = await db.facts.apply_deltas([add("Zoë", "Jazz Music", "e1")])
    (fact_id,) = result.created_fact_ids
    zoe = await db.entities.resolve(KEY, "ZOE")
    assert zoe is not None and not zoe.declared and zoe.canonical_name == "Zoë"
    assert zoe.aliases == ()
    jazz = await db.entities.resolve(KEY, "jazz   music")
    assert jazz is not None and jazz.canonical_name == "Jazz Music"
    assert await db.entities.resolve(OTHER, "zoe") is None
    ids = await db.entities.facts_of_entities(KEY, ["zoe"], limit=10)
    assert ids == [fact_id]
    # a declared entity with that name as alias gathers the facts under all its names
    await db.entities.define(KEY, "Zoe Smith", aliases=["Zoë"], type="person")
    assert await db.entities.facts_of_entities(KEY, ["zoe smith"], limit=10) == ids
    declared = await db.entities.resolve(KEY, "zoe")
    assert declared is not None and declared.declared and declared.canonical_name == "Zoe Smith"
    # closed facts name no entity any more
    await db.facts.apply_deltas(
        [
            DeleteDelta(
                user="alice",
                agent="rag",
                source_episode_ids=["e1"],
                promotion_ts=T0,
                rule_id="r1",
                confidence=0.7,
                replaces=ids,
            )
        ]
    )
    assert await db.entities.resolve(KEY, "jazz music") is None
    assert await db.entities.facts_of_entities(KEY, ["Zoë"], limit=10) == []


async def test_lineage_neighbours_go_both_ways(db: Database) -> None:
    for eid in ("e1", "e2", "e3"):
        await put(db, episode(eid, user="alice", agent="rag"))
    await put(db, episode("b1", user="bob", agent="rag"))
    await db.facts.apply_deltas([add("zoe", "jazz", "e1")])
    await db.facts.apply_deltas([add("zoe", "tea", "e1", predicate="drinks")])
    await db.facts.apply_deltas([add("max", "rock", "e2")])
    ids = await db.entities.facts_of_entities(KEY, ["zoe"], limit=10)
    assert len(ids) == 2
    jazz = [i for i in ids if i in await db.entities.facts_of_entities(KEY, ["jazz"], limit=5)]
    found = await db.entities.lineage_neighbours(jazz)
    assert found.episode_ids == ("e1",)
    assert set(found.fact_ids) == set(ids) - set(jazz)  # the tea fact, also from e1
    by_episode = await db.entities.lineage_neighbours([], episode_ids=["e2", "b1", "nope"])
    assert by_episode.episode_ids == ()
    assert by_episode.fact_ids == tuple(await db.entities.facts_of_entities(KEY, ["max"], limit=5))
    empty = await db.entities.lineage_neighbours(["no-such-fact"])
    assert empty.episode_ids == () and empty.fact_ids == ()


# --- a profile after a real consolidation -----------------------------------------------------


async def test_profile_after_consolidating_with_the_default_pack(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    now = T0 + timedelta(days=1)
    async with Consolidator(location, [compile_file(DEFAULT)], clock=lambda: now) as mem:
        await mem.record_many(
            [
                episode("e1", 0, **spo("Zoë", "lives_in", "Berlin")),
                episode("e2", 5, **spo("zoë", "works_at", "Acme")),
                episode("e3", 10, **spo("Zoë", "lives_in", "Munich")),
                episode("e4", 15, **spo("Max", "knows", "ZOE")),
                episode("e5", 20, **spo("Max", "lives_in", "Paris")),
            ]
        )
        await mem.consolidate(now=now)
        current = await mem.facts(user="alice", agent="rag")
        assert len(current) == 4  # Munich replaced Berlin within the pass
    async with open_database(location) as db:
        await db.entities.define(KEY, "Zoë", aliases=["Zoe Smith"], type="person")
        profile = await db.entities.profile(KEY, "zoe smith")
        assert profile.entity.canonical_name == "Zoë" and profile.aliases == ("Zoe Smith",)
        triples = {(f.subject, f.predicate, f.object) for f in profile.facts}
        assert triples == {
            ("Zoë", "lives_in", "Munich"),
            ("zoë", "works_at", "Acme"),
            ("Max", "knows", "ZOE"),
        }
        kinds = [(e.kind, e.episode_id or "", e.status) for e in profile.timeline]
        episodes = [eid for kind, eid, _ in kinds if kind == "episode"]
        assert episodes == ["e1", "e2", "e3", "e4"]  # in time order; e5 is not about her
        assert [e.at for e in profile.timeline] == sorted(e.at for e in profile.timeline)
        closed = [e for e in profile.timeline if e.kind == "fact_closed"]
        assert [(e.status, e.text) for e in closed] == [("superseded", "Zoë lives_in Berlin")]
        added = [e.text for e in profile.timeline if e.kind == "fact_added"]
        assert sorted(added) == sorted(
            ["Zoë lives_in Berlin", "Zoë lives_in Munich", "zoë works_at Acme", "Max knows ZOE"]
        )
        first = next(e for e in profile.timeline if e.kind == "episode")
        berlin = next(e.fact_id for e in closed)
        assert first.text == "text of e1" and berlin in first.fact_ids
        assert not profile.truncated
        implicit = await db.entities.profile(KEY, "PARIS")
        assert not implicit.entity.declared and [f.object for f in implicit.facts] == ["Paris"]
        small = await db.entities.profile(KEY, "zoe", limit=1)
        assert small.truncated and len(small.facts) <= 1
        with pytest.raises(EntityNotFoundError, match="no entity named 'Rome'"):
            await db.entities.profile(KEY, "Rome")


# --- temporal neighbours -----------------------------------------------------------------------


async def test_temporal_neighbours_stay_in_the_session_and_partition(db: Database) -> None:
    layout = [
        ("a1", "s1", 0),
        ("a2", "s1", 1),
        ("b1", "s2", 2),  # another session, between them in time
        ("a3", "s1", 3),
        ("a4", "s1", 4),
        ("a5", "s1", 5),
        ("b2", "s2", 6),
    ]
    for eid, session, minute in layout:
        await put(db, episode(eid, minute, user="alice", session=session))
    await put(db, episode("x1", 3, user="bob", session="s1"))  # another partition
    await put(db, episode("a3b", 3, user="alice", session="s1"))  # same time as a3
    found = await db.entities.temporal_neighbours(KEY, ["a3"], depth=2)
    # same ts: ordered by seq (a3b was stored after a3)
    assert found == [("a2", 1), ("a3b", 1), ("a1", 2), ("a4", 2)]
    assert await db.entities.temporal_neighbours(KEY, ["a3"], depth=1) == [("a2", 1), ("a3b", 1)]
    both = await db.entities.temporal_neighbours(KEY, ["a1", "b1", "x1", "nope"], depth=1)
    assert both == [("a2", 1), ("b2", 1)]  # x1 is bob's: not a seed here
    assert await db.entities.temporal_neighbours(OTHER, ["a3"]) == []
    window = await db.entities.temporal_neighbours(
        KEY,
        ["a3"],
        depth=2,
        after_us=T0 + timedelta(minutes=1),
        before_us=T0 + timedelta(minutes=4),
    )
    assert window == [("a2", 1), ("a3b", 1)]
    micro = int((T0 + timedelta(minutes=4)).timestamp() * 1_000_000)
    assert await db.entities.temporal_neighbours(KEY, ["a5"], before_us=micro) == [
        ("a3b", 1),
        ("a3", 2),
    ]
    assert await db.entities.temporal_neighbours(KEY, []) == []


# --- mentions ---------------------------------------------------------------------------------


async def test_mentioned_finds_multi_word_names_as_whole_words(db: Database) -> None:
    york = await db.entities.define(
        KEY, "New York City", aliases=["NYC", "Big Apple"], type="place"
    )
    berlin = await db.entities.define(KEY, "Berlin", type="place")
    await put(db, episode("e1", user="alice", agent="rag"))
    await db.facts.apply_deltas([add("Zoë Smith", "Jazz", "e1")])

    def names(found: list[Entity]) -> list[str]:
        return [e.canonical_name for e in found]

    assert names(await db.entities.mentioned(KEY, "Did ZOE SMITH move to new  york city?")) == [
        "Zoë Smith",
        "New York City",
    ]
    assert names(await db.entities.mentioned(KEY, "the big apple, or berlin!")) == [
        "New York City",
        "Berlin",
    ]
    assert await db.entities.mentioned(KEY, "Berliner newyork york smithy jazzy") == []
    assert names(await db.entities.mentioned(KEY, "jazz and nyc and NYC again")) == [
        "Jazz",
        "New York City",
    ]
    assert york.id != berlin.id
    assert await db.entities.mentioned(KEY, "") == []
    assert await db.entities.mentioned(OTHER, "berlin") == []


# --- hostile input ----------------------------------------------------------------------------


async def test_hostile_input_is_refused_clearly_and_changes_nothing(db: Database) -> None:
    await db.entities.define(KEY, "Berlin", aliases=["BER"], type="place")
    before = await state(db)
    naive = datetime(2026, 5, 1, 9, 0)
    cases: list[tuple[Any, str]] = [
        (db.entities.define(KEY, "Ber\x00lin"), "NUL"),
        (db.entities.define(KEY, "Berlin", aliases=["B\x00"]), "NUL"),
        (db.entities.define(KEY, "x" * 10_000), "10000 characters long; at most 256"),
        (db.entities.define(KEY, "Berlin", aliases=["y" * 300]), "alias of 'Berlin' is 300"),
        (db.entities.define(KEY, "   "), "empty"),
        (db.entities.define(KEY, "Rome", type="city"), "entity type 'city' is not one of"),  # type: ignore[arg-type]
        (db.entities.define(KEY, "Rome", aliases="Roma"), "must be a list"),
        (db.entities.define(KEY, "Rome", aliases=[f"r{i}" for i in range(65)]), "at most 64"),
        (db.entities.define(KEY, "Rome", at=naive), "naive datetime"),
        (db.entities.define(KEY, "Rome\ud800"), "lone surrogate"),
        (db.entities.define("", "Rome"), "partition key"),
        (db.entities.resolve(KEY, "a\x00b"), "NUL"),
        (db.entities.mentioned(KEY, "where\x00"), "not valid text"),
        (db.entities.mentioned(KEY, "w " * 300), "at most 256"),
        (db.entities.profile(KEY, "Berlin", limit=0), "limit must be an integer"),
        (db.entities.temporal_neighbours(KEY, ["e1"], after_us=naive), "naive datetime"),
        (db.entities.temporal_neighbours(KEY, ["e1"], depth=0), "depth must be"),
        (db.entities.temporal_neighbours(KEY, "e1"), "must be a list of ids"),
        (db.entities.temporal_neighbours(KEY, ["e\x00"]), "not a valid id"),
        (
            db.entities.temporal_neighbours(KEY, [f"e{i}" for i in range(MAX_SEEDS + 1)]),
            "at most 256",
        ),
        (db.entities.facts_of_entities(KEY, "Berlin", limit=5), "must be a list"),
        (db.entities.facts_of_entities(KEY, ["Berlin"], limit=10_000), "limit must be"),
        (db.entities.lineage_neighbours(["f\x00"]), "not a valid id"),
    ]
    for call, message in cases:
        with pytest.raises(EntityError, match=message):
            await call
    assert await state(db) == before
    assert await db.entities.resolve(KEY, "Rome") is None


# --- copies -----------------------------------------------------------------------------------


async def test_a_copy_carries_the_entities(tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    async with open_database(source) as db:
        made = await db.entities.define(KEY, "Zoë", aliases=["Zoe Smith"], type="person")
    async with pg_schema() as schema:
        target = f"{PG_URL}?schema={schema}"
        report = await copy_database(source, target)
        assert report.rows["entities"] == 1 and report.rows["entity_aliases"] == 2
        async with open_database(target) as db:
            assert await db.entities.resolve(KEY, "ZOE SMITH") == made
            with pytest.raises(EntityError, match="already names the entity 'Zoë'"):
                await db.entities.define(KEY, "Zed", aliases=["zoe smith"])
