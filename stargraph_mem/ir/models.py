"""The rule-pack IR: typed data a YAML pack is validated into (no strings to parse).

A pack declares metadata ``fields`` with types; rules test episode fields, declared
metadata fields and current facts through condition objects such as ``{gt: 3}`` or
``{eq: {var: s}}``. Every name (pack, rule id, field, alias, variable) matches
:data:`NAME_PATTERN`. There is no raw CLIPS or raw SQL passthrough.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping
from difflib import get_close_matches
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    Tag,
    WithJsonSchema,
    create_model,
    model_validator,
)

from stargraph_mem.ir.operators import (
    FLAGS,
    OPERATOR_ALIASES,
    OPERATORS,
    OperandKind,
    unknown_operator,
)
from stargraph_mem.ir.operators import FieldType as FieldType
from stargraph_mem.model.cadence import DURATION_PATTERN, DURATION_UNITS, Cadence
from stargraph_mem.model.deltas import CloseStatus, DeltaKind
from stargraph_mem.model.entities import MAX_ALIASES, MAX_NAME_CHARS, EntityType
from stargraph_mem.model.layers import DEFAULT_HALF_LIVES, Layer, MemoryType

PayloadType = Literal["string", "integer", "number", "boolean", "timestamp"]
"""Types a declared fact payload key can have (a list is not a payload value)."""

IR_VERSION = 1
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Scalar = Annotated[
    StrictBool | StrictInt | StrictFloat | StrictStr, Field(union_mode="left_to_right")
]
"""Literal values keep their YAML type: ``true`` stays a boolean, ``1.0`` a float."""


class _IR(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _refuse_nulls(data: Any) -> None:
    """``eq: null`` or ``as: null`` is refused (as the JSON Schema does): null would read
    as "no test" or "no alias", which is not what the author wrote."""
    if isinstance(data, dict):
        nulls = [str(k) for k, v in data.items() if v is None]
        if nulls:
            raise ValueError(
                f"null is not a value here ({', '.join(repr(k) for k in nulls)}): leave the key out"
            )


class VarRef(_IR):
    """A reference to a variable bound elsewhere in the rule: ``{var: s}``."""

    var: Name


MAX_DURATION_SECONDS = 100 * 36525 * 864
"""Longest duration a pack may write: 100 years of 365.25 days (3,155,760,000 s).

Far beyond any retention window, yet its microseconds (about 3.2e15) stay exact in a
float and well inside the signed 64-bit integers CLIPS and SQLite compare."""


DURATION_FORMS = "7d, 12h, 30m, 90s or 1h30m (or {days: 7})"
"""How a duration may be written, for error messages."""


class Duration(_IR):
    """A span relative to the pass time: ``{days: 30}``, ``{hours: 2, minutes: 5}``, or
    the same as text, as cadences write it: ``30d``, ``2h5m``.

    Parts are finite and non-negative, and add up to at most 100 years.
    """

    days: float = Field(default=0, ge=0, allow_inf_nan=False)
    hours: float = Field(default=0, ge=0, allow_inf_nan=False)
    minutes: float = Field(default=0, ge=0, allow_inf_nan=False)
    seconds: float = Field(default=0, ge=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        """``7d`` is ``{days: 7}``, ``1h30m`` is ``{hours: 1, minutes: 30}``."""
        if not isinstance(data, str):
            return data
        found = re.match(DURATION_PATTERN, data)
        if not data or found is None:
            raise ValueError(f"invalid duration {data!r}: write {DURATION_FORMS}")
        return {
            name: float(amount)
            for amount, (_, name, _) in zip(found.groups(), DURATION_UNITS, strict=True)
            if amount
        }

    @model_validator(mode="after")
    def _bounded(self) -> Duration:
        if self.total_seconds() > MAX_DURATION_SECONDS:
            raise ValueError(
                f"a duration is at most 100 years ({MAX_DURATION_SECONDS} seconds, "
                "MAX_DURATION_SECONDS)"
            )
        return self

    def total_seconds(self) -> float:
        return ((self.days * 24 + self.hours) * 60 + self.minutes) * 60 + self.seconds

    def total_microseconds(self) -> int:
        return round(self.total_seconds() * 1_000_000)


Operand = Annotated[Scalar | VarRef, Field(union_mode="left_to_right")]

_OPERAND_TYPES: dict[OperandKind, Any] = {
    "value": Operand,
    "values": list[Scalar],
    "flag": bool,
    "duration": Duration,
}
"""How each kind of operand in the operator table is validated."""


def operator_attribute(name: str) -> str:
    """The model attribute of operator ``name`` (``in`` is a Python keyword: ``in_``)."""
    return f"{name}_" if keyword.iskeyword(name) else name


class ConditionBase(_IR):
    """Tests on one field. All given tests must hold; ``bind`` names the field's value.

    One optional attribute per entry of the operator table (``ir/operators.py``) is
    added by :func:`_condition_model`; read them through :meth:`tests` and :meth:`get`.
    """

    bind: Name | None = None
    key_name: ClassVar[str] = "operator"
    key_aliases: ClassVar[Mapping[str, str]] = OPERATOR_ALIASES

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """A bare scalar means equality: ``intent: noop`` is ``intent: {eq: noop}``."""
        _refuse_nulls(data)
        if isinstance(data, str) and data in FLAGS:
            raise ValueError(
                f"a bare '{data}' is ambiguous: write '{{{data}: true}}' to test the field, "
                f"or '{{eq: {data}}}' to compare it with the string '{data}'"
            )
        if isinstance(data, str | int | float | bool):
            return {"eq": data}
        if isinstance(data, dict) and set(data) == {"var"}:
            return {"eq": data}
        return data

    @model_validator(mode="after")
    def _not_empty(self) -> ConditionBase:
        if not self.model_fields_set:
            raise ValueError("a condition needs at least one test or 'bind'")
        return self

    def get(self, op: str) -> Any:
        """The operand of test ``op``, or ``None`` when the condition does not have it."""
        if op not in OPERATORS:
            raise KeyError(unknown_operator(op))
        return getattr(self, operator_attribute(op))

    def tests(self) -> list[tuple[str, Any]]:
        """The (op, operand) pairs given, in the operator table's order (``bind`` excluded)."""
        out: list[tuple[str, Any]] = []
        for name in OPERATORS:
            value = getattr(self, operator_attribute(name))
            if value is not None:
                out.append((name, value))
        return out


