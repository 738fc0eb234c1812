"""``async with`` support for anything that bootstraps on entry and closes on exit."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Self

__all__ = ["AsyncResource", "closed_on_failure"]


@asynccontextmanager
async def closed_on_failure(close: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """Run ``close`` when the block fails, then re-raise the block's error.

    An open connection keeps its worker thread (and so the process) alive, so a failed
    open must release what it opened. A failure to close is added to the error as a note:
    the reason the open failed is what the caller needs to see.
    """
    try:
        yield
    except BaseException as exc:
        try:
            await close()
        except Exception as close_exc:
            exc.add_note(f"closing after the failure failed too: {close_exc!r}")
        raise


class AsyncResource(ABC):
    """``async with x`` means ``await x.bootstrap()`` … ``await x.close()``.

    A bootstrap that fails closes whatever it opened before the error propagates.
    """

    @abstractmethod
    async def bootstrap(self) -> None:
        """Make the resource ready (idempotent)."""

    @abstractmethod
    async def close(self) -> None:
        """Release it (a later use may reopen)."""

    async def __aenter__(self) -> Self:
        async with closed_on_failure(self.close):
            await self.bootstrap()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
