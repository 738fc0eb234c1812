"""``surprise``: specification 004's surprise-based importance, scored outside CLIPS with the
configured embedder, and payload operations, on both backends.

What is checked: the score is ``1 − mean cosine`` of the ``k`` nearest facts (exact values,
also computed here independently from the embedder's vectors), 1.0 without facts, over
fewer facts when there are fewer than ``k``, against the facts current at the episode's
point of the pass (a fact made earlier in the same pass counts); the score, the facts it
averages and the embedder are in the delta's bindings and in ``explain``; payload keys are
computed by operations (rounded to 9 decimals); the decisions and values do not depend on
how the stream is cut into passes nor on the order facts and episodes were stored (a
hypothesis property); a pack scoring surprise without an embedder is refused, naming the
rule; IR errors name the place.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from backends import BACKENDS, memory_location
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stargraph_mem.authoring.trace import explanation_lines
from stargraph_mem.compiler.pack import CompiledPack, compile_text
from stargraph_mem.embedding import HashingEmbedder, identity
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.report import ConsolidationReport
from stargraph_mem.errors import EmbedderError, IRError
from stargraph_mem.model.deltas import AddDelta, FactDelta, FactPayload

PACK = """\
ir_version: 1
pack: surprising
version: "1"
fact_payload: {importance: number, surprise: number, duplicate: boolean}
defaults:
  cadence: {cron: "0 3 * * *"}
rules:
  - id: redundant
    priority: 20
    when:
      - episode: {content: {bind: c}}
      - surprise: {as: u, k: 1, at_most: 0.1}
    emit:
      kind: add
      subject: "{c}"
      predicate: said
      object: "{c}"
      payload:
        importance: {max: [0, {add: [0.5, -0.3, {multiply: [0.3, {var: u}]}]}]}
        duplicate: true
        surprise: "{u}"
  - id: novel
    priority: 10
    when:
      - episode: {content: {bind: c}}
      - surprise: {as: u, k: 3}
    emit:
      kind: add
      subject: "{c}"
      predicate: said
      object: "{c}"
      payload:
        importance: {min: [1, {add: [0.5, {multiply: [0.3, {var: u}]}]}]}
        surprise: "{u}"
