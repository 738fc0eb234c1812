"""Surviving a database restart or failover: wait for the server, then redo from a fresh read.

A lost connection (:class:`~stargraph_mem.errors.DatabaseUnavailableError`) ends the
transaction it was in: the server rolls it back, or, when the connection broke during the
commit, it may have committed. Either way the work is redone whole: the stores are read
again, and a pass applies only if the watermarks and facts version it read are unchanged,
so a pass that did commit is not applied again. Statements are never retried in the
middle of a transaction.

:class:`Survivor` runs one action (a ``consolidate``, a ``tick``) and, when it loses the
database, reconnects with exponential backoff and runs it again. The bound
(:attr:`Reconnect.seconds`) covers a stretch without progress: it restarts once a pass is
applied or the action completes, so a flapping server cannot keep a run waiting forever,
and a run that keeps going through several short outages is not cut off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from stargraph_mem.errors import DatabaseUnavailableError
from stargraph_mem.stores.protocols import Database

__all__ = ["DEFAULT_RECONNECT_SECONDS", "Outage", "Reconnect", "Survivor"]

T = TypeVar("T")

DEFAULT_RECONNECT_SECONDS: Final = 60.0
"""How long a run waits for a lost database by default before it gives up."""

_LOG: Final = logging.getLogger("stargraph_mem.reconnect")


@dataclass(frozen=True, slots=True)
class Reconnect:
    """How a run waits for a database that went away: up to ``seconds`` without a working
    connection (0: give up at once), reconnecting after ``first_delay`` seconds, then
    after twice as long each time, at most ``max_delay`` apart."""

    seconds: float = DEFAULT_RECONNECT_SECONDS
    first_delay: float = 0.25
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if not self.seconds >= 0 or not 0 < self.first_delay <= self.max_delay:
            raise ValueError(
                "reconnect needs seconds >= 0 and 0 < first_delay <= max_delay "
                f"(got {self.seconds}, {self.first_delay}, {self.max_delay})"
            )


@dataclass(frozen=True, slots=True)
class Outage:
    """One outage a run survived: the driver's reason for the lost connection, the
    seconds until a new one worked, and the reconnects it took."""

    reason: str
    seconds: float
    attempts: int

    def describe(self) -> str:
        """``database connection lost (…); reconnected after N s``."""
        return f"database connection lost ({self.reason}); reconnected after {self.seconds:.1f} s"


OnOutage = Callable[[Outage], None]


def _log(outage: Outage) -> None:
    """The default report of a survived outage: a warning on the package's logger."""
    _LOG.warning("%s", outage.describe())


class Survivor:
    """Runs actions on one database again after lost connections (see the module)."""

    def __init__(
        self,
        database: Database,
        policy: Reconnect,
        *,
        on_outage: OnOutage | None = None,
        forget: Callable[[], None] = lambda: None,
    ) -> None:
        self.database = database
        self.policy = policy
        self.on_outage = on_outage or _log
        self.forget = forget
        """Drops what the caller kept from before the outage (it is read again)."""
        self._since: float | None = None
        """When the current stretch without progress began (None: not in one)."""

    async def run(
        self, action: Callable[[], Awaitable[T]], progress: Callable[[], int] = lambda: 0
    ) -> T:
        """``action()``, run again after each outage it survives; ``progress()`` counts the
        passes applied so far (more than before the outage: the bound starts again)."""
        seen = progress()
        while True:
            try:
                result = await action()
            except DatabaseUnavailableError as exc:
                now = progress()
                if now > seen:
                    self._since, seen = None, now
                await self.recover(exc)
                continue
            self._since = None
            return result

    async def recover(self, lost: DatabaseUnavailableError) -> None:
        """Wait until the database takes a connection again, then report the outage;
        raise :class:`DatabaseUnavailableError` once the bound is spent."""
        lost_at = time.monotonic()
        if self._since is None:
            self._since = lost_at
        deadline = self._since + self.policy.seconds
        delay, attempts, last = self.policy.first_delay, 0, lost
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._gave_up(last) from last
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, self.policy.max_delay)
            attempts += 1
            try:
                await self.database.reconnect()
            except DatabaseUnavailableError as exc:
                last = exc
                continue
            break
        self.forget()
        reason = str(lost.context.get("reason") or lost.message)
        self.on_outage(Outage(reason, time.monotonic() - lost_at, attempts))

    def _gave_up(self, last: DatabaseUnavailableError) -> DatabaseUnavailableError:
        """The error a run ends with when the database stayed away past the bound."""
        where = last.context.get("where", "the database")
        reason = str(last.context.get("reason") or last.message)
        return DatabaseUnavailableError(
            f"the database at {where} did not come back within {self.policy.seconds:g} s "
            f"({reason})",
            where=where,
            reason=reason,
            seconds=self.policy.seconds,
        )
