"""Episode salience: the score a rule's ``salience`` gate compares against its minimum.

*Salience* here is the episode score; a rule's CLIPS salience is called *priority*.

:class:`RuleBasedScorer` uses the recency / relevance / importance sum of Park et al.
(2023, "Generative Agents"), scaled by a frequency factor and a rule-match factor::

    Δt    = max(0, (now − (last_accessed if given else episode.timestamp)) in seconds)
    base  = w_recency · exp(−Δt / τ) + w_relevance · max(0, relevance) + w_importance · importance
    freq  = 1 − 0.5 · exp(−access_count / k)        ∈ [0.5, 1)
    match = 0.5 + 0.5 · rule_match                  ∈ [0.5, 1]
    score = min(1, max(0, base · freq · match))

Defaults: τ = 86400 s (a context's ``tau_seconds`` overrides it), k = 5 accesses,
w_recency = 1, w_relevance = w_importance = 0 (v1: only recency counts). ``relevance`` is
a cosine similarity in [−1, 1] supplied by the caller; a negative one counts as 0. Both
factors are at least 0.5, so a fresh, never-accessed episode (Δt = 0, access_count = 0)
never scores 0. NaN or infinite inputs raise :class:`ValueError`; nothing non-finite is
ever returned.

What a gate's ``min`` means. A rule's gate (``salience: {min, tau_seconds,
importance_key}``) scores each episode with :func:`gate_scorer` (w_recency = 1,
w_importance = :data:`GATE_W_IMPORTANCE` = 1) unless another scorer is passed, and tells
it the rule's τ, the fraction of the rule's ``episode`` conditions the episode satisfies
(``rule_match``) and the episode's importance (the ``importance_key`` field, 0 when the
rule declares none or the episode lacks it). A fresh, never-accessed episode satisfying
every condition therefore scores ``0.5 · (1 + importance)``: 1.0 at importance 1, 0.5 at
importance 0. Age multiplies the recency term by exp(−Δt / τ), so such an episode of
importance i passes ``min`` m while ``0.5 · (exp(−Δt / τ) + i) ≥ m``; without an
importance, a gate above 0.5 drops every never-accessed episode, and accesses raise the
frequency factor towards 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar, runtime_checkable

from stargraph_mem.model.episodes import Episode
from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.memory import EpisodeRecord

__all__ = [
    "DEFAULT_FREQUENCY_SCALE",
    "DEFAULT_TAU_SECONDS",
    "GATE_W_IMPORTANCE",
    "WEIGHT_NAMES",
    "RuleBasedScorer",
    "SalienceContext",
    "SalienceScorer",
    "gate",
    "gate_scorer",
]

DEFAULT_TAU_SECONDS = 86400.0
"""Recency time constant τ: a day since the last access multiplies recency by 1/e."""

DEFAULT_FREQUENCY_SCALE = 5.0
"""Frequency scale k: after k accesses the frequency factor is 1 − 0.5/e ≈ 0.82."""

GATE_W_IMPORTANCE = 1.0
"""Importance weight of a rule gate's default scorer: equal to recency, so a fresh episode
of importance 1 reaches a score of 1 and one of importance 0 stays at 0.5."""

_E = TypeVar("_E", Episode, EpisodeRecord)


def _require_aware(value: datetime, name: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime (got naive {value!r})")


def _checked_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """A context's ``weights``: the three names only, finite and >= 0 (missing ones 0)."""
    unknown = sorted(set(weights) - set(WEIGHT_NAMES))
    if unknown:
        raise ValueError(f"weights: unknown names {unknown} (expected {list(WEIGHT_NAMES)})")
    checked = {name: float(weights.get(name, 0.0)) for name in WEIGHT_NAMES}
    for name, value in checked.items():
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"weights[{name!r}] must be a finite number >= 0 (got {value!r})")
    return checked


def _require_finite(value: float, name: str, low: float, high: float) -> None:
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a finite number in [{low:g}, {high:g}] (got {value!r})")


WEIGHT_NAMES: tuple[str, str, str] = ("recency", "relevance", "importance")
"""The keys of a context's ``weights`` (stargraph 0.8's form)."""


