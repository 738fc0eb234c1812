"""No hang, ever: a script that never closes its stores, or raises or is interrupted before
it does, ends, and loses nothing it wrote.

Each scenario runs in a fresh interpreter with a time limit; running out of time fails the
test. Afterwards the test reopens the database and finds every write whose call returned.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from stargraph_mem import Episode, FactPattern, SQLiteFactStore, SQLiteMemoryStore
from stargraph_mem.stores.sqlite import connection as sqlite_base
from stargraph_mem.stores.sqlite.connection import StoreConnection

LIMIT = 30.0
"""Seconds a scenario may take before it counts as hung."""
SIGINT_BOUND = 3.0
"""Seconds from SIGINT to the end of the process, at most, even while it waits for a lock
another connection holds (the documented bound)."""
PACK = Path(__file__).resolve().parents[1] / "examples" / "streaming_dedup.yaml"

PRELUDE = """\
import asyncio, os, signal, sys
from datetime import UTC, datetime
from pathlib import Path

from stargraph_mem import Consolidator, Episode, SQLiteFactStore, SQLiteMemoryStore


def observation(n, obj="tea"):
    return Episode(
        id=f"e{n}", content=f"alice likes {obj}", timestamp=datetime(2026, 1, 1, n, tzinfo=UTC),
        user="alice", session="s1", agent="rag",
        metadata={"subject": "alice", "predicate": "likes", "object": obj},
    )

"""

SPEC_EXAMPLE = """\
import asyncio
from datetime import UTC, datetime
from pathlib import Path

from stargraph_mem.stores import ConsolidationRule, Episode, SQLiteMemoryStore

store = SQLiteMemoryStore(path=Path("./.memory"))


async def main() -> None:
    await store.bootstrap()
    await store.put(
        Episode(
            id="ep-1", content="Alice prefers tea", timestamp=datetime(2026, 1, 1, tzinfo=UTC),
            source_node="chat", user="Alice", session="S1", agent="rag",
            metadata={"subject": "Alice", "predicate": "prefers", "object": "tea"},
        ),
        user="Alice", session="S1", agent="rag",
    )
    print(await store.consolidate(ConsolidationRule(id="nightly", when_filter="")))


