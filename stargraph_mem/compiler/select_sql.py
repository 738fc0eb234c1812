"""Declarative ``select`` → parameterised SQL over the episodes table.

Only column names and JSON paths built from checked identifiers appear in the SQL text;
every value travels as a bound parameter. Durations stay symbolic until the pass time
is known (:meth:`SelectSQL.params`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stargraph_mem.compiler.generator import literal_value
from stargraph_mem.ir.models import EPISODE_BUILTINS, Condition, Duration, FieldType, SelectClause

_COLUMNS = {
    "id": "id",
    "session": "session",
    "source_node": "source_node",
    "content": "content",
    "timestamp": "ts_us",
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


def _column(fname: str) -> str:
    if fname in EPISODE_BUILTINS:
        return _COLUMNS[fname]
    return f"json_extract(CAST(metadata AS TEXT), '$.{fname}')"


def _sql_value(ftype: FieldType, value: Any) -> Any:
    value = literal_value(ftype, value)
    return int(value) if isinstance(value, bool) else value


def _condition(fname: str, ftype: FieldType, cond: Condition) -> tuple[list[str], list[Any]]:
    col = _column(fname)
    parts: list[str] = []
    params: list[Any] = []
    if cond.exists:
        parts.append(f"{col} IS NOT NULL")
    for op, value in cond.tests():
        if op == "missing":
            parts.append(f"{col} IS NULL")
        elif op == "eq":
            parts.append(f"{col} = ?")
            params.append(_sql_value(ftype, value))
        elif op == "ne":
            parts.append(f"({col} IS NULL OR {col} <> ?)")
            params.append(_sql_value(ftype, value))
        elif op in ("in", "not_in"):
            marks = ", ".join("?" for _ in value)
            if op == "in":
                parts.append(f"{col} IN ({marks})")
            else:
                parts.append(f"({col} IS NULL OR {col} NOT IN ({marks}))")
            params.extend(_sql_value(ftype, v) for v in value)
        elif op in ("lt", "le", "gt", "ge"):
            cmp = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
            parts.append(f"{col} {cmp} ?")
            params.append(_sql_value(ftype, value))
        elif op == "contains" and ftype == "list":
            path = f"$.{fname}"
            parts.append(
                "EXISTS (SELECT 1 FROM json_each(CAST(metadata AS TEXT), ?) WHERE value = ?)"
            )
            params.extend([path, value])
        elif op == "contains":
            parts.append(f"instr({col}, ?) > 0")
            params.append(value)
        elif op == "prefix":
            parts.append(f"substr({col}, 1, length(?)) = ?")
            params.extend([value, value])
        elif op in ("older_than", "newer_than"):
            assert isinstance(value, Duration)
            parts.append(f"{col} {'<=' if op == 'older_than' else '>'} ?")
            params.append(NowOffset(value.total_microseconds()))
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
