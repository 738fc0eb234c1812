"""A run's later passes take the previous pass's watermarks and resulting facts from memory
(while that pass commits) instead of reading the stores. What they take must be exactly what
the stores list once the previous pass is applied, for every shipped pack."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import NOW, episode, spo
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.engine.passes.runner import PassRunner
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.scope import Partition

RULES = Path(__file__).resolve().parents[1] / "rules"
PACKS = [
    RULES / f"{name}.yaml" for name in ("frequency_promotion", "default", "dedup_against_facts")
]

items = st.tuples(
    st.sampled_from(["ann", "bo"]),
    st.sampled_from(["likes", "is"]),
    st.sampled_from(["x", "y"]),
    st.sampled_from(["s1", "s2", "s3"]),
    st.sampled_from([None, None, None, "noop"]),
)


async def check(db: Path, stream: Sequence[tuple[str, str, str, str, str | None]]) -> list[str]:
    """Run with 3-episode passes; return every difference between carried and stored facts."""
    problems: list[str] = []
    original = PassRunner._apply

    async def checked_apply(self: PassRunner, report: PassReport, *args: Any) -> int:
        facts_after, marks_after = report.facts_after, report.marks_after()
        version = await original(self, report, *args)
        stored: list[EngineFact] = await self.facts.current_facts(report.partition)
        if stored != facts_after:
            problems.append(f"{self.pack} pass {report.first_seq}-{report.last_seq}")
        marks = await self.facts.watermarks(self.pack, report.partition)
        if marks != marks_after:
            problems.append(f"{self.pack} marks {marks} != {marks_after}")
        return version

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PassRunner, "_apply", checked_apply)
        async with Consolidator.open(db, PACKS, max_episodes=3) as c:
            for n, (s, p, o, session, intent) in enumerate(stream):
                meta: dict[str, Any] = {"subject": s, "predicate": p, "object": o}
                if intent is not None:
                    meta["intent"] = intent
                await c.memory.put_many([episode(f"e{n}", n, session=session, meta=meta)])
            reports = (await c.consolidate(now=NOW)).passes
    assert any(r.episodes == 3 for r in reports) or len(stream) < 3
    return problems


@settings(max_examples=20, deadline=None)
@given(stream=st.lists(items, min_size=1, max_size=24))
def test_carried_facts_and_marks_equal_the_stored_ones(
    stream: list[tuple[str, str, str, str, str | None]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        assert asyncio.run(check(Path(tmp) / "m.db", stream)) == []


def test_a_failed_pass_leaves_the_previous_pass_applied(tmp_path: Path) -> None:
    """The next pass is computed while the previous one commits; an error in it must not
    lose or half-apply the previous pass."""
    original = PackRuntime.run_pass
    calls: list[int] = []

    def failing(self: PackRuntime, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("engine failed")
        return original(self, **kwargs)

    async def scenario() -> tuple[dict[str, int], int]:
        pack = [RULES / "default.yaml"]
        async with Consolidator.open(tmp_path / "m.db", pack, max_episodes=2) as c:
            await c.memory.put_many(
                [episode(f"e{n}", n, **spo("ann", "likes", f"o{n}")) for n in range(5)]
            )
            # the partition is quarantined for the run (nothing of the failed pass applied)
            (failed,) = (await c.consolidate(now=NOW)).failed
            assert failed.failed is not None and "RuntimeError: engine failed" in failed.failed
            marks = await c.fact_store.watermarks("default", Partition("alice", "rag"))
            return marks, len(await c.fact_store.audit_rows())

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PackRuntime, "run_pass", failing)
        marks, audit = asyncio.run(scenario())
    assert set(marks.values()) == {2} and audit == 2


def test_a_streaming_pass_reuses_its_facts_only_while_nobody_changed_them(
    tmp_path: Path,
) -> None:
    """The facts a pass leaves current are reused by the next pass of the same partition;
    a change by anyone else (here a delete applied straight to the store) is noticed."""
    from stargraph_mem.compiler.pack import compile_text
    from stargraph_mem.stores.models import DeleteDelta
    from stargraph_mem.stores.sqlite_fact import SQLiteFactStore

    text = (RULES / "dedup_against_facts.yaml").read_text(encoding="utf-8")
    pack = compile_text(text.replace('{cron: "0 3 * * *"}', "{every: 1}"))
    alice = Partition("alice", "rag")
    reads: list[Partition] = []
    original = SQLiteFactStore.current_facts

    async def counting(self: SQLiteFactStore, partition: Partition) -> list[EngineFact]:
        reads.append(partition)
        return await original(self, partition)

    async def scenario() -> list[tuple[str, str, bool]]:
        async with Consolidator(tmp_path / "m.db", [pack]) as mem:
            await mem.record(episode("e1", 1, **spo("ann", "likes", "tea")))
            await mem.record(episode("e2", 2, **spo("bo", "likes", "tea")))
            await mem.record(episode("e3", 3, **spo("ann", "likes", "tea")))  # reinforces
            assert len(reads) == 1  # the first pass read; the others reused
            facts = await mem.facts(user="alice", agent="rag")
            first = next(f for f in facts if f.subject == "ann")
            gone = DeleteDelta(
                user="alice",
                agent="rag",
                source_episode_ids=["e3"],
                promotion_ts=NOW,
                rule_id="manual",
                confidence=1.0,
                replaces=[first.id],
            )
            await mem.fact_store.apply_deltas([gone])
            report = await mem.record(episode("e4", 4, **spo("ann", "likes", "tea")))
            assert report.passes[0].counts["add"] == 1  # not a noop on the deleted fact
            assert reads == [alice, alice]
            facts = await mem.facts(user="alice", agent="rag")
            return sorted((f.subject, f.object, f.id == first.id) for f in facts)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SQLiteFactStore, "current_facts", counting)
        assert asyncio.run(scenario()) == [("ann", "tea", False), ("bo", "tea", False)]


def test_the_facts_kept_between_passes_stay_within_one_budget_for_all_partitions(
    tmp_path: Path,
) -> None:
    """Passes reuse the facts their last pass left while all partitions' kept facts fit
    in ``KNOWN_FACTS_MAX``: past it the least recently used partition is read again, and
    a partition with more facts than the whole budget is read at every pass."""
    from stargraph_mem.compiler.pack import compile_text
    from stargraph_mem.engine.passes import runner
    from stargraph_mem.stores.sqlite_fact import SQLiteFactStore

    text = (RULES / "dedup_against_facts.yaml").read_text(encoding="utf-8")
    pack = compile_text(text.replace('{cron: "0 3 * * *"}', "{every: 1}"))
    reads: list[str] = []
    original = SQLiteFactStore.current_facts

    async def counting(self: SQLiteFactStore, partition: Partition) -> list[EngineFact]:
        reads.append(partition.user)
        return await original(self, partition)

    def put(n: int, user: str, subject: str) -> Any:
        return episode(f"e{n}", n, user=user, **spo(subject, "likes", "tea"))

    async def scenario() -> None:
        async with Consolidator(tmp_path / "m.db", [pack]) as mem:
            await mem.record(put(1, "ann", "a1"))  # ann: 1 fact, kept (1 in all)
            await mem.record(put(2, "bo", "b1"))  # bo: 1 fact, kept (2 in all)
            await mem.record(put(3, "ann", "a2"))  # ann reused: 2 facts, 3 in all
            assert reads == ["ann", "bo"]
            await mem.record(put(4, "bo", "b2"))  # bo reused: 2 facts, 4 > 3: ann dropped
            assert reads == ["ann", "bo"]
            await mem.record(put(5, "ann", "a1"))  # ann read again
            assert reads == ["ann", "bo", "ann"]
            for n, subject in enumerate(["c1", "c2", "c3", "c4", "c5", "c6"], start=6):
                await mem.record(put(n, "cy", subject))
            # cy's first pass reads; the next three reuse (the second drops ann); the
            # fourth leaves 4 facts, more than the whole budget: every pass after reads
            assert reads[3:] == ["cy", "cy", "cy"]
            (known,) = [r for r in mem.runners if r.pack == pack.name]
            assert known._known_facts == sum(len(k.facts) for k in known._known.values())
            assert known._known_facts <= 3

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SQLiteFactStore, "current_facts", counting)
        mp.setattr(runner, "KNOWN_FACTS_MAX", 3)
        asyncio.run(scenario())
