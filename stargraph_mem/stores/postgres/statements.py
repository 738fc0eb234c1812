"""The PostgreSQL statements of the shared store code (fact apply, explain, runs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from stargraph_mem.stores.dialect import POSTGRES
from stargraph_mem.stores.fact_rows import (
    AUDIT_INSERT_COLUMNS,
    FACT_INSERT_COLUMNS,
    LINEAGE_INSERT_COLUMNS,
)
from stargraph_mem.stores.fact_statements import FactStatements
from stargraph_mem.stores.fact_status import EVENT_COLUMNS
from stargraph_mem.stores.plan_migration import PlanDialect
from stargraph_mem.stores.repositories.schedule import run_statements
from stargraph_mem.stores.search_common import fold_indexed
from stargraph_mem.stores.sql_conn import Insert, Many

__all__ = [
    "CURRENT",
    "FACTS",
    "PLANS",
    "RUNS",
    "TOUCH",
]


def _as_list(values: Sequence[Any]) -> list[Any]:
    return list(values)


def _marks(count: int) -> str:
    return ", ".join(["%s"] * count)


def _insert(table: str, columns: tuple[str, ...]) -> Insert:
    """Rows into ``table`` (loaded with ``COPY`` by :class:`PgConn`)."""
    names = ", ".join(f'"{column}"' for column in columns)
    sql = f"INSERT INTO {table} ({names}) VALUES ({_marks(len(columns))})"
    return Insert(table, columns, sql)


FACT_COLUMNS: Final = (
    'id, "user", agent, subject, predicate, object, payload, confidence, valid_from_us, '
    "valid_until_us, superseded_by, recorded_at_us, rule_id, delta_id, status"
)
_PREFIXED: Final = ", ".join(f"f.{c.strip()}" for c in FACT_COLUMNS.split(","))
_LINEAGE: Final = (
    "rule_id, pack_hash, delta_id, source_episode_ids, promotion_ts_us, confidence, reason, "
    "bindings, predecessor_ids"
)
_LINEAGE_PREFIXED: Final = ", ".join(f"l.{c.strip()}" for c in _LINEAGE.split(","))
_AUDIT: Final = 'seq, delta_id, kind, rule_id, pack_hash, "user", agent, applied_at_us, delta'
_MARKERS: Final = "kind IN ('delete', 'noop')"

_REINFORCED: Final = "greatest(coalesce(f.reinforced_us, f.valid_from_us), r.ts)"
"""A fact's reinforcement time: its base (promotion, or inherited), or a later noop."""
_OBSERVED: Final = "greatest(coalesce(f.observed_us, f.valid_from_us), r.observed)"
_COUNT: Final = "f.reinforcement_base + r.n"
_STATS: Final = "coalesce(a.count, 0), coalesce(a.last_access_us, 0), p.pinned_at_us"
_WITH_STATS: Final = (
    "CROSS JOIN LATERAL (SELECT max(ts_us) AS ts, count(*) AS n, max(observed_us) AS observed "
    "FROM reinforcements WHERE fact_id = f.id) AS r "
    "LEFT JOIN fact_access a ON a.fact_id = f.id LEFT JOIN fact_pins p ON p.fact_id = f.id"
)
"""A fact's reinforcements (one aggregate), access statistics and pin."""
_CURRENT_COLUMNS: Final = f"""
    SELECT f.id, f.subject, f.predicate, f.object, f.confidence, f.valid_from_us,
        {_REINFORCED}, f.rule_id, l.source_episode_ids, {_OBSERVED}, {_COUNT}, {_STATS},
        f.payload"""
"""The engine fact columns (see ``fact_rows.engine_fact``)."""
_CURRENT_OF: Final = f"""{_CURRENT_COLUMNS}, f.partition_key
    FROM facts f JOIN lineage l ON l.rowid = f.rowid {_WITH_STATS}
    WHERE f.partition_key = ANY(%s) AND f.valid_until_us IS NULL
    ORDER BY f.partition_key, f.valid_from_us, f.id"""
_ARCHIVED_OF: Final = f"""{_CURRENT_COLUMNS}, f.partition_key
    FROM facts f JOIN lineage l ON l.rowid = f.rowid {_WITH_STATS}
    WHERE f.partition_key = ANY(%s) AND f.status = 'archived' AND f.superseded_by IS NULL
    ORDER BY f.partition_key, f.valid_from_us, f.id"""
