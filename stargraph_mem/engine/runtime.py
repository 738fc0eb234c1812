"""The CLIPS runtime: a compiled pack loaded once, run over one partition's episodes per pass.

A pass asserts the pass time, a cursor, the partition's current facts and the episodes
(in insertion order, in chunks), runs the agenda, and turns the lines the rules printed
into validated :data:`MemoryDelta` objects. Only fields that rules test enter CLIPS.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import clips
from pydantic import ValidationError

from stargraph_mem.compiler.clips_env import load_constructs, new_environment
from stargraph_mem.compiler.generator import OUT, RuleProgram, slot_name
from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.errors import EngineError
from stargraph_mem.ir.checks import VarInfo, parse_template
from stargraph_mem.ir.models import LinearConfidence, ListVar, VarConfidence
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import (
    AddDelta,
    DeleteDelta,
    FactPayload,
    MemoryDelta,
    NoopDelta,
    UpdateDelta,
    to_utc,
)
from stargraph_mem.stores.scope import Partition

NIL = clips.Symbol("nil")
TRUE = clips.Symbol("TRUE")
FALSE = clips.Symbol("FALSE")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_CHUNK = 256
"""Episodes asserted per agenda run: small chunks keep CLIPS join memories small."""


def to_micros(value: datetime) -> int:
    """UTC microseconds since the epoch (exact integer arithmetic)."""
    delta = to_utc(value) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


@dataclass(frozen=True, slots=True)
class RejectedEpisode:
    """An episode (or the delta a rule made from it) that could not be used, and why."""

    episode_id: str | None
    rule_id: str | None
    reason: str


@dataclass
class PassOutput:
    """What one pass produced, before it is applied."""

    deltas: list[MemoryDelta] = field(default_factory=list)
    rejected: list[RejectedEpisode] = field(default_factory=list)
    fired: dict[str, int] = field(default_factory=dict)
    episodes: int = 0


class _BadValue(Exception):
    pass


def _normalise(value: Any, ftype: str) -> Any:
    """An episode metadata value as the CLIPS slot stores it for the declared type."""
    if value is None:
        return "" if ftype == "list" else NIL
    if ftype == "string" and isinstance(value, str):
        return value
    if ftype == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if ftype == "number" and numeric and math.isfinite(value):
        return float(value)
    if ftype == "boolean" and isinstance(value, bool):
        return TRUE if value else FALSE
    if ftype == "timestamp" and isinstance(value, str):
        try:
            return to_micros(datetime.fromisoformat(value))
        except ValueError as exc:
            raise _BadValue(f"not an ISO-8601 timestamp with offset: {value!r}") from exc
    if ftype == "list" and isinstance(value, list):
        if all(isinstance(v, str) and v and v.split() == [v] for v in value):
            return " ".join(value)
        raise _BadValue("list items must be non-empty strings without white space")
    raise _BadValue(f"expected {ftype}, got {type(value).__name__}")


def _builtin(record: EpisodeRecord, name: str) -> Any:
    if name == "timestamp":
        return to_micros(record.timestamp)
    value = getattr(record, name)
    return NIL if value is None else value


@lru_cache(maxsize=4096)
def _template(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(parse_template(text))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def render(text: str, values: Mapping[str, Any]) -> str:
    """Fill a template from resolved variable values."""
    parts = _template(text)
    if len(parts) == 1:
        kind, value = parts[0]
        return value if kind == "text" else _text(values[value])
    return "".join([v if k == "text" else _text(values[v]) for k, v in parts])


class PackRuntime:
    """A compiled pack loaded into one CLIPS environment, reused across passes."""

    def __init__(self, compiled: CompiledPack) -> None:
        self.compiled = compiled
        built = compiled.take_environment()
        if built is None:
            built = new_environment()
            load_constructs(built, compiled.clips)
        self.env = built
        self.episode_tpl = self.env.find_template("sm-episode")
        self.fact_tpl = self.env.find_template("sm-fact")
        self.rules = compiled.by_index()
        self.fields = compiled.episode_fields
        self.builtins = {"id", "session", "source_node", "content", "timestamp"}
        self._dir = tempfile.mkdtemp(prefix="stargraph-")
        self._out = Path(self._dir) / "deltas.out"

    @property
    def sha256(self) -> str:
        return self.compiled.sha256

    # --- input ------------------------------------------------------------------------

    def _episode_slots(self, record: EpisodeRecord) -> dict[str, Any]:
        slots: dict[str, Any] = {}
        for name, ftype in self.fields.items():
            if name in self.builtins:
                slots[slot_name(name)] = _builtin(record, name)
            else:
                slots[slot_name(name)] = _normalise(record.metadata.get(name), ftype)
        return slots

    def _assert_fact(self, fact: EngineFact) -> None:
        self.fact_tpl.assert_fact(
            f_id=fact.id,
            f_subject=fact.subject,
            f_predicate=fact.predicate,
            f_object=fact.object,
            f_confidence=float(fact.confidence),
            f_valid_from=fact.valid_from_us,
            f_reinforced_at=fact.reinforced_at_us,
            f_rule_id=fact.rule_id,
        )

    def _assert_episode(self, n: int, record: EpisodeRecord, ok: int, out: PassOutput) -> None:
        try:
            slots = self._episode_slots(record)
        except _BadValue as exc:
            out.rejected.append(RejectedEpisode(record.id, None, f"metadata: {exc}"))
            self.episode_tpl.assert_fact(n=n, ok=0)
            return
        self.episode_tpl.assert_fact(n=n, ok=ok, **slots)

    def _run(self, budget: int) -> None:
        fired = self.env.run(budget)
        if fired >= budget and next(iter(self.env.activations()), None) is not None:
            raise EngineError(
                f"pack '{self.compiled.name}' fired more than {budget} rules in one step; "
                "a rule probably re-triggers itself",
                pack=self.compiled.name,
            )

    # --- pass -------------------------------------------------------------------------

    def run_pass(
        self,
        *,
        partition: Partition,
        now: datetime,
        episodes: Sequence[EpisodeRecord],
        facts: Iterable[EngineFact] = (),
        eligible: Mapping[int, Iterable[int]] | None = None,
        chunk: int = DEFAULT_CHUNK,
        stamp: Stamp | None = None,
    ) -> PassOutput:
        """Run every compiled rule once over ``episodes`` (in order) and collect deltas.

        ``eligible`` maps a rule index to the seqs it may see (after its watermark, select
        and salience gate); ``None`` means every rule sees every episode.
        """
        now_us = to_micros(now)
        fact_list = list(facts)
        out = PassOutput(episodes=len(episodes))
        ok_sets, groups = self._eligibility(episodes, eligible)
        self.env.reset()
        self.env.eval(f'(open "{self._out.as_posix()}" {OUT} "w")')
        try:
            self.env.find_template("sm-pass").assert_fact(now=now_us)
            self.env.find_template("sm-cursor").assert_fact(n=1)
            elig = self.env.find_template("sm-elig")
            for set_id, members in groups.items():
                for idx in members:
                    elig.assert_fact(set=set_id, r=clips.Symbol(self.rules[idx].program.symbol))
            if self.compiled.matches_facts:
                for fact in fact_list:
                    self._assert_fact(fact)
            budget = 50 * (chunk + len(fact_list)) + 10_000
            for start in range(0, len(episodes), chunk):
                for i in range(start, min(start + chunk, len(episodes))):
                    self._assert_episode(i + 1, episodes[i], ok_sets[i], out)
                self._run(budget)
            self.env.find_template("sm-end").assert_fact()
            self._run(budget)
        finally:
            self.env.eval(f"(close {OUT})")
        lines = self._out.read_text(encoding="utf-8").splitlines()
        _Collector(self, partition, now, episodes, fact_list, out, stamp).collect(lines)
        self.env.reset()
        return out

    def _eligibility(
        self, episodes: Sequence[EpisodeRecord], eligible: Mapping[int, Iterable[int]] | None
    ) -> tuple[list[int], dict[int, tuple[int, ...]]]:
        """Per episode, the id of its eligibility set; and each set's rule indexes."""
        if eligible is None:
            return [1] * len(episodes), {1: tuple(sorted(self.rules))}
        sets = {idx: set(seqs) for idx, seqs in eligible.items() if idx in self.rules}
        ids: dict[tuple[int, ...], int] = {}
        out: list[int] = []
        for ep in episodes:
            members = tuple(idx for idx in sorted(sets) if ep.seq in sets[idx])
            out.append(ids.setdefault(members, len(ids) + 1))
        return out, {set_id: members for members, set_id in ids.items()}

    def close(self) -> None:
        self._out.unlink(missing_ok=True)
        Path(self._dir).rmdir()


