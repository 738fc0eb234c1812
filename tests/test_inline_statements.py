"""Statements on the caller's thread (``inline_statements``), as a streaming ``record``
runs them: they run there while the connection's thread is idle, never wait for a lock
there (a file another writer locks is waited for on the connection's thread, the event
loop free meanwhile), leave the busy timeout as it was, and commits made there are
checkpointed in the background; a record's put waits for its pass's commit, and is
committed, once, whatever the pass does."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosqlite
import pytest

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.repositories import fact_passes
from stargraph_mem.stores.sqlite import connection as sqlite_base
from stargraph_mem.stores.sqlite.connection import (
    BUSY_TIMEOUT_MS,
    open_connection,
    scalar,
    transaction,
)
from stargraph_mem.stores.sqlite.inline import current_scope, inline_statements

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)


def every_put(name: str, rules: str) -> str:
    """A pack of ``rules`` (YAML list items) over subject/predicate/object, all ``every: 1``."""
    return (
        f'ir_version: 1\npack: {name}\nversion: "1"\n'
        "fields: {subject: string, predicate: string, object: string}\n"
        "defaults: {cadence: {every: 1}}\nrules:\n" + rules
    )


STREAMING = every_put(
    "streaming",
    """\
  - id: known_noop
    priority: 20
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - fact: {as: f, subject: {var: s}, predicate: {var: p}, object: {var: o}}
    emit: {kind: noop, reinforces: [f]}
  - id: new_add
    priority: 10
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - not: {subject: {var: s}, predicate: {var: p}, object: {var: o}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
""",
)


def observation(n: int, obj: str = "tea") -> Episode:
    return Episode(
        id=f"e{n}",
        content=f"turn {n}",
        timestamp=NOW - timedelta(minutes=100 - n),
        user="alice",
        session="s1",
        agent="rag",
        metadata={"subject": "alice", "predicate": "likes", "object": obj},
    )


def streaming(path: Path) -> Consolidator:
    return Consolidator(path, [compile_text(STREAMING)], clock=lambda: NOW)


async def test_statements_run_on_the_calling_thread_only_inside_the_scope(
    tmp_path: Path,
) -> None:
    db = await open_connection(tmp_path / "x.db")
    try:
        thread_of = threading.get_ident
        outside = await db._execute(thread_of)  # type: ignore[no-untyped-call]
        assert outside != threading.get_ident()
        with inline_statements():
            assert current_scope() is not None
            inside = await db._execute(thread_of)  # type: ignore[no-untyped-call]
            assert inside == threading.get_ident()
            assert await scalar(db, "PRAGMA busy_timeout") == 0  # nothing waits here
        assert current_scope() is None
        assert await scalar(db, "PRAGMA busy_timeout") == BUSY_TIMEOUT_MS
    finally:
        await db.close()


async def test_a_record_waits_for_another_writer_off_the_event_loop(tmp_path: Path) -> None:
    """Another process's write lock: the record is stored and consolidated once the lock
    goes, and the event loop keeps running other tasks while it waits."""
    path = tmp_path / "m.db"
    async with streaming(path) as mem:
        await mem.record(observation(1))
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        released = threading.Event()

        def release() -> None:
            time.sleep(0.5)
            other.execute("COMMIT")
            released.set()

        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while not released.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        holder = threading.Thread(target=release)
        holder.start()
        beat = asyncio.create_task(ticker())
        report = await mem.record(observation(2, "coffee"))
        await beat
        holder.join()
        other.close()
        assert released.is_set()
        assert ticks >= 10  # the loop ran while the record waited for the lock
        assert [p.episodes for p in report.passes] == [1]
        facts = await mem.facts(user="alice", agent="rag")
        assert sorted(f.object for f in facts) == ["coffee", "tea"]


async def test_the_busy_timeout_is_back_after_a_record(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with streaming(path) as mem:
        for n in range(3):
            await mem.record(observation(n))
        async with mem.memory._read() as db:  # type: ignore[attr-defined]
            assert await scalar(db, "PRAGMA busy_timeout") == BUSY_TIMEOUT_MS


async def test_commits_on_the_calling_thread_are_checkpointed_in_the_background(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    async with streaming(path) as mem:
        for n in range(4 * sqlite_base.INLINE_COMMITS_PER_CHECKPOINT):
            await mem.record(observation(n, f"o{n % 5}"))
        async with mem.memory._read() as db:  # type: ignore[attr-defined]
            checkpointer = db._checkpointer
        assert checkpointer is not None, "no background checkpointer"
        assert any("sqlite checkpoints" in t.name for t in threading.enumerate())
        deadline = time.monotonic() + 5
        while checkpointer.checkpoints == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert checkpointer.checkpoints >= 1
    assert not [t for t in threading.enumerate() if "sqlite checkpoints" in t.name]


# --- a record's put and pass in one commit ----------------------------------------------


def seen_elsewhere(path: Path, sql: str) -> list[tuple[object, ...]]:
    """Rows another connection reads (only what is committed)."""
    other = sqlite3.connect(path)
    try:
        return list(other.execute(sql))
    finally:
        other.close()


async def insert_again(db: aiosqlite.Connection) -> None:
    await db.execute("INSERT INTO t (x) VALUES ('first')")


@asynccontextmanager
async def table(path: Path) -> AsyncIterator[aiosqlite.Connection]:
    """A connection to a new file with one table ``t``."""
    db = await open_connection(path)
    try:
        await db.execute("CREATE TABLE t (x TEXT)")
        yield db
    finally:
        await db.close()


async def deferred_first(db: aiosqlite.Connection) -> None:
    """Inside a scope with ``defer_commit``: insert 'first', left uncommitted."""
    async with transaction(db, redo=insert_again):
        await insert_again(db)
    assert db.in_transaction


@pytest.mark.parametrize("fails", [False, True])
async def test_a_deferred_transaction_is_joined_by_the_next_and_done_once(
    tmp_path: Path, fails: bool
) -> None:
    """The next transaction joins the deferred one and commits both; if it fails, only
    the deferred one's work is there afterwards (done again, once)."""
    path = tmp_path / "x.db"
    async with table(path) as db:
        with inline_statements(defer_commit=True):
            await deferred_first(db)
            assert seen_elsewhere(path, "SELECT x FROM t") == []
            failing = pytest.raises(RuntimeError, match="pass failed")
            with failing if fails else contextlib.nullcontext():
                async with transaction(db):
                    await db.execute("INSERT INTO t (x) VALUES ('second')")
                    if fails:
                        raise RuntimeError("pass failed")
            assert not db.in_transaction
        expected = [("first",)] if fails else [("first",), ("second",)]
        assert seen_elsewhere(path, "SELECT x FROM t ORDER BY x") == expected


async def test_the_scope_end_or_another_task_commits_a_deferred_transaction(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.db"
    async with table(path) as db:
        with inline_statements(defer_commit=True):  # nothing joins it: the end commits
            await deferred_first(db)
        assert not db.in_transaction
        assert seen_elsewhere(path, "SELECT count(*) FROM t") == [(1,)]
        with inline_statements(defer_commit=True):
            await deferred_first(db)
            # a task outside the scope uses the connection first: it commits, then runs
            outside = asyncio.create_task(
                scalar(db, "SELECT count(*) FROM t"), context=contextvars.Context()
            )
            assert await outside == 2
            assert not db.in_transaction
            assert seen_elsewhere(path, "SELECT count(*) FROM t") == [(2,)]


async def test_a_record_whose_pass_fails_keeps_its_episode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put waits for the pass's commit; the pass fails inside its transaction: the
    put is done again and committed, so the episode is stored (once) and still pending,
    and the next record consolidates both."""
    path = tmp_path / "m.db"
    async with streaming(path) as mem:
        await mem.record(observation(1))

        async def failing(*args: object, **kwargs: object) -> None:
            raise RuntimeError("the apply broke")

        with monkeypatch.context() as patch:
            patch.setattr(fact_passes, "advance_passes", failing)
            with pytest.raises(RuntimeError, match="the apply broke"):
                await mem.record(observation(2, "coffee"))
        stored = seen_elsewhere(path, "SELECT id FROM episodes ORDER BY seq")
        assert stored == [("e1",), ("e2",)]
        assert sorted(f.object for f in await mem.facts(user="alice", agent="rag")) == ["tea"]
        report = await mem.record(observation(3, "juice"))
        assert [p.episodes for p in report.passes] == [2]
        facts = await mem.facts(user="alice", agent="rag")
        assert sorted(f.object for f in facts) == ["coffee", "juice", "tea"]


SELECTING = every_put(
    "selecting",
    """\
  - id: add_liked
    select: {predicate: {eq: likes}}
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
""",
)


async def test_a_record_whose_pack_selects_from_the_file_commits_its_put_first(
    tmp_path: Path,
) -> None:
    """A ``select`` reads the episodes through a connection of its own, which sees only
    what is committed: the put is committed before the pass, and the pass finds it."""
    async with Consolidator(tmp_path / "m.db", [compile_text(SELECTING)], clock=lambda: NOW) as mem:
        assert not mem._joined_record
        for n, obj in enumerate(["tea", "coffee"], start=1):
            report = await mem.record(observation(n, obj))
            assert [(p.episodes, p.applied) for p in report.passes] == [(1, True)]
        facts = await mem.facts(user="alice", agent="rag")
        assert sorted(f.object for f in facts) == ["coffee", "tea"]
    async with streaming(tmp_path / "n.db") as plain:
        assert plain._joined_record
