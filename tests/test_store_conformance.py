"""One behaviour, two backends: the stores' contract run on SQLite and PostgreSQL alike,
and what only the PostgreSQL database owner does (URL, schema, versions, pool, workers).

The fact, memory and search suites (``test_sqlite_fact.py``, ``test_sqlite_memory.py``,
``test_search.py``) run on both backends too, through the same fixtures.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from backends import PG_URL, Backend, pg_schema, raw_rows, snapshot
from readme_helpers import readme_section_example

from stargraph_mem import Consolidator
from stargraph_mem.errors import StalePassError, StoreError
from stargraph_mem.stores import (
    AddDelta,
    ConsolidationRule,
    Episode,
    FactPattern,
    FactPayload,
    MigrationOp,
    MigrationPlan,
    NoopDelta,
    Partition,
    Rejection,
    SQLiteFactStore,
    SQLiteMemoryStore,
    WatermarkAdvance,
)
from stargraph_mem.stores import copy as copy_module
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.postgres import PostgresDatabase
from stargraph_mem.stores.postgres.database import split_url
from stargraph_mem.stores.postgres.schema import LEDGER_TABLE, MIGRATIONS, SCHEMA_VERSION
from stargraph_mem.stores.protocols import (
    Database,
    EpisodeRepository,
    FactRepository,
    ScheduleRepository,
)
from stargraph_mem.stores.sqlite_fact import PassBasis

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
ALICE = Partition("alice", "a1")


def episode(eid: str, user: str = "alice", *, minutes: int = 0) -> Episode:
    return Episode(
        id=eid,
        content=f"content of {eid}",
        timestamp=T0 + timedelta(minutes=minutes),
        user=user,
        session="s1",
        agent="a1",
    )


def add(obj: str, src: str = "e1", *, user: str = "alice") -> AddDelta:
    return AddDelta(
        user=user,
        agent="a1",
        source_episode_ids=[src],
        promotion_ts=T0,
        rule_id="r1",
        confidence=0.7,
        fact=FactPayload(subject=user, predicate="likes", object=obj),
    )


# --- streaming writes ------------------------------------------------------------------------


async def test_a_stream_reports_conflicts_by_tag_and_commits_or_discards(
    backend: Backend,
) -> None:
    memory = backend.memory
    other = episode("e1").model_copy(update={"content": "other"})
    async with memory.writing() as writer:
        conflicts = await writer.write([episode("e1"), episode("e2")])
        conflicts += await writer.write([episode("e3"), other, episode("e2")])
    assert conflicts[0].context["tag"] == 4 and conflicts[0].context["first_tag"] == 1
    assert len(conflicts) == 1 and writer.written == 3
    async with memory.writing() as writer:
        [stored] = await writer.write([episode("e4"), other], tags=[10, 11])
        writer.discard()
    assert (stored.context["tag"], stored.context["first_tag"]) == (11, None)
    with pytest.raises(RuntimeError, match="stop"):
        async with memory.writing() as writer:
            await writer.write([episode("e5")])
            raise RuntimeError("stop")
    records = await memory.since(ALICE, 0)
    assert [(r.seq, r.id) for r in records] == [(1, "e1"), (2, "e2"), (3, "e3")]
    assert await memory.put_many([episode("e6")]) == 1
    assert await memory.max_seq(ALICE) > 3


# --- the schedule store ------------------------------------------------------------------


async def test_the_lease_is_held_until_it_expires_or_is_given_up(backend: Backend) -> None:
    schedule = backend.schedule
    assert await schedule.lease("tick") is None
    taken = await schedule.take_lease("tick", "a", T0, 30)
    assert (taken.holder, taken.ours) == ("a", True)
    refused = await schedule.take_lease("tick", "b", T0 + timedelta(seconds=29), 30)
    assert (refused.holder, refused.ours, refused.expires_us) == ("a", False, taken.expires_us)
    renewed = await schedule.take_lease("tick", "a", T0 + timedelta(seconds=20), 30)
    assert renewed.expires_us == taken.expires_us + 20_000_000
    after = await schedule.take_lease("tick", "b", T0 + timedelta(seconds=51), 30)
    assert (after.holder, after.ours) == ("b", True)
    await schedule.release_lease("tick", "a")  # not a's any more: nothing happens
    stored = await schedule.lease("tick")
    assert stored is not None and (stored.holder, stored.ours) == ("b", False)
    await schedule.release_lease("tick", "b")
    assert await schedule.lease("tick") is None


async def test_registered_rules_are_replaced_per_pack(backend: Backend) -> None:
    schedule = backend.schedule
    await schedule.register("p", [("b", 1, '{"every": 2}'), ("a", 0, '{"every": 1}')])
    await schedule.register("q", [("z", 0, '{"cron": "0 3 * * *"}')])
    await schedule.register("p", [("b", 1, '{"every": 2}'), ("a", 0, '{"every": 1}')])
    assert await schedule.registered() == {
        "p": [("a", 0, '{"every": 1}'), ("b", 1, '{"every": 2}')],
        "q": [("z", 0, '{"cron": "0 3 * * *"}')],
    }
    await schedule.register("p", [("c", 0, '{"every": 5}')])
    assert (await schedule.registered())["p"] == [("c", 0, '{"every": 5}')]


async def test_pending_counts_episodes_after_each_rules_watermark(backend: Backend) -> None:
    await backend.memory.put_many([episode(f"e{n}", minutes=n) for n in range(5)])
    await backend.memory.put_many([episode("b1", "bob")])
    advance = WatermarkAdvance(pack="p", rule_id="r1", partition=ALICE, last_seq=3)
    await backend.facts.apply_deltas([], watermarks=[advance])
    await backend.schedule.anchor("p", [("r2", ALICE, 1_000), ("r2", ALICE, 9_000)])
    pending = await backend.schedule.pending("p", ALICE, ["r1", "r2", "r3"])
    assert {rule: count for rule, (count, _) in pending.items()} == {"r1": 2, "r2": 5, "r3": 5}
    state = pending["r2"][1]
    assert state is not None and (state.anchor_us, state.last_run_us, state.runs) == (1000, None, 0)
    assert pending["r1"][1] is None and pending["r3"][1] is None
    runs = await backend.schedule.runs("p", ALICE)
    assert list(runs) == [("r2", ALICE.key)] and runs == await backend.schedule.runs("p")
    assert await backend.schedule.total_runs() == 0


# --- claims and pass bases ------------------------------------------------------------------


async def test_a_claimed_partition_refuses_other_holders_and_unclaimed_passes(
    backend: Backend,
) -> None:
    facts = backend.facts
    assert await facts.claim_partition(ALICE, "host/1/a", 60) is None
    assert await facts.claim_partition(ALICE, "host/1/b", 60) == "host/1/a"
    assert await facts.claim_partition(ALICE, "host/1/a", 60) is None  # renewal
    marks, version = await facts.basis("p", ALICE)
    assert (marks, version) == ({}, 0)
    unclaimed = PassBasis("p", ALICE, marks, version, now_us=0)
    before = await snapshot(facts)
    with pytest.raises(StalePassError, match="claimed by host/1/a"):
        await facts.apply_deltas([add("tea")], basis=unclaimed)
    assert await snapshot(facts) == before
    ours = PassBasis("p", ALICE, marks, version, holder="host/1/a", release=True)
    result = await facts.apply_deltas([add("tea")], basis=ours, version_of=ALICE)
    assert result.version == await facts.version(ALICE) == 1
    assert await facts.claim_partition(ALICE, "host/1/b", 60) is None  # released by the pass
    with pytest.raises(StalePassError, match="version 0 → 1"):
        await facts.apply_deltas([add("juice")], basis=PassBasis("p", ALICE, {}, 0, "host/1/b"))
    await facts.release_partition(ALICE, "host/1/b")
    assert await facts.claim_partition(ALICE, "host/1/c", 60) is None


async def test_many_partitions_are_claimed_at_once_where_free(backend: Backend) -> None:
    facts = backend.facts
    bob, carol = Partition("bob", "a1"), Partition("carol", "a1")
    assert await facts.claim_partition(bob, "host/1/other", 60) is None
    held = await facts.claim_partitions([ALICE, bob, carol, ALICE], "host/1/me", 60)
    assert held == [ALICE, carol, ALICE]
    assert await facts.claim_partition(carol, "host/1/other", 60) == "host/1/me"
    await facts.release_partitions([ALICE, bob, carol], "host/1/me")
    assert await facts.claim_partition(carol, "host/1/other", 60) is None
    assert await facts.claim_partition(bob, "host/1/me", 60) == "host/1/other"


async def test_partitions_all_held_by_others_are_none_of_ours(backend: Backend) -> None:
    """A worker that finds every partition it asks for held by another claims none (and
    writes nothing: no empty bulk statement is sent)."""
    facts = backend.facts
    bob = Partition("bob", "a1")
    for partition in (ALICE, bob):
        assert await facts.claim_partition(partition, "host/1/other", 60) is None
    assert await facts.claim_partitions([ALICE, bob], "host/1/me", 60) == []
    assert await facts.claim_partition(bob, "host/1/me", 60) == "host/1/other"


async def test_rejections_and_current_facts_read_back_alike(backend: Backend) -> None:
    facts = backend.facts
    rejection = Rejection(id="e9", pack="p", rule_id="r1", partition=ALICE, reason="bad", at=T0)
    tea = add("tea")
    await facts.apply_deltas([tea], rejections=[rejection, rejection])
    assert await facts.rejections() == await facts.rejections(ALICE) == [rejection]
    assert await facts.rejections(Partition("bob", "a1")) == []
    later = T0 + timedelta(hours=1)
    reinforce = NoopDelta(
        user="alice",
        agent="a1",
        source_episode_ids=["e2"],
        promotion_ts=later,
        rule_id="r1",
        confidence=0.7,
        reinforces=[tea.new_fact_id],
    )
    await facts.apply_deltas([reinforce])
    [current] = await facts.current_facts(ALICE)
    t0_us, later_us = (int(t.timestamp()) * 1_000_000 for t in (T0, later))
    assert (current.id, current.object, current.source_episode_ids) == (
        tea.new_fact_id,
        "tea",
        ("e1",),
    )
    assert (current.valid_from_us, current.reinforced_at_us) == (t0_us, later_us)


# --- the PostgreSQL database owner -------------------------------------------------------------


@pytest.mark.parametrize(
    "schema", ["1abc", "a-b", 'x"; DROP SCHEMA public; --', "pg_catalog", "a" * 64, ""]
)
def test_schema_names_must_be_plain_identifiers(schema: str) -> None:
    with pytest.raises(StoreError, match="not a valid PostgreSQL schema name"):
        PostgresDatabase(f"{PG_URL}?schema={schema}")


def test_our_schema_parameter_is_stripped_and_others_kept() -> None:
    conninfo, schema = split_url("postgresql://u:secret@h:5/db?sslmode=disable&schema=mem_1")
    assert (conninfo, schema) == ("postgresql://u:secret@h:5/db?sslmode=disable", "mem_1")
    assert split_url("postgresql://h/db")[1] == "public"
    with pytest.raises(StoreError, match="not a PostgreSQL URL"):
        split_url("sqlite:///x.db")


async def test_bootstrap_records_versions_and_schemas_are_isolated() -> None:
    async with pg_schema() as one, pg_schema() as two:
        async with PostgresDatabase(f"{PG_URL}?schema={one}") as first:
            await first.bootstrap()  # idempotent
            await first.memory.put_many([episode("e1")])
            ledger = await raw_rows(first.memory, f"SELECT version, name FROM {LEDGER_TABLE}")
            assert ledger == [(version, name) for version, name, _ in MIGRATIONS]
            assert ledger[-1][0] == SCHEMA_VERSION
            health = await first.health()
            assert (health.ok, health.schema_version, health.episode_count) == (
                True,
                SCHEMA_VERSION,
                1,
            )
        async with PostgresDatabase(f"{PG_URL}?schema={two}") as second:
            assert await second.memory.partitions() == []
            assert (await second.health()).episode_count == 0


async def _rows_of(schema: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows read behind the stores' back (a direct connection, the schema on its path)."""
    async with await psycopg.AsyncConnection.connect(
        PG_URL, autocommit=True, options=f"-c search_path={schema}"
    ) as conn:
        return [tuple(row) for row in await (await conn.execute(sql)).fetchall()]


