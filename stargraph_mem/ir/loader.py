"""YAML loading that keeps source positions, and mapping of validation errors onto them.

We build plain Python data from the parser's events ourselves, without recursion, so
that each value's ``(line, col)`` is known by its IR path, duplicate keys are an error
rather than a silent overwrite, and hostile documents are refused at the node that breaks
a limit (size, nesting depth, aliases, nodes after alias expansion) before they cost
time or memory. Scalars keep to what a pack can hold: the core YAML types, finite
floats, signed 64-bit integers, and text without NUL, backspace or lone surrogates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from stargraph_mem.errors import IRError, IRIssue
from stargraph_mem.ir.issues import boolean_word_message, validation_issues, yaml_path
from stargraph_mem.ir.models import RulePack
from stargraph_mem.ir.source_map import PathKey, Positions, SourceMap, format_path

MAX_DOCUMENT_BYTES = 1_048_576
"""Largest rule pack or pack test file read, in bytes of UTF-8 (the shipped ones are < 3 KB).

Together with :data:`MAX_NODES` it bounds the time and memory spent on one document."""
MAX_NESTING_DEPTH = 64
"""Deepest nesting of mappings and sequences, counted through aliases (a pack needs < 12).

Checked on the parser's event stream before anything recursive sees the document: deep
nesting would otherwise exhaust Python's recursion limit or crash libyaml's composer."""
MAX_ALIASES = 1_000
"""Most alias uses (``*name``) in one document."""
MAX_NODES = 100_000
"""Most nodes in one document, an alias counting as every node it stands for.

Bounds what validation walks when anchors are nested ("billion laughs")."""
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""Integers in a pack are signed 64-bit: what CLIPS, SQLite and orjson all take exactly."""

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML was built with it (about 10x faster, same marks)."""
_REREAD_CHARS = 65_536
"""A document libyaml refuses is read again by PyYAML's pure-Python parser, whose messages
are clearer, only up to this size: that parser is about 20 times slower."""


def _too_deep_for_libyaml(exc: yaml.YAMLError) -> bool:
    """libyaml (as bundled with PyYAML 6.0.4 and later) refuses nesting beyond 1,000 levels
    while it scans ahead, before the event stream reaches :data:`MAX_NESTING_DEPTH`: the
    pure-Python parser then reads again, and stops at our own limit within a few levels."""
    return "maximum nesting depth" in str(getattr(exc, "problem", "") or exc)


_RESOLVER: Any = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.SafeLoader(stream="")
_YAML_TAG = "tag:yaml.org,2002:"
_STR_TAG = _YAML_TAG + "str"
_INT_TAG = _YAML_TAG + "int"
_FLOAT_TAG = _YAML_TAG + "float"
_BOOL_TAG = _YAML_TAG + "bool"
_SCALAR_TAGS = frozenset(
    _YAML_TAG + name for name in ("str", "int", "float", "bool", "null", "timestamp")
)
_VALUE_TAG = _YAML_TAG + "value"
"""What a plain ``=`` resolves to in YAML 1.1; it is read as the string ``=``."""
_MERGE_TAG = _YAML_TAG + "merge"
_COLLECTION_TAGS = {
    yaml.MappingStartEvent: _YAML_TAG + "map",
    yaml.SequenceStartEvent: _YAML_TAG + "seq",
}
_BAD_CHAR = re.compile("[\x00\x08\ud800-\udfff]")
"""NUL cannot live in a CLIPS string; CLIPS's reader treats backspace as an edit; a lone
surrogate (from an escape such as ``"\\ud800"``) is not a character and cannot be encoded."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_BAD_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8}))")


class _Skip:
    """Marks a mapping entry whose key was refused: its value is read but not kept."""


_SKIP = _Skip()


