"""Real processes: scheduler state survives a restart, and two schedulers on one database
never apply a pass twice nor lose one (``tests/scheduler_worker.py`` does the work)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.scope import Partition

WORKER = Path(__file__).with_name("scheduler_worker.py")

TWO_RULES = """\
ir_version: 1
pack: two_rules
version: "1.0.0"
fields: {subject: string, predicate: string, object: string}
defaults: {cadence: {every: 1}, confidence: 0.8}
rules:
  - id: stream
    claim: false
    when:
      - episode: {subject: {bind: s}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: stream, object: "{o}"}
  - id: batch
    cadence: {every: 4}
    claim: false
    when:
      - episode: {subject: {bind: s}, object: {bind: o}}
    emit: {kind: add, subject: "{s}", predicate: batch, object: "{o}"}
"""


def pack_file(tmp_path: Path, name: str, cadence: str | None = None) -> Path:
    """TWO_RULES as ``name``; with ``cadence``, both rules use it."""
    text = TWO_RULES.replace("pack: two_rules", f"pack: {name}")
    if cadence is not None:
        text = text.replace("{every: 1}", cadence).replace("{every: 4}", cadence)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, "utf-8")
    return path


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(proc: subprocess.Popen[str]) -> dict[str, int]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    parsed: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return parsed


def worker(*args: str) -> dict[str, int]:
    return result(start(*args))


def query(db: Path, sql: str) -> list[Any]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(sql).fetchall()
    conn.close()
    return rows


async def status(db: Path, pack: Path, now: datetime) -> dict[tuple[str, str], Any]:
    async with Consolidator.open(db, [pack], clock=lambda: now) as mem:
        return {
            (r.rule_id, r.partition.user if r.partition else "-"): r for r in await mem.status()
        }


def test_pending_counts_and_cron_runs_survive_a_process_restart(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    counted = pack_file(tmp_path, "counted", "{every: 10}")
    assert worker("record", str(db), str(counted), "w1", "7", "1")["passes"] == 0
    now = datetime(2026, 5, 1, tzinfo=UTC)
    rows = asyncio.run(status(db, counted, now))
    assert rows[("stream", "u0")].pending == 7
    assert rows[("batch", "u0")].pending == 7
    assert worker("record", str(db), str(counted), "w2", "3", "1")["passes"] == 1
    rows = asyncio.run(status(db, counted, now))
    assert rows[("stream", "u0")].pending == 0
    assert rows[("batch", "u0")].pending == 0  # both rules were due: one pass

    nightly = pack_file(tmp_path, "nightly", '{cron: "0 3 * * *"}')
    # the episodes arrived from 2026-05-01T00:00: the first slot after them is 03:00
    first = "2026-05-01T03:00:00+00:00"
    assert worker("tick", str(db), str(nightly), "2026-05-01T02:59:00+00:00")["passes"] == 0
    assert worker("tick", str(db), str(nightly), first) == {"passes": 1, "episodes": 10}
    assert worker("tick", str(db), str(nightly), "2026-05-01T03:00:30+00:00")["passes"] == 0
    rows = asyncio.run(status(db, nightly, datetime(2026, 5, 1, 4, tzinfo=UTC)))
    assert rows[("stream", "u0")].last_run == datetime.fromisoformat(first)
    assert rows[("stream", "u0")].next_run == datetime(2026, 5, 2, 3, tzinfo=UTC)
    assert worker("tick", str(db), str(nightly), "2026-05-02T03:00:00+00:00")["passes"] == 1


def test_two_scheduler_processes_never_apply_a_pass_twice_nor_lose_one(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    pack = pack_file(tmp_path, "two_rules")
    worker("tick", str(db), str(pack), "2026-05-01T00:00:00+00:00")  # bootstrap the file
    per_worker = 150
    go = tmp_path / "go"
    procs = [
        start("record", str(db), str(pack), name, str(per_worker), "3", str(go))
        for name in ("a", "b")
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    go.touch()
    tallies = [result(p) for p in procs]
    assert all(t["passes"] > 0 for t in tallies)
    # they did run together: their puts interleave in the file (a record that found the
    # run records changed by the other decides again without reporting a conflict, so
    # conflicts alone no longer show it)
    writers = [row[0].split("-")[0] for row in query(db, "SELECT id FROM episodes ORDER BY seq")]
    assert sum(1 for x, y in pairwise(writers) if x != y) > 2

    episodes = {row[0] for row in query(db, "SELECT id FROM episodes")}
    assert len(episodes) == 2 * per_worker
    facts = query(db, "SELECT predicate, subject FROM facts")
    by_rule = {rule: Counter(s for p, s in facts if p == rule) for rule in ("stream", "batch")}
    # no pass applied twice: each episode promoted at most once per rule
    assert max(by_rule["stream"].values()) == 1
    assert max(by_rule["batch"].values()) == 1
    # none lost: the streaming rule consolidated every episode
    assert set(by_rule["stream"]) == episodes
    # the every-4 rule consolidated exactly the episodes up to its watermarks
    marks = dict(
        query(db, "SELECT partition_key, last_seq FROM watermarks WHERE rule_id = 'batch'")
    )
    below = {
        eid
        for eid, key, seq in query(db, "SELECT id, partition_key, seq FROM episodes")
        if seq <= marks.get(key, 0)
    }
    assert set(by_rule["batch"]) == below
    for user in ("u0", "u1", "u2"):
        key = Partition(user, "rag").key
        (left,) = query(
            db,
            f"SELECT count(*) FROM episodes WHERE partition_key = '{key}' "
            f"AND seq > {marks.get(key, 0)}",
        )[0]
        assert left < 4
    runs = query(db, "SELECT sum(runs) FROM rule_runs WHERE rule_id = 'stream'")[0][0]
    applied = sum(t["passes"] for t in tallies)
    assert runs <= applied  # every recorded run was applied by one of the two
