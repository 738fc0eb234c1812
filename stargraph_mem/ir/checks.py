"""Semantic checks run before emission; they also produce the analysis the compiler uses.

``analyze`` collects every issue (unknown fields with spelling hints, type mismatches,
unbound or unused variables, duplicate ids, bad references in ``emit``, unreachable
rules) instead of stopping at the first one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from stargraph_mem.errors import IRError, IRIssue
from stargraph_mem.ir.issues import model_keys, unknown_field_message
from stargraph_mem.ir.models import (
    ARITHMETIC,
    EPISODE_ACCESS_FIELDS,
    EPISODE_BUILTINS,
    FACT_FIELDS,
    MATCHED_STATUSES,
    PAYLOAD_OPERATIONS,
    WHEN_KINDS,
    AddOp,
    ArithOp,
    ClampOp,
    Condition,
    CountItem,
    CountPattern,
    EarlierItem,
    EarlierPattern,
    EbbinghausOp,
    Emit,
    EpisodeItem,
    ExistsItem,
    FactItem,
    FactPattern,
    FieldType,
    LinearConfidence,
    LinearDecayOp,
    ListVar,
    MaxOp,
    MinOp,
    MultiplyOp,
    Near,
    NotItem,
    ReinforceOp,
    RetentionOp,
    Rule,
    RulePack,
    SurpriseItem,
    SurprisePattern,
    VarConfidence,
    VarRef,
    WhenItem,
    arithmetic_name,
)
from stargraph_mem.ir.operators import FLAGS, OPERATORS, Operator, describe_types
from stargraph_mem.ir.reference import evaluate, list_item_ok
from stargraph_mem.ir.source_map import PathKey, SourceMap
from stargraph_mem.model.deltas import CLOSE_STATUSES, DELTA_KINDS, kind_creates, kind_takes
from stargraph_mem.model.entities import fold_entity_name
from stargraph_mem.model.layers import LAYERS, MEMORY_TYPES
from stargraph_mem.model.statuses import SUCCEEDED_STATUSES
from stargraph_mem.model.time import iso_us


def _pattern_keys(kind: str) -> list[str]:
    """Keys a pattern takes besides field names (``as``, ``keys``, ``at_least``, ...)."""
    item = WHEN_KINDS.get(kind)
    if item is None:
        return []
    (info,) = item.model_fields.values()
    return [k for k in model_keys(info.annotation) if k != "where"]


PAYLOAD_PREFIX = "payload."
"""``VarInfo.field`` of a variable bound on a payload key: ``payload.<key>``."""
NUMERIC = ("integer", "number")
TEMPLATE_PART = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
ORDER_OPS = ("lt", "le", "gt", "ge")
parse_timestamp_literal = iso_us
"""An ISO-8601 literal with offset → UTC microseconds (:func:`stargraph_mem.model.time.iso_us`)."""


@dataclass(frozen=True)
class VarInfo:
    """Where a variable is bound: pattern alias/kind, field, and the field's type."""

    name: str
    alias: str
    kind: str
    field: str
    type: FieldType


@dataclass
class RuleInfo:
    """The checked shape of one rule, as the compiler needs it."""

    rule: Rule
    index: int
    path: PathKey
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> pattern kind
    variables: dict[str, VarInfo] = field(default_factory=dict)
    episode_alias: str | None = None
    used_vars: set[str] = field(default_factory=set)

    @property
    def fact_only(self) -> bool:
        return self.episode_alias is None

    @property
    def sweep(self) -> bool:
        """A rule whose ``when`` has no episode pattern: it runs over facts alone."""
        return self.episode_alias is None

    def tests_field(self, fname: str) -> bool:
        """Whether one of the rule's fact patterns (``not``/``exists`` included) tests
        fact field ``fname``."""
        return any(
            fname in pattern.where
            for item in self.rule.when
            for kind, pattern in [pattern_of(item)]
            if kind in ("fact", "not", "exists")
        )


@dataclass
class Analysis:
    pack: RulePack
    rules: list[RuleInfo]
    issues: list[IRIssue]


def parse_template(text: str) -> list[tuple[str, str]]:
    """Split a template into ``("text", s)`` / ``("var", name)`` parts; ``{{``/``}}`` escape."""
    parts: list[tuple[str, str]] = []
    pos = 0
    for m in TEMPLATE_PART.finditer(text):
        if m.start() > pos:
            parts.append(("text", text[pos : m.start()]))
        token = m.group(0)
        if token in ("{{", "}}"):
            parts.append(("text", token[0]))
        elif token in ("{", "}"):
            raise ValueError(
                "unbalanced brace in template (write '{{' or '}}' for a literal brace)"
            )
        else:
            parts.append(("var", m.group(1).strip()))
        pos = m.end()
    if pos < len(text):
        parts.append(("text", text[pos:]))
    merged: list[tuple[str, str]] = []
    for kind, value in parts:
        if merged and kind == "text" and merged[-1][0] == "text":
            merged[-1] = ("text", merged[-1][1] + value)
        else:
            merged.append((kind, value))
    return merged


def unnamed_alias(index: int) -> str:
    """The name of the unnamed pattern ``when[index]``: the compiler and the runtime use it
    too. The leading ``_`` keeps it apart from every name an author can write."""
    return f"_p{index}"


def _wrong_field_type(op: Operator, ftype: FieldType, fname: str) -> str:
    """``'prefix' needs a string field, not integer 'n'`` (types from the operator table)."""
    if ftype == "list":
        usable = [name for name, o in OPERATORS.items() if "list" in o.field_types]
        return f"list field '{fname}' supports only {', '.join(usable)} and bind, not '{op.name}'"
    return f"'{op.name}' needs a {describe_types(op.field_types)} field, not {ftype} '{fname}'"


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else type(value).__name__


