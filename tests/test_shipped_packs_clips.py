"""The shipped packs run directly on the CLIPS runtime: one test per policy line of each
pack's header comment, asserting the exact deltas (and rejections) of a pass."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packs_helpers import (
    NOW,
    compile_ok,
    engine_fact,
    episode,
    new_fact_id,
    run_pass,
    summary,
    triple,
)

from stargraph_mem.compiler.pack import CompiledPack, compile_file
from stargraph_mem.engine.passes.outputs import PassOutput
from stargraph_mem.stores.fact import EngineFact
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import MemoryDelta

RULES = Path(__file__).resolve().parent.parent / "rules"


DEFAULT = "default"
DEDUP = "dedup_against_facts"
FREQUENCY = "frequency_promotion"
EXPIRE = "expire_speculative"


@cache
def shipped(name: str) -> CompiledPack:
    """A shipped pack, compiled once per test session."""
    return compile_file(RULES / f"{name}.yaml")


def run(
    name: str, episodes: Sequence[EpisodeRecord], facts: Sequence[EngineFact] = ()
) -> PassOutput:
    """One pass of shipped pack ``name``."""
    return run_pass(shipped(name), episodes, facts)


def summaries(out: PassOutput) -> list[tuple[Any, ...]]:
    assert out.rejected == []
    return [summary(d) for d in out.deltas]


# --- default.yaml -----------------------------------------------------------------------


def test_default_intent_noop() -> None:
    out = run(DEFAULT, [episode(1, {"intent": "noop", "subject": "a", "predicate": "p"})])
    assert summaries(out) == [("noop", "explicit_noop", [], None, 0.8, ["e1"])]
    assert out.deltas[0].reason == "intent noop"


def test_default_delete_with_replaces() -> None:
    facts = [engine_fact("f1", ("a", "p", "o")), engine_fact("f2", ("b", "p", "o"))]
    out = run(DEFAULT, [episode(1, {"intent": "delete", "replaces": ["f1", "f2"]})], facts)
    assert summaries(out) == [("delete", "explicit_delete", ["f1", "f2"], None, 0.8, ["e1"])]


def test_default_delete_without_replaces_is_rejected() -> None:
    out = run(DEFAULT, [episode(1, {"intent": "delete"}), triple(2, "a", "p", "o")])
    assert [summary(d) for d in out.deltas] == [
        ("add", "add_observation", [], ("a", "p", "o"), 0.8, ["e2"])
    ]
    (rejected,) = out.rejected
    assert (rejected.episode_id, rejected.rule_id) == ("e1", "explicit_delete")
    assert rejected.reason.startswith("invalid delta: replaces: ")


def test_default_update_with_replaces() -> None:
    meta = {"intent": "update", "replaces": ["f1"], "subject": "a", "predicate": "p"}
    out = run(
        DEFAULT, [episode(1, {**meta, "object": "new"})], [engine_fact("f1", ("a", "p", "old"))]
    )
    assert summaries(out) == [("update", "explicit_update", ["f1"], ("a", "p", "new"), 0.8, ["e1"])]


@pytest.mark.parametrize("intent", [None, "add"])
def test_default_plain_add(intent: str | None) -> None:
    extra = {} if intent is None else {"intent": intent}
    out = run(DEFAULT, [triple(1, "alice", "likes", "tea", **extra)])
    assert summaries(out) == [
        ("add", "add_observation", [], ("alice", "likes", "tea"), 0.8, ["e1"])
    ]
    assert out.deltas[0].reason == "new observation"


def repeat(earlier: MemoryDelta, obj: str, sources: list[str]) -> tuple[Any, ...]:
    """The update of (a, likes) that replaces ``earlier``'s fact."""
    replaced = [new_fact_id(earlier)]
    return ("update", "repeat_updates_earlier", replaced, ("a", "likes", obj), 0.8, sources)


def test_default_repeat_in_pass_updates_the_earlier_fact() -> None:
    out = run(DEFAULT, [triple(1, "a", "likes", "tea"), triple(2, "a", "likes", "coffee")])
    first, second = out.deltas
    assert summaries(out) == [
        ("add", "add_observation", [], ("a", "likes", "tea"), 0.8, ["e1"]),
        repeat(first, "coffee", ["e2", "e1"]),
    ]
    assert second.reason == "repeated (a, likes) in one pass"


