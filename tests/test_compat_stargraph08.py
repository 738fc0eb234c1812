"""What code written against stargraph 0.8's memory tier (specifications 000 and 001, and
0.8's public API where they are silent) can rely on, with only the import paths renamed
(``stargraph.stores`` → ``stargraph_mem.stores``).

One test (or a few) per point; store tests run on SQLite and PostgreSQL (``backend``),
except ``consolidate(rule)``, which runs on SQLite files (its deltas are applied to both).
"""

from __future__ import annotations

import inspect
import math
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import Backend, raw_rows

from stargraph_mem.errors import (
    ConsolidationRuleError,
    DeltaValidationError,
    FactConflictError,
    MigrationNotSupported,
)
from stargraph_mem.salience import RuleBasedScorer, SalienceContext, SalienceScorer
from stargraph_mem.stores import (
    AddDelta,
    ConsolidationRule,
    Episode,
    FactPattern,
    FathomAdapter,
    MigrationPlan,
    SQLiteFactStore,
    SQLiteMemoryStore,
    UpdateDelta,
)
from stargraph_mem.stores._delta import _resolve_replaces, _validate_delta_provenance
from stargraph_mem.stores.fact import ProvenanceAdapter

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
SCOPE = {"user": "alice", "session": "s1", "agent": "rag"}


def episode(eid: str, minutes: int = 0, metadata: dict[str, Any] | None = None) -> Episode:
    return Episode(
        id=eid,
        content=f"content of {eid}",
        timestamp=T0 + timedelta(minutes=minutes),
        source_node="node",
        metadata=metadata or {},
        **SCOPE,
    )


def triple(subject: str, predicate: str, obj: str) -> dict[str, str]:
    return {"subject": subject, "predicate": predicate, "object": obj}


async def sqlite_memory(tmp_path: Path, *episodes: Episode) -> SQLiteMemoryStore:
    store = SQLiteMemoryStore(path=tmp_path / "memory.db")
    await store.bootstrap()
    for item in episodes:
        await store.put(item, **SCOPE)
    return store


def add_delta(eid: str, statement: dict[str, str], **extra: Any) -> dict[str, Any]:
    """An add as 0.8's callers write it: no user/agent (taken from the source episode)."""
    return {
        "kind": "add",
        "fact_payload": statement,
        "source_episode_ids": [eid],
        "promotion_ts": T0 + timedelta(hours=1),
        "rule_id": "r",
        "confidence": 0.9,
        **extra,
    }


# --- salience: score(memory=..., context=...) and 0.8's context keywords ------------------


async def test_score_takes_the_specifications_keywords() -> None:
    scorer = RuleBasedScorer()
    context = SalienceContext(now=T0, last_accessed=T0 - timedelta(hours=1))
    by_keyword = await scorer.score(memory=episode("e1"), context=context)
    assert by_keyword == await scorer.score(episode("e1"), context)
    assert 0.0 < by_keyword <= 1.0
    for signature in (inspect.signature(SalienceScorer.score), inspect.signature(scorer.score)):
        assert [p for p in signature.parameters if p != "self"] == ["memory", "context"]
    assert isinstance(scorer, SalienceScorer)


async def test_salience_context_takes_stargraph_08s_keywords() -> None:
    accessed = datetime.now(UTC) - timedelta(hours=2)
    context = SalienceContext(
        last_access_ts=accessed,
        access_count=4,
        rule_match_count=5,
        decay_tau_seconds=3600.0,
        weights={"recency": 1.0, "relevance": 0.0, "importance": 0.0},
    )
    assert context.last_accessed == accessed  # now defaults to the current time
    assert (context.tau_seconds, context.rule_match) == (3600.0, math.tanh(1.0))
    score = await RuleBasedScorer().score(memory=episode("e1"), context=context)
    older = SalienceContext(
        last_access_ts=accessed - timedelta(hours=3), access_count=4, rule_match_count=5
    )
    assert 0.0 < await RuleBasedScorer().score(memory=episode("e1"), context=older) < 1.0
    assert 0.0 < score < 1.0
    with pytest.raises(ValueError, match="disagree"):
        SalienceContext(now=T0, last_accessed=T0, last_access_ts=T0 - timedelta(days=1))
    with pytest.raises(ValueError, match="unknown names"):
        SalienceContext(now=T0, weights={"novelty": 1.0})


