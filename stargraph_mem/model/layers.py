"""Memory layers, memory types and source trust (specification 004), as plain data.

A fact lives in one *layer* (how long it is kept: ``working``, ``episodic``, ``semantic``,
``procedural``) and has one *memory type* (what it says: ``fact``, ``procedure``,
``narrative``); both are indexed columns of the fact stores, set by a rule's ``emit`` or
its pack's ``defaults``. Its *trust* is the least trust of what it was made from: an
episode's trust is its ``metadata.trust`` or the default of its ``metadata.source``
(human 1.0, ai 0.7, ingest 0.5), 1.0 when it says neither.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

__all__ = [
    "DEFAULT_HALF_LIVES",
    "DEFAULT_LAYER",
    "DEFAULT_MEMORY_TYPE",
    "LAYERS",
    "MEMORY_TYPES",
    "RECALL_MODES",
    "SOURCE_TRUST",
    "WORKING_PROMOTION_ACCESSES",
    "WORKING_PROMOTION_SECONDS",
    "Layer",
    "MemoryType",
    "RecallMode",
    "check_trust_metadata",
    "episode_trust",
    "least_trust",
    "stored_trust",
    "types_of_mode",
]

Layer = Literal["working", "episodic", "semantic", "procedural"]
MemoryType = Literal["fact", "procedure", "narrative"]
RecallMode = Literal["facts_only", "facts_plus_rules", "full_context"]

LAYERS: Final[tuple[str, ...]] = get_args(Layer)
MEMORY_TYPES: Final[tuple[str, ...]] = get_args(MemoryType)
DEFAULT_LAYER: Final = "episodic"
"""The layer of a fact no rule or pack placed (and of every fact made before layers)."""
DEFAULT_MEMORY_TYPE: Final = "fact"

DEFAULT_HALF_LIVES: Final[Mapping[str, float | None]] = MappingProxyType(
    {"working": None, "episodic": 30.0, "semantic": None, "procedural": None}
)
"""Days; ``None`` is infinite (004: semantic and procedural are kept for ever; working
facts do not decay, they are promoted)."""

RECALL_MODES: Final[Mapping[str, tuple[str, ...] | None]] = MappingProxyType(
    {"facts_only": ("fact",), "facts_plus_rules": ("fact", "procedure"), "full_context": None}
)
"""Recall mode → the memory types it returns (``None``: every type)."""

SOURCE_TRUST: Final[Mapping[str, float]] = MappingProxyType(
    {"human": 1.0, "ai": 0.7, "ingest": 0.5}
)
"""004's source trust: an episode's ``metadata.source`` → its trust."""

WORKING_PROMOTION_SECONDS: Final = 30 * 60
WORKING_PROMOTION_ACCESSES: Final = 2
"""004: a ``working`` fact moves to ``episodic`` after 30 minutes or 2 accesses."""


def types_of_mode(mode: str) -> tuple[str, ...] | None:
    """The memory types recall ``mode`` returns (``None``: all); a clear error otherwise."""
    if mode not in RECALL_MODES:
        raise ValueError(f"unknown recall mode {mode!r} (modes: {', '.join(RECALL_MODES)})")
    return RECALL_MODES[mode]


def check_trust_metadata(metadata: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` when ``metadata.source`` or ``metadata.trust`` has a shape trust
    cannot be read from (a source outside :data:`SOURCE_TRUST` is kept: it is not one the
    specification names, and reads as trust 1.0)."""
    source = metadata.get("source")
    if source is not None and not isinstance(source, str):
        raise ValueError(f"metadata.source must be a string (got {type(source).__name__})")
    trust = metadata.get("trust")
    if trust is None:
        return
    if isinstance(trust, bool) or not isinstance(trust, int | float):
        raise ValueError(f"metadata.trust must be a number in [0, 1] (got {trust!r})")
    if not math.isfinite(trust) or not 0.0 <= trust <= 1.0:
        raise ValueError(f"metadata.trust must be a number in [0, 1] (got {trust!r})")


def episode_trust(metadata: Mapping[str, Any]) -> float:
    """An episode's trust: ``metadata.trust``, else its source's default, else 1.0."""
    trust = metadata.get("trust")
    if isinstance(trust, int | float) and not isinstance(trust, bool):
        return max(0.0, min(1.0, float(trust)))
    source = metadata.get("source")
    return SOURCE_TRUST.get(source, 1.0) if isinstance(source, str) else 1.0


def least_trust(values: Iterable[float]) -> float:
    """The trust of what is made from things of these trusts: the least (1.0 for none)."""
    return min(values, default=1.0)


def stored_trust(trust: float) -> float | None:
    """A delta's ``trust`` field: ``None`` (left out, so its id is unchanged) for full trust."""
    return None if trust >= 1.0 else trust
