"""Near neighbours among earlier episodes, for ``earlier`` patterns with ``near``.

An episode's candidates are the partition's episodes before it in the sequential order:
those earlier passes consumed (read by the runner, the latest first, as
:class:`EarlierEpisodes`), then this pass's episodes before it; never the episode itself.
Each candidate is ranked by its ``content`` under the configured embedder: exact cosine,
scores rounded and ties broken by episode id as :func:`~stargraph_mem.embedding.top_k`
does, within the relation's window (the latest ``last`` candidates, and with ``within``
only those stamped at most that long before the episode). So the neighbours do not depend
on how the stream is cut into passes nor on the order its episodes were stored in.

Vectors the store holds for the embedder's identity (the ``vectors`` table, filled for
recall) are reused; the other texts are embedded once per pass through the runtime's
:class:`~stargraph_mem.engine.passes.near.VectorCache`. Ranking is one dot product per
episode over its window, in numpy; CLIPS joins the rule to an ``sm-near-ep`` fact per
neighbour, never episode to episode.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from stargraph_mem.compiler.program import EpisodeNearRelation
from stargraph_mem.embedding import Matrix, from_blob, top_k, with_room
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.memory import EpisodeRecord

if TYPE_CHECKING:
    from stargraph_mem.engine.passes.near import VectorCache

EPISODE_NEAR_BINDINGS: Final = "#near"
"""The references' key of what ``near`` adds to a delta's bindings (shared with the fact
``near`` tests: both land in the delta's bindings)."""


@dataclass(frozen=True, slots=True)
class EarlierEpisodes:
    """A partition's episodes consumed by earlier passes, for episode ``near`` tests:
    oldest first (timestamp, then seq), at most the largest window a relation asks for,
    and the stored vectors of those that have one under embedder ``identity``."""

    records: Sequence[EpisodeRecord] = ()
    vectors: Mapping[str, bytes] = field(default_factory=dict)
    """Episode id → its stored vector (little-endian ``float32``), when stored."""
    identity: str | None = None
    """The embedder identity :attr:`vectors` were stored under."""


def window_of(relations: Sequence[EpisodeNearRelation]) -> tuple[int, int | None]:
    """How many earlier episodes a pass reads at most (the largest ``last``), and how far
    back (the longest ``within``, µs; ``None``: no bound, when a relation has none)."""
    last = max(rel.last for rel in relations)
    withins = [rel.within_us for rel in relations]
    back = None if any(w is None for w in withins) else max(w for w in withins if w is not None)
    return last, back


class EpisodeNeighbours:
    """The episode ``near`` tests of one pass: the earlier episodes with their vectors,
    growing by each episode once it has been ranked against those before it."""

    def __init__(
        self,
        relations: Sequence[EpisodeNearRelation],
        cache: VectorCache,
        earlier: EarlierEpisodes | None,
        episodes: Sequence[EpisodeRecord],
    ) -> None:
        self.relations = relations
        self.by_rule: dict[int, list[EpisodeNearRelation]] = {}
        for rel in relations:
            self.by_rule.setdefault(rel.rule_index, []).append(rel)
        self.cache = cache
        self.scores: dict[tuple[int, int, str], float] = {}
        self.records: dict[str, EpisodeRecord] = {}
        self.ids: list[str] = []
        self.times: list[int] = []
        size = max(64, len(episodes) + (len(earlier.records) if earlier else 0))
        self.rows = np.zeros((size, cache.embedder.dimension), dtype=np.float32)
        if earlier is not None:
            mine = {record.id for record in episodes}  # a resumed episode is ranked in turn
            prior = [r for r in earlier.records if r.id not in mine]
            stored = earlier.vectors if earlier.identity == cache.identity else {}
            self._add(prior, stored)

    def _add(self, records: Sequence[EpisodeRecord], stored: Mapping[str, bytes]) -> None:
        dim = self.cache.embedder.dimension
        missing = [r.content for r in records if r.id not in stored]
        made = iter(self.cache.of(missing)) if missing else iter(())
        self.rows = with_room(self.rows, len(self.ids), len(self.ids) + len(records))
        for record in records:
            blob = stored.get(record.id)
            row = from_blob(blob, dim) if blob is not None else next(made)
            self.rows[len(self.ids)] = row
            self.ids.append(record.id)
            self.times.append(to_us(record.timestamp))
            self.records[record.id] = record

    def neighbours(
        self, rel: EpisodeNearRelation, query: Matrix, at_us: int
    ) -> list[tuple[str, float]]:
        """The ``top_k`` earlier episodes nearest ``query`` within ``rel``'s window (the
        latest ``last``; with ``within``, stamped at or after ``at_us - within``)."""
        held = len(self.ids)
        lo = max(0, held - rel.last)
        rows, ids = self.rows[lo:held], self.ids[lo:held]
        if rel.within_us is not None:
            since = at_us - rel.within_us
            keep = np.flatnonzero(np.asarray(self.times[lo:held], dtype=np.int64) >= since)
            rows, ids = rows[keep], [ids[int(i)] for i in keep]
        if not ids:
            return []
        return top_k(rows, ids, query, rel.top_k, min_score=rel.min_cosine)

    def episode(self, n: int, record: EpisodeRecord, rules: Iterable[int], fb: Any) -> None:
        """Rank the earlier episodes against episode ``n`` for the tests of ``rules`` (those
        that may see it) and assert an ``sm-near-ep`` fact per neighbour, the worst first;
        then ``record`` joins the earlier episodes of the episodes after it."""
        (query,) = self.cache.of([record.content])
        relations = [r for idx in rules for r in self.by_rule.get(idx, ())]
        at_us = to_us(record.timestamp)
        ranked: dict[tuple[int, float | None, int, int | None], list[tuple[str, float]]] = {}
        for rel in relations:  # tests asking the same question share one ranking
            key = (rel.top_k, rel.min_cosine, rel.last, rel.within_us)
            if key not in ranked:
                ranked[key] = self.neighbours(rel, query, at_us)
            for eid, score in reversed(ranked[key]):
                fb.put(b"n", n)
                fb.put(b"k", rel.index)
                fb.put(b"id", eid)
                fb.put(b"cos", float(score))
                fb.assert_fact()
                self.scores[(n, rel.index, eid)] = score
        self._add([record], {})

    def record(self, eid: str) -> EpisodeRecord:
        """The earlier episode of id ``eid`` (a ``KeyError`` when it is none of them)."""
        return self.records[eid]

    def resolve(self, rule: int, n: int, raw: Mapping[str, str], refs: dict[str, Any]) -> None:
        """Each neighbour alias's cosine (``<alias>#cos``, for its variable) and the bindings
        that cite it: ``<alias>.cosine``, ``<alias>.episode``, ``<alias>.embedder``."""
        cited: dict[str, Any] = {}
        for rel in self.by_rule.get(rule, ()):
            eid = raw[rel.alias]
            score = self.scores.get((n, rel.index, eid))
            if score is None:
                raise KeyError(f"no neighbour episode {eid} for '{rel.alias}'")
            refs[rel.alias + "#cos"] = score
            cited[f"{rel.alias}.cosine"] = score
            cited[f"{rel.alias}.episode"] = eid
            cited[f"{rel.alias}.embedder"] = self.cache.identity
        if cited:
            refs[EPISODE_NEAR_BINDINGS] = {**refs.get(EPISODE_NEAR_BINDINGS, {}), **cited}
