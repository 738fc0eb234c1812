"""The worker process's side of a run: one pack's passes, each carrying state to the next
(see :class:`~stargraph_mem.engine.passes.worker.WorkerProcess`)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from stargraph_mem.engine.passes.report import PassReport
from stargraph_mem.engine.passes.runner import PassRunner, WorkerPass, WorkerSetup
from stargraph_mem.engine.passes.runtime import PackRuntime
from stargraph_mem.engine.passes.worker import STOP
from stargraph_mem.errors import EngineError
from stargraph_mem.stores.database import open_database
from stargraph_mem.stores.protocols import Database


class PassServer:
    """Computes the passes a parent asks for; deltas go back as canonical JSON bodies."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.runner: PassRunner | None = None
        self.database: Database | None = None
        self.previous: PassReport | None = None

    def handle(self, message: object) -> object:
        return self.loop.run_until_complete(self._handle(message))

    async def _handle(self, message: object) -> object:
        if isinstance(message, WorkerSetup):
            await self._close()
            self.database = open_database(message.location)
            self.runner = PassRunner(
                PackRuntime(message.compiled),
                self.database.memory,
                self.database.facts,
                scorer=message.scorer,
                max_episodes=message.max_episodes,
                keep_deltas=message.keep_deltas,
                worker="never",
                fact_bytes=message.fact_bytes,
            )
            return None
        if not isinstance(message, WorkerPass):
            raise TypeError(f"unexpected request: {type(message).__name__}")
        runner = self.runner
        if runner is None:
            raise RuntimeError("a pass was requested before the worker was set up")
        if message.previous is not None:
            self.previous = message.previous
        report = await runner.compute(
            message.partition,
            message.now,
            runner.rules_of(message.rule_ids),
            message.legacy,
            message.stamp,
            self.previous,
        )
        bodies = [delta.canonical_body() for delta in report.deltas]
        report.deltas = []
        self.previous = report
        return replace(report, facts_after=None, history_after=None, bodies=bodies)

    async def _close(self) -> None:
        runner, self.runner = self.runner, None
        database, self.database = self.database, None
        if runner is not None:
            runner.runtime.close()
        if database is not None:
            await database.close()

    def close(self) -> None:
        self.loop.run_until_complete(self._close())
        self.loop.close()


def serve(requests: Connection, replies: Connection) -> None:
    """The child's loop: hand each request to the pass server until told to stop."""
    server = PassServer()
    try:
        while True:
            try:
                message = requests.recv()
            except EOFError:
                return
            if message is STOP:
                return
            try:
                reply: tuple[str, Any] = ("ok", server.handle(message))
            except Exception as exc:  # every failure goes back to the parent
                reply = ("error", exc)
            try:
                replies.send(reply)
            except BrokenPipeError:
                return
            except Exception as exc:  # an exception that does not pickle
                replies.send(("error", EngineError(f"{type(exc).__name__}: {exc}")))
    finally:
        server.close()


def main(argv: list[str]) -> int:
    """The child process's program: serve the pipes whose descriptors ``argv`` holds."""
    requests = Connection(int(argv[0]), writable=False)
    replies = Connection(int(argv[1]), readable=False)
    serve(requests, replies)
    return 0
