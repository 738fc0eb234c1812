"""``rules/dream_cycle.yaml`` and the clusters of ``near: {at_least: n}``, on both backends.

What is checked: the cosine boundary of specification 004's clustering (0.8: a fact at
0.81 of the representative joins its cluster, one at 0.79 does not), on cosines computed
here with the embedder; the clusters and their representatives do not depend on the
order the facts were stored in (a hypothesis property); clustering is by leader, so
similarity does not chain; IR errors name the place. The pack's other boundaries are in
``rules/tests/dream_cycle.yaml``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from backends import BACKENDS, memory_location
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stargraph_mem.authoring.trace import explanation_lines
from stargraph_mem.compiler.pack import CompiledPack, compile_file, compile_text
from stargraph_mem.embedding import HashingEmbedder, identity
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.near import NearIndex, Rank, VectorCache, clusters, statement
from stargraph_mem.errors import IRError
from stargraph_mem.model.deltas import AddDelta, FactPayload
from stargraph_mem.stores import Episode

PACK = Path(__file__).resolve().parent.parent / "rules" / "dream_cycle.yaml"
NOW = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
HASH = HashingEmbedder()

REP = "green tea"
TWINS = ("green tea!", "Green Tea", "green tea.")
"""Statements of cosine 1 with the representative's (case and punctuation aside)."""
AT_081 = "a cup of green tea with milk"
AT_079 = "sweet green tea with milk"


@pytest.fixture(scope="module")
def dream_cycle() -> CompiledPack:
    return compile_file(PACK)


def location(backend: str) -> AbstractAsyncContextManager[str]:
    """Where a fresh memory of ``backend`` lives (dropped afterwards)."""
    return memory_location(backend, "dream-")


def cosine(a: str, b: str) -> float:
    """The cosine of two statements ``alice likes <object>``, rounded as ``near`` rounds."""
    va, vb = np.asarray(
        HASH.embed([statement("alice", "likes", a), statement("alice", "likes", b)])
    )
    return round(float(va @ vb), 6)


def seed(obj: str, confidence: float, days: int) -> AddDelta:
    """A semantic fact (never faded or archived) ``alice likes <obj>``, ``days`` old."""
    return AddDelta(
        user="u1",
        agent="a",
        fact=FactPayload(subject="alice", predicate="likes", object=obj),
        source_episode_ids=["seed-" + hashlib.sha256(obj.encode()).hexdigest()[:12]],
        rule_id="seed",
        confidence=confidence,
        promotion_ts=NOW - timedelta(days=days),
        layer="semantic",
    )


Outcome = tuple[list[str], dict[str, str]]
"""The objects of the current facts (sorted), and each merged fact's object → the object of
the fact it was merged into."""


async def _run(backend: str, pack: CompiledPack, seeds: Sequence[AddDelta]) -> Outcome:
    async with location(backend) as where, Consolidator(where, [pack]) as mem:
        for delta in seeds:  # one at a time: the order they were stored in
            await mem.fact_store.apply_deltas([delta], pack_hash="seed")
        await mem.consolidate(now=NOW)
        every = await mem.facts(status="all")
        by_id = {f.id: f.object for f in every}
        current = sorted(f.object for f in every if f.status == "current")
        merged = {
            f.object: by_id[f.superseded_by]
            for f in every
            if f.status == "merged" and f.superseded_by is not None
        }
        assert len(merged) == sum(f.status == "merged" for f in every)
        return current, merged


# --- the cosine boundary --------------------------------------------------------------


def test_the_boundary_texts_sit_either_side_of_0_8() -> None:
    assert cosine(REP, AT_081) == 0.808843
    assert cosine(REP, AT_079) == 0.794044
    assert all(cosine(REP, twin) == 1.0 for twin in TWINS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("fifth", "joins"), [(AT_081, True), (AT_079, False)])
