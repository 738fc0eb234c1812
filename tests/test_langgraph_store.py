"""``StargraphStore``: LangGraph's ``BaseStore`` over episodes and facts (the graph extra).

Everything goes through the public store API (``aput``/``aget``/``asearch``/``adelete``/
``alist_namespaces``, their sync forms, ``batch``/``abatch``) and a real LangGraph graph;
history is read back through the Consolidator (``explain``, ``as_of``).
"""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import pytest
from backends import NewLocation
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from test_schema_agreement import yaml_schema_errors

from stargraph_mem.authoring.packtest import default_tests_path, run_tests
from stargraph_mem.authoring.schemas import FILES
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import CorruptRowError, SearchError, StoreError
from stargraph_mem.integrations.langgraph_store import (
    ITEM_PREDICATE,
    PACK_PATH,
    USER_AGENT,
    FilterError,
    IndexConfigError,
    ItemKeyError,
    ItemReadError,
    ItemValueError,
    NamespaceError,
    StargraphStore,
    StoreStateError,
    item_value,
    store_pack,
)
from stargraph_mem.model.base import MAX_JSON_DEPTH
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.model.limits import DEFAULT_FACT_BYTES, KEY_BYTES, Limits
from stargraph_mem.stores.scope import partition_key

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


class Clock:
    """A settable clock: the store stamps episodes and facts with ``now``."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, minutes: int = 1) -> datetime:
        self.now += timedelta(minutes=minutes)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[StargraphStore]:
    async with StargraphStore.from_path(tmp_path / "memory.db", clock=clock) as opened:
        yield opened


@pytest.fixture
def sync_store(tmp_path: Path, clock: Clock) -> Iterator[StargraphStore]:
    with StargraphStore.from_path(tmp_path / "memory.db", clock=clock) as opened:
        yield opened


# --- put / get / delete -------------------------------------------------------------------


TRICKY: dict[str, Any] = {
    "text": 'quotes " and \\ backslashes, {braces}, new\nline, tab\t, NUL \x00 and ünïcødé ☕',
    "nested": {"list": [1, -2, 2.5, -0.0, 1e300, None, True, False, [], {}], "empty": ""},
    "ints": [2**63 - 1, -(2**63), 2**64 - 1],
    "order": {"z": 1, "a": 2, "m": 3},
}


async def test_put_then_get_returns_the_value_equal(store: StargraphStore) -> None:
    await store.aput(("alice",), "prefs", TRICKY)
    item = await store.aget(("alice",), "prefs")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (("alice",), "prefs", TRICKY)
    assert list(item.value["order"]) == ["z", "a", "m"]  # key order kept too
    assert item.created_at == item.updated_at == T0
    assert await store.aget(("alice",), "other") is None


async def test_each_put_is_an_episode_and_the_item_is_a_fact(
    store: StargraphStore, clock: Clock
) -> None:
    await store.aput(("alice", "planner"), "prefs", {"food": "tea"})
    clock.advance()
    await store.aput(("alice", "planner"), "prefs", {"food": "coffee"})
    clock.advance()
    await store.adelete(("alice", "planner"), "prefs")
    mem = store.consolidator
    episodes = await mem.memory.recent("alice", agent="planner", limit=10)
    assert sorted(str(e.metadata["store_op"]) for e in episodes) == ["delete", "put", "put"]
    assert {e.session for e in episodes} == {"langgraph"}
    history = await mem.fact_store.query(
        FactPattern(user="alice", agent="planner", include_history=True)
    )
    assert [(f.subject, f.predicate, item_value(f)) for f in history] == [
        ("prefs", ITEM_PREDICATE, {"food": "tea"}),
        ("prefs", ITEM_PREDICATE, {"food": "coffee"}),
    ]
    assert all(f.valid_until is not None for f in history)


async def test_overwrite_supersedes_and_keeps_the_history(
    store: StargraphStore, clock: Clock
) -> None:
    await store.aput(("alice",), "prefs", {"food": "tea"})
    t1 = clock.advance()
    await store.aput(("alice",), "prefs", {"food": "coffee"})

    item = await store.aget(("alice",), "prefs")
    assert item is not None
    assert item.value == {"food": "coffee"}
    assert (item.created_at, item.updated_at) == (T0, t1)

    fact = await store.afact(("alice",), "prefs")
    assert fact is not None and fact.valid_from == t1
    why = await store.consolidator.explain(fact.id)
    assert why.rule_id == "replace_item"
    assert why.reason == "item prefs replaced"
    assert [item_value(f) for f in why.predecessors] == [{"food": "tea"}]
    assert why.predecessors[0].superseded_by == fact.id
    assert [e.content for e in why.source_episodes] == ["put prefs"]

    before = await store.afact(("alice",), "prefs", as_of=T0)
    assert before is not None and item_value(before) == {"food": "tea"}
    old = await store.consolidator.facts(user="alice", as_of=T0)
    assert [item_value(f) for f in old] == [{"food": "tea"}]


async def test_delete_closes_the_item_and_a_new_put_starts_over(
    store: StargraphStore, clock: Clock
) -> None:
    await store.aput(("alice",), "prefs", {"food": "tea"})
    first = await store.afact(("alice",), "prefs")
    t1 = clock.advance()
    await store.adelete(("alice",), "prefs")
    assert await store.aget(("alice",), "prefs") is None
    assert await store.afact(("alice",), "prefs") is None

    assert first is not None
    why = await store.consolidator.explain(first.id)
    assert why.fact.valid_until == t1
    assert why.fact.superseded_by is None
    assert why.closed_by is not None

    t2 = clock.advance()
    await store.aput(("alice",), "prefs", {"food": "juice"})
    item = await store.aget(("alice",), "prefs")
    assert item is not None
    assert (item.value, item.created_at, item.updated_at) == ({"food": "juice"}, t2, t2)


async def test_deleting_a_missing_key_changes_nothing(store: StargraphStore) -> None:
    await store.adelete(("alice",), "nothing")
    assert await store.aget(("alice",), "nothing") is None
    assert await store.alist_namespaces() == []


async def test_two_users_and_two_agents_with_the_same_key_are_isolated(
    store: StargraphStore,
) -> None:
    spaces: list[tuple[str, ...]] = [("alice",), ("bob",), ("alice", "a1"), ("alice", "a2")]
    for n, namespace in enumerate(spaces):
        await store.aput(namespace, "prefs", {"n": n})
    await store.adelete(("bob",), "prefs")
    assert [await store.aget(ns, "prefs") is not None for ns in spaces] == [
        True,
        False,
        True,
        True,
    ]
    for n, namespace in enumerate(spaces):
        item = await store.aget(namespace, "prefs")
        assert item is None or item.value == {"n": n}
    assert await store.alist_namespaces() == [("alice",), ("alice", "a1"), ("alice", "a2")]
    # (user,) lives under the reserved agent, which no two-label namespace can name
    facts = await store.consolidator.facts(user="alice", agent=USER_AGENT)
    assert [item_value(f) for f in facts] == [{"n": 0}]


async def test_the_session_of_the_episodes_is_configurable(tmp_path: Path) -> None:
    async with StargraphStore.from_path(tmp_path / "memory.db", session="chat.v2") as store:
        await store.aput(("alice",), "k", {"a": 1})
        [episode] = await store.consolidator.memory.recent("alice", limit=5)
    assert (episode.session, episode.agent, episode.content) == ("chat.v2", USER_AGENT, "put k")
    with pytest.raises(ValueError, match="is empty"):
        StargraphStore.from_path(tmp_path / "memory.db", session="")


async def test_items_survive_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with StargraphStore.from_path(db) as store:
        await store.aput(("alice",), "prefs", {"food": "tea"})
    async with StargraphStore.from_path(db) as store:
        item = await store.aget(("alice",), "prefs")
    assert item is not None and item.value == {"food": "tea"}


# --- refused input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "message"),
    [
        ((), "is empty"),
        (("alice", "agent", "extra"), "has 3 labels"),
        (("alice", ""), "label 1 ('') is empty"),
        (("al.ice",), "contains a period"),
        (("alice", "bot\x00"), "contains NUL"),
        (("a" * 257,), "longer than 256 characters"),
        (("\ud800",), "lone surrogate"),
        (("alice", 7), "is an int, not a string"),
    ],
)
async def test_bad_namespaces_are_refused(
    store: StargraphStore, namespace: tuple[Any, ...], message: str
) -> None:
    ops: list[Any] = [PutOp(namespace, "k", {"a": 1}), GetOp(namespace, "k")]
    for op in ops:
        with pytest.raises(NamespaceError, match=re.escape(message)) as caught:
            await store.abatch([op])
        assert isinstance(caught.value, InvalidNamespaceError)
    assert await store.alist_namespaces() == []


async def test_long_prefixes_and_match_paths_are_refused_too(store: StargraphStore) -> None:
    with pytest.raises(NamespaceError, match="has 3 labels"):
        await store.asearch(("a", "b", "c"))
    with pytest.raises(NamespaceError, match="has 3 labels"):
        await store.alist_namespaces(prefix=("a", "*", "c"))
    assert await store.alist_namespaces(prefix=("*", "b")) == []  # a wildcard is fine


@pytest.mark.parametrize(
    ("key", "message"),
    [("", "must not be empty"), ("a\x00b", "contains NUL"), ("\udc00", "lone surrogate")],
)
async def test_bad_keys_are_refused(store: StargraphStore, key: str, message: str) -> None:
    with pytest.raises(ItemKeyError, match=re.escape(message)):
        await store.aput(("alice",), key, {"a": 1})


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (["not", "a", "dict"], "value is a list, not a dict"),
        ({"t": (1, 2)}, "value['t'] is a tuple"),
        ({"s": {1, 2}}, "value['s'] is a set"),
        ({"a": [1, math.nan]}, "value['a'][1] is not a finite number"),
        ({"a": math.inf}, "value['a'] is not a finite number"),
        ({"big": 2**64}, "value['big'] is an integer outside the 64-bit range"),
        ({"d": {1: "x"}}, "value['d'] has an int key 1"),
        ({"when": T0}, "value['when'] is a datetime"),
        ({"s": "\ud800"}, "value['s'] contains a lone surrogate"),
    ],
)
async def test_values_that_would_not_come_back_equal_are_refused(
    store: StargraphStore, value: Any, where: str
) -> None:
    with pytest.raises(ItemValueError, match=re.escape(where)):
        await store.aput(("alice",), "k", value)
    assert await store.aget(("alice",), "k") is None


def nested(levels: int, leaf: Any = 1) -> Any:
    """``leaf`` inside ``levels`` lists: ``[[1]]`` is ``nested(2)``."""
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 500, 1_000, 5_000])
async def test_values_nested_too_deep_are_refused_before_any_recursion(
    store: StargraphStore, levels: int
) -> None:
    tail = ": values are JSON objects of dict, list, str, finite float, 64-bit int, bool and None"
    cases = [
        ({"a": nested(levels)}, "value['a'][0][0][0]… nests deeper than 64 levels" + tail),
        (  # the NaN at the bottom is never reached
            {"a": {"b": nested(levels, {"c": math.nan})}},
            "value['a']['b'][0][0]… nests deeper than 64 levels" + tail,
        ),
    ]
    for value, message in cases:
        with pytest.raises(ItemValueError) as caught:
            await store.aput(("alice",), "k", value)
        assert str(caught.value) == message
        with pytest.raises(ItemValueError, match=re.escape(message)):
            await store.abatch([PutOp(("alice",), "j", {"ok": 1}), PutOp(("alice",), "k", value)])
    assert await store.aget(("alice",), "k") is None
    assert await store.aget(("alice",), "j") is None
    assert await store.consolidator.memory.partitions() == []


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 5_000])
async def test_filters_nested_too_deep_are_refused(store: StargraphStore, levels: int) -> None:
    await store.aput(("alice",), "k", {"a": 1})
    deep: Any = 1
    for _ in range(levels):
        deep = {"a": deep}
    with pytest.raises(FilterError) as caught:
        await store.asearch(("alice",), filter={"a": deep})
    assert str(caught.value) == "filter ['a']['a']['a']['a']… nests deeper than 64 levels"


async def test_values_nested_to_the_limit_come_back_equal(store: StargraphStore) -> None:
    # the item's dict, 61 lists, a dict, a list: 64 levels
    deepest = {"a": nested(MAX_JSON_DEPTH - 3, {"leaf": [1.5, None]})}
    await store.aput(("alice",), "k", deepest)
    item = await store.aget(("alice",), "k")
    assert item is not None and item.value == deepest


async def test_a_refused_op_refuses_the_whole_batch(store: StargraphStore) -> None:
    with pytest.raises(ItemValueError):
        await store.abatch(
            [PutOp(("alice",), "a", {"ok": 1}), PutOp(("alice",), "b", {"bad": math.nan})]
        )
    assert await store.aget(("alice",), "a") is None
    assert await store.consolidator.memory.partitions() == []


async def test_puts_too_large_for_the_fact_are_refused_before_writing(
    new_location: NewLocation,
) -> None:
    # the pack's fact holds the value twice (object and payload.value) beside the key,
    # the predicate and the reason: "item k replaced" (15) + "k" + "langgraph.item" (14)
    # + 2 x (n + 8), the JSON of {"t": n x's}; the engine refuses it over fact_bytes
    most = (DEFAULT_FACT_BYTES - 15 - 1 - 14) // 2 - 8
    async with StargraphStore.from_path(new_location(), clock=Clock()) as store:
        await store.aput(("alice",), "k", {"t": "x" * most})  # fits exactly
        item = await store.aget(("alice",), "k")
        assert item is not None and item.value == {"t": "x" * most}
        with pytest.raises(ItemValueError, match=r"65,538 bytes, over the limit of 65,536") as c:
            await store.aput(("alice",), "k", {"t": "x" * (most + 1)})
        assert c.value.context["limit"] == "fact_bytes"
        with pytest.raises(ItemValueError, match=r"40,008 bytes of JSON"):  # under 64 KiB
            await store.aput(("alice",), "k2", {"t": "x" * 40_000})
        assert len(await store.consolidator.memory.recent("alice", limit=10)) == 1
        # a batch is refused whole, before its first put is written
        with pytest.raises(ItemValueError, match="'mid'"):
            await store.abatch(
                [PutOp(("bob",), "small", {"t": "ok"}), PutOp(("bob",), "mid", {"t": "x" * 40_000})]
            )
        assert await store.aget(("bob",), "small") is None
        assert await store.consolidator.memory.recent("bob", limit=10) == []
        # a key: its subject and the predicate beside the partition key fit KEY_BYTES
        room = KEY_BYTES - len(partition_key("carol", USER_AGENT)) - len(ITEM_PREDICATE)
        await store.aput(("carol",), "k" * room, {"a": 1})
        item = await store.aget(("carol",), "k" * room)
        assert item is not None and item.value == {"a": 1}
        with pytest.raises(ItemValueError, match=r"\(KEY_BYTES 2,600\)") as c:
            await store.abatch(
                [PutOp(("carol",), "b", {"a": 2}), PutOp(("carol",), "k" * (room + 1), {"a": 1})]
            )
        assert c.value.context["limit"] == "KEY_BYTES"
        assert await store.aget(("carol",), "b") is None
        assert len(await store.consolidator.memory.recent("carol", limit=10)) == 1


async def test_a_delete_whose_episode_is_over_the_limits_refuses_its_batch(
    new_location: NewLocation,
) -> None:
    limits = Limits(content_bytes=20)
    async with StargraphStore.from_path(new_location(), clock=Clock(), limits=limits) as store:
        with pytest.raises(ItemValueError, match=r"over the limit of 20 \(content_bytes\)") as c:
            await store.abatch(
                [PutOp(("alice",), "a", {"x": 1}), PutOp(("alice",), "k" * 20, None)]
            )
        assert c.value.context["limit"] == "content_bytes"
        assert await store.consolidator.memory.partitions() == []


async def test_a_fact_holding_no_item_value_fails_only_its_own_get(
    new_location: NewLocation,
) -> None:
    # an MCP correct_fact records this episode: the other pack's rule replaces the item
    # fact with one of the same subject and predicate but no payload["value"]
    pack = ROOT / "examples" / "streaming_dedup.yaml"
    async with (
        Consolidator.open(new_location(), packs=[PACK_PATH, pack], clock=Clock()) as mem,
        StargraphStore(mem) as store,
    ):
        ns = ("alice", "rag")
        await store.aput(ns, "pref", {"x": 1})
        await store.aput(ns, "other", {"y": 1})
        old = await store.afact(ns, "pref")
        assert old is not None
        metadata = {"intent": "update", "replaces": [old.id], "subject": "pref"}
        metadata |= {"predicate": ITEM_PREDICATE, "object": '{"x": 2}'}
        await mem.record(
            Episode(
                id="fix",
                content="fix",
                timestamp=T0,
                user="alice",
                session="chat",
                agent="rag",
                metadata=metadata,
            )
        )
        odd = await store.afact(ns, "pref")
        assert odd is not None and odd.id != old.id and "value" not in odd.payload
        with pytest.raises(ItemReadError, match="holds no item value") as caught:
            await store.aget(ns, "pref")
        assert caught.value.context["fact_id"] == odd.id
        other = await store.aget(ns, "other")
        assert other is not None and other.value == {"y": 1}
        assert [h.key for h in await store.asearch(("alice",))] == ["other"]
        assert [h.key for h in await store.asearch(ns, filter={"y": 1})] == ["other"]
        assert [h.key for h in await store.asearch((), query="other")] == ["other"]
        assert await store.asearch((), query="pref") == []
        await store.aput(ns, "pref", {"x": 3})  # a put replaces the odd fact
        item = await store.aget(ns, "pref")
        assert item is not None and item.value == {"x": 3}
        assert sorted(h.key for h in await store.asearch(ns)) == ["other", "pref"]


@pytest.mark.parametrize("embed", [5, 2.5, ["texts"], {"model": "x"}])
async def test_an_embed_that_is_no_embedder_is_refused_at_open(tmp_path: Path, embed: Any) -> None:
    with pytest.raises(IndexConfigError, match="index 'embed' must be") as caught:
        StargraphStore.from_path(tmp_path / "m.db", index={"dims": 3, "embed": embed})
    assert caught.value.context["where"] == "index.embed"
    assert not (tmp_path / "m.db").exists()


async def test_a_filter_mixing_operators_with_plain_keys_is_refused(
    store: StargraphStore,
) -> None:
    for n in (1, 5, 10):
        await store.aput(("u",), f"k{n}", {"n": n, "o": {"foo": n}})
    for where, condition in (
        ("'n'", {"n": {"$gt": 0, "foo": 5}}),
        ("'n'", {"n": {"foo": 5, "$lte": 5}}),
        ("'o'", {"o": {"$ne": 1, "foo": 5}}),
    ):
        with pytest.raises(FilterError, match=f"filter {where}: 'foo' is not an operator") as c:
            await store.asearch(("u",), filter=condition)
        assert c.value.context["operator"] == "foo"
    with pytest.raises(FilterError, match="'foo' is not an operator"):
        await store.abatch(
            [PutOp(("u",), "x", {"n": 2}), SearchOp(("u",), {"n": {"$gt": 0, "foo": 5}})]
        )
    assert await store.aget(("u",), "x") is None
    assert sorted(
        h.key for h in await store.asearch(("u",), filter={"n": {"$gt": 0, "$lte": 5}})
    ) == [
        "k1",
        "k5",
    ]
    assert [h.key for h in await store.asearch(("u",), filter={"o": {"foo": 5}})] == ["k5"]


async def test_ttl_is_not_supported(store: StargraphStore) -> None:
    with pytest.raises(NotImplementedError):
        await store.aput(("alice",), "k", {"a": 1}, ttl=5)
    with pytest.raises(NotImplementedError, match="does not support TTL"):
        await store.abatch([PutOp(("alice",), "k", {"a": 1}, ttl=5)])


# --- search -----------------------------------------------------------------------------


async def _seed(store: StargraphStore, clock: Clock) -> None:
    rows: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
        (("alice",), "drink", {"likes": "green tea", "hot": True, "n": 1}),
        (("alice",), "city", {"lives": "Oslo", "n": 2}),
        (("alice", "planner"), "trip", {"to": "Kyoto", "for": "tea ceremony", "n": 3}),
        (("alice", "planner"), "budget", {"max": 900.5, "hot": 1, "n": 4}),
        (("bob",), "drink", {"likes": "tea", "hot": False, "n": 5}),
    ]
    for namespace, key, value in rows:
        clock.advance()
        await store.aput(namespace, key, value)


async def test_search_ranks_matching_items_under_the_prefix(
    store: StargraphStore, clock: Clock
) -> None:
    await _seed(store, clock)
    hits = await store.asearch(("alice",), query="tea")
    assert {(h.namespace, h.key) for h in hits} == {
        (("alice",), "drink"),
        (("alice", "planner"), "trip"),
    }
    assert all(isinstance(h, SearchItem) and h.score is not None for h in hits)
    assert [h.score for h in hits] == sorted((h.score or 0.0 for h in hits), reverse=True)
    assert [h.key for h in await store.asearch(("alice", "planner"), query="tea")] == ["trip"]
    everywhere = await store.asearch((), query="tea")
    assert {(h.namespace, h.key) for h in everywhere} == {
        (("alice",), "drink"),
        (("alice", "planner"), "trip"),
        (("bob",), "drink"),
    }
    assert await store.asearch(("carol",), query="tea") == []


async def test_search_applies_filters_to_the_value(store: StargraphStore, clock: Clock) -> None:
    await _seed(store, clock)
    keys = [h.key for h in await store.asearch((), query="tea", filter={"hot": True})]
    assert keys == ["drink"]  # bob's drink is hot: false; the budget's hot is 1, not true
    listed = await store.asearch(("alice",), filter={"hot": 1})
    assert [(h.key, h.score) for h in listed] == [("budget", None)]
    assert [h.key for h in await store.asearch((), filter={"n": {"$gte": 4}})] == [
        "drink",
        "budget",
    ]
    assert [h.key for h in await store.asearch((), filter={"lives": {"$ne": "Oslo"}})] == [
        "drink",
        "budget",
        "trip",
        "drink",
    ]
    with pytest.raises(FilterError, match=r"unknown operator '\$regex'"):
        await store.asearch((), filter={"likes": {"$regex": "t.*"}})


async def test_search_without_query_lists_newest_first_with_paging(
    store: StargraphStore, clock: Clock
) -> None:
    await _seed(store, clock)
    clock.advance()
    await store.aput(("alice",), "drink", {"likes": "coffee", "n": 6})
    listed = await store.asearch(("alice",))
    assert [h.key for h in listed] == ["drink", "budget", "trip", "city"]
    assert listed[0].value == {"likes": "coffee", "n": 6}
    assert listed[0].created_at < listed[0].updated_at
    page = await store.asearch(("alice",), limit=2, offset=1)
    assert [h.key for h in page] == ["budget", "trip"]
    ranked = await store.asearch(("alice",), query="tea Kyoto Oslo", limit=1, offset=1)
    assert len(ranked) == 1
    with pytest.raises(SearchError, match="best 1000 hits"):
        await store.asearch((), query="tea", offset=995, limit=10)


async def test_search_records_accesses_of_what_it_returns(
    store: StargraphStore, clock: Clock
) -> None:
    await _seed(store, clock)
    [hit] = await store.asearch(("alice",), query="Oslo")
    fact = await store.afact(("alice",), "city")
    assert fact is not None
    assert (await store.consolidator.access(fact.id)).count == 1
    await store.asearch(("alice",), query="Oslo", filter={"n": 2})
    assert (await store.consolidator.access(fact.id)).count == 2
    await store.asearch(("alice",), query="Oslo", refresh_ttl=False)
    await store.asearch(("alice",), filter={"n": 2})  # a listing reads without a trace
    assert (await store.consolidator.access(fact.id)).count == 2
    assert hit.key == "city"


# --- list_namespaces ----------------------------------------------------------------------


async def test_list_namespaces_matches_prefixes_suffixes_and_depth(
    store: StargraphStore, clock: Clock
) -> None:
    await _seed(store, clock)
    await store.aput(("carol", "planner"), "k", {"a": 1})
    assert await store.alist_namespaces() == [
        ("alice",),
        ("alice", "planner"),
        ("bob",),
        ("carol", "planner"),
    ]
    assert await store.alist_namespaces(prefix=("alice",)) == [("alice",), ("alice", "planner")]
    assert await store.alist_namespaces(suffix=("planner",)) == [
        ("alice", "planner"),
        ("carol", "planner"),
    ]
    assert await store.alist_namespaces(prefix=("*", "planner")) == [
        ("alice", "planner"),
        ("carol", "planner"),
    ]
    assert await store.alist_namespaces(max_depth=1) == [("alice",), ("bob",), ("carol",)]
    assert await store.alist_namespaces(limit=2, offset=1) == [("alice", "planner"), ("bob",)]
    await store.adelete(("carol", "planner"), "k")
    assert ("carol", "planner") not in await store.alist_namespaces()


# --- batches --------------------------------------------------------------------------------


def _mixed_ops() -> list[Any]:
    return [
        PutOp(("alice",), "a", {"v": 1}),
        GetOp(("alice",), "a"),
        PutOp(("alice",), "a", {"v": 2}),
        PutOp(("alice", "bot"), "b", {"v": 3}),
        GetOp(("alice",), "a"),
        SearchOp(("alice",), filter={"v": 3}),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("alice",)),)),
        PutOp(("alice",), "a", None),
        GetOp(("alice",), "a"),
        GetOp(("alice", "bot"), "b"),
    ]


def _check_mixed(results: list[Any]) -> None:
    assert len(results) == 10
    put1, got1, put2, put3, got2, found, spaces, deleted, got3, got4 = results
    assert (put1, put2, put3, deleted) == (None, None, None, None)
    assert got1.value == {"v": 1}
    assert got2.value == {"v": 2}
    assert got2.created_at == got1.created_at
    assert [(h.namespace, h.key, h.value) for h in found] == [(("alice", "bot"), "b", {"v": 3})]
    assert spaces == [("alice",), ("alice", "bot")]
    assert got3 is None
    assert got4.value == {"v": 3}


async def test_abatch_runs_mixed_ops_in_order(store: StargraphStore) -> None:
    _check_mixed(await store.abatch(_mixed_ops()))


def test_batch_runs_mixed_ops_in_order_from_sync_code(sync_store: StargraphStore) -> None:
    _check_mixed(sync_store.batch(_mixed_ops()))


# --- sync and async callers -----------------------------------------------------------------


def test_sync_api_on_a_private_loop(sync_store: StargraphStore) -> None:
    sync_store.put(("alice",), "prefs", {"food": "tea"})
    item = sync_store.get(("alice",), "prefs")
    assert item is not None and item.value == {"food": "tea"}
    assert [h.key for h in sync_store.search(("alice",), query="tea")] == ["prefs"]
    assert sync_store.list_namespaces() == [("alice",)]
    fact = sync_store.fact(("alice",), "prefs")
    assert fact is not None and item_value(fact) == {"food": "tea"}
    sync_store.delete(("alice",), "prefs")
    assert sync_store.get(("alice",), "prefs") is None

    async def from_another_loop() -> Item | None:
        await sync_store.aput(("bob",), "k", {"a": 1})
        return await sync_store.aget(("bob",), "k")

    got = asyncio.run(from_another_loop())
    assert got is not None and got.value == {"a": 1}


async def test_sync_calls_from_other_threads_reach_the_store_loop(
    store: StargraphStore,
) -> None:
    await asyncio.to_thread(store.put, ("alice",), "prefs", {"food": "tea"})
    item = await asyncio.to_thread(store.get, ("alice",), "prefs")
    assert item is not None and item.value == {"food": "tea"}


async def test_sync_call_on_the_store_loop_is_refused_not_deadlocked(
    store: StargraphStore,
) -> None:
    with pytest.raises(StoreStateError, match="would deadlock"):
        store.get(("alice",), "prefs")


async def test_concurrent_puts_to_one_key_keep_every_version(store: StargraphStore) -> None:
    await asyncio.gather(*(store.aput(("alice",), "counter", {"n": n}) for n in range(8)))
    item = await store.aget(("alice",), "counter")
    assert item is not None
    history = await store.consolidator.fact_store.query(
        FactPattern(user="alice", subject="counter", include_history=True)
    )
    assert len(history) == 8
    assert [f.is_current for f in history].count(True) == 1
    assert item.value == item_value(next(f for f in history if f.is_current))


# --- lifecycle ------------------------------------------------------------------------------


async def test_a_read_only_store_reads_and_searches_but_refuses_writes(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    async with StargraphStore.from_path(db) as store:
        await store.aput(("alice",), "prefs", {"food": "tea"})
    async with StargraphStore.from_path(db, read_only=True) as store:
        item = await store.aget(("alice",), "prefs")
        assert item is not None and item.value == {"food": "tea"}
        assert [h.key for h in await store.asearch(("alice",), query="tea")] == ["prefs"]
        with pytest.raises(StoreError, match="read-only"):
            await store.aput(("alice",), "prefs", {"food": "coffee"})


async def test_a_store_that_is_not_open_says_so(tmp_path: Path) -> None:
    store = StargraphStore.from_path(tmp_path / "memory.db")
    with pytest.raises(StoreStateError, match="not open"):
        await store.aget(("alice",), "k")
    with pytest.raises(StoreStateError, match="not open"):
        store.get(("alice",), "k")
    async with store:
        with pytest.raises(StoreStateError, match="open already"):
            async with store:
                pass


def test_with_leaves_no_thread_behind(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    with StargraphStore.from_path(tmp_path / "memory.db") as store:
        store.put(("alice",), "k", {"a": 1})
        assert any(t.name == "stargraph-store" for t in threading.enumerate())
    left = set(threading.enumerate()) - before
    for thread in left:  # closed connections' threads end on their own, at once
        thread.join(timeout=10)
    assert not [t for t in left if t.is_alive()]


def test_a_sync_store_left_open_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    """Its loop thread is a daemon, and so are the connection threads it starts."""
    script = (
        "import sys\n"
        "from stargraph_mem.integrations.langgraph_store import StargraphStore\n"
        "store = StargraphStore.from_path(sys.argv[1]).__enter__()  # never exited\n"
        "store.put(('alice',), 'k', {'a': 1})\n"
        "print(store.get(('alice',), 'k').value)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout == "{'a': 1}\n"


async def test_an_open_consolidator_can_be_shared(tmp_path: Path) -> None:
    pack = ROOT / "examples" / "streaming_dedup.yaml"
    async with Consolidator.open(tmp_path / "memory.db", packs=[PACK_PATH, pack]) as mem:
        async with StargraphStore(mem) as store:
            await store.aput(("alice", "assistant"), "prefs", {"food": "tea"})
        # the store did not close the Consolidator it was given; the other pack's
        # facts share the partition, and the store leaves them alone
        await mem.record(
            Episode(
                id="e1",
                content="Alice likes tea",
                timestamp=T0,
                user="alice",
                session="chat",
                agent="assistant",
                metadata={"subject": "prefs", "predicate": "likes", "object": "tea"},
            )
        )
        facts = await mem.facts(user="alice", agent="assistant")
        assert sorted(f.predicate for f in facts) == [ITEM_PREDICATE, "likes"]
        other = next(f for f in facts if f.predicate == "likes")
        with pytest.raises(CorruptRowError, match="not an item fact"):
            item_value(other)
        async with StargraphStore(mem) as store:
            item = await store.aget(("alice", "assistant"), "prefs")
            assert [h.key for h in await store.asearch((), query="tea")] == ["prefs"]
            assert [h.key for h in await store.asearch(())] == ["prefs"]
        assert item is not None and item.value == {"food": "tea"}


async def test_a_consolidator_without_the_pack_is_refused(tmp_path: Path) -> None:
    pack = ROOT / "rules" / "default.yaml"
    with pytest.raises(StoreStateError, match="does not run the store's pack"):
        StargraphStore(Consolidator.open(tmp_path / "memory.db", packs=[pack]))


@pytest.mark.parametrize(
    ("kind", "path"), [("pack", PACK_PATH), ("tests", default_tests_path(PACK_PATH))]
)
def test_the_store_pack_and_its_tests_match_their_schemas(kind: str, path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    schema = first.removeprefix("# yaml-language-server: $schema=")
    assert (path.parent / schema).resolve() == ROOT / "ir_schemas" / FILES[kind]
    assert yaml_schema_errors(kind, path) == []


async def test_the_store_pack_passes_its_pack_tests() -> None:
    pack = store_pack()
    run = await run_tests(pack, [default_tests_path(PACK_PATH)])
    assert all(case.passed for file in run.files for case in file.cases)
    assert run.coverage.ratio == 1.0
    assert run.failed == 0


# --- inside a LangGraph graph ---------------------------------------------------------------


class Turn(TypedDict, total=False):
    user: str
    food: str
    liked: str
    found: list[str]


def build_graph(store: BaseStore, *, async_recall: bool = True) -> Any:
    """``remember`` (a sync node) writes through the runtime's store; ``recall`` reads it
    back with ``get`` and ``search`` (async, or sync for ``invoke``)."""

    def remember(state: Turn, runtime: Runtime[None]) -> Turn:
        assert runtime.store is store
        runtime.store.put((state["user"],), "food", {"likes": state["food"]})
        return {}

    async def arecall(state: Turn, runtime: Runtime[None]) -> Turn:
        assert runtime.store is not None
        item = await runtime.store.aget((state["user"],), "food")
        hits = await runtime.store.asearch((state["user"],), query=state["food"])
        assert item is not None
        return {"liked": item.value["likes"], "found": [h.key for h in hits]}

    def recall(state: Turn, runtime: Runtime[None]) -> Turn:
        assert runtime.store is not None
        item = runtime.store.get((state["user"],), "food")
        hits = runtime.store.search((state["user"],), query=state["food"])
        assert item is not None
        return {"liked": item.value["likes"], "found": [h.key for h in hits]}

    graph = StateGraph(Turn)
    graph.add_node("remember", remember)
    graph.add_node("recall", arecall if async_recall else recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    return graph.compile(store=store)


async def test_a_graph_writes_and_reads_through_the_runtime_store(
    store: StargraphStore, clock: Clock
) -> None:
    app = build_graph(store)
    out = await app.ainvoke({"user": "alice", "food": "tea"})
    assert (out["liked"], out["found"]) == ("tea", ["food"])
    clock.advance()
    out = await app.ainvoke({"user": "alice", "food": "coffee"})
    assert (out["liked"], out["found"]) == ("coffee", ["food"])
    out = await app.ainvoke({"user": "bob", "food": "tea"})
    assert (out["liked"], out["found"]) == ("tea", ["food"])
    fact = await store.afact(("alice",), "food")
    assert fact is not None
    why = await store.consolidator.explain(fact.id)
    assert [item_value(f) for f in why.predecessors] == [{"likes": "tea"}]


def test_a_graph_runs_synchronously_on_a_sync_store(sync_store: StargraphStore) -> None:
    out = build_graph(sync_store, async_recall=False).invoke({"user": "alice", "food": "tea"})
    assert (out["liked"], out["found"]) == ("tea", ["food"])
    item = sync_store.get(("alice",), "food")
    assert item is not None and item.value == {"likes": "tea"}


# --- the README -----------------------------------------------------------------------------


def readme_blocks() -> list[str]:
    """The Python blocks of the README's "LangGraph store" section, in order."""
    text = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    section = text.split("\n## LangGraph store\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_readme_example_runs_verbatim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = readme_blocks()
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.splitlines() == [
        "tea ['food']",
        "coffee ['food']",
        "item food replaced: was [{'likes': 'tea'}]",
        "{'tone': 'brief'}",
        "meals 1.0",
        "plans 0.0",
    ]
