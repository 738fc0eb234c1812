"""Lint: warnings about packs that are valid but do not do what their author meant.

* ``shadowed``: a claiming rule never fires because a rule ranked above it (priority,
  then declaration order) provably matches, and so claims, every episode it matches.
  Conservative: the higher rule's episode tests must be implied by the lower rule's tests
  on the same fields, its other patterns must appear verbatim in the lower rule, and its
  cadence, ``select`` and salience gate must admit everything the lower rule's do.
* ``select-never-matches``: a ``select`` whose tests no value of the field passes
  (``in: []``, ``gt: 5`` with ``lt: 3``, …), alone or together with the rule's episode
  pattern on the same field; ``pattern-never-matches`` is the same for the episode pattern.
* ``cadence-overlap``: two rules on different schedules write facts whose (subject,
  predicate) can be the same, so whichever fires last wins. A written value is a literal,
  or a variable whose binding pins it to a few values (``eq`` / ``in``), or anything.

A rule silences a check with a reason (``lint: {ignore: {cadence-overlap: "why"}}``);
a suppression that silences nothing is reported as ``unused-suppression``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from croniter import croniter

from stargraph_mem.compiler.pack import validate_file
from stargraph_mem.compiler.program import literal_value
from stargraph_mem.errors import IRIssue
from stargraph_mem.ir.checks import (
    Analysis,
    RuleInfo,
    analyze,
    parse_template,
    pattern_of,
)
from stargraph_mem.ir.loader import load_pack_file
from stargraph_mem.ir.models import (
    EPISODE_BUILTINS,
    Condition,
    Duration,
    EpisodeItem,
    FieldType,
    ListVar,
    RulePack,
    VarRef,
    WhenItem,
)
from stargraph_mem.ir.operators import OPERATORS, unknown_operator
from stargraph_mem.ir.reference import passes
from stargraph_mem.ir.source_map import PathKey, SourceMap
from stargraph_mem.model.cadence import trigger_text
from stargraph_mem.model.deltas import kind_creates
from stargraph_mem.stores.models import Cadence

__all__ = ["CHECKS", "SUPPRESSIBLE", "LintReport", "LintWarning", "lint_analysis", "lint_file"]

SUPPRESSIBLE = ("shadowed", "select-never-matches", "pattern-never-matches", "cadence-overlap")
"""Checks a rule can silence (the keys of ``lint.ignore``)."""
UNUSED = "unused-suppression"
CHECKS = (*SUPPRESSIBLE, UNUSED)


@dataclass(frozen=True)
class LintWarning:
    """One finding: the check's name and a positioned issue (severity ``warning``)."""

    check: str
    issue: IRIssue

    def format(self, *, strict: bool = False) -> str:
        """``file:line:col: path: warning: message [check]`` (``error:`` when strict)."""
        word = "error" if strict else "warning"
        text = f"{word}: {self.issue.message} [{self.check}]"
        return dataclasses.replace(self.issue, message=text).format()


@dataclass
class LintReport:
    """IR errors (the pack is invalid; no lint ran) or the lint warnings, in file order,
    and the warnings rules silenced."""

    file: str
    errors: list[IRIssue] = field(default_factory=list)
    warnings: list[LintWarning] = field(default_factory=list)
    suppressed: list[LintWarning] = field(default_factory=list)


# --- the values a field's tests allow -----------------------------------------------------


def _show(value: Any) -> str:
    if isinstance(value, Duration):
        parts = [f"{k}: {v:g}" for k, v in value.model_dump().items() if v]
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, VarRef):
        return "{var: " + value.var + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _tests_text(conds: Iterable[Condition]) -> str:
    out: list[str] = []
    for cond in conds:
        if cond.bind is not None:
            out.append(f"bind {cond.bind}")
        for op, value in cond.tests():
            out.append(op if OPERATORS[op].operand == "flag" else f"{op} {_show(value)}")
    return ", ".join(out)


