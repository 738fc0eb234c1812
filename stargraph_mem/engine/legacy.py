"""The specification's ``MemoryStore.consolidate(rule)`` contract, run through the runtime.

``consolidate(rule)`` runs the shipped default classification pack over every partition,
incrementally (one watermark per consolidation rule id), honours the rule's legacy
``when_filter`` and ``then_emits``, stamps ``rule.id`` on every delta, applies the deltas
to the fact store in the same database and returns them.
"""

from __future__ import annotations

from pathlib import Path

from stargraph_mem.compiler.pack import CompiledPack, compile_file
from stargraph_mem.engine.api import runtime_for
from stargraph_mem.engine.consolidate import Consolidation, LegacyFilter
from stargraph_mem.engine.runtime import Stamp
from stargraph_mem.stores.memory import register_consolidation_hook
from stargraph_mem.stores.models import ConsolidationRule, MemoryDelta, utc_now
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

_CANDIDATES = (
    Path(__file__).resolve().parents[1] / "_rules" / "default.yaml",
    Path(__file__).resolve().parents[2] / "rules" / "default.yaml",
)
_DEFAULT: list[CompiledPack] = []


def default_pack() -> CompiledPack:
    """The compiled shipped ``rules/default.yaml`` (compiled once per process)."""
    if not _DEFAULT:
        path = next((p for p in _CANDIDATES if p.exists()), _CANDIDATES[-1])
        _DEFAULT.append(compile_file(path))
    return _DEFAULT[0]


async def consolidate_rule(store: SQLiteMemoryStore, rule: ConsolidationRule) -> list[MemoryDelta]:
    """Consolidate every partition's new episodes under ``rule``; return the applied deltas."""
    compiled = default_pack()
    legacy = LegacyFilter(rule.when_filter, "*") if rule.when_filter else None
    stamp = Stamp(rule.id, tuple(rule.then_emits))
    now = utc_now()
    deltas: list[MemoryDelta] = []
    async with SQLiteFactStore(store.path) as facts:
        consolidation = Consolidation(runtime_for(compiled), store, facts)
        for partition in await store.partitions():
            for report in await consolidation.run(partition, now=now, legacy=legacy, stamp=stamp):
                deltas.extend(report.deltas)
    return deltas


register_consolidation_hook(consolidate_rule)