async def test_schema_names_keep_their_case() -> None:
    async with pg_schema() as lower:
        name = "Mixed_" + lower
        try:
            async with PostgresDatabase(f"{PG_URL}?schema={name}") as db:
                await db.memory.put_many([episode("e1")])
                assert [r.id for r in await db.memory.since(ALICE, 0)] == ["e1"]
            schemas = await _rows_of(
                "public",
                f"SELECT schema_name FROM information_schema.schemata WHERE schema_name = '{name}'",
            )
            assert schemas == [(name,)]
        finally:
            async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


async def test_a_newer_schema_version_is_refused_and_left_untouched() -> None:
    async with pg_schema() as name:
        url = f"{PG_URL}?schema={name}"
        async with PostgresDatabase(url) as db:
            await db.memory.put_many([episode("e1")])
            async with db.transaction() as conn:
                await conn.execute(
                    f"INSERT INTO {LEDGER_TABLE} VALUES (%s, 'from the future', 0)",
                    (SCHEMA_VERSION + 1,),
                )
        ledger = f"SELECT version, name FROM {LEDGER_TABLE} ORDER BY version"
        before = (await _rows_of(name, ledger), await _rows_of(name, "SELECT * FROM episodes"))
        newer = PostgresDatabase(url)
        message = f"version {SCHEMA_VERSION + 1}; this version knows up to {SCHEMA_VERSION}"
        with pytest.raises(StoreError, match=message):
            await newer.memory.put_many([episode("e2")])
        health = await newer.health()
        assert not health.ok and f"schema version is {SCHEMA_VERSION + 1}" in str(health.reason)
        await newer.close()
        after = (await _rows_of(name, ledger), await _rows_of(name, "SELECT * FROM episodes"))
        assert after == before and len(before[1]) == 1


