"""Recall: the hybrid search over one partition's facts and episodes.

Strategies, each a ranked list of hits, fused by Reciprocal Rank Fusion
(:func:`~stargraph_mem.engine.recall.fusion.rrf`):

- ``fts``: the query's words in the facts' full-text index and in the episodes' (ranked
  apart, then interleaved rank by rank: the two indexes' scores are not comparable);
- ``vector``: exact cosine between the query's vector and the partition's fact and
  episode vectors of the configured embedder (one scale: merged by cosine, ties by key);
- ``graph``, chosen by the query's intent: ``when`` walks the temporal chain (episodes
  just before and after the best episode hits, in their sessions); ``who``/``what``
  resolves the entities the query names and takes their current facts; ``why`` follows
  lineage both ways (a fact's source episodes, the facts derived from an episode);
  ``general`` runs no graph strategy.

Before reading, the partition's vectors and the episodes' word index are caught up with
what was recorded (a ``record`` never waits for an embedder; the next recall does that
work).
Only current facts are recalled unless ``include_history``; ``after``/``before`` keep
episodes by their time and facts by their ``valid_from``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Final, get_args

from stargraph_mem.embedding import Embedder, Matrix, identity
from stargraph_mem.embedding.hashing import STOPWORDS
from stargraph_mem.engine.recall.fusion import RecallWeights, hit_key, rrf
from stargraph_mem.engine.recall.intent import (
    GRAPH_STRATEGY,
    HASHING_EMBEDDER_NAME,
    EmbeddingIntentClassifier,
    IntentDecision,
    classifier_for,
    classify_complexity,
)
from stargraph_mem.engine.recall.models import (
    HitKind,
    ProfileLines,
    RecallHit,
    RecallKinds,
    RecallResult,
    RecallSettings,
    TemporalNeighbour,
)
from stargraph_mem.engine.recall.timefilter import TimeWindow, parse_time_window
from stargraph_mem.errors import EntityNotFoundError, RecallError
from stargraph_mem.model.entities import EntityProfile
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.model.layers import RecallMode, types_of_mode
from stargraph_mem.model.lifecycle import CHALLENGED, CURRENT
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.repositories.search import MAX_LIMIT, query_words
from stargraph_mem.stores.scope import Partition

if TYPE_CHECKING:
    from stargraph_mem.stores.protocols import Database

__all__ = ["POOL_MIN", "Recall", "StrategyTimes", "check_kinds"]

POOL_MIN: Final = 30
"""Each strategy ranks at least this many candidates (else ``3 × limit``) before fusion."""
SEEDS: Final = 5
"""How many of the best hits seed a lineage walk."""
TEMPORAL_SEEDS: Final = 2
"""How many of the best episode hits seed a temporal walk (their neighbours are what the
walk adds: seeding with more would leave out the very episodes around the best)."""
PROFILES: Final = 2
"""Profiles of at most this many entities named by a who/what query go in the context."""
PROFILE_FACTS: Final = 8
"""A profile's facts and timeline lines at most."""
_KINDS: Final = get_args(RecallKinds)


def check_kinds(kinds: object) -> RecallKinds:
    """``kinds`` when it is ``facts``, ``episodes`` or ``both``; else :class:`RecallError`."""
    if kinds not in _KINDS:
        raise RecallError(
            f"kinds must be one of {', '.join(_KINDS)} (got {kinds!r})",
            parameter="kinds",
            value=str(kinds),
        )
    return kinds  # type: ignore[return-value]


def _check_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise RecallError(
            f"limit must be an integer from 1 to {MAX_LIMIT} (got {limit!r})",
            parameter="limit",
            value=str(limit),
        )
    return limit


def _check_query(query: object) -> str:
    if not isinstance(query, str):
        raise RecallError(f"query must be a string (got {type(query).__name__})", parameter="query")
    if not query.strip():
        raise RecallError("query is empty: recall needs words to look for", parameter="query")
    return query


