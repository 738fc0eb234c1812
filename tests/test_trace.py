"""Delta traces: a fresh delta and the stored fact it made read the same structure."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from e2e_helpers import DEDUP, episode, spo
from typer.testing import CliRunner

from stargraph_mem.authoring.trace import (
    DeltaTrace,
    KnownFact,
    TracedEpisode,
    TracedFact,
    explanation_trace,
    pass_traces,
    plain,
    trace_lines,
)
from stargraph_mem.cli import app
from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator

NOW = datetime(2026, 3, 2, 3, 0, tzinfo=UTC)


async def consolidated(db: Path) -> tuple[DeltaTrace, DeltaTrace]:
    """Traces of a pass that adds (alice, likes, tea), then updates it to coffee."""
    async with Consolidator.open(db, [DEDUP]) as mem:
        await mem.record(
            episode("e1", 1, content="Alice likes tea", **spo("alice", "likes", "tea"))
        )
        await mem.record(episode("e2", 2, session="s2", **spo("alice", "likes", "coffee")))
        [report] = (await mem.consolidate(now=NOW)).passes
        add, update = await pass_traces(mem, report)
    return add, update


async def test_fresh_delta_and_explain_give_the_same_trace(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    add, update = await consolidated(db)
    assert update.facts == (
        TracedFact(
            add.fact_id or "", "replaces", KnownFact(("alice", "likes", "tea"), "new_fact_add")
        ),
    )
    assert [e.id for e in update.episodes] == ["e2"]
    assert dict(update.bindings) == {
        "s": "alice",
        "p": "likes",
        "o": "coffee",
        "t": "2026-03-01T09:02:00+00:00",
    }
    async with Consolidator.open(db, [DEDUP]) as mem:
        assert explanation_trace(await mem.explain(update.fact_id or "")) == update
        assert explanation_trace(await mem.explain(add.fact_id or "")) == add


def test_explain_text_of_a_superseded_fact(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    add, update = asyncio.run(consolidated(db))
    result = CliRunner().invoke(app, ["explain", add.fact_id or "", "--db", str(db)])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        "add new_fact_add (alice, likes, tea) confidence=0.8",
        f"  fact       {add.fact_id}",
        f"  delta      {add.delta_id}",
        "  reason     first observation of (alice, likes)",
        "  bindings   o=tea p=likes s=alice",
        "  episode    e1 session=s1 at=2026-03-01T09:01:00+00:00: Alice likes tea",
        "  scope      user=alice agent=rag",
        "  valid      2026-03-02T03:00:00+00:00 .. 2026-03-02T03:00:00+00:00",
        f"  pack       {compile_file(DEDUP).sha256}",
        f"  closed by  {update.delta_id}",
        f"  successor  {update.fact_id} (alice, likes, coffee) rule=changed_object_update",
        f"  audit      #1 add {add.delta_id} rule=new_fact_add",
        f"  audit      #2 update {update.delta_id} rule=changed_object_update",
        "  status     superseded",
        f"  history    2026-03-02T03:00:00+00:00 created rule=new_fact_add delta={add.delta_id} "
        "reason=first observation of (alice, likes)",
        "  history    2026-03-02T03:00:00+00:00 superseded rule=changed_object_update "
        f"delta={update.delta_id} by={update.fact_id} reason=(alice, likes) changed to coffee",
        "  change     2026-03-02T03:00:00+00:00 active -> superseded "
        "reason=(alice, likes) changed to coffee",
    ]


def test_unknown_episodes_and_facts_are_named_as_such() -> None:
    trace = DeltaTrace(
        kind="delete",
        rule_id="expire",
        delta_id="d1",
        confidence=0.5,
        reason="",
        bindings={"tags": ["a b", "c"], "n": 3, "ok": True, "s": 'say "hi"'},
        triple=None,
        fact_id=None,
        episodes=(TracedEpisode("gone"),),
        facts=(TracedFact("f9", "replaces"),),
    )
    assert trace_lines(trace, indent="  ") == [
        "  delete expire confidence=0.5",
        "    delta      d1",
        '    bindings   n=3 ok=true s="say \\"hi\\"" tags=["a b", c]',
        "    episode    gone (not in the episode store)",
        "    replaces   f9 (not a known fact)",
    ]


def test_plain_values() -> None:
    assert [plain(v) for v in ("tea", "", "two words", None, 1.5, ["x", 2])] == [
        "tea",
        '""',
        '"two words"',
        "null",
        "1.5",
        "[x, 2]",
    ]


ECHO = """\
ir_version: 1
pack: echo
version: "1"
fields: {subject: string, predicate: string, object: string}
defaults: {cadence: {cron: "0 3 * * *"}}
rules:
  - id: copy_known
    when:
      - episode: {subject: {bind: s}, predicate: mentions}
      - fact: {as: f, subject: {var: s}, predicate: likes, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: also_mentions, object: "{o}", reason: r}
  - id: seed
    when:
      - episode: {subject: {bind: s}, predicate: likes, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: likes, object: "{o}", reason: seed}
"""


async def test_fresh_traces_show_facts_matched_without_being_touched(tmp_path: Path) -> None:
    pack = tmp_path / "echo.yaml"
    pack.write_text(ECHO, encoding="utf-8")
    async with Consolidator.open(tmp_path / "m.db", [pack]) as mem:
        await mem.memory.put_many([episode("e1", 1, **spo("bo", "likes", "jam"))])
        [first] = (await mem.consolidate(now=NOW)).passes
        [seeded] = await pass_traces(mem, first)
        await mem.memory.put_many([episode("e2", 2, **spo("bo", "mentions", "x"))])
        [second] = (await mem.consolidate(now=NOW)).passes
        [copied] = await pass_traces(mem, second)
        stored = explanation_trace(await mem.explain(copied.fact_id or ""))
    assert seeded.matched == ()
    assert copied.matched == (("f", (seeded.fact_id,)),)
    assert f"  matched    f={seeded.fact_id}" in trace_lines(copied)
    # the store keeps sources and touched facts, not every match
    assert stored.matched == () and stored == DeltaTrace(**{**copied.__dict__, "matched": ()})
