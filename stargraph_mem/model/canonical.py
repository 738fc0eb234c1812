"""Canonical JSON: the one byte form that hashes (ids, pack digests) are computed over."""

from __future__ import annotations

from typing import Any

import orjson


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes (sorted keys, UTC datetimes) used for hashing."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z)