"""

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HASH_EMBEDDER = HashingEmbedder()
HASH = identity(HASH_EMBEDDER)
TEXTS = (
    "I love green tea",
    "i LOVE green tea!",
    "I really love green tea",
    "the meeting is on monday",
    "The meeting is on Monday.",
    "my dog is called Rex",
    "we adopted a cat",
)


@pytest.fixture(scope="module")
def surprising() -> CompiledPack:
    return compile_text(PACK)


def location(backend: str) -> AbstractAsyncContextManager[str]:
    """Where a fresh memory of ``backend`` lives (dropped afterwards)."""
    return memory_location(backend, "surprise-")


def episode(n: int, text: str, *, user: str = "u1", minutes: int | None = None) -> Any:
    from stargraph_mem.stores.models import Episode

    at = T0 + timedelta(minutes=n if minutes is None else minutes)
    return Episode(id=f"e{n}", content=text, timestamp=at, user=user, session="s", agent="a")


def seeds(texts: Sequence[str], order: Sequence[int] | None = None) -> list[AddDelta]:
    """Facts ``text said text``, current before the stream (stored in ``order``)."""
    made = [
        AddDelta(
            user="u1",
            agent="a",
            fact=FactPayload(subject=t, predicate="said", object=t),
            source_episode_ids=[f"seed{n}"],
            rule_id="seed",
            confidence=0.5,
            promotion_ts=T0 - timedelta(days=n + 1),
        )
        for n, t in enumerate(texts)
    ]
    return [made[i] for i in (range(len(made)) if order is None else order)]


def fact_deltas(report: ConsolidationReport) -> list[FactDelta]:
    return [d for p in report.passes for d in p.deltas if isinstance(d, FactDelta)]


def expected_surprise(text: str, facts: Sequence[str], k: int) -> float:
    """The score computed here from the embedder's vectors (float64 products): the mean of
    the ``k`` largest cosines, each rounded to six places, subtracted from 1."""
    if not facts:
        return 1.0
    vectors = np.asarray(HASH_EMBEDDER.embed([text, *facts]), dtype=np.float64)
    cosines = sorted((round(float(vectors[0] @ v), 6) for v in vectors[1:]), reverse=True)
    top = cosines[:k]
    return round(min(1.0, max(0.0, 1.0 - sum(top) / len(top))), 6)


STORED = ("I love green tea", "the meeting is on monday", "my dog is called Rex")


def statement(text: str) -> str:
    return f"{text} said {text}"


# --- exact values --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_score_and_its_provenance(backend: str, surprising: CompiledPack) -> None:
    """Against 3 facts (k 3): cosines 0.80139, 0.050641, 0.001391, mean 0.284474,
    u = 0.715526; importance min(1, 0.5 + 0.3 * 0.715526) = 0.7146578."""
    async with location(backend) as where, Consolidator(where, [surprising]) as mem:
        for seed in seeds(STORED):
            await mem.fact_store.apply_deltas([seed], pack_hash="seed")
        stored = {f.subject: f.id for f in await mem.facts()}
        await mem.memory.put_many([episode(0, "I really love green tea")])
        report = await mem.consolidate(now=T0 + timedelta(hours=1))
        (delta,) = fact_deltas(report)
        assert delta.rule_id == "novel"
        assert delta.fact.payload == {"importance": 0.7146578, "surprise": 0.715526}
        assert expected_surprise("I really love green tea", [statement(t) for t in STORED], 3) == (
            0.715526
        )
        b = delta.bindings
        assert b["u"] == 0.715526
        assert b["u.k"] == 3
        assert b["u.cosines"] == [0.80139, 0.050641, 0.001391]
        assert b["u.facts"] == [
            stored["I love green tea"],
            stored["my dog is called Rex"],
            stored["the meeting is on monday"],
        ]
        assert b["u.embedder"] == HASH == "stargraph-hash@1/256"
        (fact,) = [f for f in await mem.facts() if f.rule_id == "novel"]
        lines = explanation_lines(await mem.explain(fact.id))
        text = f"0.715526 over 3 facts (k 3) under embedder {HASH} (u)"
        assert any(line.split(None, 1) == ["surprise", text] for line in lines), lines


@pytest.mark.parametrize("backend", BACKENDS)
async def test_no_fact_scores_one_and_k_larger_than_the_facts_averages_them_all(
    backend: str, surprising: CompiledPack
) -> None:
    """The first episode has no fact to compare with: u = 1.0. The second (k 3) finds only
    the fact the first made in the same pass: u = 1 − its cosine. The third is within
    cosine 0.9 of the first's fact (k 1: u ≤ 0.1), flagged and its importance reduced."""
    texts = ["I love green tea", "we adopted a cat", "i LOVE green tea!"]
    async with location(backend) as where, Consolidator(where, [surprising]) as mem:
        await mem.memory.put_many([episode(n, t) for n, t in enumerate(texts)])
        report = await mem.consolidate(now=T0 + timedelta(hours=1))
        first, second, third = fact_deltas(report)
        assert first.bindings["u"] == 1.0
        assert first.bindings["u.facts"] == first.bindings["u.cosines"] == []
        assert first.fact.payload == {"importance": 0.8, "surprise": 1.0}
        one = expected_surprise(texts[1], [statement(texts[0])], 3)
        assert second.bindings["u"] == one
        assert second.bindings["u.facts"] == [first.new_fact_id]
        assert 0.5 < one < 1.0
        two = expected_surprise(texts[2], [statement(t) for t in texts[:2]], 1)
        assert third.rule_id == "redundant"  # k 1: the nearest fact only
        assert third.bindings["u"] == two == round(1 - 0.940934, 6)
        assert third.bindings["u.facts"] == [first.new_fact_id]
        assert third.bindings["u.k"] == 1
        # over both facts (k 3) it would not be redundant: the mean of k facts is no test
        # of a duplicate, a cosine to the nearest is
        assert expected_surprise(texts[2], [statement(t) for t in texts[:2]], 3) > 0.1
        assert third.fact.payload == {
            "importance": round(max(0.0, 0.5 - 0.3 + 0.3 * two), 9),
            "duplicate": True,
            "surprise": two,
        }


