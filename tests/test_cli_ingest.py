"""CLI `ingest`: streamed in chunks, all or nothing, every bad line reported; and the store's
streaming writer (`SQLiteMemoryStore.writing`) it is built on."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_cli_progress import run_with_tty_stderr
from typer.testing import CliRunner, Result

from stargraph_mem.cli import app
from stargraph_mem.engine import ingest
from stargraph_mem.errors import DuplicateEpisodeError, LimitError
from stargraph_mem.model.episodes import Episode
from stargraph_mem.stores.sqlite_memory import SQLiteMemoryStore

CLI = [sys.executable, "-m", "stargraph_mem.cli"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
BAD_ID = "id: String should match pattern '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'"


def invoke(*args: str, stdin: bytes | str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin)


def episode(i: int, content: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"e{i}",
        "content": content or f"episode {i}",
        "timestamp": (T0 + timedelta(seconds=i)).isoformat(),
        "user": f"u{i % 5}",
        "session": "s1",
        "agent": "rag",
        **extra,
    }


def jsonl(rows: Sequence[dict[str, Any] | str]) -> str:
    return "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows)


def stored(db: Path) -> list[tuple[str, str]]:
    """Every stored (id, content), in insertion order."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, content FROM episodes ORDER BY seq").fetchall()
    conn.close()
    return [(str(a), str(b)) for a, b in rows]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Chunks of 10 lines, so a few dozen lines make a multi-chunk input."""
    monkeypatch.setattr(ingest, "INGEST_CHUNK", 10)
    return 10


# --- happy paths ---------------------------------------------------------------------------


def test_a_file_over_many_chunks_is_stored_in_order(tmp_path: Path, small_chunks: int) -> None:
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    data.write_text(jsonl([episode(i) for i in range(35)]) + "\n\n", encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == f"ingested 35 new episodes (35 lines) into {db}\n"
    assert [eid for eid, _ in stored(db)] == [f"e{i}" for i in range(35)]


def test_stdin_with_a_dash(tmp_path: Path, small_chunks: int) -> None:
    db = tmp_path / "m.db"
    result = invoke("ingest", "-", "--db", str(db), stdin=jsonl([episode(i) for i in range(25)]))
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == f"ingested 25 new episodes (25 lines) into {db}\n"
    assert len(stored(db)) == 25


def test_stdin_through_a_real_pipe(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    done = subprocess.run(
        [*CLI, "ingest", "-", "--db", str(db)],
        input=jsonl([episode(i) for i in range(3)]).encode(),
        capture_output=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout == f"ingested 3 new episodes (3 lines) into {db}\n".encode()


def test_empty_input_stores_nothing_and_creates_no_file(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    result = invoke("ingest", "-", "--db", str(db), stdin=b"\n  \n")
    assert (result.exit_code, result.stdout) == (
        0,
        f"ingested 0 new episodes (0 lines) into {db}\n",
    )
    assert not db.exists()


def test_reingesting_the_same_file_adds_nothing(tmp_path: Path, small_chunks: int) -> None:
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    data.write_text(jsonl([episode(i) for i in range(15)]), encoding="utf-8")
    assert invoke("ingest", str(data), "--db", str(db)).exit_code == 0
    again = invoke("ingest", str(data), "--db", str(db))
    assert (again.exit_code, again.stdout) == (0, f"ingested 0 new episodes (15 lines) into {db}\n")


# --- all or nothing ------------------------------------------------------------------------


def test_a_bad_last_line_of_many_chunks_stores_nothing(tmp_path: Path, small_chunks: int) -> None:
    """Every chunk before it was written in the transaction: all of it is rolled back, and
    the episodes stored before the ingest are untouched."""
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    before = tmp_path / "before.jsonl"
    before.write_text(jsonl([episode(1000)]), encoding="utf-8")
    assert invoke("ingest", str(before), "--db", str(db)).exit_code == 0
    naive = episode(45, timestamp="2026-01-01T00:00:45")
    data.write_text(jsonl([*[episode(i) for i in range(45)], naive]), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith(f"error: {data}:46: timestamp:")
    assert result.stderr.count("\n") == 1
    assert stored(db) == [("e1000", "episode 1000")]


def test_every_bad_line_is_listed_with_its_number(tmp_path: Path, small_chunks: int) -> None:
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    rows: list[dict[str, Any] | str] = [episode(i) for i in range(40)]
    rows[2] = "not json"
    rows[17] = episode(17, id="bad id")
    rows[24] = "[1, 2]"
    rows[39] = episode(39, metadata={"intent": 5})
    not_utf8 = b'{"id": "e40", "content": "caf\xe9"}\n'
    data.write_bytes(jsonl(rows).encode() + not_utf8)
    result = invoke("ingest", str(data), "--db", str(db))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"error: {data}:3: not valid JSON: unexpected character 'n' at column 1",
        f"error: {data}:18: {BAD_ID}",
        f"error: {data}:25: Episode: Input should be an object",
        f"error: {data}:40: metadata: Value error, metadata.intent must be a string (got int)",
        f"error: {data}:41: not UTF-8 text (invalid continuation byte at byte 29)",
    ]
    assert not db.exists()  # the first chunk had a bad line: checked in a scratch database


def test_stdin_errors_name_stdin(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    stdin = jsonl([episode(1), "{", episode(2)])
    result = invoke("ingest", "-", "--db", str(db), stdin=stdin)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        "error: <stdin>:2: not valid JSON: the line ends before the JSON value is complete "
        "(truncated?)\n"
    )


def test_a_failed_ingest_into_a_new_path_creates_no_file(tmp_path: Path, small_chunks: int) -> None:
    """The bad line comes before the first write: a scratch database takes the new path's
    place, and repeats across later chunks are still found."""
    data, db = tmp_path / "eps.jsonl", tmp_path / "new.db"
    rows: list[dict[str, Any] | str] = [episode(i) for i in range(30)]
    rows[0] = "nope"
    rows[25] = episode(3, "other content")
    data.write_text(jsonl(rows), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: {data}:1: not valid JSON: unexpected character 'n' at column 1",
        f"error: {data}:26: episode id 'e3' appears twice in the batch with different content "
        "(first on line 4)",
    ]
    assert list(tmp_path.iterdir()) == [data]


# --- duplicate ids across chunks -----------------------------------------------------------


def test_identical_repeats_across_chunks_are_stored_once(tmp_path: Path, small_chunks: int) -> None:
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    rows = [episode(i) for i in range(25)]
    data.write_text(jsonl([*rows, rows[3], rows[24], rows[12]]), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == f"ingested 25 new episodes (28 lines) into {db}\n"
    assert [eid for eid, _ in stored(db)] == [f"e{i}" for i in range(25)]


def test_differing_repeats_across_chunks_name_both_lines(tmp_path: Path, small_chunks: int) -> None:
    """As put_many within one batch: the repeat names the line where the id first came,
    whether in the same chunk or an earlier one; metadata key order is no difference."""
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    rows: list[dict[str, Any] | str] = [episode(i, metadata={"a": 1, "b": 2}) for i in range(30)]
    rows.append(episode(2, "changed", metadata={"a": 1, "b": 2}))  # line 31: e2 on line 3
    rows.append(episode(29, metadata={"b": 2, "a": 1}))  # identical: key order only
    rows.append(episode(7, metadata={"a": 1}))  # line 33
    rows.append(episode(31, "x"))
    rows.append(episode(31, "y"))  # line 35: a repeat inside one chunk
    data.write_text(jsonl(rows), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"error: {data}:31: episode id 'e2' appears twice in the batch with different content "
        "(first on line 3)",
        f"error: {data}:33: episode id 'e7' appears twice in the batch with different metadata "
        "(first on line 8)",
        f"error: {data}:35: episode id 'e31' appears twice in the batch with different content "
        "(first on line 34)",
    ]
    assert not db.exists()  # the failed ingest removed the file it made


def test_repeats_of_stored_episodes(tmp_path: Path, small_chunks: int) -> None:
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    first = tmp_path / "first.jsonl"
    first.write_text(jsonl([episode(i) for i in range(12)]), encoding="utf-8")
    assert invoke("ingest", str(first), "--db", str(db)).exit_code == 0
    rows = [episode(i) for i in range(10, 30)]  # e10, e11 already stored, identical
    data.write_text(jsonl(rows), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert result.stdout == f"ingested 18 new episodes (20 lines) into {db}\n"
    rows = [episode(i) for i in range(30, 45)] + [episode(5, "changed"), episode(31, "changed")]
    data.write_text(jsonl(rows), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"error: {data}:16: episode id 'e5' already exists with different content",
        f"error: {data}:17: episode id 'e31' appears twice in the batch with different content "
        "(first on line 2)",
    ]
    assert len(stored(db)) == 30


# --- the error limit -----------------------------------------------------------------------


def bad_lines_file(tmp_path: Path, bad: int) -> Path:
    data = tmp_path / "eps.jsonl"
    rows: list[dict[str, Any] | str] = [episode(i) for i in range(2 * bad)]
    for i in range(1, 2 * bad, 2):
        rows[i] = episode(i, id=f"bad {i}")
    data.write_text(jsonl(rows), encoding="utf-8")
    return data


def test_twenty_bad_lines_are_listed_then_counted(tmp_path: Path, small_chunks: int) -> None:
    data = bad_lines_file(tmp_path, 30)
    result = invoke("ingest", str(data), "--db", str(tmp_path / "m.db"))
    lines = result.stderr.splitlines()
    assert (result.exit_code, len(lines)) == (1, 21)
    assert lines[:2] == [f"error: {data}:2: {BAD_ID}", f"error: {data}:4: {BAD_ID}"]
    assert lines[19] == f"error: {data}:40: {BAD_ID}"
    assert lines[20] == "error: … and 10 more bad lines"


@pytest.mark.parametrize(("limit", "rest"), [("1", "29 more bad lines"), ("29", "1 more bad line")])
def test_max_errors(tmp_path: Path, small_chunks: int, limit: str, rest: str) -> None:
    data = bad_lines_file(tmp_path, 30)
    result = invoke("ingest", str(data), "--db", str(tmp_path / "m.db"), "--max-errors", limit)
    lines = result.stderr.splitlines()
    assert (result.exit_code, len(lines)) == (1, int(limit) + 1)
    assert lines[-1] == f"error: … and {rest}"


def test_max_errors_counts_repeats_and_parse_errors_in_line_order(
    tmp_path: Path, small_chunks: int
) -> None:
    """Within a chunk, a repeat found at insert time still sorts among the parse errors."""
    data = tmp_path / "eps.jsonl"
    rows: list[dict[str, Any] | str] = [episode(i) for i in range(10)]
    rows[4] = episode(1, "changed")  # line 5, found when the chunk is inserted
    rows[7] = "oops"  # line 8, found when read
    data.write_text(jsonl(rows), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(tmp_path / "m.db"), "--max-errors", "1")
    assert result.stderr.splitlines() == [
        f"error: {data}:5: episode id 'e1' appears twice in the batch with different content "
        "(first on line 2)",
        "error: … and 1 more bad line",
    ]


def test_usage_errors(tmp_path: Path) -> None:
    for args, message in [
        (["--max-errors", "0"], "greater than or equal to 1"),
        ([], "Missing argument"),
    ]:
        result = invoke("ingest", *args, "--db", str(tmp_path / "m.db"))
        assert result.exit_code == 2
        assert message in result.stderr
    missing = invoke("ingest", str(tmp_path / "none.jsonl"))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    folder = invoke("ingest", str(tmp_path))
    assert folder.exit_code == 2 and "is a directory" in folder.stderr


def test_a_named_pipe(tmp_path: Path) -> None:
    """`ingest <(zcat episodes.jsonl.gz)` hands over a pipe's path: read like a file."""
    pipe, db = tmp_path / "pipe", tmp_path / "m.db"
    os.mkfifo(pipe)
    feeder = subprocess.Popen(["sh", "-c", f"cat > '{pipe}'"], stdin=subprocess.PIPE)
    assert feeder.stdin is not None
    feeder.stdin.write(jsonl([episode(i) for i in range(3)]).encode())
    feeder.stdin.close()
    done = subprocess.run([*CLI, "ingest", str(pipe), "--db", str(db)], capture_output=True)
    feeder.wait()
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout == f"ingested 3 new episodes (3 lines) into {db}\n".encode()


