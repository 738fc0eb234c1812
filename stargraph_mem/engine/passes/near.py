"""Near neighbours for ``near`` tests: computed outside CLIPS, asserted for the rules.

A pass of a pack whose fact patterns test ``near`` follows the facts CLIPS holds (the
stored ones, those the pass makes, minus those it closes) and, before each episode a
``near`` rule may see, ranks them against the episode's content: exact cosine under the
configured embedder, scores rounded and ties broken by id as
:func:`~stargraph_mem.embedding.top_k` does. So an episode's neighbours are the facts
current at its point of the pass, however the stream is cut into passes. A sweep's
``near`` ranks the facts current when the sweep starts against each other (a fact is not
its own neighbour). Each neighbour becomes an ``sm-near`` fact; no pairwise join in CLIPS.
A ``surprise`` pattern's score (:func:`surprise`) is computed from the same facts, the
same way, and asserted as one ``sm-surprise`` fact per episode.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any, Final

import numpy as np

from stargraph_mem.compiler.program import NearRelation
from stargraph_mem.embedding import (
    SCORE_DECIMALS,
    Embedder,
    Matrix,
    fast_scores,
    identity,
    top_k,
    with_room,
)
from stargraph_mem.stores.repositories.vectors import fact_text

_ID: Final = attrgetter("id")

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

    def seed(self, texts: Sequence[str], rows: Matrix) -> None:
        """Take the vectors ``rows`` of ``texts`` (made by this embedder elsewhere: stored
        ones) for the texts not held yet."""
        if len(self.rows) + len(texts) > CACHED_TEXTS:
            return
        held = self.rows
        for text, row in zip(texts, rows, strict=True):
            if text not in held:
                held[text] = row


class NearIndex:
    """The facts CLIPS holds in one pass, by CLIPS fact id, with their vectors: rows of one
    growing matrix; a closed fact's row is filled by the last row (no copy per change)."""

    def __init__(self, cache: VectorCache) -> None:
        self.cache = cache
        self.rows = np.zeros((64, cache.embedder.dimension), dtype=np.float32)
        self.ids: list[str] = []
        self.at: dict[str, int] = {}
        """Fact id → its row."""
        self.norm = 0.0
        """At least the largest L2 norm of a row held (for :func:`top_k`'s prefilter)."""
        self.pending: dict[str, tuple[str, int]] = {}
        """Facts held without a row yet (id → text, observation time): added ``later``,
        given their rows before the next ranking (their texts embedded with the next
        pass's episodes)."""
        self.keys: list[str] = []
        """Each row's tie key (see :func:`tie_key`), in row order."""
        self.touched: set[str] = set()
        """Ids added, removed or renamed since :meth:`mark` (see :meth:`holds_changed`)."""
        self.block: Matrix | None = None
        """Fast scores made beforehand (:meth:`score_ahead`): one row per query ahead,
        one column per row the index held then."""
        self.origin = np.full(64, -1, dtype=np.int64)
        """Each row's column in :attr:`block` (-1: added since)."""

    def add(self, facts: Iterable[tuple[str, str, int]], *, later: bool = False) -> None:
        """``(id, text, observed_us)`` of facts to rank (ids already held are left as they
        are); ``later``: held at once, embedded only when a ranking needs them."""
        pending = self.pending
        pairs = [
            (fid, (text, observed))
            for fid, text, observed in facts
            if fid not in self.at and fid not in pending
        ]
        self.touched.update(fid for fid, _ in pairs)
        if later:
            pending.update(pairs)
            return
        if pending:
            pairs = [*pending.items(), *pairs]
            pending.clear()
        if not pairs:
            return
        vectors = self.cache.of([text for _, (text, _) in pairs])
        start, end = len(self.ids), len(self.ids) + len(pairs)
        self.rows = with_room(self.rows, start, end)
        if end > len(self.origin):
            self.origin = np.concatenate(
                (self.origin, np.full(max(end, 2 * len(self.origin)) - len(self.origin), -1))
            )
        self.origin[start:end] = -1
        if len(vectors) == 1:
            self.rows[start] = vectors[0]
        else:
            self.rows[start:end] = np.stack(vectors)
        added = [fid for fid, _ in pairs]
        self.at.update(zip(added, range(start, end), strict=True))
        self.ids.extend(added)
        self.keys.extend(tie_key(observed, text, fid) for fid, (text, observed) in pairs)
        self.norm = max(self.norm, largest_norm(self.rows[start:end]))

    def remove(self, fids: Iterable[str]) -> None:
        """Forget closed facts (ids not held are ignored)."""
        for fid in fids:
            self.touched.add(fid)
            row = self.at.pop(fid, None)
            if row is None:
                self.pending.pop(fid, None)
                continue
            last = self.ids.pop()
            last_key = self.keys.pop()
            if last != fid:
                self.rows[row] = self.rows[len(self.ids)]
                self.origin[row] = self.origin[len(self.ids)]
                self.ids[row] = last
                self.keys[row] = last_key
                self.at[last] = row

    def rename(self, final: Mapping[str, str | None]) -> None:
        """Give the facts a pass made their stored ids (``None``: its delta was rejected,
        the fact is not kept)."""
        pending = self.pending
        touched = self.touched
        for temp, fid in final.items():
            touched.add(temp)
            if fid is not None:
                touched.add(fid)
            row = self.at.pop(temp, None)
            if row is None:
                held = pending.pop(temp, None)
                if held is not None and fid is not None:
                    pending[fid] = held
                continue
            self.at[temp] = row
            if fid is None:
                self.remove([temp])
            else:
                del self.at[temp]
                self.ids[row] = fid
                self.keys[row] = renamed_key(self.keys[row], fid)
                self.at[fid] = row

    def holds(self, facts: Sequence[Any]) -> bool:
        """Whether the index holds exactly the facts ``facts`` (by id)."""
        if len(facts) != len(self.ids) + len(self.pending):
            return False
        if self.pending:
            return all(f.id in self.at or f.id in self.pending for f in facts)
        return all(map(self.at.__contains__, map(_ID, facts)))

    def mark(self) -> None:
        """Start following the ids the index changes (it holds exactly some set now)."""
        self.touched = set()

    def holds_changed(
        self, count: int, changed: Iterable[str], holds: Callable[[str], bool]
    ) -> bool:
        """Whether the index holds exactly a set of ``count`` facts (``holds``: whether an
        id is among them), given it held exactly that set at :meth:`mark` apart from the
        ids ``changed`` since. Only the ids changed on either side are looked at: an id
        neither side changed is held by both or by neither, so a pass over few episodes
        checks a few ids, not every fact of the partition."""
        if count != len(self.ids) + len(self.pending):
            return False
        at, pending = self.at, self.pending
        return all((fid in at or fid in pending) == holds(fid) for fid in (*self.touched, *changed))

    def vector(self, fid: str) -> Matrix:
        self.add(())  # the facts added later get their rows
        row: Matrix = self.rows[self.at[fid]]
        return row

    def score_ahead(self, queries: Matrix) -> None:
        """Make the fast scores of every row held for each of ``queries`` (the episodes
        ahead, in order) in one call: see :func:`~stargraph_mem.embedding.fast_scores`."""
        self.add(())  # the facts added later get their rows
        n = len(self.ids)
        self.block = fast_scores(self.rows[:n], queries)
        self.origin[:n] = np.arange(n)

    def neighbours(
        self,
        rel: NearRelation,
        query: Matrix,
        exclude: str | None = None,
        ahead: int | None = None,
    ) -> list[tuple[str, float]]:
        """The ``top_k`` facts nearest ``query`` with cosine ≥ ``min_cosine``, best first
        (``exclude``, a fact ranked against the others, is never its own neighbour).
        ``ahead``: ``query`` is row ``ahead`` of the last :meth:`score_ahead`'s queries."""
        self.add(())  # the facts added later get their rows
        k = rel.top_k + (1 if exclude in self.at else 0)
        n = len(self.ids)
        fast = None
        if ahead is not None and self.block is not None:
            origin = self.origin[:n]
            fast = self.block[ahead][origin]
            added = np.flatnonzero(origin < 0)
            if len(added):  # rows added since the scores were made: score them now
                fast[added] = fast_scores(self.rows[added], query[None, :])[0]
        found = top_k(
            self.rows[:n],
            self.keys,
            query,
            k,
            min_score=rel.min_cosine,
            norm=self.norm,
            fast=fast,
        )
        return [(fid, score) for fid, score in map(_of_key, found) if fid != exclude][: rel.top_k]


