"""Conventions every command follows: --version, shell completion, STARGRAPH_MEM_DB for
--db, --json output (one document, keys sorted, errors on stderr), and `facts` order and
filters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import typer
from backends import PG_URL
from typer.testing import CliRunner, Result

from stargraph_mem import __version__
from stargraph_mem.cli import app

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "rules"
LINT = ROOT / "tests" / "fixtures" / "lint"
ENV = "STARGRAPH_MEM_DB"
NOW = "2026-11-02T00:00:00+00:00"

AS_CONSOLE_SCRIPT = (
    "import sys; sys.argv[0] = 'stargraph-mem'; from stargraph_mem.cli import main; main()"
)
"""Run the CLI as the installed ``stargraph-mem`` script is run (the program name matters
to completion)."""


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env, prog_name="stargraph-mem")


def document(result: Result) -> Any:
    """The one JSON document a --json command printed: nothing else on stdout, indented,
    keys sorted at every level."""
    doc = json.loads(result.stdout)
    assert result.stdout == json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return doc


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", AS_CONSOLE_SCRIPT, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
        timeout=120,
    )


# --- --version -----------------------------------------------------------------------------


def test_version() -> None:
    result = invoke("--version")
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        f"stargraph-mem {__version__}\n",
        "",
    )
    done = cli("--version")
    assert (done.returncode, done.stdout) == (0, f"stargraph-mem {__version__}\n")
    assert "--version" in invoke("--help").stdout


# --- shell completion ----------------------------------------------------------------------


SCRIPTS = {
    "bash": "complete -o default -F _stargraph_mem_completion stargraph-mem",
    "zsh": "compdef _stargraph_mem_completion stargraph-mem",
    "fish": "complete --command stargraph-mem --no-files",
}


@pytest.mark.parametrize("shell", list(SCRIPTS))
def test_show_completion_for_a_named_shell(shell: str) -> None:
    """The shell named wins over the one detected (typer alone would ignore it)."""
    result = invoke("--show-completion", shell)
    assert (result.exit_code, result.stderr) == (0, "")
    assert SCRIPTS[shell] in result.stdout
    assert f"_STARGRAPH_MEM_COMPLETE=complete_{shell}" in result.stdout
    for other, line in SCRIPTS.items():
        assert (line in result.stdout) == (other == shell)


def test_show_completion_with_detection_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Typer's own switch (read when the command is built): the options then take a shell."""
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = invoke("--show-completion", "zsh")
    assert (result.exit_code, result.stderr) == (0, "")
    assert SCRIPTS["zsh"] in result.stdout
    assert invoke("--show-completion").exit_code == 2  # a shell is required then


def test_show_completion_of_the_detected_shell() -> None:
    """Without a shell named, typer detects the one running the command."""
    done = cli("--show-completion")
    if done.returncode != 0:  # no shell among the parent processes (e.g. a bare container)
        assert "not supported" in done.stderr
        return
    assert "_STARGRAPH_MEM_COMPLETE=complete_" in done.stdout


def test_an_unknown_shell_is_a_usage_error() -> None:
    result = invoke("--show-completion", "ksh")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "error: --show-completion: unknown shell 'ksh' (one of bash, zsh, fish, powershell, pwsh)\n"
    )


def test_install_completion_writes_the_script_into_home(tmp_path: Path) -> None:
    done = cli("--install-completion", "bash", HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "stargraph-mem.sh"
    assert "_STARGRAPH_MEM_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    assert "bash completion installed in" in done.stdout


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("stargraph-mem fa", "1", "facts"),
        ("stargraph-mem facts --min", "2", "--min-confidence"),
        ("stargraph-mem ing", "1", "ingest"),
    ],
)
def test_bash_completion_answers(words: str, cword: str, expected: str) -> None:
    """What the installed bash script asks: the candidates for the word being typed."""
    done = cli(_STARGRAPH_MEM_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD=cword)
    assert (done.returncode, done.stdout.split()) == (0, [expected])


