"""Scheduler state over PostgreSQL: the shared schedule repository on the database's pool.

The reads and writes are :class:`~stargraph_mem.stores.repositories.schedule.Schedule`
(the tables are created by the schema's migrations); lease changes hold the schema's
``schedule`` advisory lock, so two schedulers never both take a lease.
"""

from __future__ import annotations

from stargraph_mem.stores.postgres.repository import PostgresRepository
from stargraph_mem.stores.repositories.schedule import Schedule

__all__ = ["PostgresScheduleStore"]


class PostgresScheduleStore(Schedule, PostgresRepository):
    """Run records and the scheduler lease of a :class:`PostgresDatabase`."""
