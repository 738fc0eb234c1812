"""Facts: promoted statements scoped ``(user, agent)``, and the patterns that query them."""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, JsonValue, PrivateAttr, field_validator

from stargraph_mem.model.base import FrozenModel, Identifier, ScopePart, StoredDatetime, no_nul
from stargraph_mem.model.layers import Layer, MemoryType
from stargraph_mem.model.lifecycle import spec_status

StatusFilter = Literal[
    "current",
    "active",
    "challenged",
    "superseded",
    "merged",
    "deleted",
    "expired",
    "archived",
    "invalidated",
    "all",
]
"""What ``FactPattern.status`` accepts: a fact status, or ``all``. ``current`` is every
valid fact (``challenged`` ones too); ``active`` (the specification's name) only those not
flagged."""


class Fact(FrozenModel):
    """A promoted statement scoped ``(user, agent)``, with its validity interval."""

    id: Identifier
    user: str
    agent: str
    subject: str
    predicate: str
    object: str
    payload: dict[str, JsonValue] = Field(default_factory=dict)
    confidence: float
    valid_from: StoredDatetime
    valid_until: StoredDatetime | None = None
    superseded_by: str | None = None
    recorded_at: StoredDatetime
    rule_id: str
    delta_id: str
    status: str = "current"
    """``current`` or ``challenged`` while valid, else the closing status (see
    ``FACT_STATUSES``)."""
    layer: Layer = Field(default="episodic", exclude_if=lambda v: v == "episodic")
    memory_type: MemoryType = Field(default="fact", exclude_if=lambda v: v == "fact")
    trust: float = Field(default=1.0, exclude_if=lambda v: v == 1.0)
    """Specification 004's layer, memory type and source trust
    (:mod:`~stargraph_mem.model.layers`); left out of dumps at their defaults."""

    _lineage: tuple[dict[str, JsonValue], ...] | None = PrivateAttr(default=None)
    _pinned_at: datetime | None = PrivateAttr(default=None)

    def __eq__(self, other: builtins.object) -> bool:
        """Facts are equal when their fields are: what a read attached for :attr:`lineage`
        and :attr:`pinned_at` does not count."""
        if isinstance(other, Fact):
            return type(self) is type(other) and self.__dict__ == other.__dict__
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.id, self.delta_id, self.valid_until, self.status))

    @property
    def is_current(self) -> bool:
        return self.valid_until is None

    @property
    def has_triple(self) -> bool:
        """Whether the fact has subject/predicate/object (a payload-only fact has ``""``
        for all three: a subject is never empty)."""
        return self.subject != ""

    @property
    def fact_payload(self) -> dict[str, Any]:
        """The fact as one JSON object, as the specification's ``fact_payload`` was
        written: the payload's keys and, when it has one, the triple's."""
        out: dict[str, Any] = dict(self.payload)
        if self.has_triple:
            out.update(subject=self.subject, predicate=self.predicate, object=self.object)
        return out

    @property
    def lineage(self) -> list[dict[str, Any]]:
        """stargraph 0.8's lineage: the rule firing that made the fact, as
        ``[{"rule_id", "source_episode_ids", "promotion_ts", "delta_id", "pack_hash",
        "confidence", "reason"}]`` (``promotion_ts`` ISO 8601 text). Facts read by a store's
        ``query``, ``as_of`` or ``get`` carry it all; one built otherwise names its rule and
        delta only (``FactStore.lineage(id)`` reads the full bundle)."""
        private = self.__pydantic_private__
        found = None if private is None else private.get("_lineage")
        if found is not None:
            return [dict(entry) for entry in found]
        return [{"rule_id": self.rule_id, "delta_id": self.delta_id}]

    @property
    def pinned_at(self) -> datetime | None:
        """When the fact was pinned (``FactStore.pin``), ``None`` while it is not pinned.
        Known on facts read by a store's ``query``, ``as_of`` or ``get``."""
        private = self.__pydantic_private__
        return None if private is None else private.get("_pinned_at")

    def with_provenance(
        self, lineage: list[dict[str, JsonValue]], pinned_at: datetime | None
    ) -> Fact:
        """This fact carrying what :attr:`lineage` and :attr:`pinned_at` read (stores call
        this on the facts they return)."""
        made = self.model_copy()
        made.__pydantic_private__ = {"_lineage": tuple(lineage), "_pinned_at": pinned_at}
        return made


class FactPattern(FrozenModel):
    """A query over facts; ``None`` fields match anything. Current facts only by default.

    ``status`` picks facts by status (a ``FACT_STATUSES`` name, or ``all``); ``None`` means
    ``current``, or ``all`` with ``include_history``.
    """

    user: ScopePart | None = None
    agent: ScopePart | None = None
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    min_confidence: float | None = None
    include_history: bool = False
    limit: int | None = Field(default=None, ge=1)
    status: StatusFilter | None = None
    layer: Layer | None = None
    memory_type: MemoryType | list[MemoryType] | None = None
    """Facts of this layer, of this memory type (or one of these types)."""

    @field_validator("subject", "predicate", "object")
    @classmethod
    def _no_nul(cls, value: str | None, info: Any) -> str | None:
        """No stored fact holds a NUL, and PostgreSQL cannot even compare one: refused
        alike on both backends (a NUL in ``user`` or ``agent`` is a
        :class:`~stargraph_mem.errors.MemoryScopeError` when the filter is built)."""
        return None if value is None else no_nul(value, str(info.field_name))


class FactHit(FrozenModel):
    """One search result: a current fact and its relevance (higher is better)."""

    fact: Fact
    score: float
    """Minus SQLite's BM25 for a text search (compare within one search only); 0.0 for a
    search by filters alone, which ranks by confidence."""


class FactAccess(FrozenModel):
    """How often a fact was read through an access-recording read, and when last."""

    fact_id: str
    count: int = 0
    last_access: StoredDatetime | None = None


class StatusEvent(FrozenModel):
    """One step of a fact's status history: made, pinned, unpinned, flagged, cleared,
    closed, restored.

    ``event`` is ``created``, ``pinned``, ``unpinned``, ``restored``, ``challenged``,
    ``current`` (a challenge cleared) or the closing status; ``status`` is the fact's
    status once it happened; ``related_fact_id`` names the fact it came from (created),
    the one that replaced it (superseded) or absorbed it (merged), the one a restore made
    (restored) or the predecessor a carried pin came from (pinned).
    """

    fact_id: str
    event: str
    status: str
    at: StoredDatetime
    rule_id: str | None = None
    delta_id: str | None = None
    reason: str = ""
    related_fact_id: str | None = None


class StatusChange(FrozenModel):
    """One status transition in specification 004's shape: ``{old, new, reason,
    changed_at}``, with its statuses named as the specification names them (``active``
    for ``current``)."""

    old: str
    new: str
    reason: str = ""
    changed_at: StoredDatetime


_NOT_CHANGES = frozenset({"created", "pinned", "unpinned", "restored"})


def status_changes(events: list[StatusEvent]) -> list[StatusChange]:
    """The transitions of a status history (:class:`StatusEvent`, oldest first) in the
    specification's shape: each event that changed the fact's status (a challenge, its
    clearing, the close), not its creation, pins or a restore (a restored fact stays
    archived; its successor is a new fact)."""
    out: list[StatusChange] = []
    status = "current"
    for event in events:
        if event.event in _NOT_CHANGES or event.status == status:
            continue
        out.append(
            StatusChange(
                old=spec_status(status),
                new=spec_status(event.status),
                reason=event.reason,
                changed_at=event.at,
            )
        )
        status = event.status
    return out
