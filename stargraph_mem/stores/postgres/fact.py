"""Promoted facts over PostgreSQL: the connection handling of the fact repository.

The methods and their SQL are the repository's
(:class:`~stargraph_mem.stores.repositories.facts.SQLFactRepository`, rendered for
:class:`~stargraph_mem.stores.postgres.dialect.PostgresDialect`); this module binds it to the
database's pool and transactions. A write runs in one transaction holding the schema's
``facts`` advisory lock, so a batch's fact rowids and audit seqs follow the stored ones
and a pass's basis check and its writes see no other writer in between, as with SQLite's
one writer.

Search uses PostgreSQL full-text search: a ``tsvector`` per fact ('simple' configuration,
text case folded and without accents, as SQLite's index), a GIN index, the query's words
(never its syntax) joined with OR, ranked by ``ts_rank``, then confidence and recency.
Each fact is indexed by the transaction that makes it.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Final

from stargraph_mem.stores.fact import ProvenanceAdapter
from stargraph_mem.stores.models import MigrationPlan
from stargraph_mem.stores.postgres.connection import PgConn
from stargraph_mem.stores.postgres.dialect import POSTGRES
from stargraph_mem.stores.postgres.repository import PostgresRepository
from stargraph_mem.stores.postgres.schema import TABLES
from stargraph_mem.stores.postgres.statements import PLANS, RUNS
from stargraph_mem.stores.repositories.fact_passes import CHUNK, RecordRuns
from stargraph_mem.stores.repositories.facts import FACTS_LOCK, SQLFactRepository
from stargraph_mem.stores.repositories.migration_plan import Ledger, apply_plan, check_plan
from stargraph_mem.stores.repositories.schedule_runs import record_runs

if TYPE_CHECKING:
    from stargraph_mem.stores.postgres.owner import PgOwner

__all__ = ["CHUNK", "PostgresFactStore"]

_LEDGER: Final = Ledger(
    "fact_store_migrations",
    "INSERT INTO fact_store_migrations (name, applied_at_us, plan) VALUES (%s, %s, %s)",
    applied="SELECT plan FROM fact_store_migrations WHERE name = %s",
)


class PostgresFactStore(PostgresRepository, SQLFactRepository[PgConn]):
    """The fact repository of a :class:`PostgresDatabase` (its pool, its schema).

    ``adapter`` carries listeners for new facts; the database's clock stamps
    ``recorded_at`` and audit rows.
    """

    dialect = POSTGRES

    def __init__(self, database: PgOwner, *, adapter: ProvenanceAdapter | None = None):
        super().__init__(database)
        self._clock = self._database_now
        self._repository(adapter, episodes_here=True)  # one schema holds every store

    def _database_now(self) -> datetime:
        """The database's clock (read at each call: it is the database's to change)."""
        return self.database.clock()

    async def migrate(self, plan: MigrationPlan) -> None:
        """Apply nullable ``add_column`` operations to this store's tables (one transaction,
        recorded by name in ``fact_store_migrations``)."""
        check_plan(plan, store="fact", tables=TABLES["fact"])
        now_us = self._now_us()
        async with self.database.transaction("schema") as db:
            await apply_plan(db, plan, store="fact", ledger=_LEDGER, now_us=now_us, dialect=PLANS)

    # --- the repository's connection handling ------------------------------------------

    def _facts_reading(self) -> AbstractAsyncContextManager[PgConn]:
        return self.database.connection()

    def _facts_writing(self, lock: str | None = FACTS_LOCK) -> AbstractAsyncContextManager[PgConn]:
        return self.database.transaction(lock)

    def _run_recorder(self, db: PgConn) -> RecordRuns:
        return partial(record_runs, db, RUNS)
