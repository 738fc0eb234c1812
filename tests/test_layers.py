"""Specification 004's layers, memory types and source trust, on both backends: rules set
them (emit, pack defaults, inherited on update), episodes' trust reaches the facts made
from them, the stores keep and filter them, recall and search take a ``mode``, the shipped
``memory_layers`` pack promotes working facts, and older databases migrate with defaults."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import Backend, NewLocation, open_backend, raw_execute, raw_rows
from packs_helpers import PARTITION, T0, compile_ok, engine_fact, run_pass, triple
from schema_helpers import (
    PG_UNDO_LAYERS,
    undo_version_7,
)

from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.errors import IRError, RecallError, SearchError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.layers import episode_trust
from stargraph_mem.stores import (
    AddDelta,
    FactPattern,
    FactPayload,
    Partition,
    SQLiteFactStore,
    UpdateDelta,
)
from stargraph_mem.stores.postgres import PostgresDatabase, PostgresFactStore
from stargraph_mem.stores.postgres.schema import LEDGER_TABLE
from stargraph_mem.stores.postgres.schema import SCHEMA_VERSION as PG_SCHEMA_VERSION

RULES = Path(__file__).parent.parent / "rules"
NOW = datetime(2026, 3, 2, 3, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _making(deltas: Sequence[object]) -> list[AddDelta | UpdateDelta]:
    """``deltas``, each checked to make a fact (an add or an update)."""
    made = [d for d in deltas if isinstance(d, AddDelta | UpdateDelta)]
    assert len(made) == len(deltas)
    return made


def _add(obj: str, **placed: Any) -> AddDelta:
    return AddDelta(
        user="alice",
        agent="a1",
        source_episode_ids=["e1"],
        promotion_ts=T0,
        rule_id="r1",
        confidence=0.8,
        fact=FactPayload(subject="alice", predicate="knows", object=obj),
        **placed,
    )


# --- rules ---------------------------------------------------------------------------------

PLACED = """\
ir_version: 1
pack: placed
version: "1"
fields: {subject: string, predicate: string, object: string, kind: string}
defaults: {layer: semantic}
rules:
  - id: how_to
    priority: 10
    when:
      - episode: {subject: {bind: s}, predicate: how_to, object: {bind: o}}
    emit:
      kind: add
      subject: "{s}"
      predicate: how_to
      object: "{o}"
      layer: procedural
      memory_type: procedure
  - id: typed
    priority: 5
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}, kind: {bind: k}}
    emit:
      kind: add
      subject: "{s}"
      predicate: "{p}"
      object: "{o}"
      memory_type: "{k}"
"""


def test_rules_place_facts_by_emit_template_and_pack_default() -> None:
    compiled = compile_ok(PLACED)
    episodes = [
        triple(1, "alice", "how_to", "deploy"),
        triple(2, "alice", "said", "hello", kind="narrative"),
        triple(3, "alice", "said", "bye", kind="opinion"),
    ]
    out = run_pass(compiled, episodes)
    placed = [(d.fact.object, d.layer, d.memory_type) for d in _making(out.deltas)]
    assert placed == [("deploy", "procedural", "procedure"), ("hello", "semantic", "narrative")]
    (rejected,) = out.rejected
    assert rejected.episode_id == "e3"
    assert "memory_type 'opinion' is not one of fact, procedure, narrative" in rejected.reason


def test_an_unknown_layer_is_an_error_naming_where() -> None:
    text = PLACED.replace("layer: procedural", "layer: attic")
    with pytest.raises(IRError) as caught:
        compile_ok(text, "rules/x.yaml")
    assert str(caught.value) == (
        "rules/x.yaml:16:7: rules[0].emit.layer: unknown layer 'attic' "
        "(one of working, episodic, semantic, procedural)"
    )


MATCH = """\
ir_version: 1
pack: layered
version: "1"
rules:
  - id: keep_semantic
    cadence: {cron: "0 3 * * *"}
    when:
      - fact:
          as: f
          subject: {bind: s}
          predicate: {bind: p}
          object: {bind: o}
          layer: semantic
          memory_type: {in: [fact, procedure]}
          trust: {lt: 1.0}
    emit:
      kind: update
      subject: "{s}"
      predicate: "{p}"
      object: "{o}"
      replaces: [f]
      sources: [f]
