"""Candidate reads of sweeps, backend-neutral: the partitions and current facts a sweep's
pre-filter selects (its WHERE fragment over ``facts f`` comes from the compiler, with
``?`` marks and its parameters; see :mod:`~stargraph_mem.compiler.sweep_sql`).

Both reads cost O(candidates): the fragment's terms are served by the indexes of
:data:`~stargraph_mem.stores.repositories.sweep_schema.SWEEP_INDEXES` over the current facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.repositories.fact_passes import group_current
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sql_conn import Conn

__all__ = ["sweep_candidates", "sweep_facts", "sweep_partitions"]

_CURRENT: Final = "f.valid_until_us IS NULL"


def _where(sql: FactStatements, where: str) -> str:
    return where.replace("?", sql.mark)


_CURRENT_OR_ARCHIVED: Final = f"({_CURRENT} OR (f.status = 'archived' AND f.superseded_by IS NULL))"
"""Current facts, and archived ones not restored (a sweep whose pattern admits them)."""


async def sweep_partitions(
    db: Conn, sql: FactStatements, where: str, params: Sequence[Any], *, archived: bool = False
) -> list[Partition]:
    """Every partition with a current fact ``where`` selects (or an archived one, with
    ``archived``), in (user, agent) order."""
    which = _CURRENT_OR_ARCHIVED if archived else _CURRENT
    rows = await db.fetch(
        f'SELECT DISTINCT f."user", f.agent FROM facts f WHERE {which} '
        f"AND ({_where(sql, where)}) ORDER BY 1, 2",
        tuple(params),
    )
    return [Partition(str(user), str(agent)) for user, agent in rows]


async def sweep_candidates(
    db: Conn, sql: FactStatements, where: str, params: Sequence[Any], *, archived: bool = False
) -> dict[Partition, int]:
    """How many facts ``where`` selects in each partition that has some (what a sweep would
    look at there; current facts, and archived ones with ``archived``)."""
    which = _CURRENT_OR_ARCHIVED if archived else _CURRENT
    rows = await db.fetch(
        f'SELECT f."user", f.agent, count(*) FROM facts f WHERE {which} '
        f"AND ({_where(sql, where)}) GROUP BY 1, 2 ORDER BY 1, 2",
        tuple(params),
    )
    return {Partition(str(user), str(agent)): int(n) for user, agent, n in rows}


async def sweep_facts(
    db: Conn,
    sql: FactStatements,
    where: str,
    params: Sequence[Any],
    partitions: Sequence[Partition],
) -> list[list[EngineFact]]:
    """The current facts ``where`` selects in each of ``partitions`` (in the order given,
    each as the runtime reads current facts)."""
    assert sql.current_of.count(_CURRENT) == 1
    text = sql.current_of.replace(_CURRENT, f"{_CURRENT} AND ({_where(sql, where)})")
    keys = [p.key for p in partitions]
    rows = await db.fetch(text, (sql.ids(keys), *params))
    return group_current(rows, keys)
