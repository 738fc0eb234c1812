"""Fact stores (SQLite and PostgreSQL): delta semantics, history, provenance, audit,
watermarks, atomicity; and the SQLite file's own concerns (health, migrations, checkpoints)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from backends import BACKENDS, AnyFactStore, open_backend, raw_rows, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_helpers import undo_version_4

from stargraph_mem.errors import (
    CorruptRowError,
    DeltaValidationError,
    FactConflictError,
    FactNotFoundError,
    StoreError,
)
from stargraph_mem.stores import (
    AddDelta,
    DeleteDelta,
    Episode,
    Fact,
    FactPattern,
    FactPayload,
    FactStore,
    NoopDelta,
    Partition,
    ProvenanceAdapter,
    ProvenanceBundle,
    Rejection,
    SQLiteFactStore,
    SQLiteMemoryStore,
    UpdateDelta,
    WatermarkAdvance,
)
from stargraph_mem.stores.fact import MAX_REASON_CHARS, clean_pairs, sanitize_bundle, trusted
from stargraph_mem.stores.sqlite_fact import CHUNK, SCHEMA_VERSION

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)
RECORDED = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
ALICE = Partition("alice", "a1")
Delta = AddDelta | UpdateDelta | DeleteDelta | NoopDelta


def common(ts: datetime, user: str, src: str, rule: str = "r1", **extra: Any) -> dict[str, Any]:
    """The provenance fields every delta carries."""
    fields: dict[str, Any] = {
        "user": user,
        "agent": "a1",
        "source_episode_ids": [src],
        "promotion_ts": ts,
        "rule_id": rule,
        "confidence": 0.8,
    }
    return fields | extra


def add(
    obj: str, *, ts: datetime = T0, user: str = "alice", src: str = "e1", **kw: Any
) -> AddDelta:
    payload = FactPayload(subject=kw.pop("subject", "alice"), predicate="drinks", object=obj)
    return AddDelta(fact=payload, **common(ts, user, src, **kw))


def update(
    replaces: list[str], obj: str, *, ts: datetime, user: str = "alice", src: str = "e2", **kw: Any
) -> UpdateDelta:
    payload = FactPayload(subject="alice", predicate="drinks", object=obj)
    return UpdateDelta(fact=payload, replaces=replaces, **common(ts, user, src, **kw))


def delete(
    replaces: list[str], *, ts: datetime, user: str = "alice", src: str = "e3"
) -> DeleteDelta:
    return DeleteDelta(replaces=replaces, **common(ts, user, src))


def noop(reinforces: list[str], *, ts: datetime, src: str = "e4") -> NoopDelta:
    return NoopDelta(reinforces=reinforces, **common(ts, "alice", src))


def dump(path: Path) -> str:
    """Every table's schema and rows (incl. the autoincrement counter), as SQL text."""
    with closing(sqlite3.connect(path)) as db:
        return "\n".join(db.iterdump())


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AnyFactStore]:
    """A fresh fact store of each backend in turn."""
    async with open_backend(request.param, tmp_path, clock=lambda: RECORDED) as opened:
        yield opened.facts


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteFactStore]:
    async with SQLiteFactStore(tmp_path / "memory.db", clock=lambda: RECORDED) as opened:
        yield opened


# --- add / update / delete / noop ----------------------------------------------------------


async def test_add_records_fact_and_lineage(store: AnyFactStore) -> None:
    delta = add("tea", reason="said so", bindings={"e": "e1", "n": 3, "tags": ["x", "y"]})
    result = await store.apply_deltas([delta], pack_hash="sha256:abc")
    fid = delta.new_fact_id
    assert (result.added, result.applied, result.created_fact_ids) == (1, 1, (fid,))
    fact = await store.get(fid)
    assert (fact.subject, fact.predicate, fact.object) == ("alice", "drinks", "tea")
    assert (fact.valid_from, fact.valid_until, fact.recorded_at) == (T0, None, RECORDED)
    assert (fact.rule_id, fact.delta_id, fact.confidence) == ("r1", delta.delta_id, 0.8)
    lineage = await store.lineage(fid)
    assert lineage == ProvenanceBundle(
        rule_id="r1",
        pack_hash="sha256:abc",
        delta_id=delta.delta_id,
        source_episode_ids=("e1",),
        promotion_ts=T0,
        confidence=0.8,
        reason="said so",
        bindings={"e": "e1", "n": 3, "tags": ["x", "y"]},
        predecessor_ids=(),
    )
    assert isinstance(store, FactStore)


async def test_update_closes_the_old_fact_and_keeps_it(store: AnyFactStore) -> None:
    first = add("tea")
    await store.apply_delta(first)
    second = update([first.new_fact_id], "coffee", ts=T0 + DAY)
    result = await store.apply_delta(second)
    assert (result.updated, result.closed_fact_ids) == (1, (first.new_fact_id,))
    old, new = await store.get(first.new_fact_id), await store.get(second.new_fact_id)
    assert (old.valid_until, old.superseded_by) == (T0 + DAY, new.id)
    assert (new.valid_from, new.valid_until) == (T0 + DAY, None)
    assert (await store.lineage(new.id)).predecessor_ids == (old.id,)
    current = await store.query(FactPattern(user="alice"))
    history = await store.query(FactPattern(user="alice", include_history=True))
    assert [f.id for f in current] == [new.id]
    assert [f.id for f in history] == [old.id, new.id]