async def test_an_unreachable_server_fails_clearly_and_health_says_why() -> None:
    url = "postgresql://postgres@127.0.0.1:1/test?schema=nowhere"
    db = PostgresDatabase(url)
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL at .*127\.0\.0\.1:1"):
        await db.memory.put_many([episode("e1")])
    health = await db.health()
    assert not health.ok and "cannot connect" in str(health.reason)
    await db.close()


async def test_migration_plans_add_columns_once_on_postgresql() -> None:
    async with pg_schema() as name, PostgresDatabase(f"{PG_URL}?schema={name}") as db:
        op = MigrationOp(op="add_column", table="facts", column="note", type="INTEGER")
        plan = MigrationPlan(name="note", operations=[op])
        await db.facts.migrate(plan)
        await db.facts.migrate(plan)
        columns = await raw_rows(
            db.facts,
            "SELECT data_type FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = 'facts' AND column_name = 'note'",
        )
        assert columns == [("bigint",)]
        await db.facts.apply_deltas([add("tea")])
        assert [f.object for f in await db.facts.query(FactPattern(user="alice"))] == ["tea"]


async def test_concurrent_writers_commit_seqs_in_order_and_apply_once() -> None:
    """Two owners (two pools) on one schema, as two workers: every episode gets a distinct
    seq in commit order, and the same batch applied by both is applied once."""
    async with pg_schema() as name:
        url = f"{PG_URL}?schema={name}"
        async with PostgresDatabase(url) as one, PostgresDatabase(url) as two:

            async def put(db: PostgresDatabase, prefix: str) -> None:
                for n in range(10):
                    await db.memory.put_many([episode(f"{prefix}{n}-{k}") for k in range(5)])

            await asyncio.gather(put(one, "a"), put(two, "b"))
            records = await one.memory.since(ALICE, 0)
            assert [r.seq for r in records] == list(range(1, 101))
            batch = [add(f"o{n}", src=f"a{n}-0") for n in range(50)]
            results = await asyncio.gather(
                one.facts.apply_deltas(batch), two.facts.apply_deltas(batch)
            )
            assert sorted(r.added for r in results) == [0, 50]
            assert len(await two.facts.audit_rows()) == 50


