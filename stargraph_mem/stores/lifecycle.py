"""``async with`` support for anything that bootstraps on entry and closes on exit."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class AsyncResource(ABC):
    """``async with x`` means ``await x.bootstrap()`` … ``await x.close()``."""

    @abstractmethod
    async def bootstrap(self) -> None:
        """Make the resource ready (idempotent)."""

    @abstractmethod
    async def close(self) -> None:
        """Release it (a later use may reopen)."""

    async def __aenter__(self) -> Self:
        await self.bootstrap()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
