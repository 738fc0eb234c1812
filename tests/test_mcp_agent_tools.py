"""The agent tools of the MCP server (remember_fact, correct_fact, confirm_fact, weak_facts,
memory_stats) called through the SDK's client on both backends: what they write, what they
return, and that refused calls are tool errors that leave the stores unchanged."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from backends import NewLocation, snapshot
from e2e_helpers import DEFAULT, RULES, SEED_PACK
from mcp import Client
from mcp.types import TextContent

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.integrations.mcp_server import (
    AGENT_SESSION,
    CORRECTED,
    REMEMBERED,
    SOURCE_NODE,
    TOOL_NAMES,
    build_server,
)
from stargraph_mem.model.deltas import AddDelta, FactPayload
from stargraph_mem.model.episodes import Episode

NOW = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
LIFECYCLE = RULES / "fact_lifecycle.yaml"
NOTES_ONLY = """\
ir_version: 1
pack: notes_only
version: "1.0.0"
fields: {subject: string}
defaults: {cadence: {every: 1}, confidence: 0.5}
rules:
  - id: nothing_to_do
    when:
      - episode: {subject: {bind: s}}
    emit: {kind: noop, reason: "seen {s}"}
"""
"""A pack that makes no fact of anything."""

Result = dict[str, Any]


class Clock:
    """A settable clock, so each call records at its own time."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now

    def tick(self, minutes: int = 1) -> None:
        self.now += timedelta(minutes=minutes)


@asynccontextmanager
async def serving(
    location: str, packs: list[Path], clock: Clock | None = None
) -> AsyncIterator[tuple[Consolidator, Client]]:
    async with (
        Consolidator.open(location, packs, clock=clock or Clock()) as mem,
        Client(build_server(mem)) as client,
    ):
        yield mem, client


async def call(client: Client, tool: str, **arguments: Any) -> Result:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    (block,) = result.content
    assert isinstance(block, TextContent)
    assert json.loads(block.text) == result.structured_content
    structured: Result = result.structured_content
    return structured


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


def said(tool: str, message: str) -> str:
    return f"Error executing tool {tool}: {message}"


def triple(fact: Result) -> tuple[str, str, str]:
    return (fact["subject"], fact["predicate"], fact["object"])


# --- listing ----------------------------------------------------------------------------------


async def test_the_agent_tools_are_listed_with_closed_schemas(tmp_path: Path) -> None:
    async with serving(str(tmp_path / "m.db"), [DEFAULT]) as (_, client):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tuple(tools) == TOOL_NAMES
        remember = tools["remember_fact"].input_schema
        assert remember["additionalProperties"] is False
        assert remember["required"] == ["user", "agent", "subject", "predicate", "object"]
        assert remember["properties"]["subject"]["minLength"] == 1
        correct = tools["correct_fact"].input_schema
        assert correct["required"] == ["fact_id", "object", "reason"]
        assert tools["confirm_fact"].input_schema["required"] == ["fact_id"]
        confirm = tools["confirm_fact"].description or ""
        assert "decay rate 0" in confirm and "pins the fact" in confirm
        below = tools["weak_facts"].input_schema["properties"]["below"]
        assert (below["exclusiveMinimum"], below["maximum"], below["default"]) == (0, 1, 0.3)
        assert "required" not in tools["memory_stats"].input_schema
        for name in ("weak_facts", "memory_stats"):
            assert tools[name].annotations.read_only_hint is True  # type: ignore[union-attr]
        for name in ("remember_fact", "correct_fact", "confirm_fact"):
            hints = tools[name].annotations
            assert hints is not None and not hints.read_only_hint and not hints.destructive_hint


# --- remember, correct, confirm ---------------------------------------------------------------