@dataclass
class _Domain:
    """What the literal tests of one or more conditions on one field allow."""

    ftype: FieldType
    present: bool = False
    missing: bool = False
    values: set[Any] | None = None
    excluded: set[Any] = field(default_factory=set)
    low: tuple[Any, bool] | None = None  # (bound, inclusive)
    high: tuple[Any, bool] | None = None
    prefixes: list[str] = field(default_factory=list)
    contains: list[str] = field(default_factory=list)
    older: int | None = None  # tightest older_than (largest), microseconds
    newer: int | None = None  # tightest newer_than (smallest), microseconds
    var_tests: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def of(cls, ftype: FieldType, conds: Iterable[Condition]) -> _Domain:
        dom = cls(ftype)
        for cond in conds:
            dom.add(cond)
        return dom

    def add(self, cond: Condition) -> None:
        if cond.bind is not None or cond.get("exists"):
            self.present = True
        for op, value in cond.tests():
            if not OPERATORS[op].on_missing and OPERATORS[op].operand != "flag":
                self.present = True
            if isinstance(value, VarRef):
                self.var_tests.add((op, value.var))
                continue
            narrow = LINT_NARROW.get(op)
            if narrow is None:
                raise KeyError(unknown_operator(op))
            narrow(self, value)

    def allow_only(self, allowed: set[Any]) -> None:
        self.values = allowed if self.values is None else self.values & allowed

    def tighten_older(self, micros: int) -> None:
        self.older = micros if self.older is None else max(self.older, micros)

    def tighten_newer(self, micros: int) -> None:
        self.newer = micros if self.newer is None else min(self.newer, micros)

    def _set(self, values: Sequence[Any]) -> set[Any]:
        return {literal_value(self.ftype, v) for v in values}

    def _bound(self, op: str, value: Any) -> None:
        inclusive = op in ("le", "ge")
        if self.ftype in ("integer", "timestamp") and not inclusive:
            value, inclusive = (value + 1 if op == "gt" else value - 1), True
        if op in ("gt", "ge"):
            if self.low is None or value > self.low[0] or (value == self.low[0] and not inclusive):
                self.low = (value, inclusive)
        elif self.high is None or value < self.high[0] or (value == self.high[0] and not inclusive):
            self.high = (value, inclusive)

    def candidates(self) -> set[Any] | None:
        """The finite set of values still allowed, when the tests pin one down."""
        if self.values is not None:
            return {v for v in self.values if self.allows(v)}
        if self.ftype == "boolean" and self.present:
            return {v for v in (True, False) if self.allows(v)}
        return None

    def allows(self, v: Any) -> bool:
        """Whether a present value ``v`` passes the literal tests (relative times aside)."""
        if v in self.excluded:
            return False
        if self.low is not None and (v < self.low[0] or (v == self.low[0] and not self.low[1])):
            return False
        if self.high is not None and (v > self.high[0] or (v == self.high[0] and not self.high[1])):
            return False
        if self.prefixes and not all(isinstance(v, str) and v.startswith(p) for p in self.prefixes):
            return False
        return not self.contains or self.ftype == "list" or all(c in v for c in self.contains)

    def satisfiable(self) -> bool:
        if self.present and self.missing:
            return False
        if self.missing:
            return True
        found = self.candidates()
        if found is not None:
            return bool(found)
        if self.low is not None and self.high is not None:
            (lo, lo_in), (hi, hi_in) = self.low, self.high
            if lo > hi or (lo == hi and not (lo_in and hi_in)):
                return False
        for p in self.prefixes:
            if not all(p.startswith(q) or q.startswith(p) for q in self.prefixes):
                return False
        return not (self.older is not None and self.newer is not None and self.newer <= self.older)

    # --- implication: does every value these tests allow pass ``op value``? -------------

    def implies(self, cond: Condition, always_present: bool) -> bool:
        present = self.present or always_present
        if (cond.bind is not None or cond.get("exists")) and not present:
            return False
        return all(self._implies(op, value, present) for op, value in cond.tests())

    def _implies(self, op: str, value: Any, present: bool) -> bool:
        if isinstance(value, VarRef):
            return (op, value.var) in self.var_tests
        spec = OPERATORS.get(op)
        implied = LINT_IMPLIES.get(op)
        if spec is None or implied is None:
            raise KeyError(unknown_operator(op))
        if spec.operand == "flag":
            return implied(self, value, present)
        if not spec.on_missing and not present:
            return False
        found = self.candidates() if spec.operand != "duration" else None
        if found is not None:
            return all(passes(op, v, value, self.ftype) for v in found)
        return implied(self, value, present)

    def _within_bound(self, op: str, x: Any) -> bool:
        if op in ("lt", "le"):
            if self.high is None:
                return False
            hi, inclusive = self.high
            return hi < x or (hi == x and (op == "le" or not inclusive))
        if self.low is None:
            return False
        lo, inclusive = self.low
        return lo > x or (lo == x and (op == "ge" or not inclusive))

    def excludes_all(self, gone: Sequence[Any]) -> bool:
        return self.missing or all(literal_value(self.ftype, g) in self.excluded for g in gone)


