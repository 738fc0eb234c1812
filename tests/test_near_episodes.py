"""``earlier`` patterns with ``near``: the near neighbours of an episode among the
partition's earlier episodes (earlier passes' and the same pass's, never the episode
itself), ranked outside CLIPS with the configured embedder, on both backends.

What is checked: an episode repeating an earlier one binds it (with its cosine) and cites
it as a source; the cosine, the episode and the embedder's identity are in the delta's
bindings and in ``explain``; an episode is never its own neighbour; neighbours come from
earlier passes too; the windows (``last``, ``within``) bound the candidates; stored
vectors of the embedder's identity are reused (and give the same decisions); the
decisions do not depend on how the stream is cut into passes nor on the order episodes
were stored in (a hypothesis property, on SQLite and PostgreSQL); without an embedder the
pack is refused naming the rule; IR errors name the place.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from backends import BACKENDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_near import TEXTS, episode, location

from stargraph_mem.authoring.trace import explanation_lines
from stargraph_mem.compiler.pack import CompiledPack, compile_text
from stargraph_mem.embedding import HashingEmbedder, Matrix, identity
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.near import VectorCache
from stargraph_mem.engine.passes.near_episodes import EarlierEpisodes, EpisodeNeighbours
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.errors import EmbedderError, IRError
from stargraph_mem.model.time import from_us
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.scope import Partition

ECHOES = """\
ir_version: 1
pack: echoes
version: "1"
defaults:
  cadence: {cron: "0 3 * * *"}
rules:
  - id: echo
    priority: 10
    when:
      - episode: {id: {bind: eid}, content: {bind: c}}
      - earlier:
          as: prev
          near: {top_k: 1, min_cosine: 0.8, cosine: cos}
    emit:
      kind: add
      subject: "{eid}"
      predicate: echoes
      object: "{c}"
      confidence: {from: cos}
      sources: [prev]
      reason: says again what an earlier episode said
  - id: first_said
    when:
      - episode: {id: {bind: eid}, content: {bind: c}}
    emit: {kind: add, subject: "{eid}", predicate: said, object: "{c}"}
