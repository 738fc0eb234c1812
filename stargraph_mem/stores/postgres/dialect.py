"""PostgreSQL's spelling of what the backends' SQL does not share (see
:mod:`~stargraph_mem.stores.dialect`): ``%s`` placeholders, arrays for lists, tsvector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stargraph_mem.stores.dialect import Dialect, insert_text, qmarks
from stargraph_mem.stores.repositories.search import fold, fold_indexed
from stargraph_mem.stores.sql_conn import Insert, Many

__all__ = ["POSTGRES", "PostgresDialect"]


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
        return f"INSERT INTO {table} ({columns}) VALUES ({qmarks(count)}) ON CONFLICT DO NOTHING"

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

    def insert_many(self, table: str, columns: Sequence[tuple[str, str]], tail: str = "") -> Many:
        """As the base, plus one ``INSERT … SELECT FROM unnest(arrays)`` for all the rows
        (which must not repeat a conflict key: one statement may not upsert a row twice)."""
        one = super().insert_many(table, columns, tail)
        arrays = ", ".join(f"?::{kind}[]" for _, kind in columns)
        names = ", ".join(name for name, _ in columns)
        text = f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays}) {tail}".rstrip()
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
            "fact_text", ("rowid", "text"), self.sql(insert_text("fact_text", "rowid, text", 2))
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


POSTGRES = PostgresDialect()
