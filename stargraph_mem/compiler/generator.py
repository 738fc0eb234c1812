"""IR → CLIPS text: one small emitter per IR node type.

The program processes a pass's episodes one at a time behind a cursor fact, so each
episode sees the facts as they stand after the episodes before it. Every join the
rules need is an equality join (cursor ordinal, fact slots, relation keys), which keeps
matching linear in the number of episodes even with hot keys:

* ``earlier`` compiles to a ``sm-latest-<i>`` fact per key, moved forward after the
  rules of each episode ran (never the quadratic earlier/later/``not``-between form);
* ``count`` compiles to a ``sm-count-<i>`` tally per key, updated before the rules run;
* ``over: history`` patterns compile to a ``sm-hist-<i>`` fact per episode that the
  runtime computes in Python from the durable aggregates
  (:mod:`stargraph_mem.engine.passes.aggregates`):
  the count (and whether it grew) or the ordinal of the latest earlier episode, which is
  negative for one consumed by an earlier pass.

Rule right-hand sides print only integers and identifiers (ordinals, fact ids) to the
``sm-out`` router; the runtime resolves bindings from its own copy of the data, so no
user text is ever parsed back out of CLIPS.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from stargraph_mem.compiler.clips_text import clips_float, clips_literal, clips_string
from stargraph_mem.compiler.expressions import (
    CLIPS_TESTS,
    DECAY_SLOTS,
    EXTRA_DECAY_SLOTS,
    NORMAL_FORM_FUNCTION,
    NOT_ARCHIVED,
    RETENTION_CLIPS,
    Term,
    admits_archived,
    arithmetic_operands,
    boost_expr,
    decay_anchor,
    decay_reads,
    decayed_facts,
    read_boost_expr,
    speed_expr,
)
from stargraph_mem.compiler.program import (
    CONTROL_RULES,
    DAY_US,
    EPISODE_NEAR_TEMPLATE,
    FACT_SLOTS,
    FIXED_TEMPLATES,
    LIFECYCLE_SLOTS,
    NEAR_TEMPLATE,
    NORMAL_KEY,
    OUT,
    SAL_COUNT,
    SAL_LATEST,
    SAL_RULE_TOP,
    SLOT_ORDER,
    STATEMENT_FIELDS,
    SURPRISE_TEMPLATE,
    TEMPLATE_REFS_UNCHECKED,
    EmitToken,
    EpisodeNearRelation,
    HistoryRelation,
    NearRelation,
    Relation,
    RuleProgram,
    SurpriseRelation,
    count_var,
    item_alias,
    literal_value,
    normal_slot,
    normal_var,
    payload_slot,
    slot_name,
)
from stargraph_mem.errors import CompileError
from stargraph_mem.ir.checks import (
    Analysis,
    RuleInfo,
    VarInfo,
    is_arithmetic,
    parse_template,
    pattern_of,
)
from stargraph_mem.ir.models import (
    EPISODE_BUILTINS,
    FACT_FIELDS,
    AddOp,
    ClampOp,
    Condition,
    CountPattern,
    EarlierPattern,
    EbbinghausOp,
    FieldType,
    LinearConfidence,
    LinearDecayOp,
    ListVar,
    MaxOp,
    MinOp,
    MultiplyOp,
    ReinforceOp,
    RetentionOp,
    SurprisePattern,
    VarConfidence,
    VarRef,
    arithmetic_name,
    operator_attribute,
)
from stargraph_mem.ir.operators import (
    unknown_operator,
)
from stargraph_mem.model.deltas import FLAG_STATUSES, kind_creates
from stargraph_mem.model.layers import DEFAULT_LAYER, DEFAULT_MEMORY_TYPE, LAYERS
from stargraph_mem.model.limits import TEMPLATE_CHARS_MAX


class _Ctx:
    """Per-rule emission state: variable names and fresh temporaries."""

    def __init__(self, info: RuleInfo, program: RuleProgram) -> None:
        self.info = info
        self.program = program
        self.fresh = 0
        self.observed: dict[str, str] = {}
        """Alias (``""``: the episode) → the variable holding its observation time."""
        self.renamed: dict[str, str] = {}
        """Variables held by a CLIPS variable of another name (a bound fact id)."""
        self.decay: dict[str, dict[str, str]] = {}
        """Fact alias → the variables holding the slots a decay reads (:data:`DECAY_SLOTS`)."""

    def var(self, name: str) -> str:
        if self.info.aliases.get(name) == "count":
            return count_var(name)
        return self.renamed.get(name, f"?v_{name}")

    def temp(self) -> str:
        self.fresh += 1
        return f"?i_t{self.fresh}"


class Generator:
    """Emits the CLIPS program for an analysed pack."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.pack = analysis.pack
        self.episode_types: dict[str, FieldType] = {**EPISODE_BUILTINS, **self.pack.fields}
        self.relations: list[Relation] = []
        self.latest_fields: dict[int, dict[str, FieldType]] = {}
        self.used_fields: dict[str, FieldType] = {}
        self.programs: list[RuleProgram] = []
        self.history: list[HistoryRelation] = []
        self.observes = any(
            "observed_at" in pattern.where or getattr(pattern, "near", None) is not None
            for info in analysis.rules
            if info.rule.enabled
            for kind, pattern in map(pattern_of, info.rule.when)
            if kind in ("fact", "not", "exists")
        ) or any(
            pattern_of(item)[0] == "surprise"
            for info in analysis.rules
            if info.rule.enabled
            for item in info.rule.when
        )
        """Whether a rule tests ``observed_at``, or ranks facts by meaning (``near``,
        ``surprise``: ties go to the earliest observed): then facts made in a pass carry
        it in CLIPS."""
        self.history_at: dict[tuple[int, int], HistoryRelation] = {}
        self.near: list[NearRelation] = []
        self.near_at: dict[tuple[int, int], NearRelation] = {}
        self.episode_near: list[EpisodeNearRelation] = []
        self.episode_near_at: dict[tuple[int, int], EpisodeNearRelation] = {}
        self.surprise: list[SurpriseRelation] = []
        self.surprise_at: dict[tuple[int, int], SurpriseRelation] = {}
        self.needs_archived = any(
            admits_archived(pattern_of(item)[1])
            for info in analysis.rules
            if info.rule.enabled
            for item in info.rule.when
            if pattern_of(item)[0] in ("fact", "not", "exists")
        )
        """Whether a fact pattern admits archived facts: then the partition's archived facts
        enter CLIPS too, and every other fact pattern tests ``status`` is current."""
        self.normal_pairs = self.normal_joins()
        """Per rule index, the ``normal_eq`` tests of its fact patterns that compare a
        statement field with a string field of the rule's episode, by (fact field, variable):
        both sides' content normal forms are slots (computed once per fact and episode, not
        once per pair), so the test is an equality join."""
        self.normal_fact_fields = tuple(
            sorted({fname for pairs in self.normal_pairs.values() for fname, _ in pairs})
        )
        """The fact fields whose content normal form ``sm-fact`` holds (:func:`normal_slot`)."""
        self.normal_episode_fields = tuple(
            sorted(
                {
                    info.variables[var].field
                    for info in analysis.rules
                    for _, var in self.normal_pairs.get(info.index, ())
                }
            )
        )
        """The episode fields whose content normal form ``sm-episode`` holds."""
        self.lifecycle = self.lifecycle_slots()
        """The lifecycle fact fields that enter CLIPS (:data:`LIFECYCLE_SLOTS`)."""
        self.payload_types: dict[str, FieldType] = {
            key: ftype for key, ftype in self.pack.fact_payload.items() if self.payload_tested(key)
        }
        """The declared payload keys a rule tests: each is an ``sm-fact`` slot."""

    # --- fact slots ----------------------------------------------------------------------

    def fact_patterns(self) -> list[tuple[RuleInfo, str, Any]]:
        """(rule, kind, pattern) of every fact/not/exists pattern of the enabled rules."""
        return [
            (info, kind, pattern)
            for info in self.analysis.rules
            if info.rule.enabled
            for item in info.rule.when
            for kind, pattern in [pattern_of(item)]
            if kind in ("fact", "not", "exists")
        ]

    def normal_joins(self) -> dict[int, set[tuple[str, str]]]:
        """See :attr:`normal_pairs`."""
        found: dict[int, set[tuple[str, str]]] = {}
        for info, _, pattern in self.fact_patterns():
            for fname, cond in pattern.where.items():
                var = self.joined_var(info, fname, cond)
                if var is not None:
                    found.setdefault(info.index, set()).add((fname, var))
        return found

    @staticmethod
    def joined_var(info: RuleInfo, fname: str, cond: Condition) -> str | None:
        """The variable a fact pattern's ``normal_eq`` test on ``fname`` compares with,
        when it is a string field of the rule's episode (else None: the test stays one)."""
        ref = cond.get("normal_eq")
        if fname not in STATEMENT_FIELDS or not isinstance(ref, VarRef):
            return None
        bound = info.variables.get(ref.var)
        if bound is None or bound.kind != "episode" or bound.type != "string":
            return None
        return ref.var

    def lifecycle_slots(self) -> tuple[str, ...]:
        tested = {f for _, _, pattern in self.fact_patterns() for f in pattern.where}
        if any(self.skips_pinned(info) for info in self.analysis.rules if info.rule.enabled):
            tested.add("pinned")
        if self.needs_archived or any(
            info.rule.emit.status in FLAG_STATUSES
            for info in self.analysis.rules
            if info.rule.enabled
        ):
            tested.add("status")
        for info in self.analysis.rules:
            if info.rule.enabled:
                for reads in decay_reads(info.rule.emit.confidence).values():
                    tested |= reads
        return tuple(f for f in SLOT_ORDER if f in tested)

    def payload_tested(self, key: str) -> bool:
        return any(key in pattern.payload for _, _, pattern in self.fact_patterns())

    @staticmethod
    def skips_pinned(info: RuleInfo) -> bool:
        """A sweep leaves pinned facts alone unless it tests ``pinned`` itself."""
        return info.sweep and not info.tests_field("pinned")

    def fact_template(self) -> str:
        lines = [FACT_SLOTS]
        lines += [f"  (slot {slot_name(f)} {LIFECYCLE_SLOTS[f]})" for f in self.lifecycle]
        lines += [f"  (slot {payload_slot(k)} (default nil))" for k in self.payload_types]
        lines += [
            f'  (slot {normal_slot(f)} (type STRING) (default ""))' for f in self.normal_fact_fields
        ]
        return "\n".join(lines) + ")\n"

    def implicit(self, info: RuleInfo, kind: str, pattern: Any) -> list[str]:
        """Tests the author did not write: sweeps skip pinned facts; only a pattern that
        tests ``status`` sees archived facts."""
        out = []
        if kind == "fact" and self.skips_pinned(info):
            out.append("(f_pinned FALSE)")
        if self.needs_archived and "status" not in pattern.where:
            out.append(NOT_ARCHIVED)
        return out

    @staticmethod
    def unflagged(info: RuleInfo, pattern: Any, alias: str) -> list[str]:
        """A rule that flags the facts it names (``status: challenged``) matches only
        facts not flagged so already, unless its pattern tests ``status`` itself: it
        flags each once (see :meth:`rhs`, which marks them in CLIPS too)."""
        status = info.rule.emit.status
        if status not in FLAG_STATUSES or "status" in pattern.where:
            return []
        if alias not in info.rule.emit.replaces:
            return []
        return [f"(f_status ~{clips_string(str(status))})"]

    # --- relations and used fields -------------------------------------------------

    def relation_for(self, kind: str, pattern: EarlierPattern | CountPattern) -> Relation:
        literal = tuple(
            sorted(
                (name, cond.model_dump_json(by_alias=True, exclude_none=True))
                for name, cond in pattern.where.items()
                if cond.bind is None and not any(isinstance(v, VarRef) for _, v in cond.tests())
            )
        )
        distinct = pattern.distinct if isinstance(pattern, CountPattern) else None
        for rel in self.relations:
            if (rel.kind, rel.keys, rel.filter, rel.distinct) == (
                kind,
                tuple(pattern.keys),
                literal,
                distinct,
            ):
                return rel
        rel = Relation(len(self.relations), kind, tuple(pattern.keys), literal, distinct)
        self.relations.append(rel)
        self.latest_fields[rel.index] = {}
        return rel

    def history_for(
        self, info: RuleInfo, j: int, kind: str, pattern: EarlierPattern | CountPattern
    ) -> HistoryRelation:
        literal = tuple(
            sorted(
                (name, cond.model_dump_json(by_alias=True, exclude_none=True))
                for name, cond in pattern.where.items()
                if cond.bind is None and not any(isinstance(v, VarRef) for _, v in cond.tests())
            )
        )
        carried = tuple(
            sorted(name for name, _ in pattern.where.items() if name not in dict(literal))
        )
        distinct = pattern.distinct if isinstance(pattern, CountPattern) else None
        within = pattern.within if isinstance(pattern, CountPattern) else None
        names = {*pattern.keys, *pattern.where, *([distinct] if distinct else [])}
        rel = HistoryRelation(
            index=len(self.history),
            kind=kind,
            rule_index=info.index,
            rule_id=info.rule.id,
            keys=tuple(pattern.keys),
            filter=literal,
            types=tuple(sorted((n, self.episode_types[n]) for n in names)),
            distinct=distinct,
            within_us=None if within is None else within.total_microseconds(),
            carried=carried if kind == "earlier" else (),
        )
        self.history.append(rel)
        self.history_at[(info.index, j)] = rel
        return rel

    def near_for(self, info: RuleInfo, j: int, kind: str, pattern: Any) -> None:
        near = pattern.near
        rel = NearRelation(
            index=len(self.near),
            rule_index=info.index,
            rule_id=info.rule.id,
            alias=item_alias(kind, pattern, j) if kind == "fact" else "-",
            of=near.of,
            top_k=near.top_k,
            min_cosine=near.min_cosine,
            at_least=near.at_least,
        )
        self.near.append(rel)
        self.near_at[(info.index, j)] = rel

    def episode_near_for(self, info: RuleInfo, j: int, pattern: EarlierPattern) -> None:
        near = pattern.near
        assert near is not None
        rel = EpisodeNearRelation(
            index=len(self.episode_near),
            rule_index=info.index,
            rule_id=info.rule.id,
            alias=item_alias("earlier", pattern, j),
            top_k=near.top_k,
            min_cosine=near.min_cosine,
            last=near.last,
            within_us=None if near.within is None else near.within.total_microseconds(),
        )
        self.episode_near.append(rel)
        self.episode_near_at[(info.index, j)] = rel

    def episode_near_pattern(self, ctx: _Ctx, j: int, pattern: EarlierPattern, alias: str) -> str:
        """The ``sm-near-ep`` pattern binding a neighbour episode of pattern ``j``."""
        rel = self.episode_near_at[(ctx.info.index, j)]
        assert pattern.near is not None
        cos = pattern.near.cosine
        cosine = ctx.var(cos) if cos is not None else f"?i_cos_{alias}"
        return f"(sm-near-ep (n ?i_n) (k {rel.index}) (id ?i_eid_{alias}) (cos {cosine}))"

    def near_pattern(self, ctx: _Ctx, j: int, fid: str, cosine: str) -> str:
        """The ``sm-near`` pattern binding ``fid`` to a neighbour of pattern ``j``'s test."""
        rel = self.near_at[(ctx.info.index, j)]
        of = f" (of ?i_fid_{rel.of})" if rel.sweep else ""
        n = "0" if rel.sweep else "?i_n"
        return f"(sm-near (n {n}) (k {rel.index}){of} (id {fid}) (cos {cosine}))"

    @property
    def similar(self) -> bool:
        """Whether the runtime follows the facts CLIPS makes and closes (``near`` tests
        and ``surprise`` patterns rank them between episodes)."""
        return bool(self.near or self.surprise)

    def surprise_for(self, info: RuleInfo, j: int, pattern: SurprisePattern) -> None:
        rel = SurpriseRelation(
            index=len(self.surprise),
            rule_index=info.index,
            rule_id=info.rule.id,
            alias=pattern.alias or "surprise",
            k=pattern.k,
        )
        self.surprise.append(rel)
        self.surprise_at[(info.index, j)] = rel

    def surprise_pattern(self, ctx: _Ctx, j: int, pattern: SurprisePattern) -> str:
        """The ``sm-surprise`` pattern of pattern ``j``: its score, bound and bounded."""
        rel = self.surprise_at[(ctx.info.index, j)]
        var = ctx.var(pattern.alias) if pattern.alias is not None else f"?i_su_{j}"
        tests = []
        if pattern.at_least is not None:
            tests.append(f":(>= {var} {clips_float(pattern.at_least)})")
        if pattern.at_most is not None:
            tests.append(f":(<= {var} {clips_float(pattern.at_most)})")
        return f"(sm-surprise (n ?i_n) (k {rel.index}) (u " + "&".join([var, *tests]) + "))"

    def use_field(self, fname: str) -> None:
        self.used_fields[fname] = self.episode_types[fname]

    def collect(self) -> None:
        """First pass: which episode fields go into CLIPS, which relations exist."""
        for info in self.analysis.rules:
            if not info.rule.enabled:
                continue
            for j, item in enumerate(info.rule.when):
                kind, pattern = pattern_of(item)
                if kind in ("fact", "not", "exists") and pattern.near is not None:
                    self.near_for(info, j, kind, pattern)
                if kind == "surprise":
                    self.surprise_for(info, j, pattern)
                if kind == "episode":
                    for fname in pattern.where:
                        self.use_field(fname)
                    if self.observes:
                        self.use_field("timestamp")
                elif kind == "earlier" and pattern.near is not None:
                    self.episode_near_for(info, j, pattern)
                elif kind in ("earlier", "count") and pattern.over == "history":
                    self.history_for(info, j, kind, pattern)
                elif kind in ("earlier", "count"):
                    rel = self.relation_for(kind, pattern)
                    for fname in (*rel.keys, *pattern.where):
                        self.use_field(fname)
                    if isinstance(pattern, CountPattern) and pattern.distinct:
                        self.use_field(pattern.distinct)
                    if kind == "earlier":
                        for fname, cond in pattern.where.items():
                            if cond.bind is not None or any(
                                isinstance(v, VarRef) for _, v in cond.tests()
                            ):
                                self.latest_fields[rel.index][fname] = self.episode_types[fname]

    # --- templates ---------------------------------------------------------------------

    def slot_decl(self, fname: str, ftype: FieldType) -> str:
        name = slot_name(fname)
        if ftype == "list":
            return f'  (slot {name} (type STRING) (default ""))'
        return f"  (slot {name} (default nil))"

    def episode_template(self) -> str:
        lines = [
            "(deftemplate sm-episode",
            "  (slot n (type INTEGER))",
            "  (slot ok (type INTEGER))",
        ]
        lines += [self.slot_decl(f, t) for f, t in sorted(self.used_fields.items())]
        lines += [f"  (slot {normal_slot(f)} (default nil))" for f in self.normal_episode_fields]
        return "\n".join(lines) + ")\n"

    def history_template(self, rel: HistoryRelation) -> str:
        lines = [f"(deftemplate {rel.template}", "  (slot n (type INTEGER))"]
        if rel.kind == "earlier":
            types = rel.type_of
            lines.append("  (slot pn (type INTEGER))")
            lines.append("  (slot pts (type INTEGER))")
            lines += [self.slot_decl(f, types[f]) for f in rel.carried]
        else:
            lines += [
                "  (slot count (type INTEGER))",
                "  (slot grew (type SYMBOL))",
                "  (slot newest (type INTEGER))",
            ]
        return "\n".join(lines) + ")\n"

    def relation_template(self, rel: Relation) -> str:
        lines = [f"(deftemplate {rel.template}"]
        lines += [f"  (slot k{i})" for i in range(len(rel.keys))]
        if rel.kind == "earlier":
            lines.append("  (slot n (type INTEGER))")
            lines += [
                self.slot_decl(f, t) for f, t in sorted(self.latest_fields[rel.index].items())
            ]
        else:
            lines += [
                "  (slot count (type INTEGER))",
                "  (slot last (type INTEGER))",
                "  (slot grew (type SYMBOL))",
                "  (multislot seen)",
                "  (multislot eps)",
            ]
        return "\n".join(lines) + ")\n"

    # --- conditions ------------------------------------------------------------------

    def constraint(
        self, ctx: _Ctx | None, ftype: FieldType, cond: Condition, base: str, nullable: bool
    ) -> str:
        """A connected constraint for one slot; ``base`` is the slot's variable."""
        terms: list[str] = []
        multi = ftype == "list"
        if nullable and not multi and (cond.bind is not None or cond.get("exists")):
            terms.append("~nil")
        if multi and cond.get("exists"):
            terms.append('~""')
        tests = cond.tests()
        alone = len(tests) == 1  # presence terms (~nil) never contradict a literal
        for op, value in tests:
            terms.extend(self.test_terms(ctx, ftype, op, value, base, alone=alone))
        if not terms:
            return base
        return base + "&" + "&".join(terms)

    def operand(self, ctx: _Ctx | None, ftype: FieldType, value: Any) -> str:
        if isinstance(value, VarRef):
            assert ctx is not None
            return ctx.var(value.var)
        return clips_literal(literal_value(ftype, value), ftype)

    def test_terms(
        self,
        ctx: _Ctx | None,
        ftype: FieldType,
        op: str,
        value: Any,
        v: str,
        *,
        alone: bool = True,
    ) -> list[str]:
        """The constraint terms of one test, from :data:`CLIPS_TESTS`."""
        emit = CLIPS_TESTS.get(op)
        if emit is None:
            raise CompileError(unknown_operator(op))
        return emit(Term(partial(self.operand, ctx), ftype, value, v, alone))

    def slots(
        self,
        ctx: _Ctx | None,
        where: dict[str, Condition],
        types: dict[str, FieldType],
        prefix: str,
        *,
        forced: dict[str, str] | None = None,
        slot: Callable[[str], str] = slot_name,
        nullable: bool | None = None,
    ) -> list[str]:
        """Slot constraints for a pattern; ``forced`` gives fields a required variable.

        ``prefix`` keeps the pattern's own variables apart: its alias (author names are
        lower case), ``E`` for the episode, ``X<index>`` inside ``not``/``exists``."""
        out: list[str] = []
        forced = dict(forced or {})
        for fname, cond in where.items():
            ftype = types[fname]
            sigil = "?"
            var = (
                self.joined_var(ctx.info, fname, cond)
                if ctx is not None and types is FACT_FIELDS
                else None
            )
            if var is not None:  # an equality join of the two normal forms' slots
                out.append(f"({normal_slot(fname)} {normal_var(var)})")
                cond = cond.model_copy(update={operator_attribute("normal_eq"): None})
                if not cond.tests() and cond.bind is None and fname not in forced:
                    continue
            tests = cond.tests()
            simple_join = (
                cond.bind is None
                and len(tests) == 1
                and tests[0][0] == "eq"
                and isinstance(tests[0][1], VarRef)
                and ftype in ("string", "boolean")
                and fname not in forced
            )
            if simple_join:
                # a bare variable keeps the join an equality join CLIPS can hash
                assert ctx is not None
                out.append(f"({slot(fname)} {ctx.var(tests[0][1].var)})")
                continue
            if cond.bind is not None:
                base = ctx.var(cond.bind) if ctx is not None else f"{sigil}v_{cond.bind}"
            elif fname in forced:
                base = forced[fname]
            else:  # '-' is in no name: apart from ?i_<tag>_<alias> and from other fields
                base = f"{sigil}i_{prefix}-{fname}"
            may_miss = types is not FACT_FIELDS if nullable is None else nullable
            text = self.constraint(ctx, ftype, cond, base, may_miss)
            if fname in forced and forced[fname] != base:
                text += f"&{forced[fname]}"
            forced.pop(fname, None)
            out.append(f"({slot(fname)} {text})")
        for fname, var in forced.items():
            if types is FACT_FIELDS:  # always present
                out.append(f"({slot(fname)} {var})")
                continue
            absent = '""' if types[fname] == "list" else "nil"
            out.append(f"({slot(fname)} {var}&~{absent})")
        return out

    # --- patterns ----------------------------------------------------------------------

    def key_var(self, info: RuleInfo, key: str) -> str:
        """The variable holding the current episode's value of key field ``key``."""
        for item in info.rule.when:
            kind, pattern = pattern_of(item)
            if kind == "episode" and key in pattern.where and pattern.where[key].bind:
                return f"?v_{pattern.where[key].bind}"
        return f"?i_k_{key}"

    def rule_keys(self, info: RuleInfo) -> tuple[str, ...]:
        keys: list[str] = []
        for item in info.rule.when:
            kind, pattern = pattern_of(item)
            if kind in ("earlier", "count") and pattern.over == "pass":
                keys += [k for k in pattern.keys if k not in keys]
        return tuple(keys)

    def episode_pattern(self, ctx: _Ctx, where: dict[str, Condition]) -> str:
        forced = {k: self.key_var(ctx.info, k) for k in self.rule_keys(ctx.info)}
        if self.observes:
            if "timestamp" in where:
                ctx.observed[""] = forced.get("timestamp") or self.slot_var(
                    ctx, where["timestamp"], "timestamp", "E"
                )
            else:
                forced.setdefault("timestamp", "?i_ts")
                ctx.observed[""] = forced["timestamp"]
        parts = ["(n ?i_n)", "(ok ?i_ok)"]
        parts += self.slots(ctx, where, self.episode_types, "E", forced=forced)
        joined = {var for _, var in self.normal_pairs.get(ctx.info.index, ())}
        for fname, cond in where.items():
            if cond.bind is not None and cond.bind in joined:
                parts.append(f"({normal_slot(fname)} {normal_var(cond.bind)})")
        elig = f"(sm-elig (set ?i_ok) (r {ctx.program.symbol}))"
        return "(sm-episode " + " ".join(parts) + ")\n  " + elig

    def fact_pattern(self, ctx: _Ctx, pattern: Any, alias: str) -> str:
        where: dict[str, Condition] = pattern.where
        fid = f"?i_fid_{alias}"
        bound = where["id"].bind if "id" in where else None
        if bound is not None:  # CLIPS binds one variable per slot: the bind is the id
            ctx.renamed[bound] = fid
        forced: dict[str, str] = {}
        if alias in decayed_facts(ctx.info.rule.emit.confidence):
            held = ctx.decay[alias] = {}
            extra = decay_reads(ctx.info.rule.emit.confidence).get(alias, set())
            slots = {**DECAY_SLOTS, **{f: t for f, t in EXTRA_DECAY_SLOTS.items() if f in extra}}
            for fname, tag in slots.items():
                cond = where.get(fname)
                if cond is not None and cond.bind is not None:  # one variable per slot
                    held[fname] = ctx.var(cond.bind)
                else:
                    held[fname] = forced[fname] = f"?i_{tag}_{alias}"
        if "id" in where:  # the id slot carries both the tests and the id variable
            parts = self.slots(ctx, where, FACT_FIELDS, alias, forced={"id": fid, **forced})
        else:
            parts = [f"(f_id {fid})", *self.slots(ctx, where, FACT_FIELDS, alias, forced=forced)]
        parts += self.payload_slots(ctx, pattern, alias)
        implicit = self.implicit(ctx.info, "fact", pattern)
        flagged = self.unflagged(ctx.info, pattern, alias)
        if flagged and NOT_ARCHIVED in implicit:  # one test per slot: both in one
            implicit.remove(NOT_ARCHIVED)
            flagged = [NOT_ARCHIVED[:-1] + "&" + flagged[0].removeprefix("(f_status ")]
        parts += implicit + flagged
        if self.observes:
            cond = where.get("observed_at")
            if cond is None:
                parts.append(f"(f_observed_at ?i_ob_{alias})")
                ctx.observed[alias] = f"?i_ob_{alias}"
            else:
                ctx.observed[alias] = self.slot_var(ctx, cond, "observed_at", alias)
        fact = f"?i_fa_{alias} <- (sm-fact " + " ".join(parts) + ")"
        if pattern.near is None:
            return fact
        (j,) = [
            j for (r, j), rel in self.near_at.items() if (r, rel.alias) == (ctx.info.index, alias)
        ]
        cos = pattern.near.cosine
        cosine = ctx.var(cos) if cos is not None else f"?i_cos_{alias}"
        return self.near_pattern(ctx, j, fid, cosine) + "\n  " + fact

    @staticmethod
    def slot_var(ctx: _Ctx, cond: Condition, fname: str, prefix: str) -> str:
        """The variable :meth:`slots` gives a field's value under ``cond``."""
        return ctx.var(cond.bind) if cond.bind is not None else f"?i_{prefix}-{fname}"

    def plain_fact(self, ctx: _Ctx, pattern: Any, kind: str, tag: str) -> str:
        parts = self.slots(ctx, pattern.where, FACT_FIELDS, tag)
        parts += self.payload_slots(ctx, pattern, tag)
        parts += self.implicit(ctx.info, kind, pattern)
        return "(sm-fact " + " ".join(parts) + ")"

    def payload_slots(self, ctx: _Ctx, pattern: Any, prefix: str) -> list[str]:
        """Constraints on declared payload keys (a key a fact lacks reads as missing)."""
        if not pattern.payload:
            return []
        return self.slots(
            ctx,
            pattern.payload,
            self.payload_types,
            f"{prefix}-p",
            slot=payload_slot,
            nullable=True,
        )

    def earlier_pattern(self, ctx: _Ctx, pattern: EarlierPattern, alias: str) -> list[str]:
        rel = self.relation_for("earlier", pattern)
        dynamic = {
            f: c
            for f, c in pattern.where.items()
            if c.bind is not None or any(isinstance(v, VarRef) for _, v in c.tests())
        }
        parts = [f"(k{i} {self.key_var(ctx.info, k)})" for i, k in enumerate(rel.keys)]
        parts.append(f"(n ?i_pn_{alias}&:(< ?i_pn_{alias} ?i_n))")
        parts += self.slots(ctx, dynamic, self.episode_types, alias)
        out = [f"({rel.template} " + " ".join(parts) + ")"]
        if alias in self.would_be_aliases(ctx.info):
            out.append(f"?i_wb_{alias} <- (sm-fact (anchor ?i_pn_{alias}) (f_id ?i_wbid_{alias}))")
        return out

    def history_earlier(
        self, ctx: _Ctx, pattern: EarlierPattern, alias: str, rel: HistoryRelation
    ) -> list[str]:
        dynamic = {f: c for f, c in pattern.where.items() if f in rel.carried}
        parts = ["(n ?i_n)", f"(pn ?i_pn_{alias})", f"(pts ?i_ob_{alias})"]
        parts += self.slots(ctx, dynamic, self.episode_types, alias)
        out = [f"({rel.template} " + " ".join(parts) + ")"]
        if alias in self.would_be_aliases(ctx.info):
            out.append(f"?i_wb_{alias} <- (sm-fact (anchor ?i_pn_{alias}) (f_id ?i_wbid_{alias}))")
        return out

    @staticmethod
    def count_slot(pattern: CountPattern, alias: str) -> str:
        """The ``count`` slot of a count pattern: its variable and bounds."""
        var = count_var(alias)
        tests = []
        if pattern.at_least is not None:
            tests.append(f":(>= {var} {pattern.at_least})")
        if pattern.at_most is not None:
            tests.append(f":(<= {var} {pattern.at_most})")
        return "(count " + "&".join([var, *tests]) + ")"

    def history_count(self, pattern: CountPattern, alias: str, rel: HistoryRelation) -> str:
        parts = ["(n ?i_n)", self.count_slot(pattern, alias), f"(newest ?i_ob_{alias})"]
        if pattern.grows:
            parts.append("(grew TRUE)")
        return f"({rel.template} " + " ".join(parts) + ")"

    def count_pattern(self, ctx: _Ctx, pattern: CountPattern, alias: str) -> str:
        rel = self.relation_for("count", pattern)
        parts = [f"(k{i} {self.key_var(ctx.info, k)})" for i, k in enumerate(rel.keys)]
        parts.append("(last ?i_n)")
        parts.append(self.count_slot(pattern, alias))
        if pattern.grows:
            parts.append("(grew TRUE)")
        parts.append(f"(eps $?i_eps_{alias})")
        return f"({rel.template} " + " ".join(parts) + ")"

    def would_be_aliases(self, info: RuleInfo) -> set[str]:
        return {
            r
            for r in info.rule.emit.replaces
            if isinstance(r, str) and info.aliases.get(r) == "earlier"
        }

    # --- rules ---------------------------------------------------------------------------

    def lhs(self, ctx: _Ctx) -> list[str]:
        info = ctx.info
        out = ["(sm-pass (now ?i_now))"]
        if info.fact_only:
            out.append("(sm-end)")
        else:
            out.append("(sm-cursor (n ?i_n))")
            if info.rule.claim:
                out.append("(not (sm-claim))")
            else:
                out.append(f"(not (sm-fired (r {ctx.program.symbol})))")
        for j, item in enumerate(info.rule.when):
            kind, pattern = pattern_of(item)
            alias = item_alias(kind, pattern, j)
            if kind == "episode":
                out.append(self.episode_pattern(ctx, pattern.where))
            elif kind == "fact":
                out.append(self.fact_pattern(ctx, pattern, alias))
            elif (info.index, j) in self.episode_near_at:
                out.append(self.episode_near_pattern(ctx, j, pattern, alias))
            elif kind == "surprise":
                out.append(self.surprise_pattern(ctx, j, pattern))
            elif (info.index, j) in self.history_at:
                hist = self.history_at[(info.index, j)]
                if kind == "earlier":
                    out.extend(self.history_earlier(ctx, pattern, alias, hist))
                else:
                    out.append(self.history_count(pattern, alias, hist))
            elif kind == "earlier":
                out.extend(self.earlier_pattern(ctx, pattern, alias))
            elif kind == "count":
                out.append(self.count_pattern(ctx, pattern, alias))
            else:
                inner = self.plain_fact(ctx, pattern, kind, f"X{j}")
                if pattern.near is not None:
                    fid = f"?i_X{j}-nid"
                    near = self.near_pattern(ctx, j, fid, f"?i_X{j}-cos")
                    rest = inner.removeprefix("(sm-fact").removesuffix(")").strip()
                    inner = f"(and {near} (sm-fact (f_id {fid}){' ' if rest else ''}{rest}))"
                out.append(f"({'not' if kind == 'not' else 'exists'} {inner})")
        return out

    def template_expr(self, ctx: _Ctx, text: str) -> str:
        """A template as a CLIPS ``str-cat`` expression (used for working-memory facts).

        With more than :data:`TEMPLATE_REFS_UNCHECKED` variable references, the text is
        built only when its length stays within :data:`TEMPLATE_CHARS_MAX` characters
        (else it is empty: the runtime rejects such a delta), so that no template makes
        CLIPS build a string of repeated episode text it has no memory for."""
        parts = []
        refs: Counter[str] = Counter()
        constant = 0
        for kind, value in parse_template(text):
            if kind == "text":
                parts.append(clips_string(value))
                constant += len(value)
            else:
                var = ctx.info.variables[value]
                parts.append(self.var_expr(ctx, var))
                refs[parts[-1]] += 1
        if not parts:
            return '""'
        built = "(str-cat " + " ".join(parts) + ")"
        if refs.total() <= TEMPLATE_REFS_UNCHECKED:
            return built
        length = " ".join(f"(* {n} (str-length (str-cat {expr})))" for expr, n in refs.items())
        return f'(if (> (+ {constant} {length}) {TEMPLATE_CHARS_MAX}) then "" else {built})'

    def var_expr(self, ctx: _Ctx, var: VarInfo) -> str:
        if var.type == "boolean":
            return f'(if (eq {ctx.var(var.name)} TRUE) then "true" else "false")'
        return ctx.var(var.name)

    def confidence_expr(self, ctx: _Ctx) -> str:
        conf = ctx.info.rule.emit.confidence
        if conf is None:
            return clips_float(self.pack.defaults.confidence)
        if isinstance(conf, float | int):
            return clips_float(float(conf))
        if isinstance(conf, LinearConfidence):
            raw = f"(+ {clips_float(conf.base)} (* {clips_float(conf.per)} {ctx.var(conf.var)}))"
            clamped = f"(max 0.0 (min {clips_float(conf.max)} {raw}))"
            return f"(/ (round (* {clamped} 1000000.0)) 1000000.0)"
        if isinstance(conf, VarConfidence):
            return f"(max 0.0 (min 1.0 (float {ctx.var(conf.from_)})))"
        return f"(max 0.0 (min 1.0 {self.arithmetic_expr(ctx, conf)}))"

    def arithmetic_expr(self, ctx: _Ctx, op: Any) -> str:
        """A confidence operation as CLIPS arithmetic: the value a fact made in the pass
        carries in working memory (the delta's value is computed by the runtime)."""
        if isinstance(op, bool):
            raise CompileError(f"not a confidence operand: {op!r}")
        if isinstance(op, int | float):
            return clips_float(float(op))
        if isinstance(op, VarRef):
            return f"(float {ctx.var(op.var)})"
        if isinstance(op, ReinforceOp):
            r = op.reinforce
            value = self.arithmetic_expr(ctx, r.value)
            return f"(min {clips_float(r.cap)} (+ {value} {clips_float(r.by)}))"
        if isinstance(op, MultiplyOp | MinOp | MaxOp | AddOp):
            name = {"multiply": "*", "min": "min", "max": "max", "add": "+"}[arithmetic_name(op)]
            items = arithmetic_operands(op)
            return f"({name} " + " ".join(self.arithmetic_expr(ctx, x) for x in items) + ")"
        if isinstance(op, ClampOp):
            c = op.clamp
            value = self.arithmetic_expr(ctx, c.value)
            return f"(max {clips_float(c.lo)} (min {clips_float(c.hi)} {value}))"
        if isinstance(op, EbbinghausOp):
            e, v = op.ebbinghaus, ctx.decay[op.ebbinghaus.fact]
            k, rf = clips_float(e.k), decay_anchor(v, e.since)
            days = [
                f"(** (/ (max 0 (- {t} {rf})) {clips_float(DAY_US)}) {k})"
                for t in ("?i_now", f"(min {v['valid_from']} ?i_now)")
            ]
            power = f"(- {days[0]} {days[1]})"
            rate = clips_float(e.lambda_)
            if e.untrusted_speed != 1.0:
                rate = f"(* {rate} {speed_expr(v, e.untrusted_speed)})"
            start = v["confidence"]
            if e.boost:
                boosted = f"(min 1.0 (+ {start} {read_boost_expr(v['access_count'])}))"
                start = f"(if (> {v['read_at']} {v['valid_from']}) then {boosted} else {start})"
            return f"(* {start} (exp (- 0.0 (* {rate} {power}))))"
        if isinstance(op, RetentionOp):
            return self.retention_expr(op, ctx.decay[op.retention.fact])
        if isinstance(op, LinearDecayOp):
            d, v = op.linear_decay, ctx.decay[op.linear_decay.fact]
            every, rf = d.every.total_microseconds(), v["reinforced_at"]
            windows = [
                f"(div (max 0 (- {t} {rf})) {every})"
                for t in ("?i_now", f"(min {v['valid_from']} ?i_now)")
            ]
            drop = f"(* {clips_float(d.per)} (- {windows[0]} {windows[1]}))"
            return f"(- {v['confidence']} {drop})"
        raise CompileError(f"unknown confidence operation: {type(op).__name__}")

    def retention_expr(self, op: RetentionOp, v: Mapping[str, str]) -> str:
        """``c·Rt(x_now)/Rt(x_then)`` in CLIPS (see :class:`~stargraph_mem.ir.models.Retention`)."""
        r = op.retention
        anchor = decay_anchor(v, "last_access")
        if r.half_life is not None:
            half = clips_float(r.half_life.total_seconds() / 86400.0)
        else:
            half = "0.0"  # infinite: no layer of the pack has a half-life
            for layer in reversed(LAYERS):
                life = self.pack.defaults.half_life_days(layer)
                if life is not None:
                    test = f"(eq {v['layer']} {clips_string(layer)})"
                    half = f"(if {test} then {clips_float(life)} else {half})"
        speed = speed_expr(v, r.untrusted_speed)
        curves = []
        for at in ("?i_now", f"(min {v['valid_from']} ?i_now)"):
            days = f"(/ (max 0 (- {at} {anchor})) {clips_float(DAY_US)})"
            x = f"(if (> {half} 0.0) then (/ (* {days} {speed}) {half}) else 0.0)"
            curve = RETENTION_CLIPS[r.mode](x)
            if r.boost:
                curve = f"(min 1.0 (+ {curve} {boost_expr(v['access_count'])}))"
            curves.append(curve)
        now, then = curves
        return f"(if (<= {then} 0.0) then 0.0 else (* {v['confidence']} (/ {now} {then})))"

    def rhs(self, ctx: _Ctx) -> list[str]:
        info, emit, program = ctx.info, ctx.info.rule.emit, ctx.program
        out: list[str] = []
        if not info.fact_only:
            out.append(
                "(assert (sm-claim))"
                if info.rule.claim
                else f"(assert (sm-fired (r {program.symbol})))"
            )
        # a flagging delete (challenged) leaves its facts current: they stay in CLIPS,
        # flagged (a rule matching its own facts' status would match them again)
        flags = emit.status in FLAG_STATUSES
        for ref in emit.replaces if flags else ():
            if not isinstance(ref, ListVar) and info.aliases.get(ref) == "fact":
                out.append(f"(modify ?i_fa_{ref} (f_status {clips_string(str(emit.status))}))")
        for ref in () if flags else emit.replaces:
            if isinstance(ref, ListVar):
                out.append(
                    f"(progn$ (?i_x (explode$ {ctx.var(ref.list)})) "
                    "(assert (sm-drop (id (str-cat ?i_x)))))"
                )
            elif info.aliases.get(ref) == "fact":
                out.append(f"(retract ?i_fa_{ref})")
                if self.similar:
                    out.append(f"(assert (sm-gone (id ?i_fid_{ref})))")
            else:
                out.append(f"(retract ?i_wb_{ref})")
                if self.similar:
                    out.append(f"(assert (sm-gone (id ?i_wbid_{ref})))")
        for ref in emit.reinforces:
            if self.observes:  # a reinforcing observation is one the fact was seen in
                seen = f"(max {ctx.observed[ref]} {self.observed_expr(ctx)})"
                out.append(f"(modify ?i_fa_{ref} (f_reinforced_at ?i_now) (f_observed_at {seen}))")
            else:
                out.append(f"(modify ?i_fa_{ref} (f_reinforced_at ?i_now))")
        if kind_creates(emit.kind):
            assert (
                emit.subject is not None and emit.predicate is not None and emit.object is not None
            )
            anchor = "0" if info.fact_only else "?i_n"
            out.append('(bind ?i_tid (str-cat "t" (gensym*)))')
            texts = {
                fname: self.template_expr(ctx, text)
                for fname, text in (
                    ("subject", emit.subject),
                    ("predicate", emit.predicate),
                    ("object", emit.object),
                )
            }
            normal = "".join(
                f" ({normal_slot(f)} ({NORMAL_FORM_FUNCTION} {texts[f]}))"
                for f in self.normal_fact_fields
            )
            made = (
                "(assert (sm-fact (f_id ?i_tid)"
                f" (f_subject {texts['subject']})"
                f" (f_predicate {texts['predicate']})"
                f" (f_object {texts['object']}){normal}"
                f" (f_confidence {self.confidence_expr(ctx)})"
                " (f_valid_from ?i_now) (f_reinforced_at ?i_now)"
                f" (f_observed_at {self.observed_expr(ctx)})"
                f" (f_rule_id {clips_string(info.rule.id)}) (anchor {anchor})"
                + "".join(f" {x}" for x in self.new_fact_extras(ctx))
                + "))"
            )
            if self.similar:  # logged for the runtime, which ranks it for later episodes
                made = f"(assert (sm-made (f {made})))"
            out.append(made)
        printed = [str(info.index), "0" if info.fact_only else "?i_n"]
        for tok in program.tokens:
            printed.append(self.token_expr(tok))
        line = ' " " '.join(printed)
        for alias in program.count_aliases:
            line += f' " | " (implode$ ?i_eps_{alias})'
        # one write per delta: every write queries the routers, and clipspy's are Python
        out.append(f"(printout {OUT} (str-cat {line}) crlf)")
        return out

    def new_fact_extras(self, ctx: _Ctx) -> list[str]:
        """Lifecycle and payload slots of a fact made in the pass: never read (last access
        is its valid_from), and the declared payload keys rules test."""
        out = ["(f_last_access ?i_now)"] if "last_access" in self.lifecycle else []
        emit = ctx.info.rule.emit
        for fname, given, default in (
            ("layer", emit.layer, self.pack.defaults.layer or DEFAULT_LAYER),
            (
                "memory_type",
                emit.memory_type,
                self.pack.defaults.memory_type or DEFAULT_MEMORY_TYPE,
            ),
        ):
            if fname in self.lifecycle:
                expr = clips_string(default) if given is None else self.template_expr(ctx, given)
                out.append(f"({slot_name(fname)} {expr})")
        for key, value in ctx.info.rule.emit.payload.items():
            ftype = self.payload_types.get(key)
            if ftype is None:
                continue
            parts = parse_template(value) if isinstance(value, str) else []
            if is_arithmetic(value):  # computed again by the runtime, for the delta
                expr = self.arithmetic_expr(ctx, value)
            elif len(parts) == 1 and parts[0][0] == "var":
                var = ctx.info.variables[parts[0][1]]
                expr = f"(float {ctx.var(var.name)})" if ftype == "number" else ctx.var(var.name)
                if ftype == "string" and var.type != "string" and isinstance(value, str):
                    expr = self.template_expr(ctx, value)
            elif isinstance(value, str) and ftype == "string":
                expr = self.template_expr(ctx, value)
            else:
                expr = clips_literal(literal_value(ftype, value), ftype)
            out.append(f"({payload_slot(key)} {expr})")
        return out

    def observed_expr(self, ctx: _Ctx) -> str:
        """The time of the newest episode a new fact comes from: the episode's own, or a
        newer one among its sources (a fact's, or one from an earlier pass)."""
        info = ctx.info
        if not self.observes:
            return "?i_now"
        terms = [] if info.fact_only else [ctx.observed[""]]
        history = {
            item_alias(*pattern_of(item), j)
            for j, item in enumerate(info.rule.when)
            if (info.index, j) in self.history_at
        }
        for alias in info.rule.emit.sources:
            if info.aliases.get(alias) == "fact":
                terms.append(ctx.observed[alias])
            elif alias in history:
                terms.append(f"?i_ob_{alias}")
        if not terms:
            return "?i_now"
        return terms[0] if len(terms) == 1 else f"(max {' '.join(terms)})"

    def token_expr(self, tok: EmitToken) -> str:
        return {
            "fact_id": f"?i_fid_{tok.alias}",
            "episode_n": f"?i_pn_{tok.alias}",
            "would_be": f"?i_wbid_{tok.alias}",
            "temp_id": "?i_tid",
            "near_episode": f"?i_eid_{tok.alias}",
        }.get(tok.what, count_var(tok.alias))

    def plan_tokens(self, program: RuleProgram) -> None:
        info = program.info
        for j, item in enumerate(info.rule.when):
            kind, pattern = pattern_of(item)
            alias = item_alias(kind, pattern, j)
            if kind == "fact":
                program.tokens.append(EmitToken(alias, "fact_id"))
            elif kind == "earlier" and pattern.near is not None:
                program.tokens.append(EmitToken(alias, "near_episode"))
            elif kind == "earlier":
                program.tokens.append(EmitToken(alias, "episode_n"))
                if alias in self.would_be_aliases(info):
                    program.tokens.append(EmitToken(alias, "would_be"))
            elif kind == "count" and pattern.over == "history":
                rel = self.history_at[(info.index, j)].index
                program.tokens.append(EmitToken(alias, "hcount", rel))
            elif kind == "count":
                program.tokens.append(EmitToken(alias, "count"))
                program.count_aliases.append(alias)
        if kind_creates(info.rule.emit.kind):
            program.tokens.append(EmitToken("", "temp_id"))

    def rule(self, info: RuleInfo, rank: int) -> RuleProgram:
        program = RuleProgram(info=info, symbol=f"r{info.index}", salience=SAL_RULE_TOP - rank)
        self.plan_tokens(program)
        ctx = _Ctx(info, program)
        lhs = self.lhs(ctx)
        rhs = self.rhs(ctx)
        header = f"(defrule sm-rule-{info.rule.id} (declare (salience {program.salience}))"
        body = (
            "\n".join("  " + line for line in lhs) + "\n  =>\n" + "\n".join("  " + r for r in rhs)
        )
        program.clips = f";; rules[{info.index}] {info.rule.id}\n{header}\n{body})\n"
        return program

    # --- relation maintenance -----------------------------------------------------------

    def relation_rules(self, rel: Relation) -> str:
        keys = {k: f"?i_k{i}" for i, k in enumerate(rel.keys)}
        literal = {name: Condition.model_validate_json(text) for name, text in rel.filter}
        carried = self.latest_fields.get(rel.index, {}) if rel.kind == "earlier" else {}
        forced = dict(keys)
        for fname in carried:
            forced.setdefault(fname, f"?i_c_{fname}")
        if rel.distinct:
            forced.setdefault(rel.distinct, "?i_d")
        ep_slots = self.slots(None, literal, self.episode_types, "r", forced=forced)
        # a carried/distinct field may be missing: relax the forced ~nil for those
        ep = "(sm-episode (n ?n) " + " ".join(ep_slots) + ")"
        for fname in carried:
            if fname not in rel.keys and fname not in literal:
                ep = ep.replace(
                    f"({slot_name(fname)} {forced[fname]}&~nil)",
                    f"({slot_name(fname)} {forced[fname]})",
                )
        if "?i_now" in ep:  # a time test (newer_than, older_than) reads the pass time
            ep = "(sm-pass (now ?i_now))\n  " + ep
        key_match = " ".join(f"(k{i} {keys[k]})" for i, k in enumerate(rel.keys))
        if rel.kind == "earlier":
            copy = " ".join(f"({slot_name(f)} {forced[f]})" for f in sorted(carried))
            return (
                f"(defrule {rel.template}-move (declare (salience {SAL_LATEST}))\n"
                f"  (sm-cursor (n ?n))\n  {ep}\n"
                f"  ?l <- ({rel.template} {key_match} (n ?m&:(< ?m ?n)))\n"
                f"  =>\n  (modify ?l (n ?n) {copy}))\n"
                f"(defrule {rel.template}-new (declare (salience {SAL_LATEST}))\n"
                f"  (sm-cursor (n ?n))\n  {ep}\n"
                f"  (not ({rel.template} {key_match}))\n"
                f"  =>\n  (assert ({rel.template} {key_match} (n ?n) {copy})))\n"
            )
        d = forced[rel.distinct] if rel.distinct else "?n"  # a key holds its own variable
        return (
            f"(defrule {rel.template}-step (declare (salience {SAL_COUNT}))\n"
            f"  (sm-cursor (n ?n))\n  {ep}\n"
            f"  ?t <- ({rel.template} {key_match} (last ?l&:(< ?l ?n))"
            " (count ?c) (seen $?s) (eps $?e))\n"
            f"  =>\n"
            f"  (if (member$ {d} ?s)\n"
            f"   then (modify ?t (last ?n) (grew FALSE) (eps ?e ?n))\n"
            "   else (modify ?t (last ?n) (grew TRUE) (count (+ ?c 1))"
            f" (seen ?s {d}) (eps ?e ?n))))\n"
            f"(defrule {rel.template}-first (declare (salience {SAL_COUNT}))\n"
            f"  (sm-cursor (n ?n))\n  {ep}\n"
            f"  (not ({rel.template} {key_match}))\n"
            f"  =>\n"
            f"  (assert ({rel.template} {key_match} (last ?n) (grew TRUE) (count 1)"
            f" (seen {d}) (eps ?n))))\n"
        )

    def matches_facts(self) -> bool:
        """Whether any enabled rule matches stored facts (or replaces the fact made from
        an episode an earlier pass consumed)."""
        return any(
            pattern_of(item)[0] in ("fact", "not", "exists")
            for info in self.analysis.rules
            if info.rule.enabled
            for item in info.rule.when
        ) or any(self.replaces_history(info) for info in self.analysis.rules)

    def fact_keys(self) -> tuple[tuple[tuple[str, str], ...], ...] | None:
        """What ties each fact pattern of the episode rules to the episode: per pattern,
        the (fact field, episode field) pairs it equates (``subject: {var: s}`` with ``s``
        bound to a string field of the episode; ``object: {normal_eq: {var: s}}`` gives
        ``("normal:object", field)``, equal in content normal form), only the smallest
        sets kept.

        A stored fact whose fields match none of them for any episode of a pass can match
        no pattern in that pass, so it need not enter CLIPS. ``None`` when some pattern is
        not tied that way, or facts are matched otherwise (``over: history`` relations);
        sweep rules (no episode pattern) run only in passes that assert every fact.
        """
        if (
            self.history
            or self.near
            or any(self.replaces_history(info) for info in self.analysis.rules)
        ):
            return None
        found: set[tuple[tuple[str, str], ...]] = set()
        for info in self.analysis.rules:
            if not info.rule.enabled or info.fact_only:
                continue
            for item in info.rule.when:
                kind, pattern = pattern_of(item)
                if kind not in ("fact", "not", "exists"):
                    continue
                pairs: set[tuple[str, str]] = set()
                for fname, cond in pattern.where.items():
                    if fname not in STATEMENT_FIELDS:
                        continue
                    for op, key in (("eq", fname), ("normal_eq", NORMAL_KEY + fname)):
                        ref = cond.get(op)
                        bound = info.variables.get(ref.var) if isinstance(ref, VarRef) else None
                        if bound is not None and bound.kind == "episode" and bound.type == "string":
                            pairs.add((key, bound.field))
                if not pairs:
                    return None
                found.add(tuple(sorted(pairs)))
        smallest = [k for k in found if not any(set(o) < set(k) for o in found)]
        return tuple(sorted(smallest))

    def near_only(self) -> bool:
        """Whether a stored fact can matter to a pass only as some episode's neighbour:
        every fact pattern of the enabled rules tests ``near`` of the episode, no rule is a
        sweep, replaces facts by a list or the fact of an earlier pass's episode. A pass
        then asserts a stored fact into CLIPS when it first ranks among the neighbours."""
        if not self.near:
            return False
        for info in self.analysis.rules:
            if not info.rule.enabled:
                continue
            if info.sweep or self.replaces_history(info):
                return False
            if any(isinstance(ref, ListVar) for ref in info.rule.emit.replaces):
                return False
            for item in info.rule.when:
                kind, pattern = pattern_of(item)
                if kind in ("fact", "not", "exists") and pattern.near is None:
                    return False
        return True

    def replaces_history(self, info: RuleInfo) -> bool:
        """Whether ``info`` replaces the fact made from an ``over: history`` earlier episode."""
        wanted = self.would_be_aliases(info)
        return any(
            (info.index, j) in self.history_at and item_alias(*pattern_of(item), j) in wanted
            for j, item in enumerate(info.rule.when)
        )

    # --- program ------------------------------------------------------------------------

    def program(self) -> str:
        self.collect()
        enabled = [i for i in self.analysis.rules if i.rule.enabled]
        ranked = sorted(enabled, key=lambda i: (-i.rule.priority, i.index))
        rank = {id(info): r for r, info in enumerate(ranked)}
        self.programs = [self.rule(info, rank[id(info)]) for info in enabled]
        parts = [
            # only identifier-pattern text in comments: no author text reaches CLIPS raw
            f";; stargraph_mem pack {self.pack.pack} (ir_version {self.pack.ir_version})\n",
            FIXED_TEMPLATES,
            self.fact_template(),
            self.episode_template(),
        ]
        parts += [self.relation_template(rel) for rel in self.relations]
        parts += [self.history_template(rel) for rel in self.history]
        if self.similar:
            parts.append(NEAR_TEMPLATE)
        if self.episode_near:
            parts.append(EPISODE_NEAR_TEMPLATE)
        if self.surprise:
            parts.append(SURPRISE_TEMPLATE)
        parts.append(CONTROL_RULES)
        parts += [self.relation_rules(rel) for rel in self.relations]
        parts += [p.clips for p in self.programs]
        return "".join(parts)
