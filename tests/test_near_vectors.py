"""Where ``near`` gets its vectors: a pass reads the stored vectors of the facts it ranks
(as recall stores them) instead of embedding their statements again, except for a fact
with a payload (its stored vector is of its statement and payload); the decisions are the
same either way, on both backends. And the index of a kept partition embeds the facts a
pass made only when the next ranking needs them."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from backends import BACKENDS, memory_location
from hypothesis import given, settings
from hypothesis import strategies as st
from near_packs import merge_or_add

from stargraph_mem.compiler.pack import CompiledPack, compile_text
from stargraph_mem.compiler.program import NearRelation
from stargraph_mem.embedding import HashingEmbedder, Matrix
from stargraph_mem.engine.api import Consolidator, runtime_for
from stargraph_mem.engine.passes.near import NearIndex, VectorCache
from stargraph_mem.engine.passes.runner import STORED_VECTORS_FROM
from stargraph_mem.model.deltas import AddDelta, FactPayload
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.scope import Partition

PACK = merge_or_add("vectors_near", 0.8)

T0 = datetime(2026, 5, 1, tzinfo=UTC)
WORDS = (
    *("tea", "coffee", "green", "black", "monday", "friday", "dog"),
    *("cat", "garden", "train", "paris", "book", "piano"),
)


class Counting:
    """The built-in embedder (its identity too), remembering every text it embedded."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.texts: list[str] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def version(self) -> str:
        return self.inner.version

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def statement(i: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 4)) + f" n{i}"


def seeds(n: int, payload_every: int) -> list[AddDelta]:
    return [
        AddDelta(
            user="u",
            agent="a",
            fact=FactPayload(
                subject=statement(i),
                predicate="said",
                object=statement(i),
                payload={"note": f"seed {i}"} if i % payload_every == 0 else {},
            ),
            source_episode_ids=[f"seed{i}"],
            rule_id="seed",
            confidence=0.5,
            promotion_ts=T0 - timedelta(days=1, seconds=i),
        )
        for i in range(n)
    ]


def said(eid: str, text: str, minutes: int, **metadata: str) -> Episode:
    """An episode of user ``u`` saying ``text``, ``minutes`` after T0."""
    return Episode(
        id=eid,
        content=text,
        timestamp=T0 + timedelta(minutes=minutes),
        user="u",
        agent="a",
        session="s",
        metadata=metadata,
    )


def episodes() -> list[Episode]:
    texts = [statement(3).upper() + "!", "piano lessons on friday", statement(8) + "."]
    return [said(f"e{n}", t, n) for n, t in enumerate(texts)]


def location(backend: str) -> AbstractAsyncContextManager[str]:
    """Where a fresh memory of ``backend`` lives (dropped afterwards)."""
    return memory_location(backend, "near-vectors-")


async def consolidated(
    backend: str, pack: CompiledPack, *, backfill: bool
) -> tuple[list[tuple[str, float]], Counting]:
    """The facts left by one pass over :func:`episodes` in a fresh memory, the runtime's
    vectors cleared first (after storing the facts' vectors when ``backfill``)."""
    embedder = Counting()
    count = 2 * STORED_VECTORS_FROM
    async with location(backend) as where, Consolidator(where, [pack], embedder=embedder) as mem:
        await mem.fact_store.apply_deltas(seeds(count, payload_every=5), pack_hash="seed")
        if backfill:
            await mem.embed_backfill()
        await mem.memory.put_many(episodes())
        runtime_for(pack)._vectors.clear()
        embedder.texts.clear()
        await mem.consolidate(now=T0 + timedelta(hours=1))
        facts = sorted((f.subject, f.confidence) for f in await mem.facts())
    return facts, embedder


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_pass_reads_stored_fact_vectors_and_decides_the_same(backend: str) -> None:
    pack = compile_text(PACK)
    plain, fresh = await consolidated(backend, pack, backfill=False)
    stored, reading = await consolidated(backend, pack, backfill=True)
    assert stored == plain
    said = {s for s, _ in plain}
    assert "piano lessons on friday" in said  # an add
    assert statement(3).upper() + "!" in said and statement(3) not in said  # a merge
    count = 2 * STORED_VECTORS_FROM
    with_payload = {f"{statement(i)} said {statement(i)}" for i in range(0, count, 5)}
    without = {f"{statement(i)} said {statement(i)}" for i in range(count)} - with_payload
    assert without <= set(fresh.texts)  # nothing stored: every statement embedded
    assert not without & set(reading.texts)  # stored: read, not embedded
    assert with_payload <= set(reading.texts)  # a payload's vector is another text's
    assert {e.content for e in episodes()} <= set(reading.texts)


