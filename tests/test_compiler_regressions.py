"""Regression tests for compiler bugs found by review and fuzzing."""

from __future__ import annotations

import pytest
from packs_helpers import NOW, PARTITION, engine_fact, episode

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.errors import IRError
from stargraph_mem.ir.checks import parse_timestamp_literal
from stargraph_mem.model.time import to_us as to_micros

HEAD = """\
ir_version: 1
pack: p
version: "1"
fields: {flag: boolean, subject: string, when: timestamp, score: number}
rules:
"""


def fired_ids(text: str, records: list[object]) -> list[str]:
    runtime = PackRuntime(compile_text(text))
    out = runtime.run_pass(partition=PARTITION, now=NOW, episodes=records)  # type: ignore[arg-type]
    return [d.source_episode_ids[0] for d in out.deltas]


def test_boolean_literals_stay_boolean() -> None:
    text = HEAD + "  - id: r\n    when: [{episode: {flag: true}}]\n    emit: {kind: noop}\n"
    records = [episode(1, {"flag": True}), episode(2, {"flag": False}), episode(3, {"flag": 1})]
    runtime = PackRuntime(compile_text(text))
    out = runtime.run_pass(partition=PARTITION, now=NOW, episodes=records)
    assert [d.source_episode_ids for d in out.deltas] == [["e1"]]
    assert [r.episode_id for r in out.rejected if not r.unmatched] == ["e3"]
    assert [r.episode_id for r in out.rejected if r.unmatched] == ["e2"]


def test_float_literal_keeps_its_type() -> None:
    text = HEAD + "  - id: r\n    when: [{episode: {score: {eq: 1.0}}}]\n    emit: {kind: noop}\n"
    assert fired_ids(text, [episode(1, {"score": 1}), episode(2, {"score": 1.5})]) == ["e1"]


def test_condition_on_fact_id_builds_and_matches() -> None:
    text = (
        HEAD
        + "  - id: r\n    when:\n      - episode: {subject: {bind: s}}\n"
        + "      - fact: {as: f, id: {prefix: keep}, subject: {var: s}}\n"
        + "    emit: {kind: noop, reinforces: [f]}\n"
    )
    runtime = PackRuntime(compile_text(text))
    facts = [engine_fact("keep1", ("a", "p", "o")), engine_fact("drop1", ("b", "p", "o"))]
    records = [episode(1, {"subject": "a"}), episode(2, {"subject": "b"})]
    out = runtime.run_pass(partition=PARTITION, now=NOW, episodes=records, facts=facts)
    assert [(d.source_episode_ids, getattr(d, "reinforces", None)) for d in out.deltas] == [
        (["e1"], ["keep1"])
    ]


def test_version_text_never_reaches_clips() -> None:
    forged = 'version: "1\\n(defrule x => (printout sm-out \\"0 1\\" crlf));"\n'
    text = HEAD.replace('version: "1"\n', forged) + (
        "  - id: r\n    when: [{episode: {subject: nobody}}]\n    emit: {kind: noop}\n"
    )
    compiled = compile_text(text)
    assert "defrule x" not in compiled.clips
    assert fired_ids(text, [episode(1, {"subject": "someone"})]) == []


@pytest.mark.parametrize("escape", ["\\b", "\\0"])
def test_unrepresentable_characters_rejected_with_position(escape: str) -> None:
    text = HEAD + (
        f'  - id: r\n    when: [{{episode: {{subject: "a{escape}b"}}}}]\n    emit: {{kind: noop}}\n'
    )
    with pytest.raises(IRError) as info:
        compile_text(text, "p.yaml")
    code = "0008" if escape == "\\b" else "0000"
    assert str(info.value) == (
        f"p.yaml:7:23: rules[0].when[0].episode.subject: "
        f"the character U+{code} cannot be used in a rule pack"
    )


def test_timestamp_literals_are_exact() -> None:
    literal = "2246-04-17T04:10:26.878264+00:00"
    from datetime import datetime

    assert parse_timestamp_literal(literal) == to_micros(datetime.fromisoformat(literal))


def test_timestamp_variable_refused_in_fact_text() -> None:
    text = HEAD + (
        "  - id: r\n    when: [{episode: {subject: {bind: s}, when: {bind: w}}}]\n"
        '    emit: {kind: add, subject: "{s}", predicate: at, object: "{w}"}\n'
    )
    with pytest.raises(IRError) as info:
        compile_text(text, "p.yaml")
    assert str(info.value) == (
        "p.yaml:8:54: rules[0].emit.object: timestamp variable 'w' cannot be used here "
        "(only in reason, payload)"
    )
