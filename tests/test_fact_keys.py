"""Facts tied to a pass's episodes: a pass asserts only the stored facts some episode of
it could match (``CompiledPack.fact_keys``), and decides exactly what it would with every
fact asserted: the same deltas in the same order, the same refusals and facts after it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packs_helpers import NOW, PARTITION, T0, engine_fact, run_pass, triple

from stargraph_mem.compiler.pack import CompiledPack, compile_file, compile_text
from stargraph_mem.compiler.sweep_sql import is_sweep
from stargraph_mem.engine.passes.fact_list import FactList
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord

ROOT = Path(__file__).resolve().parents[1]

MANY_MATCHES = """\
ir_version: 1
pack: many_matches
version: "1"
fields: {subject: string, predicate: string, object: string, other: string}
rules:
  - id: first_of_subject
    priority: 30
    when:
      - episode: {subject: {bind: s}, object: {bind: o}}
      - fact: {as: f, subject: {var: s}, object: {ne: {var: o}}}
    emit: {kind: update, subject: "{s}", predicate: changed, object: "{o}", replaces: [f],
           reason: "first of {s}"}
  - id: by_object
    priority: 20
    when:
      - episode: {object: {bind: o}}
      - fact: {as: f, object: {var: o}}
    emit: {kind: noop, reinforces: [f], reason: "object {o}"}
  - id: other_field
    claim: false
    when:
      - episode: {other: {bind: x}}
      - exists: {subject: {var: x}}
    emit: {kind: noop, reason: "other {x} is a subject"}
  - id: nothing_known
    priority: 10
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - not: {subject: {var: s}, predicate: {var: p}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}", reason: "new {s}"}
"""

WORDS = ["a", "b", "c", ""]
SPELLINGS = ["a", "A!", "b", " B. ", "c", "ç", "a b", "A-B", ""]
"""Texts equal in content normal form: a, A!; b, B.; c, ç; a b, A-B; the empty text last."""


def episode_rules(compiled: CompiledPack, episodes: list[EpisodeRecord]) -> dict[int, list[int]]:
    """Every episode rule of ``compiled`` sees every episode (sweeps do not run)."""
    return {
        r.index: [e.seq for e in episodes]
        for r in compiled.rules
        if not is_sweep(r.program.info.rule)
    }


def assert_same_pass(
    compiled: CompiledPack, episodes: list[EpisodeRecord], facts: list[EngineFact]
) -> None:
    rules = episode_rules(compiled, episodes)
    keyed = run_pass(compiled, episodes, facts, eligible=rules)
    every = replace(compiled, fact_keys=None, _built=[])
    assert keyed == run_pass(every, episodes, facts, eligible=rules)
    # as a previous pass leaves them (in order, observation times known, looked up by key)
    known = FactList(replace(f, observed_us=f.observed_us or f.valid_from_us) for f in facts)
    assert run_pass(compiled, episodes, known, eligible=rules) == run_pass(
        every, episodes, list(known), eligible=rules
    )


@st.composite
def pass_inputs(
    draw: Any, words: list[str] = WORDS
) -> tuple[list[EpisodeRecord], list[EngineFact]]:
    episodes = []
    for seq in range(1, draw(st.integers(1, 5)) + 1):
        s, p, o, x = (draw(st.sampled_from(words)) for _ in range(4))
        meta = {"other": x} if draw(st.booleans()) else {}
        episodes.append(triple(seq, s, p, o, **meta))
    facts = []
    for k in range(draw(st.integers(0, 12))):
        s, p, o = (draw(st.sampled_from(words[:-1])) for _ in range(3))
        age = draw(st.sampled_from([0, 1, 2]))
        facts.append(engine_fact(f"f{k:02d}", (s, p, o), valid_from=T0 - timedelta(days=age)))
    facts.sort(key=lambda f: (f.valid_from_us, f.id))
    return episodes, facts


PACKS = {
    "many_matches": compile_text(MANY_MATCHES),
    **{
        name: compile_file(ROOT / "rules" / f"{name}.yaml")
        for name in ("dedup_against_facts", "expire_speculative", "fact_lifecycle")
    },
}


@pytest.mark.parametrize("name", sorted(PACKS))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=pass_inputs())
def test_asserting_tied_facts_only_decides_the_same(
    name: str, data: tuple[list[EpisodeRecord], list[EngineFact]]
) -> None:
    episodes, facts = data
    assert_same_pass(PACKS[name], episodes, facts)


NORMAL_MATCHES = """\
ir_version: 1
pack: normal_matches
version: "1"
fields: {subject: string, predicate: string, object: string, other: string}
rules:
  - id: same_text
    priority: 20
    when:
      - episode: {subject: {bind: s}, object: {bind: o}}
      - fact: {as: f, subject: {var: s}, object: {normal_eq: {var: o}}}
    emit: {kind: noop, reinforces: [f], reason: "{o} again"}
  - id: other_spelling
    priority: 10
    when:
      - episode: {other: {bind: x}}
      - exists: {subject: {normal_eq: {var: x}}}
    emit: {kind: noop, reason: "{x} is a subject, spelt some way"}
  - id: new_text
    when:
      - episode: {subject: {bind: s}, predicate: {bind: p}, object: {bind: o}}
      - not: {object: {normal_eq: {var: o}}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}", reason: "new {o}"}