def test_facts_added_later_get_their_rows_when_a_ranking_needs_them() -> None:
    embedder = Counting()
    index = NearIndex(VectorCache(embedder))
    index.add([("a", "green tea", 1), ("b", "black coffee", 2)])
    index.add([("c", "green tea please", 3)], later=True)
    assert embedder.texts == ["green tea", "black coffee"]
    assert index.pending == {"c": ("green tea please", 3)}
    index.rename({"c": "f-c", "b": "f-b"})
    assert index.pending == {"f-c": ("green tea please", 3)}
    assert index.holds([_Fact("a"), _Fact("f-b"), _Fact("f-c")])
    assert not index.holds([_Fact("a"), _Fact("f-b"), _Fact("c")])
    query = embedder.inner.embed(["green tea please"])[0]
    rel = NearRelation(0, 0, "r", "twin", "episode", top_k=2, min_cosine=None)
    found = index.neighbours(rel, query)
    assert [fid for fid, _ in found] == ["f-c", "a"]
    assert found[0][1] == 1.0
    assert embedder.texts[-1] == "green tea please" and not index.pending
    index.add([("d", "dog", 4)], later=True)
    index.remove(["d", "a"])
    index.rename({"e": None})
    assert not index.pending and sorted(index.ids) == ["f-b", "f-c"]
    assert np.array_equal(index.vector("f-c"), query)


class _Fact:
    def __init__(self, fid: str) -> None:
        self.id = fid


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "later", "remove", "rename", "reject"]),
        st.integers(min_value=0, max_value=11),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(start=st.sets(st.integers(min_value=0, max_value=11), max_size=8), ops=_OPS)