def largest_norm(block: Matrix) -> float:
    """At least the largest L2 norm of ``block``'s rows: the sums of squares in
    ``float32`` (one product for one row), enlarged by their worst rounding (a sum of ``d``
    non-negative products is off by at most ``γ_(d+1)`` of itself, plus ``2^-149`` per
    product that underflows) and the square root's. A sum that overflows gives infinity:
    no prefilter then (see :func:`top_k`)."""
    d = int(block.shape[1])
    bound = 1.0 + 2.0 * (d + 1) * 2.0**-24 + 1e-6
    if len(block) == 1:
        row = block[0]
        squares = float(np.dot(row, row))
    else:
        squares = float(np.einsum("ij,ij->i", block, block).max())
    return math.sqrt(squares * bound + 2 * d * 2.0**-149) * bound


def statement(subject: str, predicate: str, obj: str) -> str:
    """The text a fact is ranked by: its statement (subject, predicate, object)."""
    return fact_text(subject, predicate, obj)


_SEP: Final = "\x1f"


def tie_key(observed_us: int, text: str, fid: str) -> str:
    """The key that orders facts of equal cosine: the earliest observed first, then by
    statement, then by id. An observation time is the same whether the fact was made
    earlier in this pass (under a temporary id) or in an earlier one (under its stored
    id), so ties go the same way however the stream is cut into passes."""
    return f"{observed_us:020d}{_SEP}{text}{_SEP}{fid}"


