"""stargraph_mem: deterministic, auditable episodic-to-semantic memory consolidation."""

from __future__ import annotations

__version__ = "0.1.0"
