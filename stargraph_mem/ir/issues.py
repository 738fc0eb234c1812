"""Pydantic validation errors as positioned IR issues, one clear message per problem.

Errors are read against the validated model's own types: the keys allowed where an
unknown key was found (for "did you mean"), the bounds of a number, and the members of
a union. A union reports only the member the input was meant for (the number member for
a number, the mapping member whose keys fit a mapping), not one message per member.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Tag, ValidationError
from pydantic.fields import FieldInfo

from stargraph_mem.ir.models import NAME_PATTERN, WHEN_KINDS
from stargraph_mem.model.base import ID_PATTERN

if TYPE_CHECKING:
    from stargraph_mem.errors import IRIssue
    from stargraph_mem.ir.source_map import SourceMap

PathKey = tuple[str | int, ...]


# --- where a validation loc leads in the model's types ------------------------------------


def model_keys(model: type[Any]) -> list[str]:
    """The YAML keys of a pydantic model (aliases where set)."""
    return [info.alias or name for name, info in model.model_fields.items()]


def _members(annotation: Any) -> list[Any]:
    """The members of a union other than ``None`` (``[annotation]`` when not a union)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """``annotation`` without ``Annotated[...]`` and ``| None``, and the metadata removed."""
    meta: list[Any] = []
    while True:
        if typing.get_origin(annotation) is Annotated:
            annotation, *extra = typing.get_args(annotation)
            for item in extra:
                meta.extend(item.metadata if isinstance(item, FieldInfo) else [item])
            continue
        members = _members(annotation)
        if len(members) == 1 and members[0] is not annotation:
            annotation = members[0]
            continue
        return annotation, meta


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


_FUNCTION_TAG = re.compile(r"^function-\w+\[.*, (\w+)\]$")
"""pydantic's tag for a model with validators: ``function-after[_bounded(), Duration]``."""


def _member(members: Sequence[Any], tag: str | int) -> Any | None:
    """The union member pydantic names ``tag`` in a loc (None when it cannot be told)."""
    text = str(tag)
    found = _FUNCTION_TAG.match(text)
    name = found.group(1) if found else text.removeprefix("constrained-")
    others = []
    for member in members:
        base, meta = _unwrap(member)
        if any(isinstance(m, Tag) and m.tag == text for m in meta):
            return member
        if getattr(base, "__name__", None) == name:
            return member
        if name.startswith("union[") and len(_members(base)) > 1:
            return member
        if not _is_model(base):
            others.append(member)
    return others[0] if len(others) == 1 else None


def _field(model: type[BaseModel], part: str | int) -> tuple[str, FieldInfo] | None:
    for name, info in model.model_fields.items():
        if part in (name, info.alias):
            return info.alias or name, info
    return None


@dataclass
class _Place:
    """Where a loc leads: the type there (None once lost), its constraints, the loc
    indexes that name a union member, and the last field passed."""

    annotation: Any
    metadata: list[Any] = field(default_factory=list)
    branches: list[int] = field(default_factory=list)
    name: str | None = None


def _step(place: _Place, index: int, part: str | int) -> None:
    """Move ``place`` one loc part down."""
    annotation = place.annotation
    members = _members(annotation)
    origin = typing.get_origin(annotation)
    if len(members) > 1:
        place.branches.append(index)
        chosen = _member(members, part)
        place.annotation, place.metadata = _unwrap(chosen) if chosen is not None else (None, [])
    elif _is_model(annotation):
        found = _field(annotation, part)
        if found is None:
            place.annotation = None
            return
        place.name, info = found
        place.annotation, meta = _unwrap(info.annotation)
        place.metadata = [*info.metadata, *meta]
    elif isinstance(part, int) and origin in (list, tuple, set, frozenset):
        place.annotation, place.metadata = _unwrap(typing.get_args(annotation)[0])
    elif isinstance(part, str) and origin is dict:
        place.annotation, place.metadata = _unwrap(typing.get_args(annotation)[1])
    else:
        place.annotation = None


