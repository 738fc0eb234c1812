"""Registering the entities a pack declares (its ``entities:`` list) in a partition."""

from __future__ import annotations

from datetime import datetime

from stargraph_mem.compiler.pack import CompiledPack
from stargraph_mem.ir.models import RulePack
from stargraph_mem.model.entities import Entity
from stargraph_mem.stores.protocols import EntityRepository
from stargraph_mem.stores.scope import Partition

__all__ = ["register_pack_entities"]


async def register_pack_entities(
    repository: EntityRepository,
    partition: str | Partition,
    pack: CompiledPack | RulePack,
    *,
    at: datetime | None = None,
) -> list[Entity]:
    """Define each entity ``pack`` declares in ``partition`` (names and aliases merged into
    entities already there; idempotent: a second call changes nothing). Returns the
    entities, in the pack's order. An alias that names another entity of the partition
    raises :class:`~stargraph_mem.errors.EntityError` (the entities before it stay)."""
    ir = pack.pack if isinstance(pack, CompiledPack) else pack
    return [
        await repository.define(
            partition, entity.name, aliases=entity.aliases, type=entity.type, at=at
        )
        for entity in ir.entities
    ]
