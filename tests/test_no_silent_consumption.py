"""Every episode a pass consumes ends as a delta's source, a recorded rejection with its
reason, or evidence a durable aggregate keeps: none is consumed silently.

The regression is the specification's update intent without a full triple: the default
pack has no rule for it, and the pass used to consume it with no delta and no rejection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from backends import PG_URL, pg_schema
from e2e_helpers import DEFAULT, NOW, T0, episode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import JsonValue, ValidationError

from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.embedding import HashingEmbedder
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.outputs import UNMATCHED
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import ConsolidationRule, Episode
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

ROOT = Path(__file__).resolve().parent.parent
PACKS = sorted((ROOT / "rules").glob("*.yaml")) + sorted(
    (ROOT / "tests" / "fixtures" / "compiler").glob("*.yaml")
)
STREAMING_DEFAULT = (
    (ROOT / "rules" / "default.yaml")
    .read_text()
    .replace('cadence: {cron: "0 3 * * *"}', "cadence: {every: 1}")
)


def _incomplete_update(fact_id: str, minute: int = 5) -> Episode:
    """The issue's episode: intent update naming a fact, with no subject/predicate/object."""
    return episode("upd", minute, intent="update", replaces=[fact_id])


async def _seed(c: Consolidator) -> str:
    """One fact (alice likes tea), consolidated; its id."""
    await c.memory.put_many([episode("tea", 0, subject="alice", predicate="likes", object="tea")])
    await c.consolidate(now=NOW)
    (fact,) = await c.facts(user="alice")
    return fact.id


def _assert_rejected_incomplete(rejected: Sequence[object]) -> None:
    (r,) = rejected
    assert r.episode_id == "upd"  # type: ignore[attr-defined]
    assert r.rule_id == UNMATCHED  # type: ignore[attr-defined]
    assert "no rule of pack 'default' matched it" in r.reason  # type: ignore[attr-defined]
    assert "it has no object, predicate, subject" in r.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize("worker", ["never", "always"])
async def test_incomplete_update_is_rejected_in_a_batch_pass(tmp_path: Path, worker: str) -> None:
    """Batch (in this process, or in a worker process): the episode is rejected with its
    reason, the rejection is stored, and the old fact stays current."""
    async with Consolidator.open(tmp_path / "m.db", [DEFAULT], worker=worker) as c:  # type: ignore[arg-type]
        old = await _seed(c)
        await c.memory.put_many([_incomplete_update(old)])
        report = await c.consolidate(now=NOW.replace(day=3))
        assert report.counts == {"add": 0, "update": 0, "delete": 0, "noop": 0}
        _assert_rejected_incomplete(report.rejected)
        stored = await c.fact_store.rejections(Partition("alice", "rag"))
        assert [(r.id, r.rule_id) for r in stored] == [("upd", UNMATCHED)]
        assert [f.id for f in await c.facts(user="alice")] == [old]


async def test_incomplete_update_is_rejected_when_streaming(tmp_path: Path) -> None:
    pack = tmp_path / "streaming.yaml"
    pack.write_text(STREAMING_DEFAULT)
    async with Consolidator.open(tmp_path / "m.db", [pack], clock=lambda: NOW) as c:
        await c.record(episode("tea", 0, subject="alice", predicate="likes", object="tea"))
        (fact,) = await c.facts(user="alice")
        report = await c.record(_incomplete_update(fact.id))
        _assert_rejected_incomplete(report.rejected)
        assert [r.id for r in await c.fact_store.rejections()] == ["upd"]


async def test_incomplete_update_is_rejected_by_the_specification_consolidate(
    tmp_path: Path,
) -> None:
    """``MemoryStore.consolidate(rule)``: the returned list is empty, and the rejection is
    recorded where the fact store keeps them."""
    store = SQLiteMemoryStore(path=tmp_path / "m.db")
    await store.bootstrap()
    try:
        rule = ConsolidationRule(id="nightly", cadence={"every": 1})
        await store.put(
            episode("tea", 0, subject="alice", predicate="likes", object="tea"),
            user="alice",
            session="s1",
            agent="rag",
        )
        (added,) = await store.consolidate(rule)
        await store.put(
            _incomplete_update(added.new_fact_id),  # type: ignore[union-attr]
            user="alice",
            session="s1",
            agent="rag",
        )
        assert await store.consolidate(rule) == []
    finally:
        await store.close()
    async with Consolidator.open(tmp_path / "m.db", [DEFAULT]) as c:
        (rejection,) = await c.fact_store.rejections()
        assert rejection.id == "upd"
        assert "nothing was derived from it" in rejection.reason


