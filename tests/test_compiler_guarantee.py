"""The compiler guarantee: every pack the checker accepts builds in CLIPS and runs.

A hypothesis strategy writes valid rule packs as users write them (YAML text through the
same loader): every pattern kind, every operator of the operator table on every field
type it applies to (lifecycle fact fields and declared payload keys included), literal
and ``{var: x}`` operands, time conditions inside ``count`` and ``earlier``, bind/var
joins across patterns, and every emit kind with its ``replaces`` / ``sources`` /
``confidence`` forms (typed arithmetic included), payloads and closing statuses. Each
pack must pass the checker, compile, load into CLIPS and run a pass over a few episodes
(some facts archived); a non-claiming observer rule in each pack is compared with the
reference evaluator.

Adding an option to a pattern: one entry in :data:`EARLIER_OPTIONS` or
:data:`COUNT_OPTIONS` (a strategy for its value, or ``None`` to leave it out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packs_helpers import NOW, PARTITION, engine_fact, run_pass

from stargraph_mem.compiler.pack import CompiledPack, compile_text, validate_file
from stargraph_mem.compiler.sweep_sql import is_sweep
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.errors import CompileError, IRError
from stargraph_mem.ir.models import (
    ARITHMETIC,
    EPISODE_ACCESS_FIELDS,
    EPISODE_BUILTINS,
    FACT_FIELDS,
    MATCHED_STATUSES,
    Condition,
    FieldType,
    Rule,
)
from stargraph_mem.ir.operators import FLAGS, OPERATORS, RETENTION_MODES, Operator
from stargraph_mem.ir.reference import evaluate, raw_value
from stargraph_mem.model.deltas import CLOSE_STATUSES
from stargraph_mem.model.time import to_us
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord

Draw = Callable[[st.SearchStrategy[Any]], Any]

# --- values --------------------------------------------------------------------------

STRINGS = ["alice", "bob", "", "a b", 'q"uote', "(x)", "?v", "é☃", "{x}", "nil", "TRUE", "7"]
INTEGERS = [0, 1, -3, 42, 2**63 - 1, -(2**63)]
NUMBERS = [0.0, 0.5, -2.25, 3.0, 1e300, 1]
ITEMS = ["red", "blue", "x(", 'q"', "TRUE"]
OFFSETS = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
AGES = [timedelta(0), timedelta(minutes=30), timedelta(hours=3), timedelta(days=2), -timedelta(1)]
"""How long before the pass time generated timestamps lie (one in the future)."""


def iso(moment: datetime, tz: timezone = UTC) -> str:
    return moment.astimezone(tz).isoformat()


def timestamps() -> st.SearchStrategy[str]:
    return st.builds(
        lambda age, extra, tz: iso(NOW - age - timedelta(microseconds=extra), tz),
        st.sampled_from(AGES),
        st.sampled_from([0, 1, 999_999]),
        st.sampled_from(OFFSETS),
    )


LITERALS: dict[FieldType, st.SearchStrategy[Any]] = {
    "string": st.one_of(st.sampled_from(STRINGS), st.text(max_size=5).filter(str.isprintable)),
    "integer": st.one_of(st.sampled_from(INTEGERS), st.integers(-(2**63), 2**63 - 1)),
    "number": st.one_of(
        st.sampled_from(NUMBERS), st.floats(allow_nan=False, allow_infinity=False, width=32)
    ),
    "boolean": st.booleans(),
    "timestamp": timestamps(),
}
"""Literal operands that fit a field of each type (a list field's operand is a string)."""

DURATIONS = st.fixed_dictionaries(
    {},
    optional={
        "days": st.sampled_from([0, 1, 2.5, 36000]),
        "hours": st.sampled_from([0, 1, 2, 0.25]),
        "minutes": st.integers(0, 90),
        "seconds": st.sampled_from([0, 1, 0.000001, 59.5]),
    },
)


def literal(ftype: FieldType) -> st.SearchStrategy[Any]:
    return LITERALS["string" if ftype == "list" else ftype]


# --- rule building state ----------------------------------------------------------------

DECLARABLE: list[tuple[str, FieldType]] = [
    ("subject", "string"),
    ("topic", "string"),
    ("weight", "integer"),
    ("score", "number"),
    ("urgent", "boolean"),
    ("seen_at", "timestamp"),
    ("tags", "list"),
]
NAMES = ["e", "k", "r", "f", "p0", "p1", "p2", "x1", "x2", "fa", "fid", "n", "c", "now"]
"""Alias and variable names, including ones the generated code uses as prefixes."""


@dataclass
class RuleState:
    """What a rule under construction has bound so far."""

    fields: dict[str, FieldType]
    variables: dict[str, FieldType] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    aliases: dict[str, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    payload: dict[str, FieldType] = field(default_factory=dict)
    """The pack's declared fact payload keys."""

    def fresh(self, draw: Draw) -> str:
        """A name not used yet in this rule (aliases and variables share one namespace)."""
        taken = set(self.aliases) | set(self.variables)
        pool = [n for n in NAMES if n not in taken]
        if pool and draw(st.booleans()):
            return str(draw(st.sampled_from(pool)))
        k = len(taken)
        while f"v{k}" in taken:
            k += 1
        return f"v{k}"

    def vars_for(self, operand: FieldType, op: Operator) -> list[str]:
        numeric = ("integer", "number", "timestamp")
        out = []
        for name, vtype in self.variables.items():
            if op.name in ("lt", "le", "gt", "ge") and operand not in numeric:
                continue
            if vtype == operand or (vtype in numeric and operand in numeric):
                out.append(name)
        return out


def applicable(ftype: FieldType, kind: str, fname: str) -> list[Operator]:
    """Operators the checker allows on this field in a pattern of ``kind`` (``payload``:
    a declared payload key, which a fact may lack)."""
    flags_ok = kind == "payload" or (
        kind not in ("fact", "not", "exists")
        and (fname not in EPISODE_BUILTINS or fname == "source_node")
    )
    return [
        op
        for op in OPERATORS.values()
        if ftype in op.field_types and (op.operand != "flag" or flags_ok)
    ]


@st.composite
def condition(
    draw: Draw,
    state: RuleState,
    fname: str,
    ftype: FieldType,
    kind: str,
    *,
    literal_only: bool,
    may_bind: bool,
) -> Any:
    """One well-typed condition object for a field (sometimes in shorthand form)."""
    if kind in ("fact", "not", "exists") and fname == "status":
        return draw(st.sampled_from(STATUS_CONDITIONS))
    ops = applicable(ftype, kind, fname)
    chosen: list[Operator] = draw(st.lists(st.sampled_from(ops), max_size=3, unique=True))
    if any(op.name == "missing" for op in chosen):
        chosen = [OPERATORS["missing"]]  # 'missing' combines with no other test
    cond: dict[str, Any] = {}
    for op in chosen:
        operand: FieldType = "string" if op.string_operand else ftype
        if op.operand == "flag":
            cond[op.name] = True
        elif op.operand == "duration":
            cond[op.name] = draw(DURATIONS)
        elif op.operand == "values":
            cond[op.name] = draw(st.lists(literal(operand), max_size=3))
        else:
            choices = [] if literal_only else state.vars_for(operand, op)
            if ftype == "list" and op.name == "contains":
                value_strategy: st.SearchStrategy[Any] = st.sampled_from(ITEMS)
            else:
                value_strategy = literal(operand)
            if choices and draw(st.booleans()):
                name = draw(st.sampled_from(choices))
                state.used.add(name)
                cond[op.name] = {"var": name}
            else:
                cond[op.name] = draw(value_strategy)
    # at most one number variable per rule: one is used as the emit's confidence
    bind_ok = may_bind and not literal_only and "missing" not in cond
    one_number = ftype != "number" or "number" not in state.variables.values()
    if bind_ok and one_number and (not cond or draw(st.booleans())):
        name = state.fresh(draw)
        cond["bind"] = name
        state.variables[name] = ftype
    if not cond:
        exists = any(op.name == "exists" for op in ops)
        cond = {"exists": True} if exists else {"eq": draw(literal(ftype))}
    value = cond.get("eq")
    plain = set(cond) == {"eq"} and not (isinstance(value, str) and value in FLAGS)
    if plain and draw(st.booleans()):
        return value  # shorthand: a bare literal or {var: x}
    return cond


STATUS_CONDITIONS: list[Any] = [
    *MATCHED_STATUSES,
    {"in": list(MATCHED_STATUSES)},
    {"ne": "current"},
    {"eq": "archived", "prefix": "arch"},
]
"""``status`` tests that can match (a status a rule never sees is refused)."""


@st.composite
def conditions(
    draw: Draw,
    state: RuleState,
    fields: dict[str, FieldType],
    kind: str,
    *,
    literal_only: bool = False,
    may_bind: bool = True,
    min_size: int = 0,
) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(sorted(fields)), min_size=min_size, max_size=3))
    out: dict[str, Any] = {}
    for fname in dict.fromkeys(names):
        out[fname] = draw(
            condition(
                state, fname, fields[fname], kind, literal_only=literal_only, may_bind=may_bind
            )
        )
    return out