def literal_fits(ftype: FieldType, value: Any) -> bool:
    """Whether a literal can be compared with a field of ``ftype``."""
    if ftype in ("string", "list"):
        return isinstance(value, str)
    if ftype == "boolean":
        return isinstance(value, bool)
    if ftype == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if ftype == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if ftype == "timestamp":
        try:
            parse_timestamp_literal(value)
        except ValueError:
            return False
        return True
    return False


class _Checker:
    def __init__(self, pack: RulePack, source: SourceMap) -> None:
        self.pack = pack
        self.source = source
        self.issues: list[IRIssue] = []
        self.episode_fields: dict[str, FieldType] = {**EPISODE_BUILTINS, **pack.fields}

    def err(self, path: PathKey, message: str) -> None:
        self.issues.append(self.source.issue(path, message))

    # --- pack level ---------------------------------------------------------------

    def run(self) -> Analysis:
        for name in self.pack.fields:
            if name in EPISODE_BUILTINS:
                self.err(
                    ("fields", name), f"'{name}' is a built-in episode field; pick another name"
                )
        seen: dict[str, int] = {}
        infos: list[RuleInfo] = []
        for i, rule in enumerate(self.pack.rules):
            path: PathKey = ("rules", i)
            if rule.id in seen:
                first = seen[rule.id]
                line, _ = self.source.locate(("rules", first, "id"))
                where = f"rules[{first}]" if line is None else f"rules[{first}], line {line}"
                self.err((*path, "id"), f"duplicate rule id '{rule.id}' (first at {where})")
            seen.setdefault(rule.id, i)
            infos.append(self.check_rule(rule, i, path))
        self.check_reachability(infos)
        self.check_entities()
        return Analysis(self.pack, infos, self.issues)

    def check_entities(self) -> None:
        """Each name of the declared entities (folded) names one entity."""
        owner: dict[str, int] = {}
        for i, entity in enumerate(self.pack.entities):
            names: list[tuple[PathKey, str]] = [
                (("entities", i, "name"), entity.name),
                *((("entities", i, "aliases", k), a) for k, a in enumerate(entity.aliases)),
            ]
            for path, name in names:
                first = owner.setdefault(fold_entity_name(name), i)
                if first != i:
                    other = self.pack.entities[first].name
                    self.err(
                        path,
                        f"'{name}' already names the entity '{other}' (entities[{first}]): "
                        "a name or alias names one entity",
                    )

    # --- rules ---------------------------------------------------------------------

    def check_rule(self, rule: Rule, index: int, path: PathKey) -> RuleInfo:
        info = RuleInfo(rule=rule, index=index, path=path)
        episodes = [i for i, w in enumerate(rule.when) if isinstance(w, EpisodeItem)]
        if len(episodes) > 1:
            self.err((*path, "when", episodes[1]), "a rule has at most one 'episode' pattern")
        if not any(isinstance(w, EpisodeItem | FactItem) for w in rule.when):
            self.err((*path, "when"), "a rule needs an 'episode' or a 'fact' pattern")
        for j, item in enumerate(rule.when):
            self.check_item(info, item, (*path, "when", j), j)
        if rule.select is not None:
            self.check_select(rule, (*path, "select"))
        trigger = rule.cadence and (rule.cadence.idle or rule.cadence.or_after)
        if trigger and not episodes:
            which = "idle" if rule.cadence and rule.cadence.idle else "or_after"
            self.err(
                (*path, "cadence", which),
                f"'{which}' watches a partition's episodes: a rule without an 'episode' "
                "pattern (a sweep) runs on 'cron' (or 'every')",
            )
        if rule.salience is not None and info.episode_alias is None and episodes == []:
            self.err((*path, "salience"), "a salience gate needs an 'episode' pattern")
        if rule.salience is not None and rule.salience.importance_key is not None:
            self.check_importance_key(rule.salience.importance_key, (*path, "salience"))
        self.check_emit(info, (*path, "emit"))
        for name, var in info.variables.items():
            if name not in info.used_vars:
                self.err(self._bind_path(info, var), _unused_message(var))
        return info

    def check_importance_key(self, key: str, path: PathKey) -> None:
        """An importance is read from a declared ``number`` field: a typo cannot read as 0."""
        kpath = (*path, "importance_key")
        if key not in self.pack.fields:
            self.err(kpath, unknown_field_message(key, self.pack.fields))
        elif self.pack.fields[key] != "number":
            self.err(
                kpath,
                f"importance_key '{key}' is a {self.pack.fields[key]} field; "
                "an importance is a number in [0, 1]: declare it 'number'",
            )

    def _bind_path(self, info: RuleInfo, var: VarInfo) -> PathKey:
        if var.kind == "near":
            for j, item in enumerate(info.rule.when):
                kind, pattern = pattern_of(item)
                if kind in ("fact", "earlier") and getattr(pattern.near, "cosine", None) == (
                    var.name
                ):
                    return (*info.path, "when", j, kind, "near", "cosine")
        if var.kind in ("count", "surprise"):
            for j, item in enumerate(info.rule.when):
                kind, pattern = pattern_of(item)
                if kind == var.kind and getattr(pattern, "alias", None) == var.name:
                    return (*info.path, "when", j, kind, "as")
        for j, item in enumerate(info.rule.when):
            kind, pattern = pattern_of(item)
            mine = (getattr(pattern, "alias", None) or unnamed_alias(j)) == var.alias
            if mine and var.field in pattern.where:
                return (*info.path, "when", j, kind, var.field, "bind")
            key = var.field.removeprefix(PAYLOAD_PREFIX)
            if mine and var.field.startswith(PAYLOAD_PREFIX) and key in pattern.payload:
                return (*info.path, "when", j, kind, "payload", key, "bind")
        return (*info.path, "when")

    def new_alias(
        self, info: RuleInfo, alias: str | None, kind: str, path: PathKey, index: int
    ) -> str:
        if alias is None:
            return unnamed_alias(index)
        if alias in info.aliases or alias in info.variables:
            self.err((*path, "as"), f"name '{alias}' is already used in this rule")
        info.aliases[alias] = kind
        return alias

    def check_item(self, info: RuleInfo, item: WhenItem, path: PathKey, index: int) -> None:
        kind, pattern = pattern_of(item)
        ppath = (*path, kind)
        if isinstance(item, NotItem | ExistsItem):
            if pattern.alias is not None:
                self.err((*ppath, "as"), f"a '{kind}' pattern cannot be named")
            self.check_conditions(
                info, pattern.where, FACT_FIELDS, ppath, "-", kind, allow_bind=False
            )
            self.check_fact_extras(info, pattern, ppath, "-", kind)
            self.check_near(info, pattern, ppath, None)
            return
        if isinstance(item, EarlierItem | CountItem) and info.episode_alias is None:
            self.err(path, f"an '{kind}' pattern must follow the rule's 'episode' pattern")
        if isinstance(item, SurpriseItem):
            alias = self.surprise_alias(info, item.surprise, ppath, index)
        else:
            alias = self.new_alias(info, pattern.alias, kind, ppath, index)
        if isinstance(item, EpisodeItem):
            info.episode_alias = alias
            self.check_conditions(info, pattern.where, self.episode_fields, ppath, alias, kind)
        elif isinstance(item, FactItem):
            self.check_near(info, pattern, ppath, alias)
            self.check_conditions(info, pattern.where, FACT_FIELDS, ppath, alias, kind)
            self.check_fact_extras(info, pattern, ppath, alias, kind)
        elif isinstance(item, EarlierItem) and item.earlier.near is not None:
            self.check_episode_near(info, item.earlier, ppath, alias)
        elif isinstance(item, EarlierItem):
            self.check_keys(item.earlier.keys, (*ppath, "keys"))
            self.check_conditions(info, pattern.where, self.episode_fields, ppath, alias, kind)
            self.check_history_access(item.earlier, ppath)
        elif isinstance(item, CountItem):
            self.check_count(info, item.count, ppath, alias)
            self.check_history_access(item.count, ppath)
        elif isinstance(item, SurpriseItem):
            self.check_surprise(info, item.surprise, ppath, alias)

    def check_near(
        self, info: RuleInfo, pattern: FactPattern, path: PathKey, alias: str | None
    ) -> None:
        """``near``: neighbours of the rule's episode (an episode rule) or of an earlier
        named fact pattern (a sweep); ``cosine`` binds a number (not inside not/exists)."""
        near = pattern.near
        if near is None:
            return
        npath = (*path, "near")
        episode_rule = any(isinstance(w, EpisodeItem) for w in info.rule.when)
        if near.of == "episode" and info.episode_alias is None:
            self.err(
                (*npath, "of"),
                "near of 'episode' must follow the rule's 'episode' pattern"
                if episode_rule
                else "a sweep has no episode: write 'of: <alias>' naming an earlier 'fact' pattern",
            )
        elif near.of != "episode" and episode_rule:
            self.err((*npath, "of"), "in a rule with an 'episode' pattern, near is 'of: episode'")
        elif near.of != "episode" and info.aliases.get(near.of) != "fact":
            self.err((*npath, "of"), f"'{near.of}' is not an earlier named 'fact' pattern")
        if near.at_least is not None:
            self.check_cluster(near, npath, episode_rule)
        if near.cosine is None:
            return
        if alias is None:
            self.err(
                (*npath, "cosine"),
                "variables cannot be bound inside 'not' or 'exists' (they would not be visible)",
            )
        elif near.cosine in info.variables or near.cosine in info.aliases:
            self.err((*npath, "cosine"), f"name '{near.cosine}' is already used in this rule")
        else:
            info.variables[near.cosine] = VarInfo(near.cosine, alias, "near", "cosine", "number")

    def check_episode_near(
        self, info: RuleInfo, pattern: EarlierPattern, path: PathKey, alias: str
    ) -> None:
        """``earlier`` with ``near``: neighbours among earlier episodes. It always looks at
        earlier passes too (no ``over``), binds the neighbour as a whole (no field tests:
        the runtime, not CLIPS, chooses it) and its cosine with ``cosine``."""
        near = pattern.near
        assert near is not None
        npath = (*path, "near")
        if "over" in pattern.model_fields_set:
            self.err(
                (*path, "over"),
                "'near' ranks earlier passes' episodes and this pass's alike: drop 'over'",
            )
        for fname in pattern.where:
            self.err(
                (*path, fname),
                f"an 'earlier' pattern with 'near' takes no field tests ('{fname}'): the "
                "neighbours are ranked by content; test them in another pattern or drop it",
            )
        if near.within is not None and near.within.total_microseconds() <= 0:
            self.err((*npath, "within"), "'within' must be a positive duration")
        if near.cosine is None:
            return
        if near.cosine in info.variables or near.cosine in info.aliases:
            self.err((*npath, "cosine"), f"name '{near.cosine}' is already used in this rule")
        else:
            info.variables[near.cosine] = VarInfo(near.cosine, alias, "near", "cosine", "number")

    def check_cluster(self, near: Near, path: PathKey, episode_rule: bool) -> None:
        """``at_least`` (clusters): a sweep's test, with ``min_cosine``, without ``top_k``
        (every other member of the cluster is a neighbour)."""
        if episode_rule:
            self.err(
                (*path, "at_least"),
                "clusters ('at_least') are a sweep's: a rule with an 'episode' pattern "
                "ranks the episode's neighbours (drop 'at_least')",
            )
        if near.min_cosine is None:
            self.err(
                (*path, "at_least"),
                "'at_least' groups facts whose cosine reaches 'min_cosine': write "
                "'min_cosine' too (e.g. min_cosine: 0.8)",
            )
        if "top_k" in near.model_fields_set:
            self.err(
                (*path, "top_k"),
                "with 'at_least' every other member of the cluster is a neighbour: drop 'top_k'",
            )

    def check_fact_extras(
        self, info: RuleInfo, pattern: Any, path: PathKey, alias: str, kind: str
    ) -> None:
        """Payload tests on declared keys, and a ``status`` test that can match."""
        declared: dict[str, FieldType] = dict(self.pack.fact_payload)
        self.check_conditions(
            info,
            pattern.payload,
            declared,
            (*path, "payload"),
            alias,
            kind,
            allow_bind=kind == "fact",
            prefix=PAYLOAD_PREFIX,
            what="payload key",
        )
        status = pattern.where.get("status")
        if (
            status is not None
            and not any(
                evaluate(status, "string", value, variables={}) for value in MATCHED_STATUSES
            )
            and not any(isinstance(v, VarRef) for _, v in status.tests())
        ):
            self.err(
                (*path, "status"),
                "never matches: a fact a rule sees has status "
                + " or ".join(repr(v) for v in MATCHED_STATUSES),
            )

    def surprise_alias(
        self, info: RuleInfo, pattern: SurprisePattern, path: PathKey, index: int
    ) -> str:
        """A ``surprise`` pattern's name: its ``as``, else ``surprise`` (one per rule: its
        score is cited in the bindings under that name)."""
        first = next(
            (j for j, w in enumerate(info.rule.when) if isinstance(w, SurpriseItem)), index
        )
        if first != index:
            self.err(path, "a rule has at most one 'surprise' pattern")
        if pattern.alias is None and ("surprise" in info.aliases or "surprise" in info.variables):
            self.err(path, "name 'surprise' is already used in this rule: name the score ('as: u')")
            return unnamed_alias(index)
        return self.new_alias(info, pattern.alias or "surprise", "surprise", path, index)

    def check_surprise(
        self, info: RuleInfo, pattern: SurprisePattern, path: PathKey, alias: str
    ) -> None:
        """``surprise`` scores the rule's episode: it follows the episode pattern (a sweep
        has no episode); ``as`` binds a number; the bounds can hold together."""
        if info.episode_alias is None:
            self.err(
                path,
                "'surprise' scores the rule's episode against the facts: it must follow the "
                "rule's 'episode' pattern (a sweep has no episode)",
            )
        if (
            pattern.at_least is not None
            and pattern.at_most is not None
            and pattern.at_least > pattern.at_most
        ):
            self.err(
                (*path, "at_most"), "at_most is smaller than at_least: the rule can never fire"
            )
        if pattern.alias is not None:
            info.variables[pattern.alias] = VarInfo(
                pattern.alias, alias, "surprise", "surprise", "number"
            )

    def check_history_access(self, pattern: EarlierPattern | CountPattern, path: PathKey) -> None:
        """An ``over: history`` pattern reads no access statistics: its durable aggregates
        keep what an episode was when consumed, and later reads change them."""
        if pattern.over != "history":
            return
        distinct = getattr(pattern, "distinct", None)
        named: list[tuple[PathKey, str]] = [
            *(((*path, "keys", k), key) for k, key in enumerate(pattern.keys)),
            *(((*path, fname), fname) for fname in pattern.where),
            *([((*path, "distinct"), distinct)] if distinct is not None else []),
        ]
        for at, fname in named:
            if fname in EPISODE_ACCESS_FIELDS:
                self.err(
                    at,
                    f"'{fname}' changes with every read of an episode: an 'over: history' "
                    "pattern cannot use it (test it on the rule's 'episode' pattern, or "
                    "drop 'over: history')",
                )

    def check_keys(self, keys: list[str], path: PathKey) -> None:
        for k, key in enumerate(keys):
            if key not in self.episode_fields:
                self.err((*path, k), unknown_field_message(key, self.episode_fields))
            elif self.episode_fields[key] == "list":
                self.err((*path, k), f"list field '{key}' cannot be a key")
        if len(set(keys)) != len(keys):
            self.err(path, "keys must be distinct")

    def check_count(self, info: RuleInfo, pattern: CountPattern, path: PathKey, alias: str) -> None:
        self.check_keys(pattern.keys, (*path, "keys"))
        if pattern.distinct is not None and pattern.distinct not in self.episode_fields:
            self.err(
                (*path, "distinct"), unknown_field_message(pattern.distinct, self.episode_fields)
            )
        if (
            pattern.at_least is not None
            and pattern.at_most is not None
            and pattern.at_least > pattern.at_most
        ):
            self.err(
                (*path, "at_most"), "at_most is smaller than at_least: the rule can never fire"
            )
        for fname, cond in pattern.where.items():
            if cond.bind is not None or any(isinstance(v, VarRef) for _, v in cond.tests()):
                self.err((*path, fname), "a 'count' filter takes literal tests only")
        self.check_conditions(info, pattern.where, self.episode_fields, path, alias, "count")
        if pattern.alias is not None:
            info.variables[pattern.alias] = VarInfo(
                pattern.alias, alias, "count", "count", "integer"
            )

    def check_conditions(
        self,
        info: RuleInfo,
        where: dict[str, Condition],
        fields: dict[str, FieldType],
        path: PathKey,
        alias: str,
        kind: str,
        *,
        allow_bind: bool = True,
        prefix: str = "",
        what: str = "field",
    ) -> None:
        for fname, cond in where.items():
            cpath = (*path, fname)
            if fname not in fields:
                known = [*fields] if prefix else [*fields, *_pattern_keys(kind)]
                message = unknown_field_message(fname, known, what)
                if prefix and not fields:
                    message += " (declare it in the pack's 'fact_payload')"
                self.err(cpath, message)
                continue
            ftype = fields[fname]
            self.check_condition(info, cond, ftype, fname, cpath, "payload" if prefix else kind)
            if cond.bind is not None:
                if not allow_bind:
                    self.err(
                        (*cpath, "bind"),
                        f"variables cannot be bound inside '{kind}' (they would not be visible)",
                    )
                elif cond.bind in info.variables or cond.bind in info.aliases:
                    self.err((*cpath, "bind"), f"name '{cond.bind}' is already used in this rule")
                else:
                    info.variables[cond.bind] = VarInfo(
                        cond.bind, alias, kind, prefix + fname, ftype
                    )

    def check_condition(
        self,
        info: RuleInfo,
        cond: Condition,
        ftype: FieldType,
        fname: str,
        path: PathKey,
        kind: str,
    ) -> None:
        flags = [op for op in FLAGS if cond.get(op) is not None]
        if any(cond.get(op) is False for op in flags):
            self.err(path, "write 'missing: true' or 'exists: true' (false is not accepted)")
        if cond.get("exists") and cond.get("missing"):
            self.err(path, "'exists' and 'missing' together can never match")
        if cond.get("missing") and len(cond.tests()) > 1:
            self.err(path, "'missing' cannot be combined with other tests on the same field")
        if cond.get("missing") and cond.bind is not None:
            self.err((*path, "bind"), "a missing field cannot be bound")
        for op, value in cond.tests():
            self.check_test(info, OPERATORS[op], value, ftype, fname, (*path, op), kind)

    def check_test(
        self,
        info: RuleInfo,
        op: Operator,
        value: Any,
        ftype: FieldType,
        fname: str,
        path: PathKey,
        kind: str,
    ) -> None:
        """One test against the operator table: field type, operand type, variables."""
        if op.operand == "flag":
            always = kind in ("fact", "not", "exists") or (
                kind != "payload" and fname in EPISODE_BUILTINS and fname != "source_node"
            )
            if always:
                self.err(path, f"field '{fname}' is always present")
            return
        if ftype not in op.field_types:
            self.err(path, _wrong_field_type(op, ftype, fname))
            return
        if op.operand == "duration":
            return
        operand_type: FieldType = "string" if op.string_operand else ftype
        if op.operand == "values":
            for k, item in enumerate(value):
                if not literal_fits(operand_type, item):
                    self.err((*path, k), self._mismatch(ftype, fname, item, op.name))
            return
        if isinstance(value, VarRef):
            self.check_var_use(info, value.var, operand_type, path, op.name)
        elif not literal_fits(operand_type, value):
            self.err(path, self._mismatch(operand_type, fname, value, op.name))
        elif op.name == "contains" and ftype == "list" and not list_item_ok(value):
            self.err(
                path,
                f"list field '{fname}' never has the item {value!r}: items are non-empty "
                "strings without spaces or NUL characters",
            )

    def _mismatch(self, ftype: FieldType, fname: str, value: Any, op: str) -> str:
        if ftype == "timestamp":
            return f"expected an ISO-8601 timestamp with offset for '{fname}', got {value!r}"
        return f"type mismatch: '{fname}' is {ftype}, got {_type_name(value)} {value!r}"

    def check_var_use(
        self, info: RuleInfo, name: str, ftype: FieldType, path: PathKey, op: str
    ) -> None:
        var = info.variables.get(name)
        if var is None:
            self.err(path, f"unbound variable '{name}' (bind it in an earlier pattern)")
            return
        info.used_vars.add(name)
        numeric = ("integer", "number", "timestamp")
        compatible = var.type == ftype or (var.type in numeric and ftype in numeric)
        if not compatible or (op in ORDER_OPS and ftype not in numeric):
            self.err(path, f"type mismatch: variable '{name}' is {var.type}, field is {ftype}")

    # --- select / emit -------------------------------------------------------------------

    def check_select(self, rule: Rule, path: PathKey) -> None:
        assert rule.select is not None
        for fname, cond in rule.select.where.items():
            cpath = (*path, fname)
            if fname not in self.episode_fields:
                self.err(cpath, unknown_field_message(fname, self.episode_fields))
                continue
            if cond.bind is not None or any(isinstance(v, VarRef) for _, v in cond.tests()):
                self.err(cpath, "'select' takes literal tests only (no bind, no var)")
                continue
            dummy = RuleInfo(rule=rule, index=-1, path=path)
            self.check_condition(dummy, cond, self.episode_fields[fname], fname, cpath, "select")

    def use_template(
        self, info: RuleInfo, text: str, path: PathKey, *, in_memory: bool = False
    ) -> None:
        """Check a template; ``in_memory`` ones (subject/predicate/object) are also built
        inside CLIPS, where a timestamp is an integer, so timestamps are refused there."""
        try:
            parts = parse_template(text)
        except ValueError as exc:
            self.err(path, str(exc))
            return
        for kind, value in parts:
            if kind != "var":
                continue
            var = info.variables.get(value)
            if var is None:
                self.err(path, f"unbound variable '{value}' in template")
            elif var.type not in ("string", "integer", "boolean", "timestamp"):
                self.err(path, f"variable '{value}' is {var.type}: templates take text values")
            elif in_memory and var.type == "timestamp":
                self.err(
                    path,
                    f"timestamp variable '{value}' cannot be used here (only in reason, payload)",
                )
            else:
                info.used_vars.add(value)

    def check_emit(self, info: RuleInfo, path: PathKey) -> None:
        emit = info.rule.emit
        spo = {"subject": emit.subject, "predicate": emit.predicate, "object": emit.object}
        creates = kind_creates(emit.kind)
        for name, text in spo.items():
            if creates and text is None:
                self.err((*path,), f"emit of kind '{emit.kind}' needs '{name}'")
            elif not creates and text is not None:
                self.err((*path, name), f"emit of kind '{emit.kind}' takes no '{name}'")
            elif text is not None:
                self.use_template(info, text, (*path, name), in_memory=True)
                if text == "" and name != "object":
                    self.err((*path, name), f"a fact needs a {name}: this one is always empty")
        for key, value in emit.payload.items():
            self.check_payload_value(info, key, value, (*path, "payload", key))
        if not creates and emit.payload:
            self.err((*path, "payload"), f"emit of kind '{emit.kind}' takes no payload")
        self.use_template(info, emit.reason, (*path, "reason"))
        needs_replaces = kind_takes(emit.kind, "replaces")
        if needs_replaces and not emit.replaces:
            self.err(path, f"emit of kind '{emit.kind}' needs a non-empty 'replaces'")
        if not needs_replaces and emit.replaces:
            self.err((*path, "replaces"), f"emit of kind '{emit.kind}' takes no 'replaces'")
        for k, ref in enumerate(emit.replaces):
            self.check_replace_ref(info, ref, (*path, "replaces", k))
        closing = [*(emit.replaces if not creates else []), *emit.reinforces]
        for k, ref in enumerate(closing):
            if isinstance(ref, str) and _may_be_archived(info, ref):
                where = "replaces" if k < len(closing) - len(emit.reinforces) else "reinforces"
                at = k if where == "replaces" else k - (len(closing) - len(emit.reinforces))
                self.err(
                    (*path, where, at),
                    f"'{ref}' may be an archived fact, which is closed already: an update "
                    "restores it, a delete or a reinforcement cannot name it",
                )
        self.check_listed_once(emit.replaces, (*path, "replaces"))
        self.check_listed_once(emit.reinforces, (*path, "reinforces"))
        if emit.reinforces and not kind_takes(emit.kind, "reinforces"):
            self.err(
                (*path, "reinforces"), f"only {_kinds_taking('reinforces')} takes 'reinforces'"
            )
        if emit.reinforces and (not info.rule.claim or info.episode_alias is None):
            self.err(
                (*path, "reinforces"),
                "'reinforces' needs a claiming rule with an 'episode' pattern",
            )
        for k, name in enumerate(emit.reinforces):
            if info.aliases.get(name) != "fact":
                self.err((*path, "reinforces", k), f"'{name}' is not a named 'fact' pattern")
        for k, name in enumerate(emit.sources):
            if name not in info.aliases:
                self.err((*path, "sources", k), f"'{name}' is not a named pattern of this rule")
            elif info.aliases[name] == "count":
                info.used_vars.add(name)  # its episodes are cited: the count is used
            elif info.aliases[name] == "surprise":
                self.err(
                    (*path, "sources", k),
                    f"'{name}' is a surprise score, not a pattern with sources (its "
                    "neighbours are cited in the bindings)",
                )
        if info.episode_alias is None and not any(
            info.aliases.get(s) == "fact" for s in emit.sources
        ):
            self.err(path, "a rule without an 'episode' pattern must list a fact in 'sources'")
        self.check_confidence(info, (*path, "confidence"))
        self.check_placement(info, path)
        if emit.status is not None and not kind_takes(emit.kind, "status"):
            self.err(
                (*path, "status"),
                f"only {_kinds_taking('status')} takes 'status' "
                f"(one of {', '.join(CLOSE_STATUSES)}), "
                f"not '{emit.kind}'",
            )
        self.check_merged_into(info, emit, path)

    def check_merged_into(self, info: RuleInfo, emit: Emit, path: PathKey) -> None:
        """``merged_into`` goes with ``status: merged`` or ``superseded`` and names a
        ``fact`` pattern that is not also replaced."""
        into = emit.merged_into
        if emit.status in SUCCEEDED_STATUSES and into is None:
            self.err(
                (*path, "status"),
                f"'status: {emit.status}' needs 'merged_into': the named fact pattern the "
                "replaced facts were merged into, or that replaces them",
            )
        if into is None:
            return
        where = (*path, "merged_into")
        if emit.status not in SUCCEEDED_STATUSES:
            self.err(where, "'merged_into' goes with 'status: merged' or 'status: superseded'")
        elif info.aliases.get(into) != "fact":
            self.err(where, f"'{into}' is not a named 'fact' pattern")
        elif into in emit.replaces:
            self.err(where, f"'{into}' is also in 'replaces': a fact cannot be merged into itself")

    def check_placement(self, info: RuleInfo, path: PathKey) -> None:
        """``layer`` and ``memory_type``: only on an emit that makes a fact; a name of the
        set, or a template whose value the runtime checks."""
        emit = info.rule.emit
        for name, text, names in (
            ("layer", emit.layer, LAYERS),
            ("memory_type", emit.memory_type, MEMORY_TYPES),
        ):
            if text is None:
                continue
            if not kind_creates(emit.kind):
                self.err((*path, name), f"emit of kind '{emit.kind}' takes no '{name}'")
            elif "{" not in text and text not in names:
                self.err((*path, name), f"unknown {name} '{text}' (one of {', '.join(names)})")
            else:
                self.use_template(info, text, (*path, name), in_memory=True)

    def check_payload_value(self, info: RuleInfo, key: str, value: Any, path: PathKey) -> None:
        """A declared key takes a literal of its type or one variable of that type (a string
        key any template); an undeclared key takes a template."""
        ptype = self.pack.fact_payload.get(key)
        if is_arithmetic(value):
            self.check_payload_operation(info, key, ptype, value, path)
            return
        if ptype is None or (ptype == "string" and isinstance(value, str)):
            if not isinstance(value, str):
                self.err(
                    path,
                    f"payload key '{key}' is not declared in 'fact_payload': its value is a "
                    f"template (a string), not {_type_name(value)} {value!r}",
                )
                return
            self.use_template(info, value, path)
            return
        if not isinstance(value, str):
            if not literal_fits(ptype, value):
                self.err(path, self._mismatch(ptype, key, value, "payload"))
            return
        try:
            parts = parse_template(value)
        except ValueError as exc:
            self.err(path, str(exc))
            return
        if len(parts) != 1 or parts[0][0] != "var":
            if ptype == "timestamp" and literal_fits(ptype, value):
                return
            self.err(
                path,
                f"payload key '{key}' is {ptype}: write a {ptype} literal or one variable "
                f"('{{name}}') of that type",
            )
            return
        name = parts[0][1]
        var = info.variables.get(name)
        if var is None:
            self.err(path, f"unbound variable '{name}' in template")
        elif var.type != ptype and not (var.type == "integer" and ptype == "number"):
            self.err(path, f"type mismatch: variable '{name}' is {var.type}, '{key}' is {ptype}")
        else:
            info.used_vars.add(name)

    def check_payload_operation(
        self, info: RuleInfo, key: str, ptype: FieldType | None, op: ArithOp, path: PathKey
    ) -> None:
        """An operation computes a ``number`` key declared in ``fact_payload`` (in Python,
        as the confidence is); the decays are the confidence's only."""
        if ptype != "number":
            declared = "is not declared in 'fact_payload'" if ptype is None else f"is {ptype}"
            self.err(
                path,
                f"payload key '{key}' {declared}: an operation computes a key declared "
                "'number' (fact_payload: {" + key + ": number})",
            )
            return
        self.check_payload_ops(info, op, path)

    def check_payload_ops(self, info: RuleInfo, op: ArithOp, path: PathKey) -> None:
        """The operations of a payload value (no decay, nested ones included) and their
        operands."""
        decay = _decay_in(op, path)
        if decay is not None:
            where, name = decay
            self.err(
                where,
                f"'{name}' decays a fact's confidence: a payload value takes "
                + ", ".join(PAYLOAD_OPERATIONS),
            )
            return
        self.check_arithmetic(info, op, path)

    def check_listed_once(self, refs: list[Any], path: PathKey) -> None:
        """A fact named twice would be replaced (or reinforced) twice: never valid."""
        for k, ref in enumerate(refs):
            if ref in refs[:k]:
                name = ref.list if isinstance(ref, ListVar) else ref
                self.err((*path, k), f"'{name}' is listed twice")

    def check_replace_ref(self, info: RuleInfo, ref: str | ListVar, path: PathKey) -> None:
        if isinstance(ref, ListVar):
            var = info.variables.get(ref.list)
            if var is None:
                self.err(path, f"unbound variable '{ref.list}'")
            elif var.type != "list":
                self.err(path, f"variable '{ref.list}' is {var.type}, 'list' needs a list field")
            else:
                info.used_vars.add(ref.list)
            return
        if info.aliases.get(ref) not in ("fact", "earlier"):
            self.err(path, f"'{ref}' is not a named 'fact' or 'earlier' pattern")
        elif info.aliases[ref] == "earlier" and _episode_near(info, ref):
            self.err(
                path,
                f"'{ref}' is a neighbour episode ('earlier' with 'near'), which made no fact "
                f"of its own to replace: cite it in 'sources' instead",
            )

    def check_confidence(self, info: RuleInfo, path: PathKey) -> None:
        conf = info.rule.emit.confidence
        ok_types: tuple[str, ...]
        if is_arithmetic(conf):
            self.check_arithmetic(info, conf, path)
            return
        if isinstance(conf, LinearConfidence):
            name, ok_types = conf.var, NUMERIC
        elif isinstance(conf, VarConfidence):
            name, ok_types = conf.from_, ("number", "integer")
        else:
            return
        var = info.variables.get(name)
        if var is None:
            self.err(path, f"unbound variable '{name}'")
        elif var.type not in ok_types:
            self.err(path, f"variable '{name}' is {var.type}; expected {' or '.join(ok_types)}")
        else:
            info.used_vars.add(name)

    def check_arithmetic(self, info: RuleInfo, op: ArithOp, path: PathKey) -> None:
        """Operands of a typed confidence operation: numbers, numeric variables, nested
        operations; ``ebbinghaus`` and ``linear_decay`` name a ``fact`` pattern."""
        if isinstance(op, EbbinghausOp | LinearDecayOp | RetentionOp):
            name = arithmetic_name(op)
            ref = getattr(op, name).fact
            if info.aliases.get(ref) != "fact":
                self.err(
                    (*path, name, "fact"),
                    f"'{ref}' is not a named 'fact' pattern: {name} decays a fact's confidence",
                )
            return
        if isinstance(op, ReinforceOp):
            self.check_operand(info, op.reinforce.value, (*path, "reinforce", "value"))
        elif isinstance(op, ClampOp):
            self.check_operand(info, op.clamp.value, (*path, "clamp", "value"))
            if op.clamp.lo > op.clamp.hi:
                self.err((*path, "clamp", "hi"), "hi is smaller than lo")
        elif isinstance(op, MultiplyOp | MinOp | MaxOp | AddOp):
            name = arithmetic_name(op)
            for k, operand in enumerate(getattr(op, name)):
                self.check_operand(info, operand, (*path, name, k))

    def check_operand(self, info: RuleInfo, operand: Any, path: PathKey) -> None:
        if isinstance(operand, VarRef):
            var = info.variables.get(operand.var)
            if var is None:
                self.err(path, f"unbound variable '{operand.var}'")
            elif var.type not in NUMERIC:
                self.err(
                    path,
                    f"arithmetic on a non-numeric variable: '{operand.var}' is {var.type} "
                    "(bind an integer or number field, e.g. a fact's confidence)",
                )
            else:
                info.used_vars.add(operand.var)
        elif is_arithmetic(operand):
            self.check_arithmetic(info, operand, path)

    # --- reachability ------------------------------------------------------------------

    def check_reachability(self, infos: list[RuleInfo]) -> None:
        """A claiming rule whose ``when`` equals that of a claiming rule ranked above it
        (same select and gate) can never fire."""
        ranked = sorted(
            (i for i in infos if i.rule.enabled), key=lambda i: (-i.rule.priority, i.index)
        )
        seen: dict[str, RuleInfo] = {}
        for info in ranked:
            if not info.rule.claim or info.fact_only:
                continue
            key = repr((info.rule.when, info.rule.select, info.rule.salience, info.rule.cadence))
            if key in seen:
                winner = seen[key]
                self.err(
                    (*info.path, "when"),
                    f"unreachable: rule '{winner.rule.id}' has the same patterns and a higher "
                    "rank, so it always claims these episodes first",
                )
            else:
                seen[key] = info