# --- sequential semantics --------------------------------------------------------------------


Made = tuple[str, str, str, float, float, bool]
"""(user, statement, rule, importance, surprise, duplicate) of a current fact."""


async def _run(
    backend: str,
    pack: CompiledPack,
    stored: list[AddDelta],
    passes: Sequence[tuple[datetime, list[Any]]],
) -> Counter[Made]:
    async with location(backend) as where, Consolidator(where, [pack]) as mem:
        for seed in stored:  # one at a time: the order they were stored in
            await mem.fact_store.apply_deltas([seed], pack_hash="seed")
        for now, episodes in passes:
            await mem.memory.put_many(episodes)
            await mem.consolidate(now=now)
        out: Counter[Made] = Counter()
        for f in await mem.facts():
            p = f.payload or {}
            out[
                (
                    f.user,
                    f.subject,
                    f.rule_id,
                    float(str(p.get("importance", -1.0))),
                    float(str(p.get("surprise", -1.0))),
                    bool(p.get("duplicate")),
                )
            ] += 1
        return out


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[str], list[int], list[Any], list[int], list[int]]:
    stored = draw(st.lists(st.sampled_from(TEXTS), max_size=4, unique=True))
    seed_order = draw(st.permutations(range(len(stored))))
    texts = draw(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=8))
    users = draw(st.lists(st.sampled_from(["u1", "u2"]), min_size=len(texts), max_size=len(texts)))
    episodes = [
        episode(n, t, user=u, minutes=10 * n)
        for n, (t, u) in enumerate(zip(texts, users, strict=True))
    ]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(texts) - 1)), max_size=3)))
    insertion = draw(st.permutations(range(len(episodes))))
    return stored, list(seed_order), episodes, [c for c in cuts if c < len(texts)], list(insertion)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(stream=streams())
def test_scores_do_not_depend_on_cuts_or_storage_order(
    backend: str,
    surprising: CompiledPack,
    stream: tuple[list[str], list[int], list[Any], list[int], list[int]],
) -> None:
    """One pass over the stream, stored in time order, seeds in time order == the stream
    cut into passes (each at its last episode's time), episodes of each pass inserted in a
    random order, seeds stored in a random order: the same facts, rules, importances,
    surprises and duplicate flags."""
    stored, seed_order, episodes, cuts, insertion = stream
    end = episodes[-1].timestamp + timedelta(minutes=1)
    whole = asyncio.run(_run(backend, surprising, seeds(stored), [(end, episodes)]))
    bounds = [0, *cuts, len(episodes)]
    passes = []
    rank = {n: i for i, n in enumerate(insertion)}
    for a, b in itertools.pairwise(bounds):
        part = sorted(episodes[a:b], key=lambda e: rank[int(e.id[1:])])
        at = max(e.timestamp for e in part) + timedelta(seconds=1)
        passes.append((at if b < len(episodes) else end, part))
    split = asyncio.run(_run(backend, surprising, seeds(stored, seed_order), passes))
    assert split == whole
    assert sum(whole.values()) == len(stored) + len(episodes)


# --- no embedder, bad input ----------------------------------------------------------------