@dataclass(frozen=True, slots=True)
class SalienceContext:
    """What the scorer needs beyond the episode: the pass's ``now`` and access statistics.

    ``now`` defaults to the current time. ``last_accessed`` None means never accessed:
    recency then runs from the episode's own timestamp. ``rule_match`` is the fraction of
    the conditions of the rule's ``episode`` pattern the episode could satisfy.
    ``query_embedding`` is carried for scorers that compute their own relevance;
    :class:`RuleBasedScorer` reads the precomputed cosine ``relevance``.
    ``tau_seconds`` (a rule gate's τ) overrides the scorer's own τ when given.

    stargraph 0.8's keywords are accepted too: ``last_access_ts`` (same as
    ``last_accessed``), ``decay_tau_seconds`` (same as ``tau_seconds``),
    ``rule_match_count`` (N matching rules give ``rule_match = tanh(N / 5)``) and
    ``weights`` (``{"recency", "relevance", "importance"}``: they replace the scorer's own
    weights for this call). The first three are read into ours and left ``None`` (so
    ``dataclasses.replace`` changes what they named); both spellings of a value may be
    given only when they agree.
    """

    now: datetime = field(default_factory=utc_now)
    last_accessed: datetime | None = None
    access_count: int = 0
    rule_match: float = 1.0
    query_embedding: tuple[float, ...] | None = None
    relevance: float | None = None
    importance: float = 0.0
    tau_seconds: float | None = None
    last_access_ts: datetime | None = None
    rule_match_count: int | None = None
    weights: Mapping[str, float] | None = None
    decay_tau_seconds: float | None = None

    def __post_init__(self) -> None:
        self._merge_aliases()
        _require_aware(self.now, "now")
        if self.last_accessed is not None:
            _require_aware(self.last_accessed, "last_accessed")
        count = self.access_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"access_count must be an int >= 0 (got {count!r})")
        _require_finite(self.rule_match, "rule_match", 0.0, 1.0)
        _require_finite(self.importance, "importance", 0.0, 1.0)
        tau = self.tau_seconds
        usable = isinstance(tau, int | float) and not isinstance(tau, bool) and 0 < tau < math.inf
        if tau is not None and not usable:
            raise ValueError(f"tau_seconds must be a finite number > 0 (got {tau!r})")
        if self.relevance is not None:
            _require_finite(self.relevance, "relevance", -1.0, 1.0)
        if self.query_embedding is not None:
            embedding = tuple(float(x) for x in self.query_embedding)
            if not all(math.isfinite(x) for x in embedding):
                raise ValueError("query_embedding must contain only finite numbers")
            object.__setattr__(self, "query_embedding", embedding)

    def _merge_aliases(self) -> None:
        """Fold stargraph 0.8's keywords into ours; they are consumed (left ``None``), so
        ``dataclasses.replace`` of a context changes what it names."""
        for ours, theirs in (
            ("last_accessed", "last_access_ts"),
            ("tau_seconds", "decay_tau_seconds"),
        ):
            mine, other = getattr(self, ours), getattr(self, theirs)
            if other is None:
                continue
            if mine is not None and mine != other:
                raise ValueError(f"{ours} ({mine!r}) and {theirs} ({other!r}) disagree")
            object.__setattr__(self, ours, other)
            object.__setattr__(self, theirs, None)
        matches = self.rule_match_count
        if matches is not None:
            if isinstance(matches, bool) or not isinstance(matches, int) or matches < 0:
                raise ValueError(f"rule_match_count must be an int >= 0 (got {matches!r})")
            object.__setattr__(self, "rule_match", math.tanh(matches / 5.0))
            object.__setattr__(self, "rule_match_count", None)
        if self.weights is not None:
            object.__setattr__(self, "weights", _checked_weights(self.weights))

    @classmethod
    def for_record(
        cls,
        record: EpisodeRecord,
        *,
        now: datetime,
        rule_match: float = 1.0,
        importance: float = 0.0,
        tau_seconds: float | None = None,
    ) -> SalienceContext:
        """A context carrying the access statistics the store keeps on ``record``."""
        return cls(
            now=now,
            last_accessed=record.last_accessed,
            access_count=record.access_count,
            rule_match=rule_match,
            importance=importance,
            tau_seconds=tau_seconds,
        )


@runtime_checkable
class SalienceScorer(Protocol):
    """Anything with ``async score(episode, context) -> float`` in [0, 1]; no base class."""

    async def score(self, memory: Episode | EpisodeRecord, context: SalienceContext) -> float:
        """The salience of the episode ``memory`` in [0, 1]; higher is more worth
        consolidating (the specification names the parameters ``memory`` and ``context``)."""
        ...


