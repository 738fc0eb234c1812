"""Taking a current SQLite fact store back to an older layout, for migration tests."""

from __future__ import annotations

import sqlite3

from stargraph_mem.stores.postgres.schema import MIGRATIONS, V4_SWEEP_INDEXES
from stargraph_mem.stores.repositories.sweep_schema import index_ddl

UNDO_LAYERS = (
    "DROP INDEX facts_current_layer_of",
    "DROP INDEX facts_current_type_of",
    "DROP INDEX IF EXISTS facts_current_layer",
    "ALTER TABLE facts DROP COLUMN layer",
    "ALTER TABLE facts DROP COLUMN memory_type",
    "ALTER TABLE facts DROP COLUMN trust",
)
"""What the layers migration added (SQLite version 7, PostgreSQL's ``*_layers_and_trust``):
each fact's layer, memory type and trust, and their indexes."""
UNDO_VERSION_6 = ("DELETE FROM fact_store_meta WHERE key = 'text_indexed_through'",)
"""What version 6 added: the search index's mark (a version 5 file indexed every fact)."""
UNDO_VERSION_5 = (
    "DROP INDEX facts_archived",
    "DROP TABLE fact_pins",
    "DROP TABLE fact_events",
    "ALTER TABLE facts DROP COLUMN status",
    "ALTER TABLE facts DROP COLUMN reinforced_us",
    "ALTER TABLE facts DROP COLUMN reinforcement_base",
)
"""What version 5 added: closing statuses, reinforcement bases, pins and status events."""
UNDO_VERSION_4 = (
    "DROP TABLE aggregates",
    "ALTER TABLE facts DROP COLUMN observed_us",
    "ALTER TABLE reinforcements DROP COLUMN observed_us",
    "DROP TABLE deferred_episodes",
    "DROP TABLE pass_times",
)
"""What version 4 added: aggregates, observation times, deferred episodes, pass times."""


def undo_version_7(db: sqlite3.Connection) -> None:
    """Remove what version 7 added (the caller sets the version it wants)."""
    for statement in UNDO_LAYERS:
        db.execute(statement)


def undo_version_6(db: sqlite3.Connection) -> None:
    """Remove what versions 6 and 7 added (the caller sets the version it wants)."""
    undo_version_7(db)
    for statement in UNDO_VERSION_6:
        db.execute(statement)


def undo_version_5(db: sqlite3.Connection) -> None:
    """Remove what versions 5 and 6 added (the caller sets the version it wants)."""
    undo_version_6(db)
    for statement in UNDO_VERSION_5:
        db.execute(statement)


def undo_version_4(db: sqlite3.Connection) -> None:
    """Remove what versions 4 and 5 added (the caller sets the version it wants)."""
    undo_version_5(db)
    for statement in UNDO_VERSION_4:
        db.execute(statement)


PG_UNDO_VERSION_3 = (
    "DROP TABLE fact_pins",
    "DROP TABLE fact_events",
    "DROP INDEX facts_archived",
    "ALTER TABLE facts DROP COLUMN status",
    "ALTER TABLE facts DROP COLUMN reinforced_us",
    "ALTER TABLE facts DROP COLUMN reinforcement_base",
    "DELETE FROM schema_ledger WHERE version = 3",
)
"""What PostgreSQL migration 3 added (statuses, reinforcement bases, pins, status events),
and its ledger row."""
PG_UNDO_VERSION_4 = (
    *(f"DROP INDEX {name}" for name in V4_SWEEP_INDEXES),
    "DELETE FROM schema_ledger WHERE version = 4",
)
"""What PostgreSQL migration 4 added (the sweep pre-filter indexes), and its ledger row."""
PG_UNDO_VERSION_5 = (
    *(index_ddl(name) for name in V4_SWEEP_INDEXES),
    "DELETE FROM schema_ledger WHERE version = 5",
)
"""What PostgreSQL migration 5 removed (the sweep indexes, now made on demand), and its
ledger row."""
PG_UNDO_VERSION_6 = (
    "ALTER INDEX idx_episodes_scope_ts RENAME TO episodes_scope_ts",
    "DELETE FROM schema_ledger WHERE version = 6",
)
"""What PostgreSQL migration 6 renamed (the scope index, to the specification's name), and
its ledger row."""
PG_UNDO_VERSION_7 = (
    "DROP TABLE vectors",
    "DROP TABLE index_marks",
    "DROP TABLE episode_text",
    "DELETE FROM schema_ledger WHERE version = 7",
)
"""What PostgreSQL migration 7 made (vectors, the lazy indexes' marks, the episodes'
full-text index), and its ledger row."""
PG_UNDO_VERSION_8 = (
    "DROP TABLE entity_aliases",
    "DROP TABLE entities",
    "DELETE FROM schema_ledger WHERE version = 8",
)
"""What PostgreSQL migration 8 made (the entity registry and its aliases), and its ledger
row."""

LAYERS_VERSION = next(v for v, name, _ in MIGRATIONS if name.endswith("_layers_and_trust"))
"""The PostgreSQL migration that added layers, memory types and trust (found by name: its
number depends on the migrations merged before it)."""
PG_UNDO_LAYERS = (*UNDO_LAYERS, f"DELETE FROM schema_ledger WHERE version = {LAYERS_VERSION}")
"""What the PostgreSQL layers migration added, and its ledger row (undo it first: it is
the newest this file knows)."""
