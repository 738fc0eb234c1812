"""Cadence → CLIPS: the schedule program that decides which (rule, partition) pairs are due.

The runtime keeps three kinds of facts current and runs this program; it never decides
due-ness itself:

* ``(sm-sched-clock (now <µs>))``: the tick's time, UTC microseconds;
* ``(sm-sched-count (rule <index>) (part <p>) (pending <n>))``: episodes of partition ``p``
  after the rule's watermark (a count-based rule; ``n`` may be capped at the rule's N);
* ``(sm-sched-next (rule <index>) (part <p>) (at <µs>))``: the rule's next cron fire time
  for the partition, computed by croniter from the last run in the rule's time zone.
* ``(sm-sched-first (rule <index>) (part <p>) (at <µs>))`` and ``(sm-sched-last …)``: the
  times of the earliest and the latest episode the rule has not consumed in the partition
  (asserted only when it has some), for ``or_after`` and ``idle`` rules.

One defrule per enabled rule, emitted from its cadence, asserts
``(sm-sched-due (rule <index>) (part <p>))``. Rules and partitions travel as integers and
N and durations (in microseconds) as integer literals, so no author or user text reaches
CLIPS; defrule names use rule
ids, which match the IR's name pattern.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from stargraph_mem.errors import ScheduleError
from stargraph_mem.ir.models import NAME_PATTERN
from stargraph_mem.model.cadence import Cadence, duration_us

__all__ = [
    "SCHEDULE_TEMPLATES",
    "CadenceRule",
    "cadence_rule_clips",
    "next_fire",
    "schedule_program",
    "zone",
]

SCHEDULE_TEMPLATES = """\
(deftemplate sm-sched-clock (slot now (type INTEGER)))
(deftemplate sm-sched-count
  (slot rule (type INTEGER)) (slot part (type INTEGER)) (slot pending (type INTEGER)))
(deftemplate sm-sched-next
  (slot rule (type INTEGER)) (slot part (type INTEGER)) (slot at (type INTEGER)))
(deftemplate sm-sched-first
  (slot rule (type INTEGER)) (slot part (type INTEGER)) (slot at (type INTEGER)))
(deftemplate sm-sched-last
  (slot rule (type INTEGER)) (slot part (type INTEGER)) (slot at (type INTEGER)))
(deftemplate sm-sched-due (slot rule (type INTEGER)) (slot part (type INTEGER)))
"""


class CadenceRule(Protocol):
    """What the emitter needs of a compiled rule (``CompiledRule`` satisfies it)."""

    @property
    def id(self) -> str: ...

    @property
    def index(self) -> int: ...

    @property
    def cadence(self) -> Cadence: ...


def _int(value: int) -> str:
    """An integer literal (bools and other types refused: the value came from the IR)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return str(value)


def _name(rule_id: str) -> str:
    """A defrule name for ``rule_id``, which must match the IR's name pattern."""
    if not re.match(NAME_PATTERN, rule_id):
        raise ScheduleError(f"rule id {rule_id!r} is not a valid rule name", rule_id=rule_id)
    return f"sm-due-{rule_id}"


def every_clips(rule: CadenceRule, every: int) -> str:
    """Due once at least ``every`` episodes arrived after the rule's watermark."""
    index = _int(rule.index)
    return (
        f"(defrule {_name(rule.id)}\n"
        f"  (sm-sched-count (rule {index}) (part ?p) (pending ?n&:(>= ?n {_int(every)})))\n"
        "  =>\n"
        f"  (assert (sm-sched-due (rule {index}) (part ?p))))\n"
    )


def cron_clips(rule: CadenceRule) -> str:
    """Due once the clock reached the partition's next fire time."""
    index = _int(rule.index)
    return (
        f"(defrule {_name(rule.id)}\n"
        "  (sm-sched-clock (now ?now))\n"
        f"  (sm-sched-next (rule {index}) (part ?p) (at ?t&:(<= ?t ?now)))\n"
        "  =>\n"
        f"  (assert (sm-sched-due (rule {index}) (part ?p))))\n"
    )


def idle_clips(rule: CadenceRule, idle_us: int) -> str:
    """Due once the clock is ``idle_us`` past the latest episode the rule has not consumed:
    no episode arrived for that long (a new one moves the latest, so each quiet spell
    fires once: the pass consumes what made it due)."""
    index = _int(rule.index)
    return (
        f"(defrule {_name(rule.id)}\n"
        "  (sm-sched-clock (now ?now))\n"
        f"  (sm-sched-last (rule {index}) (part ?p) (at ?t&:(<= (+ ?t {_int(idle_us)}) ?now)))\n"
        "  =>\n"
        f"  (assert (sm-sched-due (rule {index}) (part ?p))))\n"
    )


def or_after_clips(rule: CadenceRule, every: int, after_us: int) -> str:
    """Due at ``every`` episodes after the watermark, or once the clock is ``after_us`` past
    the earliest episode the rule has not consumed, whichever comes first."""
    index = _int(rule.index)
    return (
        f"(defrule {_name(rule.id)}\n"
        f"  (or (sm-sched-count (rule {index}) (part ?p) (pending ?n&:(>= ?n {_int(every)})))\n"
        "      (and (sm-sched-clock (now ?now))\n"
        f"           (sm-sched-first (rule {index}) (part ?p)\n"
        f"             (at ?t&:(<= (+ ?t {_int(after_us)}) ?now)))))\n"
        "  =>\n"
        f"  (assert (sm-sched-due (rule {index}) (part ?p))))\n"
    )


def cadence_rule_clips(rule: CadenceRule) -> str:
    """The defrule for one rule, dispatched on its cadence kind."""
    cadence = rule.cadence
    if cadence.every is not None and cadence.or_after is not None:
        return or_after_clips(rule, cadence.every, duration_us(cadence.or_after))
    if cadence.every is not None:
        return every_clips(rule, cadence.every)
    if cadence.idle is not None:
        return idle_clips(rule, duration_us(cadence.idle))
    return cron_clips(rule)


def schedule_program(rules: Sequence[CadenceRule]) -> str:
    """The whole schedule program for a pack's (enabled, compiled) rules."""
    return SCHEDULE_TEMPLATES + "".join(cadence_rule_clips(rule) for rule in rules)


def zone(cadence: Cadence, rule_id: str) -> ZoneInfo:
    """The cadence's time zone; an unknown name is a :class:`ScheduleError` naming the rule."""
    try:
        return ZoneInfo(cadence.tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(
            f"rule '{rule_id}': unknown time zone {cadence.tz!r}", rule_id=rule_id
        ) from exc


def next_fire(cadence: Cadence, after: datetime, rule_id: str) -> datetime:
    """The first cron time strictly after ``after``, as croniter computes it in the rule's tz.

    DST gaps and repeats behave as croniter defines them. A bad or impossible expression
    (``0 0 31 2 *``) is a :class:`ScheduleError` naming the rule.
    """
    if cadence.cron is None:
        raise ScheduleError(f"rule '{rule_id}' has no cron cadence", rule_id=rule_id)
    from croniter import croniter  # here: compiling a pack needs no cron arithmetic

    start = after.astimezone(zone(cadence, rule_id))
    try:
        fire: datetime = croniter(cadence.cron, start).get_next(datetime)
    except ValueError as exc:  # croniter's errors derive from ValueError
        raise ScheduleError(
            f"rule '{rule_id}': cron {cadence.cron!r} has no time after {start.isoformat()}: {exc}",
            rule_id=rule_id,
        ) from exc
    return fire