def test_the_check_of_changed_ids_agrees_with_the_full_check(
    start: set[int], ops: list[tuple[str, int]]
) -> None:
    """``holds_changed`` (what a kept index checks after a pass: only the ids either side
    changed) says what ``holds`` (every fact) says, for any pass of adds, removals and
    renames, and any set of facts the pass's own bookkeeping ends with."""
    index = NearIndex(VectorCache(HashingEmbedder(16)))
    index.add((f"f{i}", f"word{i}", i) for i in sorted(start))
    index.mark()
    ours = {f"f{i}" for i in start}
    changed: set[str] = set()
    for op, i in ops:
        fid = f"f{i}"
        if op in ("add", "later"):
            index.add([(fid, f"word{i}", i)], later=op == "later")
            ours.add(fid)
        elif op == "remove":
            index.remove([fid])
            ours.discard(fid)
        elif op == "rename":
            index.rename({fid: f"g{i}"})
            if fid in ours:
                ours.discard(fid)
                ours.add(f"g{i}")
            changed.add(f"g{i}")
        else:  # the other side disagrees about this id (a rejected delta, say)
            ours.symmetric_difference_update({fid})
        changed.add(fid)
    facts = [_Fact(fid) for fid in sorted(ours)]
    assert index.holds_changed(len(facts), changed, ours.__contains__) == index.holds(facts)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_pass_stores_the_vectors_it_made_for_the_next_one(backend: str) -> None:
    """A pass that embedded many fact statements without a stored vector stores those
    vectors (as recall would have): the next pass over the partition, in a runtime that
    holds no vector (another process), reads them and embeds no statement again; the facts
    with a payload (whose stored vector is of another text) are not stored by a pass."""
    pack = compile_text(PACK)
    embedder = Counting()
    count = 2 * STORED_VECTORS_FROM
    later = [said("late", statement(11).lower() + "?", 120)]
    async with location(backend) as where, Consolidator(where, [pack], embedder=embedder) as mem:
        await mem.fact_store.apply_deltas(seeds(count, payload_every=5), pack_hash="seed")
        await mem.memory.put_many(episodes())
        runtime_for(pack)._vectors.clear()
        await mem.consolidate(now=T0 + timedelta(hours=1))
        plain = [d for d in seeds(count, payload_every=5) if not d.fact.payload]
        texts = {f"{d.fact.subject} said {d.fact.object}" for d in plain}
        seed_texts = {d.fact.subject for d in plain}
        assert texts <= set(embedder.texts)  # the first pass embedded them
        ids = [f.id for f in await mem.fact_store.current_facts(Partition("u", "a"))]
        found, rows = await mem.database.vectors.fact_vectors(
            Partition("u", "a").key, embedder, ids
        )
        current_seeds = {
            f.id for f in await mem.facts() if not f.payload and f.subject in seed_texts
        }
        assert set(found) == current_seeds  # the ranked statements', not the payloads'
        assert len(current_seeds) == len(plain) - 2  # the two the episodes merged closed
        by_text = dict(zip(embedder.texts, embedder.inner.embed(embedder.texts), strict=True))
        current = {f.id: f for f in await mem.fact_store.current_facts(Partition("u", "a"))}
        for fid, row in zip(found, rows, strict=True):
            fact = current[fid]
            assert fact.payload is None
            assert (
                row.tobytes() == by_text[f"{fact.subject} {fact.predicate} {fact.object}"].tobytes()
            )
        runtime_for(pack)._vectors.clear()  # another process
        embedder.texts.clear()
        await mem.memory.put_many(later)
        await mem.consolidate(now=T0 + timedelta(hours=3))
        assert not texts & set(embedder.texts)  # read, not embedded again
        assert later[0].content in embedder.texts


class Batches(Counting):
    """:class:`Counting`, remembering each call's texts apart."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls.append(list(texts))
        return super().embed(texts)


FORESEEN_PACK = """\
ir_version: 1
pack: foreseen
version: "1"
fields: {topic: string}
defaults:
  cadence: {cron: "0 3 * * *"}
rules:
  - id: merge
    priority: 10
    when:
      - episode: {content: {bind: c}, topic: {bind: t}}
      - fact:
          as: twin
          predicate: said
          object: {bind: o}
          near: {top_k: 1, min_cosine: 0.8, cosine: cos}
    emit:
      kind: update
      replaces: [twin]
      subject: "{t}: {c}"
      predicate: said
      object: "{c}, once {o}"
      confidence: {from: cos}
  - id: add
    when:
      - episode: {content: {bind: c}, topic: {bind: t}}
      - not: {predicate: said, near: {top_k: 1, min_cosine: 0.8}}
    emit: {kind: add, subject: "{t}: {c}", predicate: said, object: "{c}"}
