"""The recall commands end to end on a fresh database: recall (table, JSON, context),
entity, define-entity and embed, and their errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from stargraph_mem.cli import app

ROOT = Path(__file__).resolve().parents[1]
SCOPE = ["--user", "alice", "--agent", "chat"]


def _memory(tmp_path: Path) -> str:
    db = str(tmp_path / "m.db")
    runner = CliRunner()
    said = [
        ("drinks", "tea", "I really enjoy green tea in the morning"),
        ("likes", "jazz", "Jazz records fill my shelves"),
    ]
    for n, (predicate, obj, text) in enumerate(said, start=1):
        meta = ["--meta", "subject=alice", "--meta", f"predicate={predicate}"]
        meta += ["--meta", f"object={obj}"]
        stamp = ["--timestamp", f"2026-02-0{n}T09:00:00+00:00"]
        args = ["put", "--db", db, *SCOPE, "--session", f"s{n}", *stamp, *meta, text]
        done = runner.invoke(app, args)
        assert done.exit_code == 0, done.output
    pack = str(ROOT / "rules" / "default.yaml")
    done = runner.invoke(
        app, ["consolidate", "--db", db, "--pack", pack, "--now", "2026-03-01T00:00Z"]
    )
    assert done.exit_code == 0, done.output
    return db


def test_recall_shows_ranked_hits_with_their_strategies(tmp_path: Path) -> None:
    db = _memory(tmp_path)
    done = CliRunner().invoke(app, ["recall", "which drink in the morning", "--db", db, *SCOPE])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].startswith("intent: ")
    assert lines[1].split() == ["RANK", "KIND", "ID", "SCORE", "STRATEGIES", "TEXT"]
    assert "tea" in lines[2] and "vector#" in lines[2]


def test_recall_json_lines_and_context(tmp_path: Path) -> None:
    db = _memory(tmp_path)
    runner = CliRunner()
    done = runner.invoke(app, ["recall", "tea", "--db", db, *SCOPE, "--kinds", "facts", "--json"])
    assert done.exit_code == 0, done.output
    hits = [json.loads(line) for line in done.stdout.splitlines()]
    assert hits and hits[0]["rank"] == 1 and hits[0]["kind"] == "fact"
    assert hits[0]["fact"]["object"] == "tea" and "fts" in hits[0]["strategies"]
    done = runner.invoke(app, ["recall", "tea", "--db", db, *SCOPE, "--context", "200"])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("## Memory") and "[sources: " in done.stdout


def test_entities_are_defined_and_profiled(tmp_path: Path) -> None:
    db = _memory(tmp_path)
    runner = CliRunner()
    done = runner.invoke(
        app, ["define-entity", "Alice", "--db", db, *SCOPE, "--alias", "Ally", "--type", "person"]
    )
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == "Alice (person; aliases: Ally)"
    done = runner.invoke(app, ["entity", "ally", "--db", db, *SCOPE, "--json"])
    assert done.exit_code == 0, done.output
    profile = json.loads(done.stdout)
    assert profile["entity"]["canonical_name"] == "Alice"
    assert sorted(f["object"] for f in profile["facts"]) == ["jazz", "tea"]
    done = runner.invoke(app, ["entity", "Atlantis", "--db", db, *SCOPE])
    assert done.exit_code == 1 and "Atlantis" in done.output


def test_embed_backfills_and_reports(tmp_path: Path) -> None:
    db = _memory(tmp_path)
    runner = CliRunner()
    done = runner.invoke(app, ["embed", "--db", db, "--embedder", "hash:64"])
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == (
        "embedded 2 episodes and 2 facts of 1 partitions with stargraph-hash@1/64"
    )
    done = runner.invoke(app, ["embed", "--db", db, "--embedder", "hash:64"])
    assert "embedded 0 episodes and 0 facts" in done.stdout
    done = runner.invoke(app, ["embed", "--db", db, "--embedder", "word2vec"])
    assert done.exit_code == 1 and "word2vec" in done.output


def test_bad_input_is_refused(tmp_path: Path) -> None:
    db = _memory(tmp_path)
    runner = CliRunner()
    done = runner.invoke(app, ["recall", "tea", "--db", db, *SCOPE, "--kinds", "all"])
    assert done.exit_code == 2 and "--kinds" in done.output
    done = runner.invoke(app, ["recall", "tea", "--db", db, *SCOPE, "--after", "someday"])
    assert done.exit_code == 1 and "after" in done.output
    done = runner.invoke(app, ["recall", "tea", "--db", str(tmp_path / "none.db"), *SCOPE])
    assert done.exit_code == 1 and "does not exist" in done.output
    assert not (tmp_path / "none.db").exists()


def test_recall_mode_keeps_a_modes_memory_types(tmp_path: Path) -> None:
    db = _memory(tmp_path)
    runner = CliRunner()
    args = ["recall", "tea morning", "--db", db, *SCOPE, "--json"]
    done = runner.invoke(app, [*args, "--mode", "facts_only"])
    assert done.exit_code == 0, done.output
    kinds = {json.loads(line)["kind"] for line in done.stdout.splitlines()}
    assert kinds == {"fact"}
    done = runner.invoke(app, args)
    assert {json.loads(line)["kind"] for line in done.stdout.splitlines()} == {"fact", "episode"}
    done = runner.invoke(app, [*args, "--mode", "rules"])
    assert done.exit_code == 2
    assert "--mode must be one of facts_only, facts_plus_rules, full_context (got 'rules')" in (
        done.output
    )


RAW_CONTROLS = ("\x07", "\x1b", "\u202e")


def _hostile_memory(tmp_path: Path) -> str:
    """One episode whose content carries an ESC sequence and a bidi override, consolidated
    into a fact whose object carries a BEL."""
    db = str(tmp_path / "hostile.db")
    runner = CliRunner()
    meta = ["--meta", "subject=alice", "--meta", "predicate=likes", "--meta", "object=x\x07y"]
    args = ["put", "--db", db, *SCOPE, "--session", "s1", "--id", "z2", *meta]
    args += ["--timestamp", "2026-09-01T09:01:00+00:00", "ctrl \x1b[31m red \u202e rtl"]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    pack = str(ROOT / "rules" / "dedup_against_facts.yaml")
    done = runner.invoke(
        app, ["consolidate", "--db", db, "--pack", pack, "--now", "2026-09-02T03:00:00+00:00"]
    )
    assert done.exit_code == 0, done.output
    return db


def test_entity_escapes_user_text_in_its_timeline(tmp_path: Path) -> None:
    db = _hostile_memory(tmp_path)
    runner = CliRunner()
    done = runner.invoke(app, ["entity", "alice", "--db", db, *SCOPE])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert "episode  ctrl \\x1b[31m red \\u202e rtl" in lines[-2]
    assert lines[-1].endswith("fact_added  alice likes x\\x07y")
    assert not any(raw in done.stdout for raw in RAW_CONTROLS)
    done = runner.invoke(
        app, ["define-entity", "bo\x07b", "--db", db, *SCOPE, "--alias", "r\u202et"]
    )
    assert done.exit_code == 0, done.output
    assert done.stdout == "bo\\x07b (concept; aliases: r\\u202et)\n"
    done = runner.invoke(app, ["entity", "R\u202eT", "--db", db, *SCOPE])  # by its alias
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[0] == "bo\\x07b (concept; aliases: r\\u202et)"
    done = runner.invoke(app, ["entity", "alice", "--db", db, *SCOPE, "--json"])
    assert done.exit_code == 0, done.output  # --json stays exact
    texts = [event["text"] for event in json.loads(done.stdout)["timeline"]]
    assert texts == ["ctrl \x1b[31m red \u202e rtl", "alice likes x\x07y"]


def test_recall_context_escapes_user_text(tmp_path: Path) -> None:
    db = _hostile_memory(tmp_path)
    args = ["recall", "red rtl", "--db", db, *SCOPE]
    done = CliRunner().invoke(app, [*args, "--context", "200"])
    assert done.exit_code == 0, done.output
    assert "- alice likes x\\x07y (since 2026-09-02 03:00Z) [sources: z2]" in done.stdout
    assert "- 2026-09-01 09:01Z ctrl \\x1b[31m red \\u202e rtl [episode z2]" in done.stdout
    assert not any(raw in done.stdout for raw in RAW_CONTROLS)
    done = CliRunner().invoke(app, [*args, "--json"])
    assert done.exit_code == 0, done.output  # --json stays exact
    texts = {json.loads(line)["text"] for line in done.stdout.splitlines()}
    assert texts == {"ctrl \x1b[31m red \u202e rtl", "alice likes x\x07y"}
