"""Store reads and writes over many partitions at once agree with their one-partition forms:
the same episodes, watermarks, versions and facts; many passes apply in one transaction,
a stale one is left out, and any error leaves every store unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from backends import AnyFactStore, AnyMemoryStore, Backend

from stargraph_mem.errors import DeltaValidationError, StoreError
from stargraph_mem.stores import (
    AddDelta,
    Episode,
    FactPayload,
    Partition,
    WatermarkAdvance,
)
from stargraph_mem.stores.fact import Rejection
from stargraph_mem.stores.sqlite_fact import PassBasis, PassWrite

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
USERS = ["alice", "bob", "carol"]
PARTS = [Partition(u, "a1") for u in USERS]


def episode(user: str, n: int) -> Episode:
    return Episode(
        id=f"{user}-{n}",
        content=f"{user} says {n}",
        timestamp=T0 + timedelta(seconds=n),
        user=user,
        session="s1",
        agent="a1",
        metadata={},
    )


def add(user: str, obj: str, src: str) -> AddDelta:
    return AddDelta(
        fact=FactPayload(subject=user, predicate="drinks", object=obj),
        user=user,
        agent="a1",
        source_episode_ids=[src],
        promotion_ts=T0,
        rule_id="r1",
        confidence=0.8,
    )


@pytest.fixture
async def stores(backend: Backend) -> AsyncIterator[tuple[AnyMemoryStore, AnyFactStore]]:
    """Each backend's memory and fact stores, six episodes in each partition."""
    await backend.memory.put_many([episode(u, n) for n in range(6) for u in USERS])
    yield backend.memory, backend.facts


def write(
    partition: Partition, version: int, marks: dict[str, int], obj: str, seq: int = 9
) -> PassWrite:
    user = partition.user
    return PassWrite(
        basis=PassBasis("pk", partition, marks, version),
        deltas=[add(user, obj, f"{user}-0")],
        watermarks=[WatermarkAdvance(pack="pk", rule_id="r1", partition=partition, last_seq=seq)],
        rejections=[
            Rejection(id=f"{user}-1", pack="pk", rule_id="r1", partition=partition, reason="x")
        ],
    )


async def test_reads_of_many_equal_reads_of_one(
    stores: tuple[AnyMemoryStore, AnyFactStore],
) -> None:
    memory, facts = stores
    pairs = [(PARTS[2], 0), (PARTS[0], 7), (Partition("nobody", "a1"), 0)]
    many = await memory.since_checked_of(pairs, limit=3)
    assert many == [await memory.since_checked(p, after, limit=3) for p, after in pairs]
    assert [len(r.records) for r in many] == [3, 3, 0]
    assert await memory.count_since_of(pairs) == [6, 3, 0]
    await facts.apply_passes([write(PARTS[1], 0, {}, "tea")], pack_hash="")
    assert await facts.pass_bases("pk", PARTS) == [await facts.basis("pk", p) for p in PARTS]
    assert await facts.current_facts_of(PARTS) == [await facts.current_facts(p) for p in PARTS]
    assert [len(f) for f in await facts.current_facts_of(PARTS)] == [0, 1, 0]


async def test_many_passes_apply_together_and_a_stale_one_is_left_out(
    stores: tuple[AnyMemoryStore, AnyFactStore],
) -> None:
    _, facts = stores
    await facts.apply_passes([write(PARTS[1], 0, {}, "tea")])
    bob_version = (await facts.basis("pk", PARTS[1]))[1]
    # bob's pass read version 0 and no watermark: it is stale now
    out = await facts.apply_passes(
        [write(PARTS[0], 0, {}, "coffee"), write(PARTS[1], 0, {}, "milk")]
    )
    assert out[1] is None
    assert out[0] == (await facts.basis("pk", PARTS[0]))[1]
    assert await facts.watermarks("pk", PARTS[0]) == {"r1": 9}
    assert [f.object for f in await facts.current_facts(PARTS[1])] == ["tea"]
    assert (await facts.basis("pk", PARTS[1]))[1] == bob_version
    assert {r.id for r in await facts.rejections()} == {"alice-1", "bob-1"}


async def test_an_error_in_one_pass_leaves_every_partition_unchanged(
    stores: tuple[AnyMemoryStore, AnyFactStore],
) -> None:
    _, facts = stores
    good = write(PARTS[0], 0, {}, "coffee")
    mark = WatermarkAdvance(pack="pk", rule_id="r1", partition=PARTS[2], last_seq=9)
    foreign = PassWrite(PassBasis("pk", PARTS[1], {}, 0), deltas=[add("carol", "tea", "carol-0")])
    with pytest.raises(DeltaValidationError, match="emitted a delta for"):
        await facts.apply_passes([good, foreign])
    await facts.apply_passes([PassWrite(PassBasis("pk", PARTS[2], {}, 0), watermarks=[mark])])
    backwards = write(PARTS[2], 0, {"r1": 9}, "tea", seq=5)
    with pytest.raises(StoreError, match="would go backwards from 9 to 5"):
        await facts.apply_passes([good, backwards])
    assert await facts.current_facts_of(PARTS) == [[], [], []]
    assert await facts.audit_rows() == []
    assert await facts.rejections() == []
    assert await facts.watermarks("pk", PARTS[0]) == {}
