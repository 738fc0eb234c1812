"""The ``near`` tests of one pass: the facts CLIPS holds, followed between episodes (from
its logs of made and closed facts), ranked against each episode (or each other, in a
sweep) and asserted as ``sm-near`` facts; the cosines cited by each delta.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import clips
import numpy as np

from stargraph_mem.compiler.pack import CompiledPack
from stargraph_mem.compiler.program import NearRelation, SurpriseRelation
from stargraph_mem.embedding import PREFILTER_FROM
from stargraph_mem.engine.passes.clips_logs import FactLogs
from stargraph_mem.engine.passes.fact_builder import FactBuilder
from stargraph_mem.engine.passes.fact_list import FactList
from stargraph_mem.engine.passes.layered import Layered
from stargraph_mem.engine.passes.near import (
    NearIndex,
    NearKey,
    VectorCache,
    clips_ranks,
    clusters,
    statement,
    surprise,
)
from stargraph_mem.engine.passes.slot_values import Unresolved
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord


def needs_embedder(compiled: CompiledPack) -> str:
    """The error for a pack whose patterns test ``near`` (of facts or of earlier
    episodes) or whose rules score ``surprise``, run without an embedder."""
    if compiled.near:
        rule_id, what = compiled.near[0].rule_id, "tests 'near'"
    elif compiled.surprise:
        rule_id, what = compiled.surprise[0].rule_id, "scores 'surprise'"
    else:
        rule_id, what = compiled.episode_near[0].rule_id, "tests 'near'"
    return (
        f"pack '{compiled.name}': rule '{rule_id}' {what} (similarity), which needs "
        "an embedder: open the memory with one (embedder='hash' is built in), not embedder=None"
    )


class Runtime(Protocol):
    """What a pass's ``near`` tests use of its runtime: the pack, its environment, and
    asserting a stored fact as it first ranks among an episode's neighbours."""

    compiled: CompiledPack
    env: clips.Environment

    def _assert_fact(
        self, fb: FactBuilder, fact: EngineFact, anchor: int = 0, status: str | None = None
    ) -> None: ...


NEAR_KEPT: Final = 64
"""Partitions whose ``near`` index a runtime keeps between passes."""


SCORED_AHEAD: Final = 64
"""Episodes whose fast scores a pass makes in one call (see :meth:`NearPass.ahead`)."""
SCORED_FLOATS: Final = 1 << 22
"""At most this many fast scores made in one call (16 MiB): fewer episodes ahead over a
large partition."""

NEAR_BINDINGS: Final = "#near"
"""The references' key of what ``near`` adds to a delta's bindings (see :class:`NearPass`)."""


