"""Database outages for the reconnect tests, without touching the shared test server.

:class:`Killer` ends the server sessions of one ``application_name`` with
``pg_terminate_backend`` (what a restart does to them: ``AdminShutdown``), repeatedly for
a while, so reconnects fail too. :class:`Proxy` forwards a local port to the server;
:meth:`Proxy.down` cuts every connection and refuses new ones (what clients see while the
server restarts), :meth:`Proxy.up` accepts them again; an armed :attr:`Proxy.trap` cuts
the next connection that sends ``COMMIT`` once the server has it, before its answer
reaches the client (a commit that was applied, but the client cannot know).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from backends import PG_URL

__all__ = ["Killer", "Proxy", "dump", "through"]

COMMIT = b"COMMIT\x00"
"""How a ``COMMIT`` statement travels in the protocol (simple or extended query)."""
COMMIT_GRACE_S = 0.3
"""How long a trapped connection waits for the server to commit before it is cut."""


class Killer:
    """Terminates the sessions named ``app`` (never the caller's own)."""

    def __init__(self, app: str) -> None:
        self.app = app
        self.killed = 0
        self._thread: threading.Thread | None = None

    def kill(self) -> int:
        """End every session of ``app`` now; how many there were."""
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (self.app,),
            ).fetchall()
        self.killed += len(rows)
        return len(rows)

    def storm(self, seconds: float, every: float = 0.02) -> None:
        """Keep ending the sessions for ``seconds`` (in a thread; :meth:`join` waits)."""

        def loop() -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                self.kill()
                time.sleep(every)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()


class Proxy:
    """A TCP forwarder from a local port to the test server (see the module)."""

    def __init__(self) -> None:
        server = urlsplit(PG_URL)
        self.target = (server.hostname or "127.0.0.1", server.port or 5432)
        self.port = 0
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.trap = threading.Event()
        """Armed: cut the next connection that commits (see the module)."""
        self.commits_cut = 0

    def up(self) -> None:
        """Accept connections (on the same port as before, once there was one)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Cut every forwarded connection and refuse new ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            held = threading.Event()
            for a, b, out in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, out, held), daemon=True).start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, out: bool, held: threading.Event
    ) -> None:
        """Copy bytes one way until either side closes; ``held``: the server's answers
        are dropped (a trapped commit's connection)."""
        try:
            while data := source.recv(65536):
                if out and COMMIT in data and self.trap.is_set():
                    self.trap.clear()
                    held.set()  # before the server can answer
                    sink.sendall(data)
                    time.sleep(COMMIT_GRACE_S)
                    self.commits_cut += 1
                    return
                if not held.is_set():
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def through(url: str, port: int) -> str:
    """``url`` with its server replaced by the proxy's local port."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


DROPPED = {
    "facts": {"rowid", "recorded_at_us"},
    "lineage": {"rowid", "audit_seq"},
    "audit": {"seq", "applied_at_us"},
    "watermarks": {"updated_at_us"},
}
"""Columns of insertion order and wall-clock time, left out when comparing two runs (a
run redone after an outage inserts the same rows, maybe in another order)."""


def dump(schema: str) -> dict[str, list[str]]:
    """Facts, lineage, audit and watermarks of ``schema``, row by row as sorted JSON
    without the :data:`DROPPED` columns."""
    out: dict[str, list[str]] = {}
    with psycopg.connect(PG_URL, autocommit=True) as db:
        for table, dropped in DROPPED.items():
            rows: list[Any] = db.execute(
                f'SELECT row_to_json(t)::jsonb - %s::text[] FROM "{schema}"."{table}" t',
                (sorted(dropped),),
            ).fetchall()
            out[table] = sorted(str(row[0]) for row in rows)
    return out