def _condition_model() -> type[ConditionBase]:
    fields: dict[str, Any] = {
        operator_attribute(op.name): (
            _OPERAND_TYPES[op.operand] | None,
            Field(default=None, alias=op.name)
            if op.dumped_absent
            else Field(default=None, alias=op.name, exclude_if=lambda v: v is None),
        )
        for op in OPERATORS.values()
    }
    model: type[ConditionBase] = create_model(
        "Condition", __base__=ConditionBase, __module__=__name__, **fields
    )
    return model


if TYPE_CHECKING:
    Condition = ConditionBase
else:
    Condition = _condition_model()

OPS = tuple(OPERATORS)
"""Operator names in table order."""


class _FieldsPattern(_IR):
    """A pattern: an optional alias (``as``) plus conditions keyed by field name."""

    alias: Name | None = Field(default=None, alias="as")
    where: dict[str, Condition] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        """Authors write fields next to ``as``; collect them under ``where``."""
        if not isinstance(data, dict):
            return data
        _refuse_nulls({k: v for k, v in data.items() if k in cls._own_keys()})
        data = dict(data)
        own = {k: data.pop(k) for k in list(data) if k in cls._own_keys()}
        if "where" in data:
            raise ValueError("write conditions directly under the pattern, not under 'where'")
        return {**own, "where": data}

    @classmethod
    def _own_keys(cls) -> frozenset[str]:
        return frozenset({"as"})


class EpisodePattern(_FieldsPattern):
    """The episode under consideration (one per rule)."""


MAX_NEIGHBOURS = 100
"""The largest ``top_k`` a ``near`` test may ask for."""

MAX_CLUSTER = 10_000
"""The largest ``at_least`` a clustering ``near`` test may ask for."""


class Near(_IR):
    """The fact must be one of the near neighbours of the episode (or, in a sweep, of an
    earlier fact pattern): among the partition's current facts, the ``top_k`` most similar
    by exact cosine under the configured embedder (scores rounded to six places, ties
    broken by fact id) whose cosine is at least ``min_cosine``. ``cosine`` binds the score.

    The runtime computes the neighbours outside CLIPS and asserts them for the rules.
    """

    of: Name = "episode"
    """``episode`` (the episode's content), or the alias of an earlier fact pattern (a
    sweep: that fact's statement)."""
    top_k: int = Field(default=5, ge=1, le=MAX_NEIGHBOURS)
    min_cosine: float | None = Field(default=None, ge=-1, le=1, allow_inf_nan=False)
    cosine: Name | None = None
    """A variable bound to the neighbour's cosine (a number)."""
    at_least: int | None = Field(default=None, ge=1, le=MAX_CLUSTER, exclude_if=lambda v: v is None)
    """Clusters (a sweep only, with ``min_cosine``): the facts are grouped into clusters
    outside CLIPS (see :func:`~stargraph_mem.engine.passes.near.clusters`) and the
    neighbours of fact ``of`` are the other members of the cluster it represents, when
    there are at least ``at_least`` of them (``at_least: 4``: a cluster of 5); ``top_k``
    does not apply. Left out of dumps when absent, so packs without it keep their hash."""


