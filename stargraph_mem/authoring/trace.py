"""Why a delta was made: its rule, bindings, and the episodes and facts it matched.

One structure, :class:`DeltaTrace`, describes a delta fresh from a pass (``consolidate
--trace``, ``test --trace``) and the delta behind a stored fact (``explain``), and one
renderer, :func:`trace_lines`, prints both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.errors import FactNotFoundError
from stargraph_mem.model.deltas import FactDelta, MemoryDelta
from stargraph_mem.model.facts import Fact, StatusChange, StatusEvent, status_changes
from stargraph_mem.stores.fact import Explanation

Triple = tuple[str, str, str]
LABEL_WIDTH = 10


@dataclass(frozen=True)
class TracedEpisode:
    """An episode a delta came from; only ``id`` is known when the store lacks it."""

    id: str
    session: str | None = None
    timestamp: datetime | None = None
    content: str | None = None


@dataclass(frozen=True)
class KnownFact:
    """What a trace shows of a fact: its statement and the rule that made it."""

    triple: Triple
    rule_id: str


@dataclass(frozen=True)
class TracedFact:
    """A fact a delta replaced or reinforced (``fact`` is ``None`` when unknown)."""

    id: str
    role: str
    fact: KnownFact | None = None


@dataclass(frozen=True)
class DeltaTrace:
    """A delta with what it matched: rule, bindings, source episodes, facts it touched."""

    kind: str
    rule_id: str
    delta_id: str
    confidence: float
    reason: str
    bindings: Mapping[str, Any]
    triple: Triple | None
    fact_id: str | None
    episodes: tuple[TracedEpisode, ...]
    facts: tuple[TracedFact, ...]
    matched: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Pattern alias → ids it matched beyond ``episodes`` and ``facts``; fresh deltas only
    (the store keeps a delta's sources and touched facts, not every match)."""


# --- building -----------------------------------------------------------------------------


def _triple(delta: MemoryDelta) -> Triple | None:
    if isinstance(delta, FactDelta):
        return delta.fact.triple
    return None


def touched_facts(delta: MemoryDelta) -> list[tuple[str, str]]:
    """``(fact id, role)`` for every fact a delta replaces, merges into or reinforces."""
    into = getattr(delta, "merged_into", None)
    return [
        *((fid, "replaces") for fid in delta.closed_ids),
        *(() if into is None else ((into, "merged_into"),)),
        *((fid, "reinforces") for fid in delta.reinforced_ids),
    ]


def known_fact(fact: Fact) -> KnownFact:
    return KnownFact((fact.subject, fact.predicate, fact.object), fact.rule_id)


def delta_trace(
    delta: MemoryDelta,
    episodes: Mapping[str, TracedEpisode],
    facts: Mapping[str, KnownFact],
    matched: Mapping[str, Sequence[str]] | None = None,
) -> DeltaTrace:
    """The trace of a delta, looking its source episodes and touched facts up by id."""
    created = delta.new_fact_id if isinstance(delta, FactDelta) else None
    return DeltaTrace(
        kind=delta.kind,
        rule_id=delta.rule_id,
        delta_id=delta.delta_id,
        confidence=delta.confidence,
        reason=delta.reason,
        bindings=dict(delta.bindings),
        triple=_triple(delta),
        fact_id=created,
        episodes=tuple(episodes.get(e, TracedEpisode(e)) for e in delta.source_episode_ids),
        facts=tuple(TracedFact(fid, role, facts.get(fid)) for fid, role in touched_facts(delta)),
        matched=_extra_matches(delta, matched or {}),
    )


