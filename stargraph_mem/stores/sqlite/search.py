"""Search over facts (SQLite FTS5) and the access statistics reads leave behind.

The full-text index holds every fact, current or closed, as history does: its subject,
predicate, object and payload; nothing is ever taken out (a search joins the ``facts`` row
and keeps the current ones unless asked for history).

The index may trail the ``facts`` table by fewer than :data:`TEXT_LAG_MAX` facts: the
facts of rowid above the mark ``text_indexed_through`` (in ``fact_store_meta``) are not
indexed yet, all those at or below it are. A write that leaves the index that far behind
indexes every such fact in its own transaction (one ``INSERT … SELECT``, and the mark
moves), and a search first brings the index up to date (in a write transaction; on a file
opened read-only, it searches a copy of the index kept in its connection's temporary
database instead, so it sees the same facts and ranks them alike). Indexing each fact in
the transaction that made it cost a streaming ``record`` about a tenth of its time: FTS5
writes a new segment at every commit. Removing a closed fact's words
(an FTS5 'delete') halved the throughput of update-heavy batches; leaving them costs a
search only the closed facts its words also match. The index is contentless: it keeps
the words, not the text (nothing is stored twice). Writes go through ``executemany``,
not triggers: FTS5 flushes its buffered terms at every statement savepoint, so a trigger
per fact made inserts about ten times slower. Ranking is SQLite's BM25 (more query words
matched, rarer words, shorter facts first), then confidence, then the newest fact (the
search statement is :meth:`~stargraph_mem.stores.sqlite.dialect.SQLiteDialect.search_hits`).

Access statistics live in their own table (``fact_access``: count and last access per
fact) so recording a read never rewrites a fact's bitemporal row.
"""

from __future__ import annotations

import aiosqlite

from stargraph_mem.stores.repositories.search import (
    MAX_LIMIT,
    TEXT_LAG_MAX,
    body_text,
)
from stargraph_mem.stores.sqlite.connection import fetch
from stargraph_mem.stores.sqlite.search_sql import (
    ACCESS_TABLE,
    CATCH_UP_TEXT,
    INDEX_FACT,
    MOVE_TEXT_MARK,
    SEARCH_SCHEMA,
    SEARCH_TABLES,
    TEXT_BEHIND,
    TEXT_COPY,
    TEXT_COPY_CATCH_UP,
    TEXT_COPY_SCHEMA,
    TEXT_COPY_THROUGH,
    TEXT_MARK,
)

__all__ = [
    "ACCESS_TABLE",
    "INDEX_FACT",
    "MAX_LIMIT",
    "SEARCH_SCHEMA",
    "SEARCH_TABLES",
    "TEXT_LAG_MAX",
    "TEXT_MARK",
    "body_text",
    "catch_up_text",
    "text_behind",
    "text_copy",
]


async def _behind(db: aiosqlite.Connection) -> tuple[int, int] | None:
    """The index's mark and the last facts rowid, when facts above the mark are not
    indexed yet; else None."""
    ((last, mark),) = await fetch(db, TEXT_BEHIND)
    return None if mark is None or int(last) <= int(mark) else (int(mark), int(last))


async def text_behind(db: aiosqlite.Connection) -> int | None:
    """The index's mark when facts above it are not indexed yet; else None."""
    behind = await _behind(db)
    return None if behind is None else behind[0]


async def catch_up_text(db: aiosqlite.Connection) -> None:
    """Index the facts the index lacks and move its mark (inside the caller's write
    transaction)."""
    behind = await _behind(db)
    if behind is not None:
        mark, last = behind
        await db.execute(CATCH_UP_TEXT, (mark,))
        await db.execute(MOVE_TEXT_MARK, (last,))


async def text_copy(db: aiosqlite.Connection) -> str:
    """The name of this connection's own copy of the index, made or brought up to date
    from the ``facts`` table (in its temporary database, which a connection opened
    read-only can write): it holds every fact, as the file's index will once caught up."""
    # the file is opened read-only; query_only (which also guards the temporary
    # database) is lifted for these statements only
    await db.execute("PRAGMA query_only=OFF")
    try:
        await db.execute(TEXT_COPY_SCHEMA)
        ((through,),) = await fetch(db, TEXT_COPY_THROUGH)
        await db.execute(TEXT_COPY_CATCH_UP, (int(through),))
    finally:
        await db.execute("PRAGMA query_only=ON")
    return TEXT_COPY