class FactPattern(_FieldsPattern):
    """A current fact of the partition (from the store or promoted earlier in the pass).

    ``payload`` tests keys the pack declares in ``fact_payload``:
    ``payload: {importance: {lt: 0.3}}``. ``near`` keeps only facts similar in meaning to
    the episode (or to another fact): see :class:`Near`.
    """

    payload: dict[Name, Condition] = Field(default_factory=dict, exclude_if=lambda v: not v)
    """Left out of dumps when empty, so packs that do not use it keep their hash."""
    near: Near | None = Field(default=None, exclude_if=lambda v: v is None)
    """Left out of dumps when absent, so packs that do not use it keep their hash."""

    @classmethod
    def _own_keys(cls) -> frozenset[str]:
        return frozenset({"as", "payload", "near"})


Over = Literal["pass", "history"]
"""Where ``earlier`` and ``count`` look: the pass's episodes only, or the partition's whole
history (durable aggregates kept in the fact store, updated by each pass)."""


EPISODE_WINDOW = 1_000
"""The earlier episodes an episode ``near`` ranks by default: the latest this many."""

MAX_EPISODE_WINDOW = 100_000
"""The largest ``last`` an episode ``near`` may ask for."""


class EpisodeNear(_IR):
    """The episode must be one of the near neighbours of the rule's episode among the
    partition's *earlier* episodes (earlier passes' and this pass's, before it in the
    sequential order; never the episode itself): the ``top_k`` most similar by exact
    cosine of their ``content`` under the configured embedder (scores rounded to six
    places, ties broken by episode id) whose cosine is at least ``min_cosine``.

    The candidates are bounded: the latest ``last`` earlier episodes (default
    :data:`EPISODE_WINDOW`), and with ``within`` only those stamped at most that long
    before the episode. The runtime ranks them outside CLIPS (see
    :mod:`~stargraph_mem.engine.passes.near_episodes`) and asserts them for the rules.
    """

    top_k: int = Field(default=5, ge=1, le=MAX_NEIGHBOURS)
    min_cosine: float | None = Field(default=None, ge=-1, le=1, allow_inf_nan=False)
    cosine: Name | None = None
    """A variable bound to the neighbour's cosine (a number)."""
    last: int = Field(default=EPISODE_WINDOW, ge=1, le=MAX_EPISODE_WINDOW)
    within: Duration | None = None


class EarlierPattern(_FieldsPattern):
    """The latest earlier episode with equal ``keys`` (and matching conditions); or, with
    ``near`` (and no ``keys``), each near neighbour among the earlier episodes.

    Literal conditions select which episodes the relation tracks; ``bind`` and ``var``
    conditions are tested on the one it finds. ``over: pass`` (the default) looks in the
    pass only; ``over: history`` also finds one consumed by an earlier pass. ``near``
    always looks at earlier passes' episodes too (see :class:`EpisodeNear`).
    """

    keys: list[Name] = Field(default_factory=list, max_length=4)
    over: Over = "pass"
    near: EpisodeNear | None = Field(default=None, exclude_if=lambda v: v is None)
    """Left out of dumps when absent, so packs that do not use it keep their hash."""

    @model_validator(mode="after")
    def _keys_or_near(self) -> EarlierPattern:
        if self.near is None and not self.keys:
            raise ValueError("an 'earlier' pattern needs 'keys' (1 to 4 fields), or 'near'")
        if self.near is not None and self.keys:
            raise ValueError(
                "'near' ranks earlier episodes by meaning, 'keys' matches them exactly: "
                "write one of them"
            )
        return self

    @classmethod
    def _own_keys(cls) -> frozenset[str]:
        return frozenset({"as", "keys", "over", "near"})


class CountPattern(_FieldsPattern):
    """How many episodes so far (this one included) share ``keys``.

    ``distinct`` counts distinct values of a field instead (e.g. sessions);
    ``at_least`` / ``at_most`` bound the count; ``grows: true`` matches only when this
    episode raised the count; ``as`` binds it as an integer. ``over: pass`` (the default)
    counts the pass's episodes; ``over: history`` the partition's whole history, and
    ``within`` (history only) keeps the episodes stamped at most that long before this one.
    """

    keys: list[Name] = Field(min_length=1, max_length=4)
    distinct: Name | None = None
    at_least: int | None = Field(default=None, ge=0)
    at_most: int | None = Field(default=None, ge=0)
    grows: bool = False
    over: Over = "pass"
    within: Duration | None = None

    @model_validator(mode="after")
    def _window_over_history(self) -> CountPattern:
        if self.within is not None and self.over != "history":
            raise ValueError("'within' needs 'over: history' (a pass has no window of its own)")
        return self

    @classmethod
    def _own_keys(cls) -> frozenset[str]:
        return frozenset(
            {"as", "keys", "distinct", "at_least", "at_most", "grows", "over", "within"}
        )


