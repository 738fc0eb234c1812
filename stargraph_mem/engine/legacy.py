"""The specification's ``MemoryStore.consolidate(rule)`` contract, run through the runtime.

``consolidate(rule)`` runs the shipped default classification pack over every partition,
incrementally (one watermark per consolidation rule id), honours the rule's legacy
``when_filter`` and ``then_emits``, stamps ``rule.id`` on every delta, applies the deltas
to the fact store in the same database and returns them.

Stores reach :func:`consolidate_rule` by name, when ``consolidate(rule)`` first runs
(:func:`stargraph_mem.stores.memory.consolidation_hook`); nothing registers it on import.
"""

from __future__ import annotations

from pathlib import Path

from stargraph_mem.compiler.pack import CompiledPack, compile_file
from stargraph_mem.engine.api import runtime_for
from stargraph_mem.engine.consolidate import Consolidation, LegacyFilter
from stargraph_mem.engine.filters import check_when_filter
from stargraph_mem.engine.runtime import Stamp
from stargraph_mem.errors import ConsolidationRuleError
from stargraph_mem.model.deltas import MemoryDelta
from stargraph_mem.model.time import utc_now
from stargraph_mem.stores.models import ConsolidationRule
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
    """Consolidate every partition's new episodes under ``rule``; return the applied deltas.

    A ``when_filter`` that cannot be one safe SQL expression is refused before any pass
    runs; one refused while running (work budget, time limit, value size) stops the run
    at that partition's pass, which applies nothing (partitions already consolidated keep
    their results). Either way the :class:`ConsolidationRuleError` names ``rule.id``.
    """
    compiled = default_pack()
    legacy = None
    if rule.when_filter:
        check_when_filter(rule.when_filter, rule_id=rule.id)
        legacy = LegacyFilter(rule.when_filter, "*")
    stamp = Stamp(rule.id, tuple(rule.then_emits))
    now = utc_now()
    deltas: list[MemoryDelta] = []
    async with SQLiteFactStore(store.path) as facts:
        consolidation = Consolidation(runtime_for(compiled), store, facts)
        for partition in await store.partitions():
            try:
                reports = await consolidation.run(partition, now=now, legacy=legacy, stamp=stamp)
            except ConsolidationRuleError as exc:
                restated = _as_rule(exc, rule.id)
                if restated is exc:
                    raise
                raise restated from exc
            for report in reports:
                deltas.extend(report.deltas)
    return deltas


def _as_rule(exc: ConsolidationRuleError, rule_id: str) -> ConsolidationRuleError:
    """``exc`` (raised for a rule of the default pack) restated for ``rule_id``, or itself."""
    detail = exc.context.get("detail")
    if not isinstance(detail, str) or exc.context.get("rule_id") == rule_id:
        return exc
    context = {**exc.context, "rule_id": rule_id, "pack_rule_id": exc.context.get("rule_id")}
    return ConsolidationRuleError(f"rule '{rule_id}': {detail}", **context)