def locate_type(root: type[BaseModel], loc: Sequence[str | int]) -> _Place:
    """Follow a validation ``loc`` through the types of ``root``."""
    place = _Place(root)
    for index, part in enumerate(loc):
        if place.annotation is None:
            break
        _step(place, index, part)
    return place


def unknown_key_message(root: type[BaseModel], loc: Sequence[str | int]) -> str:
    """The message for the unknown key at ``loc``, with the keys allowed beside it.

    A model names what its keys are with a ``key_name`` class attribute (default "field").
    """
    bad = str(loc[-1]) if loc else ""
    model = locate_type(root, loc[:-1]).annotation
    if not _is_model(model):
        return unknown_field_message(bad, [])
    return unknown_field_message(
        bad,
        model_keys(model),
        getattr(model, "key_name", "field"),
        getattr(model, "key_aliases", {}),
    )


def unknown_field_message(
    bad: str, allowed: Iterable[str], what: str = "field", aliases: Mapping[str, str] | None = None
) -> str:
    """``unknown field 'x'; did you mean 'y'?`` when a known alias (``gte`` for ``ge``) or a
    close spelling exists."""
    close = suggestion(bad, allowed, aliases)
    text = f"unknown {what} '{bad}'"
    return f"{text}; did you mean '{close}'?" if close else text


def suggestion(
    bad: str, allowed: Iterable[str], aliases: Mapping[str, str] | None = None
) -> str | None:
    """The allowed key ``bad`` was meant to be: its known alias, else the closest spelling."""
    keys = sorted(allowed)
    meant = (aliases or {}).get(bad) or (aliases or {}).get(bad.lower())
    if meant in keys:
        return meant
    close = difflib.get_close_matches(bad, keys, n=1, cutoff=0.6)
    return close[0] if close else None


def _key_suggestion(root: type[BaseModel], loc: Sequence[str | int]) -> str | None:
    """The key meant by the unknown key at the end of ``loc``."""
    model = locate_type(root, loc[:-1]).annotation
    if not _is_model(model) or not loc:
        return None
    return suggestion(str(loc[-1]), model_keys(model), getattr(model, "key_aliases", {}))


# --- locs to YAML paths ------------------------------------------------------------------


def yaml_path(loc: Sequence[str | int], data: Any) -> PathKey:
    """Drop validator-internal loc parts (union tags, ``where``) that are not in the YAML."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str):
            name = "in" if part == "in_" else "not" if part == "not_" else part
            name = "from" if name == "from_" else name
            if name in node:
                out.append(name)
                node = node[name]
            continue
        if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
            continue
        if node is None or not isinstance(node, dict | list):
            break
    return tuple(out)


# --- one member of each union ------------------------------------------------------------


@dataclass
class _Error:
    """One pydantic error with where its loc leads; ``text`` replaces its message."""

    order: int
    detail: Any
    loc: tuple[str | int, ...]
    place: _Place
    text: str | None = None


_KIND_ERRORS = frozenset(
    {
        "model_type",
        "model_attributes_type",
        "dict_type",
        "list_type",
        "tuple_type",
        "string_type",
        "int_type",
        "int_parsing",
        "float_type",
        "float_parsing",
        "bool_type",
        "bool_parsing",
        "datetime_type",
    }
)
"""Errors saying the input is of the wrong kind for a member (not a wrong value)."""


def _wrong_kind(error: _Error, at: int) -> bool:
    """Whether ``error`` says the input at union position ``at`` is not its member's kind."""
    rest = [i for i in range(at + 1, len(error.loc)) if i not in error.place.branches]
    return not rest and error.detail["type"] in _KIND_ERRORS


def _extras(errors: Sequence[_Error], at: int) -> int:
    """How many keys of the input the member at union position ``at`` does not know."""
    return sum(1 for e in errors if e.detail["type"] == "extra_forbidden" and len(e.loc) == at + 2)


