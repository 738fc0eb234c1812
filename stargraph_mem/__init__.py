"""stargraph_mem: deterministic, auditable episodic-to-semantic memory consolidation."""

from __future__ import annotations

__version__ = "0.1.0"

# Registers the runtime behind ``SQLiteMemoryStore.consolidate(rule)``.
import stargraph_mem.engine.legacy  # noqa: F401