def _decay_in(op: ArithOp, path: PathKey) -> tuple[PathKey, str] | None:
    """Where the first operation of ``op`` (itself included) that is no payload operation
    is, and its name (``None``: there is none)."""
    name = arithmetic_name(op)
    if name not in PAYLOAD_OPERATIONS:
        return (*path, name), name
    inner = getattr(op, name)
    places: list[tuple[PathKey, Any]] = (
        [((*path, name, k), x) for k, x in enumerate(inner)]
        if isinstance(inner, list)
        else [((*path, name, "value"), inner.value)]
    )
    for where, operand in places:
        found = _decay_in(operand, where) if is_arithmetic(operand) else None
        if found is not None:
            return found
    return None


def is_arithmetic(value: object) -> TypeGuard[ArithOp]:
    """Whether ``value`` is a typed confidence operation."""
    return isinstance(value, tuple(ARITHMETIC.values()))


def _unused_message(var: VarInfo) -> str:
    """What to do with a variable nothing uses: use it, or do not bind it."""
    name = var.name
    if var.kind == "count":
        todo = f'cite it in sources ("sources: [{name}]") or drop "as: {name}"'
    elif var.kind == "surprise":
        todo = (
            f'use it ({{var: {name}}} in an operation, or "{{{name}}}") or drop "as: {name}" '
            "(the score is in the bindings anyway, as 'surprise')"
        )
    elif var.kind == "near":
        todo = (
            f'use it ("confidence: {{from: {name}}}" or {{var: {name}}}) or drop '
            f'"cosine: {name}" (the cosine is in the bindings anyway)'
        )
    else:
        todo = f'use it ("{{{name}}}" in emit, or {{var: {name}}}) or drop "bind: {name}"'
    return f"variable '{name}' is bound but never used: {todo}"


