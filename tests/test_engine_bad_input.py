"""Bad input at the engine's edges: legacy ``when_filter`` SQL (benign, injection, runaway),
deltas naming unknown facts, and episode metadata of the wrong declared type."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import DEDUP, NOW, dump_tables, episode, spo

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes import filters
from stargraph_mem.engine.passes.report import LegacyFilter
from stargraph_mem.errors import ConsolidationRuleError, FactConflictError
from stargraph_mem.stores.fact import WatermarkAdvance
from stargraph_mem.stores.models import (
    AddDelta,
    DeleteDelta,
    Episode,
    FactPattern,
    FactPayload,
    UpdateDelta,
)
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore

ALICE = Partition("alice", "rag")
BENIGN = "json_extract(CAST(metadata AS TEXT), '$.subject') = 'alice'"
INJECTIONS = {
    "union": "1=1 UNION SELECT seq FROM sqlite_master",
    "other-table": "seq IN (SELECT rowid FROM facts)",
    "stacked": "1); DROP TABLE episodes; --",
    "extension": "load_extension('x')",
    "pragma": "(SELECT count(*) FROM pragma_table_info('episodes')) > 0",
    "pragma-exists": "EXISTS (SELECT 1 FROM pragma_table_info('episodes'))",
    "attach": "1=1) ATTACH DATABASE ':memory:' AS x --",
    "attached-schema": "seq IN (SELECT seq FROM x.episodes)",
    "write": "1=1) DELETE FROM episodes --",
    "schema-read": "seq IN (SELECT seq FROM sqlite_temp_master)",
    "recursive-cte": (
        "seq IN (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c)"
    ),
}
RUNAWAY = (
    "EXISTS (SELECT a.ts_us FROM episodes a, episodes b, episodes c, episodes d, episodes e, "
    "episodes f WHERE a.ts_us + b.ts_us + c.ts_us + d.ts_us + e.ts_us + f.ts_us < episodes.ts_us)"
)
"""A six-way self join: allowed by the authorizer (it reads only ``episodes``), but far too
big to finish, so the progress-handler time limit must stop it."""


async def seed(c: Consolidator) -> None:
    """Some facts already consolidated, 20 new episodes pending."""
    await c.record(episode("e1", 1, **spo("alice", "likes", "tea")))
    await c.record(episode("e2", 2, **spo("bob", "likes", "tea")))
    await c.consolidate(now=NOW)
    for n in range(3, 23):
        subject = "alice" if n % 2 else "bob"
        await c.record(episode(f"e{n}", n, **spo(subject, "likes", f"o{n % 4}")))


async def test_benign_legacy_filter_restricts_the_episodes(tmp_path: Path) -> None:
    async with Consolidator.open(tmp_path / "m.db", [DEDUP]) as c:
        for n, subject in enumerate(["alice", "bob", "alice", "carol"], start=1):
            await c.record(episode(f"e{n}", n, **spo(subject, "likes", f"o{n}")))
        reports = (await c.consolidate(now=NOW, legacy=LegacyFilter(BENIGN, rule_id="*"))).passes
        assert [sorted(d.source_episode_ids[0] for d in r.deltas) for r in reports] == [
            ["e1", "e3"]
        ]
        assert [(f.subject, f.object) for f in await c.facts()] == [("alice", "o3")]
        # Filtered-out episodes are consumed all the same: the watermark passed them.
        top = await c.memory.max_seq(ALICE)
        assert set((await c.fact_store.watermarks("dedup_against_facts", ALICE)).values()) == {top}
        again = (await c.consolidate(now=NOW)).passes
        assert [(r.episodes, r.deltas) for r in again] == [(0, [])]


async def test_legacy_filter_on_one_rule_leaves_the_others_alone(tmp_path: Path) -> None:
    async with Consolidator.open(tmp_path / "m.db", [DEDUP]) as c:
        for n, subject in enumerate(["alice", "alice", "bob", "bob"], start=1):
            await c.record(episode(f"e{n}", n, **spo(subject, "likes", "tea")))
        legacy = LegacyFilter(BENIGN, rule_id="known_fact_noop")
        reports = (await c.consolidate(now=NOW, legacy=legacy)).passes
        # Only the noop rule is restricted to alice: bob's repeat (e4) is not reinforcing,
        # and no other rule takes it (its triple is already known).
        assert [(d.kind, d.source_episode_ids) for d in reports[0].deltas] == [
            ("add", ["e1"]),
            ("noop", ["e2"]),
            ("add", ["e3"]),
        ]


@pytest.mark.parametrize("sql", INJECTIONS.values(), ids=list(INJECTIONS))
async def test_injection_attempts_are_refused_and_change_nothing(tmp_path: Path, sql: str) -> None:
    db = tmp_path / "m.db"
    async with Consolidator.open(db, [DEDUP]) as c:
        await seed(c)
        before = dump_tables(db)
        started = time.perf_counter()
        with pytest.raises(ConsolidationRuleError) as info:
            await c.consolidate(now=NOW, legacy=LegacyFilter(sql, rule_id="*"))
        assert time.perf_counter() - started < filters.TIME_LIMIT_S
        assert info.value.context["rule_id"] == "known_fact_noop"
        assert "when_filter" in str(info.value)
        assert dump_tables(db) == before
        # The stores are not wedged: a normal pass still works afterwards.
        reports = (await c.consolidate(now=NOW)).passes
        assert sum(len(r.deltas) for r in reports) == 20


async def test_runaway_filter_hits_the_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(filters, "TIME_LIMIT_S", 0.5)
    db = tmp_path / "m.db"
    async with Consolidator.open(db, [DEDUP]) as c:
        await seed(c)
        before = dump_tables(db)
        started = time.perf_counter()
        with pytest.raises(ConsolidationRuleError, match="interrupted"):
            await c.consolidate(now=NOW, legacy=LegacyFilter(RUNAWAY, rule_id="*"))
        elapsed = time.perf_counter() - started
        assert 0.5 <= elapsed < 5.0
        assert dump_tables(db) == before


def _provenance(episode_id: str) -> dict[str, Any]:
    """The mandatory provenance of a hand-made delta for (alice, rag)."""
    return {
        "user": "alice",
        "agent": "rag",
        "source_episode_ids": [episode_id],
        "promotion_ts": NOW,
        "rule_id": "manual",
        "confidence": 0.8,
    }


def _add(subject: str, episode_id: str) -> AddDelta:
    fact = FactPayload(subject=subject, predicate="likes", object="tea")
    return AddDelta(fact=fact, **_provenance(episode_id))


async def test_delta_naming_an_unknown_fact_applies_nothing(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    async with SQLiteFactStore(db) as store:
        first = _add("alice", "e1")
        await store.apply_delta(first, pack_hash="p")
        mark = WatermarkAdvance(pack="p", rule_id="manual", partition=ALICE, last_seq=7)
        await store.apply_deltas([], watermarks=[mark])
        before = dump_tables(db)
        update = UpdateDelta(
            replaces=[first.new_fact_id, "fdoesnotexist"],
            fact=FactPayload(subject="alice", predicate="likes", object="coffee"),
            **_provenance("e3"),
        )
        advance = mark.model_copy(update={"last_seq": 9})
        with pytest.raises(FactConflictError) as info:
            await store.apply_deltas([_add("bob", "e2"), update], watermarks=[advance])
        assert info.value.context["fact_ids"] == ["fdoesnotexist"]
        assert info.value.context["index"] == 1
        assert "unknown fact" in str(info.value)
        assert dump_tables(db) == before
        assert await store.watermark("p", "manual", ALICE) == 7
        assert [f.id for f in await store.query(FactPattern())] == [first.new_fact_id]

        delete = DeleteDelta(replaces=["fdoesnotexist"], **_provenance("e4"))
        with pytest.raises(FactConflictError):
            await store.apply_delta(delete)
        assert dump_tables(db) == before


WEIGHTED = """\
ir_version: 1
pack: weighted
version: "1.0.0"
fields: {subject: string, predicate: string, object: string, weight: integer}
defaults: {cadence: {cron: "0 3 * * *"}, confidence: 0.8}
rules:
  - id: heavy
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}, weight: {ge: 2}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}
"""


async def test_metadata_of_the_wrong_declared_type_rejects_that_episode(tmp_path: Path) -> None:
    pack = tmp_path / "weighted.yaml"
    pack.write_text(WEIGHTED, encoding="utf-8")
    async with Consolidator.open(tmp_path / "m.db", [pack]) as c:
        await c.record(episode("ok1", 1, weight=3, **spo("alice", "likes", "tea")))
        await c.record(episode("bad1", 2, weight="three", **spo("alice", "likes", "jam")))
        await c.record(episode("bad2", 3, weight=2.5, **spo("alice", "likes", "rum")))
        await c.record(episode("bad3", 4, weight=True, **spo("alice", "likes", "gin")))
        await c.record(episode("ok2", 5, weight=2, **spo("alice", "likes", "tea2")))
        reports = (await c.consolidate(now=NOW)).passes
        assert [d.source_episode_ids for d in reports[0].deltas] == [["ok1"], ["ok2"]]
        rejected = {r.episode_id: (r.rule_id, r.reason) for r in reports[0].rejected}
        assert rejected == {
            "bad1": (None, "metadata: expected integer, got str"),
            "bad2": (None, "metadata: expected integer, got float"),
            "bad3": (None, "metadata: expected integer, got bool"),
        }
        stored = {r.id: (r.rule_id, r.reason) for r in await c.fact_store.rejections(ALICE)}
        assert stored == {
            eid: ("episode-metadata", reason) for eid, (_, reason) in rejected.items()
        }
        assert [f.object for f in await c.facts()] == ["tea", "tea2"]
        top = await c.memory.max_seq(ALICE)
        assert await c.fact_store.watermarks("weighted", ALICE) == {"heavy": top}


async def test_unvalidated_wrong_type_subject_is_rejected_by_the_runtime(tmp_path: Path) -> None:
    # The Episode model refuses a non-string subject; a writer that skipped validation
    # (model_construct) can still store one, and the runtime must reject that episode.
    with pytest.raises(ValueError, match="subject must be a string"):
        Episode(**{**episode("x", 0).model_dump(), "metadata": {"subject": 3}})
    good = episode("e1", 1, **spo("alice", "likes", "tea"))
    bad = Episode.model_construct(
        **{
            **episode("e2", 2).model_dump(),
            "metadata": {"subject": 3, "predicate": "likes", "object": "jam"},
        }
    )
    after = episode("e3", 3, **spo("alice", "likes", "coffee"))
    async with Consolidator.open(tmp_path / "m.db", [DEDUP]) as c:
        await c.memory.put_many([good, bad, after])
        reports = (await c.consolidate(now=NOW)).passes
        assert [(d.kind, d.source_episode_ids) for d in reports[0].deltas] == [
            ("add", ["e1"]),
            ("update", ["e3"]),
        ]
        assert [(r.episode_id, r.reason) for r in reports[0].rejected] == [
            ("e2", "metadata: expected string, got int")
        ]
        assert [(r.id, r.rule_id) for r in await c.fact_store.rejections()] == [
            ("e2", "episode-metadata")
        ]
