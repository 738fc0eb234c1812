"""Replay: rebuild facts under another pack in a scratch database; the real one is only read."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from e2e_helpers import FREQUENCY, NOW, T0, episode, spo
from replay_helpers import SIGHTINGS, fingerprint, frequency_pack, seed

from stargraph_mem.authoring.replay import FactChange, FactState, diff_facts, replay
from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.errors import StoreError
from stargraph_mem.stores.models import Fact
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

PROMOTE = "promote_frequent"


def appear(user: str, subject: str, predicate: str, obj: str, conf: float) -> FactChange:
    return FactChange(
        "appear", user, "rag", subject, predicate, None, FactState(obj, conf, PROMOTE, "")
    )


def without_ids(changes: list[FactChange]) -> list[FactChange]:
    """Replayed facts' ids are not compared (they belong to the scratch database)."""
    out = []
    for c in changes:
        after = (
            None
            if c.after is None
            else FactState(c.after.object, c.after.confidence, c.after.rule_id, "")
        )
        out.append(FactChange(c.change, c.user, c.agent, c.subject, c.predicate, c.before, after))
    return out


@pytest.fixture
def real_db(tmp_path: Path) -> Path:
    path = tmp_path / "real" / "memory.db"
    path.parent.mkdir()
    return path


async def test_threshold_two_adds_exactly_the_expected_facts(real_db: Path, tmp_path: Path) -> None:
    await seed(real_db)
    before = fingerprint(real_db)
    result = await replay(real_db, [compile_file(frequency_pack(tmp_path, 2))], now=NOW)
    assert without_ids(result.changes) == [
        appear("alice", "alice", "drinks", "coffee", 0.4),
        appear("bob", "bob", "plays", "chess", 0.4),
    ]
    assert result.counts() == {"appear": 2, "disappear": 0, "change": 0, "unchanged": 1}
    assert (result.episodes, result.partitions) == (9, 2)
    assert fingerprint(real_db) == before


async def test_the_same_pack_shows_no_differences(real_db: Path) -> None:
    await seed(real_db)
    before = fingerprint(real_db)
    result = await replay(real_db, [compile_file(FREQUENCY)], now=NOW)
    assert result.changes == []
    assert result.unchanged == 1
    assert fingerprint(real_db) == before


async def test_changed_confidence_and_disappearing_facts(real_db: Path, tmp_path: Path) -> None:
    await seed(real_db, [*SIGHTINGS, ("bob", "bob", "likes", "jazz", 3)])
    two = await replay(real_db, [compile_file(frequency_pack(tmp_path, 2))], now=NOW)
    jazz = [c for c in two.changes if c.predicate == "likes"]
    assert [
        (c.change, c.before and c.before.confidence, c.after and c.after.confidence) for c in jazz
    ] == [("change", 0.5, 0.4)]
    assert jazz[0].rule == PROMOTE
    five = await replay(real_db, [compile_file(frequency_pack(tmp_path, 5))], now=NOW)
    assert [(c.change, c.user, c.subject, c.predicate, c.rule) for c in five.changes] == [
        ("disappear", "alice", "alice", "likes", "strengthen_promoted"),
        ("disappear", "bob", "bob", "likes", PROMOTE),
    ]
    assert all(c.after is None and c.before is not None for c in five.changes)
    assert five.counts()["unchanged"] == 0


async def test_user_filter_replays_and_compares_one_user(real_db: Path, tmp_path: Path) -> None:
    await seed(real_db)
    result = await replay(real_db, [compile_file(frequency_pack(tmp_path, 2))], now=NOW, user="bob")
    assert without_ids(result.changes) == [appear("bob", "bob", "plays", "chess", 0.4)]
    assert (result.episodes, result.partitions, result.unchanged) == (2, 1, 0)