async def test_remember_correct_and_confirm_a_fact(new_location: NewLocation) -> None:
    clock = Clock()
    async with serving(new_location(), [DEFAULT], clock) as (mem, client):
        made = await call(
            client,
            "remember_fact",
            user="alice",
            agent="rag",
            subject="alice",
            predicate="drinks",
            object="green tea",
            note="Alice said she only drinks green tea",
        )
        (fact,) = made["facts"]
        assert triple(fact) == ("alice", "drinks", "green tea")
        assert (fact["user"], fact["agent"], fact["rule_id"]) == ("alice", "rag", "add_observation")
        assert made["consolidation"]["counts"]["add"] == 1
        (stored,) = await mem.memory.recent("alice", limit=5)
        assert stored.id == made["episode_id"]
        assert (stored.session, stored.source_node) == (AGENT_SESSION, SOURCE_NODE)
        assert stored.content == "Alice said she only drinks green tea"
        assert stored.metadata == {
            "subject": "alice",
            "predicate": "drinks",
            "object": "green tea",
            "source": REMEMBERED,
        }
        why = await call(client, "explain_fact", fact_id=fact["id"])
        assert [e["id"] for e in why["source_episodes"]] == [made["episode_id"]]

        clock.tick()
        fixed = await call(
            client,
            "correct_fact",
            fact_id=fact["id"],
            object="black coffee",
            reason="She switched to coffee",
        )
        assert fixed["old"]["id"] == fact["id"]
        assert fixed["old"]["valid_until"] is not None
        assert fixed["old"]["superseded_by"] == fixed["new"]["id"]
        assert triple(fixed["new"]) == ("alice", "drinks", "black coffee")
        assert fixed["new"]["rule_id"] == "explicit_update"
        assert fixed["consolidation"]["counts"]["update"] == 1
        (correcting,) = [
            e for e in await mem.memory.recent("alice", limit=5) if e.id == fixed["episode_id"]
        ]
        assert correcting.metadata == {
            "intent": "update",
            "replaces": [fact["id"]],
            "subject": "alice",
            "predicate": "drinks",
            "object": "black coffee",
            "source": CORRECTED,
        }
        listed = await call(client, "list_facts", user="alice")
        assert [triple(f) for f in listed["facts"]] == [("alice", "drinks", "black coffee")]

        pinned = await call(client, "confirm_fact", fact_id=fixed["new"]["id"], reason="sure")
        assert (pinned["newly_pinned"], pinned["fact"]["id"]) == (True, fixed["new"]["id"])
        assert pinned["fact"]["confidence"] == fixed["new"]["confidence"]  # left as it was
        assert (await mem.fact_store.get(fixed["new"]["id"])).pinned_at is not None
        again = await call(client, "confirm_fact", fact_id=fixed["new"]["id"])
        assert again["newly_pinned"] is False
        assert again["pinned_at"] == pinned["pinned_at"]
        events = [e.event for e in await mem.status_history(fixed["new"]["id"])]
        assert events == ["created", "pinned"]


async def test_remembering_the_same_statement_twice_at_once_stores_it_once(
    tmp_path: Path,
) -> None:
    async with serving(str(tmp_path / "m.db"), [DEFAULT]) as (mem, client):
        said_ = dict(user="bob", agent="rag", subject="bob", predicate="lives_in", object="Oslo")
        first = await call(client, "remember_fact", **said_)
        second = await call(client, "remember_fact", **said_)  # same clock time
        assert second["episode_id"] == first["episode_id"]
        assert second["facts"] == first["facts"]
        assert second["consolidation"]["counts"]["add"] == 0
        assert len(await mem.facts(user="bob")) == 1


async def test_a_pack_that_makes_no_fact_is_named_in_the_error(tmp_path: Path) -> None:
    pack = tmp_path / "notes_only.yaml"
    pack.write_text(NOTES_ONLY)
    async with serving(str(tmp_path / "m.db"), [pack]) as (mem, client):
        message = await refused(
            client, "remember_fact", user="u", agent="a", subject="s", predicate="p", object="o"
        )
        assert message.startswith(said("remember_fact", "no rule pack made a fact from episode"))
        assert "(packs: notes_only); the episode stays stored" in message
        assert await mem.facts() == []