"""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=pass_inputs(words=SPELLINGS))
def test_facts_tied_in_content_normal_form_decide_the_same(
    data: tuple[list[EpisodeRecord], list[EngineFact]],
) -> None:
    """``normal_eq`` ties a fact to an episode by content normal form: a pass asserting
    only the facts some episode equals that way decides what one asserting every fact
    does (the facts it makes in the pass are matched in CLIPS, as before)."""
    episodes, facts = data
    compiled = compile_text(NORMAL_MATCHES)
    # (subject, normal:object) of same_text holds new_text's (normal:object): dropped
    assert compiled.fact_keys == ((("normal:object", "object"),), (("normal:subject", "other"),))
    assert_same_pass(compiled, episodes, facts)


def test_the_keys_of_the_shipped_and_test_packs() -> None:
    assert PACKS["dedup_against_facts"].fact_keys == (
        (("predicate", "predicate"), ("subject", "subject")),
    )
    # each pattern's own ties; (subject, predicate) makes (subject) of another redundant
    # only when it is a superset: here the smallest sets are kept
    assert PACKS["many_matches"].fact_keys == (
        (("object", "object"),),
        (("subject", "other"),),
        (("subject", "subject"),),
    )


@pytest.mark.parametrize(
    "patterns",
    [
        "- fact: {subject: {ne: {var: s}}}",  # no equality
        "- fact: {predicate: {eq: likes}}",  # a literal, not the episode
        "- fact: {confidence: {var: c}}",  # not a statement field
        "- fact: {subject: {var: s}, object: {bind: y}}\n      - fact: {subject: {var: y}}",
    ],
)
def test_a_pattern_not_tied_to_the_episode_asserts_every_fact(patterns: str) -> None:
    text = f"""\
ir_version: 1
pack: untied
version: "1"
fields: {{subject: string, c: number}}
rules:
  - id: r
    when:
      - episode: {{subject: {{bind: s}}{", c: {bind: c}" if "var: c" in patterns else ""}}}
      {patterns}
    emit: {{kind: noop, reason: "{{s}}"}}
