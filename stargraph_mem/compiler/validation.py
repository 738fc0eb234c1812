"""``validate`` of a pack file, remembered: an unchanged file that validated before under
the same code is answered by hashing it, without loading the IR, the compiler or CLIPS.

What the key covers and why a hit cannot hide an error is said in
:mod:`~stargraph_mem.compiler.build_cache`: only a file without any issue is remembered,
and anything else (a new or changed file, other code or libraries, an unreadable cache)
runs the whole validation of :func:`stargraph_mem.compiler.pack.validate_file`, whose
issues are returned as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stargraph_mem.compiler import build_cache

if TYPE_CHECKING:
    from stargraph_mem.errors import IRIssue


def validate_file(path: str | Path, root: Path | None = None) -> list[IRIssue]:
    """Every issue of the pack file at ``path`` (empty when valid), from the cache of
    ``root`` (default :func:`~.build_cache.cache_dir`) for a file that validated before;
    a file without issues that did not change while it was checked is remembered."""
    data = _read(path)
    key = None if data is None else build_cache.validation_key(path, data)
    if key is not None and build_cache.validated_before(key, root):
        return []
    from stargraph_mem.compiler.pack import validate_file as validate

    issues = validate(path)
    if not issues and key is not None and _read(path) == data:
        build_cache.remember_validated(key, root)
    return issues


def _read(path: str | Path) -> bytes | None:
    """The file's bytes (``None`` when it cannot be read: the validation says why)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


__all__ = ["validate_file"]