MAX_SURPRISE_K = MAX_NEIGHBOURS
"""The largest ``k`` a ``surprise`` pattern may ask for."""


class SurprisePattern(_IR):
    """How surprising the episode is against the partition's current facts (specification
    004's surprise-based importance): ``1 − mean cosine`` of its ``k`` nearest facts under
    the configured embedder (cosines rounded to six places as ``near`` ranks; fewer when
    the partition has fewer facts), clamped to [0, 1] and rounded to six places; 1.0 when
    it has none. ``as`` binds the score (a number); ``at_least`` / ``at_most`` bound it.

    The runtime computes the score outside CLIPS, against the facts current at the
    episode's point of the pass (as ``near`` does), and asserts it for the rules.
    """

    alias: Name | None = Field(default=None, alias="as")
    k: int = Field(default=5, ge=1, le=MAX_SURPRISE_K)
    at_least: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    at_most: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        _refuse_nulls(data)
        return data


class EpisodeItem(_IR):
    episode: EpisodePattern


class FactItem(_IR):
    fact: FactPattern


class EarlierItem(_IR):
    earlier: EarlierPattern


class CountItem(_IR):
    count: CountPattern


class SurpriseItem(_IR):
    surprise: SurprisePattern


def _fields_directly(kind: str, data: Any) -> Any:
    """``not: {fact: {subject: …}}`` is refused with the form meant: ``not`` and ``exists``
    take the fact's fields directly (a fact has no field named after a pattern)."""
    inner = data.get(kind) if isinstance(data, dict) else None
    if isinstance(inner, dict):
        nested = [k for k, v in inner.items() if k in WHEN_KINDS and isinstance(v, dict)]
        if nested:
            wrong = nested[0]
            first = next(iter(inner[wrong]), "subject")
            raise ValueError(
                f"'{kind}' takes the fact's fields directly: write \"{kind}: {{{first}: …}}\", "
                f'not "{kind}: {{{wrong}: {{…}}}}"'
            )
    return data


class NotItem(_IR):
    """No current fact matches (variables bound inside stay inside)."""

    not_: FactPattern = Field(alias="not")

    @model_validator(mode="before")
    @classmethod
    def _direct(cls, data: Any) -> Any:
        return _fields_directly("not", data)


class ExistsItem(_IR):
    """At least one current fact matches (binds nothing)."""

    exists: FactPattern

    @model_validator(mode="before")
    @classmethod
    def _direct(cls, data: Any) -> Any:
        return _fields_directly("exists", data)


WHEN_KINDS: dict[str, type[Any]] = {
    "episode": EpisodeItem,
    "fact": FactItem,
    "earlier": EarlierItem,
    "count": CountItem,
    "not": NotItem,
    "exists": ExistsItem,
    "surprise": SurpriseItem,
}


def _when_kind(value: Any) -> str | None:
    """The pattern kind is the item's single key (``{fact: {...}}`` → ``fact``)."""
    if isinstance(value, dict):
        return next(iter(value)) if len(value) == 1 and next(iter(value)) in WHEN_KINDS else None
    for name, model in WHEN_KINDS.items():
        if isinstance(value, model):
            return name
    return None


WhenItem = Annotated[
    Annotated[EpisodeItem, Tag("episode")]
    | Annotated[FactItem, Tag("fact")]
    | Annotated[EarlierItem, Tag("earlier")]
    | Annotated[CountItem, Tag("count")]
    | Annotated[NotItem, Tag("not")]
    | Annotated[ExistsItem, Tag("exists")]
    | Annotated[SurpriseItem, Tag("surprise")],
    Discriminator(
        _when_kind,
        custom_error_type="pattern_kind",
        custom_error_message=(
            "each 'when' item has exactly one key: episode, fact, earlier, count, not, exists "
            "or surprise"
        ),
    ),
]


class LinearConfidence(_IR):
    """``min(max, base + per * count)``: confidence that grows with a count variable."""

    var: Name
    base: float = Field(ge=0, le=1)
    per: float = Field(ge=0, le=1)
    max: float = Field(default=1.0, ge=0, le=1)


class VarConfidence(_IR):
    """Confidence taken from a numeric variable (a fact's confidence), clamped to [0, 1]."""

    from_: Name = Field(alias="from")


class Reinforce(_IR):
    """``min(cap, value + by)``: a confirmation raises the confidence by ``by``."""

    value: Operand_
    by: float = Field(ge=0, le=1)
    cap: float = Field(default=1.0, ge=0, le=1)


Since = Literal["reinforced_at", "last_access"]
"""Where a decay counts days from: the latest reinforcement, or the latest of it and the
latest access-recording read (specification 003: a read restarts the curve)."""