_Narrow = Callable[[_Domain, Any], None]

LINT_NARROW: Mapping[str, _Narrow] = {
    "eq": lambda d, x: d.allow_only({literal_value(d.ftype, x)}),
    "ne": lambda d, x: d.excluded.add(literal_value(d.ftype, x)),
    "in": lambda d, xs: d.allow_only(d._set(xs)),
    "not_in": lambda d, xs: d.excluded.update(d._set(xs)),
    "lt": lambda d, x: d._bound("lt", literal_value(d.ftype, x)),
    "le": lambda d, x: d._bound("le", literal_value(d.ftype, x)),
    "gt": lambda d, x: d._bound("gt", literal_value(d.ftype, x)),
    "ge": lambda d, x: d._bound("ge", literal_value(d.ftype, x)),
    "exists": lambda d, x: None,  # presence is recorded by the caller
    "missing": lambda d, x: setattr(d, "missing", True),
    "contains": lambda d, x: d.contains.append(x),
    "prefix": lambda d, x: d.prefixes.append(x),
    "normal_eq": lambda d, x: None,  # many spellings pass: no candidate set to narrow to
    "older_than": lambda d, x: d.tighten_older(x.total_microseconds()),
    "newer_than": lambda d, x: d.tighten_newer(x.total_microseconds()),
}
"""Lint's table, first half: how a literal test narrows what a field may hold."""

_Implied = Callable[[_Domain, Any, bool], bool]

LINT_IMPLIES: Mapping[str, _Implied] = {
    "eq": lambda d, x, present: False,  # only when the candidates pin the value down
    "ne": lambda d, x, present: d.excludes_all([x]),
    "in": lambda d, xs, present: False,
    "not_in": lambda d, xs, present: d.excludes_all(xs),
    "lt": lambda d, x, present: d._within_bound("lt", literal_value(d.ftype, x)),
    "le": lambda d, x, present: d._within_bound("le", literal_value(d.ftype, x)),
    "gt": lambda d, x, present: d._within_bound("gt", literal_value(d.ftype, x)),
    "ge": lambda d, x, present: d._within_bound("ge", literal_value(d.ftype, x)),
    "exists": lambda d, x, present: present,
    "missing": lambda d, x, present: d.missing,
    "contains": lambda d, x, present: any(
        x in c if d.ftype == "string" else x == c for c in d.contains
    ),
    "prefix": lambda d, x, present: any(p.startswith(x) for p in d.prefixes),
    "normal_eq": lambda d, x, present: False,  # only when the candidates pin the value down
    "older_than": lambda d, x, present: d.older is not None and d.older >= x.total_microseconds(),
    "newer_than": lambda d, x, present: d.newer is not None and d.newer <= x.total_microseconds(),
}
"""Lint's table, second half: whether what the domain allows always passes a test
(without enumerating candidates; for finite candidates the reference evaluator decides)."""


# --- checks --------------------------------------------------------------------------------


def _episode_where(info: RuleInfo) -> dict[str, Condition]:
    for item in info.rule.when:
        if isinstance(item, EpisodeItem):
            return item.episode.where
    return {}


def _episode_index(info: RuleInfo) -> int:
    return next(j for j, item in enumerate(info.rule.when) if isinstance(item, EpisodeItem))