"""


def test_fact_patterns_see_layer_type_and_trust_and_updates_inherit_them() -> None:
    base = engine_fact("f1", ("s", "p", "o"))
    facts = [
        replace(base, layer="semantic", trust=0.5),
        replace(base, id="f2", object="o2", layer="semantic", trust=1.0),
        replace(base, id="f3", object="o3", layer="episodic", trust=0.5),
        replace(base, id="f4", object="o4", layer="semantic", memory_type="narrative", trust=0.5),
    ]
    out = run_pass(compile_ok(MATCH), [], facts, now=T0 + 2 * HOUR)
    (delta,) = out.deltas
    assert isinstance(delta, UpdateDelta)
    assert delta.replaces == ["f1"]
    assert (delta.layer, delta.memory_type, delta.trust) == ("semantic", None, 0.5)
    assert out.facts_after is not None
    made = [f for f in out.facts_after if f.id == delta.new_fact_id]
    assert [(f.layer, f.memory_type, f.trust) for f in made] == [("semantic", "fact", 0.5)]


def test_episode_trust_comes_from_metadata_with_the_specifications_defaults() -> None:
    assert episode_trust({}) == 1.0
    assert episode_trust({"source": "human"}) == 1.0
    assert episode_trust({"source": "ai"}) == 0.7
    assert episode_trust({"source": "ingest"}) == 0.5
    assert episode_trust({"source": "ai", "trust": 0.9}) == 0.9
    assert episode_trust({"source": "camera"}) == 1.0
    for bad in ({"trust": 2}, {"trust": "high"}, {"trust": True}, {"source": 3}):
        with pytest.raises(ValueError, match=r"metadata\.(trust|source)"):
            Episode(
                id="e1",
                content="x",
                timestamp=T0,
                user="u",
                session="s",
                agent="a",
                metadata=bad,
            )


def test_facts_made_from_episodes_take_their_least_trust() -> None:
    compiled = compile_file(RULES / "default.yaml")
    episodes = [
        triple(1, "alice", "likes", "tea", source="ai"),
        triple(2, "bob", "likes", "jazz", source="ingest"),
        triple(3, "carol", "likes", "gin"),
    ]
    out = run_pass(compiled, episodes)
    assert [(d.fact.subject, d.trust) for d in _making(out.deltas)] == [
        ("alice", 0.7),
        ("bob", 0.5),
        ("carol", None),
    ]
    assert PARTITION.user == "u"


# --- stores --------------------------------------------------------------------------------


async def test_stores_keep_layer_type_and_trust_and_filter_by_them(backend: Backend) -> None:

    deltas = [
        _add("jwt", layer="semantic", trust=0.7),
        _add("deploy", layer="procedural", memory_type="procedure"),
        _add("standup", memory_type="narrative"),
        _add("tea"),
    ]
    await backend.facts.apply_deltas(deltas)
    facts = {f.object: f for f in await backend.facts.query(FactPattern())}
    assert {o: (f.layer, f.memory_type, f.trust) for o, f in facts.items()} == {
        "jwt": ("semantic", "fact", 0.7),
        "deploy": ("procedural", "procedure", 1.0),
        "standup": ("episodic", "narrative", 1.0),
        "tea": ("episodic", "fact", 1.0),
    }
    semantic = await backend.facts.query(FactPattern(layer="semantic"))
    assert [f.object for f in semantic] == ["jwt"]
    rules = await backend.facts.query(FactPattern(memory_type=["fact", "procedure"]))
    assert sorted(f.object for f in rules) == ["deploy", "jwt", "tea"]
    engine = await backend.facts.current_facts(Partition("alice", "a1"))
    assert sorted((f.object, f.layer, f.memory_type, f.trust) for f in engine) == [
        ("deploy", "procedural", "procedure", 1.0),
        ("jwt", "semantic", "fact", 0.7),
        ("standup", "episodic", "narrative", 1.0),
        ("tea", "episodic", "fact", 1.0),
    ]
    only = await backend.facts.search("", user="alice", agent="a1", mode="facts_only")
    assert sorted(h.fact.object for h in only) == ["jwt", "tea"]
    plus = await backend.facts.search("", user="alice", agent="a1", mode="facts_plus_rules")
    assert sorted(h.fact.object for h in plus) == ["deploy", "jwt", "tea"]
    every = await backend.facts.search("", user="alice", agent="a1")
    assert len(every) == 4
    with pytest.raises(SearchError, match="unknown recall mode 'facts'"):
        await backend.facts.search("", mode="facts")  # type: ignore[arg-type]


async def test_recall_modes_and_trust_through_the_consolidator(new_location: NewLocation) -> None:
    location = new_location()
    packs = [compile_file(RULES / "default.yaml")]
    async with Consolidator(location, packs, clock=lambda: NOW) as mem:
        for k, (who, obj, source) in enumerate([("alice", "tea", "ai"), ("bob", "jazz", "human")]):
            await mem.record(
                Episode(
                    id=f"e{k}",
                    content=f"{who} likes {obj}",
                    timestamp=NOW - HOUR + k * timedelta(minutes=1),
                    user="alice",
                    session="s1",
                    agent="a1",
                    metadata={
                        "subject": who,
                        "predicate": "likes",
                        "object": obj,
                        "source": source,
                    },
                )
            )
        await mem.consolidate(now=NOW)
        facts = {f.object: f for f in await mem.facts()}
        assert {o: f.trust for o, f in facts.items()} == {"tea": 0.7, "jazz": 1.0}
        full = await mem.recall("alice likes tea", user="alice", agent="a1", touch=False)
        assert {h.kind for h in full.hits} == {"fact", "episode"}
        only = await mem.recall(
            "alice likes tea", user="alice", agent="a1", touch=False, mode="facts_only"
        )
        assert only.hits and {h.kind for h in only.hits} == {"fact"}
        hits = await mem.search("tea", user="alice", agent="a1", mode="facts_only", touch=False)
        assert [h.fact.object for h in hits] == ["tea"]
        with pytest.raises(RecallError, match="unknown recall mode"):
            await mem.recall("tea", user="alice", agent="a1", mode="all")  # type: ignore[arg-type]


async def test_the_memory_layers_pack_promotes_working_facts(new_location: NewLocation) -> None:
    packs = [compile_file(RULES / "memory_layers.yaml")]
    start = NOW - timedelta(minutes=10)
    async with Consolidator(new_location(), packs, clock=lambda: NOW) as mem:
        read, young = _add("report", layer="working"), _add("mail", layer="working")
        read = read.model_copy(update={"promotion_ts": start})
        young = young.model_copy(update={"promotion_ts": start})
        await mem.fact_store.apply_deltas([read, young])
        await mem.record_access([read.new_fact_id], at=start + timedelta(minutes=1))
        await mem.record_access([read.new_fact_id], at=start + timedelta(minutes=2))
        await mem.consolidate(now=NOW)
        assert {f.object: f.layer for f in await mem.facts()} == {
            "report": "episodic",
            "mail": "working",
        }
        await mem.consolidate(now=NOW + timedelta(minutes=20))  # 30 minutes old
        assert {f.object: f.layer for f in await mem.facts()} == {
            "report": "episodic",
            "mail": "episodic",
        }


# --- migrations ----------------------------------------------------------------------------


async def test_a_version_6_sqlite_file_migrates_to_episodic_facts_of_full_trust(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    async with SQLiteFactStore(path) as store:
        await store.apply_deltas([_add("tea"), _add("gin")])
    with closing(sqlite3.connect(path)) as db, db:
        undo_version_7(db)
        db.execute("UPDATE fact_store_meta SET value = '6' WHERE key = 'schema_version'")
    async with SQLiteFactStore(path) as store:
        assert (await store.health()).schema_version == 7
        facts = await store.query(FactPattern())
        assert {(f.object, f.layer, f.memory_type, f.trust) for f in facts} == {
            ("tea", "episodic", "fact", 1.0),
            ("gin", "episodic", "fact", 1.0),
        }
        await store.apply_deltas([_add("jwt", layer="semantic")])
        assert [f.object for f in await store.query(FactPattern(layer="semantic"))] == ["jwt"]


async def test_a_postgresql_schema_before_layers_migrates(tmp_path: Path) -> None:
    async with open_backend("postgresql", tmp_path) as backend:
        store = backend.facts
        await store.apply_deltas([_add("tea")])
        for statement in PG_UNDO_LAYERS:
            await raw_execute(store, statement, ())
        assert isinstance(store, PostgresFactStore)
        before = await raw_rows(store, f"SELECT max(version) FROM {LEDGER_TABLE}")
        assert before[0][0] == PG_SCHEMA_VERSION - 1
        async with PostgresDatabase(store.database.url) as again:
            assert (await again.health()).schema_version == PG_SCHEMA_VERSION
            (fact,) = await again.facts.query(FactPattern())
            assert (fact.layer, fact.memory_type, fact.trust) == ("episodic", "fact", 1.0)