def keys_of(state: RuleState) -> st.SearchStrategy[list[str]]:
    usable = sorted(f for f, t in state.fields.items() if t != "list")
    return st.lists(st.sampled_from(usable), min_size=1, max_size=3, unique=True)


OVER = st.none() | st.sampled_from(["pass", "history"])

EARLIER_OPTIONS: dict[str, Callable[[RuleState], st.SearchStrategy[Any] | None]] = {
    "keys": keys_of,
}
"""Pattern keys of ``earlier`` besides its field conditions (``None``: leave it out)."""

COUNT_OPTIONS: dict[str, Callable[[RuleState], st.SearchStrategy[Any] | None]] = {
    "keys": keys_of,
    "distinct": lambda s: st.none() | st.sampled_from(sorted(s.fields)),
    "at_least": lambda s: st.none() | st.integers(0, 3),
    "at_most": lambda s: st.none() | st.integers(3, 6),
    "grows": lambda s: st.none() | st.booleans(),
}
"""Pattern keys of ``count`` besides its field conditions and ``over`` (``None``: leave it
out)."""


@contextmanager
def over_fields(state: RuleState, over: str | None) -> Iterator[None]:
    """While an ``earlier``/``count`` pattern is drawn: an ``over: history`` one reads no
    access statistics (the checker refuses them there)."""
    kept = state.fields
    if over == "history":
        state.fields = {f: t for f, t in kept.items() if f not in EPISODE_ACCESS_FIELDS}
    try:
        yield
    finally:
        state.fields = kept


def options(draw: Draw, table: dict[str, Any], state: RuleState) -> dict[str, Any]:
    out = {}
    for key, make in table.items():
        strategy = make(state)
        value = None if strategy is None else draw(strategy)
        if value is not None:
            out[key] = value
    return out


# --- patterns -----------------------------------------------------------------------


@st.composite
def episode_item(draw: Draw, state: RuleState) -> dict[str, Any]:
    body = draw(conditions(state, state.fields, "episode"))
    if draw(st.booleans()):
        body["as"] = alias = state.fresh(draw)
        state.aliases[alias] = "episode"
    return {"episode": body}


