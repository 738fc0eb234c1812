"""End to end, one test per shipped pack: episodes in, consolidate at a fixed pass time, then
the current facts, their history, lineage (``explain``), audit rows, rejections and
watermarks are checked in detail."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from e2e_helpers import (
    DEDUP,
    DEFAULT,
    EXPIRE,
    FREQUENCY,
    NOW,
    T0,
    by_spo,
    episode,
    outcome,
    spo,
)

from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.fact import Explanation
from stargraph_mem.stores.models import (
    AddDelta,
    DeleteDelta,
    Fact,
    FactPattern,
    NoopDelta,
    UpdateDelta,
)
from stargraph_mem.stores.scope import Partition

ALICE = Partition("alice", "rag")
BOB = Partition("bob", "rag")
NOW2 = NOW + timedelta(days=1)


def ids(facts: tuple[Fact, ...] | list[Fact]) -> list[str]:
    return [f.id for f in facts]


def sources(explanation: Explanation) -> list[tuple[str, str | None, str | None]]:
    """(id, session, content) of each source episode, in lineage order."""
    return [(e.id, e.session, e.content) for e in explanation.source_episodes]


async def test_default_pack_classification_history_and_lineage(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    sha = compile_file(DEFAULT).sha256
    async with Consolidator.open(db, [DEFAULT]) as c:
        for ep in (
            episode("a1", 1, **spo("alice", "likes", "tea")),
            episode("a2", 2, **spo("alice", "lives_in", "paris")),
            episode("a3", 3, content="forget that", intent="delete"),
            episode("a4", 4, session="s2", **spo("alice", "likes", "coffee")),
            episode("a5", 5, session="s2", intent="noop"),
            episode("b1", 6, user="bob", **spo("bob", "likes", "jazz")),
        ):
            await c.record(ep)
        reports = (await c.consolidate(now=NOW)).passes

        # One report per (pack, partition), partitions in (user, agent) order.
        assert [(r.pack, r.partition, r.episodes, r.applied) for r in reports] == [
            ("default", ALICE, 5, True),
            ("default", BOB, 1, True),
        ]
        first = reports[0]
        assert first.pack_hash == sha
        assert first.counts == {"add": 2, "update": 1, "delete": 0, "noop": 1}
        assert [(d.kind, d.rule_id, d.source_episode_ids) for d in first.deltas] == [
            ("add", "add_observation", ["a1"]),
            ("add", "add_observation", ["a2"]),
            ("update", "repeat_updates_earlier", ["a4", "a1"]),
            ("noop", "explicit_noop", ["a5"]),
        ]
        # intent=delete without replaces: rejected with a reason naming replaces; the
        # rest of the pass went ahead.
        assert [(r.episode_id, r.rule_id) for r in first.rejected] == [("a3", "explicit_delete")]
        assert "replaces" in first.rejected[0].reason

        current = by_spo(await c.facts(user="alice", agent="rag"))
        assert sorted(current) == [("alice", "likes", "coffee"), ("alice", "lives_in", "paris")]
        coffee = current["alice", "likes", "coffee"]
        paris = current["alice", "lives_in", "paris"]
        for fact, rule in ((coffee, "repeat_updates_earlier"), (paris, "add_observation")):
            assert (fact.confidence, fact.rule_id, fact.user, fact.agent) == (
                0.8,
                rule,
                "alice",
                "rag",
            )
            assert (fact.valid_from, fact.valid_until, fact.superseded_by) == (NOW, None, None)
        bob = await c.facts(user="bob")
        assert [(f.subject, f.predicate, f.object, f.rule_id) for f in bob] == [
            ("bob", "likes", "jazz", "add_observation")
        ]

        # The tea fact promoted and superseded within the pass: history, not deleted.
        history = await c.fact_store.query(FactPattern(user="alice", include_history=True))
        closed = [f for f in history if not f.is_current]
        assert [(f.object, f.valid_until, f.superseded_by) for f in closed] == [
            ("tea", NOW, coffee.id)
        ]
        tea = closed[0]
        assert (tea.valid_from, tea.rule_id) == (NOW, "add_observation")

        why = await c.explain(coffee.id)
        assert (why.rule_id, why.pack_hash, why.reason) == (
            "repeat_updates_earlier",
            sha,
            "repeated (alice, likes) in one pass",
        )
        assert why.bindings == {"s": "alice", "p": "likes", "o": "coffee"}
        assert why.provenance.delta_id == coffee.delta_id == first.deltas[2].delta_id
        assert (why.provenance.promotion_ts, why.provenance.confidence) == (NOW, 0.8)
        assert sources(why) == [("a4", "s2", "text of a4"), ("a1", "s1", "text of a1")]
        assert why.source_episodes[0].timestamp == T0 + timedelta(minutes=4)
        assert ids(why.predecessors) == [tea.id]
        assert why.provenance.predecessor_ids == (tea.id,)
        assert (why.successors, why.closed_by) == ((), None)
        assert [a.delta_id for a in why.audit] == [coffee.delta_id]

        why_tea = await c.explain(tea.id)
        assert ids(why_tea.successors) == [coffee.id]
        assert why_tea.closed_by == coffee.delta_id
        assert [a.kind for a in why_tea.audit] == ["add", "update"]
        assert sources(why_tea) == [("a1", "s1", "text of a1")]

        # Audit: one row per applied delta (the noop included), in pass order.
        audit = await c.fact_store.audit_rows(ALICE)
        assert [a.delta_id for a in audit] == [d.delta_id for d in first.deltas]
        assert [(a.kind, a.rule_id, a.pack_hash, a.user, a.agent) for a in audit] == [
            ("add", "add_observation", sha, "alice", "rag"),
            ("add", "add_observation", sha, "alice", "rag"),
            ("update", "repeat_updates_earlier", sha, "alice", "rag"),
            ("noop", "explicit_noop", sha, "alice", "rag"),
        ]
        assert audit[3].delta == first.deltas[3]
        assert [a.seq for a in audit] == sorted(a.seq for a in audit)

        rejections = await c.fact_store.rejections(ALICE)
        assert [(r.id, r.pack, r.rule_id, r.partition) for r in rejections] == [
            ("a3", "default", "explicit_delete", ALICE)
        ]
        assert "replaces" in rejections[0].reason
        assert await c.fact_store.rejections(BOB) == []

        rules = [r.id for r in compile_file(DEFAULT).rules]
        alice_top = await c.memory.max_seq(ALICE)
        assert await c.fact_store.watermarks("default", ALICE) == dict.fromkeys(rules, alice_top)
        assert await c.fact_store.watermarks("default", BOB) == dict.fromkeys(
            rules, await c.memory.max_seq(BOB)
        )

        # Pass 2, a day later: explicit update and delete against stored facts.
        for ep in (
            episode(
                "a6", 1500, intent="update", replaces=[coffee.id], **spo("alice", "likes", "water")
            ),
            episode("a7", 1501, intent="delete", replaces=[paris.id]),
            episode("a8", 1502, **spo("alice", "likes", "tea")),
        ):
            await c.record(ep)
        second = (await c.consolidate(user="alice", agent="rag", now=NOW2)).passes
        assert [r.counts for r in second] == [{"add": 1, "update": 1, "delete": 1, "noop": 0}]
        assert second[0].rejected == []
        deltas = second[0].deltas
        assert [(d.kind, d.rule_id) for d in deltas] == [
            ("update", "explicit_update"),
            ("delete", "explicit_delete"),
            ("add", "add_observation"),
        ]
        delete = deltas[1]
        assert isinstance(delete, DeleteDelta)
        assert (delete.replaces, delete.source_episode_ids, delete.reason) == (
            [paris.id],
            ["a7"],
            "intent delete",
        )
        assert delete.bindings == {"gone": [paris.id]}

        # The default pack dedups within a pass only: a8 adds a second (alice, likes) fact.
        now_facts = by_spo(await c.facts(user="alice", agent="rag"))
        assert sorted(now_facts) == [("alice", "likes", "tea"), ("alice", "likes", "water")]
        water = now_facts["alice", "likes", "water"]
        assert (water.rule_id, water.valid_from) == ("explicit_update", NOW2)
        assert now_facts["alice", "likes", "tea"].id != tea.id

        gone = await c.fact_store.get(paris.id)
        assert (gone.valid_until, gone.superseded_by) == (NOW2, None)
        why_paris = await c.explain(paris.id)
        assert why_paris.closed_by == delete.delta_id
        assert why_paris.successors == ()
        assert [(a.kind, a.rule_id) for a in why_paris.audit] == [
            ("add", "add_observation"),
            ("delete", "explicit_delete"),
        ]

        why_water = await c.explain(water.id)
        assert ids(why_water.predecessors) == [coffee.id, tea.id]
        assert (why_water.reason, why_water.bindings) == (
            "intent update",
            {"old": [coffee.id], "s": "alice", "p": "likes", "o": "water"},
        )
        assert sources(why_water) == [("a6", "s1", "text of a6")]
        assert ids((await c.explain(tea.id)).successors) == [coffee.id, water.id]
        old_coffee = await c.fact_store.get(coffee.id)
        assert (old_coffee.valid_until, old_coffee.superseded_by) == (NOW2, water.id)

        # as_of answers what was believed at a time.
        before = await c.facts(user="alice", as_of=NOW - timedelta(seconds=1))
        middle = await c.facts(user="alice", as_of=NOW + timedelta(hours=12))
        after = await c.facts(user="alice", as_of=NOW2)
        assert before == []
        assert sorted(ids(middle)) == sorted([coffee.id, paris.id])
        assert sorted(ids(after)) == sorted(ids(list(now_facts.values())))

        assert len(await c.fact_store.audit_rows(ALICE)) == 4 + 3
        assert len(await c.fact_store.audit_rows()) == 4 + 3 + 1
        top = await c.memory.max_seq(ALICE)
        assert await c.fact_store.watermarks("default", ALICE) == dict.fromkeys(rules, top)


async def test_dedup_pack_decides_against_stored_facts(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    sha = compile_file(DEDUP).sha256
    async with Consolidator.open(db, [DEDUP]) as c:
        for ep in (
            episode("d1", 1, **spo("alice", "likes", "tea")),
            episode("d2", 2, session="s2", **spo("alice", "likes", "tea")),
            episode("d3", 3, **spo("alice", "likes", "coffee")),
            episode("d4", 4, **spo("alice", "age", "30")),
            episode("d5", 5, content="no structure"),
        ):
            await c.record(ep)
        first = (await c.consolidate(now=NOW)).passes
        assert [r.counts for r in first] == [{"add": 2, "update": 1, "delete": 0, "noop": 1}]
        assert [(r.episode_id, r.unmatched) for r in first[0].rejected] == [("d5", True)]
        assert first[0].gated == []
        tea_add, tea_noop, coffee_update, age_add = first[0].deltas
        assert isinstance(tea_add, AddDelta)
        assert isinstance(tea_noop, NoopDelta)
        assert isinstance(coffee_update, UpdateDelta)
        tea_id = tea_add.new_fact_id
        assert (tea_noop.rule_id, tea_noop.reinforces, tea_noop.reason) == (
            "known_fact_noop",
            [tea_id],
            "(alice, likes, tea) is already known",
        )
        assert (coffee_update.rule_id, coffee_update.replaces) == (
            "changed_object_update",
            [tea_id],
        )
        assert age_add.rule_id == "new_fact_add"

        # Pass 2: each episode is decided against the facts stored by pass 1.
        for ep in (
            episode("d6", 1500, **spo("alice", "likes", "coffee")),
            episode("d7", 1501, **spo("alice", "age", "31")),
            episode("d8", 1502, **spo("bob", "likes", "tea")),
        ):
            await c.record(ep)
        second = (await c.consolidate(now=NOW2)).passes
        assert [(d.kind, d.rule_id) for d in second[0].deltas] == [
            ("noop", "known_fact_noop"),
            ("update", "changed_object_update"),
            ("add", "new_fact_add"),
        ]

        current = by_spo(await c.facts())
        assert {k: (f.confidence, f.rule_id, f.valid_from) for k, f in current.items()} == {
            ("alice", "likes", "coffee"): (0.8, "changed_object_update", NOW),
            ("alice", "age", "31"): (0.8, "changed_object_update", NOW2),
            ("bob", "likes", "tea"): (0.8, "new_fact_add", NOW2),
        }
        coffee = current["alice", "likes", "coffee"]
        assert coffee.id == coffee_update.new_fact_id

        history = {
            f.object: f
            for f in await c.fact_store.query(FactPattern(include_history=True))
            if not f.is_current
        }
        assert {o: (f.valid_until, f.superseded_by) for o, f in history.items()} == {
            "tea": (NOW, coffee.id),
            "30": (NOW2, current["alice", "age", "31"].id),
        }

        why = await c.explain(coffee.id)
        assert (why.rule_id, why.pack_hash, why.reason, why.bindings) == (
            "changed_object_update",
            sha,
            "(alice, likes) changed to coffee",
            {"s": "alice", "p": "likes", "o": "coffee", "t": "2026-03-01T09:03:00+00:00"},
        )
        assert sources(why) == [("d3", "s1", "text of d3")]
        assert ids(why.predecessors) == [tea_id]
        # The fact's audit trail includes the pass-2 noop that reinforced it.
        assert [(a.kind, a.delta.promotion_ts) for a in why.audit] == [
            ("update", NOW),
            ("noop", NOW2),
        ]
        engine_view = {f.id: f for f in await c.fact_store.current_facts(ALICE)}
        assert engine_view[coffee.id].reinforced_at_us > engine_view[coffee.id].valid_from_us
        assert ids((await c.explain(tea_id)).successors) == [coffee.id]

        audit = await c.fact_store.audit_rows()
        assert [a.kind for a in audit] == ["add", "noop", "update", "add", "noop", "update", "add"]
        assert {a.pack_hash for a in audit} == {sha}
        # the episode with no triple matches no rule of this pack: recorded, not dropped
        assert [(r.id, r.rule_id) for r in await c.fact_store.rejections()] == [
            ("d5", "no-rule-matched")
        ]
        top = await c.memory.max_seq(ALICE)
        assert await c.fact_store.watermarks("dedup_against_facts", ALICE) == {
            "known_fact_noop": top,
            "changed_object_update": top,
            "late_observation_noop": top,
            "new_fact_add": top,
        }


async def test_frequency_promotion_counts_distinct_sessions_across_passes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "m.db"
    sha = compile_file(FREQUENCY).sha256
    tea = spo("alice", "likes", "tea")
    async with Consolidator.open(db, [FREQUENCY]) as c:
        sessions = ["s1", "s1", "s2", "s3", "s3", "s4", "s5"]
        for n, session in enumerate(sessions, start=1):
            await c.record(episode(f"f{n}", n, session=session, **tea))
        await c.record(episode("g1", 20, session="s1", **spo("bob", "likes", "tea")))
        await c.record(episode("g2", 21, session="s2", **spo("bob", "likes", "tea")))
        reports = (await c.consolidate(now=NOW)).passes
        deltas = reports[0].deltas
        assert [(d.kind, d.rule_id, d.confidence, d.source_episode_ids) for d in deltas] == [
            # this episode, then the latest sighting of each counted session
            ("add", "promote_frequent", 0.5, ["f4", "f2", "f3"]),
            ("update", "strengthen_promoted", 0.6, ["f6", "f2", "f3", "f5"]),
            ("update", "strengthen_promoted", 0.7, ["f7", "f2", "f3", "f5", "f6"]),
        ]
        assert [d.reason for d in deltas] == [f"seen in {n} sessions" for n in (3, 4, 5)]

        current = await c.facts()
        assert [(f.subject, f.predicate, f.object, f.confidence, f.rule_id) for f in current] == [
            ("alice", "likes", "tea", 0.7, "strengthen_promoted")
        ]
        top = current[0]
        history = sorted(
            (
                f
                for f in await c.fact_store.query(FactPattern(include_history=True))
                if not f.is_current
            ),
            key=lambda f: f.confidence,
        )
        assert [(f.confidence, f.valid_until) for f in history] == [(0.5, NOW), (0.6, NOW)]
        assert [f.superseded_by for f in history] == [history[1].id, top.id]

        why = await c.explain(top.id)
        assert (why.rule_id, why.pack_hash, why.reason) == (
            "strengthen_promoted",
            sha,
            "seen in 5 sessions",
        )
        assert why.bindings == {"n": 5, "s": "alice", "p": "likes", "o": "tea"}
        assert [e.id for e in why.source_episodes] == ["f7", "f2", "f3", "f5", "f6"]
        assert [e.session for e in why.source_episodes] == ["s5", "s1", "s2", "s3", "s4"]
        assert ids(why.predecessors) == [history[1].id, history[0].id]
        assert ids((await c.explain(history[0].id)).successors) == [history[1].id, top.id]

        # Episodes that produced nothing leave no audit row; watermarks pass them anyway.
        audit = await c.fact_store.audit_rows()
        assert [(a.kind, a.rule_id) for a in audit] == [
            ("add", "promote_frequent"),
            ("update", "strengthen_promoted"),
            ("update", "strengthen_promoted"),
        ]
        last = await c.memory.max_seq(ALICE)
        marks = await c.fact_store.watermarks("frequency_promotion", ALICE)
        assert marks == {"promote_frequent": last, "strengthen_promoted": last}

        # Counts span passes: a sixth session in a later pass strengthens again.
        await c.record(episode("f8", 1500, session="s6", **tea))
        later = (await c.consolidate(now=NOW2)).passes
        assert later[0].episodes == 1
        assert [(d.rule_id, d.confidence, d.reason) for d in later[0].deltas] == [
            ("strengthen_promoted", 0.8, "seen in 6 sessions")
        ]
        (stronger,) = later[0].deltas
        assert isinstance(stronger, UpdateDelta) and stronger.replaces == [top.id]
        assert [f.id for f in await c.facts()] == [stronger.new_fact_id]
        assert await c.fact_store.watermarks("frequency_promotion", ALICE) == {
            "promote_frequent": last + 1,
            "strengthen_promoted": last + 1,
        }


SPECULATIVE = """\
ir_version: 1
pack: speculative
version: "1.0.0"
fields: {subject: string, predicate: string, object: string, conf: number}
defaults: {cadence: {cron: "0 3 * * *"}, confidence: 0.3}
rules:
  - id: guess
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}, conf: {bind: c}}
      - not: {subject: {var: s}, predicate: {var: p}, object: {var: o}}
    emit:
      kind: add
      subject: "{s}"
      predicate: "{p}"
      object: "{o}"
      confidence: {from: c}
      reason: "guessed ({s}, {p}, {o})"