async def test_delete_closes_without_successor(store: AnyFactStore) -> None:
    first = add("tea")
    gone = delete([first.new_fact_id], ts=T0 + DAY)
    result = await store.apply_deltas([first, gone])
    assert (result.added, result.deleted, result.created_fact_ids) == (1, 1, (first.new_fact_id,))
    fact = await store.get(first.new_fact_id)
    assert (fact.valid_until, fact.superseded_by) == (T0 + DAY, None)
    assert (await store.explain(fact.id)).closed_by == gone.delta_id
    assert await store.query(FactPattern()) == []


async def test_noop_writes_audit_and_reinforcements_only(store: AnyFactStore) -> None:
    first = add("tea")
    await store.apply_delta(first)
    before = await store.query(FactPattern(include_history=True))
    result = await store.apply_deltas([noop([first.new_fact_id], ts=T0 + 2 * DAY)])
    assert (result.noops, result.reinforced, result.created_fact_ids) == (1, 1, ())
    assert await store.query(FactPattern(include_history=True)) == before
    [engine] = await store.current_facts(ALICE)
    assert (engine.id, engine.valid_from_us, engine.source_episode_ids) == (
        first.new_fact_id,
        int(T0.timestamp() * 1e6),
        ("e1",),
    )
    assert engine.reinforced_at_us == int((T0 + 2 * DAY).timestamp() * 1e6)
    assert [row.kind for row in await store.audit_rows()] == ["add", "noop"]


async def test_reinforced_at_never_precedes_valid_from(store: AnyFactStore) -> None:
    first = add("tea", ts=T0 + DAY)
    await store.apply_deltas([first, noop([first.new_fact_id], ts=T0)])
    [engine] = await store.current_facts(ALICE)
    assert engine.reinforced_at_us == engine.valid_from_us


async def test_audit_has_one_row_per_delta_with_the_full_delta(store: AnyFactStore) -> None:
    first = add("tea")
    second = update([first.new_fact_id], "coffee", ts=T0 + DAY)
    deltas: list[Delta] = [first, second, noop([second.new_fact_id], ts=T0 + DAY)]
    deltas.append(delete([second.new_fact_id], ts=T0 + 2 * DAY))
    await store.apply_deltas(deltas, pack_hash="p1")
    rows = await store.audit_rows()
    assert [(r.seq, r.kind, r.delta) for r in rows] == [
        (i + 1, d.kind, d) for i, d in enumerate(deltas)
    ]
    assert {(r.pack_hash, r.applied_at, r.user, r.agent) for r in rows} == {
        ("p1", RECORDED, "alice", "a1")
    }
    bodies = await raw_rows(store, "SELECT delta_id, delta FROM audit ORDER BY seq")
    for delta_id, body in bodies:
        assert "d" + hashlib.sha256(body.encode()).hexdigest()[:31] == delta_id
    assert await store.audit_rows(Partition("bob", "a1")) == []
    assert len(await store.audit_rows(ALICE)) == 4


async def test_later_deltas_see_earlier_ones_in_the_same_batch(store: AnyFactStore) -> None:
    a = add("tea")
    b = update([a.new_fact_id], "coffee", ts=T0 + DAY)
    c = update([b.new_fact_id], "water", ts=T0 + 2 * DAY)
    result = await store.apply_deltas([a, b, c])
    assert result.created_fact_ids == (a.new_fact_id, b.new_fact_id, c.new_fact_id)
    assert result.closed_fact_ids == (a.new_fact_id, b.new_fact_id)
    assert [f.object for f in await store.query(FactPattern())] == ["water"]


async def test_batches_larger_than_a_chunk_resolve_across_chunks(store: AnyFactStore) -> None:
    adds = [add(f"o{n}", src=f"e{n}") for n in range(CHUNK + 5)]
    replace_first = update([adds[0].new_fact_id], "late", ts=T0 + DAY)
    result = await store.apply_deltas([*adds, replace_first])
    assert (result.added, result.updated) == (CHUNK + 5, 1)
    assert len(await store.current_facts(ALICE)) == CHUNK + 5


async def test_update_dated_before_its_predecessor_closes_at_valid_from(
    store: AnyFactStore,
) -> None:
    first = add("tea", ts=T0 + DAY)
    second = update([first.new_fact_id], "coffee", ts=T0)
    await store.apply_deltas([first, second])
    old = await store.get(first.new_fact_id)
    assert old.valid_until == old.valid_from == T0 + DAY
    assert [f.id for f in await store.as_of(T0 + 2 * DAY)] == [second.new_fact_id]


# --- reads ------------------------------------------------------------------------------------


async def test_as_of_answers_what_was_believed_at_each_instant(store: AnyFactStore) -> None:
    a = add("tea")
    b = update([a.new_fact_id], "coffee", ts=T0 + DAY)
    await store.apply_deltas([a, b, delete([b.new_fact_id], ts=T0 + 3 * DAY)])
    expected = {
        T0 - timedelta(microseconds=1): [],
        T0: ["tea"],
        T0 + DAY - timedelta(microseconds=1): ["tea"],
        T0 + DAY: ["coffee"],
        T0 + 2 * DAY: ["coffee"],
        T0 + 3 * DAY: [],
    }
    for instant, objects in expected.items():
        assert [f.object for f in await store.as_of(instant)] == objects, instant
    paris = timezone(timedelta(hours=1))
    assert [f.object for f in await store.as_of((T0 + DAY).astimezone(paris))] == ["coffee"]
    only_bob = FactPattern(user="bob")
    assert await store.as_of(T0, only_bob) == []


