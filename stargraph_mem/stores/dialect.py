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

from stargraph_mem.stores.search_common import fold, fold_indexed
from stargraph_mem.stores.sql_conn import Insert, Many
from stargraph_mem.stores.sqlite_search_sql import (
    CATCH_UP_TEXT,
    INDEX_FACT,
    MOVE_TEXT_MARK,
    SEARCH_TABLE,
    TEXT_MARK,
)

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


class SQLiteDialect(Dialect):
    """SQLite (``sqlite3`` through aiosqlite): qmark placeholders, JSON text for lists."""

    name = "sqlite"
    mark = "?"

    def ids(self, values: Sequence[str]) -> Any:
        import orjson

        return orjson.dumps(list(values)).decode()

    def in_ids(self) -> str:
        return "IN (SELECT value FROM json_each(?))"

    # facts

    no_limit = -1
    greatest = "max"
    ordered_join = "CROSS JOIN"  # SQLite keeps the written order of a CROSS JOIN
    episode_columns = "SELECT name FROM pragma_table_info('episodes')"
    last_ids = (
        "SELECT (SELECT coalesce(max(rowid), 0) FROM facts), "
        "max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'audit'), 0), "
        "coalesce((SELECT max(seq) FROM audit), 0)), "
        f"(SELECT CAST(value AS INTEGER) FROM fact_store_meta WHERE key = '{TEXT_MARK}')"
    )
    catch_up_text = CATCH_UP_TEXT
    move_text_mark = MOVE_TEXT_MARK

    def each_id(self) -> tuple[str, str]:
        return "json_each(?) j", "j.value"

    def insert_ignoring(self, table: str, columns: str, count: int) -> str:
        return f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({_qmarks(count)})"

    def reinforcement_stats(self) -> tuple[str, str, str, str]:
        base = "coalesce(f.reinforced_us, f.valid_from_us)"
        of_fact = "FROM reinforcements r WHERE r.fact_id = f.id"
        return (
            f"max({base}, coalesce((SELECT max(r.ts_us) {of_fact}), {base}))",
            f"f.reinforcement_base + (SELECT count(*) {of_fact})",
            "max(coalesce(f.observed_us, f.valid_from_us), "
            f"coalesce((SELECT max(r.observed_us) {of_fact}), 0))",
            "",
        )

    def index_fact(self) -> Insert:
        return Insert("fact_text", ("rowid", "body"), INDEX_FACT)

    def match(self, words: Sequence[str]) -> str:
        return " OR ".join(f'"{word}"' for word in words)

    def search_hits(self, columns: str, condition: str, order: str, table: str = "") -> str:
        table = table or SEARCH_TABLE
        return (
            f"WITH hits AS (SELECT rowid AS hit_rowid, bm25({table}) AS hit_rank "
            f"FROM {table} WHERE {table} MATCH ?) "
            f"SELECT {columns}, -hit_rank FROM hits JOIN facts ON facts.rowid = hits.hit_rowid "
            f"WHERE {condition} ORDER BY hit_rank, {order} LIMIT ?"
        )

    # episodes and schedule

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

    # facts

    episode_columns = (  # the episodes table is always there: one migration makes every store
        "SELECT name FROM (VALUES ('id'), ('user'), ('session'), ('agent'), ('ts_us'), "
        "('content'), ('partition_key')) AS c(name)"
    )
    last_ids = (
        "SELECT (SELECT coalesce(max(rowid), 0) FROM facts), "
        "(SELECT coalesce(max(seq), 0) FROM audit), NULL"
    )

    def each_id(self) -> tuple[str, str]:
        return "unnest(?::text[]) AS j(k)", "j.k"

    def insert_ignoring(self, table: str, columns: str, count: int) -> str:
        return f"INSERT INTO {table} ({columns}) VALUES ({_qmarks(count)}) ON CONFLICT DO NOTHING"

    def update_many(
        self, table: str, sets: Sequence[tuple[str, str]], key: tuple[str, str], where: str = ""
    ) -> Many:
        """As the base, plus one ``UPDATE … FROM unnest(arrays)`` for all the rows."""
        one = super().update_many(table, sets, key, where)
        columns = [*sets, key]
        arrays = ", ".join(f"?::{kind}[]" for _, kind in columns)
        names = ", ".join(name for name, _ in columns)
        assigned = ", ".join(f"{name} = c.{name}" for name, _ in sets)
        extra = f" AND t.{where}" if where else ""
        text = (
            f"UPDATE {table} AS t SET {assigned} FROM unnest({arrays}) AS c({names}) "
            f"WHERE t.{key[0]} = c.{key[0]}{extra}"
        )
        return Many(one.sql, self.sql(text))

    def reinforcement_stats(self) -> tuple[str, str, str, str]:
        return (
            "greatest(coalesce(f.reinforced_us, f.valid_from_us), r.ts)",
            "f.reinforcement_base + r.n",
            "greatest(coalesce(f.observed_us, f.valid_from_us), r.observed)",
            "CROSS JOIN LATERAL (SELECT max(ts_us) AS ts, count(*) AS n, "
            "max(observed_us) AS observed FROM reinforcements WHERE fact_id = f.id) AS r",
        )

    def index_fact(self) -> Insert:
        return Insert(
            "fact_text", ("rowid", "text"), self.sql(_insert("fact_text", "rowid, text", 2))
        )

    def index_text(self, text: str) -> str:
        return fold_indexed(text)  # 'simple' keeps accents: folded here

    def match(self, words: Sequence[str]) -> str:
        # each word quoted as one tsquery operand: words are letters, digits and _ only
        return " | ".join(f"'{fold(word)}'" for word in words)

    def search_hits(self, columns: str, condition: str, order: str, table: str = "") -> str:
        return (
            f"SELECT {columns}, ts_rank(t.body, q.query) AS score "
            "FROM to_tsquery('simple', ?) AS q(query) "
            f"JOIN {table or 'fact_text'} t ON t.body @@ q.query "
            "JOIN facts ON facts.rowid = t.rowid "
            f"WHERE {condition} ORDER BY score DESC, {order} LIMIT ?"
        )

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


def _qmarks(count: int) -> str:
    return ", ".join(["?"] * count)


def _insert(table: str, columns: str, count: int) -> str:
    return f"INSERT INTO {table} ({columns}) VALUES ({_qmarks(count)})"


SQLITE = SQLiteDialect()
POSTGRES = PostgresDialect()
