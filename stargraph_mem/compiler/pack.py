"""``CompiledPack``: CLIPS source + manifest + sha256 of the canonical IR, and the entry points."""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from stargraph_mem.compiler.cadence import schedule_program
from stargraph_mem.compiler.generator import Generator
from stargraph_mem.compiler.program import (
    EpisodeNearRelation,
    HistoryRelation,
    NearRelation,
    Relation,
    RuleProgram,
    SurpriseRelation,
    item_alias,
)
from stargraph_mem.compiler.select_sql import SelectSQL, compile_select
from stargraph_mem.errors import CompileError, IRError, IRIssue
from stargraph_mem.ir.checks import Analysis, RuleInfo, check_or_raise, pattern_of
from stargraph_mem.ir.loader import load_pack_file, load_pack_text
from stargraph_mem.ir.models import IR_VERSION, FieldType, RulePack
from stargraph_mem.ir.source_map import PathKey, SourceMap, format_path
from stargraph_mem.model.cadence import Cadence
from stargraph_mem.model.canonical import canonical_json

if TYPE_CHECKING:
    import clips

ClipsEnvironment: TypeAlias = Any
"""A ``clips.Environment`` (clipspy ships no type hints; ``CompiledPack.clips`` is the text)."""


@dataclass(frozen=True)
class CompiledRule:
    """One rule as the runtime sees it: its program, cadence, select and gate."""

    program: RuleProgram
    cadence: Cadence
    select: SelectSQL | None
    position: tuple[int | None, int | None]

    @cached_property
    def id(self) -> str:
        return self.program.info.rule.id

    @cached_property
    def index(self) -> int:
        return self.program.info.index


@dataclass
class CompiledPack:
    """The compiler's output. Same input ⇒ byte-identical ``clips`` and ``manifest``."""

    pack: RulePack
    clips: str
    sha256: str
    rules: list[CompiledRule]
    relations: list[Relation]
    episode_fields: dict[str, FieldType]
    matches_facts: bool = True
    """Whether any rule has a ``fact``/``not``/``exists`` pattern: stored facts enter
    CLIPS only then (facts a pass promotes are always there, for ``earlier`` replaces)."""
    fact_slots: tuple[str, ...] = ()
    """The lifecycle fact fields the program declares (a rule reads them): the runtime
    asserts those slots only."""
    normal_fact_fields: tuple[str, ...] = ()
    """The statement fields whose content normal form ``sm-fact`` holds (a ``normal_eq``
    join: see ``Generator.normal_pairs``): the runtime asserts them with each fact."""
    normal_episode_fields: tuple[str, ...] = ()
    """The episode fields whose content normal form ``sm-episode`` holds."""
    payload_slots: dict[str, FieldType] = field(default_factory=dict)
    """Declared payload keys rules test, each an ``sm-fact`` slot (``p_<key>``)."""
    needs_archived: bool = False
    """Whether a fact pattern admits archived facts: the runtime then asks the store for
    the partition's archived facts too."""
    fact_keys: tuple[tuple[tuple[str, str], ...], ...] | None = None
    """Per fact pattern of the episode rules, the (fact field, episode field) pairs that
    tie it to the episode; a pass then asserts only the stored facts some episode of it
    could match (``None``: every fact, see ``Generator.fact_keys``)."""
    file: str = "<string>"
    history: list[HistoryRelation] = field(default_factory=list)
    """The ``over: history`` patterns, in ``sm-hist-<i>`` order."""
    near: list[NearRelation] = field(default_factory=list)
    """The ``near`` tests of fact patterns, in ``sm-near`` ``k`` order: a pass of such a
    pack needs an embedder."""
    episode_near: list[EpisodeNearRelation] = field(default_factory=list)
    """The ``earlier`` patterns with ``near``, in ``sm-near-ep`` ``k`` order: a pass of such
    a pack needs an embedder and the partition's earlier episodes."""
    surprise: list[SurpriseRelation] = field(default_factory=list)
    """The ``surprise`` patterns, in ``sm-surprise`` ``k`` order: a pass of such a pack
    needs an embedder too."""
    near_only: bool = False
    """Stored facts matter only as neighbours (see ``Generator.near_only``): a pass of
    episode rules asserts each when it first ranks among an episode's neighbours."""
    manifest: dict[str, Any] = field(default_factory=dict)
    schedule: str = ""
    """The schedule program (:mod:`~stargraph_mem.compiler.cadence`): CLIPS rules deciding
    which (rule, partition) pairs are due, loaded into its own environment by the scheduler."""
    _built: list[ClipsEnvironment] = field(default_factory=list, repr=False, compare=False)

    def take_environment(self) -> ClipsEnvironment | None:
        """The environment the build check loaded, handed over once (saves a second load)."""
        return self._built.pop() if self._built else None

    @property
    def name(self) -> str:
        return self.pack.pack

    @property
    def similarity(self) -> bool:
        """Whether a pass needs an embedder: a ``near`` test (of facts or of earlier
        episodes) or a ``surprise`` pattern."""
        return bool(self.near or self.episode_near or self.surprise)

    def rule(self, rule_id: str) -> CompiledRule:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)

    def by_index(self) -> dict[int, CompiledRule]:
        return {r.index: r for r in self.rules}


