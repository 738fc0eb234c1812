"""Search over facts, backend-neutral: query words, limits, the indexed text, the filters.

A query is read only as words (runs of letters and digits, case folded, deduplicated):
each backend turns them into its own full-text match (SQLite FTS5, PostgreSQL tsquery), so
no text a caller passes is ever read as query syntax.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Final

from stargraph_mem.errors import FactNotFoundError, SearchError
from stargraph_mem.model.base import unicode_problem
from stargraph_mem.model.facts import FactPattern
from stargraph_mem.model.layers import types_of_mode
from stargraph_mem.model.limits import SEARCH_HITS_MAX, SEARCH_TEXT_CHARS

__all__ = [
    "MAX_LIMIT",
    "MAX_WORDS",
    "TEXT_LAG_MAX",
    "body_text",
    "check_fact_id",
    "check_fact_ids",
    "check_known",
    "check_limit",
    "fold",
    "fold_indexed",
    "query_words",
    "search_pattern",
]

MAX_LIMIT: Final = SEARCH_HITS_MAX
"""The most hits one search returns."""
MAX_WORDS: Final = 64
"""The most words a query may hold (each is one term of the full-text match)."""
TEXT_LAG_MAX: Final = 64
"""How many facts a backend's index may trail the ``facts`` table by, when it lets the
index trail at all (SQLite, see :mod:`~stargraph_mem.stores.sqlite.search`): a write that
leaves it that far behind indexes them all."""

_WORD: Final = re.compile(r"\w+")


def query_words(query: str) -> list[str] | None:
    """The distinct case-folded words of ``query`` (``None``: an empty query).

    A query with text but no word, or with more than :data:`MAX_WORDS` words, is refused.
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
    return list(dict.fromkeys(word.casefold() for word in words))


def fold(text: str) -> str:
    """``text`` case folded and without diacritics (``Crème`` → ``creme``), for indexes
    that do not remove accents themselves."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def body_text(subject: str, predicate: str, obj: str, payload: bytes) -> str:
    """A fact's indexed text: the first :data:`SEARCH_TEXT_CHARS` characters of its
    subject, predicate, object and payload JSON (SQL: ``BODY_SQL``), on both backends."""
    return f"{subject} {predicate} {obj} {payload.decode()}"[:SEARCH_TEXT_CHARS]


def fold_indexed(text: str) -> str:
    """:func:`fold` of an indexed text, kept within :data:`SEARCH_TEXT_CHARS` characters
    (folding may expand a character: a ``tsvector`` must stay within its limit)."""
    return fold(text)[:SEARCH_TEXT_CHARS]


def check_limit(limit: int) -> int:
    """``limit`` when it is an integer in 1..MAX_LIMIT; else :class:`SearchError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise SearchError(f"search limit must be an integer from 1 to {MAX_LIMIT} (got {limit!r})")
    return limit


def search_pattern(
    user: str | None,
    agent: str | None,
    subject: str | None,
    predicate: str | None,
    min_confidence: float | None,
    mode: str = "full_context",
) -> FactPattern:
    """The structured part of a search as a validated :class:`FactPattern` (``mode``: a
    recall mode, whose memory types it keeps)."""
    try:
        kinds = types_of_mode(mode)
    except ValueError as exc:
        raise SearchError(str(exc)) from exc
    return FactPattern(
        user=user,
        agent=agent,
        subject=subject,
        predicate=predicate,
        min_confidence=min_confidence,
        memory_type=None if kinds is None else list(kinds),
    )


def check_fact_id(fact_id: object) -> str:
    """``fact_id``, unless no fact can have it: not a string, NUL or a lone surrogate (no
    store can even look such an id up) raise :class:`FactNotFoundError` before any query."""
    if not isinstance(fact_id, str) or "\x00" in fact_id or unicode_problem(fact_id) is not None:
        raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
    return fact_id


def check_fact_ids(fact_ids: Sequence[str]) -> list[str]:
    """:func:`check_fact_id` of each id, in order."""
    return [check_fact_id(fact_id) for fact_id in fact_ids]


def check_known(fact_ids: Sequence[str], found: set[str]) -> None:
    """Raise :class:`FactNotFoundError` for the first of ``fact_ids`` not in ``found``."""
    for fact_id in fact_ids:
        if fact_id not in found:
            raise FactNotFoundError(f"no fact with id {fact_id!r}", fact_id=fact_id)
