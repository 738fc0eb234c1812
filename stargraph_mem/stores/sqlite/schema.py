"""The SQLite fact store's schema and its migrations.

Versions 1 to 4 are migrated on open (:data:`MIGRATIONS`, in the bootstrap transaction).
"""

from __future__ import annotations

from typing import Final

import aiosqlite

from stargraph_mem.stores.repositories.fact_rows import (
    AUDIT_INSERT_COLUMNS,
    FACT_INSERT_COLUMNS,
    LINEAGE_INSERT_COLUMNS,
    corrupt,
)
from stargraph_mem.stores.repositories.fact_status import (
    STATUS_BACKFILL,
    STATUS_TABLE_NAMES,
    STATUS_TABLES,
)
from stargraph_mem.stores.repositories.layers import LAYER_COLUMNS, LAYER_INDEXES
from stargraph_mem.stores.repositories.pass_time import SQLITE_TABLES as PASS_TIME_TABLES
from stargraph_mem.stores.sqlite.connection import fetch, scalar
from stargraph_mem.stores.sqlite.identity import FACT_SCHEMA_VERSION
from stargraph_mem.stores.sqlite.migrations import Ledger
from stargraph_mem.stores.sqlite.search_sql import (
    SEARCH_BACKFILL,
    SEARCH_SCHEMA,
    SEARCH_TABLES,
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
    "TABLES",
    "stored_version",
]

SCHEMA_VERSION: Final = FACT_SCHEMA_VERSION
"""The fact store schema this version reads (defined in
:mod:`~stargraph_mem.stores.sqlite.identity`: a newer one is refused when the file opens).
2: lineage rows share their fact's rowid and name the creating audit row; audit delta
ids are indexed for delete and noop deltas only. 3: the full-text index of facts and the
access table (:mod:`~stargraph_mem.stores.sqlite.search`). 4: the durable aggregates of
``over: history`` patterns (:mod:`~stargraph_mem.stores.repositories.aggregates`), each fact's
newest
observation time, deferred episodes and pass times
(:mod:`~stargraph_mem.stores.repositories.pass_time`).
5: each fact's closing status, reinforcement base, pins and status events
(:mod:`~stargraph_mem.stores.repositories.fact_status`). 6: the search index's mark.
7: each fact's layer, memory type and trust (:mod:`~stargraph_mem.model.layers`).
Older versions are migrated on open."""
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
        status TEXT NULL,
        layer TEXT NOT NULL DEFAULT 'episodic',
        memory_type TEXT NOT NULL DEFAULT 'fact',
        trust DOUBLE PRECISION NOT NULL DEFAULT 1.0
    )""",
    "CREATE INDEX IF NOT EXISTS facts_psp ON facts (partition_key, subject, predicate)",
    *LAYER_INDEXES,
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
_MIGRATE_V6: Final = (
    *LAYER_COLUMNS,
    *LAYER_INDEXES,
    "UPDATE fact_store_meta SET value = '7' WHERE key = 'schema_version'",
)
"""Version 6 → 7, in the bootstrap transaction: each fact's layer, memory type and trust
(facts made before read as episodic facts of full trust), indexed per partition."""
MIGRATIONS: Final = {
    1: (*_MIGRATE_V1, *_MIGRATE_V2, *_MIGRATE_V3, *_MIGRATE_V4, *_MIGRATE_V5, *_MIGRATE_V6),
    2: (*_MIGRATE_V2, *_MIGRATE_V3, *_MIGRATE_V4, *_MIGRATE_V5, *_MIGRATE_V6),
    3: (*_MIGRATE_V3, *_MIGRATE_V4, *_MIGRATE_V5, *_MIGRATE_V6),
    4: (*_MIGRATE_V4, *_MIGRATE_V5, *_MIGRATE_V6),
    5: (*_MIGRATE_V5, *_MIGRATE_V6),
    6: _MIGRATE_V6,
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


async def stored_version(db: aiosqlite.Connection) -> int | None:
    """The file's fact store schema version; None before the first bootstrap."""
    if not await fetch(db, "SELECT 1 FROM sqlite_master WHERE name = 'fact_store_meta'"):
        return None
    value = await scalar(db, "SELECT value FROM fact_store_meta WHERE key = 'schema_version'")
    try:
        return None if value is None else int(value)
    except ValueError as exc:
        raise corrupt("fact_store_meta", "schema_version", exc) from exc
