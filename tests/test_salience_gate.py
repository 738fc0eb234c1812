"""A rule's salience gate through real passes: its tau, rule match and importance count."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from e2e_helpers import episode, rows, spo
from pydantic import JsonValue

from stargraph_mem.compiler.pack import compile_text
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes.gating import RuleGate, UnusableImportance
from stargraph_mem.engine.schedule.scheduler import ConsolidationReport
from stargraph_mem.ir.models import Rule
from stargraph_mem.model.time import to_us
from stargraph_mem.salience import GATE_W_IMPORTANCE, SalienceContext, gate_scorer
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.models import Episode

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)

PACK = """\
ir_version: 1
pack: gated
version: "1"
fields: {{subject: string, predicate: string, object: string, topic: string, imp: number}}
defaults: {{cadence: {{every: 1}}}}
rules:
  - id: add_statement
    salience: {gate}
    when:
      - episode: {{subject: {{bind: s}}, predicate: {{bind: p}}, object: {{bind: o}}}}
    emit: {{kind: add, subject: "{{s}}", predicate: "{{p}}", object: "{{o}}"}}
"""


def consolidator(db: Path, gate: str) -> Consolidator:
    return Consolidator(db, [compile_text(PACK.format(gate=gate))], clock=lambda: NOW)


def obs(eid: str, *, age: timedelta = timedelta(0), **extra: JsonValue) -> Episode:
    return episode(eid, at=NOW - age, meta=extra, **spo("alice", "likes", eid))


async def run_one(db: Path, gate: str, ep: Episode) -> ConsolidationReport:
    async with consolidator(db, gate) as mem:
        return await mem.record(ep)


SPO = spo("alice", "likes", "tea")


def added(report: ConsolidationReport) -> int:
    return report.counts["add"]


# --- tau ---------------------------------------------------------------------------------


async def test_the_rules_tau_decides_whether_an_old_episode_passes(tmp_path: Path) -> None:
    old = obs("e1", age=timedelta(hours=2))  # fully matching, never accessed: 0.5·e^(−Δt/τ)
    long = await run_one(tmp_path / "long.db", "{min: 0.45, tau_seconds: 86400}", old)
    short = await run_one(tmp_path / "short.db", "{min: 0.45, tau_seconds: 60}", old)
    assert (long.gated, added(long)) == ([], 1)  # 0.5·e^(−1/12) ≈ 0.46
    assert (short.gated, added(short)) == (["e1"], 0)  # 0.5·e^(−120) ≈ 0


async def test_an_episode_every_gate_keeps_out_is_recorded_as_a_rejection(tmp_path: Path) -> None:
    """The pass consumes a gated episode (the watermark passes it): the fact store keeps a
    rejection saying why, so it is never dropped silently."""
    async with consolidator(tmp_path / "m.db", "{min: 0.45, tau_seconds: 60}") as mem:
        report = await mem.record(obs("e1", age=timedelta(hours=2)))
        assert (report.gated, report.rejected) == (["e1"], [])
        (stored,) = await mem.fact_store.rejections()
        assert (stored.id, stored.rule_id, stored.reason) == (
            "e1",
            "salience-gate",
            "salience below the gate of every rule that could see it",
        )


# --- importance and min ------------------------------------------------------------------

IMPORTANT = "{min: 0.8, tau_seconds: 3600, importance_key: imp}"


@pytest.mark.parametrize(
    ("extra", "passes"),
    [
        *[({"imp": 1.0}, True), ({"imp": 1}, True), ({"imp": 0.6}, True)],
        *[({"imp": 0.5}, False), ({"imp": 0.0}, False), ({"imp": None}, False), ({}, False)],
    ],
)
async def test_a_fresh_episode_passes_min_08_by_its_importance(
    tmp_path: Path, extra: dict[str, JsonValue], passes: bool
) -> None:
    report = await run_one(tmp_path / "m.db", IMPORTANT, episode("e1", at=NOW, meta=extra, **SPO))
    assert report.rejected == []
    assert (report.gated, added(report)) == (([], 1) if passes else (["e1"], 0))


async def test_an_important_episode_decays_below_the_gate_by_tau(tmp_path: Path) -> None:
    async with consolidator(tmp_path / "m.db", IMPORTANT) as mem:
        recent = await mem.record(obs("e1", age=timedelta(minutes=10), imp=1.0))  # ≈ 0.92
        aged = await mem.record(obs("e2", age=timedelta(hours=1), imp=1.0))  # 0.5·(e^−1 + 1)
        assert (recent.gated, added(recent)) == ([], 1)
        assert (aged.gated, added(aged)) == (["e2"], 0)
        assert [f.object for f in await mem.facts()] == ["e1"]


async def test_without_an_importance_key_min_above_half_gates_fresh_episodes(
    tmp_path: Path,
) -> None:
    report = await run_one(tmp_path / "m.db", "{min: 0.55}", obs("e1", imp=1.0))
    assert report.gated == ["e1"]


@pytest.mark.parametrize("bad", [1.5, -0.1, "high", True, [1]])
async def test_an_unusable_importance_rejects_the_episode_for_the_rule(
    tmp_path: Path, bad: JsonValue
) -> None:
    db = tmp_path / "m.db"
    async with consolidator(db, IMPORTANT) as mem:
        report = await mem.record(obs("e1", imp=bad))
        assert (report.gated, added(report)) == ([], 0)
        [rejected] = report.rejected
        assert (rejected.episode_id, rejected.rule_id) == ("e1", "add_statement")
        assert rejected.reason == (
            f"salience: importance 'imp' must be a number in [0, 1] (got {bad!r})"
        )
        assert added(await mem.record(obs("e2", imp=1.0))) == 1  # later ones go on
    stored = rows(db, "SELECT id, rule_id FROM rejections")
    assert [tuple(r) for r in stored] == [("e1", "add_statement")]


# --- rule match --------------------------------------------------------------------------


async def test_an_episode_missing_a_condition_scores_lower(tmp_path: Path) -> None:
    async with consolidator(tmp_path / "m.db", "{min: 0.45}") as mem:
        full = await mem.record(obs("e1"))  # every condition: 0.5
        ep = episode("e2", at=NOW, subject="alice", predicate="likes")  # 2 of 3: 0.5·5/6
        partial = await mem.record(ep)
        assert (full.gated, added(full)) == ([], 1)
        assert partial.gated == ["e2"]


MATCHING = """\
ir_version: 1
pack: matching
version: "1"
fields: {subject: string, object: string, topic: string, weight: integer, seen: timestamp}
rules:
  - id: r
    salience: {min: 0.1}
    when:
      - fact: {as: f, object: {bind: fo}}
      - episode:
          subject: {bind: s}
          object: {ne: {var: s}}
          topic: {in: [work, home], ne: {var: fo}}
          weight: {ge: 3}
          seen: {newer_than: {days: 1}}
    emit: {kind: noop, reinforces: [f]}
