"""Shared helpers for the compiler and pack tests: records, facts, passes, delta summaries."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from stargraph_mem.compiler.pack import CompiledPack, compile_text
from stargraph_mem.engine.passes.outputs import PassOutput
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.errors import IRError
from stargraph_mem.ir.checks import analyze
from stargraph_mem.ir.loader import load_pack_text
from stargraph_mem.model.time import to_us as to_micros
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import MemoryDelta
from stargraph_mem.stores.scope import Partition

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=1)
PARTITION = Partition("u", "a")


def episode(
    seq: int,
    metadata: dict[str, Any] | None = None,
    *,
    session: str = "s1",
    content: str | None = None,
    timestamp: datetime | None = None,
) -> EpisodeRecord:
    """Episode ``e<seq>`` of partition (u, a), one minute after the previous one."""
    return EpisodeRecord(
        seq=seq,
        id=f"e{seq}",
        content=f"c{seq}" if content is None else content,
        timestamp=T0 + timedelta(minutes=seq) if timestamp is None else timestamp,
        source_node=None,
        user=PARTITION.user,
        session=session,
        agent=PARTITION.agent,
        metadata=dict(metadata or {}),
    )


def triple(seq: int, s: str, p: str, o: str, **extra: Any) -> EpisodeRecord:
    """An episode whose metadata states (subject, predicate, object)."""
    session = extra.pop("session", "s1")
    return episode(seq, {"subject": s, "predicate": p, "object": o, **extra}, session=session)


def engine_fact(
    fid: str,
    spo: tuple[str, str, str],
    *,
    confidence: float = 0.8,
    valid_from: datetime = T0,
    reinforced_at: datetime | None = None,
    sources: tuple[str, ...] = ("e0",),
) -> EngineFact:
    """A current fact as the store hands it to the engine."""
    return EngineFact(
        id=fid,
        subject=spo[0],
        predicate=spo[1],
        object=spo[2],
        confidence=confidence,
        valid_from_us=to_micros(valid_from),
        reinforced_at_us=to_micros(reinforced_at or valid_from),
        rule_id="seed",
        source_episode_ids=sources,
    )


def run_pass(
    compiled: CompiledPack,
    episodes: Sequence[EpisodeRecord],
    facts: Iterable[EngineFact] = (),
    *,
    now: datetime = NOW,
    archived: Sequence[EngineFact] = (),
    eligible: Mapping[int, Iterable[int]] | None = None,
) -> PassOutput:
    """One pass of a fresh runtime over ``episodes`` (by default every rule sees every
    episode, sweeps included)."""
    runtime = PackRuntime(compiled)
    try:
        return runtime.run_pass(
            partition=PARTITION,
            now=now,
            episodes=episodes,
            facts=facts,
            archived=archived,
            eligible=eligible,
        )
    finally:
        runtime.close()


def summary(delta: MemoryDelta) -> tuple[Any, ...]:
    """The parts of a delta a policy decides: kind, rule, links, triple, confidence, sources."""
    links: list[str] = []
    spo: tuple[str, str, str] | None = None
    if delta.kind in ("update", "delete"):
        links = list(delta.replaces)
    elif delta.kind == "noop":
        links = list(delta.reinforces)
    if delta.kind in ("add", "update"):
        spo = delta.fact.triple
    return (
        delta.kind,
        delta.rule_id,
        links,
        spo,
        delta.confidence,
        list(delta.source_episode_ids),
    )


def new_fact_id(delta: MemoryDelta) -> str:
    """The fact id an add/update delta creates."""
    assert delta.kind in ("add", "update")
    return delta.new_fact_id


def first_issue(text: str, file: str = "rules/x.yaml") -> str:
    """The first problem of a pack (load, then semantic checks), formatted; '' when valid."""
    try:
        pack, source = load_pack_text(text, file)
    except IRError as exc:
        return exc.issue.format()
    issues = analyze(pack, source).issues
    return issues[0].format() if issues else ""


def compile_ok(text: str, file: str = "<test>") -> CompiledPack:
    """Compile a pack that must be valid."""
    return compile_text(text, file)
