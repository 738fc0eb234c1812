"""SQL written once in the qmark style, rendered for each backend's driver."""

from __future__ import annotations

from stargraph_mem.stores.dialect import render
from stargraph_mem.stores.postgres.dialect import POSTGRES
from stargraph_mem.stores.sqlite.dialect import SQLITE


def test_sqlite_keeps_qmarks() -> None:
    assert SQLITE.sql("SELECT a FROM t WHERE b = ? AND c = ?") == (
        "SELECT a FROM t WHERE b = ? AND c = ?"
    )


def test_postgres_renders_format_marks() -> None:
    assert POSTGRES.sql('SELECT "user" FROM t WHERE b = ? AND c = ?') == (
        'SELECT "user" FROM t WHERE b = %s AND c = %s'
    )


def test_marks_inside_quotes_are_text() -> None:
    assert POSTGRES.sql("SELECT '?' FROM t WHERE b = ?") == "SELECT '?' FROM t WHERE b = %s"


def test_percent_is_doubled_for_format_style_only() -> None:
    text = "SELECT a FROM t WHERE b LIKE 'x%' AND c = ? AND d % 2 = 0"
    assert POSTGRES.sql(text) == "SELECT a FROM t WHERE b LIKE 'x%%' AND c = %s AND d %% 2 = 0"
    assert SQLITE.sql(text) == text


def test_double_qmark_is_a_literal_operator() -> None:
    assert render("SELECT meta ?? 'k' FROM t WHERE id = ?", "%s") == (
        "SELECT meta ? 'k' FROM t WHERE id = %s"
    )


def test_id_lists() -> None:
    assert SQLITE.ids(["a", "b"]) == '["a","b"]'
    assert POSTGRES.ids(["a", "b"]) == ["a", "b"]
    assert POSTGRES.sql("id " + POSTGRES.in_ids()) == "id = ANY(%s)"
    assert SQLITE.marks(3) == "?, ?, ?"


def test_bulk_updates_use_arrays_on_postgres_only() -> None:
    sets = (("status", "text"), ("until_us", "bigint"))
    one = "UPDATE facts SET status = {m}, until_us = {m} WHERE id = {m} AND until_us IS NULL"
    sqlite = SQLITE.update_many("facts", sets, ("id", "text"), "until_us IS NULL")
    assert (sqlite.sql, sqlite.arrays) == (one.format(m="?"), "")
    pg = POSTGRES.update_many("facts", sets, ("id", "text"), "until_us IS NULL")
    assert pg.sql == one.format(m="%s")
    assert pg.arrays == (
        "UPDATE facts AS t SET status = c.status, until_us = c.until_us "
        "FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS c(status, until_us, id) "
        "WHERE t.id = c.id AND t.until_us IS NULL"
    )


def test_inserts_that_ignore_a_row_already_there() -> None:
    assert SQLITE.insert_ignoring("t", "a, b", 2) == "INSERT OR IGNORE INTO t (a, b) VALUES (?, ?)"
    assert POSTGRES.sql(POSTGRES.insert_ignoring("t", "a, b", 2)) == (
        "INSERT INTO t (a, b) VALUES (%s, %s) ON CONFLICT DO NOTHING"
    )


def test_each_id_of_a_list_as_rows() -> None:
    assert SQLITE.each_id() == ("json_each(?) j", "j.value")
    assert POSTGRES.sql(POSTGRES.each_id()[0]) == "unnest(%s::text[]) AS j(k)"


def test_search_words_never_become_query_syntax() -> None:
    assert SQLITE.match(["cafe", "x_1"]) == '"cafe" OR "x_1"'
    assert POSTGRES.match(["Café", "x_1"]) == "'cafe' | 'x_1'"
