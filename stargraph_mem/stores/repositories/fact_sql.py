"""The fact store's SQL, each statement written once (qmark style) for every backend.

:func:`fact_statements` renders them for one :class:`~stargraph_mem.stores.dialect.Dialect`
(once per dialect, cached); what the backends spell differently (id lists, upserts that
ignore, bulk updates, reinforcement statistics, the search index) comes from the dialect.
"""

from __future__ import annotations

from functools import cache
from typing import Final

from stargraph_mem.model.deltas import DELTA_KINDS, kind_creates
from stargraph_mem.stores.dialect import Dialect
from stargraph_mem.stores.repositories.fact_filter import FACT_COLUMNS
from stargraph_mem.stores.repositories.fact_rows import (
    AUDIT_INSERT_COLUMNS,
    FACT_INSERT_COLUMNS,
    LINEAGE_INSERT_COLUMNS,
)
from stargraph_mem.stores.repositories.fact_statements import FactStatements
from stargraph_mem.stores.repositories.fact_status import EVENT_COLUMNS
from stargraph_mem.stores.sql_conn import Insert

__all__ = [
    "ACCESS",
    "AUDIT_ROWS",
    "FACT_COLUMNS",
    "KNOWN_IDS",
    "REJECTIONS",
    "WATERMARK",
    "current",
    "fact_statements",
    "touch",
]

LINEAGE_COLUMNS: Final = (
    "rule_id, pack_hash, delta_id, source_episode_ids, promotion_ts_us, confidence, reason, "
    "bindings, predecessor_ids"
)
AUDIT_COLUMNS: Final = (
    'seq, delta_id, kind, rule_id, pack_hash, "user", agent, applied_at_us, delta'
)
_PREFIXED: Final = ", ".join(f"f.{c.strip()}" for c in FACT_COLUMNS.split(","))
_LINEAGE_PREFIXED: Final = ", ".join(f"l.{c.strip()}" for c in LINEAGE_COLUMNS.split(","))
_MARKERS: Final = "kind IN ({})".format(
    ", ".join(f"'{kind}'" for kind in DELTA_KINDS if not kind_creates(kind))
)
"""Audit rows that mark a delta creating no fact (the stores' partial unique index on
``delta_id`` has the same condition: a new kind of that sort needs a migration of it)."""
_STATS: Final = "coalesce(a.count, 0), coalesce(a.last_access_us, 0), p.pinned_at_us"
_ACCESS_AND_PIN: Final = (
    "LEFT JOIN fact_access a ON a.fact_id = f.id LEFT JOIN fact_pins p ON p.fact_id = f.id"
)

WATERMARK: Final = (
    "SELECT last_seq FROM watermarks WHERE pack = ? AND rule_id = ? AND partition_key = ?"
)
ACCESS: Final = (
    "SELECT f.id, a.count, a.last_access_us FROM facts f "
    "LEFT JOIN fact_access a ON a.fact_id = f.id WHERE f.id = ?"
)
AUDIT_ROWS: Final = f"SELECT {AUDIT_COLUMNS} FROM audit {{where}} ORDER BY seq"
"""Applied deltas in order; ``{where}``: empty, or ``WHERE partition_key = ?``."""
REJECTIONS: Final = (
    'SELECT id, pack, rule_id, "user", agent, reason, at_us FROM rejections '
    "{where} ORDER BY at_us, id, pack, rule_id, partition_key"
)
KNOWN_IDS: Final = "SELECT id FROM facts WHERE id {in_ids}"


def _insert(table: str, columns: tuple[str, ...]) -> Insert:
    """Rows into ``table``, every column given (loaded the backend's fastest way)."""
    names = ", ".join(f'"{c}"' if c == "user" else c for c in columns)
    marks = ", ".join("?" * len(columns))
    return Insert(table, columns, f"INSERT INTO {table} ({names}) VALUES ({marks})")


def _engine(d: Dialect) -> tuple[str, str]:
    """The engine fact columns (see ``fact_rows.engine_fact``) and the joins they read."""
    reinforced, count, observed, stats = d.reinforcement_stats()
    columns = f"""
    SELECT f.id, f.subject, f.predicate, f.object, f.confidence, f.valid_from_us,
        {reinforced}, f.rule_id, l.source_episode_ids, {observed}, {count}, {_STATS},
        f.payload, f.status, f.layer, f.memory_type, f.trust"""
    return columns, f"FROM facts f JOIN lineage l ON l.rowid = f.rowid {stats} {_ACCESS_AND_PIN}"


