"""``StargraphStore`` with LangGraph's ``index`` (dims, embed, fields): semantic search by
cosine over the items' field texts, on both backends, with a deterministic fake embedder
whose vectors are counts of a few concepts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from backends import NewLocation, snapshot
from langchain_core.embeddings import Embeddings

from stargraph_mem.integrations.langgraph_store import (
    IndexConfigError,
    StargraphStore,
)

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)

CONCEPTS: dict[str, tuple[str, ...]] = {
    "food": ("pizza", "pasta", "eat", "eats", "dinner", "meal", "hungry", "food", "lunch"),
    "weather": ("rain", "rains", "umbrella", "sunny", "forecast", "weather"),
    "music": ("jazz", "song", "songs", "guitar", "music", "listen"),
    "pets": ("dog", "cat", "puppy", "pet", "walk"),
}
DIMS = len(CONCEPTS)


def concepts(text: str) -> list[float]:
    """How often ``text`` names each concept (a paraphrase names the same ones)."""
    words = [w.strip(".,?!\"'{}:[]").lower() for w in text.split()]
    return [float(sum(w in names for w in words)) for names in CONCEPTS.values()]


class Counting:
    """The fake embed function, counting the texts it embedded."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        return [concepts(t) for t in texts]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return round(dot / (math.hypot(*a) * math.hypot(*b)), 6)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


ITEMS: dict[str, dict[str, Any]] = {
    "meals": {"text": "Loves pizza and pasta for dinner", "tag": "food"},
    "rain": {"text": "Always carries an umbrella when it rains", "tag": "weather"},
    "tunes": {"text": "Plays jazz guitar songs", "tag": "music"},
}


async def fill(store: StargraphStore) -> None:
    for key, value in ITEMS.items():
        await store.aput(("alice", "bot"), key, value)