async def test_refused_agent_tool_calls_change_nothing(new_location: NewLocation) -> None:
    async with serving(new_location(), [DEFAULT]) as (mem, client):
        made = await call(
            client, "remember_fact", user="u", agent="a", subject="s", predicate="p", object="o"
        )
        (fact,) = made["facts"]
        before = await snapshot(mem.fact_store)  # type: ignore[arg-type]

        assert "\nobjekt\n  Extra inputs are not permitted" in await refused(
            client,
            "remember_fact",
            user="u",
            agent="a",
            subject="s",
            predicate="p",
            object="o",
            objekt="o",
        )
        assert "\nsubject\n  String should have at least 1 character" in await refused(
            client, "remember_fact", user="u", agent="a", subject="", predicate="p", object="o"
        )
        assert "\nobject\n  String should match pattern" in await refused(
            client, "remember_fact", user="u", agent="a", subject="s", predicate="p", object="\x00"
        )
        assert "\nuser\n  Field required" in await refused(
            client, "remember_fact", agent="a", subject="s", predicate="p", object="o"
        )
        assert await refused(
            client, "correct_fact", fact_id="f-unknown", object="x", reason="r"
        ) == said("correct_fact", "no fact with id 'f-unknown'")
        assert await refused(
            client, "correct_fact", fact_id=fact["id"], object="o", reason="r"
        ) == said("correct_fact", f"fact {fact['id']!r} already has object 'o': nothing to correct")
        assert "\nreason\n  Field required" in await refused(
            client, "correct_fact", fact_id=fact["id"], object="x"
        )
        assert await refused(client, "confirm_fact", fact_id="f-unknown") == said(
            "confirm_fact", "no fact with id 'f-unknown'"
        )
        assert "\nfact_id\n  String should match pattern" in await refused(
            client, "confirm_fact", fact_id="bad id"
        )
        assert "\nbelow\n  Input should be greater than 0" in await refused(
            client, "weak_facts", below=0
        )
        assert "\nlimit\n  Input should be less than or equal to 1000" in await refused(
            client, "weak_facts", limit=5000
        )
        assert "\nsession\n  Extra inputs are not permitted" in await refused(
            client, "memory_stats", session="s"
        )
        assert "\nuser\n  String should have at least 1 character" in await refused(
            client, "memory_stats", user=""
        )
        assert await snapshot(mem.fact_store) == before  # type: ignore[arg-type]

        fixed = await call(client, "correct_fact", fact_id=fact["id"], object="x", reason="r")
        after = await snapshot(mem.fact_store)  # type: ignore[arg-type]
        message = await refused(client, "correct_fact", fact_id=fact["id"], object="y", reason="r")
        assert message == said(
            "correct_fact",
            f"fact {fact['id']!r} is superseded, not current: only a current fact can be "
            f"corrected (it was replaced by {fixed['new']['id']!r})",
        )
        assert await refused(client, "confirm_fact", fact_id=fact["id"]) == said(
            "confirm_fact",
            f"cannot pin fact {fact['id']}: it is superseded, not current",
        )
        assert await snapshot(mem.fact_store) == after  # type: ignore[arg-type]


async def test_a_statement_over_the_size_limits_is_refused_before_recording(
    new_location: NewLocation,
) -> None:
    """remember_fact and correct_fact check the limits a pass would reject the fact's delta
    for (fact_bytes, KEY_BYTES) first: one message naming the limit, nothing written."""
    async with serving(new_location(), [DEFAULT]) as (mem, client):
        made = await call(
            client, "remember_fact", user="u", agent="a", subject="s", predicate="p", object="o"
        )
        (fact,) = made["facts"]
        before = await snapshot(mem.fact_store)  # type: ignore[arg-type]

        huge = "o" * 70_000
        assert await refused(
            client, "remember_fact", user="u", agent="a", subject="s", predicate="p", object=huge
        ) == said(
            "remember_fact",
            "the statement would be 70,002 bytes (UTF-8; object 70,000), over the limit of "
            "65,536 (fact_bytes); nothing was recorded",
        )
        assert await refused(
            client,
            "remember_fact",
            user="u",
            agent="a",
            subject="s" * 2_600,
            predicate="p",
            object="o",
        ) == said(
            "remember_fact",
            "the subject and predicate would be 2,601 bytes (UTF-8), over the 2,584 an indexed key "
            "leaves beside the partition key (KEY_BYTES 2,600); nothing was recorded",
        )
        assert await refused(
            client, "correct_fact", fact_id=fact["id"], object=huge, reason="longer"
        ) == said(
            "correct_fact",
            "the statement would be 70,002 bytes (UTF-8; object 70,000), over the limit of "
            "65,536 (fact_bytes); nothing was recorded",
        )
        assert await snapshot(mem.fact_store) == before  # type: ignore[arg-type]


