"""What a compiled program is made of and tells the runtime: the fixed templates and
control rules, slot and variable names, salience bands, and the relations each rule's
patterns compile to (counts, latest-earlier keys, history aggregates, neighbours,
surprise), with each rule's emit tokens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from stargraph_mem.ir.checks import (
    RuleInfo,
    parse_timestamp_literal,
    unnamed_alias,
)
from stargraph_mem.ir.models import (
    LIFECYCLE_FIELDS,
    FieldType,
)
from stargraph_mem.model.layers import DEFAULT_LAYER, DEFAULT_MEMORY_TYPE

SAL_DROP = 9950


SAL_COUNT = 9900


SAL_RULE_TOP = 5000


SAL_LATEST = -9000


SAL_ADVANCE = -9900


OUT = "sm-out"


FIXED_TEMPLATES = """\
(deftemplate sm-pass (slot now (type INTEGER)))
(deftemplate sm-cursor (slot n (type INTEGER)))
(deftemplate sm-claim)
(deftemplate sm-fired (slot r (type SYMBOL)))
(deftemplate sm-drop (slot id (type STRING)))
(deftemplate sm-elig (slot set (type INTEGER)) (slot r (type SYMBOL)))
(deftemplate sm-end)
"""


FACT_SLOTS = """\
(deftemplate sm-fact
  (slot f_id (type STRING))
  (slot f_subject (type STRING))
  (slot f_predicate (type STRING))
  (slot f_object (type STRING))
  (slot f_confidence (type FLOAT))
  (slot f_valid_from (type INTEGER))
  (slot f_reinforced_at (type INTEGER))
  (slot f_rule_id (type STRING))
  (slot f_observed_at (type INTEGER))
  (slot anchor (type INTEGER) (default 0))"""


LIFECYCLE_SLOTS: Mapping[str, str] = {
    "reinforcement_count": "(type INTEGER) (default 0)",
    "access_count": "(type INTEGER) (default 0)",
    "last_access": "(type INTEGER) (default 0)",
    "pinned": "(type SYMBOL) (default FALSE)",
    "status": '(type STRING) (default "current")',
    "layer": f'(type STRING) (default "{DEFAULT_LAYER}")',
    "memory_type": f'(type STRING) (default "{DEFAULT_MEMORY_TYPE}")',
    "trust": "(type FLOAT) (default 1.0)",
    "read_at": "(type INTEGER) (default 0)",
}
"""The lifecycle slots of ``sm-fact``: declared only when a rule of the pack reads them, so
a pack that does not pays nothing per asserted fact. ``read_at`` is no pattern field: the
latest access-recording read (0: never), which decays counting from the last access read."""


SLOT_ORDER: Final = (*LIFECYCLE_FIELDS, "read_at")


TEMPLATE_REFS_UNCHECKED: Final = 4
"""Variable references an emit template may hold before CLIPS checks the length of the
text it would build (see :meth:`Generator.template_expr`): at most four copies of
an episode's largest value."""


STATEMENT_FIELDS: Final = frozenset({"subject", "predicate", "object"})
"""The fact fields that are strings in CLIPS and in the store alike."""


NORMAL_KEY: Final = "normal:"
"""Before a fact field in ``CompiledPack.fact_keys``: the pattern ties the field's content
normal form (``normal_eq``), not its value, to the episode's field."""


def normal_var(var: str) -> str:
    """The CLIPS variable holding the content normal form of author variable ``var``."""
    return f"?i_nf_{var}"


def normal_slot(fname: str) -> str:
    """The slot holding a field's content normal form, beside the field's own slot (``-``
    is in no field name, so no declared field's slot can clash with it)."""
    return f"{slot_name(fname)}-nf"


DAY_US = 86_400_000_000
"""Microseconds in a day: ``ebbinghaus`` counts days."""


CONTROL_RULES = f"""\
(defrule sm-drop-fact (declare (salience {SAL_DROP}))
  ?d <- (sm-drop (id ?id))
  ?f <- (sm-fact (f_id ?id))
  =>
  (retract ?d ?f))
(defrule sm-advance (declare (salience {SAL_ADVANCE}))
  ?c <- (sm-cursor (n ?n))
  ?e <- (sm-episode (n ?n))
  =>
  (retract ?e)
  (do-for-all-facts ((?x sm-claim sm-fired sm-drop)) TRUE (retract ?x))
  (modify ?c (n (+ ?n 1))))
"""


def slot_name(fname: str) -> str:
    """Template slot for an episode or fact field (prefixed: never clashes with ``n``/``ok``)."""
    return f"f_{fname}"


def payload_slot(key: str) -> str:
    """The ``sm-fact`` slot of declared payload key ``key`` (apart from every ``f_`` slot)."""
    return f"p_{key}"


def literal_value(ftype: FieldType, value: Any) -> Any:
    """Convert an IR literal to the runtime's representation for ``ftype``."""
    if ftype == "timestamp":
        return parse_timestamp_literal(value)
    if ftype == "number":
        return float(value)
    return value


def item_alias(kind: str, pattern: Any, index: int) -> str:
    """A pattern's alias, or ``_p<index>`` for unnamed fact/earlier/count patterns."""
    alias = getattr(pattern, "alias", None) if kind not in ("not", "exists") else None
    return alias or unnamed_alias(index)


def count_var(alias: str) -> str:
    """The CLIPS variable holding a count pattern's value."""
    return f"?i_c_{alias}"


@dataclass(frozen=True)
class Relation:
    """A relation the runtime program maintains: latest earlier episode, or a tally."""

    index: int
    kind: str  # "earlier" | "count"
    keys: tuple[str, ...]
    filter: tuple[tuple[str, str], ...]  # (field, canonical condition json) literal tests only
    distinct: str | None = None

    @property
    def template(self) -> str:
        return f"sm-{'latest' if self.kind == 'earlier' else 'count'}-{self.index}"


@dataclass(frozen=True)
class HistoryRelation:
    """An ``over: history`` pattern of one rule: computed per episode by the runtime from
    the durable aggregates of the rule's partition, and asserted as a ``sm-hist-<i>`` fact."""

    index: int
    kind: str  # "earlier" | "count"
    rule_index: int
    rule_id: str
    keys: tuple[str, ...]
    filter: tuple[tuple[str, str], ...]  # (field, canonical condition json) literal tests only
    types: tuple[tuple[str, FieldType], ...]
    """The type of every field the relation reads (keys, filter, distinct, carried)."""
    distinct: str | None = None
    within_us: int | None = None
    carried: tuple[str, ...] = ()
    """``earlier``: the fields its ``bind``/``var`` conditions test, kept with the episode."""

    @property
    def template(self) -> str:
        return f"sm-hist-{self.index}"

    @cached_property
    def type_of(self) -> dict[str, FieldType]:
        """:attr:`types` as a mapping (built once: the runtime reads it per episode)."""
        return dict(self.types)

    @cached_property
    def name(self) -> str:
        """A stable name of what the relation keeps: another definition starts afresh."""
        text = json.dumps(
            [self.kind, self.keys, self.filter, self.distinct, self.within_us, self.carried],
            sort_keys=True,
        )
        return f"{self.kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class NearRelation:
    """A ``near`` test of one fact pattern: the runtime computes the neighbours (outside
    CLIPS, with the configured embedder) and asserts an ``sm-near`` fact per neighbour,
    ``k`` being this relation's index."""

    index: int
    rule_index: int
    rule_id: str
    alias: str
    """The fact pattern's alias (``-`` inside ``not``/``exists``)."""
    of: str
    """``episode``, or the alias of the fact pattern whose neighbours these are (a sweep)."""
    top_k: int
    min_cosine: float | None
    at_least: int | None = None
    """Clusters: the neighbours of a fact are the other members of the cluster it
    represents, when there are at least this many (see ``near.clusters``)."""

    @property
    def sweep(self) -> bool:
        return self.of != "episode"


@dataclass(frozen=True)
class EpisodeNearRelation:
    """An ``earlier`` pattern with ``near``: the runtime ranks the earlier episodes of the
    partition against each episode (outside CLIPS, with the configured embedder) and
    asserts an ``sm-near-ep`` fact per neighbour, ``k`` being this relation's index."""

    index: int
    rule_index: int
    rule_id: str
    alias: str
    top_k: int
    min_cosine: float | None
    last: int
    """At most the latest this many earlier episodes are candidates."""
    within_us: int | None = None
    """Only earlier episodes stamped at most this long before the episode (µs)."""


EPISODE_NEAR_TEMPLATE: Final = """\
(deftemplate sm-near-ep
  (slot n (type INTEGER))
  (slot k (type INTEGER))
  (slot id (type STRING))
  (slot cos (type FLOAT)))
"""
"""Declared when a rule has an ``earlier`` pattern with ``near``: the neighbour episodes
(by id) the runtime asserts for episode ``n``."""


NEAR_TEMPLATE: Final = """\
(deftemplate sm-near
  (slot n (type INTEGER))
  (slot k (type INTEGER))
  (slot of (type STRING) (default ""))
  (slot id (type STRING))
  (slot cos (type FLOAT)))
(deftemplate sm-made (slot f (type FACT-ADDRESS)))
(deftemplate sm-gone (slot id (type STRING)))
(defrule sm-drop-fact-gone (declare (salience 9960))
  (sm-drop (id ?id))
  (sm-fact (f_id ?id))
  =>
  (assert (sm-gone (id ?id))))
"""
"""Declared when a rule tests ``near``: the neighbours the runtime asserts, and the logs of
the facts a pass makes (``sm-made``) and closes (``sm-gone``, also for a dropped fact, just
before ``sm-drop-fact`` retracts it) that the runtime reads and retracts between episodes
(through the C API: see ``engine/passes/clips_logs.py``)."""


@dataclass(frozen=True)
class SurpriseRelation:
    """A ``surprise`` pattern of one rule: the runtime scores each episode the rule may
    see against the partition's current facts (outside CLIPS, with the configured
    embedder: see :func:`~stargraph_mem.engine.passes.near.surprise`) and asserts one
    ``sm-surprise`` fact, ``k`` being this relation's index."""

    index: int
    rule_index: int
    rule_id: str
    alias: str
    """The pattern's name: its ``as``, else ``surprise`` (the bindings cite it so)."""
    k: int
    """How many nearest facts the score averages over (fewer when there are fewer)."""


SURPRISE_TEMPLATE: Final = """\
(deftemplate sm-surprise
  (slot n (type INTEGER))
  (slot k (type INTEGER))
  (slot u (type FLOAT)))
"""
"""Declared when a rule has a ``surprise`` pattern: the scores the runtime asserts."""


@dataclass
class EmitToken:
    """One token a rule prints after ``<rule> <n>``: which alias and what it is."""

    alias: str
    what: str  # "fact_id" | "episode_n" | "would_be" | "count" | "hcount" | "temp_id"
    # | "near_episode"
    rel: int = -1
    """``hcount``: the index of its :class:`HistoryRelation`."""


@dataclass
class RuleProgram:
    """What the runtime needs to turn a printed line back into a delta."""

    info: RuleInfo
    symbol: str
    salience: int
    tokens: list[EmitToken] = field(default_factory=list)
    count_aliases: list[str] = field(default_factory=list)
    clips: str = ""
