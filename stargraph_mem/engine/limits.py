"""Engine defaults that callers show before any engine code loads (CLI option defaults)."""

from __future__ import annotations

from typing import Final

DEFAULT_MAX_EPISODES: Final = 50_000
"""Episodes one consolidation pass reads at most."""