def content_words(words: Sequence[str]) -> list[str]:
    """``words`` without the function words (``where``, ``does``, ``the``…) that would
    match nearly every text, unless nothing else is left."""
    kept = [word for word in words if word not in STOPWORDS]
    return kept or list(words)


def _in_window(moment: datetime, window: TimeWindow) -> bool:
    return window.contains(moment)


@dataclass
class StrategyTimes:
    """Seconds each strategy took in one recall (for the latency metric by strategy)."""

    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, strategy: str, since: float) -> None:
        self.seconds[strategy] = self.seconds.get(strategy, 0.0) + time.perf_counter() - since


@dataclass
class _Lists:
    """The candidates of one recall, per strategy, as fusion keys (best first)."""

    fts_facts: list[str] = field(default_factory=list)
    fts_episodes: list[str] = field(default_factory=list)
    vector: list[tuple[str, float]] = field(default_factory=list)
    graph: list[str] = field(default_factory=list)

    def ranked(self) -> dict[str, list[str]]:
        fts: list[str] = []
        for pair in zip(self.fts_facts, self.fts_episodes, strict=False):
            fts.extend(pair)
        longer = self.fts_facts if len(self.fts_facts) > len(self.fts_episodes) else []
        longer = longer or self.fts_episodes
        fts.extend(longer[min(len(self.fts_facts), len(self.fts_episodes)) :])
        vector = [key for key, _ in sorted(self.vector, key=lambda kv: (-kv[1], kv[0]))]
        return {"fts": fts, "vector": vector, "graph": self.graph}


