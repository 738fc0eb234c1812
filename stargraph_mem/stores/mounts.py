"""Which filesystem holds a path, from the mount table: WAL is unsafe on network mounts.

SQLite's write-ahead log needs shared memory that every process sees; on NFS, SMB/CIFS,
sshfs, 9p and the like it can lose or corrupt writes. ``health()`` warns when the database
lies on one. The table is ``/proc/self/mountinfo`` (else ``/proc/mounts``); the mount that
holds a path is the one with the longest mount point that is a prefix of the resolved path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = [
    "MOUNT_TABLES",
    "NETWORK_FILESYSTEMS",
    "filesystem_of",
    "filesystem_type",
    "network_filesystem_warning",
]

MOUNT_TABLES: tuple[Path, ...] = (Path("/proc/self/mountinfo"), Path("/proc/mounts"))
"""Read in order; the first readable one is used (a module attribute, so tests can inject)."""
NETWORK_FILESYSTEMS: Final = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb2",
        "smb3",
        "smbfs",
        "fuse.sshfs",
        "sshfs",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "fuse.glusterfs",
        "lustre",
        "gpfs",
        "ncpfs",
        "davfs",
        "fuse.davfs2",
        "fuse.s3fs",
        "fuse.rclone",
    }
)
_OCTAL: Final = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """Mount tables write space, tab, newline and backslash as ``\\040``-style escapes."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def _entry(line: str) -> tuple[str, str] | None:
    """``(mount point, filesystem type)`` of a mountinfo or /proc/mounts line."""
    fields = line.split()
    if " - " in line:  # mountinfo: id parent dev root point opts [optional…] - type src
        tail = line.split(" - ", 1)[1].split()
        return (_unescape(fields[4]), tail[0]) if len(fields) > 4 and tail else None
    return (_unescape(fields[1]), fields[2]) if len(fields) > 2 else None


def _holds(point: str, path: str) -> bool:
    base = point.rstrip("/")
    return path == point or path.startswith(base + "/")


def filesystem_type(path: Path, table: str) -> str | None:
    """The filesystem type of the mount holding ``path`` (already resolved) per ``table``."""
    best, kind = -1, None
    for line in table.splitlines():
        entry = _entry(line)
        if entry is not None and _holds(entry[0], str(path)) and len(entry[0]) >= best:
            best, kind = len(entry[0]), entry[1]  # a later mount on the same point hides it
    return kind


def _mount_table() -> str | None:
    for candidate in MOUNT_TABLES:
        try:
            return candidate.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return None


def filesystem_of(path: Path) -> str | None:
    """The filesystem type of the mount holding ``path`` (``None`` when unknown)."""
    table = _mount_table()
    return None if table is None else filesystem_type(path, table)


def network_filesystem_warning(path: Path, table: str | None = None) -> str | None:
    """A warning when ``path`` lies on a network filesystem, else ``None``.

    ``table`` is the mount table's text (read from :data:`MOUNT_TABLES` when omitted).
    """
    text = _mount_table() if table is None else table
    if text is None:
        return None
    kind = filesystem_type(path.resolve(), text)
    if kind is None or kind.lower() not in NETWORK_FILESYSTEMS:
        return None
    return (
        f"{path} is on a network filesystem ({kind}): SQLite's write-ahead log (WAL) is "
        "not safe there; keep the database on a local disk"
    )
