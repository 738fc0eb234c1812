"""Search over current facts: ranking, filters, history, access records, bad queries."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import BACKENDS, AnyFactStore, open_backend
from readme_helpers import readme_section_example, run_example
from schema_helpers import undo_version_4, undo_version_6
from typer.testing import CliRunner, Result

from stargraph_mem.cli import app
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import FactNotFoundError, SearchError, StoreError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.stores import (
    AddDelta,
    DeleteDelta,
    FactPattern,
    FactPayload,
    SQLiteFactStore,
    UpdateDelta,
)
from stargraph_mem.stores.sqlite.search import TEXT_LAG_MAX
from stargraph_mem.stores.sqlite.search_sql import TEXT_MARK
from stargraph_mem.stores.sqlite_fact import SCHEMA_VERSION

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[1]


def _common(user: str, src: str, agent: str = "a1") -> dict[str, Any]:
    return {
        "user": user,
        "agent": agent,
        "source_episode_ids": [src],
        "promotion_ts": T0,
        "rule_id": "r1",
        "confidence": 0.8,
    }


def add(
    subject: str,
    predicate: str,
    obj: str,
    *,
    user: str = "alice",
    agent: str = "a1",
    src: str = "e1",
    confidence: float = 0.8,
    payload: dict[str, Any] | None = None,
) -> AddDelta:
    fact = FactPayload(subject=subject, predicate=predicate, object=obj, payload=payload or {})
    return AddDelta(fact=fact, **{**_common(user, src, agent), "confidence": confidence})


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnyFactStore]:
    """A fresh fact store of each backend in turn, its clock a minute later at each call."""
    clock = iter(T0 + timedelta(minutes=i) for i in range(10_000))
    async with open_backend(request.param, tmp_path, clock=lambda: next(clock)) as opened:
        yield opened.facts


def objects(hits: list[Any]) -> list[str]:
    return [hit.fact.object for hit in hits]


async def test_words_rank_facts_and_filters_narrow_them(store: AnyFactStore) -> None:
    await store.apply_deltas(
        [
            add("alice", "likes", "green tea", src="e1"),
            add("alice", "likes", "coffee", src="e2"),
            add("alice", "lives in", "Oslo", src="e3"),
            add("bob", "likes", "tea", user="bob", src="e4"),
        ]
    )
    hits = await store.search("green tea", user="alice")
    assert objects(hits) == ["green tea"]
    assert hits[0].score > 0
    both = await store.search("tea")
    assert sorted(objects(both)) == ["green tea", "tea"]
    # the fact matching both words ranks above the one matching one
    assert objects(await store.search("tea green")) == ["green tea", "tea"]
    assert objects(await store.search("OSLO")) == ["Oslo"]
    assert len(await store.search("likes", user="alice", limit=1)) == 1
    assert sorted(objects(await store.search("likes", predicate="likes", user="alice"))) == [
        "coffee",
        "green tea",
    ]
    assert await store.search("tea", agent="other") == []


async def test_payload_text_is_searched_and_accents_ignored(store: AnyFactStore) -> None:
    await store.apply_deltas(
        [
            add("alice", "visited", "a city", payload={"note": "Café in Zürich"}, src="e1"),
            add("alice", "visited", "a town", payload={"note": "nothing here"}, src="e2"),
        ]
    )
    assert objects(await store.search("zurich cafe")) == ["a city"]


async def test_closed_facts_leave_the_index(store: AnyFactStore) -> None:
    first = add("alice", "drinks", "tea", src="e1")
    await store.apply_deltas([first])
    assert objects(await store.search("tea")) == ["tea"]
    update = UpdateDelta(
        fact=FactPayload(subject="alice", predicate="drinks", object="coffee"),
        replaces=[first.new_fact_id],
        **_common("alice", "e2"),
    )
    await store.apply_deltas([update])
    assert await store.search("tea") == []
    assert objects(await store.search("coffee")) == ["coffee"]
    delete = DeleteDelta(replaces=[update.new_fact_id], **_common("alice", "e3"))
    await store.apply_deltas([delete])
    assert await store.search("coffee drinks alice") == []
    # the closed facts are kept as history
    history = await store.query(FactPattern(include_history=True))
    assert sorted(f.object for f in history) == ["coffee", "tea"]


def indexed_rowids(path: Path) -> tuple[list[int], list[int]]:
    """The rowids in the search index (after FTS5's own integrity check), and the facts'."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("INSERT INTO fact_text (fact_text) VALUES ('integrity-check')")
        index = [r[0] for r in db.execute("SELECT rowid FROM fact_text ORDER BY rowid")]
        facts = [r[0] for r in db.execute("SELECT rowid FROM facts ORDER BY 1")]
    return index, facts


async def test_every_fact_is_indexed_and_only_current_ones_are_found(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    async with SQLiteFactStore(path) as store:
        adds = [add("alice", "likes", f"thing {i}", src=f"e{i}") for i in range(30)]
        await store.apply_deltas(adds[:20])
        # one batch: adds, an update of a fact of this batch, closes of older facts
        batch: list[Any] = [*adds[20:]]
        batch.append(
            UpdateDelta(
                fact=FactPayload(subject="alice", predicate="likes", object="new thing"),
                replaces=[adds[25].new_fact_id],
                **_common("alice", "u1"),
            )
        )
        batch += [
            DeleteDelta(replaces=[a.new_fact_id], **_common("alice", f"d{i}"))
            for i, a in enumerate(adds[:10])
        ]
        await store.apply_deltas(batch)
        current = await store.search("thing", limit=1000, touch=False)
        assert len(current) == 30 - 10 - 1 + 1
        assert all(hit.fact.is_current for hit in current)
        every = await store.search("thing", limit=1000, touch=False, include_history=True)
        assert len(every) == 31
        assert {h.fact.id for h in every if not h.fact.is_current} == {
            a.new_fact_id for a in [*adds[:10], adds[25]]
        }
    index, facts = indexed_rowids(path)
    assert index == facts and len(facts) == 31


async def test_filter_only_search_ranks_by_confidence(store: AnyFactStore) -> None:
    await store.apply_deltas(
        [
            add("alice", "likes", "tea", confidence=0.4, src="e1"),
            add("alice", "likes", "jazz", confidence=0.9, src="e2"),
            add("alice", "likes", "rain", confidence=0.6, src="e3"),
        ]
    )
    hits = await store.search(user="alice", agent="a1")
    assert objects(hits) == ["jazz", "rain", "tea"]
    assert {hit.score for hit in hits} == {0.0}
    assert objects(await store.search(min_confidence=0.5)) == ["jazz", "rain"]


async def test_search_records_access_unless_told_not_to(store: AnyFactStore) -> None:
    tea = add("alice", "likes", "tea", src="e1")
    await store.apply_deltas([tea, add("alice", "likes", "jazz", src="e2")])
    fid = tea.new_fact_id
    assert (await store.access(fid)).count == 0
    await store.search("tea")
    await store.search("tea")
    first = await store.access(fid)
    assert first.count == 2 and first.last_access is not None
    await store.search("tea", touch=False)
    assert await store.access(fid) == first
    # a fact that was not returned was not touched
    jazz = add("alice", "likes", "jazz", src="e2").new_fact_id
    assert (await store.access(jazz)).count == 0
    with pytest.raises(FactNotFoundError):
        await store.access("fnope")


@pytest.mark.parametrize(
    ("query", "limit", "message"),
    [
        ("!!! ???", 10, "has no words"),
        ("tea", 0, "from 1 to 1000"),
        ("tea", 1001, "from 1 to 1000"),
        (" ".join(["w"] * 65), 10, "at most 64"),
    ],
)
async def test_unusable_queries_are_refused(
    store: AnyFactStore, query: str, limit: int, message: str
) -> None:
    with pytest.raises(SearchError, match=message):
        await store.search(query, limit=limit)


@pytest.mark.parametrize(
    "query", ['tea" OR "x', "tea*", "subject:alice", "NEAR(a b)", "a AND", "(tea", "-tea", "^tea"]
)
async def test_query_syntax_is_text_never_fts_syntax(store: AnyFactStore, query: str) -> None:
    await store.apply_deltas([add("alice", "likes", "tea", src="e1")])
    hits = await store.search(query)
    # words only: each query above either contains the word "tea" or matches nothing
    assert objects(hits) == (["tea"] if "tea" in query or "alice" in query else [])


async def test_a_version_2_file_is_migrated_and_indexed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    tea = add("alice", "likes", "tea", src="e1")
    async with SQLiteFactStore(path) as store:
        await store.apply_deltas([tea, add("alice", "likes", "jazz", src="e2")])
        await store.apply_deltas(
            [
                UpdateDelta(
                    fact=FactPayload(subject="alice", predicate="likes", object="coffee"),
                    replaces=[tea.new_fact_id],
                    **_common("alice", "e3"),
                )
            ]
        )
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE fact_text")
        db.execute("DROP TABLE fact_access")
        undo_version_4(db)
        db.execute("UPDATE fact_store_meta SET value = '2' WHERE key = 'schema_version'")
    async with SQLiteFactStore(path) as store:
        assert sorted(objects(await store.search("tea coffee jazz"))) == ["coffee", "jazz"]
        health = await store.health()
        assert health.ok and health.schema_version == SCHEMA_VERSION == 7


async def test_an_unknown_schema_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    async with SQLiteFactStore(path) as store:
        await store.apply_deltas([add("alice", "likes", "tea")])
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE fact_store_meta SET value = '9' WHERE key = 'schema_version'")
    before = path.read_bytes()
    with pytest.raises(StoreError, match="version 9 is not supported"):
        async with SQLiteFactStore(path) as store:
            await store.search("tea")
    assert path.read_bytes() == before


async def test_consolidator_search_over_consolidated_episodes(tmp_path: Path) -> None:
    async with Consolidator.open(tmp_path / "m.db", [ROOT / "rules" / "default.yaml"]) as mem:
        for i, (user, obj) in enumerate(
            [("alice", "green tea"), ("alice", "Oslo"), ("bob", "tea"), ("alice", "tea")]
        ):
            await mem.memory.put_many(
                [
                    Episode(
                        id=f"e{i}",
                        content=f"{user} likes {obj}",
                        timestamp=T0 + timedelta(minutes=i),
                        user=user,
                        session="s1",
                        agent="rag",
                        metadata={"subject": user, "predicate": f"p{i}", "object": obj},
                    )
                ]
            )
        await mem.consolidate(now=T0 + timedelta(hours=1))
        hits = await mem.search("tea", user="alice", limit=5)
        assert sorted(objects(hits)) == ["green tea", "tea"]
        assert all(h.fact.user == "alice" for h in hits)
        assert (await mem.access(hits[0].fact.id)).count == 1
        assert objects(await mem.search("oslo", touch=False)) == ["Oslo"]


def test_the_readme_search_example_runs_verbatim(tmp_path: Path) -> None:
    code, output = readme_section_example("Search")
    done = run_example(code, tmp_path, "examples/streaming_dedup.yaml", timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == output


# --- the CLI: facts --search ------------------------------------------------------------------


@pytest.fixture
def searched_db(tmp_path: Path) -> Path:
    """A database with alice's and bob's facts, written through the fact store."""
    path = tmp_path / "cli.db"

    async def fill() -> None:
        async with SQLiteFactStore(path) as store:
            await store.apply_deltas(
                [
                    add("alice", "drinks", "green tea", src="e1", confidence=0.9),
                    add("alice", "likes", "jazz", src="e2"),
                    add("bob", "drinks", "tea", user="bob", src="e3", confidence=0.5),
                ]
            )

    asyncio.run(fill())
    return path


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), prog_name="stargraph-mem")


def test_cli_search_ranks_filters_and_reads_without_a_trace(searched_db: Path) -> None:
    db = str(searched_db)
    table = invoke("facts", "--db", db, "--search", "green tea")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "ID", "USER", "AGENT", "SUBJECT", "PREDICATE", "CONFIDENCE", "SCORE", "OBJECT"
    ]  # fmt: skip
    assert [line.split()[1] for line in lines[1:]] == ["alice", "bob"]
    assert lines[1].endswith("green tea") and lines[2].endswith("tea")
    only = invoke("facts", "--db", db, "--search", "tea", "--user", "bob", "--json")
    hits = [json.loads(line) for line in only.stdout.splitlines()]
    assert [(h["fact"]["user"], h["fact"]["object"]) for h in hits] == [("bob", "tea")]
    assert hits[0]["score"] > 0
    limited = invoke("facts", "--db", db, "--search", "tea", "--limit", "1", "--json")
    assert len(limited.stdout.splitlines()) == 1
    fid = hits[0]["fact"]["id"]

    async def accesses() -> int:
        async with SQLiteFactStore(searched_db) as store:
            return (await store.access(fid)).count

    assert asyncio.run(accesses()) == 0  # the CLI reads without a trace by default
    assert invoke("facts", "--db", db, "--search", "tea", "--user", "bob", "--touch").exit_code == 0
    assert asyncio.run(accesses()) == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--search", "!!!"], 1, "error: search query '!!!' has no words"),
        (["--limit", "3"], 2, "error: --limit and --touch go with --search"),
        (["--touch"], 2, "error: --limit and --touch go with --search"),
        (
            ["--search", "tea", "--as-of", "2026-01-01T00:00:00+00:00"],
            2,
            "error: --search finds current facts; it cannot be combined with --as-of",
        ),
    ],
)
def test_cli_search_refuses_bad_requests(
    searched_db: Path, args: list[str], code: int, message: str
) -> None:
    before = searched_db.read_bytes()
    result = invoke("facts", "--db", str(searched_db), *args)
    assert result.exit_code == code
    assert result.stderr.startswith(message)
    assert searched_db.read_bytes() == before


