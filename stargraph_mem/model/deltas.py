"""Deltas: what a consolidation pass asks the fact store to do (add, update, delete, noop).

A delta's id is the hash of its canonical JSON, so the same delta always has the same id.
"""

from __future__ import annotations

import hashlib
import math
from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field, JsonValue, TypeAdapter, field_validator, model_validator

from stargraph_mem.model.base import (
    FrozenModel,
    Identifier,
    ScopePart,
    StoredDatetime,
    check_unicode,
    no_nul,
)
from stargraph_mem.model.canonical import canonical_json

DeltaKind = Literal["add", "update", "delete", "noop"]

BindingScalar = str | bool | int | float | None
BindingValue = BindingScalar | list[BindingScalar]
"""What a rule binding holds: a JSON scalar or a list of them (validated without Python calls)."""


def _finite_unit(value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError("confidence must be a finite number in [0, 1]")
    return value


class FactPayload(FrozenModel):
    """The statement a fact makes: subject/predicate/object plus free-form payload."""

    subject: str = Field(min_length=1)
    predicate: str = Field(min_length=1)
    object: str
    payload: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_nul(self) -> FactPayload:
        # one check for the three fields: this runs for every delta a pass builds
        text = self.subject + self.predicate + self.object
        if "\x00" in text or not text.isascii():
            for name in ("subject", "predicate", "object"):
                check_unicode(no_nul(getattr(self, name), f"fact.{name}"), f"fact.{name}")
        return self


def delta_id_of(body: bytes) -> str:
    """The delta id for a delta's :meth:`~_DeltaBase.canonical_body`."""
    return "d" + hashlib.sha256(body).hexdigest()[:31]


class _DeltaBase(FrozenModel):
    user: ScopePart
    agent: ScopePart
    source_episode_ids: list[Identifier] = Field(min_length=1)
    promotion_ts: StoredDatetime
    rule_id: Identifier
    confidence: float
    reason: str = ""
    bindings: dict[str, BindingValue] = Field(default_factory=dict)

    @field_validator("confidence")
    @classmethod
    def _check_confidence(cls, value: float) -> float:
        return _finite_unit(value)

    @field_validator("reason")
    @classmethod
    def _check_reason(cls, value: str) -> str:
        return check_unicode(no_nul(value, "reason"), "reason")

    def canonical_body(self) -> bytes:
        """Canonical JSON of the whole delta: what :attr:`delta_id` hashes (computed once)."""
        return self._canonical

    @cached_property
    def _canonical(self) -> bytes:
        # orjson's result keeps its whole output buffer (about 4 KiB); a pass holds tens of
        # thousands of these, so keep an exact-size copy
        return bytes(memoryview(canonical_json(self.model_dump(mode="json"))))

    @cached_property
    def delta_id(self) -> str:
        """Content-derived id: the same delta always has the same id (computed once)."""
        return delta_id_of(self._canonical)


class AddDelta(_DeltaBase):
    """Promote a new fact."""

    kind: Literal["add"] = "add"
    fact: FactPayload

    @property
    def new_fact_id(self) -> str:
        """The id the fact created by this delta gets."""
        return "f" + self.delta_id[1:]


class UpdateDelta(_DeltaBase):
    """Supersede the facts in ``replaces`` and assert a new one."""

    kind: Literal["update"] = "update"
    replaces: list[Identifier] = Field(min_length=1)
    fact: FactPayload

    @property
    def new_fact_id(self) -> str:
        """The id the fact created by this delta gets."""
        return "f" + self.delta_id[1:]


class DeleteDelta(_DeltaBase):
    """Close the facts in ``replaces``; nothing is physically deleted."""

    kind: Literal["delete"] = "delete"
    replaces: list[Identifier] = Field(min_length=1)


class NoopDelta(_DeltaBase):
    """Audit only; ``reinforces`` names facts the episode confirmed."""

    kind: Literal["noop"] = "noop"
    reinforces: list[Identifier] = Field(default_factory=list)


MemoryDelta = Annotated[
    AddDelta | UpdateDelta | DeleteDelta | NoopDelta, Field(discriminator="kind")
]
DELTA_ADAPTER: TypeAdapter[AddDelta | UpdateDelta | DeleteDelta | NoopDelta] = TypeAdapter(
    MemoryDelta
)
DELTA_LIST_ADAPTER: TypeAdapter[list[AddDelta | UpdateDelta | DeleteDelta | NoopDelta]] = (
    TypeAdapter(list[MemoryDelta])
)
