"""Episodes: raw events written with their full ``(user, session, agent)`` scope."""

from __future__ import annotations

from typing import Any

from pydantic import Field, JsonValue, ValidationInfo, field_validator

from stargraph_mem.model.base import (
    FrozenModel,
    Identifier,
    ScopePart,
    StoredDatetime,
    check_storable,
    check_unicode,
    no_nul,
)
from stargraph_mem.model.deltas import DeltaKind
from stargraph_mem.model.layers import check_trust_metadata

Intent = DeltaKind
"""An episode's ``intent``: the kind of delta it asks the default classification for."""

HONOURED_METADATA_KEYS = ("intent", "replaces", "subject", "predicate", "object")


def check_honoured_metadata(value: dict[str, Any]) -> None:
    """Raise ``ValueError`` when a key the default classification reads has the wrong shape
    (``replaces``, ``subject``, ``predicate``, ``object``).

    Any string ``intent`` is kept: as in stargraph 0.8, one other than ``noop``, ``delete``
    and ``update`` is classified as the default (an add). A non-string one is refused here,
    where the caller sees it, rather than rejected by the next pass (the default pack
    reads ``intent`` as a string). ``source`` and ``trust`` give the episode's trust
    (:func:`~stargraph_mem.model.layers.episode_trust`): a string, a number in [0, 1].
    """
    intent = value.get("intent")
    if intent is not None and not isinstance(intent, str):
        raise ValueError(f"metadata.intent must be a string (got {type(intent).__name__})")
    replaces = value.get("replaces")
    if replaces is not None and not (
        isinstance(replaces, list) and all(isinstance(r, str) for r in replaces)
    ):
        raise ValueError("metadata.replaces must be a list of fact id strings")
    for key in ("subject", "predicate", "object"):
        item = value.get(key)
        if item is not None and not isinstance(item, str):
            raise ValueError(f"metadata.{key} must be a string")
    check_trust_metadata(value)


class Episode(FrozenModel):
    """A raw event written with its full ``(user, session, agent)`` scope."""

    id: Identifier
    content: str
    timestamp: StoredDatetime
    source_node: str | None = None
    user: ScopePart
    session: ScopePart
    agent: ScopePart
    metadata: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("content", "user", "session", "agent", "source_node")
    @classmethod
    def _check_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        return check_unicode(no_nul(value, "text fields"), info.field_name or "text")

    @field_validator("metadata")
    @classmethod
    def _check_metadata(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        check_honoured_metadata(value)
        check_storable(value, "metadata")
        return value