def _excerpt(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _show_tag(tag: str) -> str:
    short = "!!" + tag[len(_YAML_TAG) :] if tag.startswith(_YAML_TAG) else tag
    return _excerpt(short, 60)


def _char_problem(text: str, *, key: bool) -> str | None:
    """Why ``text`` cannot be used in a pack (None when it can)."""
    found = _BAD_CHAR.search(text)
    if found is None:
        return None
    code = ord(found.group())
    if 0xD800 <= code <= 0xDFFF:
        where = "a key contains " if key else ""
        return (
            f"{where}lone surrogate U+{code:04X}, which is not a character (write the "
            "character itself, or one \\U escape for a character beyond U+FFFF)"
        )
    if key:
        return f"a key contains the character U+{code:04X}, which cannot be used"
    return f"the character U+{code:04X} cannot be used in a rule pack"


def _construct(tag: str, value: str, event: Any) -> Any:
    """A plain Python value for a resolved scalar; ``ValueError`` says why it is refused."""
    if tag in (_STR_TAG, _VALUE_TAG):
        return value
    if tag == _MERGE_TAG:
        raise ValueError("merge keys ('<<') are not supported")
    if tag not in _SCALAR_TAGS:
        raise ValueError(f"unsupported YAML tag {_show_tag(tag)}")
    node = yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
    try:
        result = _CONSTRUCTOR.yaml_constructors[tag](_CONSTRUCTOR, node)
    except (yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError, OverflowError):
        if tag == _INT_TAG and _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == tag:
            raise ValueError(_int_range_message(value)) from None
        raise ValueError(f"invalid {_show_tag(tag)} value {_excerpt(value)}") from None
    if tag == _INT_TAG and not INT64_MIN <= result <= INT64_MAX:
        raise ValueError(_int_range_message(value))
    if tag == _FLOAT_TAG and not math.isfinite(result):
        raise ValueError(f"not a finite number: {_excerpt(value)}")
    return result


def _resolve(event: Any) -> str:
    """The tag of an untagged scalar, as YAML 1.2's core schema reads it.

    PyYAML follows YAML 1.1, where ``yes``/``no``/``on``/``off`` are booleans: a key ``on:``
    would become ``True``. Only ``true`` and ``false`` (any case) are booleans here.
    """
    tag: str = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)
    if tag == _BOOL_TAG and event.value.lower() not in ("true", "false"):
        return _STR_TAG
    return tag


def _int_range_message(value: str) -> str:
    return (
        f"integer {_excerpt(value)} is out of range: integers are signed 64-bit "
        f"({INT64_MIN} to {INT64_MAX})"
    )


class _Open:
    """A mapping or sequence whose events are still arriving."""

    __slots__ = ("anchor", "height", "key", "path", "record", "size", "value", "where")

    def __init__(
        self, value: Any, path: PathKey, record: bool, anchor: str | None, where: tuple[int, int]
    ) -> None:
        self.value = value
        self.path = path
        self.record = record  # positions are recorded (not inside a refused entry or a key)
        self.anchor = anchor
        self.where = where
        self.size = 1  # nodes, an alias counted at its expanded size
        self.height = 1
        self.key: Any = None  # the mapping key read, waiting for its value


def _where(event: Any) -> tuple[int, int]:
    return event.start_mark.line + 1, event.start_mark.column + 1


class _LimitError(Exception):
    """A document broke a limit or a rule of ours; carries the message and position."""

    def __init__(self, message: str, path: PathKey, mark: Any) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.where = (mark.line + 1, mark.column + 1)


Problem = tuple[PathKey, str, tuple[int, int] | None]