# --- at full chunk size, and the progress bar ----------------------------------------------


def test_real_chunks_bad_line_at_the_end(tmp_path: Path) -> None:
    """Three chunks of the real size; the repeat at the end names a line of the first."""
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    n = 2 * ingest.INGEST_CHUNK + 10
    rows = [episode(i) for i in range(n)]
    data.write_text(jsonl([*rows, episode(7, "late change")]), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert result.stderr == (
        f"error: {data}:{n + 1}: episode id 'e7' appears twice in the batch with different "
        "content (first on line 8)\n"
    )
    assert not db.exists()  # the failed ingest removed the file it made


def test_stdin_progress_has_no_total_until_the_end(tmp_path: Path) -> None:
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    data.write_text(jsonl([episode(i) for i in range(12_000)]), encoding="utf-8")
    with data.open("rb") as stdin:
        code, out, terminal = run_with_tty_stderr(
            [*CLI, "ingest", "-", "--db", str(db)], stdin=stdin
        )
    assert code == 0
    assert out == f"ingested 12000 new episodes (12000 lines) into {db}\n"
    assert "read bytes" in terminal and "/?" in terminal and "12000/12000" in terminal


# --- the store's streaming writer ----------------------------------------------------------


def model(i: int, content: str | None = None) -> Episode:
    return Episode.model_validate(episode(i, content))


async def write_stream(
    db: Path, chunks: list[list[Episode]], *, discard: bool = False
) -> tuple[int, list[DuplicateEpisodeError | LimitError]]:
    conflicts: list[DuplicateEpisodeError | LimitError] = []
    async with SQLiteMemoryStore(db) as store, store.writing() as writer:
        for chunk in chunks:
            conflicts += await writer.write(chunk)
        if discard:
            writer.discard()
    return writer.written, conflicts


def test_writer_tags_default_to_stream_positions(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    chunks = [[model(1), model(2)], [model(3), model(1, "other"), model(2)]]
    written, conflicts = asyncio.run(write_stream(db, chunks))
    assert written == 3
    assert [(c.context["tag"], c.context["first_tag"], str(c)) for c in conflicts] == [
        (4, 1, "episode id 'e1' appears twice in the batch with different content")
    ]
    written, conflicts = asyncio.run(write_stream(db, [[model(4), model(3, "other")]]))
    assert [(c.context["tag"], c.context["first_tag"], str(c)) for c in conflicts] == [
        (2, None, "episode id 'e3' already exists with different content")
    ]
    assert written == 1  # the caller decides: nothing was discarded
    assert [eid for eid, _ in stored(db)] == ["e1", "e2", "e3", "e4"]


def test_writer_discard_and_errors_roll_back(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    asyncio.run(write_stream(db, [[model(1)]]))
    asyncio.run(write_stream(db, [[model(2)], [model(3)]], discard=True))
    assert stored(db) == [("e1", "episode 1")]

    async def fail_midway() -> None:
        async with SQLiteMemoryStore(db) as store, store.writing() as writer:
            await writer.write([model(4)])
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        asyncio.run(fail_midway())
    assert stored(db) == [("e1", "episode 1")]


def test_writer_refuses_mismatched_tags(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with SQLiteMemoryStore(tmp_path / "m.db") as store, store.writing() as writer:
            await writer.write([model(1)], [1, 2])

    with pytest.raises(ValueError, match="2 tags for 1 episodes"):
        asyncio.run(scenario())


def test_a_late_bad_line_into_a_new_path_leaves_no_file(tmp_path: Path, small_chunks: int) -> None:
    """The first chunks are good (the new file is made and written); the last line is bad:
    the transaction rolls back and the file this ingest created is removed."""
    data, db = tmp_path / "eps.jsonl", tmp_path / "new.db"
    rows: list[dict[str, Any] | str] = [episode(i) for i in range(30)]
    rows[-1] = "nope"
    data.write_text(jsonl(rows), encoding="utf-8")
    result = invoke("ingest", str(data), "--db", str(db))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {data}:30: not valid JSON")
    assert list(tmp_path.iterdir()) == [data]


def test_a_late_bad_line_into_an_existing_file_keeps_it_as_it_was(
    tmp_path: Path, small_chunks: int
) -> None:
    data, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    data.write_text(jsonl([episode(100)]), encoding="utf-8")
    assert invoke("ingest", str(data), "--db", str(db)).exit_code == 0
    rows: list[dict[str, Any] | str] = [episode(i) for i in range(30)]
    rows[-1] = "nope"
    data.write_text(jsonl(rows), encoding="utf-8")
    assert invoke("ingest", str(data), "--db", str(db)).exit_code == 1
    assert [eid for eid, _ in stored(db)] == ["e100"]