class _Linter:
    def __init__(self, analysis: Analysis, source: SourceMap) -> None:
        self.pack: RulePack = analysis.pack
        self.infos = [i for i in analysis.rules if i.rule.enabled]
        self.source = source
        self.types: dict[str, FieldType] = {**EPISODE_BUILTINS, **self.pack.fields}
        self.found: list[tuple[LintWarning, tuple[int, ...]]] = []
        """Each warning with the rules (indexes) it concerns: any of them can silence it."""
        self.impossible: set[int] = set()
        """Rules that can never match: not reported as shadowed as well."""

    def warn(self, check: str, path: PathKey, message: str, *others: int) -> None:
        """Report ``check`` at ``path`` (inside the rule concerned; ``others`` also are)."""
        issue = self.source.issue(path, message, severity="warning")
        index = path[1]
        assert isinstance(index, int)
        self.found.append((LintWarning(check, issue), (index, *others)))
        if check.endswith("never-matches"):
            self.impossible.add(index)

    def run(self) -> tuple[list[LintWarning], list[LintWarning]]:
        """The warnings to show and the ones rules silenced, each in file order."""
        for info in self.infos:
            self.never_matches(info)
        self.shadowed()
        self.cadence_overlap()
        shown, silenced = self.suppress()
        return _in_file_order(shown), _in_file_order(silenced)

    # --- suppressions --------------------------------------------------------------------

    def suppress(self) -> tuple[list[LintWarning], list[LintWarning]]:
        """Split warnings into shown and silenced; report suppressions that silence nothing."""
        ignores = {i.index: i.rule.lint.ignore.reasons() for i in self.infos}
        used: set[tuple[int, str]] = set()
        shown: list[LintWarning] = []
        silenced: list[LintWarning] = []
        for warning, rules in self.found:
            by = [(r, warning.check) for r in rules if warning.check in ignores[r]]
            used.update(by)
            (silenced if by else shown).append(warning)
        for info in self.infos:
            for check in ignores[info.index]:
                if (info.index, check) not in used:
                    path = (*info.path, "lint", "ignore", check)
                    message = (
                        f"rule '{info.rule.id}' silences '{check}', but lint has no such "
                        "warning about it: remove the suppression"
                    )
                    issue = self.source.issue(path, message, severity="warning")
                    shown.append(LintWarning(UNUSED, issue))
        return shown, silenced

    # --- select / pattern never matches ---------------------------------------------------

    def never_matches(self, info: RuleInfo) -> None:
        episode = _episode_where(info)
        select = info.rule.select.where if info.rule.select is not None else {}
        for fname, cond in select.items():
            path = (*info.path, "select", fname)
            ftype = self.types[fname]
            if not _Domain.of(ftype, [cond]).satisfiable():
                self.warn(
                    "select-never-matches",
                    path,
                    f"select can never match: no value of '{fname}' passes {_tests_text([cond])}",
                )
            elif fname in episode and not _Domain.of(ftype, [cond, episode[fname]]).satisfiable():
                both = _tests_text([cond, episode[fname]])
                self.warn(
                    "select-never-matches",
                    path,
                    f"select contradicts the episode pattern: no value of '{fname}' passes {both}",
                )
        for fname, cond in episode.items():
            if not _Domain.of(self.types[fname], [cond]).satisfiable():
                path = (*info.path, "when", _episode_index(info), "episode", fname)
                self.warn(
                    "pattern-never-matches",
                    path,
                    f"the episode pattern can never match: no value of '{fname}' passes "
                    f"{_tests_text([cond])}",
                )

    # --- shadowing ------------------------------------------------------------------------

    def cadence(self, info: RuleInfo) -> Cadence:
        return info.rule.cadence or self.pack.defaults.cadence

    def shadowed(self) -> None:
        ranked = sorted(
            (i for i in self.infos if i.rule.claim and not i.fact_only),
            key=lambda i: (-i.rule.priority, i.index),
        )
        for n, lower in enumerate(ranked):
            if lower.index in self.impossible:
                continue
            for upper in ranked[:n]:
                if upper.index not in self.impossible and self.covers(upper, lower):
                    a, b = upper.rule, lower.rule
                    rank = (
                        f"priority {a.priority} > {b.priority}"
                        if a.priority > b.priority
                        else f"same priority {a.priority}, declared earlier"
                    )
                    self.warn(
                        "shadowed",
                        (*lower.path, "when"),
                        f"rule '{b.id}' never fires: rule '{a.id}' ({rank}) matches every "
                        "episode it matches and claims it first",
                    )
                    break

    def constraints(self, info: RuleInfo, fname: str) -> list[Condition]:
        """Every condition ``info`` puts on episode field ``fname`` (pattern and select)."""
        out = []
        if fname in (where := _episode_where(info)):
            out.append(where[fname])
        if info.rule.select is not None and fname in info.rule.select.where:
            out.append(info.rule.select.where[fname])
        return out

    def covers(self, upper: RuleInfo, lower: RuleInfo) -> bool:
        """Whether every episode ``lower`` matches is provably matched by ``upper``."""
        a, b = upper.rule, lower.rule
        if self.cadence(upper) != self.cadence(lower):
            return False
        if a.salience is not None and (
            b.salience is None
            or b.salience.tau_seconds != a.salience.tau_seconds
            or b.salience.min < a.salience.min
            or b.salience.importance_key != a.salience.importance_key
        ):
            return False
        tests = list(_episode_where(upper).items())
        tests += list(a.select.where.items()) if a.select is not None else []
        for fname, cond in tests:
            always = fname in EPISODE_BUILTINS and fname != "source_node"
            dom = _Domain.of(self.types[fname], self.constraints(lower, fname))
            if not dom.implies(cond, always):
                return False
        extras = [w for w in a.when if not isinstance(w, EpisodeItem)]
        if any(item not in b.when for item in extras):
            return False
        used = {var for item in a.when for var in _var_refs(item)}
        return all(_binding(upper, v) == _binding(lower, v) for v in used)

    # --- cadences ------------------------------------------------------------------------

    def cadence_overlap(self) -> None:
        """Each pair of rules on different schedules that can write the same facts, once."""
        targets = {i.index: self.targets(i) for i in self.infos}
        for n, second in enumerate(self.infos):
            for first in self.infos[:n]:
                if _same_schedule(self.cadence(first), self.cadence(second)):
                    continue
                shared = _overlap(targets[first.index], targets[second.index])
                if shared is None:
                    continue
                own_first = first.rule.cadence is not None and second.rule.cadence is None
                target, other = (first, second) if own_first else (second, first)
                path = (*target.path, "cadence") if target.rule.cadence else target.path
                self.warn(
                    "cadence-overlap",
                    path,
                    f"rules '{first.rule.id}' ({_cadence_text(self.cadence(first))}) and "
                    f"'{second.rule.id}' ({_cadence_text(self.cadence(second))}) both write "
                    f"{shared} facts on different cadences: they fight over the same facts",
                    other.index,
                )

    def targets(self, info: RuleInfo) -> list[Target]:
        """What a rule writes: its new triple, and the facts its ``replaces`` close.

        ``earlier`` references are left out: they close facts promoted in the same pass.
        """
        emit = info.rule.emit
        out: list[Target] = []
        if kind_creates(emit.kind):
            out.append((self.rendered(info, emit.subject), self.rendered(info, emit.predicate)))
        facts = {}
        for item in info.rule.when:
            kind, pattern = pattern_of(item)
            if kind == "fact" and pattern.alias is not None:
                facts[pattern.alias] = pattern.where
        for ref in emit.replaces:
            if isinstance(ref, ListVar):
                out.append((None, None))
            elif ref in facts:
                where = facts[ref]
                subject = self.tested(info, where.get("subject"))
                out.append((subject, self.tested(info, where.get("predicate"))))
        return out

    def rendered(self, info: RuleInfo, template: str | None) -> Values:
        """The texts a template can render to, when its variables are pinned to a few."""
        if template is None:
            return None
        texts = [""]
        for kind, text in parse_template(template):
            choices = {text} if kind == "text" else self.bound(info, text)
            if choices is None:
                return None
            texts = [t + c for t in texts for c in sorted(choices)]
            if len(texts) > _MAX_TEXTS:
                return None
        return frozenset(texts)

    def tested(self, info: RuleInfo, cond: Condition | None) -> Values:
        """The string values a field's condition admits (a variable: what it is bound to)."""
        if cond is None:
            return None
        found = _Domain.of("string", [cond]).candidates()
        if found is not None:
            return frozenset(v for v in found if isinstance(v, str))
        eq = cond.get("eq")
        return self.bound(info, eq.var) if isinstance(eq, VarRef) else None

    def bound(self, info: RuleInfo, name: str) -> Values:
        """The values a string variable can hold, from its binding's literal tests."""
        var = info.variables.get(name)
        if var is None or var.type != "string":
            return None
        conds: list[Condition] = []
        for item in info.rule.when:
            kind, pattern = pattern_of(item)
            for fname, cond in getattr(pattern, "where", {}).items():  # surprise: no fields
                if cond.bind == name:
                    conds += self.constraints(info, fname) if kind == "episode" else [cond]
        found = _Domain.of("string", conds).candidates() if conds else None
        return None if found is None else frozenset(v for v in found if isinstance(v, str))


