"""Why a fact exists, backend-neutral: lineage, supersession walks, sources and audit rows.

Runs the backend's :class:`~stargraph_mem.stores.repositories.fact_statements.FactStatements` on a
:class:`~stargraph_mem.stores.sql_conn.Conn` (reads only).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from stargraph_mem.errors import FactNotFoundError
from stargraph_mem.model.facts import Fact
from stargraph_mem.model.time import from_us
from stargraph_mem.stores.fact import AuditRow, Explanation, ProvenanceBundle, SourceEpisode
from stargraph_mem.stores.repositories.fact_rows import (
    FACT_COLUMN_COUNT,
    audit_from_row,
    bundle_from_row,
    fact_from_row,
    key_of,
)
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.repositories.fact_status import status_history
from stargraph_mem.stores.sql_conn import Conn

__all__ = ["explain", "lineage_of"]

_SOURCE_COLUMNS = frozenset({"id", "session", "ts_us", "content", "partition_key"})


async def lineage_of(db: Conn, sql: FactStatements, fact_id: str) -> ProvenanceBundle:
    """The provenance bundle recorded with a fact; :class:`FactNotFoundError` if none."""
    rows = await db.fetch(sql.lineage_of, (fact_id,))
    if not rows:
        raise FactNotFoundError(f"no lineage for fact id {fact_id!r}", fact_id=fact_id)
    return bundle_from_row(fact_id, rows[0])


async def _with_predecessors(
    db: Conn, sql: FactStatements, ids: Sequence[str]
) -> dict[str, tuple[Fact, list[str]]]:
    rows = await db.fetch(sql.predecessors_in, (sql.ids(list(ids)),))
    return {
        row[0]: (fact_from_row(row), orjson.loads(row[FACT_COLUMN_COUNT] or b"[]")) for row in rows
    }


async def _predecessors(db: Conn, sql: FactStatements, first: Sequence[str]) -> list[Fact]:
    """Walk ``predecessor_ids`` back, breadth first, nearest first, each fact once."""
    out: list[Fact] = []
    seen: set[str] = set()
    frontier = list(first)
    while frontier:
        found = await _with_predecessors(db, sql, frontier)
        upcoming: list[str] = []
        for fid in frontier:
            if fid in seen or fid not in found:
                continue
            seen.add(fid)
            fact, earlier = found[fid]
            out.append(fact)
            upcoming += earlier
        frontier = upcoming
    return out


async def _successors(db: Conn, sql: FactStatements, fact: Fact) -> list[Fact]:
    """Follow ``superseded_by`` forward to the fact that replaced it, and so on."""
    out: list[Fact] = []
    seen = {fact.id}
    nxt = fact.superseded_by
    while nxt is not None and nxt not in seen:
        seen.add(nxt)
        rows = await db.fetch(sql.fact_by_id, (nxt,))
        if not rows:
            break
        out.append(fact_from_row(rows[0]))
        nxt = out[-1].superseded_by
    return out


async def _source_episodes(
    db: Conn, sql: FactStatements, ids: Sequence[str], partition_key: str
) -> tuple[SourceEpisode, ...]:
    """Source episodes with content from the ``episodes`` table when it exists; only
    episodes of the fact's own (user, agent) are shown (others by id alone)."""
    columns = {str(row[0]) for row in await db.fetch(sql.episode_columns)}
    found: dict[str, SourceEpisode] = {}
    if columns >= _SOURCE_COLUMNS:
        rows = await db.fetch(sql.source_episodes_in, (sql.ids(list(ids)), partition_key))
        for eid, session, ts_us, content in rows:
            found[eid] = SourceEpisode(
                id=eid, session=session, timestamp=from_us(ts_us), content=content
            )
    return tuple(found.get(eid, SourceEpisode(id=eid)) for eid in ids)


async def _audit_touching(
    db: Conn, sql: FactStatements, fact: Fact, closed_by: str | None
) -> list[AuditRow]:
    """Audit rows of the delta that made ``fact``, the one that closed it and those that
    reinforced it, in application order.

    An update's row is found through the fact it made (its lineage names the audit seq);
    delete and noop rows through their indexed delta ids.
    """
    made = [fact.id] + ([] if closed_by is None else ["f" + closed_by[1:]])
    by_seq = await db.fetch(sql.audit_by_fact_in, (sql.ids(made),))
    markers = [] if closed_by is None else [closed_by]
    markers += [str(row[0]) for row in await db.fetch(sql.reinforcing_deltas, (fact.id,))]
    by_id = await db.fetch(sql.audit_markers_in, (sql.ids(markers),))
    unique = {int(row[0]): row for row in [*by_seq, *by_id]}
    return [audit_from_row(unique[seq]) for seq in sorted(unique)]


async def explain(db: Conn, sql: FactStatements, fact_id: str) -> Explanation:
    """Rule, pack hash, reason, bindings, source episodes, supersession chain, audit and
    status history."""
    rows = await db.fetch(sql.fact_by_id, (fact_id,))
    if not rows:
        raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
    fact, closed_by = fact_from_row(rows[0]), rows[0][FACT_COLUMN_COUNT]
    provenance = await lineage_of(db, sql, fact_id)
    sources = await _source_episodes(
        db, sql, provenance.source_episode_ids, key_of(fact.user, fact.agent)
    )
    return Explanation(
        fact=fact,
        provenance=provenance,
        source_episodes=sources,
        predecessors=tuple(await _predecessors(db, sql, provenance.predecessor_ids)),
        successors=tuple(await _successors(db, sql, fact)),
        closed_by=closed_by,
        audit=tuple(await _audit_touching(db, sql, fact, closed_by)),
        status_history=tuple(await status_history(db, sql, fact_id)),
    )