async def test_a_rejected_statement_reports_why(tmp_path: Path) -> None:
    """A statement within the limits whose delta a pass still rejects (the rule's reason
    text tips it over fact_bytes) is an error carrying the rejection's reason, not advice
    to serve a pack that promotes statements."""
    async with serving(str(tmp_path / "m.db"), [DEFAULT]) as (mem, client):
        made = await call(
            client, "remember_fact", user="u", agent="a", subject="s", predicate="p", object="o"
        )
        (fact,) = made["facts"]
        near = "o" * (65_536 - 2)  # with "s" and "p": the limit exactly
        message = await refused(
            client, "remember_fact", user="u", agent="a", subject="s", predicate="p", object=near
        )
        assert message.startswith(said("remember_fact", "no fact was made from episode '"))
        assert (
            "it was rejected (default/add_observation: delta too large: its rendered text "
            "would be 65,551 bytes (UTF-8; object 65,534), over the limit of 65,536 "
            "(fact_bytes)); the episode stays stored"
        ) in message
        assert "Serve a pack" not in message

        message = await refused(client, "correct_fact", fact_id=fact["id"], object=near, reason="r")
        assert message.startswith(
            said("correct_fact", f"fact {fact['id']!r} was not superseded: episode '")
        )
        assert "rejected (default/explicit_update: delta too large:" in message
        assert "Serve a pack" not in message
        (current,) = await mem.facts(user="u")
        assert current.id == fact["id"]


async def test_a_nul_in_a_filter_is_refused_alike_on_both_backends(
    new_location: NewLocation,
) -> None:
    """Every string filter carries the NUL-free pattern: the same refusal on SQLite and
    PostgreSQL (whose text columns cannot hold a NUL), never an unexplained failure."""
    async with serving(new_location(), [DEFAULT]) as (mem, client):
        made = await call(
            client, "remember_fact", user="u", agent="a", subject="s", predicate="p", object="o"
        )
        (fact,) = made["facts"]
        before = await snapshot(mem.fact_store)  # type: ignore[arg-type]
        recall = {"query": "s", "user": "u", "agent": "a"}
        for tool, arguments, name in [
            ("search_facts", {"subject": "s\x00"}, "subject"),
            ("search_facts", {"predicate": "p\x00"}, "predicate"),
            ("search_facts", {"query": "s\x00"}, "query"),
            ("search_facts", {"user": "u\x00"}, "user"),
            ("search_facts", {"agent": "a\x00"}, "agent"),
            ("list_facts", {"user": "u\x00"}, "user"),
            ("weak_facts", {"agent": "a\x00"}, "agent"),
            ("memory_stats", {"user": "u\x00"}, "user"),
            ("search_memory", {**recall, "query": "s\x00"}, "query"),
            ("search_memory", {**recall, "after": "today\x00"}, "after"),
            ("search_memory", {**recall, "before": "today\x00"}, "before"),
            ("search_memory", {**recall, "entity_name": "s\x00"}, "entity_name"),
            (
                "update_status",
                {"fact_id": fact["id"], "status": "challenged", "reason": "r", "at": "x\x00"},
                "at",
            ),
        ]:
            message = await refused(client, tool, **arguments)
            assert message.startswith(said(tool, "1 validation error")), message
            assert f"\n{name}\n  String should match pattern" in message, message
        assert await snapshot(mem.fact_store) == before  # type: ignore[arg-type]


# --- weak facts and stats ---------------------------------------------------------------------


async def test_weak_facts_lists_the_least_confident_and_what_protects_them(
    tmp_path: Path,
) -> None:
    seed = tmp_path / "seed.yaml"
    seed.write_text(SEED_PACK)  # streaming, confidence 0.3
    clock = Clock()
    async with serving(str(tmp_path / "m.db"), [seed, DEFAULT, LIFECYCLE], clock) as (
        _mem,
        client,
    ):
        for obj in ("tea", "jazz"):
            clock.tick()
            await call(
                client,
                "remember_fact",
                user="u",
                agent="a",
                subject="u",
                predicate="likes",
                object=obj,
            )
        weak = await call(client, "weak_facts", below=0.5)
        assert [(f["fact"]["object"], f["fact"]["confidence"]) for f in weak["facts"]] == [
            ("tea", 0.3),
            ("jazz", 0.3),
        ]  # the default pack's 0.8 facts are not weak; equal confidence: oldest first
        assert (weak["total"], weak["truncated"]) == (2, False)
        first = weak["facts"][0]
        assert (first["pinned"], first["access_count"], first["last_access"]) == (False, 0, None)
        assert first["protect"][0].startswith("confirm_fact")
        assert weak["sweeps"] == [
            "fact_lifecycle/archive_faded",
            "fact_lifecycle/archive_stale",
            "fact_lifecycle/decay_unreinforced",
        ]
        assert (await call(client, "weak_facts"))["facts"] == []  # 0.3 is not below 0.3

        await call(client, "confirm_fact", fact_id=first["fact"]["id"])
        await call(client, "search_facts", query="jazz")
        page = await call(client, "weak_facts", below=0.5, limit=1)
        (only,) = page["facts"]
        assert (only["pinned"], only["protect"]) == (True, [])
        assert (page["total"], page["truncated"]) == (2, True)
        jazz = (await call(client, "weak_facts", below=0.5))["facts"][1]
        assert jazz["access_count"] == 1 and jazz["last_access"] is not None
        assert (await call(client, "weak_facts", below=0.5, user="nobody"))["facts"] == []


