"""The few connection operations backend-neutral store code needs, whatever the driver.

Shared modules (:mod:`~stargraph_mem.stores.repositories.fact_apply`,
:mod:`~stargraph_mem.stores.repositories.fact_explain`,
…) run statements a backend hands them through this interface, so the SQL text stays in
the backend's own modules and the logic exists once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Conn", "Insert", "Many"]


@dataclass(frozen=True, slots=True)
class Insert:
    """Rows into one table: ``sql`` inserts one row (its parameters in ``columns`` order);
    ``table`` and ``columns`` let a backend load many rows at once (PostgreSQL: ``COPY``)."""

    table: str
    columns: tuple[str, ...]
    sql: str


@dataclass(frozen=True, slots=True)
class Many:
    """One statement for many rows: ``sql`` runs once per row; ``arrays`` (when the backend
    has one) runs once, each parameter the array of one column of the rows."""

    sql: str
    arrays: str = ""


class Conn(Protocol):
    """An open connection inside the caller's transaction (or autocommit, for reads)."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; return how many rows it changed."""

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one statement per row; return how many rows they changed in all."""

    async def insert_many(self, insert: Insert, rows: Sequence[Sequence[Any]]) -> None:
        """Insert every row (all new: no conflict handling) the backend's fastest way."""

    async def run_many(self, statement: Many, rows: Sequence[Sequence[Any]]) -> None:
        """Run ``statement`` for every row, in one round trip where the backend can."""

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        """Every row of one statement."""

    async def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row (``None`` when there is no row)."""