def payload_conditions(
    draw: Draw, state: RuleState, body: dict[str, Any], *, may_bind: bool
) -> None:
    """Sometimes tests on declared payload keys (``payload: {key: ...}``)."""
    if state.payload and draw(st.booleans()):
        tests = draw(conditions(state, state.payload, "payload", may_bind=may_bind, min_size=1))
        body["payload"] = tests


@st.composite
def fact_item(draw: Draw, state: RuleState) -> dict[str, Any]:
    body = draw(conditions(state, FACT_FIELDS, "fact"))
    payload_conditions(draw, state, body, may_bind=True)
    if draw(st.integers(0, 3)):
        body["as"] = alias = state.fresh(draw)
        state.aliases[alias] = "fact"
    return {"fact": body}


@st.composite
def negated_item(draw: Draw, state: RuleState) -> dict[str, Any]:
    kind = draw(st.sampled_from(["not", "exists"]))
    body = draw(conditions(state, FACT_FIELDS, kind, may_bind=False))
    payload_conditions(draw, state, body, may_bind=False)
    return {kind: body}


def _time_field(state: RuleState) -> list[str]:
    return sorted(f for f, t in state.fields.items() if t == "timestamp")


@st.composite
def time_condition(draw: Draw, state: RuleState) -> dict[str, Any]:
    """``{timestamp-field: {newer_than|older_than: duration}}`` (a field or the builtin)."""
    fname = draw(st.sampled_from(_time_field(state)))
    op = draw(st.sampled_from(["newer_than", "older_than"]))
    return {fname: {op: draw(DURATIONS)}}


def _other_fields(state: RuleState, body: dict[str, Any]) -> dict[str, FieldType]:
    return {f: t for f, t in state.fields.items() if f not in body}


@st.composite
def earlier_item(draw: Draw, state: RuleState) -> dict[str, Any]:
    over = draw(OVER)
    with over_fields(state, over):
        body = options(draw, EARLIER_OPTIONS, state)
        if over is not None:
            body["over"] = over
        if draw(st.booleans()):
            body.update(draw(time_condition(state)))
        body.update(draw(conditions(state, _other_fields(state, body), "earlier")))
    if draw(st.integers(0, 3)):
        body["as"] = alias = state.fresh(draw)
        state.aliases[alias] = "earlier"
    return {"earlier": body}


@st.composite
def count_item(draw: Draw, state: RuleState) -> dict[str, Any]:
    over = draw(OVER)
    with over_fields(state, over):
        body = options(draw, COUNT_OPTIONS, state)
        if over is not None:
            body["over"] = over
        if "at_least" in body and "at_most" in body and body["at_least"] > body["at_most"]:
            body["at_most"] = body["at_least"]
        if over == "history" and draw(st.booleans()):
            body["within"] = draw(DURATIONS)
        if draw(st.booleans()):
            body.update(draw(time_condition(state)))
        body.update(draw(conditions(state, _other_fields(state, body), "count", literal_only=True)))
    if draw(st.booleans()):
        body["as"] = alias = state.fresh(draw)
        state.aliases[alias] = "count"
        state.variables[alias] = "integer"
    return {"count": body}


# --- emits ----------------------------------------------------------------------------

TEXT_PIECES = ["", "x", " ", '"', "(", ")", "{{", "}}", "?y", "é", "\\"]


@st.composite
def template(draw: Draw, state: RuleState, *, in_memory: bool) -> str:
    types = ("string", "integer", "boolean") + (() if in_memory else ("timestamp",))
    usable = sorted(n for n, t in state.variables.items() if t in types)
    pieces = [p for p in TEXT_PIECES if p or not in_memory]  # a fact's text is never ""
    parts = draw(
        st.lists(
            st.sampled_from(pieces) | st.sampled_from([f"{{{n}}}" for n in usable] or pieces),
            min_size=1 if in_memory else 0,
            max_size=4,
        )
    )
    for part in parts:
        if part.startswith("{") and not part.startswith("{{"):
            state.used.add(part[1:-1])
    return "".join(parts)


UNIT = st.sampled_from([0, 0.1, 0.333, 1])


MODES = sorted(RETENTION_MODES)


@st.composite
def operand(draw: Draw, state: RuleState, depth: int) -> Any:
    """An arithmetic operand: a number, a numeric variable or a nested operation."""
    numeric = sorted(n for n, t in state.variables.items() if t in ("integer", "number"))
    forms = ["number"] + (["var"] if numeric else []) + (["op"] if depth < 2 else [])
    form = draw(st.sampled_from(forms))
    if form == "var":
        name = draw(st.sampled_from(numeric))
        state.used.add(name)
        return {"var": name}
    if form == "op":
        return draw(arithmetic(state, depth + 1))
    return draw(st.sampled_from([0, 0.5, 1, 2, -1.5, 0.25]))


@st.composite
def arithmetic(draw: Draw, state: RuleState, depth: int = 0) -> dict[str, Any]:
    """One typed confidence operation (every operation of :data:`ARITHMETIC`)."""
    facts = [a for a, k in state.aliases.items() if k == "fact"]
    names = [n for n in ARITHMETIC if facts or n not in ("ebbinghaus", "linear_decay", "retention")]
    name = draw(st.sampled_from(names))
    if name == "reinforce":
        body: Any = {"value": draw(operand(state, depth)), "by": draw(UNIT)}
        if draw(st.booleans()):
            body["cap"] = draw(UNIT)
    elif name in ("multiply", "min", "max", "add"):
        body = draw(st.lists(operand(state, depth), min_size=2, max_size=3))
    elif name == "clamp":
        lo, hi = sorted([draw(UNIT), draw(UNIT)])
        body = {"value": draw(operand(state, depth)), "lo": lo, "hi": hi}
    elif name == "ebbinghaus":
        body = {"fact": draw(st.sampled_from(facts)), "lambda": draw(st.sampled_from([0.01, 1]))}
        if draw(st.booleans()):
            body["k"] = draw(st.sampled_from([0.5, 1, 2]))
        if draw(st.booleans()):
            body["since"] = "last_access"
        if draw(st.booleans()):
            body["untrusted_speed"] = 3
    elif name == "retention":
        body = {"fact": draw(st.sampled_from(facts)), "mode": draw(st.sampled_from(MODES))}
        if draw(st.booleans()):
            body["half_life"] = {"days": draw(st.sampled_from([0.5, 30]))}
        if draw(st.booleans()):
            body["boost"] = False
    else:
        body = {"fact": draw(st.sampled_from(facts)), "per": draw(UNIT), "every": {"hours": 6}}
    return {name: body}