async def test_a_paraphrase_ranks_above_unrelated_items(new_location: NewLocation) -> None:
    embed = Counting()
    index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    location = new_location()
    async with StargraphStore.from_path(location, clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        assert store.index_config == {"dims": DIMS, "embed": embed, "fields": ["text"]}
        await fill(store)
        assert embed.texts == []  # embedded when a search first needs them
        query = "what does she eat when hungry?"
        hits = await store.asearch(("alice",), query=query)
        assert hits[0].key == "meals"
        expected = cosine(concepts(query), concepts(ITEMS["meals"]["text"]))
        assert hits[0].score == expected == 1.0
        assert [(h.key, h.score) for h in hits[1:]] == [("rain", 0.0), ("tunes", 0.0)]  # by key
        assert sorted(embed.texts) == sorted([query, *(v["text"] for v in ITEMS.values())])

        embed.texts.clear()
        music = await store.asearch(("alice", "bot"), query="listen to some music")
        assert music[0].key == "tunes"
        assert embed.texts == ["listen to some music"]  # only the query: items are kept

        filtered = await store.asearch(("alice",), query=query, filter={"tag": "weather"})
        assert [h.key for h in filtered] == ["rain"]
        assert await store.asearch(("bob",), query=query) == []
        page = await store.asearch(("alice",), query=query, limit=1, offset=1)
        assert [h.key for h in page] == ["rain"]

        await store.adelete(("alice", "bot"), "meals")
        after = await store.asearch(("alice",), query=query)
        assert "meals" not in [h.key for h in after]
        await store.aput(("alice", "bot"), "rain", {"text": "Orders a pizza meal", "tag": "x"})
        replaced = await store.asearch(("alice",), query=query)
        assert replaced[0].key == "rain"  # the new value's text is embedded
        ranked = [(h.key, h.score) for h in replaced]
        kept = store._index.vectors  # type: ignore[union-attr]  # the process's vector cache
        current = {f.id for f in await store.consolidator.facts()}
        assert set(kept) == current  # replaced and deleted items' vectors were let go

    embed.texts.clear()
    async with StargraphStore.from_path(location, clock=Clock(), index=index) as reopened:  # type: ignore[arg-type]
        again = await reopened.asearch(("alice",), query=query)
        assert [(h.key, h.score) for h in again] == ranked
        assert sorted(embed.texts) == sorted(
            [query, "Orders a pizza meal", ITEMS["tunes"]["text"]]
        )  # the current items only: the deleted and replaced ones are never embedded


async def test_put_index_false_and_per_item_fields(new_location: NewLocation) -> None:
    embed = Counting()
    index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    location = new_location()
    async with StargraphStore.from_path(location, clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        await store.aput(("u",), "hidden", {"text": "pizza pizza pizza"}, index=False)
        await store.aput(
            ("u",), "pet", {"text": "nothing", "note": "walks the dog"}, index=["note"]
        )
        await store.aput(("u",), "food", {"text": "pasta for lunch"})
        await store.aput(("u",), "none", {"other": "no text field"})
        hits = await store.asearch(("u",), query="a dog to walk")
        assert [(h.key, h.score) for h in hits] == [
            ("pet", 1.0),
            ("food", 0.0),
            ("hidden", None),  # not embedded: listed after the ranked ones
            ("none", None),
        ]
        assert "pizza pizza pizza" not in embed.texts and "nothing" not in embed.texts
        items = await store.asearch(("u",), query="pizza", limit=2)
        assert [h.key for h in items] == ["food", "pet"]
    async with StargraphStore.from_path(location, clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        # the put's own index is read back from its episode: a reopened store honours it
        again = await store.asearch(("u",), query="a dog to walk")
        assert [(h.key, h.score) for h in again] == [(h.key, h.score) for h in hits]


async def test_whole_values_nested_paths_and_the_best_field(new_location: NewLocation) -> None:
    index = {"dims": DIMS, "embed": Counting()}  # fields default to "$": the whole value
    async with StargraphStore.from_path(new_location(), clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        await store.aput(("u",), "a", {"x": {"y": "sunny forecast"}})
        await store.aput(("u",), "b", {"x": {"y": "jazz"}})
        assert [h.key for h in await store.asearch(("u",), query="weather")] == ["a", "b"]
        await store.aput(
            ("u",),
            "chat",
            {"messages": [{"content": "the dog"}, {"content": "rain"}]},
            index=["messages[*].content"],
        )
        hits = await store.asearch(("u",), query="rain forecast")
        assert (hits[0].key, hits[0].score) == ("a", 1.0)
        assert (hits[1].key, hits[1].score) == ("chat", 1.0)  # its best message matches


async def test_async_embeddings_and_a_langchain_object(tmp_path: Any) -> None:
    async def aembed(texts: Sequence[str]) -> list[list[float]]:
        return [concepts(t) for t in texts]

    class Concepts(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [concepts(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return concepts(text)

    for embed in (aembed, Concepts()):
        db = tmp_path / f"{type(embed).__name__}.db"
        index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
        async with StargraphStore.from_path(db, clock=Clock(), index=index) as store:  # type: ignore[arg-type]
            await fill(store)
            assert (await store.asearch(("alice",), query="rain"))[0].key == "rain"


def test_the_sync_api_ranks_too(tmp_path: Any) -> None:
    index = {"dims": DIMS, "embed": Counting(), "fields": ["text"]}
    with StargraphStore.from_path(tmp_path / "m.db", clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        store.put(("alice", "bot"), "tunes", ITEMS["tunes"])
        store.put(("alice", "bot"), "meals", ITEMS["meals"])
        assert [h.key for h in store.search(("alice",), query="a guitar song")] == [
            "tunes",
            "meals",
        ]


async def test_searches_record_accesses_of_the_page_returned(tmp_path: Any) -> None:
    index = {"dims": DIMS, "embed": Counting(), "fields": ["text"]}
    async with StargraphStore.from_path(tmp_path / "m.db", clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        await fill(store)
        await store.asearch(("alice",), query="pizza", limit=1)
        mem = store.consolidator
        counts = {f.subject: (await mem.access(f.id)).count for f in await mem.facts()}
        assert counts == {"meals": 1, "rain": 0, "tunes": 0}
        await store.asearch(("alice",), query="pizza", limit=1, refresh_ttl=False)
        assert (await mem.access((await store.afact(("alice", "bot"), "meals")).id)).count == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("index", "message"),
    [
        ("dims=4", "index must be a dict, not a str"),
        ({"dims": 4}, "index needs 'embed'"),
        ({"embed": Counting()}, "index needs 'dims', the length of the embeddings (got None)"),
        ({"dims": 0, "embed": Counting()}, "got 0"),
        ({"dims": 4, "embed": Counting(), "fields": "text"}, "index fields is a list"),
        ({"dims": 4, "embed": Counting(), "fields": [""]}, "index.fields[0]: a field path"),
        ({"dims": 4, "embed": Counting(), "distance": "l2"}, "unknown key(s) distance"),
        ({"dims": 4, "embed": "nowhere:model"}, "Could not load embeddings"),
    ],
)
def test_bad_index_configurations_are_refused(tmp_path: Any, index: Any, message: str) -> None:
    with pytest.raises(IndexConfigError) as caught:
        StargraphStore.from_path(tmp_path / "m.db", index=index)
    assert message in str(caught.value)
    assert not (tmp_path / "m.db").exists()


async def test_bad_put_indexes_and_wrong_vectors_change_nothing(new_location: NewLocation) -> None:
    def short(texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    index = {"dims": DIMS, "embed": Counting(), "fields": ["text"]}
    location = new_location()
    async with StargraphStore.from_path(location, clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        await fill(store)
        before = await snapshot(store.consolidator.fact_store)  # type: ignore[arg-type]
        with pytest.raises(IndexConfigError, match="a put's index is False or a list"):
            await store.aput(("alice",), "k", {"text": "x"}, index="text")  # type: ignore[arg-type]
        with pytest.raises(IndexConfigError, match=r"index\[1\]: a field path"):
            await store.aput(("alice",), "k", {"text": "x"}, index=["text", 3])  # type: ignore[list-item]
        assert await snapshot(store.consolidator.fact_store) == before  # type: ignore[arg-type]
    wrong = {"dims": DIMS, "embed": short, "fields": ["text"]}
    async with StargraphStore.from_path(location, clock=Clock(), index=wrong) as store:  # type: ignore[arg-type]
        before = await snapshot(store.consolidator.fact_store)  # type: ignore[arg-type]
        with pytest.raises(IndexConfigError, match=r"expected 3 finite vector\(s\) of 4 numbers"):
            await store.asearch(("alice",), query="pizza")
        assert await snapshot(store.consolidator.fact_store) == before  # type: ignore[arg-type]


async def test_without_an_index_a_query_is_a_full_text_search(tmp_path: Any) -> None:
    async with StargraphStore.from_path(tmp_path / "m.db", clock=Clock()) as store:
        assert store.index_config is None
        await fill(store)
        await store.aput(("alice", "bot"), "skip", {"text": "pizza"}, index=False)
        hits = await store.asearch(("alice",), query="pizza")
        assert sorted(h.key for h in hits) == ["meals", "skip"]  # words, not meanings
        assert await store.asearch(("alice",), query="hungry") == []


async def test_the_built_in_hashing_embedder_as_embed(new_location: NewLocation) -> None:
    from stargraph_mem.embedding import HashingEmbedder

    embedder = HashingEmbedder()
    index = {"embed": embedder, "fields": ["text"]}  # dims: the embedder's
    location = new_location()
    async with StargraphStore.from_path(location, clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        assert store.index_config is not None
        assert store.index_config["dims"] == embedder.dimension
        await store.aput(("u",), "tea", {"text": "she drinks green tea every morning"})
        await store.aput(("u",), "bike", {"text": "the bicycle has a flat tyre"})
        hits = await store.asearch(("u",), query="green tea in the morning")
        assert [h.key for h in hits] == ["tea", "bike"]
        assert hits[0].score is not None and hits[1].score is not None
        assert hits[0].score > hits[1].score
        ranked = [(h.key, h.score) for h in hits]
    async with StargraphStore.from_path(location, clock=Clock(), index=index) as store:  # type: ignore[arg-type]
        again = await store.asearch(("u",), query="green tea in the morning")
        assert [(h.key, h.score) for h in again] == ranked
