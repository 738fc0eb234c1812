"""Episodic memory over PostgreSQL: the shared episode repository on the database's pool.

Reads and writes are :class:`~stargraph_mem.stores.repositories.episodes.Episodes` (the
tables are created by the schema's migrations); here: migration plans, health and the
legacy ``consolidate`` entry point, which PostgreSQL does not offer.
"""

from __future__ import annotations

from typing import ClassVar, Final

import psycopg

from stargraph_mem.errors import StoreError
from stargraph_mem.model.deltas import MemoryDelta
from stargraph_mem.stores.models import ConsolidationRule, MigrationPlan, StoreHealth
from stargraph_mem.stores.postgres.dialect import POSTGRES
from stargraph_mem.stores.postgres.repository import PostgresRepository
from stargraph_mem.stores.postgres.statements import PLANS
from stargraph_mem.stores.repositories import episodes
from stargraph_mem.stores.repositories.episodes import Episodes
from stargraph_mem.stores.repositories.migration_plan import Ledger, apply_plan, check_plan

__all__ = ["PostgresMemoryStore", "recent_query"]

_LEDGER: Final = Ledger(
    "schema_migrations",
    "INSERT INTO schema_migrations (version, name, applied_at_us, plan) "
    "VALUES ((SELECT max(version) + 1 FROM schema_migrations), %s, %s, %s)",
    applied="SELECT plan FROM schema_migrations WHERE name = %s",
)


def recent_query(
    user: str, session: str | None, agent: str | None, limit: int
) -> tuple[str, tuple[str | int, ...]]:
    """The SQL and parameters ``recent()`` runs on PostgreSQL."""
    return episodes.recent_query(POSTGRES, user, session, agent, limit)


class PostgresMemoryStore(Episodes, PostgresRepository):
    """The episodic memory store of a :class:`PostgresDatabase` (its pool, its schema)."""

    _note_errors: ClassVar[tuple[type[Exception], ...]] = (psycopg.Error,)
    _unreadable: ClassVar[type[Exception]] = psycopg.Error

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations in one transaction and record the plan."""
        check_plan(plan, store="memory")
        now_us = self._now_us()
        async with self.database.transaction("schema") as db:
            await apply_plan(db, plan, store="memory", ledger=_LEDGER, now_us=now_us, dialect=PLANS)

    async def health(self) -> StoreHealth:
        """Figures from the server; ``schema_version`` is the highest applied migration
        plan of this store, as SQLite's memory store reports it."""
        found = await super().health()
        if not found.ok:
            return found
        return found.model_copy(update={"schema_version": await self.schema_version()})

    async def consolidate(
        self, rule: ConsolidationRule, *, due_only: bool = False
    ) -> list[MemoryDelta]:
        """Not available: this legacy entry point opens SQLite stores by path (use
        ``Consolidator.open(url, packs)``).

        Raises :class:`StoreError` (nothing read or written) instead of letting it create a
        SQLite file named after this database's URL.
        """
        raise StoreError(
            f"consolidate() of rule {rule.id!r} runs on SQLite files only; consolidate "
            f"{self.database.where} with Consolidator.open(url, packs)",
            rule_id=rule.id,
        )
