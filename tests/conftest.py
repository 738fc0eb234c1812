"""Shared test configuration.

The optional extras (``graph``: langgraph, ``mcp``) are part of the ``test`` extra, so
their tests are always collected and never skipped. ``backend`` yields the stores of each
backend in turn (see ``backends.py``); its PostgreSQL runs never skip either.

The user cache (``validate``'s remembered CLIPS builds) is a fresh directory for the
session, so tests neither read nor leave entries in the real one.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from backends import BACKENDS, PG_URL, Backend, open_backend


@pytest.fixture(autouse=True, scope="session")
def _user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``XDG_CACHE_HOME`` in a temporary directory for the session (subprocesses too)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Fresh stores of each backend in turn (PostgreSQL: a fresh schema, dropped after)."""
    async with open_backend(request.param, tmp_path) as opened:
        yield opened


@pytest.fixture(params=BACKENDS)
async def new_location(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], str]]:
    """Each call: where a fresh memory of the backend lives (a new SQLite file, or a
    PostgreSQL URL with a new schema, dropped after the test): the engine and scheduler
    tests run on both backends through it."""
    async with AsyncExitStack() as stack:
        made: list[str] = []

        def make() -> str:
            if request.param == "sqlite":
                location = str(tmp_path / f"memory-{uuid.uuid4().hex[:8]}.db")
            else:
                name = f"t_{uuid.uuid4().hex[:16]}"
                location = f"{PG_URL}?schema={name}"
                made.append(name)
            return location

        yield make
        for name in made:
            stack.push_async_callback(_drop, name)


async def _drop(name: str) -> None:
    from backends import _admin

    admin = await _admin()
    try:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await admin.close()
