"""Deltas: what a consolidation pass asks the fact store to do (add, update, delete, noop).

Each kind's behaviour is declared on its class (what it creates, closes and reinforces,
what its count is called): every other module derives the kinds from :data:`Delta`
(:data:`DELTA_KINDS`, :data:`DELTA_BY_KIND`) and asks the delta, never its kind's name.

A delta's id is the hash of its canonical JSON, so the same delta always has the same id.

The specification's spelling is accepted as written: ``fact_payload`` for the fact
(stored under our field name ``fact``, so both spellings give one canonical body and one
id), and ``user``/``agent`` may be left out: the fact store then takes the scope from
the delta's source episodes when it applies the delta (:meth:`_DeltaBase.scoped`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal, Self, get_args

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
from stargraph_mem.model.layers import Layer, MemoryType
from stargraph_mem.model.statuses import CLOSE_STATUSES as CLOSE_STATUSES  # re-export
from stargraph_mem.model.statuses import FACT_STATUSES as FACT_STATUSES  # re-export
from stargraph_mem.model.statuses import FLAG_STATUSES as FLAG_STATUSES  # re-export
from stargraph_mem.model.statuses import SUCCEEDED_STATUSES

DeltaKind = Literal["add", "update", "delete", "noop"]

CloseStatus = Literal[
    "deleted", "expired", "archived", "invalidated", "merged", "superseded", "challenged"
]
"""The status a delete gives the facts it names (an update closes them as ``superseded``
too, naming the fact it makes; a delete names an existing one, ``merged_into``):
each closes them, except ``challenged``, which flags them and leaves them current (see
:mod:`stargraph_mem.model.lifecycle`)."""
Lifecycle = Literal["new", "inherit", "reinforce"]
"""What the fact an update creates keeps of the facts it replaces:

* ``new``: a new observation (the default): reinforced at its promotion time, count 0;
* ``inherit``: not an observation (a sweep's decay, say): it keeps the latest reinforcement
  time, the reinforcement count and the observation time of what it replaces;
* ``reinforce``: a confirmation: reinforced at its promotion time, count one more than
  the largest count among what it replaces.

Pins and access statistics carry to the new fact whatever the lifecycle."""

BindingScalar = str | bool | int | float | None
BindingValue = BindingScalar | list[BindingScalar]
"""What a rule binding holds: a JSON scalar or a list of them (validated without Python calls)."""


def _finite_unit(value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError("confidence must be a finite number in [0, 1]")
    return value


class FactPayload(FrozenModel):
    """The statement a fact makes: any JSON object, with subject/predicate/object as
    optional structure on top (rules and search use the triple when it is there).

    The triple is all or nothing: a fact has subject, predicate and object, or none of
    them and a non-empty free-form ``payload``."""

    subject: str | None = Field(default=None, min_length=1, exclude_if=lambda v: v is None)
    predicate: str | None = Field(default=None, min_length=1, exclude_if=lambda v: v is None)
    object: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """Left out of the canonical body when absent: facts with a triple keep their ids."""
    payload: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _fold_extra_keys(cls, data: Any) -> Any:
        """A flat dict (``{"subject", "predicate", "object", "since": …}``) keeps its other
        keys in ``payload``."""
        if not isinstance(data, dict):
            return data
        extra = {key: value for key, value in data.items() if key not in _FACT_FIELDS}
        if not extra:
            return data
        payload = data.get("payload") or {}
        if not isinstance(payload, dict):
            return data  # reported by the field's own validation
        clash = sorted(set(extra) & set(payload))
        if clash:
            raise ValueError(f"key(s) {', '.join(map(repr, clash))} given twice (and in payload)")
        kept = {key: value for key, value in data.items() if key in _FACT_FIELDS}
        return {**kept, "payload": {**payload, **extra}}

    @model_validator(mode="after")
    def _check(self) -> FactPayload:
        parts = (self.subject, self.predicate, self.object)
        if None in parts:
            if parts != (None, None, None):
                missing = [n for n, v in zip(_TRIPLE, parts, strict=True) if v is None]
                raise ValueError(
                    "subject, predicate and object go together: give all three or none "
                    f"(a free-form payload); missing {', '.join(missing)}"
                )
            if not self.payload:
                raise ValueError("a fact needs subject, predicate and object, or a payload")
            return self
        # one check for the three fields: this runs for every delta a pass builds
        text = self.subject + self.predicate + self.object  # type: ignore[operator]
        if "\x00" in text or not text.isascii():
            for name in _TRIPLE:
                check_unicode(no_nul(getattr(self, name), f"fact.{name}"), f"fact.{name}")
        return self

    @property
    def has_triple(self) -> bool:
        return self.subject is not None

    @property
    def triple(self) -> tuple[str, str, str]:
        """``(subject, predicate, object)``; ``("", "", "")`` for a payload-only fact (a
        subject or predicate is never empty, so the two cannot be confused)."""
        if self.subject is None or self.predicate is None or self.object is None:
            return ("", "", "")
        return (self.subject, self.predicate, self.object)

    def flat(self) -> dict[str, Any]:
        """The fact as one JSON object: the payload's keys and the triple's, as the
        specification's ``fact_payload`` is written."""
        out: dict[str, Any] = dict(self.payload)
        if self.subject is not None:
            out.update(subject=self.subject, predicate=self.predicate, object=self.object)
        return out


_TRIPLE: Final = ("subject", "predicate", "object")


def spec_fact(value: Any) -> Any:
    """The specification's flat ``fact_payload`` (any JSON object) as our ``fact``: its
    subject/predicate/object become the triple when all three are strings (subject and
    predicate non-empty); every other key, ``payload`` included, stays in the payload as
    written. Reading ``fact_payload`` back gives the same object."""
    if not isinstance(value, dict):
        return value
    parts = [value.get(name) for name in _TRIPLE]
    if all(isinstance(p, str) for p in parts) and parts[0] and parts[1]:
        rest = {key: item for key, item in value.items() if key not in _TRIPLE}
        return {**dict(zip(_TRIPLE, parts, strict=True)), "payload": rest}
    return {"payload": dict(value)}


_FACT_FIELDS: frozenset[str] = frozenset(("subject", "predicate", "object", "payload"))


def _fact_payload_alias(data: Any) -> Any:
    """Accept the specification's ``fact_payload`` for our ``fact`` (one of them, not both)."""
    if not isinstance(data, dict) or "fact_payload" not in data:
        return data
    if "fact" in data:
        raise ValueError("give the fact as 'fact' or 'fact_payload', not both")
    out = {key: value for key, value in data.items() if key != "fact_payload"}
    out["fact"] = spec_fact(data["fact_payload"])
    return out


def delta_id_of(body: bytes) -> str:
    """The delta id for a delta's :meth:`~_DeltaBase.canonical_body`."""
    return "d" + hashlib.sha256(body).hexdigest()[:31]


class _DeltaBase(FrozenModel):
    creates: ClassVar[bool] = False
    """Asserts a new fact (its ``fact``, under :attr:`new_fact_id`)."""
    observes: ClassVar[bool] = True
    """Its source episodes are observations of the facts it makes or reinforces."""
    counted_as: ClassVar[str]
    """The :class:`~stargraph_mem.stores.fact.ApplyResult` field that counts this kind."""

    user: ScopePart | None = None
    agent: ScopePart | None = None
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

    def scoped(self, user: str, agent: str) -> Self:
        """This delta with its scope filled in (validated anew; its id is that of the delta
        written with this ``user`` and ``agent``)."""
        return type(self).model_validate({**self.model_dump(), "user": user, "agent": agent})

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

    @property
    def closed_ids(self) -> Sequence[str]:
        """The facts this delta closes (or, an archived one, restores)."""
        return ()

    @property
    def close_status(self) -> str:
        """The status the facts it closes get."""
        return "superseded"

    @property
    def reinforced_ids(self) -> Sequence[str]:
        """The facts this delta confirms."""
        return ()

    @property
    def named_ids(self) -> Sequence[str]:
        """Every fact this delta names (closes or reinforces)."""
        return [*self.closed_ids, *self.reinforced_ids]

    @property
    def flags(self) -> bool:
        """Whether it flags the facts it names (they stay current) rather than closing them."""
        return False

    @property
    def successor_id(self) -> str | None:
        """The fact that takes the place of those it closes: the one it makes, or the one a
        merge names (None: none)."""
        if self.creates:
            return "f" + self.delta_id[1:]
        return getattr(self, "merged_into", None)

    @property
    def restores(self) -> bool:
        """Whether it may name an archived fact: a delta that replaces a fact by a new one
        restores it (see :mod:`stargraph_mem.model.lifecycle`)."""
        return self.creates and bool(self.closed_ids)


class _FactDelta(_DeltaBase):
    """A delta that asserts a fact (``fact``, or ``fact_payload`` as the specification says)."""

    creates: ClassVar[bool] = True

    fact: FactPayload
    layer: Layer | None = Field(default=None, exclude_if=lambda v: v is None)
    """The memory layer of the fact (``None``: the replaced fact's, else ``episodic``)."""
    memory_type: MemoryType | None = Field(default=None, exclude_if=lambda v: v is None)
    """The memory type of the fact (``None``: the replaced fact's, else ``fact``)."""
    trust: float | None = Field(default=None, ge=0, le=1, exclude_if=lambda v: v is None)
    """The least trust of its sources (``None``: 1.0). The three are left out of the
    canonical body when ``None``: older deltas keep their ids."""

    _alias = model_validator(mode="before")(_fact_payload_alias)

    @property
    def fact_lifecycle(self) -> Lifecycle:
        """What the new fact keeps of the facts it replaces (see :data:`Lifecycle`)."""
        return "new"

    @property
    def fact_payload(self) -> dict[str, Any]:
        """The specification's name for the fact: one JSON object, as it was written
        (the payload's keys and, when the fact has one, the triple's)."""
        return self.fact.flat()

    @property
    def new_fact_id(self) -> str:
        """The id the fact created by this delta gets."""
        return "f" + self.delta_id[1:]


class AddDelta(_FactDelta):
    """Promote a new fact."""

    kind: Literal["add"] = "add"
    counted_as: ClassVar[str] = "added"

    if TYPE_CHECKING:  # as pydantic's mypy plugin types it, plus the spec's fact_payload

        def __init__(
            self,
            *,
            kind: Any = "add",
            fact: Any = None,
            fact_payload: Any = None,
            source_episode_ids: Any,
            promotion_ts: Any,
            rule_id: Any,
            confidence: Any,
            user: Any = None,
            agent: Any = None,
            reason: Any = "",
            bindings: Any = None,
            layer: Any = None,
            memory_type: Any = None,
            trust: Any = None,
        ) -> None: ...


class UpdateDelta(_FactDelta):
    """Supersede the facts in ``replaces`` and assert a new one."""

    kind: Literal["update"] = "update"
    counted_as: ClassVar[str] = "updated"
    replaces: list[Identifier] = Field(min_length=1)
    lifecycle: Lifecycle = Field(default="new", exclude_if=lambda v: v == "new")
    """Left out of the canonical body when ``new``: older deltas keep their ids."""

    @property
    def closed_ids(self) -> Sequence[str]:
        return self.replaces

    @property
    def fact_lifecycle(self) -> Lifecycle:
        return self.lifecycle

    if TYPE_CHECKING:  # as pydantic's mypy plugin types it, plus the spec's fact_payload

        def __init__(
            self,
            *,
            kind: Any = "update",
            replaces: Any,
            lifecycle: Any = "new",
            fact: Any = None,
            fact_payload: Any = None,
            source_episode_ids: Any,
            promotion_ts: Any,
            rule_id: Any,
            confidence: Any,
            user: Any = None,
            agent: Any = None,
            reason: Any = "",
            bindings: Any = None,
            layer: Any = None,
            memory_type: Any = None,
            trust: Any = None,
        ) -> None: ...


class DeleteDelta(_DeltaBase):
    """Close the facts in ``replaces``; nothing is physically deleted."""

    kind: Literal["delete"] = "delete"
    counted_as: ClassVar[str] = "deleted"
    observes: ClassVar[bool] = False
    replaces: list[Identifier] = Field(min_length=1)
    status: CloseStatus = Field(default="deleted", exclude_if=lambda v: v == "deleted")
    """The status the facts get; left out of the canonical body when ``deleted``, so older
    deltas keep their ids."""
    merged_into: Identifier | None = Field(default=None, exclude_if=lambda v: v is None)
    """With ``status: merged`` or ``superseded``, and only then: the current fact of the
    same (user, agent) the named facts were merged into, or that replaces them (their
    successor; left out of the canonical body when absent)."""

    @model_validator(mode="after")
    def _check_merge(self) -> DeleteDelta:
        if self.status in SUCCEEDED_STATUSES and self.merged_into is None:
            raise ValueError(
                f"status {self.status!r} needs merged_into: the fact they were merged into, "
                "or that replaces them"
            )
        if self.status not in SUCCEEDED_STATUSES and self.merged_into is not None:
            raise ValueError(
                f"merged_into goes with status 'merged' or 'superseded', not {self.status!r}"
            )
        if self.merged_into is not None and self.merged_into in self.replaces:
            raise ValueError(
                f"a fact cannot be merged into or superseded by itself ({self.merged_into})"
            )
        return self

    @property
    def closed_ids(self) -> Sequence[str]:
        return self.replaces

    @property
    def close_status(self) -> str:
        return self.status

    @property
    def flags(self) -> bool:
        """Whether it flags the facts it names (they stay current) rather than closing them."""
        return self.status in FLAG_STATUSES

    @property
    def named_ids(self) -> Sequence[str]:
        into = self.merged_into
        return [*self.replaces] if into is None else [*self.replaces, into]


class NoopDelta(_DeltaBase):
    """Audit only; ``reinforces`` names facts the episode confirmed."""

    kind: Literal["noop"] = "noop"
    counted_as: ClassVar[str] = "noops"
    reinforces: list[Identifier] = Field(default_factory=list)

    @property
    def reinforced_ids(self) -> Sequence[str]:
        return self.reinforces


Delta = AddDelta | UpdateDelta | DeleteDelta | NoopDelta
"""Every delta kind: the one list of them (add a kind's class here)."""
DeltaBase = _DeltaBase
"""What every kind has (provenance, ids, the facts it names)."""
FactDelta = _FactDelta
"""The base of the kinds that create a fact (``isinstance(delta, FactDelta)``)."""
MemoryDelta = Annotated[Delta, Field(discriminator="kind")]
DELTA_BY_KIND: Final[dict[str, type[Delta]]] = {
    cls.model_fields["kind"].default: cls for cls in get_args(Delta)
}
"""Each kind's class, by its ``kind``."""
DELTA_KINDS: Final[tuple[DeltaKind, ...]] = tuple(DELTA_BY_KIND)  # type: ignore[arg-type]
"""Every delta kind's name, in :data:`Delta`'s order."""


def kind_creates(kind: str) -> bool:
    """Whether a delta of ``kind`` creates a fact."""
    return DELTA_BY_KIND[kind].creates


def kind_takes(kind: str, field: str) -> bool:
    """Whether a delta of ``kind`` has ``field`` (``replaces``, ``reinforces``, ``status``…)."""
    return field in DELTA_BY_KIND[kind].model_fields


DELTA_ADAPTER: TypeAdapter[Delta] = TypeAdapter(MemoryDelta)
DELTA_LIST_ADAPTER: TypeAdapter[list[Delta]] = TypeAdapter(list[MemoryDelta])
