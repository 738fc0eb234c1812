"""Facts: promoted statements scoped ``(user, agent)``, and the patterns that query them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue

from stargraph_mem.model.base import FrozenModel, Identifier, ScopePart, StoredDatetime

StatusFilter = Literal[
    "current", "superseded", "deleted", "expired", "archived", "invalidated", "all"
]
"""What ``FactPattern.status`` accepts: a fact status, or ``all``."""


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
    """``current`` while valid, else the closing status (see ``FACT_STATUSES``)."""

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
    """One step of a fact's status history: made, pinned, unpinned, closed, restored.

    ``event`` is ``created``, ``pinned``, ``unpinned``, ``restored`` or the closing status;
    ``status`` is the fact's status once it happened; ``related_fact_id`` names the fact
    it came from (created), the one that replaced it (superseded), the one a restore made
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
