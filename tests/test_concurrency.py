"""Concurrent writers on one database: processes running random mixes of ``record``,
``consolidate``, ``tick`` and ``run --once`` end in exactly the state of one sequential
run (facts, lineage, audit, watermarks, rejections), for several packs at once; passes
that lose a race are computed again, never applied twice, never an error.

The processes are real (``tests/concurrency_worker.py``); hypothesis draws the episodes,
the number of processes and each process's operations.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stargraph_mem.engine.api import Consolidator
from stargraph_mem.stores.models import Episode
from stargraph_mem.stores.scope import Partition

WORKER = Path(__file__).with_name("concurrency_worker.py")
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
T0 = datetime(2026, 6, 1, tzinfo=UTC)
USERS = ("u0", "u1")
SUBJECTS = ("ann", "bo", "cy", "di", "ed", "flo")

DEDUP = """\
ir_version: 1
pack: {name}
version: "1.0.0"
fields: {{subject: string, predicate: string, object: string}}
defaults: {{cadence: {cadence}, confidence: 0.8}}
rules:
  - id: same_noop
    priority: 30
    when:
      - episode: {{subject: {{bind: s}}, predicate: {predicate}, object: {{bind: o}}}}
      - fact: {{as: f, subject: {{var: s}}, predicate: {predicate}, object: {{var: o}}}}
    emit: {{kind: noop, reinforces: [f], reason: "({{s}}) repeats {{o}}"}}
  - id: changed_update
    priority: 20
    when:
      - episode: {{subject: {{bind: s}}, predicate: {predicate}, object: {{bind: o}}}}
      - fact: {{as: f, subject: {{var: s}}, predicate: {predicate}, object: {{ne: {{var: o}}}}}}
    emit:
      kind: update
      subject: "{{s}}"
      predicate: {predicate}
      object: "{{o}}"
      replaces: [f]
  - id: new_add
    priority: 10
    when:
      - episode: {{subject: {{bind: s}}, predicate: {predicate}, object: {{bind: o}}}}
      - not: {{subject: {{var: s}}, predicate: {predicate}}}
    emit: {{kind: add, subject: "{{s}}", predicate: {predicate}, object: "{{o}}"}}
"""
"""Decide each observation of one predicate against the current facts: repeat → noop,
changed object → update, otherwise add. Split-invariant, so any cut of the stream into
passes gives the same facts; packs over different predicates never touch each other's."""


def write_packs(folder: Path) -> list[Path]:
    """A streaming pack (every episode), a count pack (every 3) and a second streaming
    pack: three packs consolidating the same partitions at once."""
    specs = [
        ("likes_stream", "likes", "{every: 1}"),
        ("lives_batch", "lives_in", "{every: 3}"),
        ("works_stream", "works_at", "{every: 1}"),
    ]
    paths = []
    for name, predicate, cadence in specs:
        path = folder / f"{name}.yaml"
        path.write_text(DEDUP.format(name=name, predicate=predicate, cadence=cadence), "utf-8")
        paths.append(path)
    return paths


def episode(
    n: int, user: str, predicate: str, obj: str, subject: str | None = None
) -> dict[str, Any]:
    subject = subject or user
    return Episode(
        id=f"e{n}",
        content=f"{subject} {predicate} {obj}",
        timestamp=T0 + timedelta(seconds=n),
        user=user,
        session=f"s{n % 2}",
        agent="rag",
        metadata={"subject": subject, "predicate": predicate, "object": obj},
    ).model_dump(mode="json")


def snapshot(db: Path) -> dict[str, Any]:
    """Everything a run leaves, with store-local numbering (seqs, rowids, wall-clock
    stamps) replaced by what it names. Audit rows are compared as a set per (partition,
    pack): subjects written by different processes interleave differently, while the
    order that matters (one subject's deltas) shows in the facts' supersession chains."""
    conn = sqlite3.connect(db)
    try:
        facts = sorted(
            conn.execute(
                "SELECT id, user, agent, subject, predicate, object, payload, confidence, "
                "valid_from_us, valid_until_us, superseded_by, closed_by, rule_id, delta_id "
                "FROM facts"
            )
        )
        lineage = sorted(
            conn.execute(
                "SELECT fact_id, delta_id, rule_id, pack_hash, source_episode_ids, "
                "promotion_ts_us, confidence, reason, bindings, predecessor_ids FROM lineage"
            )
        )
        audit: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        for row in conn.execute(
            "SELECT partition_key, pack_hash, delta_id, kind, rule_id, user, agent, delta "
            "FROM audit ORDER BY delta_id"
        ):
            audit[f"{row[0]} {row[1]}"].append(row[2:])
        # a watermark as the episodes it covers (insertion order differs between runs)
        marks = sorted(
            conn.execute(
                "SELECT w.pack, w.rule_id, w.partition_key, (SELECT count(*) FROM episodes e "
                "WHERE e.partition_key = w.partition_key AND e.seq <= w.last_seq) "
                "FROM watermarks w"
            )
        )
        rejections = sorted(
            conn.execute("SELECT id, pack, rule_id, partition_key, reason FROM rejections")
        )
        claims = conn.execute("SELECT count(*) FROM partition_claims").fetchone()[0]
    finally:
        conn.close()
    return {
        "facts": facts,
        "lineage": lineage,
        "audit": dict(audit),
        "watermarks": marks,
        "rejections": rejections,
        "claims": claims,
    }


