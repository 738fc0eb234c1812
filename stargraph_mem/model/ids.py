"""The one pattern of identifiers (episode, fact and rule ids), without pydantic: readers
that check stored ids themselves (the command line's listing of facts) match it too."""

from __future__ import annotations

from typing import Final

__all__ = ["ID_PATTERN"]

ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
"""Episode ids, fact ids and rule ids all match this pattern."""
