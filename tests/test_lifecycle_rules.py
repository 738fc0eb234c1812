"""The fact lifecycle in rules: lifecycle fields, declared payload keys, typed confidence
arithmetic, closing statuses, sweeps that leave pinned facts alone, archived facts."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from packs_helpers import NOW, PARTITION, T0, engine_fact, first_issue, run_pass, triple

from stargraph_mem.compiler.pack import CompiledPack, compile_file, compile_text, validate_file
from stargraph_mem.engine.passes.confidence import round_confidence
from stargraph_mem.engine.passes.outputs import PassOutput
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.errors import IRError
from stargraph_mem.model.canonical import canonical_json
from stargraph_mem.model.time import to_us as to_micros
from stargraph_mem.stores.fact import EngineFact

FIXTURE = Path(__file__).parent / "fixtures" / "compiler" / "lifecycle.yaml"
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def lifecycle() -> CompiledPack:
    return compile_file(FIXTURE)


def fact(fid: str, **changes: object) -> EngineFact:
    """A stored fact (s, p, o) at T0 with lifecycle fields set by ``changes``."""
    return replace(engine_fact(fid, ("s", "p", "o")), **changes)  # type: ignore[arg-type]


def only(compiled: CompiledPack, facts: list[EngineFact], now: datetime = NOW) -> list[Any]:
    """The deltas of a pass over ``facts`` alone (typed loosely: tests read any kind)."""
    return list(run_pass(compiled, [], facts, now=now).deltas)


def deltas(out: PassOutput) -> list[Any]:
    return list(out.deltas)


def test_ebbinghaus_decays_from_reinforced_at(lifecycle: CompiledPack) -> None:
    now = T0 + 10 * DAY
    (delta,) = only(lifecycle, [fact("f1", payload={"importance": 0.2})], now)
    assert delta.kind == "update" and delta.rule_id == "forget"
    assert delta.confidence == round(0.8 * math.exp(-0.05 * 10**0.8), 9)
    assert delta.lifecycle == "inherit"


def test_a_fact_whose_payload_key_is_missing_or_high_is_not_forgotten(
    lifecycle: CompiledPack,
) -> None:
    facts = [fact("f1"), fact("f2", payload={"importance": 0.9})]
    assert only(lifecycle, facts, T0 + 10 * DAY) == []


EBBINGHAUS = """\
ir_version: 1
pack: nightly
version: "1"
rules:
  - id: decay
    cadence: {cron: "0 3 * * *"}
    when:
      - fact:
          as: f
          subject: {bind: s}
          predicate: {bind: p}
          object: {bind: o}
          valid_from: {older_than: {hours: 12}}
    emit:
      kind: update
      subject: "{s}"
      predicate: "{p}"
      object: "{o}"
      replaces: [f]
      sources: [f]
      confidence: {ebbinghaus: {fact: f, lambda: 0.3, k: 0.7}}
"""


@pytest.mark.parametrize("nights", [[10], [1] * 10, [3, 3, 4], [7, 1, 2]])
def test_ebbinghaus_applied_nightly_composes_to_the_one_shot_curve(nights: list[int]) -> None:
    """The incremental form telescopes: any schedule of sweeps ends on c0·exp(−λ·d^k)."""
    compiled = compile_text(EBBINGHAUS)
    runtime = PackRuntime(compiled)
    facts = [engine_fact("f1", ("s", "p", "o"), confidence=0.9)]
    now = T0
    try:
        for days in nights:
            now += days * DAY
            out = runtime.run_pass(partition=PARTITION, now=now, episodes=[], facts=facts)
            (delta,) = deltas(out)
            assert delta.lifecycle == "inherit"
            assert out.facts_after is not None
            facts = out.facts_after
            assert facts[0].reinforced_at_us == to_micros(T0)  # inherited, not reset
    finally:
        runtime.close()
    expected = 0.9 * math.exp(-0.3 * 10**0.7)
    assert facts[0].confidence == pytest.approx(expected, abs=len(nights) * 1e-9)


def test_linear_decay_counts_whole_windows_since_reinforced_at(lifecycle: CompiledPack) -> None:
    old = T0 - 60 * DAY
    stale = fact("f1", valid_from_us=to_micros(old), reinforced_at_us=to_micros(old))
    read = replace(stale, id="f2", access_count=1, last_access_us=to_micros(NOW))
    (delta,) = only(lifecycle, [stale, read])
    assert delta.rule_id == "wear" and delta.replaces == ["f1"]
    windows = (NOW - old) // timedelta(days=7)
    assert delta.confidence == round_confidence(0.8 - 0.05 * windows)


def test_last_access_of_a_never_read_fact_is_its_valid_from(lifecycle: CompiledPack) -> None:
    """Never read (last_access 0) but made yesterday: not idle for 30 days."""
    fresh = fact("f1", valid_from_us=to_micros(NOW - DAY), reinforced_at_us=to_micros(NOW - DAY))
    assert only(lifecycle, [fresh]) == []


def test_sweeps_leave_pinned_facts_alone(lifecycle: CompiledPack) -> None:
    weak, pinned = fact("f1", confidence=0.01), fact("f2", confidence=0.01, pinned=True)
    (delta,) = only(lifecycle, [weak, pinned])
    assert delta.kind == "delete" and delta.replaces == ["f1"]
    assert delta.status == "expired"


def test_a_sweep_that_tests_pinned_sees_pinned_facts(lifecycle: CompiledPack) -> None:
    pinned = fact("f1", confidence=0.5, pinned=True, payload={"hits": 5})
    (delta,) = only(lifecycle, [pinned])
    assert delta.rule_id == "blend"
    assert delta.confidence == round_confidence(max(0.1, min(0.9, max(0.5 * 0.9, min(5, 0.2)))))
    assert delta.fact.payload == {"hits": 5}
    assert type(delta.fact.payload["hits"]) is int


def test_archived_facts_are_matched_only_by_a_status_test(lifecycle: CompiledPack) -> None:
    old = to_micros(T0 - 400 * DAY)
    archived = [fact("a1", confidence=0.01, valid_from_us=old, reinforced_at_us=old)]
    runtime = PackRuntime(lifecycle)
    try:
        out = runtime.run_pass(
            partition=PARTITION, now=NOW, episodes=[], facts=[], archived=archived
        )
    finally:
        runtime.close()
    (delta,) = deltas(out)  # 'expire' (no status test) does not see it
    assert (delta.kind, delta.rule_id, delta.replaces) == ("update", "revive_archived", ["a1"])
    assert lifecycle.needs_archived


def test_a_delete_or_reinforcement_of_a_possibly_archived_fact_is_refused() -> None:
    purge = """\
