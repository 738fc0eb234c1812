"""Scope of deltas written without ``user``/``agent``: taken from their source episodes.

The specification's deltas carry no scope; a fact is scoped ``(user, agent)``. When a delta
leaves its scope out, the fact store reads the stored episodes it cites, inside the
transaction that applies it: they must all be stored and share one ``(user, agent)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from stargraph_mem.errors import DeltaValidationError
from stargraph_mem.model.deltas import Delta
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.sql_conn import Conn

__all__ = ["resolve_scopes"]


def _unscoped(delta: Delta) -> bool:
    return delta.user is None or delta.agent is None


def _refuse(index: int, detail: str) -> DeltaValidationError:
    field = f"deltas[{index}].source_episode_ids"
    return DeltaValidationError(
        f"{field}: no user/agent given, and {detail}", index=index, field=field
    )


def _scope_of(index: int, delta: Delta, owners: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """The one ``(user, agent)`` the delta's stored sources share (a given part must agree)."""
    missing = [eid for eid in delta.source_episode_ids if eid not in owners]
    if missing:
        names = ", ".join(map(repr, missing))
        raise _refuse(index, f"source episode(s) {names} are not stored to take it from")
    scopes = sorted({owners[eid] for eid in delta.source_episode_ids})
    if len(scopes) > 1:
        listed = "; ".join(f"user={u!r} agent={a!r}" for u, a in scopes)
        raise _refuse(index, f"its source episodes belong to different scopes ({listed})")
    user, agent = scopes[0]
    if delta.user not in (None, user) or delta.agent not in (None, agent):
        raise _refuse(index, f"its source episodes belong to user={user!r} agent={agent!r}")
    return user, agent


async def resolve_scopes(db: Conn, sql: FactStatements, deltas: Sequence[Delta]) -> list[Delta]:
    """``deltas`` with every missing scope filled in from the stored source episodes.

    Scoped deltas pass unchanged (and cost no read). A resolved delta's id is the id of
    the same delta written with that scope, so the two spellings apply once.
    """
    if not any(_unscoped(delta) for delta in deltas):
        return list(deltas)
    columns = {str(row[0]) for row in await db.fetch(sql.episode_columns)}
    if not {"user", "agent"} <= columns:
        index = next(i for i, delta in enumerate(deltas) if _unscoped(delta))
        raise _refuse(index, "this database holds no episodes to take it from")
    cited = sorted({eid for d in deltas if _unscoped(d) for eid in d.source_episode_ids})
    rows = await db.fetch(sql.episode_owners_in, (sql.ids(cited),))
    owners = {str(eid): (str(user), str(agent)) for eid, user, agent in rows}
    return [
        delta.scoped(*_scope_of(index, delta, owners)) if _unscoped(delta) else delta
        for index, delta in enumerate(deltas)
    ]