async def test_a_fact_at_0_81_completes_a_cluster_of_5_one_at_0_79_does_not(
    backend: str, dream_cycle: CompiledPack, fifth: str, joins: bool
) -> None:
    seeds = [seed(REP, 0.9, 5), *(seed(t, 0.8, 4) for t in TWINS), seed(fifth, 0.8, 3)]
    current, merged = await _run(backend, dream_cycle, seeds)
    if joins:
        assert current == [REP]
        assert merged == {t: REP for t in (*TWINS, fifth)}
    else:
        assert current == sorted([REP, *TWINS, fifth])
        assert merged == {}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_explain_of_a_merged_fact_names_the_cosine_and_the_embedder(
    backend: str, dream_cycle: CompiledPack
) -> None:
    """``explain`` of a fact merged into its cluster's representative says on a ``closed
    as`` line which rule merged it, at what cosine with which fact, under which embedder."""
    seeds = [seed(REP, 0.9, 5), *(seed(t, 0.8, 4) for t in TWINS), seed(AT_081, 0.8, 3)]
    async with location(backend) as where, Consolidator(where, [dream_cycle]) as mem:
        for delta in seeds:
            await mem.fact_store.apply_deltas([delta], pack_hash="seed")
        await mem.consolidate(now=NOW)
        every = await mem.facts(status="all")
        (rep,) = [f for f in every if f.status == "current"]
        milk = next(f for f in every if f.object == AT_081)
        assert milk.status == "merged"
        lines = explanation_lines(await mem.explain(milk.id))
    (closed,) = [line for line in lines if line.strip().startswith("closed as")]
    assert closed.split("closed as", 1)[1].strip() == (
        f"merged by merge_cluster: cosine {cosine(REP, AT_081)} with fact {rep.id} under "
        f"embedder {identity(HASH)} (member)"
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_belief_faded_nightly_is_still_old_when_newer_evidence_comes(
    backend: str, dream_cycle: CompiledPack
) -> None:
    """Nightly fades remake an episodic fact (its ``valid_from`` is last night), but the
    belief is as old as its observation: a move 35 nights after alice said she lives in
    Paris challenges it; one 20 nights after does not."""
    day0 = datetime(2026, 9, 1, 9, 0, tzinfo=UTC)

    def said(eid: str, at: datetime, city: str) -> Episode:
        meta = {"subject": "alice", "predicate": "lives_in", "object": city, "importance": 0.9}
        return Episode(
            id=eid, content=f"I live in {city}", timestamp=at, user="alice", session=eid,
            agent="a", metadata=meta,
        )  # fmt: skip

    for nights, challenged in ((35, True), (20, False)):
        async with location(backend) as where, Consolidator(where, [dream_cycle]) as mem:
            await mem.memory.put_many([said("paris", day0, "paris")])
            for night in range(1, nights + 1):
                await mem.consolidate(now=day0 + timedelta(days=night, hours=18))
            (paris,) = await mem.facts()
            assert paris.rule_id.startswith("fade") and paris.valid_from > day0
            moved = day0 + timedelta(days=nights, hours=20)
            await mem.memory.put_many([said("rome", moved, "rome")])
            await mem.consolidate(now=moved + timedelta(hours=1))
            statuses = {f.object: f.status for f in await mem.facts(status="all")
                        if f.status != "superseded"}  # fmt: skip
            assert statuses == {
                "paris": "challenged" if challenged else "current",
                "rome": "current",
            }, nights


# --- the same clusters whatever the storage order -------------------------------------

FAMILIES = (
    (REP, *TWINS, "green tea with milk", AT_081, AT_079),
    ("chess", "chess!", "Chess", "chess.", "CHESS"),
    ("jazz", "Jazz!"),
)


@st.composite
def stores(draw: st.DrawFn) -> tuple[list[tuple[str, float, int]], list[int]]:
    """Facts of the families (some of each), their confidences and ages, and an order."""
    chosen = [
        t for family in FAMILIES for t in draw(st.lists(st.sampled_from(family), unique=True))
    ]
    made = [(t, draw(st.sampled_from([0.6, 0.8, 0.9])), draw(st.integers(1, 3))) for t in chosen]
    return made, list(draw(st.permutations(range(len(made)))))


@pytest.mark.parametrize("backend", BACKENDS)
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(store=stores())
def test_clusters_do_not_depend_on_the_storage_order(
    backend: str,
    store: tuple[list[tuple[str, float, int]], list[int]],
) -> None:
    """Stored in the given order or in a random one: the same facts merge into the same
    representatives, each the most confident of its cluster (then the oldest)."""
    made, order = store
    seeds = [seed(t, c, d) for t, c, d in made]
    pack = compile_file(PACK)
    ordered = asyncio.run(_run(backend, pack, seeds))
    shuffled = asyncio.run(_run(backend, pack, [seeds[i] for i in order]))
    assert shuffled == ordered
    rank = {t: (-c, -d) for t, c, d in made}  # then the fact id (a hash) breaks the tie
    for member, rep in ordered[1].items():
        assert rank[rep] <= rank[member]
        assert cosine(rep, member) >= 0.8


# --- leader clustering ------------------------------------------------------------------


def _index(texts: Sequence[str]) -> NearIndex:
    index = NearIndex(VectorCache(HASH))
    index.add((f"f{n}", statement("alice", "likes", t), 0) for n, t in enumerate(texts))
    return index


def test_similarity_does_not_chain() -> None:
    """``sweet green tea with milk`` is close to ``green tea with milk`` but at 0.79 of
    ``green tea``: it stays out of the cluster ``green tea`` represents."""
    texts = [REP, "green tea with milk", AT_079]
    assert cosine(texts[1], AT_079) >= 0.8 and cosine(REP, texts[1]) >= 0.8
    ranks: dict[str, Rank] = {f"f{n}": (-0.9 + n / 10, 0, f"f{n}") for n in range(3)}
    found = clusters(_index(texts), ranks, 0.8, 1)
    assert found == [("f0", [("f1", cosine(REP, texts[1]))])]
    assert clusters(_index(texts), ranks, 0.8, 2) == []


def test_a_cluster_lists_its_members_best_first_ties_by_id() -> None:
    texts = [REP, AT_081, "Green Tea", "green tea!"]
    ranks: dict[str, Rank] = {f"f{n}": (-0.8, n, f"f{n}") for n in range(4)}
    assert clusters(_index(texts), ranks, 0.8, 3) == [
        ("f0", [("f2", 1.0), ("f3", 1.0), ("f1", 0.808843)])
    ]
    assert identity(HASH) == "stargraph-hash@1/256"


# --- IR errors ------------------------------------------------------------------------------

SWEEP = """\
ir_version: 1
pack: c
version: "1"
rules:
  - id: merge
    when:
      - fact: {as: rep}
      - fact: {as: member, near: {of: rep, min_cosine: 0.8, at_least: 4}}
    emit: {kind: delete, replaces: [member], sources: [member], status: merged, merged_into: rep}
"""


def _error(text: str) -> str:
    with pytest.raises(IRError) as caught:
        compile_text(text)
    return str(caught.value)


def test_the_sweep_compiles() -> None:
    (rel,) = compile_text(SWEEP).near
    assert (rel.at_least, rel.min_cosine, rel.of) == (4, 0.8, "rep")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "min_cosine: 0.8, at_least: 4",
            "at_least: 4",
            "rules[0].when[1].fact.near.at_least: 'at_least' groups facts whose cosine reaches "
            "'min_cosine': write 'min_cosine' too",
        ),
        (
            "at_least: 4}",
            "at_least: 4, top_k: 10}",
            "rules[0].when[1].fact.near.top_k: with 'at_least' every other member of the "
            "cluster is a neighbour: drop 'top_k'",
        ),
        (
            "at_least: 4}",
            "at_least: 0}",
            "rules[0].when[1].fact.near.at_least",
        ),
        (
            "      - fact: {as: rep}\n      - fact: {as: member, near: {of: rep,",
            "      - episode: {content: {bind: c}}\n      - fact: {as: rep, object: {var: c}}\n"
            "      - fact: {as: member, near: {of: episode,",
            "rules[0].when[2].fact.near.at_least: clusters ('at_least') are a sweep's",
        ),
    ],
)
def test_at_least_errors_name_the_place(old: str, new: str, message: str) -> None:
    assert old in SWEEP
    assert message in _error(SWEEP.replace(old, new))