@st.composite
def confidence(draw: Draw, state: RuleState) -> Any:
    numbers = sorted(n for n, t in state.variables.items() if t == "number" and n not in state.used)
    if numbers and draw(st.booleans()):  # a number variable used nowhere else: arithmetic
        state.used.add(numbers[0])
        return {"min": [{"var": numbers[0]}, draw(arithmetic(state))]}
    if numbers:  # a number variable is used nowhere else: take the confidence from it
        state.used.add(numbers[0])
        return {"from": numbers[0]}
    ints = sorted(n for n, t in state.variables.items() if t == "integer")
    forms = ["none", "fixed", "arithmetic"] + (["linear", "from"] if ints else [])
    if draw(st.sampled_from(forms)) == "arithmetic":
        return draw(arithmetic(state))
    forms = ["none", "fixed"] + (["linear", "from"] if ints else [])
    form = draw(st.sampled_from(forms))
    if form == "fixed":
        return draw(st.sampled_from([0, 0.0, 0.25, 1, 1.0]))
    if form == "linear":
        name = draw(st.sampled_from(ints))
        state.used.add(name)
        unit = st.sampled_from([0, 0.1, 0.333, 1])
        body = {"var": name, "base": draw(unit), "per": draw(unit)}
        if draw(st.booleans()):
            body["max"] = draw(unit)
        return body
    if form == "from":
        name = draw(st.sampled_from(ints))
        state.used.add(name)
        return {"from": name}
    return None


@st.composite
def emit(draw: Draw, state: RuleState, *, claim: bool, has_episode: bool) -> dict[str, Any]:
    facts = [a for a, k in state.aliases.items() if k == "fact"]
    earliers = [a for a, k in state.aliases.items() if k == "earlier"]
    lists = [n for n, t in state.variables.items() if t == "list"]
    kinds = ["add", "noop"]
    if facts or earliers or lists:
        kinds += ["update", "delete"]
    kind = draw(st.sampled_from(kinds))
    if lists and kind not in ("update", "delete"):
        kind = "update"  # a list variable is used only in replaces
    out: dict[str, Any] = {"kind": kind}
    if kind in ("add", "update"):
        for part in ("subject", "predicate", "object"):
            out[part] = draw(template(state, in_memory=True))
        if draw(st.booleans()):
            out["payload"] = {"k": draw(template(state, in_memory=False))}
            out["payload"].update(draw(declared_payload(state)))
    if kind in ("update", "delete"):
        named = facts + earliers
        refs: list[Any] = [{"list": n} for n in lists]
        if named:
            refs += draw(
                st.lists(st.sampled_from(named), min_size=0 if refs else 1, max_size=2, unique=True)
            )
        state.used.update(lists)
        out["replaces"] = refs
    if kind == "noop" and claim and has_episode and facts and draw(st.booleans()):
        out["reinforces"] = draw(st.lists(st.sampled_from(facts), min_size=1, unique=True))
    sources = draw(st.lists(st.sampled_from(sorted(state.aliases) or [""]), unique=True))
    sources = [s for s in sources if s]
    if not has_episode and not any(s in facts for s in sources):
        sources.append(facts[0])
    if sources:
        out["sources"] = sources
    conf = draw(confidence(state))
    if conf is not None:
        out["confidence"] = conf
    if kind == "delete" and draw(st.booleans()):
        status = draw(st.sampled_from(CLOSE_STATUSES))
        targets = [f for f in facts if f not in out["replaces"]]
        if status in ("merged", "superseded") and not targets:
            status = "invalidated"  # a merge needs a matched fact it is not replacing
        out["status"] = status
        if status in ("merged", "superseded"):  # so does a successor
            out["merged_into"] = draw(st.sampled_from(targets))
    unused = [
        n
        for n, t in state.variables.items()
        if n not in state.used and t in ("string", "integer", "boolean", "timestamp")
    ]
    out["reason"] = draw(template(state, in_memory=False)) + "".join(f"{{{n}}}" for n in unused)
    state.used.update(unused)
    return out


@st.composite
def declared_payload(draw: Draw, state: RuleState) -> dict[str, Any]:
    """Values of declared payload keys: a literal of the key's type or one variable of it."""
    out: dict[str, Any] = {}
    for key, ftype in state.payload.items():
        if not draw(st.booleans()):
            continue
        fits = sorted(
            n
            for n, t in state.variables.items()
            if t == ftype or (ftype == "number" and t == "integer")
        )
        if fits and draw(st.booleans()):
            name = draw(st.sampled_from(fits))
            state.used.add(name)
            out[key] = f"{{{name}}}"
        elif ftype == "string":  # a string key takes any template
            out[key] = draw(template(state, in_memory=False))
        else:
            out[key] = draw(literal(ftype))
    return out


# --- rules and packs -----------------------------------------------------------------------

CADENCES = [None, {"every": 1}, {"every": 5}, {"cron": "*/10 * * * *"}, {"cron": "0 3 * * *"}]


