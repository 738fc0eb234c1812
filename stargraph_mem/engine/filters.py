"""Episode pre-filters run in SQLite: compiled ``select`` clauses and legacy ``when_filter``.

A legacy ``when_filter`` is raw SQL from a rule author, so it runs on a read-only
connection under an authorizer that allows reading the ``episodes`` table and calling a
short list of pure functions — nothing else — and under a progress-handler time limit.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stargraph_mem.errors import ConsolidationRuleError
from stargraph_mem.stores.scope import Partition

ALLOWED_FUNCTIONS = frozenset(
    {
        "json_extract",
        "json_type",
        "json_array_length",
        "instr",
        "substr",
        "substring",
        "length",
        "lower",
        "upper",
        "trim",
        "ltrim",
        "rtrim",
        "abs",
        "coalesce",
        "ifnull",
        "nullif",
        "min",
        "max",
        "round",
        "cast",
        "like",
        "glob",
        "replace",
        "typeof",
        "datetime",
        "julianday",
        "strftime",
        "date",
        "time",
        "unixepoch",
    }
)
EPISODE_COLUMNS = "seq"
TIME_LIMIT_S = 2.0


def _authorizer(
    action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None
) -> int:
    if action == sqlite3.SQLITE_SELECT:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_READ:
        return sqlite3.SQLITE_OK if arg1 == "episodes" and db == "main" else sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION:
        return (
            sqlite3.SQLITE_OK if (arg2 or "").lower() in ALLOWED_FUNCTIONS else sqlite3.SQLITE_DENY
        )
    return sqlite3.SQLITE_DENY


def _connect_read_only(path: str | Path) -> sqlite3.Connection:
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=30.0)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _guarded_seqs(
    path: str | Path, sql: str, params: Sequence[Any], *, what: str, rule_id: str
) -> set[int]:
    conn = _connect_read_only(path)
    try:
        conn.set_authorizer(_authorizer)
        deadline = time.monotonic() + TIME_LIMIT_S
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            rows = conn.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as exc:
            raise ConsolidationRuleError(
                f"rule '{rule_id}': {what} refused or failed: {exc}", rule_id=rule_id
            ) from exc
        return {int(r[0]) for r in rows}
    finally:
        conn.close()


def when_filter_seqs(
    path: str | Path,
    partition: Partition,
    after_seq: int,
    upto_seq: int,
    when_filter: str,
    *,
    rule_id: str,
) -> set[int]:
    """Seqs in ``(after_seq, upto_seq]`` of the partition that satisfy a legacy filter."""
    if ";" in when_filter.strip().rstrip(";") or "\x00" in when_filter:
        raise ConsolidationRuleError(
            f"rule '{rule_id}': when_filter must be one SQL expression", rule_id=rule_id
        )
    sql = (
        "SELECT seq FROM episodes WHERE partition_key = ? AND seq > ? AND seq <= ? "
        f"AND ({when_filter})"
    )
    return _guarded_seqs(
        path, sql, (partition.key, after_seq, upto_seq), what="when_filter", rule_id=rule_id
    )


def select_seqs(
    path: str | Path,
    partition: Partition,
    after_seq: int,
    upto_seq: int,
    where_sql: str,
    params: Sequence[Any],
    *,
    rule_id: str,
) -> set[int]:
    """Seqs matching a compiled ``select`` clause (parameterised SQL from the compiler)."""
    sql = (
        "SELECT seq FROM episodes WHERE partition_key = ? AND seq > ? AND seq <= ? "
        f"AND ({where_sql})"
    )
    return _guarded_seqs(
        path,
        sql,
        (partition.key, after_seq, upto_seq, *params),
        what="select",
        rule_id=rule_id,
    )
