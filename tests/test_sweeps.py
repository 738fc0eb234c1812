"""Sweeps: rules over facts only run on their cron over every partition with candidates."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from backends import Backend, NewLocation, raw_rows
from e2e_helpers import SEED_PACK, episode, spo
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph_mem.compiler.pack import CompiledPack, compile_file, compile_text
from stargraph_mem.compiler.sweep_sql import SweepFilter, sweep_filter
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.schedule.scheduler import ConsolidationReport
from stargraph_mem.errors import IRError
from stargraph_mem.ir.models import FACT_FIELDS, Rule
from stargraph_mem.ir.reference import evaluate
from stargraph_mem.model.time import from_us, to_us
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.models import AddDelta, DeleteDelta, Episode, FactPayload, NoopDelta
from stargraph_mem.stores.postgres.fact import PostgresFactStore
from stargraph_mem.stores.repositories.sweep_schema import SWEEP_INDEX_NAMES, index_ddl
from stargraph_mem.stores.scope import Partition
from stargraph_mem.stores.sqlite_fact import SQLiteFactStore

RULES = Path(__file__).resolve().parent.parent / "rules"
T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
T40 = T0 + timedelta(days=40)
"""10:00 on the 40th day: the expiry sweep's fire time is 04:00 that day."""
ALICE = Partition("alice", "rag")
BOB = Partition("bob", "rag")


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def packs() -> list[CompiledPack]:
    return [compile_text(SEED_PACK), compile_file(RULES / "expire_speculative.yaml")]


async def seeded(db: str, clock: Clock) -> Consolidator:
    """Alice's and Bob's speculative facts promoted at T0; at T40 only Bob has news."""
    mem = Consolidator(db, packs(), clock=clock)
    await mem.bootstrap()
    await mem.record(episode("a1", at=T0, user="alice", **spo("alice", "likes", "opera")))
    await mem.record(episode("b1", at=T0, user="bob", **spo("bob", "likes", "jazz")))
    clock.at = T40
    await mem.record(episode("b2", at=T40, user="bob", **spo("bob", "likes", "tea")))
    return mem


def sweep_passes(report: ConsolidationReport) -> list[tuple[str, int]]:
    return [
        (p.partition.user, p.delta_counts.get("delete", 0))
        for p in report.passes
        if p.rules == ["expire_unreinforced"] and p.applied
    ]


async def test_tick_sweeps_a_partition_without_new_episodes(new_location: NewLocation) -> None:
    clock = Clock(T0)
    async with await seeded(new_location(), clock) as mem:
        report = await mem.tick(T40)
        assert sorted(sweep_passes(report)) == [("alice", 1), ("bob", 1)]
        assert all(
            p.now == T40.replace(hour=4)
            for p in report.passes
            if p.rules == ["expire_unreinforced"]
        )
        assert [f.object for f in await mem.facts(user="alice", agent="rag")] == []
        assert [f.object for f in await mem.facts(user="bob", agent="rag")] == ["tea"]
        # the same fire is not run again; the next day's finds nothing old enough
        assert sweep_passes(await mem.tick(T40 + timedelta(hours=3))) == []
        assert sweep_passes(await mem.tick(T40 + timedelta(days=1))) == []


async def test_consolidate_sweeps_every_partition(new_location: NewLocation) -> None:
    clock = Clock(T0)
    async with await seeded(new_location(), clock) as mem:
        report = await mem.consolidate(now=T40)
        assert sorted(sweep_passes(report)) == [("alice", 1), ("bob", 1)]
        assert await mem.facts(user="alice", agent="rag") == []


async def test_consolidate_of_a_named_user_sweeps_only_theirs(new_location: NewLocation) -> None:
    clock = Clock(T0)
    async with await seeded(new_location(), clock) as mem:
        report = await mem.consolidate(user="alice", now=T40)
        assert sweep_passes(report) == [("alice", 1)]
        assert [f.object for f in await mem.facts(user="bob", agent="rag")] == ["jazz", "tea"]


async def test_nothing_is_swept_before_it_is_due(new_location: NewLocation) -> None:
    clock = Clock(T0)
    async with await seeded(new_location(), clock) as mem:
        for day in (1, 29):  # fired, but no fact is old enough: no candidate partition
            report = await mem.tick(T0 + timedelta(days=day))
            assert [p for p in report.passes if p.rules == ["expire_unreinforced"]] == []
        assert len(await mem.facts(user="alice", agent="rag")) == 1