ir_version: 1
pack: purge
version: "1"
rules:
  - id: purge
    cadence: {cron: "0 3 * * *"}
    when:
      - fact: {as: f, status: archived, valid_from: {older_than: {days: 365}}}
    emit: {kind: delete, replaces: [f], sources: [f], status: invalidated}
"""
    with pytest.raises(IRError) as info:
        compile_text(purge)
    assert str(info.value) == (
        "<string>:9:37: rules[0].emit.replaces[0]: 'f' may be an archived fact, which is "
        "closed already: an update restores it, a delete or a reinforcement cannot name it"
    )


def test_a_pack_without_a_status_test_needs_no_archived_facts() -> None:
    assert not compile_text(EBBINGHAUS).needs_archived


def test_reinforce_update_carries_a_confirmation(lifecycle: CompiledPack) -> None:
    stored = fact("f1", confidence=0.9, reinforcement_count=2)
    out = run_pass(lifecycle, [triple(1, "s", "p", "o")], [stored])
    (delta,) = deltas(out)
    assert (delta.rule_id, delta.lifecycle) == ("confirm", "reinforce")
    assert delta.confidence == 0.95  # capped
    assert delta.fact.payload == {"importance": 0.5, "topic": "s/p"}
    runtime = PackRuntime(lifecycle)
    try:
        assert runtime.volatile  # reads access: its facts never feed a later run's pass
    finally:
        runtime.close()


def test_reinforcement_count_is_tested(lifecycle: CompiledPack) -> None:
    stored = fact("f1", reinforcement_count=10)
    assert run_pass(lifecycle, [triple(1, "s", "p", "o")], [stored]).deltas == []


def test_same_inputs_give_byte_identical_deltas(lifecycle: CompiledPack) -> None:
    facts = [
        fact("f1", payload={"importance": 0.1}, confidence=0.7),
        fact("f2", confidence=0.02),
        fact("f3", confidence=0.3, pinned=True, payload={"hits": 4}),
    ]
    runs = [only(lifecycle, facts, T0 + 17 * DAY) for _ in range(2)]
    bodies = [[canonical_json(d.model_dump(mode="json")) for d in run] for run in runs]
    assert bodies[0] == bodies[1] and len(bodies[0]) == 3


def test_update_by_an_episode_rule_is_new() -> None:
    text = """\
ir_version: 1
pack: plain
version: "1"
fields: {subject: string}
rules:
  - id: r
    when:
      - episode: {subject: {bind: s}}
      - fact: {as: f, subject: {var: s}, confidence: {bind: c}}
    emit:
      kind: update
      subject: "{s}"
      predicate: p
      object: o
      replaces: [f]
      sources: [f]
      confidence: {var: c, base: 0.1, per: 0.5}
"""
    out = run_pass(compile_text(text), [triple(1, "s", "p", "o")], [fact("f1")])
    (delta,) = deltas(out)
    assert delta.lifecycle == "new"
    assert delta.confidence == 0.5  # number variable accepted: 0.1 + 0.5 · 0.8
    assert out.facts_after is not None  # nothing volatile read


BAD = """\
ir_version: 1
pack: p
version: "1"
fields: {subject: string}
fact_payload: {importance: number}
rules:
  - id: r
    when:
      - fact: {as: f, subject: {bind: s}, confidence: {bind: c}}
    emit:
      kind: delete
      replaces: [f]
      sources: [f]
      reason: "{s}"
      confidence: {min: [{var: c}, 0.5]}