def test_an_unclosed_database_does_not_keep_the_interpreter_alive(tmp_path: Path) -> None:
    script = tmp_path / "leave_open.py"
    script.write_text(
        "import asyncio, sys\n"
        "from stargraph_mem.stores.postgres import PostgresDatabase\n"
        "async def main():\n"
        f"    db = PostgresDatabase({PG_URL!r} + '?schema=' + sys.argv[1])\n"
        "    await db.bootstrap()\n"
        "    print(len(await db.memory.partitions()))\n"
        "asyncio.run(main())\n"
    )

    async def run() -> subprocess.CompletedProcess[str]:
        async with pg_schema() as name:
            return await asyncio.to_thread(
                subprocess.run,
                [sys.executable, str(script), name],
                capture_output=True,
                text=True,
                timeout=60,
            )

    done = asyncio.run(run())
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr


# --- the owner's Protocol and copies ---------------------------------------------------------


def as_database(db: PostgresDatabase) -> Database:
    """The PostgreSQL owner is a :class:`Database` (checked by mypy, here and below)."""
    return db


async def test_the_postgres_owner_serves_the_store_protocols() -> None:
    async with pg_schema() as name, PostgresDatabase(f"{PG_URL}?schema={name}") as db:
        owner = as_database(db)
        assert (owner.backend, owner.read_only_reason) == ("postgresql", None)
        memory: EpisodeRepository = owner.memory
        facts: FactRepository = owner.facts
        schedule: ScheduleRepository = owner.schedule
        assert memory.read_only_reason is facts.read_only_reason is schedule.read_only_reason
        await memory.put_many([episode("e1")])
        assert await memory.count_since_of([(ALICE, 0), (Partition("bob", "a1"), 0)]) == [1, 0]


