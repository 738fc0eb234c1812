"""Memory stores (SQLite and PostgreSQL): scoped writes, widening reads, ordering,
duplicates, quarantine, health, migrations; and the SQLite file's own concerns."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from backends import (
    BACKENDS,
    AnyMemoryStore,
    open_backend,
    raw_execute,
    raw_rows,
    schema_snapshot,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import stargraph_mem
from stargraph_mem.errors import (
    CorruptRowError,
    DuplicateEpisodeError,
    MemoryScopeError,
    MigrationNotSupported,
)
from stargraph_mem.stores import (
    ConsolidationRule,
    Episode,
    MemoryStore,
    MigrationOp,
    MigrationPlan,
    Partition,
    SQLiteMemoryStore,
)
from stargraph_mem.stores.postgres import PostgresDatabase
from stargraph_mem.stores.repositories.episodes import READ_COLUMNS
from stargraph_mem.stores.sqlite_memory import recent_query, row_record

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
Scope = tuple[str, str, str]


def ep(
    id: str,
    scope: Scope = ("alice", "s1", "a1"),
    *,
    ts: datetime = T0,
    content: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Episode:
    """An episode in ``scope`` (user, session, agent); content defaults to its id."""
    user, session, agent = scope
    return Episode(
        id=id,
        content=id if content is None else content,
        timestamp=ts,
        user=user,
        session=session,
        agent=agent,
        metadata=metadata or {},
    )


async def put(store: AnyMemoryStore, episode: Episode) -> None:
    """``put`` with the episode's own scope restated, as callers must."""
    await store.put(episode, user=episode.user, session=episode.session, agent=episode.agent)


def ids(episodes: list[Episode]) -> list[str]:
    return [e.id for e in episodes]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnyMemoryStore]:
    """A fresh memory store of each backend in turn."""
    async with open_backend(request.param, tmp_path) as opened:
        yield opened.memory


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
    async with SQLiteMemoryStore(tmp_path / "memory.db") as opened:
        yield opened


def with_clock(store: AnyMemoryStore, clock: Callable[[], datetime]) -> AnyMemoryStore:
    """A second memory store over the same database as ``store``, with ``clock``."""
    if isinstance(store, SQLiteMemoryStore):
        return SQLiteMemoryStore(store.path, clock=clock)
    return PostgresDatabase(store.database.url, clock=clock).memory


async def count_rows(store: AnyMemoryStore) -> int:
    [(count,)] = await raw_rows(store, "SELECT count(*) FROM episodes")
    return int(count)


# --- lifecycle ---------------------------------------------------------------------------


async def test_store_satisfies_protocol_and_consolidate_runs_the_runtime(
    sqlite_store: SQLiteMemoryStore,
) -> None:
    store = sqlite_store
    assert isinstance(store, MemoryStore)
    episode = Episode(
        id="c1",
        content="alice likes tea",
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        user="alice",
        session="s1",
        agent="rag",
        metadata={"subject": "alice", "predicate": "likes", "object": "tea"},
    )
    await store.put(episode, user="alice", session="s1", agent="rag")
    deltas = await store.consolidate(ConsolidationRule(id="r1"))
    assert [(d.kind, d.rule_id, d.source_episode_ids) for d in deltas] == [("add", "r1", ["c1"])]
    assert await store.consolidate(ConsolidationRule(id="r1")) == []


