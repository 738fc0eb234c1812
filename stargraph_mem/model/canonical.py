"""Canonical JSON: the one byte form that hashes (ids, pack digests) are computed over."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import orjson


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes (sorted keys, UTC datetimes) used for hashing."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z)


def default_episode_id(
    content: str, user: str, session: str, agent: str, timestamp: datetime
) -> str:
    """The id an episode gets when none is given: ``e`` + 24 hex digits of the hash of its
    scope, timestamp and content (the CLI's ``put`` and the MCP server agree on it)."""
    body = canonical_json([user, session, agent, timestamp.isoformat(), content])
    return "e" + hashlib.sha256(body).hexdigest()[:24]