"""


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "{min: [{var: c}, 0.5]}",
            "{min: [{var: s}, 0.5]}",
            "rules/x.yaml:15:26: rules[0].emit.confidence.min[0]: arithmetic on a non-numeric "
            "variable: 's' is string (bind an integer or number field, e.g. a fact's confidence)",
        ),
        (
            "{min: [{var: c}, 0.5]}",
            "{mni: [{var: c}, 0.5]}",
            "rules/x.yaml:15:7: rules[0].emit.confidence: unknown operation 'mni'; did you mean "
            "'min'? (operations: reinforce, multiply, ebbinghaus, linear_decay, retention, min, "
            "max, clamp, add)",
        ),
        (
            "{min: [{var: c}, 0.5]}",
            '{min: [{var: c}, "0.5"]}',
            "rules/x.yaml:15:36: rules[0].emit.confidence.min[1]: expected a number, {var: x} "
            "or one operation: reinforce, multiply, ebbinghaus, linear_decay, retention, min, "
            "max, clamp, add",
        ),
        (
            "{min: [{var: c}, 0.5]}",
            "{ebbinghaus: {fact: s, lambda: 0.1}}",
            "rules/x.yaml:15:33: rules[0].emit.confidence.ebbinghaus.fact: 's' is not a named "
            "'fact' pattern: ebbinghaus decays a fact's confidence",
        ),
        (
            "      sources: [f]\n",
            "      sources: [f]\n      status: gone\n",
            "rules/x.yaml:14:7: rules[0].emit.status: expected 'deleted', 'expired', "
            "'archived', 'invalidated', 'merged', 'superseded' or 'challenged'",
        ),
        (
            "kind: delete\n      replaces: [f]",
            "kind: noop\n      status: expired",
            "rules/x.yaml:12:7: rules[0].emit.status: only 'delete' takes 'status' (one of "
            "deleted, expired, archived, invalidated, merged, superseded, challenged), not 'noop'",
        ),
        (
            "confidence: {bind: c}}",
            "confidence: {bind: c}, payload: {importanse: {lt: 0.3}}}",
            "rules/x.yaml:9:76: rules[0].when[0].fact.payload.importanse: unknown payload key "
            "'importanse'; did you mean 'importance'?",
        ),
        (
            "subject: {bind: s}, confidence",
            "subject: {bind: s}, status: deleted, confidence",
            "rules/x.yaml:9:43: rules[0].when[0].fact.status: never matches: a fact a rule "
            "sees has status 'current' or 'challenged' or 'archived'",
        ),
        (
            "{min: [{var: c}, 0.5]}",
            "{clamp: {value: {var: c}, lo: 0.8, hi: 0.2}}",
            "rules/x.yaml:15:54: rules[0].emit.confidence.clamp.hi: hi is smaller than lo",
        ),
        (
            "rules:\n",
            "rules:\n  - id: w\n    cadence: {true: 3}\n    when: [{episode: {}}]\n"
            "    emit: {kind: noop}\n",
            "rules/x.yaml:8:15: rules[0].cadence.true: unknown field 'true'",
        ),
    ],
)
def test_lifecycle_errors_are_positioned(old: str, new: str, message: str) -> None:
    assert old in BAD
    assert first_issue(BAD.replace(old, new, 1)) == message


def test_a_payload_key_not_declared_takes_a_template() -> None:
    text = BAD.replace("kind: delete\n      replaces: [f]", "kind: update\n      replaces: [f]")
    text = text.replace(
        '      reason: "{s}"\n',
        '      subject: "{s}"\n      predicate: p\n      object: o\n'
        "      payload: {importance: 1, weight: 2}\n",
    )
    assert first_issue(text) == (
        "rules/x.yaml:17:32: rules[0].emit.payload.weight: payload key 'weight' is not declared "
        "in 'fact_payload': its value is a template (a string), not integer 2"
    )


def readme_lifecycle_pack() -> str:
    """The YAML example of the README's lifecycle section."""
    text = (Path(__file__).parent.parent / "docs" / "rule-packs.md").read_text(encoding="utf-8")
    section = text.split("## Fact lifecycle in rules\n", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```\n", 1)[0]


def test_readme_lifecycle_example_validates_and_runs(tmp_path: Path) -> None:
    path = tmp_path / "forgetting.yaml"
    path.write_text(readme_lifecycle_pack(), encoding="utf-8")
    assert validate_file(path) == []
    compiled = compile_file(path)
    stored = fact("f1", payload={"importance": 0.5})
    (delta,) = only(compiled, [stored], T0 + 4 * DAY)
    assert (delta.rule_id, delta.lifecycle) == ("forget", "inherit")
    assert delta.confidence == round(0.8 * math.exp(-0.05 * 4**0.8), 9)
