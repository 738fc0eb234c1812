"""Free-form fact payloads: the specification types ``fact_payload`` as ``dict[str, Any]``.

A fact's payload may be any JSON object; subject/predicate/object are optional structure
on top (all three or none), and ``fact_payload`` reads back exactly as it was written,
from the delta and from the stored fact, on both backends.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from backends import Backend
from pydantic import ValidationError
from readme_helpers import readme_example_after, run_example

from stargraph_mem.model.facts import Fact
from stargraph_mem.stores import AddDelta, DeleteDelta, Episode, FactPattern, UpdateDelta
from stargraph_mem.stores.scope import Partition

T = datetime(2026, 1, 2, tzinfo=UTC)
FREE: dict[str, Any] = {"text": "Alice prefers green tea", "category": "preference", "n": [1, 2]}
WRITTEN: list[dict[str, Any]] = [
    FREE,
    {"subject": "alice", "predicate": "likes", "object": "tea", "since": 2019},
    {"subject": "alice", "predicate": "likes", "object": "tea", "payload": {"nested": True}},
    {"subject": 5, "predicate": "likes", "object": "tea"},  # not a triple: all payload
    {"subject": "alice", "note": "no predicate"},  # a partial triple stays payload
    {"subject": "", "predicate": "p", "object": "o"},
    {"payload": "a key named payload", "x": None},
]


def add(payload: dict[str, Any], eid: str = "e1", **extra: Any) -> AddDelta:
    return AddDelta(
        fact_payload=payload,
        source_episode_ids=[eid],
        promotion_ts=T,
        rule_id="r",
        confidence=0.5,
        **{"user": "alice", "agent": "rag", **extra},
    )


@pytest.mark.parametrize("payload", WRITTEN)
def test_fact_payload_reads_back_as_written(payload: dict[str, Any]) -> None:
    delta = add(payload)
    assert delta.fact_payload == payload
    again = AddDelta.model_validate(delta.model_dump())
    assert again.fact_payload == payload and again.delta_id == delta.delta_id


def test_a_full_string_triple_is_the_facts_structure() -> None:
    delta = add({"subject": "alice", "predicate": "likes", "object": "tea", "since": 2019})
    assert delta.fact.triple == ("alice", "likes", "tea")
    assert delta.fact.payload == {"since": 2019}
    assert not add(FREE).fact.has_triple
    assert add(FREE).fact.triple == ("", "", "")


def test_facts_with_a_triple_keep_their_ids() -> None:
    """The canonical body of a fact with a triple is what it was before payloads became
    free-form (ids computed by the earlier release)."""
    flat = add(
        {"subject": "alice", "predicate": "likes", "object": "tea", "since": 2019},
        user=None,
        agent=None,
    )
    assert flat.delta_id == "d5a2e4b14ca8cc052fa10faeaed98c57"
    ours = AddDelta(
        fact={"subject": "alice", "predicate": "likes", "object": "tea"},
        source_episode_ids=["e1"],
        promotion_ts=T,
        rule_id="r",
        confidence=0.5,
    )
    assert ours.delta_id == "d49935e9aef8aaf30155e4730214098f"


@pytest.mark.parametrize(
    ("fact", "message"),
    [
        ({"subject": "alice"}, "subject, predicate and object go together"),
        ({"subject": "a", "predicate": "b"}, "missing object"),
        ({}, "a fact needs subject, predicate and object, or a payload"),
        ({"payload": {}}, "a fact needs subject, predicate and object, or a payload"),
    ],
)
def test_our_fact_form_refuses_a_partial_or_empty_fact(fact: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        AddDelta(fact=fact, source_episode_ids=["e1"], promotion_ts=T, rule_id="r", confidence=0.5)


def test_an_empty_spec_payload_is_refused() -> None:
    with pytest.raises(ValidationError, match="or a payload"):
        add({})


async def _episode(backend: Backend, eid: str) -> None:
    await backend.memory.put(
        Episode(
            id=eid,
            content=f"text of {eid}",
            timestamp=T.replace(day=1),
            user="alice",
            session="s1",
            agent="rag",
        ),
        user="alice",
        session="s1",
        agent="rag",
    )


async def _only(backend: Backend) -> Fact:
    (fact,) = await backend.facts.query(FactPattern(user="alice"))
    return fact


@pytest.mark.parametrize("payload", WRITTEN)
async def test_stored_fact_reads_back_as_written(backend: Backend, payload: dict[str, Any]) -> None:
    await _episode(backend, "e1")
    delta = add(payload)
    await backend.facts.apply_delta(delta)
    fact = await _only(backend)
    assert fact.fact_payload == payload
    assert fact.id == delta.new_fact_id
    assert fact.has_triple == delta.fact.has_triple
    assert (await backend.facts.get(fact.id)).fact_payload == payload
    (row,) = await backend.facts.audit_rows(Partition("alice", "rag"))
    assert row.delta.fact_payload == payload  # type: ignore[union-attr]


async def test_payload_only_facts_update_delete_and_search(backend: Backend) -> None:
    for eid in ("e1", "e2", "e3"):
        await _episode(backend, eid)
    first = add(FREE)
    await backend.facts.apply_delta(first)
    hits = await backend.facts.search("green tea", user="alice")
    assert [h.fact.id for h in hits] == [first.new_fact_id]
    newer = {"text": "Alice prefers black tea", "category": "preference"}
    update = UpdateDelta(
        fact_payload=newer,
        replaces=[first.new_fact_id],
        source_episode_ids=["e2"],
        promotion_ts=T.replace(day=3),
        rule_id="r",
        confidence=0.6,
        user="alice",
        agent="rag",
    )
    await backend.facts.apply_delta(update)
    assert (await _only(backend)).fact_payload == newer
    (before,) = await backend.facts.as_of(T.replace(hour=12), FactPattern(user="alice"))
    assert before.fact_payload == FREE and before.superseded_by == update.new_fact_id
    await backend.facts.apply_delta(
        DeleteDelta(
            replaces=[update.new_fact_id],
            source_episode_ids=["e3"],
            promotion_ts=T.replace(day=4),
            rule_id="r",
            confidence=1.0,
            user="alice",
            agent="rag",
        )
    )
    assert await backend.facts.query(FactPattern(user="alice")) == []


def test_the_readme_payload_example_runs_verbatim(tmp_path: Path) -> None:
    code, output = readme_example_after("### Free-form fact payloads")
    done = run_example(code, tmp_path, "rules/default.yaml", timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == output
