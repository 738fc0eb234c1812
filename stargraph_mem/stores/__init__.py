"""Stores: episodic memory, promoted facts, and the models they exchange.

Each public name is imported on first use (PEP 562), so importing one module of the
package (a dialect, the search limits, the database URL parser) does not load every store.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; mypy knows the name
if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    "ApplyResult": "stargraph_mem.stores.fact",
    "AuditRow": "stargraph_mem.stores.fact",
    "EngineFact": "stargraph_mem.stores.fact",
    "Explanation": "stargraph_mem.stores.fact",
    "FactStore": "stargraph_mem.stores.fact",
    "FathomAdapter": "stargraph_mem.stores.fact",
    "ProvenanceAdapter": "stargraph_mem.stores.fact",
    "ProvenanceBundle": "stargraph_mem.stores.fact",
    "Rejection": "stargraph_mem.stores.fact",
    "SourceEpisode": "stargraph_mem.stores.fact",
    "WatermarkAdvance": "stargraph_mem.stores.fact",
    "CheckedRead": "stargraph_mem.stores.memory",
    "EpisodeRecord": "stargraph_mem.stores.memory",
    "IncrementalMemoryStore": "stargraph_mem.stores.memory",
    "MemoryStore": "stargraph_mem.stores.memory",
    "QuarantinedRow": "stargraph_mem.stores.memory",
    "AddDelta": "stargraph_mem.stores.models",
    "Cadence": "stargraph_mem.stores.models",
    "ConsolidationRule": "stargraph_mem.stores.models",
    "DeleteDelta": "stargraph_mem.stores.models",
    "Episode": "stargraph_mem.stores.models",
    "Fact": "stargraph_mem.stores.models",
    "FactPattern": "stargraph_mem.stores.models",
    "FactPayload": "stargraph_mem.stores.models",
    "MemoryDelta": "stargraph_mem.stores.models",
    "MigrationOp": "stargraph_mem.stores.models",
    "MigrationPlan": "stargraph_mem.stores.models",
    "NoopDelta": "stargraph_mem.stores.models",
    "StoreHealth": "stargraph_mem.stores.models",
    "UpdateDelta": "stargraph_mem.stores.models",
    "Partition": "stargraph_mem.stores.scope",
    "SQLiteFactStore": "stargraph_mem.stores.sqlite_fact",
    "SQLiteMemoryStore": "stargraph_mem.stores.sqlite_memory",
}
"""Public name → the module that defines it."""

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


if not TYPE_CHECKING:  # mypy reads the imports above: a misspelt name stays an error

    def __getattr__(name: str) -> object:
        """Import a public name from its module on first use, and keep it here."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