def test_default_chain_of_three() -> None:
    episodes = [
        triple(1, "a", "likes", "tea"),
        triple(2, "b", "likes", "tea"),
        triple(3, "a", "likes", "coffee"),
        triple(4, "a", "likes", "water"),
    ]
    out = run(DEFAULT, episodes)
    tea_a, tea_b, coffee, water = out.deltas
    assert summaries(out) == [
        ("add", "add_observation", [], ("a", "likes", "tea"), 0.8, ["e1"]),
        ("add", "add_observation", [], ("b", "likes", "tea"), 0.8, ["e2"]),
        repeat(tea_a, "coffee", ["e3", "e1"]),
        repeat(coffee, "water", ["e4", "e3"]),
    ]
    assert new_fact_id(tea_b) not in {new_fact_id(d) for d in (tea_a, coffee, water)}


def test_default_intents_do_not_start_chains() -> None:
    """A noop episode with the same (subject, predicate) is not an 'earlier' one."""
    episodes = [
        episode(1, {"intent": "noop", "subject": "a", "predicate": "p", "object": "x"}),
        triple(2, "a", "p", "y"),
    ]
    assert summaries(run(DEFAULT, episodes)) == [
        ("noop", "explicit_noop", [], None, 0.8, ["e1"]),
        ("add", "add_observation", [], ("a", "p", "y"), 0.8, ["e2"]),
    ]


def test_default_dedups_within_a_pass_only() -> None:
    """Not split-invariant by design: the same repeat in a later pass is a plain add."""
    first = run(DEFAULT, [triple(1, "a", "p", "x")])
    fact = engine_fact(new_fact_id(first.deltas[0]), ("a", "p", "x"), sources=("e1",))
    second = run(DEFAULT, [triple(2, "a", "p", "y")], [fact])
    assert summaries(second) == [("add", "add_observation", [], ("a", "p", "y"), 0.8, ["e2"])]


def test_default_rejects_mistyped_metadata() -> None:
    out = run(DEFAULT, [episode(1, {"subject": 3, "predicate": "p", "object": "o"})])
    assert out.deltas == []
    assert [(r.episode_id, r.rule_id, r.reason) for r in out.rejected] == [
        ("e1", None, "metadata: expected string, got int")
    ]


# --- dedup_against_facts.yaml -------------------------------------------------------------


def test_dedup_same_triple_reinforces() -> None:
    out = run(
        DEDUP,
        [triple(1, "a", "p", "o")],
        [engine_fact("f1", ("a", "p", "o"))],
    )
    assert summaries(out) == [("noop", "known_fact_noop", ["f1"], None, 0.8, ["e1"])]
    assert out.deltas[0].reason == "(a, p, o) is already known"


def test_dedup_changed_object_updates() -> None:
    out = run(
        DEDUP,
        [triple(1, "a", "p", "new")],
        [engine_fact("f1", ("a", "p", "old"))],
    )
    assert summaries(out) == [
        ("update", "changed_object_update", ["f1"], ("a", "p", "new"), 0.8, ["e1"])
    ]


def test_dedup_new_subject_predicate_adds() -> None:
    out = run(
        DEDUP,
        [triple(1, "a", "q", "o")],
        [engine_fact("f1", ("a", "p", "o"))],
    )
    assert summaries(out) == [("add", "new_fact_add", [], ("a", "q", "o"), 0.8, ["e1"])]


def test_dedup_chains_within_a_pass() -> None:
    episodes = [triple(1, "a", "p", "x"), triple(2, "a", "p", "y"), triple(3, "a", "p", "y")]
    out = run(DEDUP, episodes)
    add, update, _ = out.deltas
    assert summaries(out) == [
        ("add", "new_fact_add", [], ("a", "p", "x"), 0.8, ["e1"]),
        ("update", "changed_object_update", [new_fact_id(add)], ("a", "p", "y"), 0.8, ["e2"]),
        ("noop", "known_fact_noop", [new_fact_id(update)], None, 0.8, ["e3"]),
    ]


def current_facts(facts: list[EngineFact], out: PassOutput) -> list[EngineFact]:
    """The facts after applying a pass's deltas (what the store would hand the next pass)."""
    by_id = {f.id: f for f in facts}
    for delta in out.deltas:
        if delta.kind in ("update", "delete"):
            for fid in delta.replaces:
                del by_id[fid]
        if delta.kind in ("add", "update"):
            spo = delta.fact.triple
            fid = new_fact_id(delta)
            by_id[fid] = engine_fact(fid, spo, sources=tuple(delta.source_episode_ids))
    return list(by_id.values())