class Ebbinghaus(_IR):
    """``c·exp(−s·λ·days^k)``: fact ``fact``'s confidence forgotten along Ebbinghaus's
    curve, ``days`` counted from its ``reinforced_at`` (or, ``since: last_access``, from
    the later of it and its last read); ``s`` is ``untrusted_speed`` for a fact whose trust
    is below 1.0, else 1; with ``boost``, ``c`` is first raised by the access boost when
    the fact was read since its ``valid_from`` (applied incrementally, see the runtime)."""

    fact: Name
    lambda_: float = Field(alias="lambda", gt=0, le=1000, allow_inf_nan=False)
    k: float = Field(default=1.0, gt=0, le=10, allow_inf_nan=False)
    since: Since = Field(default="reinforced_at", exclude_if=lambda v: v == "reinforced_at")
    untrusted_speed: float = Field(
        default=1.0, ge=1, le=100, allow_inf_nan=False, exclude_if=lambda v: v == 1.0
    )
    boost: bool = Field(default=False, exclude_if=lambda v: not v)
    """Specification 003's access reinforcement: a fact read since its ``valid_from`` (a
    read after the sweep that made it) restarts from ``min(1, c + 0.05·ln(1 +
    access_count/20))`` instead of ``c``.

    ``since``, ``untrusted_speed`` and ``boost`` are left out of dumps at their defaults,
    so packs that do not use them keep their hash."""


RetentionMode = Literal["l2", "huber", "elastic"]
"""Specification 004's retention modes (formulas: ``ir/operators.py``'s
:data:`~stargraph_mem.ir.operators.RETENTION_MODES`)."""


class Retention(_IR):
    """``c·R(now)/R(valid_from)``: fact ``fact``'s confidence scaled along retention curve
    ``mode``, ages counted from the later of its ``reinforced_at`` and its last read, in
    half-lives (``half_life``, else the pack's half-life of the fact's layer; divided by
    ``untrusted_speed`` for a fact whose trust is below 1.0), plus the access boost
    ``min(0.3, 0.05·ln(1 + access_count/20))`` when ``boost``. The ratio telescopes: any
    sweep schedule gives ``c0·R(now)``."""

    fact: Name
    mode: RetentionMode = "huber"
    half_life: Duration | None = Field(default=None, exclude_if=lambda v: v is None)
    untrusted_speed: float = Field(default=3.0, ge=1, le=100, allow_inf_nan=False)
    boost: bool = True

    @model_validator(mode="after")
    def _positive(self) -> Retention:
        if self.half_life is not None and self.half_life.total_microseconds() <= 0:
            raise ValueError("'half_life' must be a positive duration")
        return self


class LinearDecay(_IR):
    """``c − per·windows``: fact ``fact``'s confidence less ``per`` for every whole ``every``
    elapsed since its ``reinforced_at`` (applied incrementally, see the runtime)."""

    fact: Name
    per: float = Field(ge=0, le=1)
    every: Duration

    @model_validator(mode="after")
    def _positive(self) -> LinearDecay:
        if self.every.total_microseconds() <= 0:
            raise ValueError("'every' must be a positive duration")
        return self


class Clamp(_IR):
    """``min(hi, max(lo, value))``."""

    value: Operand_
    lo: float = Field(default=0.0, ge=0, le=1)
    hi: float = Field(default=1.0, ge=0, le=1)


class ReinforceOp(_IR):
    reinforce: Reinforce


class MultiplyOp(_IR):
    """The product of the operands."""

    multiply: list[Operand_] = Field(min_length=2, max_length=8)


class EbbinghausOp(_IR):
    ebbinghaus: Ebbinghaus


class RetentionOp(_IR):
    retention: Retention


class LinearDecayOp(_IR):
    linear_decay: LinearDecay


class MinOp(_IR):
    min: list[Operand_] = Field(min_length=2, max_length=8)


class AddOp(_IR):
    """The sum of the operands (a negative number subtracts)."""

    add: list[Operand_] = Field(min_length=2, max_length=8)


class MaxOp(_IR):
    max: list[Operand_] = Field(min_length=2, max_length=8)


class ClampOp(_IR):
    clamp: Clamp


ARITHMETIC: dict[str, type[_IR]] = {
    "reinforce": ReinforceOp,
    "multiply": MultiplyOp,
    "ebbinghaus": EbbinghausOp,
    "linear_decay": LinearDecayOp,
    "retention": RetentionOp,
    "min": MinOp,
    "max": MaxOp,
    "clamp": ClampOp,
    "add": AddOp,
}
"""The typed confidence operations, keyed by their single YAML key (a closed set)."""