# --- consolidate(rule): runs the rule, returns deltas a fact store can apply again --------


async def test_consolidate_runs_whatever_the_cadence(tmp_path: Path) -> None:
    every3 = ConsolidationRule(id="every3", cadence={"every": 3}, when_filter="", then_emits=[])
    store = await sqlite_memory(tmp_path, episode("e1", 0, triple("alice", "likes", "tea")))
    await store.put(episode("e2", 1, triple("bob", "likes", "jam")), **SCOPE)
    assert [d.source_episode_ids for d in await store.consolidate(every3)] == [["e1"], ["e2"]]
    nightly = ConsolidationRule(id="nightly", cadence={"cron": "0 3 * * *"}, when_filter="")
    await store.put(episode("e3", 2, triple("carol", "likes", "figs")), **SCOPE)
    assert [d.kind for d in await store.consolidate(nightly)] == ["add"] * 3
    await store.put(episode("e4", 3, triple("dan", "likes", "rye")), **SCOPE)
    assert [d.source_episode_ids for d in await store.consolidate(nightly)] == [["e4"]]
    assert await store.consolidate(nightly) == []  # nothing new
    assert await store.consolidate(every3, due_only=True) == []  # 2 pending < 3


async def test_applying_the_returned_deltas_again_is_a_no_op(
    tmp_path: Path, backend: Backend
) -> None:
    store = await sqlite_memory(
        tmp_path,
        episode("e1", 0, triple("alice", "likes", "tea")),
        episode("e2", 1, triple("alice", "likes", "coffee")),
        episode("e3", 2, {"intent": "noop"}),
    )
    deltas = await store.consolidate(ConsolidationRule(id="r", when_filter=""))
    assert [d.kind for d in deltas] == ["add", "update", "noop"]
    async with SQLiteFactStore(path=store.path) as same:
        audit = await same.audit_rows()
        for delta in deltas:  # what the specification's callers do with the list
            result = await same.apply_delta(delta)
            assert (result.applied, result.skipped) == (0, 1)
        assert await same.audit_rows() == audit
    for item in ("e1", "e2", "e3"):  # another database: the same facts, applied once
        await backend.memory.put(
            next(e for e in await store.recent("alice", limit=3) if e.id == item), **SCOPE
        )
    for _ in range(2):
        for delta in deltas:
            await backend.facts.apply_delta(delta)
    assert len(await backend.facts.audit_rows()) == 3
    assert [f.object for f in await backend.facts.query(FactPattern(user="alice"))] == ["coffee"]


async def test_a_repeat_replaces_the_fact_the_earlier_episode_made(tmp_path: Path) -> None:
    store = await sqlite_memory(
        tmp_path,
        episode("e1", 0, triple("alice", "likes", "tea")),
        episode("e2", 1, triple("alice", "likes", "coffee")),
    )
    first, repeat = await store.consolidate(ConsolidationRule(id="r", when_filter=""))
    assert isinstance(first, AddDelta) and isinstance(repeat, UpdateDelta)
    # the specification's "prior episode id", as the id of the fact episode e1 made
    assert repeat.replaces == [first.new_fact_id]
    assert "e1" in repeat.source_episode_ids
    async with SQLiteFactStore(path=store.path) as facts:
        assert (await facts.get(first.new_fact_id)).lineage[0]["source_episode_ids"] == ["e1"]


