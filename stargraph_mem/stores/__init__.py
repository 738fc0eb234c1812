"""Stores: episodic memory, promoted facts, and the models they exchange."""

from __future__ import annotations

from stargraph_mem.stores.memory import EpisodeRecord, MemoryStore
from stargraph_mem.stores.models import (
    AddDelta,
    Cadence,
    ConsolidationRule,
    DeleteDelta,
    Episode,
    Fact,
    FactPattern,
    FactPayload,
    MemoryDelta,
    MigrationOp,
    MigrationPlan,
    NoopDelta,
    StoreHealth,
    UpdateDelta,
)
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

__all__ = [
    "AddDelta",
    "Cadence",
    "ConsolidationRule",
    "DeleteDelta",
    "Episode",
    "EpisodeRecord",
    "Fact",
    "FactPattern",
    "FactPayload",
    "MemoryDelta",
    "MemoryStore",
    "MigrationOp",
    "MigrationPlan",
    "NoopDelta",
    "Partition",
    "SQLiteMemoryStore",
    "StoreHealth",
    "UpdateDelta",
]
