"""SQLite's spelling of what the backends' SQL does not share (see
:mod:`~stargraph_mem.stores.dialect`): qmark placeholders, JSON text for lists, FTS5."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stargraph_mem.stores.dialect import Dialect, qmarks
from stargraph_mem.stores.sql_conn import Insert
from stargraph_mem.stores.sqlite.search_sql import (
    CATCH_UP_TEXT,
    INDEX_FACT,
    MOVE_TEXT_MARK,
    SEARCH_TABLE,
    TEXT_MARK,
)

__all__ = ["SQLITE", "SQLiteDialect"]


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
        return f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({qmarks(count)})"

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


SQLITE = SQLiteDialect()
