"""One tenant never blocks another, and every episode is bounded.

Size limits are checked at the store's door, the same on both backends (what one accepts
the other accepts); a delta whose rendered text is too large rejects its episode inside
the pass; a partition whose pass fails anyway is quarantined for that run while every
other partition is consolidated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from backends import Backend, snapshot
from e2e_helpers import DEFAULT, ROOT

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.batch import BatchRun
from stargraph_mem.engine.passes.runner import PassRunner
from stargraph_mem.errors import LimitError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.model.limits import (
    DEFAULT_CONTENT_BYTES,
    DEFAULT_FACT_BYTES,
    DEFAULT_METADATA_BYTES,
    KEY_BYTES,
    SEARCH_TEXT_CHARS,
    Limits,
)
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.scope import Partition

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
USERS = [f"user{i}" for i in range(5)]
POISON = "user1"
"""The user whose episode is the poison one (later users must still get their facts)."""

NewLocation = Callable[[], str]


def poison_text() -> str:
    """250,000 distinct words (~1.9 MB): its tsvector would be ~2.8 MB on PostgreSQL."""
    return " ".join(f"w{i:x}q" for i in range(250_000))


def note(eid: str, user: str, content: str, **metadata: Any) -> Episode:
    return Episode(
        id=eid,
        content=content,
        timestamp=T0,
        user=user,
        session="s1",
        agent="rag",
        metadata=metadata,
    )


def tenants(poison: str) -> list[Episode]:
    """One episode per user; ``POISON``'s holds ``poison``."""
    return [
        note(f"e-{user}", user, poison if user == POISON else f"hello from {user}")
        for user in USERS
    ]


async def notes_by_user(mem: Consolidator) -> dict[str, list[str]]:
    """The current facts' objects (first 20 characters) per user."""
    found: dict[str, list[str]] = {}
    for user in USERS:
        facts = await mem.facts(user=user, agent="rag")
        found[user] = sorted(f.object[:20] for f in facts)
    return found


# --- the poison episode ----------------------------------------------------------------


async def test_a_poison_episode_is_refused_at_put_naming_the_limit(
    new_location: NewLocation,
) -> None:
    async with Consolidator.open(new_location(), [DEFAULT]) as mem:
        with pytest.raises(LimitError) as caught:
            await mem.memory.put_many(tenants(poison_text()))
        message = str(caught.value)
        assert message.startswith("episode 'e-user1': content is 1,930,095 bytes (UTF-8)")
        assert message.endswith(f"over the limit of {DEFAULT_CONTENT_BYTES:,} (content_bytes)")
        assert caught.value.context["episode_id"] == "e-user1"
        assert await mem.memory.recent(POISON, limit=10) == []
        assert await mem.memory.recent("user0", limit=10) == []  # the batch wrote nothing
        with pytest.raises(LimitError, match="content_bytes"):
            await mem.record(tenants(poison_text())[1])
        for episode in tenants(poison_text()):
            if episode.user != POISON:
                await mem.memory.put(
                    episode, user=episode.user, session=episode.session, agent=episode.agent
                )
        report = await mem.consolidate(now=NOW)
        assert report.failed == []
        notes = await notes_by_user(mem)
        assert notes[POISON] == []
        assert all(notes[u] == [f"hello from {u}"[:20]] for u in USERS if u != POISON)