def _choose(by_member: dict[str | int, list[_Error]], at: int) -> list[_Error]:
    """The errors of the member the input was meant for; one error when it fits none."""
    fitting = [
        errors for errors in by_member.values() if not all(_wrong_kind(e, at) for e in errors)
    ]
    if fitting:
        return min(fitting, key=lambda errors: (_extras(errors, at), len(errors)))
    first = min((e for errors in by_member.values() for e in errors), key=lambda e: e.order)
    kinds = [_message(e, None) for errors in by_member.values() for e in errors]
    wanted = list(dict.fromkeys(k.removeprefix("expected ") for k in kinds))
    text = "expected " + (", ".join(wanted[:-1]) + " or " if len(wanted) > 1 else "") + wanted[-1]
    return [_Error(first.order, first.detail, first.loc[:at], _Place(None), text)]


def _one_member(errors: list[_Error], level: int = 0) -> list[_Error]:
    """Keep, for every union (outermost first), only the chosen member's errors."""
    out: list[_Error] = []
    unions: dict[tuple[str | int, ...], dict[str | int, list[_Error]]] = {}
    for error in errors:
        if len(error.place.branches) <= level:
            out.append(error)
            continue
        at = error.place.branches[level]
        unions.setdefault(error.loc[:at], {}).setdefault(error.loc[at], []).append(error)
    for prefix, by_member in unions.items():
        members = list(by_member.values())
        chosen = _choose(by_member, len(prefix)) if len(members) > 1 else members[0]
        out += _one_member(chosen, level + 1)
    return sorted(out, key=lambda e: e.order)


# --- messages ------------------------------------------------------------------------------


_TYPE_MESSAGES = {
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "dict_type": "expected a mapping",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "datetime_type": "expected an ISO-8601 time with an offset",
    "too_short": "must not be empty",
}
_BOUNDS = ("ge", "gt", "le", "lt")
_PATTERN_MESSAGES = {
    NAME_PATTERN: "invalid name: use lower-case letters, digits and '_' (starting with a "
    "letter), at most 63 characters",
    ID_PATTERN: "invalid id: use letters, digits and '.', '_', ':', '@', '-' (starting with "
    "a letter or digit), at most 128 characters",
}