"""


def topical(n: int) -> list[Episode]:
    """Episodes whose facts the pack makes from their text and metadata; every third
    repeats an earlier one in other case (a merge)."""
    return [
        said(
            f"t{i}",
            statement(i - 2).upper() if i % 3 == 2 else statement(i),
            i,
            topic=f"topic {i % 2}",
        )
        for i in range(n)
    ]


async def foreseen_run(backend: str, foresee: bool) -> tuple[list[tuple[str, str, float]], Batches]:
    pack = compile_text(FORESEEN_PACK)
    embedder = Batches()
    runtime = runtime_for(pack)
    async with location(backend) as where, Consolidator(where, [pack], embedder=embedder) as mem:
        await mem.memory.put_many(topical(9))
        runtime._vectors.clear()
        if not foresee:  # every rule unforeseeable: each made fact embedded when made
            runtime._foreseers.update(dict.fromkeys(runtime.rules))
        await mem.consolidate(now=T0 + timedelta(hours=1))
        runtime._foreseers.clear()
        facts = sorted((f.subject, f.object, f.confidence) for f in await mem.facts())
    return facts, embedder


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_pass_embeds_the_facts_its_rules_will_make_with_its_episodes(
    backend: str,
) -> None:
    """The statement of a fact a rule makes from the episode's text fields alone is
    embedded with the pass's episodes, in one batch, not one call per fact as each is
    made; one that cannot be foreseen (it quotes the fact it replaces) is embedded when
    made. The decisions are the same either way."""
    foreseen, batches = await foreseen_run(backend, foresee=True)
    plain, one_by_one = await foreseen_run(backend, foresee=False)
    assert foreseen == plain
    made = {f"{s} said {o}" for s, o, _ in foreseen}
    merges = {t for t in made if ", once " in t}
    adds = made - merges
    assert merges and adds
    first, *later = batches.calls
    assert adds <= set(first)  # foreseen: in the first batch, with the episodes
    assert not adds & {t for call in later for t in call}
    # the merges: one by one, when a later episode ranks them (the last one's: none does)
    assert all(len(call) == 1 for call in later)
    assert {t for call in later for t in call} == merges - {max(merges, key=_made_by_last)}
    _, *plain_later = one_by_one.calls
    assert all(len(call) == 1 for call in plain_later)
    assert len(plain_later) == len(topical(9)) - 1  # each fact made but the last one


def _made_by_last(text: str) -> bool:
    return statement(6).upper() in text


_AHEAD_OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "later", "remove", "rename", "rank"]),
        st.integers(min_value=0, max_value=199),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    start=st.integers(min_value=65, max_value=160),
    ops=_AHEAD_OPS,
    top=st.integers(min_value=1, max_value=4),
    floor=st.sampled_from([None, 0.2, 0.5]),
)
def test_rankings_from_fast_scores_made_ahead_are_the_rankings_made_one_by_one(
    start: int, ops: list[tuple[str, int]], top: int, floor: float | None
) -> None:
    """A pass makes the fast scores of the episodes ahead in one call, then adds, closes
    and renames facts between episodes: each episode's neighbours (ids and cosines) are
    exactly those ranked with no scores made ahead, whatever changed in between."""
    rng = np.random.default_rng(start)
    embedder = HashingEmbedder(32)

    def text(i: int) -> str:
        return " ".join(WORDS[j] for j in np.random.default_rng(i).integers(0, len(WORDS), 4))

    index = NearIndex(VectorCache(embedder))
    index.add((f"f{i}", text(i), i) for i in range(start))
    queries = embedder.embed([text(1000 + int(i)) for i in rng.integers(0, 50, 8)])
    index.score_ahead(queries)
    rel = NearRelation(0, 0, "r", "twin", "episode", top_k=top, min_cosine=floor)
    ranked = 0
    for op, i in ops:
        if op in ("add", "later"):
            index.add([(f"n{i}", text(5000 + i), 10_000 + i)], later=op == "later")
        elif op == "remove":
            index.remove([f"f{i}", f"n{i}"])
        elif op == "rename":
            index.rename({f"n{i}": f"m{i}"})
        else:
            j = ranked % len(queries)
            assert index.neighbours(rel, queries[j], ahead=j) == index.neighbours(rel, queries[j])
            ranked += 1
    for j in range(len(queries)):
        assert index.neighbours(rel, queries[j], ahead=j) == index.neighbours(rel, queries[j])
