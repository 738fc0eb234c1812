"""Shared test configuration.

The optional extras (``graph``: langgraph, ``mcp``) are part of the ``test`` extra, so
their tests are always collected and never skipped.
"""

from __future__ import annotations
