"""The specification's ``MemoryStore.consolidate(rule)`` contract, run through the runtime.

``consolidate(rule)`` runs the shipped default classification pack over every partition
with new episodes, incrementally (one watermark per consolidation rule id), honours the
rule's legacy ``when_filter`` and the delta kinds named in ``then_emits``, stamps
``rule.id`` on every delta, applies the deltas to the fact store in the same database and
returns them. As the specification says, a call runs the rule: the cadence says when a
scheduler should call, not whether a direct call does anything. Re-applying a returned
delta (``fact_store.apply_delta(d)``, as the specification's callers do) is a no-op.

With ``consolidate(rule, due_only=True)`` the rule's cadence decides, per partition,
whether the call consolidates it:

- ``{every: N}``: when at least N episodes arrived after the rule's watermark; the pass
  then consumes all of them. Fewer stay pending (no deltas for that partition).
- ``{idle: DURATION}``: once no episode after the watermark is younger than the
  duration; ``{every: N, or_after: DURATION}`` also once the oldest of them is that old.
- ``{cron: …}`` (the default is the nightly sleep cycle): the first call for a partition
  consolidates it; later calls do only once a cron time (in the rule's ``tz``) passed
  since the last call that did.

Whatever the cadence, the run time is stored (``rule_runs``, pack :data:`RUNS_PACK`) in
the transaction that applies the pass, so it survives restarts.

Stores reach :func:`consolidate_rule` by name, when ``consolidate(rule)`` first runs
(:func:`stargraph_mem.stores.memory.consolidation_hook`); nothing registers it on import.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Final

from stargraph_mem.compiler.cadence import next_fire
from stargraph_mem.compiler.pack import CompiledPack, compile_file
from stargraph_mem.engine.api import runtime_for
from stargraph_mem.engine.passes.filters import check_when_filter
from stargraph_mem.engine.passes.outputs import Stamp
from stargraph_mem.engine.passes.report import LegacyFilter
from stargraph_mem.engine.passes.runner import PassRunner
from stargraph_mem.engine.schedule.scheduler import registered_cadence_text
from stargraph_mem.errors import ConsolidationRuleError
from stargraph_mem.model.cadence import span_due_us
from stargraph_mem.model.deltas import MemoryDelta
from stargraph_mem.model.time import from_us, to_us, utc_now
from stargraph_mem.stores.models import ConsolidationRule
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite.schedule import RuleRun, RunState, SQLiteScheduleStore
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

RUNS_PACK: Final = "consolidate(rule)"
"""The ``rule_runs`` pack name under which direct ``consolidate(rule)`` calls record runs."""

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


async def consolidate_rule(
    store: SQLiteMemoryStore, rule: ConsolidationRule, *, due_only: bool = False
) -> list[MemoryDelta]:
    """Consolidate the new episodes of every partition (every due one with ``due_only``)
    under ``rule``; return the deltas.

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
    stamp = Stamp(rule.id, rule.kinds)
    now = utc_now()
    deltas: list[MemoryDelta] = []
    async with SQLiteFactStore(store.path) as facts:
        runner = PassRunner(runtime_for(compiled), store, facts)
        runs = await _run_states(store, rule) if due_only else {}
        for partition in await store.partitions():
            due = await _due(runner, rule, partition, runs, now) if due_only else []
            if due is None:
                continue
            try:
                reports = await runner.run(partition, now=now, legacy=legacy, stamp=stamp, runs=due)
            except ConsolidationRuleError as exc:
                restated = _as_rule(exc, rule.id)
                if restated is exc:
                    raise
                raise restated from exc
            for report in reports:
                deltas.extend(report.deltas)
    return deltas


async def _run_states(
    store: SQLiteMemoryStore, rule: ConsolidationRule
) -> dict[tuple[str, str], RunState]:
    """Stored runs of ``rule`` by (rule id, partition key): every pass records its run
    (a cron cadence is decided on them)."""
    async with SQLiteScheduleStore(store.path) as schedule:
        await _register(schedule, rule)
        return await schedule.runs(RUNS_PACK)


async def _register(schedule: SQLiteScheduleStore, rule: ConsolidationRule) -> None:
    """Register ``rule``'s cadence under :data:`RUNS_PACK` beside the rules registered
    before (so ``status`` shows its partitions), its pending episodes counted after the
    default pack's watermarks, where its passes keep them."""
    text = registered_cadence_text(rule.cadence, watermarks=default_pack().name)
    rows = {rid: (rid, index, cadence) for rid, index, cadence in (
        (await schedule.registered()).get(RUNS_PACK, [])
    )}  # fmt: skip
    known = rows.get(rule.id)
    if known is not None and known[2] == text:
        return
    index = known[1] if known is not None else max((r[1] for r in rows.values()), default=-1) + 1
    rows[rule.id] = (rule.id, index, text)
    await schedule.register(RUNS_PACK, sorted(rows.values(), key=lambda r: r[1]))


async def _due(
    runner: PassRunner,
    rule: ConsolidationRule,
    partition: Partition,
    runs: dict[tuple[str, str], RunState],
    now: datetime,
) -> list[RuleRun] | None:
    """The run records to write when ``partition`` is due under ``rule``, else ``None``."""
    every = rule.cadence.every
    if every is not None or rule.cadence.idle is not None:
        mark = await runner.facts.watermark(runner.pack, rule.id, partition)
        pending = await runner.memory.count_since(partition, mark)
        due = (every is not None and pending >= every) or bool(
            pending and await _due_by_time(runner, rule, partition, mark, now)
        )
        return _run(rule, partition, runs, now) if due else None
    state = runs.get((rule.id, partition.key))
    if state is not None and next_fire(rule.cadence, from_us(state.since_us), rule.id) > now:
        return None
    return _run(rule, partition, runs, now)


def _run(
    rule: ConsolidationRule,
    partition: Partition,
    runs: dict[tuple[str, str], RunState],
    now: datetime,
) -> list[RuleRun]:
    """The run record of one due partition (every cadence records its last run)."""
    state = runs.get((rule.id, partition.key))
    expect = "" if state is None else state.token
    return [RuleRun(RUNS_PACK, rule.id, partition, now, uuid.uuid4().hex, expect)]


async def _due_by_time(
    runner: PassRunner, rule: ConsolidationRule, partition: Partition, mark: int, now: datetime
) -> bool:
    """Whether an ``idle`` / ``or_after`` cadence is due at ``now`` by the times of the
    episodes after the rule's watermark."""
    times = [to_us(r.timestamp) for r in await runner.memory.since(partition, mark)]
    due_us = span_due_us(rule.cadence, min(times), max(times)) if times else None
    return due_us is not None and due_us <= to_us(now)


def _as_rule(exc: ConsolidationRuleError, rule_id: str) -> ConsolidationRuleError:
    """``exc`` (raised for a rule of the default pack) restated for ``rule_id``, or itself."""
    detail = exc.context.get("detail")
    if not isinstance(detail, str) or exc.context.get("rule_id") == rule_id:
        return exc
    context = {**exc.context, "rule_id": rule_id, "pack_rule_id": exc.context.get("rule_id")}
    return ConsolidationRuleError(f"rule '{rule_id}': {detail}", **context)
