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

__all__ = ["POSTGRES", "SQLITE", "Dialect", "PostgresDialect", "SQLiteDialect", "render"]


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


class SQLiteDialect(Dialect):
    """SQLite (``sqlite3`` through aiosqlite): qmark placeholders, JSON text for lists."""

    name = "sqlite"
    mark = "?"

    def ids(self, values: Sequence[str]) -> Any:
        import orjson

        return orjson.dumps(list(values)).decode()

    def in_ids(self) -> str:
        return "IN (SELECT value FROM json_each(?))"


class PostgresDialect(Dialect):
    """PostgreSQL (psycopg 3): ``%s`` placeholders, arrays for lists."""

    name = "postgresql"
    mark = "%s"

    def ids(self, values: Sequence[str]) -> Any:
        return list(values)

    def in_ids(self) -> str:
        return "= ANY(?)"


SQLITE = SQLiteDialect()
POSTGRES = PostgresDialect()
