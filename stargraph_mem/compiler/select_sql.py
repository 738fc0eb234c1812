"""Declarative ``select`` → parameterised SQL over the episodes table.

Only column names and JSON paths built from checked identifiers appear in the SQL text;
every value travels as a bound parameter. Durations stay symbolic until the pass time
is known (:meth:`SelectSQL.params`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stargraph_mem.compiler.program import literal_value
from stargraph_mem.errors import CompileError
from stargraph_mem.ir.models import EPISODE_BUILTINS, Condition, Duration, FieldType, SelectClause
from stargraph_mem.ir.operators import unknown_operator
from stargraph_mem.ir.reference import normal_form_of

_COLUMNS = {
    "id": "id",
    "session": "session",
    "source_node": "source_node",
    "content": "content",
    "timestamp": "ts_us",
    "access_count": "access_count",
    "last_access": "coalesce(last_accessed_us, ts_us)",
}


@dataclass(frozen=True)
class NowOffset:
    """A parameter computed at pass time: ``now_us - micros``."""

    micros: int


@dataclass(frozen=True)
class SelectSQL:
    """A WHERE fragment (ANDed conditions) and its parameters."""

    sql: str
    raw_params: tuple[Any, ...]

    def params(self, now_us: int) -> tuple[Any, ...]:
        """Parameters with pass-time offsets resolved."""
        return tuple(now_us - p.micros if isinstance(p, NowOffset) else p for p in self.raw_params)


TIMESTAMP_FUNCTION = "sm_timestamp_us"
"""SQL function (registered on the connection that runs a ``select``) turning an ISO-8601
text with offset into UTC microseconds, or NULL: the reference evaluator's reading."""

NORMAL_FORM_FUNCTION = "sm_normal_form"
"""SQL function (registered beside :data:`TIMESTAMP_FUNCTION`) giving a string's content
normal form (the reference evaluator's ``normal_eq`` reading)."""

_JSON_TYPES: dict[str, str] = {
    "string": "'text'",
    "timestamp": "'text'",
    "integer": "'integer'",
    "number": "'integer', 'real'",
    "boolean": "'true', 'false'",
    "list": "'array'",
}
"""``json_type`` answers a well-typed metadata value of each field type can give."""


@dataclass(frozen=True)
class _Field:
    """SQL expressions for one field: its value, presence and well-typedness."""

    name: str
    ftype: FieldType

    @property
    def builtin(self) -> bool:
        return self.name in EPISODE_BUILTINS

    @property
    def path(self) -> str:
        return f"'$.{self.name}'"  # names match NAME_PATTERN: no quoting needed

    @property
    def raw(self) -> str:
        if self.builtin:
            return _COLUMNS[self.name]
        return f"json_extract(CAST(metadata AS TEXT), {self.path})"

    @property
    def value(self) -> str:
        """The value compared by tests (timestamps as microseconds)."""
        if self.ftype == "timestamp" and not self.builtin:
            return f"{TIMESTAMP_FUNCTION}({self.raw})"
        return self.raw

    def json_each(self) -> str:
        return f"json_each(CAST(metadata AS TEXT), {self.path})"

    @property
    def present(self) -> str:
        if self.builtin:
            return f"{self.raw} IS NOT NULL"
        if self.ftype == "list":
            return (
                f"coalesce(json_type(CAST(metadata AS TEXT), {self.path}), '') = 'array' "
                f"AND coalesce(json_array_length(CAST(metadata AS TEXT), {self.path}), 0) > 0"
            )
        return f"coalesce(json_type(CAST(metadata AS TEXT), {self.path}), 'null') <> 'null'"

    @property
    def ill_typed(self) -> str | None:
        """True when the field holds a value the runtime would reject (None: never).

        Strings with NUL are refused when episodes are written, so no test for them here."""
        if self.builtin:
            return None
        jtype = f"json_type(CAST(metadata AS TEXT), {self.path})"
        wrong = f"{jtype} NOT IN ('null', {_JSON_TYPES[self.ftype]})"
        if self.ftype == "timestamp":
            wrong += f" OR ({jtype} = 'text' AND {self.value} IS NULL)"
        elif self.ftype == "integer":
            # JSON integers beyond 64 bits: json_type says integer, the value is a real
            wrong += f" OR ({jtype} = 'integer' AND typeof({self.raw}) <> 'integer')"
        elif self.ftype == "list":
            wrong += (
                f" OR ({jtype} = 'array' AND EXISTS (SELECT 1 FROM {self.json_each()} "
                "WHERE type <> 'text' "
                "OR value = '' OR instr(value, ' ') > 0))"
            )
        return f"coalesce({wrong}, 0)"