def current(d: Dialect) -> str:
    """The partition's current facts for the runtime (``(partition_key,)``), rendered."""
    columns, joins = _engine(d)
    return d.sql(
        f"""{columns} {joins}
    WHERE f.partition_key = ? AND f.valid_until_us IS NULL
    ORDER BY f.valid_from_us, f.id"""
    )


def touch(d: Dialect) -> str:
    """Count one read of a fact at a time (``(fact_id, at_us)``; the last access never
    moves backwards), rendered."""
    return d.sql(
        "INSERT INTO fact_access (fact_id, count, last_access_us) VALUES (?, 1, ?) "
        "ON CONFLICT (fact_id) DO UPDATE SET count = fact_access.count + 1, "
        f"last_access_us = {d.greatest}(fact_access.last_access_us, excluded.last_access_us)"
    )


@cache
def fact_statements(d: Dialect) -> FactStatements:
    """The statements of the shared apply and read code, rendered for ``d``."""
    r = d.sql
    in_ids = d.in_ids()
    each, item = d.each_id()
    reinforced, count, observed, stats = d.reinforcement_stats()
    engine, joins = _engine(d)

    def ins(table: str, columns: tuple[str, ...]) -> Insert:
        insert = _insert(table, columns)
        return Insert(insert.table, insert.columns, r(insert.sql))

    last_seq_of = "(SELECT max(a.seq) FROM audit a WHERE a.partition_key = {})"
    fact_states = (
        f'SELECT f.id, f."user", f.agent, f.valid_from_us, f.valid_until_us, f.status, '
        f"f.superseded_by, {reinforced}, {count}, {observed}, {_STATS}, p.reason "
        f"FROM facts f {stats} {_ACCESS_AND_PIN} WHERE f.id {in_ids}"
    )

    # one read of what a chunk's apply needs first (see FactStatements.chunk_reads): each
    # branch tagged, padded with NULLs to the 14 columns of a fact state
    def nulls(n: int) -> str:
        return ", ".join(["NULL"] * n)

    # (the fact states first: their columns are typed, and PostgreSQL types the NULLs of
    # the other branches from the branches before them)
    chunk_reads = (
        f"SELECT 2, {fact_states.removeprefix('SELECT ')}",
        f"SELECT 0, id, {nulls(13)} FROM facts WHERE id {in_ids}",
        f"SELECT 1, delta_id, {nulls(13)} FROM audit WHERE {_MARKERS} AND delta_id {in_ids}",
        f"SELECT 4, NULL, NULL, NULL, last_ids.*, {nulls(8)} FROM ({d.last_ids}) AS last_ids",
    )
    episode_times = f"SELECT 3, id, NULL, NULL, ts_us, {nulls(10)} FROM episodes WHERE id {in_ids}"
    aggregate_columns = "ref, value, n, last_us, last_id, data"
    return FactStatements(
        dialect=d,
        mark=d.mark,
        ids=d.ids,
        no_limit=d.no_limit,
        fact_columns=FACT_COLUMNS,
        lineage_columns=LINEAGE_COLUMNS,
        audit_columns=AUDIT_COLUMNS,
        last_ids=r(d.last_ids),
        stored_facts_in=r(f"SELECT id FROM facts WHERE id {in_ids}"),
        chunk_reads=r(" UNION ALL ".join((*chunk_reads, episode_times))),
        chunk_reads_no_episodes=r(" UNION ALL ".join(chunk_reads)),
        fact_states_in=r(fact_states),
        episode_columns=r(d.episode_columns),
        episode_partitions_in=r(f"SELECT id, partition_key FROM episodes WHERE id {in_ids}"),
        episode_owners_in=r(f'SELECT id, "user", agent FROM episodes WHERE id {in_ids}'),
        insert_fact=ins("facts", FACT_INSERT_COLUMNS),
        insert_lineage=ins("lineage", LINEAGE_INSERT_COLUMNS),
        index_fact=d.index_fact(),
        catch_up_text=d.catch_up_text,
        move_text_mark=d.move_text_mark,
        close=d.update_many(
            "facts",
            (
                ("valid_until_us", "bigint"),
                ("superseded_by", "text"),
                ("closed_by", "text"),
                ("status", "text"),
            ),
            ("id", "text"),
            "valid_until_us IS NULL",
        ),
        insert_audit=ins("audit", AUDIT_INSERT_COLUMNS),
        insert_reinforcement=ins("reinforcements", ("fact_id", "ts_us", "delta_id", "observed_us")),
        upsert_watermark=r(
            "INSERT INTO watermarks (pack, rule_id, partition_key, last_seq, updated_at_us) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (pack, rule_id, partition_key) "
            "DO UPDATE SET last_seq = excluded.last_seq, updated_at_us = excluded.updated_at_us"
        ),
        upsert_watermarks=d.insert_many(
            "watermarks",
            (
                ("pack", "text"),
                ("rule_id", "text"),
                ("partition_key", "text"),
                ("last_seq", "bigint"),
                ("updated_at_us", "bigint"),
            ),
            "ON CONFLICT (pack, rule_id, partition_key) DO UPDATE SET "
            "last_seq = excluded.last_seq, updated_at_us = excluded.updated_at_us",
        ),
        insert_rejection=r(
            d.insert_ignoring(
                "rejections",
                'id, pack, rule_id, partition_key, "user", agent, reason, at_us',
                8,
            )
        ),
        marks=r(
            "SELECT rule_id, last_seq FROM watermarks WHERE pack = ? AND partition_key = ? "
            "ORDER BY rule_id"
        ),
        version=r("SELECT max(seq) FROM audit WHERE partition_key = ?"),
        marks_of=r(
            "SELECT partition_key, rule_id, last_seq FROM watermarks WHERE pack = ? "
            f"AND partition_key {in_ids} ORDER BY partition_key, rule_id"
        ),
        versions_of=r(f"SELECT {item}, {last_seq_of.format(item)} FROM {each}"),
        claims_of=r(
            "SELECT partition_key, holder, expires_us FROM partition_claims "
            f"WHERE partition_key {in_ids}"
        ),
        fresh_of=r(
            "SELECT 0, pack, partition_key, rule_id, last_seq FROM watermarks "
            f"WHERE pack {in_ids} AND partition_key {in_ids} "
            f"UNION ALL SELECT 1, NULL, {item}, NULL, {last_seq_of.format(item)} FROM {each} "
            "UNION ALL SELECT 2, NULL, partition_key, holder, expires_us FROM partition_claims "
            f"WHERE partition_key {in_ids}"
        ),
        fresh_one=r(
            "SELECT 0, pack, partition_key, rule_id, last_seq FROM watermarks "
            "WHERE pack = ? AND partition_key = ? "
            "UNION ALL SELECT 1, NULL, CAST(? AS TEXT), NULL, "
            "(SELECT max(seq) FROM audit WHERE partition_key = ?) "
            "UNION ALL SELECT 2, NULL, partition_key, holder, expires_us FROM partition_claims "
            "WHERE partition_key = ?"
        ),
        current_of=r(
            f"""{engine}, f.partition_key {joins}
    WHERE f.partition_key {in_ids} AND f.valid_until_us IS NULL
    ORDER BY f.partition_key, f.valid_from_us, f.id"""
        ),
        claim_of=r("SELECT holder, expires_us FROM partition_claims WHERE partition_key = ?"),
        drop_claim=r("DELETE FROM partition_claims WHERE partition_key = ? AND holder = ?"),
        renew_claim=r(
            "UPDATE partition_claims SET expires_us = ? WHERE partition_key = ? AND holder = ?"
        ),
        put_claim=r(
            "INSERT INTO partition_claims (partition_key, holder, expires_us) VALUES (?, ?, ?) "
            "ON CONFLICT (partition_key) DO UPDATE SET "
            "holder = excluded.holder, expires_us = excluded.expires_us"
        ),
        put_claims=d.insert_many(
            "partition_claims",
            (("partition_key", "text"), ("holder", "text"), ("expires_us", "bigint")),
            "ON CONFLICT (partition_key) DO UPDATE SET "
            "holder = excluded.holder, expires_us = excluded.expires_us",
        ),
        predecessors_in=r(
            f"SELECT {_PREFIXED}, l.predecessor_ids FROM facts f "
            f"LEFT JOIN lineage l ON l.rowid = f.rowid WHERE f.id {in_ids}"
        ),
        fact_by_id=r(f"SELECT {FACT_COLUMNS}, closed_by FROM facts WHERE id = ?"),
        lineage_of=r(
            f"SELECT {_LINEAGE_PREFIXED} FROM facts f JOIN lineage l ON l.rowid = f.rowid "
            "WHERE f.id = ? AND l.fact_id = f.id"
        ),
        source_episodes_in=r(
            f"SELECT id, session, ts_us, content FROM episodes WHERE id {in_ids} "
            "AND partition_key = ?"
        ),
        audit_by_fact_in=r(
            f"SELECT {AUDIT_COLUMNS} FROM audit WHERE seq IN (SELECT l.audit_seq FROM facts f "
            f"JOIN lineage l ON l.rowid = f.rowid WHERE f.id {in_ids})"
        ),
        reinforcing_deltas=r("SELECT delta_id FROM reinforcements WHERE fact_id = ?"),
        audit_markers_in=r(
            f"SELECT {AUDIT_COLUMNS} FROM audit WHERE {_MARKERS} AND delta_id {in_ids}"
        ),
        aggregates_in=r(
            f"SELECT {aggregate_columns} FROM aggregates WHERE pack = ? AND ref {in_ids}"
        ),
        aggregates_window=r(
            f"SELECT {aggregate_columns} FROM aggregates WHERE pack = ? AND ref {in_ids} "
            "UNION ALL SELECT a.ref, a.value, a.n, a.last_us, a.last_id, a.data FROM (SELECT "
            f"ref, max(last_us) AS top FROM aggregates WHERE pack = ? AND ref {in_ids} "
            f"GROUP BY ref) AS m {d.ordered_join} aggregates AS a ON a.pack = ? "
            f"AND a.ref = m.ref WHERE a.last_us >= ? OR a.last_us < {d.greatest}(?, m.top) - ? "
            f"OR a.value {in_ids}"
        ),
        upsert_aggregate=r(
            "INSERT INTO aggregates (pack, ref, value, partition_key, n, last_us, last_id, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (pack, ref, value) DO UPDATE SET "
            "n = excluded.n, last_us = excluded.last_us, last_id = excluded.last_id, "
            "data = excluded.data"
        ),
        delete_aggregate=r("DELETE FROM aggregates WHERE pack = ? AND ref = ? AND value = ?"),
        insert_access=ins("fact_access", ("fact_id", "count", "last_access_us")),
        insert_pin=ins("fact_pins", ("fact_id", "pinned_at_us", "reason")),
        delete_pin=r("DELETE FROM fact_pins WHERE fact_id = ?"),
        pin_of=r("SELECT pinned_at_us, reason FROM fact_pins WHERE fact_id = ?"),
        insert_event=ins("fact_events", EVENT_COLUMNS),
        last_event_seq=r("SELECT coalesce(max(seq), 0) FROM fact_events"),
        events_of=r(
            "SELECT seq, event, at_us, rule_id, delta_id, reason, related_id FROM fact_events "
            "WHERE fact_id = ? ORDER BY seq"
        ),
        set_status=d.update_many(
            "facts", (("status", "text"),), ("id", "text"), "valid_until_us IS NULL"
        ),
        mark_restored=d.update_many("facts", (("superseded_by", "text"),), ("id", "text")),
        archived_of=r(
            f"""{engine}, f.partition_key {joins}
    WHERE f.partition_key {in_ids} AND f.status = 'archived' AND f.superseded_by IS NULL
    ORDER BY f.partition_key, f.valid_from_us, f.id"""
        ),
        index_text=d.index_text,
        made_from=r(
            "SELECT f.id FROM facts f JOIN lineage l ON l.rowid = f.rowid "
            "WHERE f.partition_key = ? AND f.valid_until_us IS NULL "
            "AND substr(l.source_episode_ids, 1, ?) = ?"
        ),
        provenance_in=r(
            f"SELECT f.id, {_LINEAGE_PREFIXED}, p.pinned_at_us FROM facts f "
            "LEFT JOIN lineage l ON l.rowid = f.rowid "
            f"LEFT JOIN fact_pins p ON p.fact_id = f.id WHERE f.id {in_ids}"
        ),
    )
