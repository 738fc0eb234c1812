"""CLI `ingest --skip-invalid` (good lines stored, bad ones skipped and reported, in a
rejects file or on stderr) and the plain-word messages for lines that are not JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from test_cli_ingest import episode, invoke, jsonl

from stargraph_mem.stores.database import open_database

TRUNCATED = '{"id": "e3", "content": "Alice lik'
GOOD = [episode(i) for i in range(1, 9)]


def nightly(tmp_path: Path) -> Path:
    """Seven good lines around five bad ones: truncated, a stray character, trailing text,
    a naive timestamp and an id repeated with other content."""
    rows: list[dict[str, Any] | str] = [
        GOOD[0],
        GOOD[1],
        TRUNCATED,  # line 3
        GOOD[2],
        '{"id": "e9", "content": x}',  # line 5
        GOOD[3],
        json.dumps(GOOD[4]) + " }",  # line 7
        episode(10, timestamp="2026-01-01T00:00:10"),  # line 8
        GOOD[5],
        episode(1, "other content"),  # line 10: e1 came on line 1
        GOOD[6],
        "",
        GOOD[7],
    ]
    data = tmp_path / "night.jsonl"
    data.write_text(jsonl(rows), encoding="utf-8")
    return data


SEVENTH = len(json.dumps(GOOD[4])) + 2
REASONS = [
    (3, "not valid JSON: the line ends in the middle of a string (truncated?)"),
    (5, "not valid JSON: unexpected character 'x' at column 25"),
    (7, f"not valid JSON: unexpected text after the JSON value at column {SEVENTH}"),
    (8, "timestamp: Input should have timezone info"),
    (10, "episode id 'e1' appears twice in the batch with different content (first on line 1)"),
]


def stored_ids(location: str) -> list[str]:
    async def read() -> list[str]:
        async with open_database(location) as database:
            found = await database.memory.recent("u1", limit=100)
            found += [
                e
                for user in ("u0", "u2", "u3", "u4")
                for e in await database.memory.recent(user, limit=100)
            ]
            return sorted(e.id for e in found)

    return asyncio.run(read())


@pytest.mark.parametrize("new_location", ["sqlite", "postgresql"], indirect=True)
def test_skip_invalid_stores_the_good_lines_and_writes_the_rejects(
    tmp_path: Path, new_location: Any
) -> None:
    data, db, rejects = nightly(tmp_path), new_location(), tmp_path / "rejects.jsonl"
    result = invoke("ingest", str(data), "--db", db, "--skip-invalid", "--rejects", str(rejects))
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"ingested 7 new episodes (7 lines) into {db}; skipped 5 invalid lines, "
        f"written to {rejects}\n"
    )
    lines = data.read_text(encoding="utf-8").splitlines()
    assert rejects.read_text(encoding="utf-8") == "".join(
        json.dumps({"line": n, "reason": why, "text": lines[n - 1]}, separators=(",", ":")) + "\n"
        for n, why in REASONS
    )
    assert stored_ids(db) == ["e1", "e2", "e3", "e4", "e6", "e7", "e8"]
    again = invoke("ingest", str(data), "--db", db, "--skip-invalid", "--rejects", str(rejects))
    assert again.stdout == (
        f"ingested 0 new episodes (7 lines) into {db}; skipped 5 invalid lines, "
        f"written to {rejects}\n"
    )  # the same file again: the good lines are there already, the bad ones still bad


def test_skip_invalid_without_a_rejects_file_lists_them_on_stderr(tmp_path: Path) -> None:
    data, db = nightly(tmp_path), tmp_path / "m.db"
    result = invoke("ingest", str(data), "--db", str(db), "--skip-invalid", "--max-errors", "4")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        *(f"skipped {data}:{n}: {why}" for n, why in REASONS[:4]),
        "… and 1 more bad line",
    ]
    assert result.stdout == (
        f"ingested 7 new episodes (7 lines) into {db}; skipped 5 invalid lines\n"
    )


def test_without_skip_invalid_nothing_is_stored(tmp_path: Path) -> None:
    data, db = nightly(tmp_path), tmp_path / "m.db"
    result = invoke("ingest", str(data), "--db", str(db))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [f"error: {data}:{n}: {why}" for n, why in REASONS]
    assert not db.exists()


def test_skip_invalid_with_only_bad_lines(tmp_path: Path) -> None:
    data, db, rejects = tmp_path / "bad.jsonl", tmp_path / "m.db", tmp_path / "r.jsonl"
    data.write_bytes(b"{\n\xff\n")
    result = invoke(
        "ingest", str(data), "--db", str(db), "--skip-invalid", "--rejects", str(rejects)
    )
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"ingested 0 new episodes (0 lines) into {db}; skipped 2 invalid lines, "
        f"written to {rejects}\n"
    )
    assert rejects.read_text(encoding="utf-8").splitlines() == [
        '{"line":1,"reason":"not valid JSON: the line ends before the JSON value is complete '
        '(truncated?)","text":"{"}',
        '{"line":2,"reason":"not UTF-8 text (invalid start byte at byte 0)","text":"\ufffd"}',
    ]


def test_rejects_needs_skip_invalid(tmp_path: Path) -> None:
    data = nightly(tmp_path)
    result = invoke("ingest", str(data), "--db", str(tmp_path / "m.db"), "--rejects", "r.jsonl")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "error: --rejects goes with --skip-invalid\n"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"id": "e1", "content": "abc', "the line ends in the middle of a string (truncated?)"),
        (
            '{"id": "e1", "content": "abc"',
            "the line ends before the JSON value is complete (truncated?)",
        ),
        ('{"id": "e1",', "the line ends before the JSON value is complete (truncated?)"),
        ('{"id": "e1", "n": tru}', "unexpected character 't' at column 19"),
        ("hello", "unexpected character 'h' at column 1"),
        ('{"id" "e1"}', "expected ':' after a property name at column 7, found '\"'"),
        ('{"id": "e1" "n": 1}', "expected ',' or a closing bracket at column 13, found '\"'"),
        ('{"id": "e1",}', "expected a property name in \"double quotes\" at column 13, found '}'"),
        ('{"id": "e1"} {}', "unexpected text after the JSON value at column 14"),
        ('{"id": "a\\qb"}', "invalid escape sequence in a string at column 10"),
        ('{"id": "a\tb"}', "control character U+0009 inside a string at column 10"),
        ('{"id": "\\ud800"}', "unexpected end of hex escape at column 15"),
    ],
)
def test_json_problems_in_plain_words(tmp_path: Path, line: str, problem: str) -> None:
    data = tmp_path / "one.jsonl"
    data.write_text(line + "\n", encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(tmp_path / "m.db"))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"error: {data}:1: not valid JSON: {problem}\n"


def test_a_rejects_file_that_cannot_be_written_stores_nothing(tmp_path: Path) -> None:
    data, db = nightly(tmp_path), tmp_path / "m.db"
    rejects = tmp_path / "missing" / "r.jsonl"
    result = invoke(
        "ingest", str(data), "--db", str(db), "--skip-invalid", "--rejects", str(rejects)
    )
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"error: {rejects}: folder does not exist\n"
    assert not db.exists()
