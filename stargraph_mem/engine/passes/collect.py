"""The lines a pass's rules printed, turned into validated deltas: each rule's references
resolved (episodes, facts, counts, neighbours), the delta built and checked, the facts
it closes and makes followed, so the facts after the pass are known without a read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from stargraph_mem.compiler.expressions import uses_reinforce
from stargraph_mem.compiler.pack import CompiledPack, CompiledRule
from stargraph_mem.compiler.program import RuleProgram
from stargraph_mem.engine.passes.aggregates import HistoryFacts
from stargraph_mem.engine.passes.confidence import confidence_of
from stargraph_mem.engine.passes.fact_list import PassFacts
from stargraph_mem.engine.passes.near_episodes import EpisodeNeighbours
from stargraph_mem.engine.passes.near_pass import NEAR_BINDINGS, NearPass
from stargraph_mem.engine.passes.outputs import PassOutput, RejectedEpisode, Stamp
from stargraph_mem.engine.passes.slot_values import (
    Unresolved,
    filler,
    getter,
    payload_filler,
    sizer,
)
from stargraph_mem.ir.models import (
    ListVar,
)
from stargraph_mem.model import lifecycle
from stargraph_mem.model.deltas import (
    DELTA_BY_KIND,
    DeltaBase,
    FactDelta,
    MemoryDelta,
)
from stargraph_mem.model.layers import (
    DEFAULT_LAYER,
    DEFAULT_MEMORY_TYPE,
    LAYERS,
    MEMORY_TYPES,
    episode_trust,
    least_trust,
    stored_trust,
)
from stargraph_mem.model.limits import DEFAULT_FACT_BYTES, KEY_BYTES, fact_size_problem, utf8_size
from stargraph_mem.model.time import to_us, to_utc
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.scope import Partition


class Runtime(Protocol):
    """What a pass's collector uses of its runtime: the pack, its rules by index, the
    episode fields that are built in, and each rule's plan (made once per rule)."""

    compiled: CompiledPack
    rules: dict[int, CompiledRule]
    builtins: set[str]
    plans: dict[tuple[str, Stamp | None], Plan]