async def test_replaces_may_name_the_prior_episode(backend: Backend) -> None:
    for item in (
        episode("e1", 0, triple("alice", "likes", "tea")),
        episode("e2", 1, triple("alice", "likes", "coffee")),
        episode("e3", 2, triple("alice", "likes", "milk")),
    ):
        await backend.memory.put(item, **SCOPE)
    stored = add_delta("e1", triple("alice", "likes", "tea"))
    await backend.facts.apply_delta(stored)  # e1's fact exists before the batch
    update = {**add_delta("e2", triple("alice", "likes", "coffee")), "kind": "update"}
    again = {**add_delta("e3", triple("alice", "likes", "milk")), "kind": "update"}
    batch = [update | {"replaces": ["e1"]}, again | {"replaces": ["e2"]}]  # e2's: same batch
    result = await backend.facts.apply_deltas(batch)
    assert (result.updated, len(result.closed_fact_ids)) == (2, 2)
    (current,) = await backend.facts.query(FactPattern(user="alice"))
    assert (current.object, current.lineage[0]["source_episode_ids"]) == ("milk", ["e3"])
    audit = await backend.facts.audit_rows()
    assert [row.delta.model_dump().get("replaces") for row in audit[1:]] == [["e1"], ["e2"]]
    assert (await backend.facts.apply_deltas(batch)).skipped == 2  # again: a no-op
    with pytest.raises(FactConflictError, match="unknown fact"):
        await backend.facts.apply_delta(update | {"replaces": ["e9"], "confidence": 0.5})
    twice = [add_delta("e1", triple("alice", x, "y"), rule_id=x) for x in ("owns", "wants")]
    await backend.facts.apply_deltas(twice)  # two current facts made from e1
    with pytest.raises(FactConflictError, match="episode 'e1' made 2 current facts"):
        await backend.facts.apply_delta(update | {"replaces": ["e1"], "confidence": 0.4})


# --- names the specification gives: FathomAdapter, _validate_delta_provenance, the index --


async def test_fathom_adapter_is_the_seam_facts_go_through(backend: Backend) -> None:
    assert FathomAdapter is ProvenanceAdapter
    await backend.memory.put(episode("e1", 0, triple("alice", "likes", "tea")), **SCOPE)
    result = await backend.facts.apply_delta(add_delta("e1", triple("alice", "likes", "tea")))
    (fact,) = await backend.facts.query(FactPattern(user="alice"))
    adapter = FathomAdapter()
    bundle = await backend.facts.lineage(fact.id)
    assert adapter.assert_with_provenance(fact, bundle) == bundle
    assert adapter.take_staged() == [(fact, bundle)]
    assert result.created_fact_ids == (fact.id,)


def test_validate_delta_provenance_is_where_the_specification_says() -> None:
    good = add_delta("e1", triple("alice", "likes", "tea"))
    _validate_delta_provenance(good)
    _validate_delta_provenance(AddDelta.model_validate(good))
    cases = {
        "rule_id": ({**good, "rule_id": ""}, "MemoryDelta.rule_id must be non-empty"),
        "source_episode_ids": (
            {**good, "source_episode_ids": []},
            "MemoryDelta.source_episode_ids must be non-empty",
        ),
        "confidence": ({**good, "confidence": math.nan}, "MemoryDelta.confidence must be finite"),
        "replaces": (
            {**good, "kind": "update", "replaces": []},
            "MemoryDelta.replaces must be non-empty for update/delete",
        ),
    }
    for field, (delta, message) in cases.items():
        with pytest.raises(ConsolidationRuleError) as info:
            _validate_delta_provenance(delta)
        assert str(info.value) == message
        assert isinstance(info.value, ValueError | DeltaValidationError)
        assert info.value.context["field"] == field
        assert info.value.context["delta_type"] == delta["kind"]
        assert info.value.context["violation"] == message.removeprefix("MemoryDelta.")


async def test_resolve_replaces_returns_the_facts_that_exist(backend: Backend) -> None:
    await backend.memory.put(episode("e1", 0, triple("alice", "likes", "tea")), **SCOPE)
    await backend.facts.apply_delta(add_delta("e1", triple("alice", "likes", "tea")))
    (fact,) = await backend.facts.query(FactPattern())
    found = await _resolve_replaces(backend.facts, ["nope", fact.id, fact.id])
    assert [f.id for f in found] == [fact.id]


