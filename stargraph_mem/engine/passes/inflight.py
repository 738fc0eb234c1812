"""One write running behind the computation of the next (pass or batch pipelining)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Behind(Generic[T]):
    """At most one task in flight: :meth:`wait` for it before starting the next."""

    def __init__(self) -> None:
        self.task: asyncio.Task[T] | None = None

    def start(self, work: Coroutine[Any, Any, T]) -> None:
        """Run ``work`` while the caller goes on (the previous task was waited for)."""
        assert self.task is None
        self.task = asyncio.create_task(work)

    async def wait(self) -> T | None:
        """The task's result (None when none is in flight); its error is raised here."""
        task, self.task = self.task, None
        return None if task is None else await task

    async def settle(self) -> None:
        """After a failure elsewhere: let the task finish, its own error dropped."""
        task, self.task = self.task, None
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