async def test_as_of_replays_the_episodes_up_to_then(real_db: Path, tmp_path: Path) -> None:
    await seed(real_db)
    # the first three episodes: alice likes tea in s1, s2, s3; no real fact existed yet
    as_of = T0 + timedelta(minutes=2)
    result = await replay(real_db, [compile_file(frequency_pack(tmp_path, 2))], as_of=as_of)
    assert result.now == as_of
    assert result.episodes == 3
    assert without_ids(result.changes) == [appear("alice", "alice", "likes", "tea", 0.4)]


async def test_reads_through_a_live_writer_wal(real_db: Path, tmp_path: Path) -> None:
    await seed(real_db)
    writer = sqlite3.connect(real_db)  # keeps the WAL open after the store closes
    try:
        writer.execute("SELECT count(*) FROM episodes").fetchall()
        async with SQLiteMemoryStore(real_db) as store:
            await store.put_many(
                [
                    episode(
                        f"late-{n}",
                        60 + n,
                        user="bob",
                        session=f"s{n}",
                        **spo("bob", "likes", "jazz"),
                    )
                    for n in (1, 2, 3)
                ]
            )
        assert real_db.with_name("memory.db-wal").exists()
        main_file = fingerprint(real_db)[0]
        result = await replay(real_db, [compile_file(FREQUENCY)], now=NOW)
        assert [(c.change, c.predicate, c.rule) for c in result.changes] == [
            ("appear", "likes", PROMOTE)
        ]
        assert fingerprint(real_db)[0] == main_file
    finally:
        writer.close()


async def test_scratch_is_kept_when_asked_and_never_overwritten(
    real_db: Path, tmp_path: Path
) -> None:
    await seed(real_db)
    scratch = tmp_path / "rebuilt.db"
    await replay(real_db, [compile_file(FREQUENCY)], now=NOW, scratch=scratch)
    conn = sqlite3.connect(scratch)
    try:
        assert conn.execute("SELECT count(*) FROM episodes").fetchone() == (9,)
        assert conn.execute(
            "SELECT count(*) FROM facts WHERE valid_until_us IS NULL"
        ).fetchone() == (1,)
    finally:
        conn.close()
    with pytest.raises(StoreError, match="scratch database already exists"):
        await replay(real_db, [compile_file(FREQUENCY)], now=NOW, scratch=scratch)


async def test_missing_or_foreign_database_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="database file does not exist"):
        await replay(tmp_path / "none.db", [compile_file(FREQUENCY)], now=NOW)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    foreign = r"other\.db is not a stargraph_mem database \(it holds t "
    with pytest.raises(StoreError, match=foreign):
        await replay(other, [compile_file(FREQUENCY)], now=NOW)
    facts_only = tmp_path / "facts.db"
    async with SQLiteFactStore(facts_only):
        pass
    with pytest.raises(StoreError, match="no episodes table"):
        await replay(facts_only, [compile_file(FREQUENCY)], now=NOW)


def fact(fid: str, predicate: str, obj: str, conf: float = 0.8, rule: str = "r") -> Fact:
    return Fact(
        id=fid,
        user="u",
        agent="a",
        subject="s",
        predicate=predicate,
        object=obj,
        confidence=conf,
        valid_from=NOW,
        recorded_at=NOW,
        rule_id=rule,
        delta_id="d" + fid,
    )


def test_diff_pairs_equal_objects_first_then_in_object_order() -> None:
    real = [fact("f1", "likes", "tea"), fact("f2", "likes", "jazz"), fact("f3", "home", "Oslo")]
    new = [
        fact("g1", "likes", "tea", 0.9, "n"),
        fact("g2", "likes", "chess", rule="n"),
        fact("g3", "likes", "golf", rule="n"),
    ]
    changes, unchanged = diff_facts(real, new)
    assert unchanged == 0
    assert [
        (c.change, c.predicate, c.before and c.before.object, c.after and c.after.object, c.rule)
        for c in changes
    ] == [
        ("disappear", "home", "Oslo", None, "r"),
        ("appear", "likes", None, "golf", "n"),
        ("change", "likes", "jazz", "chess", "n"),
        ("change", "likes", "tea", "tea", "n"),
    ]
