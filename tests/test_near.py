"""``near``: rules that see the near neighbours of an episode (or, in a sweep, of a fact),
ranked outside CLIPS with the configured embedder, on both backends.

What is checked: a paraphrase merges into the fact it repeats, the cosine and the
embedder's identity are in the delta's bindings and in ``explain``; neighbours are the
facts current at the episode's point of the pass (facts made earlier in the same pass
count), so the facts do not depend on how the stream is cut into passes nor on the order
episodes and facts were stored (a hypothesis property, on SQLite and PostgreSQL); a sweep
ranks facts against each other; a pack testing ``near`` without an embedder is refused
when the memory is opened, naming the pack and rule; IR errors name the place.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import Counter
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
from stargraph_mem.compiler.pack import CompiledPack, compile_text
from stargraph_mem.embedding import HashingEmbedder, identity
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.near import largest_norm
from stargraph_mem.engine.passes.report import ConsolidationReport
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.errors import EmbedderError, IRError
from stargraph_mem.model.deltas import AddDelta, FactPayload, MemoryDelta
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.scope import Partition

PARAPHRASES = """\
ir_version: 1
pack: paraphrases
version: "1"
defaults:
  cadence: {cron: "0 3 * * *"}
rules:
  - id: merge_paraphrase
    priority: 10
    when:
      - episode: {content: {bind: c}}
      - fact:
          as: twin
          near: {of: episode, top_k: 1, min_cosine: 0.8, cosine: cos}
    emit:
      kind: update
      replaces: [twin]
      subject: "{c}"
      predicate: said
      object: "{c}"
      confidence: {from: cos}
      sources: [twin]
      reason: a paraphrase of an earlier fact
  - id: keep_new
    when:
      - episode: {content: {bind: c}}
      - not: {near: {top_k: 1, min_cosine: 0.8}}
    emit: {kind: add, subject: "{c}", predicate: said, object: "{c}"}