"""

HASH = identity(HashingEmbedder())


@pytest.fixture(scope="module")
def echoes() -> CompiledPack:
    return compile_text(ECHOES)


Decision = tuple[str, str, str, float, tuple[str, ...]]
"""(user, subject (the episode id), predicate, confidence, source episodes) of a fact."""


async def decisions(mem: Consolidator) -> Counter[Decision]:
    out: Counter[Decision] = Counter()
    for fact in await mem.facts():
        why = await mem.explain(fact.id)
        sources = tuple(sorted(why.provenance.source_episode_ids))
        out[(fact.user, fact.subject, fact.predicate, round(fact.confidence, 6), sources)] += 1
    return out


# --- an echo binds the earlier episode; explain cites cosine, episode and embedder ----------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_echo_binds_the_earlier_episode_and_explain_cites_it(
    backend: str, echoes: CompiledPack
) -> None:
    """``e3`` repeats ``e1`` (cosine 0.87 ≥ 0.8): it is an echo citing ``e1`` with the cosine
    and the embedder; ``e1`` (no earlier episode) and ``e2`` (unrelated) are only said."""
    async with location(backend) as where, Consolidator(where, [echoes]) as mem:
        await mem.memory.put_many([episode(1, "I love green tea"), episode(2, "we adopted a cat")])
        await mem.consolidate(now=episode(2, "").timestamp + timedelta(minutes=1))
        await mem.memory.put_many([episode(3, "I really love green tea")])
        report = await mem.consolidate(now=episode(3, "").timestamp + timedelta(minutes=1))
        made = {(f.subject, f.predicate): f for f in await mem.facts()}
        assert set(made) == {("e1", "said"), ("e2", "said"), ("e3", "echoes")}
        echo = made[("e3", "echoes")]
        why = await mem.explain(echo.id)
        assert list(why.provenance.source_episode_ids) == ["e3", "e1"]
        bindings = why.provenance.bindings
        assert bindings["prev.episode"] == "e1"
        assert bindings["prev.embedder"] == HASH
        assert bindings["prev.cosine"] == echo.confidence
        assert 0.8 <= echo.confidence < 1.0
        lines = explanation_lines(why)
        assert any(
            line.strip().startswith("similar")
            and f"cosine {echo.confidence} with episode e1 under embedder {HASH} (prev)" in line
            for line in lines
        ), lines
        (delta,) = [d for p in report.passes for d in p.deltas]
        assert delta.bindings["prev.episode"] == "e1"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_episode_is_never_its_own_neighbour_and_same_pass_episodes_count(
    backend: str, echoes: CompiledPack
) -> None:
    """One pass: the first of two equal texts has no earlier episode (not itself), the
    second finds the first (cosine 1.0)."""
    async with location(backend) as where, Consolidator(where, [echoes]) as mem:
        await mem.memory.put_many([episode(1, "I love tea"), episode(2, "I love tea")])
        await mem.consolidate(now=episode(3, "").timestamp)
        got = await decisions(mem)
        assert got == Counter(
            {
                ("u1", "e1", "said", 0.8, ("e1",)): 1,
                ("u1", "e2", "echoes", 1.0, ("e1", "e2")): 1,
            }
        )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_batched_partitions_each_see_their_own_earlier_passes(
    backend: str, echoes: CompiledPack
) -> None:
    """Many partitions in one run (the batched path): each episode of the second pass
    finds the episode of its own partition from the first pass, never another's."""
    users = [f"u{i}" for i in range(6)]
    first = [episode(i, "I love green tea", user=u) for i, u in enumerate(users)]
    second = [episode(10 + i, "I really love green tea", user=u) for i, u in enumerate(users)]
    async with location(backend) as where, Consolidator(where, [echoes]) as mem:
        await mem.memory.put_many(first)
        await mem.consolidate(now=episode(9, "").timestamp)
        await mem.memory.put_many(second)
        await mem.consolidate(now=episode(20, "").timestamp)
        got = {d[1]: (d[0], d[4]) for d in await decisions(mem) if d[2] == "echoes"}
    assert got == {
        f"e{10 + i}": (u, tuple(sorted((f"e{i}", f"e{10 + i}")))) for i, u in enumerate(users)
    }


# --- windows --------------------------------------------------------------------------------


