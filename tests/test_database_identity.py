"""A database is identified before anything is written to it.

Another program's SQLite file is refused by every command with one specific error and
left byte for byte as it was (no write-ahead log, no table, journal mode unchanged); a
file of a newer version is refused the same way, on SQLite and PostgreSQL; a database
missing some of its tables is reported as damaged, never repaired with empty tables;
reading commands work on a file opened read-only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from backends import PG_URL, pg_schema
from typer.testing import CliRunner

from stargraph_mem import Consolidator
from stargraph_mem.cli import app
from stargraph_mem.errors import DamagedDatabaseError, ForeignDatabaseError, NewerSchemaError
from stargraph_mem.stores import Episode, SQLiteMemoryStore
from stargraph_mem.stores.postgres.schema import LEDGER_TABLE, SCHEMA_VERSION
from stargraph_mem.stores.sqlite.identity import (
    APPLICATION_ID,
    FACT_SCHEMA_VERSION,
    FILE_VERSION,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = str(ROOT / "rules" / "default.yaml")
NOW = "2026-11-23T00:00:00+00:00"
runner = CliRunner()

PUT = [
    "put", "--user", "alice", "--session", "s1", "--agent", "a1", "--db", "{db}",
    "--timestamp", "2026-11-22T12:00:00+00:00", "--meta", "subject=alice",
    "--meta", "predicate=likes", "--meta", "object=tea", "hi",
]  # fmt: skip
COMMANDS = {
    "put": PUT,
    "recent": ["recent", "--user", "alice", "--db", "{db}"],
    "ingest": ["ingest", "{episodes}", "--db", "{db}"],
    "consolidate": ["consolidate", "--pack", DEFAULT, "--now", NOW, "--db", "{db}"],
    "run --once": ["run", "--once", "--pack", DEFAULT, "--now", NOW, "--db", "{db}"],
    "status": ["status", "--now", NOW, "--db", "{db}"],
    "facts": ["facts", "--db", "{db}"],
    "facts --search": ["facts", "--search", "tea", "--db", "{db}"],
    "explain": ["explain", "f1", "--db", "{db}"],
    "history": ["history", "f1", "--db", "{db}"],
    "pin": ["pin", "f1", "--db", "{db}"],
    "replay": ["replay", "--pack", DEFAULT, "--db", "{db}"],
    "copy": ["copy", "--from", "{db}", "--to", "{copy}"],
}
"""Every command that opens a database, with ``{db}`` where the database goes."""


def invoke(args: list[str]) -> tuple[int, str, str]:
    result = runner.invoke(app, args)
    return result.exit_code, result.stdout, result.stderr


def fill(args: list[str], db: str, tmp: Path) -> list[str]:
    """``args`` with the database, an episodes file and a copy target filled in."""
    episodes = tmp / "episodes.jsonl"
    if not episodes.exists():
        line = {
            "id": "e9",
            "content": "x",
            "timestamp": "2026-01-01T00:00:00+00:00",
            "user": "alice",
            "session": "s",
            "agent": "a",
        }
        episodes.write_text(json.dumps(line) + "\n", encoding="utf-8")
    copy = tmp / "copy.db"
    return [a.format(db=db, episodes=episodes, copy=copy) for a in args]


def run_all(db: str, tmp: Path) -> Iterator[tuple[str, int, str, str]]:
    """Run every command of :data:`COMMANDS` on ``db``."""
    for name, args in COMMANDS.items():
        yield (name, *invoke(fill(args, db, tmp)))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sidecars(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))


def journal_mode(path: Path) -> str:
    with closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


def ours(db: Path) -> str:
    """A consolidated database of ours; returns its fact's id."""
    for args in (COMMANDS["put"], COMMANDS["consolidate"]):
        code, _, err = invoke(fill(args, str(db), db.parent))
        assert code == 0, err
    facts = invoke(["facts", "--json", "--db", str(db)])[1]
    return str(json.loads(facts)["id"])


def sql(db: Path, *statements: str) -> None:
    with closing(sqlite3.connect(db)) as conn, conn:
        for statement in statements:
            conn.execute(statement)


