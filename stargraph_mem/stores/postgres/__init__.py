"""The PostgreSQL backend: one database owner and its three store repositories.

Needs the ``postgres`` extra (psycopg 3 and its pool). Select it with a
``postgresql://user@host/db?schema=NAME`` URL.
"""

from __future__ import annotations

from stargraph_mem.stores.postgres.database import PostgresDatabase
from stargraph_mem.stores.postgres.fact import PostgresFactStore
from stargraph_mem.stores.postgres.memory import PostgresMemoryStore
from stargraph_mem.stores.postgres.schedule import PostgresScheduleStore

__all__ = [
    "PostgresDatabase",
    "PostgresFactStore",
    "PostgresMemoryStore",
    "PostgresScheduleStore",
]