async def test_a_streaming_record_does_not_sweep(new_location: NewLocation) -> None:
    clock = Clock(T0)
    async with await seeded(new_location(), clock) as mem:
        clock.at = T40 + timedelta(hours=1)
        report = await mem.record(episode("a2", at=clock.at, user="alice", **spo("a", "b", "c")))
        assert [p.rules for p in report.passes] == [["guess"]]
        assert report.counts["delete"] == 0


async def test_a_fire_is_applied_once_by_two_concurrent_runs(new_location: NewLocation) -> None:
    clock = Clock(T0)
    db = new_location()
    first = await seeded(db, clock)
    async with first, Consolidator(db, packs(), clock=clock) as second:
        one, two = await asyncio.gather(first.consolidate(now=T40), second.consolidate(now=T40))
        deletes = sum(n for _, n in sweep_passes(one) + sweep_passes(two))
        assert deletes == 2
        rows = await first.fact_store.audit_rows()
        assert sum(1 for r in rows if r.kind == "delete") == 2
        again = await second.tick(T40 + timedelta(hours=1))
        assert sweep_passes(again) == []


async def test_an_own_source_episode_does_not_confirm_a_backlog_fact(
    new_location: NewLocation,
) -> None:
    """The pack added over an existing backlog: the episode a 41-day-old speculative fact
    came from is read by reinforce_on_repeat's first pass, and must not keep it alive."""
    clock = Clock(T0)
    db = new_location()
    async with Consolidator(db, [compile_text(SEED_PACK)], clock=clock) as mem:
        await mem.record(episode("a1", at=T0, user="alice", **spo("alice", "likes", "opera")))
    later = T0 + timedelta(days=41)
    async with Consolidator(db, packs(), clock=Clock(later)) as mem:
        report = await mem.consolidate(now=later)
        assert report.counts["noop"] == 0
        assert sweep_passes(report) == [("alice", 1)]
        assert await mem.facts(user="alice", agent="rag") == []


# --- the pre-filter selects what the conditions select ----------------------------------

NOW = T0 + timedelta(days=60)
SUBJECTS = ("ann", "bo", "cy")
PREDICATES = ("likes", "owns")


def _add(user: str, subject: str, predicate: str, obj: str, conf: float, at: datetime) -> AddDelta:
    return AddDelta(
        fact=FactPayload(subject=subject, predicate=predicate, object=obj),
        user=user,
        agent="rag",
        source_episode_ids=[f"e-{user}-{obj}"],
        promotion_ts=at,
        rule_id="r1" if conf < 0.5 else "r2",
        confidence=conf,
    )


def _seen(episode_id: str, user: str, at: datetime) -> Episode:
    return Episode(
        id=episode_id, content="x", timestamp=at, user=user, session="s", agent="rag", metadata={}
    )


async def _random_facts(backend: Backend) -> list[EngineFact]:
    """Sixty facts over three partitions, some reinforced later."""
    import random

    rnd = random.Random(13)
    deltas: list[Any] = []
    seen: list[Episode] = []  # half the facts' sources are stored: observed_at is their time
    for n in range(60):
        user = ("u1", "u2", "u3")[n % 3]
        at = T0 + timedelta(days=rnd.randrange(0, 59), hours=rnd.randrange(24))
        conf = rnd.choice((0.1, 0.25, 0.4, 0.5, 0.75, 0.9))
        deltas.append(_add(user, rnd.choice(SUBJECTS), rnd.choice(PREDICATES), f"o{n}", conf, at))
        if n % 2:
            seen.append(_seen(f"e-{user}-o{n}", user, at - timedelta(days=rnd.randrange(0, 30))))
    await backend.memory.put_many(seen)
    await backend.facts.apply_deltas(deltas)
    parts = [Partition(u, "rag") for u in ("u1", "u2", "u3")]
    groups = await backend.facts.current_facts_of(parts)
    for part, group in zip(parts, groups, strict=True):
        for k, fact in enumerate(group[::4]):
            later = from_us(fact.valid_from_us) + timedelta(days=rnd.randrange(1, 20))
            source = f"r-{fact.id}"
            if k % 2:  # a stored source: the reinforcement moves observed_at (or not)
                await backend.memory.put_many([_seen(source, part.user, later - timedelta(days=2))])
            noop = NoopDelta(
                user=part.user,
                agent="rag",
                source_episode_ids=[source],
                promotion_ts=later,
                rule_id="re",
                confidence=0.5,
                reinforces=[fact.id],
            )
            await backend.facts.apply_deltas([noop])
    return [f for group in await backend.facts.current_facts_of(parts) for f in group]