async def sequential(db: Path, packs: Sequence[Path], episodes: Sequence[dict[str, Any]]) -> None:
    """The reference: every episode stored in the same order, then one consolidation."""
    async with Consolidator.open(db, packs, clock=lambda: NOW, worker="never") as mem:
        await mem.memory.put_many([Episode.model_validate(e) for e in episodes])
        await mem.consolidate(now=NOW)


async def catch_up(db: Path, packs: Sequence[Path]) -> None:
    """What is still pending after the processes (``every: 3`` leftovers) is consolidated."""
    async with Consolidator.open(db, packs, clock=lambda: NOW, worker="never") as mem:
        await mem.consolidate(now=NOW)


def run_processes(tmp: Path, db: Path, packs: Sequence[Path], plans: list[list[Any]]) -> None:
    go = tmp / "go"
    procs = []
    for index, ops in enumerate(plans):
        plan = {
            "db": str(db),
            "packs": [str(p) for p in packs],
            "name": f"p{index}",
            "now": NOW.isoformat(),
            "go": str(go),
            "ops": ops,
        }
        plan_file = tmp / f"plan{index}.json"
        plan_file.write_text(json.dumps(plan), "utf-8")
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), str(plan_file)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line == "ready", proc.stderr.read() if proc.stderr else line
        go.touch()
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
            assert "Traceback" not in err, err
            json.loads(out.strip().splitlines()[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


OPS = st.sampled_from(["consolidate", "consolidate_user", "tick", "run_once"])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """Episodes and per-process plans interleaving their writes with consolidations, ticks
    and one-shot runs. Every process writes into every partition, but each subject is
    written by one process, in order (so the sequential outcome is defined)."""
    processes = draw(st.integers(min_value=2, max_value=3))  # 2 cores here: 3 contend
    count = draw(st.integers(min_value=30, max_value=90))
    owner = {subject: index % processes for index, subject in enumerate(SUBJECTS)}
    episodes = [
        episode(
            n,
            draw(st.sampled_from(USERS)),
            draw(st.sampled_from(["likes", "lives_in", "works_at"])),
            draw(st.sampled_from(["a", "b", "c"])),
            draw(st.sampled_from(SUBJECTS)),
        )
        for n in range(count)
    ]
    plans: list[list[Any]] = [[] for _ in range(processes)]
    for item in episodes:
        index = owner[item["metadata"]["subject"]]
        plans[index].append([draw(st.sampled_from(["record", "record", "put"])), item])
        if draw(st.booleans()):
            op = draw(OPS)
            other = draw(st.integers(min_value=0, max_value=processes - 1))
            plans[other].append(
                [op, draw(st.sampled_from(USERS))] if op == "consolidate_user" else [op]
            )
    for ops in plans:  # every process ends with a consolidation racing the others
        ops.append(["consolidate"])
    return episodes, plans


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_concurrent_processes_end_in_the_state_of_one_sequential_run(
    tmp_path_factory: Any, scenario: tuple[list[dict[str, Any]], list[list[Any]]]
) -> None:
    episodes, plans = scenario
    tmp = tmp_path_factory.mktemp("concurrent")
    packs = write_packs(tmp)
    reference = tmp / "reference.db"
    asyncio.run(sequential(reference, packs, episodes))
    db = tmp / "shared.db"
    run_processes(tmp, db, packs, plans)
    asyncio.run(catch_up(db, packs))
    got, want = snapshot(db), snapshot(reference)
    assert got["facts"] == want["facts"]
    assert got["lineage"] == want["lineage"]
    assert got["audit"] == want["audit"]
    assert got["watermarks"] == want["watermarks"]
    assert got["rejections"] == want["rejections"]
    assert got["claims"] == 0  # every claim was given up
    audit_ids = [row[0] for rows in got["audit"].values() for row in rows]
    assert len(audit_ids) == len(set(audit_ids))  # no delta applied twice


CLI = [sys.executable, "-m", "stargraph_mem.cli"]


def test_two_cli_consolidate_runs_never_apply_a_pass_twice(tmp_path: Path) -> None:
    """The reported case, smaller: two ``stargraph-mem consolidate`` beside one
    ``run --once``, same pack, many partitions."""
    packs = write_packs(tmp_path)[:1]
    items = [episode(n, f"user{n % 60}", "likes", "abc"[(n // 60) % 3]) for n in range(1200)]
    reference = tmp_path / "reference.db"
    asyncio.run(sequential(reference, packs, items))
    db = tmp_path / "shared.db"
    lines = tmp_path / "episodes.jsonl"
    lines.write_text("".join(json.dumps(e) + "\n" for e in items), "utf-8")
    ingest = subprocess.run(
        [*CLI, "ingest", str(lines), "--db", str(db)], capture_output=True, text=True
    )
    assert ingest.returncode == 0, ingest.stderr
    now = ["--now", NOW.isoformat()]
    procs = [
        subprocess.Popen(
            [*CLI, "consolidate", "--pack", str(packs[0]), "--db", str(db), *now],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    procs.append(
        subprocess.Popen(
            [*CLI, "run", "--pack", str(packs[0]), "--db", str(db), "--once", *now],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    got, want = snapshot(db), snapshot(reference)
    assert got["facts"] == want["facts"]
    assert got["audit"] == want["audit"]
    assert got["watermarks"] == want["watermarks"]


def test_two_packs_racing_for_one_fact_never_raise(tmp_path: Path) -> None:
    """Two packs deciding on the same facts in two processes: each pass sees the other's
    applied passes (the partition is claimed, and a stale pass is computed again), so a
    fact one pack closed is simply no longer current for the other; no error, no fact
    closed twice, and the current facts are those of any sequential order."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(DEDUP.format(name="pack_a", predicate="likes", cadence="{every: 1}"))
    second.write_text(DEDUP.format(name="pack_b", predicate="likes", cadence="{every: 1}"))
    items = [episode(n, USERS[n % 2], "likes", "abcab"[n % 5], SUBJECTS[n % 4]) for n in range(160)]
    db = tmp_path / "shared.db"
    plans: list[list[Any]] = [[], []]
    for n, item in enumerate(items):
        # records fire both packs; both processes write both partitions (other subjects)
        plans[n % 4 % 2].append(["record", item])
        if n % 8 == 0:
            plans[1 - n % 4 % 2].append(["consolidate"])
    for ops in plans:
        ops.append(["consolidate"])
    run_processes(tmp_path, db, [first, second], plans)
    asyncio.run(catch_up(db, [first, second]))
    reference = tmp_path / "reference.db"
    asyncio.run(sequential(reference, [first, second], items))
    got, want = snapshot(db), snapshot(reference)

    def current(snap: dict[str, Any]) -> list[tuple[Any, ...]]:
        return sorted(f[1:6] for f in snap["facts"] if f[9] is None)

    assert current(got) == current(want)
    closed_by = [f[11] for f in got["facts"] if f[11] is not None]
    assert len(closed_by) == len([f for f in got["facts"] if f[9] is not None])
    audit_ids = [row[0] for rows in got["audit"].values() for row in rows]
    assert len(audit_ids) == len(set(audit_ids))


def claim_row(db: Path, partition: Partition, holder: str, expires: datetime) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT OR REPLACE INTO partition_claims (partition_key, holder, expires_us) "
            "VALUES (?, ?, ?)",
            (partition.key, holder, int(expires.timestamp() * 1_000_000)),
        )
    conn.close()


def test_a_claim_left_by_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    packs = write_packs(tmp_path)[:1]
    db = tmp_path / "m.db"
    items = [episode(n, "u0", "likes", "ab"[n % 2]) for n in range(6)]

    async def store() -> None:
        async with Consolidator.open(db, packs, worker="never") as mem:
            await mem.memory.put_many([Episode.model_validate(e) for e in items])

    asyncio.run(store())
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    partition = Partition("u0", "rag")
    far = datetime.now(UTC) + timedelta(hours=1)
    claim_row(db, partition, f"{os.uname().nodename}/{victim.pid}/dead", far)

    async def consolidate() -> int:
        async with Consolidator.open(db, packs, worker="never") as mem:
            reports = (await mem.consolidate(now=NOW)).passes
            return sum(r.episodes for r in reports)

    assert asyncio.run(consolidate()) == 6  # the dead holder's claim did not block
    assert snapshot(db)["claims"] == 0


def test_a_live_claim_is_waited_for_until_it_expires(tmp_path: Path) -> None:
    packs = write_packs(tmp_path)[:1]
    db = tmp_path / "m.db"

    async def store() -> None:
        async with Consolidator.open(db, packs, worker="never") as mem:
            await mem.memory.put_many([Episode.model_validate(episode(0, "u0", "likes", "a"))])

    asyncio.run(store())
    partition = Partition("u0", "rag")
    claim_row(db, partition, "elsewhere/1/x", datetime.now(UTC) + timedelta(seconds=0.8))

    async def consolidate() -> tuple[float, int]:
        async with Consolidator.open(db, packs, worker="never") as mem:
            t0 = time.monotonic()
            reports = (await mem.consolidate(now=NOW)).passes
            return time.monotonic() - t0, sum(r.episodes for r in reports)

    waited, episodes = asyncio.run(consolidate())
    assert episodes == 1
    assert waited >= 0.5  # it did not run beside the other holder
