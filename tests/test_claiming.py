"""Claiming: within a pass each episode goes to at most one emitting rule — the highest
priority match, ties by declaration order — unless a rule sets ``claim: false``."""

from __future__ import annotations

from packs_helpers import NOW, PARTITION, episode

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.passes.runtime import PackRuntime

PACK = """\
ir_version: 1
pack: claims
version: "1"
fields: {subject: string, tag: string}
rules:
  - id: first_declared
    priority: 5
    when: [{episode: {subject: {exists: true}}}]
    emit: {kind: noop}
  - id: second_declared
    priority: 5
    when: [{episode: {subject: {prefix: a}}}]
    emit: {kind: noop}
  - id: high
    priority: 9
    when: [{episode: {subject: alice}}]
    emit: {kind: noop}
  - id: observer
    priority: 1
    claim: false
    when: [{episode: {tag: {exists: true}}}]
    emit: {kind: noop}
"""


def test_priority_then_declaration_order_then_opt_out() -> None:
    runtime = PackRuntime(compile_text(PACK))
    records = [
        episode(1, {"subject": "alice"}),  # high (9) beats both priority-5 rules
        episode(2, {"subject": "anna"}),  # tie at 5: first declared wins
        episode(3, {"subject": "bob", "tag": "x"}),  # claimed, and the observer still fires
        episode(4, {"tag": "x"}),  # only the non-claiming observer matches
    ]
    out = runtime.run_pass(partition=PARTITION, now=NOW, episodes=records)
    fired = [(d.source_episode_ids[0], d.rule_id) for d in out.deltas]
    assert fired == [
        ("e1", "high"),
        ("e2", "first_declared"),
        ("e3", "first_declared"),
        ("e3", "observer"),
        ("e4", "observer"),
    ]