async def test_bootstrap_creates_parents_wal_and_baseline_idempotently(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "memory.db"
    async with SQLiteMemoryStore(path) as store:
        await store.bootstrap()
        await store.bootstrap()
        assert await store.schema_version() == 1
    async with SQLiteMemoryStore(path) as again:
        assert await again.schema_version() == 1
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = db.execute("SELECT version, name FROM schema_migrations").fetchall()
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert rows == [(1, "0001_episodes")]
    assert {"idx_episodes_scope_ts", "episodes_partition_seq"} <= indexes


async def test_store_reopens_after_close(tmp_path: Path) -> None:
    store = SQLiteMemoryStore(tmp_path / "m.db")
    await put(store, ep("e1"))
    await store.close()
    assert ids(await store.recent("alice", limit=5)) == ["e1"]
    await store.close()


async def test_sqlite_errors_pass_through_unwrapped(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(sqlite3.OperationalError):
        await SQLiteMemoryStore(tmp_path / "dir.db").bootstrap()


# --- widening reads ------------------------------------------------------------------------

WIDEN_DATA = [
    ("e1", ("alice", "s1", "a1")),
    ("e2", ("alice", "s1", "a2")),
    ("e3", ("alice", "s2", "a1")),
    ("e4", ("alice", "s2", "a2")),
    ("e5", ("bob", "s1", "a1")),
    ("e6", ("alice", "s1", "a1")),
]


@pytest.mark.parametrize(
    ("session", "agent", "expected"),
    [
        ("s1", "a1", ["e6", "e1"]),
        (None, "a1", ["e6", "e3", "e1"]),
        ("s1", None, ["e6", "e2", "e1"]),
        (None, None, ["e6", "e4", "e3", "e2", "e1"]),
    ],
)
async def test_recent_widens_by_omitted_components(
    store: AnyMemoryStore, session: str | None, agent: str | None, expected: list[str]
) -> None:
    await store.put_many(
        [ep(i, scope, ts=T0 + timedelta(minutes=n)) for n, (i, scope) in enumerate(WIDEN_DATA)]
    )
    assert ids(await store.recent("alice", session, agent, limit=10)) == expected
    assert ids(await store.recent("alice", session, agent, limit=1)) == expected[:1]


@pytest.mark.parametrize("limit", [0, -1, True, 1.5])
async def test_recent_limit_must_be_positive_int(store: AnyMemoryStore, limit: Any) -> None:
    with pytest.raises(ValueError, match="limit"):
        await store.recent("alice", limit=limit)


async def test_session_read_uses_index_without_sort(sqlite_store: SQLiteMemoryStore) -> None:
    store = sqlite_store
    sql, params = recent_query("alice", "s1", "a1", 20)
    with sqlite3.connect(store.path) as db:
        plan = " | ".join(r[3] for r in db.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "USING INDEX idx_episodes_scope_ts (scope_key=?)" in plan
    assert "SCAN" not in plan
    assert "TEMP B-TREE" not in plan


@pytest.mark.parametrize(("session", "agent"), [(None, "a1"), ("s1", None), (None, None)])
async def test_wider_reads_never_scan_the_table(
    sqlite_store: SQLiteMemoryStore, session: str | None, agent: str | None
) -> None:
    store = sqlite_store
    sql, params = recent_query("alice", session, agent, 20)
    assert "LIKE" not in sql
    with sqlite3.connect(store.path) as db:
        plan = " | ".join(r[3] for r in db.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "SEARCH episodes USING INDEX" in plan
    assert "SCAN" not in plan


# --- scope isolation -------------------------------------------------------------------

TRICKY = [
    "alice",
    "ALICE",
    "Alice",
    "a_ice",
    "alice2",
    "alice/session/x",
    "alice/",
    "/alice",
    "al%",
    "%",
    "%25",
    "_",
    "\\",
    "a\\b",
    "session",
    "agent",
    "é",
    "e\u0301",
]
components = st.sampled_from(TRICKY) | st.text(alphabet="aA/%_\\.-~é ", min_size=1, max_size=5)
scopes = st.tuples(components, components, components)
READ_SHAPES: list[tuple[bool, bool]] = [(True, True), (False, True), (True, False), (False, False)]


def visible(row: Scope, read: Scope, shape: tuple[bool, bool]) -> bool:
    """Whether a row in scope ``row`` belongs in a read of ``read`` widened by ``shape``."""
    with_session, with_agent = shape
    return (
        row[0] == read[0]
        and (not with_session or row[1] == read[1])
        and (not with_agent or row[2] == read[2])
    )


async def check_isolation(path: Path, first: Scope, second: Scope) -> None:
    """Each read returns exactly the rows whose own scope matches it, nothing forged."""
    rows = {"one": first, "two": second}
    async with SQLiteMemoryStore(path) as store:
        await store.put_many([ep(i, scope) for i, scope in rows.items()])
        for read in (first, second):
            for shape in READ_SHAPES:
                session = read[1] if shape[0] else None
                agent = read[2] if shape[1] else None
                got = set(ids(await store.recent(read[0], session, agent, limit=10)))
                assert got == {i for i, s in rows.items() if visible(s, read, shape)}
        partitions = await store.partitions()
        assert set(partitions) == {Partition(s[0], s[2]) for s in rows.values()}


@settings(max_examples=50, deadline=None)
@given(first=scopes, second=scopes)
def test_distinct_scopes_never_see_each_other(
    tmp_path_factory: pytest.TempPathFactory, first: Scope, second: Scope
) -> None:
    path = tmp_path_factory.mktemp("iso") / "m.db"
    asyncio.run(check_isolation(path, first, second))


@pytest.mark.parametrize("other", ["ALICE", "Alice", "a_ice", "alice2", "alice/session/x", "al%"])
async def test_lookalike_users_are_isolated(store: AnyMemoryStore, other: str) -> None:
    await store.put_many([ep("mine"), ep("theirs", (other, "s1", "a1"))])
    assert ids(await store.recent("alice", limit=10)) == ["mine"]
    assert ids(await store.recent(other, limit=10)) == ["theirs"]


async def test_session_component_cannot_forge_agent_segment(store: AnyMemoryStore) -> None:
    await store.put_many([ep("x", ("alice", "s1/agent/a1", "a9")), ep("y", ("alice", "s1", "a1"))])
    assert ids(await store.recent("alice", "s1", "a1", limit=10)) == ["y"]
    assert ids(await store.recent("alice", "s1", limit=10)) == ["y"]


# --- ordering and time -------------------------------------------------------------------


async def test_order_uses_utc_instant_across_offsets(store: AnyMemoryStore) -> None:
    plus2 = timezone(timedelta(hours=2))
    minus5 = timezone(timedelta(hours=-5))
    await store.put_many(
        [
            ep("at-0800Z", ts=datetime(2026, 11, 22, 10, 0, tzinfo=plus2)),
            ep("at-0900Z", ts=datetime(2026, 11, 22, 9, 0, tzinfo=UTC)),
            ep("at-0830Z", ts=datetime(2026, 11, 22, 3, 30, tzinfo=minus5)),
        ]
    )
    got = await store.recent("alice", limit=10)
    assert ids(got) == ["at-0900Z", "at-0830Z", "at-0800Z"]
    assert [e.timestamp.utcoffset() for e in got] == [
        timedelta(0),
        timedelta(hours=-5),
        timedelta(hours=2),
    ]
    assert got[2].timestamp == datetime(2026, 11, 22, 10, 0, tzinfo=plus2)


async def test_equal_instants_break_ties_by_insertion(store: AnyMemoryStore) -> None:
    same = [T0, T0.astimezone(timezone(timedelta(hours=5))), T0]
    for n, ts in enumerate(same):
        await put(store, ep(f"e{n}", ts=ts))
    assert ids(await store.recent("alice", "s1", "a1", limit=10)) == ["e2", "e1", "e0"]
    records = await store.since(Partition("alice", "a1"), 0)
    assert [r.id for r in records] == ["e0", "e1", "e2"]


async def test_naive_datetimes_are_refused(store: AnyMemoryStore) -> None:
    with pytest.raises(ValueError, match="timezone"):
        ep("naive", ts=datetime(2026, 1, 1))
    forged = Episode.model_construct(**{**ep("forged").__dict__, "timestamp": datetime(2026, 1, 1)})
    with pytest.raises(ValueError, match="naive"):
        await store.put_many([ep("fine"), forged])
    await put(store, ep("e1"))
    naive_clock = with_clock(store, lambda: datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="clock"):
        await naive_clock.recent("alice", limit=1)
    with pytest.raises(ValueError, match="naive"):
        await naive_clock.migrate(add_column())
    await naive_clock.close()
    [record] = await store.since(Partition("alice", "a1"), 0)
    assert (record.id, record.access_count, await store.schema_version()) == ("e1", 0, 1)


# --- duplicates and scope checks ----------------------------------------------------------


async def test_identical_reput_is_a_noop(store: AnyMemoryStore) -> None:
    await put(store, ep("e1", metadata={"a": 1, "b": [1, 2]}))
    await put(store, ep("e1", metadata={"b": [1, 2], "a": 1}))
    assert await store.put_many([ep("e1", metadata={"a": 1, "b": [1, 2]}), ep("e2")]) == 1
    assert await count_rows(store) == 2


@pytest.mark.parametrize(
    ("changed", "field"),
    [
        (ep("e1", content="other"), "content"),
        (ep("e1", ts=T0 + timedelta(seconds=1)), "timestamp"),
        (ep("e1", metadata={"a": True}), "metadata"),
        (ep("e1", ("alice", "s2", "a1")), "session"),
    ],
)
async def test_same_id_different_fields_is_rejected(
    store: AnyMemoryStore, changed: Episode, field: str
) -> None:
    await put(store, ep("e1", metadata={"a": 1}))
    with pytest.raises(DuplicateEpisodeError, match=f"'e1' already exists.*{field}"):
        await put(store, changed)
    with pytest.raises(DuplicateEpisodeError):
        await store.put_many([ep("new1"), changed, ep("new2")])
    assert await count_rows(store) == 1


async def test_duplicates_within_a_batch(store: AnyMemoryStore) -> None:
    with pytest.raises(DuplicateEpisodeError, match="'d' appears twice in the batch"):
        await store.put_many([ep("x"), ep("d"), ep("d", content="changed")])
    assert await count_rows(store) == 0
    assert await store.put_many([ep("d"), ep("d"), ep("y")]) == 2
    assert await store.put_many([]) == 0


@pytest.mark.parametrize(
    ("scope", "part"),
    [
        (("bob", "s1", "a1"), "user"),
        (("alice", "s2", "a1"), "session"),
        (("alice", "s1", "x"), "agent"),
    ],
)
async def test_put_scope_must_match_episode(store: AnyMemoryStore, scope: Scope, part: str) -> None:
    user, session, agent = scope
    with pytest.raises(MemoryScopeError, match=f"scope mismatch on {part}") as caught:
        await store.put(ep("e1"), user=user, session=session, agent=agent)
    assert caught.value.context["part"] == part
    assert await count_rows(store) == 0


async def test_empty_scope_components_are_rejected(store: AnyMemoryStore) -> None:
    with pytest.raises(MemoryScopeError, match="'session'"):
        await store.put(ep("e1"), user="alice", session="", agent="a1")
    with pytest.raises(MemoryScopeError, match="'user'"):
        await store.recent("", limit=1)
    with pytest.raises(MemoryScopeError, match="'agent'"):
        await store.recent("alice", "s1", "", limit=1)
    forged = Episode.model_construct(**{**ep("f").__dict__, "agent": ""})
    with pytest.raises(MemoryScopeError, match="'agent'"):
        await store.put_many([forged])


# --- metadata, access stats, incremental reads ----------------------------------------------

METADATA: dict[str, Any] = {
    "subject": "Zoë 🌍",
    "日本": ["語", {"深い": {"ネスト": [1, 2.5, -3, None, True]}}],
    "rtl": "שלום",
    "esc": 'quote" back\\slash \n tab\t nul-free',
    "big": 2**63,
    "empty": {},
}


async def test_metadata_round_trips_exactly(store: AnyMemoryStore) -> None:
    await put(store, ep("m", metadata=METADATA))
    [back] = await store.recent("alice", limit=1)
    [record] = await store.since(Partition("alice", "a1"), 0)
    assert back.metadata == METADATA == record.metadata
    assert list(back.metadata) == list(METADATA)
    assert back.model_dump_json() == ep("m", metadata=METADATA).model_dump_json()


class Clock:
    """A settable clock for access-time assertions."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def test_recent_touches_only_returned_rows(tmp_path: Path) -> None:
    clock = Clock(datetime(2026, 11, 22, 18, 0, tzinfo=timezone(timedelta(hours=1))))
    async with SQLiteMemoryStore(tmp_path / "m.db", clock=clock) as store:
        await store.put_many([ep(f"e{n}", ts=T0 + timedelta(minutes=n)) for n in range(3)])
        await store.recent("alice", limit=2)
        clock.now = clock.now + timedelta(hours=1)
        await store.recent("alice", limit=1)
        records = {r.id: r for r in await store.since(Partition("alice", "a1"), 0)}
    assert records["e0"].last_accessed is None
    assert records["e0"].access_count == 0
    assert records["e1"].last_accessed == datetime(2026, 11, 22, 17, 0, tzinfo=UTC)
    assert records["e1"].access_count == 1
    assert records["e2"].last_accessed == datetime(2026, 11, 22, 18, 0, tzinfo=UTC)
    assert records["e2"].access_count == 2


async def test_since_and_partition_bookkeeping(store: AnyMemoryStore) -> None:
    bob, alice = Partition("bob", "a1"), Partition("alice", "a1")
    assert await store.max_seq(alice) == 0
    assert await store.partitions() == []
    await store.put_many(
        [
            ep("a", ("alice", "s1", "a1"), ts=T0 + timedelta(hours=1)),
            ep("b", ("bob", "s1", "a1")),
            ep("c", ("alice", "s2", "a1"), ts=T0),
            ep("d", ("alice", "s1", "a2")),
            ep("e", ("alice", "s3", "a1"), ts=T0 - timedelta(days=1)),
        ]
    )
    records = await store.since(alice, 0)
    assert [(r.seq, r.id) for r in records] == [(1, "a"), (3, "c"), (5, "e")]
    assert [r.id for r in await store.since(alice, 1, limit=1)] == ["c"]
    assert await store.since(alice, 5) == []
    assert (await store.max_seq(alice), await store.max_seq(bob)) == (5, 2)
    assert (await store.count_since(alice, 0), await store.count_since(alice, 3)) == (3, 1)
    assert await store.partitions() == [alice, Partition("alice", "a2"), bob]
    assert records[2].to_episode() == ep("e", ("alice", "s3", "a1"), ts=T0 - timedelta(days=1))
    with pytest.raises(ValueError, match="limit"):
        await store.since(alice, 0, limit=0)


@pytest.mark.parametrize(
    ("column", "value"), [("metadata", b"{not json"), ("metadata", b"[1]"), ("tz_offset_s", 10**6)]
)
async def test_corrupt_rows_name_table_and_seq(
    store: AnyMemoryStore, column: str, value: object
) -> None:
    """A row that does not decode is skipped by reads and quarantined, naming its column;
    decoding it directly still raises :class:`CorruptRowError` with table, seq and reason."""
    await store.put_many([ep("ok"), ep("bad")])
    await raw_execute(store, f"UPDATE episodes SET {column} = ? WHERE id = 'bad'", (value,))
    [raw] = await raw_rows(store, f"SELECT {READ_COLUMNS} FROM episodes WHERE id = 'bad'")
    read = await store.since_checked(Partition("alice", "a1"), 0)
    assert [r.id for r in read.records] == ["ok"]
    assert [(q.seq, q.episode_id) for q in read.quarantined] == [(2, "bad")]
    assert read.quarantined[0].reason.startswith(column)
    assert [e.id for e in await store.recent("alice", limit=5)] == ["ok"]
    with pytest.raises(CorruptRowError, match="episodes row seq=2") as caught:
        row_record(raw)
    assert set(caught.value.context) == {"table", "seq", "reason"}


# --- concurrency ---------------------------------------------------------------------------

WRITER = """
import asyncio, sys
from datetime import UTC, datetime
from stargraph_mem.stores import Episode, SQLiteMemoryStore

def make(i):
    return Episode(id=f"child-{i}", content="c", timestamp=datetime.now(UTC),
                   user="u", session="child", agent="a")

async def main(path, count):
    async with SQLiteMemoryStore(path) as store:
        for i in range(count):
            await store.put(make(i), user="u", session="child", agent="a")
        await store.put_many([make(count + i) for i in range(count)])

print("ready", flush=True)
sys.stdin.readline()
asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path, count = tmp_path / "shared.db", 200
    root = str(Path(stargraph_mem.__file__).parent.parent)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        str(path),
        str(count),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert child.stdin is not None and child.stdout is not None
    assert await child.stdout.readline() == b"ready\n"
    child.stdin.write(b"go\n")
    await child.stdin.drain()
    async with SQLiteMemoryStore(path) as store:
        for i in range(count):
            await put(store, ep(f"parent-{i}", ("u", "parent", "a")))
            await store.recent("u", limit=3)
        await store.put_many(
            [ep(f"parent-{count + i}", ("u", "parent", "a")) for i in range(count)]
        )
        _, stderr = await child.communicate()
        assert (child.returncode, stderr.decode()) == (0, "")
        assert await store.count_since(Partition("u", "a"), 0) == 4 * count


# --- health and migrations -----------------------------------------------------------------


async def test_health_of_missing_file_does_not_create_it(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "m.db"
    health = await SQLiteMemoryStore(path).health()
    assert (health.ok, health.reason) == (False, "database file does not exist")
    assert not path.exists() and not path.parent.exists()


async def test_health_of_non_bootstrapped_file(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE other (x)")
    health = await SQLiteMemoryStore(path).health()
    assert not health.ok
    assert health.reason == "not bootstrapped: missing table(s) episodes, schema_migrations"
    assert (health.quick_check, health.journal_mode) == ("ok", "delete")
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("other",)]


async def test_health_of_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(os.urandom(8192))
    health = await SQLiteMemoryStore(path).health()
    assert not health.ok
    assert health.reason is not None and "not a usable SQLite database" in health.reason
    assert health.file_size == 8192


async def test_health_reports_real_figures(sqlite_store: SQLiteMemoryStore) -> None:
    store = sqlite_store
    await store.put_many([ep(f"e{n}") for n in range(7)])
    health = await store.health()
    assert health.ok and health.reason is None
    assert (health.episode_count, health.schema_version) == (7, 1)
    assert (health.journal_mode, health.quick_check) == ("wal", "ok")
    assert health.file_size == store.path.stat().st_size > 0


async def test_health_of_closed_store_leaves_no_files_behind(tmp_path: Path) -> None:
    async with SQLiteMemoryStore(tmp_path / "m.db") as store:
        await put(store, ep("e1"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]
    health = await store.health()
    assert (health.ok, health.episode_count) == (True, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]


def add_column(name: str = "m2", **op: Any) -> MigrationPlan:
    fields = {"op": "add_column", "table": "episodes", "column": "mood", "type": "TEXT", **op}
    return MigrationPlan(name=name, operations=[MigrationOp(**fields)])


def schema_of(path: Path) -> list[Any]:
    with sqlite3.connect(path) as db:
        tables = db.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
        return [*tables, *db.execute("SELECT version, name FROM schema_migrations")]


async def test_migrate_adds_a_nullable_column_once(sqlite_store: SQLiteMemoryStore) -> None:
    store = sqlite_store
    await put(store, ep("before"))
    await store.migrate(add_column(type="integer"))
    await store.migrate(add_column(type="integer"))
    with sqlite3.connect(store.path) as db:
        columns = {r[1]: r[2] for r in db.execute("PRAGMA table_info(episodes)")}
        recorded = db.execute("SELECT version, name FROM schema_migrations").fetchall()
        assert db.execute("SELECT mood FROM episodes").fetchall() == [(None,)]
    assert columns["mood"] == "INTEGER"
    assert recorded == [(1, "0001_episodes"), (2, "m2")]
    assert (await store.health()).schema_version == await store.schema_version() == 2
    await put(store, ep("after"))
    assert ids(await store.recent("alice", limit=5)) == ["after", "before"]


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (add_column(op="drop_column"), "operation 'drop_column' is not supported"),
        (add_column(nullable=False), "only nullable"),
        (add_column(type="VARCHAR(3)"), "column type"),
        (add_column(column="x; DROP TABLE episodes"), "invalid column name"),
        (add_column(table="sqlite_master"), "invalid table name"),
        (add_column(table="missing"), "table 'missing' does not exist"),
        (add_column(column="content"), "already exists"),
        (add_column(name="0001_episodes"), "already applied with different operations"),
    ],
)
async def test_migrate_rejects_with_nothing_changed(
    store: AnyMemoryStore, plan: MigrationPlan, message: str
) -> None:
    before = await schema_snapshot(store)
    with pytest.raises(MigrationNotSupported, match=message):
        await store.migrate(plan)
    assert await schema_snapshot(store) == before


async def test_migrate_is_all_or_nothing(store: AnyMemoryStore) -> None:
    ops = [
        MigrationOp(op="add_column", table="episodes", column="one"),
        MigrationOp(op="add_column", table="episodes", column="One"),
    ]
    before = await schema_snapshot(store)
    with pytest.raises(MigrationNotSupported, match=r"operations\[1\].*already exists"):
        await store.migrate(MigrationPlan(name="twice", operations=ops))
    assert await schema_snapshot(store) == before