ArithOp = (
    ReinforceOp
    | MultiplyOp
    | EbbinghausOp
    | LinearDecayOp
    | RetentionOp
    | MinOp
    | MaxOp
    | ClampOp
    | AddOp
)


def arithmetic_name(op: ArithOp) -> str:
    """The YAML key of an operation (``{multiply: [...]}`` → ``multiply``)."""
    (name,) = type(op).model_fields
    return name


def _confidence_kind(value: Any) -> str | None:
    """Which confidence form ``value`` is: a number, ``{var, base, per}``, ``{from}`` or one
    of :data:`ARITHMETIC`."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float | str):
        return "number"  # numeric text is read as a number (as it was before operations)
    if isinstance(value, dict):
        if "var" in value and len(value) > 1:
            return "linear"
        if "from" in value and len(value) == 1:
            return "from"
        if len(value) == 1 and next(iter(value)) in ARITHMETIC:
            return str(next(iter(value)))
        return "unknown"
    forms: dict[str, type[_IR]] = {"linear": LinearConfidence, "from": VarConfidence}
    for name, model in {**forms, **ARITHMETIC}.items():
        if isinstance(value, model):
            return name
    return None


def _operand_kind(value: Any) -> str | None:
    """An arithmetic operand: a number, ``{var: x}`` or a nested operation."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, VarRef) or (isinstance(value, dict) and set(value) == {"var"}):
        return "var"
    kind = _confidence_kind(value)
    return kind if kind in ARITHMETIC or kind == "unknown" else None


class _UnknownOperation(_IR):
    """What an unrecognised confidence mapping validates into: never valid, with a message
    naming the key written and the nearest operation."""

    @model_validator(mode="before")
    @classmethod
    def _refuse(cls, data: Any) -> Any:
        keys = [str(k) for k in data] if isinstance(data, dict) else []
        if keys == ["var"]:
            raise ValueError(
                "a confidence taken from a variable is written {from: x} "
                "({var: x} is an operand of an operation)"
            )
        if len(keys) == 1:
            hint = get_close_matches(keys[0], list(ARITHMETIC), n=1)
            near = f"; did you mean '{hint[0]}'?" if hint else ""
            raise ValueError(
                f"unknown operation '{keys[0]}'{near} (operations: {_OPERATIONS_TEXT})"
            )
        raise ValueError(f"write one operation per mapping: {_OPERATIONS_TEXT}")


_OPERATIONS_TEXT = ", ".join(ARITHMETIC)
_UNKNOWN_OPERATION = "expected a number, {var: x} or one operation: " + _OPERATIONS_TEXT


def _with_operations(head: list[Any], discriminator: Discriminator) -> Any:
    """A union of ``head`` and every operation of :data:`ARITHMETIC`, each tagged by its
    key, plus the never-valid unknown operation (left out of the JSON Schema)."""
    choices = [
        *head,
        *(Annotated[model, Tag(name)] for name, model in ARITHMETIC.items()),
        Annotated[_UnknownOperation, Tag("unknown"), WithJsonSchema({"not": {}})],
    ]
    return Annotated[Union[tuple(choices)], discriminator]  # noqa: UP007 (built at runtime)


if TYPE_CHECKING:
    Operand_ = int | float | VarRef | ArithOp
    Confidence = float | LinearConfidence | VarConfidence | ArithOp
else:
    Operand_ = _with_operations(
        [Annotated[StrictInt | StrictFloat, Tag("number")], Annotated[VarRef, Tag("var")]],
        Discriminator(
            _operand_kind,
            custom_error_type="operand_kind",
            custom_error_message=_UNKNOWN_OPERATION,
        ),
    )
    """An operand of an arithmetic operation."""

    Confidence = _with_operations(
        [
            Annotated[Annotated[float, Field(ge=0, le=1)], Tag("number")],
            Annotated[LinearConfidence, Tag("linear")],
            Annotated[VarConfidence, Tag("from")],
        ],
        Discriminator(
            _confidence_kind,
            custom_error_type="confidence_kind",
            custom_error_message=(
                "expected a number in [0, 1], {var, base, per}, {from: x} or one operation: "
                + _OPERATIONS_TEXT
            ),
        ),
    )


PAYLOAD_OPERATIONS: tuple[str, ...] = ("reinforce", "multiply", "min", "max", "clamp", "add")
"""The operations an ``emit.payload`` key of type ``number`` takes (the decays read a
fact's confidence and are the confidence's only)."""


def _payload_kind(value: Any) -> str | None:
    """A payload value: a scalar (a literal or a template) or one operation."""
    if isinstance(value, dict):
        kind = _confidence_kind(value)
        return kind if kind in ARITHMETIC else "unknown"
    for name, model in ARITHMETIC.items():
        if isinstance(value, model):
            return name
    return "scalar"


