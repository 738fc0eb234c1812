"""Consolidator.recall on SQLite and PostgreSQL alike: hybrid strategies fused by RRF,
intents, time windows, kinds, entities, context, access, bad input, and the properties
(never another partition, never a closed fact unless asked, same inputs same ranking, a
recall after a record sees it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from e2e_helpers import DEFAULT, T0
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stargraph_mem.compiler.pack import compile_file, compile_text
from stargraph_mem.embedding import identity
from stargraph_mem.embedding.hashing import HashingEmbedder
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.recall.context import approx_tokens
from stargraph_mem.errors import (
    EntityNotFoundError,
    RecallError,
    SearchError,
    StargraphMemError,
)
from stargraph_mem.model.episodes import Episode

NOW = datetime(2026, 6, 1, tzinfo=UTC)

LIFE = [
    ("lives_in", "Berlin", "I moved to Berlin last spring and love the city"),
    ("prefers", "tea", "I really like drinking green tea in the morning"),
    ("works_at", "Acme", "My job at Acme is as a software engineer"),
    ("owns", "cat", "My cat Whiskers sleeps all day on the sofa"),
    ("plays", "piano", "Every evening I practise the piano for an hour"),
]


def ep(
    eid: str,
    content: str,
    *,
    user: str = "alice",
    agent: str = "rag",
    session: str = "s1",
    at: datetime | None = None,
    triple: tuple[str, str, str] | None = None,
) -> Episode:
    meta = (
        {} if triple is None else dict(zip(("subject", "predicate", "object"), triple, strict=True))
    )
    return Episode(
        id=eid,
        content=content,
        timestamp=at or T0,
        user=user,
        session=session,
        agent=agent,
        metadata=meta,
    )


def life(user: str = "alice", *, days: int = 0) -> list[Episode]:
    """One user's five statements, an hour apart, each stating a triple."""
    return [
        ep(
            f"{user}-{n}",
            content,
            user=user,
            at=T0 + timedelta(days=days, hours=n),
            triple=(user, predicate, obj),
        )
        for n, (predicate, obj, content) in enumerate(LIFE)
    ]


def memory(location: str, **kwargs: object) -> Consolidator:
    return Consolidator(location, [compile_file(DEFAULT)], clock=lambda: NOW, **kwargs)  # type: ignore[arg-type]


async def filled(location: str, users: Sequence[str] = ("alice", "bob")) -> None:
    async with memory(location) as mem:
        for user in users:
            for episode in life(user):
                await mem.record(episode)
        await mem.consolidate(now=NOW)


