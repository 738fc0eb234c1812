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

import orjson

from stargraph_mem.engine.runtime import to_micros
from stargraph_mem.errors import ConsolidationRuleError
from stargraph_mem.stores.memory import EpisodeRecord
from stargraph_mem.stores.scope import Partition, scope_key

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
TIME_LIMIT_S = 2.0


def _authorizer(
    action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None
) -> int:
    if action == sqlite3.SQLITE_SELECT:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_READ:
        allowed = arg1 == "episodes" and db in (None, "main")
        return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY
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
        return _guarded(conn, sql, params, rule_id, what)
    finally:
        conn.close()


_LEGACY_TABLE = (
    "CREATE TABLE episodes (seq INTEGER PRIMARY KEY, id TEXT, content TEXT, source_node TEXT,"
    " user TEXT, session TEXT, agent TEXT, scope_key TEXT, partition_key TEXT, ts_us INTEGER,"
    " metadata TEXT, last_accessed_us INTEGER, access_count INTEGER)"
)


def when_filter_seqs(
    records: Sequence[EpisodeRecord],
    partition: Partition,
    when_filter: str,
    *,
    rule_id: str,
) -> set[int]:
    """Seqs of ``records`` (one partition's new episodes) that satisfy a legacy filter.

    The filter runs in a private in-memory database holding only these rows, so it
    cannot see other partitions, the fact store or anything else in the file.
    """
    if ";" in when_filter.strip().rstrip(";") or "\x00" in when_filter:
        raise ConsolidationRuleError(
            f"rule '{rule_id}': when_filter must be one SQL expression", rule_id=rule_id
        )
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(_LEGACY_TABLE)
        conn.executemany(
            "INSERT INTO episodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [_legacy_row(r, partition) for r in records],
        )
        sql = f"SELECT seq FROM episodes WHERE ({when_filter})"
        return _guarded(conn, sql, (), rule_id, "when_filter")
    finally:
        conn.close()


def _legacy_row(r: EpisodeRecord, partition: Partition) -> tuple[Any, ...]:
    accessed = to_micros(r.last_accessed) if r.last_accessed is not None else None
    return (
        r.seq,
        r.id,
        r.content,
        r.source_node,
        r.user,
        r.session,
        r.agent,
        scope_key(r.user, r.session, r.agent),
        partition.key,
        to_micros(r.timestamp),
        orjson.dumps(r.metadata).decode(),
        accessed,
        r.access_count,
    )


def _guarded(
    conn: sqlite3.Connection, sql: str, params: Sequence[Any], rule_id: str, what: str
) -> set[int]:
    """Run ``sql`` under the authorizer and the time limit; return the first column."""
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
