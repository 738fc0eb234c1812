"""The reference evaluator: what a condition means, in plain Python.

It is the operator table's meaning made executable. The CLIPS emitter and the SQL
``select`` compiler are tested against it (``tests/test_operators.py``), and lint uses
it to decide whether a finite set of candidate values passes a test.

Values are read as the runtime reads episode metadata for the field's declared type:

* ``None`` (or an absent key) is *missing*; so is an empty list.
* A value of another type is *ill-typed*: the runtime rejects the episode, so no
  condition matches it (:data:`ILL_TYPED`).
* Integers are signed 64-bit. Strings may not hold NUL; list items are non-empty strings
  without a space; a timestamp is an ISO-8601 string with a UTC offset, compared as UTC
  microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from stargraph_mem.ir.models import EPISODE_BUILTINS, Condition, Duration, FieldType, VarRef
from stargraph_mem.ir.operators import (
    ACCESS_BOOST_CAP,
    ACCESS_BOOST_PER,
    ACCESS_BOOST_SCALE,
    OPERATORS,
    RETENTION_MODES,
    unknown_operator,
)
from stargraph_mem.model.text import content_normal_form
from stargraph_mem.model.time import iso_us


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


MISSING: Final = _Marker("MISSING")
"""A field that is absent, ``null`` or an empty list."""
ILL_TYPED: Final = _Marker("ILL_TYPED")
"""A value the runtime cannot read as the field's declared type."""


INT64: Final = (-(2**63), 2**63 - 1)
"""Integers a rule can compare (CLIPS and SQLite integers are signed 64-bit)."""


def timestamp_micros(value: object) -> int | None:
    """UTC microseconds of an ISO-8601 string with an offset, or ``None`` for anything else."""
    try:
        return iso_us(value)
    except ValueError:
        return None


def list_item_ok(item: object) -> bool:
    """Whether ``item`` can be an item of a list field (the runtime stores lists joined by
    spaces)."""
    return isinstance(item, str) and item != "" and " " not in item and "\x00" not in item


def read_value(ftype: FieldType, raw: Any) -> Any:
    """A metadata value as the runtime sees it: the typed value, MISSING or ILL_TYPED."""
    if raw is None or (ftype == "list" and raw == []):
        return MISSING
    if ftype == "string":
        return raw if isinstance(raw, str) and "\x00" not in raw else ILL_TYPED
    if ftype == "integer":
        ok = isinstance(raw, int) and not isinstance(raw, bool) and INT64[0] <= raw <= INT64[1]
        return raw if ok else ILL_TYPED
    if ftype == "number":
        ok = isinstance(raw, int | float) and not isinstance(raw, bool)
        return float(raw) if ok else ILL_TYPED
    if ftype == "boolean":
        return raw if isinstance(raw, bool) else ILL_TYPED
    if ftype == "timestamp":
        micros = timestamp_micros(raw)
        return ILL_TYPED if micros is None else micros
    if isinstance(raw, list) and all(list_item_ok(item) for item in raw):
        return tuple(raw)
    return ILL_TYPED


def literal(ftype: FieldType, value: Any) -> Any:
    """An IR literal in the representation :func:`read_value` gives for ``ftype``."""
    if ftype == "timestamp" and isinstance(value, str):
        micros = timestamp_micros(value)
        if micros is None:
            raise ValueError(f"not a timestamp literal: {value!r}")
        return micros
    if ftype == "number":
        return float(value)
    return value


Test = Callable[[Any, Any, FieldType, int], bool]
"""``(value, operand, field type, now_us) → bool`` for a present, well-typed value;
``operand`` is already resolved (variables replaced by their values)."""


def _eq(v: Any, x: Any, ftype: FieldType, now: int) -> bool:
    return bool(v == literal(ftype, x))


def _in(v: Any, xs: Any, ftype: FieldType, now: int) -> bool:
    return any(v == literal(ftype, x) for x in xs)


def _order(cmp: Callable[[Any, Any], bool]) -> Test:
    def test(v: Any, x: Any, ftype: FieldType, now: int) -> bool:
        return cmp(v, literal(ftype, x))

    return test


def _contains(v: Any, x: Any, ftype: FieldType, now: int) -> bool:
    return x in v  # an item of a tuple, a substring of a str


def _prefix(v: Any, x: Any, ftype: FieldType, now: int) -> bool:
    return bool(v.startswith(x))


def normal_form_of(value: Any) -> Any:
    """A string in content normal form; any other value as it is (it equals no string)."""
    return content_normal_form(value) if isinstance(value, str) else value


def _normal_eq(v: Any, x: Any, ftype: FieldType, now: int) -> bool:
    return bool(normal_form_of(v) == normal_form_of(x))


def _older(v: Any, d: Duration, ftype: FieldType, now: int) -> bool:
    return bool(v <= now - d.total_microseconds())


def _newer(v: Any, d: Duration, ftype: FieldType, now: int) -> bool:
    return bool(v > now - d.total_microseconds())