class _Composer:
    """Builds plain data and positions from parser events, without recursion.

    Every limit is checked as the events arrive, so a hostile document is refused at
    the node that breaks the limit, before the rest of it is read.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.stack: list[_Open] = []
        self.positions: Positions = {}
        self.values: Positions = {}
        self.problems: list[Problem] = []
        self.anchors: dict[str, tuple[Any, int, int, tuple[int, int]]] = {}
        self.open_anchors: dict[str, tuple[int, int]] = {}
        self.nodes = 0
        self.aliases = 0
        self.documents = 0
        self.root: Any = None
        self.has_root = False

    def path(self) -> PathKey:
        """The path of the node the parser is at (the mapping's, while reading a key)."""
        if not self.stack:
            return ()
        top = self.stack[-1]
        if isinstance(top.value, list):
            return (*top.path, len(top.value))
        if top.key is None or top.key is _SKIP:
            return top.path
        return (*top.path, top.key)

    def run(self, events: Iterable[Any]) -> None:
        for event in events:
            if isinstance(event, yaml.ScalarEvent):
                self.scalar(event)
            elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                self.start(event)
            elif isinstance(event, yaml.CollectionEndEvent):
                self.end()
            elif isinstance(event, yaml.AliasEvent):
                self.alias(event)
            elif isinstance(event, yaml.DocumentStartEvent):
                self.documents += 1
                if self.documents > 1:
                    raise _LimitError(
                        f"invalid YAML: a {self.what} is a single document, "
                        "but found another document",
                        (),
                        event.start_mark,
                    )

    def count(self, nodes: int, event: Any) -> None:
        self.nodes += nodes
        if self.nodes > MAX_NODES:
            raise _LimitError(
                f"node limit exceeded: a {self.what} has at most {MAX_NODES} nodes "
                "(an alias counts as every node it stands for)",
                self.path(),
                event.start_mark,
            )

    def deep(self, height: int, event: Any) -> None:
        if len(self.stack) + height > MAX_NESTING_DEPTH:
            raise _LimitError(
                f"nesting depth limit exceeded: a {self.what} nests mappings and "
                f"sequences at most {MAX_NESTING_DEPTH} levels deep",
                self.path(),
                event.start_mark,
            )

    def anchor(self, event: Any) -> str | None:
        name: str | None = event.anchor
        if name is not None and (name in self.anchors or name in self.open_anchors):
            first = self.anchors[name][3] if name in self.anchors else self.open_anchors[name]
            raise _LimitError(
                f"invalid YAML: duplicate anchor {_excerpt(name)} (first at line {first[0]})",
                self.path(),
                event.start_mark,
            )
        return name

    def start(self, event: Any) -> None:
        self.deep(1, event)
        self.count(1, event)
        tag = event.tag
        if tag is not None and tag != "!" and tag != _COLLECTION_TAGS[type(event)]:
            raise _LimitError(
                f"unsupported YAML tag {_show_tag(tag)}", self.path(), event.start_mark
            )
        name = self.anchor(event)
        path, record = self.child_place(event)
        value: Any = {} if isinstance(event, yaml.MappingStartEvent) else []
        self.stack.append(_Open(value, path, record, name, _where(event)))
        if name is not None:
            self.open_anchors[name] = _where(event)

    def child_place(self, event: Any) -> tuple[PathKey, bool]:
        """The path of a node starting now, and whether to record its position."""
        where = _where(event)
        if not self.stack:
            self.positions.setdefault((), where)
            return (), True
        top = self.stack[-1]
        path = self.path()
        record = top.record and not self.is_key() and top.key is not _SKIP
        if record:
            self.positions.setdefault(path, where)
        return path, record

    def end(self) -> None:
        done = self.stack.pop()
        if done.anchor is not None:
            del self.open_anchors[done.anchor]
            self.anchors[done.anchor] = (done.value, done.size, done.height, done.where)
        self.attach(done.value, done.size, done.height, done.where)

    def scalar(self, event: Any) -> None:
        self.count(1, event)
        name = self.anchor(event)
        path, record = self.child_place(event)
        tag = event.tag
        if tag is None or tag == "!":
            tag = _resolve(event)
        where = _where(event)
        at = where if self.is_key() else None  # a value is found by its path (its key)
        if record and at is None and (event.value or event.style):  # not an empty null
            self.values[path] = where
        try:
            value = _construct(tag, event.value, event)
        except ValueError as exc:
            self.problems.append((path, str(exc), at))
            value = _SKIP
        if at is not None and isinstance(value, bool | int | float):
            value = event.value  # a key reads as the text written: 'true', not 'True'
        if isinstance(value, str):
            problem = _char_problem(value, key=at is not None)
            if problem is not None:
                self.problems.append((path, problem, at))
                value = _SKIP
        if name is not None:
            self.anchors[name] = (value, 1, 0, where)
        self.attach(value, 1, 0, where)

    def alias(self, event: Any) -> None:
        self.aliases += 1
        if self.aliases > MAX_ALIASES:
            raise _LimitError(
                f"alias limit exceeded: a {self.what} uses at most {MAX_ALIASES} aliases",
                self.path(),
                event.start_mark,
            )
        name = event.anchor
        if name in self.open_anchors:
            raise _LimitError(
                f"invalid YAML: alias {_excerpt(name)} refers to a node that contains it",
                self.path(),
                event.start_mark,
            )
        if name not in self.anchors:
            raise _LimitError(
                f"invalid YAML: found undefined alias {_excerpt(name)}",
                self.path(),
                event.start_mark,
            )
        value, size, height, _ = self.anchors[name]
        self.deep(height, event)
        self.count(size, event)
        self.child_place(event)
        self.attach(value, size, height, _where(event))

    def is_key(self) -> bool:
        top = self.stack[-1] if self.stack else None
        return top is not None and isinstance(top.value, dict) and top.key is None

    def attach(self, value: Any, size: int, height: int, where: tuple[int, int]) -> None:
        """Put a finished node into its parent (as a key, a value or an item)."""
        if not self.stack:
            self.root, self.has_root = value, True
            return
        top = self.stack[-1]
        top.size += size
        top.height = max(top.height, height + 1)
        if isinstance(top.value, list):
            top.value.append(value)
            return
        if top.key is None:
            top.key = self.key(value, where)
            return
        key, top.key = top.key, None
        if key is not _SKIP:
            top.value[key] = value

    def key(self, value: Any, where: tuple[int, int]) -> Any:
        """The text of a mapping key (``_SKIP`` when refused, with a problem noted)."""
        top = self.stack[-1]
        if value is _SKIP:
            return _SKIP  # the problem is noted already
        if value is None:
            self.problems.append((top.path, "a mapping key cannot be null", where))
            return _SKIP
        if isinstance(value, bool | int | float):
            value = str(value)
        if not isinstance(value, str):
            self.problems.append((top.path, "mapping keys must be plain scalars", where))
            return _SKIP
        child = (*top.path, value)
        if value in top.value:
            if top.record:
                self.positions[child] = where
            self.problems.append((child, "duplicate key", where))
            return _SKIP
        if top.record:
            self.positions[child] = where
        return value


def _escape_problem(text: str, mark: Any) -> tuple[str, tuple[int, int]]:
    """Explain libyaml's refusal of a ``\\u``/``\\U`` escape that is not a character."""
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    found = None
    for m in _BAD_ESCAPE.finditer(line):
        if m.start() <= mark.column <= m.end():
            found = m
            break
    if found is None:
        return "invalid YAML: an escape that is not a character", (mark.line + 1, mark.column + 1)
    code = int(found.group(1) or found.group(2), 16)
    escape = found.group()
    where = (mark.line + 1, found.start() + 1)
    if 0xD800 <= code <= 0xDFFF:
        message = f"lone surrogate escape {escape} is not a character"
        pair = _BAD_ESCAPE.match(line, found.end())
        low = int(pair.group(1) or pair.group(2), 16) if pair else 0
        if 0xD800 <= code <= 0xDBFF and 0xDC00 <= low <= 0xDFFF:
            joined = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            message += f" (for U+{joined:X} write \\U{joined:08X})"
        else:
            message += " (write the character itself, or one \\U escape)"
        return message, where
    return f"escape {escape} is beyond the last Unicode character U+10FFFF", where


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of character ``offset``."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _size_error(file: str, head: str, what: str) -> IRError:
    """The document is over :data:`MAX_DOCUMENT_BYTES`; ``head`` is its first part."""
    data = head.encode("utf-8", "surrogatepass")[:MAX_DOCUMENT_BYTES]
    text = data.decode("utf-8", "ignore")
    return IRError(
        IRIssue(
            f"size limit exceeded: a {what} is at most {MAX_DOCUMENT_BYTES} bytes",
            file,
            *_position(text, len(text)),
        )
    )


def _limit_issue(exc: _LimitError, file: str) -> IRError:
    return IRError(IRIssue(exc.message, file, *exc.where, path=format_path(exc.path)))


def parse_yaml(text: str, file: str, *, what: str = "rule pack") -> SourceMap:
    """Parse one YAML document into data plus positions; syntax errors become IRError.

    ``what`` names the kind of document in messages ("rule pack", "pack test file").
    Size, nesting, alias and node limits are checked before any value is built.
    """
    if len(text) > MAX_DOCUMENT_BYTES or (
        len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES
    ):
        raise _size_error(file, text[: MAX_DOCUMENT_BYTES + 1], what)
    if "\x00" in text:
        line, col = _position(text, text.index("\x00"))
        raise IRError(IRIssue(f"NUL characters are not allowed in a {what}", file, line, col))
    surrogate = _SURROGATE.search(text)
    if surrogate is not None:  # only text handed in as a str can hold one
        message = _char_problem(surrogate.group(), key=False)
        raise IRError(IRIssue(str(message), file, *_position(text, surrogate.start())))
    composer = _Composer(what)
    try:
        try:
            composer.run(yaml.parse(text, Loader=_LOADER))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            if mark is not None and "Unicode character escape" in str(getattr(exc, "problem", "")):
                message, where = _escape_problem(text, mark)
                issue = IRIssue(message, file, *where, path=format_path(composer.path()))
                raise IRError(issue) from exc
            if _LOADER is yaml.SafeLoader or (
                len(text) > _REREAD_CHARS and not _too_deep_for_libyaml(exc)
            ):
                raise
            # read again with the pure-Python parser: its messages are clearer
            composer = _Composer(what)
            composer.run(yaml.parse(text, Loader=yaml.SafeLoader))
    except _LimitError as exc:
        raise _limit_issue(exc, file) from None
    except yaml.reader.ReaderError as exc:
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        offset = text.find(chr(code))
        at = _position(text, offset) if offset >= 0 else (None, None)
        message = f"invalid YAML: {exc.reason} (U+{code:04X})"
        raise IRError(IRIssue(message, file, *at)) from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise IRError(IRIssue(f"invalid YAML: {exc.problem}", file, *at)) from exc
    except yaml.YAMLError as exc:
        raise IRError(IRIssue(f"invalid YAML: {exc}", file)) from exc
    except ValueError as exc:  # the pure-Python scanner on an escape beyond U+10FFFF
        raise IRError(IRIssue(f"invalid YAML: {exc}", file)) from exc
    if not composer.has_root:
        raise IRError(IRIssue(f"empty document: a {what} is a mapping", file, 1, 1))
    data = composer.root
    source = SourceMap(file, composer.positions, data, composer.values)
    if composer.problems:
        issues = [source.issue(p, m, at=where) for p, m, where in composer.problems]
        raise IRError(issues[0], issues)
    if not isinstance(data, dict):
        raise IRError(source.issue((), f"a {what} must be a mapping"))
    return source


def _leaves(value: Any, loc: tuple[str | int, ...], out: list[tuple[Any, Any]]) -> None:
    """Every number and boolean in a validated model, with its validation loc."""
    if isinstance(value, BaseModel):
        for name, info in type(value).model_fields.items():
            _leaves(getattr(value, name), (*loc, info.alias or name), out)
    elif isinstance(value, dict):
        for key, item in value.items():
            _leaves(item, (*loc, key), out)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _leaves(item, (*loc, index), out)
    elif isinstance(value, int | float):
        out.append((loc, value))


def _number_problem(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return f"integer out of range: integers are signed 64-bit ({INT64_MIN} to {INT64_MAX})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"not a finite number: {value!r}"
    return None


def _boolean_problem(value: Any, given: Any) -> str | None:
    """Why ``given`` (what the YAML says) cannot be the boolean ``value`` pydantic made of it."""
    if not isinstance(value, bool) or isinstance(given, bool | dict | list):
        return None
    if isinstance(given, str):
        return boolean_word_message(given)
    return f"expected true or false, got {given!r}"


def _given(data: Any, path: PathKey) -> Any:
    """The YAML value at ``path``."""
    for part in path:
        data = data[part]
    return data


def value_issues(model: BaseModel, source: SourceMap) -> list[IRIssue]:
    """Numbers and booleans of a validated model that the YAML did not really say.

    The loader refuses integers beyond signed 64-bit and NaN/infinity as YAML literals;
    this catches values pydantic made from text (``every: "1e30"``, ``tau_seconds: "inf"``)
    before they reach CLIPS, SQLite or JSON, and booleans made from anything but
    ``true``/``false`` (``enabled: yes``, which is a string in YAML 1.2).
    """
    found: list[tuple[Any, Any]] = []
    _leaves(model, (), found)
    issues = []
    for loc, value in found:
        path = yaml_path(loc, source.data)
        problem = _number_problem(value)
        if problem is None and path and path[-1] == loc[-1]:
            problem = _boolean_problem(value, _given(source.data, path))
        if problem is not None:
            issues.append(source.issue(path, problem))
    return issues


Model = TypeVar("Model", bound=BaseModel)


def validate_document(model: type[Model], source: SourceMap) -> Model:
    """Validate loaded YAML against ``model``; raise every problem as one :class:`IRError`.

    Only the YAML key names count (``in``, not the attribute ``in_``). Numbers written as
    text (``every: "5"``) are still read as numbers: PyYAML reads ``1e300`` as text."""
    try:
        value = model.model_validate(source.data, by_alias=True, by_name=False)
    except ValidationError as exc:
        issues = validation_issues(exc, source, model)
        raise IRError(issues[0], issues) from exc
    issues = value_issues(value, source)
    if issues:
        raise IRError(issues[0], issues)
    return value


PACK_TEST_KEYS = frozenset({"cases"})
"""Top-level keys only a pack-test file has (``rules/tests/<pack>.yaml``)."""


def pack_of_tests(file: str) -> str:
    """The pack a pack-test file tests, by the layout ``<dir>/tests/<pack file name>``
    (``<pack>`` when the file is elsewhere)."""
    path = Path(file)
    if path.parent.name != "tests":
        return "<pack>"
    return str(path.parent.parent / path.name)


def _refuse_pack_tests(source: SourceMap) -> None:
    """A pack-test file given where a pack is wanted: say so, not which pack keys it lacks."""
    data = source.data
    if isinstance(data, dict) and "rules" not in data and PACK_TEST_KEYS & set(data):
        key = sorted(PACK_TEST_KEYS & set(data))[0]
        pack = pack_of_tests(source.file)
        message = f'this is a pack-test file: run "stargraph-mem test {pack}"'
        raise IRError(source.issue((key,), message))


def load_pack_text(text: str, file: str = "<string>") -> tuple[RulePack, SourceMap]:
    """Parse and structurally validate a pack; raise the first :class:`IRError` (a pack-test
    file is one error saying what it is)."""
    source = parse_yaml(text, file)
    _refuse_pack_tests(source)
    return validate_document(RulePack, source), source


def read_document(path: str | Path, what: str = "rule pack") -> str:
    """The UTF-8 text of ``path`` (newlines as ``\\n``), reading at most
    :data:`MAX_DOCUMENT_BYTES` + 1 bytes; an unreadable or oversized file is an IRError."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise IRError(IRIssue(f"cannot read {what}: {exc}", str(path))) from exc
    if len(data) > MAX_DOCUMENT_BYTES:
        raise _size_error(str(path), data[:MAX_DOCUMENT_BYTES].decode("utf-8", "ignore"), what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        issue = IRIssue(f"cannot read {what}: {exc}", str(path), line, col)
        raise IRError(issue) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def load_pack_file(path: str | Path) -> tuple[RulePack, SourceMap]:
    """Read ``path`` (UTF-8) and load it as a pack."""
    return load_pack_text(read_document(path), str(path))