_DURATIONS = st.sampled_from([{"days": d} for d in (5, 20, 30, 45)])
CONDITIONS = st.fixed_dictionaries(
    {},
    optional={
        "subject": st.one_of(
            st.sampled_from(SUBJECTS),
            st.builds(
                lambda xs: {"in": xs}, st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=2)
            ),
        ),
        "predicate": st.one_of(
            st.sampled_from(PREDICATES),
            st.builds(
                lambda xs: {"not_in": xs},
                st.lists(st.sampled_from(PREDICATES), min_size=1, max_size=2),
            ),
        ),
        "confidence": st.builds(
            lambda op, x: {op: x},
            st.sampled_from(["lt", "le", "gt", "ge", "eq"]),
            st.sampled_from([0.25, 0.4, 0.5, 0.75]),
        ),
        "valid_from": st.builds(
            lambda op, d: {op: d}, st.sampled_from(["older_than", "newer_than"]), _DURATIONS
        ),
        "reinforced_at": st.builds(
            lambda op, d: {op: d}, st.sampled_from(["older_than", "newer_than"]), _DURATIONS
        ),
        "observed_at": st.builds(
            lambda op, d: {op: d}, st.sampled_from(["older_than", "newer_than"]), _DURATIONS
        ),
        "rule_id": st.sampled_from(["r1", "r2"]),
    },
)


def _raw(fact: EngineFact, name: str) -> Any:
    values = {
        "subject": fact.subject,
        "predicate": fact.predicate,
        "confidence": fact.confidence,
        "valid_from": from_us(fact.valid_from_us).isoformat(),
        "reinforced_at": from_us(fact.reinforced_at_us).isoformat(),
        "observed_at": from_us(fact.observed_us).isoformat(),
        "rule_id": fact.rule_id,
    }
    return values[name]


async def test_the_prefilter_selects_what_the_reference_evaluator_does(backend: Backend) -> None:
    facts = await _random_facts(backend)
    loop = asyncio.get_running_loop()
    parts = [Partition(u, "rag") for u in ("u1", "u2", "u3")]
    now_us = to_us(NOW)

    def selected(where: str, params: tuple[Any, ...]) -> set[str]:
        async def read() -> set[str]:
            found = await backend.facts.sweep_partitions(where, params)
            groups = await backend.facts.sweep_facts(where, params, found)
            return {f.id for group in groups for f in group}

        return asyncio.run_coroutine_threadsafe(read(), loop).result()

    @settings(max_examples=60, deadline=None)
    @given(CONDITIONS)
    def check(conditions: dict[str, Any]) -> None:
        rule = Rule.model_validate(
            {
                "id": "s",
                "when": [{"fact": {"as": "f", **conditions}}],
                "emit": {"kind": "delete", "replaces": ["f"]},
            }
        )
        filt = sweep_filter(rule)
        assert filt.alone
        where = rule.when[0].fact.where  # type: ignore[union-attr]
        expected = {
            f.id
            for f in facts
            if all(
                evaluate(cond, FACT_FIELDS[name], _raw(f, name), now_us=now_us)
                for name, cond in where.items()
            )
        }
        assert selected(filt.sql, filt.params(now_us)) == expected

    await asyncio.to_thread(check)
    assert len({f.id for f in facts}) == 60 and parts
    # observed_at is not always valid_from: stored sources moved it, earlier and later
    assert any(f.observed_us < f.valid_from_us for f in facts)
    assert any(f.observed_us > f.valid_from_us for f in facts)


REVIVE = """\
ir_version: 1
pack: revive
version: "1.0.0"
fields: {subject: string, predicate: string, object: string}
rules:
  - id: revive_likes
    cadence: {cron: "0 5 * * *"}
    when:
      - fact: {as: f, status: archived, subject: {bind: s}, predicate: {eq: likes, bind: p},
               object: {bind: o}}
    emit: {kind: update, subject: "{s}", predicate: "{p}", object: "{o}", replaces: [f],
           sources: [f], confidence: 0.5}
"""


