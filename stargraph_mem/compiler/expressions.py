"""The CLIPS expressions the emitters share: a condition's test terms (one small function
per operator), and the decay, boost and retention arithmetic of lifecycle operators.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from stargraph_mem.compiler.clips_text import clips_float, clips_literal, clips_string
from stargraph_mem.compiler.program import literal_value
from stargraph_mem.ir.models import (
    AddOp,
    ClampOp,
    EbbinghausOp,
    FieldType,
    LinearDecayOp,
    MaxOp,
    MinOp,
    MultiplyOp,
    ReinforceOp,
    RetentionOp,
    VarRef,
)
from stargraph_mem.ir.operators import (
    ACCESS_BOOST_CAP,
    ACCESS_BOOST_PER,
    ACCESS_BOOST_SCALE,
)
from stargraph_mem.ir.reference import evaluate, normal_form_of


@dataclass(frozen=True)
class Term:
    """One test to emit: the operand ``value`` against slot variable ``v`` of ``ftype``."""

    operand_as: Callable[[FieldType, Any], str]
    """The CLIPS text of an operand as a value of a type (a literal, or a rule variable)."""
    ftype: FieldType
    value: Any
    v: str
    alone: bool
    """The only test on the slot: a literal beside another could contradict it."""

    def operand(self, ftype: FieldType | None = None) -> str:
        return self.operand_as(ftype or self.ftype, self.value)

    def literals(self) -> str:
        return " ".join(clips_literal(literal_value(self.ftype, x), self.ftype) for x in self.value)


def _clips_eq(t: Term) -> list[str]:
    x = t.operand()
    if t.ftype == "number" or (isinstance(t.value, VarRef) and t.ftype in ("integer", "timestamp")):
        return [f":(and (numberp {t.v}) (= {t.v} {x}))"]
    # a bare literal lets CLIPS hash the test, but CLIPS refuses to build a pattern whose
    # literal constraints contradict (eq "" with ne ""): beside other tests, a predicate
    return [x] if t.alone else [f":(eq {t.v} {x})"]


def _clips_ne(t: Term) -> list[str]:
    x = t.operand()
    if t.ftype in ("number", "integer", "timestamp"):
        return [f":(or (not (numberp {t.v})) (<> {t.v} {x}))"]
    return [f"~{x}"] if t.alone else [f":(neq {t.v} {x})"]


def _clips_in(t: Term) -> list[str]:
    return [f":(member$ {t.v} (create$ {t.literals()}))"]


def _clips_not_in(t: Term) -> list[str]:
    return [f":(not (member$ {t.v} (create$ {t.literals()})))"]


def _clips_order(cmp: str) -> Callable[[Term], list[str]]:
    def emit(t: Term) -> list[str]:
        return [f":(and (numberp {t.v}) ({cmp} {t.v} {t.operand()}))"]

    return emit


def _clips_exists(t: Term) -> list[str]:
    return []  # presence is required by the constraint's ~nil / ~"" term


def _clips_missing(t: Term) -> list[str]:
    return ['""'] if t.ftype == "list" else ["nil"]


def _clips_contains(t: Term) -> list[str]:
    x = t.operand("string")
    if t.ftype == "list":
        # items are stored space-separated: an operand with a space is never an item
        found = f'(str-index (str-cat " " {x} " ") (str-cat " " {t.v} " "))'
        if isinstance(t.value, VarRef):
            return [f':(and (not (str-index " " {x})) {found})']
        return [f":{found}"]
    return [f":(and (stringp {t.v}) (str-index {x} {t.v}))"]


def _clips_prefix(t: Term) -> list[str]:
    if isinstance(t.value, str) and t.value == "":
        return [f":(stringp {t.v})"]
    return [f":(and (stringp {t.v}) (eq (str-index {t.operand('string')} {t.v}) 1))"]


NORMAL_FORM_FUNCTION: Final = "sm-normal-form"
"""The CLIPS function (defined in every environment, see ``compiler/clips_env.py``) giving a
string's content normal form (:func:`~stargraph_mem.model.text.content_normal_form`)."""


def _clips_normal_eq(t: Term) -> list[str]:
    if isinstance(t.value, VarRef):
        x = f"({NORMAL_FORM_FUNCTION} {t.operand('string')})"
    else:  # a literal is put in normal form once, here
        x = clips_string(normal_form_of(t.value))
    return [f":(and (stringp {t.v}) (eq ({NORMAL_FORM_FUNCTION} {t.v}) {x}))"]


def _clips_since(cmp: str) -> Callable[[Term], list[str]]:
    def emit(t: Term) -> list[str]:
        micros = t.value.total_microseconds()
        return [f":(and (integerp {t.v}) ({cmp} {t.v} (- ?i_now {micros})))"]

    return emit


CLIPS_TESTS: Mapping[str, Callable[[Term], list[str]]] = {
    "eq": _clips_eq,
    "ne": _clips_ne,
    "in": _clips_in,
    "not_in": _clips_not_in,
    "lt": _clips_order("<"),
    "le": _clips_order("<="),
    "gt": _clips_order(">"),
    "ge": _clips_order(">="),
    "exists": _clips_exists,
    "missing": _clips_missing,
    "contains": _clips_contains,
    "prefix": _clips_prefix,
    "normal_eq": _clips_normal_eq,
    "older_than": _clips_since("<="),
    "newer_than": _clips_since(">"),
}
"""The CLIPS emitter's table: operator → connected-constraint terms for one slot."""