async def test_the_scope_index_has_the_specifications_name(backend: Backend) -> None:
    if backend.name == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'episodes'"
    else:
        sql = "SELECT indexname FROM pg_indexes WHERE tablename = 'episodes' AND schemaname = "
        sql += "current_schema()"
    names = {row[0] for row in await raw_rows(backend.memory, sql)}
    assert "idx_episodes_scope_ts" in names
    assert "episodes_scope_ts" not in names


async def test_an_older_sqlite_file_gets_the_index_name_on_open(tmp_path: Path) -> None:
    store = await sqlite_memory(tmp_path, episode("e1"))
    await store.close()
    with sqlite3.connect(store.path) as db:  # as files made before the rename are
        db.execute("DROP INDEX idx_episodes_scope_ts")
        db.execute("CREATE INDEX episodes_scope_ts ON episodes (scope_key, ts_us, seq)")
    async with SQLiteMemoryStore(path=store.path) as again:
        assert [e.id for e in await again.recent("alice", limit=5)] == ["e1"]
    with sqlite3.connect(store.path) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "idx_episodes_scope_ts" in names and "episodes_scope_ts" not in names


# --- intents: any string is stored; one that is not noop/delete/update adds ---------------


async def test_an_unknown_intent_is_stored_and_adds(tmp_path: Path, backend: Backend) -> None:
    odd = episode("e1", 0, {**triple("alice", "likes", "tea"), "intent": "upsert"})
    await backend.memory.put(odd, **SCOPE)
    assert [e.metadata["intent"] for e in await backend.memory.recent("alice", limit=1)] == [
        "upsert"
    ]
    store = await sqlite_memory(tmp_path, odd)
    (delta,) = await store.consolidate(ConsolidationRule(id="r", when_filter=""))
    assert (delta.kind, delta.source_episode_ids) == ("add", ["e1"])
    with pytest.raises(ValueError, match=r"metadata\.intent must be a string"):
        episode("e2", 0, {"intent": 3})


# --- a malformed ConsolidationRule --------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"id": "r", "cadence": {"every": 0}}, "cadence.every"),
        ({"id": "r", "cadence": {"cron": "at three"}}, "cadence.cron"),
        ({"id": "not an id"}, "id"),
        ({"id": "r", "when_filter": 3}, "when_filter"),
        ({"id": "r", "then_emits": ["no spaces allowed"]}, "then_emits.0"),
        ({"id": "r", "cadences": {"every": 1}}, "cadences"),
    ],
)
def test_a_malformed_rule_raises_consolidation_rule_error(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConsolidationRuleError) as by_keywords:
        ConsolidationRule(**fields)
    with pytest.raises(ConsolidationRuleError) as validated:
        ConsolidationRule.model_validate(fields)
    for info in (by_keywords, validated):
        assert isinstance(info.value, ValueError)
        assert info.value.context["field"] == field
        assert str(info.value).startswith(f"malformed ConsolidationRule: {field}: ")


def test_cadence_reads_like_stargraph_08s_dict() -> None:
    rule = ConsolidationRule(id="r", cadence={"every": 100}, when_filter="", then_emits=["facts"])
    assert rule.cadence["every"] == 100
    assert rule.cadence.get("cron") is None
    assert rule.cadence == {"every": 100}
    assert dict(rule.cadence) == {"every": 100}
    nightly = ConsolidationRule(id="n", cadence={"cron": "0 3 * * *"}, when_filter="")
    assert ("cron" in nightly.cadence, nightly.cadence["cron"]) == (True, "0 3 * * *")
    assert ConsolidationRule(id="d").cadence == {"cron": "0 3 * * *"}  # sleep cycle
    with pytest.raises(KeyError):
        rule.cadence["cron"]


# --- facts: lineage, pinned_at, pin/unpin on the store -------------------------------------