async def test_a_memory_copies_into_postgresql_and_back_unchanged(tmp_path: Path) -> None:
    source, back = tmp_path / "a.db", tmp_path / "back.db"
    async with SQLiteMemoryStore(source) as memory, SQLiteFactStore(source) as facts:
        await memory.put_many([episode(f"e{n}", minutes=n) for n in range(5)])
        tea, coffee = add("tea", "e0"), add("Crème brûlée", "e1")
        await facts.apply_deltas([tea, coffee])
        await facts.search("creme")
    async with pg_schema() as name:
        url = f"{PG_URL}?schema={name}"
        there = await copy_module.copy_database(source, url)
        assert (there.rows["episodes"], there.rows["facts"]) == (5, 2)
        async with PostgresDatabase(url) as db:
            [hit] = await db.facts.search("CREME", touch=False)
            assert hit.fact.id == coffee.new_fact_id
            await db.memory.put_many([episode("later", minutes=9)])
            assert [r.seq for r in await db.memory.since(ALICE, 4)] == [5, 6]
        again = await copy_module.copy_database(url, back)
        assert again.digests["facts"] == there.digests["facts"]
        assert again.digests["fact_access"] == there.digests["fact_access"]
        assert again.rows["episodes"] == 6


def test_the_readme_postgresql_example_runs(tmp_path: Path) -> None:
    code, output = readme_section_example("Databases: SQLite or PostgreSQL")

    async def run() -> subprocess.CompletedProcess[str]:
        async with pg_schema() as name:
            fresh = code.replace("?schema=readme_example", f"?schema={name}")
            assert fresh != code
            (tmp_path / "example.py").write_text(fresh, encoding="utf-8")
            return await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "example.py"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
            )

    done = asyncio.run(run())
    assert (done.returncode, done.stdout) == (0, output), done.stderr