def _episode_near(info: RuleInfo, alias: str) -> bool:
    """Whether ``alias`` names an ``earlier`` pattern with ``near``."""
    return any(
        isinstance(item, EarlierItem)
        and item.earlier.alias == alias
        and item.earlier.near is not None
        for item in info.rule.when
    )


def pattern_of(item: WhenItem) -> tuple[str, Any]:
    if isinstance(item, EpisodeItem):
        return "episode", item.episode
    if isinstance(item, FactItem):
        return "fact", item.fact
    if isinstance(item, EarlierItem):
        return "earlier", item.earlier
    if isinstance(item, CountItem):
        return "count", item.count
    if isinstance(item, NotItem):
        return "not", item.not_
    if isinstance(item, SurpriseItem):
        return "surprise", item.surprise
    return "exists", item.exists


def analyze(pack: RulePack, source: SourceMap) -> Analysis:
    """Run every semantic check; ``issues`` is empty when the pack is valid."""
    return _Checker(pack, source).run()


def check_or_raise(pack: RulePack, source: SourceMap) -> Analysis:
    """Analyze and raise the first issue (all issues attached) when any exist."""
    analysis = analyze(pack, source)
    errors = [i for i in analysis.issues if i.severity == "error"]
    if errors:
        raise IRError(errors[0], errors)
    return analysis


def _kinds_taking(field: str) -> str:
    """The delta kinds that take ``field``, quoted (``'noop'``)."""
    return " or ".join(f"'{kind}'" for kind in DELTA_KINDS if kind_takes(kind, field))


def _may_be_archived(info: RuleInfo, alias: str) -> bool:
    """Whether the ``fact`` pattern named ``alias`` can match an archived fact (its
    ``status`` test admits one; a test on a variable might)."""
    for item in info.rule.when:
        kind, pattern = pattern_of(item)
        if kind != "fact" or getattr(pattern, "alias", None) != alias:
            continue
        cond = pattern.where.get("status")
        if cond is None:
            return False
        tests = cond.tests()
        return any(isinstance(v, VarRef) for _, v in tests) or evaluate(cond, "string", "archived")
    return False