def indexed(path: Path) -> tuple[int, int, int]:
    """Facts in the file, facts its search index holds, and the index's mark."""
    with closing(sqlite3.connect(path)) as db:
        ((facts,),) = db.execute("SELECT count(*) FROM facts")
        ((held,),) = db.execute("SELECT count(*) FROM fact_text_docsize")
        ((mark,),) = db.execute(
            "SELECT CAST(value AS INTEGER) FROM fact_store_meta WHERE key = ?", (TEXT_MARK,)
        )
    return int(facts), int(held), int(mark)


@pytest.mark.parametrize("touch", [True, False])
async def test_the_index_trails_a_few_new_facts_and_a_search_first_indexes_them(
    tmp_path: Path, touch: bool
) -> None:
    path = tmp_path / "m.db"
    async with SQLiteFactStore(path) as store:
        for n, drink in enumerate(("tea", "coffee", "green tea")):
            await store.apply_deltas([add("alice", "likes", drink, src=f"e{n}")])
        assert indexed(path) == (3, 0, 0)
        found = await store.search("tea", touch=touch)
        assert sorted(objects(found)) == ["green tea", "tea"]
        assert indexed(path) == (3, 3, 3)
        again = await store.search("tea", touch=touch)  # nothing left to index
        assert [(h.fact.id, h.score) for h in again] == [(h.fact.id, h.score) for h in found]
        assert indexed(path) == (3, 3, 3)