async def test_memory_stats_counts_the_memory(new_location: NewLocation) -> None:
    clock = Clock()
    location = new_location()
    async with serving(location, [DEFAULT], clock) as (_mem, client):
        empty = await call(client, "memory_stats")
        assert (empty["partitions"], empty["episodes"], empty["facts"], empty["pinned"]) == (
            0,
            0,
            {},
            0,
        )
        assert empty["pending"] == [{"pack": "default", "pending": 0}]
        for user in ("alice", "bob"):
            clock.tick()
            made = await call(
                client,
                "remember_fact",
                user=user,
                agent="rag",
                subject=user,
                predicate="p",
                object="o",
            )
        clock.tick()
        fixed = await call(
            client, "correct_fact", fact_id=made["facts"][0]["id"], object="n", reason="fix"
        )
        await call(client, "confirm_fact", fact_id=fixed["new"]["id"])
        await call(
            client,
            "record_episode",
            content="later",
            user="alice",
            session="s",
            agent="rag",
            metadata={"subject": "alice", "predicate": "q", "object": "r"},
        )
        stats = await call(client, "memory_stats")
        backend = "sqlite" if "://" not in location else "postgresql"
        assert stats["backend"] == backend
        assert (stats["partitions"], stats["episodes"]) == (2, 4)
        assert stats["facts"] == {"current": 2, "superseded": 1}
        assert stats["pinned"] == 1
        assert stats["pending"] == [{"pack": "default", "pending": 1}]  # cron: waits till 3:00
        if backend == "sqlite":
            assert stats["storage_bytes"] >= Path(location).stat().st_size > 0
        else:
            assert stats["storage_bytes"] is None
        mine = await call(client, "memory_stats", user="bob")
        assert (mine["partitions"], mine["episodes"], mine["facts"]) == (
            1,
            2,
            {"current": 1, "superseded": 1},
        )
        assert mine["pending"] == [{"pack": "default", "pending": 0}]


async def test_the_agent_tools_work_with_the_streaming_dedup_example(tmp_path: Path) -> None:
    streaming = RULES.parent / "examples" / "streaming_dedup.yaml"
    async with serving(str(tmp_path / "m.db"), [streaming]) as (_, client):
        said_ = dict(user="u", agent="a", subject="u", predicate="likes", object="tea")
        first = await call(client, "remember_fact", **said_)
        assert first["already_known"] is False
        (tea,) = first["facts"]
        assert tea["rule_id"] == "new_fact_add"
        again = await call(client, "remember_fact", **{**said_, "note": "still tea"})
        assert again["already_known"] is True  # the pack recorded a noop: the fact is known
        assert again["facts"] == [tea]
        assert again["consolidation"]["counts"]["noop"] == 1
        fixed = await call(client, "correct_fact", fact_id=tea["id"], object="gin", reason="gin")
        assert (fixed["new"]["object"], fixed["new"]["rule_id"]) == ("gin", "changed_object_update")