if TYPE_CHECKING:
    PayloadValue = bool | int | float | str | ArithOp
else:
    PayloadValue = _with_operations(
        [Annotated[Scalar, Tag("scalar")]],
        Discriminator(
            _payload_kind,
            custom_error_type="payload_kind",
            custom_error_message=(
                "expected a literal, a template or one operation: " + ", ".join(PAYLOAD_OPERATIONS)
            ),
        ),
    )
    """An ``emit.payload`` value."""


_RECURSIVE: tuple[type[_IR], ...] = (Reinforce, Clamp, *ARITHMETIC.values())
for _model in _RECURSIVE:
    _model.model_rebuild()


class ListVar(_IR):
    """Fact ids taken from a bound list variable (e.g. an episode's ``replaces``)."""

    list: Name


Ref = Name | ListVar


class Emit(_IR):
    """The delta a rule produces. Strings are templates: ``"{s}"`` inserts variable ``s``."""

    kind: DeltaKind
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    payload: dict[str, PayloadValue] = Field(default_factory=dict)
    """Templates; a key declared in ``fact_payload`` also takes a literal of its type, and
    a ``number`` key an operation (``{add: […]}``: see :data:`PAYLOAD_OPERATIONS`)."""
    replaces: list[Ref] = Field(default_factory=list)
    reinforces: list[Name] = Field(default_factory=list)
    confidence: Confidence | None = None
    sources: list[Name] = Field(default_factory=list)
    reason: str = ""
    status: CloseStatus | None = Field(default=None, exclude_if=lambda v: v is None)
    """The status a ``delete`` gives the facts it replaces (default ``deleted``;
    ``challenged`` flags them and leaves them current); left out of dumps when absent, so
    packs that do not use it keep their hash."""
    merged_into: Name | None = Field(default=None, exclude_if=lambda v: v is None)
    """With ``status: merged``: the named ``fact`` pattern whose fact the replaced facts
    were merged into (left out of dumps when absent)."""
    layer: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The memory layer of the fact made: a layer name or a template such as ``"{l}"``
    (absent: the pack's default, else the replaced fact's, else ``episodic``)."""
    memory_type: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The memory type of the fact made, as ``layer``: a type name or a template."""


class SelectClause(_IR):
    """A declarative pre-filter on episode columns and metadata, compiled to parameterised SQL."""

    where: dict[str, Condition] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _wrap(cls, data: Any) -> Any:
        return {"where": data} if isinstance(data, dict) else data


class SalienceGate(_IR):
    """Drop episodes scoring below ``min`` before the rules see them.

    ``tau_seconds`` is this rule's recency time constant; ``importance_key`` names a
    declared ``number`` field holding the episode's importance in [0, 1].
    """

    min: float = Field(ge=0, le=1)
    tau_seconds: float = Field(default=86400.0, gt=0, allow_inf_nan=False)
    importance_key: Name | None = Field(default=None, exclude_if=lambda v: v is None)
    """Left out of dumps when absent, so packs that do not use it keep their hash."""