@st.composite
def rule(
    draw: Draw, fields: dict[str, FieldType], rid: str, payload: dict[str, FieldType]
) -> dict[str, Any]:
    state = RuleState(fields={**EPISODE_BUILTINS, **fields}, payload=payload)
    has_episode = draw(st.integers(0, 5)) > 0
    claim = draw(st.booleans())
    when: list[dict[str, Any]] = []
    if not has_episode:
        when.append(draw(fact_item(state)))
        for _ in range(draw(st.integers(0, 2))):
            when.append(draw(st.one_of(fact_item(state), negated_item(state))))
        if "fact" not in state.aliases.values():
            when[0]["fact"]["as"] = alias = state.fresh(draw)
            state.aliases[alias] = "fact"
    else:
        for _ in range(draw(st.integers(0, 1))):  # facts may come before the episode
            when.append(draw(fact_item(state)))
        when.append(draw(episode_item(state)))
        makers = [fact_item, negated_item, earlier_item, count_item]
        for _ in range(draw(st.integers(0, 3))):
            when.append(draw(draw(st.sampled_from(makers))(state)))
    body: dict[str, Any] = {"id": rid, "claim": claim, "when": when}
    body["priority"] = draw(st.integers(-3, 3))
    body["emit"] = draw(emit(state, claim=claim, has_episode=has_episode))
    # an archived fact is closed: a delete or a reinforcement cannot name it
    emitted = body["emit"]
    closing = emitted.get("replaces", []) if emitted["kind"] == "delete" else []
    named = {ref for ref in [*closing, *emitted.get("reinforces", [])] if isinstance(ref, str)}
    for item in when:
        if "fact" in item and item["fact"].get("as") in named:
            item["fact"].pop("status", None)
    cadence = draw(st.sampled_from(CADENCES))
    if cadence is not None:
        body["cadence"] = cadence
    if has_episode and draw(st.integers(0, 3)) == 0:
        sel_state = RuleState(fields=state.fields)
        body["select"] = draw(
            conditions(sel_state, state.fields, "select", literal_only=True, min_size=1)
        )
    if has_episode and draw(st.integers(0, 3)) == 0:
        gate: dict[str, Any] = {"min": draw(st.sampled_from([0, 0.2, 1]))}
        if "score" in fields and draw(st.booleans()):
            gate["importance_key"] = "score"
        body["salience"] = gate
    unused = [n for n in state.variables if n not in state.used]
    assert not unused, (unused, body)
    return body


OBSERVER = "observer"


@st.composite
def observer(draw: Draw, fields: dict[str, FieldType]) -> dict[str, Any]:
    """A non-claiming rule with literal episode tests only, checked against the reference."""
    state = RuleState(fields={**EPISODE_BUILTINS, **fields})
    where = draw(conditions(state, state.fields, "episode", literal_only=True))
    return {
        "id": OBSERVER,
        "claim": False,
        "when": [{"episode": where}],
        "emit": {"kind": "noop", "reason": "seen"},
    }


@st.composite
def packs(draw: Draw) -> dict[str, Any]:
    chosen = draw(st.lists(st.sampled_from(DECLARABLE), max_size=len(DECLARABLE), unique=True))
    fields: dict[str, FieldType] = dict(chosen)
    declared = draw(st.lists(st.sampled_from(PAYLOAD_KEYS), max_size=3, unique=True))
    payload: dict[str, FieldType] = dict(declared)
    rules = [draw(observer(fields))]
    for i in range(draw(st.integers(1, 4))):
        rules.append(draw(rule(fields, f"rule_{i}", payload)))
    no_runaways(rules)
    body: dict[str, Any] = {
        "ir_version": 1,
        "pack": "generated",
        "version": "1",
        "fields": fields,
        "defaults": {"cadence": {"every": 1}, "confidence": 0.7},
        "rules": unreachable_ones_observing(rules),
    }
    if payload:
        body["fact_payload"] = payload
    return body


PAYLOAD_KEYS: list[tuple[str, FieldType]] = [
    ("importance", "number"),
    ("hits", "integer"),
    ("label", "string"),
    ("flagged", "boolean"),
    ("due", "timestamp"),
]


def no_runaways(rules: list[dict[str, Any]]) -> None:
    """A rule without an episode pattern runs once the episodes are done, over the facts
    as they stand; one that creates facts must not match what such rules create, or it
    would feed on its own output: its fact patterns exclude those rules' facts."""
    creators = [
        r["id"]
        for r in rules
        if r["emit"]["kind"] in ("add", "update") and not any("episode" in w for w in r["when"])
    ]
    for body in rules:
        if body["id"] not in creators:
            continue
        for item in body["when"]:
            if "fact" not in item:
                continue
            cond = item["fact"].get("rule_id")
            if not isinstance(cond, dict) or set(cond) == {"var"}:
                cond = {} if cond is None else {"eq": cond}
            item["fact"]["rule_id"] = {**cond, "not_in": creators}


