"""A NUL in a fact filter is refused alike on both backends, before any query: no stored
fact holds one, and PostgreSQL cannot compare one (it raised psycopg's ``DataError``
there, where SQLite found nothing)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from backends import Backend
from pydantic import ValidationError

from stargraph_mem.errors import MemoryScopeError
from stargraph_mem.model.deltas import AddDelta, FactPayload
from stargraph_mem.model.facts import FactPattern

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


async def test_a_nul_in_a_filter_is_refused_on_either_backend(backend: Backend) -> None:
    store = backend.facts
    await store.apply_deltas(
        [
            AddDelta(
                user="alice",
                agent="a1",
                source_episode_ids=["e1"],
                promotion_ts=T0,
                rule_id="r1",
                confidence=0.7,
                fact=FactPayload(subject="alice", predicate="likes", object="tea"),
            )
        ]
    )
    for field in ("subject", "predicate"):
        with pytest.raises(ValidationError, match=f"{field} must not contain NUL"):
            await store.search("tea", **{field: "al\x00ice"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="object must not contain NUL"):
        await store.query(FactPattern(object="t\x00ea"))
    with pytest.raises(MemoryScopeError, match="'agent' must not contain NUL"):
        await store.query(FactPattern(agent="a\x001"))
    with pytest.raises(MemoryScopeError, match="'user' must not contain NUL"):
        await store.search("tea", user="al\x00ice")
    assert [f.object for f in await store.query(FactPattern(agent="a1"))] == ["tea"]
