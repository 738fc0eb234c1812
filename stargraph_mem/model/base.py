"""What every model of the vocabulary shares: the frozen base model, identifiers, text and
JSON-value checks, and the stored-datetime type.

Naive datetimes are rejected everywhere (``AwareDatetime``); identifiers follow one
pattern so they can travel through CLIPS and SQL without quoting surprises.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    StringConstraints,
    ValidationInfo,
)

from stargraph_mem.model.ids import ID_PATTERN as ID_PATTERN  # re-export
from stargraph_mem.model.limits import SCOPE_PART_CHARS
from stargraph_mem.model.time import check_time_range

Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
ScopePart = Annotated[str, StringConstraints(min_length=1, max_length=SCOPE_PART_CHARS)]


class FrozenModel(BaseModel):
    """Immutable, closed models: unknown keys are errors, text is kept as given."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


def no_nul(value: str, what: str) -> str:
    """``value``, unless it holds a NUL character (``ValueError`` naming ``what``)."""
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    return value


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
"""A lone surrogate: a Python string may hold one, UTF-8 (SQLite, JSON) cannot."""


def unicode_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as UTF-8 text (a lone surrogate), or ``None``."""
    if value.isascii():
        return None
    found = _SURROGATE.search(value)
    if found is None:
        return None
    return (
        f"contains a lone surrogate {found.group()!r} at index {found.start()} "
        "(not valid Unicode text: it cannot be stored as UTF-8)"
    )


def check_unicode(value: str, what: str) -> str:
    """``value``, unless UTF-8 cannot hold it (``ValueError`` naming ``what``)."""
    problem = unicode_problem(value)
    if problem is not None:
        raise ValueError(f"{what} {problem}")
    return value


MAX_JSON_DEPTH: Final = 64
"""The deepest nesting of JSON taken from outside (LangGraph item values, MCP tool
arguments), as for rule packs: deeper input is refused before any parser, encoder or
recursive check could exhaust the stack (orjson stops at 255 levels, pydantic at 256)."""


def json_depth_exceeded(value: object, limit: int = MAX_JSON_DEPTH) -> list[object] | None:
    """The path (keys and indexes) to the first dict or list of ``value`` nested deeper
    than ``limit`` levels (``value`` itself is level 1), or ``None``; checked without
    recursion, so any depth is safe."""
    stack: list[tuple[object, int, list[object]]] = [(value, 1, [])]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict):
            children: list[tuple[object, object]] = list(item.items())
        elif isinstance(item, list):
            children = list(enumerate(item))
        else:
            continue
        if depth > limit:
            return path
        stack.extend((child, depth + 1, [*path, key]) for key, child in reversed(children))
    return None


_INT_RANGE = (-(2**63), 2**64 - 1)
"""Integers orjson stores exactly; beyond this range it would fail or silently go to float."""


def check_storable(value: Any, where: str) -> None:
    """Raise ``ValueError`` for JSON values orjson would not round-trip (NaN/inf, huge ints,
    lone surrogates or NUL in strings or keys)."""
    if isinstance(value, str):
        # SQLite's JSON functions end a string at NUL: it would not read back the same
        check_unicode(no_nul(value, where), where)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be a finite number (got {value!r})")
    elif isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise ValueError(f"{where} is an integer outside the 64-bit range (got {value})")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                check_unicode(no_nul(key, f"{where}: key {key!r}"), f"{where}: key {key!r}")
            check_storable(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_storable(item, f"{where}[{index}]")


def _storable_time(value: datetime, info: ValidationInfo) -> datetime:
    return check_time_range(value, info.field_name or "datetime")


StoredDatetime = Annotated[AwareDatetime, AfterValidator(_storable_time)]
"""A timezone-aware datetime whose UTC value the stores can keep (years 1 to 9999 in UTC)."""
