"""Search over current facts (SQLite FTS5) and the access statistics reads leave behind.

The full-text index holds current facts only: a trigger adds a fact's subject, predicate,
object and payload when the fact is inserted current, another removes them when the
fact is closed, so the index moves inside the very transaction that applies a pass. The
index borrows its text from the ``facts`` table (external content): nothing is stored
twice. Ranking is SQLite's BM25 (more query words matched, rarer words, shorter facts
first), then confidence, then the newest fact.

Access statistics live in their own table (``fact_access``: count and last access per
fact) so recording a read never rewrites a fact's bitemporal row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from stargraph_mem.errors import SearchError
from stargraph_mem.model.facts import FactPattern

__all__ = [
    "ACCESS_TABLE",
    "MAX_LIMIT",
    "SEARCH_SCHEMA",
    "SEARCH_TABLES",
    "TOUCH",
    "match_expression",
    "search_query",
]

MAX_LIMIT: Final = 1000
"""The most hits one search returns."""
MAX_WORDS: Final = 64
"""The most words a query may hold (each is one term of the full-text match)."""

SEARCH_TABLE: Final = "fact_text"
ACCESS_TABLE: Final = "fact_access"
SEARCH_TABLES: Final = (SEARCH_TABLE, ACCESS_TABLE)

_PAYLOAD_TEXT: Final = "CAST({row}.payload AS TEXT)"
SEARCH_SCHEMA: Final = (
    f"""CREATE VIRTUAL TABLE IF NOT EXISTS {SEARCH_TABLE} USING fts5(
        subject, predicate, object, payload,
        content='facts', content_rowid='rowid',
        tokenize='unicode61 remove_diacritics 2')""",
    f"""CREATE TRIGGER IF NOT EXISTS facts_text_insert AFTER INSERT ON facts
        WHEN new.valid_until_us IS NULL BEGIN
        INSERT INTO {SEARCH_TABLE} (rowid, subject, predicate, object, payload)
        VALUES (new.rowid, new.subject, new.predicate, new.object,
            {_PAYLOAD_TEXT.format(row="new")});
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS facts_text_close AFTER UPDATE OF valid_until_us ON facts
        WHEN old.valid_until_us IS NULL AND new.valid_until_us IS NOT NULL BEGIN
        INSERT INTO {SEARCH_TABLE} ({SEARCH_TABLE}, rowid, subject, predicate, object, payload)
        VALUES ('delete', old.rowid, old.subject, old.predicate, old.object,
            {_PAYLOAD_TEXT.format(row="old")});
    END""",
    f"""CREATE TABLE IF NOT EXISTS {ACCESS_TABLE} (
        fact_id TEXT PRIMARY KEY,
        count INTEGER NOT NULL,
        last_access_us INTEGER NOT NULL
    ) WITHOUT ROWID""",
)
"""The index, its two triggers and the access table (``IF NOT EXISTS``: idempotent)."""

SEARCH_BACKFILL: Final = (
    f"INSERT INTO {SEARCH_TABLE} (rowid, subject, predicate, object, payload) "
    f"SELECT rowid, subject, predicate, object, {_PAYLOAD_TEXT.format(row='facts')} "
    "FROM facts WHERE valid_until_us IS NULL ORDER BY rowid"
)
"""Index the current facts of a file written before the index existed (its migration)."""

TOUCH: Final = (
    f"INSERT INTO {ACCESS_TABLE} (fact_id, count, last_access_us) VALUES (?, 1, ?) "
    "ON CONFLICT (fact_id) DO UPDATE SET count = count + 1, "
    "last_access_us = max(last_access_us, excluded.last_access_us)"
)
"""Count one read of a fact at a time (the last access never moves backwards)."""

_WORD: Final = re.compile(r"\w+")


def match_expression(query: str) -> str | None:
    """The FTS5 match for ``query``: its words, each quoted, any of them (``None``: no query).

    Words are runs of letters and digits; everything else separates them, so no text a
    caller passes is ever read as FTS5 syntax. A query with text but no word is refused.
    """
    if not query.strip():
        return None
    words = _WORD.findall(query)
    if not words:
        raise SearchError(
            f"search query {query!r} has no words to search for (letters or digits)",
            query=query,
        )
    if len(words) > MAX_WORDS:
        raise SearchError(
            f"search query has {len(words)} words; at most {MAX_WORDS} are allowed",
            query=query[:200],
        )
    unique = list(dict.fromkeys(word.casefold() for word in words))
    return " OR ".join(f'"{word}"' for word in unique)


def check_limit(limit: int) -> int:
    """``limit`` when it is an integer in 1..MAX_LIMIT; else :class:`SearchError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise SearchError(f"search limit must be an integer from 1 to {MAX_LIMIT} (got {limit!r})")
    return limit


def search_query(
    match: str | None,
    where: Sequence[str],
    params: Sequence[Any],
    columns: str,
    limit: int,
) -> tuple[str, list[Any]]:
    """SQL and parameters of a search: ``columns`` of current facts plus a score column.

    ``where``/``params`` are conditions over ``facts`` columns (the pattern filter). The
    score is minus BM25 (higher is better); a search without words scores 0 and ranks by
    confidence.
    """
    conditions = [*where, "valid_until_us IS NULL"]
    condition = " AND ".join(conditions)
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


def search_pattern(
    user: str | None,
    agent: str | None,
    subject: str | None,
    predicate: str | None,
    min_confidence: float | None,
) -> FactPattern:
    """The structured part of a search as a validated :class:`FactPattern`."""
    return FactPattern(
        user=user,
        agent=agent,
        subject=subject,
        predicate=predicate,
        min_confidence=min_confidence,
    )
