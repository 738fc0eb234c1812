"""YAML loading that keeps source positions, and mapping of validation errors onto them.

PyYAML's composer gives every node a start mark; we build plain Python data from the
node tree ourselves so that each value's ``(line, col)`` is known by its IR path, and so
that duplicate keys are an error rather than a silent overwrite.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from stargraph_mem.errors import IRError, IRIssue
from stargraph_mem.ir.models import RulePack

PathKey = tuple[str | int, ...]
Positions = dict[PathKey, tuple[int, int]]


class SourceMap:
    """Positions of every key/value in a loaded YAML document, by IR path."""

    def __init__(self, file: str, positions: Positions, data: Any) -> None:
        self.file = file
        self.positions = positions
        self.data = data

    def locate(self, path: PathKey) -> tuple[int | None, int | None]:
        """Line/col (1-based) of the deepest known prefix of ``path``."""
        for end in range(len(path), -1, -1):
            pos = self.positions.get(path[:end])
            if pos is not None:
                return pos
        return None, None

    def issue(self, path: PathKey, message: str, *, severity: str = "error") -> IRIssue:
        """An :class:`IRIssue` at ``path`` with the rule id filled in when inside a rule."""
        line, col = self.locate(path)
        return IRIssue(
            message=message,
            file=self.file,
            line=line,
            col=col,
            path=format_path(path),
            rule_id=self.rule_id_at(path),
            severity=severity,
        )

    def rule_id_at(self, path: PathKey) -> str | None:
        if len(path) >= 2 and path[0] == "rules" and isinstance(path[1], int):
            rules = self.data.get("rules") if isinstance(self.data, dict) else None
            if isinstance(rules, list) and 0 <= path[1] < len(rules):
                rule = rules[path[1]]
                if isinstance(rule, dict) and isinstance(rule.get("id"), str):
                    return str(rule["id"])
        return None


def format_path(path: Iterable[str | int]) -> str:
    """``('rules', 2, 'emit')`` → ``rules[2].emit``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


_CONSTRUCTOR = yaml.SafeLoader(stream="")
_UNREPRESENTABLE = frozenset("\x00\x08")
"""NUL cannot live in a CLIPS string; CLIPS's reader treats backspace as an edit."""
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's composer when PyYAML was built with it (about 10x faster, same marks)."""


_STR_TAG = "tag:yaml.org,2002:str"


def _scalar(node: yaml.ScalarNode) -> Any:
    if node.tag == _STR_TAG:  # most scalars: skip the constructor's bookkeeping
        return node.value
    return _CONSTRUCTOR.construct_object(node, deep=True)


def _build(
    node: yaml.Node, path: PathKey, pos: Positions, problems: list[tuple[PathKey, str]]
) -> Any:
    pos.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if isinstance(key, str) and any(c in _UNREPRESENTABLE for c in key):
                problems.append((path, "a key contains a character that cannot be used"))
                continue
            if not isinstance(key, str | int | bool | float):
                problems.append((path, "mapping keys must be plain scalars"))
                continue
            key = str(key)
            child = (*path, key)
            if key in out:
                pos[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                problems.append((child, "duplicate key"))
                continue
            pos[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = _build(value_node, child, pos, problems)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), pos, problems) for i, item in enumerate(node.value)]
    value = _scalar(node)  # type: ignore[arg-type]
    if isinstance(value, str):
        bad = next((c for c in value if c in _UNREPRESENTABLE), None)
        if bad is not None:
            problems.append((path, f"the character U+{ord(bad):04X} cannot be used in a rule pack"))
    return value


def parse_yaml(text: str, file: str, *, what: str = "rule pack") -> SourceMap:
    """Parse one YAML document into data plus positions; syntax errors become IRError.

    ``what`` names the kind of document in messages ("rule pack", "pack test file").
    """
    if "\x00" in text:
        offset = text.index("\x00")
        line = text.count("\n", 0, offset) + 1
        col = offset - (text.rfind("\n", 0, offset) + 1) + 1
        raise IRError(IRIssue(f"NUL characters are not allowed in a {what}", file, line, col))
    try:
        try:
            node = yaml.compose(text, Loader=_LOADER)
        except yaml.YAMLError:
            # re-read with the pure-Python composer: its messages are clearer
            node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise IRError(IRIssue(f"invalid YAML: {exc.problem}", file, *where)) from exc
    except yaml.YAMLError as exc:
        raise IRError(IRIssue(f"invalid YAML: {exc}", file)) from exc
    if node is None:
        raise IRError(IRIssue(f"empty document: a {what} is a mapping", file, 1, 1))
    positions: Positions = {}
    problems: list[tuple[PathKey, str]] = []
    try:
        data = _build(node, (), positions, problems)
    except yaml.YAMLError as exc:
        raise IRError(IRIssue(f"invalid YAML value: {exc}", file)) from exc
    source = SourceMap(file, positions, data)
    if problems:
        issues = [source.issue(p, m) for p, m in problems]
        raise IRError(issues[0], issues)
    if not isinstance(data, dict):
        raise IRError(source.issue((), f"a {what} must be a mapping"))
    return source