class NearPass:
    """The ``near`` tests of one pass: the facts CLIPS holds, followed between episodes,
    ranked against each episode (or, for a sweep, each other) and asserted as ``sm-near``
    facts, the worst first (CLIPS fires the newest activation first: the best neighbour)."""

    def __init__(
        self,
        runtime: Runtime,
        cache: VectorCache,
        builders: Mapping[str, FactBuilder],
        facts: Sequence[EngineFact],
        *,
        lazy: bool = False,
        index: NearIndex | None = None,
        episodes: Sequence[EpisodeRecord] = (),
    ) -> None:
        env = runtime.env
        self.relations = runtime.compiled.near
        self.by_rule: dict[int, list[NearRelation]] = {}
        for rel in self.relations:
            self.by_rule.setdefault(rel.rule_index, []).append(rel)
        self.cache = cache
        self.fb = builders["sm-near"]
        self.scores: dict[NearKey, float] = {}
        self.runtime, self.fact_fb = runtime, builders["sm-fact"]
        self.lazy = lazy
        """The pack's rules see stored facts only as neighbours (``CompiledPack.near_only``):
        each is asserted into CLIPS when it first ranks among them."""
        self.stored: Mapping[str, EngineFact] | Layered[str, EngineFact] = (
            (facts.ids() if isinstance(facts, FactList) else {f.id: f for f in facts})
            if lazy
            else {}
        )
        self.admitted: set[str] = set()
        self._logs = FactLogs(env._env)
        # archived facts enter CLIPS beside these for patterns that admit them: never ranked
        if index is None:
            index = NearIndex(cache)
            index.add(
                (
                    f.id,
                    statement(f.subject, f.predicate, f.object),
                    f.observed_us or f.valid_from_us,
                )
                for f in facts
            )
        self.index = index
        self.surprising: dict[int, list[SurpriseRelation]] = {}
        for srel in runtime.compiled.surprise:
            self.surprising.setdefault(srel.rule_index, []).append(srel)
        self.surprise_fb = builders.get("sm-surprise")
        self.surprises: dict[tuple[int, int], tuple[float, list[tuple[str, float]]]] = {}
        """``(episode ordinal, relation index)`` → the score and the neighbours it averages."""
        self.made_ids: Mapping[str, str | None] = {}
        """The stored ids of the facts the pass made, by temporary id (the collector's)."""
        self.episodes = episodes
        """The pass's episodes in order (episode ``n`` is ``episodes[n - 1]``): the queries
        ahead whose fast scores are made together (see :meth:`ahead`)."""
        self.scored: tuple[int, int] | None = None
        """The episodes ``[first, end)`` whose fast scores the index holds."""

    def surprise(self, n: int, record: EpisodeRecord, rules: Iterable[int]) -> None:
        """The surprise of episode ``n`` for the ``surprise`` patterns of ``rules`` (those
        that may see it), against the facts current at its point of the pass."""
        relations = [r for idx in rules for r in self.surprising.get(idx, ())]
        if not relations or self.surprise_fb is None:
            return
        self.sync()
        (query,) = self.cache.of([record.content])
        scored: dict[int, tuple[float, list[tuple[str, float]]]] = {}
        fb = self.surprise_fb
        for rel in relations:  # patterns asking for the same k share one score
            if rel.k not in scored:
                scored[rel.k] = surprise(self.index, query, rel.k)
            self.surprises[(n, rel.index)] = scored[rel.k]
            fb.put(b"n", n)
            fb.put(b"k", rel.index)
            fb.put(b"u", float(scored[rel.k][0]))
            fb.assert_fact()

    def sync(self, *, later: bool = False) -> None:
        """Follow the facts CLIPS made and closed since the last call (from its logs; a log
        without a fact is not called for); ``later``: the made facts' texts are embedded
        when a ranking needs them (see :meth:`NearIndex.add`)."""
        logs = self._logs
        if logs.has_made():
            self.index.add(logs.take_made(), later=later)
        elif not later:
            self.index.add(())  # the facts added later get their rows
        if logs.has_gone():
            self.index.remove(logs.take_gone())

    def episode(self, n: int, record: EpisodeRecord, rules: Iterable[int]) -> None:
        """The neighbours of episode ``n`` for the ``near`` tests of ``rules`` (those that
        may see it)."""
        relations = [r for idx in rules for r in self.by_rule.get(idx, ()) if not r.sweep]
        if not relations:
            return
        self.sync()
        (query,) = self.cache.of([record.content])
        ahead = self.ahead(n)
        ranked: dict[tuple[int, float | None], list[tuple[str, float]]] = {}
        for rel in relations:  # tests asking the same question share one ranking
            key = (rel.top_k, rel.min_cosine)
            if key not in ranked:
                ranked[key] = self.index.neighbours(rel, query, ahead=ahead)
            self.put(n, rel, "", ranked[key])

    def forget_ahead(self) -> None:
        """Drop the fast scores made ahead: they are this pass's only (a kept index would
        hold them for nothing until its next pass)."""
        self.index.block = None
        self.scored = None

    def ahead(self, n: int) -> int | None:
        """Episode ``n``'s row among the fast scores the index made ahead, making them for
        it and the next episodes (up to :data:`SCORED_AHEAD`) when they are not made yet;
        None for a pass of one episode, or an index too small to prefilter."""
        episodes = self.episodes
        if len(episodes) < 2 or not 1 <= n <= len(episodes):
            return None
        if self.scored is not None and self.scored[0] <= n < self.scored[1]:
            return n - self.scored[0]
        held = len(self.index.ids) + len(self.index.pending)
        if held <= PREFILTER_FROM:
            return None
        count = max(1, min(SCORED_AHEAD, SCORED_FLOATS // held))
        upcoming = episodes[n - 1 : n - 1 + count]
        self.index.score_ahead(np.stack(self.cache.of([r.content for r in upcoming])))
        self.scored = (n, n + len(upcoming))
        return 0

    def sweep(self) -> None:
        """The neighbours of every fact held when the sweep starts, for the sweeps' tests."""
        relations = [r for r in self.relations if r.sweep]
        if not relations:
            return
        self.sync()
        ids = sorted(self.index.ids)
        for rel in relations:
            if rel.at_least is not None:
                self.clusters(rel)
                continue
            for fid in ids:
                self.put(0, rel, fid, self.index.neighbours(rel, self.index.vector(fid), fid))

    def clusters(self, rel: NearRelation) -> None:
        """A clustering test's neighbours: each large enough cluster's members, as the
        neighbours of its representative (see :func:`.near.clusters`)."""
        assert rel.at_least is not None and rel.min_cosine is not None  # checked by the IR
        found = self.runtime.env.eval("(find-all-facts ((?f sm-fact)) TRUE)")
        ranks = clips_ranks(found)
        for lead, members in clusters(self.index, ranks, rel.min_cosine, rel.at_least):
            self.put(0, rel, lead, members)

    def put(self, n: int, rel: NearRelation, of: str, found: list[tuple[str, float]]) -> None:
        for fid, _ in found if self.lazy else ():
            stored = self.stored.get(fid) if fid not in self.admitted else None
            if stored is not None:
                self.admitted.add(fid)
                self.runtime._assert_fact(self.fact_fb, stored)
        fb = self.fb
        for fid, score in reversed(found):
            fb.put(b"n", n)
            fb.put(b"k", rel.index)
            fb.put(b"of", of)
            fb.put(b"id", fid)
            fb.put(b"cos", float(score))
            fb.assert_fact()
            self.scores[(n, rel.index, of, fid)] = score

    def resolve(self, rule: int, n: int, raw: Mapping[str, str], refs: dict[str, Any]) -> None:
        """Each ``near`` fact alias's cosine (``<alias>#cos``, for its variable) and the
        bindings that cite it: ``<alias>.cosine``, ``<alias>.fact``, ``<alias>.embedder``."""
        cited: dict[str, Any] = {}
        for rel in self.by_rule.get(rule, ()):
            if rel.alias == "-":
                continue
            key = (
                (0, rel.index, raw[rel.of], raw[rel.alias])
                if rel.sweep
                else (
                    n,
                    rel.index,
                    "",
                    raw[rel.alias],
                )
            )
            score = self.scores.get(key)
            if score is None:
                raise Unresolved(f"no neighbour {raw[rel.alias]} for '{rel.alias}'")
            refs[rel.alias + "#cos"] = score
            cited[f"{rel.alias}.cosine"] = score
            cited[f"{rel.alias}.fact"] = refs[rel.alias].id
            cited[f"{rel.alias}.embedder"] = self.cache.identity
        for srel in self.surprising.get(rule, ()):
            found = self.surprises.get((n, srel.index))
            if found is None:
                raise Unresolved(f"no surprise score for '{srel.alias}'")
            score, nearest = found
            refs[srel.alias + "#surprise"] = score
            cited[srel.alias] = score
            cited[f"{srel.alias}.k"] = srel.k
            cited[f"{srel.alias}.facts"] = [self.fact_id(fid) for fid, _ in nearest]
            cited[f"{srel.alias}.cosines"] = [cos for _, cos in nearest]
            cited[f"{srel.alias}.embedder"] = self.cache.identity
        if cited:
            refs[NEAR_BINDINGS] = cited

    def fact_id(self, fid: str) -> str:
        """A neighbour's id as stored: a fact the pass made has a temporary id in CLIPS
        until its delta is built."""
        final = self.made_ids.get(fid, fid)
        return fid if final is None else final
