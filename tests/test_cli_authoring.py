"""CLI tests for the authoring commands: ``test``, and ``consolidate --trace/--coverage``.

Exact output and exit codes; the shipped packs' own test files run here too, so the
README's test command (and CI) covers them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stargraph_mem.cli import app

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "rules"
DEFAULT = RULES / "default.yaml"
DEDUP = RULES / "dedup_against_facts.yaml"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "authoring"
NOW = "2026-11-03T03:00:00+00:00"
runner = CliRunner()


def invoke(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


SHIPPED = sorted(p.name for p in RULES.glob("*.yaml"))


def test_every_shipped_pack_has_a_test_file() -> None:
    assert sorted(p.name for p in (RULES / "tests").glob("*.yaml")) == SHIPPED
    assert SHIPPED


@pytest.mark.parametrize("pack", SHIPPED)
def test_shipped_pack_tests_pass_with_full_coverage(pack: str) -> None:
    code, out, err = invoke("test", RULES / pack, "--coverage")
    assert (code, err) == (0, ""), out
    assert " 0 failed " in out
    assert out.endswith("rules fired (100%), minimum 100%\n")
    assert "FAIL" not in out


def test_default_pack_tests_with_coverage() -> None:
    code, out, err = invoke("test", DEFAULT, "--coverage")
    assert (code, err) == (0, "")
    assert out == (
        "PASS  statements without an intent become facts\n"
        "PASS  a repeated subject and predicate in one pass updates the earlier fact\n"
        "PASS  intent noop only audits\n"
        "PASS  intent delete closes the facts it names\n"
        "PASS  intent update replaces the named fact with the new statement\n"
        "PASS  a delete naming no current fact is rejected and the pass goes on\n"
        "PASS  an episode without a full triple becomes a note\n"
        "PASS  a repeat in a later pass adds beside the earlier fact\n"
        "PASS  an update names a fact made in an earlier pass by its episode\n"
        f"default: 9 passed, 0 failed ({RULES / 'tests' / 'default.yaml'})\n"
        "RULE                    ACTIVATIONS  STATUS\n"
        "explicit_noop           1            fired\n"
        "explicit_delete         2            fired\n"
        "explicit_update         2            fired\n"
        "repeat_updates_earlier  1            fired\n"
        "add_observation         8            fired\n"
        "add_note                2            fired\n"
        "coverage default: 6 of 6 rules fired (100%), minimum 100%\n"
    )


def test_broken_pack_test_shows_a_diff_and_exits_1() -> None:
    broken = FIXTURES / "broken_default.yaml"
    code, out, err = invoke("test", DEFAULT, broken)
    assert (code, err) == (1, "")
    assert out == (
        "PASS  a new statement is added\n"
        "FAIL  a repeat updates the earlier fact\n"
        "  deltas (exact):\n"
        "    --- expected\n"
        "    +++ actual\n"
        "    @@ -1,2 +1,3 @@\n"
        "     add add_observation (alice, likes, tea)\n"
        "    -update repeat_updates_earlier (alice, likes, coffee) replaces=[a2]\n"
        "    +update repeat_updates_earlier (alice, likes, coffee) replaces=[a1]\n"
        "    +add add_observation (alice, lives_in, paris)\n"
        "  facts (exact):\n"
        "    --- expected\n"
        "    +++ actual\n"
        "    @@ -1,2 +1,2 @@\n"
        "    -(alice, likes, water) id=a2\n"
        "    +(alice, likes, coffee) id=a2\n"
        "     (alice, lives_in, paris) id=a3\n"
        f"default: 1 passed, 1 failed ({broken})\n"
    )


def test_coverage_under_the_files_minimum_fails() -> None:
    partial = FIXTURES / "partial_default.yaml"
    code, out, _ = invoke("test", DEFAULT, partial)
    assert code == 0
    code, out, err = invoke("test", DEFAULT, partial, "--coverage")
    assert (code, err) == (1, "")
    assert out == (
        "PASS  a new statement is added\n"
        f"default: 1 passed, 0 failed ({partial})\n"
        "RULE                    ACTIVATIONS  STATUS\n"
        "explicit_noop           0            never fired\n"
        "explicit_delete         0            never fired\n"
        "explicit_update         0            never fired\n"
        "repeat_updates_earlier  0            never fired\n"
        "add_observation         1            fired\n"
        "add_note                0            never fired\n"
        "coverage default: 1 of 6 rules fired (17%), minimum 80%\n"
        "FAIL  coverage below the minimum 80%\n"
    )


def test_trace_shows_rule_bindings_episodes_and_facts(tmp_path: Path) -> None:
    tests = tmp_path / "t.yaml"
    tests.write_text(
        "pack: dedup_against_facts\n"
        "now: 2026-03-02T03:00:00+00:00\n"
        "cases:\n"
        "  - name: changed object\n"
        "    facts: [{id: tea, triple: [alice, likes, tea], valid_from: {days: 2}}]\n"
        "    episodes: [{id: e1, content: Alice switched, triple: [alice, likes, coffee]}]\n"
        "    expect: {deltas: [{kind: update, rule: changed_object_update, replaces: [tea]}]}\n",
        encoding="utf-8",
    )
    code, out, err = invoke("test", DEDUP, tests, "--trace")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    tea = lines[7].split()[1]
    fact = lines[2].split()[1]
    assert lines == [
        "PASS  changed object",
        "  update changed_object_update (alice, likes, coffee) confidence=0.8",
        f"    fact       {fact}",
        f"    delta      d{fact[1:]}",
        "    reason     (alice, likes) changed to coffee",
        "    bindings   o=coffee p=likes s=alice t=2026-03-02T02:59:00+00:00",
        "    episode    e1 session=s1 at=2026-03-02T02:59:00+00:00: Alice switched",
        f"    replaces   {tea} (alice, likes, tea) rule=seed",
        f"dedup_against_facts: 1 passed, 0 failed ({tests})",
    ]


def test_test_errors_are_one_line(tmp_path: Path) -> None:
    code, out, err = invoke("test", RULES / "expire_speculative.yaml", tmp_path / "none.yaml")
    assert (code, out) == (1, "")
    assert err == f"error: {tmp_path / 'none.yaml'}: no such pack test file\n"

    lonely = tmp_path / "lonely.yaml"
    lonely.write_text(DEFAULT.read_text(encoding="utf-8").replace("pack: default", "pack: lonely"))
    code, out, err = invoke("test", lonely)
    assert (code, out) == (1, "")
    assert err == f"error: {tmp_path / 'tests' / 'lonely.yaml'}: no such pack test file\n"

    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "pack: default\nnow: 2026-03-02T03:00:00+00:00\ncases:\n"
        "  - name: x\n    episodes: [{id: a1, tripel: [a, b, c]}]\n    expect: {deltas: []}\n",
        encoding="utf-8",
    )
    code, out, err = invoke("test", DEFAULT, typo)
    assert (code, out) == (1, "")
    assert err == (
        f"error: {typo}:5:25: cases[0].episodes[0].tripel: unknown field 'tripel'; "
        "did you mean 'triple'?\n"
    )

    code, out, err = invoke("test", DEDUP, RULES / "tests" / "default.yaml")
    assert (code, out) == (1, "")
    assert err == (
        f"error: {RULES / 'tests' / 'default.yaml'}:3:1: pack: these tests are for pack "
        "'default', not 'dedup_against_facts'\n"
    )


def test_keyword_selects_cases_and_counts_the_rest() -> None:
    """A case-insensitive substring of case names; the coverage minimum is not checked."""
    code, out, err = invoke("test", DEFAULT, "-k", "INTENT", "--coverage")
    assert (code, err) == (0, "")
    assert out == (
        "PASS  statements without an intent become facts\n"
        "PASS  intent noop only audits\n"
        "PASS  intent delete closes the facts it names\n"
        "PASS  intent update replaces the named fact with the new statement\n"
        f"default: 4 passed, 0 failed, 5 deselected ({RULES / 'tests' / 'default.yaml'})\n"
        "RULE                    ACTIVATIONS  STATUS\n"
        "explicit_noop           1            fired\n"
        "explicit_delete         1            fired\n"
        "explicit_update         1            fired\n"
        "repeat_updates_earlier  0            never fired\n"
        "add_observation         2            fired\n"
        "add_note                0            never fired\n"
        "coverage default: 4 of 6 rules fired (67%)\n"
    )


def test_keyword_selecting_nothing_is_an_error() -> None:
    code, out, err = invoke("test", DEFAULT, "-k", "no such case")
    assert (code, out) == (1, "")
    assert err == (
        "error: -k 'no such case' selects none of the 9 cases in "
        f"{RULES / 'tests' / 'default.yaml'}\n"
    )


def test_json_results_keep_the_exit_code() -> None:
    broken = FIXTURES / "broken_default.yaml"
    code, out, err = invoke("test", DEFAULT, broken, "--json", "-k", "repeat")
    assert (code, err) == (1, "")
    doc = json.loads(out)
    assert (doc["pack"], doc["passed"]) == ("default", False)
    assert doc["totals"] == {"passed": 0, "failed": 1, "deselected": 1}
    (file,) = doc["files"]
    assert (file["path"], file["totals"]) == (str(broken), doc["totals"])
    (case,) = file["cases"]
    assert (case["name"], case["passed"], case["rejected"]) == (
        "a repeat updates the earlier fact",
        False,
        [],
    )
    deltas, facts = case["mismatches"]
    assert deltas == {
        "section": "deltas",
        "pass": None,
        "match": "exact",
        "expected": [
            {"kind": "add", "rule": "add_observation", "triple": ["alice", "likes", "tea"]},
            {
                "kind": "update",
                "rule": "repeat_updates_earlier",
                "triple": ["alice", "likes", "coffee"],
                "replaces": ["a2"],
            },
        ],
        "actual": [
            {"kind": "add", "rule": "add_observation", "triple": ["alice", "likes", "tea"]},
            {
                "kind": "update",
                "rule": "repeat_updates_earlier",
                "triple": ["alice", "likes", "coffee"],
                "replaces": ["a1"],
            },
            {"kind": "add", "rule": "add_observation", "triple": ["alice", "lives_in", "paris"]},
        ],
        "missing": [1],
        "unexpected": [1, 2],
        "diff": [
            "--- expected",
            "+++ actual",
            "@@ -1,2 +1,3 @@",
            " add add_observation (alice, likes, tea)",
            "-update repeat_updates_earlier (alice, likes, coffee) replaces=[a2]",
            "+update repeat_updates_earlier (alice, likes, coffee) replaces=[a1]",
            "+add add_observation (alice, lives_in, paris)",
        ],
    }
    assert (facts["section"], facts["missing"], facts["unexpected"]) == ("facts", [0], [0])
    assert "coverage" not in doc


def test_json_coverage_and_a_passing_run() -> None:
    code, out, err = invoke("test", RULES / "expire_speculative.yaml", "--json", "--coverage")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["passed"], doc["totals"]) == (True, {"passed": 5, "failed": 0, "deselected": 0})
    assert doc["coverage"] == {
        "rules": [
            {"rule": "reinforce_on_repeat", "activations": 2, "status": "fired"},
            {"rule": "expire_unreinforced", "activations": 4, "status": "fired"},
        ],
        "fired": 2,
        "counted": 2,
        "ratio": 1.0,
        "minimum": 1.0,
        "passed": True,
    }
    partial = FIXTURES / "partial_default.yaml"
    code, out, err = invoke("test", DEFAULT, partial, "--json", "--coverage")
    assert (code, err) == (1, "")
    doc = json.loads(out)
    assert (doc["passed"], doc["coverage"]["passed"], doc["coverage"]["minimum"]) == (
        False,
        False,
        0.8,
    )


def test_test_usage_error_exits_2() -> None:
    code, _, _ = invoke("test")
    assert code == 2


def seed_db(tmp_path: Path) -> Path:
    db = tmp_path / "m.db"
    lines = [
        {
            "id": f"ep{i}",
            "content": text,
            "timestamp": f"2026-11-0{i}T09:00:00+00:00",
            "user": "alice",
            "session": f"s{i}",
            "agent": "rag",
            "metadata": {"subject": "alice", "predicate": "likes", "object": obj},
        }
        for i, (text, obj) in enumerate([("Alice likes tea", "tea"), ("Coffee now", "coffee")], 1)
    ]
    data = tmp_path / "eps.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    assert invoke("ingest", data, "--db", db)[0] == 0
    return db


def test_consolidate_trace_and_coverage(tmp_path: Path) -> None:
    db = seed_db(tmp_path)
    code, out, err = invoke(
        "consolidate", "--db", db, "--pack", DEDUP, "--now", NOW, "--trace", "--coverage"
    )
    assert (code, err) == (0, "")
    code, facts_out, _ = invoke("facts", "--db", db, "--json", "--as-of", NOW)
    lines = out.splitlines()
    tea, coffee = lines[1].split()[1], lines[7].split()[1]
    assert json.loads(facts_out)["id"] == coffee
    assert lines == [
        "add new_fact_add (alice, likes, tea) confidence=0.8",
        f"  fact       {tea}",
        f"  delta      d{tea[1:]}",
        "  reason     first observation of (alice, likes)",
        "  bindings   o=tea p=likes s=alice",
        "  episode    ep1 session=s1 at=2026-11-01T09:00:00+00:00: Alice likes tea",
        "update changed_object_update (alice, likes, coffee) confidence=0.8",
        f"  fact       {coffee}",
        f"  delta      d{coffee[1:]}",
        "  reason     (alice, likes) changed to coffee",
        "  bindings   o=coffee p=likes s=alice t=2026-11-02T09:00:00+00:00",
        "  episode    ep2 session=s2 at=2026-11-02T09:00:00+00:00: Coffee now",
        f"  replaces   {tea} (alice, likes, tea) rule=new_fact_add",
        "dedup_against_facts user=alice agent=rag episodes=2 add=1 update=1 delete=0 noop=0 "
        "rejected=0 gated=0",
        "RULE                   ACTIVATIONS  STATUS",
        "known_fact_noop        0            never fired",
        "changed_object_update  1            fired",
        "late_observation_noop  0            never fired",
        "new_fact_add           1            fired",
        "coverage dedup_against_facts: 2 of 4 rules fired (50%)",
    ]


def test_consolidate_dry_run_keeps_stdout_for_json(tmp_path: Path) -> None:
    db = seed_db(tmp_path)
    code, out, err = invoke(
        "consolidate",
        "--db",
        db,
        "--pack",
        DEFAULT,
        "--now",
        NOW,
        "--dry-run",
        "--trace",
        "--coverage",
    )
    assert code == 0
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["add", "update"]
    assert err.splitlines()[0] == "add add_observation (alice, likes, tea) confidence=0.8"
    assert err.endswith("coverage default: 2 of 6 rules fired (33%)\n")
    assert invoke("facts", "--db", db)[1].splitlines()[1:] == []
