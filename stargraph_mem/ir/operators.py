"""The operator table: every condition test of the IR, specified once.

Each :class:`Operator` says what the YAML looks like (its operand), which field types it
applies to, what it means, and what it gives on a field that is missing or ``null``.
The backends are tables keyed by operator name: the CLIPS emitter
(``compiler/generator.py``), the SQL ``select`` compiler (``compiler/select_sql.py``),
lint's reasoning (``authoring/lint.py``) and the plain-Python reference evaluator
(``ir/reference.py``). ``tests/test_operators.py`` checks that every backend implements
every operator and that the backends give identical answers.

Adding an operator: one entry here, one entry in each backend table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

OperandKind = Literal["value", "values", "flag", "duration"]
"""``value``: one literal or ``{var: x}``; ``values``: a list of literals;
``flag``: ``true``; ``duration``: ``{days: 7}`` or ``7d``, relative to the pass time."""

FieldType = Literal["string", "integer", "number", "boolean", "timestamp", "list"]

ALL_TYPES: frozenset[FieldType] = frozenset(
    ("string", "integer", "number", "boolean", "timestamp", "list")
)
SCALAR_TYPES: frozenset[FieldType] = frozenset(
    ("string", "integer", "number", "boolean", "timestamp")
)
ORDERED_TYPES: frozenset[FieldType] = frozenset(("integer", "number", "timestamp"))


@dataclass(frozen=True)
class Operator:
    """One condition test: ``{name: operand}`` under a field."""

    name: str
    operand: OperandKind
    field_types: frozenset[FieldType]
    """Field types the test applies to; any other type is an IR error."""
    string_operand: bool
    """The operand is a string whatever the field's type (``contains`` on a list)."""
    on_missing: bool
    """The answer on a missing or ``null`` field (``ne`` and ``not_in`` pass there)."""
    meaning: str
    example: str
    dumped_absent: bool = True
    """Whether a condition without this test still dumps it (as ``null``): true for the
    operators pack hashes were first computed with, false for those added since, so a
    pack that does not use a new operator keeps its hash."""

    @property
    def allows_var(self) -> bool:
        return self.operand == "value"


def _op(
    name: str,
    operand: OperandKind,
    types: frozenset[FieldType],
    meaning: str,
    example: str,
    *,
    on_missing: bool = False,
    string_operand: bool = False,
    dumped_absent: bool = True,
) -> Operator:
    return Operator(
        name, operand, types, string_operand, on_missing, meaning, example, dumped_absent
    )


_EQUALITY: frozenset[FieldType] = SCALAR_TYPES
_MEMBERSHIP: frozenset[FieldType] = frozenset(("string", "integer", "number", "boolean"))

OPERATORS: Mapping[str, Operator] = MappingProxyType(
    {
        op.name: op
        for op in (
            _op("eq", "value", _EQUALITY, "equal to the operand", "intent: {eq: noop}"),
            _op(
                "ne",
                "value",
                _EQUALITY,
                "not equal to the operand (a missing field passes)",
                "intent: {ne: noop}",
                on_missing=True,
            ),
            _op(
                "in", "values", _MEMBERSHIP, "equal to one of the listed values", "n: {in: [1, 3]}"
            ),
            _op(
                "not_in",
                "values",
                _MEMBERSHIP,
                "equal to none of the listed values (a missing field passes)",
                "intent: {not_in: [noop, delete]}",
                on_missing=True,
            ),
            _op("lt", "value", ORDERED_TYPES, "less than the operand", "n: {lt: 3}"),
            _op("le", "value", ORDERED_TYPES, "less than or equal to the operand", "n: {le: 3}"),
            _op("gt", "value", ORDERED_TYPES, "greater than the operand", "n: {gt: 3}"),
            _op("ge", "value", ORDERED_TYPES, "greater than or equal to the operand", "n: {ge: 3}"),
            _op("exists", "flag", ALL_TYPES, "present and not null", "topic: {exists: true}"),
            _op(
                "missing",
                "flag",
                ALL_TYPES,
                "absent or null (combines with no other test)",
                "topic: {missing: true}",
                on_missing=True,
            ),
            _op(
                "contains",
                "value",
                frozenset(("string", "list")),
                "a string field contains the operand as a substring; "
                "a list field has the operand as an item",
                "tags: {contains: urgent}",
                string_operand=True,
            ),
            _op(
                "prefix",
                "value",
                frozenset(("string",)),
                "starts with the operand",
                "source_node: {prefix: 'chat.'}",
                string_operand=True,
            ),
            _op(
                "normal_eq",
                "value",
                frozenset(("string",)),
                "equal to the operand once both are in content normal form (case folded, "
                "accents and punctuation removed, whitespace collapsed)",
                "content: {normal_eq: {var: o}}",
                string_operand=True,
                dumped_absent=False,
            ),
            _op(
                "older_than",
                "duration",
                frozenset(("timestamp",)),
                "at or before the pass time minus the duration",
                "timestamp: {older_than: {days: 30}}",
            ),
            _op(
                "newer_than",
                "duration",
                frozenset(("timestamp",)),
                "after the pass time minus the duration",
                "timestamp: {newer_than: {hours: 2}}",
            ),
        )
    }
)
"""Operator name → specification, in the order tests are emitted and reported."""

