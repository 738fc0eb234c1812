"""CLI `put` and `recent`: exact output lines and exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from stargraph_mem.cli import app

SCOPE = ["--user", "alice", "--session", "s1", "--agent", "a1"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "cli.db")


def put(db: str, content: str, *extra: str) -> Result:
    return invoke("put", "--db", db, *SCOPE, *extra, content)


def test_put_then_recent_json(db: str) -> None:
    first = put(db, "likes tea", "--id", "e1", "--timestamp", "2026-11-22T12:00:00+01:00")
    second = put(
        db,
        "likes coffee",
        "--id",
        "e2",
        "--timestamp",
        "2026-11-22T11:30:00Z",
        "--meta",
        "intent=update",
        "--meta",
        'replaces=["f1"]',
        "--meta",
        "n=5",
        "--meta",
        "note=not json",
    )
    assert (first.exit_code, first.stdout, first.stderr) == (0, "e1\n", "")
    assert (second.exit_code, second.stdout) == (0, "e2\n")
    result = invoke("recent", "--db", db, "--user", "alice", "--json")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        '{"id":"e2","content":"likes coffee","timestamp":"2026-11-22T11:30:00Z",'
        '"source_node":null,"user":"alice","session":"s1","agent":"a1","metadata":'
        '{"intent":"update","replaces":["f1"],"n":5,"note":"not json"}}',
        '{"id":"e1","content":"likes tea","timestamp":"2026-11-22T12:00:00+01:00",'
        '"source_node":null,"user":"alice","session":"s1","agent":"a1","metadata":{}}',
    ]


def test_recent_prints_aligned_columns_and_narrows(db: str) -> None:
    put(db, "one\ntwo", "--id", "e1", "--timestamp", "2026-11-22T12:00:00+00:00")
    other_scope = ["--user", "alice", "--session", "s22", "--agent", "a2"]
    later = ["--id", "long-id", "--timestamp", "2026-11-22T13:00:00+00:00"]
    assert invoke("put", "--db", db, *other_scope, *later, "x").exit_code == 0
    result = invoke("recent", "--db", db, "--user", "alice", "--limit", "5")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "TIMESTAMP                  SESSION  AGENT  ID       CONTENT",
        "2026-11-22T13:00:00+00:00  s22      a2     long-id  x",
        "2026-11-22T12:00:00+00:00  s1       a1     e1       one\\ntwo",
    ]
    narrowed = invoke("recent", "--db", db, "--user", "alice", "--agent", "a1", "--json")
    assert [line[:15] for line in narrowed.stdout.splitlines()] == ['{"id":"e1","con']
    empty = invoke("recent", "--db", db, "--user", "bob")
    assert (empty.exit_code, empty.stdout) == (0, "TIMESTAMP  SESSION  AGENT  ID  CONTENT\n")


def test_default_id_is_deterministic(db: str) -> None:
    stamp = ["--timestamp", "2026-11-22T12:00:00+00:00"]
    first, again, other = put(db, "hi", *stamp), put(db, "hi", *stamp), put(db, "ho", *stamp)
    assert first.exit_code == again.exit_code == other.exit_code == 0
    assert first.stdout == again.stdout != other.stdout
    assert first.stdout.startswith("e") and len(first.stdout) == 26
    listed = invoke("recent", "--db", db, "--user", "alice", "--json").stdout.splitlines()
    assert len(listed) == 2


def test_naive_timestamp_is_a_one_line_error(db: str) -> None:
    result = put(db, "hi", "--timestamp", "2026-11-22T12:00:00")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "error: --timestamp '2026-11-22T12:00:00' has no UTC offset "
        "(write e.g. 2026-11-22T12:00:00+00:00)\n"
    )
    assert not Path(db).exists()


BAD_ID = "error: id: String should match pattern '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'\n"
BAD_INTENT = "error: metadata: Value error, metadata.intent must be a string (got int)\n"


@pytest.mark.parametrize(
    ("extra", "stderr"), [(["--id", "bad id"], BAD_ID), (["--meta", "intent=5"], BAD_INTENT)]
)
def test_invalid_episode_is_a_one_line_error(db: str, extra: list[str], stderr: str) -> None:
    result = put(db, "hi", *extra)
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", stderr)


def test_duplicate_id_with_other_content_exits_1(db: str) -> None:
    stamp = ["--id", "e1", "--timestamp", "2026-11-22T12:00:00+00:00"]
    assert put(db, "first", *stamp).exit_code == 0
    assert put(db, "first", *stamp).exit_code == 0
    result = put(db, "second", *stamp)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == "error: episode id 'e1' already exists with different content\n"


def test_recent_on_missing_db_exits_1_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    result = invoke("recent", "--db", str(path), "--user", "alice")
    assert (result.exit_code, result.stderr) == (
        1,
        f"error: {path}: database file does not exist\n",
    )
    assert not path.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["put", "--user", "alice", "--session", "s1", "hi"], "Missing option '--agent'"),
        (["put", *SCOPE], "Missing argument"),
        (["put", *SCOPE, "--meta", "novalue", "hi"], "expected KEY=VALUE, got 'novalue'"),
        (["put", *SCOPE, "--timestamp", "soon", "hi"], "not an ISO-8601 timestamp: 'soon'"),
        (["recent"], "Missing option '--user'"),
        (["recent", "--user", "alice", "--limit", "0"], "--limit"),
    ],
)
def test_usage_errors_exit_2(db: str, args: list[str], message: str) -> None:
    result = invoke(*args, "--db", db)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not Path(db).exists()


@pytest.mark.parametrize(
    ("command", "summary"),
    [("put", "Store one episode and print its id."), ("recent", "Show a user's newest episodes")],
)
def test_every_command_has_help(command: str, summary: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert summary in result.stdout
    assert command in invoke("--help").stdout


def episode_line(eid: str, content: str) -> str:
    return (
        f'{{"id": "{eid}", "content": "{content}", "timestamp": "2026-01-01T00:00:00+00:00", '
        '"user": "u", "session": "s", "agent": "a"}\n'
    )


def test_ingest_names_the_lines_of_a_reused_id(db: str, tmp_path: Path) -> None:
    first = tmp_path / "first.jsonl"
    first.write_text(episode_line("x", "a") + episode_line("y", "b") + episode_line("x", "c"))
    result = invoke("ingest", str(first), "--db", db)
    assert result.exit_code == 1
    assert result.output == (
        f"error: {first}:3: episode id 'x' appears twice in the batch with different "
        "content (first on line 1)\n"
    )
    good = tmp_path / "good.jsonl"
    good.write_text(episode_line("y", "b") + episode_line("z", "c"))
    assert invoke("ingest", str(good), "--db", db).exit_code == 0
    later = tmp_path / "later.jsonl"
    later.write_text(episode_line("w", "d") + episode_line("z", "changed"))
    result = invoke("ingest", str(later), "--db", db)
    assert result.exit_code == 1
    assert result.output == (
        f"error: {later}:2: episode id 'z' already exists with different content\n"
    )
    recent = invoke("recent", "--db", db, "--user", "u", "--json")
    assert '"w"' not in recent.output  # all or nothing