def _in_file_order(warnings: list[LintWarning]) -> list[LintWarning]:
    return sorted(warnings, key=lambda w: (w.issue.line or 0, w.issue.col or 0, w.check))


def _var_refs(item: WhenItem) -> set[str]:
    _, pattern = pattern_of(item)
    return {
        value.var
        for cond in getattr(pattern, "where", {}).values()  # surprise: no fields
        for _, value in cond.tests()
        if isinstance(value, VarRef)
    }


def _binding(info: RuleInfo, name: str) -> tuple[str, str, str] | None:
    var = info.variables.get(name)
    return None if var is None else (var.kind, var.field, var.type)


Values = frozenset[str] | None
"""The texts a written subject or predicate can be: a finite set, or ``None`` for any."""
Target = tuple[Values, Values]
"""(subject, predicate) a rule writes."""
_MAX_TEXTS = 64
"""Beyond this many combinations a template counts as writing anything."""


def _meet(a: Values, b: Values) -> Values:
    """The values both sides can take (``None``: any)."""
    if a is None:
        return b
    return a if b is None else a & b


def _shown(values: Values) -> str:
    return "*" if values is None else "|".join(sorted(values))


def _overlap(first: list[Target], second: list[Target]) -> str | None:
    """``(subject, predicate)`` both lists can write (``*`` for any), if any."""
    for s1, p1 in first:
        for s2, p2 in second:
            subject, predicate = _meet(s1, s2), _meet(p1, p2)
            if subject != frozenset() and predicate != frozenset():
                return f"({_shown(subject)}, {_shown(predicate)})"
    return None


