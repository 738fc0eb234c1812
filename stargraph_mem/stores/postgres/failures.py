"""Telling a lost connection from a refused statement.

A server restart or failover shows up in psycopg as ``AdminShutdown`` (the server ends
the session), ``CannotConnectNow`` (it is starting up or shutting down), a connection
exception (SQLSTATE class 08), or an ``OperationalError`` without SQLSTATE on a broken
connection (the socket closed under a statement, the server refused the connection).
These mean "try again once the server is back"; every other error (a constraint, a
syntax error, a cancelled statement) is the statement's own and surfaces as it is.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

__all__ = ["connection_lost", "first_line"]

_SESSION_ENDED: Final = frozenset({"57P01", "57P02", "57P03"})
"""admin_shutdown, crash_shutdown, cannot_connect_now."""


def connection_lost(exc: BaseException, conn: psycopg.AsyncConnection[Any] | None) -> bool:
    """Whether ``exc``, raised while using ``conn`` (None: while getting a connection),
    means the connection to the server was lost or could not be made."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    if state is not None:
        return state.startswith("08") or state in _SESSION_ENDED
    # no SQLSTATE: the driver's own failure (a pool timeout or a closed pool, a refused
    # or broken socket), a connection-level one when there is no usable connection
    return conn is None or conn.broken or conn.closed


def first_line(exc: BaseException) -> str:
    """The first line of the driver's message (connection errors add hints below it)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