async def test_as_of_rejects_naive_datetimes(store: AnyFactStore) -> None:
    with pytest.raises(ValueError, match="naive"):
        await store.as_of(datetime(2026, 3, 1))


async def test_query_filters_scope_fields_confidence_and_limit(store: AnyFactStore) -> None:
    deltas = [
        add("tea", user="alice"),
        add("tea", user="alice2", src="e2"),
        add("tea", user="a_ice", src="e3"),
        add("juice", user="alice", subject="bob", ts=T0 + DAY, confidence=0.3),
    ]
    await store.apply_deltas(deltas)
    assert [f.user for f in await store.query(FactPattern(user="alice"))] == ["alice", "alice"]
    assert len(await store.query(FactPattern(agent="a1"))) == 4
    assert len(await store.query(FactPattern(user="alice", agent="a1"))) == 2
    assert [f.object for f in await store.query(FactPattern(subject="bob"))] == ["juice"]
    assert len(await store.query(FactPattern(object="tea", predicate="drinks"))) == 3
    assert len(await store.query(FactPattern(min_confidence=0.5))) == 3
    assert len(await store.query(FactPattern(limit=2))) == 2
    ordered = await store.query(FactPattern())
    assert [(f.valid_from, f.id) for f in ordered] == sorted((f.valid_from, f.id) for f in ordered)


async def test_unknown_ids_raise_fact_not_found(store: AnyFactStore) -> None:
    for call in (store.get, store.lineage, store.explain):
        with pytest.raises(FactNotFoundError, match="f-missing") as info:
            await call("f-missing")
        assert info.value.context["fact_id"] == "f-missing"


async def test_times_come_back_as_utc(store: AnyFactStore) -> None:
    tokyo = timezone(timedelta(hours=9))
    delta = add("tea", ts=T0.astimezone(tokyo))
    await store.apply_delta(delta)
    fact = await store.get(delta.new_fact_id)
    assert fact.valid_from == T0 and fact.valid_from.tzinfo == UTC
    assert (await store.lineage(fact.id)).promotion_ts.tzinfo == UTC


# --- explain ----------------------------------------------------------------------------------


async def test_explain_walks_the_chain_both_ways(store: AnyFactStore) -> None:
    a = add("tea")
    b = update([a.new_fact_id], "coffee", ts=T0 + DAY)
    c = update([b.new_fact_id], "water", ts=T0 + 2 * DAY)
    confirm = noop([b.new_fact_id], ts=T0 + DAY)
    await store.apply_deltas([a, b, confirm], pack_hash="p1")
    await store.apply_deltas([c], pack_hash="p2")
    first, middle, last = [await store.explain(d.new_fact_id) for d in (a, b, c)]
    assert [f.object for f in first.successors] == ["coffee", "water"]
    assert (first.predecessors, first.closed_by) == ((), b.delta_id)
    assert [f.object for f in middle.predecessors] == ["tea"]
    assert [f.object for f in middle.successors] == ["water"]
    assert [f.object for f in last.predecessors] == ["coffee", "tea"]
    assert (last.successors, last.closed_by) == ((), None)
    assert [r.delta_id for r in middle.audit] == [b.delta_id, confirm.delta_id, c.delta_id]
    assert (middle.rule_id, middle.pack_hash, middle.reason, middle.bindings) == (
        "r1",
        "p1",
        "",
        {},
    )
    assert last.pack_hash == "p2"


async def test_explain_audit_names_the_deleting_delta(store: AnyFactStore) -> None:
    a, b = add("tea"), add("coffee", src="e9")
    gone = delete([a.new_fact_id], ts=T0 + DAY)
    confirm = noop([a.new_fact_id], ts=T0)
    await store.apply_deltas([a, b, confirm])
    await store.apply_deltas([gone])
    explanation = await store.explain(a.new_fact_id)
    assert explanation.closed_by == gone.delta_id
    assert [(r.kind, r.delta_id) for r in explanation.audit] == [
        ("add", a.delta_id),
        ("noop", confirm.delta_id),
        ("delete", gone.delta_id),
    ]
    assert [r.delta_id for r in (await store.explain(b.new_fact_id)).audit] == [b.delta_id]


async def test_explain_follows_merges_back_to_every_predecessor(store: AnyFactStore) -> None:
    a, b = add("tea"), add("coffee", src="e9")
    merged = update([a.new_fact_id, b.new_fact_id], "tea and coffee", ts=T0 + DAY)
    again = update([merged.new_fact_id], "water", ts=T0 + 2 * DAY)
    await store.apply_deltas([a, b, merged, again])
    explanation = await store.explain(again.new_fact_id)
    assert [f.object for f in explanation.predecessors] == ["tea and coffee", "tea", "coffee"]


