"""The PostgreSQL schema, as versioned migrations (each applied in one transaction).

Every table of the three stores lives in one PostgreSQL schema (``?schema=NAME``). Text
that is compared or ordered (ids, keys, scope parts) uses the ``"C"`` collation, so rows
sort by code point as in SQLite and range scans over scope keys mean the same. Times are
UTC microseconds (``BIGINT``) as in SQLite; ``"user"`` is quoted (a reserved word).
"""

from __future__ import annotations

from typing import Final

from stargraph_mem.stores.repositories.entities import ENTITY_TABLES, POSTGRES_ENTITY_TABLES
from stargraph_mem.stores.repositories.fact_status import STATUS_BACKFILL, STATUS_TABLE_NAMES
from stargraph_mem.stores.repositories.layers import LAYER_COLUMNS, LAYER_INDEXES
from stargraph_mem.stores.repositories.pass_time import POSTGRES_TABLES
from stargraph_mem.stores.repositories.sweep_schema import DROP_SWEEP_INDEXES, index_ddl

__all__ = ["LEDGER_TABLE", "MIGRATIONS", "SCHEMA_VERSION", "TABLES"]

LEDGER_TABLE: Final = "schema_ledger"
"""One row per applied migration: ``version``, ``name``, ``applied_at_us``."""

_K: Final = 'TEXT COLLATE "C"'

