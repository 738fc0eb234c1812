"""Schema migration plans, backend-neutral: nullable ``add_column`` only, all or nothing.

A plan is checked whole before anything runs, applied in the caller's write transaction,
and recorded by name in the store's ledger table: re-applying a recorded plan is a no-op,
the same name with other operations is refused. Every refusal is a
:class:`~stargraph_mem.errors.MigrationNotSupported` naming the store, the plan and the
operation (its index and kind).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final

from stargraph_mem.errors import MigrationNotSupported
from stargraph_mem.model.canonical import canonical_json
from stargraph_mem.stores.models import MigrationOp, MigrationPlan
from stargraph_mem.stores.sql_conn import Conn

__all__ = ["Ledger", "PlanDialect", "apply_plan", "check_plan"]

_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_COLUMN_TYPES: Final = frozenset({"TEXT", "INTEGER", "REAL", "BLOB", "NUMERIC"})


@dataclass(frozen=True, slots=True)
class Ledger:
    """Where a store records applied plans: a ``name``/``plan`` table and its insert."""

    table: str
    insert: str
    """Parameters ``(name, applied_at_us, plan)``."""
    create: str | None = None
    """Run first (``CREATE TABLE IF NOT EXISTS``) when the store's bootstrap does not."""
    applied: str = ""
    """The recorded plan by name (parameter ``(name,)``); default: ``?`` on ``table``."""


@dataclass(frozen=True, slots=True)
class PlanDialect:
    """How a backend lists a table's columns and spells a column type."""

    columns: str
    """Lower-case column names of a table, no rows when it does not exist (``(table,)``)."""
    column_type: Callable[[str], str]
    """The backend's type for one of the plan types (upper case)."""


def _refuse(
    store: str, plan: MigrationPlan, index: int, detail: str, reason: str
) -> MigrationNotSupported:
    op = plan.operations[index].op
    return MigrationNotSupported(
        detail, store=store, plan=plan.name, index=index, op=op, reason=reason
    )


def _operation_problem(op: MigrationOp, tables: Collection[str] | None) -> tuple[str, str] | None:
    """Why ``op`` cannot run (only nullable ``add_column`` with safe names and plain types):
    the detail and a short reason (stargraph 0.8's ``v1-add-column-only`` and
    ``non-nullable-add``, and ours)."""
    if op.op != "add_column":
        return f"operation {op.op!r} is not supported", "v1-add-column-only"
    if not op.nullable:
        return "only nullable columns can be added", "non-nullable-add"
    if op.options:
        keys = ", ".join(map(repr, sorted(op.options)))
        return f"add_column does not take {keys}", "unsupported-option"
    for what, name in (("table", op.table), ("column", op.column)):
        if not _IDENTIFIER.match(name) or name.lower().startswith("sqlite_"):
            return f"invalid {what} name {name!r}", f"invalid-{what}-name"
    if tables is not None and op.table not in tables:
        listed = ", ".join(tables)
        return f"table {op.table!r} is not one of this store's tables ({listed})", "unknown-table"
    if op.type.upper() not in _COLUMN_TYPES:
        types = ", ".join(sorted(_COLUMN_TYPES))
        return f"column type {op.type!r} is not one of {types}", "unsupported-type"
    return None


def check_plan(plan: MigrationPlan, *, store: str, tables: Collection[str] | None = None) -> None:
    """Refuse the first operation that cannot run, before any transaction opens."""
    for index, op in enumerate(plan.operations):
        problem = _operation_problem(op, tables)
        if problem is not None:
            raise _refuse(store, plan, index, *problem)


async def _check_targets(db: Conn, plan: MigrationPlan, store: str, dialect: PlanDialect) -> None:
    """Every target table exists and no column is added twice or already present."""
    added: set[tuple[str, str]] = set()
    for index, op in enumerate(plan.operations):
        columns = {str(row[0]).lower() for row in await db.fetch(dialect.columns, (op.table,))}
        if not columns:
            raise _refuse(store, plan, index, f"table {op.table!r} does not exist", "no-table")
        key = (op.table.lower(), op.column.lower())
        if key[1] in columns or key in added:
            detail = f"column {op.table}.{op.column} already exists"
            raise _refuse(store, plan, index, detail, "column-exists")
        added.add(key)


async def apply_plan(
    db: Conn,
    plan: MigrationPlan,
    *,
    store: str,
    ledger: Ledger,
    now_us: int,
    dialect: PlanDialect,
) -> bool:
    """Apply a checked ``plan`` inside the caller's write transaction and record it.

    Returns False when the same plan was applied before (nothing done).
    """
    if ledger.create is not None:
        await db.execute(ledger.create)
    body = canonical_json(plan.model_dump(mode="json"))
    applied_sql = ledger.applied or f"SELECT plan FROM {ledger.table} WHERE name = ?"
    applied = await db.scalar(applied_sql, (plan.name,))
    if applied is not None:
        if bytes(applied) == body:
            return False
        raise MigrationNotSupported(
            "already applied with different operations",
            store=store,
            plan=plan.name,
            reason="plan-changed",
        )
    await _check_targets(db, plan, store, dialect)
    for op in plan.operations:
        column_type = dialect.column_type(op.type.upper())
        await db.execute(f'ALTER TABLE "{op.table}" ADD COLUMN "{op.column}" {column_type}')
    await db.execute(ledger.insert, (plan.name, now_us, body))
    return True
