"""The MCP server: tools listed with closed, typed schemas; every tool called through the
SDK's own client in process (both protocol eras); refused calls are tool errors that
change nothing; ``stargraph-mem mcp`` served over stdio to the SDK's stdio client, and
the process exits when its stdin closes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import DEDUP, DEFAULT, ROOT, dump_tables, rows, spo
from mcp import Client, StdioServerParameters
from mcp.client import stdio
from mcp.types import TextContent
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.integrations.mcp_server import MAX_LISTED, TOOL_NAMES, build_server
from stargraph_mem.model.canonical import default_episode_id

STREAMING = ROOT / "examples" / "streaming_dedup.yaml"
NOW = datetime(2026, 11, 2, 3, 0, tzinfo=UTC)
SCRIPT = Path(sys.executable).with_name("stargraph-mem")

Result = dict[str, Any]


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    """``auto``: the 2026 protocol, dispatched directly; ``legacy``: JSON-RPC messages over
    in-memory streams after the initialize handshake."""
    return str(request.param)


@asynccontextmanager
async def serving(
    db: Path, packs: list[Path], mode: str = "auto", **kw: Any
) -> AsyncIterator[tuple[Consolidator, Client]]:
    """An open Consolidator (clock pinned to NOW) and an SDK client connected in process."""
    async with (
        Consolidator.open(db, packs, clock=lambda: NOW, **kw) as mem,
        Client(build_server(mem), mode=mode) as client,
    ):
        yield mem, client


async def call(client: Client, tool: str, **arguments: Any) -> Result:
    """A successful call's structured result (the text content is the same JSON)."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    (block,) = result.content
    assert isinstance(block, TextContent)
    structured: Result = result.structured_content
    assert json.loads(block.text) == structured
    return structured


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """A refused call's message (a tool error, not a protocol error)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert result.structured_content is None
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


def said(tool: str, message: str) -> str:
    return f"Error executing tool {tool}: {message}"


def observation(content: str, obj: str, at: str, **extra: Any) -> dict[str, Any]:
    """record_episode arguments: alice (session s1, agent rag) likes ``obj`` at ``at``."""
    metadata = {**spo("alice", "likes", obj), **extra}
    return dict(
        content=content, user="alice", session="s1", agent="rag", timestamp=at, metadata=metadata
    )


# --- listing ----------------------------------------------------------------------------------


async def test_tools_are_listed_with_closed_typed_schemas(tmp_path: Path, mode: str) -> None:
    async with serving(tmp_path / "m.db", [DEDUP], mode) as (_, client):
        assert client.instructions is not None and "ISO 8601" in client.instructions
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tuple(tools) == TOOL_NAMES
        for tool in tools.values():
            assert tool.description and len(tool.description) > 80
            assert tool.input_schema["additionalProperties"] is False
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
            assert tool.annotations is not None and tool.annotations.open_world_hint is False
            for name, prop in tool.input_schema["properties"].items():
                assert prop.get("description"), f"{tool.name}.{name} has no description"

        record = tools["record_episode"].input_schema
        assert record["required"] == ["content", "user", "session", "agent"]
        user = record["properties"]["user"]
        assert (user["type"], user["minLength"], user["maxLength"]) == ("string", 1, 256)
        (stamp, null) = record["properties"]["timestamp"]["anyOf"]
        assert (stamp["type"], stamp["format"], null) == ("string", "date-time", {"type": "null"})
        assert record["properties"]["metadata"]["anyOf"][0]["type"] == "object"
        assert tools["explain_fact"].input_schema["required"] == ["fact_id"]
        limit = tools["list_facts"].input_schema["properties"]["limit"]
        assert (limit["type"], limit["minimum"], limit["maximum"], limit["default"]) == (
            "integer",
            1,
            1000,
            100,
        )
        assert "required" not in tools["consolidate"].input_schema
        search = tools["search_facts"].input_schema["properties"]
        assert (search["query"]["type"], search["query"]["default"]) == ("string", "")
        assert (search["limit"]["maximum"], search["limit"]["default"]) == (1000, 10)
        confidence = search["min_confidence"]["anyOf"][0]
        assert (confidence["type"], confidence["minimum"], confidence["maximum"]) == (
            "number",
            0,
            1,
        )

        for name in ("list_facts", "explain_fact"):
            assert tools[name].annotations.read_only_hint is True  # type: ignore[union-attr]
        for name in ("record_episode", "search_facts", "consolidate"):
            hints = tools[name].annotations
            assert hints is not None and not hints.read_only_hint and not hints.destructive_hint


# --- every tool -------------------------------------------------------------------------------


async def test_record_consolidate_list_and_explain(tmp_path: Path, mode: str) -> None:
    async with serving(tmp_path / "m.db", [DEDUP], mode) as (mem, client):
        tea = observation("Alice likes tea", "tea", "2026-11-01T09:00:00+00:00")
        first = await call(client, "record_episode", **tea)
        expected_id = default_episode_id(
            "Alice likes tea", "alice", "s1", "rag", datetime(2026, 11, 1, 9, tzinfo=UTC)
        )
        assert first["episode_id"] == expected_id  # the same id `stargraph-mem put` gives
        nothing = {"add": 0, "update": 0, "delete": 0, "noop": 0}
        assert first["consolidation"] == {
            "counts": nothing,  # the pack's rules run nightly (cron), not on record
            "passes": 0,
            "episodes": 0,
            "fired": [],
            "rejected": [],
            "rejected_total": 0,
            "gated": [],
            "gated_total": 0,
        }
        assert (await call(client, "record_episode", **tea))["episode_id"] == expected_id
        assert [e.id for e in await mem.memory.recent("alice", limit=10)] == [expected_id]

        ran = await call(client, "consolidate", user="alice", now="2026-11-02T03:00:00+00:00")
        assert ran["counts"] == {"add": 1, "update": 0, "delete": 0, "noop": 0}
        assert (ran["passes"], ran["episodes"], ran["rejected_total"]) == (1, 1, 0)
        assert ran["fired"] == [
            "dedup_against_facts/known_fact_noop",
            "dedup_against_facts/changed_object_update",
            "dedup_against_facts/late_observation_noop",
            "dedup_against_facts/new_fact_add",
        ]
        again = await call(client, "consolidate", now="2026-11-02T04:00:00+00:00")
        assert (again["counts"], again["episodes"]) == (nothing, 0)

        coffee = observation("Now coffee", "coffee", "2026-11-02T18:00:00+01:00")
        second = await call(client, "record_episode", id="ep-coffee", **coffee)
        assert second["episode_id"] == "ep-coffee"
        later = await call(client, "consolidate", agent="rag", now="2026-11-03T03:00:00+00:00")
        assert later["counts"] == {"add": 0, "update": 1, "delete": 0, "noop": 0}

        listed = await call(client, "list_facts", user="alice", agent="rag")
        assert (listed["total"], listed["truncated"]) == (1, False)
        (now,) = listed["facts"]
        assert (now["subject"], now["predicate"], now["object"]) == ("alice", "likes", "coffee")
        assert now["valid_until"] is None
        before = await call(client, "list_facts", as_of="2026-11-02T12:00:00+00:00")
        (then,) = before["facts"]
        assert then["object"] == "tea"
        assert (await call(client, "list_facts", user="bob"))["facts"] == []
        assert (await call(client, "list_facts", agent="other"))["facts"] == []

        why = await call(client, "explain_fact", fact_id=now["id"])
        assert why["fact"] == now
        assert why["rule_id"] == "changed_object_update"
        assert why["pack_hash"] == mem.packs[0].sha256
        assert why["reason"] == "(alice, likes) changed to coffee"
        assert why["bindings"]["o"] == "coffee"
        assert [(e["id"], e["content"]) for e in why["source_episodes"]] == [
            ("ep-coffee", "Now coffee")
        ]
        assert [f["id"] for f in why["predecessors"]] == [then["id"]]
        assert (why["successors"], why["closed_by"]) == ([], None)

        old = await call(client, "explain_fact", fact_id=then["id"])
        assert old["rule_id"] == "new_fact_add"
        assert [f["id"] for f in old["successors"]] == [now["id"]]
        assert old["closed_by"] == why["delta_id"]
        assert old["fact"]["valid_until"] is not None


async def test_record_runs_streaming_rules_and_reports_what_they_did(
    tmp_path: Path, mode: str
) -> None:
    async with serving(tmp_path / "m.db", [STREAMING], mode) as (_, client):
        tea = observation("Alice likes tea", "tea", "2026-11-01T09:00:00+00:00")
        added = (await call(client, "record_episode", **tea))["consolidation"]
        assert added["counts"] == {"add": 1, "update": 0, "delete": 0, "noop": 0}
        assert (added["passes"], added["episodes"]) == (1, 1)
        assert "streaming_dedup/new_fact_add" in added["fired"]
        again = observation("Still tea", "tea", "2026-11-01T10:00:00+00:00")
        repeated = (await call(client, "record_episode", **again))["consolidation"]
        assert repeated["counts"] == {"add": 0, "update": 0, "delete": 0, "noop": 1}
        (fact,) = (await call(client, "list_facts"))["facts"]
        assert fact["object"] == "tea"


async def test_search_facts_ranks_current_facts_within_filters_and_counts_accesses(
    tmp_path: Path, mode: str
) -> None:
    async with serving(tmp_path / "m.db", [STREAMING], mode) as (mem, client):
        said_ = [
            ("alice", "likes", "green tea"),
            ("alice", "drinks", "coffee"),
            ("bob", "likes", "tea"),
        ]
        for n, (user, predicate, obj) in enumerate(said_):
            arguments = observation(f"{user} {predicate} {obj}", obj, f"2026-11-01T0{n}:00:00Z")
            arguments["metadata"].update(subject=user, predicate=predicate)
            await call(client, "record_episode", **{**arguments, "user": user})

        tea = (await call(client, "search_facts", query="Tea!"))["hits"]
        assert sorted((h["fact"]["user"], h["fact"]["object"]) for h in tea) == [
            ("alice", "green tea"),
            ("bob", "tea"),
        ]
        assert all(h["score"] > 0 for h in tea)
        (mine,) = (await call(client, "search_facts", query="tea", user="alice"))["hits"]
        assert mine["fact"]["object"] == "green tea"
        assert (await mem.access(mine["fact"]["id"])).count == 2  # returned twice

        liked = await call(client, "search_facts", predicate="likes", agent="rag", limit=1)
        assert [h["score"] for h in liked["hits"]] == [0.0]  # by filters alone
        assert (await call(client, "search_facts", min_confidence=0.9))["hits"] == []
        assert (await call(client, "search_facts", subject="alice", query="coffee"))["hits"][0][
            "fact"
        ]["object"] == "coffee"

        gin = observation("alice likes gin now", "gin", "2026-11-01T05:00:00Z")
        gin["metadata"].update(subject="alice", predicate="likes")
        assert (await call(client, "record_episode", **gin))["consolidation"]["counts"][
            "update"
        ] == 1
        found = await call(client, "search_facts", query="green tea", user="alice")
        assert found["hits"] == []  # the closed fact is not searched


async def test_consolidate_lists_refused_episodes_and_counts_them_all(tmp_path: Path) -> None:
    async with serving(tmp_path / "m.db", [DEFAULT]) as (_, client):
        for n in range(MAX_LISTED + 5):
            retract = observation(
                f"forget {n}", "tea", "2026-11-01T09:00:00+00:00", intent="delete"
            )
            retract["metadata"]["replaces"] = [f"f-missing-{n}"]
            await call(client, "record_episode", **retract)
        ran = await call(client, "consolidate", now="2026-11-02T03:00:00+00:00")
        assert ran["counts"]["delete"] == 0
        assert ran["rejected_total"] == MAX_LISTED + 5
        assert len(ran["rejected"]) == MAX_LISTED
        first = ran["rejected"][0]
        assert first["rule_id"] == "explicit_delete"
        assert "f-missing-" in first["reason"]


async def test_list_facts_limit_says_what_it_left_out(tmp_path: Path) -> None:
    async with serving(tmp_path / "m.db", [STREAMING]) as (_, client):
        for n in range(3):
            said_ = observation(f"fact {n}", "x", f"2026-11-01T0{n}:00:00+00:00")
            said_["metadata"]["predicate"] = f"p{n}"
            await call(client, "record_episode", **said_)
        page = await call(client, "list_facts", limit=2)
        assert (len(page["facts"]), page["total"], page["truncated"]) == (2, 3, True)
        every = await call(client, "list_facts")
        assert (every["facts"][:2], every["truncated"]) == (page["facts"], False)


# --- refusals ---------------------------------------------------------------------------------


async def test_refused_calls_are_tool_errors_that_change_nothing(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "m.db"
    async with serving(db, [DEDUP], mode) as (_, client):
        tea = observation("Alice likes tea", "tea", "2026-11-01T09:00:00+00:00")
        await call(client, "record_episode", id="ep1", **tea)
        await call(client, "consolidate")
        before = dump_tables(db)

        naive = {**tea, "timestamp": "2026-11-01T09:00:00"}
        assert await refused(client, "record_episode", **naive) == said(
            "record_episode",
            "timestamp '2026-11-01T09:00:00' has no UTC offset "
            "(write e.g. 2026-11-01T09:00:00+00:00)",
        )
        garbled = {**tea, "timestamp": "yesterday"}
        assert "'yesterday' is not an ISO 8601 time" in await refused(
            client, "record_episode", **garbled
        )
        assert await refused(client, "explain_fact", fact_id="f-unknown") == said(
            "explain_fact", "no fact with id 'f-unknown'"
        )
        reused = {**tea, "content": "Alice likes gin"}
        message = await refused(client, "record_episode", id="ep1", **reused)
        assert message == said(
            "record_episode", "episode id 'ep1' already exists with different content"
        )
        nul = {**tea, "content": "tea\x00"}
        assert await refused(client, "record_episode", **nul) == said(
            "record_episode", "content: Value error, text fields must not contain NUL characters"
        )
        bad_intent = {**tea, "metadata": {"intent": 5}}
        assert "metadata.intent must be a string (got int)" in await refused(
            client, "record_episode", **bad_intent
        )
        for scope, value, problem in [
            ("user", "", "String should have at least 1 character"),
            ("session", "s\x00", "String should match pattern"),
            ("agent", "a" * 257, "String should have at most 256 characters"),
        ]:
            message = await refused(client, "record_episode", **{**tea, scope: value})
            assert message.startswith(said("record_episode", "1 validation error"))
            assert f"\n{scope}\n  {problem}" in message
        assert "\nusers\n  Extra inputs are not permitted" in await refused(
            client, "list_facts", users="alice"
        )
        assert "\nfact_id\n  Field required" in await refused(client, "explain_fact")
        assert "\nlimit\n  Input should be greater than or equal to 1" in await refused(
            client, "list_facts", limit=0
        )
        assert await refused(client, "list_facts", as_of="2026-11-01") == said(
            "list_facts",
            "as_of '2026-11-01' has no UTC offset (write e.g. 2026-11-01T00:00:00+00:00)",
        )
        assert "has no UTC offset" in await refused(client, "consolidate", now="2026-11-02T03:00")
        assert "\nuser\n  String should have at least 1 character" in await refused(
            client, "consolidate", user=""
        )
        assert await refused(client, "search_facts", query="?!") == said(
            "search_facts", "search query '?!' has no words to search for (letters or digits)"
        )
        assert "\nlimit\n  Input should be less than or equal to 1000" in await refused(
            client, "search_facts", limit=1001
        )
        assert "\nmin_confidence\n  Input should be less than or equal to 1" in await refused(
            client, "search_facts", min_confidence=1.5
        )
        assert await refused(client, "forget_everything") == "Unknown tool: forget_everything"

        assert dump_tables(db) == before
        assert [t.name for t in (await client.list_tools()).tools] == list(TOOL_NAMES)


async def test_the_time_a_refusal_suggests_is_accepted(tmp_path: Path) -> None:
    """A time without a UTC offset is refused with a suggestion that, fed back, is
    accepted: a date alone gets a time too (Python reads ``2026-11-01+00:00`` as naive)."""
    async with serving(tmp_path / "m.db", [DEDUP]) as (_, client):
        for naive, suggested in [
            ("2026-11-01", "2026-11-01T00:00:00+00:00"),
            ("2026-11-01+00:00", "2026-11-01T00:00:00+00:00"),
            ("2026-11-01T09:00:00", "2026-11-01T09:00:00+00:00"),
            ("2026-11-01 09:30", "2026-11-01T09:30:00+00:00"),
            ("2026-11-01T09:00:00.250000", "2026-11-01T09:00:00.250000+00:00"),
        ]:
            for tool, name in [("list_facts", "as_of"), ("consolidate", "now")]:
                message = await refused(client, tool, **{name: naive})
                assert message == said(
                    tool, f"{name} {naive!r} has no UTC offset (write e.g. {suggested})"
                )
                await call(client, tool, **{name: suggested})
        tea = observation("Alice likes tea", "tea", "2026-11-01")
        hint = re.search(r"write e\.g\. (\S+)\)$", await refused(client, "record_episode", **tea))
        assert hint is not None
        recorded = await call(client, "record_episode", **{**tea, "timestamp": hint[1]})
        assert recorded["episode_id"]


async def test_a_nul_in_a_filter_or_time_is_refused_by_its_schema(tmp_path: Path) -> None:
    """Filters and times carry the NUL-free pattern scopes have (the backends need not
    agree on a NUL; a trailing NUL after a time is not dropped)."""
    db = tmp_path / "m.db"
    async with serving(db, [DEDUP]) as (_, client):
        before = dump_tables(db)
        tea = observation("Alice likes tea", "tea", "2026-11-01T09:00:00+00:00\x00")
        for tool, arguments, name in [
            ("search_facts", {"query": "tea\x00"}, "query"),
            ("search_facts", {"subject": "alice\x00"}, "subject"),
            ("search_facts", {"predicate": "likes\x00"}, "predicate"),
            ("list_facts", {"as_of": "2026-11-01T09:00:00+00:00\x00"}, "as_of"),
            ("consolidate", {"now": "2026-11-01T09:00:00+00:00\x00"}, "now"),
            ("record_episode", tea, "timestamp"),
        ]:
            message = await refused(client, tool, **arguments)
            assert f"\n{name}\n  String should match pattern '^[^\\x00]*$'" in message, message
        assert dump_tables(db) == before


async def test_a_read_only_database_is_reported_not_crashed(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with serving(db, [STREAMING]):
        pass  # create the stores
    before = dump_tables(db)
    async with serving(db, [STREAMING], read_only=True) as (_, client):
        tea = observation("Alice likes tea", "tea", "2026-11-01T09:00:00+00:00")
        message = await refused(client, "record_episode", **tea)
        assert message.startswith(said("record_episode", "DB is read-only"))
        assert (await call(client, "list_facts"))["facts"] == []
        assert (await call(client, "search_facts", query="tea"))["hits"] == []  # no access noted
    assert dump_tables(db) == before


async def test_a_bug_in_a_tool_is_an_error_result_and_the_server_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(tmp_path / "m.db", [DEDUP]) as (mem, client):

        async def broken(**_: Any) -> None:
            raise RuntimeError("internal detail")

        monkeypatch.setattr(mem, "facts", broken)
        assert await refused(client, "list_facts") == "Error executing tool list_facts"
        assert (await call(client, "consolidate"))["passes"] == 0


# --- the command ------------------------------------------------------------------------------


def mcp_argv(db: Path, *packs: Path) -> list[str]:
    return ["mcp", "--db", str(db), *(arg for p in packs for arg in ("--pack", str(p)))]


async def test_stargraph_mem_mcp_serves_the_sdk_stdio_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SCRIPT.exists(), f"{SCRIPT}: the package's console script is not installed"
    # After closing the server's stdin the client waits this long for it to exit by itself,
    # then kills it. 2 s by default; a loaded machine may need longer to tear an
    # interpreter down, and a server that does not exit would still show (below).
    grace = 60.0
    monkeypatch.setattr(stdio, "PROCESS_TERMINATION_TIMEOUT", grace)
    db = tmp_path / "m.db"
    params = StdioServerParameters(command=str(SCRIPT), args=mcp_argv(db, STREAMING), cwd=tmp_path)
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as errlog:
        async with Client(stdio.stdio_client(params, errlog=errlog)) as client:
            assert [t.name for t in (await client.list_tools()).tools] == list(TOOL_NAMES)
            tea = observation("Alice likes tea", "tea", "2026-11-01T09:00:00+00:00")
            recorded = await call(client, "record_episode", id="ep1", **tea)
            assert recorded["consolidation"]["counts"]["add"] == 1
            assert "no fact with id" in await refused(client, "explain_fact", fact_id="nope")
            (fact,) = (await call(client, "list_facts", user="alice"))["facts"]
            started = time.monotonic()
        closing = time.monotonic() - started
    assert closing < grace  # it exited by itself: never killed
    assert errors.read_text() == ""
    assert not db.with_name("m.db-wal").exists()  # the last connection closed
    assert rows(db, "SELECT id FROM facts") == [(fact["id"],)]


def test_the_server_process_exits_when_stdin_closes(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    proc = subprocess.Popen(
        [str(SCRIPT), *mcp_argv(db, DEDUP)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    proc.stdin.write(json.dumps(hello) + "\n")
    proc.stdin.flush()
    answer = json.loads(proc.stdout.readline())
    assert answer["result"]["serverInfo"]["name"] == "stargraph-mem"
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert (proc.stdout.read(), proc.stderr.read()) == ("", "")  # type: ignore[union-attr]
    proc.stdout.close()
    proc.stderr.close()  # type: ignore[union-attr]


def test_a_bad_pack_is_one_error_line_before_serving(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, mcp_argv(tmp_path / "m.db", tmp_path / "missing.yaml"))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert re.fullmatch(r"error: .*missing\.yaml: cannot read rule pack: .*\n", result.stderr)


def test_without_the_sdk_the_command_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in sys.modules if n.split(".")[0] in ("mcp", "mcp_types")]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it now fails
    monkeypatch.delitem(sys.modules, "stargraph_mem.integrations.mcp_server", raising=False)
    result = CliRunner().invoke(app, mcp_argv(tmp_path / "m.db", DEDUP))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        "error: the mcp command needs the MCP SDK 2.x: pip install 'stargraph_mem[mcp]'\n"
    )
    assert not (tmp_path / "m.db").exists()


def test_mcp_help_loads_neither_the_sdk_nor_the_engine() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        from typer.testing import CliRunner
        from stargraph_mem.cli import app
        result = CliRunner().invoke(app, ["mcp", "--help"])
        heavy = ("mcp", "mcp_types", "clips", "stargraph_mem.engine.api", "stargraph_mem.stores")
        loaded = sorted(
            m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy)
        )
        print(json.dumps({"code": result.exit_code, "out": result.stdout, "loaded": loaded}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    shown = json.loads(done.stdout.splitlines()[-1])
    assert (shown["code"], shown["loaded"]) == (0, [])
    assert "stdin" in shown["out"] and "stargraph_mem[mcp]" in shown["out"]


# --- the README -------------------------------------------------------------------------------


def readme_section() -> str:
    readme = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    return readme.split("\n## MCP server\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_section_lists_the_tools_and_a_client_config_that_runs() -> None:
    section = readme_section()
    listed = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
    assert tuple(listed) == TOOL_NAMES
    config = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    (server,) = config["mcpServers"].values()
    assert server["command"] == "stargraph-mem"
    assert server["args"][0] == "mcp"
    result = CliRunner().invoke(app, [*server["args"], "--help"])
    assert result.exit_code == 0, result.output


def test_the_readme_client_example_prints_what_it_says(tmp_path: Path) -> None:
    section = readme_section()
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    printed = section.split("\nprints\n\n```\n", 1)[1].split("```", 1)[0]
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / STREAMING.name).write_bytes(STREAMING.read_bytes())
    path = f"{SCRIPT.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=tmp_path,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == printed
