"""The JSON Schema of the rule packs users write, generated from the IR models and the
operator table (``python scripts/schemas.py`` writes it to ``ir_schemas/rule_pack.v1.json``).

``RulePack.model_json_schema`` gives every part whose YAML is the model's shape (pack,
rule, emit, cadence, gates, durations), so a field added to a model appears in the
schema. Three parts are written differently from their models and are described here:

- a pattern (``episode``, ``fact``, ``earlier``, ``count``, ``not``, ``exists``) takes
  field conditions next to ``as`` / ``keys`` / ..., never under ``where``;
- a condition is a bare scalar (equality), ``{var: name}``, or an object of operator
  tests plus ``bind``, generated from ``OPERATORS``: a new operator needs no change here;
- ``select`` maps fields to conditions.

The validator's rules that JSON Schema can express are mirrored: names, ranges, enums,
required and unknown keys, literal-only conditions in ``select``, ``count``, unnamed and
unbinding ``not`` / ``exists``, ``true`` as the only flag operand, ``missing`` alone,
bare ``missing`` / ``exists`` refused, distinct ``keys``, fact fields, balanced template
braces, what each ``emit.kind`` needs and refuses, one cadence form (``or_after`` only
with ``every``), duration text, at most one ``episode`` pattern and an ``episode`` or
``fact`` pattern per rule, an ``episode`` pattern for a salience gate or ``reinforces``.

Only the validator decides (the schema accepts such packs):

- names that must be bound, used once or defined elsewhere: unbound or unused variables,
  aliases used twice, ``replaces`` / ``reinforces`` / ``sources`` / confidence naming
  the wrong kind of pattern or variable, a fact-only rule without a fact in ``sources``;
- field types and declarations: an episode field not declared in ``fields``, an operator
  or a literal that does not suit the field's type, ``exists`` / ``missing`` on a field
  that is always present, ``keys`` / ``distinct`` on unknown or list fields;
- order and comparisons between values: ``earlier`` / ``count`` before the ``episode``
  pattern, ``at_least`` above ``at_most``, duplicate rule ids, a rule unreachable behind
  an identical one, durations adding up to more than 100 years (or, in a cadence, to
  zero);
- cron syntax and time-zone names (croniter and the time-zone database decide);
- what the YAML loader refuses: duplicate keys, tags, anchors beyond its limits,
  integers beyond 64 bits, NUL or lone surrogates in text.

The schema is stricter than the validator in one way: the validator reads a number
written as text (``every: "5"``, ``confidence: "0.5"``) as the number; the schema asks
for a number. ``tests/test_schema_agreement.py`` runs every list above.
"""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from stargraph_mem.ir.models import (
    ARITHMETIC,
    EPISODE_BUILTINS,
    FACT_FIELDS,
    IR_VERSION,
    NAME_PATTERN,
    PAYLOAD_OPERATIONS,
    Emit,
    RulePack,
)
from stargraph_mem.ir.operators import FLAGS, OPERATORS, Operator
from stargraph_mem.model.cadence import DURATION_PATTERN
from stargraph_mem.model.deltas import kind_creates, kind_takes

Schema = dict[str, Any]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
AWARE_PATTERN = r"^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d(\.\d+)?)?([Zz]|[+-]\d\d(:?\d\d)?)$"
"""An ISO-8601 time with a UTC offset (a naive time is refused)."""
TEMPLATE_PATTERN = r"^([^{}]|\{\{|\}\}|\{[^{}]*\})*$"
"""Text, ``{{``, ``}}`` and ``{name}``: what ``checks.parse_template`` accepts."""
NAME: Schema = {"type": "string", "pattern": NAME_PATTERN}
SCALAR: Schema = {"type": ["boolean", "number", "string"]}


def ref(name: str) -> Schema:
    return {"$ref": f"#/$defs/{name}"}


class _Generator(GenerateJsonSchema):
    """pydantic's generator; a timezone-aware datetime also gets :data:`AWARE_PATTERN`."""

    def datetime_schema(self, schema: core_schema.DatetimeSchema) -> JsonSchemaValue:
        out = super().datetime_schema(schema)
        if schema.get("tz_constraint") == "aware":
            out["pattern"] = AWARE_PATTERN
        return out


def model_schema(model: type[BaseModel], title: str) -> Schema:
    """``model``'s validation schema (YAML keys, i.e. aliases) as a 2020-12 document."""
    schema = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_Generator)
    return {"$schema": DIALECT, **schema, "title": title}


# --- conditions ------------------------------------------------------------------------

CONDITIONS = {
    "Condition": (True, True),
    "NotExistsCondition": (False, True),
    "LiteralCondition": (False, False),
}
"""Condition definitions by (``bind`` allowed, ``{var: x}`` allowed): ``Condition`` in
``episode`` / ``fact`` / ``earlier``, ``NotExistsCondition`` in ``not`` / ``exists``,
``LiteralCondition`` in ``select`` and ``count``."""