def assert_refused_untouched(db: Path, tmp: Path, message: str) -> None:
    """Every command fails with exactly ``error: message`` and the file stays as it was."""
    before, mode = sha256(db), journal_mode(db)
    for name, code, out, err in run_all(str(db), tmp):
        assert (code, out, err) == (1, "", f"error: {message}\n"), name
    assert sha256(db) == before
    assert sidecars(db) == []
    assert journal_mode(db) == mode
    assert not (tmp / "copy.db").exists()


# --- another program's file ---------------------------------------------------------------


def foreign_file(db: Path) -> None:
    """Another program's database, with an ``episodes`` and a ``facts`` table of its own."""
    sql(
        db,
        "CREATE TABLE episodes (id INTEGER PRIMARY KEY, title TEXT)",
        "CREATE TABLE facts (id INTEGER PRIMARY KEY, body TEXT)",
        "INSERT INTO episodes (title) VALUES ('pilot')",
    )


def test_another_programs_file_is_refused_untouched_by_every_command(tmp_path: Path) -> None:
    db = tmp_path / "theirs.db"
    foreign_file(db)
    assert journal_mode(db) == "delete"
    why = "it holds episodes, facts and none of stargraph_mem's schema markers"
    assert_refused_untouched(db, tmp_path, f"{db} is not a stargraph_mem database ({why})")


def test_a_file_with_another_application_id_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "theirs.db"
    sql(db, "PRAGMA application_id = 1234")  # empty, but marked as another program's
    why = f"application id 0x000004d2, ours is {APPLICATION_ID:#010x}"
    assert_refused_untouched(db, tmp_path, f"{db} is not a stargraph_mem database ({why})")


def test_the_consolidator_refuses_another_programs_file(tmp_path: Path) -> None:
    db = tmp_path / "theirs.db"
    foreign_file(db)
    before = sha256(db)

    async def scenario() -> None:
        mem = Consolidator.open(db, [DEFAULT])
        with pytest.raises(ForeignDatabaseError, match="is not a stargraph_mem database"):
            await mem.bootstrap()
        with pytest.raises(ForeignDatabaseError, match="is not a stargraph_mem database"):
            async with SQLiteMemoryStore(db) as store:
                await store.recent("alice", limit=1)

    asyncio.run(scenario())
    assert sha256(db) == before and sidecars(db) == [] and journal_mode(db) == "delete"


def test_new_and_empty_files_are_ours_and_get_our_mark(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    for db in (tmp_path / "new.db", empty):
        ours(db)
        with closing(sqlite3.connect(db)) as conn:
            assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
            assert conn.execute("PRAGMA user_version").fetchone() == (FILE_VERSION,)
        assert journal_mode(db) == "wal"


def test_files_of_older_versions_are_recognised_by_their_schema(tmp_path: Path) -> None:
    """Files made before the application id are ours by their tables' markers; they are
    used, and marked, as before (here: missing the quarantine table, created for them)."""
    db = tmp_path / "old.db"
    fact_id = ours(db)
    sql(db, "PRAGMA application_id = 0", "PRAGMA user_version = 0", "DROP TABLE quarantine")
    code, out, err = invoke(["explain", fact_id, "--db", str(db)])
    assert code == 0 and fact_id in out, err
    code, _, err = invoke(fill(COMMANDS["put"], str(db), tmp_path))
    assert code == 0, err
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "quarantine" in tables


# --- a newer version's file ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("mark", "what", "found", "known"),
    [
        (
            "UPDATE fact_store_meta SET value = '99' WHERE key = 'schema_version'",
            "fact store schema version",
            99,
            FACT_SCHEMA_VERSION,
        ),
        (
            f"PRAGMA user_version = {FILE_VERSION + 1}",
            "file version",
            FILE_VERSION + 1,
            FILE_VERSION,
        ),
    ],
    ids=["fact store schema", "file version"],
)
def test_a_newer_sqlite_file_is_refused_untouched_by_every_command(
    tmp_path: Path, mark: str, what: str, found: int, known: int
) -> None:
    db = tmp_path / "m.db"
    ours(db)
    sql(db, mark)
    message = (
        f"{db}: {what} {found} is not supported: it was written by a newer stargraph_mem "
        f"(this version reads up to {known}); upgrade stargraph_mem to open it"
    )
    assert_refused_untouched(db, tmp_path, message)