asyncio.run(main())
"""


def run_script(
    tmp_path: Path, code: str, *args: str, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as a script in ``tmp_path``; fail the test if it is still running after
    ``LIMIT`` seconds (it is killed), or, with ``ok``, if it exits non-zero."""
    script = tmp_path / "script.py"
    script.write_text(code, encoding="utf-8")
    try:
        done = subprocess.run(
            [sys.executable, str(script), *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=LIMIT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the script did not end within {LIMIT:g} s (it hung): {exc.stderr!r}")
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def episode_ids(path: Path) -> list[str]:
    async def read() -> list[str]:
        async with SQLiteMemoryStore(path) as store:
            return sorted(e.id for e in await store.recent("alice", limit=100))

    return asyncio.run(read())


def fact_triples(path: Path) -> list[tuple[str, str, str]]:
    async def read() -> list[tuple[str, str, str]]:
        async with SQLiteFactStore(path) as store:
            return sorted(
                (f.subject, f.predicate, f.object) for f in await store.query(FactPattern())
            )

    return asyncio.run(read())


# --- the specification's example, never closed ------------------------------------------


def test_the_specification_example_ends_without_close(tmp_path: Path) -> None:
    done = run_script(tmp_path, SPEC_EXAMPLE)
    assert done.stderr == ""
    assert done.stdout.startswith("[AddDelta(") and "rule_id='nightly'" in done.stdout

    async def read() -> tuple[list[str], list[tuple[str, str, str]]]:
        path = tmp_path / ".memory"
        async with SQLiteMemoryStore(path) as memory, SQLiteFactStore(path) as facts:
            episodes = [e.id for e in await memory.recent("Alice", limit=10)]
            found = [(f.subject, f.predicate, f.object) for f in await facts.query(FactPattern())]
            return episodes, found

    assert asyncio.run(read()) == (["ep-1"], [("Alice", "prefers", "tea")])
    # the connection was closed at exit: its write-ahead log was checkpointed and removed
    assert not (tmp_path / ".memory-wal").exists()


def test_a_store_dropped_without_close_ends_quietly(tmp_path: Path) -> None:
    """A store local to ``main`` is garbage collected while the loop runs: its connection
    closes on its own thread, and no "Event loop is closed" error is printed."""
    code = SPEC_EXAMPLE.replace('store = SQLiteMemoryStore(path=Path("./.memory"))\n', "")
    code = code.replace(
        "    await store.bootstrap()",
        '    store = SQLiteMemoryStore(path=Path("./.memory"))\n    await store.bootstrap()',
    )
    done = run_script(tmp_path, code)
    assert done.stderr == ""
    assert "rule_id='nightly'" in done.stdout


def test_a_fact_store_never_closed(tmp_path: Path) -> None:
    code = (
        PRELUDE
        + """\
from stargraph_mem import AddDelta, FactPayload

facts = SQLiteFactStore(Path(sys.argv[1]))


async def main():
    delta = AddDelta(
        user="alice", agent="rag", source_episode_ids=["e1"], rule_id="manual", confidence=0.9,
        promotion_ts=datetime(2026, 1, 2, tzinfo=UTC),
        fact=FactPayload(subject="alice", predicate="likes", object="tea"),
    )
    print((await facts.apply_delta(delta)).applied)


asyncio.run(main())
"""
    )
    done = run_script(tmp_path, code, str(tmp_path / "facts.db"))
    assert (done.stdout, done.stderr) == ("1\n", "")
    assert fact_triples(tmp_path / "facts.db") == [("alice", "likes", "tea")]


CONSOLIDATOR = (
    PRELUDE
    + """\
mem = Consolidator.open(Path(sys.argv[1]), [sys.argv[2]])


async def main(ending):
    await mem.bootstrap()
    print((await mem.record(observation(1))).counts["add"], flush=True)
    report = await mem.record_many([observation(2), observation(3, "coffee")])
    print(report.counts["update"], flush=True)
    await mem.tick()
    if ending == "raise":
        raise RuntimeError("the script failed before close()")
    if ending == "interrupt":
        raise KeyboardInterrupt
    if ending == "kill":  # nothing runs after the last call returned: no close, no atexit
        os.kill(os.getpid(), signal.SIGKILL)


asyncio.run(main(sys.argv[3]))
"""
)


@pytest.mark.parametrize("ending", ["return", "raise", "interrupt", "kill"])
def test_a_consolidator_never_closed(tmp_path: Path, ending: str) -> None:
    """Memory, fact and schedule stores all open, then the script returns, raises, is
    interrupted or killed: it ends, and every episode and fact is in the file."""
    db = tmp_path / "memory.db"
    done = run_script(tmp_path, CONSOLIDATOR, str(db), str(PACK), ending, ok=ending == "return")
    assert done.stdout == "1\n1\n"
    if ending == "return":
        assert done.stderr == ""
    elif ending == "raise":
        assert done.returncode == 1
        assert done.stderr.startswith("Traceback")
        assert done.stderr.endswith("RuntimeError: the script failed before close()\n")
    elif ending == "interrupt":
        assert done.returncode in (-signal.SIGINT, 128 + signal.SIGINT)
        assert done.stderr.rstrip().endswith("KeyboardInterrupt")
    else:
        assert done.returncode == -signal.SIGKILL
    assert episode_ids(db) == ["e1", "e2", "e3"]
    assert fact_triples(db) == [("alice", "likes", "coffee")]


@pytest.mark.parametrize("ending", ["raise", "kill"])
def test_a_memory_store_never_closed(tmp_path: Path, ending: str) -> None:
    code = (
        PRELUDE
        + """\
async def main():
    store = SQLiteMemoryStore(Path(sys.argv[1]))
    await store.put(observation(1), user="alice", session="s1", agent="rag")
    await store.put_many([observation(2), observation(3)])
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("no close()")


asyncio.run(main())
"""
    )
    db = tmp_path / "memory.db"
    done = run_script(tmp_path, code, str(db), ending, ok=False)
    assert done.returncode == (1 if ending == "raise" else -signal.SIGKILL)
    assert episode_ids(db) == ["e1", "e2", "e3"]


def test_sigint_while_blocked_in_an_await_on_the_store(tmp_path: Path) -> None:
    """The second put waits for a lock this test holds; SIGINT ends the script anyway."""
    code = (
        PRELUDE
        + """\
async def main():
    store = SQLiteMemoryStore(Path(sys.argv[1]))
    await store.put(observation(1), user="alice", session="s1", agent="rag")
    print("first put returned", flush=True)
    sys.stdin.readline()  # the test takes the write lock meanwhile
    print("second put", flush=True)
    await store.put(observation(2), user="alice", session="s1", agent="rag")


asyncio.run(main())
"""
    )
    db = tmp_path / "memory.db"
    (tmp_path / "script.py").write_text(code, encoding="utf-8")
    child = subprocess.Popen(
        [sys.executable, str(tmp_path / "script.py"), str(db)],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = sqlite3.connect(db, isolation_level=None)
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline() == "first put returned\n"
        lock.execute("BEGIN IMMEDIATE")  # held until the child has ended
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "second put\n"
        time.sleep(0.5)  # the put is waiting for the lock (busy timeout: 30 s)
        err, took = sigint(child)
        assert took < SIGINT_BOUND
        assert child.returncode in (-signal.SIGINT, 128 + signal.SIGINT)
        assert err.rstrip().endswith("KeyboardInterrupt")
    finally:
        lock.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert episode_ids(db) == ["e1"]  # the interrupted put stored nothing


# --- SIGINT while waiting for another connection's lock ---------------------------------------

OPEN_CONSOLIDATOR = """\
import asyncio, sys
from stargraph_mem import Consolidator


async def main():
    async with Consolidator.open(sys.argv[1], [sys.argv[2]]) as mem:
        print("opened", flush=True)


asyncio.run(main())
"""
CLI_PUT = "from stargraph_mem.cli import main; main()"


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (it got as far as opening the database)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir())
    except OSError:  # the process ended, or a descriptor closed while listed
        return False


def sigint(child: subprocess.Popen[Any]) -> tuple[Any, float]:
    """Send SIGINT to ``child`` and wait for its end: its stderr and the seconds from the
    signal to its end (the test fails if it does not end within LIMIT: it hung)."""
    started = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        _, err = child.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail(f"the interrupted process did not end within {LIMIT:g} s (it hung)")
    return err, time.monotonic() - started


def interrupt_while_locked(tmp_path: Path, db: Path, argv: list[str]) -> tuple[int, str, float]:
    """Hold ``db``'s write lock, start ``argv``, SIGINT it once it waits for the lock;
    returns its exit code, its stderr and the seconds from the signal to its end."""
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # held until the child has ended
    child = subprocess.Popen(
        [sys.executable, *argv], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + LIMIT
        while not has_open(child.pid, db):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the command never opened the database"
            time.sleep(0.05)
        time.sleep(1.0)  # it opened the file: it is now waiting for the write lock
        assert child.poll() is None
        err, took = sigint(child)
        return child.returncode, err if isinstance(err, str) else err.decode(), took
    finally:
        lock.close()
        if child.poll() is None:
            child.kill()
            child.wait()


def test_sigint_stops_a_cli_put_waiting_for_the_lock(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    put = [
        "-c", CLI_PUT, "put", "--user", "alice", "--session", "s1", "--agent", "rag",
        "--db", str(db), "--id",
    ]  # fmt: skip
    first = subprocess.run([sys.executable, *put, "e1", "hello"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    code, err, took = interrupt_while_locked(tmp_path, db, [*put, "e2", "again"])
    assert took < SIGINT_BOUND, f"{took:.1f} s from SIGINT to exit"
    assert code == 128 + signal.SIGINT and "Traceback" not in err, err
    assert episode_ids(db) == ["e1"]  # the interrupted put stored nothing


def test_sigint_stops_a_consolidator_open_waiting_for_the_lock(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    script = tmp_path / "open.py"
    script.write_text(OPEN_CONSOLIDATOR, encoding="utf-8")
    run_script(tmp_path, PRELUDE + SEED, str(db))  # episodes only: the open creates the rest
    code, err, took = interrupt_while_locked(tmp_path, db, [str(script), str(db), str(PACK)])
    assert took < SIGINT_BOUND, f"{took:.1f} s from SIGINT to exit"
    assert code in (-signal.SIGINT, 128 + signal.SIGINT)
    assert err.rstrip().endswith("KeyboardInterrupt"), err
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "episodes" in tables and "facts" not in tables  # the open created nothing


SEED = """\
async def main():
    store = SQLiteMemoryStore(Path(sys.argv[1]))
    await store.put(observation(1), user="alice", session="s1", agent="rag")
    await store.close()


asyncio.run(main())
"""


def test_a_lock_wait_still_lasts_the_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting in slices changes nothing when nobody interrupts: a put gets the lock when
    it is released, after many slices, and gives up only after the busy timeout."""
    monkeypatch.setattr(sqlite_base, "BUSY_TIMEOUT_MS", 2 * sqlite_base.BUSY_SLICE_MS * 5)
    db = tmp_path / "memory.db"
    lock = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    lock.execute("PRAGMA journal_mode=WAL")

    async def put(n: int) -> float:
        started = time.monotonic()
        episode = Episode(
            id=f"e{n}",
            content="hello",
            timestamp=datetime(2026, 1, 1, n, tzinfo=UTC),
            user="alice",
            session="s1",
            agent="rag",
        )
        async with SQLiteMemoryStore(db) as store:
            await store.put(episode, user="alice", session="s1", agent="rag")
        return time.monotonic() - started

    asyncio.run(put(1))  # the file exists, bootstrapped
    lock.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        asyncio.run(put(2))
    lock.execute("ROLLBACK")

    lock.execute("BEGIN IMMEDIATE")
    releaser = threading.Timer(1.0, lambda: lock.execute("COMMIT"))  # five slices later
    releaser.start()
    try:
        waited = asyncio.run(put(3))
    finally:
        releaser.join()
        lock.close()
    assert waited >= 1.0
    assert episode_ids(db) == ["e1", "e3"]


# --- the mechanism -------------------------------------------------------------------------


async def test_store_connections_run_on_daemon_threads(tmp_path: Path) -> None:
    """What aiosqlite's own connection lacks: a thread that cannot keep the process alive.
    (This also checks the aiosqlite internals StoreConnection builds on are still there.)"""
    async with SQLiteMemoryStore(tmp_path / "m.db") as store:
        await store.recent("alice", limit=1)
        db = store._db
        assert isinstance(db, StoreConnection)
        thread = db._thread
        assert thread.daemon and thread.is_alive()
    thread.join(5)
    assert not thread.is_alive()  # closing ended it


def test_every_store_write_commits_before_it_returns(tmp_path: Path) -> None:
    """The promise the no-hang design rests on: store connections are in autocommit mode,
    so nothing written waits for a close (each write is its own committed transaction)."""

    async def check() -> tuple[str | None, bool]:
        async with SQLiteMemoryStore(tmp_path / "m.db") as store:
            await store.recent("alice", limit=1)
            assert store._db is not None
            return store._db.isolation_level, store._db.in_transaction

    assert asyncio.run(check()) == (None, False)


def test_a_pending_exit_close_does_not_outlive_its_deadline(tmp_path: Path) -> None:
    """A connection busy at exit (its caller gone) delays the exit by at most
    EXIT_CLOSE_SECONDS."""
    code = """\
import asyncio, sys, time
from pathlib import Path

from stargraph_mem.stores.sqlite.connection import EXIT_CLOSE_SECONDS, open_connection


async def main():
    db = await open_connection(Path(sys.argv[1]))
    db._tx.put_nowait((None, lambda: time.sleep(60)))  # a statement that outlives its caller
    print(EXIT_CLOSE_SECONDS, flush=True)


asyncio.run(main())
"""
    started = time.monotonic()
    done = run_script(tmp_path, code, str(tmp_path / "m.db"))
    assert time.monotonic() - started < float(done.stdout) + 10
