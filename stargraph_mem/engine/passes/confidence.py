"""A rule's emitted confidence computed in Python, as the compiled CLIPS computes it: a
constant, a linear function of a variable, a variable's value, or an arithmetic operation
over values, facts' lifecycles (decay, retention, reinforcement) and the pass time, with
the same operations in the same order, rounded alike."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from stargraph_mem.compiler.expressions import arithmetic_operands
from stargraph_mem.compiler.program import DAY_US
from stargraph_mem.errors import EngineError
from stargraph_mem.ir.models import (
    AddOp,
    ClampOp,
    Defaults,
    EbbinghausOp,
    LinearConfidence,
    LinearDecayOp,
    MaxOp,
    MinOp,
    MultiplyOp,
    ReinforceOp,
    RetentionOp,
    VarConfidence,
    VarRef,
)
from stargraph_mem.ir.reference import boosted, retained
from stargraph_mem.model.layers import DEFAULT_HALF_LIVES
from stargraph_mem.stores.fact import EngineFact

Confidence = Callable[[Mapping[str, Any], Mapping[str, Any], int], float]
"""``(variable values, pattern references, pass time µs) → confidence``."""


def confidence_of(conf: Any, defaults: Defaults) -> Confidence:
    """The function computing a rule's emitted confidence."""
    if conf is None:
        constant = float(defaults.confidence)
        return lambda values, refs, now: constant
    if isinstance(conf, LinearConfidence):
        return lambda values, refs, now: _linear(conf, values)
    if isinstance(conf, VarConfidence):
        name = conf.from_
        return lambda values, refs, now: max(0.0, min(1.0, float(values[name])))
    if isinstance(conf, int | float):
        constant = float(conf)
        return lambda values, refs, now: constant
    half_lives = defaults.half_life_days
    return lambda values, refs, now: round_confidence(
        arithmetic(conf, values, refs, now, half_lives)
    )


CONFIDENCE_DECIMALS = 9
"""Arithmetic confidences are rounded to this many decimals (see :func:`round_confidence`)."""


def payload_number(op: Any, values: Mapping[str, Any]) -> float:
    """A ``number`` payload key computed by an operation (see :func:`arithmetic`; the
    checks admit no decay there), rounded to 9 decimals as a confidence is, not clamped."""
    return round(arithmetic(op, values, {}, 0), CONFIDENCE_DECIMALS)


def round_confidence(value: float) -> float:
    """Clamp to [0, 1], then round to 9 decimals, half to even on the float's exact binary
    value (Python's ``round``): same inputs, same bits, on every platform."""
    return round(max(0.0, min(1.0, value)), CONFIDENCE_DECIMALS)


def arithmetic(
    op: Any,
    values: Mapping[str, Any],
    refs: Mapping[str, Any],
    now_us: int,
    half_lives: Callable[[str], float | None] = DEFAULT_HALF_LIVES.get,
) -> float:
    """A typed confidence operation, evaluated in Python in the order the compiled CLIPS
    expression uses (the value a fact made in the pass carries in working memory);
    ``half_lives`` gives a layer's half-life in days (``None``: infinite)."""
    if isinstance(op, int | float):
        return float(op)
    if isinstance(op, VarRef):
        return float(values[op.var])
    items = [arithmetic(x, values, refs, now_us, half_lives) for x in arithmetic_operands(op)]
    if isinstance(op, ReinforceOp):
        return min(op.reinforce.cap, items[0] + op.reinforce.by)
    if isinstance(op, MultiplyOp):
        product = items[0]
        for item in items[1:]:
            product *= item
        return product
    if isinstance(op, MinOp | MaxOp):
        return min(items) if isinstance(op, MinOp) else max(items)
    if isinstance(op, AddOp):
        total = items[0]
        for item in items[1:]:  # left to right, as CLIPS adds (no compensated sum)
            total += item
        return total
    if isinstance(op, ClampOp):
        return max(op.clamp.lo, min(op.clamp.hi, items[0]))
    if isinstance(op, EbbinghausOp):
        return _ebbinghaus(op, refs[op.ebbinghaus.fact], now_us)
    if isinstance(op, LinearDecayOp):
        return _linear_decay(op, refs[op.linear_decay.fact], now_us)
    if isinstance(op, RetentionOp):
        return _retention(op, refs[op.retention.fact], now_us, half_lives)
    raise EngineError(f"unknown confidence operation: {type(op).__name__}")


