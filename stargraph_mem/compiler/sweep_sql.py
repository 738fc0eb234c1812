"""A sweep's candidate pre-filter: its literal fact conditions → parameterised SQL over facts.

A *sweep* is a rule whose ``when`` has no episode pattern. Its first positive ``fact``
pattern's literal tests on stored columns become a WHERE fragment over the current facts
(alias ``f``): only facts (and partitions) it selects can match, so a sweep reads
O(candidates), not every partition. Tests the table does not cover (``ne``, ``contains``,
``{var: x}`` operands, fields without a column) are left to CLIPS: the fragment selects a
superset of what the pattern matches, and exactly that set when every test is covered.

Two tables, keyed like :mod:`~stargraph_mem.compiler.select_sql`'s: :data:`SWEEP_COLUMNS`
(fact field → how to read it) and :data:`SWEEP_TESTS` (operator → WHERE term). Adding a
field is one entry in the first; an operator, one in the second. The SQL uses ``?`` marks
(a backend swaps its own in); durations stay symbolic until the pass time is known.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stargraph_mem.compiler.expressions import admits_archived
from stargraph_mem.compiler.program import literal_value
from stargraph_mem.compiler.select_sql import NowOffset
from stargraph_mem.ir.checks import pattern_of
from stargraph_mem.ir.models import FACT_FIELDS, Condition, Duration, FieldType, Rule, VarRef

__all__ = [
    "RETENTION_SQL",
    "SWEEP_COLUMNS",
    "SWEEP_TESTS",
    "SweepFilter",
    "is_sweep",
    "sweep_filter",
]

_Emitted = tuple[str, list[Any]]


@dataclass(frozen=True)
class _Column:
    """A fact field stored in one column of ``facts f``; ``age``: a time column, whose
    ``older_than`` test usually holds for most facts (see :func:`sweep_filter`); ``index``:
    the sweep index that serves its tests (``""``: the table's key serves them; ``None``:
    none does)."""

    expr: str
    age: bool = False
    index: str | None = None

    def demoted(self) -> _Column:
        """The same column written ``+expr``: same value, but no index is used for it."""
        return _Column("+" + self.expr)

    def compare(self, cmp: str, value: Any) -> _Emitted:
        return f"{self.expr} {cmp} ?", [value]

    def member(self, values: list[Any], *, negate: bool = False) -> _Emitted:
        marks = ", ".join("?" for _ in values)
        return f"{self.expr} {'NOT IN' if negate else 'IN'} ({marks})", list(values)


_FLIP = {"<": ">=", "<=": ">"}
"""``greatest(base, rows) < x`` holds when no row is ``>= x`` (and ``<=``: none ``> x``)."""


@dataclass(frozen=True)
class _Greatest:
    """A field read as the greatest of a column and a column of related rows
    (``reinforced_at``: the reinforcement time the fact started from, its promotion time
    or the one it inherited, or its latest reinforcement), written with
    EXISTS so both backends read it the same and an index on the base expression
    (``index``) drives it. Both such fields are times (``age``, as :class:`_Column`'s)."""

    base: str
    table: str
    column: str
    index: str | None = None
    age: bool = True

    def demoted(self) -> _Greatest:
        """The same field with its base written ``+base``: no index is used for it."""
        return _Greatest("+" + self.base, self.table, self.column)

    def _rows(self, cmp: str) -> str:
        return f"SELECT 1 FROM {self.table} r WHERE r.fact_id = f.id AND r.{self.column} {cmp} ?"

    def compare(self, cmp: str, value: Any) -> _Emitted:
        if cmp in ("<", "<="):  # the greatest is below x: the base and every row are
            rows = self._rows(_FLIP[cmp])
            return f"({self.base} {cmp} ? AND NOT EXISTS ({rows}))", [value, value]
        if cmp in (">", ">="):  # the greatest is above x: the base or some row is
            return f"({self.base} {cmp} ? OR EXISTS ({self._rows(cmp)}))", [value, value]
        return "1 = 1", []  # equality: left to CLIPS

    def member(self, values: list[Any], *, negate: bool = False) -> _Emitted:
        return "1 = 1", []


SWEEP_COLUMNS: Mapping[str, _Column | _Greatest] = {
    "id": _Column("f.id", index=""),
    "subject": _Column("f.subject"),
    "predicate": _Column("f.predicate", index="facts_current_predicate"),
    "object": _Column("f.object"),
    "confidence": _Column("f.confidence", index="facts_current_confidence"),
    "valid_from": _Column("f.valid_from_us", age=True, index="facts_current_valid_from"),
    "reinforced_at": _Greatest(
        "coalesce(f.reinforced_us, f.valid_from_us)",
        "reinforcements",
        "ts_us",
        index="facts_current_reinforced",
    ),
    "observed_at": _Greatest(
        "coalesce(f.observed_us, f.valid_from_us)",
        "reinforcements",
        "observed_us",
        index="facts_current_observed",
    ),
    "rule_id": _Column("f.rule_id", index="facts_current_rule"),
    "layer": _Column("f.layer", index="facts_current_layer"),
    "memory_type": _Column("f.memory_type"),
    "trust": _Column("f.trust"),
}
"""Fact field → how the pre-filter reads it, and the sweep index (of
:data:`~stargraph_mem.stores.repositories.sweep_schema.SWEEP_INDEXES`) that serves it. Fields not
here
are tested by CLIPS only."""

SweepTest = Callable[[_Column | _Greatest, FieldType, Any], _Emitted]


def _value(ftype: FieldType, value: Any) -> Any:
    return literal_value(ftype, value)


def _compare(cmp: str) -> SweepTest:
    def emit(col: _Column | _Greatest, ftype: FieldType, x: Any) -> _Emitted:
        return col.compare(cmp, _value(ftype, x))

    return emit


def _in(col: _Column | _Greatest, ftype: FieldType, xs: Any) -> _Emitted:
    return col.member([_value(ftype, x) for x in xs])


def _not_in(col: _Column | _Greatest, ftype: FieldType, xs: Any) -> _Emitted:
    return col.member([_value(ftype, x) for x in xs], negate=True)


def _since(cmp: str) -> SweepTest:
    def emit(col: _Column | _Greatest, ftype: FieldType, d: Any) -> _Emitted:
        assert isinstance(d, Duration)
        return col.compare(cmp, NowOffset(d.total_microseconds()))

    return emit


SWEEP_TESTS: Mapping[str, SweepTest] = {
    "eq": _compare("="),
    "in": _in,
    "not_in": _not_in,
    "lt": _compare("<"),
    "le": _compare("<="),
    "gt": _compare(">"),
    "ge": _compare(">="),
    "older_than": _since("<="),
    "newer_than": _since(">"),
}
"""Operator → WHERE term of the pre-filter. Operators not here are tested by CLIPS only."""


@dataclass(frozen=True)
class SweepFilter:
    """The pre-filter of one sweep rule: a WHERE fragment over ``facts f`` and its
    parameters; ``alone``: the rule needs only the facts it selects (one positive fact
    pattern, nothing else), so a sweep loads those, not the partitions' other facts."""

    sql: str
    raw_params: tuple[Any, ...]
    alone: bool
    archived: bool = False
    """The pattern admits archived facts: candidates are current or archived facts (the
    pass then loads the partitions' current and archived facts)."""
    indexes: tuple[str, ...] = ()
    """The sweep indexes its terms can read through: a store makes them before the sweep
    reads (they are made on demand, see :mod:`~stargraph_mem.stores.repositories.sweep_schema`)."""

    def params(self, now_us: int) -> tuple[Any, ...]:
        """Parameters with pass-time offsets resolved."""
        return tuple(now_us - p.micros if isinstance(p, NowOffset) else p for p in self.raw_params)


def _kinds(rule: Rule) -> list[tuple[str, Any]]:
    """Each ``when`` item's kind and pattern."""
    return [pattern_of(item) for item in rule.when]


def is_sweep(rule: Rule) -> bool:
    """Whether ``rule``'s ``when`` has no episode pattern (only fact, not and exists)."""
    return all(kind in ("fact", "not", "exists") for kind, _ in _kinds(rule))


_Test = tuple[_Column | _Greatest, FieldType, SweepTest, Any, bool]


def _tests(where: Mapping[str, Condition]) -> list[_Test]:
    """The column, type, emitter, operand and whether an index can serve it (every
    operator but ``not_in``) of each test the tables cover."""
    out: list[_Test] = []
    for fname, cond in where.items():
        col = SWEEP_COLUMNS.get(fname)
        ftype = FACT_FIELDS.get(fname)
        if col is None or ftype is None:
            continue
        for op, operand in cond.tests():
            emit = SWEEP_TESTS.get(op)
            if emit is not None and not isinstance(operand, VarRef):
                out.append((col, ftype, emit, operand, op not in _UNSERVED))
    return out


_UNSERVED = frozenset({"not_in"})
"""Operators whose terms no index serves (they hold for most of it)."""


def _terms(where: Mapping[str, Condition]) -> tuple[list[str], list[Any], list[str]]:
    """WHERE terms, parameters and the sweep indexes they read through. When a test on
    another indexed column is present, the time columns' terms are written so no index
    serves them: an age test (``older_than``) holds for most facts of a store, and SQLite,
    which keeps no statistics here, would otherwise scan that index over all of them
    instead of the selective one."""
    tests = _tests(where)
    other = any(not col.age and col.index is not None and served for col, *_, served in tests)
    parts: list[str] = []
    params: list[Any] = []
    indexes: list[str] = []
    for col, ftype, emit, operand, served in tests:
        if other and col.age:
            col = col.demoted()
        elif col.index and served:
            indexes.append(col.index)
        sql, values = emit(col, ftype, operand)
        parts.append(sql)
        params += values
    return parts, params, list(dict.fromkeys(indexes))


def sweep_filter(rule: Rule) -> SweepFilter:
    """The pre-filter of sweep ``rule`` (see the module)."""
    kinds = _kinds(rule)
    facts = [pattern for kind, pattern in kinds if kind == "fact"]
    parts, params, indexes = _terms(facts[0].where) if facts else ([], [], [])
    archived = bool(facts) and admits_archived(facts[0])
    alone = len(kinds) == 1 and len(facts) == 1 and not archived
    sql = " AND ".join(parts) if parts else "1 = 1"
    return SweepFilter(sql, tuple(params), alone, archived, tuple(indexes))


_LN2_SQL = "0.6931471805599453"


def _huber_sql(x: str) -> str:
    linear = f"0.5 * (1.0 - {_LN2_SQL} * (({x}) - 1.0))"
    return (
        f"(CASE WHEN ({x}) <= 1.0 THEN power(2.0, -({x})) "
        f"WHEN {linear} > 0.0 THEN {linear} ELSE 0.0 END)"
    )


RETENTION_SQL: Mapping[str, Callable[[str], str]] = {
    "l2": lambda x: f"power(2.0, -({x}))",
    "huber": _huber_sql,
    "elastic": lambda x: f"power(2.0, -((({x}) + ({x}) * ({x})) / 2.0))",
}
"""Retention mode → its curve ``R(x)`` as SQL over an age expression ``x`` in half-lives
(the operator table's SQL backend; the same text on SQLite and PostgreSQL)."""