def _yaml_path(loc: tuple[str | int, ...], data: Any) -> PathKey:
    """Drop validator-internal loc parts (union tags, ``where``) that are not in the YAML."""
    out: list[str | int] = []
    node = data
    for part in loc:
        key: str | int = part
        if isinstance(node, dict) and isinstance(part, str):
            name = "in" if part == "in_" else "not" if part == "not_" else part
            name = "from" if name == "from_" else name
            if name in node:
                out.append(name)
                node = node[name]
            continue
        if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            out.append(key)
            node = node[key]
            continue
        if node is None or not isinstance(node, dict | list):
            break
    return tuple(out)


_TYPE_MESSAGES = {
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "dict_type": "expected a mapping",
    "list_type": "expected a list",
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "too_short": "must not be empty",
}


def _message(err: Any, loc_key: str | int | None) -> str:
    kind = err["type"]
    if kind == "missing":
        return f"missing required field '{loc_key}'"
    if kind in _TYPE_MESSAGES:
        return _TYPE_MESSAGES[kind]
    if kind == "string_pattern_mismatch":
        return (
            "invalid name: use lower-case letters, digits and '_' (starting with a letter), "
            "at most 63 characters"
        )
    if kind == "literal_error" and loc_key == "ir_version":
        return f"unsupported ir_version {err.get('input')!r} (this compiler reads ir_version 1)"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    msg = msg.replace("Input should be", "expected").replace("input should be", "expected")
    return msg[0].lower() + msg[1:] if msg else kind


def validation_issues(
    exc: ValidationError,
    source: SourceMap,
    allowed_keys: Callable[[tuple[Any, ...]], list[str]] | None = None,
) -> list[IRIssue]:
    """Translate pydantic errors into positioned IR issues, one per distinct path.

    ``allowed_keys(loc)`` lists the valid keys at ``loc`` for spelling suggestions
    (default: the rule pack's).
    """
    keys_at = allowed_keys or (lambda loc: _allowed_keys(loc, exc))
    issues: list[IRIssue] = []
    seen: set[str] = set()
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _yaml_path(loc, source.data)
        if err["type"] == "missing":
            message = _message(err, loc[-1] if loc else None)
        elif err["type"] == "extra_forbidden":
            bad = loc[-1] if loc else ""
            path = (*path, bad) if path[-1:] != (bad,) else path
            message = unknown_field_message(str(bad), keys_at(loc))
        else:
            message = _message(err, loc[-1] if loc else None)
        formatted = format_path(path) + message
        if formatted in seen:
            continue
        seen.add(formatted)
        issues.append(source.issue(path, message))
    return issues


def unknown_field_message(bad: str, allowed: Iterable[str]) -> str:
    """``unknown field (did you mean 'x'?)`` when a close spelling exists."""
    close = difflib.get_close_matches(bad, sorted(allowed), n=1, cutoff=0.6)
    return f"unknown field (did you mean '{close[0]}'?)" if close else "unknown field"


def _allowed_keys(loc: tuple[Any, ...], exc: ValidationError) -> list[str]:
    """Best-effort list of valid keys at ``loc`` for spelling suggestions."""
    from stargraph_mem.ir import models as m
    from stargraph_mem.stores.models import Cadence

    table: dict[str, type[Any]] = {
        "emit": m.Emit,
        "salience": m.SalienceGate,
        "defaults": m.Defaults,
        "cadence": Cadence,
        "confidence": m.LinearConfidence,
    }
    parent = loc[-2] if len(loc) >= 2 else None
    if len(loc) == 1:
        return model_keys(m.RulePack)
    if len(loc) == 3 and loc[0] == "rules":
        return model_keys(m.Rule)
    if isinstance(parent, str) and parent in table:
        return model_keys(table[parent])
    if "where" in loc:
        return model_keys(m.Condition)
    return []


def model_keys(model: type[Any]) -> list[str]:
    """The YAML keys of a pydantic model (aliases where set)."""
    return [info.alias or name for name, info in model.model_fields.items()]


def load_pack_text(text: str, file: str = "<string>") -> tuple[RulePack, SourceMap]:
    """Parse and structurally validate a pack; raise the first :class:`IRError`."""
    source = parse_yaml(text, file)
    try:
        pack = RulePack.model_validate(source.data)
    except ValidationError as exc:
        issues = validation_issues(exc, source)
        raise IRError(issues[0], issues) from exc
    return pack, source


def load_pack_file(path: str | Path) -> tuple[RulePack, SourceMap]:
    """Read ``path`` (UTF-8) and load it as a pack."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IRError(IRIssue(f"cannot read rule pack: {exc}", str(path))) from exc
    return load_pack_text(text, str(path))
