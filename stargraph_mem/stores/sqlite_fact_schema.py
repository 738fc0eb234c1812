"""The SQLite fact store's schema, its migrations and its statements for the shared code.

Versions 1 to 4 are migrated on open (:data:`MIGRATIONS`, in the bootstrap transaction).
"""

from __future__ import annotations

from typing import Final

import aiosqlite

from stargraph_mem.stores.fact_rows import (
    AUDIT_INSERT_COLUMNS,
    FACT_INSERT_COLUMNS,
    LINEAGE_INSERT_COLUMNS,
    corrupt,
    json_text,
)
from stargraph_mem.stores.fact_statements import FactStatements
from stargraph_mem.stores.fact_status import (
    EVENT_COLUMNS,
    STATUS_BACKFILL,
    STATUS_TABLE_NAMES,
    STATUS_TABLES,
)
from stargraph_mem.stores.pass_time import SQLITE_TABLES as PASS_TIME_TABLES
from stargraph_mem.stores.sql_conn import Insert, Many
from stargraph_mem.stores.sqlite_base import fetch, scalar
from stargraph_mem.stores.sqlite_identity import FACT_SCHEMA_VERSION
from stargraph_mem.stores.sqlite_migration import Ledger
from stargraph_mem.stores.sqlite_search import (
    CATCH_UP_TEXT,
    INDEX_FACT,
    MOVE_TEXT_MARK,
    SEARCH_BACKFILL,
    SEARCH_SCHEMA,
    SEARCH_TABLES,
    TEXT_MARK,
    TEXT_MARK_INIT,
)

__all__ = [
    "AUDIT_INSERT_COLUMNS",
    "CACHE_KIB",
    "FACT_INSERT_COLUMNS",
    "LEDGER",
    "LINEAGE_INSERT_COLUMNS",
    "MIGRATIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SQLITE",
    "TABLES",
    "stored_version",
]

SCHEMA_VERSION: Final = FACT_SCHEMA_VERSION
"""The fact store schema this version reads (defined in
:mod:`~stargraph_mem.stores.sqlite_identity`: a newer one is refused when the file opens).
2: lineage rows share their fact's rowid and name the creating audit row; audit delta
ids are indexed for delete and noop deltas only. 3: the full-text index of facts and the
access table (:mod:`~stargraph_mem.stores.sqlite_search`). 4: the durable aggregates of
``over: history`` patterns (:mod:`~stargraph_mem.stores.aggregates`), each fact's newest
observation time, deferred episodes and pass times (:mod:`~stargraph_mem.stores.pass_time`).
5: each fact's closing status, reinforcement base, pins and status events
(:mod:`~stargraph_mem.stores.fact_status`). Older versions are migrated on open."""
LEDGER: Final = Ledger(
    "fact_store_migrations",
    "INSERT INTO fact_store_migrations (name, applied_at_us, plan) VALUES (?, ?, ?)",
    "CREATE TABLE IF NOT EXISTS fact_store_migrations "
    "(name TEXT PRIMARY KEY, applied_at_us INTEGER NOT NULL, plan BLOB NOT NULL)",
)

CACHE_KIB: Final = -65536
"""Page cache of this store's connection (negative: KiB): big batches touch large indexes."""


AGGREGATES_TABLE: Final = """CREATE TABLE IF NOT EXISTS aggregates (
    pack TEXT NOT NULL,
    ref TEXT NOT NULL,
    value TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    n INTEGER NOT NULL,
    last_us INTEGER NOT NULL,
    last_id TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (pack, ref, value)
) WITHOUT ROWID"""
"""Durable aggregates (derived data: a partition without them is rebuilt from episodes)."""

_LINEAGE_TABLE: Final = """CREATE TABLE IF NOT EXISTS {name} (
        fact_id TEXT NOT NULL,
        delta_id TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        pack_hash TEXT NOT NULL,
        source_episode_ids TEXT NOT NULL,
        promotion_ts_us INTEGER NOT NULL,
        confidence REAL NOT NULL,
        reason TEXT NOT NULL,
        bindings TEXT NOT NULL,
        predecessor_ids TEXT NOT NULL,
        audit_seq INTEGER NOT NULL
    )"""
