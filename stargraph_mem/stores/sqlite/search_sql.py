"""The SQL text of SQLite's search index (FTS5 over fact bodies) and its mark.

Text only, no connection: :mod:`~stargraph_mem.stores.dialect` renders the index's
statements from it and :mod:`~stargraph_mem.stores.sqlite.search` runs it.
"""

from __future__ import annotations

from typing import Final

from stargraph_mem.model.limits import SEARCH_TEXT_CHARS

__all__ = [
    "ACCESS_TABLE",
    "BODY_SQL",
    "CATCH_UP_TEXT",
    "INDEX_FACT",
    "MOVE_TEXT_MARK",
    "SEARCH_BACKFILL",
    "SEARCH_SCHEMA",
    "SEARCH_TABLE",
    "SEARCH_TABLES",
    "TEXT_BEHIND",
    "TEXT_COPY",
    "TEXT_COPY_CATCH_UP",
    "TEXT_COPY_SCHEMA",
    "TEXT_COPY_THROUGH",
    "TEXT_MARK",
    "TEXT_MARK_INIT",
]

SEARCH_TABLE: Final = "fact_text"
ACCESS_TABLE: Final = "fact_access"
SEARCH_TABLES: Final = (SEARCH_TABLE, ACCESS_TABLE)

BODY_SQL: Final = (
    "substr(subject || ' ' || predicate || ' ' || object || ' ' || CAST(payload AS TEXT), "
    f"1, {SEARCH_TEXT_CHARS})"
)
"""A fact row's indexed text in SQL (its first characters); :func:`body_text` builds the
same text in Python."""


def _index_table(name: str) -> str:
    """A contentless full-text index of fact bodies named ``name`` (``IF NOT EXISTS``)."""
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5("
        "body, content='', tokenize='unicode61 remove_diacritics 2')"
    )


def _indexing(into: str, facts: str, where: str = "") -> str:
    """Index the rows of ``facts`` (``where``: which) into the index ``into``, in rowid
    order."""
    select = f"SELECT rowid, {BODY_SQL} FROM {facts}{where} ORDER BY rowid"
    return f"INSERT INTO {into} (rowid, body) {select}"


SEARCH_SCHEMA: Final = (
    _index_table(SEARCH_TABLE),
    f"""CREATE TABLE IF NOT EXISTS {ACCESS_TABLE} (
        fact_id TEXT PRIMARY KEY,
        count INTEGER NOT NULL,
        last_access_us INTEGER NOT NULL
    ) WITHOUT ROWID""",
)
"""The index and the access table (``IF NOT EXISTS``: idempotent)."""

SEARCH_BACKFILL: Final = _indexing(SEARCH_TABLE, "facts")
"""Index the facts of a file written before the index existed (its migration)."""

INDEX_FACT: Final = f"INSERT INTO {SEARCH_TABLE} (rowid, body) VALUES (?, ?)"
"""Index one new fact: its rowid and :func:`body_text`."""

TEXT_MARK: Final = "text_indexed_through"
"""The ``fact_store_meta`` key of the highest facts rowid the index is known to hold."""
TEXT_MARK_INIT: Final = (
    f"INSERT OR IGNORE INTO fact_store_meta (key, value) VALUES ('{TEXT_MARK}', "
    "(SELECT coalesce(max(rowid), 0) FROM facts))"
)
"""A new file's mark, or that of a file whose every fact was indexed when written."""
TEXT_BEHIND: Final = (
    "SELECT (SELECT coalesce(max(rowid), 0) FROM facts), "
    f"(SELECT CAST(value AS INTEGER) FROM fact_store_meta WHERE key = '{TEXT_MARK}')"
)
"""The last facts rowid and the index's mark (one row)."""
CATCH_UP_TEXT: Final = _indexing(SEARCH_TABLE, "facts", " WHERE rowid > ?1")
"""Index the facts above the mark ``?1``."""
MOVE_TEXT_MARK: Final = f"UPDATE fact_store_meta SET value = ?1 WHERE key = '{TEXT_MARK}'"
"""Set the mark (a facts rowid)."""
TEXT_COPY: Final = "fact_text_copy"
"""A read-only connection's own copy of the index (in its temporary database)."""
TEXT_COPY_SCHEMA: Final = _index_table(f"temp.{TEXT_COPY}")
TEXT_COPY_THROUGH: Final = f"SELECT coalesce(max(id), 0) FROM temp.{TEXT_COPY}_docsize"
"""The highest facts rowid the copy holds (its document sizes are kept by rowid)."""
TEXT_COPY_CATCH_UP: Final = _indexing(f"temp.{TEXT_COPY}", "main.facts", " WHERE rowid > ?1")