def renamed_key(key: str, fid: str) -> str:
    """``key`` of a fact now known by ``fid``."""
    return key.rsplit(_SEP, 1)[0] + _SEP + fid


def _of_key(found: tuple[str, float]) -> tuple[str, float]:
    return found[0].rsplit(_SEP, 1)[1], found[1]


Rank = tuple[float, int, str]
"""A fact's place in representative order: ``(-confidence, valid_from, id)`` (the highest
confidence first, then the oldest, then the smallest id)."""


def clips_ranks(found: Any) -> dict[str, Rank]:
    """Each ``sm-fact`` of ``found``'s place in representative order, by id."""
    out: dict[str, Rank] = {}
    for fact in found:
        fid = str(fact["f_id"])
        out[fid] = (-float(fact["f_confidence"]), int(fact["f_valid_from"]), fid)
    return out


def clusters(
    index: NearIndex, ranks: Mapping[str, Rank], min_cosine: float, at_least: int
) -> list[tuple[str, list[tuple[str, float]]]]:
    """The clusters of the facts ``index`` holds with at least ``at_least`` members besides
    their representative: ``(representative, [(member, cosine), …] best first)``.

    Leader clustering, in representative order (:data:`Rank`): each fact not yet in a
    cluster represents a new one, which takes every fact not yet in a cluster whose cosine
    with it (rounded as :func:`~stargraph_mem.embedding.top_k` rounds) is at
    least ``min_cosine``. Every fact ends in exactly one cluster, every member is within
    ``min_cosine`` of its representative (no chaining), and the representative is the
    cluster's best fact; the order is total, so the clusters do not depend on the order
    the facts were stored or made in. Cost: one dot product per representative."""
    held = len(index.ids)
    if not held:
        return []
    order = sorted(range(held), key=lambda row: ranks.get(index.ids[row], (0.0, 0, index.ids[row])))
    rows = index.rows[:held]
    free = np.ones(held, dtype=bool)
    out: list[tuple[str, list[tuple[str, float]]]] = []
    for lead in order:
        if not free[lead]:
            continue
        free[lead] = False
        candidates = np.flatnonzero(free)
        if not len(candidates):
            break
        raw = rows[candidates] @ rows[lead]
        scores = np.round(raw.astype(np.float64), SCORE_DECIMALS)
        taken = candidates[scores >= min_cosine]
        if not len(taken):
            continue
        free[taken] = False
        if len(taken) < at_least:
            continue
        kept = scores[scores >= min_cosine]
        members = sorted(
            ((-float(score), index.ids[int(row)]) for row, score in zip(taken, kept, strict=True))
        )
        out.append((index.ids[lead], [(fid, -neg) for neg, fid in members]))
    return out


SURPRISE_DECIMALS: Final = SCORE_DECIMALS
"""A surprise score is rounded to as many places as the cosines it averages."""


def surprise(index: NearIndex, query: Matrix, k: int) -> tuple[float, list[tuple[str, float]]]:
    """Specification 004's surprise of ``query`` against the facts ``index`` holds, and
    the neighbours it averages over (best first).

    ``u = 1 − (c₁ + … + c_m) / m`` over the ``m = min(k, facts)`` nearest facts, each
    cosine ``cᵢ`` rounded to six places and ties broken by id as
    :func:`~stargraph_mem.embedding.top_k` ranks (the same facts ``near`` would find),
    summed exactly (``math.fsum``), clamped to [0, 1] and rounded to six places; 1.0 when
    there is no fact. The same facts give the same score, whatever order they came in."""
    rel = NearRelation(
        index=-1, rule_index=-1, rule_id="", alias="", of="episode", top_k=k, min_cosine=None
    )
    found = index.neighbours(rel, query) if index.ids else []
    if not found:
        return 1.0, []
    mean = math.fsum(score for _, score in found) / len(found)
    return round(max(0.0, min(1.0, 1.0 - mean)), SURPRISE_DECIMALS), found