_AUDIT_TABLE: Final = """CREATE TABLE IF NOT EXISTS {name} (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        delta_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        pack_hash TEXT NOT NULL,
        user TEXT NOT NULL,
        agent TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        applied_at_us INTEGER NOT NULL,
        delta TEXT NOT NULL
    )"""
_MARKERS: Final = "kind IN ('delete', 'noop')"
"""Deltas that create no fact: their ids are indexed in the audit table."""
_AUDIT_INDEXES: Final = (
    "CREATE INDEX IF NOT EXISTS audit_partition ON audit (partition_key, seq)",
    f"CREATE UNIQUE INDEX IF NOT EXISTS audit_markers ON audit (delta_id) WHERE {_MARKERS}",
)
SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS fact_store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS facts (
        id TEXT PRIMARY KEY,
        user TEXT NOT NULL,
        agent TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        subject TEXT NOT NULL,
        predicate TEXT NOT NULL,
        object TEXT NOT NULL,
        payload BLOB NOT NULL,
        confidence REAL NOT NULL,
        valid_from_us INTEGER NOT NULL,
        valid_until_us INTEGER NULL,
        superseded_by TEXT NULL,
        closed_by TEXT NULL,
        recorded_at_us INTEGER NOT NULL,
        rule_id TEXT NOT NULL,
        delta_id TEXT NOT NULL,
        observed_us INTEGER NULL,
        reinforced_us INTEGER NULL,
        reinforcement_base INTEGER NOT NULL DEFAULT 0,
        status TEXT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS facts_psp ON facts (partition_key, subject, predicate)",
    """CREATE INDEX IF NOT EXISTS facts_current ON facts (partition_key, subject, predicate)
        WHERE valid_until_us IS NULL""",
    # Ids are content hashes, so every index keyed by one takes writes all over its pages:
    # at a million facts, such indexes dominate a batch's page writes and checkpoints.
    # Hence one such index per fact (facts.id): a lineage row has its fact's rowid, and
    # names the audit row that created the fact (audit_seq); add and update deltas are
    # found through the fact they create ("f" + delta id[1:]), so only delete and noop
    # delta ids need an index of their own.
    _LINEAGE_TABLE.format(name="lineage"),
    _AUDIT_TABLE.format(name="audit"),
    *_AUDIT_INDEXES,
    """CREATE TABLE IF NOT EXISTS reinforcements (
        fact_id TEXT NOT NULL,
        ts_us INTEGER NOT NULL,
        delta_id TEXT NOT NULL,
        observed_us INTEGER NULL,
        PRIMARY KEY (fact_id, ts_us, delta_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS watermarks (
        pack TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        last_seq INTEGER NOT NULL,
        updated_at_us INTEGER NOT NULL,
        PRIMARY KEY (pack, rule_id, partition_key)
    )""",
    # a pass reads every rule's watermark of one (pack, partition) at once
    "CREATE INDEX IF NOT EXISTS watermarks_partition ON watermarks (pack, partition_key, rule_id)",
    """CREATE TABLE IF NOT EXISTS rejections (
        id TEXT NOT NULL,
        pack TEXT NOT NULL,
        rule_id TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        user TEXT NOT NULL,
        agent TEXT NOT NULL,
        reason TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        PRIMARY KEY (id, pack, rule_id, partition_key)
    )""",
    "CREATE INDEX IF NOT EXISTS rejections_partition ON rejections (partition_key, at_us)",
    # who consolidates a partition now (any pack): see SQLiteFactStore.claim_partition
    """CREATE TABLE IF NOT EXISTS partition_claims (
        partition_key TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_us INTEGER NOT NULL
    )""",
    *SEARCH_SCHEMA,
    AGGREGATES_TABLE,
    *PASS_TIME_TABLES,
    *STATUS_TABLES,
    f"INSERT OR IGNORE INTO fact_store_meta (key, value) VALUES ('schema_version', "
    f"'{SCHEMA_VERSION}')",
    TEXT_MARK_INIT,
)
_MIGRATE_V1: Final = (
    _LINEAGE_TABLE.format(name="lineage_v2"),
    # v1 audit delta ids are unique and indexed: the join finds each creating row
    """INSERT INTO lineage_v2 (rowid, fact_id, delta_id, rule_id, pack_hash, source_episode_ids,
        promotion_ts_us, confidence, reason, bindings, predecessor_ids, audit_seq)
    SELECT f.rowid, l.fact_id, l.delta_id, l.rule_id, l.pack_hash, l.source_episode_ids,
        l.promotion_ts_us, l.confidence, l.reason, l.bindings, l.predecessor_ids,
        coalesce((SELECT a.seq FROM audit a WHERE a.delta_id = l.delta_id), 0)
    FROM lineage l JOIN facts f ON f.id = l.fact_id ORDER BY f.rowid""",
    "DROP TABLE lineage",
    "ALTER TABLE lineage_v2 RENAME TO lineage",
    _AUDIT_TABLE.format(name="audit_v2"),
    "INSERT INTO audit_v2 SELECT * FROM audit ORDER BY seq",
    "DROP TABLE audit",
    "ALTER TABLE audit_v2 RENAME TO audit",
    *_AUDIT_INDEXES,
    "UPDATE fact_store_meta SET value = '2' WHERE key = 'schema_version'",
)
"""Version 1 → 2, in the bootstrap transaction: lineage re-keyed by fact rowid with the
creating audit seq; audit rebuilt without the unique index over every delta id."""
_MIGRATE_V2: Final = (
    *SEARCH_SCHEMA,
    SEARCH_BACKFILL,
    "UPDATE fact_store_meta SET value = '3' WHERE key = 'schema_version'",
)
"""Version 2 → 3, in the bootstrap transaction: the current facts are indexed for search."""
_MIGRATE_V3: Final = (
    AGGREGATES_TABLE,
    "ALTER TABLE facts ADD COLUMN observed_us INTEGER NULL",
    "ALTER TABLE reinforcements ADD COLUMN observed_us INTEGER NULL",
    *PASS_TIME_TABLES,
    "UPDATE fact_store_meta SET value = '4' WHERE key = 'schema_version'",
)
"""Version 3 → 4, in the bootstrap transaction: the aggregates table, empty (each
relation's state is rebuilt from the episodes by the first pass that needs it); the time
of each fact's newest source observation (unknown for facts made before: read as their
``valid_from``); the deferred episodes and pass times tables (empty: passes before them
consumed every episode they read)."""
_MIGRATE_V4: Final = (
    "ALTER TABLE facts ADD COLUMN reinforced_us INTEGER NULL",
    "ALTER TABLE facts ADD COLUMN reinforcement_base INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE facts ADD COLUMN status TEXT NULL",
    *STATUS_TABLES,
    STATUS_BACKFILL,
    "UPDATE fact_store_meta SET value = '5' WHERE key = 'schema_version'",
)
"""Version 4 → 5, in the bootstrap transaction: closed facts get their status (superseded
when a successor is named, else deleted); reinforcement bases start at 0 and times at the
fact's ``valid_from``; no pins, no status events."""
_MIGRATE_V5: Final = (
    TEXT_MARK_INIT,
    "UPDATE fact_store_meta SET value = '6' WHERE key = 'schema_version'",
)
"""Version 5 → 6, in the bootstrap transaction: the search index's mark (every fact of a
version 5 file was indexed by the transaction that made it)."""
MIGRATIONS: Final = {
    1: (*_MIGRATE_V1, *_MIGRATE_V2, *_MIGRATE_V3, *_MIGRATE_V4, *_MIGRATE_V5),
    2: (*_MIGRATE_V2, *_MIGRATE_V3, *_MIGRATE_V4, *_MIGRATE_V5),
    3: (*_MIGRATE_V3, *_MIGRATE_V4, *_MIGRATE_V5),
    4: (*_MIGRATE_V4, *_MIGRATE_V5),
    5: _MIGRATE_V5,
}
"""The statements that bring a file of each older version to :data:`SCHEMA_VERSION`."""
TABLES: Final = (
    "fact_store_meta",
    "facts",
    "lineage",
    "audit",
    "reinforcements",
    "watermarks",
    "rejections",
    *SEARCH_TABLES,
    "aggregates",
    "deferred_episodes",
    "pass_times",
    *STATUS_TABLE_NAMES,
)