"""


def matching_rule() -> tuple[Rule, dict[str, str]]:
    pack = compile_text(MATCHING).pack
    return pack.rules[0], dict(pack.fields)


def meta_record(**metadata: JsonValue) -> EpisodeRecord:
    return EpisodeRecord(1, "e1", "c", NOW, None, "u", "s", "a", metadata=dict(metadata))


@pytest.mark.parametrize(
    ("metadata", "fraction"),
    [
        ({"subject": "a", "object": "b", "topic": "work", "weight": 3, "seen": NOW.isoformat()}, 1),
        ({"subject": "a", "object": "a", "topic": "work", "weight": 3}, 3 / 5),
        ({"subject": "a", "object": "b", "topic": "play", "weight": 2}, 2 / 5),
        ({"object": "b", "topic": "home", "weight": "3"}, 2 / 5),
        ({}, 1 / 5),  # only the object condition, its one test left out, holds
    ],
)
def test_rule_match_is_the_fraction_of_episode_conditions_met(
    metadata: dict[str, JsonValue], fraction: float
) -> None:
    """A test against a fact's variable (``fo``) is left out; one against ``s`` is kept."""
    rule, fields = matching_rule()
    gate = RuleGate.of(rule, fields)  # type: ignore[arg-type]
    assert gate.rule_match(meta_record(**metadata), to_us(NOW)) == pytest.approx(fraction)


def test_rule_match_of_a_pattern_without_conditions_is_one() -> None:
    when = MATCHING[MATCHING.index("      - fact:") : MATCHING.index("    emit")]
    text = MATCHING.replace(when, "      - fact: {as: f}\n      - episode: {}\n")
    pack = compile_text(text).pack
    gate = RuleGate.of(pack.rules[0], dict(pack.fields))
    assert gate.rule_match(meta_record(), to_us(NOW)) == 1.0


def test_gate_context_carries_tau_match_and_importance() -> None:
    pack = compile_text(PACK.format(gate=IMPORTANT)).pack
    gate = RuleGate.of(pack.rules[0], dict(pack.fields))
    ctx = gate.context(meta_record(subject="a", predicate="p", imp=0.25), NOW)
    assert (ctx.tau_seconds, ctx.rule_match, ctx.importance) == (3600.0, 2 / 3, 0.25)
    with pytest.raises(UnusableImportance, match=r"\[0, 1\] \(got nan\)"):
        gate.importance(meta_record(imp=math.nan))


# --- the documented scores ---------------------------------------------------------------


@pytest.mark.parametrize("importance", [0.0, 0.3, 1.0])
def test_fresh_full_match_scores_half_of_one_plus_importance(importance: float) -> None:
    ctx = SalienceContext(now=NOW, importance=importance, tau_seconds=60)
    score = gate_scorer().score_sync(meta_record(), ctx)
    assert GATE_W_IMPORTANCE == 1.0
    assert score == pytest.approx(0.5 * (1 + importance))