def unreachable_ones_observing(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A claiming rule with the same patterns as one ranked above it can never fire (the
    checker refuses it): let such a rule observe instead of claiming."""
    seen: set[str] = set()
    ranked = sorted(enumerate(rules), key=lambda p: (-p[1].get("priority", 0), p[0]))
    for _, body in ranked:
        if not body.get("claim", True) or not any("episode" in w for w in body["when"]):
            continue
        model = Rule.model_validate(body)
        key = repr((model.when, model.select, model.salience, model.cadence))
        if key in seen:
            body["claim"] = False
            body["emit"].pop("reinforces", None)  # only a claiming rule reinforces
        seen.add(key)
    return rules


# --- episodes and facts for the pass -----------------------------------------------------


def metadata_value(draw: Draw, ftype: FieldType) -> Any:
    if draw(st.integers(0, 5)) == 0:
        return None
    if ftype == "list":
        return draw(st.lists(st.sampled_from(ITEMS), max_size=3))
    return draw(literal(ftype))


@st.composite
def pass_input(
    draw: Draw, fields: dict[str, FieldType]
) -> tuple[list[EpisodeRecord], list[EngineFact]]:
    episodes = []
    for seq in range(1, draw(st.integers(1, 5)) + 1):
        meta = {f: metadata_value(draw, t) for f, t in fields.items()}
        episodes.append(
            EpisodeRecord(
                seq=seq,
                id=f"e{seq}",
                content=draw(st.sampled_from(STRINGS)),
                timestamp=NOW - draw(st.sampled_from(AGES)),
                source_node=draw(st.sampled_from([None, "alice", "chat.x"])),
                user=PARTITION.user,
                session=draw(st.sampled_from(["s1", "s2", "alice"])),
                agent=PARTITION.agent,
                metadata={k: v for k, v in meta.items() if v is not None},
                last_accessed=draw(st.sampled_from([None, NOW - timedelta(hours=1), NOW])),
                access_count=draw(st.integers(0, 3)),
            )
        )
    facts = []
    for k in range(draw(st.integers(0, 4))):
        spo = tuple(draw(st.sampled_from(STRINGS[:3])) for _ in range(3))
        made = engine_fact(
            f"f{k}",
            (spo[0], spo[1], spo[2]),
            confidence=draw(st.sampled_from([0.0, 0.5, 1.0])),
            valid_from=NOW - draw(st.sampled_from(AGES[:4])),
        )
        facts.append(
            replace(
                made,
                reinforced_at_us=made.valid_from_us - draw(st.sampled_from([0, 3_600_000_000])),
                reinforcement_count=draw(st.integers(0, 3)),
                access_count=draw(st.integers(0, 3)),
                last_access_us=draw(st.sampled_from([0, to_us(NOW)])),
                pinned=draw(st.booleans()),
                payload=draw(fact_payload()),
            )
        )
    return episodes, facts


@st.composite
def fact_payload(draw: Draw) -> dict[str, Any] | None:
    """A stored payload: declared keys with values of their type (or another), or none."""
    if draw(st.booleans()):
        return None
    keys = draw(st.lists(st.sampled_from(PAYLOAD_KEYS), max_size=3, unique=True))
    return {k: draw(literal(t) | st.sampled_from([None, "x", 1])) for k, t in keys}


def observer_matches(compiled: CompiledPack, episodes: list[EpisodeRecord]) -> list[str]:
    """The episodes the observer rule matches, by the reference evaluator, in the order a
    pass takes them (timestamp, then insertion)."""
    fields = {**EPISODE_BUILTINS, **compiled.pack.fields}
    (item,) = compiled.rule(OBSERVER).program.info.rule.when
    where: dict[str, Condition] = item.episode.where  # type: ignore[union-attr]
    now_us = to_us(NOW)
    out = []
    for ep in sorted(episodes, key=lambda e: (e.timestamp, e.seq)):
        raw = {**{f: raw_value(ep, f) for f in EPISODE_BUILTINS}, **ep.metadata}
        if all(evaluate(cond, fields[f], raw.get(f), now_us=now_us) for f, cond in where.items()):
            out.append(ep.id)
    return out


def dump(body: dict[str, Any]) -> str:
    return yaml.safe_dump(body, allow_unicode=True, sort_keys=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=packs(), data=st.data())
def test_valid_packs_build_and_run(body: dict[str, Any], data: st.DataObject) -> None:
    text = dump(body)
    compiled = compile_text(text, "generated.yaml")  # checks, compiles and builds in CLIPS
    assert {r.id for r in compiled.rules} == {r["id"] for r in body["rules"]}
    episodes, facts = data.draw(pass_input(compiled.pack.fields))
    archived, current = facts[::2], facts[1::2]
    out = run_pass(compiled, episodes, current, archived=archived)
    # refused for what the data held: fact text of variables that rendered ""; an update
    # or delete whose {list: x} was empty, held what cannot be a fact id, or named what is
    # not a current fact; two
    # patterns of a rule that matched one fact, then replaced twice (or replaced and named
    # as its own successor); a fact another delta
    # replaced already (identical deltas of a pass share one content-derived fact id), or
    # made by a delta refused for these reasons
    data_dependent = (
        "String should have at least 1 character",
        "replaces: List should",
        "String should match pattern",
        "replaces names the same fact twice",
        "cannot be merged into or superseded by itself",  # its two patterns matched one fact
        "unresolved reference: fact ",
        "replaces names facts that are not current in this partition",
    )
    refused = [
        r
        for r in out.rejected
        if not r.unmatched and not any(d in r.reason for d in data_dependent)
    ]
    assert refused == [], refused
    assert out.episodes == len(episodes)
    seen = [d.source_episode_ids[0] for d in out.deltas if d.rule_id == OBSERVER]
    assert seen == observer_matches(compiled, episodes)
    assert_fact_keys_change_nothing(compiled, episodes, current, archived)


def assert_fact_keys_change_nothing(
    compiled: CompiledPack,
    episodes: list[EpisodeRecord],
    current: list[EngineFact],
    archived: list[EngineFact],
) -> None:
    """A pass of the episode rules that asserts only the facts an episode could match
    (``CompiledPack.fact_keys``) decides exactly what one asserting every fact does."""
    rules = {
        r.index: [e.seq for e in episodes]
        for r in compiled.rules
        if not is_sweep(r.program.info.rule)
    }
    keyed = run_pass(compiled, episodes, current, archived=archived, eligible=rules)
    every = replace(compiled, fact_keys=None, _built=[])
    assert keyed == run_pass(every, episodes, current, archived=archived, eligible=rules)


# --- time conditions inside count and earlier ---------------------------------------------

TIMED = """\
ir_version: 1
pack: timed
version: "1"
fields:
  subject: string
  seen_at: timestamp
rules:
  - id: recent_repeat
    priority: 10
    when:
      - episode: {subject: {bind: s}}
      - count: {as: n, keys: [subject], at_least: 2, timestamp: {newer_than: {hours: 2}}}
    emit:
      kind: noop
      reason: "{s} x{n}"
  - id: stale_repeat
    claim: false
    when:
      - episode: {subject: {bind: s}}
      - earlier: {as: prev, keys: [subject], seen_at: {older_than: {days: 1}}}
    emit:
      kind: noop
      sources: [prev]
      reason: "{s}"
  - id: recent_earlier
    claim: false
    when:
      - episode: {subject: {bind: s}}
      - earlier: {as: prev, keys: [subject], timestamp: {newer_than: {hours: 2}}}
    emit:
      kind: noop
      sources: [prev]
      reason: "{s}"
"""


def timed_episode(seq: int, subject: str, age: timedelta, seen_age: timedelta) -> EpisodeRecord:
    return EpisodeRecord(
        seq=seq,
        id=f"e{seq}",
        content="c",
        timestamp=NOW - age,
        source_node=None,
        user=PARTITION.user,
        session="s1",
        agent=PARTITION.agent,
        metadata={"subject": subject, "seen_at": iso(NOW - seen_age)},
    )


def test_time_conditions_inside_count_and_earlier_are_honoured() -> None:
    compiled = compile_text(TIMED, "timed.yaml")
    episodes = [
        timed_episode(1, "a", timedelta(hours=5), timedelta(days=3)),  # too old to count
        timed_episode(2, "a", timedelta(hours=1), timedelta(hours=1)),  # counted: 1
        timed_episode(3, "a", timedelta(minutes=30), timedelta(days=2)),  # counted: 2
        timed_episode(4, "a", timedelta(hours=3), timedelta(hours=2)),  # too old to count
        timed_episode(5, "a", timedelta(minutes=1), timedelta(minutes=1)),  # counted: 3
    ]
    out = run_pass(compiled, episodes)
    counted = [(d.source_episode_ids, d.reason) for d in out.deltas if d.rule_id == "recent_repeat"]
    assert counted == [(["e3"], "a x2"), (["e5"], "a x3")]
    # the pass takes them in timestamp order: e1, e4, e2, e3, e5
    # the latest earlier episode last seen more than a day ago: e1, then e3 (never e2, e4)
    stale = [d.source_episode_ids for d in out.deltas if d.rule_id == "stale_repeat"]
    assert stale == [["e4", "e1"], ["e2", "e1"], ["e3", "e1"], ["e5", "e3"]]
    # an episode older than the window is never the earlier one: e1 (5 h), e4 (3 h)
    recent = [d.source_episode_ids for d in out.deltas if d.rule_id == "recent_earlier"]
    assert recent == [["e3", "e2"], ["e5", "e3"]]
    # the window moves with the pass time: a pass six hours later counts nothing
    later = run_pass(compiled, episodes, now=NOW + timedelta(hours=6))
    assert [d for d in later.deltas if d.rule_id == "recent_repeat"] == []


def test_time_condition_relations_validate(tmp_path: Any) -> None:
    path = tmp_path / "timed.yaml"
    path.write_text(TIMED, encoding="utf-8")
    assert validate_file(path) == []


# --- CLIPS build failures are positioned compile errors -------------------------------------

BROKEN_AT = """\
ir_version: 1
pack: broken
version: "1"
fields: {subject: string}
rules:
  - id: fine
    when:
      - episode: {subject: {bind: s}}
    emit: {kind: noop, reason: "{s}"}
  - id: second
    when:
      - episode: {subject: seen}
      - count: {keys: [subject], at_least: 2}
    emit: {kind: noop}
"""


def _raw_clips(message: str) -> bool:
    return any(mark in message for mark in ("[PRCCODE", "[EXPRNPSR", "[ANALYSIS", "defrule"))


def test_a_broken_rule_construct_is_reported_at_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    from stargraph_mem.compiler.generator import Generator

    original = Generator.rhs

    def broken_rhs(self: Generator, ctx: Any) -> list[str]:
        out = original(self, ctx)
        if ctx.info.rule.id == "second":
            out.append("(no-such-function ?undefined)")
        return out

    monkeypatch.setattr(Generator, "rhs", broken_rhs)
    with pytest.raises(CompileError) as info:
        compile_text(BROKEN_AT, "rules/broken.yaml")
    message = str(info.value)
    assert message.startswith("rules/broken.yaml:10:5: rules[1]: "), message
    assert "'second'" in message
    assert not _raw_clips(message), message
    assert (info.value.context["line"], info.value.context["col"]) == (10, 5)
    assert info.value.context["rule_id"] == "second"


def test_a_broken_relation_construct_is_reported_at_its_pattern(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stargraph_mem.compiler.generator import Generator

    original = Generator.relation_rules

    def broken(self: Generator, rel: Any) -> str:
        return original(self, rel).replace("(sm-cursor (n ?n))", "(sm-cursor (n ?n)) (test ?zz)")

    monkeypatch.setattr(Generator, "relation_rules", broken)
    with pytest.raises(CompileError) as info:
        compile_text(BROKEN_AT, "rules/broken.yaml")
    message = str(info.value)
    assert message.startswith("rules/broken.yaml:13:9: rules[1].when[1].count: "), message
    assert "'second'" in message
    assert not _raw_clips(message), message


def test_validate_reports_a_build_failure_with_its_position(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from stargraph_mem.compiler.generator import Generator

    original = Generator.rhs

    def broken_rhs(self: Generator, ctx: Any) -> list[str]:
        return [*original(self, ctx), "(no-such-function)"]

    monkeypatch.setattr(Generator, "rhs", broken_rhs)
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN_AT, encoding="utf-8")
    (issue,) = validate_file(path)
    assert (issue.file, issue.line, issue.col, issue.rule_id) == (str(path), 6, 5, "fine")
    assert not _raw_clips(issue.format())


def test_runtime_reload_uses_the_checked_program() -> None:
    """A runtime that did not get the checked environment loads the same program."""
    compiled = compile_text(TIMED, "timed.yaml")
    assert compiled.take_environment() is not None
    runtime = PackRuntime(compiled)
    try:
        out = runtime.run_pass(
            partition=PARTITION,
            now=NOW,
            episodes=[timed_episode(1, "a", timedelta(0), timedelta(0))],
            facts=[],
        )
    finally:
        runtime.close()
    assert [r for r in out.rejected if not r.unmatched] == []


# --- regressions the generated packs found ---------------------------------------------

REGRESSIONS = """\
ir_version: 1
pack: regressions
version: "1"
fields: {subject: string, tags: list}
rules:
  - id: bound_fact_id
    claim: false
    when:
      - episode: {subject: {bind: s}}
      - fact: {as: f, id: {bind: fid}, subject: {var: s}}
    emit: {kind: noop, reason: "id {fid}"}
  - id: unnamed_fact_bind
    claim: false
    when:
      - episode: {subject: {bind: s}}
      - fact: {subject: {var: s}, object: {bind: o}}
    emit: {kind: noop, reason: "object {o}"}
  - id: distinct_key
    claim: false
    when:
      - episode: {subject: {bind: s}}
      - count: {as: n, keys: [subject], distinct: subject}
    emit: {kind: noop, reason: "{s} distinct {n}"}
  - id: distinct_list
    claim: false
    when:
      - episode: {subject: {bind: s}}
      - count: {as: n, keys: [subject], distinct: tags}
    emit: {kind: noop, reason: "{s} tag sets {n}"}
  - id: alias_like_a_prefix
    claim: false
    when:
      - episode: {subject: {ne: nobody}}
      - fact: {as: e, subject: {ne: alice}}
      - fact: {as: p3, object: tea}
      - fact: {predicate: is}
    emit: {kind: noop, sources: [e, p3], reason: "apart"}
"""


def test_generated_pack_regressions() -> None:
    compiled = compile_text(REGRESSIONS, "regressions.yaml")
    episodes = [
        EpisodeRecord(
            seq=seq,
            id=f"e{seq}",
            content="c",
            timestamp=NOW - timedelta(minutes=10 - seq),
            source_node=None,
            user=PARTITION.user,
            session="s1",
            agent=PARTITION.agent,
            metadata={"subject": "alice", **({"tags": tags} if tags else {})},
        )
        for seq, tags in enumerate([["red"], ["red"], ["red", "blue"], []], start=1)
    ]
    facts = [engine_fact("f1", ("alice", "likes", "tea")), engine_fact("f2", ("bob", "is", "x"))]
    out = run_pass(compiled, episodes, facts)
    assert out.rejected == []
    reasons: dict[str, list[str]] = {}
    for delta in out.deltas:
        reasons.setdefault(delta.rule_id, []).append(delta.reason)
    assert reasons["bound_fact_id"] == ["id f1"] * 4
    assert reasons["unnamed_fact_bind"] == ["object tea"] * 4
    assert reasons["distinct_key"] == ["alice distinct 1"] * 4
    # an episode without tags is not counted (its rule does not match it)
    assert reasons["distinct_list"] == ["alice tag sets 1", "alice tag sets 1", "alice tag sets 2"]
    # alias 'e' shares no variable with the episode (whose subject is alice), alias 'p3'
    # none with the unnamed pattern when[3]: each matches a fact of its own
    apart = [d.source_episode_ids for d in out.deltas if d.rule_id == "alias_like_a_prefix"]
    assert apart == [[f"e{seq}", "e0"] for seq in range(1, 5)]
    matched = run_pass_matched(compiled, episodes, facts)
    assert {"e": ["f2"], "p3": ["f1"]}.items() <= matched.items()


NEVER_WORKS = """\
ir_version: 1
pack: never
version: "1"
rules:
  - id: empty_subject
    when:
      - episode: {session: {bind: s}}
    emit: {kind: add, subject: "", predicate: p, object: "{s}"}
  - id: twice
    when:
      - fact: {as: f, subject: x}
    emit: {kind: delete, replaces: [f, f], sources: [f]}
"""


def test_checker_refuses_emits_that_never_work() -> None:
    with pytest.raises(IRError) as info:
        compile_text(NEVER_WORKS, "never.yaml")
    assert [issue.format() for issue in info.value.issues] == [
        "never.yaml:8:23: rules[0].emit.subject: a fact needs a subject: this one is always empty",
        "never.yaml:12:40: rules[1].emit.replaces[1]: 'f' is listed twice",
    ]


def run_pass_matched(
    compiled: CompiledPack, episodes: list[EpisodeRecord], facts: list[EngineFact]
) -> dict[str, list[str]]:
    """What each pattern of the first 'alias_like_a_prefix' delta matched."""
    runtime = PackRuntime(compiled)
    try:
        out = runtime.run_pass(
            partition=PARTITION, now=NOW, episodes=episodes, facts=facts, matched=True
        )
    finally:
        runtime.close()
    rules = [d.rule_id for d in out.deltas]
    return out.matched[rules.index("alias_like_a_prefix")]