_EPISODES: Final = (
    f"""CREATE TABLE episodes (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id {_K} NOT NULL UNIQUE,
        scope_key {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        "user" {_K} NOT NULL,
        session {_K} NOT NULL,
        agent {_K} NOT NULL,
        ts_us BIGINT NOT NULL,
        tz_offset_s INTEGER NOT NULL,
        content TEXT NOT NULL,
        source_node TEXT,
        metadata BYTEA NOT NULL,
        last_accessed_us BIGINT NULL,
        access_count BIGINT NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX episodes_scope_ts ON episodes (scope_key, ts_us, seq)",
    "CREATE INDEX episodes_partition_seq ON episodes (partition_key, seq)",
    "CREATE INDEX episodes_partition_ts ON episodes (partition_key, ts_us, seq)",
    f"""CREATE TABLE schema_migrations (
        version INTEGER PRIMARY KEY,
        name {_K} NOT NULL UNIQUE,
        applied_at_us BIGINT NOT NULL,
        plan BYTEA NOT NULL
    )""",
    f"""CREATE TABLE quarantine (
        seq BIGINT PRIMARY KEY,
        episode_id TEXT,
        partition_key {_K},
        reason TEXT NOT NULL,
        at_us BIGINT NOT NULL
    )""",
    "CREATE INDEX quarantine_partition_seq ON quarantine (partition_key, seq)",
)

_FACTS: Final = (
    f"""CREATE TABLE facts (
        rowid BIGINT PRIMARY KEY,
        id {_K} NOT NULL UNIQUE,
        "user" {_K} NOT NULL,
        agent {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        subject {_K} NOT NULL,
        predicate {_K} NOT NULL,
        object {_K} NOT NULL,
        payload BYTEA NOT NULL,
        confidence DOUBLE PRECISION NOT NULL,
        valid_from_us BIGINT NOT NULL,
        valid_until_us BIGINT NULL,
        superseded_by {_K} NULL,
        closed_by {_K} NULL,
        recorded_at_us BIGINT NOT NULL,
        rule_id {_K} NOT NULL,
        delta_id {_K} NOT NULL
    )""",
    "CREATE INDEX facts_psp ON facts (partition_key, subject, predicate)",
    "CREATE INDEX facts_current ON facts (partition_key, subject, predicate) "
    "WHERE valid_until_us IS NULL",
    f"""CREATE TABLE lineage (
        rowid BIGINT PRIMARY KEY,
        fact_id {_K} NOT NULL,
        delta_id {_K} NOT NULL,
        rule_id {_K} NOT NULL,
        pack_hash {_K} NOT NULL,
        source_episode_ids TEXT NOT NULL,
        promotion_ts_us BIGINT NOT NULL,
        confidence DOUBLE PRECISION NOT NULL,
        reason TEXT NOT NULL,
        bindings TEXT NOT NULL,
        predecessor_ids TEXT NOT NULL,
        audit_seq BIGINT NOT NULL
    )""",
    f"""CREATE TABLE audit (
        seq BIGINT PRIMARY KEY,
        delta_id {_K} NOT NULL,
        kind {_K} NOT NULL,
        rule_id {_K} NOT NULL,
        pack_hash {_K} NOT NULL,
        "user" {_K} NOT NULL,
        agent {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        applied_at_us BIGINT NOT NULL,
        delta TEXT NOT NULL
    )""",
    "CREATE INDEX audit_partition ON audit (partition_key, seq)",
    "CREATE UNIQUE INDEX audit_markers ON audit (delta_id) WHERE kind IN ('delete', 'noop')",
    f"""CREATE TABLE reinforcements (
        fact_id {_K} NOT NULL,
        ts_us BIGINT NOT NULL,
        delta_id {_K} NOT NULL,
        PRIMARY KEY (fact_id, ts_us, delta_id)
    )""",
    f"""CREATE TABLE watermarks (
        pack {_K} NOT NULL,
        rule_id {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        last_seq BIGINT NOT NULL,
        updated_at_us BIGINT NOT NULL,
        PRIMARY KEY (pack, rule_id, partition_key)
    )""",
    "CREATE INDEX watermarks_partition ON watermarks (pack, partition_key, rule_id)",
    f"""CREATE TABLE rejections (
        id {_K} NOT NULL,
        pack {_K} NOT NULL,
        rule_id {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        "user" {_K} NOT NULL,
        agent {_K} NOT NULL,
        reason TEXT NOT NULL,
        at_us BIGINT NOT NULL,
        PRIMARY KEY (id, pack, rule_id, partition_key)
    )""",
    "CREATE INDEX rejections_partition ON rejections (partition_key, at_us)",
    f"""CREATE TABLE partition_claims (
        partition_key {_K} PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_us BIGINT NOT NULL
    )""",
    # the search index: a fact's text (folded in Python) and its 'simple' tsvector
    """CREATE TABLE fact_text (
        rowid BIGINT PRIMARY KEY,
        text TEXT NOT NULL,
        body TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED
    )""",
    "CREATE INDEX fact_text_body ON fact_text USING GIN (body)",
    f"""CREATE TABLE fact_access (
        fact_id {_K} PRIMARY KEY,
        count BIGINT NOT NULL,
        last_access_us BIGINT NOT NULL
    )""",
    f"""CREATE TABLE fact_store_migrations (
        name {_K} PRIMARY KEY,
        applied_at_us BIGINT NOT NULL,
        plan BYTEA NOT NULL
    )""",
)

_SCHEDULE: Final = (
    f"""CREATE TABLE rule_runs (
        pack {_K} NOT NULL,
        rule_id {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        anchor_us BIGINT NOT NULL,
        last_run_us BIGINT NULL,
        runs BIGINT NOT NULL DEFAULT 0,
        token TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (pack, rule_id, partition_key)
    )""",
    f"""CREATE TABLE scheduler_lease (
        name {_K} PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_us BIGINT NOT NULL
    )""",
    f"""CREATE TABLE schedule_rules (
        pack {_K} NOT NULL,
        rule_id {_K} NOT NULL,
        rule_index INTEGER NOT NULL,
        cadence TEXT NOT NULL,
        PRIMARY KEY (pack, rule_id)
    )""",
)

_AGGREGATES: Final = (
    f"""CREATE TABLE aggregates (
        pack {_K} NOT NULL,
        ref {_K} NOT NULL,
        value {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        n BIGINT NOT NULL,
        last_us BIGINT NOT NULL,
        last_id {_K} NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (pack, ref, value)
    )""",
    "ALTER TABLE facts ADD COLUMN observed_us BIGINT NULL",
    "ALTER TABLE reinforcements ADD COLUMN observed_us BIGINT NULL",
)
"""Durable aggregates of ``over: history`` patterns (derived data, rebuilt when missing),
and the time of each fact's newest source observation (unknown for older facts: read as
their ``valid_from``)."""

_STATUSES: Final = (
    "ALTER TABLE facts ADD COLUMN reinforced_us BIGINT NULL",
    "ALTER TABLE facts ADD COLUMN reinforcement_base BIGINT NOT NULL DEFAULT 0",
    f"ALTER TABLE facts ADD COLUMN status {_K} NULL",
    f"""CREATE TABLE fact_pins (
        fact_id {_K} PRIMARY KEY,
        pinned_at_us BIGINT NOT NULL,
        reason TEXT NOT NULL
    )""",
    f"""CREATE TABLE fact_events (
        seq BIGINT PRIMARY KEY,
        fact_id {_K} NOT NULL,
        event {_K} NOT NULL,
        at_us BIGINT NOT NULL,
        rule_id {_K} NOT NULL,
        delta_id {_K} NOT NULL,
        reason TEXT NOT NULL,
        related_id {_K} NULL
    )""",
    "CREATE INDEX fact_events_fact ON fact_events (fact_id, seq)",
    "CREATE INDEX facts_archived ON facts (partition_key) "
    "WHERE status = 'archived' AND superseded_by IS NULL",
    STATUS_BACKFILL,
)
"""Closing statuses (closed facts before them: superseded when a successor is named, else
deleted), reinforcement bases, pins and status events."""

V4_SWEEP_INDEXES: Final = (
    "facts_current_confidence",
    "facts_current_valid_from",
    "facts_current_predicate",
    "facts_current_rule",
)
"""The sweep indexes migration 4 made (migration 5 drops them: they are made on demand)."""

_SPEC_INDEX_NAME: Final = (
    "ALTER INDEX IF EXISTS episodes_scope_ts RENAME TO idx_episodes_scope_ts",
)
"""The scope index under the specification's name (``idx_episodes_scope_ts``); its columns
stay ``(scope_key, ts_us, seq)``, which a scan reads in either direction."""

_VECTORS: Final = (
    f"""CREATE TABLE vectors (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind {_K} NOT NULL,
        item_id {_K} NOT NULL,
        partition_key {_K} NOT NULL,
        embedder {_K} NOT NULL,
        vector BYTEA NOT NULL,
        UNIQUE (kind, item_id, embedder)
    )""",
    "CREATE INDEX vectors_partition ON vectors (partition_key, embedder, kind, seq)",
    f"""CREATE TABLE index_marks (
        partition_key {_K} NOT NULL,
        embedder {_K} NOT NULL,
        kind {_K} NOT NULL,
        through BIGINT NOT NULL,
        PRIMARY KEY (partition_key, embedder, kind)
    )""",
    # the episodes' full-text index: a 'simple' tsvector of each episode's folded text
    """CREATE TABLE episode_text (
        seq BIGINT PRIMARY KEY,
        body TSVECTOR NOT NULL
    )""",
    # without the pending list: a catch-up writes the index in place (it is off the
    # record path), and searches never scan a list of unmerged entries
    "CREATE INDEX episode_text_body ON episode_text USING GIN (body) WITH (fastupdate = off)",
)
"""Vectors of episodes and facts per embedder identity, the lazy indexes' marks, and the
episodes' full-text index (all derived data, filled by catch-ups)."""

MIGRATIONS: Final = (
    (1, "0001_stores", (*_EPISODES, *_FACTS, *_SCHEDULE)),
    (2, "0002_history_and_pass_times", (*POSTGRES_TABLES, *_AGGREGATES)),
    (3, "0003_fact_statuses", _STATUSES),
    (4, "0004_sweep_indexes", tuple(index_ddl(name) for name in V4_SWEEP_INDEXES)),
    (5, "0005_sweep_indexes_on_demand", DROP_SWEEP_INDEXES),
    (6, "0006_spec_scope_index_name", _SPEC_INDEX_NAME),
    (7, "0007_vectors_and_episode_text", _VECTORS),
    (8, "0008_entities", POSTGRES_ENTITY_TABLES),
    (9, "0009_layers_and_trust", (*LAYER_COLUMNS, *LAYER_INDEXES)),
)
"""``(version, name, statements)`` in order; a database at version n gets those above n."""
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]
TABLES: Final = {
    "memory": ("episodes", "schema_migrations", "quarantine"),
    "fact": (
        "facts",
        "lineage",
        "audit",
        "reinforcements",
        "watermarks",
        "rejections",
        "partition_claims",
        "fact_text",
        "fact_access",
        "aggregates",
        "deferred_episodes",
        "pass_times",
        *STATUS_TABLE_NAMES,
    ),
    "schedule": ("rule_runs", "scheduler_lease", "schedule_rules"),
    "vector": ("vectors", "index_marks", "episode_text"),
    "entity": ENTITY_TABLES,
}
"""Each store's tables (a migration plan may only touch its own)."""