class Recall:
    """Recall over one database with one embedder (``None``: no vector strategy)."""

    def __init__(
        self,
        database: Database,
        embedder: Embedder | None,
        *,
        settings: RecallSettings | None = None,
        clock: Callable[[], datetime],
        on_partition: Callable[[Partition], object] | None = None,
    ) -> None:
        self.database = database
        self.embedder = embedder
        self.settings = settings or RecallSettings()
        self.clock = clock
        self.identity = None if embedder is None else identity(embedder)
        self.classifier = classifier_for(
            embedder, threshold=self.settings.intent_similarity_threshold
        )
        self._on_partition = on_partition

    async def _embed_query(self, query: str) -> Matrix | None:
        if self.embedder is None:
            return None
        if self.embedder.name == HASHING_EMBEDDER_NAME:
            matrix = self.embedder.embed([query])
        else:
            matrix = await asyncio.to_thread(self.embedder.embed, [query])
        row: Matrix = matrix[0]
        return row

    async def recall(
        self,
        query: str,
        *,
        user: str,
        agent: str,
        kinds: RecallKinds = "both",
        after: str | datetime | None = None,
        before: str | datetime | None = None,
        limit: int | None = None,
        include_history: bool = False,
        entity: str | None = None,
        weights: RecallWeights | Mapping[str, float] | None = None,
        k: int | None = None,
        touch: bool = True,
        times: StrategyTimes | None = None,
        include_challenged: bool = False,
        mode: RecallMode = "full_context",
    ) -> RecallResult:
        """See :meth:`~stargraph_mem.engine.api.Consolidator.recall`."""
        query = _check_query(query)
        try:
            types = types_of_mode(mode)
        except ValueError as exc:
            raise RecallError(str(exc), parameter="mode") from exc
        kinds = check_kinds(kinds)
        limit = _check_limit(limit)
        FactPattern(user=user, agent=agent)  # the scope parts' own checks
        if not isinstance(user, str) or not isinstance(agent, str):
            raise RecallError("user and agent name the partition to recall from: both needed")
        if entity is not None and (not isinstance(entity, str) or not entity.strip()):
            raise RecallError(f"entity must be a name (got {entity!r})", parameter="entity")
        fusion = self.settings.weights
        if weights is not None:
            fusion = weights if isinstance(weights, RecallWeights) else RecallWeights(**weights)
        rrf_k = self.settings.rrf_k if k is None else k
        words = content_words(query_words(query) or [])
        window = parse_time_window(after, before, now=self.clock())
        times = times or StrategyTimes()
        partition = Partition(user, agent)
        key = partition.key
        if self._on_partition is not None:
            await _maybe_await(self._on_partition(partition))
        complexity = classify_complexity(query)
        params = self.settings.params(complexity)
        limit = limit or params.limit
        pool = max(POOL_MIN, 3 * limit)
        after_us = None if window.after is None else to_us(window.after)
        before_us = None if window.before is None else to_us(window.before)
        vectors = self.database.vectors

        started = time.perf_counter()
        vector = None
        if self.embedder is not None and fusion.vector > 0:
            await vectors.catch_up(key, self.embedder)
            vector = await self._embed_query(query)
        decision = self._decide(query, vector)
        times.add("catch_up", started)

        lists = _Lists()
        cosines: dict[str, float] = {}

        async def full_text() -> None:
            started = time.perf_counter()
            if kinds != "episodes" and fusion.fts > 0:
                found = await self.database.facts.search_ids(
                    " ".join(words),
                    user=user,
                    agent=agent,
                    limit=pool,
                    include_history=include_history,
                    include_challenged=include_challenged,
                    mode=mode,
                    valid_from_after_us=after_us,
                    valid_from_before_us=before_us,
                )
                lists.fts_facts = [hit_key("fact", fact_id) for fact_id in found]
            if kinds != "facts" and fusion.fts > 0:
                episode_hits = await vectors.episode_text_hits(
                    key, words, limit=pool, after_us=after_us, before_us=before_us
                )
                lists.fts_episodes = [hit_key("episode", eid) for eid, _ in episode_hits]
            times.add("fts", started)

        # challenged facts are current, flagged: left out unless asked for
        flagged_too = None if include_history else (CURRENT, CHALLENGED)

        async def nearest(kind: HitKind) -> list[tuple[str, float]]:
            assert vector is not None and self.embedder is not None
            return await vectors.nearest(
                key,
                kind,
                self.embedder,
                vector,
                limit=pool,
                after_us=after_us,
                before_us=before_us,
                current_only=not (include_history or include_challenged),
                statuses=flagged_too if include_challenged and kind == "fact" else None,
            )

        async def by_vector() -> None:
            started = time.perf_counter()
            if vector is None:
                return
            asked: tuple[tuple[HitKind, bool], ...] = (
                ("fact", kinds != "episodes"),
                ("episode", kinds != "facts"),
            )
            wanted = [kind for kind, yes in asked if yes]
            # a large dense ranking runs in a thread (the loop serves others meanwhile)
            for kind, near in zip(
                wanted, await asyncio.gather(*(nearest(k) for k in wanted)), strict=True
            ):
                for item_id, score in near:
                    if score <= 0.0:  # no shared direction: not a match by meaning
                        continue
                    cosines[hit_key(kind, item_id)] = score
                    lists.vector.append((hit_key(kind, item_id), score))
            times.add("vector", started)

        await full_text()
        await by_vector()

        started = time.perf_counter()
        strategy = "entity" if entity is not None else GRAPH_STRATEGY[decision.intent]
        names: list[str] = []
        profiles: list[EntityProfile] = []
        temporal: list[tuple[str, int]] = []
        if fusion.graph > 0 and strategy is not None:
            seeds = lists.ranked()
            seed_keys = _first_keys(seeds, SEEDS)
            if strategy == "temporal" and kinds != "facts":
                seed_episodes = [k[8:] for k in seed_keys if k.startswith("episode:")]
                seed_episodes = seed_episodes[:TEMPORAL_SEEDS]
                temporal = await self.database.entities.temporal_neighbours(
                    key,
                    seed_episodes,
                    depth=params.graph_depth,
                    after_us=after_us,
                    before_us=before_us,
                )
                lists.graph = [hit_key("episode", eid) for eid, _ in temporal]
            elif strategy == "entity":
                names, profiles = await self._entities(key, query, entity)
                if names and kinds != "episodes":
                    ids = await self.database.entities.facts_of_entities(key, names, limit=pool)
                    lists.graph = [hit_key("fact", fid) for fid in ids]
            elif strategy == "lineage":
                seed_facts = [k[5:] for k in seed_keys if k.startswith("fact:")]
                seed_episodes = [k[8:] for k in seed_keys if k.startswith("episode:")]
                linked = await self.database.entities.lineage_neighbours(
                    seed_facts, episode_ids=seed_episodes, current_only=not include_history
                )
                if kinds != "facts":
                    lists.graph += [hit_key("episode", eid) for eid in linked.episode_ids]
                if kinds != "episodes":
                    lists.graph += [hit_key("fact", fid) for fid in linked.fact_ids]
        if entity is not None and names:
            allowed = set(lists.graph)
            lists.fts_facts = [k for k in lists.fts_facts if k in allowed]
            lists.vector = [(k, s) for k, s in lists.vector if k in allowed or k[:8] == "episode:"]
        times.add("graph", started)

        fused = rrf(lists.ranked(), weights=fusion.as_mapping(), k=rrf_k, limit=None)
        started = time.perf_counter()
        hits = await self._hits(
            fused_keys=[(f.key, f.score, f.ranks) for f in fused],
            cosines=cosines,
            window=window,
            include_history=include_history,
            include_challenged=include_challenged,
            limit=limit,
            types=types,
        )
        neighbours = await self._neighbours(temporal, hits) if temporal else []
        if touch and hits:
            fact_ids = [hit.id for hit in hits if hit.kind == "fact"]
            if fact_ids and self.database.facts.read_only_reason is None:
                await self.database.facts.record_access(fact_ids)
            episode_ids = [hit.id for hit in hits if hit.kind == "episode"]
            if episode_ids:
                await self.database.memory.record_access(episode_ids)
        times.add("hydrate", started)
        return RecallResult(
            query=query,
            intent=decision.intent,
            complexity=complexity,
            kinds=kinds,
            hits=tuple(hits),
            entities=tuple(names),
            embedder=self.identity if vector is not None else None,
            intent_decision=decision,
            window=window,
            profiles=tuple(_profile_lines(p) for p in profiles),
            temporal=tuple(neighbours),
        )

    def _decide(self, query: str, vector: Matrix | None) -> IntentDecision:
        classifier = self.classifier
        if isinstance(classifier, EmbeddingIntentClassifier):
            return classifier.decide(query, vector=vector)
        return classifier.decide(query)

    async def _entities(
        self, key: str, query: str, entity: str | None
    ) -> tuple[list[str], list[EntityProfile]]:
        """The canonical names of the entities the query (or ``entity``) names, and the
        profiles of the first few."""
        repo = self.database.entities
        if entity is not None:
            found = await repo.resolve(key, entity)
            if found is None:
                raise EntityNotFoundError(
                    f"no entity named {entity!r} in this partition", name=entity
                )
            named = [found]
        else:
            named = await repo.mentioned(key, query)
        names = [e.canonical_name for e in named]
        profiles: list[EntityProfile] = []
        for name in names[:PROFILES]:
            try:
                profiles.append(await repo.profile(key, name, limit=PROFILE_FACTS))
            except EntityNotFoundError:
                continue
        return names, profiles

    async def _hits(
        self,
        *,
        fused_keys: Sequence[tuple[str, float, dict[str, int]]],
        cosines: Mapping[str, float],
        window: TimeWindow,
        include_history: bool,
        limit: int,
        include_challenged: bool = False,
        types: tuple[str, ...] | None = None,
    ) -> list[RecallHit]:
        """The fused keys read back as hits, best first, until ``limit`` (a fact closed
        or out of the window since its list was read is left out; with ``types``, a
        recall mode's memory types, facts of other types and episodes are too)."""
        hits: list[RecallHit] = []
        chunk = fused_keys[: limit * 2]
        rest = fused_keys[limit * 2 :]
        while chunk and len(hits) < limit:
            episode_ids = [k[8:] for k, _, _ in chunk if k.startswith("episode:")]
            records = await self.database.vectors.episodes(episode_ids) if episode_ids else []
            episodes = {r.id: r.to_episode(validate=False) for r in records}
            fact_ids = [k[5:] for k, _, _ in chunk if k.startswith("fact:")]
            read = await self.database.facts.get_many(fact_ids) if fact_ids else []
            facts = {fact.id: fact for fact in read}
            for fused_key, score, ranks in chunk:
                kind, _, item_id = fused_key.partition(":")
                if kind == "fact":
                    fact = facts.get(item_id)
                    if fact is None:
                        continue
                    if not include_history and not fact.is_current:
                        continue
                    if fact.status == CHALLENGED and not (include_history or include_challenged):
                        continue
                    if not _in_window(fact.valid_from, window):
                        continue
                    if types is not None and fact.memory_type not in types:
                        continue
                    hit = RecallHit(
                        kind="fact",
                        id=item_id,
                        fact=fact,
                        score=score,
                        strategies=ranks,
                        cosine=cosines.get(fused_key),
                    )
                else:
                    found = episodes.get(item_id)
                    if found is None or not _in_window(found.timestamp, window):
                        continue
                    if types is not None:
                        continue
                    hit = RecallHit(
                        kind="episode",
                        id=item_id,
                        episode=found,
                        score=score,
                        strategies=ranks,
                        cosine=cosines.get(fused_key),
                    )
                hits.append(hit)
                if len(hits) == limit:
                    break
            chunk, rest = rest[: limit * 2], rest[limit * 2 :]
        return hits

    async def _neighbours(
        self, temporal: Sequence[tuple[str, int]], hits: Sequence[RecallHit]
    ) -> list[TemporalNeighbour]:
        """The temporal walk's episodes not recalled themselves, each placed before or
        after the recalled episode of its session nearest in time."""
        shown = {hit.id for hit in hits if hit.kind == "episode"}
        anchors = [hit.episode for hit in hits if hit.episode is not None]
        wanted = [eid for eid, _ in temporal if eid not in shown]
        if not wanted or not anchors:
            return []
        records = await self.database.vectors.episodes(wanted)
        out: list[TemporalNeighbour] = []
        for record in records:
            episode = record.to_episode(validate=False)
            same = [a for a in anchors if a.session == episode.session] or anchors
            anchor = min(same, key=lambda a: (abs(a.timestamp - episode.timestamp), a.id))
            relation = "before" if episode.timestamp < anchor.timestamp else "after"
            out.append(TemporalNeighbour(episode=episode, relation=relation, anchor=anchor.id))
        return out


def _first_keys(ranked: Mapping[str, Sequence[str]], count: int) -> list[str]:
    """The best ``count`` keys over the fts and vector lists, taken rank by rank."""
    out: list[str] = []
    lists = [ranked["fts"], ranked["vector"]]
    for position in range(max((len(x) for x in lists), default=0)):
        for keys in lists:
            if position < len(keys) and keys[position] not in out:
                out.append(keys[position])
                if len(out) == count:
                    return out
    return out


def _profile_lines(profile: EntityProfile) -> ProfileLines:
    facts = tuple(f"{f.subject} {f.predicate} {f.object}" for f in profile.facts[:PROFILE_FACTS])
    timeline = tuple(
        f"{event.at.date().isoformat()} {event.kind}: {event.text}"
        for event in profile.timeline[-PROFILE_FACTS:]
    )
    return ProfileLines(
        name=profile.entity.canonical_name,
        aliases=profile.aliases,
        facts=facts,
        timeline=timeline,
    )


async def _maybe_await(value: object) -> None:
    if asyncio.iscoroutine(value):
        await value