async def test_a_paraphrase_finds_the_fact_and_its_episode_with_explained_ranks(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    await filled(location)
    async with memory(location) as mem:
        result = await mem.recall(
            "which drink does she enjoy in the morning", user="alice", agent="rag"
        )
    assert result.hits, result
    texts = [hit.text for hit in result.hits[:3]]
    assert any("tea" in text for text in texts), texts
    for hit in result.hits:
        assert hit.strategies and all(rank >= 1 for rank in hit.strategies.values())
        assert hit.score > 0
        if "vector" in hit.strategies:
            assert hit.cosine is not None
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    assert result.embedder == identity(HashingEmbedder())


async def test_a_recall_after_a_record_sees_that_episode(new_location: Callable[[], str]) -> None:
    async with memory(new_location()) as mem:
        await mem.record(ep("e1", "The quarterly budget review moved to Thursday"))
        first = await mem.recall("budget review", user="alice", agent="rag", kinds="episodes")
        assert [h.id for h in first.hits] == ["e1"]
        await mem.record(
            ep("e2", "Budget approvals need two signatures", at=T0 + timedelta(hours=1))
        )
        second = await mem.recall("budget", user="alice", agent="rag", kinds="episodes")
        assert {h.id for h in second.hits} == {"e1", "e2"}
        assert all("fts" in h.strategies and "vector" in h.strategies for h in second.hits)


async def test_kinds_limit_and_time_windows(new_location: Callable[[], str]) -> None:
    location = new_location()
    async with memory(location) as mem:
        for n in range(6):
            await mem.record(
                ep(f"e{n}", f"note {n} about the garden roses", at=T0 + timedelta(days=n))
            )
        facts_only = await mem.recall("garden roses", user="alice", agent="rag", kinds="facts")
        assert all(h.kind == "fact" for h in facts_only.hits)
        episodes = await mem.recall(
            "garden roses", user="alice", agent="rag", kinds="episodes", limit=3
        )
        assert len(episodes.hits) == 3 and all(h.kind == "episode" for h in episodes.hits)
        day = (T0 + timedelta(days=2)).date().isoformat()
        windowed = await mem.recall(
            "garden roses", user="alice", agent="rag", kinds="episodes", after=day, before=day
        )
        assert [h.id for h in windowed.hits] == ["e2"]
        later = await mem.recall(
            "garden roses",
            user="alice",
            agent="rag",
            kinds="episodes",
            after=T0 + timedelta(days=4),
            limit=10,
        )
        assert {h.id for h in later.hits} == {"e4", "e5"}


async def test_closed_facts_only_when_asked(new_location: Callable[[], str]) -> None:
    location = new_location()
    async with memory(location) as mem:
        await mem.record(ep("e1", "I live in Paris", triple=("alice", "lives_in", "Paris")))
        await mem.record(
            ep(
                "e2",
                "Now I live in Lyon",
                at=T0 + timedelta(days=1),
                triple=("alice", "lives_in", "Lyon"),
            )
        )
        await mem.consolidate(now=NOW)
        current = await mem.recall("Paris Lyon live", user="alice", agent="rag", kinds="facts")
        assert [h.fact.object for h in current.hits if h.fact] == ["Lyon"]
        history = await mem.recall(
            "Paris Lyon live", user="alice", agent="rag", kinds="facts", include_history=True
        )
        assert {h.fact.object for h in history.hits if h.fact} == {"Paris", "Lyon"}


async def test_who_queries_resolve_declared_aliases_and_profile_the_entity(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    await filled(location, ["alice"])
    async with memory(location) as mem:
        await mem.define_entity(
            "Berlin", user="alice", agent="rag", aliases=["Berlin DE"], type="place"
        )
        result = await mem.recall("who lives in berlin de?", user="alice", agent="rag")
        assert result.intent == "who"
        assert "Berlin" in result.entities
        graph = [h for h in result.hits if "graph" in h.strategies]
        assert graph and graph[0].fact is not None and graph[0].fact.object == "Berlin"
        assert any(p.name == "Berlin" for p in result.profiles)
        assert "Berlin" in result.context(2000)
        profile = await mem.entity("berlin de", user="alice", agent="rag")
        assert profile.entity.canonical_name == "Berlin"
        assert [f.object for f in profile.facts] == ["Berlin"]
        with pytest.raises(EntityNotFoundError):
            await mem.entity("Atlantis", user="alice", agent="rag")
        only = await mem.recall("what about it", user="alice", agent="rag", entity="Berlin")
        assert {h.fact.object for h in only.hits if h.fact} <= {"Berlin"}


async def test_when_queries_walk_the_session_s_temporal_chain(
    new_location: Callable[[], str],
) -> None:
    async with memory(new_location()) as mem:
        chain = [
            "We booked the flight to Lisbon",
            "Packed the suitcases this evening",
            "Landed and took a taxi downtown",
            "The hotel lobby had blue tiles",
        ]
        for n, content in enumerate(chain):
            await mem.record(ep(f"t{n}", content, at=T0 + timedelta(minutes=n)))
        await mem.record(ep("x", "Unrelated chat about knitting", session="s2"))
        result = await mem.recall(
            "when did we book the flight to Lisbon", user="alice", agent="rag", kinds="episodes"
        )
        assert result.intent == "when"
        ids = [h.id for h in result.hits]
        assert ids[0] == "t0"
        walked = [h for h in result.hits if "graph" in h.strategies]
        assert walked and all(h.episode and h.episode.session == "s1" for h in walked)


async def test_same_inputs_give_the_same_ranking_on_a_reopened_memory(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    await filled(location)
    rankings = []
    for _ in range(2):
        async with memory(location) as mem:
            result = await mem.recall("engineer job city", user="alice", agent="rag", touch=False)
            rankings.append([(h.key, h.score, dict(h.strategies)) for h in result.hits])
    assert rankings[0] == rankings[1] and rankings[0]


async def test_access_is_recorded_unless_touch_is_false(new_location: Callable[[], str]) -> None:
    location = new_location()
    await filled(location, ["alice"])
    async with memory(location) as mem:
        result = await mem.recall("tea", user="alice", agent="rag", kinds="facts", touch=False)
        fact = result.hits[0].fact
        assert fact is not None
        assert (await mem.access(fact.id)).count == 0
        await mem.recall("tea", user="alice", agent="rag", kinds="facts")
        assert (await mem.access(fact.id)).count == 1


async def test_weights_switch_strategies_off_and_no_embedder_means_no_vectors(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    await filled(location, ["alice"])
    async with memory(location) as mem:
        result = await mem.recall(
            "tea morning",
            user="alice",
            agent="rag",
            weights={"fts": 1.0, "vector": 0.0, "graph": 1.0},
        )
        assert result.hits and all("vector" not in h.strategies for h in result.hits)
        assert result.embedder is None
    async with memory(location, embedder=None) as plain:
        result = await plain.recall("tea morning", user="alice", agent="rag")
        assert result.hits and all(set(h.strategies) <= {"fts", "graph"} for h in result.hits)
        with pytest.raises(StargraphMemError, match="without an embedder"):
            await plain.embed_backfill()


async def test_the_context_stays_within_budget_and_cites_sources(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    await filled(location, ["alice"])
    async with memory(location) as mem:
        result = await mem.recall("tea cat piano Berlin Acme", user="alice", agent="rag", limit=10)
    block = result.context(budget_tokens=120)
    assert block and approx_tokens(block) <= 120
    assert "[sources: alice-" in result.context(budget_tokens=2000)
    assert result.context(budget_tokens=1) == ""


async def test_backfill_embeds_everything_and_reports_progress(
    new_location: Callable[[], str],
) -> None:
    location = new_location()
    await filled(location)
    async with memory(location) as mem:
        assert await mem.embedding_backlog() == 20  # 10 episodes, 10 current facts
        seen: list[tuple[int, int]] = []
        report = await mem.embed_backfill(progress=lambda done, total: seen.append((done, total)))
        assert report.embedded == 20
        assert seen and seen[-1] == (20, 20)
        assert await mem.embedding_backlog() == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"query": ""}, RecallError, "empty"),
        ({"query": "   "}, RecallError, "empty"),
        ({"query": "?!"}, SearchError, "no words"),
        ({"kinds": "all"}, RecallError, "kinds"),
        ({"limit": 0}, RecallError, "limit"),
        ({"limit": True}, RecallError, "limit"),
        ({"after": datetime(2026, 1, 1)}, RecallError, "after"),
        ({"before": "next tuesday"}, RecallError, "before"),
        ({"after": "2026-02-01", "before": "2026-01-01"}, RecallError, "earlier"),
        ({"k": 0}, RecallError, "k"),
        ({"weights": {"fts": -1.0}}, StargraphMemError, "fts"),
        ({"entity": "Atlantis"}, EntityNotFoundError, "Atlantis"),
        ({"user": "a\x00b"}, StargraphMemError, "user"),
    ],
)
async def test_bad_input_is_refused_clearly_and_records_nothing(
    new_location: Callable[[], str],
    kwargs: dict[str, object],
    error: type[Exception],
    match: str,
) -> None:
    location = new_location()
    await filled(location, ["alice"])
    async with memory(location) as mem:
        before = [await mem.access(f.id) for f in await mem.facts(user="alice", agent="rag")]
        call: dict[str, object] = {"query": "tea", "user": "alice", "agent": "rag", **kwargs}
        query = call.pop("query")
        with pytest.raises((error, ValueError), match=match):
            await mem.recall(query, **call)  # type: ignore[arg-type]
        after = [await mem.access(f.id) for f in await mem.facts(user="alice", agent="rag")]
        assert before == after


PACK_WITH_ENTITIES = (
    DEFAULT.read_text()
    + """
entities:
  - name: New York
    aliases: [NYC, Big Apple]
    type: place
"""
)


async def test_a_pack_s_declared_entities_are_known_to_recall(
    new_location: Callable[[], str],
) -> None:
    compiled = compile_text(PACK_WITH_ENTITIES)
    async with Consolidator(new_location(), [compiled], clock=lambda: NOW) as mem:
        await mem.record(ep("e1", "Flying out tomorrow", triple=("alice", "visits", "New York")))
        await mem.consolidate(now=NOW)
        result = await mem.recall("who is in the big apple", user="alice", agent="rag")
        assert "New York" in result.entities
        profile = await mem.entity("NYC", user="alice", agent="rag")
        assert profile.entity.canonical_name == "New York"
        assert set(profile.aliases) >= {"NYC", "Big Apple"}


_users = st.lists(st.sampled_from(["ann", "ben", "cy"]), min_size=1, max_size=6)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(owners=_users, word=st.sampled_from(["tea", "piano", "Berlin", "engineer"]))
async def test_recall_never_returns_another_partition_s_rows_nor_closed_facts(
    new_location: Callable[[], str], owners: list[str], word: str
) -> None:
    async with memory(new_location()) as mem:
        for n, owner in enumerate(owners):
            for episode in life(owner, days=n):
                await mem.record(episode.model_copy(update={"id": f"{episode.id}-{n}"}))
        await mem.consolidate(now=NOW)
        for user in ("ann", "ben", "cy"):
            result = await mem.recall(word, user=user, agent="rag", limit=50, touch=False)
            for hit in result.hits:
                item = hit.fact if hit.fact is not None else hit.episode
                assert item is not None and item.user == user and item.agent == "rag"
                if hit.fact is not None:
                    assert hit.fact.is_current
            again = await mem.recall(word, user=user, agent="rag", limit=50, touch=False)
            assert [(h.key, h.score) for h in again.hits] == [(h.key, h.score) for h in result.hits]
