"""Which generated programs CLIPS has built before, so ``validate`` of an unchanged pack
need not load CLIPS again.

A pack's build check (loading its generated program into a scratch CLIPS environment)
costs CLIPS's import and the load. Its outcome depends only on the program text and the
CLIPS library that builds it, so a build that succeeded is remembered under a key made
of the package version, the pack's IR hash, the program text's hash and the identity of
the installed CLIPS extension (its file's path, size and modification time): any of
them changing is a miss. Only successes are written; a failing build is checked again
every time, so the cache can never turn an error into a pass.

The cache lives in ``$XDG_CACHE_HOME/stargraph-mem`` (``~/.cache/stargraph-mem`` when
the variable is unset or empty), one small file per key. It is an optimisation only: a
directory that cannot be made or written, or an entry that cannot be read or does not
say what it should (a corrupt file), counts as a miss, and nothing is raised.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import suppress
from importlib.util import find_spec
from pathlib import Path
from typing import Final

FORMAT: Final = 1
"""The entries' layout (a change makes every older entry a miss)."""

CACHE_DIR_NAME: Final = "stargraph-mem"


def cache_dir() -> Path:
    """Where the cache lives: ``$XDG_CACHE_HOME/stargraph-mem``, else
    ``~/.cache/stargraph-mem``."""
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / CACHE_DIR_NAME


def clips_identity() -> str:
    """The installed CLIPS extension, named without importing it: the path, size and
    modification time of its compiled module ("" when it cannot be found)."""
    try:
        spec = find_spec("clips")
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.submodule_search_locations:
        return ""
    parts: list[str] = []
    for location in spec.submodule_search_locations:
        try:
            entries = sorted(os.scandir(location), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("_clips") and entry.name.endswith((".so", ".pyd")):
                info = entry.stat()
                parts.append(f"{entry.path}:{info.st_size}:{info.st_mtime_ns}")
    return "|".join(parts)


def package_version() -> str:
    """This package's version. The root package is loaded before any of its modules, so
    it is read from there rather than imported (the compiler imports no layer above it)."""
    return str(getattr(sys.modules[__name__.partition(".")[0]], "__version__", ""))


def build_key(pack_sha256: str, program: str) -> str:
    """The key of a build check of ``program`` (the generated CLIPS text of the pack whose
    IR hash is ``pack_sha256``) by this package and the installed CLIPS."""
    text = "\0".join(
        (
            f"format {FORMAT}",
            package_version(),
            pack_sha256,
            hashlib.sha256(program.encode("utf-8")).hexdigest(),
            clips_identity(),
        )
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _entry(key: str, root: Path | None) -> Path:
    return (root or cache_dir()) / "builds" / f"{key}.json"


def built_before(key: str, root: Path | None = None) -> bool:
    """Whether a build under ``key`` succeeded before (anything unreadable: no)."""
    try:
        document = json.loads(_entry(key, root).read_bytes())
    except (OSError, ValueError):
        return False
    return (
        isinstance(document, dict)
        and document.get("format") == FORMAT
        and document.get("key") == key
        and document.get("built") is True
    )


def remember_built(key: str, root: Path | None = None) -> bool:
    """Record that the build under ``key`` succeeded; False when it could not be written
    (never raises: the cache is an optimisation)."""
    path = _entry(key, root)
    body = json.dumps({"format": FORMAT, "key": key, "built": True}).encode("utf-8")
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_bytes(body)
        os.replace(scratch, path)  # readers see the whole entry or none
    except OSError:
        with suppress(OSError):
            scratch.unlink(missing_ok=True)
        return False
    return True


__all__ = ["build_key", "built_before", "cache_dir", "clips_identity", "remember_built"]
