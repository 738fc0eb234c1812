"""Golden compiler tests: each ``fixtures/compiler/*.yaml`` compiles to its ``.clp`` byte for
byte, and every golden ``.clp`` builds in a real CLIPS environment.

Regenerate after an intended change of the generator with::

    STARGRAPH_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/test_compiler_golden.py

then read the diff of the ``.clp`` files before committing them.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from packs_helpers import engine_fact, episode, run_pass, summary

from stargraph_mem.compiler.pack import build_environment, compile_file, compile_text

FIXTURES = Path(__file__).parent / "fixtures" / "compiler"
PACKS = sorted(FIXTURES.glob("*.yaml"))
REGEN = os.environ.get("STARGRAPH_REGEN_GOLDEN") == "1"


def test_fixture_set_is_complete() -> None:
    names = [p.stem for p in PACKS]
    assert len(names) >= 6
    assert all(p.with_suffix(".clp").is_file() for p in PACKS), names


@pytest.mark.parametrize("pack", PACKS, ids=[p.stem for p in PACKS])
def test_compiles_to_golden(pack: Path) -> None:
    golden = pack.with_suffix(".clp")
    clips = compile_file(pack).clips
    if REGEN:
        golden.write_bytes(clips.encode("utf-8"))
    assert clips == golden.read_bytes().decode("utf-8")


@pytest.mark.parametrize("pack", PACKS, ids=[p.stem for p in PACKS])
def test_golden_builds_in_clips(pack: Path) -> None:
    text = pack.with_suffix(".clp").read_bytes().decode("utf-8")
    env = build_environment(text)
    rules = {r.name for r in env.rules()}
    headers = {line.split()[1] for line in text.splitlines() if line.startswith("(defrule ")}
    assert rules == headers
    assert {"sm-advance", "sm-drop-fact"} <= rules


@pytest.mark.parametrize("pack", PACKS, ids=[p.stem for p in PACKS])
def test_compilation_is_deterministic(pack: Path) -> None:
    text = pack.read_text(encoding="utf-8")
    first, second = compile_text(text, "a.yaml"), compile_text(text, "b.yaml")
    assert first.clips == second.clips
    assert first.manifest == second.manifest
    assert first.sha256 == second.sha256 == first.manifest["sha256"]


def test_disabled_rules_are_not_emitted_but_listed() -> None:
    compiled = compile_file(FIXTURES / "gates.yaml")
    assert "sm-rule-disabled" not in compiled.clips
    entry = {r["id"]: r for r in compiled.manifest["rules"]}["disabled"]
    assert entry["enabled"] is False and "salience" not in entry


def test_priority_ties_break_by_position() -> None:
    """Equal priority: the earlier rule ranks higher; negative priorities rank last."""
    manifest = compile_file(FIXTURES / "gates.yaml").manifest
    salience = {r["id"]: r.get("salience") for r in manifest["rules"]}
    assert salience == {
        "selected": 5000,
        "gated": 4999,
        "disabled": None,
        "streaming": 4998,
        "last_resort": 4997,
    }


BASE = """\
ir_version: 1
pack: tiny
version: "1"
fields: {subject: string}
rules:
  - id: only
    when:
      - episode: {subject: {bind: s}}
    emit: {kind: add, subject: "{s}", predicate: is, object: here}
"""


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("predicate: is", "predicate: was"),
        ('version: "1"', 'version: "2"'),
        ("- id: only", "- id: other"),
        ("emit: {kind: add,", "emit: {confidence: 0.5, kind: add,"),
    ],
)
def test_sha256_changes_with_the_pack(old: str, new: str) -> None:
    changed = BASE.replace(old, new)
    assert changed != BASE
    assert compile_text(changed).sha256 != compile_text(BASE).sha256


def test_sha256_ignores_layout_and_comments() -> None:
    """The hash is of the canonical IR: formatting does not change it."""
    relaid = "# a comment\n" + BASE.replace(
        "fields: {subject: string}", "fields:\n  subject: string"
    )
    assert compile_text(relaid).sha256 == compile_text(BASE).sha256


def test_episode_ops_fixture_semantics() -> None:
    """Each op in ``episode_ops.yaml`` selects the episodes it says it does (the first-ranked
    matching rule claims an episode; near misses fall through)."""
    compiled = compile_file(FIXTURES / "episode_ops.yaml")
    now = datetime(2026, 3, 2, tzinfo=UTC)
    recent = now - timedelta(minutes=10)
    string_meta = {"kind": 'say "hi"'}
    rows: list[tuple[dict[str, Any], str, str | None]] = [
        (string_meta, "a\\b then (retract 1)", "string_ops"),
        (string_meta, "a\\b without the call", "presence_ops"),
        ({"level": 3}, "", "integer_ops"),
        ({"level": 4}, "", None),
        ({"score": 0.3}, "", "number_ops"),
        ({"score": 0.5}, "", None),
        ({"score": 0.75, "level": 7}, "", "number_eq"),
        ({"score": 0.75, "level": 8}, "", None),
        ({"flag": True}, "", "boolean_ops"),
        ({"flag": False}, "", None),
        ({"seen_at": "2026-02-01T00:00:00+00:00"}, "", "timestamp_ops"),
        ({"seen_at": "2026-03-01T23:00:00+00:00"}, "", None),
        ({"tags": ["x", "urgent"]}, "", "list_ops"),
        ({"tags": ["urgently"]}, "", None),
    ]
    episodes = [
        episode(i + 1, meta, content=content, timestamp=recent)
        for i, (meta, content, _) in enumerate(rows)
    ]
    binder = {"kind": "xray", "level": 0, "score": 0.1, "flag": False, "tags": []}
    binder["seen_at"] = "2025-06-01T00:00:00Z"
    episodes.append(episode(99, binder, content="an xray", timestamp=recent))
    fact = engine_fact(
        "f1", ("s", "p", "xray"), confidence=0.2, valid_from=datetime(2025, 1, 1, tzinfo=UTC)
    )
    out = run_pass(compiled, episodes, [fact], now=now)
    assert [r for r in out.rejected if not r.unmatched] == []
    fired = {d.source_episode_ids[0]: d.rule_id for d in out.deltas}
    expected = {f"e{i + 1}": rule for i, (_, _, rule) in enumerate(rows) if rule is not None}
    assert fired == {**expected, "e99": "binds_and_vars"}
    (bound,) = [(*summary(d), d.reason) for d in out.deltas if d.rule_id == "binds_and_vars"]
    assert bound == (
        "delete",
        "binds_and_vars",
        ["f1"],
        None,
        0.1,
        ["e99"],
        "e99 xray 0 false 2025-06-01T00:00:00Z",
    )