class Collector:
    """Turns printed rule lines back into deltas, resolving bindings from Python data."""

    def __init__(
        self,
        runtime: Runtime,
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
        self.now_us = to_us(to_utc(now))
        self.episodes = episodes
        self.out = out
        self.facts = PassFacts(facts)
        self.temp: dict[str, str | None] = {}
        self.keep_matched = False
        self.history: HistoryFacts | None = None
        self.times: dict[str, int] | None = None
        self.archived: dict[str, EngineFact] = {}
        """The partition's archived facts a pattern may match (they can be replaced)."""
        self.fact_bytes = DEFAULT_FACT_BYTES
        """The most UTF-8 bytes a delta's rendered text may hold (see :meth:`Plan.too_large`)."""
        self.key_bytes = utf8_size(partition.key)
        """The partition key's share of an indexed key (see :data:`KEY_BYTES`)."""
        self.near: NearPass | None = None
        """The pass's ``near`` neighbours (a pack whose fact patterns test ``near``)."""
        self.episode_near: EpisodeNeighbours | None = None
        """The pass's neighbour episodes (a pack with ``earlier`` patterns testing ``near``)."""

    def facts_after(self) -> list[EngineFact]:
        """Current facts after the pass's deltas (the order of ``current_facts``)."""
        return self.facts.after()

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
        raw: dict[str, str] = {}
        temp_id: str | None = None
        eps_iter = iter(eps)
        try:
            for tok, value in zip(program.tokens, tokens, strict=True):
                if tok.what == "temp_id":
                    temp_id = value
                elif tok.what == "episode_n":
                    refs[tok.alias] = self.episode(int(value))
                elif tok.what == "fact_id":
                    refs[tok.alias] = self.fact(value)
                    raw[tok.alias] = value
                elif tok.what == "near_episode":
                    if self.episode_near is None:
                        raise Unresolved(f"no neighbour episode {value} for '{tok.alias}'")
                    refs[tok.alias] = self.episode_near.record(value)
                    raw[tok.alias] = value
                elif tok.what == "would_be":
                    refs[tok.alias + "#fact"] = self.fact(value)
                elif tok.what == "hcount":
                    assert self.history is not None
                    ids = self.history.counted(tok.rel, n)
                    refs[tok.alias] = (int(value), [_Seen(i) for i in ids])
                else:
                    refs[tok.alias] = (
                        int(value),
                        [self.episodes[int(e) - 1] for e in next(eps_iter)],
                    )
            if self.near is not None:
                self.near.resolve(rule.index, n, raw, refs)
            if self.episode_near is not None:
                self.episode_near.resolve(rule.index, n, raw, refs)
            delta = self.build(program, anchor, refs)
            if self.stamp is not None and delta.kind not in self.stamp.kinds:
                raise Unresolved(f"rule '{self.stamp.rule_id}' does not emit {delta.kind}")
            closed = self.close_replaced(delta)
        except (KeyError, Unresolved) as exc:
            self.reject(anchor, rule, f"unresolved reference: {exc}", temp_id)
            return
        except _TooLarge as exc:
            self.reject(anchor, rule, str(exc), temp_id)
            return
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            self.reject(anchor, rule, f"invalid delta: {where}: {first['msg']}", temp_id)
            return
        self.out.deltas.append(delta)
        if self.keep_matched:
            self.out.matched.append(_matched(anchor, refs))
        if isinstance(delta, FactDelta):
            self.make(delta, program, refs, closed, temp_id)
        if delta.reinforced_ids:
            seen = self.observed(delta, program, refs, default=0)
            for fid in delta.reinforced_ids:
                known = self.facts.get(fid)
                if known is not None:
                    at, count, observed = lifecycle.reinforced(known, self.now_us, seen)
                    self.facts[fid] = replace(
                        known, reinforced_at_us=at, reinforcement_count=count, observed_us=observed
                    )

    def make(
        self,
        delta: FactDelta,
        program: RuleProgram,
        refs: Mapping[str, Any],
        closed: Sequence[EngineFact],
        temp_id: str | None,
    ) -> None:
        """The fact ``delta`` makes, as the fact store will hold it (see
        :func:`~stargraph_mem.model.lifecycle.carry`), current for the rest of the pass."""
        fid = delta.new_fact_id
        if temp_id is not None:
            self.temp[temp_id] = fid
        own = lifecycle.Carried(self.now_us, 0, self.observed(delta, program, refs))
        made = lifecycle.carry(delta.fact_lifecycle, own, closed)
        subject, predicate, obj = delta.fact.triple
        self.facts[fid] = EngineFact(
            fid,
            subject,
            predicate,
            obj,
            delta.confidence,
            self.now_us,
            made.reinforced_at_us,
            delta.rule_id,
            tuple(delta.source_episode_ids),
            made.observed_us,
            reinforcement_count=made.reinforcement_count,
            access_count=made.access_count,
            last_access_us=made.last_access_us,
            pinned=made.pinned,
            payload=delta.fact.payload or None,
            layer=delta.layer or DEFAULT_LAYER,
            memory_type=delta.memory_type or DEFAULT_MEMORY_TYPE,
            trust=1.0 if delta.trust is None else delta.trust,
        )

    def episode(self, n: int) -> EpisodeRecord:
        """The episode of ordinal ``n``: of this pass, or (``n < 0``) of an earlier one."""
        if n > 0:
            return self.episodes[n - 1]
        if self.history is None or n not in self.history.seeds:
            raise Unresolved(f"episode ordinal {n}")
        return self.history.seeds[n]

    def observed(
        self,
        delta: DeltaBase,
        program: RuleProgram,
        refs: Mapping[str, Any],
        default: int | None = None,
    ) -> int:
        """The time of the newest source episode of ``delta`` (as the fact store works it
        out from the stored episodes), or ``default`` (the pass time) when none is known."""
        times = self.times
        if times is None:
            times = self.times = {e.id: to_us(e.timestamp) for e in self.episodes}
            if self.history is not None:
                times.update((e.id, to_us(e.timestamp)) for e in self.history.seeds.values())
        cited = self.history.times if self.history is not None else {}
        found = [
            times[e] if e in times else cited[e]
            for e in delta.source_episode_ids
            if e in times or e in cited
        ]
        for alias in program.info.rule.emit.sources:
            if program.info.aliases.get(alias) == "fact":
                fact = refs[alias]
                found.append(fact.observed_us or fact.valid_from_us)
        return max(found, default=self.now_us if default is None else default)

    def close_replaced(self, delta: MemoryDelta) -> list[EngineFact]:
        """Replaced facts must be current facts of this partition (or archived ones, matched,
        that the delta may restore: see :func:`~stargraph_mem.model.lifecycle.refusal`),
        each named once; they stop being current for the rest of the pass. Otherwise the
        episode is rejected here instead of failing the whole pass at apply time."""
        replaces = delta.closed_ids
        if not replaces:
            return []
        if len(set(replaces)) != len(replaces):
            raise Unresolved("replaces names the same fact twice")
        missing = [
            fid for fid in replaces if fid not in self.facts and not self.restorable(fid, delta)
        ]
        if missing:
            raise Unresolved(
                "replaces names facts that are not current in this partition: " + ", ".join(missing)
            )
        into = delta.successor_id if not delta.creates else None
        if into is not None and into not in self.facts:
            raise Unresolved(f"merged_into names a fact not current in this partition: {into}")
        if delta.flags:  # challenged: the facts stay current, flagged
            status = delta.close_status
            for fid in replaces:
                known = self.facts.get(fid)
                assert known is not None  # checked above
                self.facts[fid] = replace(known, status=status)
            return []
        return [
            self.facts.pop(fid) if fid in self.facts else self.archived.pop(fid) for fid in replaces
        ]

    def restorable(self, fid: str, delta: MemoryDelta) -> bool:
        """Whether ``fid`` is an archived fact of the pass that ``delta`` may name."""
        return fid in self.archived and lifecycle.refusal(lifecycle.ARCHIVED, False, delta) is None

    def reject(
        self, anchor: EpisodeRecord | None, rule: CompiledRule, reason: str, temp_id: str | None
    ) -> None:
        if temp_id is not None:
            self.temp[temp_id] = None
        self.out.rejected.append(RejectedEpisode(anchor.id if anchor else None, rule.id, reason))

    def fact(self, fid: str) -> EngineFact:
        if fid in self.temp:
            final = self.temp[fid]
            if final is None:
                raise Unresolved(f"fact from a rejected delta ({fid})")
            fid = final
        found = self.facts.get(fid) or self.archived.get(fid)
        if found is None:
            raise Unresolved(f"fact {fid}")
        return found

    # --- delta construction ------------------------------------------------------------

    def plan(self, program: RuleProgram) -> Plan:
        key = (program.symbol, self.stamp)
        plan = self.runtime.plans.get(key)
        if plan is None:
            plan = self.runtime.plans[key] = Plan(self.runtime, program, self.stamp)
        return plan

    def build(
        self, program: RuleProgram, anchor: EpisodeRecord | None, refs: Mapping[str, Any]
    ) -> MemoryDelta:
        plan = self.plan(program)
        values = {name: get(refs, anchor) for name, get in plan.getters}
        problem = plan.too_large(values, self.fact_bytes, KEY_BYTES - self.key_bytes)
        if problem is not None:
            raise _TooLarge(problem)
        body: dict[str, Any] = {
            "user": self.partition.user,
            "agent": self.partition.agent,
            "source_episode_ids": self.sources(program, anchor, refs),
            "promotion_ts": self.now,
            "rule_id": plan.rule_id,
            "confidence": plan.confidence(values, refs, self.now_us),
            "reason": plan.reason_prefix + plan.reason(values),
            "bindings": {
                **{name: _json_value(values[name]) for name in plan.binding_names},
                **refs.get(NEAR_BINDINGS, {}),
            },
        }
        fields = plan.fields
        if "reinforces" in fields:
            body["reinforces"] = [refs[a].id for a in plan.emit.reinforces]
        if plan.status is not None:
            body["status"] = plan.status
        if plan.merged_into is not None:
            body["merged_into"] = refs[plan.merged_into].id
        if "lifecycle" in fields and plan.lifecycle != "new":
            body["lifecycle"] = plan.lifecycle
        if "replaces" in fields:
            body["replaces"] = self.replaces(program, refs, values)
        if plan.model.creates:
            body["fact"] = {
                "subject": plan.subject(values),
                "predicate": plan.predicate(values),
                "object": plan.object(values),
                "payload": {key: fill(values) for key, fill in plan.payload},
            }
            self.placed(body, plan, values, refs)
            trust = stored_trust(self.trust_of(program, anchor, refs))
            if trust is not None:
                body["trust"] = trust
        return plan.model.model_validate(body)

    def placed(
        self,
        body: dict[str, Any],
        plan: Plan,
        values: Mapping[str, Any],
        refs: Mapping[str, Any],
    ) -> None:
        """The layer and memory type of the fact a delta makes: the emit's, else the pack's
        default, else the first replaced fact's; left out of ``body`` when the default."""
        replaced: EngineFact | None = None
        if plan.layer is None or plan.memory_type is None:
            for fid in body.get("replaces", ()):
                replaced = self.facts.get(fid) or self.archived.get(fid)
                if replaced is not None:
                    break
        for name, fill, names, default in (
            ("layer", plan.layer, LAYERS, DEFAULT_LAYER),
            ("memory_type", plan.memory_type, MEMORY_TYPES, DEFAULT_MEMORY_TYPE),
        ):
            if fill is not None:
                value = fill(values)
                if value not in names:
                    raise Unresolved(f"{name} {value!r} is not one of {', '.join(names)}")
            elif replaced is not None:
                value = getattr(replaced, name)
            else:
                continue
            if value != default:
                body[name] = value

    def trust_of(
        self, program: RuleProgram, anchor: EpisodeRecord | None, refs: Mapping[str, Any]
    ) -> float:
        """The least trust of a delta's sources: its episodes' (``metadata.trust`` or
        ``.source``) and its source facts'."""
        found: list[float] = [] if anchor is None else [episode_trust(anchor.metadata)]
        for alias in program.info.rule.emit.sources:
            kind = program.info.aliases[alias]
            if kind == "earlier":
                found.append(episode_trust(refs[alias].metadata))
            elif kind == "count":
                found += [
                    episode_trust(r.metadata) for r in refs[alias][1] if hasattr(r, "metadata")
                ]
            elif kind == "fact":
                found.append(refs[alias].trust)
        return least_trust(found)

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
        return list(dict.fromkeys(ids)) if len(ids) > 1 else ids


class _TooLarge(Exception):
    """A delta's rendered text would exceed a size limit (the message says which)."""


class Plan:
    """What building a rule's delta needs, worked out once per rule and pass."""

    def __init__(self, runtime: Runtime, program: RuleProgram, stamp: Stamp | None) -> None:
        info = program.info
        emit = self.emit = info.rule.emit
        self.model: type[MemoryDelta] = DELTA_BY_KIND[emit.kind]
        self.fields = frozenset(self.model.model_fields)
        """The delta's fields: which of the emit's parts the body takes."""
        self.getters = [
            (name, getter(var, runtime.builtins)) for name, var in info.variables.items()
        ]
        self.binding_names = sorted(info.variables)
        self.rule_id = stamp.rule_id if stamp else info.rule.id
        self.reason_prefix = f"{info.rule.id}: " if stamp else ""
        self.reason = filler(emit.reason)
        self.subject = filler(emit.subject)
        self.predicate = filler(emit.predicate)
        self.object = filler(emit.object)
        defaults = runtime.compiled.pack.defaults
        layer = emit.layer if emit.layer is not None else defaults.layer
        kind = emit.memory_type if emit.memory_type is not None else defaults.memory_type
        self.layer = None if layer is None else filler(layer)
        self.memory_type = None if kind is None else filler(kind)
        self.sizes = [
            (what, sizer(text))
            for what, text in (
                ("reason", emit.reason),
                ("subject", emit.subject),
                ("predicate", emit.predicate),
                ("object", emit.object),
                *((f"payload.{key}", t) for key, t in emit.payload.items() if isinstance(t, str)),
            )
        ]
        """What :meth:`too_large` measures: each text template of the emit."""
        declared = runtime.compiled.pack.fact_payload
        self.payload = [
            (key, payload_filler(t, declared.get(key), info)) for key, t in emit.payload.items()
        ]
        self.status = emit.status
        self.merged_into = emit.merged_into
        self.lifecycle = (
            "reinforce" if uses_reinforce(emit.confidence) else "inherit" if info.sweep else "new"
        )
        """An update's lifecycle: a confirmation (``reinforce`` arithmetic), a sweep's
        change that is no observation (``inherit``), or an observation (``new``)."""
        self.confidence = confidence_of(emit.confidence, defaults)

    def too_large(self, values: Mapping[str, Any], most: int, key_room: int) -> str | None:
        """Why the delta would be too large to build (``None``: it fits), measured before
        any text is built: its reason, subject, predicate, object and payload texts over
        ``most`` UTF-8 bytes together, or its subject and predicate over ``key_room``
        (what an indexed key leaves beside the partition key)."""
        sizes = {what: size(values) for what, size in self.sizes}
        problem = fact_size_problem(
            sizes, most, key_room, whole="its rendered text", key="its subject and predicate"
        )
        return None if problem is None else f"delta too large: {problem}"


def _matched(anchor: EpisodeRecord | None, refs: Mapping[str, Any]) -> dict[str, list[str]]:
    """Ids of what each pattern of a fired rule matched (for traces)."""
    out: dict[str, list[str]] = {"episode": [anchor.id]} if anchor is not None else {}
    for alias, ref in refs.items():
        if alias == NEAR_BINDINGS or alias.endswith(("#cos", "#surprise")):
            continue
        if isinstance(ref, tuple):
            out[alias] = [r.id for r in ref[1]]
        elif alias.endswith("#fact"):
            out[alias[: -len("#fact")] + " fact"] = [ref.id]
        else:
            out[alias] = [ref.id]
    return out


@dataclass(frozen=True, slots=True)
class _Seen:
    """An episode a history count counted, known by its id only."""

    id: str


def _json_value(value: Any) -> Any:
    if type(value) is str:
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value