def operand_schema(op: Operator, var: bool) -> Schema:
    """What the YAML may write after ``op:``, from the operator's operand kind."""
    literal = {"type": "string"} if op.string_operand else SCALAR
    by_kind: dict[str, Schema] = {
        "value": {"anyOf": [literal, ref("VarRef")]} if var else dict(literal),
        "values": {"type": "array", "items": literal},
        "flag": {"const": True},
        "duration": ref("Duration"),
    }
    return {**by_kind[op.operand], "description": f"{op.meaning}, e.g. {op.example}"}


def condition_schema(bind: bool, var: bool) -> Schema:
    """A bare scalar, ``{var: x}`` (when ``var``) or an object of operator tests."""
    tests = {name: operand_schema(op, var) for name, op in OPERATORS.items()}
    if bind:
        tests["bind"] = {**NAME, "description": "name the field's value as a variable"}
    mapping: Schema = {
        "type": "object",
        "properties": tests,
        "additionalProperties": False,
        "minProperties": 1,
    }
    if "missing" in OPERATORS:
        mapping["dependentSchemas"] = {"missing": {"maxProperties": 1}}
    bare = {**SCALAR, "not": {"enum": sorted(FLAGS)}, "description": "equal to this value"}
    forms = [bare, ref("VarRef"), mapping] if var else [bare, mapping]
    return {"description": "tests on one field; all must hold", "anyOf": forms}


# --- patterns --------------------------------------------------------------------------

_NO_WHERE: Schema = {
    "not": {},
    "description": "write conditions directly under the pattern, not under 'where'",
}


def pattern_schema(model_def: Schema, condition: str, *, fields: dict[str, Any] | None) -> Schema:
    """A pattern's own keys (from its model, ``where`` dropped) plus field conditions.

    ``fields`` fixes the fields (facts); ``None`` means episode fields, declared by the pack.
    """
    own = {k: v for k, v in model_def["properties"].items() if k != "where"}
    known = EPISODE_BUILTINS if fields is None else fields
    props = {**{f: ref(condition) for f in known}, **own}
    out = {**model_def, "properties": props}
    if fields is None:
        props["where"] = _NO_WHERE
        out["propertyNames"] = {"pattern": NAME_PATTERN}
        out["additionalProperties"] = ref(condition)
    if "keys" in props:
        props["keys"] = {**props["keys"], "uniqueItems": True}
    return out


def not_exists_pattern(fact_def: Schema) -> Schema:
    """``not`` / ``exists``: a fact pattern without ``as`` whose conditions bind nothing."""
    out = pattern_schema(fact_def, "NotExistsCondition", fields=FACT_FIELDS)
    out["properties"].pop("as", None)
    payload = out["properties"]["payload"]
    out["properties"]["payload"] = {
        **payload,
        "patternProperties": {NAME_PATTERN: ref("NotExistsCondition")},
    }
    out["title"] = "NotExistsPattern"
    out["description"] = "Facts tested by 'not' (none matches) or 'exists' (one matches)."
    return out


def _patterns(defs: dict[str, Schema]) -> None:
    defs["NotExistsPattern"] = not_exists_pattern(defs["FactPattern"])
    for item, key in (("NotItem", "not"), ("ExistsItem", "exists")):
        defs[item]["properties"][key] = ref("NotExistsPattern")
    defs["EpisodePattern"] = pattern_schema(defs["EpisodePattern"], "Condition", fields=None)
    defs["EarlierPattern"] = pattern_schema(defs["EarlierPattern"], "Condition", fields=None)
    defs["CountPattern"] = pattern_schema(defs["CountPattern"], "LiteralCondition", fields=None)
    defs["FactPattern"] = pattern_schema(defs["FactPattern"], "Condition", fields=FACT_FIELDS)
    defs["SelectClause"] = {
        "title": "SelectClause",
        "description": "Literal tests on episode fields, compiled to parameterised SQL.",
        "type": "object",
        "propertyNames": {"pattern": NAME_PATTERN},
        "additionalProperties": ref("LiteralCondition"),
    }


# --- rules, emit, cadence, fields ------------------------------------------------------


def _has(kind: str) -> Schema:
    return {"type": "object", "required": [kind]}


def _kind_is(*kinds: str) -> Schema:
    return {"properties": {"kind": {"enum": list(kinds)}}, "required": ["kind"]}