"""
    assert compile_text(text).fact_keys is None


@pytest.mark.parametrize("normal", [False, True])
def test_only_the_tied_facts_enter_clips(normal: bool) -> None:
    """The filter does what it is for: a one-episode pass over many facts asserts the one
    fact of that (subject, predicate), or (``normal_eq``) of that object in other case and
    punctuation."""
    if normal:
        compiled = compile_text(NORMAL_MATCHES)
        facts = [engine_fact(f"f{k:03d}", ("s", "p", f"o{k}")) for k in range(100)]
        episodes = [triple(1, "s", "q", "O7!")]
    else:
        compiled = PACKS["dedup_against_facts"]
        facts = [engine_fact(f"f{k:03d}", (f"s{k}", "p", "o")) for k in range(100)]
        episodes = [triple(1, "s7", "p", "other")]
    runtime = PackRuntime(compiled)
    asserted: list[str] = []
    original = runtime._assert_fact

    def spy(fb: Any, fact: EngineFact, anchor: int = 0, status: str | None = None) -> None:
        asserted.append(fact.id)
        original(fb, fact, anchor, status)

    runtime._assert_fact = spy  # type: ignore[method-assign]
    try:
        out = runtime.run_pass(
            partition=PARTITION,
            now=NOW,
            episodes=episodes,
            facts=facts,
            eligible=episode_rules(compiled, episodes),
        )
    finally:
        runtime.close()
    assert asserted == ["f007"]
    (delta,) = out.deltas
    if normal:
        assert delta.kind == "noop" and delta.reinforced_ids == ["f007"]
    else:
        assert delta.kind == "update" and delta.replaces == ["f007"]
    assert out.facts_after is not None and len(out.facts_after) == 100


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=pass_inputs())
def test_passes_carrying_the_facts_they_leave_decide_as_passes_given_plain_lists(
    data: tuple[list[EpisodeRecord], list[EngineFact]],
) -> None:
    """One pass per episode, each given the facts the previous one left (a FactList with
    its lookups), against the same passes given plain copies of those facts."""
    episodes, facts = data
    compiled = PACKS["many_matches"]
    runtime = PackRuntime(compiled)
    try:
        carried: list[EngineFact] = facts
        plain: list[EngineFact] = list(facts)
        for record in episodes:
            rules = episode_rules(compiled, [record])
            out = runtime.run_pass(
                partition=PARTITION, now=NOW, episodes=[record], facts=carried, eligible=rules
            )
            again = runtime.run_pass(
                partition=PARTITION, now=NOW, episodes=[record], facts=plain, eligible=rules
            )
            assert out == again
            assert out.facts_after is not None and isinstance(out.facts_after, FactList)
            carried, plain = out.facts_after, list(out.facts_after)
    finally:
        runtime.close()


@settings(max_examples=150, deadline=None)
@given(
    facts=st.lists(
        st.tuples(
            st.sampled_from(SPELLINGS[:-1]), st.sampled_from(SPELLINGS[:-1]), st.integers(0, 3)
        ),
        max_size=12,
    ),
    gone=st.sets(st.integers(0, 11)),
    made=st.lists(
        st.tuples(st.integers(0, 15), st.sampled_from(SPELLINGS[:-1]), st.integers(0, 4)),
        max_size=5,
    ),
)
def test_a_fact_list_changed_equals_one_built_anew(
    facts: list[tuple[str, str, int]],
    gone: set[int],
    made: list[tuple[int, str, int]],
) -> None:
    """What a pass leaves (facts closed, changed or made) is the sorted list built anew,
    with the same lookups by id and by key, whichever lookups the old list had made."""

    def fact(k: int, subject: str, obj: str, day: int) -> EngineFact:
        made_at = T0 + timedelta(days=day)
        return replace(
            engine_fact(f"f{k:02d}", (subject, "p", obj), valid_from=made_at),
            observed_us=1,
        )

    old = FactList(
        sorted(
            (fact(k, s, o, d) for k, (s, o, d) in enumerate(facts)),
            key=lambda f: (f.valid_from_us, f.id),
        )
    )
    old.keyed(("subject",))  # lookups made before the change come along
    old.keyed(("normal:subject",))
    new = [fact(k, s, "new", d) for k, s, d in {k: (k, s, d) for k, s, d in made}.values()]
    closed = {f"f{k:02d}" for k in gone}
    after = old.changed(closed, new)
    dropped = closed | {f.id for f in new}
    expected = sorted(
        [f for f in old if f.id not in dropped] + new, key=lambda f: (f.valid_from_us, f.id)
    )
    assert list(after) == expected
    fresh = FactList(expected)
    assert after.ids() == fresh.ids()
    for fields in [
        ("subject",),
        ("subject", "object"),
        ("normal:subject",),
        ("normal:object", "predicate"),
    ]:
        assert after.keyed(fields) == fresh.keyed(fields)
    assert list(old) == sorted(old, key=lambda f: (f.valid_from_us, f.id))  # unchanged
