"""Entities: the named things facts are about, their aliases, and what memory holds on one.

An entity lives in one partition (a ``(user, agent)`` slice). It is either declared (by a
program or a pack's ``entities:`` list: a canonical name, aliases and a type) or implicit:
the subject or object of a current fact, which is an entity even when nobody declared it.
Names are compared folded: case and accents removed, whitespace collapsed.
"""

from __future__ import annotations

import unicodedata
from typing import Final, Literal, get_args

from pydantic import Field

from stargraph_mem.model.base import FrozenModel, StoredDatetime
from stargraph_mem.model.facts import Fact

__all__ = [
    "ENTITY_TYPES",
    "MAX_ALIASES",
    "MAX_NAME_CHARS",
    "Entity",
    "EntityProfile",
    "EntityType",
    "LineageNeighbours",
    "TimelineEvent",
    "TimelineKind",
    "fold_entity_name",
]

EntityType = Literal["person", "project", "organization", "place", "concept", "tool"]
"""What kind of thing an entity is."""
ENTITY_TYPES: Final[tuple[str, ...]] = get_args(EntityType)
MAX_NAME_CHARS: Final = 256
"""The longest entity name or alias, in characters."""
MAX_ALIASES: Final = 64
"""The most aliases one entity may have."""


def fold_entity_name(text: str) -> str:
    """``text`` as names are compared: case folded, accents removed, whitespace collapsed
    (the stores fold the same way, with the search index's ``fold``)."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return " ".join("".join(ch for ch in decomposed if not unicodedata.combining(ch)).split())


TimelineKind = Literal["fact_added", "fact_closed", "episode"]
"""What happened at a point of an entity's timeline: a fact about it became valid, one
was closed (with its status), or an episode that is a source of such a fact was recorded."""


class Entity(FrozenModel):
    """A named thing of one partition: declared, or implicit (a fact's subject or object)."""

    id: str
    partition_key: str
    canonical_name: str
    type: EntityType = "concept"
    aliases: tuple[str, ...] = ()
    declared: bool = True
    """``False`` for an implicit entity: a name only facts carry (no aliases, no times)."""
    created_at: StoredDatetime | None = None
    updated_at: StoredDatetime | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name, then the aliases."""
        return (self.canonical_name, *self.aliases)


class TimelineEvent(FrozenModel):
    """One dated event of an entity's timeline."""

    at: StoredDatetime
    kind: TimelineKind
    fact_id: str | None = None
    """The fact added or closed (``None`` for an episode)."""
    episode_id: str | None = None
    """The source episode (``None`` for a fact event)."""
    status: str | None = None
    """A closed fact's status (``superseded``, ``deleted``, …); ``current`` when added."""
    text: str = ""
    """The fact's ``subject predicate object``, or the episode's content."""
    fact_ids: tuple[str, ...] = ()
    """For an episode: the facts of the entity it is a source of."""


class EntityProfile(FrozenModel):
    """What memory holds on one entity: its names, its current facts and its timeline."""

    entity: Entity
    aliases: tuple[str, ...] = ()
    facts: tuple[Fact, ...] = ()
    """The entity's current facts (subject or object equal to one of its names, folded),
    newest first."""
    timeline: tuple[TimelineEvent, ...] = ()
    """Its facts' additions and closings and their source episodes, oldest first."""
    truncated: bool = False
    """Whether the entity has more facts than the profile's limit (the newest are kept)."""


class LineageNeighbours(FrozenModel):
    """What lineage links to some facts (and episodes): their source episodes, and the
    facts derived from those episodes."""

    episode_ids: tuple[str, ...] = Field(default=())
    fact_ids: tuple[str, ...] = Field(default=())
