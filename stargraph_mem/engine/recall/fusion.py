"""Reciprocal Rank Fusion: many ranked lists in, one ranking out.

Each strategy (full-text, vector, graph) ranks keys best first; a key's fused score is
``Σ weight_s / (k + rank_s)`` over the strategies that ranked it (ranks from 1). Only
ranks count, never the strategies' own scores, so a BM25 score and a cosine need no common
scale. A larger ``k`` flattens the difference between the top ranks and the rest.

The result is deterministic: contributions are summed in strategy-name order, and equal
scores are ordered by key. A strategy of weight 0 is as if it had not run: it adds no
score, and keys only it found are dropped.

Keys are opaque strings: callers fusing facts and episodes together keep their keys apart
with :func:`hit_key` (``fact:<id>``, ``episode:<id>``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import Field, field_validator

from stargraph_mem.errors import RecallError
from stargraph_mem.model.base import FrozenModel

__all__ = ["DEFAULT_K", "STRATEGIES", "Fused", "RecallWeights", "Strategy", "hit_key", "rrf"]

DEFAULT_K: Final = 60
"""The specification's ``rrf_k``."""

Strategy = Literal["fts", "vector", "graph"]
STRATEGIES: Final[tuple[Strategy, ...]] = ("fts", "vector", "graph")


class RecallWeights(FrozenModel):
    """Each strategy's RRF weight (``rrf_weight_fts``, ``rrf_weight_vector``,
    ``rrf_weight_graph``): finite and not negative; 0 switches a strategy off."""

    fts: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    vector: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    graph: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)

    @field_validator("fts", "vector", "graph", mode="before")
    @classmethod
    def _no_bool(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("a weight is a number, not a bool")
        return value

    def as_mapping(self) -> dict[str, float]:
        """``{"fts": …, "vector": …, "graph": …}``, as :func:`rrf` takes them."""
        return {"fts": self.fts, "vector": self.vector, "graph": self.graph}


@dataclass(frozen=True, slots=True)
class Fused:
    """One key of the fused ranking: its score and the rank (from 1) each strategy of
    non-zero weight gave it (a plain dataclass: fusion runs on every recall)."""

    key: str
    score: float
    ranks: dict[str, int]


def hit_key(kind: str, item_id: str) -> str:
    """The fusion key of a fact or an episode: ``fact:<id>`` / ``episode:<id>``."""
    return f"{kind}:{item_id}"


def _check(ranked_lists: Mapping[str, Sequence[str]], weights: Mapping[str, float], k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise RecallError(f"k: expected an integer ≥ 1, got {k!r}", parameter="k", value=k)
    for name, weight in weights.items():
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise RecallError(
                f"weights[{name!r}]: expected a finite number ≥ 0, got {weight!r}",
                parameter="weights",
                value={name: weight},
            )
    missing = sorted(set(ranked_lists) - set(weights))
    if missing:
        raise RecallError(
            f"weights: no weight for strategies {missing} (weights given for {sorted(weights)})",
            parameter="weights",
            value=missing,
        )
    for name, keys in ranked_lists.items():
        if isinstance(keys, str):
            raise RecallError(
                f"ranked_lists[{name!r}]: expected a sequence of keys, got a string",
                parameter="ranked_lists",
                value=name,
            )


def rrf(
    ranked_lists: Mapping[str, Sequence[str]],
    *,
    weights: Mapping[str, float],
    k: int = DEFAULT_K,
    limit: int | None = None,
) -> list[Fused]:
    """Fuse ``ranked_lists`` (strategy → keys, best first) into one ranking, best first:
    score descending, then key ascending. A key listed twice by one strategy keeps its
    first (best) rank. ``limit`` keeps the first ``limit`` entries.

    Raises :class:`~stargraph_mem.errors.RecallError` for ``k`` < 1, a weight that is
    negative or not finite, or a strategy without a weight."""
    _check(ranked_lists, weights, k)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise RecallError(
            f"limit: expected an integer ≥ 0, got {limit!r}", parameter="limit", value=limit
        )
    ranks: dict[str, dict[str, int]] = {}
    for name in sorted(ranked_lists):
        if weights[name] == 0:
            continue
        for position, key in enumerate(ranked_lists[name], start=1):
            ranks.setdefault(key, {}).setdefault(name, position)
    fused = [
        Fused(
            key=key,
            score=math.fsum(weights[name] / (k + rank) for name, rank in sorted(found.items())),
            ranks=found,
        )
        for key, found in ranks.items()
    ]
    fused.sort(key=lambda item: (-item.score, item.key))
    return fused if limit is None else fused[:limit]