_Emitted = tuple[str, list[Any]]
SqlTest = Callable[[_Field, Any], _Emitted]


def _sql_value(ftype: FieldType, value: Any) -> Any:
    value = literal_value(ftype, value)
    return int(value) if isinstance(value, bool) else value


def _sql_compare(cmp: str) -> SqlTest:
    def emit(f: _Field, x: Any) -> _Emitted:
        return f"{f.value} {cmp} ?", [_sql_value(f.ftype, x)]

    return emit


def _sql_ne(f: _Field, x: Any) -> _Emitted:
    return f"(NOT ({f.present}) OR {f.value} <> ?)", [_sql_value(f.ftype, x)]


def _sql_in(f: _Field, xs: Any) -> _Emitted:
    marks = ", ".join("?" for _ in xs)
    return f"{f.value} IN ({marks})", [_sql_value(f.ftype, x) for x in xs]


def _sql_not_in(f: _Field, xs: Any) -> _Emitted:
    marks = ", ".join("?" for _ in xs)
    return (
        f"(NOT ({f.present}) OR {f.value} NOT IN ({marks}))",
        [_sql_value(f.ftype, x) for x in xs],
    )


def _sql_exists(f: _Field, x: Any) -> _Emitted:
    return f.present, []


def _sql_missing(f: _Field, x: Any) -> _Emitted:
    return f"NOT ({f.present})", []


def _sql_contains(f: _Field, x: Any) -> _Emitted:
    if f.ftype == "list":
        return f"EXISTS (SELECT 1 FROM {f.json_each()} WHERE value = ?)", [x]
    return f"instr({f.value}, ?) > 0", [x]


def _sql_prefix(f: _Field, x: Any) -> _Emitted:
    return f"substr({f.value}, 1, length(?)) = ?", [x, x]


def _sql_normal_eq(f: _Field, x: Any) -> _Emitted:
    return f"{NORMAL_FORM_FUNCTION}({f.value}) = ?", [normal_form_of(x)]


def _sql_since(cmp: str) -> SqlTest:
    def emit(f: _Field, d: Any) -> _Emitted:
        assert isinstance(d, Duration)
        return f"{f.value} {cmp} ?", [NowOffset(d.total_microseconds())]

    return emit


SQL_TESTS: Mapping[str, SqlTest] = {
    "eq": _sql_compare("="),
    "ne": _sql_ne,
    "in": _sql_in,
    "not_in": _sql_not_in,
    "lt": _sql_compare("<"),
    "le": _sql_compare("<="),
    "gt": _sql_compare(">"),
    "ge": _sql_compare(">="),
    "exists": _sql_exists,
    "missing": _sql_missing,
    "contains": _sql_contains,
    "prefix": _sql_prefix,
    "normal_eq": _sql_normal_eq,
    "older_than": _sql_since("<="),
    "newer_than": _sql_since(">"),
}
"""The SQL ``select`` compiler's table: operator → (WHERE term, parameters)."""


def _condition(fname: str, ftype: FieldType, cond: Condition) -> tuple[list[str], list[Any]]:
    f = _Field(fname, ftype)
    parts: list[str] = []
    params: list[Any] = []
    ill = f.ill_typed
    if ill is not None:
        parts.append(f"NOT ({ill})")
    if cond.bind is not None and ftype != "list":
        parts.append(f.present)
    for op, value in cond.tests():
        emit = SQL_TESTS.get(op)
        if emit is None:
            raise CompileError(unknown_operator(op))
        sql, values = emit(f, value)
        parts.append(sql)
        params.extend(values)
    return parts, params


def compile_select(select: SelectClause, types: dict[str, FieldType]) -> SelectSQL:
    """Compile a checked ``select`` clause (literal tests only) to SQL."""
    parts: list[str] = []
    params: list[Any] = []
    for fname, cond in select.where.items():
        p, v = _condition(fname, types[fname], cond)
        parts += p
        params += v
    return SelectSQL(" AND ".join(parts) if parts else "1", tuple(params))