class RuleBasedScorer:
    """The Park et al. (2023) weighted sum, scaled by frequency and rule match (see module)."""

    __slots__ = ("_inv_freq", "_inv_tau", "frequency_scale", "tau", "weights")

    def __init__(
        self,
        *,
        tau: float = DEFAULT_TAU_SECONDS,
        w_recency: float = 1.0,
        w_relevance: float = 0.0,
        w_importance: float = 0.0,
        frequency_scale: float = DEFAULT_FREQUENCY_SCALE,
    ) -> None:
        """Validate once here so :meth:`score_sync` does no checking on the parameters."""
        for name, value in (("tau", tau), ("frequency_scale", frequency_scale)):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")
        named = (("w_recency", w_recency), ("w_relevance", w_relevance))
        for name, value in (*named, ("w_importance", w_importance)):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0 (got {value!r})")
        if w_recency + w_relevance + w_importance == 0:
            raise ValueError("at least one of w_recency, w_relevance, w_importance must be > 0")
        self.tau = float(tau)
        self.frequency_scale = float(frequency_scale)
        self.weights = (float(w_recency), float(w_relevance), float(w_importance))
        self._inv_tau = 1.0 / self.tau
        self._inv_freq = 1.0 / self.frequency_scale

    def __repr__(self) -> str:
        w_rec, w_rel, w_imp = self.weights
        return (
            f"RuleBasedScorer(tau={self.tau!r}, w_recency={w_rec!r}, w_relevance={w_rel!r}, "
            f"w_importance={w_imp!r}, frequency_scale={self.frequency_scale!r})"
        )

    def score_sync(self, memory: Episode | EpisodeRecord, context: SalienceContext) -> float:
        """The score, computed synchronously: the runtime's hot loop calls this directly.

        No awaiting, no allocation beyond floats; the context was validated when built.
        Raises ValueError only if recency must run from a naive ``episode.timestamp``.
        """
        reference = context.last_accessed
        if reference is None:
            reference = memory.timestamp
            _require_aware(reference, "episode.timestamp")
        elapsed = (context.now - reference).total_seconds()
        tau = context.tau_seconds
        inv_tau = self._inv_tau if tau is None else 1.0 / tau
        recency = math.exp(-elapsed * inv_tau) if elapsed > 0 else 1.0
        given = context.weights
        if given is None:
            w_rec, w_rel, w_imp = self.weights
        else:
            w_rec, w_rel, w_imp = (given[name] for name in WEIGHT_NAMES)
        base = w_rec * recency
        if w_rel and context.relevance is not None and context.relevance > 0:
            base += w_rel * context.relevance
        if w_imp:
            base += w_imp * context.importance
        frequency = 1.0 - 0.5 * math.exp(-context.access_count * self._inv_freq)
        match = 0.5 + 0.5 * context.rule_match
        return min(1.0, max(0.0, base * frequency * match))

    async def score(self, memory: Episode | EpisodeRecord, context: SalienceContext) -> float:
        """:meth:`score_sync`, for callers that hold any :class:`SalienceScorer`."""
        return self.score_sync(memory, context)


def gate_scorer() -> RuleBasedScorer:
    """The scorer rule gates use by default: v1 recency plus the episode's importance."""
    return RuleBasedScorer(w_recency=1.0, w_importance=GATE_W_IMPORTANCE)


async def gate(
    scorer: SalienceScorer,
    episodes_with_contexts: Iterable[tuple[_E, SalienceContext]],
    minimum: float,
) -> tuple[list[_E], list[_E]]:
    """Split episodes into (kept, dropped): kept score >= ``minimum``; input order is kept.

    Episodes are scored one at a time, in order. A score outside [0, 1] (or NaN) breaks
    the :class:`SalienceScorer` contract and raises ValueError rather than being trusted.
    """
    _require_finite(minimum, "minimum", 0.0, 1.0)
    kept: list[_E] = []
    dropped: list[_E] = []
    for episode, context in episodes_with_contexts:
        value = await scorer.score(episode, context)
        if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
            raise ValueError(
                f"{type(scorer).__name__}.score returned {value!r} for episode "
                f"{episode.id!r}; a salience score must be a number in [0, 1]"
            )
        (kept if value >= minimum else dropped).append(episode)
    return kept, dropped