FLAGS = frozenset(name for name, op in OPERATORS.items() if op.operand == "flag")


def describe_types(types: frozenset[FieldType]) -> str:
    """``numeric or timestamp``: field types in words (integer and number read "numeric")."""
    words: list[str] = []
    for ftype in ("string", "integer", "number", "boolean", "timestamp", "list"):
        if ftype not in types:
            continue
        if ftype in ("integer", "number") and {"integer", "number"} <= types:
            if "numeric" not in words:
                words.append("numeric")
        else:
            words.append(ftype)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


OPERATOR_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "==": "eq",
        "=": "eq",
        "equals": "eq",
        "equal": "eq",
        "is": "eq",
        "!=": "ne",
        "<>": "ne",
        "neq": "ne",
        "not_eq": "ne",
        "is_not": "ne",
        "in_": "in",
        "one_of": "in",
        "nin": "not_in",
        "not_in_": "not_in",
        "notin": "not_in",
        "<": "lt",
        "<=": "le",
        "lte": "le",
        ">": "gt",
        ">=": "ge",
        "gte": "ge",
        "exist": "exists",
        "present": "exists",
        "absent": "missing",
        "has": "contains",
        "includes": "contains",
        "same_text": "normal_eq",
        "normalized_eq": "normal_eq",
        "normalised_eq": "normal_eq",
        "startswith": "prefix",
        "starts_with": "prefix",
        "before": "older_than",
        "after": "newer_than",
    }
)
"""Names other languages give operators (SQL, MongoDB, Python), and the table's name
each means: a "did you mean" suggests the table's name, not the nearest spelling."""


def unknown_operator(name: str) -> str:
    """The error for a test name that is not in the table, with the names that are."""
    return f"unknown operator '{name}' (operators: {', '.join(OPERATORS)})"


def markdown_table() -> str:
    """The operator table as Markdown, for the README (drift-checked like the schemas)."""
    lines = [
        "| operator | operand | field types | meaning | on a missing field | example |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for op in OPERATORS.values():
        types = describe_types(op.field_types)
        operand = {
            "value": "literal or `{var: x}`" + (" (string)" if op.string_operand else ""),
            "values": "list of literals",
            "flag": "`true`",
            "duration": "duration",
        }[op.operand]
        missing = "passes" if op.on_missing else "fails"
        lines.append(
            f"| `{op.name}` | {operand} | {types} | {op.meaning} | {missing} | `{op.example}` |"
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class RetentionMode:
    """One retention curve of the ``retention`` confidence operation (specification 004):
    ``R(x)`` of the age ``x`` in half-lives, 1 at 0, ½ at 1, non-increasing, in [0, 1].

    Like the condition tests, each is specified once here; its backends are tables keyed
    by name: the CLIPS emitter (``compiler/generator.py``), the SQL compiler
    (``compiler/sweep_sql.py``), lint (``authoring/lint.py``) and the reference evaluator
    (``ir/reference.py``), tested for coverage and agreement in ``tests/test_retention.py``.
    """

    name: str
    formula: str
    meaning: str


RETENTION_MODES: Mapping[str, RetentionMode] = MappingProxyType(
    {
        mode.name: mode
        for mode in (
            RetentionMode(
                "l2",
                "R(x) = 2^(−x)",
                "classic Ebbinghaus: smooth exponential decay, 50 % at the half-life",
            ),
            RetentionMode(
                "huber",
                "R(x) = 2^(−x) for x ≤ 1, max(0, ½·(1 − ln 2·(x − 1))) for x > 1",
                "as l2 up to the half-life, then linear with the same slope (reaches 0 at "
                "x = 1 + 1/ln 2 ≈ 2.44): a burst of reads followed by quiet fades at a "
                "constant rate instead of lingering on the exponential's tail",
            ),
            RetentionMode(
                "elastic",
                "R(x) = 2^(−(x + x²)/2)",
                "L1 + L2: 50 % at the half-life like the others, more than l2 before it and "
                "less after: memories kept read (or reinforced) stay, neglected ones fade",
            ),
        )
    }
)
"""Retention mode → its curve, in the order the docs list them."""

ACCESS_BOOST_PER: Final = 0.05
ACCESS_BOOST_SCALE: Final = 20.0
ACCESS_BOOST_CAP: Final = 0.3
"""Access reinforcement: ``min(0.3, 0.05·ln(1 + access_count/20))`` (003's boost, capped at
004's +0.3) in ``retention``; ``ebbinghaus`` with ``boost`` adds 003's uncapped
``0.05·ln(1 + access_count/20)`` to the confidence, which stays at most 1."""


def retention_table() -> str:
    """The retention modes as Markdown, for the rule-pack reference (drift-checked)."""
    lines = ["| mode | R(x) | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{m.name}` | {m.formula} | {m.meaning} |" for m in RETENTION_MODES.values()]
    return "\n".join(lines) + "\n"


README_START = "<!-- operators:start -->\n"
README_END = "<!-- operators:end -->\n"


def with_readme_table(readme: str) -> str:
    """``readme`` with the text between the operator-table markers regenerated."""
    start = readme.find(README_START)
    end = readme.find(README_END, start + 1)
    if start < 0 or end < 0:
        raise ValueError(f"the README has no {README_START.strip()} … {README_END.strip()} markers")
    return readme[: start + len(README_START)] + markdown_table() + readme[end:]
