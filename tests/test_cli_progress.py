"""Long CLI runs show a progress bar on a terminal, and nothing extra when piped."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

CLI = [sys.executable, "-m", "stargraph_mem.cli"]


def write_episodes(path: Path, n: int) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            meta = {"subject": f"s{i % 50}", "predicate": "likes", "object": f"o{i % 7}"}
            row = {
                "id": f"e{i}",
                "content": f"episode {i}",
                "timestamp": (t0 + timedelta(seconds=i)).isoformat(),
                "user": "alice",
                "session": "s1",
                "agent": "rag",
                "metadata": meta,
            }
            fh.write(json.dumps(row) + "\n")


def run_with_tty_stderr(args: list[str], stdin: IO[bytes] | None = None) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal; return (code, stdout, terminal text)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdin=stdin, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    out, _ = proc.communicate()
    os.close(leader)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


def test_ingest_and_consolidate_show_progress_on_a_terminal(tmp_path: Path) -> None:
    episodes, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    write_episodes(episodes, 20_000)
    code, out, terminal = run_with_tty_stderr([*CLI, "ingest", "--db", str(db), str(episodes)])
    assert code == 0
    assert out == f"ingested 20000 new episodes (20000 lines) into {db}\n"
    assert "read bytes" in terminal and "write" in terminal and "20000/20000" in terminal
    pack = Path(__file__).resolve().parents[1] / "rules" / "default.yaml"
    now = "2026-02-01T00:00:00+00:00"
    args = [*CLI, "consolidate", "--db", str(db), "--pack", str(pack), "--now", now]
    code, out, terminal = run_with_tty_stderr(args)
    assert code == 0
    assert out == (
        "default user=alice agent=rag episodes=20000 add=50 update=19950 delete=0 noop=0 "
        "rejected=0 gated=0\n"
    )
    assert "consolidate" in terminal and "20000/20000" in terminal
    code, out, terminal = run_with_tty_stderr(
        [*CLI, "replay", "--db", str(db), "--pack", str(pack), "--now", now]
    )
    assert code == 0 and "0 would appear, 0 would disappear, 0 would change" in out
    assert "copy" in terminal and "consolidate" in terminal and "20000/20000" in terminal


def test_piped_runs_print_no_progress(tmp_path: Path) -> None:
    episodes, db = tmp_path / "eps.jsonl", tmp_path / "m.db"
    write_episodes(episodes, 20_000)
    proc = subprocess.run(
        [*CLI, "ingest", "--db", str(db), str(episodes)], capture_output=True, text=True
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == f"ingested 20000 new episodes (20000 lines) into {db}\n"