@dataclass(frozen=True)
class Stamp:
    """The specification's contract: stamp a consolidation rule's id on every delta and
    keep only the kinds it emits (the pack rule that decided is kept in the reason)."""

    rule_id: str
    kinds: tuple[str, ...] = ("add", "update", "delete", "noop")


@dataclass
class _PassFact:
    id: str
    subject: str
    predicate: str
    object: str
    confidence: float
    rule_id: str
    valid_from: datetime
    reinforced_at: datetime
    source_episode_ids: tuple[str, ...]


class _Collector:
    """Turns printed rule lines back into deltas, resolving bindings from Python data."""

    def __init__(
        self,
        runtime: PackRuntime,
        partition: Partition,
        now: datetime,
        episodes: Sequence[EpisodeRecord],
        facts: list[EngineFact],
        out: PassOutput,
        stamp: Stamp | None = None,
    ) -> None:
        self.stamp = stamp
        self.runtime = runtime
        self.partition = partition
        self.now = now
        self.episodes = episodes
        self.out = out
        self.facts: dict[str, _PassFact] = {f.id: self._from_engine(f) for f in facts}
        self.temp: dict[str, str | None] = {}

    @staticmethod
    def _from_engine(f: EngineFact) -> _PassFact:
        return _PassFact(
            f.id,
            f.subject,
            f.predicate,
            f.object,
            f.confidence,
            f.rule_id,
            from_micros(f.valid_from_us),
            from_micros(f.reinforced_at_us),
            f.source_episode_ids,
        )

    def collect(self, lines: list[str]) -> None:
        for line in lines:
            head, *eps = line.split(" | ")
            tokens = head.split()
            rule = self.runtime.rules[int(tokens[0])]
            rid = rule.id
            self.out.fired[rid] = self.out.fired.get(rid, 0) + 1
            self.one(rule, int(tokens[1]), tokens[2:], [e.split() for e in eps])

    def one(self, rule: CompiledRule, n: int, tokens: list[str], eps: list[list[str]]) -> None:
        program = rule.program
        anchor = self.episodes[n - 1] if n > 0 else None
        refs: dict[str, Any] = {}
        temp_id: str | None = None
        eps_iter = iter(eps)
        try:
            for tok, value in zip(program.tokens, tokens, strict=True):
                if tok.what == "temp_id":
                    temp_id = value
                elif tok.what == "episode_n":
                    refs[tok.alias] = self.episodes[int(value) - 1]
                elif tok.what == "fact_id":
                    refs[tok.alias] = self.fact(value)
                elif tok.what == "would_be":
                    refs[tok.alias + "#fact"] = self.fact(value)
                else:
                    refs[tok.alias] = (
                        int(value),
                        [self.episodes[int(e) - 1] for e in next(eps_iter)],
                    )
            delta = self.build(program, anchor, refs)
            if self.stamp is not None and delta.kind not in self.stamp.kinds:
                raise _Unresolved(f"rule '{self.stamp.rule_id}' does not emit {delta.kind}")
            self.close_replaced(delta)
        except (KeyError, _Unresolved) as exc:
            self.reject(anchor, rule, f"unresolved reference: {exc}", temp_id)
            return
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            self.reject(anchor, rule, f"invalid delta: {where}: {first['msg']}", temp_id)
            return
        self.out.deltas.append(delta)
        if temp_id is not None and isinstance(delta, AddDelta | UpdateDelta):
            self.temp[temp_id] = delta.new_fact_id
            self.facts[delta.new_fact_id] = _PassFact(
                delta.new_fact_id,
                delta.fact.subject,
                delta.fact.predicate,
                delta.fact.object,
                delta.confidence,
                delta.rule_id,
                self.now,
                self.now,
                tuple(delta.source_episode_ids),
            )

    def close_replaced(self, delta: MemoryDelta) -> None:
        """Replaced facts must be current facts of this partition, each named once; they
        stop being current for the rest of the pass. Otherwise the episode is rejected
        here instead of failing the whole pass at apply time."""
        if not isinstance(delta, UpdateDelta | DeleteDelta):
            return
        replaces = delta.replaces
        if len(set(replaces)) != len(replaces):
            raise _Unresolved("replaces names the same fact twice")
        missing = [fid for fid in replaces if fid not in self.facts]
        if missing:
            raise _Unresolved(
                "replaces names facts that are not current in this partition: " + ", ".join(missing)
            )
        for fid in replaces:
            del self.facts[fid]

    def reject(
        self, anchor: EpisodeRecord | None, rule: CompiledRule, reason: str, temp_id: str | None
    ) -> None:
        if temp_id is not None:
            self.temp[temp_id] = None
        self.out.rejected.append(RejectedEpisode(anchor.id if anchor else None, rule.id, reason))

    def fact(self, fid: str) -> _PassFact:
        if fid in self.temp:
            final = self.temp[fid]
            if final is None:
                raise _Unresolved(f"fact from a rejected delta ({fid})")
            fid = final
        if fid not in self.facts:
            raise _Unresolved(f"fact {fid}")
        return self.facts[fid]

    # --- delta construction ------------------------------------------------------------

    def value(self, var: VarInfo, refs: Mapping[str, Any], anchor: EpisodeRecord | None) -> Any:
        if var.kind == "count":
            return refs[var.alias][0]
        if var.kind == "fact":
            fact = refs[var.alias]
            return getattr(fact, var.field)
        record = anchor if var.kind == "episode" else refs[var.alias]
        if record is None:
            raise _Unresolved(f"no episode for '{var.name}'")
        if var.field in self.runtime.builtins:
            return getattr(record, var.field)
        return record.metadata.get(var.field)

    def build(
        self, program: RuleProgram, anchor: EpisodeRecord | None, refs: Mapping[str, Any]
    ) -> MemoryDelta:
        info = program.info
        emit = info.rule.emit
        values = {name: self.value(var, refs, anchor) for name, var in info.variables.items()}
        common: dict[str, Any] = {
            "user": self.partition.user,
            "agent": self.partition.agent,
            "source_episode_ids": self.sources(program, anchor, refs),
            "promotion_ts": self.now,
            "rule_id": self.stamp.rule_id if self.stamp else info.rule.id,
            "confidence": self.confidence(program, values),
            "reason": (f"{info.rule.id}: " if self.stamp else "") + render(emit.reason, values),
            "bindings": {k: _json_value(v) for k, v in sorted(values.items())},
        }
        if emit.kind == "noop":
            reinforces = [refs[a].id for a in emit.reinforces]
            return NoopDelta(reinforces=reinforces, **common)
        replaces = self.replaces(program, refs, values)
        if emit.kind == "delete":
            return DeleteDelta(replaces=replaces, **common)
        assert emit.subject is not None and emit.predicate is not None and emit.object is not None
        payload = FactPayload(
            subject=render(emit.subject, values),
            predicate=render(emit.predicate, values),
            object=render(emit.object, values),
            payload={k: render(t, values) for k, t in emit.payload.items()},
        )
        if emit.kind == "add":
            return AddDelta(fact=payload, **common)
        return UpdateDelta(fact=payload, replaces=replaces, **common)

    def replaces(
        self, program: RuleProgram, refs: Mapping[str, Any], values: Mapping[str, Any]
    ) -> list[str]:
        out: list[str] = []
        for ref in program.info.rule.emit.replaces:
            if isinstance(ref, ListVar):
                out.extend(values[ref.list] or [])
            elif program.info.aliases.get(ref) == "fact":
                out.append(refs[ref].id)
            else:
                out.append(refs[ref + "#fact"].id)
        return out

    def sources(
        self, program: RuleProgram, anchor: EpisodeRecord | None, refs: Mapping[str, Any]
    ) -> list[str]:
        ids: list[str] = [anchor.id] if anchor is not None else []
        for alias in program.info.rule.emit.sources:
            kind = program.info.aliases[alias]
            if kind in ("episode",):
                continue
            if kind == "earlier":
                ids.append(refs[alias].id)
            elif kind == "count":
                ids.extend(r.id for r in refs[alias][1])
            else:
                ids.extend(refs[alias].source_episode_ids)
        return list(dict.fromkeys(ids))

    def confidence(self, program: RuleProgram, values: Mapping[str, Any]) -> float:
        conf = program.info.rule.emit.confidence
        if conf is None:
            return float(self.runtime.compiled.pack.defaults.confidence)
        if isinstance(conf, LinearConfidence):
            raw = conf.base + conf.per * float(values[conf.var])
            # same operations, same order as the compiled CLIPS expression
            return math.floor(max(0.0, min(conf.max, raw)) * 1_000_000.0 + 0.5) / 1_000_000.0
        if isinstance(conf, VarConfidence):
            return max(0.0, min(1.0, float(values[conf.from_])))
        return float(conf)


class _Unresolved(Exception):
    pass


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value