def test_every_store_refuses_a_newer_file_before_writing(tmp_path: Path) -> None:
    """The episode store alone (a put) refuses a file whose fact store is newer."""
    db = tmp_path / "m.db"
    ours(db)
    sql(db, "UPDATE fact_store_meta SET value = '99' WHERE key = 'schema_version'")
    before = sha256(db)
    episode = Episode(
        id="e2",
        content="x",
        timestamp=datetime(2026, 11, 22, tzinfo=UTC),
        user="alice",
        session="s",
        agent="a",
    )

    async def scenario() -> None:
        store = SQLiteMemoryStore(db)
        with pytest.raises(NewerSchemaError, match="fact store schema version 99"):
            await store.put(episode, user="alice", session="s", agent="a")
        assert store._db is None

    asyncio.run(scenario())
    assert sha256(db) == before and sidecars(db) == []


async def _pg(statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
        cursor = await conn.execute(statement, params)
        return list(await cursor.fetchall()) if cursor.description else []


def test_a_newer_postgresql_schema_is_refused_by_every_command(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with pg_schema() as name:
            url = f"{PG_URL}?schema={name}"
            # the CLI runs its own event loop: on a thread, outside this one
            code, _, err = await asyncio.to_thread(invoke, fill(PUT, url, tmp_path))
            assert code == 0, err
            newer = SCHEMA_VERSION + 1
            future = (newer, "from the future")
            await _pg(f'INSERT INTO "{name}".{LEDGER_TABLE} VALUES (%s, %s, 0)', future)
            dump = f'SELECT * FROM "{name}".episodes ORDER BY seq'
            ledger = f'SELECT * FROM "{name}".{LEDGER_TABLE} ORDER BY version'
            before = (await _pg(dump), await _pg(ledger))
            message = (
                f"PostgreSQL schema {name!r} is at stores schema version {newer}; this version "
                f"knows up to {SCHEMA_VERSION} (upgrade stargraph_mem)"
            )
            for command, code, out, err in await asyncio.to_thread(list, run_all(url, tmp_path)):
                assert (code, out, err) == (1, "", f"error: {message}\n"), command
            assert (await _pg(dump), await _pg(ledger)) == before
            assert len(before[0]) == 1

    asyncio.run(scenario())


# --- a damaged database -------------------------------------------------------------------


def test_a_dropped_table_is_reported_as_damage_and_never_recreated(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ours(db)
    sql(db, "DROP TABLE lineage")
    message = (
        f"{db} is damaged: the fact store's table(s) lineage are missing while its other "
        "tables are there (they are not recreated empty: restore the file from a backup)"
    )
    for name, code, out, err in run_all(str(db), tmp_path):
        if name == "replay":  # reads the facts without their lineage
            continue
        assert (code, out, err) == (1, "", f"error: {message}\n"), name
    with closing(sqlite3.connect(db)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "lineage" not in tables and "facts" in tables


@pytest.mark.parametrize(
    ("table", "store"),
    [("episodes", "memory"), ("quarantine", "memory"), ("rule_runs", "schedule")],
)
def test_a_dropped_table_of_each_store_is_named(tmp_path: Path, table: str, store: str) -> None:
    db = tmp_path / "m.db"
    ours(db)
    code, _, err = invoke(fill(COMMANDS["run --once"], str(db), tmp_path))  # schedule tables
    assert code == 0, err
    sql(db, f"DROP TABLE {table}")
    code, out, err = invoke(fill(COMMANDS["put"], str(db), tmp_path))
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {db} is damaged: the {store} store's table(s) {table} are")
    with closing(sqlite3.connect(db)) as conn:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    assert found is None


def test_the_damage_error_is_raised_by_the_library(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ours(db)
    sql(db, "DROP TABLE audit")

    async def scenario() -> None:
        with pytest.raises(DamagedDatabaseError, match=r"table\(s\) audit are missing"):
            async with Consolidator.open(db, [DEFAULT]) as mem:
                await mem.facts()

    asyncio.run(scenario())


# --- reading a read-only file -------------------------------------------------------------


def test_recent_reads_a_read_only_file_without_recording_accesses(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    ours(db)
    before = sha256(db)

    async def scenario() -> None:
        store = SQLiteMemoryStore(db)
        store.read_only = True
        async with store:
            episodes = await store.recent("alice", limit=5)
            assert [e.content for e in episodes] == ["hi"]
            assert store.read_only_reason == "opened read-only"

    asyncio.run(scenario())
    assert sha256(db) == before
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT access_count FROM episodes").fetchall() == [(0,)]