async def test_a_write_that_leaves_the_index_too_far_behind_indexes_every_fact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    async with SQLiteFactStore(path) as store:
        for n in range(TEXT_LAG_MAX - 1):
            await store.apply_deltas([add("alice", "likes", f"drink{n}", src=f"e{n}")])
        assert indexed(path) == (TEXT_LAG_MAX - 1, 0, 0)
        await store.apply_deltas([add("alice", "likes", "tea", src="last")])
        assert indexed(path) == (TEXT_LAG_MAX, TEXT_LAG_MAX, TEXT_LAG_MAX)
        batch = [add("bob", "likes", f"dish{n}", user="bob", src=f"b{n}") for n in range(100)]
        await store.apply_deltas(batch)  # one transaction, far more than the lag allowed
        total = TEXT_LAG_MAX + 100
        assert indexed(path) == (total, total, total)
        assert objects(await store.search("dish42", touch=False)) == ["dish42"]


async def test_a_read_only_search_sees_the_facts_the_index_lacks_ranked_alike(
    tmp_path: Path,
) -> None:
    """A reader of a file a writer has open (its index trailing) searches its own copy of
    the index: the same hits and scores as once the writer's close indexed them."""
    path = tmp_path / "m.db"
    async with SQLiteFactStore(path) as writer:
        await writer.apply_deltas(
            [add("alice", "likes", f"tea number {n}", src=f"e{n}") for n in range(70)]
        )
        for n, drink in enumerate(("green tea", "tea", "jasmine tea with tea leaves")):
            await writer.apply_deltas([add("alice", "likes", drink, src=f"late{n}")])
        assert indexed(path) == (73, 70, 70)
        reader = SQLiteFactStore(path)
        reader.read_only = True
        async with reader:
            hits = await reader.search("tea jasmine", touch=False, limit=5)
            assert objects(hits)[0] == "jasmine tea with tea leaves"
            await writer.apply_deltas([add("alice", "likes", "green juice", src="later")])
            newer = await reader.search("green", touch=False)  # the copy catches up too
            assert sorted(objects(newer)) == ["green juice", "green tea"]
            hits = await reader.search("tea jasmine", touch=False, limit=5)
            assert reader.read_only_reason == "opened read-only"
        assert indexed(path) == (74, 70, 70)
    assert indexed(path) == (74, 74, 74)  # the writer's close indexed the rest
    async with SQLiteFactStore(path) as store:
        after = await store.search("tea jasmine", touch=False, limit=5)
    assert [(h.fact.object, h.score) for h in hits] == [(h.fact.object, h.score) for h in after]


async def test_a_version_5_file_gets_its_index_mark(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    async with SQLiteFactStore(path) as store:
        await store.apply_deltas(
            [add("alice", "likes", f"tea {n}", src=f"e{n}") for n in range(70)]
        )
    with closing(sqlite3.connect(path)) as db, db:
        undo_version_6(db)
        db.execute("UPDATE fact_store_meta SET value = '5' WHERE key = 'schema_version'")
    async with SQLiteFactStore(path) as store:
        assert (await store.health()).schema_version == SCHEMA_VERSION == 7
        assert indexed(path) == (70, 70, 70)
        assert len(await store.search("tea", limit=100)) == 70
        assert indexed(path) == (70, 70, 70)