def _emit(emit: Schema) -> None:
    """Templates, and what each kind needs and refuses (as ``checks.check_emit``)."""
    template = {"type": "string", "pattern": TEMPLATE_PATTERN}
    props = emit["properties"]
    spo = ("subject", "predicate", "object")
    for name in spo:
        props[name] = {**props[name], "anyOf": [template, {"type": "null"}]}
    props["reason"] = {**props["reason"], **template}
    declared = {"type": ["number", "boolean"], "description": "a declared key's literal"}
    operations = [{"$ref": f"#/$defs/{ARITHMETIC[name].__name__}"} for name in PAYLOAD_OPERATIONS]
    computed = {"description": "a declared number key's operation", "anyOf": operations}
    props["payload"] = {
        **props["payload"],
        "additionalProperties": {"anyOf": [template, declared, computed]},
    }
    kinds = get_args(Emit.model_fields["kind"].annotation)
    creating = [k for k in kinds if kind_creates(k)]
    closing = [k for k in kinds if kind_takes(k, "replaces")]
    reinforcing = [k for k in kinds if kind_takes(k, "reinforces")]
    with_status = [k for k in kinds if kind_takes(k, "status")]
    others = [k for k in kinds if k not in creating]
    emit["allOf"] = [
        {"if": _kind_is(*creating), "then": {"required": list(spo)}},
        {
            "if": _kind_is(*others),
            "then": {
                "properties": {
                    **{name: {"type": "null"} for name in spo},
                    "payload": {"maxProperties": 0},
                }
            },
        },
        {
            "if": _kind_is(*closing),
            "then": {"required": ["replaces"], "properties": {"replaces": {"minItems": 1}}},
        },
        {"if": {"not": _kind_is(*closing)}, "then": {"properties": {"replaces": {"maxItems": 0}}}},
        {
            "if": {"not": _kind_is(*reinforcing)},
            "then": {"properties": {"reinforces": {"maxItems": 0}}},
        },
        {
            "if": {"not": _kind_is(*with_status)},
            "then": {"properties": {"status": {"type": "null"}}},
        },
    ]


def _rule(rule: Schema) -> None:
    """At most one ``episode`` pattern, an ``episode`` or ``fact`` pattern, and an
    ``episode`` pattern (in a claiming rule) for a salience gate and for ``reinforces``."""
    when = rule["properties"]["when"]
    when["allOf"] = [
        {"contains": _has("episode"), "minContains": 0, "maxContains": 1},
        {"contains": {"anyOf": [_has("episode"), _has("fact")]}},
    ]
    has_episode = {"properties": {"when": {"contains": _has("episode")}}}
    reinforcing = {"properties": {"reinforces": {"minItems": 1}}, "required": ["reinforces"]}
    rule["allOf"] = [
        {
            "if": {"properties": {"salience": {"type": "object"}}, "required": ["salience"]},
            "then": has_episode,
        },
        {
            "if": {"properties": {"emit": reinforcing}, "required": ["emit"]},
            "then": {"properties": {**has_episode["properties"], "claim": {"const": True}}},
        },
    ]


def _cadence(cadence: Schema) -> None:
    """One of ``every``, ``cron`` and ``idle``; ``or_after`` only with ``every``; durations
    as text (``1h30m``) or parts (``{minutes: 30}``)."""
    props = cadence["properties"]
    for name, title in (("idle", "Idle"), ("or_after", "Or After")):
        props[name] = {
            "anyOf": [{"type": "string", "pattern": DURATION_PATTERN}, ref("Duration")],
            "title": title,
        }
    cadence["oneOf"] = [
        {"required": ["every"], "properties": {"every": {"type": "integer"}}},
        {"required": ["cron"], "properties": {"cron": {"type": "string"}}},
        {"required": ["idle"]},
    ]
    cadence["dependentRequired"] = {"or_after": ["every"]}


def duration_text(defs: dict[str, Schema]) -> None:
    """A duration is parts (``{days: 7}``) or the same as text (``7d``, ``1h30m``)."""
    parts = defs["Duration"]
    text: Schema = {"type": "string", "pattern": DURATION_PATTERN, "minLength": 1}
    defs["Duration"] = {
        "anyOf": [text, {k: v for k, v in parts.items() if k not in ("title", "description")}],
        "title": parts["title"],
        "description": parts["description"],
    }


def _fields(pack: Schema) -> None:
    """Declared fields: names, not a built-in episode field, and a field type."""
    fields = pack["properties"]["fields"]
    types = fields.pop("patternProperties")[NAME_PATTERN]
    fields["propertyNames"] = {"pattern": NAME_PATTERN, "not": {"enum": list(EPISODE_BUILTINS)}}
    fields["additionalProperties"] = types


def _payload_templates(schema: Schema) -> None:
    """Without ``fact_payload``, every ``emit.payload`` value is a template (text)."""
    text_only = {"additionalProperties": {"type": "string"}}
    emit = {"properties": {"emit": {"properties": {"payload": text_only}}}}
    schema["allOf"] = [
        {
            "if": {"not": {"required": ["fact_payload"]}},
            "then": {"properties": {"rules": {"items": emit}}},
        }
    ]


def rule_pack_schema() -> Schema:
    """The schema of a rule pack as users write it."""
    schema = model_schema(RulePack, f"stargraph_mem rule pack (ir_version {IR_VERSION})")
    defs: dict[str, Schema] = schema["$defs"]
    for name, (bind, var) in CONDITIONS.items():
        defs[name] = condition_schema(bind, var)
    _patterns(defs)
    _emit(defs["Emit"])
    _rule(defs["Rule"])
    _cadence(defs["Cadence"])
    duration_text(defs)
    _fields(schema)
    _payload_templates(schema)
    schema["$defs"] = dict(sorted(defs.items()))
    return schema