DECAY_SLOTS: Mapping[str, str] = {
    "confidence": "cf",
    "valid_from": "vf",
    "reinforced_at": "rf",
}
"""Fact slots a decay reads, and the tag of the variable holding each (``?i_cf_<alias>``)."""


EXTRA_DECAY_SLOTS: Mapping[str, str] = {
    "read_at": "ra",
    "access_count": "ac",
    "trust": "tr",
    "layer": "ly",
}
"""Lifecycle slots some decays also read (:func:`decay_reads`), with their variables' tags."""


def decayed_facts(conf: Any) -> set[str]:
    """Aliases of the facts an ``ebbinghaus``, ``linear_decay`` or ``retention`` reads."""
    return set(decay_reads(conf))


def decay_reads(conf: Any) -> dict[str, set[str]]:
    """Fact alias → the lifecycle slots (of :data:`EXTRA_DECAY_SLOTS`) the decays of a
    confidence read from it, for every fact a decay reads."""
    out: dict[str, set[str]] = {}
    if isinstance(conf, EbbinghausOp):
        e = conf.ebbinghaus
        reads = out.setdefault(e.fact, set())
        if e.since == "last_access":
            reads.add("read_at")
        if e.untrusted_speed != 1.0:
            reads.add("trust")
        if e.boost:
            reads.update(("read_at", "access_count"))
    elif isinstance(conf, LinearDecayOp):
        out.setdefault(conf.linear_decay.fact, set())
    elif isinstance(conf, RetentionOp):
        r = conf.retention
        reads = out.setdefault(r.fact, {"read_at"})
        if r.boost:
            reads.add("access_count")
        if r.untrusted_speed != 1.0:
            reads.add("trust")
        if r.half_life is None:
            reads.add("layer")
    for operand in arithmetic_operands(conf):
        for alias, more in decay_reads(operand).items():
            out.setdefault(alias, set()).update(more)
    return out


def decay_anchor(held: Mapping[str, str], since: str) -> str:
    """Where a decay counts days from: ``reinforced_at``, or the later of it and the last
    access-recording read."""
    if since == "last_access":
        return f"(max {held['reinforced_at']} {held['read_at']})"
    return held["reinforced_at"]


def speed_expr(held: Mapping[str, str], untrusted: float) -> str:
    """How much faster a decay runs for the fact: ``untrusted`` below trust 1.0, else 1."""
    if untrusted == 1.0:
        return "1.0"
    return f"(if (< {held['trust']} 1.0) then {clips_float(untrusted)} else 1.0)"


def boost_expr(count: str) -> str:
    """The access boost ``min(0.3, 0.05·ln(1 + n/20))`` of ``count`` reads."""
    inner = f"(log (+ 1.0 (/ (float {count}) {clips_float(ACCESS_BOOST_SCALE)})))"
    raw = f"(* {clips_float(ACCESS_BOOST_PER)} {inner})"
    return f"(min {clips_float(ACCESS_BOOST_CAP)} {raw})"


def read_boost_expr(count: str) -> str:
    """Specification 003's access boost ``0.05·ln(1 + n/20)`` after the ``count``-th read
    (``ebbinghaus`` with ``boost``; uncapped, the confidence it raises is capped at 1)."""
    inner = f"(log (+ 1.0 (/ (float {count}) {clips_float(ACCESS_BOOST_SCALE)})))"
    return f"(* {clips_float(ACCESS_BOOST_PER)} {inner})"


def _huber_clips(x: str) -> str:
    exp_part = f"(** 2.0 (- 0.0 {x}))"
    linear = f"(max 0.0 (* 0.5 (- 1.0 (* {clips_float(math.log(2.0))} (- {x} 1.0)))))"
    return f"(if (<= {x} 1.0) then {exp_part} else {linear})"


RETENTION_CLIPS: Mapping[str, Callable[[str], str]] = {
    "l2": lambda x: f"(** 2.0 (- 0.0 {x}))",
    "huber": _huber_clips,
    "elastic": lambda x: f"(** 2.0 (- 0.0 (/ (+ {x} (* {x} {x})) 2.0)))",
}
"""Retention mode → its curve ``R(x)`` as CLIPS (the operator table's CLIPS backend)."""


def arithmetic_operands(op: Any) -> list[Any]:
    """The operands of a confidence operation (none for a number, variable or decay)."""
    if isinstance(op, ReinforceOp):
        return [op.reinforce.value]
    if isinstance(op, ClampOp):
        return [op.clamp.value]
    if isinstance(op, MultiplyOp):
        return list(op.multiply)
    if isinstance(op, MinOp):
        return list(op.min)
    if isinstance(op, MaxOp):
        return list(op.max)
    if isinstance(op, AddOp):
        return list(op.add)
    return []


def uses_reinforce(op: Any) -> bool:
    """Whether a confidence uses the ``reinforce`` operation (the update confirms a fact)."""
    return isinstance(op, ReinforceOp) or any(uses_reinforce(x) for x in arithmetic_operands(op))


NOT_ARCHIVED: Final = '(f_status ~"archived")'
"""The test a pack that reads archived facts adds to its patterns that do not test status."""


def admits_archived(pattern: Any) -> bool:
    """Whether a fact pattern's ``status`` test can pass for an archived fact (a test on a
    variable might: it counts as admitting)."""
    cond = pattern.where.get("status")
    if cond is None:
        return False
    if any(isinstance(v, VarRef) for _, v in cond.tests()):
        return True
    return evaluate(cond, "string", "archived")
