"""SQL written once in the qmark style, rendered for each backend's driver."""

from __future__ import annotations

from stargraph_mem.stores.dialect import POSTGRES, SQLITE, render


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
