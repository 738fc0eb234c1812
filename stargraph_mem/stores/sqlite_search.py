"""Search over facts (SQLite FTS5) and the access statistics reads leave behind.

The full-text index holds every fact, current or closed, as history does: the batch that
inserts a fact indexes its subject, predicate, object and payload in the very transaction
that applies the pass, and nothing is ever taken out (a search joins the ``facts`` row
and keeps the current ones unless asked for history). Removing a closed fact's words
(an FTS5 'delete') halved the throughput of update-heavy batches; leaving them costs a
search only the closed facts its words also match. The index is contentless: it keeps
the words, not the text (nothing is stored twice). Writes go through ``executemany``,
not triggers: FTS5 flushes its buffered terms at every statement savepoint, so a trigger
per fact made inserts about ten times slower. Ranking is SQLite's BM25 (more query words
matched, rarer words, shorter facts first), then confidence, then the newest fact.

Access statistics live in their own table (``fact_access``: count and last access per
fact) so recording a read never rewrites a fact's bitemporal row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from stargraph_mem.stores.search_common import (
    MAX_LIMIT,
    body_text,
    check_limit,
    query_words,
    search_pattern,
)

__all__ = [
    "ACCESS_TABLE",
    "INDEX_FACT",
    "MAX_LIMIT",
    "SEARCH_SCHEMA",
    "SEARCH_TABLES",
    "TOUCH",
    "body_text",
    "check_limit",
    "match_expression",
    "search_pattern",
    "search_query",
]

SEARCH_TABLE: Final = "fact_text"
ACCESS_TABLE: Final = "fact_access"
SEARCH_TABLES: Final = (SEARCH_TABLE, ACCESS_TABLE)

BODY_SQL: Final = "subject || ' ' || predicate || ' ' || object || ' ' || CAST(payload AS TEXT)"
"""A fact row's indexed text in SQL; :func:`body_text` builds the same text in Python."""
SEARCH_SCHEMA: Final = (
    f"""CREATE VIRTUAL TABLE IF NOT EXISTS {SEARCH_TABLE} USING fts5(
        body, content='', tokenize='unicode61 remove_diacritics 2')""",
    f"""CREATE TABLE IF NOT EXISTS {ACCESS_TABLE} (
        fact_id TEXT PRIMARY KEY,
        count INTEGER NOT NULL,
        last_access_us INTEGER NOT NULL
    ) WITHOUT ROWID""",
)
"""The index and the access table (``IF NOT EXISTS``: idempotent)."""

SEARCH_BACKFILL: Final = (
    f"INSERT INTO {SEARCH_TABLE} (rowid, body) SELECT rowid, {BODY_SQL} FROM facts ORDER BY rowid"
)
"""Index the facts of a file written before the index existed (its migration)."""

INDEX_FACT: Final = f"INSERT INTO {SEARCH_TABLE} (rowid, body) VALUES (?, ?)"
"""Index one new fact: its rowid and :func:`body_text`."""
TOUCH: Final = (
    f"INSERT INTO {ACCESS_TABLE} (fact_id, count, last_access_us) VALUES (?, 1, ?) "
    "ON CONFLICT (fact_id) DO UPDATE SET count = count + 1, "
    "last_access_us = max(last_access_us, excluded.last_access_us)"
)
"""Count one read of a fact at a time (the last access never moves backwards)."""


def match_expression(query: str) -> str | None:
    """The FTS5 match for ``query``: its words, each quoted, any of them (``None``: no query).

    Words are runs of letters and digits (:func:`query_words`), so no text a caller passes
    is ever read as FTS5 syntax.
    """
    words = query_words(query)
    return None if words is None else " OR ".join(f'"{word}"' for word in words)


def search_query(
    match: str | None,
    where: Sequence[str],
    params: Sequence[Any],
    columns: str,
    limit: int,
    *,
    include_history: bool = False,
) -> tuple[str, list[Any]]:
    """SQL and parameters of a search: ``columns`` of facts plus a score column.

    ``where``/``params`` are conditions over ``facts`` columns (the pattern filter); only
    current facts unless ``include_history``. The score is minus BM25 (higher is better);
    a search without words scores 0 and ranks by confidence.
    """
    conditions = [*where] if include_history else [*where, "valid_until_us IS NULL"]
    condition = " AND ".join(conditions) or "TRUE"
    order = "confidence DESC, valid_from_us DESC, id"
    if match is None:
        sql = f"SELECT {columns}, 0.0 FROM facts WHERE {condition} ORDER BY {order} LIMIT ?"
        return sql, [*params, limit]
    sql = (
        f"WITH hits AS (SELECT rowid AS hit_rowid, bm25({SEARCH_TABLE}) AS hit_rank "
        f"FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH ?) "
        f"SELECT {columns}, -hit_rank FROM hits JOIN facts ON facts.rowid = hits.hit_rowid "
        f"WHERE {condition} ORDER BY hit_rank, {order} LIMIT ?"
    )
    return sql, [match, *params, limit]