async def test_a_read_only_database_refuses_the_writing_tools(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with serving(str(db), [DEFAULT]) as (_, client):
        said_ = dict(user="u", agent="a", subject="u", predicate="p", object="o")
        (fact,) = (await call(client, "remember_fact", **said_))["facts"]
    async with Consolidator.open(db, [DEFAULT], read_only=True) as mem:
        before = await snapshot(mem.fact_store)  # type: ignore[arg-type]
        async with Client(build_server(mem)) as client:
            for tool, arguments in [
                ("remember_fact", {**said_, "object": "x"}),
                ("correct_fact", {"fact_id": fact["id"], "object": "x", "reason": "r"}),
                ("confirm_fact", {"fact_id": fact["id"]}),
            ]:
                message = await refused(client, tool, **arguments)
                assert message.startswith(said(tool, "DB is read-only")), message
            assert (await call(client, "weak_facts", below=1))["total"] == 1
            assert (await call(client, "memory_stats"))["facts"] == {"current": 1}
        assert await snapshot(mem.fact_store) == before  # type: ignore[arg-type]


async def test_search_memory_and_get_entity_info(new_location: NewLocation) -> None:
    clock = Clock()
    async with serving(new_location(), [DEFAULT], clock) as (mem, client):
        for obj in ("green tea", "jazz records"):
            clock.tick()
            await call(
                client,
                "remember_fact",
                user="alice",
                agent="rag",
                subject="alice",
                predicate="likes",
                object=obj,
            )
        found = await call(
            client,
            "search_memory",
            query="tea",
            user="alice",
            agent="rag",
            kinds="facts",
            context_budget=200,
        )
        best = found["hits"][0]
        assert (best["rank"], best["kind"], best["text"]) == (1, "fact", "alice likes green tea")
        assert "fts" in best["strategies"]
        assert found["context"] and "alice likes green tea" in found["context"]
        only = await call(
            client, "search_memory", query="tea", user="alice", agent="rag", kinds="episodes"
        )
        assert {h["kind"] for h in only["hits"]} <= {"episode"}
        assert "\nkinds\n  Input should be 'facts', 'episodes' or 'both'" in await refused(
            client, "search_memory", query="tea", user="alice", agent="rag", kinds="all"
        )
        assert "after" in await refused(
            client, "search_memory", query="t", user="alice", agent="rag", after="2026-11-01T00:00"
        )
        info = await call(client, "get_entity_info", name="Alice", user="alice", agent="rag")
        assert info["name"] == "alice" and info["declared"] is False
        assert sorted(f["object"] for f in info["facts"]) == ["green tea", "jazz records"]
        assert info["timeline"]
        assert "no entity named 'nobody'" in await refused(
            client, "get_entity_info", name="nobody", user="alice", agent="rag"
        )
        assert len(await mem.facts()) == 2


async def test_search_tools_keep_what_a_recall_mode_includes(new_location: NewLocation) -> None:
    """``mode`` on ``search_facts`` and ``search_memory`` (specification 004): facts_only
    keeps facts of type fact, facts_plus_rules adds procedures, full_context (the default)
    keeps everything, episodes included."""
    async with serving(new_location(), [DEFAULT]) as (mem, client):
        for n, (obj, kind) in enumerate(
            (("tea", "fact"), ("tea before noon", "procedure"), ("tea at dawn", "narrative"))
        ):
            delta = AddDelta(
                user="alice",
                agent="rag",
                fact=FactPayload(subject="alice", predicate="drinks", object=obj),
                source_episode_ids=[f"e{n}"],
                rule_id="seed",
                confidence=0.8,
                promotion_ts=NOW,
                memory_type=kind,
            )
            await mem.fact_store.apply_deltas([delta], pack_hash="seed")
        await mem.memory.put_many(
            [
                Episode(
                    id="said",
                    content="alice drinks tea",
                    timestamp=NOW,
                    user="alice",
                    session="s1",
                    agent="rag",
                )
            ]
        )
        expected = {
            "facts_only": {"tea"},
            "facts_plus_rules": {"tea", "tea before noon"},
            "full_context": {"tea", "tea before noon", "tea at dawn"},
        }
        for mode, objects in expected.items():
            hits = (await call(client, "search_facts", query="tea", mode=mode))["hits"]
            assert {h["fact"]["object"] for h in hits} == objects, mode
            found = await call(
                client, "search_memory", query="tea", user="alice", agent="rag", mode=mode
            )
            facts = {h["fact"]["object"] for h in found["hits"] if h["kind"] == "fact"}
            assert facts == objects, mode
            episodes = [h for h in found["hits"] if h["kind"] == "episode"]
            assert bool(episodes) == (mode == "full_context"), mode
        assert "mode" in await refused(client, "search_facts", query="tea", mode="everything")