def test_commands_still_work_with_completion_on(tmp_path: Path) -> None:
    help_text = invoke("--help").stdout
    for option in ("--install-completion", "--show-completion"):
        assert option in help_text
    db = str(tmp_path / "m.db")
    put = invoke(
        "put", "--db", db, "--user", "u", "--session", "s", "--agent", "a", "--id", "e1", "hi"
    )
    assert (put.exit_code, put.stdout) == (0, "e1\n")
    assert invoke("recent", "--db", db, "--user", "u").stdout.splitlines()[1].endswith("e1  hi")


def test_version_and_completion_load_no_store_nor_compiler() -> None:
    """Start-up stays lazy: these options answer before any command module is needed."""
    code = textwrap.dedent(
        """
        import json, sys
        from typer.testing import CliRunner
        from stargraph_mem.cli import app
        runner = CliRunner()
        args = (["--version"], ["--show-completion", "bash"])
        codes = [runner.invoke(app, a, prog_name="stargraph-mem").exit_code for a in args]
        heavy = ("clips", "stargraph_mem.compiler", "stargraph_mem.stores", "pydantic.main")
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "clips" or m.startswith(heavy))
        print(json.dumps({"codes": codes, "loaded": loaded}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"codes": [0, 0], "loaded": []}


# --- STARGRAPH_MEM_DB ----------------------------------------------------------------------

PUT = ["put", "--user", "u", "--session", "s", "--agent", "a", "--id", "e1", "hello"]
PUT += ["--timestamp", "2026-11-01T09:00:00+00:00"]


def test_db_option_wins_over_the_variable(tmp_path: Path) -> None:
    option, variable = tmp_path / "option.db", tmp_path / "variable.db"
    result = invoke(*PUT, "--db", str(option), env={ENV: str(variable)})
    assert result.exit_code == 0
    assert option.exists() and not variable.exists()


def test_variable_wins_over_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    variable = tmp_path / "variable.db"
    assert invoke(*PUT, env={ENV: str(variable)}).exit_code == 0
    assert variable.exists() and not (tmp_path / "stargraph_mem.db").exists()
    # read commands take it too
    listed = invoke("recent", "--user", "u", "--json", env={ENV: str(variable)})
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["e1"]
    missing = invoke("facts", env={ENV: str(tmp_path / "none.db")})
    assert (missing.exit_code, missing.stderr) == (
        1,
        f"error: {tmp_path / 'none.db'}: database file does not exist\n",
    )


def test_without_option_or_variable_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for value in (None, ""):  # unset, or set but empty
        result = invoke(*PUT, env={ENV: value})
        assert result.exit_code == 0
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == ["stargraph_mem.db"]


def db_commands() -> list[str]:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return sorted(
        name
        for name, command in group.commands.items()
        if any(p.name == "db" for p in command.params)
    )


def test_every_db_option_reads_the_variable_and_says_so() -> None:
    names = db_commands()
    assert {"put", "recent", "ingest", "consolidate", "facts", "explain", "replay", "run"} <= set(
        names
    )
    assert "status" in names
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    for name in names:
        (db,) = [p for p in group.commands[name].params if p.name == "db"]
        assert db.envvar == ENV, name
        # rich wraps the help text inside a box: drop the box's borders and the spaces
        squeezed = "".join(invoke(name, "--help").stdout.replace("│", " ").split())
        assert f"[envvar:{ENV}]" in squeezed, name


# --- --json --------------------------------------------------------------------------------

SCORED = """\
ir_version: 1
pack: scored
version: "1.0.0"
fields: {subject: string, predicate: string, object: string}
defaults:
  cadence: {every: 1}
rules:
  - id: likes_sure
    priority: 10
    when:
      - episode: {predicate: likes, subject: {bind: s}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: likes, object: "{o}", confidence: 0.9}
  - id: other_unsure
    when:
      - episode: {predicate: {bind: p}, subject: {bind: s}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: "{p}", object: "{o}", confidence: 0.5}
"""

OBSERVATIONS = [
    # user, agent, subject, predicate, object
    ("bob", "rag", "alice", "likes", "tea"),
    ("alice", "rag", "alice", "likes", "tea"),
    ("alice", "chat", "alice", "hates", "rain"),
    ("alice", "rag", "alice", "likes", "coffee"),
    ("alice", "rag", "bob", "knows", "alice"),
]


@pytest.fixture
def scored(tmp_path: Path) -> Path:
    pack = tmp_path / "scored.yaml"
    pack.write_text(SCORED, encoding="utf-8")
    return pack


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The observations, stored, not consolidated yet."""
    path = tmp_path / "m.db"
    for n, (user, agent, s, p, o) in enumerate(OBSERVATIONS):
        meta = ["--meta", f"subject={s}", "--meta", f"predicate={p}", "--meta", f"object={o}"]
        result = invoke(
            "put", "--db", str(path), "--user", user, "--agent", agent, "--session", "s1",
            "--id", f"o{n}", "--timestamp", "2026-11-01T09:00:00+00:00", *meta, f"{s} {p} {o}",
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
    return path


def test_validate_json(scored: Path, tmp_path: Path) -> None:
    good = invoke("validate", str(scored), "--json")
    assert (good.exit_code, good.stderr) == (0, "")
    assert document(good) == {
        "ok": True,
        "packs": [{"file": str(scored), "ok": True, "problems": []}],
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCORED.replace("priority: 10", "priorty: 10"), encoding="utf-8")
    result = invoke("validate", str(scored), str(bad), "--json")
    assert (result.exit_code, result.stderr) == (1, "")
    doc = document(result)
    assert doc["ok"] is False
    assert [p["ok"] for p in doc["packs"]] == [True, False]
    assert doc["packs"][1]["problems"] == [
        {
            "file": str(bad),
            "line": 9,
            "col": 5,
            "path": "rules[0].priorty",
            "rule_id": "likes_sure",
            "severity": "error",
            "message": "unknown field 'priorty'; did you mean 'priority'?",
        }
    ]


def test_info_json(scored: Path) -> None:
    result = invoke("info", str(scored), "--json")
    assert (result.exit_code, result.stderr) == (0, "")
    doc = document(result)
    assert (doc["pack"], doc["version"], doc["ir_version"]) == ("scored", "1.0.0", 1)
    assert len(doc["sha256"]) == 64
    assert doc["rules"] == [
        {"id": "likes_sure", "priority": 10, "cadence": {"every": 1}, "emits": "add"}
        | {"claim": True, "enabled": True},
        {"id": "other_unsure", "priority": 0, "cadence": {"every": 1}, "emits": "add"}
        | {"claim": True, "enabled": True},
    ]
    nightly = document(invoke("info", str(RULES / "default.yaml"), "--json"))
    assert {json.dumps(r["cadence"]) for r in nightly["rules"]} == {
        '{"cron": "0 3 * * *", "tz": "UTC"}'
    }


def test_info_json_error_goes_to_stderr(tmp_path: Path) -> None:
    result = invoke("info", str(tmp_path / "none.yaml"), "--json")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith("error: ")


def test_lint_json() -> None:
    path = LINT / "shadowed.yaml"
    result = invoke("lint", str(path), "--json")
    assert (result.exit_code, result.stderr) == (0, "")
    doc = document(result)
    assert (doc["ok"], doc["strict"]) == (True, False)
    (pack,) = doc["packs"]
    assert (pack["file"], pack["ok"], pack["errors"], pack["suppressed"]) == (
        str(path),
        True,
        [],
        [],
    )
    assert [(w["check"], w["line"], w["rule_id"]) for w in pack["warnings"]] == [
        ("shadowed", 16, "likes_statement"),
        ("shadowed", 36, "high_scored_noop"),
    ]
    strict = invoke("lint", str(path), "--strict", "--json")
    assert strict.exit_code == 1
    assert document(strict)["ok"] is False
    silenced = document(invoke("lint", str(LINT / "suppressed.yaml"), "--strict", "--json"))
    assert [w["check"] for w in silenced["packs"][0]["suppressed"]] == ["cadence-overlap"]


def test_lint_json_invalid_pack(scored: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCORED.replace("priority: 10", "priorty: 10"), encoding="utf-8")
    result = invoke("lint", str(bad), str(scored), "--json")
    assert (result.exit_code, result.stderr) == (1, "")
    doc = document(result)
    assert [(p["ok"], len(p["errors"])) for p in doc["packs"]] == [(False, 1), (True, 0)]
    assert doc["packs"][0]["errors"][0]["path"] == "rules[0].priorty"


def test_consolidate_json(db: Path, scored: Path) -> None:
    args = ["consolidate", "--db", str(db), "--pack", str(scored), "--now", NOW, "--json"]
    dry = invoke(*args, "--dry-run", "--coverage")
    assert (dry.exit_code, dry.stderr) == (0, "")
    doc = document(dry)
    assert doc["dry_run"] is True
    assert [(p["user"], p["agent"], p["episodes"], p["applied"]) for p in doc["passes"]] == [
        ("alice", "chat", 1, False),
        ("alice", "rag", 3, False),
        ("bob", "rag", 1, False),
    ]
    rag = doc["passes"][1]
    assert rag["counts"] == {"add": 3, "update": 0, "delete": 0, "noop": 0}
    assert sorted((d["fact"]["object"], d["confidence"]) for d in rag["deltas"]) == [
        ("alice", 0.5),
        ("coffee", 0.9),
        ("tea", 0.9),
    ]
    assert doc["coverage"] == [
        {
            "pack": "scored",
            "rules": [
                {"rule": "likes_sure", "activations": 3, "status": "fired"},
                {"rule": "other_unsure", "activations": 2, "status": "fired"},
            ],
            "fired": 2,
            "counted": 2,
            "ratio": 1.0,
        }
    ]
    applied = invoke(*args)
    doc = document(applied)
    assert all(p["applied"] and "deltas" not in p for p in doc["passes"])
    assert "coverage" not in doc
    assert sum(p["counts"]["add"] for p in doc["passes"]) == 5
    again = document(invoke(*args))
    assert [p["episodes"] for p in again["passes"]] == [0, 0, 0]


def test_run_once_and_status_json(db: Path, scored: Path) -> None:
    empty = invoke("status", "--db", str(db), "--json")
    assert (empty.exit_code, document(empty)) == (0, {"rules": []})
    run = ["run", "--once", "--db", str(db), "--pack", str(scored), "--now", NOW, "--json"]
    result = invoke(*run)
    assert (result.exit_code, result.stderr) == (0, "")
    doc = document(result)
    assert (doc["ran"], doc["lease_holder"], doc["now"], doc["conflicts"]) == (
        True,
        None,
        NOW,
        [],
    )
    assert [(p["user"], p["agent"], p["counts"]["add"]) for p in doc["passes"]] == [
        ("alice", "chat", 1),
        ("alice", "rag", 3),
        ("bob", "rag", 1),
    ]
    assert {tuple(p["rules"]) for p in doc["passes"]} == {("likes_sure", "other_unsure")}
    assert document(invoke(*run))["passes"] == []  # nothing due any more
    status = invoke("status", "--db", str(db), "--now", NOW, "--json")
    rows = document(status)["rules"]
    assert len(rows) == 6
    assert rows[0] == {
        "pack": "scored",
        "rule": "likes_sure",
        "cadence": {"every": 1},
        "user": "alice",
        "agent": "chat",
        "pending": 0,
        "not_yet_due": 0,
        "last_run": NOW,
        "next_run": None,
        "due": False,
        "sweep": False,
    }


def test_run_json_needs_once(db: Path, scored: Path) -> None:
    result = invoke("run", "--db", str(db), "--pack", str(scored), "--json")
    assert result.exit_code == 2
    assert "--json needs --once" in result.stderr


def test_test_json() -> None:
    result = invoke("test", str(RULES / "default.yaml"), "--json", "--coverage")
    assert (result.exit_code, result.stderr) == (0, "")
    doc = document(result)
    assert (doc["pack"], doc["passed"], doc["totals"]["failed"]) == ("default", True, 0)
    assert doc["coverage"]["ratio"] == 1.0


# --- facts: order and filters --------------------------------------------------------------


@pytest.fixture
def facts_db(db: Path, scored: Path) -> Path:
    args = ["consolidate", "--db", str(db), "--pack", str(scored), "--now", NOW]
    assert invoke(*args).exit_code == 0
    return db


def fact_rows(*args: str) -> list[tuple[Any, ...]]:
    result = invoke("facts", *args, "--json")
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    found = [json.loads(line) for line in result.stdout.splitlines()]
    return [(f["user"], f["agent"], f["subject"], f["predicate"], f["object"]) for f in found]


def test_facts_sorted_by_user_agent_subject_predicate_object(facts_db: Path) -> None:
    assert fact_rows("--db", str(facts_db)) == [
        ("alice", "chat", "alice", "hates", "rain"),
        ("alice", "rag", "alice", "likes", "coffee"),
        ("alice", "rag", "alice", "likes", "tea"),
        ("alice", "rag", "bob", "knows", "alice"),
        ("bob", "rag", "alice", "likes", "tea"),
    ]
    table = invoke("facts", "--db", str(facts_db)).stdout.splitlines()
    assert [line.split()[1:5] for line in table[1:]] == [
        ["alice", "chat", "alice", "hates"],
        ["alice", "rag", "alice", "likes"],
        ["alice", "rag", "alice", "likes"],
        ["alice", "rag", "bob", "knows"],
        ["bob", "rag", "alice", "likes"],
    ]
    assert "sorted by user, agent, subject, predicate, object and id" in " ".join(
        invoke("facts", "--help").stdout.split()
    )


def test_facts_filters(facts_db: Path) -> None:
    db = ["--db", str(facts_db)]
    assert fact_rows(*db, "--predicate", "likes", "--min-confidence", "0.8") == [
        ("alice", "rag", "alice", "likes", "coffee"),
        ("alice", "rag", "alice", "likes", "tea"),
        ("bob", "rag", "alice", "likes", "tea"),
    ]
    assert fact_rows(*db, "--subject", "bob") == [("alice", "rag", "bob", "knows", "alice")]
    assert fact_rows(*db, "--min-confidence", "0.9", "--user", "bob") == [
        ("bob", "rag", "alice", "likes", "tea")
    ]
    assert len(fact_rows(*db, "--min-confidence", "0")) == 5
    assert fact_rows(*db, "--min-confidence", "1") == []
    assert fact_rows(*db, "--predicate", "likes", "--subject", "bob") == []


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "inf", "high"])
def test_min_confidence_out_of_range_is_a_usage_error(facts_db: Path, value: str) -> None:
    result = invoke("facts", "--db", str(facts_db), "--min-confidence", value)
    assert (result.exit_code, result.stdout) == (2, "")
    assert "--min-confidence" in result.stderr
    if value != "high":
        assert "must be a number from 0 to 1" in result.stderr


