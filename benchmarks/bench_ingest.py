"""`stargraph-mem ingest` end to end: throughput and peak memory of the whole process.

Writes N episode lines (many users) to a JSON-lines file in a temporary folder, then runs
``stargraph-mem ingest`` on it as a subprocess of this interpreter into a fresh database
for each variant, and reports wall-clock time, episodes/s and the process's peak RSS
(``os.wait4``: the child's own ``ru_maxrss``, not the largest of all children). The stored
row count is checked after every run.

Variants: ``file`` (``ingest FILE``), ``stdin`` (``ingest -`` fed from the file through a
pipe), ``bad-last-line`` (the same lines plus one bad line at the end: everything is
validated and written, then rolled back; exit code 1, nothing stored). ``--compare TREE``
also runs ``file`` with another source tree's ``stargraph_mem`` (``PYTHONPATH=TREE``),
e.g. a checkout from before streaming, which read the whole file into memory first.

    python benchmarks/bench_ingest.py                                   # 1,000,000 episodes
    python benchmarks/bench_ingest.py --episodes 100000 --variants file stdin bad-last-line
    python benchmarks/bench_ingest.py --compare /tmp/stargraph-before
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2026, 1, 1, tzinfo=UTC)
VARIANTS = ("file", "stdin", "bad-last-line")


@dataclass(frozen=True)
class Outcome:
    """One measured run."""

    label: str
    episodes: int
    seconds: float
    peak_mb: float
    exit_code: int
    stored: int


def write_episodes(path: Path, count: int, users: int, *, bad_last_line: bool = False) -> int:
    """``count`` episode lines spread over ``users`` users (3 sessions, 2 agents each);
    returns the file's size in bytes."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(count):
            row = {
                "id": f"ep-{i}",
                "content": f"user {i % users} said thing number {i}",
                "timestamp": (START + timedelta(seconds=i)).isoformat(),
                "user": f"user{i % users}",
                "session": f"session{(i // users) % 3}",
                "agent": f"agent{i % 2}",
                "metadata": {"subject": f"s{i % 97}", "predicate": "likes", "object": f"o{i}"},
            }
            fh.write(json.dumps(row) + "\n")
        if bad_last_line:
            fh.write('{"id": "not an id", "content": "x"}\n')
    return path.stat().st_size


def cli_prefix() -> list[str]:
    """How to start the CLI: ``-m stargraph_mem.cli`` (honours ``PYTHONPATH`` for trees)."""
    return [sys.executable, "-m", "stargraph_mem.cli"]


def run_ingest(
    label: str, argv: list[str], stdin_path: Path | None, env: dict[str, str], db: Path, n: int
) -> Outcome:
    """Run one ingest (fed by ``cat stdin_path`` through a pipe when given); its wall time,
    its own peak RSS, exit code and the rows stored."""
    start = time.perf_counter()
    cat = None
    if stdin_path is not None:
        cat = subprocess.Popen(["cat", str(stdin_path)], stdout=subprocess.PIPE)
    stdin = cat.stdout if cat is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    if cat is not None and cat.stdout is not None:
        cat.stdout.close()  # the ingest process holds the pipe now
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()  # small: a summary or the bad lines
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if cat is not None:
        cat.wait()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{label}: exit {proc.returncode}: {err.decode()[-2000:]}")
    print(f"  {label}: {(out or err).decode().strip()[:200]}", flush=True)
    stored = 0
    if db.exists():
        with sqlite3.connect(db) as conn:
            stored = conn.execute("SELECT count(*) FROM episodes").fetchone()[0]
        conn.close()
    peak_mb = usage.ru_maxrss / 1024  # kilobytes on Linux
    return Outcome(label, n, seconds, peak_mb, proc.returncode, stored)


def check_tree(tree: Path, env: dict[str, str]) -> None:
    """Refuse a tree whose ``stargraph_mem`` is not the one that gets imported."""
    code = "import stargraph_mem, sys; sys.stdout.write(stargraph_mem.__file__)"
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    if not Path(found.stdout.decode()).resolve().is_relative_to(tree):
        raise SystemExit(f"{tree}: imports {found.stdout.decode()} instead")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1_000_000, help="lines to ingest")
    parser.add_argument("--users", type=int, default=10_000, help="distinct users")
    parser.add_argument(
        "--variants", nargs="+", choices=VARIANTS, default=["file"], help="what to run"
    )
    parser.add_argument(
        "--compare", type=Path, action="append", default=[], help="another source tree (file)"
    )
    args = parser.parse_args()
    n = args.episodes
    print(
        f"{n:,} episodes, {args.users:,} users; Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} cores"
    )
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "episodes.jsonl"
        size = write_episodes(data, n, args.users)
        print(f"input: {size / 2**20:,.0f} MiB", flush=True)
        bad = Path(tmp) / "episodes-bad.jsonl"
        if "bad-last-line" in args.variants:
            write_episodes(bad, n, args.users, bad_last_line=True)
        trees = [("", ROOT)] + [(f" [{tree}]", tree.resolve()) for tree in args.compare]
        for index, (suffix, tree) in enumerate(trees):
            env = {**os.environ, "PYTHONPATH": str(tree)}
            check_tree(tree, env)
            variants = args.variants if index == 0 else ["file"]
            for variant in variants:
                db = Path(tmp) / f"run{index}-{variant}.db"
                source = bad if variant == "bad-last-line" else data
                if variant == "stdin":
                    argv = [*cli_prefix(), "ingest", "-", "--db", str(db)]
                    outcome = run_ingest(f"stdin{suffix}", argv, source, env, db, n)
                else:
                    argv = [*cli_prefix(), "ingest", str(source), "--db", str(db)]
                    outcome = run_ingest(f"{variant}{suffix}", argv, None, env, db, n)
                outcomes.append(outcome)
                for path in Path(tmp).glob(f"{db.name}*"):
                    path.unlink()
    print(f"{'variant':<40} {'seconds':>8} {'episodes/s':>11} {'peak MB':>8} {'exit':>4} stored")
    for o in outcomes:
        rate = o.episodes / o.seconds
        print(
            f"{o.label:<40} {o.seconds:>8.1f} {rate:>11,.0f} {o.peak_mb:>8.0f} "
            f"{o.exit_code:>4} {o.stored:,}"
        )


if __name__ == "__main__":
    main()
