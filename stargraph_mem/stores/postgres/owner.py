"""What a PostgreSQL repository needs of the database that owns it: its pool's
connections and transactions, its clock, where it is and its lifecycle.

The repositories are typed against this protocol, so the owner
(:class:`~stargraph_mem.stores.postgres.database.PostgresDatabase`), which builds them,
is the only module that imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

from stargraph_mem.stores.models import StoreHealth
from stargraph_mem.stores.postgres.connection import PgConn

__all__ = ["PgOwner"]


class PgOwner(Protocol):
    """The database owner a PostgreSQL repository runs its statements through."""

    url: str
    clock: Callable[[], datetime]

    @property
    def where(self) -> str: ...

    def now_us(self) -> int: ...

    def connection(self) -> AbstractAsyncContextManager[PgConn]: ...

    def transaction(self, lock: str | None = None) -> AbstractAsyncContextManager[PgConn]: ...

    async def bootstrap(self) -> None: ...

    async def close(self) -> None: ...

    async def health(self) -> StoreHealth: ...
