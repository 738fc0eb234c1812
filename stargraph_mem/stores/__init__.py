"""Stores: episodic memory, promoted facts, and the models they exchange."""

from __future__ import annotations

from stargraph_mem.stores.fact import (
    ApplyResult,
    AuditRow,
    EngineFact,
    Explanation,
    FactStore,
    FathomAdapter,
    ProvenanceAdapter,
    ProvenanceBundle,
    Rejection,
    SourceEpisode,
    WatermarkAdvance,
)
from stargraph_mem.stores.memory import (
    CheckedRead,
    EpisodeRecord,
    IncrementalMemoryStore,
    MemoryStore,
    QuarantinedRow,
)
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
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

__all__ = [
    "AddDelta",
    "ApplyResult",
    "AuditRow",
    "Cadence",
    "CheckedRead",
    "ConsolidationRule",
    "DeleteDelta",
    "EngineFact",
    "Episode",
    "EpisodeRecord",
    "Explanation",
    "Fact",
    "FactPattern",
    "FactPayload",
    "FactStore",
    "FathomAdapter",
    "IncrementalMemoryStore",
    "MemoryDelta",
    "MemoryStore",
    "MigrationOp",
    "MigrationPlan",
    "NoopDelta",
    "Partition",
    "ProvenanceAdapter",
    "ProvenanceBundle",
    "QuarantinedRow",
    "Rejection",
    "SQLiteFactStore",
    "SQLiteMemoryStore",
    "SourceEpisode",
    "StoreHealth",
    "UpdateDelta",
    "WatermarkAdvance",
]