async def test_a_pack_scoring_surprise_is_refused_without_an_embedder(
    tmp_path: Path, surprising: CompiledPack
) -> None:
    with pytest.raises(EmbedderError) as caught:
        Consolidator(tmp_path / "m.db", [surprising], embedder=None)
    assert str(caught.value) == (
        "pack 'surprising': rule 'redundant' scores 'surprise' (similarity), which needs an "
        "embedder: open the memory with one (embedder='hash' is built in), not embedder=None"
    )


def _pack_error(text: str) -> str:
    with pytest.raises(IRError) as caught:
        compile_text(text)
    return str(caught.value)


SWEEP = """\
ir_version: 1
pack: sweeping
version: "1"
rules:
  - id: odd
    when:
      - fact: {as: f}
      - surprise: {k: 5}
    emit: {kind: delete, replaces: [f], sources: [f]}
"""


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "surprise: {as: u, k: 3}",
            "surprise: {as: u, k: 0}",
            "rules[1].when[1].surprise.k: k must be between 1 and 100, got 0",
        ),
        (
            "surprise: {as: u, k: 3}",
            "surprise: {as: u, k: 101}",
            "rules[1].when[1].surprise.k: k must be between 1 and 100, got 101",
        ),
        (
            "surprise: {as: u, k: 1, at_most: 0.1}",
            "surprise: {as: u, k: 1, at_least: 0.5, at_most: 0.1}",
            "rules[0].when[1].surprise.at_most: at_most is smaller than at_least",
        ),
        (
            "surprise: {as: u, k: 3}\n",
            "surprise: {as: u, k: 3}\n      - surprise: {k: 1}\n",
            "rules[1].when[2].surprise: a rule has at most one 'surprise' pattern",
        ),
        (
            "      - episode: {content: {bind: c}}\n      - surprise: {as: u, k: 3}\n",
            "      - episode: {content: {bind: c}}\n      - surprise: {as: c, k: 3}\n",
            "rules[1].when[1].surprise.as: name 'c' is already used in this rule",
        ),
        (
            "      payload:\n        importance: {min: [1",
            "      sources: [u]\n      payload:\n        importance: {min: [1",
            "rules[1].emit.sources[0]: 'u' is a surprise score, not a pattern with sources",
        ),
        (
            "importance: {min: [1, {add: [0.5, {multiply: [0.3, {var: u}]}]}]}",
            "importance: {min: [1, {ebbinghaus: {fact: u, lambda: 1}}]}",
            "rules[1].emit.payload.importance.min[1].ebbinghaus: 'ebbinghaus' decays a fact's "
            "confidence: a payload value takes reinforce, multiply, min, max, clamp, add",
        ),
        (
            "duplicate: true\n",
            "duplicate: true\n        rank: {add: [1, 2]}\n",
            "rules[0].emit.payload.rank: payload key 'rank' is not declared in 'fact_payload': "
            "an operation computes a key declared 'number'",
        ),
        (
            "duplicate: true\n",
            "duplicate: {add: [1, 2]}\n",
            "rules[0].emit.payload.duplicate: payload key 'duplicate' is boolean: an operation "
            "computes a key declared 'number'",
        ),
        (
            "importance: {min: [1, {add: [0.5, {multiply: [0.3, {var: u}]}]}]}\n"
            '        surprise: "{u}"\n"""',
            'importance: 0.5\n"""',
            "rules[1].when[1].surprise.as: variable 'u' is bound but never used",
        ),
    ],
)
def test_ir_errors_name_the_place(old: str, new: str, message: str) -> None:
    text = PACK + '"""'
    assert old in text
    assert message in _pack_error(text.replace(old, new, 1).removesuffix('"""'))


def test_a_sweep_has_no_episode_to_score() -> None:
    assert (
        "<string>:8:9: rules[0].when[1].surprise: 'surprise' scores the rule's episode "
        "against the facts: it must follow the rule's 'episode' pattern (a sweep has no "
        "episode)"
    ) in _pack_error(SWEEP)
