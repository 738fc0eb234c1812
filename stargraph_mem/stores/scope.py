"""Scope keys: ``/user/{u}/session/{s}/agent/{a}/`` with every component escaped.

Components are percent-encoded (``/``, ``%``, ``\\`` and every non-ASCII-safe character),
so no component can forge a separator. Reads use ``=`` or half-open range scans over
the BINARY collation (case-sensitive), never ``LIKE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from urllib.parse import quote

from stargraph_mem.errors import MemoryScopeError

_SAFE = "-._~"


def escape_component(value: str, name: str) -> str:
    """Percent-encode one scope component; empty or NUL-bearing components are rejected."""
    if not isinstance(value, str) or value == "":
        raise MemoryScopeError(f"scope component '{name}' must be a non-empty string", part=name)
    if "\x00" in value:
        raise MemoryScopeError(f"scope component '{name}' must not contain NUL", part=name)
    return _quoted(value)


@lru_cache(maxsize=4096)
def _quoted(value: str) -> str:
    """``value`` percent-encoded (cached: a put encodes the same few users and agents)."""
    return quote(value, safe=_SAFE)


def user_prefix(user: str) -> str:
    """Key prefix shared by every row of one user."""
    return f"/user/{escape_component(user, 'user')}/"


def scope_key(user: str, session: str, agent: str) -> str:
    """The full episode scope key."""
    return (
        f"{user_prefix(user)}session/{escape_component(session, 'session')}/"
        f"agent/{escape_component(agent, 'agent')}/"
    )


def partition_key(user: str, agent: str) -> str:
    """The ``(user, agent)`` partition key: facts and consolidation work on this slice."""
    return f"{user_prefix(user)}agent/{escape_component(agent, 'agent')}/"


def prefix_upper_bound(prefix: str) -> str:
    """Smallest string greater than every string starting with ``prefix`` (range scans)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclass(frozen=True)
class Partition:
    """The ``(user, agent)`` slice a rule consolidates in one firing."""

    user: str
    agent: str

    @cached_property
    def key(self) -> str:
        """The partition key (escaped once per instance: passes ask for it often)."""
        return partition_key(self.user, self.agent)
