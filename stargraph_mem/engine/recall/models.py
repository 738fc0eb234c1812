"""What a recall returns: hits (facts and episodes, each with the strategies that found
it), what the graph strategies add (entity profiles, temporal neighbours), and the
settings the specification's configuration names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from stargraph_mem.engine.recall.context import (
    ContextLine,
    SectionName,
    TokenCounter,
    assemble_context,
    episode_line,
    fact_line,
    fact_statement,
    one_line,
)
from stargraph_mem.engine.recall.fusion import DEFAULT_K, RecallWeights, hit_key
from stargraph_mem.engine.recall.intent import (
    Complexity,
    ComplexityParams,
    Intent,
    IntentDecision,
    params_for,
)
from stargraph_mem.engine.recall.timefilter import TimeWindow
from stargraph_mem.model.base import FrozenModel
from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.facts import Fact

__all__ = [
    "HitKind",
    "ProfileLines",
    "RecallHit",
    "RecallKinds",
    "RecallResult",
    "RecallSettings",
    "TemporalNeighbour",
]

RecallKinds = Literal["facts", "episodes", "both"]
"""What a recall searches: facts, episodes or both."""

HitKind = Literal["fact", "episode"]


class RecallHit(FrozenModel):
    """One recalled fact or episode, its fused score and how it was found.

    ``strategies`` maps each strategy that ranked it (``fts``, ``vector``, ``graph``) to
    its rank there (from 1); ``cosine`` is the vector strategy's similarity when that
    strategy found it. ``sources`` are a fact's source episode ids (the citations of its
    context line); when left empty they are read from the fact's lineage, if it has one.
    """

    kind: HitKind
    id: str
    fact: Fact | None = None
    episode: Episode | None = None
    score: float
    strategies: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    cosine: float | None = None
    sources: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_item(self) -> RecallHit:
        item: Fact | Episode | None = self.fact if self.kind == "fact" else self.episode
        other = self.episode if self.kind == "fact" else self.fact
        if item is None or other is not None:
            raise ValueError(f"a {self.kind} hit carries its {self.kind} and nothing else")
        if item.id != self.id:
            raise ValueError(f"id {self.id!r} is not the {self.kind}'s id {item.id!r}")
        if self.kind == "episode" and self.sources:
            raise ValueError("sources are a fact's citations; an episode hit has none")
        return self

    @property
    def key(self) -> str:
        """The fusion key (``fact:<id>`` / ``episode:<id>``)."""
        return hit_key(self.kind, self.id)

    @property
    def citations(self) -> tuple[str, ...]:
        """A fact's source episode ids: :attr:`sources`, else those its lineage names."""
        if self.sources or self.fact is None:
            return self.sources
        found: list[str] = []
        for entry in self.fact.lineage:
            ids = entry.get("source_episode_ids")
            if isinstance(ids, list):
                found.extend(str(i) for i in ids if str(i) not in found)
        return tuple(found)

    @property
    def text(self) -> str:
        """The fact's statement or the episode's content."""
        if self.fact is not None:
            return fact_statement(self.fact)
        assert self.episode is not None  # the validator ensures it
        return self.episode.content


class ProfileLines(FrozenModel):
    """What the entity strategy knows of one entity, as lines ready to show."""

    name: str
    aliases: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    timeline: tuple[str, ...] = ()


class TemporalNeighbour(FrozenModel):
    """An episode just ``before`` or ``after`` a hit (``anchor``, the hit's key or id)."""

    episode: Episode
    relation: Literal["before", "after"]
    anchor: str


class RecallSettings(FrozenModel):
    """The specification's recall configuration: ``rrf_k``, the RRF weights,
    ``context_token_budget`` and ``intent_similarity_threshold``.

    With ``adaptive`` (the default) a query's complexity sets the limit, graph depth and
    budget (simple: 5, 2, 1000; complex: 20, 4, 3000); without it every query gets the
    complex limit and depth and ``context_token_budget``.
    """

    rrf_k: int = Field(default=DEFAULT_K, ge=1, strict=True)
    weights: RecallWeights = Field(default_factory=RecallWeights)
    context_token_budget: int = Field(default=2000, ge=1, strict=True)
    intent_similarity_threshold: float = Field(default=0.45, ge=-1.0, le=1.0, allow_inf_nan=False)
    adaptive: bool = True

    def params(self, complexity: Complexity) -> ComplexityParams:
        """The limit, graph depth and budget a query of ``complexity`` gets."""
        if self.adaptive:
            return params_for(complexity)
        full = params_for("complex")
        return full.model_copy(update={"budget_tokens": self.context_token_budget})


