"""What differs between the SQL of the two backends, and nothing else.

Repository code is written once, against one connection interface
(:class:`~stargraph_mem.stores.sql_conn.Conn`), with each statement's text written once in
the ``qmark`` style (``?`` for a parameter). A :class:`Dialect` renders that text for its
driver (the way a DB-API ``paramstyle`` differs between drivers) and overrides only the
pieces of SQL the two backends spell differently: upserts, JSON functions, full-text
search, locking and bulk writes. Rendering happens once, when a repository builds its
statements, never per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, ClassVar

from stargraph_mem.stores.sql_conn import Insert, Many

__all__ = ["Dialect", "qmarks", "render"]


@lru_cache(maxsize=4096)
def render(text: str, mark: str) -> str:
    """``text`` (qmark style) with each ``?`` outside quotes turned into ``mark``.

    ``??`` stands for a literal ``?`` (PostgreSQL's JSON key operator). With the ``format``
    style (``%s``) a literal ``%`` is doubled, inside quotes too, as psycopg expects.
    """
    if mark == "?":
        return text.replace("??", "?")
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        char = text[i]
        if char == "%":
            out.append("%%")
        elif quote:
            out.append(char)
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
            out.append(char)
        elif char == "?":
            if text.startswith("??", i):
                out.append("?")
                i += 1
            else:
                out.append(mark)
        else:
            out.append(char)
        i += 1
    return "".join(out)


class Dialect:
    """One backend's spelling of what the backends do not share."""

    name: ClassVar[str] = ""
    mark: ClassVar[str] = "?"
    """The driver's positional placeholder."""

    def sql(self, text: str) -> str:
        """``text``, written once in the qmark style, as this backend's driver takes it."""
        return render(text, self.mark)

    def marks(self, count: int) -> str:
        """``count`` placeholders separated by commas, rendered."""
        return ", ".join([self.mark] * count)

    def ids(self, values: Sequence[str]) -> Any:
        """A list of ids as the one parameter of an ``IN`` over :meth:`in_ids`."""
        raise NotImplementedError

    def in_ids(self) -> str:
        """The qmark-style right-hand side that matches a column against :meth:`ids`."""
        raise NotImplementedError

    # facts

    no_limit: ClassVar[Any] = None
    """The ``LIMIT`` parameter that means no limit."""
    greatest: ClassVar[str] = "greatest"
    """The function giving the largest of its arguments."""
    ordered_join: ClassVar[str] = "JOIN"
    """An inner join whose tables the planner should take in the order written."""

    def each_id(self) -> tuple[str, str]:
        """A ``FROM`` item yielding each of one :meth:`ids` parameter as a row, and the
        column holding the id (qmark style)."""
        raise NotImplementedError

    def insert_ignoring(self, table: str, columns: str, count: int) -> str:
        """Insert one row of ``count`` values, doing nothing when it is there already."""
        raise NotImplementedError

    def update_many(
        self, table: str, sets: Sequence[tuple[str, str]], key: tuple[str, str], where: str = ""
    ) -> Many:
        """``UPDATE table SET col = ? … WHERE key = ? [AND where]`` per row (parameters: the
        ``sets`` columns, then the key); ``sets``/``key`` pair each column with its type;
        ``where`` is a condition on one column of the table, unqualified."""
        names = ", ".join(f"{name} = ?" for name, _ in sets)
        extra = f" AND {where}" if where else ""
        return Many(self.sql(f"UPDATE {table} SET {names} WHERE {key[0]} = ?{extra}"))

    def insert_many(self, table: str, columns: Sequence[tuple[str, str]], tail: str = "") -> Many:
        """``INSERT INTO table (columns) VALUES (?, …) [tail]`` per row (``tail``: an
        ``ON CONFLICT`` clause that names no parameter); ``columns`` pair each column with
        its type."""
        names = ", ".join(name for name, _ in columns)
        marks = ", ".join("?" for _ in columns)
        return Many(self.sql(f"INSERT INTO {table} ({names}) VALUES ({marks}) {tail}".rstrip()))

    def reinforcement_stats(self) -> tuple[str, str, str, str]:
        """A fact ``f``'s reinforcement time, reinforcement count and newest observation,
        and the join (after ``facts f``) they need, if any."""
        raise NotImplementedError

    episode_columns: ClassVar[str] = ""
    """Names of the ``episodes`` table's columns (no rows when there is no such table)."""
    last_ids: ClassVar[str] = ""
    """The last facts rowid, the last audit seq and the search index's mark (one row)."""
    catch_up_text: ClassVar[str] = ""
    """Index the facts above a rowid (empty: each fact is indexed by the transaction that
    makes it)."""
    move_text_mark: ClassVar[str] = ""
    """Set the highest facts rowid the search index holds."""

    def index_fact(self) -> Insert:
        """The search index row of one fact: ``(rowid, text)``."""
        raise NotImplementedError

    def index_text(self, text: str) -> str:
        """What a fact's body text becomes before :meth:`index_fact` stores it."""
        return text

    def match(self, words: Sequence[str]) -> str:
        """The full-text query parameter matching any of ``words`` (letters, digits, ``_``)."""
        raise NotImplementedError

    def search_hits(self, columns: str, condition: str, order: str, table: str = "") -> str:
        """Facts (``columns``, then a score: higher is better) matching the query
        parameter, then ``condition``'s parameters, best first, then the ``LIMIT``
        (qmark style); ``table``: the index searched (default: the schema's)."""
        raise NotImplementedError

    # episodes and schedule

    def reads(self, keys: Sequence[str], afters: Sequence[int]) -> tuple[Any, ...]:
        """The parameters of :meth:`read_rows`: one ``(partition key, after seq)`` read each."""
        raise NotImplementedError

    def read_rows(self) -> str:
        """A qmark-style row source ``r(i, k, after)`` of the reads :meth:`reads` encodes:
        the read's index from 0, its partition key and the seq it reads after."""
        raise NotImplementedError

    def since_of(self, columns: str) -> str:
        """``columns`` (of ``e``) of each read's first ``?`` (a limit) episodes after its
        seq, the read's index first, by read and seq; its parameters: :meth:`reads`, limit."""
        raise NotImplementedError


def qmarks(count: int) -> str:
    """``count`` qmark placeholders separated by commas."""
    return ", ".join(["?"] * count)


def insert_text(table: str, columns: str, count: int) -> str:
    """Insert one row of ``count`` values into ``columns`` of ``table`` (qmark style)."""
    return f"INSERT INTO {table} ({columns}) VALUES ({qmarks(count)})"