"""


async def test_expire_speculative_closes_old_unreinforced_facts(tmp_path: Path) -> None:
    pack = tmp_path / "speculative.yaml"
    pack.write_text(SPECULATIVE, encoding="utf-8")
    db = tmp_path / "m.db"
    sha = compile_file(EXPIRE).sha256
    old = T0
    mid = old + timedelta(days=20)
    late = (old + timedelta(days=40)).replace(hour=4)  # the nightly sweep's fire time

    async with Consolidator.open(db, [pack, EXPIRE]) as c:
        await c.record(episode("x1", at=old, conf=0.3, **spo("alice", "guess", "a")))
        await c.record(episode("x2", at=old, conf=0.3, **spo("alice", "guess", "b")))
        await c.record(episode("x3", at=old, conf=0.9, **spo("alice", "knows", "c")))
        first = (await c.consolidate(now=old)).passes
        assert [(r.pack, r.counts["add"], r.counts["noop"]) for r in first] == [
            ("speculative", 3, 0),
            ("expire_speculative", 0, 0),  # a fact's own source episode is no confirmation
        ]
        facts = by_spo(await c.facts())
        a = facts["alice", "guess", "a"]
        b = facts["alice", "guess", "b"]
        c_fact = facts["alice", "knows", "c"]
        assert [(f.confidence, f.valid_from, f.rule_id) for f in (a, b, c_fact)] == [
            (0.3, old, "guess"),
            (0.3, old, "guess"),
            (0.9, old, "guess"),
        ]

        # Twenty days on: b is repeated (reinforced), d is a new speculative fact.
        await c.record(episode("x4", at=mid, conf=0.3, **spo("alice", "guess", "b")))
        await c.record(episode("x5", at=mid, conf=0.3, **spo("alice", "guess", "d")))
        middle = (await c.consolidate(now=mid)).passes
        assert [(r.pack, r.counts) for r in middle] == [
            ("speculative", {"add": 1, "update": 0, "delete": 0, "noop": 0}),
            ("expire_speculative", {"add": 0, "update": 0, "delete": 0, "noop": 1}),
        ]
        d = by_spo(await c.facts())["alice", "guess", "d"]

        # Forty days after the first pass, with no new episodes.
        late_reports = (await c.consolidate(now=late)).passes
        expire = [r for r in late_reports if r.rules == ["expire_unreinforced"]]
        assert [(r.episodes, r.counts) for r in expire] == [
            (0, {"add": 0, "update": 0, "delete": 1, "noop": 0})
        ]
        delete = expire[0].deltas[0]
        assert isinstance(delete, DeleteDelta)
        assert (delete.rule_id, delete.replaces, delete.source_episode_ids, delete.reason) == (
            "expire_unreinforced",
            [a.id],
            ["x1"],
            "(alice, guess) expired: speculative and unconfirmed for 30 days",
        )
        assert delete.promotion_ts == late

        # Kept: b (reinforced 20 days ago), c (confident), d (young).
        assert sorted(ids(await c.facts())) == sorted([b.id, c_fact.id, d.id])
        closed = await c.fact_store.get(a.id)  # still stored: closed, not deleted
        assert (closed.valid_until, closed.superseded_by, closed.confidence) == (late, None, 0.3)
        assert a.id in ids(await c.facts(as_of=late - timedelta(seconds=1)))

        why = await c.explain(a.id)
        assert why.closed_by == delete.delta_id
        assert (why.rule_id, why.reason, why.bindings) == (
            "guess",
            "guessed (alice, guess, a)",
            {"s": "alice", "p": "guess", "o": "a", "c": 0.3},
        )
        assert why.pack_hash == compile_file(pack).sha256
        assert sources(why) == [("x1", "s1", "text of x1")]
        assert [(x.kind, x.rule_id, x.pack_hash) for x in why.audit] == [
            ("add", "guess", compile_file(pack).sha256),
            ("delete", "expire_unreinforced", sha),
        ]
        why_b = await c.explain(b.id)
        assert [(x.kind, x.delta.promotion_ts) for x in why_b.audit] == [
            ("add", old),
            ("noop", mid),
        ]
        assert why_b.closed_by is None

        # Idempotent at the same pass time; 55 days on, b and d are stale too.
        before = outcome(db)
        again = (await c.consolidate(now=late)).passes
        assert all(r.deltas == [] for r in again)
        assert outcome(db) == before
        final = (await c.consolidate(now=old + timedelta(days=55))).passes
        gone = [d2.replaces for r in final for d2 in r.deltas if isinstance(d2, DeleteDelta)]
        assert sorted(fid for group in gone for fid in group) == sorted([b.id, d.id])
        assert ids(await c.facts()) == [c_fact.id]
        assert len(await c.fact_store.query(FactPattern(include_history=True))) == 4
