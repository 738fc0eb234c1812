"""Passes computed in a worker process: same deltas, same stores, errors carried back, no
process left behind."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import DEDUP, DEFAULT, EXPIRE, FREQUENCY, NOW, dump_tables, episode, spo

from stargraph_mem.compiler.pack import compile_file
from stargraph_mem.engine.api import Consolidator
from stargraph_mem.engine.passes import runner as runner_module
from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.engine.passes.runner import PassRunner, WorkerMode
from stargraph_mem.engine.passes.worker import WorkerProcess
from stargraph_mem.errors import EngineError, FactConflictError, IRError, IRIssue
from stargraph_mem.salience import RuleBasedScorer
from stargraph_mem.stores.models import DELTA_ADAPTER, Episode, canonical_json
from stargraph_mem.stores.scope import Partition

PACKS = [DEFAULT, DEDUP, FREQUENCY, EXPIRE]


def stream() -> list[Episode]:
    """Repeats, noops, an explicit delete of an unknown fact (rejected) and two partitions."""
    out: list[Episode] = []
    for n in range(40):
        meta: dict[str, Any] = dict(spo(f"s{n % 4}", "likes", f"o{n % 3}"))
        if n % 9 == 4:
            meta = {"intent": "noop"}
        if n == 17:
            meta = {"intent": "delete", "replaces": ["fnot-a-fact"]}
        user = "alice" if n % 5 else "bob"
        out.append(episode(f"e{n}", n, user=user, session=f"s{n // 10}", meta=meta))
    return out


async def run(path: Path, worker: WorkerMode) -> list[PassReport]:
    async with Consolidator.open(path, PACKS, max_episodes=7, worker=worker) as mem:
        await mem.memory.put_many(stream())
        return (await mem.consolidate(now=NOW)).passes


def test_worker_passes_equal_in_process_passes(tmp_path: Path) -> None:
    local = asyncio.run(run(tmp_path / "local.db", "never"))
    remote = asyncio.run(run(tmp_path / "remote.db", "always"))
    assert len(local) == len(remote) > len(PACKS) * 2  # several passes per pack and partition
    for a, b in zip(local, remote, strict=True):
        assert [d.delta_id for d in a.deltas] == [d.delta_id for d in b.deltas]
        assert a.deltas == b.deltas
        assert (a.matched, a.rejected, a.fired, a.counts) == (
            b.matched,
            b.rejected,
            b.fired,
            b.counts,
        )
        assert (a.first_seq, a.last_seq, a.episodes, a.applied) == (
            b.first_seq,
            b.last_seq,
            b.episodes,
            b.applied,
        )
    assert any(r.rejected for r in remote)
    local_tables = dump_tables(tmp_path / "local.db", skip_wall_clock=True)
    assert local_tables == dump_tables(tmp_path / "remote.db", skip_wall_clock=True)
    assert local_tables["facts"] and local_tables["audit"]


def test_a_canonical_body_validates_back_to_the_same_body(tmp_path: Path) -> None:
    """The parent keeps the received body as the delta's canonical form: that is only right
    if validating a body and dumping it again gives the same bytes."""
    reports = asyncio.run(run(tmp_path / "m.db", "never"))
    deltas = [d for r in reports for d in r.deltas]
    assert {d.kind for d in deltas} >= {"add", "update", "noop"}
    for delta in deltas:
        body = delta.canonical_body()
        again = DELTA_ADAPTER.validate_json(body)
        assert canonical_json(again.model_dump(mode="json")) == body
        assert again.delta_id == delta.delta_id


def test_auto_uses_a_worker_only_for_a_backlog_of_several_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[WorkerProcess] = []
    original = WorkerProcess.__init__

    def counting(self: WorkerProcess) -> None:
        original(self)
        started.append(self)

    monkeypatch.setattr(WorkerProcess, "__init__", counting)
    asyncio.run(run(tmp_path / "small.db", "auto"))  # 40 episodes: below the minimum
    assert started == []
    monkeypatch.setattr(runner_module, "WORKER_MIN_EPISODES", 10)
    asyncio.run(run(tmp_path / "backlog.db", "auto"))
    # one per (pack, partition) whose backlog spans several passes: alice has 32 episodes;
    # a pack with history patterns (frequency_promotion) too: the worker reads the rows
    # its first pass needs and carries the counts' state from pass to pass
    assert any(compile_file(p).history for p in PACKS)
    assert len(started) == len(PACKS)
    assert all(w.closed and w.process.poll() == 0 for w in started)


def test_a_failing_apply_stops_the_run_and_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = PassRunner._apply
    applied: list[int] = []
    started: list[WorkerProcess] = []
    init = WorkerProcess.__init__

    def tracking(self: WorkerProcess) -> None:
        init(self)
        started.append(self)

    async def failing(self: PassRunner, report: PassReport, *args: Any) -> int:
        if len(applied) == 2:
            raise FactConflictError("apply failed", fact_ids=["f1"])
        version = await original(self, report, *args)
        applied.append(report.last_seq)
        return version

    monkeypatch.setattr(PassRunner, "_apply", failing)
    monkeypatch.setattr(WorkerProcess, "__init__", tracking)

    async def scenario() -> tuple[dict[str, int], int]:
        async with Consolidator.open(
            tmp_path / "m.db", [DEFAULT], max_episodes=3, worker="always"
        ) as c:
            await c.memory.put_many(
                [episode(f"e{n}", n, **spo("ann", "likes", f"o{n}")) for n in range(12)]
            )
            report = await c.consolidate(now=NOW)  # the partition is quarantined
            assert [r.failed for r in report.failed] == [
                "pass failed, nothing applied: FactConflictError: apply failed"
            ]
            marks = await c.fact_store.watermarks("default", Partition("alice", "rag"))
            return marks, len(await c.fact_store.audit_rows())

    marks, audit = asyncio.run(scenario())
    assert set(marks.values()) == {applied[-1]} and audit == 6
    assert len(started) == 1 and started[0].closed and started[0].process.poll() is not None


def test_an_error_in_the_worker_comes_back_with_its_type() -> None:
    worker = WorkerProcess()
    try:
        with pytest.raises(TypeError, match="unexpected request: str"):
            worker.request("not a request")
        with pytest.raises(RuntimeError, match="before the worker was set up"):
            worker.request(
                runner_module.WorkerPass(
                    partition=None,  # type: ignore[arg-type]
                    now=NOW,
                    rule_ids=[],
                    legacy=None,
                    stamp=None,
                )
            )
    finally:
        worker.close()
    assert worker.process.returncode == 0
    with pytest.raises(EngineError, match="closed"):
        worker.request("late")


def test_a_worker_that_dies_is_reported() -> None:
    worker = WorkerProcess()
    try:
        worker.process.kill()
        worker.process.wait()
        with pytest.raises(EngineError, match="exited unexpectedly") as caught:
            worker.request("anything")
        assert caught.value.context["exit_status"] == -9
    finally:
        worker.close()


def test_errors_keep_their_context_through_pickle() -> None:
    error = FactConflictError("cannot replace f1", fact_ids=["f1"], index=3)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is FactConflictError
    assert (str(again), again.context) == ("cannot replace f1", {"fact_ids": ["f1"], "index": 3})
    ir = pickle.loads(pickle.dumps(IRError(IRIssue("bad", "p.yaml", 3, 4, "rules[0]"))))
    assert (str(ir), ir.line, ir.col, ir.path) == ("p.yaml:3:4: rules[0]: bad", 3, 4, "rules[0]")


def test_worker_mode_is_checked(tmp_path: Path) -> None:
    class Custom(RuleBasedScorer):
        pass

    with pytest.raises(ValueError, match="'auto', 'always' or 'never'"):
        Consolidator.open(tmp_path / "m.db", [DEFAULT], worker="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs the built-in RuleBasedScorer"):
        Consolidator.open(tmp_path / "m.db", [DEFAULT], worker="always", scorer=Custom())


def test_a_worker_continues_from_facts_a_streaming_pass_changed(tmp_path: Path) -> None:
    """Records leave the partition's facts in memory with some of them closed (an update);
    a backlog consolidated afterwards hands those facts, pickled, to a worker process,
    which must see the closed ones as gone, exactly as this process does."""
    text = DEDUP.read_text(encoding="utf-8").replace('{cron: "0 3 * * *"}', "{every: 1}")
    pack = tmp_path / "dedup_every_1.yaml"
    pack.write_text(text, encoding="utf-8")

    async def scenario(db: Path, worker: WorkerMode) -> list[tuple[str, str, str, float]]:
        async with Consolidator.open(db, [pack], max_episodes=3, worker=worker) as mem:
            await mem.record(episode("e1", 1, **spo("ann", "likes", "tea")))
            await mem.record(episode("e2", 2, **spo("bo", "likes", "tea")))
            await mem.record(episode("e3", 3, **spo("ann", "likes", "coffee")))  # closes tea
            backlog = [
                episode(f"b{n}", 10 + n, **spo(["ann", "bo", "cy"][n % 3], "likes", f"o{n % 4}"))
                for n in range(20)
            ]
            await mem.memory.put_many(backlog)
            report = await mem.consolidate(now=NOW)
            assert len(report.passes) > 2  # the backlog takes several passes
            facts = await mem.facts(user="alice", agent="rag")
            return sorted((f.subject, f.predicate, f.object, f.confidence) for f in facts)

    local = asyncio.run(scenario(tmp_path / "local.db", "never"))
    remote = asyncio.run(scenario(tmp_path / "remote.db", "always"))
    assert local == remote
    assert ("ann", "likes", "tea", 0.8) not in local