def _ebbinghaus(op: EbbinghausOp, fact: EngineFact, now_us: int) -> float:
    """``c·exp(−λ·(d_now^k − d_prev^k))``, days from the fact's ``reinforced_at`` to now and
    to its ``valid_from``.

    A sweep that decays a fact every night replaces it by a fact whose confidence is
    already ``c0·exp(−λ·d_prev^k)``, and which keeps ``reinforced_at`` (lifecycle
    ``inherit``); the factors telescope, so any run schedule gives ``c0·exp(−λ·d_now^k)``,
    exactly the one-shot curve. A reinforcement after ``valid_from`` restarts the curve
    from the fact's current confidence (``d_prev`` is then 0). With ``boost``, a fact read
    since its ``valid_from`` first gains specification 003's access boost (capped at 1),
    once per sweep that sees it."""
    e = op.ebbinghaus
    anchor = decay_start(fact, e.since)

    def days(t_us: int) -> float:
        return max(0, t_us - anchor) / float(DAY_US)

    power = days(now_us) ** e.k - days(min(fact.valid_from_us, now_us)) ** e.k
    rate = e.lambda_ if e.untrusted_speed == 1.0 else e.lambda_ * speed(fact, e.untrusted_speed)
    confidence = fact.confidence
    if e.boost:
        read_since = fact.last_access_us > fact.valid_from_us
        confidence = boosted(confidence, fact.access_count, read_since)
    return confidence * math.exp(0.0 - rate * power)


def decay_start(fact: EngineFact, since: str) -> int:
    """Where a decay counts days from (µs): ``reinforced_at``, or the later of it and the
    fact's last access-recording read (a read restarts the curve, specification 003)."""
    if since == "last_access":
        return max(fact.reinforced_at_us, fact.last_access_us)
    return fact.reinforced_at_us


def speed(fact: EngineFact, untrusted: float) -> float:
    """How much faster a decay runs: ``untrusted`` for a fact of trust below 1.0, else 1
    (specification 004: auto-extracted facts decay 3× faster)."""
    return untrusted if fact.trust < 1.0 else 1.0


def _retention(
    op: RetentionOp, fact: EngineFact, now_us: int, half_lives: Callable[[str], float | None]
) -> float:
    """``c·Rt(x_now)/Rt(x_then)`` (see :class:`~stargraph_mem.ir.models.Retention`): ages in
    half-lives from the later of ``reinforced_at`` and the last read, to now and to the
    fact's ``valid_from``."""
    r = op.retention
    anchor = decay_start(fact, "last_access")
    half = r.half_life.total_seconds() / 86400.0 if r.half_life is not None else None
    if r.half_life is None:
        half = half_lives(fact.layer)
    factor = speed(fact, r.untrusted_speed)

    def age(t_us: int) -> float:
        if half is None or half <= 0.0:
            return 0.0
        return max(0, t_us - anchor) / float(DAY_US) * factor / half

    count = fact.access_count if r.boost else 0
    then = age(min(fact.valid_from_us, now_us))
    return retained(r.mode, fact.confidence, age(now_us), then, count, boost=r.boost)


def _linear_decay(op: LinearDecayOp, fact: EngineFact, now_us: int) -> float:
    """``c − per·(w_now − w_prev)``: whole windows since ``reinforced_at`` at now and at the
    fact's ``valid_from`` (the same telescoping as :func:`_ebbinghaus`)."""
    d = op.linear_decay
    every = d.every.total_microseconds()
    start = fact.reinforced_at_us
    since = min(fact.valid_from_us, now_us)
    windows = max(0, now_us - start) // every - max(0, since - start) // every
    return fact.confidence - d.per * float(windows)


def _linear(conf: LinearConfidence, values: Mapping[str, Any]) -> float:
    raw = conf.base + conf.per * float(values[conf.var])
    # same operations, same order as the compiled CLIPS expression
    return math.floor(max(0.0, min(conf.max, raw)) * 1_000_000.0 + 0.5) / 1_000_000.0