class RecallResult(FrozenModel):
    """A recall's answer, best hit first, with what it was decided from.

    ``entities`` are the names the query resolved to; ``embedder`` the identity
    (``name@version/dimension``) of the embedder whose vectors were compared, ``None``
    when no vector strategy ran; ``budget_tokens`` the budget :meth:`context` uses by
    default (``None``: that of the query's complexity).
    """

    query: str
    intent: Intent
    complexity: Complexity
    kinds: RecallKinds = "both"
    hits: tuple[RecallHit, ...] = ()
    entities: tuple[str, ...] = ()
    embedder: str | None = None
    intent_decision: IntentDecision | None = None
    window: TimeWindow = Field(default_factory=TimeWindow)
    profiles: tuple[ProfileLines, ...] = ()
    temporal: tuple[TemporalNeighbour, ...] = ()
    budget_tokens: int | None = Field(default=None, ge=1)

    @field_validator("hits")
    @classmethod
    def _unique_hits(cls, hits: tuple[RecallHit, ...]) -> tuple[RecallHit, ...]:
        seen: set[str] = set()
        for index, hit in enumerate(hits):
            if hit.key in seen:
                raise ValueError(f"hits[{index}]: {hit.key} is listed twice")
            seen.add(hit.key)
        return hits

    @property
    def facts(self) -> list[Fact]:
        """The recalled facts, best first."""
        return [hit.fact for hit in self.hits if hit.fact is not None]

    @property
    def episodes(self) -> list[Episode]:
        """The recalled episodes, best first."""
        return [hit.episode for hit in self.hits if hit.episode is not None]

    def sections(self) -> dict[SectionName, list[ContextLine]]:
        """The lines of each context section, best first, before any budget applies."""
        facts = [fact_line(hit.fact, hit.citations) for hit in self.hits if hit.fact is not None]
        profiles: list[ContextLine] = []
        for profile in self.profiles:
            head = f"**{one_line(profile.name)}**"
            if profile.aliases:
                head += f" (also: {', '.join(one_line(a) for a in profile.aliases)})"
            profiles.append(ContextLine(body=head))
            profiles.extend(
                ContextLine(body=one_line(line), indent=1)
                for line in (*profile.facts, *profile.timeline)
            )
        temporal = [episode_line(n.episode, note=f"{n.relation} {n.anchor}") for n in self.temporal]
        evidence = [episode_line(hit.episode) for hit in self.hits if hit.episode is not None]
        return {"facts": facts, "profiles": profiles, "temporal": temporal, "evidence": evidence}

    def context(self, budget_tokens: int | None = None, counter: TokenCounter | None = None) -> str:
        """The markdown block to prepend to a prompt, within ``budget_tokens`` (default:
        :attr:`budget_tokens`, else the complexity's budget) as ``counter`` counts
        (default ``ceil(UTF-8 bytes / 4)``); ``""`` when nothing was recalled. See
        :mod:`stargraph_mem.engine.recall.context`."""
        if budget_tokens is None:
            budget_tokens = (
                self.budget_tokens
                if self.budget_tokens is not None
                else params_for(self.complexity).budget_tokens
            )
        return assemble_context(self.sections(), budget_tokens=budget_tokens, counter=counter)

    def summary(self) -> Mapping[str, Any]:
        """A JSON-ready digest: query, intent, complexity and each hit's key, score and
        strategies (what a log line or a tool's answer shows)."""
        return {
            "query": self.query,
            "intent": self.intent,
            "complexity": self.complexity,
            "embedder": self.embedder,
            "entities": list(self.entities),
            "hits": [
                {"key": hit.key, "score": hit.score, "strategies": dict(hit.strategies)}
                for hit in self.hits
            ],
        }