def triples_of(facts: list[EngineFact]) -> set[tuple[str, str, str]]:
    return {(f.subject, f.predicate, f.object) for f in facts}


def test_dedup_is_split_invariant() -> None:
    stream = [
        triple(1, "a", "p", "x"),
        triple(2, "b", "p", "x"),
        triple(3, "a", "p", "y"),
        triple(4, "a", "p", "y"),
        triple(5, "b", "q", "z"),
        triple(6, "a", "p", "x"),
    ]
    whole = current_facts([], run(DEDUP, stream))
    split: list[EngineFact] = []
    for part in (stream[:2], stream[2:3], stream[3:]):
        split = current_facts(split, run(DEDUP, part, split))
    assert (
        triples_of(whole)
        == triples_of(split)
        == {("a", "p", "x"), ("b", "p", "x"), ("b", "q", "z")}
    )


# --- frequency_promotion.yaml ----------------------------------------------------------------


def sessions(*names: str, start: int = 1) -> list[EpisodeRecord]:
    """One (a, p, o) observation per session name, in order."""
    return [triple(start + i, "a", "p", "o", session=s) for i, s in enumerate(names)]


def test_frequency_two_sessions_do_not_promote() -> None:
    assert summaries(run(FREQUENCY, sessions("s1", "s2"))) == []


def test_frequency_third_session_promotes() -> None:
    out = run(FREQUENCY, sessions("s1", "s2", "s3"))
    assert summaries(out) == [
        ("add", "promote_frequent", [], ("a", "p", "o"), 0.5, ["e3", "e1", "e2"])
    ]
    assert out.deltas[0].reason == "seen in 3 sessions"


def test_frequency_repeats_in_a_counted_session_do_not_count() -> None:
    assert summaries(run(FREQUENCY, sessions("s1", "s1", "s2", "s2", "s1"))) == []
    out = run(FREQUENCY, sessions("s1", "s1", "s2", "s2", "s3", "s3"))
    assert summaries(out) == [
        # the sources: this episode, then the latest sighting of each counted session
        ("add", "promote_frequent", [], ("a", "p", "o"), 0.5, ["e5", "e2", "e4"])
    ]


def test_frequency_fourth_session_raises_confidence() -> None:
    out = run(FREQUENCY, sessions("s1", "s2", "s3", "s3", "s4"))
    promoted = out.deltas[0]
    assert summaries(out) == [
        ("add", "promote_frequent", [], ("a", "p", "o"), 0.5, ["e3", "e1", "e2"]),
        (
            "update",
            "strengthen_promoted",
            [new_fact_id(promoted)],
            ("a", "p", "o"),
            0.6,
            ["e5", "e1", "e2", "e4"],
        ),
    ]


def test_frequency_counts_each_triple_separately() -> None:
    episodes = [
        triple(1, "a", "p", "o", session="s1"),
        triple(2, "a", "p", "other", session="s2"),
        triple(3, "a", "p", "o", session="s3"),
        triple(4, "a", "p", "other", session="s4"),
    ]
    assert summaries(run(FREQUENCY, episodes)) == []


def test_frequency_stored_fact_blocks_promotion_then_strengthens() -> None:
    stored = [engine_fact("f1", ("a", "p", "o"), confidence=0.5)]
    assert summaries(run(FREQUENCY, sessions("s1", "s2", "s3"), stored)) == []
    out = run(FREQUENCY, sessions("s1", "s2", "s3", "s4"), stored)
    assert summaries(out) == [
        ("update", "strengthen_promoted", ["f1"], ("a", "p", "o"), 0.6, ["e4", "e1", "e2", "e3"])
    ]


# --- expire_speculative.yaml -------------------------------------------------------------------


def aged(
    fid: str, age_days: float, confidence: float, reinforced_days: float | None = None
) -> EngineFact:
    """A fact created ``age_days`` before NOW, last reinforced ``reinforced_days`` before NOW."""
    valid_from = NOW - timedelta(days=age_days)
    reinforced = NOW - timedelta(days=age_days if reinforced_days is None else reinforced_days)
    return engine_fact(
        fid,
        (fid, "p", "o"),
        confidence=confidence,
        valid_from=valid_from,
        reinforced_at=reinforced,
        sources=(f"src_{fid}", f"src2_{fid}"),
    )


def expire_run(
    facts: Sequence[EngineFact], episodes: Sequence[EpisodeRecord] = ()
) -> list[tuple[Any, ...]]:
    """The deltas of one expire_speculative pass (none may be rejected)."""
    return summaries(run(EXPIRE, episodes, facts))


