"""stargraph_mem: deterministic, auditable episodic-to-semantic memory consolidation.

``__all__`` is the public API: the :class:`Consolidator` and the report its calls return,
the models (episodes, facts, deltas, rules), the stores, compiled packs, salience scorers
and the errors. Each name is imported on first use (PEP 562), so ``import stargraph_mem``
alone loads none of the package's modules (nor pydantic, aiosqlite or CLIPS).
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; mypy knows the name
if TYPE_CHECKING:
    from stargraph_mem.compiler.pack import CompiledPack, compile_file, compile_text
    from stargraph_mem.engine.api import Consolidator
    from stargraph_mem.engine.passes.report import ConsolidationReport, PassReport
    from stargraph_mem.errors import (
        CompileError,
        ConsolidationRuleError,
        CorruptRowError,
        DamagedDatabaseError,
        DatabaseUnavailableError,
        DeltaProvenanceError,
        DeltaValidationError,
        DuplicateEpisodeError,
        EmbedderError,
        EmbedderUnavailableError,
        EngineError,
        EntityError,
        EntityNotFoundError,
        FactConflictError,
        FactNotFoundError,
        FactStatusError,
        ForeignDatabaseError,
        IRError,
        IRIssue,
        LimitError,
        MalformedRuleError,
        MemoryScopeError,
        MigrationNotSupported,
        NewerSchemaError,
        PassConflictError,
        RecallError,
        ScaffoldError,
        ScheduleError,
        SearchError,
        StalePassError,
        StargraphMemError,
        StoreConfigError,
        StoreError,
    )
    from stargraph_mem.model.deltas import (
        AddDelta,
        DeleteDelta,
        FactPayload,
        MemoryDelta,
        NoopDelta,
        UpdateDelta,
    )
    from stargraph_mem.model.episodes import Episode
    from stargraph_mem.model.facts import (
        Fact,
        FactAccess,
        FactHit,
        FactPattern,
        StatusChange,
        StatusEvent,
    )
    from stargraph_mem.model.limits import Limits
    from stargraph_mem.salience import RuleBasedScorer, SalienceContext, SalienceScorer
    from stargraph_mem.stores.fact import Explanation, FactStore
    from stargraph_mem.stores.memory import MemoryStore
    from stargraph_mem.stores.models import ConsolidationRule
    from stargraph_mem.stores.scope import Partition
    from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
    from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore


_LAZY: dict[str, str] = {
    # the Consolidator and what its calls return
    "Consolidator": "stargraph_mem.engine.api",
    "ConsolidationReport": "stargraph_mem.engine.passes.report",
    "PassReport": "stargraph_mem.engine.passes.report",
    "Partition": "stargraph_mem.stores.scope",
    # models
    "Episode": "stargraph_mem.model.episodes",
    "Fact": "stargraph_mem.model.facts",
    "FactPattern": "stargraph_mem.model.facts",
    "FactHit": "stargraph_mem.model.facts",
    "FactAccess": "stargraph_mem.model.facts",
    "StatusEvent": "stargraph_mem.model.facts",
    "StatusChange": "stargraph_mem.model.facts",
    "AddDelta": "stargraph_mem.model.deltas",
    "UpdateDelta": "stargraph_mem.model.deltas",
    "DeleteDelta": "stargraph_mem.model.deltas",
    "NoopDelta": "stargraph_mem.model.deltas",
    "MemoryDelta": "stargraph_mem.model.deltas",
    "FactPayload": "stargraph_mem.model.deltas",
    "ConsolidationRule": "stargraph_mem.stores.models",
    "Explanation": "stargraph_mem.stores.fact",
    # stores: the specification's protocols and their SQLite implementations
    "MemoryStore": "stargraph_mem.stores.memory",
    "FactStore": "stargraph_mem.stores.fact",
    "SQLiteMemoryStore": "stargraph_mem.stores.sqlite_memory",
    "SQLiteFactStore": "stargraph_mem.stores.sqlite_fact",
    # rule packs and salience
    "CompiledPack": "stargraph_mem.compiler.pack",
    "compile_file": "stargraph_mem.compiler.pack",
    "compile_text": "stargraph_mem.compiler.pack",
    "SalienceScorer": "stargraph_mem.salience",
    "SalienceContext": "stargraph_mem.salience",
    "RuleBasedScorer": "stargraph_mem.salience",
    # errors
    "StargraphMemError": "stargraph_mem.errors",
    "IRError": "stargraph_mem.errors",
    "IRIssue": "stargraph_mem.errors",
    "LimitError": "stargraph_mem.errors",
    "Limits": "stargraph_mem.model.limits",
    "CompileError": "stargraph_mem.errors",
    "ScaffoldError": "stargraph_mem.errors",
    "EngineError": "stargraph_mem.errors",
    "ConsolidationRuleError": "stargraph_mem.errors",
    "MalformedRuleError": "stargraph_mem.errors",
    "ScheduleError": "stargraph_mem.errors",
    "PassConflictError": "stargraph_mem.errors",
    "RecallError": "stargraph_mem.errors",
    "StoreError": "stargraph_mem.errors",
    "MemoryScopeError": "stargraph_mem.errors",
    "DuplicateEpisodeError": "stargraph_mem.errors",
    "FactConflictError": "stargraph_mem.errors",
    "FactNotFoundError": "stargraph_mem.errors",
    "FactStatusError": "stargraph_mem.errors",
    "DeltaProvenanceError": "stargraph_mem.errors",
    "DeltaValidationError": "stargraph_mem.errors",
    "MigrationNotSupported": "stargraph_mem.errors",
    "StalePassError": "stargraph_mem.errors",
    "SearchError": "stargraph_mem.errors",
    "StoreConfigError": "stargraph_mem.errors",
    "CorruptRowError": "stargraph_mem.errors",
    "DatabaseUnavailableError": "stargraph_mem.errors",
    "DamagedDatabaseError": "stargraph_mem.errors",
    "ForeignDatabaseError": "stargraph_mem.errors",
    "NewerSchemaError": "stargraph_mem.errors",
    "EmbedderError": "stargraph_mem.errors",
    "EmbedderUnavailableError": "stargraph_mem.errors",
    "EntityError": "stargraph_mem.errors",
    "EntityNotFoundError": "stargraph_mem.errors",
}
"""Public name → the module that defines it."""

__all__ = [
    "AddDelta",
    "CompileError",
    "CompiledPack",
    "ConsolidationReport",
    "ConsolidationRule",
    "ConsolidationRuleError",
    "Consolidator",
    "CorruptRowError",
    "DamagedDatabaseError",
    "DatabaseUnavailableError",
    "DeleteDelta",
    "DeltaProvenanceError",
    "DeltaValidationError",
    "DuplicateEpisodeError",
    "EmbedderError",
    "EmbedderUnavailableError",
    "EngineError",
    "EntityError",
    "EntityNotFoundError",
    "Episode",
    "Explanation",
    "Fact",
    "FactAccess",
    "FactConflictError",
    "FactHit",
    "FactNotFoundError",
    "FactPattern",
    "FactPayload",
    "FactStatusError",
    "FactStore",
    "ForeignDatabaseError",
    "IRError",
    "IRIssue",
    "LimitError",
    "Limits",
    "MalformedRuleError",
    "MemoryDelta",
    "MemoryScopeError",
    "MemoryStore",
    "MigrationNotSupported",
    "NewerSchemaError",
    "NoopDelta",
    "Partition",
    "PassConflictError",
    "PassReport",
    "RecallError",
    "RuleBasedScorer",
    "SQLiteFactStore",
    "SQLiteMemoryStore",
    "SalienceContext",
    "SalienceScorer",
    "ScaffoldError",
    "ScheduleError",
    "SearchError",
    "StalePassError",
    "StargraphMemError",
    "StatusChange",
    "StatusEvent",
    "StoreConfigError",
    "StoreError",
    "UpdateDelta",
    "__version__",
    "compile_file",
    "compile_text",
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