async def test_facts_carry_lineage_and_pinned_at(backend: Backend) -> None:
    await backend.memory.put(episode("e1", 0, triple("alice", "likes", "tea")), **SCOPE)
    await backend.facts.apply_delta(add_delta("e1", triple("alice", "likes", "tea")))
    (fact,) = await backend.facts.query(FactPattern(user="alice"))
    (entry,) = fact.lineage
    assert (entry["rule_id"], entry["source_episode_ids"]) == ("r", ["e1"])
    assert datetime.fromisoformat(entry["promotion_ts"]) == T0 + timedelta(hours=1)
    assert fact.pinned_at is None
    assert await backend.facts.pin(fact) is True  # the Fact itself, as in 0.8
    (pinned,) = await backend.facts.query(FactPattern(user="alice"))
    assert pinned.pinned_at is not None and pinned == fact
    assert (await backend.facts.get(fact.id)).pinned_at == pinned.pinned_at
    assert await backend.facts.unpin(fact.id) is True
    assert (await backend.facts.get(fact.id)).pinned_at is None
    assert (await backend.facts.as_of(T0 + timedelta(days=1)))[0].lineage == fact.lineage


# --- migrations: 0.8's MigrationPlan form, and what migrate refuses ------------------------


async def test_migration_plans_in_stargraph_08s_form(backend: Backend) -> None:
    column = {"op": "add_column", "table": "episodes", "column": "mood", "nullable": True}
    plan = MigrationPlan(target_version=2, operations=[column])
    await backend.memory.migrate(plan)
    await backend.memory.migrate(plan)  # applied already: nothing to do
    await backend.memory.migrate(MigrationPlan(target_version=3, operations=[]))
    refused = {
        "narrow": ({"op": "alter_column_type", "table": "episodes", "column": "mood"}, "v1"),
        "rename": ({"op": "rename_column", "table": "episodes", "from": "a", "to": "b"}, "v1"),
        "drop": ({"op": "drop_column", "table": "episodes", "column": "mood"}, "v1"),
        "not null": ({"op": "add_column", "table": "episodes", "column": "x"}, "non"),
    }
    for op, reason in refused.values():
        with pytest.raises(MigrationNotSupported) as info:
            await backend.memory.migrate(MigrationPlan(target_version=4, operations=[op]))
        context = info.value.context
        assert (context["store"], context["operation"]) == ("memory", op["op"])
        expected = "v1-add-column-only" if reason == "v1" else "non-nullable-add"
        assert context["reason"] == expected
    with pytest.raises(MigrationNotSupported, match="drop_column"):
        await backend.facts.migrate(
            MigrationPlan(target_version=2, operations=[{"op": "drop_column", "table": "facts"}])
        )


# --- delta validation: 0.8's error fields for missing provenance ----------------------------


async def test_apply_delta_names_the_missing_provenance(backend: Backend) -> None:
    await backend.memory.put(episode("e1", 0, triple("alice", "likes", "tea")), **SCOPE)
    bad = add_delta("e1", triple("alice", "likes", "tea"))
    del bad["source_episode_ids"]
    with pytest.raises(ConsolidationRuleError) as info:
        await backend.facts.apply_delta(bad)
    assert isinstance(info.value, DeltaValidationError) and isinstance(info.value, ValueError)
    context = info.value.context
    assert (context["rule_id"], context["delta_type"], context["field"]) == (
        "r",
        "add",
        "source_episode_ids",
    )
    assert context["violation"] == "source_episode_ids: Field required"
    assert await backend.facts.audit_rows() == []


# --- health: stargraph 0.8's StoreHealth fields --------------------------------------------


async def test_health_reads_like_stargraph_08s(backend: Backend) -> None:
    await backend.memory.put(episode("e1"), **SCOPE)
    for store, count in ((backend.memory, 1), (backend.facts, None)):
        health = await store.health()
        assert health.ok and health.version >= 1 and health.lock_state == "free"
        assert (health.node_count, health.embedding_hash) == (None, None)
        assert isinstance(health.fs_type, str) and health.fs_type
        if count is not None:
            assert health.fragment_count == count
    if backend.name == "postgresql":
        assert (await backend.memory.health()).fs_type == "unknown"