@pytest.mark.parametrize("fact_bytes", [DEFAULT_FACT_BYTES, 4 << 20])
async def test_a_poison_episode_let_in_by_higher_limits_never_blocks_later_users(
    new_location: NewLocation, fact_bytes: int
) -> None:
    """Stored with a raised content limit: with the default fact limit its delta is
    rejected with the reason; with a raised one its fact is stored and searchable by the
    words of its indexed prefix. Either way every other user is consolidated."""
    limits = Limits(content_bytes=4 << 20, fact_bytes=fact_bytes)
    text = poison_text()
    async with Consolidator.open(new_location(), [DEFAULT], limits=limits) as mem:
        await mem.memory.put_many(tenants(text))
        report = await mem.consolidate(now=NOW)
        assert report.failed == []
        notes = await notes_by_user(mem)
        assert all(notes[u] == [f"hello from {u}"[:20]] for u in USERS if u != POISON)
        rejected = [
            (p.partition.user, r.episode_id, r.reason) for p in report.passes for r in p.rejected
        ]
        if fact_bytes == DEFAULT_FACT_BYTES:
            assert notes[POISON] == []
            assert rejected == [
                (
                    POISON,
                    "e-user1",
                    "delta too large: its rendered text would be 1,930,130 bytes (UTF-8; "
                    f"object 1,930,095), over the limit of {DEFAULT_FACT_BYTES:,} (fact_bytes)",
                )
            ]
            return
        assert rejected == []
        assert notes[POISON] == [text[:20]]
        first = await mem.search("w0q", user=POISON, agent="rag")
        assert [hit.fact.object[:3] for hit in first] == ["w0q"]
        # the last word lies beyond the indexed prefix: not found, on both backends
        assert await mem.search("w3d08fq", user=POISON, agent="rag") == []


async def test_the_indexed_prefix_of_the_most_hostile_text_fits_a_tsvector(
    new_location: NewLocation,
) -> None:
    """Three-character CJK compounds joined by hyphens: the densest tsvector measured."""
    words = " ".join(
        "-".join(chr(0x4E00 + (i * 3 + k) % 20000) for k in range(3)) for i in range(40_000)
    )
    assert len(words) > SEARCH_TEXT_CHARS
    limits = Limits(fact_bytes=1 << 20, content_bytes=1 << 20)
    async with Consolidator.open(new_location(), [DEFAULT], limits=limits) as mem:
        await mem.memory.put_many([note("cjk", "user0", words), note("ok", "user2", "fine")])
        report = await mem.consolidate(now=NOW)
        assert report.failed == []
        assert [len(f.object) for f in await mem.facts(user="user0", agent="rag")] == [len(words)]
        assert len(await mem.facts(user="user2", agent="rag")) == 1


# --- limits at every door -------------------------------------------------------------


async def test_content_and_metadata_over_the_limit_are_refused_and_a_higher_limit_lets_them_in(
    new_location: NewLocation,
) -> None:
    big_content = note("big-content", "user0", "é" * (DEFAULT_CONTENT_BYTES // 2 + 1))
    big_metadata = note("big-meta", "user0", "x", blob="y" * DEFAULT_METADATA_BYTES)
    location = new_location()
    async with open_database(location) as database:
        store = database.memory
        with pytest.raises(LimitError, match=r"^episode 'big-content': content is 1,048,578 "):
            await store.put(big_content, user="user0", session="s1", agent="rag")
        with pytest.raises(LimitError) as caught:
            await store.put_many([note("fine", "user0", "ok"), big_metadata])
        assert str(caught.value) == (
            "episode 'big-meta': metadata JSON is 262,155 bytes (UTF-8), over the limit of "
            f"{DEFAULT_METADATA_BYTES:,} (metadata_bytes)"
        )
        assert caught.value.context["limit"] == "metadata_bytes"
        assert await store.recent("user0", limit=10) == []
    raised = Limits(content_bytes=2 << 20, metadata_bytes=1 << 20)
    async with Consolidator.open(location, [DEFAULT], limits=raised) as mem:
        await mem.record(big_content)
        await mem.memory.put_many([big_metadata])
        stored = await mem.memory.recent("user0", limit=10)
        assert sorted(e.id for e in stored) == ["big-content", "big-meta"]


async def test_a_scope_key_over_an_index_row_is_refused_on_both_backends(
    new_location: NewLocation,
) -> None:
    """256 emoji per scope part escape to 3,072 bytes each: over PostgreSQL's B-tree row."""
    wide = "\U0001f600" * 256
    episode = Episode(
        id="wide", content="x", timestamp=T0, user=wide, session=wide, agent="rag", metadata={}
    )
    async with open_database(new_location()) as database:
        with pytest.raises(LimitError, match=r"scope key is 6,\d{3} bytes .* \(KEY_BYTES\)$"):
            await database.memory.put_many([episode])
    assert KEY_BYTES < 2704


def test_limits_are_checked_when_made() -> None:
    with pytest.raises(ValueError, match="limit content_bytes must be an integer from 1"):
        Limits(content_bytes=0)
    with pytest.raises(ValueError, match="limit fact_bytes must be an integer from 1 to"):
        Limits(fact_bytes=64 << 20)


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "stargraph_mem.cli", *args]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=ROOT,
        env=env,
        check=False,
    )