async def test_explain_reads_source_episodes_from_the_episode_store(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    episode = Episode(
        id="e1", content="I drink tea", timestamp=T0, user="alice", session="s1", agent="a1"
    )
    async with SQLiteMemoryStore(path) as memory:
        await memory.put(episode, user="alice", session="s1", agent="a1")
    async with SQLiteFactStore(path) as facts:
        delta = add("tea")
        delta = delta.model_copy(update={"source_episode_ids": ["e1", "e-gone"]})
        await facts.apply_delta(delta)
        explanation = await facts.explain(delta.new_fact_id)
        assert [e.model_dump() for e in explanation.source_episodes] == [
            {"id": "e1", "session": "s1", "timestamp": T0, "content": "I drink tea"},
            {"id": "e-gone", "session": None, "timestamp": None, "content": None},
        ]
        assert (await memory.health()).ok and (await facts.health()).ok


async def test_explain_without_an_episodes_table_degrades(store: AnyFactStore) -> None:
    delta = add("tea")
    await store.apply_delta(delta)
    [source] = (await store.explain(delta.new_fact_id)).source_episodes
    assert (source.id, source.content, source.timestamp) == ("e1", None, None)


# --- idempotence, watermarks, rejections ---------------------------------------------------


async def test_reapplying_a_batch_skips_every_delta(store: AnyFactStore) -> None:
    a = add("tea")
    batch: list[Delta] = [a, update([a.new_fact_id], "coffee", ts=T0 + DAY)]
    await store.apply_deltas(batch)
    before = await snapshot(store)
    again = await store.apply_deltas(batch)
    assert (again.skipped, again.applied, again.created_fact_ids) == (2, 0, ())
    assert await snapshot(store) == before
    twice = await store.apply_deltas([add("juice"), add("juice")])
    assert (twice.added, twice.skipped) == (1, 1)


async def test_reapplying_skips_every_kind_across_batches(store: AnyFactStore) -> None:
    a, b = add("tea"), add("coffee", src="e9")
    first: list[Delta] = [a, b]
    second: list[Delta] = [
        noop([a.new_fact_id], ts=T0),
        update([a.new_fact_id], "water", ts=T0 + DAY),
        delete([b.new_fact_id], ts=T0 + DAY),
    ]
    await store.apply_deltas(first)
    await store.apply_deltas(second)
    before = await snapshot(store)
    again = await store.apply_deltas([*second, *first])
    assert (again.skipped, again.applied) == (5, 0)
    assert await snapshot(store) == before


async def test_watermarks_advance_with_the_batch(store: AnyFactStore) -> None:
    advance = WatermarkAdvance(pack="p", rule_id="r1", partition=ALICE, last_seq=5)
    other = WatermarkAdvance(pack="p", rule_id="r2", partition=ALICE, last_seq=2)
    result = await store.apply_deltas([add("tea")], watermarks=[advance, other])
    assert result.watermarks == (advance, other)
    assert await store.watermark("p", "r1", ALICE) == 5
    assert await store.watermark("p", "r1", Partition("bob", "a1")) == 0
    assert await store.watermarks("p", ALICE) == {"r1": 5, "r2": 2}
    same = await store.apply_deltas(
        [], watermarks=[advance, advance.model_copy(update={"last_seq": 9})]
    )
    assert [w.last_seq for w in same.watermarks] == [9]
    assert await store.watermark("p", "r1", ALICE) == 9


@pytest.mark.parametrize("stored", [True, False])
async def test_watermark_going_backwards_rolls_back_the_batch(
    store: AnyFactStore, stored: bool
) -> None:
    ahead = WatermarkAdvance(pack="p", rule_id="r1", partition=ALICE, last_seq=7)
    if stored:
        await store.apply_deltas([], watermarks=[ahead])
    before = await snapshot(store)
    behind = ahead.model_copy(update={"last_seq": 3})
    marks = [behind] if stored else [ahead, behind]
    with pytest.raises(StoreError, match="backwards from 7 to 3"):
        await store.apply_deltas([add("tea")], watermarks=marks)
    assert await snapshot(store) == before


async def test_rejections_are_recorded_once(store: AnyFactStore) -> None:
    rejection = Rejection(id="e7", pack="p", rule_id="r1", partition=ALICE, reason="bad intent")
    dated = Rejection(id="e8", pack="p", rule_id="r1", partition=ALICE, reason="no subject", at=T0)
    result = await store.apply_deltas([], rejections=[rejection, dated])
    await store.apply_deltas([], rejections=[rejection])
    assert result.rejections == 2
    stored = await store.rejections(ALICE)
    assert stored == [dated, rejection.model_copy(update={"at": RECORDED})]
    assert await store.rejections(Partition("bob", "a1")) == []
    assert len(await store.rejections()) == 2


# --- conflicts and validation: nothing applied ------------------------------------------------


async def conflict_setup(store: AnyFactStore) -> dict[str, str]:
    """Stored facts: alice's open tea, alice's closed juice, bob's open tea."""
    tea, juice, bobs = add("tea"), add("juice", src="e5"), add("tea", user="bob")
    await store.apply_deltas([tea, juice, bobs, delete([juice.new_fact_id], ts=T0 + DAY)])
    return {"tea": tea.new_fact_id, "juice": juice.new_fact_id, "bob": bobs.new_fact_id}


CONFLICTS: dict[str, Callable[[dict[str, str]], tuple[list[Delta], str, str]]] = {
    "unknown id": lambda ids: (
        [update(["f-unknown"], "x", ts=T0 + DAY)],
        "f-unknown",
        "unknown fact",
    ),
    "other scope": lambda ids: (
        [update([ids["bob"]], "x", ts=T0 + DAY)],
        ids["bob"],
        "another (user, agent)",
    ),
    "already closed": lambda ids: (
        [delete([ids["juice"]], ts=T0 + 2 * DAY)],
        ids["juice"],
        "already closed",
    ),
    "twice in one batch": lambda ids: (
        [update([ids["tea"]], "x", ts=T0 + DAY), delete([ids["tea"]], ts=T0 + 2 * DAY)],
        ids["tea"],
        "closed earlier in this batch",
    ),
    "twice in one delta": lambda ids: (
        [delete([ids["tea"], ids["tea"]], ts=T0 + DAY)],
        ids["tea"],
        "named twice in this delta",
    ),
    "reinforce unknown": lambda ids: (
        [noop(["f-unknown"], ts=T0 + DAY)],
        "f-unknown",
        "unknown fact",
    ),
    "reinforce closed in batch": lambda ids: (
        [delete([ids["tea"]], ts=T0 + DAY), noop([ids["tea"]], ts=T0 + DAY)],
        ids["tea"],
        "closed earlier in this batch",
    ),
}


@pytest.mark.parametrize("case", sorted(CONFLICTS))
async def test_conflicts_leave_the_store_unchanged(store: AnyFactStore, case: str) -> None:
    ids = await conflict_setup(store)
    deltas, culprit, why = CONFLICTS[case](ids)
    before = await snapshot(store)
    with pytest.raises(FactConflictError) as info:
        await store.apply_deltas([add("fresh", src="e6"), *deltas])
    assert culprit in str(info.value) and why in str(info.value)
    assert info.value.context["fact_ids"] == [culprit]
    assert await snapshot(store) == before


def good() -> dict[str, Any]:
    return add("tea").model_dump()


BAD_DICTS: dict[str, tuple[dict[str, Any], str]] = {
    "missing sources": (
        {k: v for k, v in good().items() if k != "source_episode_ids"},
        "source_episode_ids",
    ),
    "naive promotion_ts": (good() | {"promotion_ts": datetime(2026, 3, 1)}, "promotion_ts"),
    "NaN confidence": (good() | {"confidence": float("nan")}, "confidence"),
    "empty replaces": (
        good() | {"kind": "update", "replaces": []},
        "replaces",
    ),
    "unknown kind": (good() | {"kind": "merge"}, "kind"),
    "NaN binding": (good() | {"bindings": {"x": float("nan")}}, "bindings.x"),
    "nested binding": (good() | {"bindings": {"x": {"y": 1}}}, "bindings.x"),
}


@pytest.mark.parametrize("case", sorted(BAD_DICTS))
async def test_invalid_deltas_leave_the_store_unchanged(store: AnyFactStore, case: str) -> None:
    await store.apply_delta(add("before", src="e0"))
    before = await snapshot(store)
    bad, field = BAD_DICTS[case]
    with pytest.raises(DeltaValidationError) as info:
        await store.apply_deltas([add("fresh", src="e6").model_dump(), bad])
    assert (info.value.context["index"], info.value.context["field"]) == (1, field)
    assert str(info.value).startswith(f"deltas[1].{field}")
    assert await snapshot(store) == before


async def test_bad_pack_hash_is_refused(store: AnyFactStore) -> None:
    with pytest.raises(DeltaValidationError, match="pack_hash"):
        await store.apply_deltas([add("tea")], pack_hash="a\x00b")


async def test_a_listener_failing_mid_batch_applies_nothing(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    def listener(fact: Fact, bundle: ProvenanceBundle) -> None:
        seen.append((fact.id, bundle.delta_id))
        if len(seen) == 3:
            raise RuntimeError("working memory full")

    adapter = ProvenanceAdapter([listener])
    async with SQLiteFactStore(tmp_path / "m.db", adapter=adapter) as store:
        kept = add("kept", src="e0")
        await store.apply_delta(kept)
        before = await snapshot(store)
        batch: list[Delta] = [add(f"o{n}", src=f"e{n + 1}") for n in range(5)]
        batch.insert(1, noop([kept.new_fact_id], ts=T0))
        mark = WatermarkAdvance(pack="p", rule_id="r1", partition=ALICE, last_seq=4)
        with pytest.raises(RuntimeError, match="working memory full"):
            await store.apply_deltas(batch, watermarks=[mark])
        assert await snapshot(store) == before
        adapter.listeners.clear()
        result = await store.apply_deltas(batch)
        assert (result.added, result.noops) == (5, 1)
    assert seen[0][1] == kept.delta_id


# --- the provenance adapter -------------------------------------------------------------------


def bundle(**changes: Any) -> ProvenanceBundle:
    fields: dict[str, Any] = {
        "rule_id": "r1",
        "pack_hash": "",
        "delta_id": "d1",
        "source_episode_ids": ("e1",),
        "promotion_ts": T0,
        "confidence": 0.5,
        "reason": "",
        "bindings": {},
        "predecessor_ids": (),
    }
    return ProvenanceBundle.model_construct(**(fields | changes))


BAD_BUNDLES: list[tuple[dict[str, Any], str]] = [
    ({"promotion_ts": datetime(2026, 3, 1)}, "promotion_ts"),
    ({"confidence": float("inf")}, "confidence"),
    ({"confidence": 1.5}, "confidence"),
    ({"reason": "a\x00b"}, "reason"),
    ({"rule_id": "bad id"}, "rule_id"),
    ({"rule_id": "two\nids"}, "rule_id"),
    ({"delta_id": "d1\nd2"}, "delta_id"),
    ({"source_episode_ids": ("e1", "e\n")}, "source_episode_ids[1]"),
    ({"source_episode_ids": ()}, "source_episode_ids"),
    ({"predecessor_ids": ("/etc",)}, "predecessor_ids[0]"),
    ({"bindings": {"k": "a\x00"}}, "bindings.k"),
    ({"bindings": {"k": [1, float("nan")]}}, "bindings.k[1]"),
    ({"pack_hash": "x" * 300}, "pack_hash"),
]


@pytest.mark.parametrize(("changes", "field"), BAD_BUNDLES)
def test_sanitize_bundle_names_the_bad_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(DeltaValidationError) as info:
        sanitize_bundle(bundle(**changes))
    assert info.value.context["field"] == field


def fact_for(b: ProvenanceBundle, **changes: Any) -> Fact:
    fields: dict[str, Any] = {
        "id": "f1",
        "user": "alice",
        "agent": "a1",
        "subject": "alice",
        "predicate": "drinks",
        "object": "tea",
        "payload": {},
        "confidence": 0.5,
        "valid_from": T0,
        "valid_until": None,
        "superseded_by": None,
        "recorded_at": RECORDED,
        "rule_id": b.rule_id,
        "delta_id": b.delta_id,
    }
    return Fact.model_construct(**(fields | changes))


@pytest.mark.parametrize(
    "pair",
    [
        *[("bundle", changes) for changes, _ in BAD_BUNDLES],
        ("bundle", {"reason": "x" * 5000}),  # needs capping
        ("bundle", {"source_episode_ids": ["e1"]}),  # a list, made a tuple
        ("bundle", {"confidence": True}),
        ("bundle", {"bindings": {"n": 3}}),  # fine, but not a string
        ("fact", {"object": "a\x00"}),
        ("fact", {"id": "bad id"}),
        ("fact", {"confidence": float("nan")}),
        ("fact", {"valid_from": datetime(2026, 3, 1)}),
        ("fact", {"recorded_at": RECORDED.astimezone(timezone(timedelta(hours=2)))}),
        ("fact", {"payload": {"x": float("inf")}}),
        ("fact", {"delta_id": "d2"}),
    ],
)
def test_clean_pairs_sends_anything_unusual_one_by_one(pair: tuple[str, dict[str, Any]]) -> None:
    good = bundle()
    which, changes = pair
    odd = (
        (fact_for(good), bundle(**changes))
        if which == "bundle"
        else (
            fact_for(good, **changes),
            good,
        )
    )
    assert clean_pairs([(fact_for(good), good)] * 3)
    assert not clean_pairs([(fact_for(good), good), odd, (fact_for(good), good)])


async def test_a_bad_pair_mid_chunk_names_its_delta(store: AnyFactStore) -> None:
    await store.apply_delta(add("tea", src="e0"))
    before = await snapshot(store)
    batch: list[Delta] = [add(f"o{n}", src=f"e{n + 1}") for n in range(6)]
    batch[4] = batch[4].model_copy(update={"reason": "a\x00b"})
    with pytest.raises(DeltaValidationError, match=r"^deltas\[4\]\.reason: ") as info:
        await store.apply_deltas(batch)
    assert (info.value.context["index"], info.value.context["field"]) == (4, "reason")
    assert await snapshot(store) == before


def test_sanitize_bundle_normalises_time_and_caps_reason() -> None:
    clean = sanitize_bundle(bundle(promotion_ts=T0.astimezone(timezone(timedelta(hours=-5)))))
    assert clean.promotion_ts == T0 and clean.promotion_ts.tzinfo is UTC
    capped = sanitize_bundle(bundle(reason="x" * 5000))
    assert len(capped.reason) == MAX_REASON_CHARS and capped.reason.endswith("…")
    already = bundle()
    assert sanitize_bundle(already) is already
    zero = bundle(promotion_ts=T0.astimezone(timezone(timedelta(0))))
    assert sanitize_bundle(zero) is zero  # a zero offset is UTC already


async def test_long_reasons_are_capped_in_lineage_not_in_audit(store: AnyFactStore) -> None:
    delta = add("tea", reason="why " * 1000)
    await store.apply_delta(delta)
    assert len((await store.lineage(delta.new_fact_id)).reason) == MAX_REASON_CHARS
    assert (await store.audit_rows())[0].delta == delta


def test_trusted_models_match_validated_ones() -> None:
    values = bundle().model_dump()
    built = trusted(ProvenanceBundle, dict(values))
    assert built == ProvenanceBundle(**values)
    assert built.model_dump_json() == ProvenanceBundle(**values).model_dump_json()
    with pytest.raises(ValueError, match="frozen"):
        built.rule_id = "other"  # type: ignore[misc]


# --- health and bootstrap ---------------------------------------------------------------------


async def test_health_of_missing_file_does_not_create_it(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "m.db"
    health = await SQLiteFactStore(path).health()
    assert (health.ok, health.reason) == (False, "database file does not exist")
    assert not path.parent.exists()


async def test_health_of_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(os.urandom(8192))
    health = await SQLiteFactStore(path).health()
    assert not health.ok and health.file_size == 8192
    assert health.reason is not None and "not a usable SQLite database" in health.reason


async def test_health_of_episode_only_file_is_not_bootstrapped(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with SQLiteMemoryStore(path):
        pass
    health = await SQLiteFactStore(path).health()
    assert not health.ok and health.reason is not None
    assert health.reason.startswith("not bootstrapped: missing table(s) fact_store_meta, facts")


async def test_health_reports_real_figures(sqlite_store: SQLiteFactStore) -> None:
    store = sqlite_store
    await store.apply_deltas([add(f"o{n}", src=f"e{n}") for n in range(3)])
    await store.bootstrap()
    health = await store.health()
    assert (health.ok, health.reason, health.fact_count, health.schema_version) == (
        True,
        None,
        3,
        SCHEMA_VERSION,
    )
    assert (health.journal_mode, health.quick_check) == ("wal", "ok")
    assert health.file_size == store.path.stat().st_size > 0


# --- property: history invariants -----------------------------------------------------------

Op = tuple[str, int, int]
ops = st.tuples(
    st.sampled_from(["add", "add", "update", "delete"]),
    st.integers(0, 1_000),
    st.integers(-3, 10),
)
batches = st.lists(st.lists(ops, min_size=1, max_size=6), min_size=1, max_size=4)


def plan(batches: list[list[Op]]) -> tuple[list[list[Delta]], set[str]]:
    """Valid deltas for the drawn ops (picks among open facts), and the expected open set."""
    open_facts: dict[str, str] = {}
    out: list[list[Delta]] = []
    n = 0
    for batch in batches:
        deltas: list[Delta] = []
        for kind, pick, day in batch:
            n += 1
            user = "alice" if pick % 2 else "bob"
            ts = T0 + day * DAY
            mine = sorted(fid for fid, owner in open_facts.items() if owner == user)
            if kind == "add" or not mine:
                made: Delta = add(f"o{n}", ts=ts, user=user, src=f"e{n}")
            else:
                target = mine[pick % len(mine)]
                del open_facts[target]
                if kind == "update":
                    made = update([target], f"o{n}", ts=ts, user=user, src=f"e{n}")
                else:
                    made = delete([target], ts=ts, user=user, src=f"e{n}")
            if isinstance(made, AddDelta | UpdateDelta):
                open_facts[made.new_fact_id] = user
            deltas.append(made)
        out.append(deltas)
    return out, set(open_facts)


async def check_history(path: Path, batches: list[list[Delta]], expected_open: set[str]) -> None:
    async with SQLiteFactStore(path) as store:
        for deltas in batches:
            await store.apply_deltas(deltas)
        current = {f.id for f in await store.query(FactPattern(limit=None))}
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute(
            "SELECT id, valid_from_us, valid_until_us, superseded_by FROM facts"
        ).fetchall()
        named = [
            pid
            for (preds,) in db.execute("SELECT predecessor_ids FROM lineage")
            for pid in json.loads(preds)
        ]
    assert len(named) == len(set(named)), "a fact has two successors"
    successors = [r[3] for r in rows if r[3] is not None]
    assert all(until >= since for _, since, until, _ in rows if until is not None)
    assert {r[0] for r in rows if r[2] is None} == current == expected_open
    assert set(successors) <= {r[0] for r in rows}


@settings(max_examples=30, deadline=None)
@given(drawn=batches)
def test_history_invariants_hold_for_random_batches(drawn: list[list[Op]]) -> None:
    deltas, expected_open = plan(drawn)
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(check_history(Path(tmp) / "m.db", deltas, expected_open))


def test_rejection_reasons_are_capped_and_nul_free() -> None:
    long = Rejection(id="e1", pack="p", rule_id="r1", partition=ALICE, reason="x" * 3000)
    assert len(long.reason) == MAX_REASON_CHARS
    with pytest.raises(ValueError, match="NUL"):
        Rejection(id="e1", pack="p", rule_id="r1", partition=ALICE, reason="a\x00")


async def test_corrupt_rows_name_table_and_id(sqlite_store: SQLiteFactStore) -> None:
    store = sqlite_store
    delta = add("tea")
    await store.apply_delta(delta)
    with closing(sqlite3.connect(store.path)) as db, db:
        db.execute("UPDATE facts SET payload = x'7b' WHERE id = ?", (delta.new_fact_id,))
    with pytest.raises(CorruptRowError, match=f"facts row '{delta.new_fact_id}' is corrupt"):
        await store.get(delta.new_fact_id)


# --- schema version 1 files ------------------------------------------------------------------

_V1_LINEAGE = """CREATE TABLE lineage_v1 (
    fact_id TEXT PRIMARY KEY, delta_id TEXT NOT NULL, rule_id TEXT NOT NULL,
    pack_hash TEXT NOT NULL, source_episode_ids TEXT NOT NULL, promotion_ts_us INTEGER NOT NULL,
    confidence REAL NOT NULL, reason TEXT NOT NULL, bindings TEXT NOT NULL,
    predecessor_ids TEXT NOT NULL)"""
_V1_AUDIT = """CREATE TABLE audit_v1 (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, delta_id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
    rule_id TEXT NOT NULL, pack_hash TEXT NOT NULL, user TEXT NOT NULL, agent TEXT NOT NULL,
    partition_key TEXT NOT NULL, applied_at_us INTEGER NOT NULL, delta TEXT NOT NULL)"""


def _to_version_1(path: Path) -> None:
    """Rewrite a current file into the version 1 layout (lineage keyed by fact id, every
    audit delta id unique, no aggregates, facts without their observation time), rows
    otherwise unchanged."""
    lineage_columns = (
        "fact_id, delta_id, rule_id, pack_hash, source_episode_ids, promotion_ts_us, "
        "confidence, reason, bindings, predecessor_ids"
    )
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(_V1_LINEAGE)
        db.execute(f"INSERT INTO lineage_v1 SELECT {lineage_columns} FROM lineage ORDER BY fact_id")
        db.execute("DROP TABLE lineage")
        db.execute("ALTER TABLE lineage_v1 RENAME TO lineage")
        db.execute(_V1_AUDIT)
        db.execute("INSERT INTO audit_v1 SELECT * FROM audit ORDER BY seq")
        db.execute("DROP TABLE audit")
        db.execute("ALTER TABLE audit_v1 RENAME TO audit")
        db.execute("CREATE INDEX audit_partition ON audit (partition_key, seq)")
        undo_version_4(db)
        db.execute("UPDATE fact_store_meta SET value = '1' WHERE key = 'schema_version'")


async def test_version_1_files_are_migrated_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    a, b = add("tea"), add("coffee", src="e9")
    b2 = update([a.new_fact_id], "water", ts=T0 + DAY)
    gone, confirm = delete([b.new_fact_id], ts=T0 + DAY), noop([a.new_fact_id], ts=T0)
    batches: list[list[Delta]] = [[a, b], [confirm, b2, gone]]
    ids = [a.new_fact_id, b.new_fact_id, b2.new_fact_id]
    async with SQLiteFactStore(path, clock=lambda: RECORDED) as store:
        for batch in batches:
            await store.apply_deltas(batch, pack_hash="p1")
        explained = [await store.explain(fid) for fid in ids]
        audit = await store.audit_rows()
    _to_version_1(path)
    with closing(sqlite3.connect(path)) as db:
        [audit_sql] = db.execute("SELECT sql FROM sqlite_master WHERE name = 'audit'").fetchone()
        assert "UNIQUE" in audit_sql
    async with SQLiteFactStore(path, clock=lambda: RECORDED) as store:
        assert (await store.health()).schema_version == SCHEMA_VERSION
        assert [await store.explain(fid) for fid in ids] == explained
        assert await store.audit_rows() == audit
        again = await store.apply_deltas([*batches[0], *batches[1]], pack_hash="p1")
        assert (again.skipped, again.applied) == (5, 0)
        later = update([b2.new_fact_id], "juice", ts=T0 + 2 * DAY)
        await store.apply_delta(later, pack_hash="p1")
        rows = await store.audit_rows()
        assert [r.seq for r in rows] == [r.seq for r in audit] + [audit[-1].seq + 1]
        assert [r.delta_id for r in (await store.explain(b2.new_fact_id)).audit] == [
            b2.delta_id,
            later.delta_id,
        ]


async def test_unknown_schema_versions_are_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    async with SQLiteFactStore(path) as store:
        await store.apply_delta(add("tea"))
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE fact_store_meta SET value = '9' WHERE key = 'schema_version'")
    before = dump(path)
    with pytest.raises(StoreError, match="schema version 9 is not supported"):
        async with SQLiteFactStore(path) as store:
            await store.bootstrap()
    assert dump(path) == before


# --- background checkpoints --------------------------------------------------------------------


async def _autocheckpoint(store: SQLiteFactStore) -> int:
    db = store._db
    assert db is not None
    [(pages,)] = await db.execute_fetchall("PRAGMA wal_autocheckpoint")
    return int(pages)


async def test_background_checkpoints_copy_each_batch_and_restore_the_default(
    sqlite_store: SQLiteFactStore,
) -> None:
    store = sqlite_store
    await store.apply_delta(add("tea", src="e0"))
    assert await _autocheckpoint(store) == 100
    assert store._db is not None
    await store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # an empty log to start
    async with store.background_checkpoints(), store.background_checkpoints():
        sizes = []
        for n in range(4):
            await store.apply_delta(add(f"o{n}", src=f"e{n + 1}"))
            assert await _autocheckpoint(store) == 0
            sizes.append(os.path.getsize(f"{store.path}-wal"))
        # each batch's log was copied in the background before the next began, so the
        # next one started the log over instead of appending to it
        assert sizes[-1] < 2 * sizes[0], sizes
    assert await _autocheckpoint(store) == 100
    assert store._checkpointer is None
    assert len(await store.query(FactPattern())) == 5