def ir_sha256(pack: RulePack) -> str:
    """sha256 of the canonical IR (sorted-key JSON of the validated model)."""
    return hashlib.sha256(canonical_json(pack.model_dump(mode="json", by_alias=True))).hexdigest()


def _manifest(
    pack: RulePack, sha: str, rules: list[CompiledRule], analysis: Analysis
) -> dict[str, Any]:
    compiled = {r.index: r for r in rules}
    entries = []
    for info in analysis.rules:
        rule = info.rule
        entry: dict[str, Any] = {
            "id": rule.id,
            "enabled": rule.enabled,
            "priority": rule.priority,
            "claim": rule.claim,
            "cadence": (rule.cadence or pack.defaults.cadence).model_dump(exclude_none=True),
            "select": rule.select.model_dump(mode="json", by_alias=True, exclude_none=True)["where"]
            if rule.select
            else None,
            "gate": rule.salience.model_dump() if rule.salience else None,
            "emits": rule.emit.kind,
        }
        if info.index in compiled:
            entry["salience"] = compiled[info.index].program.salience
        entries.append(entry)
    return {
        "pack": pack.pack,
        "version": pack.version,
        "ir_version": pack.ir_version,
        "sha256": sha,
        "rules": entries,
    }


def compile_analysis(
    analysis: Analysis, source: SourceMap, *, cached_build: bool = False
) -> CompiledPack:
    """Emit CLIPS for a checked pack and build it once to prove CLIPS accepts it.

    With ``cached_build``, a program CLIPS built before (see
    :mod:`~stargraph_mem.compiler.build_cache`) is not built again and the pack carries no
    environment; a new one is built, and remembered when CLIPS accepts it."""
    pack = analysis.pack
    gen = Generator(analysis)
    text = gen.program()
    rules: list[CompiledRule] = []
    for program in gen.programs:
        rule = program.info.rule
        select = compile_select(rule.select, gen.episode_types) if rule.select else None
        pos = source.locate(program.info.path)
        rules.append(CompiledRule(program, rule.cadence or pack.defaults.cadence, select, pos))
    sha = ir_sha256(pack)
    compiled = CompiledPack(
        pack=pack,
        clips=text,
        sha256=sha,
        rules=rules,
        relations=list(gen.relations),
        history=list(gen.history),
        near=list(gen.near),
        episode_near=list(gen.episode_near),
        surprise=list(gen.surprise),
        near_only=gen.near_only(),
        episode_fields=dict(sorted(gen.used_fields.items())),
        matches_facts=gen.matches_facts(),
        fact_slots=gen.lifecycle,
        normal_fact_fields=gen.normal_fact_fields,
        normal_episode_fields=gen.normal_episode_fields,
        payload_slots=dict(gen.payload_types),
        needs_archived=gen.needs_archived,
        fact_keys=gen.fact_keys(),
        file=source.file,
        schedule=schedule_program(rules),
    )
    compiled.manifest = _manifest(pack, sha, rules, analysis)
    if not cached_build:
        build_check(compiled, source, _origins(gen))
        return compiled
    from stargraph_mem.compiler import build_cache

    key = build_cache.build_key(sha, text)
    if not build_cache.built_before(key):
        build_check(compiled, source, _origins(gen))  # a failure raises: never remembered
        compiled._built.clear()  # validation keeps no environment
        build_cache.remember_built(key)
    return compiled


