"""The PostgreSQL statements of the shared store code that are not a repository's: run
records (rendered from the schedule repository's text) and migration plans."""

from __future__ import annotations

from typing import Final

from stargraph_mem.stores.postgres.dialect import POSTGRES
from stargraph_mem.stores.repositories.migration_plan import PlanDialect
from stargraph_mem.stores.repositories.schedule import run_statements

__all__ = ["PLANS", "RUNS"]

RUNS: Final = run_statements(POSTGRES)
"""The run record and lease statements, rendered for PostgreSQL."""

_TYPES: Final = {
    "TEXT": "TEXT",
    "INTEGER": "BIGINT",
    "REAL": "DOUBLE PRECISION",
    "BLOB": "BYTEA",
    "NUMERIC": "NUMERIC",
}
PLANS: Final = PlanDialect(
    columns=(
        "SELECT lower(column_name) FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s"
    ),
    column_type=_TYPES.__getitem__,
)
"""Migration plans: the column types of a plan, in PostgreSQL."""