def _schedule(cadence: Cadence) -> tuple[Any, ...]:
    """What a cadence means: its count and durations, or its cron fields as croniter
    expands them."""
    if cadence.cron is None:
        return (cadence.kind, cadence.every, cadence.idle, cadence.or_after)
    fields: list[Any] = list(croniter(cadence.cron).expanded)
    if len(fields) == 5:
        fields.append([0])  # at second 0
    if len(fields) == 6:
        fields.append(["*"])  # in any year
    return ("cron", repr(fields), cadence.tz)


def _same_schedule(a: Cadence, b: Cadence) -> bool:
    """``0 3 * * *``, ``00 03 * * 0-6`` and ``0 3 * * * 0`` are one schedule."""
    return a == b or _schedule(a) == _schedule(b)


def _cadence_text(cadence: Cadence) -> str:
    trigger = trigger_text(cadence)
    if trigger is not None:
        return trigger
    when = f"cron '{cadence.cron}'"
    return when if cadence.tz == "UTC" else f"{when} {cadence.tz}"


# --- entry points ------------------------------------------------------------------------


def lint_analysis(analysis: Analysis, source: SourceMap) -> list[LintWarning]:
    """Every lint warning of a checked (valid) pack that no rule silenced, in file order."""
    return _Linter(analysis, source).run()[0]


def lint_file(path: str | Path) -> LintReport:
    """Validate ``path``; when valid, lint it. Never raises for pack problems."""
    report = LintReport(str(path))
    report.errors = validate_file(path)
    if report.errors:
        return report
    pack, source = load_pack_file(path)
    report.warnings, report.suppressed = _Linter(analyze(pack, source), source).run()
    return report