def test_expire_deletes_old_low_confidence_fact() -> None:
    out = run(EXPIRE, [], [aged("f1", 40, 0.3)])
    assert summaries(out) == [
        ("delete", "expire_unreinforced", ["f1"], None, 0.8, ["src_f1", "src2_f1"])
    ]
    assert out.deltas[0].reason == "(f1, p) expired: speculative and unconfirmed for 30 days"


def test_expire_keeps_young_fact() -> None:
    assert expire_run([aged("f1", 10, 0.3)]) == []


@pytest.mark.parametrize("confidence", [0.4, 0.9])
def test_expire_keeps_confident_fact(confidence: float) -> None:
    assert expire_run([aged("f1", 40, confidence)]) == []


def test_expire_keeps_fact_reinforced_in_this_pass() -> None:
    facts = [aged("f1", 40, 0.3), aged("f2", 40, 0.3)]
    assert expire_run(facts, [triple(1, "f1", "p", "o")]) == [
        ("noop", "reinforce_on_repeat", ["f1"], None, 0.8, ["e1"]),
        ("delete", "expire_unreinforced", ["f2"], None, 0.8, ["src_f2", "src2_f2"]),
    ]


def test_expire_keeps_fact_reinforced_recently() -> None:
    assert expire_run([aged("f1", 40, 0.3, reinforced_days=29)]) == []
    assert expire_run([aged("f1", 40, 0.3, reinforced_days=31)]) == [
        ("delete", "expire_unreinforced", ["f1"], None, 0.8, ["src_f1", "src2_f1"])
    ]


# --- the linear 'earlier' relation against a naive reference -------------------------------------

EARLIER_PACK = """\
ir_version: 1
pack: earlier_probe
version: "1"
fields: {k1: string, k2: string, tag: string, w: integer}
rules:
  - id: link
    when:
      - episode: {k1: {exists: true}}
      - earlier: {as: prev, keys: [k1, k2], tag: {in: [x, y]}, w: {ne: 3}}
    emit: {kind: noop, sources: [prev]}
"""

Row = tuple[str | None, str | None, str | None, int | None]
ROWS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", None]),
        st.sampled_from(["c", "d", None]),
        st.sampled_from(["x", "y", "z", None]),
        st.sampled_from([1, 3, None]),
    ),
    max_size=14,
)


def reference_links(rows: list[Row]) -> list[list[str]]:
    """For each episode with both keys, the latest earlier one with equal keys passing the
    filter (tag in x/y, w not 3)."""
    links: list[list[str]] = []
    for i, (k1, k2, _, _) in enumerate(rows):
        if k1 is None or k2 is None:
            continue
        for j in range(i - 1, -1, -1):
            p1, p2, tag, w = rows[j]
            if (p1, p2) == (k1, k2) and tag in ("x", "y") and w != 3:
                links.append([f"e{i + 1}", f"e{j + 1}"])
                break
    return links


@pytest.fixture(scope="module")
def earlier_probe() -> CompiledPack:
    return compile_ok(EARLIER_PACK)


def probe(compiled: CompiledPack, rows: list[Row]) -> list[list[str]]:
    """The sources of the noops the probe pack emits over episodes built from ``rows``."""
    names = ("k1", "k2", "tag", "w")
    episodes = [
        episode(i + 1, {k: v for k, v in zip(names, row, strict=True) if v is not None})
        for i, row in enumerate(rows)
    ]
    out = run_pass(compiled, episodes)
    assert [r for r in out.rejected if not r.unmatched] == []
    assert all(d.kind == "noop" and d.rule_id == "link" for d in out.deltas)
    return [d.source_episode_ids for d in out.deltas]


@settings(max_examples=60, deadline=None)
@given(rows=ROWS)
def test_earlier_matches_naive_reference(earlier_probe: CompiledPack, rows: list[Row]) -> None:
    assert probe(earlier_probe, rows) == reference_links(rows)


def test_earlier_skips_filtered_episodes(earlier_probe: CompiledPack) -> None:
    rows: list[Row] = [
        ("a", "c", "x", 1),
        ("a", "c", "z", 1),
        ("a", "c", "y", 3),
        ("b", "c", "y", None),
        ("a", "c", None, None),
        ("a", None, "x", None),
        ("a", "c", "y", None),
    ]
    expected = [["e2", "e1"], ["e3", "e1"], ["e5", "e1"], ["e7", "e1"]]
    assert reference_links(rows) == expected
    assert probe(earlier_probe, rows) == expected
