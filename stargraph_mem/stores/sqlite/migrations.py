"""Schema migrations of the SQLite stores (see
:mod:`~stargraph_mem.stores.repositories.migration_plan`)."""

from __future__ import annotations

from typing import Final

import aiosqlite

from stargraph_mem.stores.models import MigrationPlan
from stargraph_mem.stores.repositories.migration_plan import Ledger, PlanDialect, check_plan
from stargraph_mem.stores.repositories.migration_plan import apply_plan as apply_dialect_plan
from stargraph_mem.stores.sqlite.connection import SQLiteConn

__all__ = ["Ledger", "apply_plan", "check_plan"]


def _same_type(name: str) -> str:
    return name


_SQLITE: Final = PlanDialect(
    columns=(
        "SELECT name FROM pragma_table_info(?1) WHERE ?1 IN "
        "(SELECT name FROM sqlite_master WHERE type = 'table')"
    ),
    column_type=_same_type,
)


async def apply_plan(
    db: aiosqlite.Connection, plan: MigrationPlan, *, store: str, ledger: Ledger, now_us: int
) -> bool:
    """Apply a checked ``plan`` inside the caller's write transaction and record it."""
    return await apply_dialect_plan(
        SQLiteConn(db), plan, store=store, ledger=ledger, now_us=now_us, dialect=_SQLITE
    )