_FACT_COLUMNS: Final = (
    "id, user, agent, subject, predicate, object, payload, confidence, valid_from_us, "
    "valid_until_us, superseded_by, recorded_at_us, rule_id, delta_id, status"
)
_LINEAGE_COLUMNS: Final = (
    "rule_id, pack_hash, delta_id, source_episode_ids, promotion_ts_us, confidence, reason, "
    "bindings, predecessor_ids"
)
_AUDIT_COLUMNS: Final = "seq, delta_id, kind, rule_id, pack_hash, user, agent, applied_at_us, delta"
_INSERT_FACT: Final = (
    "INSERT INTO facts (rowid, id, user, agent, partition_key, subject, predicate, object, "
    "payload, confidence, valid_from_us, recorded_at_us, rule_id, delta_id, observed_us, "
    "reinforced_us, reinforcement_base, valid_until_us, superseded_by, closed_by, status) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_LINEAGE: Final = (
    f"INSERT INTO lineage (rowid, fact_id, {_LINEAGE_COLUMNS}, audit_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_AUDIT: Final = (
    "INSERT INTO audit (seq, delta_id, kind, rule_id, pack_hash, user, agent, partition_key, "
    "applied_at_us, delta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_PREFIXED: Final = ", ".join(f"f.{c.strip()}" for c in _FACT_COLUMNS.split(","))
_LAST_IDS: Final = (
    "SELECT (SELECT coalesce(max(rowid), 0) FROM facts), "
    "max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'audit'), 0), "
    "coalesce((SELECT max(seq) FROM audit), 0)), "
    f"(SELECT CAST(value AS INTEGER) FROM fact_store_meta WHERE key = '{TEXT_MARK}')"
)
_CLOSE: Final = (
    "UPDATE facts SET valid_until_us = ?, superseded_by = ?, closed_by = ?, status = ? "
    "WHERE id = ? AND valid_until_us IS NULL"
)
_INSERT_REINFORCEMENT: Final = (
    "INSERT INTO reinforcements (fact_id, ts_us, delta_id, observed_us) VALUES (?, ?, ?, ?)"
)
_UPSERT_WATERMARK: Final = (
    "INSERT INTO watermarks (pack, rule_id, partition_key, last_seq, updated_at_us) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (pack, rule_id, partition_key) "
    "DO UPDATE SET last_seq = excluded.last_seq, updated_at_us = excluded.updated_at_us"
)
_INSERT_REJECTION: Final = (
    "INSERT OR IGNORE INTO rejections (id, pack, rule_id, partition_key, user, agent, reason, "
    "at_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_IN_JSON: Final = "IN (SELECT value FROM json_each(?))"
_STORED_FACTS: Final = f"SELECT id FROM facts WHERE id {_IN_JSON}"
_STORED_MARKERS: Final = f"SELECT delta_id FROM audit WHERE {_MARKERS} AND delta_id {_IN_JSON}"
_REINFORCED: Final = (
    "max(coalesce(f.reinforced_us, f.valid_from_us), coalesce("
    "(SELECT max(r.ts_us) FROM reinforcements r WHERE r.fact_id = f.id), "
    "coalesce(f.reinforced_us, f.valid_from_us)))"
)
"""A fact's reinforcement time: its base (promotion, or inherited), or a later noop."""
_LIFECYCLE: Final = f"""{_REINFORCED}, f.reinforcement_base + (
            SELECT count(*) FROM reinforcements r WHERE r.fact_id = f.id),
        max(coalesce(f.observed_us, f.valid_from_us), coalesce(
            (SELECT max(r.observed_us) FROM reinforcements r WHERE r.fact_id = f.id), 0)),
        coalesce(a.count, 0), coalesce(a.last_access_us, 0), p.pinned_at_us"""
"""Reinforcement time and count, newest observation, access count and last access, pin."""
_WITH_STATS: Final = (
    "FROM facts f JOIN lineage l ON l.rowid = f.rowid "
    "LEFT JOIN fact_access a ON a.fact_id = f.id LEFT JOIN fact_pins p ON p.fact_id = f.id"
)
_FACT_STATES: Final = f"""
    SELECT f.id, f.user, f.agent, f.valid_from_us, f.valid_until_us, f.status, f.superseded_by,
        {_LIFECYCLE}, p.reason
    FROM facts f LEFT JOIN fact_access a ON a.fact_id = f.id
        LEFT JOIN fact_pins p ON p.fact_id = f.id
    WHERE f.id {_IN_JSON}"""
_ENGINE: Final = f"""
    SELECT f.id, f.subject, f.predicate, f.object, f.confidence, f.valid_from_us,
        {_REINFORCED}, f.rule_id, l.source_episode_ids,
        max(coalesce(f.observed_us, f.valid_from_us), coalesce(
            (SELECT max(r.observed_us) FROM reinforcements r WHERE r.fact_id = f.id), 0)),
        f.reinforcement_base + (SELECT count(*) FROM reinforcements r WHERE r.fact_id = f.id),
        coalesce(a.count, 0), coalesce(a.last_access_us, 0), p.pinned_at_us, f.payload"""
"""The engine fact columns (see ``fact_rows.engine_fact``)."""
_CURRENT_OF: Final = f"""{_ENGINE}, f.partition_key {_WITH_STATS}
    WHERE f.partition_key {_IN_JSON} AND f.valid_until_us IS NULL
    ORDER BY f.partition_key, f.valid_from_us, f.id"""
_ARCHIVED_OF: Final = f"""{_ENGINE}, f.partition_key {_WITH_STATS}
    WHERE f.partition_key {_IN_JSON} AND f.status = 'archived' AND f.superseded_by IS NULL
    ORDER BY f.partition_key, f.valid_from_us, f.id"""
CURRENT: Final = f"""{_ENGINE} {_WITH_STATS}
    WHERE f.partition_key = ? AND f.valid_until_us IS NULL
    ORDER BY f.valid_from_us, f.id"""


async def stored_version(db: aiosqlite.Connection) -> int | None:
    """The file's fact store schema version; None before the first bootstrap."""
    if not await fetch(db, "SELECT 1 FROM sqlite_master WHERE name = 'fact_store_meta'"):
        return None
    value = await scalar(db, "SELECT value FROM fact_store_meta WHERE key = 'schema_version'")
    try:
        return None if value is None else int(value)
    except ValueError as exc:
        raise corrupt("fact_store_meta", "schema_version", exc) from exc


def _no_change(text: str) -> str:
    return text


SQLITE: Final = FactStatements(
    mark="?",
    ids=lambda ids: json_text(list(ids)),
    no_limit=-1,
    fact_columns=_FACT_COLUMNS,
    lineage_columns=_LINEAGE_COLUMNS,
    audit_columns=_AUDIT_COLUMNS,
    last_ids=_LAST_IDS,
    stored_facts_in=_STORED_FACTS,
    stored_markers_in=_STORED_MARKERS,
    fact_states_in=_FACT_STATES,
    episode_columns="SELECT name FROM pragma_table_info('episodes')",
    episode_partitions_in=f"SELECT id, partition_key FROM episodes WHERE id {_IN_JSON}",
    episode_owners_in=f"SELECT id, user, agent FROM episodes WHERE id {_IN_JSON}",
    episode_times_in=f"SELECT id, ts_us FROM episodes WHERE id {_IN_JSON}",
    insert_fact=Insert("facts", FACT_INSERT_COLUMNS, _INSERT_FACT),
    insert_lineage=Insert("lineage", LINEAGE_INSERT_COLUMNS, _INSERT_LINEAGE),
    index_fact=Insert("fact_text", ("rowid", "body"), INDEX_FACT),
    catch_up_text=CATCH_UP_TEXT,
    move_text_mark=MOVE_TEXT_MARK,
    close=Many(_CLOSE),
    insert_audit=Insert("audit", AUDIT_INSERT_COLUMNS, _INSERT_AUDIT),
    insert_reinforcement=Insert(
        "reinforcements", ("fact_id", "ts_us", "delta_id", "observed_us"), _INSERT_REINFORCEMENT
    ),
    upsert_watermark=_UPSERT_WATERMARK,
    insert_rejection=_INSERT_REJECTION,
    marks=(
        "SELECT rule_id, last_seq FROM watermarks WHERE pack = ? AND partition_key = ? "
        "ORDER BY rule_id"
    ),
    version="SELECT max(seq) FROM audit WHERE partition_key = ?",
    marks_of=(
        "SELECT partition_key, rule_id, last_seq FROM watermarks WHERE pack = ? "
        f"AND partition_key {_IN_JSON} ORDER BY partition_key, rule_id"
    ),
    versions_of=(
        "SELECT j.value, (SELECT max(a.seq) FROM audit a WHERE a.partition_key = j.value) "
        "FROM json_each(?) j"
    ),
    claims_of=(
        f"SELECT partition_key, holder, expires_us FROM partition_claims "
        f"WHERE partition_key {_IN_JSON}"
    ),
    fresh_of=(
        "SELECT 0, pack, partition_key, rule_id, last_seq FROM watermarks "
        f"WHERE pack {_IN_JSON} AND partition_key {_IN_JSON} "
        "UNION ALL SELECT 1, NULL, j.value, NULL, "
        "(SELECT max(a.seq) FROM audit a WHERE a.partition_key = j.value) FROM json_each(?) j "
        "UNION ALL SELECT 2, NULL, partition_key, holder, expires_us FROM partition_claims "
        f"WHERE partition_key {_IN_JSON}"
    ),
    fresh_one=(
        "SELECT 0, pack, partition_key, rule_id, last_seq FROM watermarks "
        "WHERE pack = ? AND partition_key = ? "
        "UNION ALL SELECT 1, NULL, ?, NULL, (SELECT max(seq) FROM audit WHERE partition_key = ?) "
        "UNION ALL SELECT 2, NULL, partition_key, holder, expires_us FROM partition_claims "
        "WHERE partition_key = ?"
    ),
    current_of=_CURRENT_OF,
    claim_of="SELECT holder, expires_us FROM partition_claims WHERE partition_key = ?",
    drop_claim="DELETE FROM partition_claims WHERE partition_key = ? AND holder = ?",
    renew_claim="UPDATE partition_claims SET expires_us = ? WHERE partition_key = ? AND holder = ?",
    put_claim=(
        "INSERT INTO partition_claims (partition_key, holder, expires_us) VALUES (?, ?, ?) "
        "ON CONFLICT (partition_key) DO UPDATE SET "
        "holder = excluded.holder, expires_us = excluded.expires_us"
    ),
    predecessors_in=(
        f"SELECT {_PREFIXED}, l.predecessor_ids FROM facts f "
        f"LEFT JOIN lineage l ON l.rowid = f.rowid WHERE f.id {_IN_JSON}"
    ),
    fact_by_id=f"SELECT {_FACT_COLUMNS}, closed_by FROM facts WHERE id = ?",
    lineage_of=(
        f"SELECT {_LINEAGE_COLUMNS} FROM lineage "
        "WHERE rowid = (SELECT rowid FROM facts WHERE id = ?1) AND fact_id = ?1"
    ),
    source_episodes_in=(
        f"SELECT id, session, ts_us, content FROM episodes WHERE id {_IN_JSON} "
        "AND partition_key = ?"
    ),
    audit_by_fact_in=(
        f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE seq IN (SELECT l.audit_seq FROM facts f "
        f"JOIN lineage l ON l.rowid = f.rowid WHERE f.id {_IN_JSON})"
    ),
    reinforcing_deltas="SELECT delta_id FROM reinforcements WHERE fact_id = ?",
    audit_markers_in=f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE {_MARKERS} AND delta_id {_IN_JSON}",
    aggregates_in=(
        "SELECT ref, value, n, last_us, last_id, data FROM aggregates "
        f"WHERE pack = ? AND ref {_IN_JSON}"
    ),
    aggregates_window=(
        "SELECT ref, value, n, last_us, last_id, data FROM aggregates "
        f"WHERE pack = ? AND ref {_IN_JSON} UNION ALL "
        "SELECT a.ref, a.value, a.n, a.last_us, a.last_id, a.data FROM (SELECT ref, "
        f"max(last_us) AS top FROM aggregates WHERE pack = ? AND ref {_IN_JSON} GROUP BY ref) "
        "AS m CROSS JOIN aggregates AS a ON a.pack = ? AND a.ref = m.ref WHERE a.last_us >= ? "
        f"OR a.last_us < max(?, m.top) - ? OR a.value {_IN_JSON}"
    ),
    upsert_aggregate=(
        "INSERT INTO aggregates (pack, ref, value, partition_key, n, last_us, last_id, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (pack, ref, value) DO UPDATE SET "
        "n = excluded.n, last_us = excluded.last_us, last_id = excluded.last_id, "
        "data = excluded.data"
    ),
    delete_aggregate="DELETE FROM aggregates WHERE pack = ? AND ref = ? AND value = ?",
    insert_access=Insert(
        "fact_access",
        ("fact_id", "count", "last_access_us"),
        "INSERT INTO fact_access (fact_id, count, last_access_us) VALUES (?, ?, ?)",
    ),
    insert_pin=Insert(
        "fact_pins",
        ("fact_id", "pinned_at_us", "reason"),
        "INSERT INTO fact_pins (fact_id, pinned_at_us, reason) VALUES (?, ?, ?)",
    ),
    delete_pin="DELETE FROM fact_pins WHERE fact_id = ?",
    pin_of="SELECT pinned_at_us, reason FROM fact_pins WHERE fact_id = ?",
    insert_event=Insert(
        "fact_events",
        EVENT_COLUMNS,
        f"INSERT INTO fact_events ({', '.join(EVENT_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    ),
    last_event_seq="SELECT coalesce(max(seq), 0) FROM fact_events",
    events_of=(
        "SELECT seq, event, at_us, rule_id, delta_id, reason, related_id FROM fact_events "
        "WHERE fact_id = ? ORDER BY seq"
    ),
    mark_restored=Many("UPDATE facts SET superseded_by = ? WHERE id = ?"),
    archived_of=_ARCHIVED_OF,
    index_text=_no_change,
    made_from=(
        "SELECT f.id FROM facts f JOIN lineage l ON l.rowid = f.rowid "
        "WHERE f.partition_key = ? AND f.valid_until_us IS NULL "
        "AND substr(l.source_episode_ids, 1, ?) = ?"
    ),
    provenance_in=(
        "SELECT f.id, "
        + ", ".join(f"l.{c.strip()}" for c in _LINEAGE_COLUMNS.split(","))
        + ", p.pinned_at_us FROM facts f LEFT JOIN lineage l ON l.rowid = f.rowid "
        f"LEFT JOIN fact_pins p ON p.fact_id = f.id WHERE f.id {_IN_JSON}"
    ),
)
"""The SQLite statements of the shared apply and read code."""