# --- end to end ----------------------------------------------------------------------------


async def _consolidated(location: str) -> list[tuple[Any, ...]]:
    """Two nights of the default pack over ``location``: every fact with its history."""
    async with Consolidator.open(location, ["rules/default.yaml"]) as mem:
        for night, objects in enumerate((["tea", "coffee"], ["water"])):
            await mem.memory.put_many(
                [
                    Episode(
                        id=f"n{night}-{n}",
                        content=f"alice drinks {obj}",
                        timestamp=T0 + timedelta(days=night, minutes=n),
                        user="alice",
                        session=f"s{night}",
                        agent="a1",
                        metadata={"subject": "alice", "predicate": "drinks", "object": obj},
                    )
                    for n, obj in enumerate(objects)
                ]
            )
            await mem.consolidate(now=T0 + timedelta(days=night, hours=12))
    async with open_database(location) as db:
        facts = await db.facts.query(FactPattern(include_history=True))
        audit = await db.facts.audit_rows()
    return [
        *((f.id, f.object, f.valid_from, f.valid_until, f.superseded_by) for f in facts),
        *((a.seq, a.kind, a.delta_id) for a in audit),
    ]


async def test_consolidation_gives_the_same_facts_and_audit_on_both_backends(
    tmp_path: Path,
) -> None:
    on_sqlite = await _consolidated(str(tmp_path / "m.db"))
    async with pg_schema() as name:
        on_postgres = await _consolidated(f"{PG_URL}?schema={name}")
    assert on_postgres == on_sqlite
    assert len(on_sqlite) == 6  # three facts (two superseded), three audit rows


async def test_the_legacy_consolidate_refuses_on_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with pg_schema() as name, PostgresDatabase(f"{PG_URL}?schema={name}") as db:
        await db.memory.put_many([episode("e1")])
        with pytest.raises(StoreError, match="runs on SQLite files only") as caught:
            await db.memory.consolidate(ConsolidationRule(id="r1"))
        assert caught.value.context["rule_id"] == "r1"
        assert await db.facts.audit_rows() == []
    assert list(tmp_path.iterdir()) == []


async def test_run_states_of_some_partitions(backend: Backend) -> None:
    """``runs_of`` reads the run states of the partitions asked for, and only those."""
    from stargraph_mem.stores.repositories.schedule_runs import RuleRun
    from stargraph_mem.stores.scope import Partition

    at = datetime(2026, 5, 1, tzinfo=UTC)
    parts = [Partition(user, "rag") for user in ("ann", "bo", "cy")]
    runs = [RuleRun("p", rule, part, at, f"t-{part.user}") for part in parts for rule in "ab"]
    await backend.facts.apply_deltas([], runs=runs)
    found = await backend.schedule.runs_of("p", parts[:2])
    assert sorted(found) == sorted((rule, p.key) for p in parts[:2] for rule in "ab")
    assert found[("a", parts[1].key)].token == "t-bo"
    assert await backend.schedule.runs_of("other", parts) == {}
    assert set(found.items()) <= set((await backend.schedule.runs("p")).items())