async def test_a_sweep_over_archived_facts_finds_partitions_with_only_archived_ones(
    new_location: NewLocation,
) -> None:
    location = new_location()
    async with Consolidator(location, [compile_text(SEED_PACK)], clock=Clock(T0)) as mem:
        await mem.record(episode("a1", at=T0, user="alice", **spo("alice", "likes", "opera")))
        await mem.record(episode("a2", at=T0, user="alice", **spo("alice", "hates", "rain")))
        facts = await mem.facts()
        archive = DeleteDelta(
            user="alice",
            agent="rag",
            replaces=[f.id for f in facts],
            status="archived",
            source_episode_ids=["a1"],
            promotion_ts=T0 + timedelta(hours=1),
            rule_id="by_hand",
            confidence=1.0,
        )
        await mem.fact_store.apply_delta(archive)
    async with Consolidator(location, [compile_text(REVIVE)]) as mem:
        assert await mem.facts() == []
        report = await mem.consolidate(now=T0 + timedelta(days=1))  # fires at 05:00
        revived = [p for p in report.passes if p.rules == ["revive_likes"] and p.applied]
        assert [p.delta_counts.get("update", 0) for p in revived] == [1]
        [back] = await mem.facts()
        assert (back.object, back.confidence) == ("opera", 0.5)
        archived = {f.object: f for f in await mem.facts(status="archived")}
        assert sorted(archived) == ["opera", "rain"]  # a restored fact stays closed
        assert archived["opera"].superseded_by == back.id


def test_a_sweep_cannot_wait_for_idle_or_or_after() -> None:
    text = SEED_PACK.replace("defaults: {cadence: {every: 1}, confidence: 0.3}\n", "").replace(
        "      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}\n"
        '    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}\n',
        "      - fact: {as: f, confidence: {lt: 0.5}}\n"
        "    emit: {kind: delete, replaces: [f], sources: [f]}\n"
        "    cadence: {idle: 30m}\n",
    )
    with pytest.raises(IRError) as info:
        compile_text(text)
    assert str(info.value) == (
        "<string>:10:15: rules[0].cadence.idle: 'idle' watches a partition's episodes: a "
        "rule without an 'episode' pattern (a sweep) runs on 'cron' (or 'every')"
    )


def test_an_age_test_leaves_the_index_to_a_more_selective_one(tmp_path: Path) -> None:
    """``older_than`` holds for most facts: with a confidence test beside it, the candidate
    read goes through the confidence index, never scanning every old fact; the filter
    names just the indexes it reads through (made on demand)."""

    def filter_of(conditions: str) -> SweepFilter:
        rule = compile_text(
            SEED_PACK.replace(
                "      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}\n"
                '    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}"}\n',
                f"      - fact: {{as: f, {conditions}}}\n"
                "    emit: {kind: delete, replaces: [f], sources: [f]}\n",
            ).replace("{every: 1}", '{cron: "0 3 * * *"}')
        ).pack.rules[0]
        return sweep_filter(rule)

    both = filter_of("confidence: {lt: 0.1}, valid_from: {older_than: {days: 1}}")
    assert both.sql == "f.confidence < ? AND +f.valid_from_us <= ?"
    assert both.indexes == ("facts_current_confidence",)
    age = filter_of("valid_from: {older_than: {days: 1}}")
    assert (age.sql, age.indexes) == ("f.valid_from_us <= ?", ("facts_current_valid_from",))
    # a test no sweep index serves (subject) leaves the age test its index
    subject = filter_of("subject: {eq: x}, valid_from: {older_than: {days: 1}}")
    assert subject.sql == "f.subject = ? AND f.valid_from_us <= ?"
    assert subject.indexes == ("facts_current_valid_from",)
    two = filter_of("predicate: {eq: p}, rule_id: {in: [a, b]}, confidence: {lt: 0.5}")
    assert two.indexes == (
        "facts_current_predicate",
        "facts_current_rule",
        "facts_current_confidence",
    )
    assert filter_of("id: {eq: f1}").indexes == ()  # the table's key serves it
    # observed_at and reinforced_at read through an index on their base expression
    stale = filter_of("predicate: {not_in: [a, b]}, observed_at: {older_than: {days: 90}}")
    assert stale.sql == (
        "f.predicate NOT IN (?, ?) AND (coalesce(f.observed_us, f.valid_from_us) <= ? AND "
        "NOT EXISTS (SELECT 1 FROM reinforcements r WHERE r.fact_id = f.id AND "
        "r.observed_us > ?))"
    )
    assert stale.indexes == ("facts_current_observed",)  # not_in: no index serves it
    faded = filter_of("confidence: {lt: 0.2}, reinforced_at: {older_than: {days: 7}}")
    assert faded.sql.startswith("f.confidence < ? AND (+coalesce(f.reinforced_us, ")
    assert faded.indexes == ("facts_current_confidence",)
    db = tmp_path / "plan.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE facts (id TEXT, user TEXT, agent TEXT, confidence REAL, "
            "valid_from_us INTEGER, valid_until_us INTEGER)"
        )
        for name in (*both.indexes, *age.indexes):
            conn.execute(index_ddl(name))
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT DISTINCT f.user, f.agent FROM facts f "
            f"WHERE f.valid_until_us IS NULL AND ({both.sql})",
            (0.1, 0),
        ).fetchall()
    assert "facts_current_confidence" in " ".join(str(row) for row in plan)