def _window_pack(near: str) -> CompiledPack:
    return compile_text(
        ECHOES.replace("near: {top_k: 1, min_cosine: 0.8, cosine: cos}", f"near: {near}")
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_last_and_within_bound_the_earlier_episodes(backend: str) -> None:
    """``e1`` and ``e4`` say the same; two unrelated episodes lie between (30 min each).
    With ``last: 2`` or ``within: 1h`` ``e1`` is out of reach; ``last: 3`` and
    ``within: 2h`` reach it."""
    stream = [
        episode(1, "my dog is called Rex", minutes=0),
        episode(2, "we adopted a cat", minutes=30),
        episode(3, "the meeting is on monday", minutes=60),
        episode(4, "My dog is called Rex!", minutes=90),
    ]
    found: dict[str, bool] = {}
    for window in ("last: 2", "last: 3", "within: 1h", "within: 2h"):
        pack = _window_pack(f"{{top_k: 1, min_cosine: 0.8, cosine: cos, {window}}}")
        async with location(backend) as where, Consolidator(where, [pack]) as mem:
            await mem.memory.put_many(stream[:2])
            await mem.consolidate(now=stream[1].timestamp + timedelta(seconds=1))
            await mem.memory.put_many(stream[2:])
            await mem.consolidate(now=stream[3].timestamp + timedelta(seconds=1))
            found[window] = any(
                f.predicate == "echoes" and f.subject == "e4" for f in await mem.facts()
            )
    assert found == {"last: 2": False, "last: 3": True, "within: 1h": False, "within: 2h": True}


# --- stored vectors ---------------------------------------------------------------------------


def _record(n: int, text: str) -> EpisodeRecord:
    e = episode(n, text)
    return EpisodeRecord(
        seq=n,
        id=e.id,
        content=text,
        timestamp=e.timestamp,
        source_node=None,
        user="u1",
        session="s",
        agent="a",
    )


class _Counting(HashingEmbedder):
    """The hashing embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.texts += texts
        return super().embed(texts)


class _Builder:
    """Records what would be asserted into CLIPS."""

    def __init__(self) -> None:
        self.facts: list[dict[bytes, object]] = []
        self.slots: dict[bytes, object] = {}

    def put(self, name: bytes, value: object) -> None:
        self.slots[name] = value

    def assert_fact(self) -> None:
        self.facts.append(self.slots)
        self.slots = {}


def test_stored_vectors_of_the_identity_are_reused_and_decide_alike(echoes: CompiledPack) -> None:
    """Earlier episodes with a stored vector of the embedder's identity are not embedded
    again; those of another identity are; the neighbours are the same either way."""
    prior = [_record(1, "I love green tea"), _record(2, "we adopted a cat")]
    now = _record(3, "I really love green tea")
    blobs = {
        r.id: np.asarray(HashingEmbedder().embed([r.content])[0], dtype="<f4").tobytes()
        for r in prior
    }
    results = []
    every = [*(r.content for r in prior), now.content]
    for ident, texts in ((HASH, [now.content]), ("other@1/256", every)):
        embedder = _Counting()
        neighbours = EpisodeNeighbours(
            echoes.episode_near, VectorCache(embedder), EarlierEpisodes(prior, blobs, ident), [now]
        )
        fb = _Builder()
        neighbours.episode(1, now, [0], fb)
        assert sorted(embedder.texts) == sorted(texts)
        results.append([(f[b"id"], f[b"cos"]) for f in fb.facts])
    assert results[0] == results[1]
    assert [eid for eid, _ in results[0]] == ["e1"]


# --- sequential semantics ------------------------------------------------------------------


async def _run(
    backend: str, pack: CompiledPack, passes: Sequence[tuple[datetime, list[Episode]]]
) -> Counter[Decision]:
    async with location(backend) as where, Consolidator(where, [pack]) as mem:
        for now, episodes in passes:
            await mem.memory.put_many(episodes)
            await mem.consolidate(now=now)
        return await decisions(mem)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Episode], list[int], list[int]]:
    texts = draw(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=9))
    users = draw(st.lists(st.sampled_from(["u1", "u2"]), min_size=len(texts), max_size=len(texts)))
    episodes = [
        episode(n, t, user=u, minutes=10 * n)
        for n, (t, u) in enumerate(zip(texts, users, strict=True))
    ]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(texts) - 1)), max_size=3)))
    insertion = draw(st.permutations(range(len(episodes))))
    return episodes, [c for c in cuts if c < len(texts)], list(insertion)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(stream=streams())
def test_episode_neighbours_do_not_depend_on_cuts_or_storage_order(
    backend: str, stream: tuple[list[Episode], list[int], list[int]]
) -> None:
    """One pass over the stream stored in time order == the stream cut into passes (each
    at its last episode's time), the episodes of each pass stored in a random order; with
    ``top_k: 2`` ties (equal texts) are broken by episode id, whatever the order."""
    pack = _window_pack("{top_k: 2, min_cosine: 0.8, cosine: cos}")
    episodes, cuts, insertion = stream
    end = episodes[-1].timestamp + timedelta(minutes=1)
    whole = asyncio.run(_run(backend, pack, [(end, episodes)]))
    bounds = [0, *cuts, len(episodes)]
    passes = []
    rank = {n: i for i, n in enumerate(insertion)}
    for a, b in itertools.pairwise(bounds):
        part = sorted(episodes[a:b], key=lambda e: rank[int(e.id[1:])])
        at = max(e.timestamp for e in part) + timedelta(seconds=1)
        passes.append((at if b < len(episodes) else end, part))
    split = asyncio.run(_run(backend, pack, passes))
    assert split == whole
    echoes = [d for d in whole if d[2] == "echoes"]
    repeated = len(episodes) - len({(e.user, e.content) for e in episodes})
    assert len(echoes) >= (1 if repeated else 0)


# --- refusals ------------------------------------------------------------------------------


def test_a_pack_with_episode_near_is_refused_without_an_embedder(
    tmp_path: Path, echoes: CompiledPack
) -> None:
    with pytest.raises(EmbedderError) as caught:
        Consolidator(tmp_path / "m.db", [echoes], embedder=None)
    assert str(caught.value) == (
        "pack 'echoes': rule 'echo' tests 'near' (similarity), which needs an "
        "embedder: open the memory with one (embedder='hash' is built in), not embedder=None"
    )
    assert not (tmp_path / "m.db").exists()


def test_a_pass_without_an_embedder_is_refused(echoes: CompiledPack) -> None:
    runtime = PackRuntime(echoes)
    try:
        with pytest.raises(EmbedderError, match="rule 'echo' tests 'near'"):
            runtime.run_pass(
                partition=Partition("u1", "a"),
                now=from_us(0),
                episodes=[_record(1, "hi")],
                facts=[],
                embedder=None,
            )
    finally:
        runtime.close()


def _pack_error(text: str) -> str:
    with pytest.raises(IRError) as caught:
        compile_text(text)
    return str(caught.value)


NEAR = "near: {top_k: 1, min_cosine: 0.8, cosine: cos}"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            NEAR,
            "keys: [session]\n          " + NEAR,
            "rules[0].when[1].earlier: 'near' ranks earlier episodes by meaning, 'keys' "
            "matches them exactly: write one of them",
        ),
        (
            NEAR,
            "over: history\n          " + NEAR,
            "rules[0].when[1].earlier.over: 'near' ranks earlier passes' episodes and this "
            "pass's alike: drop 'over'",
        ),
        (
            NEAR,
            "session: s\n          " + NEAR,
            "rules[0].when[1].earlier.session: an 'earlier' pattern with 'near' takes no field "
            "tests ('session')",
        ),
        (
            NEAR,
            "near: {top_k: 1, min_cosine: 0.8, cosine: c}",
            "rules[0].when[1].earlier.near.cosine: name 'c' is already used in this rule",
        ),
        (
            NEAR,
            "near: {top_k: 1, last: 0, cosine: cos}",
            "rules[0].when[1].earlier.near.last: last must be between 1 and 100000, got 0",
        ),
        (
            NEAR,
            "near: {top_k: 1, cosine: cos, top: 3}",
            "rules[0].when[1].earlier.near",
        ),
        (
            "      kind: add\n",
            "      kind: update\n      replaces: [prev]\n",
            "'prev' is a neighbour episode ('earlier' with 'near'), which made no fact of its "
            "own to replace: cite it in 'sources' instead",
        ),
        (
            "      - earlier:\n          as: prev\n          " + NEAR,
            "      - earlier:\n          as: prev",
            "rules[0].when[1].earlier: an 'earlier' pattern needs 'keys' (1 to 4 fields), or "
            "'near'",
        ),
    ],
)
def test_ir_errors_name_the_place(old: str, new: str, message: str) -> None:
    assert old in ECHOES
    assert message in _pack_error(ECHOES.replace(old, new))


def test_a_sweep_has_no_earlier_episodes() -> None:
    text = """\
ir_version: 1
pack: sweepy
version: "1"
defaults:
  cadence: {cron: "0 3 * * *"}
rules:
  - id: s
    when:
      - fact: {as: f}
      - earlier: {as: prev, near: {top_k: 1}}
    emit: {kind: delete, replaces: [f], sources: [prev]}
"""
    assert "rules[0].when[1]: an 'earlier' pattern must follow the rule's 'episode' pattern" in (
        _pack_error(text)
    )
