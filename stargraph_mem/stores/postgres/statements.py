"""The PostgreSQL statements of the shared store code (episodes, runs, migration plans)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from stargraph_mem.stores.episode_io import (
    EpisodeStatements,
)
from stargraph_mem.stores.plan_migration import PlanDialect
from stargraph_mem.stores.schedule_runs import RunStatements

__all__ = [
    "COUNT_OF",
    "EPISODES",
    "PLANS",
    "READ_COLUMNS",
    "RUNS",
    "SINCE_OF",
    "WRITE_COLUMNS",
]


def _as_list(values: Sequence[Any]) -> list[Any]:
    return list(values)


def _marks(count: int) -> str:
    return ", ".join(["%s"] * count)


WRITE_COLUMNS: Final = (
    'id, scope_key, partition_key, "user", session, agent, ts_us, tz_offset_s, content, '
    "source_node, metadata"
)
READ_COLUMNS: Final = (
    'seq, id, content, ts_us, tz_offset_s, source_node, "user", session, agent, metadata, '
    "last_accessed_us, access_count"
)
SINCE_OF: Final = f"""
    SELECT r.i - 1, e.* FROM unnest(%s::text[], %s::bigint[]) WITH ORDINALITY AS r(k, after, i)
    CROSS JOIN LATERAL (SELECT {READ_COLUMNS} FROM episodes
        WHERE partition_key = r.k AND seq > r.after ORDER BY seq LIMIT %s) AS e
    ORDER BY r.i, e.seq"""
"""Episodes after each of several (partition key, seq) reads: the read's index first."""
COUNT_OF: Final = """
    SELECT (SELECT count(*) FROM episodes e WHERE e.partition_key = r.k AND e.seq > r.after)
    FROM unnest(%s::text[], %s::bigint[]) WITH ORDINALITY AS r(k, after, i) ORDER BY r.i"""
EPISODES: Final = EpisodeStatements(
    ids=_as_list,
    insert=(
        f"INSERT INTO episodes ({WRITE_COLUMNS}) VALUES ({_marks(11)}) ON CONFLICT (id) DO NOTHING"
    ),
    new_seqs="SELECT seq FROM episodes WHERE seq > %s ORDER BY seq",
    stored_seq_in=f"SELECT seq, {WRITE_COLUMNS} FROM episodes WHERE id = ANY(%s)",
    noted_in=(
        "SELECT seq, episode_id, partition_key, reason, at_us FROM quarantine "
        "WHERE seq = ANY(%s) ORDER BY seq"
    ),
    row_keys_in="SELECT seq, partition_key FROM episodes WHERE seq = ANY(%s)",
)

RUNS: Final = RunStatements(
    record=(
        "INSERT INTO rule_runs (pack, rule_id, partition_key, anchor_us, last_run_us, runs, "
        "token) VALUES (%s, %s, %s, %s, %s, 1, %s) "
        "ON CONFLICT (pack, rule_id, partition_key) DO UPDATE SET "
        "last_run_us = excluded.last_run_us, "
        "runs = rule_runs.runs + (rule_runs.token <> excluded.token)::int, "
        "token = excluded.token "
        "WHERE rule_runs.token = %s OR rule_runs.token = excluded.token"
    ),
    token="SELECT token FROM rule_runs WHERE pack = %s AND rule_id = %s AND partition_key = %s",
    lease="SELECT holder, expires_us FROM scheduler_lease WHERE name = %s",
    upsert_lease=(
        "INSERT INTO scheduler_lease (name, holder, expires_us) VALUES (%s, %s, %s) "
        "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
        "expires_us = excluded.expires_us"
    ),
)

_TYPES: Final = {
    "TEXT": "TEXT",
    "INTEGER": "BIGINT",
    "REAL": "DOUBLE PRECISION",
    "BLOB": "BYTEA",
    "NUMERIC": "NUMERIC",
}
PLANS: Final = PlanDialect(
    columns=(
        "SELECT lower(column_name) FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s"
    ),
    column_type=_TYPES.__getitem__,
)
"""Migration plans: the column types of a plan, in PostgreSQL."""