def _reason(value: Any) -> Any:
    """A suppression is kept only with the reason the warning does not apply."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            "a suppression needs a reason: write why the warning does not apply to this rule"
        )
    return value


Reason = Annotated[
    str | None,
    BeforeValidator(_reason),
    WithJsonSchema({"type": "string", "pattern": r"\S"}),
]


def _no_defaults(schema: dict[str, Any]) -> None:
    """A check left out is not silenced: the schema shows no ``null`` defaults."""
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)


class LintIgnore(_IR):
    """Lint checks silenced for one rule, each with the reason it does not apply."""

    model_config = ConfigDict(populate_by_name=False, json_schema_extra=_no_defaults)
    key_name: ClassVar[str] = "lint check"

    shadowed: Reason = None
    select_never_matches: Reason = Field(default=None, alias="select-never-matches")
    pattern_never_matches: Reason = Field(default=None, alias="pattern-never-matches")
    cadence_overlap: Reason = Field(default=None, alias="cadence-overlap")

    def reasons(self) -> dict[str, str]:
        """Check name → reason, for the checks silenced."""
        return {k: v for k, v in self.model_dump(by_alias=True).items() if v is not None}


class LintSettings(_IR):
    """What ``stargraph-mem lint`` should not report for a rule: ``ignore: {check: reason}``."""

    ignore: LintIgnore = Field(default_factory=LintIgnore)


class Rule(_IR):
    id: Name
    description: str = ""
    priority: int = Field(default=0, ge=-1000, le=1000)
    enabled: bool = True
    claim: bool = True
    cadence: Cadence | None = None
    select: SelectClause | None = None
    salience: SalienceGate | None = None
    when: list[WhenItem] = Field(min_length=1)
    emit: Emit
    lint: LintSettings = Field(default_factory=LintSettings, exclude=True)
    """Authoring metadata: left out of dumps, so suppressions never change the pack hash."""


class Defaults(_IR):
    cadence: Cadence = Cadence(cron="0 3 * * *")
    confidence: float = Field(default=0.8, ge=0, le=1)
    layer: Layer | None = Field(default=None, exclude_if=lambda v: v is None)
    """The layer of facts whose rule names none (absent: the replaced fact's, else
    ``episodic``)."""
    memory_type: MemoryType | None = Field(default=None, exclude_if=lambda v: v is None)
    half_lives: dict[Layer, Duration | None] = Field(
        default_factory=dict, exclude_if=lambda v: not v
    )
    """Per-layer half-lives ``retention`` reads, over 004's (episodic 30 days, the others
    infinite); ``null`` is infinite. The three are left out of dumps when absent, so packs
    that do not use them keep their hash."""

    def half_life_days(self, layer: str) -> float | None:
        """The half-life of ``layer`` in days (``None``: infinite)."""
        if layer in self.half_lives:
            given = self.half_lives[layer]
            return None if given is None else given.total_seconds() / 86400.0
        return DEFAULT_HALF_LIVES.get(layer)


def _entity_name(value: str) -> str:
    if not value.strip():
        raise ValueError("an entity name needs a character other than whitespace")
    return value


EntityName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_NAME_CHARS),
    AfterValidator(_entity_name),
]
"""A name or alias of an entity: any text with a non-space character."""


class EntityDecl(_IR):
    """An entity the pack declares for every partition it runs on: its canonical name,
    aliases (names compared case-, accent- and whitespace-insensitively) and type."""

    name: EntityName
    aliases: list[EntityName] = Field(default_factory=list, max_length=MAX_ALIASES)
    type: EntityType = "concept"


class RulePack(_IR):
    ir_version: Literal[1]
    pack: Name
    version: str = Field(min_length=1, max_length=64)
    description: str = ""
    fields: dict[Name, FieldType] = Field(default_factory=dict)
    fact_payload: dict[Name, PayloadType] = Field(default_factory=dict, exclude_if=lambda v: not v)
    """Payload keys of the facts the pack makes, with their types: rules test them in fact
    patterns (``payload: {key: ...}``) and ``emit.payload`` writes them with that type."""
    defaults: Defaults = Defaults()
    rules: list[Rule] = Field(min_length=1)
    entities: list[EntityDecl] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Entities registered in each partition the pack runs on (left out of dumps when
    there are none, so packs without them keep their hash)."""


EPISODE_BUILTINS: dict[str, FieldType] = {
    "id": "string",
    "session": "string",
    "source_node": "string",
    "content": "string",
    "timestamp": "timestamp",
    "access_count": "integer",
    "last_access": "timestamp",
}
"""Fields every episode has. ``access_count`` counts the access-recording reads that
returned it (``MemoryStore.recent``) and ``last_access`` is the latest (a never-read
episode's ``last_access`` is its ``timestamp``): see :data:`EPISODE_ACCESS_FIELDS`."""
EPISODE_ACCESS_FIELDS: frozenset[str] = frozenset({"access_count", "last_access"})
"""The episode fields reads change after the episode is written: a rule's ``episode``
pattern (and ``select``, ``over: pass`` patterns) sees them as the pass reads them; an
``over: history`` pattern cannot test them (its durable aggregates hold what an episode
was when consumed, not what later reads made it)."""
FACT_FIELDS: dict[str, FieldType] = {
    "id": "string",
    "subject": "string",
    "predicate": "string",
    "object": "string",
    "confidence": "number",
    "valid_from": "timestamp",
    "reinforced_at": "timestamp",
    "rule_id": "string",
    "observed_at": "timestamp",
    "reinforcement_count": "integer",
    "access_count": "integer",
    "last_access": "timestamp",
    "pinned": "boolean",
    "status": "string",
    "layer": "string",
    "memory_type": "string",
    "trust": "number",
}
"""Fields a fact pattern tests. ``last_access`` of a never-read fact is its ``valid_from``;
``status`` is ``current``, ``challenged`` (current, flagged) or ``archived`` (archived facts
are matched only by a pattern whose ``status`` test admits ``archived``). ``layer``,
``memory_type`` and ``trust`` are 004's (see :mod:`stargraph_mem.model.layers`)."""

LIFECYCLE_FIELDS: tuple[str, ...] = (
    "reinforcement_count",
    "access_count",
    "last_access",
    "pinned",
    "status",
    "layer",
    "memory_type",
    "trust",
)
"""Fact fields that enter CLIPS only when a rule of the pack tests them."""

MATCHED_STATUSES: tuple[str, ...] = ("current", "challenged", "archived")
"""The statuses a fact a rule sees can have."""
