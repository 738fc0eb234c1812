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

    # episodes and schedule

    no_limit: ClassVar[int | None] = None
    """The ``LIMIT`` parameter that means no limit."""

    def greatest(self, a: str, b: str) -> str:
        """The larger of two expressions."""
        return f"greatest({a}, {b})"

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


class SQLiteDialect(Dialect):
    """SQLite (``sqlite3`` through aiosqlite): qmark placeholders, JSON text for lists."""

    name = "sqlite"
    mark = "?"

    def ids(self, values: Sequence[str]) -> Any:
        import orjson

        return orjson.dumps(list(values)).decode()

    def in_ids(self) -> str:
        return "IN (SELECT value FROM json_each(?))"

    # episodes and schedule

    no_limit = -1

    def greatest(self, a: str, b: str) -> str:
        return f"max({a}, {b})"

    def reads(self, keys: Sequence[str], afters: Sequence[int]) -> tuple[Any, ...]:
        import orjson

        return (orjson.dumps([[k, a] for k, a in zip(keys, afters, strict=True)]).decode(),)

    def read_rows(self) -> str:
        return "(SELECT key AS i, value ->> 0 AS k, value ->> 1 AS after FROM json_each(?)) r"

    def since_of(self, columns: str) -> str:
        # no LATERAL in SQLite: each read's seqs come from a correlated IN
        return (
            f"SELECT r.i, {columns} FROM {self.read_rows()} JOIN episodes e ON e.seq IN ("
            "SELECT seq FROM episodes WHERE partition_key = r.k AND seq > r.after "
            "ORDER BY seq LIMIT ?) ORDER BY r.i, e.seq"
        )


class PostgresDialect(Dialect):
    """PostgreSQL (psycopg 3): ``%s`` placeholders, arrays for lists."""

    name = "postgresql"
    mark = "%s"

    def ids(self, values: Sequence[str]) -> Any:
        return list(values)

    def in_ids(self) -> str:
        return "= ANY(?)"

    # episodes and schedule

    def reads(self, keys: Sequence[str], afters: Sequence[int]) -> tuple[Any, ...]:
        return list(keys), list(afters)

    def read_rows(self) -> str:
        return (
            "(SELECT o.i - 1 AS i, o.k, o.after FROM unnest(?::text[], ?::bigint[]) "
            "WITH ORDINALITY AS o(k, after, i)) r"
        )

    def since_of(self, columns: str) -> str:
        return (
            f"SELECT r.i, {columns} FROM {self.read_rows()} CROSS JOIN LATERAL ("
            "SELECT * FROM episodes WHERE partition_key = r.k AND seq > r.after "
            "ORDER BY seq LIMIT ?) AS e ORDER BY r.i, e.seq"
        )


SQLITE = SQLiteDialect()
POSTGRES = PostgresDialect()