# --- sweep indexes are made on demand ---------------------------------------------------


async def sweep_indexes(mem: Consolidator) -> set[str]:
    """The sweep indexes the memory's database has."""
    store = mem.fact_store
    if isinstance(store, SQLiteFactStore):
        sql = "SELECT name FROM sqlite_master WHERE type = 'index'"
    else:
        assert isinstance(store, PostgresFactStore)
        sql = "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
    return {str(row[0]) for row in await raw_rows(store, sql)} & set(SWEEP_INDEX_NAMES)


async def test_a_sweep_makes_only_the_index_it_reads_through(new_location: NewLocation) -> None:
    """No sweep index exists until a sweep needs one; a dry run makes none; the expiry
    sweep (confidence and age tests) makes the confidence index alone, and its next fire
    finds it made."""
    clock = Clock(T0)
    async with await seeded(new_location(), clock) as mem:
        assert await sweep_indexes(mem) == set()
        dry = await mem.consolidate(now=T40, dry_run=True)
        assert sorted(sweep_passes(dry)) == []  # dry passes are not applied
        assert await sweep_indexes(mem) == set()
        report = await mem.consolidate(now=T40)
        assert sorted(sweep_passes(report)) == [("alice", 1), ("bob", 1)]
        assert await sweep_indexes(mem) == {"facts_current_confidence"}
        assert sweep_passes(await mem.consolidate(now=T40 + timedelta(days=1))) == []
        assert await sweep_indexes(mem) == {"facts_current_confidence"}


async def test_two_stores_making_the_same_indexes_at_once_both_succeed(
    new_location: NewLocation,
) -> None:
    location = new_location()
    async with Consolidator(location, packs()) as one, Consolidator(location, packs()) as two:
        names = ["facts_current_predicate", "facts_current_observed", "facts_current_reinforced"]
        await asyncio.gather(
            one.fact_store.ensure_sweep_indexes(names),
            two.fact_store.ensure_sweep_indexes(names),
        )
        assert await sweep_indexes(one) == set(names)


async def test_a_file_made_with_every_sweep_index_drops_them_once(tmp_path: Path) -> None:
    """Files of the same schema made before indexes were made on demand had all four: the
    first writable open drops them (every close wrote to them) and marks the file; an index
    a sweep made later survives the next opens."""
    path = tmp_path / "old.db"
    async with Consolidator(path, packs()) as mem:
        await mem.bootstrap()
    with sqlite3.connect(path) as conn:
        for name in SWEEP_INDEX_NAMES:
            conn.execute(index_ddl(name))
        conn.execute("DELETE FROM fact_store_meta WHERE key = 'sweep_indexes_on_demand'")
    clock = Clock(T0)
    async with await seeded(str(path), clock) as mem:
        assert await sweep_indexes(mem) == set()
        await mem.fact_store.ensure_sweep_indexes(["facts_current_rule"])
    async with Consolidator(path, packs()) as mem:
        await mem.bootstrap()
        assert await sweep_indexes(mem) == {"facts_current_rule"}
        report = await mem.consolidate(now=T40)
        assert sorted(sweep_passes(report)) == [("alice", 1), ("bob", 1)]
        assert await sweep_indexes(mem) == {"facts_current_rule", "facts_current_confidence"}


async def test_an_unknown_sweep_index_is_refused(backend: Backend) -> None:
    with pytest.raises(KeyError, match="facts_nope"):
        await backend.facts.ensure_sweep_indexes(["facts_nope"])