def _extra_matches(
    delta: MemoryDelta, matched: Mapping[str, Sequence[str]]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What the rule matched beyond the delta's sources and the facts it touches (a fact
    pattern that only bound values, a count's episodes not kept as sources, ...)."""
    shown = set(delta.source_episode_ids) | {fid for fid, _ in touched_facts(delta)}
    extra = {alias: tuple(i for i in ids if i not in shown) for alias, ids in matched.items()}
    return tuple((alias, ids) for alias, ids in sorted(extra.items()) if ids)


def pass_facts(deltas: Iterable[MemoryDelta]) -> dict[str, KnownFact]:
    """The facts a pass's add and update deltas create, by id (stored or not)."""
    return {
        d.new_fact_id: KnownFact(d.fact.triple, d.rule_id)
        for d in deltas
        if isinstance(d, FactDelta)
    }


async def pass_traces(mem: Consolidator, report: PassReport) -> list[DeltaTrace]:
    """Traces of a pass's deltas; episodes and earlier facts are read from ``mem``'s stores."""
    ids = list(dict.fromkeys(e for d in report.deltas for e in d.source_episode_ids))
    records = await mem.memory.by_ids(ids)
    episodes = {r.id: TracedEpisode(r.id, r.session, r.timestamp, r.content) for r in records}
    facts = pass_facts(report.deltas)
    for delta in report.deltas:
        for fid, _ in touched_facts(delta):
            if fid not in facts:
                try:
                    facts[fid] = known_fact(await mem.fact_store.get(fid))
                except FactNotFoundError:
                    continue
    matched = report.matched or [{} for _ in report.deltas]
    return [delta_trace(d, episodes, facts, m) for d, m in zip(report.deltas, matched, strict=True)]


def explanation_trace(why: Explanation) -> DeltaTrace:
    """The trace of the delta that made a stored fact, from its explanation."""
    fact, bundle = why.fact, why.provenance
    made = next((row for row in why.audit if row.delta_id == fact.delta_id), None)
    kind = made.kind if made is not None else ("update" if why.predecessors else "add")
    return DeltaTrace(
        kind=kind,
        rule_id=bundle.rule_id,
        delta_id=bundle.delta_id,
        confidence=bundle.confidence,
        reason=bundle.reason,
        bindings=dict(bundle.bindings),
        triple=(fact.subject, fact.predicate, fact.object),
        fact_id=fact.id,
        episodes=tuple(
            TracedEpisode(e.id, e.session, e.timestamp, e.content) for e in why.source_episodes
        ),
        facts=tuple(
            TracedFact(p.id, "replaces", known_fact(p))
            for p in why.predecessors
            if p.id in bundle.predecessor_ids
        ),
    )


# --- rendering ----------------------------------------------------------------------------


def plain(value: Any) -> str:
    """A binding value as text: bare when it is one word, JSON otherwise."""
    if isinstance(value, str) and value and value.split() == [value] and '"' not in value:
        return value
    if isinstance(value, list):
        return "[" + ", ".join(plain(v) for v in value) + "]"
    return orjson.dumps(value).decode()


def triple_text(triple: Triple) -> str:
    return "(" + ", ".join(triple) + ")"


def labelled(label: str, text: str, indent: str = "  ") -> str:
    return f"{indent}{label:<{LABEL_WIDTH}} {text}".rstrip()


def _episode_text(e: TracedEpisode) -> str:
    if e.timestamp is None:
        return f"{e.id} (not in the episode store)"
    content = (e.content or "").replace("\n", "\\n")
    return f"{e.id} session={e.session} at={e.timestamp.isoformat()}: {content}"


def _fact_text(f: TracedFact) -> str:
    if f.fact is None:
        return f"{f.id} (not a known fact)"
    return f"{f.id} {triple_text(f.fact.triple)} rule={f.fact.rule_id}"


def _known_text(fact: Fact) -> str:
    return _fact_text(TracedFact(fact.id, "", known_fact(fact)))


def trace_head(trace: DeltaTrace) -> str:
    """``update rule (s, p, o) confidence=0.8``."""
    statement = f" {triple_text(trace.triple)}" if trace.triple is not None else ""
    return f"{trace.kind} {trace.rule_id}{statement} confidence={trace.confidence:g}"


def trace_lines(
    trace: DeltaTrace, extra: Sequence[tuple[str, str]] = (), indent: str = ""
) -> list[str]:
    """The head line, then one labelled line per fact of the trace (and ``extra`` ones)."""
    inner = indent + "  "
    out = [indent + trace_head(trace)]
    if trace.fact_id is not None:
        out.append(labelled("fact", trace.fact_id, inner))
    out.append(labelled("delta", trace.delta_id, inner))
    if trace.reason:
        out.append(labelled("reason", trace.reason, inner))
    if trace.bindings:
        binds = " ".join(f"{k}={plain(v)}" for k, v in sorted(trace.bindings.items()))
        out.append(labelled("bindings", binds, inner))
    if trace.matched:
        refs = " ".join(f"{alias}={','.join(ids)}" for alias, ids in trace.matched)
        out.append(labelled("matched", refs, inner))
    out += [labelled("episode", _episode_text(e), inner) for e in trace.episodes]
    out += [labelled(f.role, _fact_text(f), inner) for f in trace.facts]
    out += [labelled(label, text, inner) for label, text in extra]
    return out


def similarity_texts(bindings: Mapping[str, Any]) -> list[str]:
    """What a ``near`` test decided on, from a delta's bindings: ``cosine 0.91 with fact X
    under embedder stargraph-hash@1/256``, one per pattern that tested it (``with episode
    E`` for a neighbour episode, an ``earlier`` pattern with ``near``)."""
    out = []
    for key in sorted(bindings):
        if not key.endswith(".cosine"):
            continue
        alias = key.removesuffix(".cosine")
        embedder = bindings.get(f"{alias}.embedder")
        if f"{alias}.episode" in bindings:
            what = f"episode {bindings[f'{alias}.episode']}"
        else:
            what = f"fact {bindings.get(f'{alias}.fact')}"
        out.append(f"cosine {bindings[key]} with {what} under embedder {embedder} ({alias})")
    return out


def closing_similarity(why: Explanation) -> list[str]:
    """What a ``near`` test decided on when the delta that closed the fact was made (a
    cluster merged into its representative, a paraphrase folded into a fact): ``merged by
    merge_cluster: cosine 0.93 with fact R under embedder stargraph-hash@1/256 (member)``.
    Where the fact itself is the neighbour named, the other side is the fact it was merged
    into (if any)."""
    row = next((r for r in why.audit if r.delta_id == why.closed_by), None)
    if row is None:
        return []
    delta = row.delta
    bindings = delta.bindings
    status = getattr(delta, "status", None) or delta.kind
    out = []
    for key in sorted(bindings):
        if not key.endswith(".cosine"):
            continue
        alias = key.removesuffix(".cosine")
        other = bindings.get(f"{alias}.fact")
        if other == why.fact.id:
            other = getattr(delta, "merged_into", None)
        near = "" if other is None else f" with fact {other}"
        embedder = bindings.get(f"{alias}.embedder")
        out.append(
            f"{status} by {row.rule_id}: cosine {bindings[key]}{near} under embedder "
            f"{embedder} ({alias})"
        )
    return out


def surprise_texts(bindings: Mapping[str, Any]) -> list[str]:
    """What a ``surprise`` pattern scored, from a delta's bindings: ``0.42 over 5 facts
    (k 5) under embedder stargraph-hash@1/256 (u)``, one per pattern."""
    out = []
    for key in sorted(bindings):
        if not key.endswith(".cosines"):
            continue
        name = key.removesuffix(".cosines")
        facts, k = bindings.get(f"{name}.facts") or [], bindings.get(f"{name}.k")
        embedder = bindings.get(f"{name}.embedder")
        over = f"{len(facts)} fact{'' if len(facts) == 1 else 's'}"
        out.append(f"{bindings.get(name)} over {over} (k {k}) under embedder {embedder} ({name})")
    return out


def explanation_lines(why: Explanation) -> list[str]:
    """``explain``'s text: the fact's trace plus scope, validity, pack and what followed."""
    fact = why.fact
    until = "current" if fact.valid_until is None else fact.valid_until.isoformat()
    extra = [
        ("scope", f"user={fact.user} agent={fact.agent}"),
        ("valid", f"{fact.valid_from.isoformat()} .. {until}"),
        ("pack", why.pack_hash or "-"),
    ]
    extra += [("similar", text) for text in similarity_texts(why.provenance.bindings)]
    extra += [("surprise", text) for text in surprise_texts(why.provenance.bindings)]
    if why.closed_by is not None:
        extra.append(("closed by", why.closed_by))
        extra += [("closed as", text) for text in closing_similarity(why)]
    direct = set(why.provenance.predecessor_ids)
    extra += [("earlier", _known_text(p)) for p in why.predecessors if p.id not in direct]
    extra += [("successor", _known_text(s)) for s in why.successors]
    extra += [
        ("audit", f"#{row.seq} {row.kind} {row.delta_id} rule={row.rule_id}") for row in why.audit
    ]
    extra.append(("status", fact.status))
    extra += [("history", status_event_text(event)) for event in why.status_history]
    changes = status_changes(list(why.status_history))
    extra += [("change", status_change_text(change)) for change in changes]
    return trace_lines(explanation_trace(why), extra)


_RELATED = {
    "created": "from",
    "superseded": "by",
    "merged": "into",
    "restored": "as",
    "pinned": "from",
}
"""How a status event names its related fact (see ``StatusEvent.related_fact_id``)."""


def status_event_text(event: StatusEvent) -> str:
    """One status event on one line: time, event, rule, delta, related fact, reason."""
    parts = [event.at.isoformat(), event.event]
    if event.rule_id:
        parts.append(f"rule={event.rule_id}")
    if event.delta_id:
        parts.append(f"delta={event.delta_id}")
    if event.related_fact_id:
        parts.append(f"{_RELATED.get(event.event, 'fact')}={event.related_fact_id}")
    if event.reason:
        parts.append(f"reason={event.reason}")
    return " ".join(parts)


def status_change_text(change: StatusChange) -> str:
    """One status change (specification 004's shape) on one line: time, old -> new, reason."""
    text = f"{change.changed_at.isoformat()} {change.old} -> {change.new}"
    return f"{text} reason={change.reason}" if change.reason else text
