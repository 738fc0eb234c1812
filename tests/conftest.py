"""Shared test configuration.

The optional extras (``graph``: langgraph, ``mcp``) are part of the ``test`` extra, so
their tests are always collected and never skipped. ``backend`` yields the stores of each
backend in turn (see ``backends.py``); its PostgreSQL runs never skip either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from backends import BACKENDS, Backend, open_backend


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Fresh stores of each backend in turn (PostgreSQL: a fresh schema, dropped after)."""
    async with open_backend(request.param, tmp_path) as opened:
        yield opened
