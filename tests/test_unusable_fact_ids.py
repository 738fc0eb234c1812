"""A fact id no fact can have (a lone surrogate, NUL, not a string) is "no fact" on both
backends: every call that takes a fact id says so before any query, and nothing changes;
the CLI refuses such an argument as a usage error or names the id."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from backends import snapshot
from e2e_helpers import DEDUP, episode, spo
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import FactNotFoundError, FactStatusError
from stargraph_mem.stores import SQLiteFactStore
from stargraph_mem.stores.postgres import PostgresFactStore

UNUSABLE: list[Any] = ["\ud800", "f\udfff1", "a\x00b", "\x00", 5, None, b"f1"]

Call = Callable[[Consolidator, Any], Awaitable[object]]

CALLS: dict[str, Call] = {
    "explain": lambda mem, fid: mem.explain(fid),
    "pin": lambda mem, fid: mem.pin(fid, reason="keep"),
    "unpin": lambda mem, fid: mem.unpin(fid),
    "restore": lambda mem, fid: mem.restore(fid),
    "status_history": lambda mem, fid: mem.status_history(fid),
    "access": lambda mem, fid: mem.access(fid),
    "record_access": lambda mem, fid: mem.record_access([fid]),
    "fact_store.get": lambda mem, fid: mem.fact_store.get(fid),
    "fact_store.explain": lambda mem, fid: mem.fact_store.explain(fid),
    "fact_store.lineage": lambda mem, fid: mem.fact_store.lineage(fid),
}


async def test_unusable_ids_are_not_found_and_change_nothing(
    new_location: Callable[[], str],
) -> None:
    async with Consolidator.open(new_location(), [DEDUP]) as mem:
        await mem.record(episode("e1", **spo("alice", "likes", "tea")))
        await mem.consolidate()
        (fact,) = await mem.facts(user="alice")
        assert await mem.pin(fact.id)
        store = mem.fact_store
        assert isinstance(store, SQLiteFactStore | PostgresFactStore)
        before = await snapshot(store)
        for name, call in CALLS.items():
            for fact_id in UNUSABLE:
                with pytest.raises(FactNotFoundError) as caught:
                    await call(mem, fact_id)
                assert str(caught.value) == f"no fact with id {fact_id!r}", name
                assert caught.value.context == {"fact_id": fact_id}
        # a good id beside an unusable one: all or nothing
        with pytest.raises(FactNotFoundError, match="no fact with id '\\\\ud800'"):
            await mem.record_access([fact.id, "\ud800"])
        assert await snapshot(store) == before
        assert (await mem.access(fact.id)).count == 0
        assert [e.event for e in await mem.status_history(fact.id)] == ["created", "pinned"]


def test_the_cli_refuses_an_unusable_id_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    runner = CliRunner()
    scope = ["--user", "alice", "--session", "s1", "--agent", "rag", "--db", str(db)]
    said = ["--meta", "subject=alice", "--meta", "predicate=likes", "--meta", "object=tea"]
    put = runner.invoke(app, ["put", "Alice likes tea", *scope, *said])
    assert put.exit_code == 0, put.output
    made = runner.invoke(app, ["consolidate", "--db", str(db), "--pack", str(DEDUP)])
    assert made.exit_code == 0, made.output
    assert "add=1" in made.output, made.output
    before = db.read_bytes()
    for command in ("explain", "pin", "unpin", "restore", "history"):
        surrogate = runner.invoke(app, [command, "--db", str(db), "\ud800"])
        assert (surrogate.exit_code, surrogate.output) == (
            2,
            "error: FACT_ID is not valid UTF-8 (lone surrogate U+D800 at character 1)\n",
        ), command
        nul = runner.invoke(app, [command, "--db", str(db), "a\x00b"])
        assert (nul.exit_code, nul.output) == (1, "error: no fact with id 'a\\x00b'\n"), command
    assert db.read_bytes() == before


@pytest.mark.parametrize("reason", ["\ud800", "a\x00b"])
async def test_an_unusable_reason_is_refused_and_changes_nothing(
    new_location: Callable[[], str], reason: str
) -> None:
    """pin, unpin and restore refuse a reason no text column can hold, before any write."""
    async with Consolidator.open(new_location(), [DEDUP]) as mem:
        await mem.record(episode("e1", **spo("alice", "likes", "tea")))
        await mem.consolidate()
        (fact,) = await mem.facts(user="alice")
        store = mem.fact_store
        assert isinstance(store, SQLiteFactStore | PostgresFactStore)
        before = await snapshot(store)
        for action in ("pin", "unpin", "restore"):
            with pytest.raises(
                FactStatusError, match=f"cannot {action} fact {fact.id}: its reason"
            ):
                await getattr(mem, action)(fact.id, reason=reason)
        assert await snapshot(store) == before
