"""A script written against stargraph 0.8's memory tier, as its documentation shows it.

Only the import paths differ from the 0.8 original: ``stargraph.stores`` became
``stargraph_mem.stores``, ``stargraph.skills.salience`` became ``stargraph_mem.salience``
and ``stargraph.errors`` became ``stargraph_mem.errors``. It writes ``./.memory`` and
``./.facts`` in the current directory (run it in an empty one).
"""

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stargraph_mem.errors import MigrationNotSupported
from stargraph_mem.salience import RuleBasedScorer, SalienceContext
from stargraph_mem.stores import (
    ConsolidationRule,
    Episode,
    FactPattern,
    MigrationPlan,
    SQLiteFactStore,
    SQLiteMemoryStore,
)

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def observation(n, user, session, agent, subject, predicate, obj, **extra):
    return Episode(
        id=f"ep-{n}",
        content=f"{subject} {predicate} {obj}",
        timestamp=START + timedelta(minutes=n),
        source_node="chat",
        agent=agent,
        user=user,
        session=session,
        metadata={"subject": subject, "predicate": predicate, "object": obj, **extra},
    )


async def main():
    memory = SQLiteMemoryStore(path=Path("./.memory"))
    await memory.bootstrap()
    facts = SQLiteFactStore(path=Path("./.facts"))
    await facts.bootstrap()

    episodes = [
        observation(1, "alice", "S1", "rag", "alice", "likes", "tea"),
        observation(2, "alice", "S1", "rag", "alice", "lives_in", "Paris"),
        observation(3, "alice", "S2", "rag", "alice", "likes", "coffee"),
        observation(4, "alice", "S2", "planner", "alice", "owns", "a bike"),
        observation(5, "alice2", "S1", "rag", "alice2", "likes", "jam"),
        observation(6, "alice", "S3", "rag", "alice", "mood", "fine", intent="noop"),
    ]
    for ep in episodes:
        await memory.put(ep, user=ep.user, session=ep.session, agent=ep.agent)

    # widening reads: this session, cross-session for (user, agent), all of a user
    print("session S1/rag:", [e.id for e in await memory.recent("alice", "S1", "rag", limit=10)])
    print("alice/rag:", [e.id for e in await memory.recent("alice", agent="rag", limit=10)])
    print("alice:", len(await memory.recent("alice", limit=10)))
    print("health fragments:", (await memory.health()).fragment_count)

    rule = ConsolidationRule(
        id="rule.memory.preferences",
        cadence={"every": 100},
        when_filter="",
        then_emits=["preferences"],
    )
    print("cadence every:", rule.cadence["every"])
    deltas = await memory.consolidate(rule)
    print("deltas:", [d.kind for d in deltas])
    for delta in deltas:
        await facts.apply_delta(delta)
    print("rule ids:", sorted({d.rule_id for d in deltas}))

    liked = await facts.query(FactPattern(user="alice", predicate="likes"))
    print("alice likes:", len(liked), "fact(s)")
    everything = await facts.query(FactPattern(user="alice"))
    print("alice facts:", len(everything))
    for fact in sorted(everything, key=lambda f: f.lineage[0]["source_episode_ids"]):
        print("  from", fact.lineage[0]["source_episode_ids"], "confidence", fact.confidence)

    scorer = RuleBasedScorer()
    now = datetime.now(UTC)
    recent = SalienceContext(
        last_access_ts=now - timedelta(hours=1), access_count=3, rule_match_count=2
    )
    older = SalienceContext(
        last_access_ts=now - timedelta(days=3), access_count=3, rule_match_count=2
    )
    fresh = await scorer.score(memory=episodes[0], context=recent)
    stale = await scorer.score(memory=episodes[0], context=older)
    print("salience in [0, 1]:", 0.0 <= stale <= fresh <= 1.0, "older scores lower:", stale < fresh)

    fact = liked[0]
    await facts.pin(fact)
    print(
        "pinned:",
        (await facts.query(FactPattern(user="alice", predicate="likes")))[0].pinned_at is not None,
    )
    await facts.unpin(fact.id)
    print("unpinned")

    await memory.migrate(
        MigrationPlan(
            target_version=2,
            operations=[
                {"op": "add_column", "table": "episodes", "column": "mood", "nullable": True}
            ],
        )
    )
    print("migrated to version 2")
    try:
        await memory.migrate(
            MigrationPlan(
                target_version=3,
                operations=[
                    {"op": "rename_column", "table": "episodes", "from": "mood", "to": "feeling"}
                ],
            )
        )
    except MigrationNotSupported as exc:
        print("refused:", exc.context["operation"], exc.context["reason"])


if __name__ == "__main__":
    asyncio.run(main())