"""

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HASH = identity(HashingEmbedder())
TEXTS = (
    "I love green tea",
    "i LOVE green tea!",
    "I really love green tea",
    "I love tea",
    "the meeting is on monday",
    "The meeting is on Monday.",
    "the meeting moved to tuesday",
    "my dog is called Rex",
    "My dog is called Rex!",
    "we adopted a cat",
)


@pytest.fixture(scope="module")
def paraphrases() -> CompiledPack:
    return compile_text(PARAPHRASES)


def location(backend: str) -> AbstractAsyncContextManager[str]:
    """Where a fresh memory of ``backend`` lives (dropped afterwards)."""
    return memory_location(backend, "near-")


def episode(n: int, text: str, *, user: str = "u1", minutes: int | None = None) -> Episode:
    at = T0 + timedelta(minutes=n if minutes is None else minutes)
    return Episode(id=f"e{n}", content=text, timestamp=at, user=user, session="s", agent="a")


def fired(report: ConsolidationReport) -> Counter[str]:
    """How often each rule fired, over every pass of ``report``."""
    return sum((Counter(p.fired) for p in report.passes), Counter())


def deltas(report: ConsolidationReport) -> list[MemoryDelta]:
    return [d for p in report.passes for d in p.deltas]


Said = tuple[str, str, float]
"""(user, statement, confidence) of a current fact."""


async def current(mem: Consolidator) -> Counter[Said]:
    return Counter((f.user, f.subject, round(f.confidence, 6)) for f in await mem.facts())


# --- a paraphrase merges; the cosine and the embedder are cited --------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_paraphrase_merges_and_explain_cites_the_cosine(
    backend: str, paraphrases: CompiledPack
) -> None:
    async with location(backend) as where, Consolidator(where, [paraphrases]) as mem:
        await mem.memory.put_many([episode(0, "I love green tea"), episode(1, "i LOVE green tea!")])
        report = await mem.consolidate(now=T0 + timedelta(hours=1))
        assert fired(report) == {"keep_new": 1, "merge_paraphrase": 1}
        (fact,) = await mem.facts()
        assert fact.subject == "i LOVE green tea!"
        why = await mem.explain(fact.id)
        bindings = why.provenance.bindings
        (replaced,) = why.provenance.predecessor_ids
        assert bindings["twin.fact"] == replaced
        assert bindings["twin.embedder"] == HASH == "stargraph-hash@1/256"
        assert bindings["cos"] == bindings["twin.cosine"] == fact.confidence
        assert 0.8 <= fact.confidence < 1.0
        lines = explanation_lines(why)
        expected = f"cosine {fact.confidence} with fact {replaced} under embedder {HASH} (twin)"
        assert f"  similar    {expected}" in lines


@pytest.mark.parametrize("backend", BACKENDS)
async def test_unrelated_texts_stay_apart_and_partitions_never_mix(
    backend: str, paraphrases: CompiledPack
) -> None:
    async with location(backend) as where, Consolidator(where, [paraphrases]) as mem:
        await mem.memory.put_many(
            [
                episode(0, "I love green tea"),
                episode(1, "the meeting is on monday"),
                episode(2, "i LOVE green tea!", user="u2"),
            ]
        )
        await mem.consolidate(now=T0 + timedelta(hours=1))
        assert await current(mem) == Counter(
            {
                ("u1", "I love green tea", 0.8): 1,
                ("u1", "the meeting is on monday", 0.8): 1,
                ("u2", "i LOVE green tea!", 0.8): 1,
            }
        )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_streaming_record_sees_the_facts_of_earlier_records(backend: str) -> None:
    streaming = compile_text(PARAPHRASES.replace('{cron: "0 3 * * *"}', "{every: 1}"))
    async with location(backend) as where, Consolidator(where, [streaming]) as mem:
        for n, text in enumerate(("I love green tea", "i LOVE green tea!", "I love tea")):
            await mem.record(episode(n, text))
        said = sorted(f.subject for f in await mem.facts())
        assert said == ["I love tea", "i LOVE green tea!"]


# --- sequential semantics ------------------------------------------------------------------


def _seeds(texts: Sequence[str], order: Sequence[int]) -> list[AddDelta]:
    """Facts current before the stream (stored in ``order``), days before it."""
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
    return [made[i] for i in order]


async def _run(
    backend: str,
    pack: CompiledPack,
    seeds: list[AddDelta],
    passes: Sequence[tuple[datetime, list[Episode]]],
) -> Counter[Said]:
    async with location(backend) as where, Consolidator(where, [pack]) as mem:
        for seed in seeds:  # one at a time: the order they were stored in
            await mem.fact_store.apply_deltas([seed], pack_hash="seed")
        for now, episodes in passes:
            await mem.memory.put_many(episodes)
            await mem.consolidate(now=now)
        return await current(mem)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[str], list[int], list[Episode], list[int], list[int]]:
    seeds = draw(st.lists(st.sampled_from(TEXTS), max_size=3, unique=True))
    seed_order = draw(st.permutations(range(len(seeds))))
    texts = draw(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=10))
    users = draw(st.lists(st.sampled_from(["u1", "u2"]), min_size=len(texts), max_size=len(texts)))
    episodes = [
        episode(n, t, user=u, minutes=10 * n)
        for n, (t, u) in enumerate(zip(texts, users, strict=True))
    ]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(texts) - 1)), max_size=3)))
    insertion = draw(st.permutations(range(len(episodes))))
    return seeds, list(seed_order), episodes, [c for c in cuts if c < len(texts)], list(insertion)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cut", [1, 2])
async def test_equal_cosines_go_to_the_same_fact_however_the_stream_is_cut(
    backend: str, paraphrases: CompiledPack, cut: int
) -> None:
    """Two stored facts say the same words (cosine 1 with each other); each restatement
    merges into one of them, making a fact, and the next one ties between that new fact
    and the other stored one. The earlier observed wins, whether the new fact was made
    earlier in the same pass (a temporary id) or in an earlier pass (its stored id): before,
    ties went by id, "t…" in the pass and "f…" (a hash) after it (a case found by the
    property test below)."""
    seeds = _seeds(["my dog is called Rex", "My dog is called Rex!"], [0, 1])
    texts = ("my dog is called Rex", "My dog is called Rex!", "my dog is called Rex")
    said = [episode(n, t, minutes=10 * n) for n, t in enumerate(texts, 1)]
    end = said[-1].timestamp + timedelta(minutes=1)
    whole = await _run(backend, paraphrases, seeds, [(end, said)])
    at = said[cut - 1].timestamp + timedelta(seconds=1)
    split = await _run(backend, paraphrases, seeds, [(at, said[:cut]), (end, said[cut:])])
    assert split == whole
    assert sum(whole.values()) == 2  # the restatements kept merging, two facts stay


@pytest.mark.parametrize("backend", BACKENDS)
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(stream=streams())
def test_neighbours_do_not_depend_on_cuts_or_storage_order(
    backend: str,
    paraphrases: CompiledPack,
    stream: tuple[list[str], list[int], list[Episode], list[int], list[int]],
) -> None:
    """One pass over the stream, stored in time order, seeds in time order ==
    the stream cut into passes (each at its last episode's time), episodes of each pass
    inserted in a random order, seeds stored in a random order."""
    seed_texts, seed_order, episodes, cuts, insertion = stream
    end = episodes[-1].timestamp + timedelta(minutes=1)
    whole = asyncio.run(
        _run(
            backend,
            paraphrases,
            _seeds(seed_texts, range(len(seed_texts))),
            [(end, episodes)],
        )
    )
    bounds = [0, *cuts, len(episodes)]
    passes = []
    rank = {n: i for i, n in enumerate(insertion)}
    for a, b in itertools.pairwise(bounds):
        part = sorted(episodes[a:b], key=lambda e: rank[int(e.id[1:])])
        at = max(e.timestamp for e in part) + timedelta(seconds=1)
        passes.append((at if b < len(episodes) else end, part))
    split = asyncio.run(_run(backend, paraphrases, _seeds(seed_texts, seed_order), passes))
    assert split == whole


# --- sweeps ----------------------------------------------------------------------------------


SWEEP_PACK = """\
ir_version: 1
pack: cluster
version: "1"
defaults:
  cadence: {cron: "0 3 * * *"}
rules:
  - id: fold_twins
    when:
      - fact: {as: keep, valid_from: {bind: kept_at}}
      - fact:
          as: twin
          near: {of: keep, top_k: 2, min_cosine: 0.8, cosine: cos}
          valid_from: {gt: {var: kept_at}}
    emit:
      kind: delete
      replaces: [twin]
      confidence: {from: cos}
      sources: [twin]
      reason: same meaning as an older fact
"""


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_sweep_ranks_facts_against_each_other(backend: str) -> None:
    """Each newer paraphrase of an older fact is deleted, citing the cosine; a fact is
    never its own neighbour, and unrelated facts stay."""
    pack = compile_text(SWEEP_PACK)
    texts = ["I love green tea", "i LOVE green tea!", "the meeting is on monday", "I love tea"]
    async with location(backend) as where, Consolidator(where, [pack]) as mem:
        for seed in reversed(_seeds(texts, range(len(texts)))):
            await mem.fact_store.apply_deltas([seed], pack_hash="seed")
        report = await mem.consolidate(now=T0)
        assert fired(report) == {"fold_twins": 1}
        said = sorted(f.subject for f in await mem.facts())
        assert said == ["I love tea", "i LOVE green tea!", "the meeting is on monday"]
        (gone,) = [f for f in await mem.facts(status="all") if f.status == "deleted"]
        assert gone.subject == "I love green tea"  # the newer of the two (seeds age with n)
        (delta,) = [d for d in deltas(report) if d.kind == "delete"]
        assert delta.bindings["twin.embedder"] == HASH
        assert delta.bindings["twin.fact"] == gone.id
        assert delta.bindings["twin.cosine"] == delta.bindings["cos"] == 1.0


# --- no embedder, bad input --------------------------------------------------------------------


async def test_a_pack_testing_near_is_refused_without_an_embedder(
    tmp_path: Path, paraphrases: CompiledPack
) -> None:
    with pytest.raises(EmbedderError) as caught:
        Consolidator(tmp_path / "m.db", [paraphrases], embedder=None)
    assert str(caught.value) == (
        "pack 'paraphrases': rule 'merge_paraphrase' tests 'near' (similarity), which needs an "
        "embedder: open the memory with one (embedder='hash' is built in), not embedder=None"
    )
    assert not (tmp_path / "m.db").exists()


def test_a_pass_without_an_embedder_is_refused(paraphrases: CompiledPack) -> None:
    runtime = PackRuntime(paraphrases)
    try:
        with pytest.raises(EmbedderError, match="rule 'merge_paraphrase' tests 'near'"):
            runtime.run_pass(
                partition=Partition("u1", "a"), now=T0, episodes=[], facts=[], embedder=None
            )
    finally:
        runtime.close()


def _pack_error(text: str) -> str:
    with pytest.raises(IRError) as caught:
        compile_text(text)
    return str(caught.value)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "near: {of: episode, top_k: 1, min_cosine: 0.8, cosine: cos}",
            "near: {of: c, top_k: 1, min_cosine: 0.8, cosine: cos}",
            "rules[0].when[1].fact.near.of: in a rule with an 'episode' pattern, near is "
            "'of: episode'",
        ),
        (
            "near: {of: episode, top_k: 1, min_cosine: 0.8, cosine: cos}",
            "near: {of: episode, top_k: 0, cosine: cos}",
            "rules[0].when[1].fact.near.top_k: top_k must be between 1 and 100, got 0",
        ),
        (
            "near: {of: episode, top_k: 1, min_cosine: 0.8, cosine: cos}",
            "near: {of: episode, min_cosine: 1.5, cosine: cos}",
            "<string>:13:31: rules[0].when[1].fact.near.min_cosine: min_cosine must be between -1 "
            "and 1, got 1.5",
        ),
        (
            "near: {of: episode, top_k: 1, min_cosine: 0.8, cosine: cos}",
            "near: {of: episode, top_k: 1, cosine: c}",
            "rules[0].when[1].fact.near.cosine: name 'c' is already used in this rule",
        ),
        (
            "      confidence: {from: cos}\n",
            "",
            "<string>:13:58: rules[0].when[1].fact.near.cosine: variable 'cos' is bound but never "
            'used: use it ("confidence: {from: cos}" or {var: cos}) or drop "cosine: cos" '
            "(the cosine is in the bindings anyway)",
        ),
        (
            "not: {near: {top_k: 1, min_cosine: 0.8}}",
            "not: {near: {top_k: 1, cosine: x}}",
            "rules[1].when[1].not.near.cosine: variables cannot be bound inside 'not' or 'exists'",
        ),
    ],
)
def test_ir_errors_name_the_place(old: str, new: str, message: str) -> None:
    assert old in PARAPHRASES
    assert message in _pack_error(PARAPHRASES.replace(old, new))


def test_a_sweep_names_the_fact_whose_neighbours_it_ranks() -> None:
    text = SWEEP_PACK.replace("near: {of: keep,", "near: {of: episode,")
    assert "rules[0].when[1].fact.near.of: a sweep has no episode: write 'of: <alias>'" in (
        _pack_error(text)
    )
    text = SWEEP_PACK.replace("near: {of: keep,", "near: {of: nobody,")
    assert "rules[0].when[1].fact.near.of: 'nobody' is not an earlier named 'fact' pattern" in (
        _pack_error(text)
    )


# --- content normal form: exact dedup ------------------------------------------------------

EXACT = """\
ir_version: 1
pack: exact
version: "1"
defaults:
  cadence: {cron: "0 3 * * *"}
rules:
  - id: repeat
    priority: 10
    when:
      - episode: {content: {bind: c}}
      - fact: {as: same, predicate: said, object: {normal_eq: {var: c}}}
    emit:
      kind: update
      replaces: [same]
      subject: "{c}"
      predicate: said
      object: "{c}"
      confidence: {reinforce: {value: 0.8, by: 0.1}}
      sources: [same]
  - id: new
    when:
      - episode: {content: {bind: c}}
      - not: {predicate: said, object: {normal_eq: {var: c}}}
    emit: {kind: add, subject: "{c}", predicate: said, object: "{c}"}
"""


def test_normal_eq_with_an_episode_field_joins_normal_forms_held_in_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fact pattern's ``normal_eq`` with the episode's text is an equality join of two
    slots holding the normal forms (each fact's and episode's computed once), not a Python
    call per (episode, fact) pair: a pass over 40 new texts calls the normal form function
    once per fact it makes, however many facts are in CLIPS; the decisions are those of
    the test it replaces (a repeat in other case, punctuation and accents merges)."""
    from stargraph_mem.compiler import clips_env

    calls: list[object] = []
    normal_form_of = clips_env.normal_form_of  # type: ignore[attr-defined]

    def counted(value: object) -> object:
        calls.append(value)
        return normal_form_of(value)

    monkeypatch.setattr(clips_env, "normal_form_of", counted)
    compiled = compile_text(EXACT)  # its environment calls the counted function
    assert "sm-normal-form ?v_c" not in compiled.clips  # no per-pair test left
    assert compiled.normal_fact_fields == ("object",)
    assert compiled.normal_episode_fields == ("content",)
    texts = [f"text number {n}" for n in range(40)] + ["TEXT number 7!", "téxt, number 9"]
    records = [
        EpisodeRecord(n + 1, f"e{n}", t, T0 + timedelta(minutes=n), None, "u1", "s", "a")
        for n, t in enumerate(texts)
    ]
    runtime = PackRuntime(compiled)
    try:
        out = runtime.run_pass(
            partition=Partition("u1", "a"),
            now=T0 + timedelta(hours=1),
            episodes=records,
            facts=[],
            eligible={r.index: [e.seq for e in records] for r in compiled.rules},
        )
    finally:
        runtime.close()
    assert Counter(d.rule_id for d in out.deltas) == {"new": 40, "repeat": 2}
    assert len(calls) == len(texts)  # one per fact made, in its rule's right-hand side


@pytest.mark.parametrize("backend", BACKENDS)
async def test_normal_eq_dedups_case_punctuation_accents_and_spaces(backend: str) -> None:
    """Specification 002's normalised content dedup: "Tea." after "tea" is a repeat."""
    texts = ["tea", "Tea.", "  TÉA!! ", "green tea"]
    async with location(backend) as where, Consolidator(where, [compile_text(EXACT)]) as mem:
        await mem.memory.put_many([episode(n, t) for n, t in enumerate(texts)])
        report = await mem.consolidate(now=T0 + timedelta(hours=1))
        assert fired(report) == {"new": 2, "repeat": 2}
        assert await current(mem) == Counter(
            {("u1", "  TÉA!! ", 0.9): 1, ("u1", "green tea", 0.8): 1}
        )


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.lists(
            st.one_of(
                st.floats(min_value=-(2.0**61), max_value=2.0**61, allow_nan=False, width=32),
                st.floats(min_value=-(2.0**-66), max_value=2.0**-66, width=32),  # squares underflow
            ),
            min_size=5,
            max_size=5,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_largest_norm_bounds_every_row_from_above(rows: list[list[float]]) -> None:
    """The prefilter of a ranking needs a bound at least every row's norm, never below."""
    block = np.array(rows, dtype=np.float32)
    exact = max(math.sqrt(math.fsum(float(x) ** 2 for x in row)) for row in block)
    assert largest_norm(block) >= exact
    assert largest_norm(block) <= exact * 1.0001 + 1e-21
    for row in block:
        assert largest_norm(row[None, :]) >= math.sqrt(math.fsum(float(x) ** 2 for x in row))