def test_explain_json_is_one_sorted_document(facts_db: Path) -> None:
    listed = invoke("facts", "--db", str(facts_db), "--json", "--subject", "bob")
    fact_id = json.loads(listed.stdout)["id"]
    result = invoke("explain", fact_id, "--db", str(facts_db), "--json")
    assert (result.exit_code, result.stderr) == (0, "")
    why = document(result)
    assert (why["fact"]["id"], why["fact"]["predicate"], why["fact"]["object"]) == (
        fact_id,
        "knows",
        "alice",
    )
    assert why["fact"]["rule_id"] == "other_unsure"
    missing = invoke("explain", "f-none", "--db", str(facts_db), "--json")
    assert (missing.exit_code, missing.stdout) == (1, "")
    assert missing.stderr.startswith("error: ")


def test_read_commands_refuse_a_postgres_schema_without_a_memory() -> None:
    """A read command on a PostgreSQL schema that holds no memory (a typo in its name, say)
    is an error, as a missing SQLite file is, and creates nothing: it used to create the
    schema and report an empty memory."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    url = f"{PG_URL}?schema={name}"
    with psycopg.connect(PG_URL, autocommit=True, connect_timeout=10) as admin:
        try:
            pack = str(Path(__file__).resolve().parents[1] / "rules" / "default.yaml")
            for command in (["facts"], ["recent", "--user", "u"], ["consolidate", "--pack", pack]):
                refused = invoke(*command, "--db", url)
                assert (refused.exit_code, refused.stderr) == (
                    1,
                    f"error: {url}: PostgreSQL schema {name!r} holds no memory (put or "
                    "ingest creates one)\n",
                ), command
            found = admin.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                (name,),
            ).fetchone()
            assert found == (0,)
            assert invoke(*PUT, "--db", url).exit_code == 0
            listed = invoke("recent", "--user", "u", "--json", "--db", url)
            assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["e1"]
        finally:
            admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
