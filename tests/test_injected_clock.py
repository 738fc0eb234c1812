"""``Consolidator(clock=...)`` is the memory's now for everything it records without an
explicit time: a status change, a pin, a read, a restore, on both backends (they used the
machine's clock, so a memory run on another clock refused a status change "before the fact
became valid" and restored facts before they existed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from backends import NewLocation

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.model.deltas import AddDelta, FactPayload

NOW = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
"""Years from the machine's clock, either way of it."""


@pytest.mark.parametrize("offset", [timedelta(0), timedelta(days=-3650)])
async def test_what_a_memory_records_without_a_time_is_stamped_by_its_clock(
    new_location: NewLocation, offset: timedelta
) -> None:
    now = NOW + offset
    made = AddDelta(
        user="alice",
        agent="a1",
        source_episode_ids=["e1"],
        promotion_ts=now - timedelta(hours=1),
        rule_id="r1",
        confidence=0.7,
        fact=FactPayload(subject="alice", predicate="likes", object="tea"),
    )
    async with Consolidator(new_location(), [], clock=lambda: now) as mem:
        await mem.fact_store.apply_deltas([made])
        fid = made.new_fact_id
        assert await mem.pin(fid, reason="sure") is True
        assert (await mem.fact_store.get(fid)).pinned_at == now
        await mem.record_access([fid])
        assert (await mem.access(fid)).last_access == now
        flagged = await mem.update_status(fid, "challenged", reason="doubt")
        [change] = await mem.status_history(fid, shape="spec")
        assert (flagged.status, change.changed_at) == ("challenged", now)
        await mem.update_status(fid, "archived", reason="old")
        restored = await mem.restore(fid, reason="back")
        assert restored.valid_from == now
        assert [f.object for f in await mem.facts(as_of=now - timedelta(minutes=90))] == []
