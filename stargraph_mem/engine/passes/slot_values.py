"""Values between Python and CLIPS for one pack: an episode's and a fact's slot values as
CLIPS takes them (typed, normalised, their content normal forms), the keys a pass ties
stored facts by, a rule variable's value, and the texts and payload values a delta's
templates make.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import lru_cache
from operator import attrgetter
from typing import Any, Final, cast

import clips

from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.compiler.program import NORMAL_KEY, normal_slot, payload_slot, slot_name
from stargraph_mem.compiler.sweep_sql import is_sweep
from stargraph_mem.engine.passes.confidence import payload_number
from stargraph_mem.engine.passes.near import (
    statement,
)
from stargraph_mem.ir.checks import (
    PAYLOAD_PREFIX,
    VarInfo,
    is_arithmetic,
    parse_template,
)
from stargraph_mem.ir.models import (
    FieldType,
)
from stargraph_mem.ir.reference import (
    ILL_TYPED,
    MISSING,
    normal_form_of,
    read_value,
)
from stargraph_mem.model.deltas import (
    kind_creates,
)
from stargraph_mem.model.limits import utf8_size
from stargraph_mem.model.text import content_normal_form
from stargraph_mem.model.time import from_us, to_us
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord

NIL = clips.Symbol("nil")
TRUE = clips.Symbol("TRUE")
FALSE = clips.Symbol("FALSE")

Getter = Callable[[Mapping[str, Any], EpisodeRecord | None], Any]
"""A rule variable's value from an episode's slot values (and the episode)."""
Filler = Callable[[Mapping[str, Any]], str]
"""A template's text from a rule's slot values."""
Sizer = Callable[[Mapping[str, Any]], int]
"""The UTF-8 size of a template's text from a rule's slot values."""
PayloadFiller = Callable[[Mapping[str, Any]], Any]
"""A payload key's value from a rule's slot values."""
Foreseer = Callable[[EpisodeRecord], str | None]
"""The statement of the fact a rule would make from one episode, or None."""

normal_text = lru_cache(maxsize=1 << 16)(content_normal_form)
"""A text's content normal form (the texts of a partition's facts and episodes recur from
pass to pass)."""


class BadValue(Exception):
    pass


def normalise(value: Any, ftype: FieldType) -> Any:
    """An episode metadata value as the CLIPS slot stores it for the declared type.

    What a value means is :func:`stargraph_mem.ir.reference.read_value`'s reading;
    this only renders it for CLIPS (lists space-joined, booleans as symbols)."""
    read = read_value(ftype, value)
    if read is MISSING:
        return "" if ftype == "list" else NIL
    if read is ILL_TYPED:
        raise BadValue(_ill_typed(ftype, value))
    if ftype == "boolean":
        return TRUE if read else FALSE
    if ftype == "list":
        return " ".join(read)
    return read


def _ill_typed(ftype: FieldType, value: Any) -> str:
    if ftype == "timestamp" and isinstance(value, str):
        return f"not an ISO-8601 timestamp with offset: {value!r}"
    if ftype == "list" and isinstance(value, list):
        return "list items must be non-empty strings without spaces or NUL characters"
    if ftype == "string" and isinstance(value, str):
        return "strings used by rules cannot contain NUL characters"
    if ftype == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return f"integer {value} is outside the signed 64-bit range"
    return f"expected {ftype}, got {type(value).__name__}"


def builtin_value(record: EpisodeRecord, name: str) -> Any:
    if name == "timestamp":
        return to_us(record.timestamp)
    if name == "last_access":  # a never-read episode's last access is its timestamp
        return to_us(record.last_accessed or record.timestamp)
    value = getattr(record, name)
    return NIL if value is None else value


@lru_cache(maxsize=4096)
def template_parts(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(parse_template(text))


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def filler(text: str | None) -> Filler:
    """A function filling one emit template from resolved variable values."""
    parts = template_parts(text or "")
    if len(parts) == 1 and parts[0][0] == "text":
        constant = parts[0][1]
        return lambda values: constant
    if len(parts) == 1:
        name = parts[0][1]
        return lambda values: _text(values[name])
    names = [value for kind, value in parts if kind == "var"]
    pattern = "".join(
        value.replace("{", "{{").replace("}", "}}") if kind == "text" else "{}"
        for kind, value in parts
    )
    return lambda values: pattern.format(*[_text(values[name]) for name in names])


def sizer(text: str | None) -> Sizer:
    """A function giving the UTF-8 size of a template once filled, without filling it
    (each distinct variable's text is measured once, however often it repeats)."""
    parts = template_parts(text or "")
    constant = sum(utf8_size(value) for kind, value in parts if kind == "text")
    uses = Counter(value for kind, value in parts if kind == "var")
    if not uses:
        return lambda values: constant
    return lambda values: (
        constant + sum(n * utf8_size(_text(values[name])) for name, n in uses.items())
    )


def _last_access(record: EpisodeRecord) -> datetime:
    """An episode's ``last_access``: its last access-recording read, else its timestamp."""
    return record.last_accessed or record.timestamp


@lru_cache(maxsize=256)
def key_of(fields: tuple[str, ...]) -> Callable[[EngineFact], Any]:
    """A fact's key by ``fields`` (one field: its value, else a tuple): each field's value,
    or its content normal form for a field named ``normal:<field>`` (see
    ``CompiledPack.fact_keys``)."""
    if not any(f.startswith(NORMAL_KEY) for f in fields):
        return attrgetter(*fields)
    parts = [
        _normal_of(attrgetter(f.removeprefix(NORMAL_KEY)))
        if f.startswith(NORMAL_KEY)
        else attrgetter(f)
        for f in fields
    ]
    if len(parts) == 1:
        return parts[0]
    return lambda fact: tuple(part(fact) for part in parts)


def _normal_of(get: Callable[[EngineFact], Any]) -> Callable[[EngineFact], Any]:
    """A fact field's content normal form, from its value (see :func:`normal_value`)."""
    return lambda fact: normal_value(get(fact))


def normal_value(value: Any) -> Any:
    """What ``normal_eq`` compares of a value, as CLIPS's ``sm-normal-form`` gives it
    (:func:`normal_form_of`): a text's content normal form (remembered), else the value."""
    return normal_text(value) if type(value) is str else normal_form_of(value)


def foreseer(rule: CompiledRule, builtins: set[str]) -> Foreseer | None:
    """How to foresee the statement of the fact ``rule`` makes from the episode it fires
    on, when its emit's subject, predicate and object use nothing but text fields of that
    episode (else None)."""
    info = rule.program.info
    emit = info.rule.emit
    if is_sweep(info.rule) or not kind_creates(emit.kind):
        return None
    templates = (emit.subject or "", emit.predicate or "", emit.object or "")
    names = {value for text in templates for kind, value in template_parts(text) if kind == "var"}
    variables = [info.variables[name] for name in sorted(names)]
    if any(var.kind != "episode" or var.type != "string" for var in variables):
        return None
    getters = [(var.name, getter(var, builtins)) for var in variables]
    subject, predicate, obj = (filler(text) for text in templates)
    no_refs: dict[str, Any] = {}

    def foresee(record: EpisodeRecord) -> str | None:
        values: dict[str, Any] = {}
        for name, get in getters:
            value = get(no_refs, record)
            if type(value) is not str:
                return None
            values[name] = value
        return statement(subject(values), predicate(values), obj(values))

    return foresee


def getter(var: VarInfo, builtins: set[str]) -> Getter:
    """A function reading one variable's value from the pass's references."""
    alias, fname = var.alias, var.field
    if var.kind == "count":
        return lambda refs, anchor: refs[alias][0]
    if var.kind == "near":
        return lambda refs, anchor: refs[alias + "#cos"]
    if var.kind == "surprise":
        return lambda refs, anchor: refs[alias + "#surprise"]
    if var.kind == "fact" and fname.startswith(PAYLOAD_PREFIX):
        key, ftype = fname.removeprefix(PAYLOAD_PREFIX), var.type
        return lambda refs, anchor: _payload_value(refs[alias].payload, key, ftype)
    if var.kind == "fact":
        return lambda refs, anchor: getattr(refs[alias], fname)

    def record_of(refs: Mapping[str, Any], anchor: EpisodeRecord | None) -> EpisodeRecord:
        record = anchor if var.kind == "episode" else refs[alias]
        if record is None:
            raise Unresolved(f"no episode for '{var.name}'")
        return cast(EpisodeRecord, record)

    if fname == "last_access":
        return lambda refs, anchor: _last_access(record_of(refs, anchor))
    if fname in builtins:
        return lambda refs, anchor: getattr(record_of(refs, anchor), fname)
    return lambda refs, anchor: record_of(refs, anchor).metadata.get(fname)


class Unresolved(Exception):
    pass


def _payload_value(payload: Mapping[str, Any] | None, key: str, ftype: FieldType) -> Any:
    """A declared payload key as a rule's variable holds it (timestamps as datetimes)."""
    read = read_value(ftype, (payload or {}).get(key))
    if read is MISSING or read is ILL_TYPED:
        return None
    return from_us(read) if ftype == "timestamp" else read


def _payload_slot(key: str, ftype: FieldType) -> Callable[[EngineFact], Any]:
    """Reads a declared payload key into its ``sm-fact`` slot (missing or of another type:
    ``nil``, which only ``missing`` and ``ne`` tests pass)."""

    def read(fact: EngineFact) -> Any:
        value = read_value(ftype, (fact.payload or {}).get(key))
        if value is MISSING or value is ILL_TYPED:
            return NIL
        if ftype == "boolean":
            return TRUE if value else FALSE
        return value

    return read


_LIFECYCLE_READERS: Final[Mapping[str, Callable[[EngineFact], Any]]] = {
    "reinforcement_count": lambda f: f.reinforcement_count,
    "access_count": lambda f: f.access_count,
    "last_access": lambda f: f.last_access_us or f.valid_from_us,
    "pinned": lambda f: TRUE if f.pinned else FALSE,
    "status": lambda f: f.status,
    "layer": lambda f: f.layer,
    "memory_type": lambda f: f.memory_type,
    "trust": lambda f: float(f.trust),
    "read_at": lambda f: f.last_access_us,
}
"""How each lifecycle slot is read from an :class:`EngineFact`."""


def fact_extras(compiled: CompiledPack) -> list[tuple[bytes, Callable[[EngineFact], Any]]]:
    """The optional ``sm-fact`` slots the program declares, each with its reader."""
    out = [(slot_name(f).encode(), _LIFECYCLE_READERS[f]) for f in compiled.fact_slots]
    out += [
        (payload_slot(key).encode(), _payload_slot(key, ftype))
        for key, ftype in compiled.payload_slots.items()
    ]
    out += [
        (normal_slot(fname).encode(), _normal_of(attrgetter(fname)))
        for fname in compiled.normal_fact_fields
    ]
    return out


def payload_filler(value: Any, ftype: FieldType | None, info: Any) -> PayloadFiller:
    """A payload value: a template's text, or for a declared key a value of its type (an
    operation's, for a ``number`` key: see :func:`payload_number`)."""
    if is_arithmetic(value):
        return lambda values: payload_number(value, values)
    if ftype is None or (ftype == "string" and isinstance(value, str)):
        return filler(str(value))
    if not isinstance(value, str):
        constant = float(value) if ftype == "number" else value
        return lambda values: constant
    parts = template_parts(value)
    if len(parts) != 1 or parts[0][0] != "var":  # a timestamp literal
        return lambda values: value
    name = parts[0][1]
    convert = _PAYLOAD_TYPES[ftype]
    return lambda values: convert(values[name])


_PAYLOAD_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {
    "number": float,
    "integer": int,
    "boolean": bool,
    "timestamp": _text,
    "string": _text,
}
"""A declared payload key's value from a variable's value, by the key's type."""