Origin = tuple[RuleInfo, PathKey]


def _origins(gen: Generator) -> dict[str, Origin]:
    """Whose each generated construct is: ``sm-rule-<id>`` its rule's; a relation's
    template and upkeep rules (``<template>-<step>``) the first pattern using it."""
    out: dict[str, Origin] = {}
    for program in gen.programs:
        info = program.info
        out[f"sm-rule-{info.rule.id}"] = (info, info.path)
        for j, item in enumerate(info.rule.when):
            kind, pattern = pattern_of(item)
            if kind in ("earlier", "count"):
                rel = gen.relation_for(kind, pattern)
                out.setdefault(rel.template, (info, (*info.path, "when", j, kind)))
    return out


def _origin(origins: dict[str, Origin], construct: str | None) -> Origin | None:
    if construct is None:
        return None
    for name, origin in origins.items():
        if construct == name or construct.startswith(name + "-"):
            return origin
    return None


def build_environment(text: str) -> clips.Environment:
    """A fresh silent CLIPS environment with ``text`` loaded; errors become CompileError."""
    from stargraph_mem.compiler.clips_env import load_constructs, new_environment

    env = new_environment()
    load_constructs(env, text)
    return env


def build_check(
    compiled: CompiledPack, source: SourceMap, origins: dict[str, Origin] | None = None
) -> None:
    """Build the program in a scratch environment. A construct CLIPS refuses is reported
    at the rule (or ``earlier``/``count`` pattern) it was generated for, as
    ``file:line:col: path: message``; CLIPS's own text stays in ``detail``."""
    try:
        compiled._built.append(build_environment(compiled.clips))
    except CompileError as exc:
        construct = exc.context.get("construct")
        origin = _origin(origins or {}, construct)
        path: PathKey
        defect = "the compiler generated code CLIPS refuses (a compiler defect: please report it)"
        if origin is None:
            rule_id, path = None, ()
            message = f"the generated program could not be built in CLIPS: {defect}"
        else:
            info, path = origin
            rule_id = info.rule.id
            what = (
                f"rule '{rule_id}'"
                if path == info.path
                else f"the '{path[-1]}' pattern of rule '{rule_id}'"
            )
            message = f"{what} could not be built in CLIPS: {defect}"
        line, col = source.locate(path)
        issue = IRIssue(
            message, file=source.file, line=line, col=col, path=format_path(path), rule_id=rule_id
        )
        raise CompileError(
            issue.format(),
            rule_id=rule_id,
            line=line,
            col=col,
            issue=issue,
            construct=construct,
            detail=exc.context.get("detail"),
        ) from exc


@contextmanager
def _no_gc() -> Iterator[None]:
    """Compiling allocates many short-lived objects and no cycles worth collecting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_text(text: str, file: str = "<string>") -> CompiledPack:
    """Load, check and compile a pack from YAML text; raise the first error."""
    with _no_gc():
        pack, source = load_pack_text(text, file)
        return compile_analysis(check_or_raise(pack, source), source)


def compile_file(path: str | Path) -> CompiledPack:
    """Load, check and compile a pack file; raise the first error."""
    with _no_gc():
        pack, source = load_pack_file(path)
        return compile_analysis(check_or_raise(pack, source), source)


def validate_file(path: str | Path, *, cached_build: bool = True) -> list[IRIssue]:
    """Every issue of a pack file (empty when valid); never raises for pack problems.

    The build check in CLIPS is skipped for a program CLIPS built before (``cached_build``,
    see :mod:`~stargraph_mem.compiler.build_cache`), so validating an unchanged pack again
    does not load CLIPS."""
    try:
        pack, source = load_pack_file(path)
    except IRError as exc:
        return exc.issues
    from stargraph_mem.ir.checks import analyze

    analysis = analyze(pack, source)
    if analysis.issues:
        return analysis.issues
    try:
        compile_analysis(analysis, source, cached_build=cached_build)
    except CompileError as exc:
        issue = exc.context.get("issue")
        return [issue if isinstance(issue, IRIssue) else IRIssue(exc.message, file=str(path))]
    return []


__all__ = [
    "IR_VERSION",
    "CompiledPack",
    "CompiledRule",
    "compile_file",
    "compile_text",
    "item_alias",
    "validate_file",
]
