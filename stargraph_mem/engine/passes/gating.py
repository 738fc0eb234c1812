"""A rule's salience gate: the context its scorer sees for each episode.

The gate tells the scorer three things about an episode, all from the rule itself:

* ``tau_seconds``: the rule's recency time constant (``salience.tau_seconds``).
* ``rule_match``: the fraction of the conditions of the rule's ``episode`` pattern the
  episode satisfies, judged by the reference evaluator (:mod:`stargraph_mem.ir.reference`).
  A test against a variable bound by another pattern (a fact, ``earlier``, ``count``) is
  left out, since the gate runs before any match; a pattern without conditions gives 1.
* ``importance``: the value of the rule's ``salience.importance_key`` field, a number in
  [0, 1]; absent (or ``null``) counts as 0. Any other value is unusable: the episode is
  rejected for that rule (:class:`UnusableImportance`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stargraph_mem.ir.models import (
    EPISODE_BUILTINS,
    Condition,
    EpisodeItem,
    FieldType,
    Rule,
    VarRef,
    operator_attribute,
)
from stargraph_mem.ir.reference import ILL_TYPED, MISSING, evaluate, raw_value, read_value
from stargraph_mem.model.time import to_us
from stargraph_mem.salience import SalienceContext
from stargraph_mem.stores.memory import EpisodeRecord

__all__ = ["RuleGate", "UnusableImportance"]


class UnusableImportance(ValueError):
    """An episode's importance value is not a number in [0, 1]."""


def _without(cond: Condition, unknown: set[str]) -> Condition:
    """``cond`` without its tests against variables the gate cannot know."""
    drop = {
        operator_attribute(op): None
        for op, operand in cond.tests()
        if isinstance(operand, VarRef) and operand.var in unknown
    }
    return cond.model_copy(update=drop) if drop else cond


@dataclass(frozen=True, slots=True)
class RuleGate:
    """One rule's gate: its minimum, τ, importance field and episode conditions."""

    rule_id: str
    minimum: float
    tau_seconds: float
    importance_key: str | None
    conditions: tuple[tuple[str, FieldType, Condition], ...]

    @classmethod
    def of(cls, rule: Rule, fields: Mapping[str, FieldType]) -> RuleGate:
        """The gate of ``rule`` (which has one); ``fields`` are the pack's declared fields."""
        gate = rule.salience
        if gate is None:
            raise ValueError(f"rule '{rule.id}' has no salience gate")
        types = {**EPISODE_BUILTINS, **fields}
        where = next((w.episode.where for w in rule.when if isinstance(w, EpisodeItem)), {})
        conditions = tuple((name, types[name], cond) for name, cond in where.items())
        return cls(rule.id, gate.min, gate.tau_seconds, gate.importance_key, conditions)

    def rule_match(self, record: EpisodeRecord, now_us: int) -> float:
        """The fraction of the episode pattern's conditions ``record`` satisfies."""
        if not self.conditions:
            return 1.0
        variables = self._bound(record)
        unknown = {
            operand.var
            for _, _, cond in self.conditions
            for _, operand in cond.tests()
            if isinstance(operand, VarRef) and operand.var not in variables
        }
        met = sum(
            evaluate(
                _without(cond, unknown),
                ftype,
                raw_value(record, name),
                now_us=now_us,
                variables=variables,
            )
            for name, ftype, cond in self.conditions
        )
        return met / len(self.conditions)

    def _bound(self, record: EpisodeRecord) -> dict[str, Any]:
        """Variables the episode pattern binds, with the values ``record`` gives them."""
        out: dict[str, Any] = {}
        for name, ftype, cond in self.conditions:
            if cond.bind is None:
                continue
            value = read_value(ftype, raw_value(record, name))
            if value is not MISSING and value is not ILL_TYPED:
                out[cond.bind] = value
        return out

    def importance(self, record: EpisodeRecord) -> float:
        """The episode's importance: its ``importance_key`` value, 0 when absent."""
        key = self.importance_key
        if key is None:
            return 0.0
        raw = record.metadata.get(key)
        value = read_value("number", raw)
        if value is MISSING:
            return 0.0
        if value is ILL_TYPED or not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise UnusableImportance(f"importance '{key}' must be a number in [0, 1] (got {raw!r})")
        return float(value)

    def context(self, record: EpisodeRecord, now: datetime) -> SalienceContext:
        """What the scorer is told about ``record`` for this rule at pass time ``now``."""
        return SalienceContext.for_record(
            record,
            now=now,
            rule_match=self.rule_match(record, to_us(now)),
            importance=self.importance(record),
            tau_seconds=self.tau_seconds,
        )
