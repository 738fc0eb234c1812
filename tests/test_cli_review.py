"""CLI tests for ``replay`` and ``lint``: exact output and exit codes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from replay_helpers import NOW_TEXT, fingerprint, frequency_pack, seed
from typer.testing import CliRunner

from stargraph_mem.cli import app
from stargraph_mem.compiler.pack import compile_file

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "rules"
LINT = ROOT / "tests" / "fixtures" / "lint"
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def real_db(tmp_path: Path) -> Path:
    path = tmp_path / "real" / "memory.db"
    path.parent.mkdir()
    asyncio.run(seed(path))
    return path


# --- replay ----------------------------------------------------------------------------


def test_replay_threshold_two_text(real_db: Path, tmp_path: Path) -> None:
    pack = frequency_pack(tmp_path, 2)
    before = fingerprint(real_db)
    code, out, err = invoke("replay", "--db", str(real_db), "--pack", str(pack), "--now", NOW_TEXT)
    assert (code, err) == (0, "")
    assert out == (
        f"replayed 9 episodes (2 partitions) of {real_db} with frequency_promotion 1.0.0, "
        "now 2026-03-02T03:00:00+00:00\n"
        "CHANGE  USER   AGENT  SUBJECT  PREDICATE  OBJECT  CONFIDENCE  RULE\n"
        "appear  alice  rag    alice    drinks     coffee  0.4         promote_frequent\n"
        "appear  bob    rag    bob      plays      chess   0.4         promote_frequent\n"
        "2 would appear, 0 would disappear, 0 would change, 1 unchanged\n"
    )
    assert fingerprint(real_db) == before


def test_replay_threshold_two_json(real_db: Path, tmp_path: Path) -> None:
    pack = frequency_pack(tmp_path, 2)
    before = fingerprint(real_db)
    args = ["replay", "--db", str(real_db), "--pack", str(pack), "--now", NOW_TEXT, "--json"]
    code, out, _ = invoke(*args)
    assert code == 0

    def added(user: str, predicate: str, obj: str) -> dict[str, object]:
        return {
            "change": "appear",
            "user": user,
            "agent": "rag",
            "subject": user,
            "predicate": predicate,
            "rule": "promote_frequent",
            "before": None,
            "after": {"object": obj, "confidence": 0.4, "rule": "promote_frequent"},
        }

    assert json.loads(out) == {
        "db": str(real_db),
        "packs": [
            {
                "pack": "frequency_promotion",
                "version": "1.0.0",
                "sha256": compile_file(pack).sha256,
            }
        ],
        "now": "2026-03-02T03:00:00+00:00",
        "as_of": None,
        "user": None,
        "agent": None,
        "episodes": 9,
        "partitions": 2,
        "times": {"mode": "now", "cadence": None, "pass_times": 1},
        "summary": {"appear": 2, "disappear": 0, "change": 0, "unchanged": 1},
        "changes": [added("alice", "drinks", "coffee"), added("bob", "plays", "chess")],
    }
    assert out.startswith('{\n  "agent": null,\n  "as_of": null,\n')  # sorted keys, indent 2
    assert fingerprint(real_db) == before


def test_replay_exit_code_flag(real_db: Path, tmp_path: Path) -> None:
    base = ["replay", "--db", str(real_db), "--now", NOW_TEXT, "--exit-code"]
    code, _, _ = invoke(*base, "--pack", str(frequency_pack(tmp_path, 2)))
    assert code == 1
    code, out, _ = invoke(*base, "--pack", str(RULES / "frequency_promotion.yaml"))
    assert code == 0
    assert out.splitlines()[1:] == [
        "0 would appear, 0 would disappear, 0 would change, 1 unchanged"
    ]


def test_replay_change_and_disappear_text(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    asyncio.run(seed(db, [("bob", "bob", "likes", "jazz", 3), ("bob", "bob", "plays", "go", 4)]))
    base = ["replay", "--db", str(db), "--now", NOW_TEXT, "--user", "bob", "--pack"]
    code, out, _ = invoke(*base, str(frequency_pack(tmp_path, 2)))
    assert code == 0
    assert out.splitlines()[0] == (
        f"replayed 7 episodes (1 partition) of {db} with frequency_promotion 1.0.0, "
        "now 2026-03-02T03:00:00+00:00"
    )
    assert out.splitlines()[1:] == [
        "CHANGE  USER  AGENT  SUBJECT  PREDICATE  OBJECT  CONFIDENCE  RULE",
        "change  bob   rag    bob      likes      jazz    0.5 -> 0.4  promote_frequent",
        "0 would appear, 0 would disappear, 1 would change, 1 unchanged",
    ]
    code, out, _ = invoke(*base, str(frequency_pack(tmp_path, 4)))
    assert code == 0
    assert out.splitlines()[1:] == [
        "CHANGE     USER  AGENT  SUBJECT  PREDICATE  OBJECT  CONFIDENCE  RULE",
        "disappear  bob   rag    bob      likes      jazz    0.5         promote_frequent",
        "0 would appear, 1 would disappear, 0 would change, 1 unchanged",
    ]


def test_replay_errors(real_db: Path, tmp_path: Path) -> None:
    pack = str(RULES / "frequency_promotion.yaml")
    missing = tmp_path / "none.db"
    code, out, err = invoke("replay", "--db", str(missing), "--pack", pack)
    assert (code, out, err) == (1, "", f"error: {missing}: database file does not exist\n")
    code, _, err = invoke("replay", "--db", str(real_db), "--pack", pack, "--as-of", "2026-03-02")
    assert (code, err) == (
        1,
        "error: --as-of '2026-03-02' has no UTC offset (write e.g. 2026-03-02T00:00:00+00:00)\n",
    )
    code, _, err = invoke("replay", "--db", str(real_db), "--pack", str(tmp_path / "x.yaml"))
    assert code == 1
    assert err.startswith(f"error: {tmp_path / 'x.yaml'}: cannot read rule pack:")
    code, _, _ = invoke("replay", "--db", str(real_db), "--pack", pack, "--now", "yesterday")
    assert code == 2
    code, _, _ = invoke("replay", "--db", str(real_db))
    assert code == 2


def test_help_texts() -> None:
    for command in ("replay", "lint"):
        code, out, _ = invoke(command, "--help")
        assert code == 0
        assert "Usage:" in out


# --- lint --------------------------------------------------------------------------------


def test_lint_shipped_packs_are_clean() -> None:
    packs = sorted(str(p) for p in RULES.glob("*.yaml"))
    code, out, err = invoke("lint", *packs)
    assert (code, err) == (0, "")
    silenced = {"memory_layers.yaml": " (4 warnings silenced)"}  # each with its reason
    assert out == "".join(f"ok: {p}{silenced.get(Path(p).name, '')}\n" for p in packs)


def test_lint_warnings_exit_zero_and_strict_exit_one() -> None:
    path = LINT / "shadowed.yaml"
    lines = [
        f"{path}:16:5: rules[1].when: {{}}: rule 'likes_statement' never fires: rule "
        "'any_statement' (priority 20 > 10) matches every episode it matches and claims it "
        "first [shadowed]",
        f"{path}:36:5: rules[4].when: {{}}: rule 'high_scored_noop' never fires: rule "
        "'scored_noop' (same priority 0, declared earlier) matches every episode it matches "
        "and claims it first [shadowed]",
    ]
    code, out, err = invoke("lint", str(path))
    assert (code, err) == (0, "")
    assert out == "".join(line.format("warning") + "\n" for line in lines)
    code, out, err = invoke("lint", "--strict", str(path))
    assert (code, err) == (1, "")
    assert out == "".join(line.format("error") + "\n" for line in lines)


def test_lint_every_fixture_and_a_clean_pack() -> None:
    clean = RULES / "default.yaml"
    code, out, _ = invoke(
        "lint",
        str(LINT / "select_never_matches.yaml"),
        str(LINT / "cadence_overlap.yaml"),
        str(clean),
    )
    assert code == 0
    assert [line.rsplit(" ", 1)[-1] for line in out.splitlines()] == [
        "[select-never-matches]",
        "[select-never-matches]",
        "[select-never-matches]",
        "[pattern-never-matches]",
        "[cadence-overlap]",
        "[cadence-overlap]",
        str(clean),
    ]
    code, _, _ = invoke("lint", "--strict", str(clean))
    assert code == 0


def test_lint_counts_silenced_warnings_and_reports_unused_suppressions(tmp_path: Path) -> None:
    path = LINT / "suppressed.yaml"
    code, out, err = invoke("lint", "--strict", str(path))
    assert (code, out, err) == (0, f"ok: {path} (1 warning silenced)\n", "")
    unused = tmp_path / "unused.yaml"
    text = path.read_text(encoding="utf-8").replace(
        "predicate: location, object: {ne", "predicate: home, object: {ne"
    )
    unused.write_text(
        text.replace(
            'predicate: location, object: "{o}", replaces',
            'predicate: home, object: "{o}", replaces',
        ),
        encoding="utf-8",
    )
    code, out, err = invoke("lint", "--strict", str(unused))
    assert (code, err) == (1, "")
    assert out == (
        f"{unused}:18:9: rules[1].lint.ignore.cadence-overlap: error: rule 'streaming_move' "
        "silences 'cadence-overlap', but lint has no such warning about it: remove the "
        "suppression [unused-suppression]\n"
    )


def test_lint_invalid_pack_prints_errors_and_exits_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (RULES / "default.yaml").read_text(encoding="utf-8")
    bad.write_text(text.replace("priority: 100", "priorty: 100"), encoding="utf-8")
    code, out, err = invoke("lint", str(bad))
    assert (code, out) == (1, "")
    assert (
        err == f"{bad}:26:5: rules[0].priorty: unknown field 'priorty'; did you mean 'priority'?\n"
    )