def _show(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else repr(value)


def _bounds_message(error: _Error) -> str:
    """``confidence must be between 0 and 1, got 1.3``: both bounds, from the type."""
    limits: dict[str, Any] = {}
    for item in error.place.metadata:
        for key in _BOUNDS:
            if getattr(item, key, None) is not None:
                limits[key] = getattr(item, key)
    for key, value in (error.detail.get("ctx") or {}).items():
        if key in _BOUNDS:
            limits.setdefault(key, value)
    if "ge" in limits and "le" in limits:
        wanted = f"between {_show(limits['ge'])} and {_show(limits['le'])}"
    else:
        words = {"ge": "at least", "gt": "greater than", "le": "at most", "lt": "less than"}
        wanted = " and ".join(f"{words[k]} {_show(v)}" for k, v in limits.items())
    name = error.place.name or "the value"
    return f"{name} must be {wanted}, got {_show(error.detail.get('input'))}"


def _pattern_kind_message(error: _Error) -> str:
    """An unknown pattern kind, with the close spelling when there is one."""
    text = str(error.detail["msg"])
    given = error.detail.get("input")
    if isinstance(given, dict) and len(given) == 1:
        key = str(next(iter(given)))
        close = difflib.get_close_matches(key, sorted(WHEN_KINDS), n=1, cutoff=0.6)
        if close:
            return f"unknown pattern '{key}'; did you mean '{close[0]}'?"
    return text


_YAML11_TRUE = frozenset({"yes", "on", "y"})
_YAML11_FALSE = frozenset({"no", "off", "n"})


def boolean_word_message(given: str) -> str:
    """``expected true or false, got 'yes' (…): write true`` for a word YAML 1.1 read as a
    boolean and YAML 1.2 reads as a string."""
    word = given.lower()
    if word in _YAML11_TRUE | _YAML11_FALSE:
        meant = "true" if word in _YAML11_TRUE else "false"
        return f"expected true or false, got {given!r} (a string, as in YAML 1.2): write {meant}"
    return f"expected true or false, got {given!r}"


def _message(error: _Error, loc_key: str | int | None) -> str:
    detail = error.detail
    kind = detail["type"]
    if error.text is not None:
        return error.text
    if kind in ("bool_type", "bool_parsing") and isinstance(detail.get("input"), str):
        return boolean_word_message(detail["input"])
    if kind == "missing":
        return f"missing required field '{loc_key}'"
    if kind in _TYPE_MESSAGES:
        return _TYPE_MESSAGES[kind]
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        return _bounds_message(error)
    if kind == "pattern_kind":
        return _pattern_kind_message(error)
    if kind == "string_pattern_mismatch":
        pattern = str((detail.get("ctx") or {}).get("pattern"))
        return _PATTERN_MESSAGES.get(pattern, str(detail["msg"]))
    if kind == "literal_error" and loc_key == "ir_version":
        return f"unsupported ir_version {detail.get('input')!r} (this compiler reads ir_version 1)"
    msg = str(detail["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    msg = msg.replace("Input should be", "expected").replace("input should be", "expected")
    return msg[0].lower() + msg[1:] if msg else kind


def _misspelled_pattern_key(root: type[BaseModel], error: _Error) -> tuple[int, str] | None:
    """For an error on a pattern's field whose value is no condition at all
    (``earlier: {kyes: [subject]}``) and whose name is close to one of the pattern's own
    keys: where ``where`` is in the loc, and the key meant."""
    loc = error.loc
    if "where" not in loc or error.detail["type"] not in _KIND_ERRORS:
        return None
    at = loc.index("where")
    if len(loc) != at + 2 or not isinstance(loc[-1], str):
        return None
    pattern = locate_type(root, loc[:at]).annotation
    own = getattr(pattern, "_own_keys", None)
    if own is None or loc[-1] in own():
        return None
    meant = suggestion(loc[-1], own())
    return (at, meant) if meant is not None else None


def _one_message_per_typo(root: type[BaseModel], errors: list[_Error]) -> list[_Error]:
    """A misspelled key is one message (``unknown field 'varr'; did you mean 'var'?``),
    not that one and ``missing required field 'var'`` beside it."""
    meant: set[tuple[str | int, ...]] = set()
    for error in errors:
        if error.detail["type"] == "extra_forbidden":
            key = _key_suggestion(root, error.loc)
            if key is not None:
                meant.add((*error.loc[:-1], key))
            continue
        typo = _misspelled_pattern_key(root, error)
        if typo is not None:
            at, key = typo
            error.text = unknown_field_message(str(error.loc[-1]), [key])
            meant.add((*error.loc[:at], key))
    return [e for e in errors if not (e.detail["type"] == "missing" and e.loc in meant)]


def validation_issues(
    exc: ValidationError, source: SourceMap, root: type[BaseModel]
) -> list[IRIssue]:
    """Translate pydantic errors on ``root`` into positioned IR issues, one per distinct
    path and message, one member per union."""
    errors = [
        _Error(n, err, tuple(err["loc"]), locate_type(root, tuple(err["loc"])))
        for n, err in enumerate(exc.errors())
    ]
    issues: list[IRIssue] = []
    seen: set[tuple[PathKey, str]] = set()
    for error in _one_message_per_typo(root, _one_member(errors)):
        loc = error.loc
        path = yaml_path(loc, source.data)
        if error.text is None and error.detail["type"] == "extra_forbidden":
            bad = loc[-1] if loc else ""
            path = (*path, bad) if path[-1:] != (bad,) else path
            message = unknown_key_message(root, loc)
        else:
            message = _message(error, loc[-1] if loc else None)
        if (path, message) in seen:
            continue
        seen.add((path, message))
        at = source.value_at(path) if error.detail["type"] == "value_error" else None
        issues.append(source.issue(path, message, at=at))
    return issues
