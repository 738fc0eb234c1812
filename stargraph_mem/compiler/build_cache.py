"""Which generated programs CLIPS has built before, and which pack files validated before,
so ``validate`` of an unchanged pack need not load CLIPS, nor even the IR and the compiler.

A pack's build check (loading its generated program into a scratch CLIPS environment)
costs CLIPS's import and the load. Its outcome depends only on the program text and the
CLIPS library that builds it, so a build that succeeded is remembered under a key made
of the package version, the pack's IR hash, the program text's hash and the identity of
the installed CLIPS extension (its file's path, size and modification time): any of
them changing is a miss. Only successes are written; a failing build is checked again
every time, so the cache can never turn an error into a pass.

A whole pack file that validated is remembered too (:func:`validated_before`, used by
:func:`stargraph_mem.compiler.validation.validate_file`): under a key of
the file's bytes and absolute path, this package's version and source files (path, size
and modification time of every module: a changed check, emitter or schema is a miss), the
Python version and the installed libraries that decide what validation says (PyYAML,
pydantic, croniter, CLIPS: the path, size and modification time of the files in their
top folder, which an upgrade rewrites). A hit
costs hashing the file; anything else runs the whole validation, so an error is reported
exactly as it always is, and only a file that had no issue at all is remembered.

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
from collections.abc import Callable
from contextlib import suppress
from importlib.util import find_spec
from pathlib import Path
from typing import Final, Literal

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
    return _package_files("clips", lambda name: name.startswith("_clips"), (".so", ".pyd"))


VALIDATION_LIBRARIES: Final = ("yaml", "pydantic", "pydantic_core", "croniter")
"""The libraries whose code decides what validation says, besides CLIPS."""


def code_identity() -> str:
    """This package's modules and the libraries validation uses, named without importing
    anything: the path, size and modification time of every module file, and the Python
    version (any of them changing is another identity)."""
    root = Path(sys.modules[__name__.partition(".")[0]].__file__ or "").parent
    parts = [sys.version, package_version(), _tree_files(root)]
    parts += [
        _package_files(name, lambda _: True, (".py", ".so", ".pyd"))
        for name in VALIDATION_LIBRARIES
    ]
    parts.append(clips_identity())
    return "\0".join(parts)


def _stamp(path: str, info: os.stat_result) -> str:
    return f"{path}:{info.st_size}:{info.st_mtime_ns}"


def _tree_files(root: Path) -> str:
    """Every module file under ``root``, stamped ("" for a missing directory)."""
    stamps: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".so", ".pyd")):
                path = os.path.join(folder, name)
                with suppress(OSError):
                    stamps.append(_stamp(path, os.stat(path)))
    return "|".join(stamps)


def _package_files(package: str, wanted: Callable[[str], bool], suffixes: tuple[str, ...]) -> str:
    """The files directly in an installed package's folders (or its one module file) that
    ``wanted`` names and end with one of ``suffixes``, stamped; found without importing it
    ("" when it cannot be found)."""
    try:
        spec = find_spec(package)
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    if not spec.submodule_search_locations:
        origin = spec.origin or ""
        with suppress(OSError):
            return _stamp(origin, os.stat(origin))
        return ""
    parts: list[str] = []
    for location in spec.submodule_search_locations:
        try:
            entries = sorted(os.scandir(location), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if wanted(entry.name) and entry.name.endswith(suffixes):
                with suppress(OSError):
                    parts.append(_stamp(entry.path, entry.stat()))
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


Kind = Literal["builds", "valid"]
"""What an entry remembers: a program CLIPS built, or a pack file that validated."""

_SAYS: Final[dict[Kind, str]] = {"builds": "built", "valid": "validated"}
"""The entry's field that says so (``true``), by kind."""


def _entry(kind: Kind, key: str, root: Path | None) -> Path:
    return (root or cache_dir()) / kind / f"{key}.json"


def built_before(key: str, root: Path | None = None) -> bool:
    """Whether a build under ``key`` succeeded before (anything unreadable: no)."""
    return _seen("builds", key, root)


def remember_built(key: str, root: Path | None = None) -> bool:
    """Record that the build under ``key`` succeeded; False when it could not be written
    (never raises: the cache is an optimisation)."""
    return _remember("builds", key, root)


def validated_before(key: str, root: Path | None = None) -> bool:
    """Whether the pack file validation under ``key`` found no issue before."""
    return _seen("valid", key, root)


def remember_validated(key: str, root: Path | None = None) -> bool:
    """Record that the pack file validation under ``key`` found no issue (never raises)."""
    return _remember("valid", key, root)


def validation_key(path: str | Path, data: bytes) -> str:
    """The key of validating the pack file at ``path`` whose bytes are ``data``, by this
    code (:func:`code_identity`)."""
    text = "\0".join(
        (
            f"format {FORMAT}",
            os.path.abspath(path),
            hashlib.sha256(data).hexdigest(),
            code_identity(),
        )
    )
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _seen(kind: Kind, key: str, root: Path | None) -> bool:
    try:
        document = json.loads(_entry(kind, key, root).read_bytes())
    except (OSError, ValueError):
        return False
    return (
        isinstance(document, dict)
        and document.get("format") == FORMAT
        and document.get("key") == key
        and document.get(_SAYS[kind]) is True
    )


def _remember(kind: Kind, key: str, root: Path | None) -> bool:
    path = _entry(kind, key, root)
    body = json.dumps({"format": FORMAT, "key": key, _SAYS[kind]: True}).encode("utf-8")
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


__all__ = [
    "build_key",
    "built_before",
    "cache_dir",
    "clips_identity",
    "code_identity",
    "remember_built",
    "remember_validated",
    "validated_before",
    "validation_key",
]
