"""Crash test: SIGKILL a consolidating process at random points, resume, compare.

A worker process (``tests/crash_worker.py``) consolidates 3000 pending episodes in 3
partitions with the dedup pack and a small pass size, so the work spans many
transactions. The parent kills it several times at random moments, checks after each kill
that the file is consistent (every pass is all or nothing), then finishes the consolidation
in-process. The result must equal an uninterrupted run over a copy of the same input.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from e2e_helpers import DEDUP, NOW, ROOT, episode, outcome, rows, scalar

from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator, runtime_for
from stargraph_mem.stores.models import Episode

WORKER = Path(__file__).with_name("crash_worker.py")
EPISODES = 3000
USERS = ("u0", "u1", "u2")
MAX_EPISODES = 50
ROUNDS = 8


AFTER = NOW + timedelta(days=3)
"""The pass time: after every episode of the workload (stamped over 50 hours from T0)."""


def workload(seed: int) -> list[Episode]:
    """3000 observations over 3 partitions; a small alphabet gives adds, updates and noops."""
    rng = random.Random(seed)
    return [
        episode(
            f"e{n:05d}",
            n,
            user=USERS[n % len(USERS)],
            session=f"s{n % 7}",
            subject=f"s{rng.randrange(12)}",
            predicate=rng.choice(["likes", "is", "has"]),
            object=f"o{rng.randrange(4)}",
        )
        for n in range(EPISODES)
    ]


async def prepare(db: Path, episodes: list[Episode]) -> None:
    async with Consolidator.open(db, [DEDUP]) as c:
        await c.memory.put_many(episodes)


async def consolidate(db: Path) -> float:
    """Consolidate to completion in-process; the seconds the consolidation itself took."""
    async with Consolidator.open(db, [DEDUP], max_episodes=MAX_EPISODES) as c:
        for compiled in c.packs:
            runtime_for(compiled)  # loaded before timing, as the worker does before "ready"
        started = time.perf_counter()
        await c.consolidate(now=AFTER)
        return time.perf_counter() - started


def copy_db(src: Path, dst: Path) -> None:
    """A consistent copy through SQLite's backup API (WAL content included)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()


def audited(db: Path) -> int:
    return int(scalar(db, "SELECT count(*) FROM audit") or 0)


def check_consistent(db: Path) -> None:
    """After a kill: the file is intact and each partition's audit matches its watermarks.

    The dedup pack emits exactly one delta per episode, so a partition whose watermark is at
    seq W must have exactly as many audit rows as it has episodes up to W: a pass applied in
    part would break the equality.
    """
    assert scalar(db, "PRAGMA integrity_check") == "ok"
    if scalar(db, "SELECT count(*) FROM sqlite_master WHERE name = 'watermarks'") == 0:
        return
    marks = rows(
        db,
        "SELECT partition_key, min(last_seq), max(last_seq), count(*) FROM watermarks "
        "GROUP BY partition_key",
    )
    for key, low, high, n_rules in marks:
        rules = len(compile_file(DEDUP).rules)
        assert (low, n_rules) == (high, rules), f"rules of {key} disagree: {low}..{high}"
        episodes = scalar(
            db, "SELECT count(*) FROM episodes WHERE partition_key = ? AND seq <= ?", (key, low)
        )
        deltas = scalar(db, "SELECT count(*) FROM audit WHERE partition_key = ?", (key,))
        assert deltas == episodes, f"{key}: {deltas} audit rows for {episodes} episodes"
    assert scalar(db, "SELECT count(*) FROM lineage") == scalar(db, "SELECT count(*) FROM facts")
    unmarked = scalar(
        db,
        "SELECT count(*) FROM audit "
        "WHERE partition_key NOT IN (SELECT partition_key FROM watermarks)",
    )
    assert unmarked == 0


def run_and_kill(db: Path, *, delay: float, after_ready: bool) -> bool:
    """Start the worker, SIGKILL it ``delay`` s after start (or after it reported ready).

    True if the kill landed while it was running; False if it had already finished.
    """
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(db), AFTER.isoformat(), str(MAX_EPISODES), str(DEDUP)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if after_ready:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == "ready\n", f"worker failed to start: {line!r}"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.returncode != -signal.SIGKILL:
            assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        return proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_sigkill_during_consolidation_then_resume_equals_uninterrupted(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    seed_db, reference, crashed = (tmp_path / n for n in ("seed.db", "ref.db", "crash.db"))
    asyncio.run(prepare(seed_db, workload(seed)))
    copy_db(seed_db, reference)
    copy_db(seed_db, crashed)

    span = asyncio.run(consolidate(reference))
    expected = outcome(reference)
    assert len(expected.audit_ids) == EPISODES

    mid_run_kills = 0
    scale = 1.0  # the worker's speed against the reference run's, learnt round by round
    for round_no in range(3 * ROUNDS):
        before = audited(crashed)
        if before == EPISODES:
            if mid_run_kills or round_no >= 2 * ROUNDS:
                break
            # The worker ran faster than the reference (a busy machine slowed that one):
            # start again from the seed with earlier kills, so one lands mid-run.
            copy_db(seed_db, crashed)
            before, scale = 0, scale / 4
        if round_no == 0:
            # From process start: mostly lands in start-up or bootstrap.
            killed = run_and_kill(crashed, delay=rng.uniform(0.05, 0.5), after_ready=False)
        else:
            # After start-up, at a random point of the work that is left.
            left = span * (EPISODES - before) / EPISODES
            delay = rng.uniform(0.05, 0.5) * left * scale
            killed = run_and_kill(crashed, delay=delay, after_ready=True)
        check_consistent(crashed)
        after = audited(crashed)
        assert after >= before, f"seed {seed}: progress went backwards"
        if killed and before < after < EPISODES:
            mid_run_kills += 1
        elif killed and after == before and round_no > 0:
            scale *= 2  # killed before its first commit: the worker is slower here
        if mid_run_kills and round_no >= ROUNDS:
            break
    assert mid_run_kills >= 1, f"seed {seed}: no kill landed mid-consolidation"

    asyncio.run(consolidate(crashed))
    check_consistent(crashed)
    result = outcome(crashed)
    assert len(result.lineage) == len(expected.lineage), f"seed {seed}"
    assert result.audit_ids == expected.audit_ids, f"seed {seed}"
    assert result.current == expected.current, f"seed {seed}"
    assert result == expected, f"seed {seed}"