def episode_line(eid: str, user: str, content: str) -> str:
    return json.dumps(
        {
            "id": eid,
            "content": content,
            "timestamp": T0.isoformat(),
            "user": user,
            "session": "s1",
            "agent": "rag",
        }
    )


def test_cli_put_and_ingest_refuse_an_episode_over_the_limit(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    put = ["put", "x" * 2000, "--user", "u", "--session", "s", "--agent", "a", "--db", db]
    refused = cli(*put, "--id", "p1", "--max-content-bytes", "1000")
    assert refused.returncode == 1
    assert refused.stderr == (
        "error: episode 'p1': content is 2,000 bytes (UTF-8), over the limit of 1,000 "
        "(content_bytes)\n"
    )
    assert cli(*put, "--id", "p1").stdout == "p1\n"  # the default limit lets it in
    lines = "\n".join([episode_line("i1", "u", "small"), episode_line("i2", "u", "y" * 3000)])
    source = tmp_path / "in.jsonl"
    source.write_text(lines + "\n")
    bad = cli("ingest", str(source), "--db", db, "--max-content-bytes", "2500")
    assert bad.returncode == 1
    assert bad.stderr == (
        f"error: {source}:2: episode 'i2': content is 3,000 bytes (UTF-8), over the limit "
        "of 2,500 (content_bytes)\n"
    )
    recent = cli("recent", "--user", "u", "--db", db, "--json")
    assert [json.loads(line)["id"] for line in recent.stdout.splitlines()] == [
        "p1"
    ]  # ingest wrote nothing
    good = cli("ingest", str(source), "--db", db, "--max-content-bytes", "4000")
    assert good.returncode == 0, good.stderr


# --- a delta's rendered size ------------------------------------------------------------


def blow_up_pack(path: Path) -> Path:
    """A valid pack whose emit repeats ``{o}`` 50,000 times, beside a plain note rule."""
    template = "{o}" * 50_000
    path.write_text(
        f"""ir_version: 1
pack: blow_up
version: "1.0.0"
fields:
  object: string
defaults:
  cadence: {{cron: "0 3 * * *"}}
  confidence: 0.8
rules:
  - id: blow_up
    when:
      - episode: {{object: {{bind: o}}}}
    emit:
      kind: add
      subject: "s"
      predicate: "p"
      object: "{template}"
  - id: note
    when:
      - episode: {{object: {{missing: true}}, content: {{bind: c}}}}
    emit:
      kind: add
      subject: "n"
      predicate: "noted"
      object: "{{c}}"
"""
    )
    return path


@pytest.mark.parametrize("object_bytes", [1_000, 100_000])
async def test_a_template_rendering_past_the_limit_rejects_its_episode_only(
    new_location: NewLocation, tmp_path: Path, object_bytes: int
) -> None:
    pack = blow_up_pack(tmp_path / "blow_up.yaml")
    async with Consolidator.open(new_location(), [pack]) as mem:
        await mem.memory.put_many(
            [
                note("big", "user0", "x", object="o" * object_bytes),
                note("n0", "user0", "plain"),
                note("n2", "user2", "other tenant"),
            ]
        )
        report = await mem.consolidate(now=NOW)
        assert report.failed == []
        rejected = [(r.episode_id, r.rule_id, r.reason) for p in report.passes for r in p.rejected]
        size = 50_000 * object_bytes
        assert rejected == [
            (
                "big",
                "blow_up",
                f"delta too large: its rendered text would be {size + 2:,} bytes (UTF-8; "
                f"object {size:,}), over the limit of {DEFAULT_FACT_BYTES:,} (fact_bytes)",
            )
        ]
        assert [f.object for f in await mem.facts(user="user0", agent="rag")] == ["plain"]
        assert [f.object for f in await mem.facts(user="user2", agent="rag")] == ["other tenant"]


def test_the_cli_consolidates_the_blow_up_pack_without_an_error_line(tmp_path: Path) -> None:
    pack = blow_up_pack(tmp_path / "blow_up.yaml")
    db = str(tmp_path / "m.db")
    lines = [
        json.dumps(
            {**json.loads(episode_line("big", "u0", "x")), "metadata": {"object": "o" * 100_000}}
        ),
        episode_line("n1", "u1", "plain"),
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    assert cli("ingest", str(source), "--db", db).returncode == 0
    ran = cli("consolidate", "--pack", str(pack), "--db", db, "--now", NOW.isoformat())
    assert ran.returncode == 0, ran.stderr
    assert "error:" not in ran.stderr and "MEMORY" not in ran.stdout + ran.stderr
    assert "rejected big (blow_up): delta too large: its rendered text would be " in ran.stderr
    assert "user=u1 agent=rag episodes=1 add=1" in ran.stdout


# --- a failure inside one partition's pass ----------------------------------------------


def fail_for(monkeypatch: pytest.MonkeyPatch, user: str) -> None:
    """Every pass computed for ``user``'s partition raises, as a driver would: in a batch
    (the batch fails) and alone."""
    batch_compute, alone_compute = BatchRun.compute, PassRunner.compute

    def failure() -> RuntimeError:
        return RuntimeError(f"simulated driver failure for {user}")

    async def in_batch(self: BatchRun, group: list[Any]) -> Any:
        if any(item.partition.user == user for item in group):
            raise failure()
        return await batch_compute(self, group)

    async def alone(self: PassRunner, partition: Partition, *args: Any) -> Any:
        if partition.user == user:
            raise failure()
        return await alone_compute(self, partition, *args)

    monkeypatch.setattr(BatchRun, "compute", in_batch)
    monkeypatch.setattr(PassRunner, "compute", alone)


async def test_a_failing_partition_is_quarantined_while_the_others_are_consolidated(
    new_location: NewLocation, monkeypatch: pytest.MonkeyPatch
) -> None:
    location = new_location()
    async with Consolidator.open(location, [DEFAULT]) as mem:
        await mem.memory.put_many(tenants("poisoned by the test"))
        fail_for(monkeypatch, POISON)
        report = await mem.consolidate(now=NOW)
        assert [(r.partition.user, r.failed) for r in report.failed] == [
            (
                POISON,
                "pass failed, nothing applied: RuntimeError: simulated driver failure for "
                f"{POISON}",
            )
        ]
        assert not report.failed[0].applied
        notes = await notes_by_user(mem)
        assert notes[POISON] == []
        assert all(notes[u] == [f"hello from {u}"[:20]] for u in USERS if u != POISON)
        monkeypatch.undo()
        again = await mem.consolidate(now=NOW)  # nothing was half-applied: it runs whole
        assert again.failed == []
        added = [(p.partition.user, p.counts["add"]) for p in again.passes if p.episodes]
        assert added == [(POISON, 1)]
        assert (await notes_by_user(mem))[POISON] == ["poisoned by the test"]


async def test_a_failing_partition_fails_the_scheduler_tick_for_itself_only(
    new_location: NewLocation, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Consolidator.open(new_location(), [DEFAULT]) as mem:
        await mem.memory.put_many(tenants("poisoned by the test"))
        fail_for(monkeypatch, POISON)
        report = await mem.tick(NOW)
        assert [r.partition.user for r in report.failed] == [POISON]
        notes = await notes_by_user(mem)
        assert notes[POISON] == []
        assert all(notes[u] for u in USERS if u != POISON)


# --- the integrations -------------------------------------------------------------------


async def test_the_langgraph_store_refuses_a_value_over_the_limits_before_writing(
    new_location: NewLocation,
) -> None:
    from stargraph_mem.integrations.langgraph_store import ItemValueError, StargraphStore

    huge = {f"k{i}": i for i in range(200_000)}
    location = new_location()
    async with StargraphStore.from_path(location, clock=lambda: T0) as store:
        with pytest.raises(ItemValueError) as caught:
            await store.aput(("alice", "rag"), "prefs", huge)
        assert caught.value.context["limit"] == "fact_bytes"
        assert str(caught.value).startswith(
            "value of 'prefs' in ('alice', 'rag') is 3,177,781 bytes of JSON"
        )
        assert str(caught.value).endswith(f"over the limit of {DEFAULT_FACT_BYTES:,} (fact_bytes)")
        await store.aput(("bob", "rag"), "prefs", {"tea": True})  # others go on
        assert await store.aget(("alice", "rag"), "prefs") is None
        assert await store.consolidator.memory.recent("alice", limit=5) == []
        item = await store.aget(("bob", "rag"), "prefs")
        assert item is not None and item.value == {"tea": True}
    raised = Limits(metadata_bytes=8 << 20, fact_bytes=8 << 20)
    async with StargraphStore.from_path(location, clock=lambda: T0, limits=raised) as store:
        await store.aput(("alice", "rag"), "prefs", huge)
        item = await store.aget(("alice", "rag"), "prefs")
        assert item is not None and item.value == huge


async def test_the_mcp_consolidate_tool_names_a_quarantined_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp import Client
    from mcp.types import TextContent

    from stargraph_mem.integrations.mcp_server import build_server

    async with (
        Consolidator.open(tmp_path / "m.db", [DEFAULT], clock=lambda: NOW) as mem,
        Client(build_server(mem)) as client,
    ):
        await mem.memory.put_many(tenants("poisoned by the test"))
        fail_for(monkeypatch, POISON)
        result = await client.call_tool("consolidate", {})
        assert result.is_error
        (block,) = result.content
        assert isinstance(block, TextContent)
        assert block.text == (
            "Error executing tool consolidate: 1 partition(s) quarantined for this call, "
            "every other one was consolidated: "
            f"default user='{POISON}' agent='rag': pass failed, nothing applied: "
            f"RuntimeError: simulated driver failure for {POISON}"
        )
        notes = await notes_by_user(mem)
        assert notes[POISON] == [] and all(notes[u] for u in USERS if u != POISON)


def seeded_with_a_failing_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite file holding every tenant's episodes, whose POISON partition's pass fails."""
    import asyncio

    db = tmp_path / "m.db"

    async def seed() -> None:
        async with open_database(db) as database:
            await database.memory.put_many(tenants("poisoned by the test"))

    asyncio.run(seed())
    fail_for(monkeypatch, POISON)
    return db


def test_the_cli_prints_a_quarantined_partition_and_exits_1_after_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from stargraph_mem.cli import app

    db = seeded_with_a_failing_partition(tmp_path, monkeypatch)
    result = CliRunner().invoke(
        app, ["consolidate", "--pack", str(DEFAULT), "--db", str(db), "--now", NOW.isoformat()]
    )
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: default user={POISON} agent=rag: pass failed, nothing applied: "
        f"RuntimeError: simulated driver failure for {POISON}",
        "error: 1 partition quarantined for this run (see above); every other partition "
        "was consolidated",
    ]
    assert [line.split(" episodes=")[0] for line in result.stdout.splitlines()] == [
        f"default user={u} agent=rag" for u in USERS if u != POISON
    ]


def test_ingest_refuses_a_line_longer_than_any_episode_within_the_limits_unread(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "m.db")
    source = tmp_path / "in.jsonl"
    long_line = episode_line("huge", "u", "z" * 1_000_000)
    source.write_text("\n".join([episode_line("i1", "u", "small"), long_line]) + "\n")
    refused = cli("ingest", str(source), "--db", db, "--max-content-bytes", "100")
    assert refused.returncode == 1
    most = 6 * 100 + DEFAULT_METADATA_BYTES + (64 << 10)
    assert refused.stderr == (
        f"error: {source}:2: line is {len(long_line) + 1:,} bytes, longer than any episode "
        f"within the limits can be ({most:,} bytes: content_bytes 100, metadata_bytes "
        f"{DEFAULT_METADATA_BYTES:,})\n"
    )
    assert cli("ingest", str(source), "--db", db).returncode == 0  # the default lets it in


async def test_a_long_aggregate_key_is_counted_the_same_on_both_backends(
    new_location: NewLocation,
) -> None:
    """A count over history keyed by a 3,000-character object (random: it does not
    compress): its aggregate row's key is held as a digest, so PostgreSQL's index row
    holds it as SQLite does, and the third session promotes the observation."""
    import random

    from e2e_helpers import FREQUENCY

    rng = random.Random(7)
    obj = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(3000))
    episodes = [
        Episode(
            id=f"o{i}",
            content="seen",
            timestamp=T0.replace(hour=9 + i),
            user="user0",
            session=f"s{i}",
            agent="rag",
            metadata={"subject": "alice", "predicate": "likes", "object": obj},
        )
        for i in range(3)
    ]
    async with Consolidator.open(new_location(), [FREQUENCY]) as mem:
        for episode in episodes:  # one pass each: the count comes from the stored rows
            await mem.memory.put_many([episode])
            report = await mem.consolidate(now=episode.timestamp)
            assert report.failed == []
        facts = await mem.facts(user="user0", agent="rag")
        assert [(f.subject, f.predicate, f.object) for f in facts] == [("alice", "likes", obj)]


async def test_a_delta_whose_key_would_not_fit_an_index_row_is_refused_by_both_fact_stores(
    backend: Backend,
) -> None:
    from stargraph_mem.errors import DeltaValidationError
    from stargraph_mem.stores.models import AddDelta, FactPayload

    episode = note("src", "alice", "x")
    await backend.memory.put(episode, user="alice", session="s1", agent="rag")
    before = await snapshot(backend.facts)

    def add(subject: str) -> AddDelta:
        return AddDelta(
            user="alice",
            agent="rag",
            source_episode_ids=["src"],
            promotion_ts=T0,
            rule_id="r1",
            confidence=0.7,
            fact=FactPayload(subject=subject, predicate="likes", object="tea"),
        )

    with pytest.raises(DeltaValidationError) as caught:
        await backend.facts.apply_deltas([add("a" * 2600)])
    assert str(caught.value) == (
        "deltas[0].fact: subject and predicate are 2,605 bytes (UTF-8) beside a partition "
        "key of 22: over the 2,600 an index row holds (KEY_BYTES)"
    )
    assert await snapshot(backend.facts) == before
    await backend.facts.apply_deltas([add("a" * 2500)])  # within the limit: stored
    facts = await backend.facts.query(FactPattern(user="alice", agent="rag"))
    assert [len(f.subject) for f in facts] == [2500]


def test_run_once_prints_a_quarantined_partition_and_exits_1_after_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from stargraph_mem.cli import app

    db = seeded_with_a_failing_partition(tmp_path, monkeypatch)
    args = ["run", "--once", "--pack", str(DEFAULT), "--db", str(db), "--now", NOW.isoformat()]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: default user={POISON} agent=rag: pass failed, nothing applied: "
        f"RuntimeError: simulated driver failure for {POISON}",
        "error: 1 partition quarantined for this run (see above); every other partition "
        "was consolidated",
    ]
    assert result.stdout.splitlines()[-1] == f"{len(USERS) - 1} passes run"


async def test_the_mcp_record_tool_refuses_content_over_the_limit(tmp_path: Path) -> None:
    from mcp import Client
    from mcp.types import TextContent

    from stargraph_mem.integrations.mcp_server import build_server

    async with (
        Consolidator.open(tmp_path / "m.db", [DEFAULT], clock=lambda: NOW) as mem,
        Client(build_server(mem)) as client,
    ):
        arguments = {
            "content": "x" * (DEFAULT_CONTENT_BYTES + 1),
            "user": "alice",
            "session": "s1",
            "agent": "rag",
            "id": "too-long",
        }
        result = await client.call_tool("record_episode", arguments)
        assert result.is_error
        (block,) = result.content
        assert isinstance(block, TextContent)
        assert block.text.endswith(
            "episode 'too-long': content is 1,048,577 bytes (UTF-8), over the limit of "
            "1,048,576 (content_bytes)"
        )
        assert await mem.memory.recent("alice", limit=5) == []
