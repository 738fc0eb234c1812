"""A child Python process that computes consolidation passes for its parent.

A long run is bound by Python work on both sides of a pass: turning what CLIPS printed into
validated deltas, and turning deltas into rows. In one process both halves need the GIL,
so overlapping them gains little. With a worker, the child reads episodes, runs the pack
and builds the deltas of pass k+1 while the parent commits pass k
(see :meth:`~stargraph_mem.engine.passes.runner.PassRunner.run`).

The child runs :func:`stargraph_mem.engine.passes.remote.main` with two pipe descriptors: the
pipes carry pickled requests and replies. It is not started through ``multiprocessing``, so the
parent's ``__main__`` module is never imported again in the child. It runs in its own
session (a terminal's Ctrl-C goes to the parent, which decides what to do with the pass in
hand) and exits when the parent closes its end of the request pipe, including when the
parent is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from stargraph_mem.errors import EngineError

STOP = None
"""The request that tells the child to exit."""
_CHILD = (
    "import sys; from stargraph_mem.engine.passes.remote import main; sys.exit(main(sys.argv[1:]))"
)
"""The child's program: :func:`stargraph_mem.engine.passes.remote.main` (the child's side lives
there, so this module, which the runner imports, imports nothing of the engine)."""


class WorkerProcess:
    """The parent's handle on one child: ``request`` sends an object and returns the reply.

    Replies are ``("ok", value)`` or ``("error", exception)``; an error raised in the child
    is raised again here with its type, message and context.
    """

    def __init__(self) -> None:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHILD, str(request_r), str(reply_w)],
                pass_fds=(request_r, reply_w),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            os.close(request_w)
            os.close(reply_r)
            raise
        finally:
            os.close(request_r)
            os.close(reply_w)
        self._requests = Connection(request_w, readable=False)
        self._replies = Connection(reply_r, writable=False)
        self._lock = threading.Lock()
        self.closed = False

    def request(self, message: Any) -> Any:
        """Send ``message`` and wait for the reply (blocking: call it from a thread)."""
        with self._lock:
            if self.closed:
                raise EngineError("the consolidation worker is closed")
            try:
                self._requests.send(message)
                status, value = self._replies.recv()
            except (EOFError, OSError) as exc:
                code = self.process.poll()
                raise EngineError(
                    "the consolidation worker process exited unexpectedly"
                    + (f" (exit status {code})" if code is not None else ""),
                    exit_status=code,
                ) from exc
        if status == "error":
            raise value
        return value

    async def call(self, message: Any) -> Any:
        """:meth:`request` from a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.request, message)

    def close(self, timeout: float = 10.0) -> None:
        """Ask the child to exit and wait for it (killed if it does not exit in time)."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self._requests.send(STOP)
        self._requests.close()
        self._replies.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
