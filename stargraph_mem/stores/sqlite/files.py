"""What a process may do with a SQLite file, decided from the file system alone: write it,
or only read it; and how long a connection waits for another one's lock.

Kept apart from :mod:`~stargraph_mem.stores.sqlite.connection` (which loads aiosqlite)
for readers on a plain ``sqlite3`` connection, such as the command line's listing of facts
(:mod:`~stargraph_mem.stores.sqlite.listing`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["BUSY_TIMEOUT_MS", "read_only_reason", "sidecar"]

BUSY_TIMEOUT_MS: Final = 30_000
"""How long a connection waits for another connection's lock (``PRAGMA busy_timeout``)."""


def sidecar(path: Path, suffix: str) -> Path:
    """The file SQLite keeps beside ``path`` (``-wal``, ``-shm``, ``-journal``)."""
    return path.with_name(path.name + suffix)


def read_only_reason(path: Path) -> str | None:
    """Why SQLite could only read ``path``; ``None`` when it can write it (or it does not
    exist yet).

    Writing needs the file and, for the rollback journal or a new write-ahead log, its
    folder; a folder that cannot be written still allows writes when both ``-wal`` and
    ``-shm`` exist and can be written. ``os.access`` also answers for read-only mounts.
    """
    if not path.exists():
        return None
    if not os.access(path, os.W_OK):
        return "the file is not writable"
    if not os.access(path.parent, os.W_OK | os.X_OK) and not all(
        os.access(sidecar(path, suffix), os.W_OK) for suffix in ("-wal", "-shm")
    ):
        return "its folder is not writable"
    return None
