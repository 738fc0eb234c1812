"""Near neighbours for ``near`` tests: computed outside CLIPS, asserted for the rules.

A pass of a pack whose fact patterns test ``near`` follows the facts CLIPS holds (the
stored ones, those the pass makes, minus those it closes) and, before each episode a
``near`` rule may see, ranks them against the episode's content: exact cosine under the
configured embedder, scores rounded and ties broken by id as
:func:`~stargraph_mem.embedding.top_k` does. So an episode's neighbours are the facts
current at its point of the pass, however the stream is cut into passes. A sweep's
``near`` ranks the facts current when the sweep starts against each other (a fact is not
its own neighbour). Each neighbour becomes an ``sm-near`` fact; no pairwise join in CLIPS.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from stargraph_mem.compiler.generator import NearRelation
from stargraph_mem.embedding import Embedder, Matrix, identity, top_k
from stargraph_mem.stores.repositories.vectors import fact_text

CACHED_TEXTS: Final = 200_000
"""Texts whose vectors a runtime remembers per embedder (then it starts afresh)."""

NearKey = tuple[int, int, str, str]
"""``(episode ordinal (0 in a sweep), relation index, of-fact id ("" for the episode),
neighbour id)``: the raw CLIPS fact ids, as the rules print them."""


class VectorCache:
    """Vectors of texts under one embedder (a cache only: the same text, the same row)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.identity = identity(embedder)
        self.rows: dict[str, Matrix] = {}

    def of(self, texts: Sequence[str]) -> list[Matrix]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.rows))
        if missing:
            if len(self.rows) + len(missing) > CACHED_TEXTS:
                self.rows.clear()
            made = np.asarray(self.embedder.embed(missing), dtype=np.float32)
            self.rows.update(zip(missing, made, strict=True))
        return [self.rows[t] for t in texts]


@dataclass
class NearIndex:
    """The facts CLIPS holds in one pass, by CLIPS fact id, with their vectors."""

    cache: VectorCache
    ids: dict[str, Matrix] = field(default_factory=dict)
    """Candidate fact id → its statement's vector."""
    others: set[str] = field(default_factory=set)
    """Facts CLIPS holds that are no candidates (archived ones)."""
    last_index: int = 0
    _matrix: tuple[Matrix, list[str]] | None = None

    def add(self, facts: Iterable[tuple[str, str]]) -> None:
        """``(id, text)`` of facts to rank."""
        pairs = list(facts)
        for (fid, _), row in zip(pairs, self.cache.of([t for _, t in pairs]), strict=True):
            self.ids[fid] = row
        if pairs:
            self._matrix = None

    def keep(self, live: set[str]) -> None:
        """Forget the facts CLIPS no longer holds."""
        gone = [fid for fid in self.ids if fid not in live]
        for fid in gone:
            del self.ids[fid]
        self.others &= live
        if gone:
            self._matrix = None

    @property
    def size(self) -> int:
        return len(self.ids) + len(self.others)

    def matrix(self) -> tuple[Matrix, list[str]]:
        if self._matrix is None:
            ids = list(self.ids)
            rows = [self.ids[i] for i in ids]
            dim = self.cache.embedder.dimension
            m = np.stack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
            self._matrix = (m, ids)
        return self._matrix

    def neighbours(
        self, rel: NearRelation, query: Matrix, exclude: str | None = None
    ) -> list[tuple[str, float]]:
        matrix, ids = self.matrix()
        k = rel.top_k + (1 if exclude is not None and exclude in self.ids else 0)
        found = top_k(matrix, ids, query, k, min_score=rel.min_cosine)
        return [(fid, score) for fid, score in found if fid != exclude][: rel.top_k]


def statement(subject: str, predicate: str, obj: str) -> str:
    """The text a fact is ranked by: its statement (subject, predicate, object)."""
    return fact_text(subject, predicate, obj)


def clips_facts(found: Any) -> list[tuple[int, str, str]]:
    """``(fact index, id, statement)`` of the ``sm-fact`` facts a CLIPS call returned."""
    out = []
    for fact in found:
        out.append(
            (
                int(fact.index),
                str(fact["f_id"]),
                statement(str(fact["f_subject"]), str(fact["f_predicate"]), str(fact["f_object"])),
            )
        )
    return out
