"""Vectors and the episodes' full-text index over SQLite: the tables and the file's
connection.

The reads and writes are the shared
:class:`~stargraph_mem.stores.repositories.vectors.SQLVectorRepository`; here: the tables,
created if missing whenever a writable file is opened (a file written before them gains
them then, empty: the catch-up fills them lazily, from its marks at 0).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Final

import aiosqlite

from stargraph_mem.stores.repositories.vectors import SQLVectorRepository
from stargraph_mem.stores.sql_conn import Conn
from stargraph_mem.stores.sqlite.connection import SQLiteStoreBase, scalar, transaction

__all__ = ["TABLES", "SQLiteVectorStore"]

TABLES: Final = ("vectors", "index_marks", "episode_text")

_SCHEMA: Final = (
    # AUTOINCREMENT: a seq is never reused after a drop, so caches catching up by seq
    # never miss a row
    """CREATE TABLE IF NOT EXISTS vectors (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        item_id TEXT NOT NULL,
        partition_key TEXT NOT NULL,
        embedder TEXT NOT NULL,
        vector BLOB NOT NULL,
        UNIQUE (kind, item_id, embedder)
    )""",
    "CREATE INDEX IF NOT EXISTS vectors_partition ON vectors (partition_key, embedder, kind, seq)",
    """CREATE TABLE IF NOT EXISTS index_marks (
        partition_key TEXT NOT NULL,
        embedder TEXT NOT NULL,
        kind TEXT NOT NULL,
        through INTEGER NOT NULL,
        PRIMARY KEY (partition_key, embedder, kind)
    ) WITHOUT ROWID""",
    # contentless: the words only (the text is the episodes table's); rowid = episode seq
    "CREATE VIRTUAL TABLE IF NOT EXISTS episode_text USING fts5("
    "body, content='', tokenize='unicode61 remove_diacritics 2')",
)
_PRESENT: Final = (
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
    f"({', '.join(repr(name) for name in TABLES)})"
)


class SQLiteVectorStore(SQLVectorRepository, SQLiteStoreBase):
    """Vectors and the episodes' full-text index, in the same file as the other stores."""

    _tables = TABLES
    _added_later = TABLES
    _store_name = "vector"

    async def _bootstrap(self, db: aiosqlite.Connection) -> None:
        if await scalar(db, _PRESENT) == len(TABLES):
            return
        async with transaction(db):
            for statement in _SCHEMA:
                await db.execute(statement)
            await self._stamp_if_complete(db)

    async def _check_schema(self, db: aiosqlite.Connection, why: str) -> None:
        """A read-only file need not have these tables (they are derived data): reads of
        a file without them fail when they run."""

    def _vectors_reading(self) -> AbstractAsyncContextManager[Conn]:
        return self._reading()

    def _vectors_writing(self) -> AbstractAsyncContextManager[Conn]:
        return self._writing()  # one writer: no lock to name

    async def _figures(self, db: aiosqlite.Connection) -> dict[str, Any]:
        return {}
