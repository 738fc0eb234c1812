"""The layer, memory type and trust columns of ``facts``, the same DDL on both backends
(PostgreSQL migration 9, SQLite fact store schema 7).

Each is ``NOT NULL`` with a default, so facts made before read as specification 004's
defaults: ``episodic`` facts of type ``fact`` and full trust. Layer and memory type are
indexed per partition over current facts: recall filters on the type
(:data:`~stargraph_mem.model.layers.RECALL_MODES`), sweeps select a layer.
"""

from __future__ import annotations

from typing import Final

from stargraph_mem.model.layers import DEFAULT_LAYER, DEFAULT_MEMORY_TYPE

__all__ = ["LAYER_COLUMNS", "LAYER_INDEXES"]

LAYER_COLUMNS: Final = (
    f"ALTER TABLE facts ADD COLUMN layer TEXT NOT NULL DEFAULT '{DEFAULT_LAYER}'",
    f"ALTER TABLE facts ADD COLUMN memory_type TEXT NOT NULL DEFAULT '{DEFAULT_MEMORY_TYPE}'",
    "ALTER TABLE facts ADD COLUMN trust DOUBLE PRECISION NOT NULL DEFAULT 1.0",
)
LAYER_INDEXES: Final = (
    "CREATE INDEX IF NOT EXISTS facts_current_layer_of ON facts (partition_key, layer) "
    "WHERE valid_until_us IS NULL",
    "CREATE INDEX IF NOT EXISTS facts_current_type_of ON facts (partition_key, memory_type) "
    "WHERE valid_until_us IS NULL",
)