async def test_incomplete_update_is_rejected_on_postgresql() -> None:
    async with (
        pg_schema() as schema,
        Consolidator.open(f"{PG_URL}?schema={schema}", [DEFAULT]) as c,
    ):
        old = await _seed(c)
        await c.memory.put_many([_incomplete_update(old)])
        report = await c.consolidate(now=NOW.replace(day=3))
        _assert_rejected_incomplete(report.rejected)
        assert [r.id for r in await c.fact_store.rejections()] == ["upd"]


# --- the property -----------------------------------------------------------------------

_RUNTIMES: dict[Path, PackRuntime] = {}


def _runtime(path: Path) -> PackRuntime:
    if path not in _RUNTIMES:
        _RUNTIMES[path] = PackRuntime(compile_file(path))
    return _RUNTIMES[path]


words = st.sampled_from(["ann", "bo", "tea", "x", "likes", "is", "", "a b"])
values: st.SearchStrategy[JsonValue] = st.one_of(
    words,
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.lists(st.sampled_from(["f1", "f2", "e0", "e1"]), max_size=2),
    st.sampled_from(["2026-03-01T09:00:00+00:00", "soon"]),
)
keys = st.sampled_from(
    [
        "intent",
        "replaces",
        "subject",
        "predicate",
        "object",
        "kind",
        "importance",
        "status",
        "topic",
        "score",
        "tags",
        "confidence",
        "speculative",
    ]
)
intents = st.sampled_from(["add", "update", "delete", "noop", "maybe"])
metadatas = st.dictionaries(keys, values, max_size=6).flatmap(
    lambda m: st.one_of(st.just(m), intents.map(lambda i: {**m, "intent": i}))
)
episode_lists = st.lists(
    st.tuples(metadatas, st.sampled_from(["s1", "s2", "s3"]), st.integers(0, 30)),
    min_size=1,
    max_size=12,
)


def _records(drawn: Sequence[tuple[dict[str, JsonValue], str, int]]) -> list[EpisodeRecord]:
    return [
        EpisodeRecord(
            seq=n + 1,
            id=f"e{n}",
            content=f"text {n}",
            timestamp=T0.replace(minute=minute),
            source_node=None,
            user="alice",
            session=session,
            agent="rag",
            metadata=meta,
        )
        for n, (meta, session, minute) in enumerate(drawn)
    ]


EMBEDDER = HashingEmbedder()
"""What packs testing ``near`` rank facts with (the others ignore it)."""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PACKS), episode_lists)
def test_every_consumed_episode_is_accounted_for(
    pack: Path, drawn: list[tuple[dict[str, JsonValue], str, int]]
) -> None:
    """Over random episodes and the shipped and fixture packs: each episode is a source
    of a delta, rejected with a non-empty reason, or kept by an aggregate."""
    runtime = _runtime(pack)
    records = _records(drawn)
    out = runtime.run_pass(
        partition=Partition("alice", "rag"), now=NOW, episodes=records, embedder=EMBEDDER
    )
    sources = {e for d in out.deltas for e in d.source_episode_ids}
    rejected = {r.episode_id for r in out.rejected}
    assert all(r.reason for r in out.rejected)
    if any(i not in runtime.sweeps for i in runtime.rules):
        assert {r.id for r in records} == sources | rejected | set(out.kept)
    assert not set(out.kept) & (sources | rejected)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(episode_lists)
def test_every_consumed_episode_is_recorded_in_the_store(
    drawn: list[tuple[dict[str, JsonValue], str, int]],
) -> None:
    """End to end on a SQLite file with the default pack: every stored episode is cited by
    an audit row or has a stored rejection once the pass is applied."""

    async def run() -> None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            async with Consolidator.open(Path(tmp) / "m.db", [DEFAULT]) as c:
                stored = []
                for r in _records(drawn):
                    try:  # an episode refused at the door is never consumed
                        stored.append(
                            episode(r.id, 0, at=r.timestamp, session=r.session, meta=r.metadata)
                        )
                    except ValidationError:
                        continue
                await c.memory.put_many(stored)
                await c.consolidate(now=NOW)
                rows = await c.fact_store.audit_rows()
                audited = {e for row in rows for e in row.delta.source_episode_ids}
                rejected = {r.id for r in await c.fact_store.rejections()}
                assert {e.id for e in stored} <= audited | rejected

    asyncio.run(run())