FACTS: Final = FactStatements(
    mark="%s",
    ids=_as_list,
    no_limit=None,
    fact_columns=FACT_COLUMNS,
    lineage_columns=_LINEAGE,
    audit_columns=_AUDIT,
    last_ids=(
        "SELECT (SELECT coalesce(max(rowid), 0) FROM facts), "
        "(SELECT coalesce(max(seq), 0) FROM audit), NULL"
    ),
    stored_facts_in="SELECT id FROM facts WHERE id = ANY(%s)",
    stored_markers_in=f"SELECT delta_id FROM audit WHERE {_MARKERS} AND delta_id = ANY(%s)",
    fact_states_in=(
        'SELECT f.id, f."user", f.agent, f.valid_from_us, f.valid_until_us, f.status, '
        f"f.superseded_by, {_REINFORCED}, {_COUNT}, {_OBSERVED}, {_STATS}, p.reason "
        f"FROM facts f {_WITH_STATS} WHERE f.id = ANY(%s)"
    ),
    # the episodes table is always in the schema (one migration creates every store)
    episode_columns=(
        "SELECT name FROM (VALUES ('id'), ('user'), ('session'), ('agent'), ('ts_us'), "
        "('content'), ('partition_key')) AS c(name)"
    ),
    episode_partitions_in="SELECT id, partition_key FROM episodes WHERE id = ANY(%s)",
    episode_owners_in='SELECT id, "user", agent FROM episodes WHERE id = ANY(%s)',
    episode_times_in="SELECT id, ts_us FROM episodes WHERE id = ANY(%s)",
    insert_fact=_insert("facts", FACT_INSERT_COLUMNS),
    insert_lineage=_insert("lineage", LINEAGE_INSERT_COLUMNS),
    index_fact=_insert("fact_text", ("rowid", "text")),
    catch_up_text="",  # each fact is indexed by the transaction that makes it
    move_text_mark="",
    close=Many(
        "UPDATE facts SET valid_until_us = %s, superseded_by = %s, closed_by = %s, "
        "status = %s WHERE id = %s AND valid_until_us IS NULL",
        "UPDATE facts AS f SET valid_until_us = c.until_us, superseded_by = c.successor, "
        "closed_by = c.closer, status = c.status "
        "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[]) "
        "AS c(until_us, successor, closer, status, id) "
        "WHERE f.id = c.id AND f.valid_until_us IS NULL",
    ),
    insert_audit=_insert("audit", AUDIT_INSERT_COLUMNS),
    insert_reinforcement=_insert("reinforcements", ("fact_id", "ts_us", "delta_id", "observed_us")),
    upsert_watermark=(
        "INSERT INTO watermarks (pack, rule_id, partition_key, last_seq, updated_at_us) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (pack, rule_id, partition_key) "
        "DO UPDATE SET last_seq = excluded.last_seq, updated_at_us = excluded.updated_at_us"
    ),
    insert_rejection=(
        'INSERT INTO rejections (id, pack, rule_id, partition_key, "user", agent, reason, '
        f"at_us) VALUES ({_marks(8)}) ON CONFLICT DO NOTHING"
    ),
    marks=(
        "SELECT rule_id, last_seq FROM watermarks WHERE pack = %s AND partition_key = %s "
        "ORDER BY rule_id"
    ),
    version="SELECT max(seq) FROM audit WHERE partition_key = %s",
    marks_of=(
        "SELECT partition_key, rule_id, last_seq FROM watermarks WHERE pack = %s "
        "AND partition_key = ANY(%s) ORDER BY partition_key, rule_id"
    ),
    versions_of=(
        "SELECT k, (SELECT max(a.seq) FROM audit a WHERE a.partition_key = k) "
        "FROM unnest(%s::text[]) AS k"
    ),
    claims_of=(
        "SELECT partition_key, holder, expires_us FROM partition_claims "
        "WHERE partition_key = ANY(%s)"
    ),
    fresh_of=(
        "SELECT 0, pack, partition_key, rule_id, last_seq FROM watermarks "
        "WHERE pack = ANY(%s) AND partition_key = ANY(%s) "
        "UNION ALL SELECT 1, NULL, k, NULL, "
        "(SELECT max(a.seq) FROM audit a WHERE a.partition_key = k) FROM unnest(%s::text[]) AS k "
        "UNION ALL SELECT 2, NULL, partition_key, holder, expires_us FROM partition_claims "
        "WHERE partition_key = ANY(%s)"
    ),
    fresh_one=(
        "SELECT 0, pack, partition_key, rule_id, last_seq FROM watermarks "
        "WHERE pack = %s AND partition_key = %s "
        "UNION ALL SELECT 1, NULL, %s::text, NULL, "
        "(SELECT max(seq) FROM audit WHERE partition_key = %s) "
        "UNION ALL SELECT 2, NULL, partition_key, holder, expires_us FROM partition_claims "
        "WHERE partition_key = %s"
    ),
    current_of=_CURRENT_OF,
    claim_of="SELECT holder, expires_us FROM partition_claims WHERE partition_key = %s",
    drop_claim="DELETE FROM partition_claims WHERE partition_key = %s AND holder = %s",
    renew_claim=(
        "UPDATE partition_claims SET expires_us = %s WHERE partition_key = %s AND holder = %s"
    ),
    put_claim=(
        "INSERT INTO partition_claims (partition_key, holder, expires_us) VALUES (%s, %s, %s) "
        "ON CONFLICT (partition_key) DO UPDATE SET "
        "holder = excluded.holder, expires_us = excluded.expires_us"
    ),
    predecessors_in=(
        f"SELECT {_PREFIXED}, l.predecessor_ids FROM facts f "
        "LEFT JOIN lineage l ON l.rowid = f.rowid WHERE f.id = ANY(%s)"
    ),
    fact_by_id=f"SELECT {FACT_COLUMNS}, closed_by FROM facts WHERE id = %s",
    lineage_of=(
        f"SELECT {_LINEAGE_PREFIXED} FROM lineage l JOIN facts f ON l.rowid = f.rowid "
        "WHERE f.id = %s AND l.fact_id = f.id"
    ),
    source_episodes_in=(
        "SELECT id, session, ts_us, content FROM episodes WHERE id = ANY(%s) AND partition_key = %s"
    ),
    audit_by_fact_in=(
        f"SELECT {_AUDIT} FROM audit WHERE seq IN (SELECT l.audit_seq FROM facts f "
        "JOIN lineage l ON l.rowid = f.rowid WHERE f.id = ANY(%s))"
    ),
    reinforcing_deltas="SELECT delta_id FROM reinforcements WHERE fact_id = %s",
    audit_markers_in=f"SELECT {_AUDIT} FROM audit WHERE {_MARKERS} AND delta_id = ANY(%s)",
    index_text=fold_indexed,
    made_from=(
        "SELECT f.id FROM facts f JOIN lineage l ON l.rowid = f.rowid "
        "WHERE f.partition_key = %s AND f.valid_until_us IS NULL "
        "AND substr(l.source_episode_ids, 1, %s) = %s"
    ),
    provenance_in=(
        f"SELECT f.id, {_LINEAGE_PREFIXED}, p.pinned_at_us FROM facts f "
        "LEFT JOIN lineage l ON l.rowid = f.rowid "
        "LEFT JOIN fact_pins p ON p.fact_id = f.id WHERE f.id = ANY(%s)"
    ),
    aggregates_in=(
        "SELECT ref, value, n, last_us, last_id, data FROM aggregates "
        "WHERE pack = %s AND ref = ANY(%s)"
    ),
    aggregates_window=(
        "SELECT ref, value, n, last_us, last_id, data FROM aggregates "
        "WHERE pack = %s AND ref = ANY(%s) UNION ALL "
        "SELECT a.ref, a.value, a.n, a.last_us, a.last_id, a.data FROM (SELECT ref, "
        "max(last_us) AS top FROM aggregates WHERE pack = %s AND ref = ANY(%s) GROUP BY ref) "
        "AS m JOIN aggregates AS a ON a.pack = %s AND a.ref = m.ref WHERE a.last_us >= %s "
        "OR a.last_us < GREATEST(%s, m.top) - %s OR a.value = ANY(%s)"
    ),
    upsert_aggregate=(
        "INSERT INTO aggregates (pack, ref, value, partition_key, n, last_us, last_id, data) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (pack, ref, value) DO UPDATE SET "
        "n = excluded.n, last_us = excluded.last_us, last_id = excluded.last_id, "
        "data = excluded.data"
    ),
    delete_aggregate="DELETE FROM aggregates WHERE pack = %s AND ref = %s AND value = %s",
    insert_access=_insert("fact_access", ("fact_id", "count", "last_access_us")),
    insert_pin=_insert("fact_pins", ("fact_id", "pinned_at_us", "reason")),
    delete_pin="DELETE FROM fact_pins WHERE fact_id = %s",
    pin_of="SELECT pinned_at_us, reason FROM fact_pins WHERE fact_id = %s",
    insert_event=_insert("fact_events", EVENT_COLUMNS),
    last_event_seq="SELECT coalesce(max(seq), 0) FROM fact_events",
    events_of=(
        "SELECT seq, event, at_us, rule_id, delta_id, reason, related_id FROM fact_events "
        "WHERE fact_id = %s ORDER BY seq"
    ),
    mark_restored=Many(
        "UPDATE facts SET superseded_by = %s WHERE id = %s",
        "UPDATE facts AS f SET superseded_by = c.successor "
        "FROM unnest(%s::text[], %s::text[]) AS c(successor, id) WHERE f.id = c.id",
    ),
    archived_of=_ARCHIVED_OF,
)
"""The fact store's statements (search text folded in Python: 'simple' keeps accents)."""

CURRENT: Final = f"""{_CURRENT_COLUMNS}
    FROM facts f JOIN lineage l ON l.rowid = f.rowid {_WITH_STATS}
    WHERE f.partition_key = %s AND f.valid_until_us IS NULL
    ORDER BY f.valid_from_us, f.id"""
"""The partition's current facts for the runtime (as SQLite's, reinforcements included)."""
TOUCH: Final = (
    "INSERT INTO fact_access (fact_id, count, last_access_us) VALUES (%s, 1, %s) "
    "ON CONFLICT (fact_id) DO UPDATE SET count = fact_access.count + 1, "
    "last_access_us = greatest(fact_access.last_access_us, excluded.last_access_us)"
)

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
