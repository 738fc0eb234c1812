"""One-way promotion of knowledge-graph triples to facts (the Graphiti invalidation model).

A graph edge ``(subject, predicate, object)`` valid from ``valid_at`` becomes a fact scoped
``(user, agent)`` through typed deltas applied by :meth:`FactStore.apply_deltas`, with the
edge's id as the source of its provenance. A newer triple with the same subject and
predicate invalidates the current fact (an update that closes it); an older or equally old
one never displaces a newer fact, and is reported as skipped. Nothing is ever written
back to the graph: this module has no handle on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from pydantic import Field

from stargraph_mem.model.base import FrozenModel, Identifier, ScopePart, StoredDatetime
from stargraph_mem.model.deltas import AddDelta, UpdateDelta
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.stores.fact import ApplyResult, FactStore

__all__ = ["KG_RULE_ID", "KGTriple", "PromoteTriplesToFacts", "Promotion"]

KG_RULE_ID: Final = "kg_promotion"
"""The ``rule_id`` stamped on promoted facts unless another is given."""

Key = tuple[str, str, str, str]
"""(user, agent, subject, predicate): what a newer triple invalidates."""


class KGTriple(FrozenModel):
    """A graph edge to promote: the statement, when it became true, its id and its scope."""

    subject: str = Field(min_length=1)
    predicate: str = Field(min_length=1)
    object: str
    valid_at: StoredDatetime
    source_id: Identifier
    """The graph edge (or episode) id, recorded as the fact's source."""
    user: ScopePart
    agent: ScopePart
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)

    @property
    def key(self) -> Key:
        return (self.user, self.agent, self.subject, self.predicate)


@dataclass(frozen=True, slots=True)
class _Current:
    """The fact currently holding a key: its id, valid time and object."""

    fact_id: str
    valid_from: datetime
    object: str


@dataclass(frozen=True)
class Promotion:
    """What a promotion did: the deltas applied, the triples skipped (with why), the result."""

    deltas: list[AddDelta | UpdateDelta]
    skipped: list[tuple[KGTriple, str]] = field(default_factory=list)
    result: ApplyResult | None = None


class PromoteTriplesToFacts:
    """Promote graph triples to facts in ``facts``, newest per (subject, predicate) wins."""

    def __init__(
        self, facts: FactStore, *, rule_id: str = KG_RULE_ID, pack_hash: str = KG_RULE_ID
    ) -> None:
        self.facts = facts
        self.rule_id = rule_id
        self.pack_hash = pack_hash

    async def __call__(self, triples: Sequence[KGTriple]) -> Promotion:
        """Same as :meth:`promote`."""
        return await self.promote(triples)

    async def promote(self, triples: Sequence[KGTriple]) -> Promotion:
        """Apply one delta per triple that is newer than its key's current fact, in one batch.

        Triples are taken in valid-time order (ties by source id), so the outcome does not
        depend on the order they are given in.
        """
        ordered = sorted(triples, key=lambda t: (t.valid_at, t.source_id))
        current = await self._current({t.key for t in ordered})
        deltas: list[AddDelta | UpdateDelta] = []
        skipped: list[tuple[KGTriple, str]] = []
        for triple in ordered:
            held = current.get(triple.key)
            problem = _stale(triple, held)
            if problem is not None:
                skipped.append((triple, problem))
                continue
            delta = self._delta(triple, held)
            deltas.append(delta)
            current[triple.key] = _Current(delta.new_fact_id, triple.valid_at, triple.object)
        result = None
        if deltas:
            result = await self.facts.apply_deltas(deltas, pack_hash=self.pack_hash)
        return Promotion(deltas, skipped, result)

    async def _current(self, keys: set[Key]) -> dict[Key, _Current]:
        """The current fact of each key (the latest valid one if several are current)."""
        found: dict[Key, _Current] = {}
        for user, agent, subject, predicate in sorted(keys):
            pattern = FactPattern(user=user, agent=agent, subject=subject, predicate=predicate)
            for fact in await self.facts.query(pattern):
                key = (user, agent, subject, predicate)
                held = found.get(key)
                if held is None or fact.valid_from > held.valid_from:
                    found[key] = _Current(fact.id, fact.valid_from, fact.object)
        return found

    def _delta(self, triple: KGTriple, held: _Current | None) -> AddDelta | UpdateDelta:
        """An add for a new key; an update closing the older fact for a newer triple."""
        statement = f"({triple.subject}, {triple.predicate}, {triple.object})"
        common = {
            "user": triple.user,
            "agent": triple.agent,
            "fact": {
                "subject": triple.subject,
                "predicate": triple.predicate,
                "object": triple.object,
            },
            "source_episode_ids": [triple.source_id],
            "promotion_ts": triple.valid_at,
            "rule_id": self.rule_id,
            "confidence": triple.confidence,
            "bindings": {"source_id": triple.source_id, "valid_at": triple.valid_at.isoformat()},
        }
        if held is None:
            return AddDelta.model_validate({**common, "reason": f"graph triple {statement}"})
        reason = f"graph triple {statement} invalidates {held.fact_id}"
        return UpdateDelta.model_validate({**common, "replaces": [held.fact_id], "reason": reason})


def _stale(triple: KGTriple, held: _Current | None) -> str | None:
    """Why ``triple`` changes nothing (never the reverse of the invalidation), else None."""
    if held is None:
        return None
    if triple.valid_at < held.valid_from:
        return f"older than the current fact {held.fact_id} (valid from {held.valid_from})"
    if triple.valid_at == held.valid_from:
        return f"not newer than the current fact {held.fact_id}"
    if triple.object == held.object:
        return f"the current fact {held.fact_id} already says so"
    return None