REFERENCE: Mapping[str, Test] = {
    "eq": _eq,
    "ne": lambda v, x, t, now: not _eq(v, x, t, now),
    "in": _in,
    "not_in": lambda v, xs, t, now: not _in(v, xs, t, now),
    "lt": _order(lambda a, b: bool(a < b)),
    "le": _order(lambda a, b: bool(a <= b)),
    "gt": _order(lambda a, b: bool(a > b)),
    "ge": _order(lambda a, b: bool(a >= b)),
    "exists": lambda v, x, t, now: True,
    "missing": lambda v, x, t, now: False,
    "contains": _contains,
    "prefix": _prefix,
    "normal_eq": _normal_eq,
    "older_than": _older,
    "newer_than": _newer,
}
"""Operator → its meaning on a present value (on a missing one: the table's
``on_missing``)."""


def passes(op: str, value: Any, operand: Any, ftype: FieldType, now_us: int = 0) -> bool:
    """Whether a read value (typed, MISSING or ILL_TYPED) passes one test."""
    spec = OPERATORS.get(op)
    if spec is None or op not in REFERENCE:
        raise KeyError(unknown_operator(op))
    if value is ILL_TYPED:
        return False
    if value is MISSING:
        return spec.on_missing
    return REFERENCE[op](value, operand, ftype, now_us)


def evaluate(
    cond: Condition,
    ftype: FieldType,
    raw: Any,
    *,
    now_us: int = 0,
    variables: Mapping[str, Any] | None = None,
) -> bool:
    """Whether a raw metadata value passes every test of ``cond`` (and a ``bind``, which
    needs a present value unless the field is a list)."""
    value = read_value(ftype, raw)
    if value is ILL_TYPED:
        return False
    if cond.bind is not None and value is MISSING and ftype != "list":
        return False
    for op, operand in cond.tests():
        if isinstance(operand, VarRef):
            operand = (variables or {})[operand.var]
        if not passes(op, value, operand, ftype, now_us):
            return False
    return True


def raw_value(record: Any, name: str) -> Any:
    """An episode record's field as :func:`evaluate` reads it: a declared metadata key, or
    a builtin (the timestamp as ISO-8601 text; ``last_access`` the last access-recording
    read, or the timestamp for a never-read episode)."""
    if name == "timestamp":
        return record.timestamp.isoformat()
    if name == "last_access":
        return (record.last_accessed or record.timestamp).isoformat()
    if name in EPISODE_BUILTINS:
        return getattr(record, name)
    return record.metadata.get(name)


# --- retention curves (the ``retention`` confidence operation) ----------------------------

_LN2: Final = math.log(2.0)

RETENTION: Mapping[str, Callable[[float], float]] = {
    "l2": lambda x: 2.0 ** (0.0 - x),
    "huber": lambda x: 2.0 ** (0.0 - x) if x <= 1.0 else max(0.0, 0.5 * (1.0 - _LN2 * (x - 1.0))),
    "elastic": lambda x: 2.0 ** (0.0 - (x + x * x) / 2.0),
}
"""Retention mode → ``R(x)``, ``x`` the age in half-lives (see
:data:`~stargraph_mem.ir.operators.RETENTION_MODES`)."""


def access_boost(access_count: int) -> float:
    """``min(0.3, 0.05·ln(1 + n/20))``: what ``n`` access-recording reads add to retention."""
    raw = ACCESS_BOOST_PER * math.log(1.0 + access_count / ACCESS_BOOST_SCALE)
    return min(ACCESS_BOOST_CAP, raw)


def read_boost(access_count: int) -> float:
    """``0.05·ln(1 + n/20)``: specification 003's access reinforcement after the ``n``-th
    read (``ebbinghaus`` with ``boost``; uncapped, the confidence it raises stays <= 1)."""
    return ACCESS_BOOST_PER * math.log(1.0 + access_count / ACCESS_BOOST_SCALE)


def boosted(confidence: float, access_count: int, read_since: bool) -> float:
    """The confidence an ``ebbinghaus`` with ``boost`` decays from: ``min(1, c + boost)``
    for a fact read since its ``valid_from`` (``read_since``), else ``c``."""
    if not read_since:
        return confidence
    return min(1.0, confidence + read_boost(access_count))


def retention(mode: str, x: float, access_count: int = 0, *, boost: bool = True) -> float:
    """Retention at age ``x`` half-lives with ``access_count`` reads: ``min(1, R(x) + b)``."""
    if mode not in RETENTION:
        raise KeyError(f"unknown retention mode '{mode}' (modes: {', '.join(RETENTION_MODES)})")
    value = RETENTION[mode](x)
    return min(1.0, value + access_boost(access_count)) if boost else value


def retained(
    mode: str,
    confidence: float,
    x_now: float,
    x_then: float,
    access_count: int = 0,
    *,
    boost: bool = True,
) -> float:
    """``c·R(x_now)/R(x_then)``: a confidence last written at age ``x_then`` carried to age
    ``x_now`` (0 when retention had already reached 0). Applied at any run schedule, the
    factors telescope to ``c0·R(x_now)``."""
    then = retention(mode, x_then, access_count, boost=boost)
    if then <= 0.0:
        return 0.0
    return confidence * (retention(mode, x_now, access_count, boost=boost) / then)
