"""Whose SQLite file this is, decided before anything is written to it.

A file is ours to initialise when it holds no schema at all (a new or empty file). An
existing file is ours when its header carries :data:`APPLICATION_ID` (every file this
version bootstraps gets it, with :data:`FILE_VERSION` in ``PRAGMA user_version``), or,
for files of older versions, which set neither, when it holds one of our schema markers:
the memory store's baseline row in ``schema_migrations``, the fact store's
``schema_version`` in ``fact_store_meta``, or nothing but the scheduler's tables.

Anything else is another program's file: it is refused with
:class:`~stargraph_mem.errors.ForeignDatabaseError` and left byte for byte as it was (no
journal mode switch, no table). A file of ours written by a newer version (a higher file
version, or a newer fact store schema) is refused the same way, with
:class:`~stargraph_mem.errors.NewerSchemaError`. Only reads run here, on a plain
``sqlite3`` connection (the stores run them on their connection's thread).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from stargraph_mem.errors import ForeignDatabaseError, NewerSchemaError

__all__ = [
    "APPLICATION_ID",
    "FACT_SCHEMA_VERSION",
    "FILE_VERSION",
    "Identity",
    "identify",
]

APPLICATION_ID: Final = 0x53474D31
"""``PRAGMA application_id`` of our files: ``SGM1`` in ASCII."""
FILE_VERSION: Final = 1
"""``PRAGMA user_version`` of our files: the layout of the file as a whole. A release whose
files this one cannot read raises it; a file with a higher one is refused untouched."""
FACT_SCHEMA_VERSION: Final = 7
"""The fact store schema this version reads (the fact store's ``SCHEMA_VERSION``; kept
here because a newer one is refused when the file opens, whichever store opens it)."""
_BASELINE: Final = "0001_episodes"
_SCHEDULE_TABLES: Final = frozenset({"rule_runs", "scheduler_lease", "schedule_rules"})


@dataclass(frozen=True, slots=True)
class Identity:
    """What :func:`identify` found: ``new`` (no schema yet: ours to create) and
    ``stamped`` (the header carries our application id: this version's layout, in which
    every table of a store that exists is there)."""

    new: bool
    stamped: bool


def _rows(db: sqlite3.Connection, sql: str) -> list[Any]:
    cursor = db.execute(sql)
    try:
        return cursor.fetchall()
    finally:
        cursor.close()


def _first(db: sqlite3.Connection, sql: str) -> Any:
    rows = _rows(db, sql)
    return rows[0][0] if rows else None


def _quietly(db: sqlite3.Connection, sql: str) -> Any:
    """:func:`_first`, or ``None`` when the statement fails (a table that is not ours)."""
    try:
        return _first(db, sql)
    except sqlite3.OperationalError:
        return None


def foreign(path: Path, why: str) -> ForeignDatabaseError:
    """``<path> is not a stargraph_mem database (why)``."""
    return ForeignDatabaseError(f"{path} is not a stargraph_mem database ({why})", path=str(path))


def newer(path: Path, what: str, found: int, known: int) -> NewerSchemaError:
    """The one error for a file written by a newer version."""
    return NewerSchemaError(
        f"{path}: {what} {found} is not supported: it was written by a newer stargraph_mem "
        f"(this version reads up to {known}); upgrade stargraph_mem to open it",
        path=str(path),
        schema_version=found,
    )


def identify(db: sqlite3.Connection, path: Path) -> Identity:
    """Decide whether the file open on ``db`` is ours (reads only); raise
    :class:`ForeignDatabaseError` or :class:`NewerSchemaError` when it is not to be used."""
    try:
        app_id = int(_first(db, "PRAGMA application_id"))
        names = {str(row[0]) for row in _rows(db, "SELECT name FROM sqlite_master")}
        version = int(_first(db, "PRAGMA user_version"))
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorcode != sqlite3.SQLITE_NOTADB:
            raise
        raise foreign(path, "file is not a database") from exc
    if app_id == APPLICATION_ID:
        if version > FILE_VERSION:
            raise newer(path, "file version", version, FILE_VERSION)
    elif app_id != 0:
        raise foreign(path, f"application id {app_id:#010x}, ours is {APPLICATION_ID:#010x}")
    elif not names:
        return Identity(new=True, stamped=False)
    elif not _has_marker(db, names):
        shown = ", ".join(sorted(names)[:6]) + (", …" if len(names) > 6 else "")
        raise foreign(path, f"it holds {shown} and none of stargraph_mem's schema markers")
    _check_fact_version(db, path, names)
    return Identity(new=False, stamped=app_id == APPLICATION_ID)


def _has_marker(db: sqlite3.Connection, names: set[str]) -> bool:
    """Whether a file of an older version (no application id) holds one of our markers."""
    if "fact_store_meta" in names and _quietly(
        db, "SELECT 1 FROM fact_store_meta WHERE key = 'schema_version'"
    ):
        return True
    if "schema_migrations" in names and _quietly(
        db, f"SELECT 1 FROM schema_migrations WHERE version = 1 AND name = '{_BASELINE}'"
    ):
        return True
    tables = {name for name in names if not name.startswith(("sqlite_", "sqlite_autoindex"))}
    return tables <= _SCHEDULE_TABLES and any(name in _SCHEDULE_TABLES for name in tables)


def _check_fact_version(db: sqlite3.Connection, path: Path, names: set[str]) -> None:
    """Refuse a fact store schema newer than :data:`FACT_SCHEMA_VERSION`."""
    if "fact_store_meta" not in names:
        return
    value = _quietly(db, "SELECT value FROM fact_store_meta WHERE key = 'schema_version'")
    try:
        version = int(value)
    except (TypeError, ValueError):
        return  # no version, or not a number: the fact store says so when it opens
    if version > FACT_SCHEMA_VERSION:
        raise newer(path, "fact store schema version", version, FACT_SCHEMA_VERSION)
